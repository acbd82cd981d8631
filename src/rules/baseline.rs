//! The t0 baseline's decisions as pure rules (the engine's t0 baseline, `engine::baseline`, runs
//! the check on t0 and its confirmation reruns; these decide on what the receipt holds of them,
//! live, resumed and replayed alike). It owns:
//!
//! - [`succeeds_at_t0`]: whether t0's check is a success at iteration 0 (a green, or a red whose
//!   targets all already pass: `super::targets::met_on_t0`);
//! - [`T0Success`] and [`decide_t0_success`]: a success on t0 stands only once its
//!   `confirm_runs` confirmation reruns agree (`check_not_deterministic` when one disagrees, as
//!   at any iteration, `super::decide::flake`; `internal_error` when fewer were recorded).

use super::decide::Step;
use super::verdict::Verdict;
use crate::halt::HaltReason;
use crate::receipt::events::CheckResult;
use crate::receipt::history::History;

/// Whether `check` on t0 is a success at iteration 0 under the `targets` patterns: a green, or a
/// red whose targets all already pass (`super::targets::met_on_t0`). Either stands (and is
/// cached) only once its confirmation reruns agree.
pub fn succeeds_at_t0(targets: &[String], check: &CheckResult) -> bool {
    Verdict::of_check(check) == Verdict::Pass || super::targets::met_on_t0(targets, check)
}

/// What succeeded on t0: the check, or (a red check) every target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum T0Success {
    Green,
    /// The detail of the targets' halt (`engine::targets`).
    TargetsMet(String),
}

/// The decision on a t0 baseline that succeeded (green, or its targets met) as the receipt holds
/// it (live and resumed alike): a confirmation rerun that disagreed is a flake
/// (`check_not_deterministic`, or `execution_failure` for a rerun that could not start), as at
/// any iteration; confirmed by `confirm_runs` agreeing reruns, success at iteration 0. Fewer is
/// never success: every path reaching here ran the reruns or stopped before, so it is an
/// `internal_error` (fail closed), the agent not called on an unconfirmed success.
pub fn decide_t0_success(history: &History, confirm_runs: u64, success: &T0Success) -> Step {
    let confirmations = &history.baseline_confirmations;
    if let Some(flaky) = confirmations.iter().find(|c| !c.agrees) {
        return super::decide::flake(flaky, 0);
    }
    if (confirmations.len() as u64) < confirm_runs {
        return Step::Halt(
            HaltReason::InternalError,
            format!(
                "the success on t0 holds {} confirmation rerun(s), not the {confirm_runs} the run asks for: neither success nor an agent call on it",
                confirmations.len()
            ),
        );
    }
    let source = match history.check_baseline.as_ref().is_some_and(|b| b.cache_hit) {
        true => "its cached baseline",
        false => "the baseline run before any agent call",
    };
    let confirmed = match confirmations.len() {
        0 => String::new(),
        n => format!(", confirmed by {n} agreeing rerun(s)"),
    };
    let detail = match success {
        T0Success::Green => format!("the check already passes on t0 ({source}{confirmed}): halted at iteration 0, the agent was not called"),
        T0Success::TargetsMet(detail) if confirmed.is_empty() => detail.clone(),
        T0Success::TargetsMet(detail) => format!("{detail}; t0 is {source}{confirmed}"),
    };
    Step::Halt(HaltReason::SuccessConditionMet, detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ending::Ending;
    use crate::receipt::events::{sample, CheckBaselineRecord, ConfirmationRecord, Event};

    fn green_t0() -> CheckResult {
        let Event::CheckResult(mut check) = sample::check_result(0, 0) else {
            unreachable!()
        };
        check.iteration = 0;
        check
    }

    fn confirmation(k: u64, agrees: bool) -> ConfirmationRecord {
        ConfirmationRecord {
            confirmation: k,
            same_tree_as: None,
            agrees,
            stability_lower_bound: 0.27,
            confidence: 0.95,
            stability_target: 0.95,
            check: green_t0(),
        }
    }

    fn green_t0_history(confirmations: Vec<ConfirmationRecord>) -> History {
        let record = CheckBaselineRecord {
            check: green_t0(),
            tree_id: None,
            cache_key: None,
            cache_hit: false,
            cache_note: None,
            sets_unmeasured: None,
            inactive_guards: None,
        };
        History {
            check_baseline: Some(record),
            baseline_confirmations: confirmations,
            ..Default::default()
        }
    }

    #[test]
    fn a_green_t0_is_success_once_confirmed_by_the_reruns_the_run_asks_for() {
        assert_eq!(
            decide_t0_success(&green_t0_history(vec![confirmation(1, true)]), 1, &T0Success::Green),
            Step::Halt(
                HaltReason::SuccessConditionMet,
                "the check already passes on t0 (the baseline run before any agent call, confirmed by 1 agreeing rerun(s)): halted at iteration 0, the agent was not called".into()
            )
        );
        assert!(matches!(
            decide_t0_success(&green_t0_history(vec![]), 0, &T0Success::Green),
            Step::Halt(HaltReason::SuccessConditionMet, _)
        ));
    }

    #[test]
    fn a_success_on_t0_with_fewer_confirmations_than_the_run_asks_for_is_an_internal_error_never_an_agent_call(
    ) {
        let targets = T0Success::TargetsMet("every target already passes on t0".into());
        for (success, held, asked) in [
            (&T0Success::Green, vec![], 1),
            (&T0Success::Green, vec![confirmation(1, true)], 3),
            (&targets, vec![], 2),
        ] {
            let held_n = held.len();
            assert_eq!(
                decide_t0_success(&green_t0_history(held), asked, success),
                Step::Halt(
                    HaltReason::InternalError,
                    format!("the success on t0 holds {held_n} confirmation rerun(s), not the {asked} the run asks for: neither success nor an agent call on it")
                )
            );
        }
    }

    #[test]
    fn a_red_t0_whose_targets_all_pass_is_success_once_confirmed_and_names_its_confirmations() {
        let targets = T0Success::TargetsMet("every target already passes on t0 (the check fails only on 1 pre-existing failure(s)): halted at iteration 0, the agent was not called".into());
        assert_eq!(
            decide_t0_success(&green_t0_history(vec![confirmation(1, true), confirmation(2, true)]), 2, &targets),
            Step::Halt(
                HaltReason::SuccessConditionMet,
                "every target already passes on t0 (the check fails only on 1 pre-existing failure(s)): halted at iteration 0, the agent was not called; t0 is the baseline run before any agent call, confirmed by 2 agreeing rerun(s)".into()
            )
        );
    }

    #[test]
    fn a_green_t0_whose_rerun_disagrees_is_a_flake_as_at_any_iteration() {
        let mut red = confirmation(1, false);
        red.check.ending = Ending::Exited { code: 1 };
        red.check.check_exit = Some(1);
        let Step::Halt(reason, detail) =
            decide_t0_success(&green_t0_history(vec![red]), 1, &T0Success::Green)
        else {
            panic!("no halt")
        };
        assert_eq!(reason, HaltReason::CheckNotDeterministic);
        assert!(detail.starts_with("the check passed on t0, but confirmation rerun 1 on the same tree was red: a flake, not success"), "{detail}");
    }

    #[test]
    fn a_red_t0_is_no_success_without_targets_that_all_pass() {
        let mut red = green_t0();
        red.ending = Ending::Exited { code: 1 };
        red.check_exit = Some(1);
        red.collected_set = Some(vec!["a".into(), "b".into()]);
        red.failing_set = Some(vec!["a".into()]);
        red.skipped_set = None;
        assert!(!succeeds_at_t0(&[], &red));
        assert!(succeeds_at_t0(&[], &green_t0()));
    }
}
