//! The halt decision, a pure function of what the receipt recorded of the current iteration
//! ([`IterationRecord`], from the run's [`History`](crate::receipt::history::History)). The live
//! loop records each observation into the history and then decides; `run --resume` decides on
//! the same record it folds from the receipt, so a live run and a resumed one halt alike.
//!
//! - agent (`exec`) exits 0: go on; stopped by the stall rule (`Ending::Stalled`, the agent's or
//!   the check's): `heartbeat_stale`; anything else (non-zero exit, killed by a signal, timeout,
//!   could not start): `execution_failure`.
//! - the guards found the agent's step unacceptable (a protected path changed, recorded in the
//!   `snapshot`; a finding recorded in a `guard` event): the guard's halt, e.g. `blocked_path_modified`.
//! - the check's verdict ([`Verdict`]): pass is `success_condition_met`; a zero exit whose
//!   evidence disagrees is `metric_integrity_violation`, naming the disagreements; fail is a red iteration
//!   (not a failure), and at the iteration cap `max_iterations_reached`; could-not-run is
//!   `execution_failure`.
//! - a confirmation rerun of a green that disagreed with it (`check_confirmation`):
//!   `check_not_deterministic`, before the green could count as success (`flake`, which a
//!   green t0 baseline's disagreeing rerun is decided by too, the engine's t0 baseline).
//! - a red check whose `progress` event says `targets_met` (it failed only on pre-existing,
//!   non-target failures, on whole evidence; docs/progress.md, "Targets"): `success_condition_met`;
//!   one whose sets met the targets on evidence with gaps is the `progress` event's
//!   `metric_integrity_violation` (the gate a green passes, `super::verdict::evidence_whole`).
//! - a red check whose `progress` event names a no-convergence halt (`no_progress_detected`,
//!   `same_failure_repeated`, ...; docs/progress.md): that halt, also at the cap.
//! - a green check the judge answered (`judge` event): approve keeps `success_condition_met`; a
//!   veto is `reviewer_rejected` (`reward_hacking_detected` when the judge says so); a judge
//!   that gave no answer that counts is `escalation_pending`.
//! - a success the held-out check (`holdout_check` event) did not find green: red or disagreeing
//!   is `objective_unverified`, one that could not run is `execution_failure`.
//! - a check of the iteration (its own, a confirmation rerun, the held-out check) that tried to
//!   reach an address outside its zone when the check on t0 tried none: `hermeticity_violation`
//!   ([`super::hermeticity`]), before its verdict counts.
//! - either interrupted by SIGINT/SIGTERM: not a halt; the run becomes resumable.

use super::mode::Mode;
use super::verdict::{shell_could_not_run, Verdict};
use crate::ending::Ending;
use crate::halt::HaltReason;
use crate::receipt::events::CheckResult;
use crate::receipt::history::IterationRecord;

/// What the engine does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Go on (to the next stage of the iteration, or to the next iteration).
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
        Ending::TimedOut { after_ms } => {
            format!("{who} timed out after {after_ms} ms; its process tree was killed")
        }
        Ending::FailedToStart { reason } => format!("{who} could not start: {reason}"),
        Ending::Interrupted { signal } => return Step::Interrupted(*signal),
        stalled @ Ending::Stalled { .. } => {
            let words = stalled.stall_words().unwrap_or_default();
            return Step::Halt(
                HaltReason::HeartbeatStale,
                format!("{who} stalled: {words}; its process tree was killed"),
            );
        }
    };
    Step::Halt(HaltReason::ExecutionFailure, detail)
}

/// After the agent command.
fn after_exec(ending: &Ending) -> Step {
    match ending {
        Ending::Exited { code: 0 } => Step::Continue,
        other => not_completed("exec (agent)", other),
    }
}

/// After the check of iteration `iteration` out of `max_iterations`.
fn after_check(check: &CheckResult, iteration: u64, max_iterations: u64) -> Step {
    match (Verdict::of_check(check), &check.ending) {
        (Verdict::Pass, _) => Step::Halt(HaltReason::SuccessConditionMet, format!("the check passed at iteration {iteration}")),
        (Verdict::Disagrees, _) => Step::Halt(HaltReason::MetricIntegrityViolation, disagreement_detail(check, iteration)),
        (Verdict::CouldNotRun, Ending::Exited { code }) if shell_could_not_run(*code) => Step::Halt(
            HaltReason::ExecutionFailure,
            format!("check could not run (exit {code}: the shell could not find or execute the command)"),
        ),
        (Verdict::CouldNotRun, other) => not_completed("check", other),
        (Verdict::Fail, _) if iteration >= max_iterations => Step::Halt(
            HaltReason::MaxIterationsReached,
            format!("the check still fails after {iteration} of {max_iterations} iterations"),
        ),
        (Verdict::Fail, _) => Step::Continue,
    }
}

/// The halt detail of a zero exit whose evidence disagrees: its first disagreements (each is
/// escaped and bounded in the record) and how many more (the receipt's bound, `receipt::bounded`).
fn disagreement_detail(check: &CheckResult, iteration: u64) -> String {
    format!(
        "the check exited 0 at iteration {iteration} but its evidence disagrees: {}",
        super::verdict::named_gaps(check)
    )
}

/// Decide on the current iteration as recorded so far: `Continue` means no recorded stage halts
/// (the caller knows whether stages are still to come). `t0`: the run's check on t0 (the
/// `check_baseline`), when it recorded one.
pub fn decide(
    mode: Mode,
    record: &IterationRecord,
    t0: Option<&CheckResult>,
    max_iterations: u64,
) -> Step {
    match mode {
        // A task_list run's iterations are its tasks' runs: each decides as check_fixpoint.
        Mode::CheckFixpoint | Mode::TaskList => check_fixpoint(record, t0, max_iterations),
    }
}

fn check_fixpoint(record: &IterationRecord, t0: Option<&CheckResult>, max_iterations: u64) -> Step {
    let Some(exec) = &record.exec else {
        return Step::Continue;
    };
    let step = after_exec(&exec.ending);
    if step != Step::Continue {
        return step;
    }
    if let Some(snapshot) = record.snapshot.as_ref().filter(|s| !s.accepted()) {
        // At most a receipt sample's worth of names (the live list and a resumed run's sample
        // name the same first ones), and how many more (receipt::bounded).
        let total = record
            .externalised
            .iter()
            .find(|x| x.of == "snapshot")
            .and_then(|x| x.lists.get("protected_changes"))
            .map_or(snapshot.protected_changes.len() as u64, |l| l.count);
        let paths: Vec<&str> = snapshot
            .protected_changes
            .iter()
            .take(crate::receipt::bounded::SAMPLE_ITEMS)
            .map(|c| c.path.as_str())
            .collect();
        let more = match total.saturating_sub(paths.len() as u64) {
            0 => String::new(),
            n => format!(" (and {n} more)"),
        };
        return Step::Halt(
            HaltReason::BlockedPathModified,
            format!(
                "the agent changed protected paths: {}{more}",
                paths.join(", ")
            ),
        );
    }
    if let Some(guard) = record.guards.first() {
        return Step::Halt(guard.halt_reason, guard.detail.clone());
    }
    // A check that tried to reach beyond its zone judged nothing the run can stand on.
    if let Some(step) = super::hermeticity::decide_on(record, t0) {
        return step;
    }
    if let Some(step) = record
        .confirmations
        .iter()
        .find(|c| !c.agrees)
        .map(|c| flake(c, record.iteration))
    {
        return step;
    }
    match &record.check {
        Some(check) => match (
            after_check(check, record.iteration, max_iterations),
            no_convergence(record),
        ) {
            // A green check the judge was asked about stands or falls with its answer; it is
            // never asked on any other verdict, so it can never turn red into green.
            // A green the ratchet rejected (its score worse than the best beyond the band) was
            // reverted: no success; the loop goes on from the best accepted tree.
            (Step::Halt(HaltReason::SuccessConditionMet, _), _)
                if record.progress.as_ref().is_some_and(|p| !p.accepted) =>
            {
                if record.iteration >= max_iterations {
                    Step::Halt(
                        HaltReason::MaxIterationsReached,
                        format!("the check passed at iteration {} but the ratchet rejected it; {max_iterations} iterations used", record.iteration),
                    )
                } else {
                    Step::Continue
                }
            }
            (Step::Halt(HaltReason::SuccessConditionMet, detail), _) => {
                success_to_stand(record, detail)
            }
            // A red check failing only on tests that already failed at t0 and are not targets,
            // with every target and every t0 pass passing, is success (the engine's targets).
            (Step::Continue | Step::Halt(HaltReason::MaxIterationsReached, _), _)
                if record.progress.as_ref().is_some_and(|p| p.targets_met) =>
            {
                let detail = format!(
                    "every target passes at iteration {}; the check fails only on tests that already failed at t0 and are not targets",
                    record.iteration
                );
                success_to_stand(record, detail)
            }
            // A rule that fired on a red check says more than the iteration cap.
            (Step::Continue | Step::Halt(HaltReason::MaxIterationsReached, _), Some(halt)) => halt,
            (step, _) => step,
        },
        None => Step::Continue,
    }
}

/// A success the iteration's record has still to let stand: first the held-out check (when it
/// ran), then the judge's answer, or without a judge the review the awareness findings ask for.
/// A red held-out check decides before a review is asked for: the step it refused is not the
/// one a human would review.
fn success_to_stand(record: &IterationRecord, detail: String) -> Step {
    match held_out(record, Step::Halt(HaltReason::SuccessConditionMet, detail)) {
        Step::Halt(HaltReason::SuccessConditionMet, detail) => match &record.judge {
            Some(judge) => super::judge::decide_on(judge, detail),
            None => unjudged_green(record, detail),
        },
        other => other,
    }
}

/// A success the iteration's held-out check (when it ran) must confirm: red, disagreeing or run
/// on a changed directory, it is `objective_unverified`.
fn held_out(record: &IterationRecord, step: Step) -> Step {
    match (&step, &record.holdout) {
        (Step::Halt(HaltReason::SuccessConditionMet, _), Some(holdout)) => {
            super::holdout::decide_on(holdout, step)
        }
        _ => step,
    }
}

/// A green no judge answered on: success, unless the agent's tree observes what can tell a test
/// run from a real one (the snapshot's `awareness`); then a human reviews it (`human_required`).
fn unjudged_green(record: &IterationRecord, detail: String) -> Step {
    let observed = record
        .snapshot
        .as_ref()
        .map(|s| s.awareness.as_slice())
        .unwrap_or_default();
    if observed.is_empty() {
        return Step::Halt(HaltReason::SuccessConditionMet, detail);
    }
    let shown: Vec<String> = observed
        .iter()
        .take(3)
        .map(|f| format!("{}: {}", f.path.as_deref().unwrap_or("-"), f.what))
        .collect();
    let more = match observed.len().saturating_sub(shown.len()) {
        0 => String::new(),
        n => format!("; and {n} more"),
    };
    Step::Halt(
        HaltReason::HumanRequired,
        format!(
            "{detail}, but the agent's production code observes what can tell a test run from a real one ({} observations: {}{more}): \
             not a success loopexec stands behind unreviewed; review the delivered change, or give a judge (--judge) that answers on each \
             observation, or allow the API in loop.toml with a reason ([guards] allow)",
            observed.len(),
            shown.join("; ")
        ),
    )
}

/// A confirmation rerun that disagreed with the iteration's green (iteration 0: the green t0
/// baseline's, the engine's t0 baseline): a flake, not success.
pub fn flake(c: &crate::receipt::events::ConfirmationRecord, iteration: u64) -> Step {
    let at = match iteration {
        0 => "on t0".to_string(),
        n => format!("at iteration {n}"),
    };
    // A rerun the zone or its engine could not start says nothing about the check: no verdict
    // was sampled, so it is the machinery's failure, not the check's instability.
    if let Ending::FailedToStart { reason } = &c.check.ending {
        return Step::Halt(
            HaltReason::ExecutionFailure,
            format!(
                "the check passed {at}, but confirmation rerun {} could not start ({}): its stability was not sampled, so this is no success and no verdict on the check",
                c.confirmation,
                crate::inert::inert(reason)
            ),
        );
    }
    let shown = match Verdict::of_check(&c.check) {
        Verdict::Pass => "green with another failing set",
        Verdict::Fail => "red",
        Verdict::Disagrees => "a zero exit whose evidence disagrees",
        Verdict::CouldNotRun => "could not run",
    };
    if let Some(m) = c.same_tree_as {
        return Step::Halt(
            HaltReason::CheckNotDeterministic,
            format!(
                "the agent changed nothing at iteration {iteration}: the check ran on iteration {m}'s tree again and was {shown}, not what it was then (stability lower bound {:.4}, Wilson at {}, below {})",
                c.stability_lower_bound, c.confidence, c.stability_target
            ),
        );
    }
    Step::Halt(
        HaltReason::CheckNotDeterministic,
        format!(
            "the check passed {at}, but confirmation rerun {} on the same tree was {shown}: a flake, not success (stability lower bound {:.4}, Wilson at {}, below {})",
            c.confirmation, c.stability_lower_bound, c.confidence, c.stability_target
        ),
    )
}

/// The no-convergence halt the iteration's `progress` event recorded, if a rule fired.
fn no_convergence(record: &IterationRecord) -> Option<Step> {
    let progress = record.progress.as_ref()?;
    Some(Step::Halt(
        progress.halt_reason?,
        progress.detail.clone().unwrap_or_default(),
    ))
}

/// Whether the run is at its iteration cap before starting iteration `next`.
pub fn before_iteration(next: u64, max_iterations: u64) -> Step {
    if next > max_iterations {
        Step::Halt(
            HaltReason::MaxIterationsReached,
            format!("the check still fails after {max_iterations} of {max_iterations} iterations"),
        )
    } else {
        Step::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::{sample, Event, ProtectedChangeRecord, SnapshotRecord};

    fn record(exec: i32, check: Option<Ending>, iteration: u64) -> IterationRecord {
        let Event::ExecResult(exec) = sample::exec_result(iteration, exec) else {
            unreachable!()
        };
        let check = check.map(|ending| {
            let Event::CheckResult(mut c) = sample::check_result(iteration, 0) else {
                unreachable!()
            };
            c.check_exit = ending.exit_code();
            c.ending = ending;
            c
        });
        IterationRecord {
            iteration,
            exec: Some(exec),
            check,
            ..Default::default()
        }
    }

    fn observing(iteration: u64, code: i32) -> IterationRecord {
        let mut r = record(0, Some(Ending::Exited { code }), iteration);
        r.snapshot = Some(SnapshotRecord {
            iteration,
            tree_id: "t".into(),
            changed_paths: 1,
            protected_changes: vec![],
            duration_ms: None,
            awareness: vec![crate::receipt::events::FindingRecord {
                path: Some("calc/core.py".into()),
                what: "line 4: call-stack traceback.extract_stack: tb.extract_stack()".into(),
            }],
            left_out: None,
        });
        r
    }

    #[test]
    fn a_green_whose_tree_observes_the_test_run_is_human_required() {
        let Step::Halt(reason, detail) = decide(Mode::CheckFixpoint, &observing(2, 0), None, 3)
        else {
            panic!("no halt")
        };
        assert_eq!(reason, HaltReason::HumanRequired);
        assert!(
            detail.starts_with("the check passed at iteration 2, but the agent's production code observes what can tell a test run from a real one (1 observations: calc/core.py: line 4: call-stack traceback.extract_stack"),
            "{detail}"
        );
    }

    #[test]
    fn a_red_held_out_check_decides_before_the_review_an_observing_tree_asks_for() {
        let mut r = observing(2, 0);
        let mut held_out = r.check.clone().unwrap();
        held_out.ending = Ending::Exited { code: 1 };
        held_out.check_exit = Some(1);
        r.holdout = Some(crate::receipt::events::HoldoutRecord {
            dir: "/h".into(),
            dir_sha256: "0".repeat(64),
            dir_entries: 1,
            dir_changed: false,
            verdict: "red".into(),
            check: held_out,
        });
        let Step::Halt(reason, detail) = decide(Mode::CheckFixpoint, &r, None, 3) else {
            panic!("no halt")
        };
        assert_eq!(reason, HaltReason::ObjectiveUnverified, "{detail}");
        assert!(detail.contains("the held-out check failed"), "{detail}");
    }

    #[test]
    fn a_red_check_whose_tree_observes_the_test_run_goes_on() {
        assert_eq!(
            decide(Mode::CheckFixpoint, &observing(2, 1), None, 3),
            Step::Continue
        );
    }

    fn decided(check: Ending, iteration: u64, max: u64) -> Step {
        decide(
            Mode::CheckFixpoint,
            &record(0, Some(check), iteration),
            None,
            max,
        )
    }

    #[test]
    fn a_red_check_below_the_cap_continues_and_at_the_cap_halts() {
        assert_eq!(decided(Ending::Exited { code: 1 }, 1, 3), Step::Continue);
        assert!(matches!(
            decided(Ending::Exited { code: 1 }, 3, 3),
            Step::Halt(HaltReason::MaxIterationsReached, _)
        ));
    }

    #[test]
    fn a_green_check_converges_even_at_the_cap() {
        assert!(matches!(
            decided(Ending::Exited { code: 0 }, 3, 3),
            Step::Halt(HaltReason::SuccessConditionMet, _)
        ));
    }

    #[test]
    fn commands_that_do_not_complete_are_execution_failures() {
        for ending in [
            Ending::TimedOut { after_ms: 5 },
            Ending::Signaled { signal: 9 },
            Ending::Exited { code: 127 },
        ] {
            assert!(
                matches!(
                    decided(ending.clone(), 1, 3),
                    Step::Halt(HaltReason::ExecutionFailure, _)
                ),
                "{ending:?}"
            );
        }
        assert!(matches!(
            decide(Mode::CheckFixpoint, &record(2, None, 1), None, 3),
            Step::Halt(HaltReason::ExecutionFailure, _)
        ));
        assert_eq!(
            decide(Mode::CheckFixpoint, &record(0, None, 1), None, 3),
            Step::Continue
        );
        let mut interrupted = record(0, None, 1);
        interrupted.exec.as_mut().unwrap().ending = Ending::Interrupted { signal: 15 };
        assert_eq!(
            decide(Mode::CheckFixpoint, &interrupted, None, 3),
            Step::Interrupted(15)
        );
    }

    #[test]
    fn a_snapshot_with_protected_changes_halts_before_any_check_result_is_read() {
        let mut r = record(0, Some(Ending::Exited { code: 0 }), 1);
        r.snapshot = Some(SnapshotRecord {
            iteration: 1,
            tree_id: "t".into(),
            changed_paths: 1,
            protected_changes: vec![ProtectedChangeRecord {
                path: "tests/a.sh".into(),
                change: "modified".into(),
            }],
            duration_ms: None,
            awareness: vec![],
            left_out: None,
        });
        assert_eq!(
            decide(Mode::CheckFixpoint, &r, None, 3),
            Step::Halt(
                HaltReason::BlockedPathModified,
                "the agent changed protected paths: tests/a.sh".into()
            )
        );
    }

    #[test]
    fn a_confirmation_rerun_that_disagrees_with_a_green_halts_check_not_deterministic() {
        let mut r = record(0, Some(Ending::Exited { code: 0 }), 1);
        let Event::CheckResult(mut rerun) = sample::check_result(1, 0) else {
            unreachable!()
        };
        rerun.ending = Ending::Exited { code: 1 };
        rerun.check_exit = Some(1);
        let confirmation =
            |agrees: bool, check: CheckResult| crate::receipt::events::ConfirmationRecord {
                confirmation: 1,
                same_tree_as: None,
                agrees,
                stability_lower_bound: 0.0,
                confidence: 0.95,
                stability_target: 0.95,
                check,
            };
        r.confirmations = vec![confirmation(true, r.check.clone().unwrap())];
        assert!(matches!(
            decide(Mode::CheckFixpoint, &r, None, 3),
            Step::Halt(HaltReason::SuccessConditionMet, _)
        ));
        r.confirmations.push(confirmation(false, rerun));
        let Step::Halt(reason, detail) = decide(Mode::CheckFixpoint, &r, None, 3) else {
            panic!("no halt")
        };
        assert_eq!(reason, HaltReason::CheckNotDeterministic);
        assert!(
            detail.contains("confirmation rerun 1 on the same tree was red: a flake, not success"),
            "{detail}"
        );
    }

    #[test]
    fn a_confirmation_rerun_that_could_not_start_is_an_execution_failure_not_a_flake() {
        let mut r = record(0, Some(Ending::Exited { code: 0 }), 1);
        let Event::CheckResult(mut rerun) = sample::check_result(1, 0) else {
            unreachable!()
        };
        rerun.ending = Ending::FailedToStart {
            reason: "docker: daemon not answering".into(),
        };
        rerun.check_exit = None;
        r.confirmations = vec![crate::receipt::events::ConfirmationRecord {
            confirmation: 2,
            same_tree_as: None,
            agrees: false,
            stability_lower_bound: 0.0,
            confidence: 0.95,
            stability_target: 0.95,
            check: rerun,
        }];
        assert_eq!(
            decide(Mode::CheckFixpoint, &r, None, 3),
            Step::Halt(
                HaltReason::ExecutionFailure,
                "the check passed at iteration 1, but confirmation rerun 2 could not start (docker: daemon not answering): its stability was not sampled, so this is no success and no verdict on the check".into()
            )
        );
    }

    #[test]
    fn the_cap_is_reached_before_an_iteration_past_it_starts() {
        assert_eq!(before_iteration(3, 3), Step::Continue);
        assert!(matches!(
            before_iteration(4, 3),
            Step::Halt(HaltReason::MaxIterationsReached, _)
        ));
    }
}
