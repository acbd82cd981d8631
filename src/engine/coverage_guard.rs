//! The declared coverage report and the coverage guard (issue 12 item 5; docs/guards.md,
//! "Coverage"). It owns:
//!
//! - [`CoveragePins`], `--coverage PATH` / `coverage` and `coverage_tolerance` in loop.toml,
//!   validated before anything is written;
//! - [`read`], the report as one check left it: hidden from the check's copy before it runs (like
//!   a `--report`), read after it from the directory of the check's writes, bounded, no link
//!   followed, parsed by `crate::mutation::coverage` (lcov or Cobertura, detected), recorded as
//!   the check's `coverage` field;
//! - [`CoverageGuard`], after every check that exited 0: a declared report that is missing or
//!   unusable, or line coverage below the t0 baseline's by more than the tolerance, is a
//!   `metric_integrity_violation` naming the report and both numbers;
//! - [`changed_line_tier`], the coverage-delta tier of the adequacy canary (issue 14 item 5): on
//!   the final green iteration, every substantive line the agent changed in a source file must be
//!   executed by that check, as its report says; the uncovered ones halt `check_inadequate`.

use super::guards::{CheckStep, Guard};
use super::seats::Seat;
use crate::error::Failure;
use crate::halt::HaltReason;
use crate::mutation::coverage::{uncovered, AmbiguousEntry, TreeKind, Uncovered};
use crate::mutation::coverage::{CoverageFormat, LineHits, MAX_REPORT_BYTES};
use crate::mutation::ChangedSource;
use crate::receipt::events::{
    CheckResult, CoverageRecord, FindingRecord, GuardRecord, LineCoverageRecord,
};
use crate::safefs::SafeDir;
use crate::testreport::shown;
use serde::{Deserialize, Serialize};

/// The coverage settings a run is pinned with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CoveragePins {
    /// The report's path relative to the check's working directory (none: no coverage report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
    /// Percentage points the line coverage may fall below t0's before the guard objects.
    #[serde(default)]
    pub tolerance: f64,
}

impl CoveragePins {
    pub fn is_unset(&self) -> bool {
        self.report.is_none()
    }

    /// Validate `--coverage` / `coverage` and `coverage_tolerance`.
    pub fn resolve(
        report: Option<String>,
        tolerance: Option<f64>,
    ) -> Result<CoveragePins, Failure> {
        if let Some(path) = &report {
            check_path(path)
                .map_err(|why| Failure::usage(format!("--coverage {}: {why}", shown(path))))?;
        }
        let tolerance = match (tolerance, &report) {
            (None, _) => 0.0,
            (Some(_), None) => return Err(Failure::usage("coverage_tolerance needs a coverage report (--coverage PATH or coverage = \"PATH\")")),
            (Some(t), Some(_)) if !t.is_finite() || !(0.0..=100.0).contains(&t) => {
                return Err(Failure::usage(format!("coverage_tolerance must be a number of percentage points in 0..=100, got {t}")))
            }
            (Some(t), Some(_)) => t,
        };
        Ok(CoveragePins { report, tolerance })
    }

    /// Whether the tree path `path` is the declared report (hidden from the check's copy).
    pub fn hides(&self, path: &[u8]) -> bool {
        self.report.as_deref().is_some_and(|r| r.as_bytes() == path)
    }
}

/// Why `path` cannot name a report beneath the check's working directory.
pub(crate) fn check_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("the path is empty");
    }
    if path.starts_with('/') {
        return Err("the path must be relative to the check's working directory");
    }
    if path
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err("the path must be normalised: no empty, `.` or `..` component");
    }
    if path.bytes().any(|b| b == 0 || b.is_ascii_control()) {
        return Err("the path holds a control character");
    }
    Ok(())
}

/// The declared report as one check left it: the receipt's record and, when it parsed, its hits.
#[derive(Debug, Clone)]
pub struct CoverageRead {
    pub record: LineCoverageRecord,
    pub hits: Option<LineHits>,
}

/// Read the report `path` from `dir` (the check's writes): bounded, refusing links and anything
/// but a regular file.
pub fn read(dir: &SafeDir, path: &str) -> CoverageRead {
    let unusable = |error: String| CoverageRead {
        record: LineCoverageRecord {
            report: path.to_string(),
            format: None,
            covered_lines: None,
            coverable_lines: None,
            error: Some(error),
        },
        hits: None,
    };
    let bytes = match dir.read(path, MAX_REPORT_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.is_not_found() => return unusable("the check did not write it".into()),
        Err(e) => return unusable(e.to_string()),
    };
    let format = CoverageFormat::sniff(&bytes);
    match LineHits::parse(&bytes) {
        Err(e) => unusable(e.to_string()),
        Ok(hits) => {
            let (covered, coverable) = hits.totals();
            if coverable == 0 {
                return unusable("the report instruments no line".into());
            }
            CoverageRead {
                record: LineCoverageRecord {
                    report: path.to_string(),
                    format: Some(format.as_str().into()),
                    covered_lines: Some(covered),
                    coverable_lines: Some(coverable),
                    error: None,
                },
                hits: Some(hits),
            }
        }
    }
}

/// A record's (covered, coverable) lines, when it has them.
fn totals(record: &LineCoverageRecord) -> Option<(u64, u64)> {
    match (record.covered_lines, record.coverable_lines) {
        (Some(covered), Some(coverable)) if coverable > 0 => Some((covered, coverable)),
        _ => None,
    }
}

fn percent((covered, coverable): (u64, u64)) -> f64 {
    covered as f64 * 100.0 / coverable as f64
}

/// Whether `now` is below `t0` by more than `tolerance` percentage points (exact when it is 0).
fn fell(now: (u64, u64), t0: (u64, u64), tolerance: f64) -> bool {
    // t0.covered/t0.coverable - now.covered/now.coverable, over a common denominator.
    let diff = (t0.0 as i128) * (now.1 as i128) - (now.0 as i128) * (t0.1 as i128);
    diff > 0 && diff as f64 * 100.0 > tolerance * (t0.1 as f64) * (now.1 as f64)
}

/// A `metric_integrity_violation` after the check of `iteration` (also the check-writes guard's).
pub(super) fn violation(
    iteration: u64,
    detail: String,
    findings: Vec<FindingRecord>,
) -> GuardRecord {
    GuardRecord {
        iteration,
        guard: Seat::MetricIntegrity.as_str().to_string(),
        stage: "after_check".to_string(),
        halt_reason: HaltReason::MetricIntegrityViolation,
        detail,
        findings,
    }
}

/// The guard's finding on the green `check` against the t0 baseline's coverage `t0`, if any.
pub fn coverage_violation(
    iteration: u64,
    check: &CheckResult,
    t0: Option<&LineCoverageRecord>,
    tolerance: f64,
) -> Option<GuardRecord> {
    let now = check.coverage.as_ref()?;
    let report = shown(&now.report);
    if let Some(error) = &now.error {
        return Some(violation(
            iteration,
            format!("the check exited 0 at iteration {iteration} but its declared coverage report {report} cannot be used: {}", shown(error)),
            vec![FindingRecord { path: Some(now.report.clone()), what: shown(error) }],
        ));
    }
    let (now_totals, t0_totals) = (totals(now)?, totals(t0?)?);
    if !fell(now_totals, t0_totals, tolerance) {
        return None;
    }
    let detail = format!(
        "the check exited 0 at iteration {iteration} but its line coverage ({report}) fell below t0's: {}/{} lines ({:.2}%) against t0's {}/{} ({:.2}%), tolerance {tolerance} points",
        now_totals.0,
        now_totals.1,
        percent(now_totals),
        t0_totals.0,
        t0_totals.1,
        percent(t0_totals),
    );
    let what = format!(
        "covered {}/{} lines; t0 covered {}/{}",
        now_totals.0, now_totals.1, t0_totals.0, t0_totals.1
    );
    Some(violation(
        iteration,
        detail,
        vec![FindingRecord {
            path: Some(now.report.clone()),
            what,
        }],
    ))
}

/// Uncovered changed lines recorded in the `adequacy` event (the count is whole).
const MAX_RECORDED_UNCOVERED: usize = 1000;

/// The substantive (not blank) lines of each changed source file (one with a grammar) that the
/// agent changed against t0.
fn changed_source_lines(
    sources: &[ChangedSource<'_>],
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<u32>> {
    let mut out = std::collections::BTreeMap::new();
    for source in sources
        .iter()
        .filter(|s| crate::analysis::syntax::Language::of_path(s.path).is_some())
    {
        let text: Vec<&[u8]> = source.end.split(|b| *b == b'\n').collect();
        let substantive = |line: &u32| {
            text.get(*line as usize - 1)
                .is_some_and(|l| l.iter().any(|b| !b.is_ascii_whitespace()))
        };
        let lines: std::collections::BTreeSet<u32> =
            crate::mutation::lines::changed_lines(source.t0, source.end)
                .into_iter()
                .filter(|l| *l >= 1 && substantive(l))
                .collect();
        if !lines.is_empty() {
            out.insert(source.path.to_string(), lines);
        }
    }
    out
}

/// Ambiguous report entries recorded in the `adequacy` event (the count is whole).
const MAX_RECORDED_AMBIGUOUS: usize = 50;
/// Candidate tree files recorded per ambiguous entry.
const MAX_RECORDED_CANDIDATES: usize = 10;

/// What `path` is in `tree` (the tree the check ran on).
pub fn tree_kind(tree: &crate::workspace::Manifest, path: &str) -> TreeKind {
    use crate::workspace::EntryKind;
    match tree.get(path.as_bytes()) {
        Some(e) if matches!(e.kind, EntryKind::File | EntryKind::Executable) => TreeKind::File,
        Some(_) => TreeKind::Other,
        None if tree.has_beneath(path.as_bytes()) => TreeKind::Dir,
        None => TreeKind::Other,
    }
}

/// The coverage-delta tier on the final green check's report `hits` (at `report`): the changed
/// substantive lines of `sources` it shows never executed (a changed file no entry resolves to:
/// all of them; one an ambiguous entry could name: all of them too). Report names are resolved
/// exactly against `tree`, the tree the check ran on, mounted at `mount` in its zone. Lines the
/// report does not instrument are not held against the check.
pub fn changed_line_tier(
    report: &str,
    sources: &[ChangedSource<'_>],
    hits: &LineHits,
    mount: &str,
    tree: &crate::workspace::Manifest,
) -> CoverageRecord {
    let changed = changed_source_lines(sources);
    let found = uncovered(&changed, hits, mount, &|p: &str| tree_kind(tree, p));
    let mut missed: Vec<Uncovered> = found.uncovered;
    let uncovered_count = missed.len() as u64;
    missed.truncate(MAX_RECORDED_UNCOVERED);
    let ambiguous_count = found.ambiguous.len() as u64;
    let ambiguous: Vec<AmbiguousEntry> = found
        .ambiguous
        .into_iter()
        .take(MAX_RECORDED_AMBIGUOUS)
        .map(|a| AmbiguousEntry {
            entry: shown(&a.entry),
            candidates: a
                .candidates
                .into_iter()
                .take(MAX_RECORDED_CANDIDATES)
                .collect(),
        })
        .collect();
    CoverageRecord {
        report: report.to_string(),
        changed_lines: changed.values().map(|l| l.len() as u64).sum(),
        uncovered: missed,
        uncovered_count,
        ambiguous,
        ambiguous_count,
        error: None,
    }
}

/// After every check that exited 0: its declared coverage report must be usable and its line
/// coverage not below t0's (beyond the tolerance).
#[derive(Debug)]
pub struct CoverageGuard {
    tolerance: f64,
}

impl CoverageGuard {
    /// The guard of a run pinned with `pins` (none: no coverage report is declared).
    pub fn of(pins: &CoveragePins) -> Option<Box<dyn Guard>> {
        pins.report.as_ref().map(|_| {
            Box::new(CoverageGuard {
                tolerance: pins.tolerance,
            }) as Box<dyn Guard>
        })
    }
}

impl Guard for CoverageGuard {
    fn seat(&self) -> Seat {
        Seat::MetricIntegrity
    }

    fn after_check(&mut self, step: &CheckStep<'_>) -> Option<GuardRecord> {
        if step.check.check_exit != Some(0) {
            return None;
        }
        let t0 = step
            .history
            .check_baseline
            .as_ref()
            .and_then(|b| b.check.coverage.as_ref());
        coverage_violation(step.iteration, step.check, t0, self.tolerance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::{sample, Event};
    use crate::rules::canary::uncovered_guard;

    fn measured(covered: u64, coverable: u64) -> LineCoverageRecord {
        LineCoverageRecord {
            report: "cov.lcov".into(),
            format: Some("lcov".into()),
            covered_lines: Some(covered),
            coverable_lines: Some(coverable),
            error: None,
        }
    }

    fn tree(files: &[&str]) -> crate::workspace::Manifest {
        let mut m = crate::workspace::Manifest::default();
        for f in files {
            let entry = crate::workspace::manifest::Entry {
                kind: crate::workspace::EntryKind::File,
                oid: crate::workspace::object_id::blob_id(f.as_bytes()),
            };
            m.insert(f.as_bytes().to_vec(), entry).unwrap();
        }
        m
    }

    fn green_with(coverage: LineCoverageRecord) -> CheckResult {
        let Event::CheckResult(mut c) = sample::check_result(2, 0) else {
            unreachable!()
        };
        c.coverage = Some(coverage);
        c
    }

    #[test]
    fn changed_lines_the_report_shows_unexecuted_are_uncovered_and_blank_lines_never_count() {
        let hits =
            LineHits::parse(b"SF:/workspace/calc.py\nDA:1,1\nDA:3,0\nend_of_record\n").unwrap();
        let sources = [ChangedSource {
            path: "calc.py",
            t0: Some(b"a = 1\n"),
            end: b"a = 2\n\nb = 3\n",
        }];
        let record = changed_line_tier(
            "cov.lcov",
            &sources,
            &hits,
            "/workspace",
            &tree(&["calc.py"]),
        );
        assert_eq!((record.changed_lines, record.uncovered_count), (2, 1));
        assert_eq!(
            record.uncovered,
            vec![Uncovered {
                path: "calc.py".into(),
                line: 3,
                file_missing: false,
                ambiguous: false
            }]
        );
        let guard = uncovered_guard(4, &record).unwrap();
        assert_eq!(guard.halt_reason, HaltReason::CheckInadequate);
        assert_eq!(guard.detail, "1 of the 2 substantive lines the agent changed were never executed by the check (cov.lcov)");
        assert_eq!(
            guard.findings,
            vec![FindingRecord {
                path: Some("calc.py".into()),
                what: "line 3: never executed by the check".into()
            }]
        );
    }

    #[test]
    fn a_changed_file_without_a_grammar_is_not_held_against_the_check() {
        let hits = LineHits::parse(b"SF:calc.py\nDA:1,1\nend_of_record\n").unwrap();
        let sources = [ChangedSource {
            path: "NOTES.md",
            t0: None,
            end: b"# notes\n",
        }];
        let record = changed_line_tier(
            "cov.lcov",
            &sources,
            &hits,
            "/workspace",
            &tree(&["calc.py", "NOTES.md"]),
        );
        assert_eq!((record.changed_lines, record.uncovered_count), (0, 0));
        assert_eq!(uncovered_guard(1, &record), None);
    }

    #[test]
    fn coverage_equal_to_t0_is_no_violation() {
        assert_eq!(
            coverage_violation(2, &green_with(measured(3, 4)), Some(&measured(6, 8)), 0.0),
            None
        );
    }

    #[test]
    fn coverage_below_t0_names_both_numbers() {
        let found =
            coverage_violation(2, &green_with(measured(2, 4)), Some(&measured(3, 4)), 0.0).unwrap();
        assert_eq!(found.halt_reason, HaltReason::MetricIntegrityViolation);
        assert_eq!(
            found.detail,
            "the check exited 0 at iteration 2 but its line coverage (cov.lcov) fell below t0's: 2/4 lines (50.00%) against t0's 3/4 (75.00%), tolerance 0 points"
        );
        assert_eq!(
            found.findings,
            vec![FindingRecord {
                path: Some("cov.lcov".into()),
                what: "covered 2/4 lines; t0 covered 3/4".into()
            }]
        );
    }

    #[test]
    fn a_fall_within_the_tolerance_is_no_violation() {
        assert_eq!(
            coverage_violation(
                1,
                &green_with(measured(74, 100)),
                Some(&measured(75, 100)),
                1.0
            ),
            None
        );
        assert!(coverage_violation(
            1,
            &green_with(measured(73, 100)),
            Some(&measured(75, 100)),
            1.0
        )
        .is_some());
    }

    #[test]
    fn an_unusable_report_on_a_green_check_is_a_violation_naming_it() {
        let broken = LineCoverageRecord {
            error: Some("the check did not write it".into()),
            format: None,
            covered_lines: None,
            coverable_lines: None,
            ..measured(0, 0)
        };
        let found = coverage_violation(1, &green_with(broken), None, 0.0).unwrap();
        assert_eq!(found.detail, "the check exited 0 at iteration 1 but its declared coverage report cov.lcov cannot be used: the check did not write it");
    }

    #[test]
    fn without_a_measured_t0_only_the_report_itself_is_judged() {
        assert_eq!(
            coverage_violation(1, &green_with(measured(1, 10)), None, 0.0),
            None
        );
    }

    #[test]
    fn a_report_path_must_be_relative_and_normalised() {
        for bad in ["", "/abs/cov.lcov", "a/../cov.lcov", "./cov.lcov", "a//b"] {
            assert!(
                CoveragePins::resolve(Some(bad.into()), None).is_err(),
                "{bad:?} was accepted"
            );
        }
        assert_eq!(
            CoveragePins::resolve(Some("out/cov.lcov".into()), None)
                .unwrap()
                .report
                .as_deref(),
            Some("out/cov.lcov")
        );
    }

    #[test]
    fn a_tolerance_without_a_report_or_out_of_range_is_refused() {
        assert!(CoveragePins::resolve(None, Some(1.0))
            .unwrap_err()
            .message
            .contains("needs a coverage report"));
        assert!(CoveragePins::resolve(Some("c.lcov".into()), Some(-1.0)).is_err());
        assert!(CoveragePins::resolve(Some("c.lcov".into()), Some(f64::NAN)).is_err());
    }

    #[test]
    fn a_report_that_is_a_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("real.lcov"),
            b"SF:a.py\nDA:1,1\nend_of_record\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("real.lcov", dir.path().join("cov.lcov")).unwrap();
        let read = read(&SafeDir::open(dir.path()).unwrap(), "cov.lcov");
        assert!(read.hits.is_none());
        assert!(read.record.error.is_some());
    }

    #[test]
    fn a_parsed_report_records_its_format_and_totals() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cov.lcov"),
            b"SF:a.py\nDA:1,1\nDA:2,0\nDA:3,5\nend_of_record\n",
        )
        .unwrap();
        let read = read(&SafeDir::open(dir.path()).unwrap(), "cov.lcov");
        assert_eq!(
            read.record,
            LineCoverageRecord {
                report: "cov.lcov".into(),
                ..measured(2, 3)
            }
        );
    }
}
