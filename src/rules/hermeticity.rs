//! The hermeticity rule: a check that tried to reach beyond its zone while judging the agent's
//! work halts the run (`hermeticity_violation`), since its verdict may rest on the network's
//! absence rather than on the work.
//!
//! The exec zone has no route out of its network namespace, and its kernel counts every attempt
//! to send to an outside address (`CheckResult::outside_attempts`, sandbox `outside_reach`),
//! whatever the API or language. The rule holds against t0: a check whose run on the untouched
//! tree (the `check_baseline`) already tried is the operator's own non-hermetic check, recorded
//! but not halted on (`doctor --check`'s hermeticity gate says whether it changes the verdict);
//! a check that tries only on the agent's trees does so because of the agent's change. Every
//! check of an agent's iteration counts: the iteration's own, its confirmation reruns and the
//! held-out check.

use super::decide::Step;
use crate::halt::HaltReason;
use crate::receipt::events::CheckResult;
use crate::receipt::history::IterationRecord;

/// The halt an iteration's checks decide under this rule, if any. `t0`: the check on t0.
pub fn decide_on(record: &IterationRecord, t0: Option<&CheckResult>) -> Option<Step> {
    if record.iteration == 0 || reached_out(t0) {
        return None;
    }
    let checks = record
        .check
        .iter()
        .map(|c| (c, "the check".to_string()))
        .chain(
            record
                .confirmations
                .iter()
                .map(|c| (&c.check, format!("confirmation rerun {}", c.confirmation))),
        )
        .chain(
            record
                .holdout
                .iter()
                .map(|h| (&h.check, "the held-out check".to_string())),
        );
    let (check, which) = checks.into_iter().find(|(c, _)| reached_out(Some(c)))?;
    let attempts = check.outside_attempts.unwrap_or_default();
    let n = record.iteration;
    let times = match attempts.total() {
        1 => "once".to_string(),
        k => format!("{k} times"),
    };
    Some(Step::Halt(
        HaltReason::HermeticityViolation,
        format!(
            "{which} of iteration {n} tried to reach an address outside its zone {times} (IPv4 {}, IPv6 {}; \
             the exec zone has no network, so every attempt failed): its verdict may rest on the network's absence, \
             not on the work; the check on t0 tried none, so the agent's change brought it",
            attempts.ipv4, attempts.ipv6
        ),
    ))
}

fn reached_out(check: Option<&CheckResult>) -> bool {
    check
        .and_then(|c| c.outside_attempts)
        .is_some_and(|a| a.total() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::{ConfirmationRecord, OutsideAttemptsRecord};

    fn check(iteration: u64, attempts: Option<(u64, u64)>) -> CheckResult {
        let mut c = crate::receipt::events::sample::check_with_sets(&[], &[]);
        c.iteration = iteration;
        c.outside_attempts = attempts.map(|(ipv4, ipv6)| OutsideAttemptsRecord { ipv4, ipv6 });
        c
    }

    fn iteration(n: u64, attempts: Option<(u64, u64)>) -> IterationRecord {
        IterationRecord {
            iteration: n,
            check: Some(check(n, attempts)),
            ..Default::default()
        }
    }

    #[test]
    fn a_check_of_the_agents_tree_that_reached_out_halts_hermeticity_violation() {
        let t0 = check(0, Some((0, 0)));
        let Some(Step::Halt(reason, detail)) = decide_on(&iteration(2, Some((3, 1))), Some(&t0))
        else {
            panic!("no halt")
        };
        assert_eq!(reason, HaltReason::HermeticityViolation);
        assert!(
            detail.starts_with("the check of iteration 2 tried to reach an address outside its zone 4 times (IPv4 3, IPv6 1;"),
            "{detail}"
        );
    }

    #[test]
    fn a_check_that_reached_nowhere_decides_nothing() {
        let t0 = check(0, Some((0, 0)));
        assert_eq!(decide_on(&iteration(1, Some((0, 0))), Some(&t0)), None);
        assert_eq!(decide_on(&iteration(1, None), Some(&t0)), None);
    }

    #[test]
    fn a_check_that_already_reached_out_on_t0_is_recorded_not_halted_on() {
        let t0 = check(0, Some((2, 0)));
        assert_eq!(decide_on(&iteration(1, Some((5, 0))), Some(&t0)), None);
    }

    #[test]
    fn without_a_counted_t0_the_agents_checks_are_held_to_none() {
        assert!(decide_on(&iteration(1, Some((1, 0))), None).is_some());
        let uncounted = check(0, None);
        assert!(decide_on(&iteration(1, Some((1, 0))), Some(&uncounted)).is_some());
    }

    #[test]
    fn t0_itself_is_never_halted_by_this_rule() {
        assert_eq!(decide_on(&iteration(0, Some((4, 4))), None), None);
    }

    #[test]
    fn a_confirmation_rerun_that_reached_out_is_named() {
        let mut record = iteration(3, Some((0, 0)));
        record.confirmations.push(ConfirmationRecord {
            confirmation: 2,
            same_tree_as: None,
            agrees: true,
            stability_lower_bound: 0.5,
            confidence: 0.95,
            stability_target: 0.99,
            check: check(3, Some((0, 1))),
        });
        let Some(Step::Halt(_, detail)) = decide_on(&record, Some(&check(0, Some((0, 0))))) else {
            panic!("no halt")
        };
        assert!(detail.starts_with("confirmation rerun 2 of iteration 3 tried to reach an address outside its zone once (IPv4 0, IPv6 1;"), "{detail}");
    }
}
