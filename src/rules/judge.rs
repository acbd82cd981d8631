//! The judge's rule: the halt (or not) a judged green comes to, from the recorded answer.

use super::decide::Step;
use crate::halt::HaltReason;
use crate::receipt::events::{JudgeOutcome, JudgeRecord};

/// The halt (or not) a judged green iteration comes to; `detail` is the green check's sentence.
pub fn decide_on(judge: &JudgeRecord, detail: String) -> Step {
    let n = judge.iteration;
    match judge.outcome {
        JudgeOutcome::Approve => Step::Halt(HaltReason::SuccessConditionMet, format!("{detail}; the judge approved")),
        JudgeOutcome::Veto if judge.reward_hacking => {
            Step::Halt(HaltReason::RewardHackingDetected, format!("the judge vetoed iteration {n} as reward hacking: {}", judge.reason))
        }
        JudgeOutcome::Veto => Step::Halt(HaltReason::ReviewerRejected, format!("the judge vetoed iteration {n}: {}", judge.reason)),
        JudgeOutcome::Failed => Step::Halt(
            HaltReason::EscalationPending,
            format!("the check passed at iteration {n} but the judge gave no answer ({}); a human decides", judge.reason),
        ),
    }
}
