//! One iteration, as stages whose data flows one way:
//!
//! `iteration_start` -> the feedback file (from the history) -> agent in its zone -> `exec_result`
//! -> decide -> guards after the agent (on the workspace snapshot) -> `snapshot` (+ `guard`) ->
//! decide -> check in its zone (the one check runner) -> guards after the check -> `check_result`
//! (+ `guard`) -> progress (the ratchet and the no-convergence rules: `progress`) -> on green with
//! every guard passed, the judge (`judge`) -> on a green the judge approved, the held-out check
//! (`holdout_check`) -> acceptance of the step -> decide (then, on success, the confirmation
//! reruns, the sentinel run (`guard_sentinel`) and the adequacy canary (`adequacy`)).
//!
//! Every observation is recorded into the run's history as it is made and is on disk before the
//! next step that depends on it starts: what one step observed is staged and committed as one
//! group (one write, one fdatasync) when the next command's phase begins, before any change to
//! the workspace, and when the run stops. Every decision is `decide` over that history, so what a
//! resumed run decides from the receipt is what the live run decided.

use super::check::{run_check, Artifacts, CheckOutcome, ReportSource};
use super::commands::RoleCommand;
use super::detached::{RunWorkspace, Taken};
use super::guards::{AgentStep, CheckStep, Objection};
use super::judge;
use super::lifecycle::ActiveRun;
use super::sink::{LoopEvent, Phase};
use super::RunOutcome;
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::interrupt;
use crate::receipt::events::{
    CheckResult, Event, ExecResult, GuardRecord, JudgeOutcome, SnapshotRecord,
};
use crate::receipt::store::ARTIFACTS;
use crate::receipt::usage::UsageRecord;
use crate::rules::budget::Point;
use crate::rules::decide::{self, Step};
use crate::rules::verdict::Verdict;
use crate::testreport::paths::ReportPatterns;
use crate::workspace::Snapshot;
use crate::zones::{Role, Zone};

/// Which run of the check [`ActiveRun::run_check`] makes (its artifact stem, its scratch name, and
/// what the check-writes guard's finding calls it).
#[derive(Clone, Copy)]
pub(super) enum CheckRun<'a> {
    /// The iteration's own check (iteration 0: the check on t0).
    Iteration,
    /// Confirmation rerun `k` of a green (iteration 0: of the green t0 baseline).
    Confirmation(u64),
    /// The held-out check (`NNNN-holdout`): its own command, the held-out directory bound.
    Holdout,
    /// The sentinel run (`super::sentinel`): the check with the sentinel files in one more top
    /// layer of its overlay, their proof files read back from its scratch layer.
    Sentinel(&'a SentinelLayer),
}

/// The sentinel files of one sentinel run and the proof files to read back after it.
pub(super) struct SentinelLayer {
    /// (tree path, bytes) of each sentinel file.
    pub files: Vec<(String, Vec<u8>)>,
    /// Names of the proof files at the workspace root.
    pub proofs: Vec<String>,
}

impl ActiveRun<'_> {
    /// Drive the run until it halts, pauses (`once`) or is interrupted.
    pub(super) fn drive(&mut self, zone: &mut dyn Zone, once: bool) -> CmdResult<RunOutcome> {
        loop {
            if let Some(sig) = interrupt::pending() {
                return self.interrupted(sig, None);
            }
            let n = self.state.iteration + 1;
            if let Step::Halt(reason, detail) = decide::before_iteration(n, self.cfg.max_iterations)
            {
                return self.halt(reason, detail);
            }
            // The comprehension gate: too many accepted diffs unread stop the run, resumable.
            // A ledger or ack log gone bad since the run started halts it as a workspace it cannot keep.
            match self.comprehension_gate(n) {
                Ok(Some(stopped)) => return Ok(stopped),
                Ok(None) => {}
                Err(f) if f.code == crate::error::FailureCode::WorkspaceInvalid => {
                    return self.halt(HaltReason::WorkspaceInvalid, f.message)
                }
                Err(f) => return Err(f),
            }
            // The budget before the agent: spent plus the projection of one more iteration.
            if let Step::Halt(reason, detail) = self.budget_step(Point::BeforeAgent) {
                self.sink
                    .event(&LoopEvent::HaltingBeforeIterations { detail: &detail });
                return self.halt(reason, detail);
            }
            // The receipt is the live record: state.json is rewritten only when the run stops.
            // The iteration's start is staged with the previous iteration's check group: the
            // agent's phase commits both (one write, one fdatasync) before the agent starts.
            self.stage(Event::IterationStart { iteration: n })?;
            self.state.iteration = n;
            match self.iterate(zone, n)? {
                // The budget at the iteration's end (every stage's usage), when it decided no other halt.
                Step::Continue => {
                    if let Step::Halt(reason, detail) = self.budget_step(Point::End) {
                        self.sink.event(&LoopEvent::HaltingAfterAgent {
                            iteration: n,
                            detail: &detail,
                        });
                        return self.halt(reason, detail);
                    }
                }
                Step::Interrupted(sig) => return self.interrupted(sig, Some(n)),
                Step::Halt(reason, detail) => return self.halt(reason, detail),
            }
            if once {
                return self.pause();
            }
        }
    }

    /// Record a phase change in the heartbeat and tell the sink. A phase that runs a command
    /// first commits the staged events (the snapshot and the guards after the check are
    /// in-process and start nothing: the events before them stay staged for one write).
    pub(super) fn beat(&mut self, phase: Phase, n: u64) -> CmdResult<()> {
        if !matches!(phase, Phase::Snapshot | Phase::Guards) {
            self.commit()?;
        }
        if let Some(beacon) = &self.beacon {
            beacon.phase(phase.as_str(), n);
        }
        self.sink.event(&LoopEvent::PhaseStarted {
            phase,
            iteration: n,
        });
        Ok(())
    }

    /// Arm a command of `phase` (begun with [`Self::beat`]) with the heartbeat hook.
    pub(super) fn arm(&self, cmd: &mut crate::zones::ZoneCommand, phase: Phase, n: u64) {
        if let Some(beacon) = &self.beacon {
            beacon.arm(cmd, phase.as_str(), n);
        }
    }

    /// The decision on the current iteration as the history holds it.
    pub(super) fn decide(&self) -> Step {
        self.history.current().map_or(Step::Continue, |record| {
            let t0 = self.history.check_baseline.as_ref().map(|b| &b.check);
            decide::decide(self.mode, record, t0, self.cfg.max_iterations)
        })
    }

    /// Run iteration `n`'s stages; `Continue` when it ended without a halt.
    fn iterate(&mut self, zone: &mut dyn Zone, n: u64) -> CmdResult<Step> {
        let (exec, usage) = match self.run_agent(zone, n)? {
            Ok(ran) => ran,
            Err(detail) => return Ok(Step::Halt(HaltReason::IsolationUnsatisfiable, detail)),
        };
        // The agent's group (its result, usage, snapshot and the guards' findings on it) is
        // committed when the check's phase begins.
        self.stage(Event::ExecResult(exec.clone()))?;
        if let Some(usage) = usage {
            self.stage(Event::Usage(usage))?;
        }
        self.beat(Phase::Snapshot, n)?;
        if let Some(step) = self.halting_after_agent(n) {
            return Ok(step);
        }
        // The budget after the agent's usage: model drift, a cap crossed, the cost anomaly.
        if let Step::Halt(reason, detail) = self.budget_step(Point::AfterAgent) {
            self.sink.event(&LoopEvent::HaltingAfterAgent {
                iteration: n,
                detail: &detail,
            });
            return Ok(Step::Halt(reason, detail));
        }
        let candidate = match self.judge_agent_step(n, &exec)? {
            Ok(candidate) => candidate,
            Err(Step::Halt(reason, detail)) => {
                self.sink.event(&LoopEvent::HaltingAfterAgent {
                    iteration: n,
                    detail: &detail,
                });
                return Ok(Step::Halt(reason, detail));
            }
            Err(stop) => return Ok(stop),
        };
        if let Some(step) = self.halting_after_agent(n) {
            return Ok(step);
        }
        if let Some(sig) = interrupt::pending() {
            return Ok(Step::Interrupted(sig));
        }
        #[cfg(debug_assertions)]
        crate::test_pause::at(crate::test_pause::BEFORE_CHECK);
        let outcome = match self.run_check(zone, n, candidate.as_ref(), CheckRun::Iteration)? {
            Ok(outcome) => outcome,
            Err(halt) => return Ok(halt),
        };
        let check = outcome.record(n);
        self.beat(Phase::Guards, n)?;
        let mut findings = self.guards.after_check(&CheckStep {
            iteration: n,
            check: &check,
            history: &self.history,
        });
        let allowed = self.guards.take_allowed();
        findings.extend(outcome.tree_writes.clone());
        // The check's group (its result, usage, the guards' findings, progress) is committed
        // before the next step: the next iteration's agent, a judge, a held-out or confirming
        // check, a change to the workspace, the halt.
        self.stage(Event::CheckResult(check.clone()))?;
        if let Some(usage) = self.check_usage(n, &outcome.run.usage) {
            self.stage(Event::Usage(usage))?;
        }
        self.stage_allowed(allowed)?;
        self.same_tree_sample(n, &check)?;
        // A zero exit whose evidence disagrees is no accepted step either.
        let mut clean = findings.is_empty() && outcome.verdict() != Verdict::Disagrees;
        self.stage_findings(findings.into_iter())?;
        // The progress stage: the ratchet and the no-convergence rules over the failing sets.
        let score_rule = self.cfg.score.as_ref().map(super::score::ScorePins::rule);
        let judged = crate::rules::progress::judge_scored(
            &self.history,
            n,
            &self.cfg.progress,
            &self.cfg.targets,
            score_rule,
        );
        // Only a ratchet that judges can revert: then each accepted layer is kept aside.
        let ratchet_applies = judged.is_some() && self.cfg.progress.ratchet;
        let targets_met = judged.as_ref().is_some_and(|p| p.targets_met);
        let ratcheted = match judged {
            Some(mut progress) => {
                // A rejected step is undone: the workspace returns to the last accepted tree,
                // once what the check found is on disk.
                if !progress.accepted && self.workspace.is_some() {
                    self.commit()?;
                }
                let reverted = match (progress.accepted, self.workspace.as_mut()) {
                    (false, Some(ws)) => Some(ws.revert_to_best(n)),
                    _ => None,
                };
                if let Some(Ok(tree)) = &reverted {
                    progress.reverted_to_tree = Some(tree.clone());
                }
                let accepted = progress.accepted;
                // A red check whose sets met the targets on evidence with gaps is no accepted
                // step, as a zero exit whose evidence disagrees is not (never delivered).
                if crate::rules::progress::refused_unevidenced_targets(&progress) {
                    clean = false;
                }
                self.stage(Event::Progress(progress))?;
                // In place no guard can judge the step: met targets are no success either.
                if targets_met && self.workspace.is_none() {
                    self.stage(Event::Guard(super::targets::unguarded_in_place(n)))?;
                    clean = false;
                }
                if let Some(Err(detail)) = reverted {
                    return Ok(Step::Halt(
                        HaltReason::WorkspaceInvalid,
                        format!("the rejected iteration {n} could not be reverted: {detail}"),
                    ));
                }
                accepted
            }
            None => true,
        };
        // The judge is asked only on green with every guard passed; a step it did not approve
        // is not accepted (never delivered).
        if clean && (outcome.verdict() == Verdict::Pass || targets_met) && self.cfg.judge.is_some()
        {
            match self.ask_judge(zone, n, &check, candidate.as_ref())? {
                Ok(approved) => clean = approved,
                Err(signal) => return Ok(Step::Interrupted(signal)),
            }
        }
        // The held-out check, on a green that every guard let through, the ratchet kept and the
        // judge (if any) approved: a step it does not find green is not accepted (never delivered).
        if clean
            && ratcheted
            && (outcome.verdict() == Verdict::Pass || targets_met)
            && self.cfg.holdout.is_some()
        {
            match self.holdout_check(zone, n, candidate.as_ref())? {
                Ok(ran) => clean = ran.green,
                Err(step) => return Ok(step),
            }
        }
        // A success to confirm before it stands (a green, or a red whose targets all pass): the
        // tree it ran on (confirm_runs > 0).
        let confirm_on = (clean
            && ratcheted
            && (outcome.verdict() == Verdict::Pass || targets_met)
            && self.cfg.confirm_runs > 0)
            .then(|| candidate.clone());
        // Acceptance: a step every guard let through, after its check, that the ratchet kept, is
        // the run's new state (kept aside to revert to only where the ratchet judges), once
        // what decided it is on disk.
        if clean && ratcheted && ratchet_applies && self.workspace.is_some() {
            self.commit()?;
        }
        let accepted_tree = match (clean, ratcheted, self.workspace.as_mut(), candidate) {
            (true, true, Some(ws), Some(snapshot)) if ratchet_applies => {
                let tree = snapshot.tree_id.to_hex();
                if let Err(detail) = ws.accept_as_best(snapshot) {
                    return Ok(Step::Halt(
                        HaltReason::WorkspaceInvalid,
                        format!("the accepted iteration {n} could not be kept: {detail}"),
                    ));
                }
                Some(tree)
            }
            (true, true, Some(ws), Some(snapshot)) => {
                let tree = snapshot.tree_id.to_hex();
                ws.accept(snapshot);
                Some(tree)
            }
            _ => None,
        };
        // The accepted step is a diff for a person to read (the comprehension gate's ledger).
        // A ledger that cannot take it (bad state, the tree not storable) halts the run as a
        // workspace it cannot keep.
        if let Some(tree) = accepted_tree {
            if let Err(failure) = self.record_accepted(n, &tree) {
                return Ok(Step::Halt(HaltReason::WorkspaceInvalid, failure.message));
            }
        }
        if let Some(check_exit) = check.check_exit {
            self.sink.event(&LoopEvent::Checked {
                iteration: n,
                exec_ms: exec.duration_ms,
                check_exit,
                check_ms: check.duration_ms,
                failing: check.failing_count,
            });
        }
        let step = match (self.decide(), confirm_on) {
            (Step::Halt(HaltReason::SuccessConditionMet, _), Some(tree)) => {
                self.confirm_green(zone, n, tree.as_ref(), &check)?
            }
            (step, _) => step,
        };
        // The final green iteration (confirmed): the sentinel run, then the adequacy canary,
        // before success is declared.
        if let Step::Halt(HaltReason::SuccessConditionMet, _) = step {
            // Also for a success on met targets (a red check whose failures all precede the run):
            // its failing set is then what the sentinel run may fail besides the sentinels.
            if outcome.ending().exit_code().is_some() {
                if let Some(step) = self.sentinel_run(zone, n, &check)? {
                    return Ok(step);
                }
                if let step @ Step::Halt(reason, _) = self.decide() {
                    if reason != HaltReason::SuccessConditionMet {
                        return Ok(step);
                    }
                }
            }
            // Only a green check can show a mutant killed: on met targets the check is already
            // red, and every mutant would count as killed (a resumed run does the same).
            if outcome.verdict() == Verdict::Pass {
                if let Some(step) = self
                    .adequacy_canary(n, outcome.coverage.as_ref().and_then(|c| c.hits.as_ref()))?
                {
                    return Ok(step);
                }
            }
            return Ok(self.decide());
        }
        Ok(step)
    }

    /// The agent stage: its command in the agent zone, observed as the `exec_result` to record and
    /// the `usage` it metered (`super::usage_meter`). `Ok(Err(detail))`: the zone could not be set up.
    fn run_agent(
        &mut self,
        zone: &mut dyn Zone,
        n: u64,
    ) -> CmdResult<Result<(ExecResult, Option<UsageRecord>), String>> {
        self.beat(Phase::Agent, n)?;
        let overlay = self.workspace.as_ref().map(RunWorkspace::agent_overlay);
        let credential = match (&self.cfg.credentials, &self.credential) {
            (Some(hooks), Some(secret)) => Some((hooks.env.clone(), secret.clone())),
            _ => None,
        };
        let command = RoleCommand {
            role: Role::Agent,
            run_id: &self.state.run_id,
            iteration: n,
            overlay,
            credential,
        };
        let stem = command.stem();
        let mut cmd = command.zone_command(&self.cfg, &self.env);
        self.arm(&mut cmd, Phase::Agent, n);
        if let Err(detail) = self
            .give_feedback(n, &mut cmd)
            .and_then(|()| self.give_usage_file(&mut cmd))
        {
            return Ok(Err(detail));
        }
        let meter = self.stdout_meter();
        let observer = meter
            .as_ref()
            .map(|m| m as &std::cell::RefCell<dyn crate::capture::StreamObserver>);
        let run = match super::commands::run_observed(
            zone,
            &cmd,
            &self.artifacts,
            ARTIFACTS,
            &stem,
            observer,
        )? {
            Ok(run) => run,
            Err(detail) => return Ok(Err(detail)),
        };
        let usage = self.agent_usage(n, &run.usage, meter.map(std::cell::RefCell::into_inner));
        Ok(Ok((
            ExecResult {
                iteration: n,
                ending: run.ending.clone(),
                exit_code: run.ending.exit_code(),
                duration_ms: run.duration.as_millis() as u64,
                // Cumulative egress of the run and the digest of its audit log so far.
                egress: run.usage.egress.map(super::commands::egress_record),
                stdout: run.output.stdout,
                stderr: run.output.stderr,
                enforcement: run.enforcement,
            },
            usage,
        )))
    }

    /// The guards' stage after the agent: snapshot the detached workspace, ask every guard, and
    /// record the `snapshot` (with the protected paths changed) and any other objection. Returns
    /// the snapshot, the candidate for the check and for acceptance; `Err` when the workspace
    /// could not be taken (a `workspace_invalid` halt) or its snapshot was interrupted.
    fn judge_agent_step(
        &mut self,
        n: u64,
        exec: &ExecResult,
    ) -> CmdResult<Result<Option<Snapshot>, Step>> {
        let Some(ws) = self.workspace.as_mut() else {
            // In place there is no snapshot: the guards judge the agent's result alone.
            let objections = self.guards.after_agent(&AgentStep {
                iteration: n,
                exec: Some(exec),
                workspace: None,
            });
            self.stage_findings(objections.into_iter().filter_map(|o| match o {
                Objection::Finding(finding) => Some(finding),
                Objection::ProtectedChanges(_) | Objection::ReviewRequired(_) => None,
            }))?;
            return Ok(Ok(None));
        };
        let (snapshot, duration_ms) = match ws.snapshot() {
            Taken::Snapshot {
                snapshot,
                duration_ms,
            } => (snapshot, duration_ms),
            Taken::Refused(detail) => {
                return Ok(Err(Step::Halt(HaltReason::WorkspaceInvalid, detail)))
            }
            Taken::Interrupted(signal) => return Ok(Err(Step::Interrupted(signal))),
        };
        let baseline = ws.baseline_manifest()?;
        let objections = self.guards.after_agent(&AgentStep {
            iteration: n,
            exec: Some(exec),
            workspace: Some((&snapshot, baseline)),
        });
        let (mut protected_changes, mut findings, mut awareness) =
            (Vec::new(), Vec::new(), Vec::new());
        for objection in objections {
            match objection {
                Objection::ProtectedChanges(changes) => protected_changes.extend(changes),
                Objection::Finding(finding) => findings.push(finding),
                Objection::ReviewRequired(observed) => awareness.extend(observed),
            }
        }
        let record = SnapshotRecord {
            iteration: n,
            tree_id: snapshot.tree_id.to_hex(),
            changed_paths: snapshot.changes(baseline).len() as u64,
            protected_changes,
            duration_ms: Some(duration_ms),
            awareness,
            left_out: crate::receipt::events::LeftOutRecord::of(
                snapshot
                    .left_out
                    .iter()
                    .map(|(path, why)| (path.as_slice(), why.as_str())),
            ),
        };
        let allowed = self.guards.take_allowed();
        self.stage(Event::Snapshot(record))?;
        self.stage_allowed(allowed)?;
        self.stage_findings(findings.into_iter())?;
        Ok(Ok(Some(snapshot)))
    }

    /// The check stage: the one check runner, on the candidate (its throwaway layers over the
    /// agent's snapshot) or in place. `Ok(Err(halt))`: its layers could not be built
    /// (`workspace_invalid`) or its zone could not be set up (`isolation_unsatisfiable`).
    /// `run`: the iteration's check, a confirmation rerun, the held-out check (its own command
    /// and the held-out directory) or the sentinel run (its own layer); each its own artifact stem.
    pub(super) fn run_check(
        &mut self,
        zone: &mut dyn Zone,
        n: u64,
        candidate: Option<&Snapshot>,
        run: CheckRun<'_>,
    ) -> CmdResult<Result<CheckOutcome, Step>> {
        let phase = match run {
            CheckRun::Iteration if n == 0 => Phase::Baseline,
            CheckRun::Iteration => Phase::Check,
            CheckRun::Confirmation(_) => Phase::Confirmation,
            CheckRun::Holdout => Phase::Holdout,
            CheckRun::Sentinel(_) => Phase::Sentinel,
        };
        self.beat(phase, n)?;
        let patterns = ReportPatterns::new(&self.cfg.report_patterns())
            .map_err(|e| Failure::invalid_input(e.to_string()))?;
        let fresh = |path: &[u8]| {
            patterns.matches(path)
                || self.cfg.coverage.hides(path)
                || self.cfg.score.as_ref().is_some_and(|s| s.hides(path))
        };
        let (overlay, scratch) = match (&self.workspace, candidate) {
            (Some(ws), Some(snapshot)) => match match run {
                CheckRun::Sentinel(layer) => {
                    ws.sentinel_overlay(&format!("{n:04}-sentinel"), snapshot, &fresh, &layer.files)
                }
                _ => ws.check_overlay(n, snapshot, &fresh),
            } {
                Ok((overlay, scratch)) => (Some(overlay), Some(scratch)),
                Err(f) => {
                    let detail = format!("the check's layers cannot be built: {}", f.message);
                    return Ok(Err(Step::Halt(HaltReason::WorkspaceInvalid, detail)));
                }
            },
            _ => (None, None),
        };
        let command = RoleCommand {
            role: Role::Check,
            run_id: &self.state.run_id,
            iteration: n,
            overlay,
            credential: None,
        };
        let stem = match run {
            CheckRun::Iteration => command.stem(),
            CheckRun::Confirmation(k) => format!("{n:04}-confirm-{k}"),
            CheckRun::Holdout => format!("{n:04}-holdout"),
            CheckRun::Sentinel(_) => format!("{n:04}-sentinel"),
        };
        let artifacts = Artifacts {
            dir: &self.artifacts,
            rel: ARTIFACTS,
            stem,
        };
        let mut cmd = command.zone_command(&self.cfg, &self.env);
        self.arm(&mut cmd, phase, n);
        if let (CheckRun::Holdout, Some(holdout)) = (run, &self.cfg.holdout) {
            holdout.apply(&mut cmd);
        }
        if let (Some(ws), Some(_)) = (&self.workspace, &scratch) {
            cmd.read_only_beneath = ws.check_read_only();
        }
        let report_dir = scratch
            .as_ref()
            .map(|s| s.writes())
            .unwrap_or(&self.workdir);
        let report = (!patterns.is_empty()).then_some(ReportSource {
            dir: report_dir,
            patterns: &patterns,
        });
        // The scratch layers are removed when `scratch` drops, after the report was read.
        let mut checked = run_check(zone, &cmd, artifacts, report)?;
        // The coverage and the score are the visible check's measures: the held-out check is judged
        // on its exit code and evidence alone.
        if let (Ok(outcome), Some(path)) = (&mut checked, &self.cfg.coverage.report) {
            if outcome.ending().exit_code().is_some() && !matches!(run, CheckRun::Holdout) {
                outcome.coverage = Some(super::coverage_guard::read(report_dir, path));
            }
        }
        if let (Ok(outcome), Some(ws), Some(scratch)) = (&mut checked, &self.workspace, &scratch) {
            let what = match (n, run) {
                (0, CheckRun::Iteration) => "the check on t0".to_string(),
                (_, CheckRun::Iteration) => format!("the check of iteration {n}"),
                (0, CheckRun::Confirmation(k)) => {
                    format!("confirmation rerun {k} of the check on t0")
                }
                (_, CheckRun::Confirmation(k)) => {
                    format!("confirmation rerun {k} of iteration {n}")
                }
                (0, CheckRun::Holdout) => "the held-out check on t0".to_string(),
                (_, CheckRun::Holdout) => format!("the held-out check of iteration {n}"),
                (_, CheckRun::Sentinel(_)) => format!("the sentinel run of iteration {n}"),
            };
            let started = std::time::Instant::now();
            let listed = scratch.tree_writes(ws.limits(), &|path, is_dir| {
                ws.created_counts(path, is_dir, &fresh)
            });
            tracing::debug!(
                elapsed_us = started.elapsed().as_micros() as u64,
                "check writes listed"
            );
            outcome.tree_writes = super::check_writes::finding(n, &what, &listed);
            if let CheckRun::Sentinel(layer) = run {
                let max = super::sentinel::MAX_PROOF_BYTES;
                outcome.sentinel_proofs = layer
                    .proofs
                    .iter()
                    .map(|name| scratch.writes().read(name, max).ok())
                    .collect();
            }
        }
        if let (Ok(outcome), Some(pins)) = (&mut checked, &self.cfg.score) {
            if outcome.ending().exit_code().is_some() && !matches!(run, CheckRun::Holdout) {
                outcome.score = Some(super::score::read(
                    pins,
                    &outcome.stdout(&self.artifacts, ARTIFACTS),
                    report_dir,
                ));
            }
        }
        Ok(checked.map_err(|detail| Step::Halt(HaltReason::IsolationUnsatisfiable, detail)))
    }

    /// The judge stage: its packet built from this iteration's record, the judge asked in its
    /// zone (t0's tree its working directory, the agent's read-only at `/candidate`), its answer recorded as a `judge` event.
    /// `Ok(approved)`, or `Err(signal)` when the operator interrupted it.
    fn ask_judge(
        &mut self,
        zone: &mut dyn Zone,
        n: u64,
        check: &CheckResult,
        candidate: Option<&Snapshot>,
    ) -> CmdResult<Result<bool, i32>> {
        self.beat(Phase::Judge, n)?;
        let previous = self
            .history
            .iterations
            .iter()
            .rev()
            .filter(|r| r.iteration < n)
            .find_map(|r| r.check.as_ref().filter(|c| c.collected_set.is_some()));
        let files = self.workspace.as_ref().map(RunWorkspace::tree_files);
        let t0 = match &self.workspace {
            Some(ws) => Some((ws.baseline_manifest()?, ws.t0_tree())),
            None => None,
        };
        let tree = match (candidate, &t0, &files) {
            (Some(snapshot), Some((t0, t0_tree)), Some(files)) => Some(judge::TreeView {
                snapshot,
                t0,
                t0_tree: t0_tree.clone(),
                files,
            }),
            _ => None,
        };
        // The awareness guard asks the judge about its findings: it has not passed them.
        let observed = self
            .history
            .current()
            .and_then(|r| r.snapshot.as_ref())
            .is_some_and(|s| !s.awareness.is_empty());
        let guards_passed = self
            .guards
            .seats()
            .into_iter()
            .filter(|s| !(observed && *s == super::seats::Seat::Awareness))
            .map(|s| s.as_str())
            .collect();
        let awareness = self
            .history
            .current()
            .and_then(|r| r.snapshot.as_ref())
            .map(|s| s.awareness.clone())
            .unwrap_or_default();
        let packet = judge::packet(&judge::PacketInput {
            run_id: &self.state.run_id,
            iteration: n,
            check_command: &self.cfg.check,
            check,
            previous,
            t0: self.history.check_baseline.as_ref().map(|b| &b.check),
            guards_passed,
            run_dir: self.run.dir(),
            tree,
            awareness: &awareness,
        });
        // Its working directory is t0's tree (the operator's code), the agent's tree beside it.
        let (overlay, candidate) = self
            .workspace
            .as_ref()
            .map(RunWorkspace::judge_overlays)
            .unzip();
        let command = RoleCommand {
            role: Role::Judge,
            run_id: &self.state.run_id,
            iteration: n,
            overlay,
            credential: None,
        };
        let mut cmd = command.zone_command(&self.cfg, &self.env);
        self.arm(&mut cmd, Phase::Judge, n);
        // Named in its environment, so a judge that reviews "its tree" reads the agent's, not
        // t0's: `LOOPEXEC_CANDIDATE_DIR` (the agent's tree), `LOOPEXEC_T0_DIR` (its cwd).
        if let Some(candidate) = candidate.as_ref() {
            cmd.env.push((
                judge::CANDIDATE_DIR_VAR.into(),
                candidate.target.display().to_string(),
            ));
            cmd.env
                .push((judge::T0_DIR_VAR.into(), cmd.cwd.display().to_string()));
        }
        cmd.overlays.extend(candidate);
        let out = judge::JudgeArtifacts {
            dir: &self.artifacts,
            rel: ARTIFACTS,
            run_dir: self.run.dir(),
        };
        let meter = self
            .cfg
            .metering
            .judge_output
            .map(|format| judge::JudgeMeter {
                format,
                prices: self.prices(),
            });
        match judge::ask(zone, cmd, &packet, n, out, meter.as_ref())? {
            judge::Asked::Recorded(record, usage) => {
                let approved = record.outcome == JudgeOutcome::Approve;
                self.append(Event::Judge(*record))?;
                if let Some(usage) = usage {
                    self.append(Event::Usage(usage))?;
                }
                Ok(Ok(approved))
            }
            judge::Asked::Interrupted(signal) => Ok(Err(signal)),
        }
    }

    /// Record what the guards let through under allowances (`test_change_allowed` events).
    fn stage_allowed(
        &mut self,
        allowed: Vec<crate::receipt::events::TestChangeAllowedRecord>,
    ) -> CmdResult<()> {
        for record in allowed {
            self.stage(Event::TestChangeAllowed(record))?;
        }
        Ok(())
    }

    /// Record guard findings as `guard` events.
    fn stage_findings(&mut self, findings: impl Iterator<Item = GuardRecord>) -> CmdResult<()> {
        for finding in findings {
            self.stage(Event::Guard(finding))?;
        }
        Ok(())
    }

    /// The decision after the agent's stages, when it stops the iteration (a halt is told to
    /// the sink: no check result will follow it).
    fn halting_after_agent(&mut self, n: u64) -> Option<Step> {
        match self.decide() {
            Step::Continue => None,
            Step::Halt(reason, detail) => {
                self.sink.event(&LoopEvent::HaltingAfterAgent {
                    iteration: n,
                    detail: &detail,
                });
                Some(Step::Halt(reason, detail))
            }
            interrupted => Some(interrupted),
        }
    }
}
