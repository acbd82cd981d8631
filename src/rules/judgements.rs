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
//!   run whose t0 so succeeded never started an iteration;
//! - `canary`: the `adequacy` event's counts and verdict against its recorded mutants'
//!   outcomes, the halting guard they give ([`super::canary`]) against the recorded one, and a
//!   detached green's success standing on a recorded canary when `adequacy` is pinned on.
//!
//! What it cannot recompute is named ([`NotReplayed`]), never passed silently and never a
//! mismatch: a list the receipt moved to a run artifact (`externalised`) that was not read back
//! whole (the artifact absent or changed), or a pinned parameter that does not parse (a receipt
//! of an earlier version).

use super::baseline::{decide_t0_success, T0Success};
use super::canary::canary_guard;
use super::decide::Step;
use super::progress::{judge_scored, ScoreRule};
use super::set_guards::{exempting, violation_of, T0Sets, GUARD, STAGE};
use super::targets::{met_on_t0, pinned_patterns};
use super::verdict::Verdict;
use crate::convergence::rules::Limits;
use crate::halt::HaltReason;
use crate::mutation::verdict::{score, Adequacy};
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
    Canary,
}

impl Judgement {
    pub fn as_str(self) -> &'static str {
        match self {
            Judgement::Progress => "progress",
            Judgement::SetGuard => "set_guard",
            Judgement::Evidence => "evidence",
            Judgement::Confirmation => "confirmation",
            Judgement::T0Baseline => "t0_baseline",
            Judgement::Canary => "canary",
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
        format!(
            "the {} judgement of {at} is recorded as {}, but its recorded observations give {}",
            self.judgement.as_str(),
            self.recorded,
            self.derived
        )
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
    /// Whether the adequacy canary must run on a detached green: `adequacy.mode` pinned other
    /// than `off` and the workspace detached (`None`: the receipt pins no adequacy mode, an
    /// earlier version's).
    pub canary_required: Option<bool>,
}

impl Pins {
    pub fn of(history: &History) -> Pins {
        let config = history
            .start
            .as_ref()
            .map(|s| &s.config)
            .cloned()
            .unwrap_or(Value::Null);
        // Every version that records `progress` events pins its limits; a receipt without them
        // predates the progress stage.
        let limits = match config.get("progress") {
            None => Err("its run_start pins no progress limits (a receipt of an earlier version, before progress events)".to_string()),
            Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("run_start's pinned progress limits do not parse ({e})")),
        };
        let score = match config.get("score") {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v.clone())
                .map(Some)
                .map_err(|e| format!("run_start's pinned score rule does not parse ({e})")),
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
            confirm_runs: config
                .get("confirm_runs")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            allowed_ids,
            canary_required: config
                .pointer("/adequacy/mode")
                .and_then(Value::as_str)
                .map(|mode| {
                    mode != "off"
                        && config.get("workspace").and_then(Value::as_str) == Some("detached")
                }),
        }
    }
}

/// The lists of `check` its `externalised` events moved out that it does not hold whole now
/// (the artifact was not read back): one sentence each. A list is whole when the event holds as
/// many items (for a trimmed string, bytes) as the bound recorded.
fn unrestored(check: &CheckResult, externalised: &[Externalised], of: &str) -> Vec<String> {
    let Ok(value) = serde_json::to_value(check) else {
        return vec![format!("its {of} does not serialise")];
    };
    let mut out = Vec::new();
    for x in externalised
        .iter()
        .filter(|x| x.of == of && x.iteration == check.iteration)
    {
        for (key, list) in &x.lists {
            let pointer = if key.starts_with('/') {
                key.clone()
            } else {
                format!("/{key}")
            };
            let held = match value.pointer(&pointer) {
                Some(Value::Array(items)) => Some(items.len() as u64),
                Some(Value::String(s)) => Some(s.len() as u64),
                _ => None,
            };
            if held != Some(list.count) {
                out.push(format!(
                    "{of} {key} of {} is in {}, absent or changed",
                    at(check.iteration),
                    crate::inert::inert(&x.artifact.path)
                ));
            }
        }
    }
    out
}

/// Why the recorded iteration's check does not hold its lists whole, if it does not (the first
/// list not read back).
pub fn unrestored_sets(record: &IterationRecord) -> Option<String> {
    unrestored(record.check.as_ref()?, &record.externalised, "check_result")
        .into_iter()
        .next()
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
    let externalised: Vec<Externalised> = history
        .check_baseline_externalised
        .iter()
        .map(|x| Externalised {
            of: "check_result".into(),
            iteration: 0,
            ..x.clone()
        })
        .collect();
    let mut check = baseline.check.clone();
    check.iteration = 0;
    unrestored(&check, &externalised, "check_result")
        .into_iter()
        .next()
        .map(|why| why.replacen("check_result", "check_baseline", 1))
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
pub fn replay_iteration(
    history: &History,
    record: &IterationRecord,
    pins: &Pins,
    earlier_unrestored: Option<&str>,
) -> Result<Vec<NotReplayed>, Differs> {
    let mut skipped = Vec::new();
    let Some(check) = &record.check else {
        return Ok(skipped);
    };
    let n = record.iteration;
    let holes = unrestored(check, &record.externalised, "check_result");
    let t0_hole = t0_unrestored(history);
    let not = |judgement: Judgement, why: String| NotReplayed {
        iteration: n,
        judgement,
        why,
    };
    // progress
    let progress_hole = holes
        .first()
        .cloned()
        .or_else(|| t0_hole.clone())
        .or_else(|| earlier_unrestored.map(str::to_string));
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
                (Some(d), Some(r)) => {
                    (d.accepted, d.halt_reason, d.targets_met)
                        == (r.accepted, r.halt_reason, r.targets_met)
                }
                _ => false,
            };
            if !same {
                return Err(Differs {
                    iteration: n,
                    judgement: Judgement::Progress,
                    recorded: shown(&record.progress),
                    derived: shown(&derived),
                });
            }
        }
    }
    // set guard: only a check that exited 0, against a t0 whose sets were measured
    if check.check_exit == Some(0) {
        if let Some(t0) = history
            .check_baseline
            .as_ref()
            .and_then(|b| T0Sets::of_check(&b.check))
        {
            match holes.first().cloned().or(t0_hole) {
                Some(why) => skipped.push(not(Judgement::SetGuard, why)),
                None => {
                    let derived = violation_of(
                        "the check",
                        n,
                        &exempting(check, &t0, &pins.allowed_ids),
                        &t0,
                    );
                    let ours = |g: &&crate::receipt::events::GuardRecord| {
                        g.guard == GUARD
                            && g.stage == STAGE
                            && g.detail.starts_with(&format!(
                                "the check exited 0 at iteration {n} but against the t0 baseline"
                            ))
                    };
                    let recorded = record.guards.iter().find(ours);
                    let shown = |g: Option<&crate::receipt::events::GuardRecord>| match g {
                        None => "no finding".to_string(),
                        Some(g) => {
                            format!("{} ({})", g.halt_reason, crate::inert::inert(&g.detail))
                        }
                    };
                    let same = match (&derived, recorded) {
                        (None, None) => true,
                        (Some(d), Some(r)) => {
                            d.halt_reason == r.halt_reason
                                && (d.findings == r.findings || d.detail == r.detail)
                        }
                        _ => false,
                    };
                    if !same {
                        return Err(Differs {
                            iteration: n,
                            judgement: Judgement::SetGuard,
                            recorded: shown(recorded),
                            derived: shown(derived.as_ref()),
                        });
                    }
                }
            }
        }
    }
    // the canary: its recorded outcome against its recorded mutants
    if let Some(why) = replay_canary(record)? {
        skipped.push(why);
    }
    // evidence: the recorded verdict against the exit and the reports' recorded counts
    if let Some(derived) = evidence_verdict(check) {
        let recorded = check
            .evidence
            .as_ref()
            .map(|e| e.verdict.clone())
            .unwrap_or_default();
        if derived != recorded {
            return Err(Differs {
                iteration: n,
                judgement: Judgement::Evidence,
                recorded: format!("verdict {}", crate::inert::inert(&recorded)),
                derived: format!("verdict {derived}"),
            });
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
    // `--report` patterns that could not be resolved at all: no report was read, whatever the exit.
    if evidence.reports.is_empty()
        && evidence
            .disagreements
            .iter()
            .any(|d| d.kind == "report_unusable" && d.subject == "--report")
    {
        return Some("disagree");
    }
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
        derived: format!(
            "no success: the run asks for {} agreeing confirmation rerun(s)",
            pins.confirm_runs
        ),
    })
}

/// The canary's recorded outcome at the iteration `record` against its recorded mutants: the
/// counts and the verdict `mutation::verdict::score` gives them, and the `guard` event that
/// outcome gives (`super::canary`). `Ok(Some)`: not replayed, and why (the mutator gave no
/// mutant, or the mutants were trimmed to the receipt's bound and not read back).
pub fn replay_canary(record: &IterationRecord) -> Result<Option<NotReplayed>, Differs> {
    let Some(adequacy) = &record.adequacy else {
        return Ok(None);
    };
    let n = record.iteration;
    let not = |why: String| {
        Ok(Some(NotReplayed {
            iteration: n,
            judgement: Judgement::Canary,
            why,
        }))
    };
    if adequacy.tier == "external"
        && adequacy.mutants.is_empty()
        && adequacy.verdict == Adequacy::NotRun.as_str()
    {
        return not("the operator's mutator gave no mutant to run: its outcome is its exit, taken as recorded".into());
    }
    if adequacy.mutants.len() as u64 != adequacy.sampled {
        return not(format!(
            "the adequacy event holds {} of its {} mutants (trimmed to the receipt's bound, not read back)",
            adequacy.mutants.len(),
            adequacy.sampled
        ));
    }
    let derived = score(&adequacy.mutants);
    let counts = |killed: u64, survived: u64, not_run: u64, score: Option<f64>, verdict: &str| {
        format!("killed {killed}, survived {survived}, not run {not_run}, score {score:?}, verdict {verdict}")
    };
    let recorded_counts = counts(
        adequacy.killed,
        adequacy.survived,
        adequacy.not_run,
        adequacy.score,
        &crate::inert::inert(&adequacy.verdict),
    );
    let derived_counts = counts(
        derived.killed,
        derived.survived,
        derived.not_run,
        derived.score,
        derived.verdict.as_str(),
    );
    if recorded_counts != derived_counts {
        return Err(Differs {
            iteration: n,
            judgement: Judgement::Canary,
            recorded: recorded_counts,
            derived: derived_counts,
        });
    }
    let guard = canary_guard(adequacy, derived.verdict);
    let recorded = record
        .guards
        .iter()
        .find(|g| g.guard == "adequacy" && g.stage == "after_check");
    let shown = |g: Option<&crate::receipt::events::GuardRecord>| match g {
        None => "no guard".to_string(),
        Some(g) => format!(
            "a guard halting {} ({})",
            g.halt_reason,
            crate::inert::inert(&g.detail)
        ),
    };
    let same = match (&guard, recorded) {
        (None, None) => true,
        (Some(d), Some(r)) => d.halt_reason == r.halt_reason && d.detail == r.detail,
        _ => false,
    };
    if !same {
        return Err(Differs {
            iteration: n,
            judgement: Judgement::Canary,
            recorded: shown(recorded),
            derived: shown(guard.as_ref()),
        });
    }
    Ok(None)
}

/// A recorded success at the iteration `record` whose green the canary had to judge (a detached
/// workspace, adequacy not `off`, a check that passed) stands on a recorded `adequacy` event.
pub fn replay_canary_ran(record: &IterationRecord, pins: &Pins) -> Result<(), Differs> {
    let green = record
        .check
        .as_ref()
        .is_some_and(|c| Verdict::of_check(c) == Verdict::Pass);
    if pins.canary_required != Some(true) || !green || record.adequacy.is_some() {
        return Ok(());
    }
    Err(Differs {
        iteration: record.iteration,
        judgement: Judgement::Canary,
        recorded: "a success with no adequacy event".into(),
        derived: "no success before the adequacy canary judged the green (adequacy pinned on, detached workspace)".into(),
    })
}

/// What t0's recorded check succeeded as (none: it did not), and why that cannot be said.
fn t0_success(history: &History, pins: &Pins) -> Result<Option<T0Success>, String> {
    let Some(baseline) = &history.check_baseline else {
        return Ok(None);
    };
    if Verdict::of_check(&baseline.check) == Verdict::Pass {
        return Ok(Some(T0Success::Green));
    }
    if let Some(why) = t0_unrestored(history) {
        return Err(why);
    }
    Ok(met_on_t0(&pins.patterns, &baseline.check)
        .then(|| T0Success::TargetsMet("every target already passes on t0".into())))
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
        Err(why) => {
            return Ok(Some(NotReplayed {
                iteration: 0,
                judgement: Judgement::T0Baseline,
                why,
            }))
        }
    };
    let step = decide_t0_success(history, pins.confirm_runs, &success);
    Err(Differs {
        iteration: 0,
        judgement: Judgement::T0Baseline,
        recorded: format!(
            "no halt (the run started iteration {})",
            history.last_started.min(1)
        ),
        derived: step_name(&step),
    })
}

/// The decision on t0 of a run that halted `recorded` at iteration 0 before any iteration:
/// `Ok(None)` when it follows, `Ok(Some(why))` when t0's record cannot decide it (a halt of the
/// reference, the doctor gates or the machinery), a mismatch when t0's record decides otherwise.
pub fn replay_t0_halt(
    history: &History,
    pins: &Pins,
    recorded: HaltReason,
) -> Result<Option<String>, Differs> {
    let differs = |derived: String| Differs {
        iteration: 0,
        judgement: Judgement::T0Baseline,
        recorded: recorded.as_str().to_string(),
        derived,
    };
    let decided_on_t0 = matches!(
        recorded,
        HaltReason::SuccessConditionMet | HaltReason::CheckNotDeterministic
    );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::bounded::{ArtifactRef, BoundedList};
    use crate::receipt::events::{
        sample, CheckBaselineRecord, CheckEvidence, ConfirmationRecord, Event, Recorded,
        ReportRecord,
    };
    use crate::rules::derive::{derive_halt, Mismatch};

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    /// A check of iteration `n` whose report collected `collected` with `failing` failing (exit 1
    /// unless nothing fails).
    fn check(n: u64, collected: &[&str], failing: &[&str]) -> CheckResult {
        let Event::CheckResult(mut c) =
            sample::check_result(n, if failing.is_empty() { 0 } else { 1 })
        else {
            unreachable!()
        };
        c.collected_set = Some(ids(collected));
        c.failing_set = Some(ids(failing));
        c.skipped_set = Some(vec![]);
        c
    }

    /// A receipt being written as the engine writes it: each iteration's `progress` event is the
    /// judgement of the history before it, under the pinned limits.
    struct Receipt {
        events: Vec<Event>,
        targets: Vec<String>,
    }

    impl Receipt {
        fn new(confirm_runs: u64, targets: &[&str], t0: Option<CheckResult>) -> Receipt {
            let Event::RunStart(mut start) = sample::run_start("r") else {
                unreachable!()
            };
            start.config = serde_json::json!({
                "check": "true", "exec": "true", "max_iterations": 5, "confirm_runs": confirm_runs,
                "progress": Limits::default(), "targets": targets,
            });
            let mut events = vec![Event::RunStart(start)];
            if let Some(mut t0) = t0 {
                t0.iteration = 0;
                events.push(Event::CheckBaseline(CheckBaselineRecord {
                    check: t0,
                    tree_id: None,
                    cache_key: None,
                    cache_hit: false,
                    cache_note: None,
                    sets_unmeasured: None,
                    inactive_guards: None,
                }));
            }
            Receipt {
                events,
                targets: ids(targets),
            }
        }

        fn history(&self) -> History {
            let recorded: Vec<Recorded> = self
                .events
                .iter()
                .cloned()
                .map(|event| Recorded {
                    event,
                    line: Default::default(),
                })
                .collect();
            History::fold(&recorded)
        }

        /// Iteration `check.iteration`: the agent's step, the check and its honest progress event.
        fn iteration(&mut self, check: CheckResult) -> &mut Receipt {
            let n = check.iteration;
            self.events.push(Event::IterationStart { iteration: n });
            self.events.push(sample::exec_result(n, 0));
            self.events.push(Event::CheckResult(check));
            if let Some(progress) =
                judge_scored(&self.history(), n, &Limits::default(), &self.targets, None)
            {
                self.events.push(Event::Progress(progress));
            }
            self
        }

        fn confirmed(&mut self, n: u64, agreeing: u64) -> &mut Receipt {
            for k in 1..=agreeing {
                let history = self.history();
                let check = match n {
                    0 => history.check_baseline.map(|b| b.check),
                    n => history
                        .iterations
                        .iter()
                        .rev()
                        .find(|r| r.iteration == n)
                        .and_then(|r| r.check.clone()),
                };
                let check = check.expect("a check to confirm");
                let record = ConfirmationRecord {
                    confirmation: k,
                    same_tree_as: None,
                    agrees: true,
                    stability_lower_bound: 0.5,
                    confidence: 0.95,
                    stability_target: 0.95,
                    check,
                };
                self.events.push(Event::CheckConfirmation(record));
            }
            self
        }

        /// The last `progress` event of iteration `n`, rewritten by `forge`.
        fn forge_progress(
            &mut self,
            n: u64,
            forge: impl Fn(&mut crate::receipt::events::ProgressRecord),
        ) -> &mut Receipt {
            for event in self.events.iter_mut().rev() {
                if let Event::Progress(p) = event {
                    if p.iteration == n {
                        forge(p);
                        return self;
                    }
                }
            }
            panic!("no progress event of iteration {n}");
        }

        fn halted(
            &mut self,
            reason: HaltReason,
            at: u64,
        ) -> Result<Option<crate::rules::derive::Derivation>, Mismatch> {
            self.events.push(sample::halt(reason, at));
            derive_halt(&self.history())
        }
    }

    const C0: [&str; 4] = ["a", "b", "c", "d"];

    #[test]
    fn an_honest_run_with_progress_set_guard_and_confirmations_follows_with_every_judgement_replayed(
    ) {
        let found = Receipt::new(1, &[], Some(check(0, &C0, &["a", "b"])))
            .iteration(check(1, &C0, &["a"]))
            .iteration(check(2, &C0, &[]))
            .confirmed(2, 1)
            .halted(HaltReason::SuccessConditionMet, 2)
            .unwrap()
            .unwrap();
        assert_eq!(
            (found.not_replayed, found.judgements_not_replayed),
            (None, vec![])
        );
    }

    #[test]
    fn a_forged_targets_met_where_the_sets_do_not_meet_the_targets_is_a_progress_mismatch() {
        let found = Receipt::new(0, &["a"], Some(check(0, &C0, &["a", "b"])))
            .iteration(check(1, &C0, &["a", "b"]))
            .forge_progress(1, |p| p.targets_met = true)
            .halted(HaltReason::SuccessConditionMet, 1)
            .unwrap_err();
        assert_eq!((found.iteration, found.judgement), (1, "progress"));
        assert_eq!(
            found.detail,
            "the progress judgement of iteration 1 is recorded as accepted true, no halt, targets_met true, but its recorded observations give accepted true, no halt, targets_met false"
        );
    }

    #[test]
    fn a_forged_no_progress_detected_where_progress_was_made_is_a_progress_mismatch() {
        let found = Receipt::new(0, &[], Some(check(0, &C0, &["a", "b", "c"])))
            .iteration(check(1, &C0, &["a", "b"]))
            .iteration(check(2, &C0, &["a"]))
            .forge_progress(2, |p| p.halt_reason = Some(HaltReason::NoProgressDetected))
            .halted(HaltReason::NoProgressDetected, 2)
            .unwrap_err();
        assert_eq!(
            (found.iteration, found.judgement, found.derived.as_str()),
            (2, "progress", "accepted true, no halt, targets_met false")
        );
    }

    #[test]
    fn a_dropped_set_guard_finding_on_a_test_deleted_from_c0_is_a_set_guard_mismatch() {
        let found = Receipt::new(0, &[], Some(check(0, &C0, &["a"])))
            .iteration(check(1, &["b", "c", "d"], &[]))
            .halted(HaltReason::SuccessConditionMet, 1)
            .unwrap_err();
        assert_eq!((found.iteration, found.judgement), (1, "set_guard"));
        assert_eq!(
            found.detail,
            "the set_guard judgement of iteration 1 is recorded as no finding, but its recorded observations give metric_integrity_violation \
             (the check exited 0 at iteration 1 but against the t0 baseline 1 test(s) of t0's 4 collected are no longer collected)"
        );
    }

    #[test]
    fn a_test_the_operator_pinned_as_allowed_to_go_is_no_set_guard_finding() {
        let mut receipt = Receipt::new(0, &[], Some(check(0, &C0, &["a"])));
        let Event::RunStart(start) = &mut receipt.events[0] else {
            unreachable!()
        };
        start.config["allow_test_change"] =
            serde_json::json!([{"id": "a", "reason": "a was a duplicate"}]);
        let found = receipt
            .iteration(check(1, &["b", "c", "d"], &[]))
            .halted(HaltReason::SuccessConditionMet, 1)
            .unwrap()
            .unwrap();
        assert_eq!(found.judgements_not_replayed, vec![]);
    }

    #[test]
    fn a_success_on_fewer_confirmations_than_the_run_asks_for_is_a_confirmation_mismatch() {
        let found = Receipt::new(2, &[], Some(check(0, &C0, &["a"])))
            .iteration(check(1, &C0, &[]))
            .confirmed(1, 1)
            .halted(HaltReason::SuccessConditionMet, 1)
            .unwrap_err();
        assert_eq!((found.iteration, found.judgement), (1, "confirmation"));
        assert_eq!(
            found.derived,
            "no success: the run asks for 2 agreeing confirmation rerun(s)"
        );
    }

    #[test]
    fn a_forged_success_at_t0_on_a_red_baseline_is_a_t0_baseline_mismatch() {
        let found = Receipt::new(0, &[], Some(check(0, &C0, &["a"])))
            .halted(HaltReason::SuccessConditionMet, 0)
            .unwrap_err();
        assert_eq!(
            (found.iteration, found.judgement, found.derived.as_str()),
            (
                0,
                "t0_baseline",
                "continue (t0 is red and its targets do not all pass)"
            )
        );
    }

    #[test]
    fn a_green_t0_confirmed_as_the_run_asks_is_success_at_t0_and_unconfirmed_is_not() {
        let mut confirmed = Receipt::new(1, &[], Some(check(0, &C0, &[])));
        confirmed.confirmed(0, 1);
        assert_eq!(
            confirmed
                .halted(HaltReason::SuccessConditionMet, 0)
                .unwrap()
                .unwrap()
                .not_replayed,
            None
        );
        let found = Receipt::new(1, &[], Some(check(0, &C0, &[])))
            .halted(HaltReason::SuccessConditionMet, 0)
            .unwrap_err();
        assert_eq!(
            (found.judgement, found.derived.as_str()),
            ("t0_baseline", "internal_error")
        );
    }

    #[test]
    fn a_run_that_went_on_past_a_confirmed_green_t0_is_a_t0_baseline_mismatch() {
        let found = Receipt::new(0, &[], Some(check(0, &C0, &[])))
            .iteration(check(1, &C0, &["a"]))
            .halted(HaltReason::MaxIterationsReached, 1)
            .unwrap_err();
        assert_eq!(
            (found.iteration, found.judgement, found.derived.as_str()),
            (0, "t0_baseline", "success_condition_met")
        );
    }

    #[test]
    fn a_green_verdict_whose_report_counts_show_failures_is_an_evidence_mismatch() {
        let mut green = check(1, &C0, &[]);
        let report = ReportRecord {
            pattern: "r.xml".into(),
            path: Some("r.xml".into()),
            format: Some("junit".into()),
            counts: Some([4, 3, 1, 0]),
            error: None,
        };
        green.evidence = Some(CheckEvidence {
            verdict: "green".into(),
            reports: vec![report],
            sources: vec!["r.xml".into()],
            disagreements: vec![],
        });
        let found = Receipt::new(0, &[], Some(check(0, &C0, &["a"])))
            .iteration(green)
            .halted(HaltReason::SuccessConditionMet, 1)
            .unwrap_err();
        assert_eq!((found.iteration, found.judgement), (1, "evidence"));
        assert_eq!(found.detail, "the evidence judgement of iteration 1 is recorded as verdict green, but its recorded observations give verdict disagree");
    }

    #[test]
    fn sets_moved_to_an_artifact_that_was_not_read_back_name_their_judgements_not_replayed() {
        let mut receipt = Receipt::new(0, &[], Some(check(0, &C0, &["a", "b"])));
        receipt.iteration(check(1, &C0, &["a"]));
        let mut large = check(2, &C0, &[]);
        large.collected_set = None;
        receipt.iteration(large);
        let artifact = ArtifactRef {
            path: "artifacts/0002-check_result.json".into(),
            bytes: 9,
            sha256: "0".repeat(64),
        };
        let list = BoundedList {
            count: 4,
            sha256: "0".repeat(64),
            sample: ids(&C0),
        };
        let x = Externalised {
            of: "check_result".into(),
            iteration: 2,
            lists: [("collected_set".to_string(), list)].into(),
            artifact,
            whole_event: false,
        };
        let at = receipt
            .events
            .iter()
            .position(|e| matches!(e, Event::CheckResult(c) if c.iteration == 2))
            .unwrap();
        receipt.events.insert(at + 1, Event::Externalised(x));
        let found = receipt
            .halted(HaltReason::SuccessConditionMet, 2)
            .unwrap()
            .unwrap();
        let why = "check_result collected_set of iteration 2 is in artifacts/0002-check_result.json, absent or changed".to_string();
        assert_eq!(
            found.judgements_not_replayed,
            vec![
                NotReplayed {
                    iteration: 2,
                    judgement: Judgement::Progress,
                    why: why.clone()
                },
                NotReplayed {
                    iteration: 2,
                    judgement: Judgement::SetGuard,
                    why: why.clone()
                }
            ]
        );
        assert!(found.detail().ends_with(&format!("; judgement(s) not replayed: progress of iteration 2 ({why}); set_guard of iteration 2 ({why})")), "{}", found.detail());
    }

    fn mutant(outcome: crate::mutation::MutantOutcome) -> crate::mutation::MutantResult {
        crate::mutation::MutantResult {
            path: "calc.py".into(),
            line: 3,
            operator: crate::mutation::Operator::ArithmeticFlipped,
            change: "+ -> -".into(),
            outcome,
            check_exit: Some(1),
            duration_ms: 1,
            detail: None,
            stratum: crate::mutation::Stratum::Change,
        }
    }

    /// Iteration 1's green and the canary's outcome on `mutants` as the engine records it: the
    /// counts `score` gives, and the guard `canary_guard` gives, if any.
    fn canaried(mutants: Vec<crate::mutation::MutantResult>) -> IterationRecord {
        let scored = score(&mutants);
        let adequacy = crate::receipt::events::AdequacyRecord {
            iteration: 1,
            tier: "mutation".into(),
            seed: 7,
            generated: mutants.len() as u64,
            sampled: mutants.len() as u64,
            killed: scored.killed,
            survived: scored.survived,
            not_run: scored.not_run,
            score: scored.score,
            verdict: scored.verdict.as_str().into(),
            mutants,
            external_exit: None,
            coverage: None,
            t0_failure_functions: vec![],
            duration_ms: 1,
        };
        let guards = canary_guard(&adequacy, scored.verdict)
            .into_iter()
            .collect();
        let Event::ExecResult(exec) = sample::exec_result(1, 0) else {
            unreachable!()
        };
        IterationRecord {
            iteration: 1,
            exec: Some(exec),
            check: Some(check(1, &["a"], &[])),
            guards,
            adequacy: Some(adequacy),
            ..Default::default()
        }
    }

    use crate::mutation::MutantOutcome::{Killed, Survived};

    #[test]
    fn an_honest_canary_outcome_replays() {
        assert_eq!(
            replay_canary(&canaried(vec![mutant(Killed), mutant(Survived)])),
            Ok(None)
        );
        assert_eq!(
            replay_canary(&canaried(vec![mutant(Survived)])),
            Ok(None),
            "an inadequate check with its guard"
        );
    }

    #[test]
    fn a_canary_verdict_rewritten_to_adequate_over_surviving_mutants_differs() {
        let mut record = canaried(vec![mutant(Survived), mutant(Survived)]);
        record.guards.clear();
        let adequacy = record.adequacy.as_mut().unwrap();
        (
            adequacy.killed,
            adequacy.survived,
            adequacy.score,
            adequacy.verdict,
        ) = (2, 0, Some(1.0), "adequate".into());
        assert_eq!(
            replay_canary(&record),
            Err(Differs {
                iteration: 1,
                judgement: Judgement::Canary,
                recorded: "killed 2, survived 0, not run 0, score Some(1.0), verdict adequate"
                    .into(),
                derived: "killed 0, survived 2, not run 0, score Some(0.0), verdict inadequate"
                    .into(),
            })
        );
    }

    #[test]
    fn a_dropped_canary_guard_differs() {
        let mut record = canaried(vec![mutant(Survived)]);
        record.guards.clear();
        let found = replay_canary(&record).unwrap_err();
        assert_eq!(
            (found.judgement, found.recorded.as_str()),
            (Judgement::Canary, "no guard")
        );
        assert!(found.derived.starts_with("a guard halting check_inadequate (no mutant of the agent's change turned the check red: 1 of 1 survived (seed 7))"), "{}", found.derived);
    }

    #[test]
    fn mutants_trimmed_out_of_the_receipt_are_named_not_replayed() {
        let mut record = canaried(vec![mutant(Killed), mutant(Killed)]);
        record.adequacy.as_mut().unwrap().mutants.truncate(1);
        assert_eq!(
            replay_canary(&record),
            Ok(Some(NotReplayed {
                iteration: 1,
                judgement: Judgement::Canary,
                why: "the adequacy event holds 1 of its 2 mutants (trimmed to the receipt's bound, not read back)".into(),
            }))
        );
    }

    #[test]
    fn a_detached_green_success_without_its_canary_differs_and_with_adequacy_off_does_not() {
        let mut record = canaried(vec![mutant(Killed)]);
        record.adequacy = None;
        let history = History::default();
        let mut pins = Pins::of(&history);
        pins.canary_required = Some(true);
        let found = replay_canary_ran(&record, &pins).unwrap_err();
        assert_eq!(
            (found.judgement, found.recorded.as_str()),
            (Judgement::Canary, "a success with no adequacy event")
        );
        pins.canary_required = Some(false);
        assert_eq!(replay_canary_ran(&record, &pins), Ok(()));
        pins.canary_required = None;
        assert_eq!(
            replay_canary_ran(&record, &pins),
            Ok(()),
            "a receipt that pins no adequacy mode"
        );
    }
}
