//! The loop's targets (docs/progress.md, "Targets") from the engine's side; the selection and
//! the success rule are pure rules (`crate::rules::targets`: [`Targets`], [`select`],
//! [`met_on_t0`]), re-exported here. It owns:
//!
//! - the `--target` patterns (globs over test ids as the reports name them), checked when the
//!   configuration is built;
//! - the `targets` receipt event and the iteration-0 stops it implies: a pattern matching no test
//!   of C0 (or patterns where t0 named no tests) halts `invariant_failed` (20) before the first
//!   agent call; targets that all pass at t0 already halt `success_condition_met`;
//! - the in-place guard's finding on met targets ([`unguarded_in_place`]).
//!
//! Pre-existing failures are tracked apart: the progress judgement (`crate::rules::progress`)
//! removes them from every set it judges, so they neither block success nor count as regressions.

use super::lifecycle::ActiveRun;
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::receipt::events::{Event, GuardRecord};
use crate::rules::decide::Step;
use crate::rules::targets::{compiled, met_at_t0};
pub use crate::rules::targets::{met_on_t0, pinned_patterns, select, Targets};

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
        let Some(t0) = self
            .history
            .check_baseline
            .as_ref()
            .map(|b| b.check.clone())
        else {
            return Ok(None);
        };
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
        assert!(
            e.to_string().contains("--target \"t.py::[\": not a glob"),
            "{e}"
        );
    }

    #[test]
    fn patterns_without_the_baseline_are_a_usage_error() {
        let e = validated_patterns(vec!["t.py::*".into()], false).unwrap_err();
        assert_eq!(
            (e.to_string().contains("drop --no-baseline"), e.code),
            (true, crate::error::FailureCode::Usage),
            "{e}"
        );
    }
}
