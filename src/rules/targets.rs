//! The loop's targets as a pure rule (docs/progress.md, "Targets"): the tests a run must fix,
//! selected once from t0's `check_baseline` sets, and the success rule of a red check. It owns:
//!
//! - [`Targets`], selected from t0's sets ([`select`]): the targets (the tests of C0 a pinned
//!   `--target` pattern matches; without patterns, F0), the *pre-existing failures* (F0 minus the
//!   targets), and t0's passing set; a pattern matching no test of C0 (or patterns where t0 named
//!   no tests) is refused with the sentence the engine halts `invariant_failed` (20) with;
//! - the success rule of a red check ([`Targets::met`]): it failed only on pre-existing failures,
//!   with every target and every test passing at t0 passing; on t0 itself on whole evidence
//!   ([`met_on_t0`], `super::verdict::evidence_whole`, the gate a green passes);
//! - the `targets` receipt event's record ([`Targets::record`]).
//!
//! A pure function of the pinned patterns ([`pinned_patterns`]) and the receipt's
//! `check_baseline`, so the live loop, a resumed run and an offline reader (`super::derive`)
//! select the same targets. The engine (`engine::targets`) validates the patterns at start and
//! records the `targets` event.

use crate::convergence::TestSet;
use crate::receipt::events::{CheckResult, TargetsRecord};
use crate::receipt::history::History;
use globset::{Glob, GlobSet, GlobSetBuilder};
use sha2::{Digest, Sha256};

/// At most this many ids are listed in the `targets` event's lists.
const LISTED_IDS: usize = 50;

/// The tests of a run the loop must fix, and those failing at t0 it leaves alone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Targets {
    pub targets: TestSet,
    /// F0 minus the targets.
    pub preexisting: TestSet,
    /// C0 minus F0 minus S0.
    pub t0_passing: TestSet,
}

/// The patterns compiled, one glob each; the sentence naming the one that is no glob.
pub fn compiled(patterns: &[String]) -> Result<Vec<GlobSet>, String> {
    patterns
        .iter()
        .map(|p| {
            let glob = Glob::new(p).map_err(|e| format!("--target {p:?}: not a glob: {e}"))?;
            GlobSetBuilder::new()
                .add(glob)
                .build()
                .map_err(|e| format!("--target {p:?}: {e}"))
        })
        .collect()
}

/// The target patterns `run_start` pinned (`config.targets`; none in receipts before targets).
pub fn pinned_patterns(history: &History) -> Vec<String> {
    history
        .start
        .as_ref()
        .and_then(|s| s.config.get("targets"))
        .and_then(|t| serde_json::from_value(t.clone()).ok())
        .unwrap_or_default()
}

fn set(ids: &Option<Vec<String>>) -> TestSet {
    ids.iter().flatten().cloned().collect()
}

/// Select the targets from t0's check: `Ok(None)` when t0 named no tests and no pattern was
/// given (nothing to select: every failing test counts); an error sentence when a pattern
/// matches no test of C0, or patterns were given and t0 named no tests.
pub fn select(patterns: &[String], t0: &CheckResult) -> Result<Option<Targets>, String> {
    let Some(collected) = t0
        .collected_set
        .as_ref()
        .map(|c| c.iter().cloned().collect::<TestSet>())
    else {
        return match patterns.is_empty() {
            true => Ok(None),
            false => Err("--target cannot select: the check's reports on t0 named no tests (give --report, or a check whose output names its tests)".into()),
        };
    };
    let failing = set(&t0.failing_set);
    let skipped = set(&t0.skipped_set);
    let t0_passing: TestSet = collected
        .iter()
        .filter(|t| !failing.contains(*t) && !skipped.contains(*t))
        .cloned()
        .collect();
    if patterns.is_empty() {
        return Ok(Some(Targets {
            targets: failing,
            preexisting: TestSet::new(),
            t0_passing,
        }));
    }
    let globs = compiled(patterns)?;
    let unmatched: Vec<&str> = patterns
        .iter()
        .zip(&globs)
        .filter(|(_, g)| !collected.iter().any(|t| g.is_match(t)))
        .map(|(p, _)| p.as_str())
        .collect();
    if !unmatched.is_empty() {
        return Err(format!(
            "--target {} matched no test of t0's collected set ({} tests); nothing was spent on the agent",
            unmatched.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>().join(", "),
            collected.len()
        ));
    }
    let targets: TestSet = collected
        .iter()
        .filter(|t| globs.iter().any(|g| g.is_match(t)))
        .cloned()
        .collect();
    let preexisting = failing.difference(&targets).cloned().collect();
    Ok(Some(Targets {
        targets,
        preexisting,
        t0_passing,
    }))
}

impl Targets {
    /// The targets of a run as its receipt and pinned patterns determine them (none: t0's sets
    /// were not measured, or the patterns select nothing).
    pub fn of_history(history: &History, patterns: &[String]) -> Option<Targets> {
        select(patterns, &history.check_baseline.as_ref()?.check)
            .ok()
            .flatten()
    }

    /// `ids` without the pre-existing failures (what the progress stage judges).
    pub fn without_preexisting(&self, ids: &TestSet) -> TestSet {
        ids.difference(&self.preexisting).cloned().collect()
    }

    /// The targets among `failing`.
    pub fn failing_targets(&self, failing: &TestSet) -> TestSet {
        failing.intersection(&self.targets).cloned().collect()
    }

    /// Whether a red check with these sets is success: it failed only on pre-existing failures
    /// (and on at least one: a red check naming no failing test failed for a reason the reports
    /// do not show), and every target and every test passing at t0 passes.
    pub fn met(&self, passing: &TestSet, failing: &TestSet) -> bool {
        !failing.is_empty()
            && failing.is_subset(&self.preexisting)
            && self.targets.is_subset(passing)
            && self.t0_passing.is_subset(passing)
    }

    /// The `targets` event.
    pub fn record(&self, patterns: &[String]) -> TargetsRecord {
        let listed = |ids: &TestSet| {
            ids.iter()
                .take(LISTED_IDS)
                .cloned()
                .collect::<Vec<String>>()
        };
        let digest = |ids: &TestSet| {
            let mut h = Sha256::new();
            for id in ids {
                h.update(id.as_bytes());
                h.update(b"\n");
            }
            hex::encode(h.finalize())
        };
        TargetsRecord {
            patterns: patterns.to_vec(),
            targets: listed(&self.targets),
            targets_count: self.targets.len() as u64,
            targets_sha256: digest(&self.targets),
            preexisting_failures: listed(&self.preexisting),
            preexisting_failures_count: self.preexisting.len() as u64,
            preexisting_failures_sha256: digest(&self.preexisting),
        }
    }
}

/// Whether every target of `targets` already passes on the red `t0`, on whole evidence (the gate
/// of every success, `crate::rules::verdict::evidence_whole`: t0's sets with gaps say nothing of the
/// targets, and the loop goes on).
pub fn met_at_t0(targets: &Targets, t0: &CheckResult) -> bool {
    targets.met(&targets.t0_passing, &set(&t0.failing_set)) && super::verdict::evidence_whole(t0)
}

/// Whether the `patterns` select targets from the red `t0` that all already pass on it: a
/// success at iteration 0 that, like a green t0, stands only once its confirmation reruns agree
/// (`super::baseline`).
pub fn met_on_t0(patterns: &[String], t0: &CheckResult) -> bool {
    matches!(select(patterns, t0), Ok(Some(targets)) if met_at_t0(&targets, t0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::{sample, Event};

    fn t0(collected: &[&str], failing: &[&str]) -> CheckResult {
        let Event::CheckResult(mut check) = sample::check_result(0, 1) else {
            unreachable!()
        };
        check.collected_set = Some(collected.iter().map(|s| s.to_string()).collect());
        check.failing_set = Some(failing.iter().map(|s| s.to_string()).collect());
        check.skipped_set = None;
        check
    }

    fn ids(ids: &[&str]) -> TestSet {
        ids.iter().map(|s| s.to_string()).collect()
    }

    const C0: [&str; 4] = [
        "t.py::test_a",
        "t.py::test_b",
        "u.py::test_c",
        "u.py::test_d",
    ];

    #[test]
    fn without_patterns_every_test_failing_at_t0_is_a_target() {
        let t = select(&[], &t0(&C0, &["t.py::test_a", "u.py::test_c"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.targets, t.preexisting),
            (ids(&["t.py::test_a", "u.py::test_c"]), ids(&[]))
        );
    }

    #[test]
    fn a_pattern_selects_its_tests_and_the_other_t0_failures_are_preexisting() {
        let t = select(
            &["t.py::*".into()],
            &t0(&C0, &["t.py::test_a", "u.py::test_c"]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(t.targets, ids(&["t.py::test_a", "t.py::test_b"]));
        assert_eq!(t.preexisting, ids(&["u.py::test_c"]));
        assert_eq!(t.t0_passing, ids(&["t.py::test_b", "u.py::test_d"]));
    }

    #[test]
    fn a_pattern_matching_no_collected_test_is_refused_naming_it() {
        let why = select(
            &["t.py::*".into(), "nope::*".into()],
            &t0(&C0, &["t.py::test_a"]),
        )
        .unwrap_err();
        assert_eq!(why, "--target \"nope::*\" matched no test of t0's collected set (4 tests); nothing was spent on the agent");
    }

    #[test]
    fn patterns_without_a_measured_t0_are_refused() {
        let mut check = t0(&C0, &[]);
        check.collected_set = None;
        assert!(select(&["*".into()], &check)
            .unwrap_err()
            .starts_with("--target cannot select"));
        assert_eq!(select(&[], &check), Ok(None));
    }

    #[test]
    fn red_only_on_preexisting_failures_with_every_target_and_t0_pass_passing_is_met() {
        let t = select(
            &["t.py::test_a".into()],
            &t0(&C0, &["t.py::test_a", "u.py::test_c"]),
        )
        .unwrap()
        .unwrap();
        assert!(t.met(
            &ids(&["t.py::test_a", "t.py::test_b", "u.py::test_d"]),
            &ids(&["u.py::test_c"])
        ));
    }

    #[test]
    fn a_fix_breaking_a_test_that_passed_at_t0_is_not_met() {
        let t = select(
            &["t.py::test_a".into()],
            &t0(&C0, &["t.py::test_a", "u.py::test_c"]),
        )
        .unwrap()
        .unwrap();
        assert!(!t.met(
            &ids(&["t.py::test_a", "t.py::test_b"]),
            &ids(&["u.py::test_c", "u.py::test_d"])
        ));
    }

    #[test]
    fn a_passing_test_of_t0_that_vanished_is_not_met() {
        let t = select(
            &["t.py::test_a".into()],
            &t0(&C0, &["t.py::test_a", "u.py::test_c"]),
        )
        .unwrap()
        .unwrap();
        assert!(!t.met(
            &ids(&["t.py::test_a", "t.py::test_b"]),
            &ids(&["u.py::test_c"])
        ));
    }

    #[test]
    fn a_red_check_naming_no_failing_test_is_not_met() {
        let t = select(&[], &t0(&C0, &["t.py::test_a"])).unwrap().unwrap();
        assert!(!t.met(&ids(&C0), &ids(&[])));
    }

    #[test]
    fn the_record_lists_at_most_fifty_ids_and_counts_them() {
        let many: Vec<String> = (0..60).map(|i| format!("t.py::test_{i:02}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let t = select(&[], &t0(&refs, &refs)).unwrap().unwrap();
        let r = t.record(&[]);
        assert_eq!(
            (
                r.targets.len(),
                r.targets_count,
                r.preexisting_failures_count
            ),
            (LISTED_IDS, 60, 0)
        );
    }
}
