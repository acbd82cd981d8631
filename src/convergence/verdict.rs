//! The operator's verdict on a halted run, as `explain-halt` gives it: one of `done`,
//! `raise_the_limit` (still improving at the cap), `do_not_retry` (stalled, oscillating,
//! regressed, infeasible), `fix_the_check` (the oracle is untrusted or inadequate) or
//! `human_needed`, computed from the halt reason and the trajectory of failing targets alone, so
//! `explain-halt` reaches it offline from the receipt.

use crate::halt::{ExitClass, HaltReason};
use serde::Serialize;

/// What the operator should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Done,
    RaiseTheLimit,
    DoNotRetry,
    FixTheCheck,
    HumanNeeded,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Done => "done",
            Verdict::RaiseTheLimit => "raise_the_limit",
            Verdict::DoNotRetry => "do_not_retry",
            Verdict::FixTheCheck => "fix_the_check",
            Verdict::HumanNeeded => "human_needed",
        }
    }
}

/// The verdict with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    pub verdict: Verdict,
    /// |F_i|: failing targets at t0 and after each accepted iteration, in order.
    pub trajectory: Vec<(u64, usize)>,
    /// For `raise_the_limit`: the observed rate (failing targets fixed per iteration) and the
    /// iterations it suggests adding to the cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub more_iterations: Option<u64>,
    /// Why this verdict, in one sentence.
    pub because: String,
}

/// How many of the last accepted iterations the cap verdict looks at.
pub const WINDOW: usize = 3;

/// Explain a halt. `trajectory` is |F_i| at t0 and after each accepted iteration (empty when the
/// run had no report: progress cannot be measured then, and the verdict says so).
pub fn explain(reason: HaltReason, trajectory: &[(u64, usize)]) -> Explanation {
    use HaltReason::*;
    let fixed = |verdict, because: &str| Explanation {
        verdict,
        trajectory: trajectory.to_vec(),
        rate: None,
        more_iterations: None,
        because: because.to_string(),
    };
    match (reason, reason.class()) {
        (SuccessConditionMet, _) => fixed(Verdict::Done, "the check passed and every guard held"),
        (MaxIterationsReached | BudgetExceeded, _) => at_the_cap(trajectory),
        (_, ExitClass::NoConvergence) => fixed(
            Verdict::DoNotRetry,
            "the loop stopped converging; more iterations of the same task will not help",
        ),
        (ObjectiveUnverified, _) | (_, ExitClass::OracleUntrusted | ExitClass::CheckInadequate) => {
            fixed(
                Verdict::FixTheCheck,
                "the check cannot be trusted as an oracle for this change",
            )
        }
        _ => fixed(
            Verdict::HumanNeeded,
            "the run stopped on something only a person can resolve",
        ),
    }
}

fn at_the_cap(trajectory: &[(u64, usize)]) -> Explanation {
    let window = &trajectory[trajectory.len().saturating_sub(WINDOW + 1)..];
    let explanation = |verdict, rate, more_iterations, because: String| Explanation {
        verdict,
        trajectory: trajectory.to_vec(),
        rate,
        more_iterations,
        because,
    };
    let (Some(&(first_at, first)), Some(&(last_at, last))) = (window.first(), window.last()) else {
        return explanation(
            Verdict::HumanNeeded,
            None,
            None,
            "progress cannot be measured: the run recorded no failing targets (declare a --report)"
                .into(),
        );
    };
    if window.len() < 2 || last >= first || last_at <= first_at {
        return explanation(
            Verdict::DoNotRetry,
            None,
            None,
            format!("the failing targets did not shrink over the last accepted iterations ({first} -> {last})"),
        );
    }
    let rate = (first - last) as f64 / (last_at - first_at) as f64;
    let more = (last as f64 / rate).ceil() as u64;
    explanation(
        Verdict::RaiseTheLimit,
        Some(rate),
        Some(more),
        format!("still improving at the cap: {first} -> {last} failing targets, about {rate:.2} fixed per iteration"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_is_done() {
        assert_eq!(
            explain(HaltReason::SuccessConditionMet, &[(0, 2), (1, 0)]).verdict,
            Verdict::Done
        );
    }

    #[test]
    fn a_cap_reached_while_shrinking_is_raise_the_limit_with_a_suggested_extension() {
        let e = explain(HaltReason::MaxIterationsReached, &[(0, 6), (1, 4), (2, 2)]);
        assert_eq!(e.verdict, Verdict::RaiseTheLimit);
        assert_eq!(e.rate, Some(2.0));
        assert_eq!(e.more_iterations, Some(1));
    }

    #[test]
    fn the_rate_uses_only_the_last_window() {
        let e = explain(
            HaltReason::MaxIterationsReached,
            &[(0, 100), (1, 10), (2, 9), (3, 8), (4, 7)],
        );
        assert_eq!(e.rate, Some(1.0));
        assert_eq!(e.more_iterations, Some(7));
    }

    #[test]
    fn a_cap_reached_while_flat_is_do_not_retry() {
        assert_eq!(
            explain(HaltReason::MaxIterationsReached, &[(0, 2), (1, 2), (2, 2)]).verdict,
            Verdict::DoNotRetry
        );
    }

    #[test]
    fn a_cap_without_a_trajectory_says_progress_cannot_be_measured() {
        let e = explain(HaltReason::MaxIterationsReached, &[]);
        assert_eq!(e.verdict, Verdict::HumanNeeded);
        assert!(e.because.starts_with("progress cannot be measured"));
    }

    #[test]
    fn each_no_convergence_halt_is_do_not_retry() {
        let no_convergence = HaltReason::ALL
            .iter()
            .filter(|r| r.class() == ExitClass::NoConvergence);
        for &reason in no_convergence {
            assert_eq!(
                explain(reason, &[]).verdict,
                Verdict::DoNotRetry,
                "{reason}"
            );
        }
    }

    #[test]
    fn an_untrusted_or_inadequate_oracle_is_fix_the_check() {
        let untrusted = HaltReason::ALL.iter().filter(|r| {
            matches!(
                r.class(),
                ExitClass::OracleUntrusted | ExitClass::CheckInadequate
            )
        });
        for &reason in untrusted.chain([&HaltReason::ObjectiveUnverified]) {
            assert_eq!(
                explain(reason, &[]).verdict,
                Verdict::FixTheCheck,
                "{reason}"
            );
        }
    }

    #[test]
    fn a_guard_or_a_judge_halt_needs_a_human() {
        for reason in [
            HaltReason::RewardHackingDetected,
            HaltReason::ReviewerRejected,
            HaltReason::EscalationPending,
        ] {
            assert_eq!(
                explain(reason, &[]).verdict,
                Verdict::HumanNeeded,
                "{reason}"
            );
        }
    }
}
