//! The loop engine: the iteration lifecycle of a `check_fixpoint` run and its durable record.
//!
//! One iteration flows one way: `iteration_start` -> agent in its zone -> `exec_result` -> check
//! in its zone -> failing set -> `check_result` -> halt decision (`decide`). Every event is
//! appended (fsync'd) to the hash-chained receipt before the next step starts; `state.json` is
//! replaced atomically when the run starts, resumes and stops (while it runs, the receipt is the
//! live record: `status` reads the current iteration from it). A run stops in one of
//! three ways: a computed halt (final), a pause after `--once`, or an operator interrupt
//! (SIGINT/SIGTERM). Paused, interrupted and crashed runs continue with [`resume`].

pub mod config;
pub mod credentials;
pub mod decide;
pub mod detached;
pub mod loopfile;
pub mod replay;
pub mod zone_setup;

use crate::capture::ArtifactSink;
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::interrupt;
use crate::oracle::junit;
use crate::receipt::chain::ReceiptLog;
use crate::receipt::keys::{OperatorKey, RunKey};
use crate::receipt::seal::{endorse_run_key, seal_run};
use crate::receipt::events::{self, fields, iteration_of, stream_value, type_of};
use crate::receipt::state::{RunPhase, RunState};
use crate::receipt::store::{log_failure, RunDir, RunLock, StateDir, ARTIFACTS};
use crate::run_id::RunId;
use crate::safefs::SafeDir;
use crate::zones::setup::ZoneSetup;
use crate::zones::{open_zone, Role, Zone, ZoneCommand, ZoneRun};
use zone_setup::zone_setup;
use config::{LoopConfig, MODE_CHECK_FIXPOINT};

use detached::{RunWorkspace, WorkspaceMode};
use decide::Step;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::time::Duration;

/// How a call to the engine ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopEnd {
    /// A computed halt; the run is final.
    Halted { reason: HaltReason, detail: String },
    /// `--once` finished an iteration without a halt; resumable.
    Paused,
    /// Stopped by SIGINT/SIGTERM; resumable.
    Interrupted { signal: i32 },
}

/// What the CLI reports about a run after the engine returns.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run_id: String,
    pub end: LoopEnd,
    /// The last iteration started.
    pub iteration: u64,
    pub max_iterations: u64,
    /// Exit code of the last check that exited.
    pub check_exit: Option<i32>,
    /// Size of the last known failing set.
    pub failing_count: Option<usize>,
    pub receipt: PathBuf,
    pub state: RunPhase,
    pub isolation: String,
    pub resumed: bool,
}

/// Per-iteration progress lines for human mode (the CLI decides where they go).
pub type Progress<'a> = &'a mut dyn FnMut(&str);

struct ActiveRun<'a> {
    statedir: &'a StateDir,
    run: RunDir,
    _lock: RunLock,
    log: ReceiptLog,
    cfg: LoopConfig,
    artifacts: SafeDir,
    workdir: SafeDir,
    state: RunState,
    env: Vec<(String, String)>,
    check_exit: Option<i32>,
    failing_count: Option<usize>,
    resumed: bool,
    /// This process's run key, endorsed in the receipt; consumed when the run is sealed.
    run_key: Option<RunKey>,
    /// The detached workspace (native isolation in a git repository).
    workspace: Option<RunWorkspace>,
    /// The agent's minted credential, held only in this process's memory until it is revoked.
    credential: Option<credentials::Secret>,
}

/// The operator's environment for the commands: everything but loopexec's own `LOOPEXEC_*`
/// variables, and without entries that are not UTF-8 (`std::env::vars` would panic on them).
pub(crate) fn operator_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| !k.starts_with("LOOPEXEC_"))
        .collect()
}

/// The state of a run this process is about to drive (its counters are filled in on save).
fn running_state(run_id: &RunId, isolation: &str, iteration: u64, max_iterations: u64, run: &RunDir) -> RunState {
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
    zones
        .policy(role)
        .map(|p| &p.policy)
        .ok_or_else(|| Failure::internal("a detached workspace needs native isolation and its pinned policies"))
}

fn open_workdir(cfg: &LoopConfig) -> CmdResult<SafeDir> {
    SafeDir::open(std::path::Path::new(&cfg.workdir)).map_err(|e| {
        Failure::workspace(format!("workdir {}: {e}", cfg.workdir)).with_hint("check --workdir")
    })
}

/// Start a new run and drive it (one iteration with `once`).
pub fn start(
    statedir: &StateDir,
    run_id: RunId,
    cfg: LoopConfig,
    operator: &OperatorKey,
    once: bool,
    progress: Progress<'_>,
) -> CmdResult<RunOutcome> {
    let workdir = open_workdir(&cfg)?;
    let zones = zone_setup(&cfg, statedir.path())?;
    let mut zone = open_zone(&zones)?;
    let run = statedir.create_run(&run_id)?;
    let lock = run.lock()?;
    zone.bind_run(run.path())?;
    let mut log = run.create_receipt()?;
    let artifacts = run.artifacts()?;
    log.append(
        events::RUN_START,
        fields(json!({
            "run_id": run_id.as_str(),
            "mode": MODE_CHECK_FIXPOINT,
            "isolation": zone.isolation(),
            "zone": zone.name(),
            "loopexec_version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "config": serde_json::to_value(&cfg).map_err(|e| Failure::internal(e.to_string()))?,
        })),
    )
    .map_err(log_failure)?;
    let run_key = RunKey::mint();
    endorse_run_key(&mut log, run_id.as_str(), &run_key, operator).map_err(log_failure)?;
    let workspace = match cfg.workspace {
        WorkspaceMode::Detached => {
            let (ws, fields) = RunWorkspace::create(
                std::path::Path::new(&cfg.workdir),
                statedir,
                &run,
                cfg.include_uncommitted,
                &cfg.protected,
                role_policy(&zones, Role::Agent)?,
                role_policy(&zones, Role::Check)?,
            )?;
            log.append(events::WORKSPACE, fields).map_err(log_failure)?;
            Some(ws)
        }
        WorkspaceMode::InPlace => None,
    };
    let state = running_state(&run_id, zone.isolation(), 0, cfg.max_iterations, &run);
    let mut active = ActiveRun {
        statedir,
        run,
        _lock: lock,
        log,
        cfg,
        artifacts,
        workdir,
        state,
        env: operator_env(),
        check_exit: None,
        failing_count: None,
        resumed: false,
        run_key: Some(run_key),
        workspace,
        credential: None,
    };
    active.save_state(true)?;
    if let Some((reason, detail)) = active.mint_credential()? {
        progress(&detail);
        return active.halt(reason, detail);
    }
    active.drive_revoking_on_error(zone.as_mut(), once, progress)
}

/// Where a receipt left off: the pinned config, the last iteration started, whether it was left
/// unfinished, and the last check result.
struct ReceiptPosition {
    cfg: LoopConfig,
    isolation: String,
    last_started: u64,
    unfinished: bool,
    halted: Option<String>,
    check_exit: Option<i32>,
    failing_count: Option<usize>,
    /// A halt the last recorded result already decided, whose `halt` event was never appended
    /// (loopexec died between the two appends).
    decided: Option<(HaltReason, String)>,
}

fn recorded_ending(event: &Map<String, Value>) -> Option<crate::zones::Ending> {
    event.get("ending").cloned().and_then(|v| serde_json::from_value(v).ok())
}

/// The configuration a run pinned in its first event, `run_start` (resume, replay and
/// reexecute all start from it, never from flags or loop.toml).
pub fn pinned_config(run: &RunDir, events: &[Map<String, Value>]) -> CmdResult<LoopConfig> {
    let broken = |what: &str| Failure::workspace(format!("{}: {what}", run.receipt_path().display()));
    let first = events.first().ok_or_else(|| broken("the receipt is empty (the run never started)"))?;
    if type_of(first) != events::RUN_START {
        return Err(broken("the first event is not run_start"));
    }
    first
        .get("config")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .ok_or_else(|| broken("run_start carries no readable config"))
}

fn read_position(run: &RunDir, events: &[Map<String, Value>]) -> CmdResult<ReceiptPosition> {
    let cfg = pinned_config(run, events)?;
    let isolation = events.first().and_then(|e| e.get("isolation")).and_then(Value::as_str).unwrap_or("").to_string();
    let mut pos = ReceiptPosition {
        cfg,
        isolation,
        last_started: 0,
        unfinished: false,
        halted: None,
        check_exit: None,
        failing_count: None,
        decided: None,
    };
    for event in events {
        match type_of(event) {
            events::ITERATION_START => {
                pos.last_started = iteration_of(event).unwrap_or(pos.last_started);
                pos.unfinished = true;
                pos.decided = None;
            }
            events::EXEC_RESULT => {
                if let Some(Step::Halt(reason, detail)) = recorded_ending(event).map(|e| decide::after_exec(&e)) {
                    pos.unfinished = false;
                    pos.decided = Some((reason, detail));
                }
            }
            events::CHECK_RESULT => {
                pos.unfinished = false;
                let iteration = iteration_of(event).unwrap_or(pos.last_started);
                if let Some(Step::Halt(reason, detail)) =
                    recorded_ending(event).map(|e| decide::after_check(&e, iteration, pos.cfg.max_iterations))
                {
                    pos.decided = Some((reason, detail));
                }
                if let Some(code) = event.get("check_exit").and_then(Value::as_i64) {
                    pos.check_exit = Some(code as i32);
                    pos.failing_count = event.get("failing_count").and_then(Value::as_u64).map(|c| c as usize);
                }
            }
            events::ITERATION_INTERRUPTED => {
                pos.unfinished = false;
                pos.decided = None;
            }
            events::HALT => {
                pos.halted = Some(event.get("halt_reason").and_then(Value::as_str).unwrap_or("?").to_string());
            }
            _ => {}
        }
    }
    Ok(pos)
}

/// Continue a paused, interrupted or crashed run from its durable state.
pub fn resume(
    statedir: &StateDir,
    run_id: RunId,
    operator: &OperatorKey,
    once: bool,
    progress: Progress<'_>,
) -> CmdResult<RunOutcome> {
    let run = statedir.open_run(&run_id)?;
    let lock = run.lock()?;
    let previous = run.read_state().ok().map(|s| s.state.as_str().to_string());
    let (mut log, events) = run.open_receipt()?;
    let pos = read_position(&run, &events)?;
    if let Some(reason) = pos.halted {
        return Err(Failure::new(
            crate::error::FailureCode::RunAlreadyHalted,
            format!("run {run_id} already halted with {reason}; a halted run is final"),
        )
        .with_hint("start a new run (loopexec run); `loopexec explain-halt` says why it stopped"));
    }
    let workdir = open_workdir(&pos.cfg)?;
    let mut zones = zone_setup(&pos.cfg, statedir.path())?;
    if let Some(totals) = recorded_egress_totals(&events) {
        // The run's egress budgets continue from what its receipt recorded.
        zones.egress_totals = totals;
    }
    let mut zone = open_zone(&zones)?;
    zone.bind_run(run.path())?;
    let artifacts = run.artifacts()?;
    if pos.unfinished {
        log.append(
            events::ITERATION_INTERRUPTED,
            fields(json!({"iteration": pos.last_started, "cause": "supervisor_lost"})),
        )
        .map_err(log_failure)?;
    }
    log.append(
        events::RUN_RESUMED,
        fields(json!({
            "run_id": run_id.as_str(),
            "previous_state": previous,
            "last_iteration": pos.last_started,
            "next_iteration": pos.last_started + 1,
            "pid": std::process::id(),
        })),
    )
    .map_err(log_failure)?;
    // The run key of the interrupted process died with it: mint and endorse a new one.
    let run_key = RunKey::mint();
    endorse_run_key(&mut log, run_id.as_str(), &run_key, operator).map_err(log_failure)?;
    let workspace = match pos.cfg.workspace {
        WorkspaceMode::Detached => {
            let event = events
                .iter()
                .find(|e| type_of(e) == events::WORKSPACE)
                .ok_or_else(|| Failure::workspace(format!("{}: no workspace event", run.receipt_path().display())))?;
            Some(RunWorkspace::reopen(event, statedir, &run, &pos.cfg.protected, role_policy(&zones, Role::Agent)?, role_policy(&zones, Role::Check)?)?)
        }
        WorkspaceMode::InPlace => None,
    };
    let state = running_state(&run_id, &pos.isolation, pos.last_started, pos.cfg.max_iterations, &run);
    let decided = pos.decided;
    let mut active = ActiveRun {
        statedir,
        run,
        _lock: lock,
        log,
        cfg: pos.cfg,
        artifacts,
        workdir,
        state,
        env: operator_env(),
        check_exit: pos.check_exit,
        failing_count: pos.failing_count,
        resumed: true,
        run_key: Some(run_key),
        workspace,
        credential: None,
    };
    active.save_state(true)?;
    // A credential minted by a process that died without revoking it is revoked now.
    if credential_outstanding(&events) {
        active.revoke_credential(None, "supervisor_lost")?;
    }
    if let Some(detail) = active.workspace.as_ref().and_then(RunWorkspace::refused_at_reopen).map(str::to_string) {
        progress(&detail);
        return active.halt(HaltReason::WorkspaceInvalid, detail);
    }
    if let Some((reason, detail)) = decided {
        // The outcome was observed and recorded before loopexec died; only its halt is missing.
        return active.halt(reason, detail);
    }
    if let Some((reason, detail)) = active.mint_credential()? {
        progress(&detail);
        return active.halt(reason, detail);
    }
    active.drive_revoking_on_error(zone.as_mut(), once, progress)
}

/// The run's egress totals as the receipt's last `exec_result` recorded them.
fn recorded_egress_totals(events: &[Map<String, Value>]) -> Option<crate::egress::ProxyStats> {
    let last = events.iter().rev().find_map(|e| (type_of(e) == events::EXEC_RESULT).then(|| e.get("egress")).flatten())?;
    serde_json::from_value(last.get("totals")?.clone()).ok()
}

/// Whether the receipt's last `credential_minted` has no `credential_revoked` after it.
fn credential_outstanding(events: &[Map<String, Value>]) -> bool {
    events
        .iter()
        .rev()
        .find(|e| matches!(type_of(e), events::CREDENTIAL_MINTED | events::CREDENTIAL_REVOKED))
        .is_some_and(|e| type_of(e) == events::CREDENTIAL_MINTED)
}

impl ActiveRun<'_> {
    /// Mint the agent's credential with the operator's hook, if the run has one. A failing mint
    /// is a halt (`credential_scope_invalid`) decided before any agent runs.
    fn mint_credential(&mut self) -> CmdResult<Option<(HaltReason, String)>> {
        let Some(hooks) = self.cfg.credentials.clone() else {
            return Ok(None);
        };
        match credentials::mint(&hooks, &self.cfg.workdir, &self.state.run_id) {
            Ok((secret, run)) => {
                self.append(events::CREDENTIAL_MINTED, json!({"env": hooks.env, "duration_ms": run.duration_ms}))?;
                self.credential = Some(secret);
                Ok(None)
            }
            Err(why) => Ok(Some((HaltReason::CredentialScopeInvalid, format!("no credential for the agent: {why}")))),
        }
    }

    /// Run the revoke hook (with the secret on its stdin, or nothing after a crash) and record
    /// that it ran. A failing revoke is recorded, never fatal: the run still stops cleanly.
    fn revoke_credential(&mut self, secret: Option<credentials::Secret>, cause: &str) -> CmdResult<()> {
        let Some(hooks) = self.cfg.credentials.clone() else {
            return Ok(());
        };
        let run = credentials::revoke(&hooks, &self.cfg.workdir, &self.state.run_id, secret.as_ref(), cause);
        drop(secret);
        let mut event = json!({"cause": cause, "duration_ms": run.duration_ms, "ok": run.failure.is_none()});
        if let Some(why) = run.failure {
            event["error"] = json!(why);
        }
        self.append(events::CREDENTIAL_REVOKED, event)
    }

    /// Drive the run; a failure (not a halt: e.g. the receipt could not be written) still
    /// revokes the credential this process holds, recording it when the receipt allows.
    fn drive_revoking_on_error(&mut self, zone: &mut dyn Zone, once: bool, progress: Progress<'_>) -> CmdResult<RunOutcome> {
        let result = self.drive(zone, once, progress);
        if result.is_err() {
            if let (Some(secret), Some(hooks)) = (self.credential.take(), self.cfg.credentials.clone()) {
                let run = credentials::revoke(&hooks, &self.cfg.workdir, &self.state.run_id, Some(&secret), "error");
                let _ = self.append(
                    events::CREDENTIAL_REVOKED,
                    json!({"cause": "error", "duration_ms": run.duration_ms, "ok": run.failure.is_none(), "error": run.failure}),
                );
            }
        }
        result
    }

    /// Revoke the credential this process minted, if it holds one.
    fn revoke_held(&mut self, cause: &str) -> CmdResult<()> {
        match self.credential.take() {
            Some(secret) => self.revoke_credential(Some(secret), cause),
            None => Ok(()),
        }
    }

    fn append(&mut self, event_type: &str, value: Value) -> CmdResult<()> {
        self.log.append(event_type, fields(value)).map(|_| ()).map_err(log_failure)
    }

    /// Write the run's state.json (and, with `publish`, `latest` and `.loopexec/state.json`).
    fn save_state(&mut self, publish: bool) -> CmdResult<()> {
        self.state.receipt_events = self.log.len();
        self.state.receipt_head = self.log.head().to_string();
        self.state.updated_at = crate::receipt::chain::now_rfc3339();
        self.run.write_state(&self.state)?;
        if publish {
            self.statedir.publish_latest(&self.state)?;
        }
        Ok(())
    }

    /// Run one command in its zone. A zone that cannot be set up (a missing isolation layer, a
    /// grant the zone cannot use) is an outcome, not a crash: `Ok(Err(detail))`, and the caller
    /// halts `isolation_unsatisfiable` with a complete, sealed receipt.
    fn run_command(
        &mut self,
        zone: &mut dyn Zone,
        role: Role,
        iteration: u64,
        overlay: Option<sandbox::OverlayMount>,
    ) -> CmdResult<Result<ZoneRun, String>> {
        let (line, timeout_ms, stem) = match role {
            Role::Agent => (self.cfg.exec.clone(), self.cfg.exec_timeout_ms, format!("{iteration:04}-exec")),
            Role::Check => (self.cfg.check.clone(), self.cfg.check_timeout_ms, format!("{iteration:04}-check")),
        };
        let mut env = self.env.clone();
        let mut inject = Vec::new();
        if let (Role::Agent, Some(hooks), Some(secret)) = (role, &self.cfg.credentials, &self.credential) {
            inject.push((hooks.env.clone(), secret.clone()));
        }
        env.push(("LOOPEXEC_RUN_ID".into(), self.state.run_id.clone()));
        env.push(("LOOPEXEC_ITERATION".into(), iteration.to_string()));
        env.push(("LOOPEXEC_ROLE".into(), role.as_str().into()));
        let cwd = match &overlay {
            Some(o) => o.target.clone(),
            None => PathBuf::from(&self.cfg.workdir),
        };
        let cmd = ZoneCommand {
            role,
            command_line: line,
            cwd,
            env,
            timeout: Some(Duration::from_millis(timeout_ms)),
            overlays: overlay.into_iter().collect(),
            inject,
        };
        let sink = ArtifactSink::new(&self.artifacts, ARTIFACTS, &stem);
        match zone.run(&cmd, &sink) {
            Ok(run) => Ok(Ok(run)),
            Err(e) if e.is_setup() => Ok(Err(format!("{} zone: {e}", role.as_str()))),
            Err(other) => Err(other.into()),
        }
    }

    fn outcome(&self, end: LoopEnd) -> RunOutcome {
        RunOutcome {
            run_id: self.state.run_id.clone(),
            end,
            iteration: self.state.iteration,
            max_iterations: self.cfg.max_iterations,
            check_exit: self.check_exit,
            failing_count: self.failing_count,
            receipt: self.run.receipt_path(),
            state: self.state.state,
            isolation: self.state.isolation.clone(),
            resumed: self.resumed,
        }
    }

    fn halt(&mut self, reason: HaltReason, detail: String) -> CmdResult<RunOutcome> {
        self.revoke_held("halt")?;
        let mut halt = json!({
            "halt_reason": reason.as_str(),
            "exit_code": reason.class().code(),
            "iteration": self.state.iteration,
            "detail": detail,
        });
        if let Some(ws) = &self.workspace {
            // The last accepted state reaches the operator as a branch and a patch; a failed
            // delivery (e.g. the branch already exists) is recorded, never fatal to the halt.
            let message = format!("loopexec run {}: {}", self.state.run_id, reason.as_str());
            let started = std::time::Instant::now();
            let delivered = ws.deliver(&self.state.run_id, &self.run, &message);
            let duration_ms = started.elapsed().as_millis() as u64;
            halt["delivery"] = match delivered {
                Err(crate::workspace::WorkspaceError::Interrupted { signal, .. }) => return self.interrupted(signal, None),
                Ok(Some(d)) => json!({
                    "duration_ms": duration_ms,
                    "branch": d.branch,
                    "commit": d.commit,
                    "tree": d.tree,
                    "parent": d.parent,
                    "patch": d.patch.strip_prefix(self.run.path()).unwrap_or(&d.patch).to_string_lossy(),
                }),
                Ok(None) => json!({"branch": null, "reason": "no accepted change to deliver"}),
                Err(e) => json!({"branch": null, "error": e.to_string(), "duration_ms": duration_ms}),
            };
        }
        self.append(events::HALT, halt)?;
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
        let run_key = self.run_key.take().ok_or_else(|| Failure::internal("the run key was already used"))?;
        // Subjects: the receipt, and (detached workspace) the end-state tree that was delivered.
        let end_state: Vec<Value> = self
            .workspace
            .as_ref()
            .and_then(RunWorkspace::last_accepted)
            .map(|snap| crate::receipt::statement::subject("end-state", "gitTree", &snap.tree_id.to_hex()))
            .into_iter()
            .collect();
        seal_run(self.run.dir(), run_key, end_state)
            .map_err(|e| Failure::internal(format!("sealing the receipt: {e}")))?;
        Ok(())
    }

    fn interrupted(&mut self, signal: i32, in_flight: Option<u64>) -> CmdResult<RunOutcome> {
        let name = interrupt::signal_name(signal);
        if let Some(iteration) = in_flight {
            self.append(events::ITERATION_INTERRUPTED, json!({"iteration": iteration, "cause": name}))?;
        }
        self.revoke_held("interrupt")?;
        self.append(events::RUN_INTERRUPTED, json!({"signal": name, "iteration": self.state.iteration}))?;
        self.state.state = RunPhase::Interrupted;
        self.save_state(true)?;
        Ok(self.outcome(LoopEnd::Interrupted { signal }))
    }

    fn drive(&mut self, zone: &mut dyn Zone, once: bool, progress: Progress<'_>) -> CmdResult<RunOutcome> {
        loop {
            if let Some(sig) = interrupt::pending() {
                return self.interrupted(sig, None);
            }
            let n = self.state.iteration + 1;
            if n > self.cfg.max_iterations {
                let max = self.cfg.max_iterations;
                return self.halt(
                    HaltReason::MaxIterationsReached,
                    format!("the check still fails after {max} of {max} iterations"),
                );
            }
            // The receipt is the live record: state.json is rewritten only when the run stops, so
            // that an iteration costs one fsync per event and nothing more.
            self.append(events::ITERATION_START, json!({"iteration": n}))?;
            self.state.iteration = n;

            let agent_overlay = self.workspace.as_ref().map(RunWorkspace::agent_overlay);
            let exec = match self.run_command(zone, Role::Agent, n, agent_overlay)? {
                Ok(run) => run,
                Err(detail) => return self.halt(HaltReason::IsolationUnsatisfiable, detail),
            };
            let mut exec_result = json!({
                "iteration": n,
                "ending": events::ending_value(&exec.ending),
                "exit_code": exec.ending.exit_code(),
                "duration_ms": exec.duration.as_millis() as u64,
                "stdout": stream_value(&exec.output.stdout),
                "stderr": stream_value(&exec.output.stderr),
            });
            if let Some(egress) = &exec.usage.egress {
                // Cumulative egress of the run and the digest of its audit log so far.
                exec_result["egress"] = json!({"totals": egress.run_totals, "audit": crate::zones::pinned::EGRESS_AUDIT_FILE, "audit_sha256": egress.audit_sha256});
            }
            self.append(events::EXEC_RESULT, exec_result)?;
            match decide::after_exec(&exec.ending) {
                Step::Continue => {}
                Step::Interrupted(sig) => return self.interrupted(sig, Some(n)),
                Step::Halt(reason, detail) => {
                    progress(&format!("iteration {n}: {detail}"));
                    return self.halt(reason, detail);
                }
            }
            if let Some(ws) = self.workspace.as_mut() {
                // The first guard: which tree did the agent leave, and did it touch a protected path?
                let step = match ws.after_agent() {
                    detached::AfterAgent::Step(step) => step,
                    detached::AfterAgent::Refused(detail) => {
                        progress(&format!("iteration {n}: {detail}"));
                        return self.halt(HaltReason::WorkspaceInvalid, detail);
                    }
                    detached::AfterAgent::Interrupted(sig) => return self.interrupted(sig, Some(n)),
                };
                let touched: Vec<Value> = step
                    .protected
                    .iter()
                    .map(|c| json!({"path": c.path, "change": format!("{:?}", c.change).to_lowercase()}))
                    .collect();
                let changed = step.snapshot.changes(ws.baseline_manifest()?).len();
                let tree_id = step.snapshot.tree_id.to_hex();
                let blocked: Vec<String> = step.protected.iter().map(|c| c.path.clone()).collect();
                if blocked.is_empty() {
                    ws.accept(step.snapshot);
                }
                self.append(
                    events::SNAPSHOT,
                    json!({"iteration": n, "tree_id": tree_id, "changed_paths": changed, "protected_changes": touched, "duration_ms": step.duration_ms}),
                )?;
                if !blocked.is_empty() {
                    let detail = format!("the agent changed protected paths: {}", blocked.join(", "));
                    progress(&format!("iteration {n}: {detail}"));
                    return self.halt(HaltReason::BlockedPathModified, detail);
                }
            }
            if let Some(sig) = interrupt::pending() {
                return self.interrupted(sig, Some(n));
            }

            let (check_overlay, scratch) = match &self.workspace {
                Some(ws) => match ws.check_overlay(n) {
                    Ok((overlay, scratch)) => (Some(overlay), Some(scratch)),
                    Err(f) => return self.halt(HaltReason::WorkspaceInvalid, format!("the check's layers cannot be built: {}", f.message)),
                },
                None => (None, None),
            };
            let check = match self.run_command(zone, Role::Check, n, check_overlay)? {
                Ok(run) => run,
                Err(detail) => return self.halt(HaltReason::IsolationUnsatisfiable, detail),
            };
            let check_exit = check.ending.exit_code();
            let mut result = json!({
                "iteration": n,
                "ending": events::ending_value(&check.ending),
                "check_exit": check_exit,
                "duration_ms": check.duration.as_millis() as u64,
                "stdout": stream_value(&check.output.stdout),
                "stderr": stream_value(&check.output.stderr),
                "failing_set": Value::Null,
                "failing_count": Value::Null,
                "collected_set": Value::Null,
                "collected_count": Value::Null,
            });
            let mut failing_count = None;
            if let (Some(rel), Some(_)) = (self.cfg.junit.clone(), check_exit) {
                let report_dir = scratch.as_ref().map(|s| s.writes()).unwrap_or(&self.workdir);
                match junit::read_report(report_dir, &rel) {
                    Ok(sets) => {
                        failing_count = Some(sets.failing.len());
                        result["failing_count"] = json!(sets.failing.len());
                        result["failing_set"] = json!(sets.failing);
                        result["collected_count"] = json!(sets.collected.len());
                        result["collected_set"] = json!(sets.collected);
                    }
                    Err(e) => result["junit_error"] = json!(e.to_string()),
                }
            }
            drop(scratch);
            self.append(events::CHECK_RESULT, result)?;
            if check_exit.is_some() {
                self.check_exit = check_exit;
                self.failing_count = failing_count;
            }
            let step = decide::after_check(&check.ending, n, self.cfg.max_iterations);
            let failing = failing_count.map(|c| format!(", {c} failing")).unwrap_or_default();
            if let crate::zones::Ending::Exited { code } = &check.ending {
                progress(&format!(
                    "iteration {n}: exec ok ({} ms), check exit {code} ({} ms){failing}",
                    exec.duration.as_millis(),
                    check.duration.as_millis()
                ));
            }
            match step {
                Step::Continue => {}
                Step::Interrupted(sig) => return self.interrupted(sig, Some(n)),
                Step::Halt(reason, detail) => return self.halt(reason, detail),
            }
            if once {
                self.revoke_held("pause")?;
                self.state.state = RunPhase::Paused;
                self.save_state(true)?;
                return Ok(self.outcome(LoopEnd::Paused));
            }
        }
    }
}
