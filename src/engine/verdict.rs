//! The verdict of a check: pass, fail, or could-not-run. The one home of the 126/127 rule (the
//! shell's "cannot execute" and "not found" exits mean the check never ran, not that it failed).

use crate::ending::Ending;
use crate::receipt::events::CheckResult;
use serde::Serialize;

/// How a check ended, normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Exited 0.
    Pass,
    /// Exited non-zero (not 126/127): a red iteration, not a failure of the run.
    Fail,
    /// 126/127 (the shell could not find or run it), a signal, a timeout, no start at all, or an
    /// interrupt of loopexec itself.
    CouldNotRun,
}

impl Verdict {
    /// The verdict of a recorded check. Today it follows from the ending alone; the whole result
    /// (exit code, failing and collected sets, report error) is what a verdict that also trusts
    /// or distrusts the report (a green exit with a failing set) will read.
    pub fn of_check(check: &CheckResult) -> Verdict {
        Verdict::of(&check.ending)
    }

    /// The verdict of a command's ending.
    pub fn of(ending: &Ending) -> Verdict {
        match ending {
            Ending::Exited { code: 0 } => Verdict::Pass,
            Ending::Exited { code } if shell_could_not_run(*code) => Verdict::CouldNotRun,
            Ending::Exited { .. } => Verdict::Fail,
            _ => Verdict::CouldNotRun,
        }
    }
}

/// Exit 126 (found but not executable) and 127 (not found) come from the shell, not the check.
pub fn shell_could_not_run(code: i32) -> bool {
    matches!(code, 126 | 127)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_normalise_to_three_verdicts() {
        assert_eq!(Verdict::of(&Ending::Exited { code: 0 }), Verdict::Pass);
        assert_eq!(Verdict::of(&Ending::Exited { code: 3 }), Verdict::Fail);
        assert_eq!(Verdict::of(&Ending::Exited { code: 126 }), Verdict::CouldNotRun);
        assert_eq!(Verdict::of(&Ending::Exited { code: 127 }), Verdict::CouldNotRun);
        assert_eq!(Verdict::of(&Ending::TimedOut { after_ms: 5 }), Verdict::CouldNotRun);
        assert_eq!(Verdict::of(&Ending::Signaled { signal: 9 }), Verdict::CouldNotRun);
    }
}
