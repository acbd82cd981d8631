//! The in-place gap: an in-place run (the workdir itself, read-write: a directory that is not a
//! git repository, `--workspace in-place`, or `--isolation none`) has no t0 the agent cannot
//! change, so neither the protected-path guard nor the syntax-tree guards can judge its steps.
//! A green check there is therefore not a success loopexec stands behind: [`InPlaceGuard`]
//! turns it into `human_required`, naming why. (A check already green on t0, before any agent
//! call, still halts `success_condition_met` at iteration 0: nothing was changed.)

use super::guards::{CheckStep, Guard};
use super::seats::Seat;
use crate::halt::HaltReason;
use crate::receipt::events::GuardRecord;
use crate::rules::verdict::Verdict;

/// After every check of an in-place run: a passing check is refused as a success.
#[derive(Debug, Default)]
pub struct InPlaceGuard;

/// The finding on a check that passed at iteration `iteration` in place.
pub fn unguarded_success(iteration: u64) -> GuardRecord {
    GuardRecord {
        iteration,
        guard: Seat::InPlace.as_str().to_string(),
        stage: "after_check".to_string(),
        halt_reason: HaltReason::HumanRequired,
        detail: format!(
            "the check passed at iteration {iteration} in place, where no guard can compare the agent's change with t0 \
             (protected paths, assertions, test items, test-determining surface, tampering): not a success loopexec stands behind; \
             review the workdir, or run detached in a git repository with native isolation for a guarded verdict"
        ),
        findings: vec![],
    }
}

impl Guard for InPlaceGuard {
    fn seat(&self) -> Seat {
        Seat::InPlace
    }

    fn after_check(&mut self, step: &CheckStep<'_>) -> Option<GuardRecord> {
        (Verdict::of_check(step.check) == Verdict::Pass).then(|| unguarded_success(step.iteration))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::{sample, Event};
    use crate::receipt::history::History;

    fn judged(code: i32) -> Option<GuardRecord> {
        let Event::CheckResult(check) = sample::check_result(3, code) else {
            unreachable!()
        };
        InPlaceGuard.after_check(&CheckStep {
            iteration: 3,
            check: &check,
            history: &History::default(),
        })
    }

    #[test]
    fn a_passing_check_in_place_is_refused_as_human_required() {
        let found = judged(0).unwrap();
        assert_eq!(
            (
                found.halt_reason,
                found.guard.as_str(),
                found.stage.as_str()
            ),
            (HaltReason::HumanRequired, "in_place", "after_check")
        );
        assert!(
            found.detail.starts_with(
                "the check passed at iteration 3 in place, where no guard can compare"
            ),
            "{}",
            found.detail
        );
    }

    #[test]
    fn a_failing_check_in_place_is_left_to_the_loop() {
        assert_eq!(judged(1), None);
    }
}
