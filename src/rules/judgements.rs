//! The recorded judgements replayed: each judgement the live loop recorded of an iteration (or
//! of t0) that a halt decision rests on, recomputed from the observations the receipt holds with
//! the run's pinned configuration (`run_start.config`), and compared with what was recorded. The
//! halt derivation ([`super::derive`]) runs it on every iteration it re-derives, so a receipt
//! whose `progress` event was rewritten, or whose set-guard finding was dropped, does not follow.
//!
//! What it recomputes, by name ([`Judgement`]):
//! - `progress`: the ratchet's acceptance, the no-convergence halt and `targets_met`
//!   ([`super::progress::judge_scored`]) from the failing sets of t0 and of the iterations up to
//!   this one, under the pinned `progress` limits, `targets` patterns and `score` rule;
//! - `set_guard`: the set guard's finding ([`super::set_guards`]) on a check that exited 0
//!   against t0's C0/S0, the pinned `[[allow_test_change]]` ids let through;
//! - `evidence`: a recorded verdict (`check_result.evidence`) against the exit code and the
//!   declared reports' recorded counts (a zero exit is green only when no report is unusable,
//!   empty or showing failures; a non-zero exit is red);
//! - `confirmation`: a success stands on `confirm_runs` recorded confirmation reruns;
//! - `t0_baseline`: the decision on t0 ([`super::baseline::decide_t0_success`]): a success at
//!   iteration 0 needs a green t0 (or one whose targets all pass) and its confirmations, and a
//!   run whose t0 so succeeded never started an iteration.
//!
//! What it cannot recompute is named ([`NotReplayed`]), never passed silently and never a
//! mismatch: a list the receipt moved to a run artifact (`externalised`) that was not read back
//! whole (the artifact absent or changed), or a pinned parameter that does not parse (a receipt
//! of an earlier version).

use super::baseline::{decide_t0_success, T0Success};
use super::decide::Step;
use super::progress::{judge_scored, ScoreRule};
use super::set_guards::{exempting, violation_of, T0Sets, GUARD, STAGE};
use super::targets::{met_on_t0, pinned_patterns};
use super::verdict::Verdict;
use crate::convergence::rules::Limits;
use crate::halt::HaltReason;
use crate::receipt::bounded::Externalised;
use crate::receipt::events::CheckResult;
use crate::receipt::history::{History, IterationRecord};
use serde_json::Value;
use std::collections::BTreeSet;

/// The judgements recomputed, by the name a mismatch or a not-replayed entry gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Judgement {
    Progress,
    SetGuard,
    Evidence,
    Confirmation,
    T0Baseline,
}

impl Judgement {
    pub fn as_str(self) -> &'static str {
        match self {
            Judgement::Progress => "progress",
            Judgement::SetGuard => "set_guard",
            Judgement::Evidence => "evidence",
            Judgement::Confirmation => "confirmation",
            Judgement::T0Baseline => "t0_baseline",
        }
    }
}

/// A recorded judgement the observations do not give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Differs {
    pub iteration: u64,
    pub judgement: Judgement,
    pub recorded: String,
    pub derived: String,
}

impl Differs {
    /// The sentence naming the iteration, the judgement and both values.
    pub fn detail(&self) -> String {
        let at = match self.iteration {
            0 => "t0".to_string(),
            n => format!("iteration {n}"),
        };
        format!("the {} judgement of {at} is recorded as {}, but its recorded observations give {}", self.judgement.as_str(), self.recorded, self.derived)
    }
}

/// A judgement that could not be recomputed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReplayed {
    pub iteration: u64,
    pub judgement: Judgement,
    pub why: String,
}

/// What the run pinned that the judgements are recomputed under (`run_start.config`).
#[derive(Debug, Clone, PartialEq)]
pub struct Pins {
    /// `[progress]`; the sentence when it is absent (an earlier version) or does not parse.
    pub limits: Result<Limits, String>,
    pub patterns: Vec<String>,
    pub score: Result<Option<ScoreRule>, String>,
    pub confirm_runs: u64,
    /// The `[[allow_test_change]]` ids the set guard lets through.
    pub allowed_ids: BTreeSet<String>,
}

impl Pins {
    pub fn of(history: &History) -> Pins {
        let config = history.start.as_ref().map(|s| &s.config).cloned().unwrap_or(Value::Null);
        // Every version that records `progress` events pins its limits; a receipt without them
        // predates the progress stage.
        let limits = match config.get("progress") {
            None => Err("its run_start pins no progress limits (a receipt of an earlier version, before progress events)".to_string()),
            Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("run_start's pinned progress limits do not parse ({e})")),
        };
        let score = match config.get("score") {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| format!("run_start's pinned score rule does not parse ({e})")),
        };
        let allowed_ids = config
            .get("allow_test_change")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|a| a.get("id")?.as_str().map(str::to_string))
            .collect();
        Pins {
            limits,
            patterns: pinned_patterns(history),
            score,
            confirm_runs: config.get("confirm_runs").and_then(Value::as_u64).unwrap_or(0),
            allowed_ids,
        }
    }
}

/// The lists of `check` its `externalised` events moved out that it does not hold whole now
/// (the artifact was not read back): one sentence each. A list is whole when the event holds as
/// many items (for a trimmed string, bytes) as the bound recorded.
fn unrestored(check: &CheckResult, externalised: &[Externalised], of: &str) -> Vec<String> {
    let Ok(value) = serde_json::to_value(check) else { return vec![format!("its {of} does not serialise")] };
    let mut out = Vec::new();
    for x in externalised.iter().filter(|x| x.of == of && x.iteration == check.iteration) {
        for (key, list) in &x.lists {
            let pointer = if key.starts_with('/') { key.clone() } else { format!("/{key}") };
            let held = match value.pointer(&pointer) {
                Some(Value::Array(items)) => Some(items.len() as u64),
                Some(Value::String(s)) => Some(s.len() as u64),
                _ => None,
            };
            if held != Some(list.count) {
                out.push(format!("{of} {key} of {} is in {}, absent or changed", at(check.iteration), crate::inert::inert(&x.artifact.path)));
            }
        }
    }
    out
}

/// Why the recorded iteration's check does not hold its lists whole, if it does not (the first
/// list not read back).
pub fn unrestored_sets(record: &IterationRecord) -> Option<String> {
    unrestored(record.check.as_ref()?, &record.externalised, "check_result").into_iter().next()
}

fn at(iteration: u64) -> String {
    match iteration {
        0 => "t0".into(),
        n => format!("iteration {n}"),
    }
}

/// Why t0's sets are not whole in the history, if they are not.
fn t0_unrestored(history: &History) -> Option<String> {
    let baseline = history.check_baseline.as_ref()?;
    let externalised: Vec<Externalised> = history.check_baseline_externalised.iter().map(|x| Externalised { of: "check_result".into(), iteration: 0, ..x.clone() }).collect();
    let mut check = baseline.check.clone();
    check.iteration = 0;
    unrestored(&check, &externalised, "check_result").into_iter().next().map(|why| why.replacen("check_result", "check_baseline", 1))
}

/// The history as the live loop held it when it judged iteration `n`: the operator's hand
/// acceptances recorded after iteration `n` started are not yet in it.
fn as_of(history: &History, n: u64) -> std::borrow::Cow<'_, History> {
    if history.hand_accepted.iter().all(|(_, after)| *after < n) {
        return std::borrow::Cow::Borrowed(history);
    }
    let mut then = history.clone();
    then.hand_accepted.retain(|(_, after)| *after < n);
    std::borrow::Cow::Owned(then)
}

fn progress_value(accepted: bool, halt: Option<HaltReason>, targets_met: bool) -> String {
    let halt = halt.map_or("no halt".to_string(), |h| h.as_str().to_string());
    format!("accepted {accepted}, {halt}, targets_met {targets_met}")
}

/// Recompute the judgements of the recorded iteration `record` (its agent step and check
/// recorded). `earlier_unrestored`: why an earlier iteration's (or t0's) sets are not whole, when
/// they are not (the trajectory the progress rules read is then incomplete).
pub fn replay_iteration(history: &History, record: &IterationRecord, pins: &Pins, earlier_unrestored: Option<&str>) -> Result<Vec<NotReplayed>, Differs> {
    let mut skipped = Vec::new();
    let Some(check) = &record.check else { return Ok(skipped) };
    let n = record.iteration;
    let holes = unrestored(check, &record.externalised, "check_result");
    let t0_hole = t0_unrestored(history);
    let not = |judgement: Judgement, why: String| NotReplayed { iteration: n, judgement, why };
    // progress
    let progress_hole = holes.first().cloned().or_else(|| t0_hole.clone()).or_else(|| earlier_unrestored.map(str::to_string));
    match (&pins.limits, &pins.score, progress_hole) {
        (_, _, Some(why)) => skipped.push(not(Judgement::Progress, why)),
        (Err(why), _, _) | (_, Err(why), _) => skipped.push(not(Judgement::Progress, why.clone())),
        (Ok(limits), Ok(score), None) => {
            let derived = judge_scored(&as_of(history, n), n, limits, &pins.patterns, *score);
            let shown = |p: &Option<crate::receipt::events::ProgressRecord>| match p {
                None => "none (the check named no tests)".to_string(),
                Some(p) => progress_value(p.accepted, p.halt_reason, p.targets_met),
            };
            let same = match (&derived, &record.progress) {
                (None, None) => true,
                (Some(d), Some(r)) => (d.accepted, d.halt_reason, d.targets_met) == (r.accepted, r.halt_reason, r.targets_met),
                _ => false,
            };
            if !same {
                return Err(Differs { iteration: n, judgement: Judgement::Progress, recorded: shown(&record.progress), derived: shown(&derived) });
            }
        }
    }
    // set guard: only a check that exited 0, against a t0 whose sets were measured
    if check.check_exit == Some(0) {
        if let Some(t0) = history.check_baseline.as_ref().and_then(|b| T0Sets::of_check(&b.check)) {
            match holes.first().cloned().or(t0_hole) {
                Some(why) => skipped.push(not(Judgement::SetGuard, why)),
                None => {
                    let derived = violation_of("the check", n, &exempting(check, &t0, &pins.allowed_ids), &t0);
                    let ours = |g: &&crate::receipt::events::GuardRecord| {
                        g.guard == GUARD && g.stage == STAGE && g.detail.starts_with(&format!("the check exited 0 at iteration {n} but against the t0 baseline"))
                    };
                    let recorded = record.guards.iter().find(ours);
                    let shown = |g: Option<&crate::receipt::events::GuardRecord>| match g {
                        None => "no finding".to_string(),
                        Some(g) => format!("{} ({})", g.halt_reason, crate::inert::inert(&g.detail)),
                    };
                    let same = match (&derived, recorded) {
                        (None, None) => true,
                        (Some(d), Some(r)) => d.halt_reason == r.halt_reason && (d.findings == r.findings || d.detail == r.detail),
                        _ => false,
                    };
                    if !same {
                        return Err(Differs { iteration: n, judgement: Judgement::SetGuard, recorded: shown(recorded), derived: shown(derived.as_ref()) });
                    }
                }
            }
        }
    }
    // evidence: the recorded verdict against the exit and the reports' recorded counts
    if let Some(derived) = evidence_verdict(check) {
        let recorded = check.evidence.as_ref().map(|e| e.verdict.clone()).unwrap_or_default();
        if derived != recorded {
            return Err(Differs { iteration: n, judgement: Judgement::Evidence, recorded: format!("verdict {}", crate::inert::inert(&recorded)), derived: format!("verdict {derived}") });
        }
    }
    Ok(skipped)
}

/// The verdict a check's recorded evidence must carry, from its exit code, the disagreements it
/// recorded and its declared reports' recorded counts (`testreport::agreement`: a report that
/// could not be used, holds no test, or shows failures disagrees with a zero exit). None when the
/// check recorded no evidence (it did not exit, or was recorded before evidence was).
pub fn evidence_verdict(check: &CheckResult) -> Option<&'static str> {
    let evidence = check.evidence.as_ref()?;
    let exit = check.check_exit?;
    if exit != 0 {
        return Some("red");
    }
    let reports_disagree = evidence.reports.iter().any(|r| match (&r.error, r.counts) {
        (Some(_), _) => true,
        (None, Some([total, _, failed, _])) => failed > 0 || (total == 0 && failed == 0),
        (None, None) => false,
    });
    match reports_disagree || !evidence.disagreements.is_empty() {
        true => Some("disagree"),
        false => Some("green"),
    }
}

/// The confirmation bound of a recorded success at the iteration `record`: it stands on
/// `confirm_runs` confirmation reruns (a disagreeing one is decided by `super::decide::flake`).
pub fn replay_confirmations(record: &IterationRecord, pins: &Pins) -> Result<(), Differs> {
    let held = record.confirmations.len() as u64;
    if held >= pins.confirm_runs {
        return Ok(());
    }
    Err(Differs {
        iteration: record.iteration,
        judgement: Judgement::Confirmation,
        recorded: format!("a success on {held} confirmation rerun(s)"),
        derived: format!("no success: the run asks for {} agreeing confirmation rerun(s)", pins.confirm_runs),
    })
}

/// What t0's recorded check succeeded as (none: it did not), and why that cannot be said.
fn t0_success(history: &History, pins: &Pins) -> Result<Option<T0Success>, String> {
    let Some(baseline) = &history.check_baseline else { return Ok(None) };
    if Verdict::of_check(&baseline.check) == Verdict::Pass {
        return Ok(Some(T0Success::Green));
    }
    if let Some(why) = t0_unrestored(history) {
        return Err(why);
    }
    Ok(met_on_t0(&pins.patterns, &baseline.check).then(|| T0Success::TargetsMet("every target already passes on t0".into())))
}

/// The halts at t0 a successful t0 record can still end with: the supervisor's own failures
/// and the check found writing to t0.
fn machinery(reason: HaltReason) -> bool {
    matches!(
        reason,
        HaltReason::WorkspaceInvalid
            | HaltReason::IsolationUnsatisfiable
            | HaltReason::CredentialScopeInvalid
            | HaltReason::InternalError
            | HaltReason::ExecutionFailure
            | HaltReason::MetricIntegrityViolation
    )
}

fn step_name(step: &Step) -> String {
    match step {
        Step::Continue => "continue (no halt)".into(),
        Step::Halt(reason, _) => reason.as_str().into(),
        Step::Interrupted(signal) => format!("interrupted by signal {signal}"),
    }
}

/// The t0 decision of a run that started iterations: a t0 that succeeded (confirmed or not)
/// halts before the first agent call, so a run that went on past it is inconsistent.
pub fn replay_t0_passed_by(history: &History, pins: &Pins) -> Result<Option<NotReplayed>, Differs> {
    let success = match t0_success(history, pins) {
        Ok(Some(success)) => success,
        Ok(None) => return Ok(None),
        Err(why) => return Ok(Some(NotReplayed { iteration: 0, judgement: Judgement::T0Baseline, why })),
    };
    let step = decide_t0_success(history, pins.confirm_runs, &success);
    Err(Differs {
        iteration: 0,
        judgement: Judgement::T0Baseline,
        recorded: format!("no halt (the run started iteration {})", history.last_started.min(1)),
        derived: step_name(&step),
    })
}

/// The decision on t0 of a run that halted `recorded` at iteration 0 before any iteration:
/// `Ok(None)` when it follows, `Ok(Some(why))` when t0's record cannot decide it (a halt of the
/// reference, the doctor gates or the machinery), a mismatch when t0's record decides otherwise.
pub fn replay_t0_halt(history: &History, pins: &Pins, recorded: HaltReason) -> Result<Option<String>, Differs> {
    let differs = |derived: String| Differs { iteration: 0, judgement: Judgement::T0Baseline, recorded: recorded.as_str().to_string(), derived };
    let decided_on_t0 = matches!(recorded, HaltReason::SuccessConditionMet | HaltReason::CheckNotDeterministic);
    let success = match t0_success(history, pins) {
        Ok(success) => success,
        Err(why) => return Ok(Some(why)),
    };
    let Some(success) = success else {
        if decided_on_t0 {
            let derived = match &history.check_baseline {
                None => "no t0 baseline recorded".to_string(),
                Some(_) => "continue (t0 is red and its targets do not all pass)".to_string(),
            };
            return Err(differs(derived));
        }
        return Ok(Some(format!("{recorded} at iteration 0 is decided by run-level events this rule does not replay (the reference, the doctor gates, the targets' selection, the machinery)")));
    };
    let step = decide_t0_success(history, pins.confirm_runs, &success);
    match &step {
        Step::Halt(reason, _) if *reason == recorded => Ok(None),
        // The machinery failing on the way (a zone, a rerun that could not start), or the check
        // writing to t0 (its `guard` event): recorded by the engine, not decided by t0's record.
        _ if machinery(recorded) => Ok(Some(format!("{recorded} at iteration 0 records what the machinery did on t0, accepted as recorded ({} by t0's record)", step_name(&step)))),
        _ => Err(differs(step_name(&step))),
    }
}
