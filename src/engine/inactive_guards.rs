//! Guards that cannot see (issue 18): which guards of a run are inactive or partly blind, why,
//! and the switch that enables each, computed from the run's setting (in place or detached, the
//! t0 baseline on or off, a declared coverage report) and the t0 evidence (what the check on t0
//! left: whether it exited, the tests its sources named, a declared report it could not read,
//! the runners whose summaries it printed, cargo stopping at its first failing target, the files
//! the syntax-tree guards could not parse). It owns:
//!
//! - [`assess`], the pure assessment, shared by the loop and `doctor`;
//! - [`CheckSight::of_check`], the part of one check's result the assessment reads (the type is
//!   `crate::testreport::sight`'s, below the engine, as a probe run carries it from its own
//!   process to doctor);
//! - the list `check_baseline` records (`inactive_guards`), and [`of_history`], the list of a
//!   recorded run (a run without a baseline has no `check_baseline`: its pinned configuration
//!   gives the list).
//!
//! A guard listed here is not weaker for being named: naming it is the point. A run whose set
//! guard is blind still halts on everything the other guards see.

use super::config::LoopConfig;
use super::detached::WorkspaceMode;
use super::lifecycle::ActiveRun;
use crate::ending::Ending;
use crate::receipt::events::{BlindCause, BlindGuard, Blindness, CheckResult, InactiveGuard};
use crate::receipt::history::History;
use crate::testreport::shown;
use crate::testreport::sight::{CheckSight, OutputSight};
use crate::testreport::summary::Runner;

/// At most this many files are named in a not-parsed finding.
const NAMED_FILES: usize = 10;

fn ending_text(ending: &Ending) -> String {
    match ending {
        Ending::Exited { code } => format!("exited {code}"),
        Ending::Signaled { signal } => format!("killed by signal {signal}"),
        Ending::TimedOut { after_ms } => format!("timed out after {} s", after_ms / 1000),
        Ending::FailedToStart { reason } => format!("could not start: {}", shown(reason)),
        Ending::Interrupted { .. } => "interrupted".into(),
        stalled @ Ending::Stalled { .. } => {
            format!("stalled: {}", stalled.stall_words().unwrap_or_default())
        }
    }
}

impl CheckSight {
    /// The sight of a recorded check (the t0 baseline's `check`).
    pub fn of_check(check: &CheckResult) -> CheckSight {
        let coverage_unusable =
            check
                .coverage
                .as_ref()
                .and_then(|c| match (&c.error, c.coverable_lines) {
                    (Some(error), _) => Some(shown(error)),
                    (None, Some(n)) if n > 0 => None,
                    (None, _) => Some("it instruments no line".into()),
                });
        CheckSight {
            not_exited: (check.check_exit.is_none()).then(|| ending_text(&check.ending)),
            collected: check.collected_count,
            report_error: check.junit_error.as_deref().map(shown),
            coverage_unusable,
            output: check.output_sight.clone().unwrap_or_default(),
        }
    }
}

/// What the run is set up to do, as far as the guards' sight depends on it.
#[derive(Debug, Clone, Default)]
pub struct Setting {
    /// A detached workspace (false: in place).
    pub detached: bool,
    /// The t0 baseline runs (false: `--no-baseline`).
    pub baseline: bool,
    /// The declared coverage report, if any.
    pub coverage: Option<String>,
    /// The check command (its runner names the switch that makes it name its tests).
    pub check: String,
}

/// The switch that makes a check name its tests: from the runner whose summary it printed, else
/// from the runner its command names, else the general one.
fn ids_switch(check: &str, output: &OutputSight) -> String {
    let runs = |word: &str| {
        check
            .split(|c: char| c.is_whitespace() || c == ';' || c == '&' || c == '|')
            .any(|w| w == word)
    };
    let mentions = |text: &str| check.contains(text);
    if output.saw(Runner::GoTest) || mentions("go test") {
        "run `go test -json ./... > go-test.json` and declare it: `--report go-test.json` (`report = [\"go-test.json\"]` in loop.toml)".into()
    } else if output.saw(Runner::Pytest) || runs("pytest") || mentions("-m pytest") {
        "add `--junitxml=out/junit.xml` to pytest and declare it: `--report out/junit.xml` (`report = [\"out/junit.xml\"]` in loop.toml)".into()
    } else if output.saw(Runner::NodeTest) || mentions("node --test") {
        "write node's TAP beside its spec output (`node --test --test-reporter=tap --test-reporter-destination=out/node.tap --test-reporter=spec --test-reporter-destination=stdout`) and declare it: `--report out/node.tap`".into()
    } else if output.saw(Runner::Nextest) || mentions("nextest") {
        "give nextest a JUnit report (`[profile.default.junit] path = \"junit.xml\"` in .config/nextest.toml) and declare it: `--report target/nextest/default/junit.xml`".into()
    } else if mentions("cargo test") {
        "run `cargo test` without `-q`/`--quiet` and with its stdout captured (libtest's terse output names no test)".into()
    } else {
        "make the check write a JUnit XML, `go test -json` or TAP report and declare it: `--report PATH` (`report = [...]` in loop.toml)".into()
    }
}

fn entry(
    guard: BlindGuard,
    blindness: Blindness,
    cause: BlindCause,
    detail: String,
    enable: String,
) -> InactiveGuard {
    InactiveGuard {
        guard,
        blindness,
        cause,
        detail,
        enable,
    }
}

/// The guards of a run with `setting` that cannot see, given what the check on t0 showed
/// (`t0`: none when no baseline was recorded) and the t0 files the syntax-tree guards could not
/// parse (`not_parsed`, with the parse cap in bytes).
pub fn assess(
    setting: &Setting,
    t0: Option<&CheckSight>,
    not_parsed: &[String],
    parse_cap: usize,
) -> Vec<InactiveGuard> {
    use BlindCause::*;
    use BlindGuard::*;
    use Blindness::*;
    let mut out = Vec::new();
    if !setting.detached {
        let detached = "run detached: native isolation in a git repository (`--workspace detached`, `workspace = \"detached\"` in loop.toml)".to_string();
        let why = "the run is in place: there is no t0 tree the agent cannot change, so a green check halts human_required";
        out.push(entry(
            ProtectedPaths,
            Inactive,
            InPlace,
            format!("{why}; no change to a protected path is seen"),
            detached.clone(),
        ));
        out.push(entry(
            SyntaxTree,
            Inactive,
            InPlace,
            format!("{why}; no assertion, test item, surface or tampering judgement is made"),
            detached.clone(),
        ));
        out.push(entry(
            CheckWrites,
            Inactive,
            InPlace,
            format!("{why}; the check writes the workdir itself, so its writes are not judged"),
            detached,
        ));
    }
    if !setting.baseline {
        let enable = "drop `--no-baseline` (`baseline = true` in loop.toml)".to_string();
        out.push(entry(TestSet, Inactive, NoBaseline, "the t0 baseline is off: there is no C0 or S0, so no lost or newly skipped test is seen".into(), enable.clone()));
        if setting.coverage.is_some() {
            out.push(entry(Coverage, Partial, NoBaseline, "the t0 baseline is off: each coverage report is judged on its own, never against t0's line coverage".into(), enable));
        }
    }
    if let (true, Some(t0)) = (setting.baseline, t0) {
        if let Some(ending) = &t0.not_exited {
            let detail = format!("the check on t0 did not exit ({ending}): C0 and S0 cannot be measured, so no set guard runs");
            out.push(entry(TestSet, Inactive, CheckDidNotExit, detail, "let the check finish on t0: raise `--check-timeout` (`check_timeout` in loop.toml) or fix what stopped it".into()));
        } else if t0.collected.is_none() {
            let (cause, detail, enable) = match &t0.report_error {
                Some(error) => (
                    ReportUnusable,
                    format!("a declared report could not be read on t0 ({error}): no test ids, so C0 and S0 cannot be measured"),
                    "make the check write the report its `--report` pattern names on t0 too, whatever its tests' result".to_string(),
                ),
                None => (
                    NoTestIds,
                    "the check on t0 left no declared report and no libtest output naming tests: no test ids, so C0 and S0 cannot be measured".to_string(),
                    ids_switch(&setting.check, &t0.output),
                ),
            };
            out.push(entry(
                TestSet,
                Inactive,
                cause,
                format!("{detail}; no lost or newly skipped test is seen"),
                enable.clone(),
            ));
            out.push(entry(Progress, Inactive, cause, format!("{detail}; the ratchet, the no-convergence rules and the targets have no failing sets to read"), enable));
        }
        if let Some(target) = &t0.output.cargo_stopped_at {
            let ran = match t0.output.cargo_ran.as_slice() {
                [] => String::new(),
                ran => format!(" (it ran: {})", ran.join(", ")),
            };
            let detail = format!(
                "cargo stopped at its first failing test target on t0 (`{target}`, its default fail-fast){ran}: the targets after it (integration tests, doc tests) never ran, so C0 holds none of their tests and the set guard does not cover them"
            );
            out.push(entry(TestSet, Partial, CargoStoppedEarly, detail, "run `cargo test --no-fail-fast` (every target runs whatever an earlier one showed)".into()));
        }
        if let (Some(report), Some(why)) = (&setting.coverage, &t0.coverage_unusable) {
            let detail = format!("the declared coverage report {} gave no usable coverage on t0 ({why}): each report is judged on its own, never against t0's line coverage", shown(report));
            out.push(entry(Coverage, Partial, CoverageAbsentAtT0, detail, format!("make the check write {} on t0 too, whatever its tests' result (`--coverage PATH`)", shown(report))));
        }
    }
    if setting.detached && !not_parsed.is_empty() {
        let named: Vec<String> = not_parsed
            .iter()
            .take(NAMED_FILES)
            .map(|p| shown(p))
            .collect();
        let more = match not_parsed.len().saturating_sub(NAMED_FILES) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        let detail = format!(
            "{} t0 file(s) above the parse cap ({parse_cap} bytes) are not analysed: their assertions are not in A0, their test items are not compared and no tampering rule reads them: {}{more}",
            not_parsed.len(),
            named.join(", ")
        );
        out.push(entry(
            SyntaxTree,
            Partial,
            NotParsed,
            detail,
            format!(
                "no switch: the parse cap is fixed at {parse_cap} bytes; split such files below it"
            ),
        ));
    }
    out
}

impl Setting {
    /// The setting a run's pinned configuration describes.
    pub fn of_config(cfg: &LoopConfig) -> Setting {
        Setting {
            detached: cfg.workspace == WorkspaceMode::Detached,
            baseline: cfg.baseline,
            coverage: cfg.coverage.report.clone(),
            check: cfg.check.clone(),
        }
    }
}

/// The parse cap the syntax-tree guards read files with.
fn parse_cap() -> usize {
    crate::analysis::Limits::default().max_parse_bytes
}

impl ActiveRun<'_> {
    /// The guards of this run that cannot see, given the t0 baseline's check `t0` (recorded in
    /// its `check_baseline`).
    pub(super) fn inactive_guards(&self, t0: &CheckResult) -> Vec<InactiveGuard> {
        let not_parsed = self
            .history
            .guard_baseline
            .as_ref()
            .map(|b| b.not_analysed.clone())
            .unwrap_or_default();
        assess(
            &Setting::of_config(&self.cfg),
            Some(&CheckSight::of_check(t0)),
            &not_parsed,
            parse_cap(),
        )
    }
}

/// The guards of a recorded run that cannot see: its `check_baseline`'s list, or, for a run
/// without a baseline (`--no-baseline`: no `check_baseline`), the list its pinned configuration
/// gives. None for receipts written before the list existed.
pub fn of_history(history: &History) -> Option<Vec<InactiveGuard>> {
    if let Some(baseline) = &history.check_baseline {
        return baseline.inactive_guards.clone();
    }
    let cfg: LoopConfig = serde_json::from_value(history.start.as_ref()?.config.clone()).ok()?;
    if cfg.baseline {
        return None;
    }
    let not_parsed = history
        .guard_baseline
        .as_ref()
        .map(|b| b.not_analysed.clone())
        .unwrap_or_default();
    Some(assess(
        &Setting::of_config(&cfg),
        None,
        &not_parsed,
        parse_cap(),
    ))
}

/// One line per guard that cannot see, for the terminal (escaped by the caller's renderer or here).
pub fn lines(guards: &[InactiveGuard]) -> Vec<String> {
    guards
        .iter()
        .map(|g| {
            let guard = serde_json::to_value(g.guard)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let blindness = match g.blindness {
                Blindness::Inactive => "inactive",
                Blindness::Partial => "partly blind",
            };
            format!("{guard} {blindness}: {}; enable: {}", g.detail, g.enable)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detached() -> Setting {
        Setting {
            detached: true,
            baseline: true,
            coverage: None,
            check: "pytest -q".into(),
        }
    }

    fn exited_with(collected: Option<u64>) -> CheckSight {
        CheckSight {
            collected,
            ..Default::default()
        }
    }

    #[test]
    fn a_detached_run_whose_t0_named_its_tests_has_every_guard_seeing() {
        assert_eq!(
            assess(&detached(), Some(&exited_with(Some(12))), &[], 1024),
            vec![]
        );
    }

    #[test]
    fn plain_go_test_names_no_test_so_the_set_guard_and_progress_are_inactive_with_go_test_json_as_the_switch(
    ) {
        let mut t0 = exited_with(None);
        t0.output.runners = vec!["go test".into()];
        let setting = Setting {
            check: "go test ./...".into(),
            ..detached()
        };
        let found = assess(&setting, Some(&t0), &[], 1024);
        assert_eq!(
            found
                .iter()
                .map(|g| (g.guard, g.blindness, g.cause))
                .collect::<Vec<_>>(),
            vec![
                (
                    BlindGuard::TestSet,
                    Blindness::Inactive,
                    BlindCause::NoTestIds
                ),
                (
                    BlindGuard::Progress,
                    Blindness::Inactive,
                    BlindCause::NoTestIds
                ),
            ]
        );
        assert!(
            found[0].enable.starts_with(
                "run `go test -json ./... > go-test.json` and declare it: `--report go-test.json`"
            ),
            "{}",
            found[0].enable
        );
    }

    #[test]
    fn the_runner_whose_summary_was_printed_names_the_switch_whatever_the_command_says() {
        let mut t0 = exited_with(None);
        t0.output.runners = vec!["pytest".into()];
        let found = assess(
            &Setting {
                check: "make test".into(),
                ..detached()
            },
            Some(&t0),
            &[],
            1024,
        );
        assert!(
            found[0]
                .enable
                .starts_with("add `--junitxml=out/junit.xml` to pytest"),
            "{}",
            found[0].enable
        );
    }

    #[test]
    fn cargo_stopping_at_a_failing_target_makes_the_set_guard_partly_blind_with_no_fail_fast_as_the_switch(
    ) {
        let mut t0 = exited_with(Some(3));
        t0.output.cargo_stopped_at = Some("--lib".into());
        t0.output.cargo_ran = vec!["unittests src/lib.rs".into()];
        let found = assess(
            &Setting {
                check: "cargo test".into(),
                ..detached()
            },
            Some(&t0),
            &[],
            1024,
        );
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].guard, found[0].blindness, found[0].cause),
            (
                BlindGuard::TestSet,
                Blindness::Partial,
                BlindCause::CargoStoppedEarly
            )
        );
        assert_eq!(found[0].detail, "cargo stopped at its first failing test target on t0 (`--lib`, its default fail-fast) (it ran: unittests src/lib.rs): the targets after it (integration tests, doc tests) never ran, so C0 holds none of their tests and the set guard does not cover them");
        assert_eq!(
            found[0].enable,
            "run `cargo test --no-fail-fast` (every target runs whatever an earlier one showed)"
        );
    }

    #[test]
    fn an_in_place_run_names_the_three_guards_that_need_t0() {
        let found = assess(
            &Setting {
                detached: false,
                ..detached()
            },
            Some(&exited_with(Some(1))),
            &[],
            1024,
        );
        let guards: Vec<BlindGuard> = found.iter().map(|g| g.guard).collect();
        assert_eq!(
            guards,
            vec![
                BlindGuard::ProtectedPaths,
                BlindGuard::SyntaxTree,
                BlindGuard::CheckWrites
            ]
        );
        assert!(found
            .iter()
            .all(|g| g.cause == BlindCause::InPlace && g.blindness == Blindness::Inactive));
    }

    #[test]
    fn no_baseline_switches_off_the_set_guard_and_the_coverage_comparison() {
        let setting = Setting {
            baseline: false,
            coverage: Some("coverage.lcov".into()),
            ..detached()
        };
        let found = assess(&setting, None, &[], 1024);
        assert_eq!(
            found.iter().map(|g| (g.guard, g.cause)).collect::<Vec<_>>(),
            vec![
                (BlindGuard::TestSet, BlindCause::NoBaseline),
                (BlindGuard::Coverage, BlindCause::NoBaseline)
            ]
        );
        assert_eq!(
            found[0].enable,
            "drop `--no-baseline` (`baseline = true` in loop.toml)"
        );
    }

    #[test]
    fn a_coverage_report_absent_at_t0_leaves_the_coverage_guard_without_a_baseline() {
        let t0 = CheckSight {
            collected: Some(2),
            coverage_unusable: Some("the check did not write it".into()),
            ..Default::default()
        };
        let found = assess(
            &Setting {
                coverage: Some("cov.lcov".into()),
                ..detached()
            },
            Some(&t0),
            &[],
            1024,
        );
        assert_eq!(
            found
                .iter()
                .map(|g| (g.guard, g.blindness, g.cause))
                .collect::<Vec<_>>(),
            vec![(
                BlindGuard::Coverage,
                Blindness::Partial,
                BlindCause::CoverageAbsentAtT0
            )]
        );
    }

    #[test]
    fn a_t0_check_that_timed_out_measures_no_sets() {
        let t0 = CheckSight {
            not_exited: Some("timed out after 600 s".into()),
            ..Default::default()
        };
        let found = assess(&detached(), Some(&t0), &[], 1024);
        assert_eq!(
            found.iter().map(|g| (g.guard, g.cause)).collect::<Vec<_>>(),
            vec![(BlindGuard::TestSet, BlindCause::CheckDidNotExit)]
        );
    }

    #[test]
    fn files_above_the_parse_cap_make_the_syntax_tree_guards_partly_blind_and_are_named() {
        let found = assess(
            &detached(),
            Some(&exited_with(Some(1))),
            &["tests/huge_test.py".into()],
            1048576,
        );
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].guard, found[0].cause),
            (BlindGuard::SyntaxTree, BlindCause::NotParsed)
        );
        assert!(
            found[0].detail.ends_with(": tests/huge_test.py"),
            "{}",
            found[0].detail
        );
    }

    #[test]
    fn a_declared_report_unreadable_at_t0_is_its_own_cause() {
        let t0 = CheckSight {
            report_error: Some("report out/junit.xml: missing".into()),
            ..Default::default()
        };
        let found = assess(&detached(), Some(&t0), &[], 1024);
        assert_eq!(found[0].cause, BlindCause::ReportUnusable);
    }
}
