//! The halt derivation: whether the `halt` a receipt records follows from the observations it
//! recorded, re-derived with the same rule the live loop decides with ([`super::decide`]).
//! `verify` (its `halt_derivation` check), `run --resume` and `explain-halt` call it, so a
//! correctly chained `halt` line claiming what the observations do not support is refused, never
//! trusted.
//!
//! What it re-derives, from the receipt alone:
//! - every iteration before the halted one that recorded its agent step and its check: its
//!   recorded stages decide no halt (a run that went on past a decided halt is inconsistent);
//! - the halted iteration: the reason its recorded stages decide (the exec's ending, the
//!   snapshot's protected changes, each guard finding, the confirmations, the check's verdict and
//!   evidence, the progress event's ratchet and no-convergence judgement, the held-out check, the
//!   judge's answer, the awareness findings) equals the recorded reason. An interrupted
//!   iteration decides nothing, as the engine's resume holds: a halt recorded at its number by
//!   the resume follows only as the cap it used, or is a supervisor failure accepted as recorded.
//!
//! What it does not re-derive, and says so by name ([`Derivation::not_replayed`]):
//! - the supervisor's own failures (`workspace_invalid`, `isolation_unsatisfiable`,
//!   `credential_scope_invalid`, `internal_error`, and an `execution_failure` no recorded stage
//!   decides): they record what the machine did, not an observation of the agent's work; they
//!   are accepted as recorded (a recorded success is never accepted this way: it must follow);
//! - a halt before the first agent step (the t0 baseline, the reference, the doctor gates):
//!   recorded in run-level events this rule does not replay yet;
//! - the iteration cap reached before an iteration started;
//! - a receipt whose `run_start` pins no `max_iterations` (written by an earlier version).

use super::decide::{decide, Step};
use super::mode::Mode;
use crate::halt::HaltReason;
use crate::receipt::history::{History, IterationRecord};

/// A recorded halt its observations do not give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The iteration whose recorded stages decide otherwise.
    pub iteration: u64,
    pub recorded: HaltReason,
    /// What the stages decide: a halt reason, or `continue` (no halt).
    pub derived: String,
    /// The sentence naming both.
    pub detail: String,
}

/// A recorded halt that follows from its observations, or that this rule could not replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derivation {
    pub recorded: HaltReason,
    /// The iterations whose decisions were re-derived.
    pub iterations: u64,
    /// Why the final halt was accepted without being re-derived, when it was.
    pub not_replayed: Option<String>,
}

impl Derivation {
    /// One sentence for `verify` and `explain-halt`.
    pub fn detail(&self) -> String {
        match &self.not_replayed {
            None => format!("{} follows from the recorded observations ({} iteration decision(s) re-derived)", self.recorded, self.iterations),
            Some(why) => format!("{} not replayable: {why} ({} iteration decision(s) re-derived)", self.recorded, self.iterations),
        }
    }
}

/// The reasons that record a failure of the supervisor's own machinery, not an observation.
fn operational(reason: HaltReason) -> bool {
    matches!(
        reason,
        HaltReason::WorkspaceInvalid | HaltReason::IsolationUnsatisfiable | HaltReason::CredentialScopeInvalid | HaltReason::InternalError | HaltReason::ExecutionFailure
    )
}

fn step_name(step: &Step) -> String {
    match step {
        Step::Continue => "continue (no halt)".into(),
        Step::Halt(reason, _) => reason.as_str().into(),
        Step::Interrupted(signal) => format!("interrupted by signal {signal}"),
    }
}

/// Whether a recorded iteration is one whose every stage the rule can see: its agent step and
/// its check were recorded, and it was not interrupted.
fn complete(record: &IterationRecord) -> bool {
    record.exec.is_some() && record.check.is_some() && record.interrupted.is_none()
}

/// Re-derive the run's halt from its history. `Ok(None)` when the receipt records no halt.
pub fn derive_halt(history: &History) -> Result<Option<Derivation>, Mismatch> {
    let Some(halt) = &history.halt else { return Ok(None) };
    let recorded = halt.halt_reason;
    let accept = |iterations: u64, why: Option<String>| Ok(Some(Derivation { recorded, iterations, not_replayed: why }));
    let Some(start) = &history.start else {
        return accept(0, Some("the receipt has no run_start".into()));
    };
    let Some(Mode::CheckFixpoint) = Mode::of_name(&start.mode) else {
        return accept(0, Some(format!("mode {} has no decision rule here", crate::inert::inert(&start.mode))));
    };
    let Some(max_iterations) = start.config.get("max_iterations").and_then(serde_json::Value::as_u64) else {
        return accept(0, Some("its run_start pins no max_iterations (a receipt of an earlier version)".into()));
    };
    let halted = history.iterations.iter().rev().find(|r| r.iteration == halt.iteration && r.exec.is_some());
    let mut derived = 0u64;
    for record in history.iterations.iter().filter(|r| complete(r) && Some(r.iteration) != halted.map(|h| h.iteration)) {
        derived += 1;
        if let step @ Step::Halt(..) = decide(Mode::CheckFixpoint, record, max_iterations) {
            let name = step_name(&step);
            return Err(Mismatch {
                iteration: record.iteration,
                recorded,
                detail: format!("iteration {} recorded stages that decide {name}, but the run went on and halted {recorded} at iteration {}", record.iteration, halt.iteration),
                derived: name,
            });
        }
    }
    let Some(record) = halted else {
        if halt.iteration > history.last_started {
            return Err(Mismatch {
                iteration: halt.iteration,
                recorded,
                derived: "no such iteration".into(),
                detail: format!("the halt records {recorded} at iteration {}, but the receipt started no iteration past {}", halt.iteration, history.last_started),
            });
        }
        if recorded == HaltReason::SuccessConditionMet && halt.iteration > 0 {
            return Err(Mismatch {
                iteration: halt.iteration,
                recorded,
                derived: "no recorded agent step".into(),
                detail: format!("the halt claims success at iteration {} but the receipt records no agent step there", halt.iteration),
            });
        }
        return accept(derived, Some(format!("halted at iteration {} before any recorded agent step of it (a run-level halt: t0 baseline, reference, doctor gates or the iteration cap)", halt.iteration)));
    };
    derived += 1;
    // An interrupted iteration (a signal, a supervisor lost) decides nothing, whatever stages it
    // recorded: the resume goes on from the next one (engine::lifecycle's `pending`), so only the
    // cap it used or a failure of the resume itself (a mint hook, a zone) halts at its number.
    let (step, name) = match &record.interrupted {
        Some(cause) => (Step::Continue, format!("no halt: interrupted ({})", crate::inert::inert(cause))),
        None => {
            let step = decide(Mode::CheckFixpoint, record, max_iterations);
            let name = step_name(&step);
            (step, name)
        }
    };
    match &step {
        Step::Halt(reason, _) if *reason == recorded => accept(derived, None),
        // The machine failing after its stages decided is its own record (a delivery that
        // could not be made, a zone that could not start the next stage); a recorded success is never one of these.
        Step::Halt(..) | Step::Continue if operational(recorded) => {
            accept(derived, Some(format!("{recorded} records the supervisor's own failure at iteration {}, accepted as recorded ({name} by the stages)", record.iteration)))
        }
        Step::Continue if recorded == HaltReason::MaxIterationsReached && record.iteration >= max_iterations => accept(derived, None),
        // A green whose later stages (confirmations, judge, canary) were never recorded: only the
        // supervisor's failure can end it.
        _ => Err(Mismatch {
            iteration: record.iteration,
            recorded,
            detail: format!("the halt records {recorded} at iteration {}, but that iteration's recorded stages decide {name}", record.iteration),
            derived: name,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::{sample, Event, Recorded};

    fn history(checks: &[i32], halt: HaltReason, at: u64) -> History {
        let mut events = vec![sample::run_start("r")];
        for (i, code) in checks.iter().enumerate() {
            let n = i as u64 + 1;
            events.push(Event::IterationStart { iteration: n });
            events.push(sample::exec_result(n, 0));
            let Event::CheckResult(mut check) = sample::check_result(n, *code) else { unreachable!() };
            check.evidence = None;
            events.push(Event::CheckResult(check));
        }
        events.push(sample::halt(halt, at));
        let recorded: Vec<Recorded> = events.into_iter().map(|event| Recorded { event, line: Default::default() }).collect();
        History::fold(&recorded)
    }

    #[test]
    fn a_success_recorded_after_a_red_check_is_a_mismatch_naming_the_iteration_and_both_reasons() {
        let found = derive_halt(&history(&[1, 1], HaltReason::SuccessConditionMet, 2)).unwrap_err();
        assert_eq!(found.iteration, 2);
        assert_eq!(found.recorded, HaltReason::SuccessConditionMet);
        assert_eq!(found.derived, "continue (no halt)");
    }

    #[test]
    fn a_success_after_a_green_check_follows() {
        let found = derive_halt(&history(&[1, 0], HaltReason::SuccessConditionMet, 2)).unwrap().unwrap();
        assert_eq!(found, Derivation { recorded: HaltReason::SuccessConditionMet, iterations: 2, not_replayed: None });
    }

    #[test]
    fn a_run_that_went_on_past_a_green_is_inconsistent() {
        let found = derive_halt(&history(&[0, 1, 1], HaltReason::MaxIterationsReached, 3)).unwrap_err();
        assert_eq!((found.iteration, found.derived.as_str()), (1, "success_condition_met"));
    }

    #[test]
    fn red_checks_to_the_cap_follow_as_max_iterations_reached() {
        let found = derive_halt(&history(&[1, 1, 1], HaltReason::MaxIterationsReached, 3)).unwrap().unwrap();
        assert_eq!(found.not_replayed, None);
    }

    #[test]
    fn a_cap_claimed_before_the_cap_is_a_mismatch() {
        let found = derive_halt(&history(&[1], HaltReason::MaxIterationsReached, 1)).unwrap_err();
        assert_eq!(found.derived, "continue (no halt)");
    }

    #[test]
    fn a_supervisor_failure_is_accepted_as_recorded_and_said_to_be_unreplayed() {
        let found = derive_halt(&history(&[1], HaltReason::WorkspaceInvalid, 1)).unwrap().unwrap();
        assert!(found.not_replayed.unwrap().contains("the supervisor's own failure"));
    }

    #[test]
    fn a_success_claimed_where_no_agent_step_was_recorded_is_a_mismatch() {
        assert!(derive_halt(&history(&[1], HaltReason::SuccessConditionMet, 2)).is_err());
    }

    #[test]
    fn a_halt_at_an_iteration_the_receipt_never_started_is_a_mismatch() {
        let found = derive_halt(&history(&[1], HaltReason::NoProgressDetected, 4)).unwrap_err();
        assert_eq!(found.detail, "the halt records no_progress_detected at iteration 4, but the receipt started no iteration past 1");
    }

    /// `history` of red `checks`, then one more iteration that recorded its agent step (and, when
    /// `green`, a green check) before it was interrupted by SIGINT, with `halt` recorded at its
    /// number by the resume that followed.
    fn interrupted_at_the_last(checks: &[i32], green: bool, halt: HaltReason) -> History {
        let mut events = vec![sample::run_start("r")];
        let checked = |n: u64, code: i32| {
            let Event::CheckResult(mut check) = sample::check_result(n, code) else { unreachable!() };
            check.evidence = None;
            Event::CheckResult(check)
        };
        for (i, code) in checks.iter().enumerate() {
            let n = i as u64 + 1;
            events.extend([Event::IterationStart { iteration: n }, sample::exec_result(n, 0), checked(n, *code)]);
        }
        let last = checks.len() as u64 + 1;
        events.push(Event::IterationStart { iteration: last });
        if green {
            events.extend([sample::exec_result(last, 0), checked(last, 0)]);
        } else {
            let Event::ExecResult(mut exec) = sample::exec_result(last, 0) else { unreachable!() };
            exec.ending = crate::ending::Ending::Interrupted { signal: 2 };
            events.push(Event::ExecResult(exec));
        }
        events.push(Event::IterationInterrupted { iteration: last, cause: "SIGINT".into() });
        events.push(sample::halt(halt, last));
        let recorded: Vec<Recorded> = events.into_iter().map(|event| Recorded { event, line: Default::default() }).collect();
        History::fold(&recorded)
    }

    #[test]
    fn the_cap_used_by_an_interrupted_last_iteration_follows_as_max_iterations_reached_whatever_it_recorded() {
        // run_start pins max_iterations = 3; iterations 1 and 2 red, 3 interrupted in its agent
        // step, or after a green check, before its confirmation.
        for green in [false, true] {
            let found = derive_halt(&interrupted_at_the_last(&[1, 1], green, HaltReason::MaxIterationsReached)).unwrap().unwrap();
            assert_eq!(found, Derivation { recorded: HaltReason::MaxIterationsReached, iterations: 3, not_replayed: None }, "green {green}");
        }
    }

    #[test]
    fn a_cap_claimed_at_an_interrupted_iteration_before_the_cap_is_a_mismatch() {
        let found = derive_halt(&interrupted_at_the_last(&[1], false, HaltReason::MaxIterationsReached)).unwrap_err();
        assert_eq!(found.detail, "the halt records max_iterations_reached at iteration 2, but that iteration's recorded stages decide no halt: interrupted (SIGINT)");
    }

    #[test]
    fn a_supervisor_failure_at_the_resume_after_an_interrupted_iteration_is_accepted_as_recorded() {
        let found = derive_halt(&interrupted_at_the_last(&[1], false, HaltReason::CredentialScopeInvalid)).unwrap().unwrap();
        assert_eq!(
            found.not_replayed.as_deref(),
            Some("credential_scope_invalid records the supervisor's own failure at iteration 2, accepted as recorded (no halt: interrupted (SIGINT) by the stages)")
        );
    }

    #[test]
    fn a_judgement_claimed_at_an_interrupted_iteration_is_a_mismatch_even_after_a_green_check() {
        for (green, claimed) in [(true, HaltReason::SuccessConditionMet), (false, HaltReason::NoProgressDetected)] {
            let found = derive_halt(&interrupted_at_the_last(&[1, 1], green, claimed)).unwrap_err();
            assert_eq!((found.iteration, found.derived.as_str()), (3, "no halt: interrupted (SIGINT)"), "{claimed}");
        }
    }

    #[test]
    fn a_receipt_without_a_pinned_cap_is_said_to_be_unreplayable() {
        let mut h = history(&[1], HaltReason::SuccessConditionMet, 1);
        if let Some(s) = h.start.as_mut() {
            s.config = serde_json::json!({});
        }
        let found = derive_halt(&h).unwrap().unwrap();
        assert!(found.not_replayed.unwrap().contains("max_iterations"));
    }
}
