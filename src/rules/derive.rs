//! The halt derivation: whether the `halt` a receipt records follows from the observations it
//! recorded, re-derived with the same rule the live loop decides with ([`super::decide`]).
//! `verify` (its `halt_derivation` check), `run --resume` and `explain-halt` call it, so a
//! correctly chained `halt` line claiming what the observations do not support is refused, never
//! trusted.
//!
//! What it re-derives, from the receipt alone:
//! - the recorded judgements of t0 and of every iteration that recorded its agent step and its
//!   check, recomputed from the recorded observations and the pinned configuration
//!   ([`super::judgements`]: `progress`, `set_guard`, `evidence`, `confirmation`, `t0_baseline`);
//!   one that differs is a [`Mismatch`] naming the iteration, the judgement and both values;
//! - every iteration before the halted one that recorded its agent step and its check: its
//!   recorded stages decide no halt (a run that went on past a decided halt is inconsistent);
//! - the halted iteration: the reason its recorded stages decide (the exec's ending, the
//!   snapshot's protected changes, each guard finding, the confirmations, the check's verdict and
//!   evidence, the progress event's ratchet and no-convergence judgement, the held-out check, the
//!   judge's answer, the awareness findings) equals the recorded reason, and a success stands on
//!   the confirmation reruns the run asks for. An interrupted iteration decides nothing, as the
//!   engine's resume holds: a halt recorded at its number by the resume follows only as the cap it
//!   used, or is a supervisor failure accepted as recorded;
//! - a halt before the first iteration: the t0 baseline's decision, from its record;
//! - the budget rules (`budget_exceeded`, `cost_anomaly`, `model_drift_detected`): replayed over
//!   the recorded usage events and the caps and model `run_start` pins, at each point the loop
//!   evaluates them; the recorded budget halt must be the first they decide, and a run that went
//!   on past one they decide is inconsistent.
//!
//! What it does not re-derive, and says so by name ([`Derivation::not_replayed`] for the halt,
//! [`Derivation::judgements_not_replayed`] for a judgement whose lists are in an artifact not
//! read back, or whose parameters the receipt does not pin):
//! - a `heartbeat_stale` no recorded stage decides: a stale heartbeat observed from outside the
//!   receipt (`watch --kill`); the halt's detail carries the observations;
//! - the supervisor's own failures (`workspace_invalid`, `isolation_unsatisfiable`,
//!   `credential_scope_invalid`, `internal_error`, and an `execution_failure` no recorded stage
//!   decides): they record what the machine did, not an observation of the agent's work; they
//!   are accepted as recorded (a recorded success is never accepted this way: it must follow);
//! - a halt at iteration 0 that t0's record does not decide (the reference, the doctor gates, the
//!   targets' selection, the machinery), and the iteration cap reached before an iteration started;
//! - a receipt whose `run_start` pins no `max_iterations` (written by an earlier version).

use super::decide::{decide, Step};
use super::judgements::{self, Differs, NotReplayed, Pins};
use super::mode::Mode;
use crate::halt::HaltReason;
use crate::receipt::history::{History, IterationRecord};

/// A recorded halt its observations do not give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The iteration whose recorded stages decide otherwise (0: t0).
    pub iteration: u64,
    /// What differs: `halt` (the decision itself) or the recorded judgement recomputed
    /// (`progress`, `set_guard`, `evidence`, `confirmation`, `t0_baseline`: [`judgements`]).
    pub judgement: &'static str,
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
    /// The recorded judgements that could not be recomputed (an artifact not read back, a
    /// parameter of an earlier version), by name, in order.
    pub judgements_not_replayed: Vec<NotReplayed>,
}

/// At most this many (judgement, reason) groups not replayed are named in [`Derivation::detail`]; the rest are counted.
const NAMED_NOT_REPLAYED: usize = 5;

impl Derivation {
    /// One sentence for `verify` and `explain-halt`.
    pub fn detail(&self) -> String {
        let mut detail = match &self.not_replayed {
            None => format!(
                "{} follows from the recorded observations ({} iteration decision(s) re-derived)",
                self.recorded, self.iterations
            ),
            Some(why) => format!(
                "{} not replayable: {why} ({} iteration decision(s) re-derived)",
                self.recorded, self.iterations
            ),
        };
        if !self.judgements_not_replayed.is_empty() {
            // One entry per judgement and reason, naming the iterations it covers.
            let mut groups: Vec<(&str, &str, Vec<u64>)> = Vec::new();
            for n in &self.judgements_not_replayed {
                match groups
                    .iter_mut()
                    .find(|(j, why, _)| *j == n.judgement.as_str() && *why == n.why)
                {
                    Some((_, _, at)) => at.push(n.iteration),
                    None => groups.push((n.judgement.as_str(), &n.why, vec![n.iteration])),
                }
            }
            let named: Vec<String> = groups
                .iter()
                .take(NAMED_NOT_REPLAYED)
                .map(|(judgement, why, at)| {
                    let t0 = at.contains(&0);
                    let iterations: Vec<String> =
                        at.iter().filter(|i| **i > 0).map(u64::to_string).collect();
                    let of = match (t0, iterations.len()) {
                        (true, 0) => "t0".to_string(),
                        (false, 1) => format!("iteration {}", iterations[0]),
                        (false, _) => format!("iterations {}", iterations.join(", ")),
                        (true, 1) => format!("t0 and iteration {}", iterations[0]),
                        (true, _) => format!("t0 and iterations {}", iterations.join(", ")),
                    };
                    format!("{judgement} of {of} ({why})")
                })
                .collect();
            let more = match groups.len().saturating_sub(NAMED_NOT_REPLAYED) {
                0 => String::new(),
                n => format!("; and {n} more"),
            };
            detail.push_str(&format!(
                "; judgement(s) not replayed: {}{more}",
                named.join("; ")
            ));
        }
        detail
    }
}

/// The reasons that record a failure of the supervisor's own machinery, not an observation.
fn operational(reason: HaltReason) -> bool {
    matches!(
        reason,
        HaltReason::WorkspaceInvalid
            | HaltReason::IsolationUnsatisfiable
            | HaltReason::CredentialScopeInvalid
            | HaltReason::InternalError
            | HaltReason::ExecutionFailure
    )
}

/// The reasons the budget rules decide (`super::budget`), replayed from the usage records.
fn budget_reason(reason: HaltReason) -> bool {
    matches!(
        reason,
        HaltReason::BudgetExceeded | HaltReason::CostAnomaly | HaltReason::ModelDriftDetected
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

fn mismatch_of(differs: Differs, recorded: HaltReason) -> Mismatch {
    Mismatch {
        iteration: differs.iteration,
        judgement: differs.judgement.as_str(),
        recorded,
        detail: differs.detail(),
        derived: differs.derived,
    }
}

/// Recompute the recorded judgements of t0 and of every complete iteration, in order: those
/// that could not be, or the first that differs.
fn replay_judgements(
    history: &History,
    pins: &Pins,
    recorded: HaltReason,
) -> Result<Vec<NotReplayed>, Mismatch> {
    let mut skipped = Vec::new();
    if history.last_started >= 1 {
        skipped.extend(
            judgements::replay_t0_passed_by(history, pins).map_err(|d| mismatch_of(d, recorded))?,
        );
    }
    let mut hole: Option<String> = None;
    for (i, record) in history
        .iterations
        .iter()
        .enumerate()
        .filter(|(_, r)| complete(r))
    {
        // An iteration recorded twice (its first run never finished) is judged as last recorded.
        if history.iterations[i + 1..]
            .iter()
            .any(|later| later.iteration == record.iteration)
        {
            continue;
        }
        skipped.extend(
            judgements::replay_iteration(history, record, pins, hole.as_deref())
                .map_err(|d| mismatch_of(d, recorded))?,
        );
        if hole.is_none() {
            hole = judgements::unrestored_sets(record);
        }
    }
    Ok(skipped)
}

/// Re-derive the run's halt from its history. `Ok(None)` when the receipt records no halt.
pub fn derive_halt(history: &History) -> Result<Option<Derivation>, Mismatch> {
    let Some(halt) = &history.halt else {
        return Ok(None);
    };
    let recorded = halt.halt_reason;
    let t0 = history.check_baseline.as_ref().map(|b| &b.check);
    let mut skipped = Vec::new();
    let accept = |iterations: u64, why: Option<String>, skipped: Vec<NotReplayed>| {
        Ok(Some(Derivation {
            recorded,
            iterations,
            not_replayed: why,
            judgements_not_replayed: skipped,
        }))
    };
    let Some(start) = &history.start else {
        return accept(0, Some("the receipt has no run_start".into()), skipped);
    };
    if Mode::of_name(&start.mode) == Some(Mode::TaskList) {
        let pinned: std::collections::BTreeSet<String> = start
            .config
            .get("tasks")
            .and_then(|t| t.as_object())
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        let tasks = history.tasks.started.len() as u64;
        return match super::task_list::derive(history, recorded, &pinned) {
            Ok(why) => accept(tasks, why, skipped),
            Err((at, judgement, derived)) => {
                let judgement: &'static str = match judgement.as_str() {
                    "task_started" => "task_started",
                    "task_checkpoint" => "task_checkpoint",
                    _ => "halt",
                };
                let detail = match judgement {
                    "halt" => format!(
                        "the halt records {recorded} after task {at}, but the plan and its checkpoints decide {derived}"
                    ),
                    _ => format!("at task {at}: {derived}"),
                };
                Err(Mismatch {
                    iteration: at,
                    judgement,
                    recorded,
                    derived,
                    detail,
                })
            }
        };
    }
    let Some(Mode::CheckFixpoint) = Mode::of_name(&start.mode) else {
        return accept(
            0,
            Some(format!(
                "mode {} has no decision rule here",
                crate::inert::inert(&start.mode)
            )),
            skipped,
        );
    };
    let Some(max_iterations) = start
        .config
        .get("max_iterations")
        .and_then(serde_json::Value::as_u64)
    else {
        return accept(
            0,
            Some("its run_start pins no max_iterations (a receipt of an earlier version)".into()),
            skipped,
        );
    };
    let pins = Pins::of(history);
    skipped.extend(replay_judgements(history, &pins, recorded)?);
    let halted = history
        .iterations
        .iter()
        .rev()
        .find(|r| r.iteration == halt.iteration && r.exec.is_some());
    let mut derived = 0u64;
    for record in history
        .iterations
        .iter()
        .filter(|r| complete(r) && Some(r.iteration) != halted.map(|h| h.iteration))
    {
        derived += 1;
        if let step @ Step::Halt(..) = decide(Mode::CheckFixpoint, record, t0, max_iterations) {
            let name = step_name(&step);
            return Err(Mismatch {
                iteration: record.iteration,
                judgement: "halt",
                recorded,
                detail: format!("iteration {} recorded stages that decide {name}, but the run went on and halted {recorded} at iteration {}", record.iteration, halt.iteration),
                derived: name,
            });
        }
    }
    // A stale heartbeat observed from outside (`watch --kill` of a supervisor that stopped
    // beating) is in no recorded stage: accepted as recorded, naming what the stages decide. The
    // stall rule's own halt is decided by a recorded `stalled` ending and replays below.
    if recorded == HaltReason::HeartbeatStale {
        let decided = halted
            .filter(|r| r.interrupted.is_none())
            .map(|r| decide(Mode::CheckFixpoint, r, t0, max_iterations));
        if !matches!(decided, Some(Step::Halt(HaltReason::HeartbeatStale, _))) {
            let stages = decided
                .as_ref()
                .map_or("no recorded agent step".to_string(), step_name);
            return accept(
                derived + u64::from(halted.is_some()),
                Some(format!(
                    "heartbeat_stale at iteration {} was observed outside the receipt (a supervisor that stopped beating, ended by `watch --kill`); the halt's detail carries the observations ({stages} by the stages)",
                    halt.iteration
                )),
                skipped,
            );
        }
    }
    // The budget rules, replayed at the points the loop evaluates them (`super::budget`): a
    // budget halt must be the first one they decide, and no run may go on past one.
    let caps: super::budget::BudgetPins = start
        .config
        .get("budget")
        .and_then(|b| serde_json::from_value(b.clone()).ok())
        .unwrap_or_default();
    let pinned = super::budget::PinnedModel::of_config(&start.config);
    let first = super::budget::first_halt(&history.iterations, &caps, &pinned, |r| {
        complete(r) && decide(Mode::CheckFixpoint, r, t0, max_iterations) == Step::Continue
    });
    if budget_reason(recorded) {
        return match first {
            Some(found) if found.reason == recorded && found.iteration == halt.iteration => {
                accept(derived + 1, None, skipped)
            }
            found => {
                let name = found.as_ref().map_or("no budget halt".to_string(), |f| {
                    format!(
                        "{} at iteration {} ({})",
                        f.reason,
                        f.iteration,
                        f.point.as_str()
                    )
                });
                Err(Mismatch {
                    iteration: halt.iteration,
                    judgement: "budget",
                    recorded,
                    detail: format!("the halt records {recorded} at iteration {}, but the budget rules over the recorded usage decide {name}", halt.iteration),
                    derived: name,
                })
            }
        };
    }
    if let Some(found) = first.filter(|f| f.iteration < halt.iteration) {
        return Err(Mismatch {
            iteration: found.iteration,
            judgement: "budget",
            recorded,
            detail: format!("the budget rules decide {} at iteration {} ({}), but the run went on and halted {recorded} at iteration {}", found.reason, found.iteration, found.point.as_str(), halt.iteration),
            derived: found.reason.as_str().into(),
        });
    }
    let Some(record) = halted else {
        if halt.iteration > history.last_started {
            return Err(Mismatch {
                iteration: halt.iteration,
                judgement: "halt",
                recorded,
                derived: "no such iteration".into(),
                detail: format!("the halt records {recorded} at iteration {}, but the receipt started no iteration past {}", halt.iteration, history.last_started),
            });
        }
        if recorded == HaltReason::SuccessConditionMet && halt.iteration > 0 {
            return Err(Mismatch {
                iteration: halt.iteration,
                judgement: "halt",
                recorded,
                derived: "no recorded agent step".into(),
                detail: format!("the halt claims success at iteration {} but the receipt records no agent step there", halt.iteration),
            });
        }
        // A halt before the first iteration: the t0 baseline's decision, replayed from its record.
        if halt.iteration == 0 && history.last_started == 0 {
            return match judgements::replay_t0_halt(history, &pins, recorded)
                .map_err(|d| mismatch_of(d, recorded))?
            {
                None => accept(derived, None, skipped),
                Some(why) => accept(derived, Some(why), skipped),
            };
        }
        return accept(derived, Some(format!("halted at iteration {} before any recorded agent step of it (a run-level halt: the iteration cap, the machinery)", halt.iteration)), skipped);
    };
    derived += 1;
    // An interrupted iteration (a signal, a supervisor lost) decides nothing, whatever stages it
    // recorded: the resume goes on from the next one (engine::lifecycle's `pending`), so only the
    // cap it used or a failure of the resume itself (a mint hook, a zone) halts at its number.
    let (step, name) = match &record.interrupted {
        Some(cause) => (
            Step::Continue,
            format!("no halt: interrupted ({})", crate::inert::inert(cause)),
        ),
        None => {
            let step = decide(Mode::CheckFixpoint, record, t0, max_iterations);
            let name = step_name(&step);
            (step, name)
        }
    };
    match &step {
        // A success stands on its confirmation reruns (a disagreeing one decided a flake above).
        Step::Halt(HaltReason::SuccessConditionMet, _) if recorded == HaltReason::SuccessConditionMet => {
            judgements::replay_confirmations(record, &pins).map_err(|d| mismatch_of(d, recorded))?;
            judgements::replay_canary_ran(record, &pins).map_err(|d| mismatch_of(d, recorded))?;
            accept(derived, None, skipped)
        }
        Step::Halt(reason, _) if *reason == recorded => accept(derived, None, skipped),
        // The machine failing after its stages decided is its own record (a delivery that
        // could not be made, a zone that could not start the next stage); a recorded success is never one of these.
        Step::Halt(..) | Step::Continue if operational(recorded) => {
            accept(derived, Some(format!("{recorded} records the supervisor's own failure at iteration {}, accepted as recorded ({name} by the stages)", record.iteration)), skipped)
        }
        Step::Continue if recorded == HaltReason::MaxIterationsReached && record.iteration >= max_iterations => accept(derived, None, skipped),
        // A green whose later stages (confirmations, judge, canary) were never recorded: only the
        // supervisor's failure can end it.
        _ => Err(Mismatch {
            iteration: record.iteration,
            judgement: "halt",
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
            let Event::CheckResult(mut check) = sample::check_result(n, *code) else {
                unreachable!()
            };
            check.evidence = None;
            events.push(Event::CheckResult(check));
        }
        events.push(sample::halt(halt, at));
        let recorded: Vec<Recorded> = events
            .into_iter()
            .map(|event| Recorded {
                event,
                line: Default::default(),
            })
            .collect();
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
        let found = derive_halt(&history(&[1, 0], HaltReason::SuccessConditionMet, 2))
            .unwrap()
            .unwrap();
        assert_eq!(
            found,
            Derivation {
                recorded: HaltReason::SuccessConditionMet,
                iterations: 2,
                not_replayed: None,
                judgements_not_replayed: vec![]
            }
        );
    }

    #[test]
    fn a_run_that_went_on_past_a_green_is_inconsistent() {
        let found =
            derive_halt(&history(&[0, 1, 1], HaltReason::MaxIterationsReached, 3)).unwrap_err();
        assert_eq!(
            (found.iteration, found.derived.as_str()),
            (1, "success_condition_met")
        );
    }

    #[test]
    fn red_checks_to_the_cap_follow_as_max_iterations_reached() {
        let found = derive_halt(&history(&[1, 1, 1], HaltReason::MaxIterationsReached, 3))
            .unwrap()
            .unwrap();
        assert_eq!(found.not_replayed, None);
    }

    #[test]
    fn a_cap_claimed_before_the_cap_is_a_mismatch() {
        let found = derive_halt(&history(&[1], HaltReason::MaxIterationsReached, 1)).unwrap_err();
        assert_eq!(found.derived, "continue (no halt)");
    }

    #[test]
    fn a_supervisor_failure_is_accepted_as_recorded_and_said_to_be_unreplayed() {
        let found = derive_halt(&history(&[1], HaltReason::WorkspaceInvalid, 1))
            .unwrap()
            .unwrap();
        assert!(found
            .not_replayed
            .unwrap()
            .contains("the supervisor's own failure"));
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
            let Event::CheckResult(mut check) = sample::check_result(n, code) else {
                unreachable!()
            };
            check.evidence = None;
            Event::CheckResult(check)
        };
        for (i, code) in checks.iter().enumerate() {
            let n = i as u64 + 1;
            events.extend([
                Event::IterationStart { iteration: n },
                sample::exec_result(n, 0),
                checked(n, *code),
            ]);
        }
        let last = checks.len() as u64 + 1;
        events.push(Event::IterationStart { iteration: last });
        if green {
            events.extend([sample::exec_result(last, 0), checked(last, 0)]);
        } else {
            let Event::ExecResult(mut exec) = sample::exec_result(last, 0) else {
                unreachable!()
            };
            exec.ending = crate::ending::Ending::Interrupted { signal: 2 };
            events.push(Event::ExecResult(exec));
        }
        events.push(Event::IterationInterrupted {
            iteration: last,
            cause: "SIGINT".into(),
        });
        events.push(sample::halt(halt, last));
        let recorded: Vec<Recorded> = events
            .into_iter()
            .map(|event| Recorded {
                event,
                line: Default::default(),
            })
            .collect();
        History::fold(&recorded)
    }

    #[test]
    fn the_cap_used_by_an_interrupted_last_iteration_follows_as_max_iterations_reached_whatever_it_recorded(
    ) {
        // run_start pins max_iterations = 3; iterations 1 and 2 red, 3 interrupted in its agent
        // step, or after a green check, before its confirmation.
        for green in [false, true] {
            let found = derive_halt(&interrupted_at_the_last(
                &[1, 1],
                green,
                HaltReason::MaxIterationsReached,
            ))
            .unwrap()
            .unwrap();
            assert_eq!(
                found,
                Derivation {
                    recorded: HaltReason::MaxIterationsReached,
                    iterations: 3,
                    not_replayed: None,
                    judgements_not_replayed: vec![]
                },
                "green {green}"
            );
        }
    }

    #[test]
    fn a_cap_claimed_at_an_interrupted_iteration_before_the_cap_is_a_mismatch() {
        let found = derive_halt(&interrupted_at_the_last(
            &[1],
            false,
            HaltReason::MaxIterationsReached,
        ))
        .unwrap_err();
        assert_eq!(found.detail, "the halt records max_iterations_reached at iteration 2, but that iteration's recorded stages decide no halt: interrupted (SIGINT)");
    }

    #[test]
    fn a_supervisor_failure_at_the_resume_after_an_interrupted_iteration_is_accepted_as_recorded() {
        let found = derive_halt(&interrupted_at_the_last(
            &[1],
            false,
            HaltReason::CredentialScopeInvalid,
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            found.not_replayed.as_deref(),
            Some("credential_scope_invalid records the supervisor's own failure at iteration 2, accepted as recorded (no halt: interrupted (SIGINT) by the stages)")
        );
    }

    #[test]
    fn a_judgement_claimed_at_an_interrupted_iteration_is_a_mismatch_even_after_a_green_check() {
        for (green, claimed) in [
            (true, HaltReason::SuccessConditionMet),
            (false, HaltReason::NoProgressDetected),
        ] {
            let found = derive_halt(&interrupted_at_the_last(&[1, 1], green, claimed)).unwrap_err();
            assert_eq!(
                (found.iteration, found.derived.as_str()),
                (3, "no halt: interrupted (SIGINT)"),
                "{claimed}"
            );
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
