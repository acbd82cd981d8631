//! The loop's targets (docs/progress.md, "Targets"): the tests it must fix, chosen once from t0.
//! It owns:
//!
//! - the `--target` patterns (globs over test ids as the reports name them), checked when the
//!   configuration is built;
//! - [`Targets`], selected from t0's `check_baseline` sets: the targets (the tests of C0 a
//!   pattern matches; without patterns, F0), the *pre-existing failures* (F0 minus the targets),
//!   and t0's passing set;
//! - the `targets` receipt event and the iteration-0 stops it implies: a pattern matching no test
//!   of C0 (or patterns where t0 named no tests) halts `invariant_failed` (20) before the first
//!   agent call; targets that all pass at t0 already halt `success_condition_met`;
//! - the success rule of a red check: it failed only on pre-existing failures, with every target
//!   and every test passing at t0 passing, on whole evidence (`crate::rules::verdict::evidence_whole`,
//!   the gate a green passes: a red check's sets with gaps are no success; `super::progress`
//!   halts `metric_integrity_violation` on them).
//!
//! Pre-existing failures are tracked apart: the progress stage removes them from every set it
//! judges, so they neither block success nor count as regressions. [`Targets`] is a pure function
//! of the pinned patterns and the receipt's `check_baseline`, so a resumed run and an offline
//! reader select the same targets.

use crate::rules::decide::Step;
use super::lifecycle::ActiveRun;
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::receipt::events::{Event, GuardRecord};
pub use crate::rules::targets::{met_on_t0, pinned_patterns, select, Targets};
use crate::rules::targets::{compiled, met_at_t0};

/// The `--target` patterns as the configuration pins them: each a glob; refused without the t0
/// baseline (`baseline`), which is what they select from.
pub fn validated_patterns(patterns: Vec<String>, baseline: bool) -> CmdResult<Vec<String>> {
    if patterns.iter().any(|p| p.is_empty()) {
        return Err(Failure::usage("--target: an empty pattern"));
    }
    compiled(&patterns).map_err(Failure::usage)?;
    if !patterns.is_empty() && !baseline {
        return Err(Failure::usage("--target needs the t0 baseline (it selects from t0's collected set); drop --no-baseline"));
    }
    Ok(patterns)
}

/// The in-place guard's finding on an iteration of an in-place run that met its targets: as a
/// green check there (engine::in_place), not a success loopexec stands behind.
pub fn unguarded_in_place(iteration: u64) -> GuardRecord {
    GuardRecord {
        detail: format!(
            "every target passed at iteration {iteration} in place, where no guard can compare the agent's change with t0: \
             not a success loopexec stands behind; review the workdir, or run detached in a git repository with native isolation"
        ),
        ..super::in_place::unguarded_success(iteration)
    }
}

impl ActiveRun<'_> {
    /// After the `check_baseline` (a red t0), before the first agent call: select the targets and
    /// record them (once), or stop at iteration 0.
    pub(super) fn select_targets(&mut self) -> CmdResult<Option<Step>> {
        let Some(t0) = self.history.check_baseline.as_ref().map(|b| b.check.clone()) else { return Ok(None) };
        let targets = match select(&self.cfg.targets, &t0) {
            Ok(Some(targets)) => targets,
            Ok(None) => return Ok(None),
            Err(why) => return Ok(Some(Step::Halt(HaltReason::InvariantFailed, why))),
        };
        if self.history.targets.is_none() {
            self.append(Event::Targets(targets.record(&self.cfg.targets)))?;
        }
        if met_at_t0(&targets, &t0) {
            return Ok(Some(Step::Halt(
                HaltReason::SuccessConditionMet,
                format!(
                    "every target already passes on t0 (the check fails only on {} pre-existing failure(s)): halted at iteration 0, the agent was not called",
                    targets.preexisting.len()
                ),
            )));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_that_is_no_glob_is_a_usage_error() {
        let e = validated_patterns(vec!["t.py::[".into()], true).unwrap_err();
        assert!(e.to_string().contains("--target \"t.py::[\": not a glob"), "{e}");
    }

    #[test]
    fn patterns_without_the_baseline_are_a_usage_error() {
        let e = validated_patterns(vec!["t.py::*".into()], false).unwrap_err();
        assert_eq!((e.to_string().contains("drop --no-baseline"), e.code), (true, crate::error::FailureCode::Usage), "{e}");
    }
}
