//! The run lifecycle: starting a run or resuming one (one [`ActiveRun`] either way), its lock,
//! keys and state file, the agent's credential, and the three ways a call ends (a halt, sealed;
//! a pause after `--once`; an operator interrupt). The iterations themselves are
//! [`super::iteration`]'s; finishing the seal of a halt whose supervisor died before sealing is
//! [`super::seal_window`]'s.

use super::analysis_guards::{
    self, AnalysisBaseline, AwarenessGuard, MetricIntegrityGuard, TamperingGuard,
};
use super::baseline::BaselineSetGuard;
use super::commands::operator_env;
use super::config::{LoopConfig, MODE_CHECK_FIXPOINT};
use super::coverage_guard::CoverageGuard;
use super::credentials;
use super::detached::{RunWorkspace, Taken, WorkspaceMode};
use super::guards::{AgentStep, Guard, Guards, ProtectedPathGuard};
use super::in_place::InPlaceGuard;
use super::seats::Mode;
use super::sink::{EventSink, LoopEvent, Phase};
use super::zone_setup::zone_setup;
use super::{LoopEnd, RunOutcome};
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::interrupt;
use crate::receipt::chain::ReceiptLog;
use crate::receipt::events::{
    CredentialRevoked, DeliveryRecord, Event, GuardBaselineRecord, HaltRecord, RunResumed,
    RunStart, SCHEMA_VERSION,
};
use crate::receipt::history::History;
use crate::receipt::keys::{OperatorKey, RunKey};
use crate::receipt::seal::{endorse_run_key, seal_run};
use crate::receipt::state::{RunPhase, RunState};
use crate::receipt::store::{log_failure, RunDir, RunLock, StateDir};
use crate::rules::decide::{self, Step};
use crate::run_id::RunId;
use crate::safefs::SafeDir;
use crate::zones::setup::ZoneSetup;
use crate::zones::{open_zone, Role, Zone};

/// A run this process drives: everything an iteration needs, and the history of the receipt so
/// far (every event it appends is recorded into it).
pub(super) struct ActiveRun<'a> {
    pub(super) statedir: &'a StateDir,
    /// Where the stages report what they do while the run goes on (`super::sink`).
    pub(super) sink: &'a mut dyn EventSink,
    pub(super) run: RunDir,
    _lock: RunLock,
    log: ReceiptLog,
    pub(super) history: History,
    pub(super) cfg: LoopConfig,
    pub(super) mode: Mode,
    pub(super) artifacts: SafeDir,
    pub(super) workdir: SafeDir,
    pub(super) state: RunState,
    pub(super) env: Vec<(String, String)>,
    resumed: bool,
    /// Resumed after its supervisor died (`state.json` still said `running`): it may have minted
    /// a credential it had not yet recorded.
    supervisor_lost: bool,
    /// This process's run key, endorsed in the receipt; consumed when the run is sealed.
    run_key: Option<RunKey>,
    /// The detached workspace (native isolation in a git repository).
    pub(super) workspace: Option<RunWorkspace>,
    pub(super) guards: Guards,
    /// The agent's minted credential, held only in this process's memory until it is revoked.
    pub(super) credential: Option<credentials::Secret>,
    /// Why the workspace a resumed run found could not be taken (the run then halts with it).
    refused_at_reopen: Option<String>,
    /// The agent's feedback directory, made before the first agent call of this process.
    pub(super) feedback: Option<super::feedback_file::FeedbackFile>,
    /// The run's heartbeat (`None`: this process's start time could not be read).
    pub(super) beacon: Option<std::sync::Arc<super::heartbeat::Beacon>>,
    /// The agent's usage directory (`LOOPEXEC_USAGE`), made before the first agent call.
    pub(super) usage: Option<super::usage_meter::UsageDir>,
}

/// What a recorded event has to tell the sink (`ActiveRun::append`).
enum Recorded {
    Nothing,
    Baseline {
        check_exit: Option<i32>,
        failing: Option<u64>,
    },
    Usage,
    Egress {
        allowed: u64,
        denied: u64,
    },
}

/// The state of a run this process is about to drive (its counters are filled in on save).
fn running_state(
    run_id: &RunId,
    isolation: &str,
    iteration: u64,
    max_iterations: u64,
    run: &RunDir,
) -> RunState {
    RunState {
        run_id: run_id.to_string(),
        state: RunPhase::Running,
        mode: MODE_CHECK_FIXPOINT.into(),
        isolation: isolation.into(),
        iteration,
        max_iterations,
        halt_reason: None,
        exit_code: None,
        receipt: run.receipt_rel(),
        receipt_events: 0,
        receipt_head: String::new(),
        pid: std::process::id(),
        updated_at: String::new(),
    }
}

/// The policy the run's zone setup holds for `role` (native isolation pins one per role).
fn role_policy(zones: &ZoneSetup, role: Role) -> CmdResult<&sandbox::Policy> {
    zones.policy(role).map(|p| &p.policy).ok_or_else(|| {
        Failure::internal("a detached workspace needs native isolation and its pinned policies")
    })
}

fn open_workdir(cfg: &LoopConfig) -> CmdResult<SafeDir> {
    SafeDir::open(std::path::Path::new(&cfg.workdir)).map_err(|e| {
        Failure::workspace(format!("workdir {}: {e}", cfg.workdir)).with_hint("check --workdir")
    })
}

/// The configuration a run pinned in its first event, `run_start` (resume, replay and
/// reexecute all start from it, never from flags or loop.toml).
pub fn pinned_config(run: &RunDir, history: &History) -> CmdResult<LoopConfig> {
    let broken =
        |what: &str| Failure::workspace(format!("{}: {what}", run.receipt_path().display()));
    if history.events == 0 {
        return Err(broken("the receipt is empty (the run never started)"));
    }
    let start = history
        .start
        .as_ref()
        .filter(|_| history.starts_the_receipt)
        .ok_or_else(|| broken("the first event is not run_start"))?;
    serde_json::from_value(start.config.clone())
        .map_err(|_| broken("run_start carries no readable config"))
}

/// What a resumed run finds at the end of its receipt.
enum Pending {
    /// Nothing: the last iteration ended (or none started); the next one starts.
    Nothing,
    /// The last iteration started but its outcome was never fully recorded (loopexec died).
    Unfinished,
    /// The recorded outcome already decided a halt whose `halt` event was never appended.
    Decided(HaltReason, String),
}

fn pending(history: &History, mode: Mode, max_iterations: u64, judged: bool) -> Pending {
    // A `doctor = true` gate failed before the first agent call.
    if let Some((reason, detail)) = history.preconditions.as_ref().and_then(|p| p.refusal()) {
        return Pending::Decided(reason, detail);
    }
    let Some(record) = history.current() else {
        return Pending::Nothing;
    };
    if record.interrupted.is_some() {
        return Pending::Nothing;
    }
    let t0 = history.check_baseline.as_ref().map(|b| &b.check);
    match decide::decide(mode, record, t0, max_iterations) {
        // A green check the judge was still to answer: the iteration's outcome is not recorded.
        Step::Halt(HaltReason::SuccessConditionMet, _) if judged && record.judge.is_none() => {
            Pending::Unfinished
        }
        Step::Halt(reason, detail) => Pending::Decided(reason, detail),
        _ if record.check.is_some() => Pending::Nothing,
        _ => Pending::Unfinished,
    }
}

/// The run's egress totals as the receipt's last `exec_result` recorded them.
fn recorded_egress_totals(history: &History) -> Option<crate::egress::ProxyStats> {
    let last = history
        .iterations
        .iter()
        .rev()
        .find_map(|r| r.exec.as_ref()?.egress.as_ref())?;
    serde_json::from_value(last.totals.clone()).ok()
}

/// What `start` and `resume` hand to [`ActiveRun::open`].
struct Opening<'a> {
    statedir: &'a StateDir,
    sink: &'a mut dyn EventSink,
    run_id: RunId,
    run: RunDir,
    lock: RunLock,
    log: ReceiptLog,
    history: History,
    cfg: LoopConfig,
    isolation: String,
    resumed: bool,
}

/// Start a new run and drive it (one iteration with `once`).
pub fn start(
    statedir: &StateDir,
    run_id: RunId,
    cfg: LoopConfig,
    operator: &OperatorKey,
    once: bool,
    sink: &mut dyn EventSink,
) -> CmdResult<RunOutcome> {
    start_after_gates(statedir, run_id, cfg, operator, once, sink, None)
}

/// [`start`] after `doctor = true`'s gates: their verdicts are recorded (`preconditions`) before
/// anything else is spent, and a failed gate halts the run, sealed, with its reason.
pub fn start_after_gates(
    statedir: &StateDir,
    run_id: RunId,
    cfg: LoopConfig,
    operator: &OperatorKey,
    once: bool,
    sink: &mut dyn EventSink,
    gates: Option<crate::receipt::probe::PreconditionsRecord>,
) -> CmdResult<RunOutcome> {
    let workdir = open_workdir(&cfg)?;
    super::comprehension::check_state(statedir, cfg.comprehension.as_ref())?;
    let zones = zone_setup(&cfg, statedir.path())?;
    let mut zone = open_zone(&zones)?;
    let run = statedir.create_run(&run_id)?;
    let lock = run.lock()?;
    super::shared_dir::sweep_abandoned();
    zone.bind_run(run.path())?;
    let log = run.create_receipt()?;
    let isolation = zone.isolation().to_string();
    let opening = Opening {
        statedir,
        sink,
        run_id: run_id.clone(),
        run,
        lock,
        log,
        history: History::default(),
        cfg,
        isolation,
        resumed: false,
    };
    let mut active = ActiveRun::open(opening, workdir)?;
    active.append(Event::RunStart(RunStart {
        run_id: run_id.to_string(),
        mode: MODE_CHECK_FIXPOINT.into(),
        isolation: zone.isolation().into(),
        zone: zone.name().into(),
        loopexec_version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        cgroup_scope: zone
            .cgroup_scope()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| Failure::internal(e.to_string()))?,
        config: serde_json::to_value(&active.cfg).map_err(|e| Failure::internal(e.to_string()))?,
        schema: Some(SCHEMA_VERSION),
    }))?;
    active.endorse(operator)?;
    if active.cfg.workspace == WorkspaceMode::Detached {
        let exempt = super::allow_change::Allowances::path_globs(&active.cfg.allow_test_change);
        let commands = active.cfg.operator_commands();
        let (ws, record) = RunWorkspace::create(
            std::path::Path::new(&active.cfg.workdir),
            statedir,
            &active.run,
            super::detached::Start {
                include_uncommitted: active.cfg.include_uncommitted,
                agent_git: active.cfg.agent_git,
                base_commit: active.cfg.base_commit.clone(),
            },
            &super::detached::Protection {
                extra: &active.cfg.protected,
                exempt: &exempt,
                commands: &commands,
            },
            role_policy(&zones, Role::Agent)?,
            role_policy(&zones, Role::Check)?,
        )?;
        active.append(Event::Workspace(record))?;
        active.attach_workspace(ws, false)?;
    }
    if let Some(gates) = gates {
        let refused = gates.refusal();
        active.append(Event::Preconditions(gates))?;
        if refused.is_some() {
            return active.begin(zone.as_mut(), refused, once);
        }
    }
    // `self_test = true`: every zone probed with operations it must not be able to do.
    if active.cfg.self_test {
        let (record, refused) = super::self_test::run(&active.cfg, run_id.as_str(), zone.as_mut())?;
        active.append(Event::SelfTest(record))?;
        if refused.is_some() {
            return active.begin(zone.as_mut(), refused, once);
        }
    }
    // The known-feasible reference, checked before anything is spent on the agent.
    let infeasible = active.check_reference(statedir, zone.as_mut(), &zones)?;
    active.begin(zone.as_mut(), infeasible, once)
}

/// Continue a paused, interrupted or crashed run from its durable state.
pub fn resume(
    statedir: &StateDir,
    run_id: RunId,
    operator: &OperatorKey,
    once: bool,
    sink: &mut dyn EventSink,
) -> CmdResult<RunOutcome> {
    let run = statedir.open_run(&run_id)?;
    let lock = run.lock()?;
    // What the supervisor a crash ended could not remove: its shared directories, its cgroups.
    super::shared_dir::sweep_abandoned();
    sandbox::remove_stale_cgroups();
    let previous = run.read_state().ok().map(|s| s.state.as_str().to_string());
    // One read: the history and the acceptances' signatures below come from the same bytes (a
    // writer ignoring the lock cannot swap the file between a read for one and one for the other).
    let (log, lines, bytes) = run.open_receipt_read()?;
    // What the receipt moved to artifacts (over its bound) comes back whole, re-hashed.
    // An `externalised` event that is not the bound's own record of its event (an artifact that
    // is not the original of its line), or a trimmed event whose whole copy cannot be read back,
    // refuses the resume: the history would act on a forged or partial event.
    let (history, notes) = crate::receipt::bounded::history_of(&lines, run.dir()).map_err(|e| match e {
        crate::receipt::bounded::Unrestorable::Decode(e) => Failure::workspace(format!("{}: {e}", run.receipt_path().display())),
        refused @ crate::receipt::bounded::Unrestorable::Refused(_) => {
            Failure::new(crate::error::FailureCode::NotVerified, format!("{}: {refused}", run.receipt_path().display()))
                .with_hint("`loopexec verify` names the externalised events it refuses; restore the run's artifacts/ as the run wrote them")
        }
    })?;
    for note in notes {
        tracing::warn!("resume: {note}");
    }
    // Anyone who can write the receipt can chain events onto it (an acceptance, then an
    // `iteration_start` so that it is no longer the pending one): only the operator key's
    // signature makes a hand acceptance the operator's. The history honours every acceptance it
    // holds (the frontier, the feedback, the delivered tree), so every one is checked before the
    // history is used, the applied ones as well as the pending one; one that fails makes the
    // receipt tampered, and nothing is appended to it.
    if !history.hand_accepted.is_empty() {
        if let Some(Err(why)) =
            crate::receipt::acceptance::verify_receipt(&bytes, &operator.verifying_key())
        {
            return Err(Failure::new(crate::error::FailureCode::NotVerified, format!("{}: {why}", run.receipt_path().display()))
                .with_hint("a hand acceptance is made with `loopexec ratchet RUN --accept N --key OPERATOR_KEY`, by the key that started the run"));
        }
    }
    // A task_list run pins its tasks' configuration, not one loop's (`task_list`).
    let task_list = super::task_list::is_task_list(&history);
    let cfg = match task_list {
        true => None,
        false => Some(pinned_config(&run, &history)?),
    };
    let max_iterations = match &cfg {
        Some(cfg) => cfg.max_iterations,
        None => history
            .tasks
            .plan
            .as_ref()
            .map_or(0, |p| p.tasks.len() as u64),
    };
    // A halt line its observations do not give is no halt to honour: refused, nothing sealed or
    // delivered (`rules::derive`).
    if let (Some(_), Err(mismatch)) = (&history.halt, crate::rules::derive::derive_halt(&history)) {
        return Err(Failure::workspace(format!("{}: the recorded halt does not follow from its observations: {}", run.receipt_path().display(), mismatch.detail))
            .with_hint("the receipt was tampered with or written by a faulty supervisor; `loopexec verify` names the failing check"));
    }
    // A halt recorded by a supervisor that died before sealing it: this resume finishes the seal
    // (once: a sealed run is final).
    if history.halt.is_some() && !run.dir().exists(crate::receipt::seal::ENVELOPE_FILE) {
        let records = crate::receipt::events::Recorded::decode_all(&lines)
            .map_err(|e| Failure::workspace(format!("{}: {e}", run.receipt_path().display())))?;
        let unsealed = super::seal_window::Unsealed {
            statedir,
            run_id: &run_id,
            run: &run,
            log,
            records: &records,
            history: &history,
            max_iterations,
            previous_state: previous,
        };
        let outcome = super::seal_window::finish_seal(unsealed, operator);
        drop(lock);
        return outcome;
    }
    if let Some(halt) = &history.halt {
        // A supervisor killed after its seal but before its state file said so: the state files
        // are made to say what the sealed receipt does, then the resume is refused.
        if run.read_state().ok().map(|s| s.state) != Some(RunPhase::Halted) {
            super::seal_window::write_halted_state(
                statedir,
                &run_id,
                &run,
                &log,
                &history,
                max_iterations,
            )?;
        }
        return Err(Failure::new(
            crate::error::FailureCode::RunAlreadyHalted,
            format!(
                "run {run_id} already halted with {}; a halted run is final",
                halt.halt_reason
            ),
        )
        .with_hint("start a new run (loopexec run); `loopexec explain-halt` says why it stopped"));
    }
    let Some(cfg) = cfg else {
        return super::task_list::resume(
            statedir, run_id, run, lock, log, history, previous, operator, sink,
        );
    };
    let workdir = open_workdir(&cfg)?;
    super::comprehension::check_state(statedir, cfg.comprehension.as_ref())?;
    let mut zones = zone_setup(&cfg, statedir.path())?;
    if let Some(totals) = recorded_egress_totals(&history) {
        // The run's egress budgets continue from what its receipt recorded.
        zones.egress_totals = totals;
    }
    let mut zone = open_zone(&zones)?;
    zone.bind_run(run.path())?;
    let isolation = history
        .start
        .as_ref()
        .map(|s| s.isolation.clone())
        .unwrap_or_default();
    let opening = Opening {
        statedir,
        sink,
        run_id: run_id.clone(),
        run,
        lock,
        log,
        history,
        cfg,
        isolation,
        resumed: true,
    };
    let supervisor_lost = previous.as_deref() == Some(RunPhase::Running.as_str());
    let mut active = ActiveRun::open(opening, workdir)?;
    active.supervisor_lost = supervisor_lost;
    let last = active.history.last_started;
    let pending = pending(
        &active.history,
        active.mode,
        active.cfg.max_iterations,
        active.cfg.judge.is_some(),
    );
    if let Pending::Unfinished = pending {
        active.append(Event::IterationInterrupted {
            iteration: last,
            cause: "supervisor_lost".into(),
        })?;
    }
    active.append(Event::RunResumed(RunResumed {
        run_id: run_id.to_string(),
        previous_state: previous,
        last_iteration: last,
        next_iteration: last + 1,
        pid: std::process::id(),
        cgroup_scope: zone
            .cgroup_scope()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| Failure::internal(e.to_string()))?,
    }))?;
    // The run key of the interrupted process died with it: mint and endorse a new one.
    active.endorse(operator)?;
    if active.cfg.workspace == WorkspaceMode::Detached {
        // A supervisor killed before it recorded its workspace made no agent call: there is no
        // workspace to go on in, so the run ends sealed with that said.
        let Some(record) = active.history.workspace.clone() else {
            let detail = "the run's supervisor was killed before it recorded its detached workspace: no agent step was made and there is no workspace to resume in; start a new run".to_string();
            return active.halt(HaltReason::WorkspaceInvalid, detail);
        };
        let (agent_policy, check_policy) = (
            role_policy(&zones, Role::Agent)?,
            role_policy(&zones, Role::Check)?,
        );
        let exempt = super::allow_change::Allowances::path_globs(&active.cfg.allow_test_change);
        let commands = active.cfg.operator_commands();
        let ws = RunWorkspace::reopen(
            &record,
            statedir,
            &active.run,
            active.cfg.agent_git,
            &super::detached::Protection {
                extra: &active.cfg.protected,
                exempt: &exempt,
                commands: &commands,
            },
            agent_policy,
            check_policy,
        )?;
        active.attach_workspace(ws, true)?;
    }
    let decided = match pending {
        Pending::Decided(reason, detail) => Some((reason, detail)),
        _ => None,
    };
    active.begin(zone.as_mut(), decided, once)
}

impl<'a> ActiveRun<'a> {
    fn open(o: Opening<'a>, workdir: SafeDir) -> CmdResult<ActiveRun<'a>> {
        let artifacts = o.run.artifacts()?;
        let state = running_state(
            &o.run_id,
            &o.isolation,
            o.history.last_started,
            o.cfg.max_iterations,
            &o.run,
        );
        // In place no guard can judge a step: a green check there is refused (`in_place`).
        let allowances = super::allow_change::Allowances::new(&o.cfg.allow_test_change)?;
        let mut guards: Vec<Box<dyn Guard>> = vec![Box::new(BaselineSetGuard::new(allowances))];
        guards.extend(CoverageGuard::of(&o.cfg.coverage));
        guards.extend(super::score::ScoreGuard::of(o.cfg.score.as_ref()));
        if o.cfg.workspace == WorkspaceMode::InPlace {
            guards.push(Box::new(InPlaceGuard));
        }
        let guards = Guards::new(guards);
        let beacon = super::heartbeat::Beacon::new(o.run.path(), &state.run_id);
        Ok(ActiveRun {
            beacon,
            statedir: o.statedir,
            sink: o.sink,
            run: o.run,
            _lock: o.lock,
            log: o.log,
            history: o.history,
            cfg: o.cfg,
            mode: Mode::CheckFixpoint,
            artifacts,
            workdir,
            state,
            env: operator_env(),
            resumed: o.resumed,
            supervisor_lost: false,
            run_key: None,
            workspace: None,
            guards,
            credential: None,
            refused_at_reopen: None,
            feedback: None,
            usage: None,
        })
    }

    /// Check the run's reference, when it names one (`config.reference: null` in `run_start`
    /// says that no existence proof was given); the halt when it fails.
    fn check_reference(
        &mut self,
        statedir: &StateDir,
        zone: &mut dyn Zone,
        zones: &ZoneSetup,
    ) -> CmdResult<Option<(HaltReason, String)>> {
        if self.cfg.reference.is_none() || self.workspace.is_none() {
            return Ok(None);
        }
        self.beat(Phase::Reference, 0)?;
        let (Some(rev), Some(ws)) = (self.cfg.reference.clone(), &self.workspace) else {
            return Ok(None);
        };
        let policies = (
            role_policy(zones, Role::Agent)?,
            role_policy(zones, Role::Check)?,
        );
        let (record, halt) = super::reference::check(
            &self.cfg,
            &rev,
            statedir,
            &self.run,
            ws,
            zone,
            &self.artifacts,
            policies,
        )?;
        self.append(Event::Reference(record))?;
        Ok(halt)
    }

    /// Mint this process's run key and have the operator key endorse it in the receipt.
    fn endorse(&mut self, operator: &OperatorKey) -> CmdResult<()> {
        let run_key = RunKey::mint();
        let recorded = endorse_run_key(&mut self.log, &self.state.run_id, &run_key, operator)
            .map_err(log_failure)?;
        self.history.record(&recorded);
        self.run_key = Some(run_key);
        Ok(())
    }

    /// Take the detached workspace and its guard. On resume, the workspace as the crashed
    /// process left it is accepted again only if the guards let it through; one that cannot be
    /// taken halts the resumed run with the reason.
    fn attach_workspace(&mut self, mut ws: RunWorkspace, resumed: bool) -> CmdResult<()> {
        let allowances = super::allow_change::Allowances::new(&self.cfg.allow_test_change)?;
        let mut guards: Vec<Box<dyn Guard>> = vec![Box::new(ProtectedPathGuard::new(
            ws.protected().clone(),
            allowances.clone(),
        ))];
        guards.push(Box::new(super::artefact_guard::ArtefactGuard));
        guards.extend(self.syntax_tree_guards(&ws, &allowances)?);
        guards.push(Box::new(BaselineSetGuard::new(allowances)));
        guards.extend(CoverageGuard::of(&self.cfg.coverage));
        guards.extend(super::score::ScoreGuard::of(self.cfg.score.as_ref()));
        // A hand acceptance no iteration started from yet: the resumed run starts from its tree.
        let hand = self
            .history
            .pending_hand_acceptance()
            .filter(|_| resumed)
            .cloned();
        if let Some(hand) = hand {
            if let Err(detail) = ws.take_hand_accepted(hand.iteration, &hand.tree_id) {
                self.refused_at_reopen = Some(detail);
            }
        } else if resumed {
            match ws.snapshot() {
                Taken::Snapshot { snapshot, .. } => {
                    let baseline = ws.baseline_manifest()?;
                    let step = AgentStep {
                        iteration: self.history.last_started,
                        exec: None,
                        workspace: Some((&snapshot, baseline)),
                    };
                    // A tree its iteration's record already refused after the check (a forged
                    // green, a held-out check or a judge that did not stand behind it) is never
                    // accepted again; a review the awareness guard asks for is no refusal of the tree.
                    let n = self.history.last_started;
                    let refused = self.history.sentinel_refused_of(n)
                        || self
                            .history
                            .current()
                            .is_some_and(|r| r.iteration == n && refused_after_check(r));
                    if guards
                        .iter_mut()
                        .all(|g| g.after_agent(&step).is_none_or(|o| !o.refuses()))
                        && !refused
                    {
                        ws.accept(snapshot);
                    }
                }
                Taken::Refused(detail) => self.refused_at_reopen = Some(detail),
                Taken::Interrupted(signal) => {
                    return Err(Failure::workspace(format!(
                        "interrupted ({}) while reading the workspace",
                        interrupt::signal_name(signal)
                    ))
                    .with_hint("resume the run again"))
                }
            }
        }
        self.guards = Guards::new(guards);
        self.workspace = Some(ws);
        Ok(())
    }

    /// The metric-integrity and tampering guards, with A0 and H0 computed from t0 and recorded
    /// (a `guard_baseline` event).
    fn syntax_tree_guards(
        &mut self,
        ws: &RunWorkspace,
        allowances: &super::allow_change::Allowances,
    ) -> CmdResult<Vec<Box<dyn Guard>>> {
        let rules = self.cfg.guards.rule_set()?;
        let spec = self.cfg.guards.surface_spec()?;
        let limits = crate::analysis::Limits::default();
        let files = ws.tree_files();
        let t0 = ws.baseline_manifest()?;
        let baseline = AnalysisBaseline::of_t0(&files, t0, &spec, limits)
            .map_err(|e| Failure::internal(format!("the t0 analysis failed: {e}")))?;
        let python_modules = if analysis_guards::has_python(t0) {
            analysis_guards::python_module_names(&files.t0_dir)
                .map(Some)
                .map_err(|e| e.to_string())
        } else {
            Ok(None)
        };
        self.append(Event::GuardBaseline(GuardBaselineRecord {
            assertions: baseline.assertions,
            surface_sha256: baseline.surface.sha256.clone(),
            surface: baseline
                .surface
                .entries
                .iter()
                .filter_map(|e| serde_json::to_value(e).ok())
                .collect(),
            not_analysed: baseline.not_analysed.clone(),
            python_module_names: python_modules
                .as_ref()
                .ok()
                .and_then(|m| m.as_ref())
                .map(|m| m.len() as u64),
            disabled_rules: rules
                .disabled()
                .map(|(rule, reason)| serde_json::json!({"rule": rule.id(), "reason": reason}))
                .collect(),
        }))?;
        let api_allowances = self.cfg.guards.allowances()?;
        Ok(vec![
            Box::new(
                MetricIntegrityGuard::new(files.clone(), baseline, spec, limits, python_modules)
                    .allowing(allowances.clone()),
            ),
            Box::new(TamperingGuard::new(files.clone(), rules, limits)),
            Box::new(AwarenessGuard::new(files, api_allowances, limits)),
        ])
    }

    /// The common start of a driven run: its state file, the credential of a crashed process
    /// revoked, a halt already decided appended, the credential minted, then the iterations.
    fn begin(
        &mut self,
        zone: &mut dyn Zone,
        decided: Option<(HaltReason, String)>,
        once: bool,
    ) -> CmdResult<RunOutcome> {
        self.save_state(true)?;
        // A credential minted by a process that died without revoking it is revoked now; so is
        // whatever a supervisor that died may have minted before it could record it (the
        // revoke hook revokes what was minted for the run id: with nothing minted, nothing).
        if self.resumed && (self.history.credential_outstanding || self.supervisor_lost) {
            self.revoke_credential(None, "supervisor_lost")?;
        }
        if let Some(detail) = self.refused_at_reopen.take() {
            self.sink
                .event(&LoopEvent::HaltingBeforeIterations { detail: &detail });
            return self.halt(HaltReason::WorkspaceInvalid, detail);
        }
        // A green whose confirmations (or canary) loopexec died before recording gets them now.
        let decided = match decided {
            Some((HaltReason::SuccessConditionMet, _)) if self.resumed => {
                match self.finish_resumed_green(zone)? {
                    Step::Halt(reason, detail) => Some((reason, detail)),
                    Step::Interrupted(signal) => return self.interrupted(signal, None),
                    Step::Continue => None,
                }
            }
            other => other,
        };
        if let Some((reason, detail)) = decided {
            // The outcome was observed and recorded before loopexec died; only its halt is missing.
            return self.halt(reason, detail);
        }
        match self.t0_baseline(zone)? {
            Some(Step::Halt(reason, detail)) => {
                self.sink
                    .event(&LoopEvent::HaltingBeforeIterations { detail: &detail });
                return self.halt(reason, detail);
            }
            Some(Step::Interrupted(signal)) => return self.interrupted(signal, None),
            Some(Step::Continue) | None => {}
        }
        // The held-out check on t0, for its set guard (once per run, before any agent call).
        match self.holdout_baseline(zone)? {
            Some(Step::Halt(reason, detail)) => {
                self.sink
                    .event(&LoopEvent::HaltingBeforeIterations { detail: &detail });
                return self.halt(reason, detail);
            }
            Some(Step::Interrupted(signal)) => return self.interrupted(signal, None),
            Some(Step::Continue) | None => {}
        }
        if let Some((reason, detail)) = self.mint_credential()? {
            self.sink
                .event(&LoopEvent::HaltingBeforeIterations { detail: &detail });
            return self.halt(reason, detail);
        }
        let result = self.drive(zone, once);
        if result.is_err() {
            // What was staged before the failure is kept when the receipt still takes it (a
            // commit that failed has already dropped it), before the revoke hook runs.
            let _ = self.commit();
            // A failure (not a halt: e.g. the receipt could not be written) still revokes the
            // credential this process holds, recording it when the receipt allows.
            if let (Some(secret), Some(hooks)) =
                (self.credential.take(), self.cfg.credentials.clone())
            {
                let run = credentials::revoke(
                    &hooks,
                    &self.cfg.workdir,
                    &self.state.run_id,
                    Some(&secret),
                    "error",
                );
                let _ = self.append(Event::CredentialRevoked(CredentialRevoked {
                    cause: "error".into(),
                    duration_ms: run.duration_ms,
                    ok: run.failure.is_none(),
                    error: run.failure,
                }));
            }
        }
        result
    }

    /// Append an event to the receipt durably (with the group staged before it: one write, one
    /// `fdatasync`) and record it into the history.
    pub(super) fn append(&mut self, event: Event) -> CmdResult<()> {
        self.stage(event)?;
        self.commit()
    }

    /// Stage an event: chained and recorded into the history now, written with its group at the
    /// next commit. A commit comes before every step the event must be on disk for: any command
    /// (each phase's [`Self::beat`] but the in-process snapshot and guards), a change to the
    /// workspace or the ledger, a state file, the end of the run ([`Self::commit`]).
    pub(super) fn stage(&mut self, event: Event) -> CmdResult<()> {
        let told = self.recorded_progress(&event);
        // Lists over the receipt's bound go to a run artifact, named by an `externalised` event
        // right after their own, and no line is over `bounded::MAX_LINE_BYTES` whatever the
        // event (receipt::bounded); the live history keeps them whole.
        match crate::receipt::bounded::bound(&event, self.run.dir())
            .map_err(crate::receipt::store::fs_failure)?
        {
            None => {
                let recorded = self.log.stage_event(&event).map_err(log_failure)?;
                self.history.record(&recorded);
            }
            Some(bounded) => {
                let recorded = self.log.stage_event(&bounded.event).map_err(log_failure)?;
                self.history.record(&crate::receipt::events::Recorded {
                    event,
                    line: recorded.line,
                });
                for externalised in &bounded.after {
                    let recorded = self.log.stage_event(externalised).map_err(log_failure)?;
                    self.history.record(&recorded);
                }
            }
        }
        self.tell(told);
        Ok(())
    }

    /// Make every staged event durable: one write and one `fdatasync` for the group.
    pub(super) fn commit(&mut self) -> CmdResult<()> {
        self.log.commit().map_err(log_failure)
    }

    /// What an event about to be appended tells the sink once it is recorded.
    fn recorded_progress(&self, event: &Event) -> Recorded {
        match event {
            Event::CheckBaseline(b) => Recorded::Baseline {
                check_exit: b.check.check_exit,
                failing: b.check.failing_count,
            },
            Event::Usage(_) => Recorded::Usage,
            Event::ExecResult(crate::receipt::events::ExecResult {
                egress: Some(egress),
                ..
            }) => match serde_json::from_value::<crate::egress::proxy::ProxyStats>(
                egress.totals.clone(),
            ) {
                Ok(totals) => Recorded::Egress {
                    allowed: totals.allowed,
                    denied: totals.denied,
                },
                Err(_) => Recorded::Nothing,
            },
            _ => Recorded::Nothing,
        }
    }

    /// Tell the sink what a recorded event changed (the spend from the history, which now holds it).
    fn tell(&mut self, told: Recorded) {
        match told {
            Recorded::Nothing => {}
            Recorded::Baseline {
                check_exit,
                failing,
            } => self.sink.event(&LoopEvent::BaselineChecked {
                check_exit,
                failing,
            }),
            Recorded::Usage => {
                let records: Vec<&crate::receipt::history::IterationRecord> =
                    self.history.iterations.iter().collect();
                let spent = crate::rules::budget::spent(&records);
                self.sink.event(&LoopEvent::Spent {
                    usd_micros: spent.usd_micros,
                    unknown_money: spent.unknown_money,
                    tokens: spent.tokens,
                });
            }
            Recorded::Egress { allowed, denied } => {
                self.sink.event(&LoopEvent::Egress { allowed, denied })
            }
        }
    }

    /// Mint the agent's credential with the operator's hook, if the run has one. A failing mint
    /// is a halt (`credential_scope_invalid`) decided before any agent runs.
    fn mint_credential(&mut self) -> CmdResult<Option<(HaltReason, String)>> {
        let Some(hooks) = self.cfg.credentials.clone() else {
            return Ok(None);
        };
        match credentials::mint(&hooks, &self.cfg.workdir, &self.state.run_id) {
            Ok((secret, run)) => {
                self.append(Event::CredentialMinted {
                    env: hooks.env,
                    duration_ms: run.duration_ms,
                })?;
                self.credential = Some(secret);
                Ok(None)
            }
            Err(why) => Ok(Some((
                HaltReason::CredentialScopeInvalid,
                format!("no credential for the agent: {why}"),
            ))),
        }
    }

    /// Run the revoke hook (with the secret on its stdin, or nothing after a crash) and record
    /// that it ran. A failing revoke is recorded, never fatal: the run still stops cleanly.
    fn revoke_credential(
        &mut self,
        secret: Option<credentials::Secret>,
        cause: &str,
    ) -> CmdResult<()> {
        let Some(hooks) = self.cfg.credentials.clone() else {
            return Ok(());
        };
        // The hook is a step: what was staged before it is on disk first.
        self.commit()?;
        let run = credentials::revoke(
            &hooks,
            &self.cfg.workdir,
            &self.state.run_id,
            secret.as_ref(),
            cause,
        );
        drop(secret);
        self.append(Event::CredentialRevoked(CredentialRevoked {
            cause: cause.into(),
            duration_ms: run.duration_ms,
            ok: run.failure.is_none(),
            error: run.failure,
        }))
    }

    /// Revoke the credential this process minted, if it holds one.
    pub(super) fn revoke_held(&mut self, cause: &str) -> CmdResult<()> {
        match self.credential.take() {
            Some(secret) => self.revoke_credential(Some(secret), cause),
            None => Ok(()),
        }
    }

    /// Write the run's state.json (and, with `publish`, `latest` and `.loopexec/state.json`).
    pub(super) fn save_state(&mut self, publish: bool) -> CmdResult<()> {
        self.commit()?;
        self.state.receipt_events = self.log.len();
        self.state.receipt_head = self.log.head().to_string();
        self.state.updated_at = crate::timestamp::now_rfc3339();
        self.run.write_state(&self.state)?;
        if publish {
            self.statedir.publish_latest(&self.state)?;
        }
        Ok(())
    }

    pub(super) fn outcome(&self, end: LoopEnd) -> RunOutcome {
        let last_check = self.history.last_exited_check();
        RunOutcome {
            run_id: self.state.run_id.clone(),
            mode: MODE_CHECK_FIXPOINT,
            end,
            iteration: self.state.iteration,
            max_iterations: self.cfg.max_iterations,
            check_exit: last_check.and_then(|c| c.check_exit),
            failing_count: last_check.and_then(|c| c.failing_count).map(|c| c as usize),
            receipt: self.run.receipt_path(),
            state: self.state.state,
            isolation: self.state.isolation.clone(),
            resumed: self.resumed,
            finished_seal: false,
        }
    }

    /// Halt with a computed reason: deliver the accepted end state, append `halt`, seal.
    pub(super) fn halt(&mut self, reason: HaltReason, detail: String) -> CmdResult<RunOutcome> {
        self.beat(Phase::Sealing, self.state.iteration)?;
        self.revoke_held("halt")?;
        let delivery = match &self.workspace {
            None => None,
            Some(ws) => {
                // The last accepted state reaches the operator as a branch and a patch; a failed
                // delivery (e.g. the branch already exists) is recorded, never fatal to the halt.
                let message = format!("loopexec run {}: {}", self.state.run_id, reason.as_str());
                let started = std::time::Instant::now();
                let delivered = ws.deliver(&self.state.run_id, &self.run, &message);
                let duration_ms = Some(started.elapsed().as_millis() as u64);
                let none = DeliveryRecord {
                    branch: None,
                    duration_ms: None,
                    commit: None,
                    tree: None,
                    parent: None,
                    patch: None,
                    reason: None,
                    error: None,
                };
                Some(match delivered {
                    Err(crate::workspace::WorkspaceError::Interrupted { signal, .. }) => {
                        return self.interrupted(signal, None)
                    }
                    Ok(Some(d)) => DeliveryRecord {
                        branch: Some(d.branch),
                        duration_ms,
                        commit: Some(d.commit),
                        tree: Some(d.tree),
                        parent: Some(d.parent),
                        patch: Some(
                            d.patch
                                .strip_prefix(self.run.path())
                                .unwrap_or(&d.patch)
                                .to_string_lossy()
                                .into_owned(),
                        ),
                        ..none
                    },
                    Ok(None) => DeliveryRecord {
                        reason: Some("no accepted change to deliver".into()),
                        ..none
                    },
                    Err(e) => DeliveryRecord {
                        error: Some(e.to_string()),
                        duration_ms,
                        ..none
                    },
                })
            }
        };
        self.append(Event::Halt(HaltRecord {
            halt_reason: reason,
            exit_code: reason.class().code(),
            iteration: self.state.iteration,
            detail: detail.clone(),
            delivery,
        }))?;
        // Tests kill the supervisor here, between the halt line and the seal (`seal_window`).
        #[cfg(debug_assertions)]
        crate::test_pause::at(crate::test_pause::BEFORE_SEAL);
        self.seal()?;
        self.state.state = RunPhase::Halted;
        self.state.halt_reason = Some(reason.as_str().into());
        self.state.exit_code = Some(reason.class().code());
        self.save_state(true)?;
        Ok(self.outcome(LoopEnd::Halted { reason, detail }))
    }

    /// Seal the finished run: DSSE envelope over the in-toto statement, signed by the run key,
    /// which is consumed (dropped) here.
    fn seal(&mut self) -> CmdResult<()> {
        let run_key = self
            .run_key
            .take()
            .ok_or_else(|| Failure::internal("the run key was already used"))?;
        // Subjects: the receipt, and (detached workspace) the end-state tree that was delivered.
        let end_state: Vec<serde_json::Value> = self
            .workspace
            .as_ref()
            .and_then(RunWorkspace::last_accepted)
            .map(|snap| {
                crate::receipt::statement::subject("end-state", "gitTree", &snap.tree_id.to_hex())
            })
            .into_iter()
            .collect();
        seal_run(self.run.dir(), run_key, end_state)
            .map_err(|e| Failure::internal(format!("sealing the receipt: {e}")))?;
        Ok(())
    }

    /// Stop on an operator signal; the run stays resumable.
    pub(super) fn interrupted(
        &mut self,
        signal: i32,
        in_flight: Option<u64>,
    ) -> CmdResult<RunOutcome> {
        let name = interrupt::signal_name(signal).to_string();
        if let Some(iteration) = in_flight {
            self.append(Event::IterationInterrupted {
                iteration,
                cause: name.clone(),
            })?;
        }
        self.revoke_held("interrupt")?;
        self.append(Event::RunInterrupted {
            signal: name,
            iteration: self.state.iteration,
        })?;
        self.state.state = RunPhase::Interrupted;
        self.save_state(true)?;
        Ok(self.outcome(LoopEnd::Interrupted { signal }))
    }

    /// Stop after `--once`; the run stays resumable.
    pub(super) fn pause(&mut self) -> CmdResult<RunOutcome> {
        self.revoke_held("pause")?;
        self.state.state = RunPhase::Paused;
        self.save_state(true)?;
        Ok(self.outcome(LoopEnd::Paused))
    }
}

/// Whether `record` refused its green after the check, as the live run does by not accepting
/// its tree: a guard of the check's stage (its writes, a lost or newly skipped test, the
/// sentinel run, the held-out check; not the canary, which judges an accepted tree), a zero exit
/// whose evidence disagrees, a held-out check that did not find it green, a judge that did not
/// approve.
fn refused_after_check(record: &crate::receipt::history::IterationRecord) -> bool {
    use crate::rules::decide::Step;
    let success = Step::Halt(HaltReason::SuccessConditionMet, String::new());
    let guarded = record
        .guards
        .iter()
        .any(|g| g.stage == "after_check" && g.guard != "adequacy");
    let disagrees = record.check.as_ref().is_some_and(|c| {
        crate::rules::verdict::Verdict::of_check(c) == crate::rules::verdict::Verdict::Disagrees
    });
    let held_out = record.holdout.as_ref().is_some_and(|h| {
        !matches!(
            crate::rules::holdout::decide_on(h, success),
            Step::Halt(HaltReason::SuccessConditionMet, _)
        )
    });
    let judged = record
        .judge
        .as_ref()
        .is_some_and(|j| j.outcome != crate::receipt::events::JudgeOutcome::Approve);
    guarded || disagrees || held_out || judged
}

#[cfg(test)]
mod tests {
    use super::refused_after_check;
    use crate::halt::HaltReason;
    use crate::receipt::events::{
        sample, Event, GuardRecord, HoldoutRecord, JudgeOutcome, JudgeRecord,
    };
    use crate::receipt::history::IterationRecord;

    fn green() -> IterationRecord {
        let Event::ExecResult(exec) = sample::exec_result(1, 0) else {
            unreachable!()
        };
        let Event::CheckResult(mut check) = sample::check_result(1, 0) else {
            unreachable!()
        };
        check.evidence = None;
        IterationRecord {
            iteration: 1,
            exec: Some(exec),
            check: Some(check),
            ..Default::default()
        }
    }

    fn guard(name: &str, reason: HaltReason) -> GuardRecord {
        GuardRecord {
            iteration: 1,
            guard: name.into(),
            stage: "after_check".into(),
            halt_reason: reason,
            detail: "d".into(),
            findings: Vec::new(),
        }
    }

    fn held_out(code: i32) -> HoldoutRecord {
        let Event::CheckResult(mut check) = sample::check_result(1, code) else {
            unreachable!()
        };
        check.evidence = None;
        HoldoutRecord {
            dir: "/h".into(),
            dir_sha256: "00".into(),
            dir_entries: 1,
            dir_changed: false,
            verdict: crate::engine::holdout::verdict_name(&check).into(),
            check,
        }
    }

    fn judged(outcome: JudgeOutcome) -> JudgeRecord {
        sample::judge(outcome, false)
    }

    #[test]
    fn a_green_no_stage_objected_to_is_accepted_again_on_resume() {
        let mut record = green();
        record.holdout = Some(held_out(0));
        record.judge = Some(judged(JudgeOutcome::Approve));
        assert!(!refused_after_check(&record));
    }

    #[test]
    fn a_green_the_held_out_check_found_red_is_not_accepted_again_on_resume() {
        let mut record = green();
        record.holdout = Some(held_out(1));
        assert!(refused_after_check(&record));
    }

    #[test]
    fn a_green_with_a_held_out_set_guard_is_not_accepted_again_on_resume() {
        let mut record = green();
        record.holdout = Some(held_out(0));
        record
            .guards
            .push(guard("holdout", HaltReason::ObjectiveUnverified));
        assert!(refused_after_check(&record));
    }

    #[test]
    fn a_green_the_judge_vetoed_is_not_accepted_again_on_resume() {
        let mut record = green();
        record.judge = Some(judged(JudgeOutcome::Veto));
        assert!(refused_after_check(&record));
    }

    #[test]
    fn a_canary_finding_judges_an_accepted_tree_and_does_not_refuse_it() {
        let mut record = green();
        record
            .guards
            .push(guard("adequacy", HaltReason::CheckInadequate));
        assert!(!refused_after_check(&record));
    }
}
