//! The halt decision of one iteration, computed only from what the zones observed.
//!
//! - agent (`exec`) exits 0: go on to the check; anything else (non-zero exit, killed by a signal,
//!   timeout, could not start): `execution_failure`.
//! - check exits 0: `success_condition_met`. Exits non-zero: a red iteration (not a failure); at the
//!   iteration cap: `max_iterations_reached`. Exit 126/127 (the shell could not find or execute the
//!   command), killed by a signal, timed out, could not start: `execution_failure`.
//! - either interrupted by SIGINT/SIGTERM: not a halt; the run becomes resumable.

use crate::halt::HaltReason;
use crate::zones::Ending;

/// What the engine does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Go on (to the check, or to the next iteration).
    Continue,
    /// Halt with this reason; the detail is a human sentence recorded with it.
    Halt(HaltReason, String),
    /// loopexec was asked to stop by this signal.
    Interrupted(i32),
}

fn not_completed(who: &str, ending: &Ending) -> Step {
    let detail = match ending {
        Ending::Exited { code } => format!("{who} exited {code}"),
        Ending::Signaled { signal } => format!("{who} was killed by signal {signal}"),
        Ending::TimedOut { after_ms } => format!("{who} timed out after {after_ms} ms; its process tree was killed"),
        Ending::FailedToStart { reason } => format!("{who} could not start: {reason}"),
        Ending::Interrupted { signal } => return Step::Interrupted(*signal),
    };
    Step::Halt(HaltReason::ExecutionFailure, detail)
}

/// After the agent command.
pub fn after_exec(ending: &Ending) -> Step {
    match ending {
        Ending::Exited { code: 0 } => Step::Continue,
        other => not_completed("exec (agent)", other),
    }
}

/// After the check of iteration `iteration` out of `max_iterations`.
pub fn after_check(ending: &Ending, iteration: u64, max_iterations: u64) -> Step {
    match ending {
        Ending::Exited { code: 0 } => {
            Step::Halt(HaltReason::SuccessConditionMet, format!("the check passed at iteration {iteration}"))
        }
        Ending::Exited { code: code @ (126 | 127) } => Step::Halt(
            HaltReason::ExecutionFailure,
            format!("check could not run (exit {code}: the shell could not find or execute the command)"),
        ),
        Ending::Exited { .. } if iteration >= max_iterations => Step::Halt(
            HaltReason::MaxIterationsReached,
            format!("the check still fails after {iteration} of {max_iterations} iterations"),
        ),
        Ending::Exited { .. } => Step::Continue,
        other => not_completed("check", other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_red_check_below_the_cap_continues_and_at_the_cap_halts() {
        assert_eq!(after_check(&Ending::Exited { code: 1 }, 1, 3), Step::Continue);
        assert!(matches!(after_check(&Ending::Exited { code: 1 }, 3, 3), Step::Halt(HaltReason::MaxIterationsReached, _)));
    }

    #[test]
    fn a_green_check_converges_even_at_the_cap() {
        assert!(matches!(after_check(&Ending::Exited { code: 0 }, 3, 3), Step::Halt(HaltReason::SuccessConditionMet, _)));
    }

    #[test]
    fn commands_that_do_not_complete_are_execution_failures() {
        for ending in [Ending::TimedOut { after_ms: 5 }, Ending::Signaled { signal: 9 }, Ending::Exited { code: 127 }] {
            assert!(matches!(after_check(&ending, 1, 3), Step::Halt(HaltReason::ExecutionFailure, _)), "{ending:?}");
        }
        assert!(matches!(after_exec(&Ending::Exited { code: 2 }), Step::Halt(HaltReason::ExecutionFailure, _)));
        assert_eq!(after_exec(&Ending::Exited { code: 0 }), Step::Continue);
        assert_eq!(after_exec(&Ending::Interrupted { signal: 15 }), Step::Interrupted(15));
    }
}
