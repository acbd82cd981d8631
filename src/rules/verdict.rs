//! The verdict of a check: pass, fail, disagree, or could-not-run. The one home of the 126/127
//! rule (the shell's "cannot execute" and "not found" exits mean the check never ran, not that it
//! failed) and of "the verdict is the exit code AND the evidence": a zero exit whose evidence
//! (reports, libtest output, runner summaries; `crate::testreport::agreement`) disagrees is not a
//! pass.

use crate::ending::Ending;
use crate::receipt::events::CheckResult;
use serde::Serialize;

/// How a check ended, normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Exited 0, and the evidence agrees.
    Pass,
    /// Exited 0, but a declared report is missing or unusable, shows failures or zero tests, or
    /// another source contradicts the exit code (`metric_integrity_violation`).
    Disagrees,
    /// Exited non-zero (not 126/127): a red iteration, not a failure of the run.
    Fail,
    /// 126/127 (the shell could not find or run it), a signal, a timeout, no start at all, or an
    /// interrupt of loopexec itself.
    CouldNotRun,
}

impl Verdict {
    /// The verdict of a recorded check: its ending and its recorded evidence (a zero exit passes
    /// only through [`evidence_whole`]).
    pub fn of_check(check: &CheckResult) -> Verdict {
        Verdict::of_evidence(&check.ending, !evidence_whole(check))
    }

    /// The verdict of an ending whose evidence does or does not disagree with it.
    pub fn of_evidence(ending: &Ending, disagrees: bool) -> Verdict {
        match Verdict::of(ending) {
            Verdict::Pass if disagrees => Verdict::Disagrees,
            other => other,
        }
    }

    /// The verdict of a command's ending alone.
    pub fn of(ending: &Ending) -> Verdict {
        match ending {
            Ending::Exited { code: 0 } => Verdict::Pass,
            Ending::Exited { code } if shell_could_not_run(*code) => Verdict::CouldNotRun,
            Ending::Exited { .. } => Verdict::Fail,
            _ => Verdict::CouldNotRun,
        }
    }
}

/// The evidence gate every success passes, a green and a red check's met targets alike: the
/// recorded evidence holds no disagreement. For a zero exit that is every rule of
/// `crate::testreport::agreement`; for a red one, its gaps (an incomplete unit, a binary without
/// its result line, truncated output, an unusable declared report, a report or summary
/// contradicting itself; its failures are what red means). A check whose evidence was not read
/// (it did not exit) has none recorded, and claims no success either way.
pub fn evidence_whole(check: &CheckResult) -> bool {
    check
        .evidence
        .as_ref()
        .is_none_or(|e| !e.disagrees() && e.disagreements.is_empty())
}

/// The details of what keeps a check's evidence from being whole ([`evidence_whole`]).
pub fn evidence_gaps(check: &CheckResult) -> Vec<&str> {
    check
        .evidence
        .iter()
        .flat_map(|e| &e.disagreements)
        .map(|d| d.detail.as_str())
        .collect()
}

/// The first [`crate::receipt::bounded::SAMPLE_ITEMS`] of [`evidence_gaps`] joined by `; `, then
/// ` (and N more)` when there are more: the bounded form every halt detail naming gaps uses (the
/// receipt's bound, `receipt::bounded`).
pub fn named_gaps(check: &CheckResult) -> String {
    const NAMED: usize = crate::receipt::bounded::SAMPLE_ITEMS;
    let all = evidence_gaps(check);
    let more = match all.len().saturating_sub(NAMED) {
        0 => String::new(),
        n => format!(" (and {n} more)"),
    };
    format!("{}{more}", all[..all.len().min(NAMED)].join("; "))
}

/// Exit 126 (found but not executable) and 127 (not found) come from the shell, not the check.
pub fn shell_could_not_run(code: i32) -> bool {
    matches!(code, 126 | 127)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::{sample, CheckEvidence, DisagreementRecord, Event};

    fn with_gaps(n: usize) -> CheckResult {
        let Event::CheckResult(mut check) = sample::check_result(1, 1) else {
            unreachable!()
        };
        let disagreements = (0..n)
            .map(|i| DisagreementRecord {
                kind: "unit_without_result".into(),
                subject: "stdout".into(),
                detail: format!("gap {i}"),
            })
            .collect();
        check.evidence = Some(CheckEvidence {
            verdict: "red".into(),
            reports: vec![],
            sources: vec![],
            disagreements,
        });
        check
    }

    #[test]
    fn named_gaps_names_the_first_twenty_then_counts_the_rest() {
        let named: Vec<String> = (0..20).map(|i| format!("gap {i}")).collect();
        assert_eq!(
            named_gaps(&with_gaps(10_000)),
            format!("{} (and 9980 more)", named.join("; "))
        );
        assert_eq!(named_gaps(&with_gaps(2)), "gap 0; gap 1");
        assert_eq!(named_gaps(&with_gaps(20)), named.join("; "));
    }

    #[test]
    fn exit_codes_normalise_to_three_verdicts() {
        assert_eq!(Verdict::of(&Ending::Exited { code: 0 }), Verdict::Pass);
        assert_eq!(Verdict::of(&Ending::Exited { code: 3 }), Verdict::Fail);
        assert_eq!(
            Verdict::of(&Ending::Exited { code: 126 }),
            Verdict::CouldNotRun
        );
        assert_eq!(
            Verdict::of(&Ending::Exited { code: 127 }),
            Verdict::CouldNotRun
        );
        assert_eq!(
            Verdict::of(&Ending::TimedOut { after_ms: 5 }),
            Verdict::CouldNotRun
        );
        assert_eq!(
            Verdict::of(&Ending::Signaled { signal: 9 }),
            Verdict::CouldNotRun
        );
    }

    #[test]
    fn disagreeing_evidence_keeps_a_zero_exit_from_passing_and_never_makes_red_green() {
        assert_eq!(
            Verdict::of_evidence(&Ending::Exited { code: 0 }, true),
            Verdict::Disagrees
        );
        assert_eq!(
            Verdict::of_evidence(&Ending::Exited { code: 0 }, false),
            Verdict::Pass
        );
        assert_eq!(
            Verdict::of_evidence(&Ending::Exited { code: 1 }, true),
            Verdict::Fail
        );
    }
}
