//! The held-out check's rule: a success the held-out check (when it ran) did not find green does
//! not stand.

use super::decide::Step;
use crate::halt::HaltReason;
use crate::receipt::events::{CheckResult, HoldoutRecord};

/// The decision on a step that would otherwise be `success`: it stands only when the held-out
/// check ran, was green, and on the directory the run pinned.
pub fn decide_on(holdout: &HoldoutRecord, success: Step) -> Step {
    let n = holdout.check.iteration;
    if holdout.dir_changed {
        return Step::Halt(
            HaltReason::ObjectiveUnverified,
            format!("the held-out directory changed since the run started (sha256 {} now): iteration {n}'s green is not verified", holdout.dir_sha256),
        );
    }
    match holdout.verdict.as_str() {
        "green" => success,
        "could_not_run" => Step::Halt(HaltReason::ExecutionFailure, format!("the held-out check of iteration {n} could not run ({})", ending_text(&holdout.check))),
        "red" => Step::Halt(
            HaltReason::ObjectiveUnverified,
            format!("the check passed at iteration {n} but the held-out check failed ({}): the work does not hold beyond the visible tests", ending_text(&holdout.check)),
        ),
        _ => Step::Halt(
            HaltReason::ObjectiveUnverified,
            format!("the check passed at iteration {n} but the held-out check's exit code and its evidence disagree"),
        ),
    }
}

fn ending_text(check: &CheckResult) -> String {
    use crate::ending::Ending;
    match (&check.ending, check.failing_count) {
        (Ending::Exited { code }, Some(f)) => format!("exit {code}, {f} failing"),
        (Ending::Exited { code }, None) => format!("exit {code}"),
        (Ending::Signaled { signal }, _) => format!("killed by signal {signal}"),
        (Ending::TimedOut { after_ms }, _) => format!("timed out after {after_ms} ms"),
        (Ending::FailedToStart { reason }, _) => {
            format!("could not start: {}", crate::inert::inert(reason))
        }
        (Ending::Interrupted { signal }, _) => format!("interrupted by signal {signal}"),
        (stalled @ Ending::Stalled { .. }, _) => {
            format!("stalled: {}", stalled.stall_words().unwrap_or_default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ending::Ending;
    use crate::receipt::events::{sample, Event};

    /// The held-out record of iteration 2 whose check ended `ending` and which the engine
    /// recorded as `verdict` (`green`, `red`, `disagree`, `could_not_run`).
    fn holdout(
        ending: Ending,
        failing: Option<u64>,
        verdict: &str,
        changed: bool,
    ) -> HoldoutRecord {
        let Event::CheckResult(mut check) = sample::check_result(2, 0) else {
            unreachable!()
        };
        check.check_exit = ending.exit_code();
        check.ending = ending;
        check.failing_count = failing;
        check.evidence = None;
        HoldoutRecord {
            dir: "/h".into(),
            dir_sha256: "00".into(),
            dir_entries: 1,
            dir_changed: changed,
            verdict: verdict.into(),
            check,
        }
    }

    fn success() -> Step {
        Step::Halt(HaltReason::SuccessConditionMet, "passed".into())
    }

    #[test]
    fn a_held_out_green_keeps_success() {
        assert_eq!(
            decide_on(
                &holdout(Ending::Exited { code: 0 }, None, "green", false),
                success()
            ),
            success()
        );
    }

    #[test]
    fn a_held_out_directory_changed_since_the_start_is_objective_unverified_even_when_green() {
        let Step::Halt(reason, detail) = decide_on(
            &holdout(Ending::Exited { code: 0 }, None, "green", true),
            success(),
        ) else {
            panic!("no halt")
        };
        assert_eq!(reason, HaltReason::ObjectiveUnverified);
        assert_eq!(detail, "the held-out directory changed since the run started (sha256 00 now): iteration 2's green is not verified");
    }

    #[test]
    fn a_held_out_red_is_objective_unverified_naming_its_exit_and_failing_count() {
        let Step::Halt(reason, detail) = decide_on(
            &holdout(Ending::Exited { code: 1 }, Some(1), "red", false),
            success(),
        ) else {
            panic!("no halt")
        };
        assert_eq!(reason, HaltReason::ObjectiveUnverified);
        assert_eq!(detail, "the check passed at iteration 2 but the held-out check failed (exit 1, 1 failing): the work does not hold beyond the visible tests");
    }

    #[test]
    fn a_held_out_check_that_could_not_run_is_an_execution_failure() {
        let Step::Halt(reason, detail) = decide_on(
            &holdout(Ending::Exited { code: 127 }, None, "could_not_run", false),
            success(),
        ) else {
            panic!("no halt")
        };
        assert_eq!(reason, HaltReason::ExecutionFailure);
        assert_eq!(
            detail,
            "the held-out check of iteration 2 could not run (exit 127)"
        );
    }

    #[test]
    fn a_held_out_check_whose_exit_and_evidence_disagree_is_objective_unverified() {
        let Step::Halt(reason, detail) = decide_on(
            &holdout(Ending::Exited { code: 0 }, Some(1), "disagree", false),
            success(),
        ) else {
            panic!("no halt")
        };
        assert_eq!(reason, HaltReason::ObjectiveUnverified);
        assert_eq!(detail, "the check passed at iteration 2 but the held-out check's exit code and its evidence disagree");
    }
}
