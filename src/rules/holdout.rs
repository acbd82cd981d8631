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
        (Ending::FailedToStart { reason }, _) => format!("could not start: {}", crate::inert::inert(reason)),
        (Ending::Interrupted { signal }, _) => format!("interrupted by signal {signal}"),
    }
}
