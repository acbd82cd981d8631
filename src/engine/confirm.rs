//! Confirmation of a green (or of a red check whose targets all pass, `super::targets`) before
//! `success_condition_met`: the check rerun `confirm_runs` times
//! on the same tree (the iteration's candidate, or t0 for a baseline that succeeded (`super::baseline`),
//! through the one check runner; on resume, the
//! reruns a crashed supervisor did not record, and the canary), each rerun a free
//! sample of the in-loop stability monitor. A rerun whose verdict class or failing set differs
//! from the iteration's `check_result` is a flake, not success: it is recorded
//! (`check_confirmation`, with the Wilson lower bound on stability at the run's confidence) and
//! `decide` halts `check_not_deterministic` on it.
//!
//! An iteration whose agent changed nothing (its snapshot's tree is an earlier iteration's) is a
//! free sample too: its check is compared with the earlier one's, and a disagreement is recorded
//! the same way (`confirmation` 0, `same_tree_as`), so `decide` halts on it whether live or
//! resumed. Agreeing free samples are counted, not recorded: the bound is recomputed from the
//! receipt (the iterations with a repeated tree).
//!
//! `replay`'s rerun of the last check on its recorded tree is a free sample too ([`replay_sample`]):
//! it cannot change the sealed receipt, so the bound over that iteration's confirmation reruns and
//! the replay is printed with the replay's output only.

use super::lifecycle::ActiveRun;
use super::sink::{LoopEvent, Phase};
use crate::error::{CmdResult, Failure};
use crate::receipt::events::{CheckResult, ConfirmationRecord, Event};
use crate::rules::decide::Step;
use crate::rules::stats::{stability_lower_bound, Confidence};
use crate::rules::verdict::Verdict;
use crate::workspace::Snapshot;
use crate::zones::Zone;

/// How the confirmation reruns of a green ended.
pub(super) enum Rerun {
    /// Every rerun ran (or one disagreed): each is recorded.
    Done,
    /// An interrupt, or a zone that could not be set up: this step.
    Stopped(Step),
    /// A rerun wrote to the tree it tested: its finding's halt (the `guard` event is recorded).
    WroteTree(Step),
}

/// Whether a rerun showed what the iteration's check showed: verdict class and failing set.
fn agrees(original: &CheckResult, rerun: &CheckResult) -> bool {
    Verdict::of_check(original) == Verdict::of_check(rerun)
        && original.failing_set == rerun.failing_set
}

impl ActiveRun<'_> {
    /// Rerun iteration `n`'s green check on `tree` (`None`: in place) until `confirm_runs`
    /// reruns agreed or one did not, then decide again.
    pub(super) fn confirm_green(
        &mut self,
        zone: &mut dyn Zone,
        n: u64,
        tree: Option<&Snapshot>,
        original: &CheckResult,
    ) -> CmdResult<Step> {
        self.confirm_green_from(zone, n, tree, original, 1, 0)
    }

    /// The reruns `first..=confirm_runs` of iteration `n`'s green, the `agreeing` earlier ones
    /// counted in the bound, then the decision.
    fn confirm_green_from(
        &mut self,
        zone: &mut dyn Zone,
        n: u64,
        tree: Option<&Snapshot>,
        original: &CheckResult,
        first: u64,
        agreeing: u64,
    ) -> CmdResult<Step> {
        match self.rerun_green(zone, n, tree, original, first, agreeing)? {
            Rerun::Stopped(step) => Ok(step),
            // The rerun's finding is recorded (a `guard` event): `decide` halts on it.
            Rerun::Done | Rerun::WroteTree(_) => Ok(self.decide()),
        }
    }

    /// Rerun the green `original` of iteration `n` (0: the check on t0, `super::baseline`) on
    /// `tree` as reruns `first..=confirm_runs`, each recorded as a `check_confirmation`, until
    /// one did not agree; the `agreeing` earlier ones are counted in the bound.
    pub(super) fn rerun_green(
        &mut self,
        zone: &mut dyn Zone,
        n: u64,
        tree: Option<&Snapshot>,
        original: &CheckResult,
        first: u64,
        agreeing: u64,
    ) -> CmdResult<Rerun> {
        let confidence = Confidence::new(self.cfg.confidence)
            .map_err(|e| Failure::invalid_input(format!("the pinned confidence: {e}")))?;
        let target = 1.0 - self.cfg.max_flake_rate;
        let mut agreeing = agreeing;
        let total = self.cfg.confirm_runs;
        for k in first..=total {
            if let Some(sig) = crate::interrupt::pending() {
                return Ok(Rerun::Stopped(Step::Interrupted(sig)));
            }
            #[cfg(debug_assertions)]
            if k == 1 && n > 0 {
                crate::test_pause::at(crate::test_pause::BEFORE_CONFIRMATION);
            }
            let outcome =
                match self.run_check(zone, n, tree, super::iteration::CheckRun::Confirmation(k))? {
                    Ok(outcome) => outcome,
                    Err(halt) => return Ok(Rerun::Stopped(halt)),
                };
            self.sink.event(&LoopEvent::Progress {
                phase: Phase::Confirmation,
                iteration: n,
                done: k,
                total,
            });
            // The operator's interrupt is no sample of the check: nothing is recorded, the run
            // stops resumable and a resumed run makes this rerun again.
            if let crate::ending::Ending::Interrupted { signal } = outcome.ending() {
                return Ok(Rerun::Stopped(Step::Interrupted(*signal)));
            }
            let check = outcome.record(n);
            let agreed = agrees(original, &check);
            agreeing += u64::from(agreed);
            let bound = stability_lower_bound(agreeing, k, confidence)
                .map_err(|e| Failure::internal(e.to_string()))?;
            self.append(Event::CheckConfirmation(ConfirmationRecord {
                confirmation: k,
                same_tree_as: None,
                agrees: agreed,
                stability_lower_bound: bound,
                confidence: confidence.get(),
                stability_target: target,
                check,
            }))?;
            // A rerun that wrote to the tree it tested halts like the iteration's check would.
            if let Some(finding) = outcome.tree_writes {
                let halt = Step::Halt(finding.halt_reason, finding.detail.clone());
                self.append(Event::Guard(finding))?;
                return Ok(Rerun::WroteTree(halt));
            }
            if !agreed {
                break;
            }
        }
        Ok(Rerun::Done)
    }

    /// A resumed run whose receipt ends in a green iteration decided as success: its held-out
    /// check when configured and not recorded (one that does not find the step green halts,
    /// delivering nothing), the confirmation reruns it lacks (the supervisor died between the
    /// green `check_result` and them) run now on the same tree, and the adequacy canary when
    /// configured and not recorded, before any success. The tree is the workspace as the resumed run took it again, which must be the
    /// green iteration's recorded snapshot (else `workspace_invalid`); the canary's coverage
    /// tier is skipped (the live check's coverage hits are not in the receipt).
    pub(super) fn finish_resumed_green(&mut self, zone: &mut dyn Zone) -> CmdResult<Step> {
        let Some(record) = self.history.current().cloned() else {
            return Ok(self.decide());
        };
        let n = record.iteration;
        // The held-out check comes first, on any success (a green, or met targets) without one.
        let holdout_missing = self.cfg.holdout.is_some() && record.holdout.is_none();
        // The success to confirm: a green, or a red check whose targets all pass.
        let targets_met = record.progress.as_ref().is_some_and(|p| p.targets_met);
        let original = record
            .check
            .clone()
            .filter(|c| Verdict::of_check(c) == Verdict::Pass || targets_met);
        let reruns: Vec<&ConfirmationRecord> = record
            .confirmations
            .iter()
            .filter(|c| c.confirmation > 0)
            .collect();
        let missing = original.is_some()
            && reruns.len() as u64 != self.cfg.confirm_runs
            && reruns.iter().all(|c| c.agrees);
        // Only a green check can show a mutant killed (as live): no canary on met targets.
        let green = original
            .as_ref()
            .is_some_and(|c| Verdict::of_check(c) == Verdict::Pass);
        let canary_missing = green
            && self.cfg.adequacy.mode != super::canary::AdequacyMode::Off
            && !self.history.adequacy_of(n);
        let sentinel_missing = self.cfg.sentinel.enabled && !self.history.sentinel_of(n);
        if !missing && !canary_missing && !sentinel_missing && !holdout_missing {
            return Ok(self.decide());
        }
        let tree = match (self.workspace.as_ref(), record.snapshot.as_ref()) {
            (Some(ws), Some(recorded)) => match ws.last_accepted() {
                Some(snapshot) if snapshot.tree_id.to_hex() == recorded.tree_id => {
                    Some(snapshot.clone())
                }
                other => {
                    let found = other
                        .map(|s| s.tree_id.to_hex().to_string())
                        .unwrap_or_else(|| "none the guards let through".into());
                    let detail = format!("the resumed run cannot confirm iteration {n}'s green: its workspace holds tree {found}, not the recorded {}", recorded.tree_id);
                    return Ok(Step::Halt(
                        crate::halt::HaltReason::WorkspaceInvalid,
                        detail,
                    ));
                }
            },
            _ => None,
        };
        if holdout_missing {
            if let Err(step) = self.holdout_check(zone, n, tree.as_ref())? {
                return Ok(step);
            }
            match self.decide() {
                Step::Halt(crate::halt::HaltReason::SuccessConditionMet, _) => {}
                other => {
                    // The workspace taken again was accepted before the held-out check could
                    // refuse it, and the tree accepted before it is not known to this process:
                    // nothing is delivered.
                    if let Some(ws) = self.workspace.as_mut() {
                        ws.withdraw_acceptance();
                    }
                    return Ok(other);
                }
            }
        }
        if let (true, Some(original)) = (missing, &original) {
            let agreeing = reruns.len() as u64;
            match self.confirm_green_from(
                zone,
                n,
                tree.as_ref(),
                original,
                agreeing + 1,
                agreeing,
            )? {
                Step::Halt(crate::halt::HaltReason::SuccessConditionMet, _) => {}
                other => return Ok(other),
            }
        }
        // The sentinel run judges the iteration's check, green or with its targets met.
        if let (true, Some(check)) = (sentinel_missing, record.check.as_ref()) {
            if let Some(step) = self.sentinel_run(zone, n, check)? {
                return Ok(step);
            }
            if let step @ Step::Halt(reason, _) = self.decide() {
                if reason != crate::halt::HaltReason::SuccessConditionMet {
                    return Ok(step);
                }
            }
        }
        if canary_missing {
            if let Some(step) = self.adequacy_canary(n, None)? {
                return Ok(step);
            }
        }
        Ok(self.decide())
    }

    /// Compare iteration `n`'s check with the latest earlier check on the same tree (detached
    /// workspace), recording a disagreement.
    pub(super) fn same_tree_sample(&mut self, n: u64, check: &CheckResult) -> CmdResult<()> {
        let tree_of = |r: &crate::receipt::history::IterationRecord| {
            r.snapshot.as_ref().map(|s| s.tree_id.clone())
        };
        let Some(tree) = self
            .history
            .iterations
            .iter()
            .find(|r| r.iteration == n)
            .and_then(tree_of)
        else {
            return Ok(());
        };
        // Every earlier iteration whose check ran on a tree an even earlier one had: the samples.
        let mut samples = 0u64;
        let mut agreeing = 0u64;
        let mut seen: std::collections::BTreeMap<String, &CheckResult> =
            std::collections::BTreeMap::new();
        let mut earlier: Option<(u64, CheckResult)> = None;
        for r in self.history.iterations.iter().filter(|r| r.iteration <= n) {
            let (Some(t), Some(c)) = (tree_of(r), r.check.as_ref()) else {
                continue;
            };
            if let Some(prev) = seen.get(&t) {
                samples += 1;
                agreeing += u64::from(agrees(prev, c));
                if r.iteration == n && t == tree {
                    earlier = Some((prev.iteration, (*prev).clone()));
                }
            }
            seen.insert(t, c);
        }
        let Some((m, prev)) = earlier else {
            return Ok(());
        };
        if agrees(&prev, check) {
            return Ok(());
        }
        let confidence = Confidence::new(self.cfg.confidence)
            .map_err(|e| Failure::invalid_input(format!("the pinned confidence: {e}")))?;
        let bound = stability_lower_bound(agreeing, samples, confidence)
            .map_err(|e| Failure::internal(e.to_string()))?;
        self.stage(Event::CheckConfirmation(ConfirmationRecord {
            confirmation: 0,
            same_tree_as: Some(m),
            agrees: false,
            stability_lower_bound: bound,
            confidence: confidence.get(),
            stability_target: 1.0 - self.cfg.max_flake_rate,
            check: check.clone(),
        }))
    }
}

/// The stability of a recorded tree's check after a replay reran it: the replayed iteration's
/// confirmation reruns (`confirmation` > 0) and the replay, each a sample agreeing or not with the
/// iteration's `check_result`, and the Wilson lower bound over them at the run's confidence.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FreeSample {
    pub samples: u64,
    pub agreeing: u64,
    pub stability_lower_bound: f64,
    pub confidence: f64,
    pub stability_target: f64,
}

/// The [`FreeSample`] of iteration `n` once a replay `matched` (or not) its recorded check.
pub fn replay_sample(
    history: &crate::receipt::history::History,
    n: u64,
    matched: bool,
    cfg: &super::config::LoopConfig,
) -> CmdResult<FreeSample> {
    let confidence = Confidence::new(cfg.confidence)
        .map_err(|e| Failure::invalid_input(format!("the pinned confidence: {e}")))?;
    let reruns: Vec<&ConfirmationRecord> = history
        .iterations
        .iter()
        .filter(|r| r.iteration == n)
        .flat_map(|r| r.confirmations.iter())
        .filter(|c| c.confirmation > 0)
        .collect();
    let samples = reruns.len() as u64 + 1;
    let agreeing = reruns.iter().filter(|c| c.agrees).count() as u64 + u64::from(matched);
    let bound = stability_lower_bound(agreeing, samples, confidence)
        .map_err(|e| Failure::internal(e.to_string()))?;
    Ok(FreeSample {
        samples,
        agreeing,
        stability_lower_bound: bound,
        confidence: confidence.get(),
        stability_target: 1.0 - cfg.max_flake_rate,
    })
}
