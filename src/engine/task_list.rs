//! The task_list run (docs/task-list.md): the SMALL plan of the repository, task by task, each
//! task its own `check_fixpoint` run with the task's acceptance check and every guard of that
//! mode (t0 baseline, reports, sets, syntax-tree guards, check-writes), then a checkpoint.
//!
//! The run owns a plan branch, `loopexec/<run-id>`, that starts at HEAD. For each task:
//! 1. `.small/` is read out of the branch's commit (`workspace::plan_branch`) into the run
//!    directory (`plan/.small/`), loaded and validated strictly (`crate::small`); the next task
//!    is chosen by `rules::task_list`;
//! 2. the task is started in progress (a progress entry), committed onto the branch, and recorded
//!    (`task_started`, naming the task's run `<run-id>.t<k>`);
//! 3. the task's run starts from that commit (`config.base_commit`), with `.small/` protected and
//!    the task in the agent's feedback file and `LOOPEXEC_TASK_ID`; it delivers its own branch;
//! 4. the task is checkpointed completed or blocked with the evidence (command, exit code,
//!    failing set, tree), on top of the task run's delivered commit, and recorded
//!    (`task_checkpoint`, with the digest of the task run's sealed receipt).
//!
//! The receipt is the authority: every step starts again from the commit it recorded, so a
//! supervisor killed anywhere is resumed without running a task twice (a task run already
//! sealed is checkpointed from its receipt; one under way is resumed). The halt writes the
//! handoff, moves the branch, appends `halt`, and seals the run like any other.

use super::config::{ConfigInput, LoopConfig, LoopFileRef, TaskAssignment};
use super::detached::WorkspaceMode;
use super::sink::EventSink;
use super::{LoopEnd, RunOutcome};
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::receipt::chain::ReceiptLog;
use crate::receipt::events::{
    DeliveryRecord, Event, HaltRecord, RunResumed, RunStart, TaskCheckpointRecord, TaskPlanRecord,
    TaskStartedRecord, SCHEMA_VERSION,
};
use crate::receipt::history::History;
use crate::receipt::keys::{OperatorKey, RunKey};
use crate::receipt::seal::{endorse_run_key, seal_run};
use crate::receipt::state::{RunPhase, RunState};
use crate::receipt::store::{log_failure, RunDir, RunLock, StateDir};
use crate::rules::task_list::{self as rule, Next, PlannedTask, TaskEnd, TaskState};
use crate::run_id::RunId;
use crate::safefs::SafeDir;
use crate::workspace::plan_branch::{self, SmallFile, SMALL_DIR};
use crate::workspace::ObjectId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the run keeps the `.small/` it reads and writes: `<run dir>/plan/.small/`.
const PLAN_DIR: &str = "plan";
/// The private index the plan branch's commits are made through.
const PLAN_INDEX: &str = "plan-index";
/// Most tasks a plan may hold (each is recorded in `task_plan`, a line that is never trimmed).
pub const MAX_TASKS: usize = 1000;
/// Longest task id (it reaches the agent's environment as `LOOPEXEC_TASK_ID`).
pub const MAX_TASK_ID_BYTES: usize = 128;
/// Most dependencies of one task.
pub const MAX_DEPENDENCIES: usize = 64;

/// A task's acceptance oracle as pinned: the check of its own run and what it overrides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskOraclePin {
    pub check: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub report: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    pub max_iterations: u64,
    pub check_timeout_ms: u64,
    pub exec_timeout_ms: u64,
}

/// The pinned configuration of a task_list run (`run_start.config`): what every task's run
/// shares (`template`, whose `check` is empty and never runs) and each task's oracle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskListConfig {
    pub template: LoopConfig,
    pub tasks: BTreeMap<String, TaskOraclePin>,
}

impl TaskListConfig {
    /// Resolve and validate: the template as a run's configuration, each task's oracle as its
    /// run's (so a bad `[tasks.<id>]` is refused now, before anything is written).
    pub fn resolve(
        input: ConfigInput,
        workdir: &Path,
        loop_file: Option<LoopFileRef>,
    ) -> Result<TaskListConfig, Failure> {
        if input.check.is_some() {
            return Err(Failure::usage(
                "task_list mode takes each task's acceptance check, not a run-level check",
            )
            .with_hint(
                "give `[tasks.<id>] check = \"...\"` in loop.toml or --task-check ID=COMMAND",
            ));
        }
        let mut tasks = BTreeMap::new();
        for (id, oracle) in &input.tasks {
            task_id_problem(id).map_or(Ok(()), |why| {
                Err(Failure::usage(format!(
                    "[tasks.{}]: {why}",
                    crate::inert::inert(id)
                )))
            })?;
            if oracle.check.trim().is_empty() {
                return Err(Failure::usage(format!(
                    "[tasks.{}]: the check is empty",
                    crate::inert::inert(id)
                )));
            }
            let cfg = LoopConfig::resolve(oracle.applied_to(&input), workdir, loop_file.clone())
                .map_err(|f| {
                    let message = format!("[tasks.{}]: {}", crate::inert::inert(id), f.message);
                    Failure { message, ..f }
                })?;
            tasks.insert(
                id.clone(),
                TaskOraclePin {
                    check: cfg.check,
                    report: cfg.report,
                    targets: cfg.targets,
                    max_iterations: cfg.max_iterations,
                    check_timeout_ms: cfg.check_timeout_ms,
                    exec_timeout_ms: cfg.exec_timeout_ms,
                },
            );
        }
        let mut base = input;
        base.tasks = BTreeMap::new();
        base.mode = None;
        let template = LoopConfig::resolve_task_template(base, workdir, loop_file)?;
        if template.workspace != WorkspaceMode::Detached {
            return Err(Failure::workspace(
                "task_list mode needs a detached workspace: a git repository under native isolation",
            )
            .with_hint("in place no guard can judge a task's change, so no task could be accepted; run in a git repository without --isolation none"));
        }
        if template.include_uncommitted {
            return Err(Failure::usage(
                "task_list mode starts from HEAD's commit: --include-uncommitted does not apply",
            )
            .with_hint("commit the changes first"));
        }
        Ok(TaskListConfig { template, tasks })
    }

    /// The configuration of the run of task `assignment.id`, starting from `base_commit`.
    fn task_config(
        &self,
        pin: &TaskOraclePin,
        assignment: TaskAssignment,
        base_commit: &ObjectId,
    ) -> LoopConfig {
        let mut cfg = self.template.clone();
        cfg.check = pin.check.clone();
        cfg.report = pin.report.clone();
        cfg.targets = pin.targets.clone();
        cfg.max_iterations = pin.max_iterations;
        cfg.check_timeout_ms = pin.check_timeout_ms;
        cfg.exec_timeout_ms = pin.exec_timeout_ms;
        // The plan is the supervisor's: the agent changing it halts `blocked_path_modified`.
        cfg.protected.push(format!("{SMALL_DIR}/**"));
        cfg.task = Some(assignment);
        cfg.base_commit = Some(base_commit.to_hex());
        cfg
    }
}

/// Why `id` cannot be a task id here, if it cannot.
pub fn task_id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("a task id is empty".into());
    }
    if id.len() > MAX_TASK_ID_BYTES {
        return Some(format!(
            "task id {} is {} bytes long (at most {MAX_TASK_ID_BYTES})",
            crate::inert::inert(&id[..id.floor_char_boundary(40)]),
            id.len()
        ));
    }
    if id.chars().any(|c| c.is_control()) {
        return Some(format!(
            "task id {} holds a control character",
            crate::inert::inert(id)
        ));
    }
    None
}

/// sha256 over the files' names and contents, in name order (length-prefixed, so no two
/// different sets of files share a digest).
fn small_digest(files: &[SmallFile]) -> String {
    let mut h = Sha256::new();
    for f in files {
        h.update((f.name.len() as u64).to_be_bytes());
        h.update(f.name.as_bytes());
        h.update((f.bytes.len() as u64).to_be_bytes());
        h.update(&f.bytes);
    }
    hex::encode(h.finalize())
}

fn ws_failure(e: crate::workspace::WorkspaceError) -> Failure {
    Failure::workspace(e.to_string())
}

/// The plan as `rules::task_list` sees it, or why the plan cannot be worked on.
fn planned(tasks: &[crate::small::Task]) -> Result<Vec<PlannedTask>, String> {
    if tasks.len() > MAX_TASKS {
        return Err(format!(
            "the plan holds {} tasks (at most {MAX_TASKS})",
            tasks.len()
        ));
    }
    tasks
        .iter()
        .map(|t| {
            if let Some(why) = task_id_problem(&t.id) {
                return Err(why);
            }
            if t.dependencies.len() > MAX_DEPENDENCIES {
                return Err(format!(
                    "task {} has {} dependencies (at most {MAX_DEPENDENCIES})",
                    crate::inert::inert(&t.id),
                    t.dependencies.len()
                ));
            }
            if let Some(why) = t.dependencies.iter().find_map(|d| task_id_problem(d)) {
                return Err(why);
            }
            Ok(PlannedTask {
                id: t.id.clone(),
                dependencies: t.dependencies.clone(),
                status: t.status,
            })
        })
        .collect()
}

/// A task_list run this process drives.
struct TaskRun<'a> {
    statedir: &'a StateDir,
    operator: &'a OperatorKey,
    sink: &'a mut dyn EventSink,
    run: RunDir,
    _lock: RunLock,
    log: ReceiptLog,
    history: History,
    cfg: TaskListConfig,
    state: RunState,
    run_key: Option<RunKey>,
    /// The repository the plan branch lives in (the workdir's).
    repo: PathBuf,
    /// HEAD's commit when the run started (the plan branch's root).
    start_commit: ObjectId,
    /// The plan branch's commit: where the next step starts from.
    head: ObjectId,
    /// Whether this process recorded the plan it read (`task_plan`) yet.
    plan_recorded: bool,
    resumed: bool,
}

/// What a loaded plan leads to.
enum Read {
    Plan {
        tasks: Vec<crate::small::Task>,
        planned: Vec<PlannedTask>,
        record: TaskPlanRecord,
    },
    Invalid(String),
}

fn branch_of(run_id: &str) -> String {
    format!("loopexec/{run_id}")
}

/// Start a task_list run and drive it to its halt (or an interrupt).
pub fn start(
    statedir: &StateDir,
    run_id: RunId,
    cfg: TaskListConfig,
    operator: &OperatorKey,
    sink: &mut dyn EventSink,
) -> CmdResult<RunOutcome> {
    let repo = PathBuf::from(&cfg.template.workdir);
    let start_commit = check_start(&run_id, &cfg)?;
    let run = statedir.create_run(&run_id)?;
    let lock = run.lock()?;
    let log = run.create_receipt()?;
    let state = RunState {
        run_id: run_id.to_string(),
        state: RunPhase::Running,
        mode: rule::MODE_TASK_LIST.into(),
        isolation: cfg.template.isolation.as_str().into(),
        iteration: 0,
        max_iterations: 0,
        halt_reason: None,
        exit_code: None,
        receipt: run.receipt_rel(),
        receipt_events: 0,
        receipt_head: String::new(),
        pid: std::process::id(),
        updated_at: String::new(),
    };
    let mut active = TaskRun {
        statedir,
        operator,
        sink,
        run,
        _lock: lock,
        log,
        history: History::default(),
        cfg,
        state,
        run_key: None,
        repo,
        start_commit: start_commit.clone(),
        head: start_commit,
        plan_recorded: false,
        resumed: false,
    };
    active.append(Event::RunStart(RunStart {
        run_id: run_id.to_string(),
        mode: rule::MODE_TASK_LIST.into(),
        isolation: active.cfg.template.isolation.as_str().into(),
        zone: "task_list".into(),
        loopexec_version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        cgroup_scope: None,
        config: serde_json::to_value(&active.cfg).map_err(|e| Failure::internal(e.to_string()))?,
        schema: Some(SCHEMA_VERSION),
    }))?;
    active.endorse()?;
    active.save_state(true)?;
    active.drive()
}

/// Everything a task_list run must have before it is made (nothing is written when it fails):
/// a run id its tasks' runs can be named from, HEAD's commit (returned), no branch of the
/// run's name yet, a plan that reads and keeps every strict rule, a task table for tasks of the
/// plan only.
pub fn check_start(run_id: &RunId, cfg: &TaskListConfig) -> CmdResult<ObjectId> {
    let repo = PathBuf::from(&cfg.template.workdir);
    let git = crate::workspace::git::Git::new(&repo);
    let start_commit = git
        .resolve("HEAD^{commit}")
        .map_err(ws_failure)?
        .ok_or_else(|| Failure::workspace("the workdir's HEAD names no commit"))?;
    if run_id.as_str().len() + ".t1000".len() > crate::run_id::MAX_LEN {
        return Err(Failure::usage(format!(
            "run id {} is too long for task_list mode: its tasks' runs are named <run-id>.t<k> within {} characters",
            run_id.as_str(),
            crate::run_id::MAX_LEN
        )));
    }
    if plan_branch::branch_exists(&repo, &branch_of(run_id.as_str())).map_err(ws_failure)? {
        return Err(Failure::workspace(format!(
            "the branch {} already exists",
            branch_of(run_id.as_str())
        ))
        .with_hint("choose another --run-id"));
    }
    validate_at_start(&repo, &start_commit, cfg)?;
    Ok(start_commit)
}

/// Whether the receipt `history` folds is a task_list run's.
pub fn is_task_list(history: &History) -> bool {
    history
        .start
        .as_ref()
        .is_some_and(|s| s.mode == rule::MODE_TASK_LIST)
}

/// The pinned configuration of a task_list run, from its `run_start`.
pub fn pinned(history: &History) -> CmdResult<TaskListConfig> {
    let start = history
        .start
        .as_ref()
        .ok_or_else(|| Failure::workspace("the receipt has no run_start"))?;
    serde_json::from_value(start.config.clone()).map_err(|e| {
        Failure::workspace(format!(
            "the task_list run's pinned configuration does not read: {e}"
        ))
    })
}

/// Resume a paused, interrupted or crashed task_list run (`lifecycle::resume` hands it over
/// once it has read the receipt): a task run under way is resumed or, already sealed,
/// checkpointed; then the plan goes on.
#[allow(clippy::too_many_arguments)]
pub(super) fn resume(
    statedir: &StateDir,
    run_id: RunId,
    run: RunDir,
    lock: RunLock,
    log: ReceiptLog,
    history: History,
    previous_state: Option<String>,
    operator: &OperatorKey,
    sink: &mut dyn EventSink,
) -> CmdResult<RunOutcome> {
    let cfg = pinned(&history)?;
    let repo = PathBuf::from(&cfg.template.workdir);
    let recorded_commit = |raw: Option<&str>| raw.and_then(|c| ObjectId::from_hex(c.as_bytes()));
    let start_commit = recorded_commit(history.tasks.first.as_ref().map(|p| p.commit.as_str()))
        .ok_or_else(|| Failure::workspace("the task_list run recorded no plan: start a new run"))?;
    // Where the plan branch stands by the receipt: the last checkpoint's commit, else the last
    // task start's, else the start.
    let head = history
        .tasks
        .checkpoints
        .last()
        .and_then(|c| recorded_commit(c.commit.as_deref()))
        .into_iter()
        .chain(
            history
                .tasks
                .unfinished()
                .and_then(|s| recorded_commit(s.base_commit.as_deref())),
        )
        .last()
        .unwrap_or_else(|| start_commit.clone());
    let tasks_started = history.tasks.started.len() as u64;
    let state = RunState {
        run_id: run_id.to_string(),
        state: RunPhase::Running,
        mode: rule::MODE_TASK_LIST.into(),
        isolation: cfg.template.isolation.as_str().into(),
        iteration: tasks_started,
        max_iterations: 0,
        halt_reason: None,
        exit_code: None,
        receipt: run.receipt_rel(),
        receipt_events: 0,
        receipt_head: String::new(),
        pid: std::process::id(),
        updated_at: String::new(),
    };
    let mut active = TaskRun {
        statedir,
        operator,
        sink,
        run,
        _lock: lock,
        log,
        history,
        cfg,
        state,
        run_key: None,
        repo,
        start_commit,
        head,
        plan_recorded: false,
        resumed: true,
    };
    active.append(Event::RunResumed(RunResumed {
        run_id: run_id.to_string(),
        previous_state,
        last_iteration: tasks_started,
        next_iteration: tasks_started + 1,
        pid: std::process::id(),
        cgroup_scope: None,
    }))?;
    active.endorse()?;
    active.save_state(true)?;
    if let Some(unfinished) = active.history.tasks.unfinished().cloned() {
        if let Some(end) = active.finish_task(&unfinished)? {
            return Ok(end);
        }
    }
    active.drive()
}

impl TaskRun<'_> {
    fn append(&mut self, event: Event) -> CmdResult<()> {
        let recorded = self.log.append_event(&event).map_err(log_failure)?;
        self.history.record(&recorded);
        Ok(())
    }

    fn endorse(&mut self) -> CmdResult<()> {
        let run_key = RunKey::mint();
        let recorded = endorse_run_key(&mut self.log, &self.state.run_id, &run_key, self.operator)
            .map_err(log_failure)?;
        self.history.record(&recorded);
        self.run_key = Some(run_key);
        Ok(())
    }

    fn save_state(&mut self, publish: bool) -> CmdResult<()> {
        self.state.receipt_events = self.log.len();
        self.state.receipt_head = self.log.head().to_string();
        self.state.updated_at = crate::timestamp::now_rfc3339();
        self.run.write_state(&self.state)?;
        if publish {
            self.statedir.publish_latest(&self.state)?;
        }
        Ok(())
    }

    /// The `.small/` files the SMALL module left in the run's `plan/` (after a transition).
    fn materialised(&self, plan: &SafeDir) -> CmdResult<Vec<SmallFile>> {
        let dir = plan
            .subdir(SMALL_DIR)
            .map_err(|e| Failure::internal(format!("the plan's .small: {e}")))?;
        let mut names = dir
            .list()
            .map_err(|e| Failure::internal(format!("the plan's .small: {e}")))?;
        names.sort();
        names
            .into_iter()
            .map(|name| {
                let bytes = dir
                    .read(&name, plan_branch::MAX_FILE_BYTES)
                    .map_err(|e| Failure::internal(format!("the plan's .small: {e}")))?;
                Ok(SmallFile { name, bytes })
            })
            .collect()
    }

    /// Read, load and validate the plan at the branch's commit (into the run's `plan/`).
    fn read_plan(&self) -> CmdResult<(Read, SafeDir)> {
        let plan = self
            .run
            .dir()
            .subdir_or_create(PLAN_DIR)
            .map_err(|e| Failure::internal(format!("the plan directory: {e}")))?;
        let read = read_plan(&self.repo, &self.head, &plan)?;
        Ok((read, plan))
    }

    /// Commit the run's `plan/.small/` on top of `onto` and move the plan branch there.
    fn commit_plan(
        &mut self,
        plan: &SafeDir,
        onto: &ObjectId,
        message: &str,
    ) -> CmdResult<(ObjectId, ObjectId, Vec<SmallFile>)> {
        let files = self.materialised(plan)?;
        let index = self.run.path().join(PLAN_INDEX);
        let (commit, tree) =
            plan_branch::commit_small(&self.repo, onto, onto, &files, &index, message)
                .map_err(ws_failure)?;
        plan_branch::set_branch(
            &self.repo,
            &branch_of(&self.state.run_id),
            &commit,
            &format!("loopexec: task_list run {}", self.state.run_id),
        )
        .map_err(ws_failure)?;
        self.head = commit.clone();
        Ok((commit, tree, files))
    }

    /// Work through the plan until a halt (or an interrupt of a task's run).
    fn drive(&mut self) -> CmdResult<RunOutcome> {
        loop {
            if let Some(signal) = crate::interrupt::pending() {
                return self.interrupted(signal);
            }
            let (read, plan) = self.read_plan()?;
            let (tasks, planned, record) = match read {
                Read::Invalid(why) => return self.halt(HaltReason::InvariantFailed, why, false),
                Read::Plan {
                    tasks,
                    planned,
                    record,
                } => (tasks, planned, record),
            };
            self.state.max_iterations = planned.len() as u64;
            if !self.plan_recorded {
                self.append(Event::TaskPlan(record))?;
                self.plan_recorded = true;
            }
            let id = match rule::next(&planned) {
                Next::Task(id) => id,
                other => {
                    let (reason, detail) = rule::halt_of(&other)
                        .unwrap_or((HaltReason::InternalError, "no next task and no halt".into()));
                    return self.halt(reason, detail, true);
                }
            };
            let Some(pin) = self.cfg.tasks.get(&id).cloned() else {
                let detail = format!(
                    "task {} has no acceptance check: a task is completed only by its own check, never by the state of the plan; give `[tasks.{}] check = \"...\"` in loop.toml or --task-check {}=COMMAND",
                    crate::inert::inert(&id),
                    crate::inert::inert(&id),
                    crate::inert::inert(&id)
                );
                return self.halt(HaltReason::CheckInadequate, detail, true);
            };
            let Some(task) = tasks.iter().find(|t| t.id == id).cloned() else {
                return self.halt(
                    HaltReason::InternalError,
                    "the next task is not in the plan".into(),
                    false,
                );
            };
            let k = self.history.tasks.started.len() + 1;
            let child = RunId::parse(&format!("{}.t{k}", self.state.run_id))?;
            let now = time::OffsetDateTime::now_utc();
            if let Err(e) = crate::small::start_task(
                &plan,
                &id,
                &format!(
                    "loopexec task_list run {}: task run {} started",
                    self.state.run_id,
                    child.as_str()
                ),
                now,
            ) {
                return self.halt(
                    HaltReason::InvariantFailed,
                    format!("starting task {}: {e}", crate::inert::inert(&id)),
                    false,
                );
            }
            let head = self.head.clone();
            let (base, _, _) = self.commit_plan(
                &plan,
                &head,
                &format!("loopexec: task {} started", crate::inert::inert(&id)),
            )?;
            self.append(Event::TaskStarted(TaskStartedRecord {
                task: id.clone(),
                run_id: child.to_string(),
                base_commit: Some(base.to_hex()),
            }))?;
            self.state.iteration = k as u64;
            self.save_state(false)?;
            let assignment = TaskAssignment {
                parent_run: self.state.run_id.clone(),
                id: id.clone(),
                title: task.title.clone(),
                steps: task.steps.clone(),
                acceptance: task.acceptance.clone(),
            };
            let cfg = self.cfg.task_config(&pin, assignment, &base);
            let outcome = super::lifecycle::start(
                self.statedir,
                child.clone(),
                cfg,
                self.operator,
                false,
                &mut *self.sink,
            )?;
            if let Some(end) = self.after_task_run(&outcome.end)? {
                return Ok(end);
            }
            let started = self
                .history
                .tasks
                .started
                .last()
                .cloned()
                .ok_or_else(|| Failure::internal("the task start is not recorded"))?;
            if let Some(end) = self.finish_task(&started)? {
                return Ok(end);
            }
        }
    }

    /// A task run that stopped without a halt stops this run the same way (resumable).
    fn after_task_run(&mut self, end: &LoopEnd) -> CmdResult<Option<RunOutcome>> {
        match end {
            LoopEnd::Halted { .. } => Ok(None),
            LoopEnd::Interrupted { signal } => self.interrupted(*signal).map(Some),
            LoopEnd::Paused | LoopEnd::Gated { .. } => {
                self.state.state = RunPhase::Paused;
                self.save_state(true)?;
                Ok(Some(self.outcome(end.clone())))
            }
        }
    }

    /// Checkpoint the task `started` names from its run's sealed receipt (resuming the run
    /// first when it has not halted). `Some`: this run stops here (a halt or an interrupt).
    fn finish_task(&mut self, started: &TaskStartedRecord) -> CmdResult<Option<RunOutcome>> {
        let child = RunId::parse(&started.run_id)?;
        let child_dir = match self.statedir.open_run(&child) {
            Ok(dir) => dir,
            Err(_) => {
                // Killed after recording the start, before the task's run made its directory:
                // the task's run is started now, from the commit recorded.
                return self.restart_task_run(started);
            }
        };
        let (history, receipt_sha256) = read_task_run(&child_dir)?;
        if history.halt.is_none() || !child_dir.dir().exists(crate::receipt::seal::ENVELOPE_FILE) {
            let outcome = super::lifecycle::resume(
                self.statedir,
                child.clone(),
                self.operator,
                false,
                &mut *self.sink,
            )?;
            if let Some(end) = self.after_task_run(&outcome.end)? {
                return Ok(Some(end));
            }
            return self.finish_task(started);
        }
        let Some(halt) = history.halt.clone() else {
            return Err(Failure::internal("the task run's halt vanished"));
        };
        // Tests kill the supervisor here: the task's run sealed, its checkpoint not written.
        #[cfg(debug_assertions)]
        crate::test_pause::at(crate::test_pause::BEFORE_CHECKPOINT);
        let end = rule::task_end(halt.halt_reason);
        let outcome = match end {
            TaskEnd::Completed => TaskState::Completed,
            TaskEnd::Blocked | TaskEnd::HaltsTheLoop => TaskState::Blocked,
        };
        let base = started
            .base_commit
            .as_deref()
            .and_then(|c| ObjectId::from_hex(c.as_bytes()))
            .ok_or_else(|| Failure::workspace("the task start recorded no base commit"))?;
        let delivered = halt
            .delivery
            .as_ref()
            .and_then(|d| d.commit.as_deref())
            .and_then(|c| ObjectId::from_hex(c.as_bytes()));
        let onto = delivered.clone().unwrap_or_else(|| base.clone());
        // The checkpoint is written over the `.small/` the task started with (the task run
        // cannot have changed it: it is protected there).
        self.head = base;
        let (read, plan) = self.read_plan()?;
        if let Read::Invalid(why) = read {
            return self.halt(HaltReason::InvariantFailed, why, false).map(Some);
        }
        let last_check = history.last_exited_check();
        let evidence = crate::small::Evidence {
            command: self
                .cfg
                .tasks
                .get(&started.task)
                .map(|p| p.check.clone())
                .unwrap_or_default(),
            exit_code: last_check.and_then(|c| c.check_exit),
            failing: last_check
                .map(|c| c.failing_set.iter().flatten().take(50).cloned().collect())
                .unwrap_or_default(),
            tree_id: halt
                .delivery
                .as_ref()
                .and_then(|d| d.tree.clone())
                .unwrap_or_default(),
            summary: format!(
                "task run {} halted {}: {}",
                started.run_id,
                halt.halt_reason.as_str(),
                crate::inert::inert(&halt.detail)
            ),
        };
        let small_outcome = match outcome {
            TaskState::Completed => crate::small::Outcome::Completed,
            _ => crate::small::Outcome::Blocked,
        };
        if let Err(e) = crate::small::checkpoint(
            &plan,
            &started.task,
            small_outcome,
            &evidence,
            time::OffsetDateTime::now_utc(),
        ) {
            return self
                .halt(
                    HaltReason::InvariantFailed,
                    format!(
                        "checkpointing task {}: {e}",
                        crate::inert::inert(&started.task)
                    ),
                    false,
                )
                .map(Some);
        }
        self.head = onto.clone();
        let (commit, _, files) = self.commit_plan(
            &plan,
            &onto,
            &format!(
                "loopexec: task {} {}",
                crate::inert::inert(&started.task),
                outcome.as_str()
            ),
        )?;
        self.append(Event::TaskCheckpoint(TaskCheckpointRecord {
            task: started.task.clone(),
            run_id: started.run_id.clone(),
            outcome,
            run_halt: halt.halt_reason,
            run_exit_code: halt.exit_code,
            run_receipt_sha256: receipt_sha256,
            tree: halt.delivery.as_ref().and_then(|d| d.tree.clone()),
            commit: Some(commit.to_hex()),
            small_sha256: small_digest(&files),
        }))?;
        self.save_state(false)?;
        if end == TaskEnd::HaltsTheLoop {
            let detail = format!(
                "task {}'s run {} halted {}: {}",
                crate::inert::inert(&started.task),
                started.run_id,
                halt.halt_reason.as_str(),
                crate::inert::inert(&halt.detail)
            );
            return self.halt(halt.halt_reason, detail, true).map(Some);
        }
        Ok(None)
    }

    /// The task run of a recorded start that never made its run directory, started now.
    fn restart_task_run(&mut self, started: &TaskStartedRecord) -> CmdResult<Option<RunOutcome>> {
        let base = started
            .base_commit
            .as_deref()
            .and_then(|c| ObjectId::from_hex(c.as_bytes()))
            .ok_or_else(|| Failure::workspace("the task start recorded no base commit"))?;
        let pin =
            self.cfg.tasks.get(&started.task).cloned().ok_or_else(|| {
                Failure::workspace("the started task has no pinned acceptance check")
            })?;
        self.head = base.clone();
        let (read, _) = self.read_plan()?;
        let Read::Plan { tasks, .. } = read else {
            return self
                .halt(
                    HaltReason::InvariantFailed,
                    "the plan the task started from no longer reads".into(),
                    false,
                )
                .map(Some);
        };
        let task = tasks
            .iter()
            .find(|t| t.id == started.task)
            .cloned()
            .ok_or_else(|| Failure::workspace("the started task is not in its plan"))?;
        let assignment = TaskAssignment {
            parent_run: self.state.run_id.clone(),
            id: task.id.clone(),
            title: task.title,
            steps: task.steps,
            acceptance: task.acceptance,
        };
        let cfg = self.cfg.task_config(&pin, assignment, &base);
        let child = RunId::parse(&started.run_id)?;
        let outcome = super::lifecycle::start(
            self.statedir,
            child,
            cfg,
            self.operator,
            false,
            &mut *self.sink,
        )?;
        if let Some(end) = self.after_task_run(&outcome.end)? {
            return Ok(Some(end));
        }
        self.finish_task(started)
    }

    fn outcome(&self, end: LoopEnd) -> RunOutcome {
        RunOutcome {
            run_id: self.state.run_id.clone(),
            mode: rule::MODE_TASK_LIST,
            end,
            iteration: self.state.iteration,
            max_iterations: self
                .history
                .tasks
                .plan
                .as_ref()
                .map_or(0, |p| p.tasks.len() as u64),
            check_exit: None,
            failing_count: None,
            receipt: self.run.receipt_path(),
            state: self.state.state,
            isolation: self.state.isolation.clone(),
            resumed: self.resumed,
            finished_seal: false,
        }
    }

    fn interrupted(&mut self, signal: i32) -> CmdResult<RunOutcome> {
        self.append(Event::RunInterrupted {
            signal: crate::interrupt::signal_name(signal).to_string(),
            iteration: self.state.iteration,
        })?;
        self.state.state = RunPhase::Interrupted;
        self.save_state(true)?;
        Ok(self.outcome(LoopEnd::Interrupted { signal }))
    }

    /// Halt: the handoff written onto the plan branch (when the plan reads), `halt` appended
    /// with the branch as the delivery, the run sealed.
    fn halt(&mut self, reason: HaltReason, detail: String, handoff: bool) -> CmdResult<RunOutcome> {
        let mut detail = detail;
        if handoff {
            let (read, plan) = self.read_plan()?;
            if let Read::Plan { .. } = read {
                let summary = format!(
                    "loopexec task_list run {}: {}",
                    self.state.run_id,
                    reason.as_str()
                );
                match crate::small::write_handoff(&plan, &summary) {
                    Ok(()) => {
                        let head = self.head.clone();
                        self.commit_plan(
                            &plan,
                            &head,
                            &format!(
                                "loopexec: task_list run {} halted {}",
                                self.state.run_id,
                                reason.as_str()
                            ),
                        )?;
                    }
                    Err(e) => detail.push_str(&format!(" (the handoff was not written: {e})")),
                }
            }
        }
        let moved = self.head != self.start_commit;
        let tree = crate::workspace::git::Git::new(&self.repo)
            .resolve(&format!("{}^{{tree}}", self.head))
            .ok()
            .flatten();
        let delivery = DeliveryRecord {
            branch: moved.then(|| branch_of(&self.state.run_id)),
            duration_ms: None,
            commit: moved.then(|| self.head.to_hex()),
            tree: if moved {
                tree.as_ref().map(|t| t.to_hex())
            } else {
                None
            },
            parent: moved.then(|| self.start_commit.to_hex()),
            patch: None,
            reason: (!moved)
                .then(|| "the plan branch did not move: no task was started".to_string()),
            error: None,
        };
        self.append(Event::Halt(HaltRecord {
            halt_reason: reason,
            exit_code: reason.class().code(),
            iteration: self.state.iteration,
            detail: detail.clone(),
            delivery: Some(delivery),
        }))?;
        let run_key = self
            .run_key
            .take()
            .ok_or_else(|| Failure::internal("the run key was already used"))?;
        let subjects: Vec<serde_json::Value> = tree
            .filter(|_| moved)
            .map(|t| crate::receipt::statement::subject("end-state", "gitTree", &t.to_hex()))
            .into_iter()
            .collect();
        seal_run(self.run.dir(), run_key, subjects)
            .map_err(|e| Failure::internal(format!("sealing the receipt: {e}")))?;
        self.state.state = RunPhase::Halted;
        self.state.halt_reason = Some(reason.as_str().into());
        self.state.exit_code = Some(reason.class().code());
        self.save_state(true)?;
        Ok(self.outcome(LoopEnd::Halted { reason, detail }))
    }
}

/// `plan` (a directory the supervisor owns) with `.small/` made anew from `files`: the SMALL
/// module reads and writes there.
fn materialise(plan: &SafeDir, files: &[SmallFile]) -> CmdResult<()> {
    let small = plan.path().join(SMALL_DIR);
    if small.exists() {
        std::fs::remove_dir_all(&small)
            .map_err(|e| Failure::internal(format!("{}: {e}", small.display())))?;
    }
    if !files.is_empty() {
        let dir = plan
            .subdir_or_create(SMALL_DIR)
            .map_err(|e| Failure::internal(format!("{}: {e}", small.display())))?;
        for f in files {
            dir.write_atomic(&f.name, &f.bytes)
                .map_err(|e| Failure::internal(format!("{}: {e}", small.display())))?;
        }
    }
    Ok(())
}

/// Read the plan of `commit` into `plan`, load it and validate it strictly.
fn read_plan(repo: &Path, commit: &ObjectId, plan: &SafeDir) -> CmdResult<Read> {
    let files = match plan_branch::read_small(repo, commit) {
        Ok(files) => files,
        Err(e) => {
            materialise(plan, &[])?;
            return Ok(Read::Invalid(format!(
                "the plan's .small/ cannot be read: {e}"
            )));
        }
    };
    materialise(plan, &files)?;
    if files.is_empty() {
        return Ok(Read::Invalid(format!(
            "the commit {commit} holds no {SMALL_DIR}/: task_list mode works through a SMALL plan"
        )));
    }
    match crate::small::detect(plan) {
        Ok(crate::small::Detected::V1) => {}
        Ok(crate::small::Detected::V2) => {
            return Ok(Read::Invalid(
                "the plan is a SMALL v2 workspace (.small/profile.json): only SMALL v1.0.0 is supported"
                    .into(),
            ))
        }
        Ok(crate::small::Detected::Absent) => {
            return Ok(Read::Invalid(format!("no {SMALL_DIR}/ in the plan")))
        }
        Err(e) => return Ok(Read::Invalid(e.to_string())),
    }
    let ws = match crate::small::load(plan) {
        Ok(ws) => ws,
        Err(e) => return Ok(Read::Invalid(e.to_string())),
    };
    let violations = ws.violations();
    if !violations.is_empty() {
        let listed: Vec<String> = violations.iter().take(5).map(|v| v.to_string()).collect();
        return Ok(Read::Invalid(format!(
            "the plan breaks {} SMALL rule(s): {}{}",
            violations.len(),
            listed.join("; "),
            if violations.len() > 5 { "; ..." } else { "" }
        )));
    }
    let planned = match planned(ws.tasks()) {
        Ok(p) => p,
        Err(why) => return Ok(Read::Invalid(why)),
    };
    if let Some(problem) = rule::dependency_problem(&planned) {
        return Ok(Read::Invalid(problem));
    }
    let record = TaskPlanRecord {
        tasks: planned.clone(),
        replay_id: ws.replay_id(),
        small_sha256: small_digest(&files),
        commit: commit.to_hex(),
    };
    Ok(Read::Plan {
        tasks: ws.tasks().to_vec(),
        planned,
        record,
    })
}

/// The plan at `commit` checked before a run is made of it: a plan that does not read or breaks
/// a rule, or a task table naming no task of the plan, is refused (exit 20) and nothing is
/// written.
fn validate_at_start(repo: &Path, commit: &ObjectId, cfg: &TaskListConfig) -> CmdResult<()> {
    let tmp = tempfile::tempdir()
        .map_err(|e| Failure::internal(format!("a temporary directory: {e}")))?;
    let plan = SafeDir::open(tmp.path())
        .map_err(|e| Failure::internal(format!("a temporary directory: {e}")))?;
    match read_plan(repo, commit, &plan)? {
        Read::Invalid(why) => Err(Failure::new(crate::error::FailureCode::InvariantFailed, why)
            .with_hint("fix .small/ and commit it; `loopexec check` lists every violation with its file and key")),
        Read::Plan { planned, .. } => {
            let unknown: Vec<String> = cfg
                .tasks
                .keys()
                .filter(|id| !planned.iter().any(|t| &t.id == *id))
                .map(|id| crate::inert::inert(id).into_owned())
                .collect();
            match unknown.is_empty() {
                true => Ok(()),
                false => Err(Failure::invalid_input(format!(
                    "an acceptance check is given for {}, not a task of the plan",
                    unknown.join(", ")
                ))
                .with_hint("the [tasks.<id>] tables and --task-check ids name tasks of .small/plan.small.yml")),
            }
        }
    }
}

/// A task run's history (from its receipt, artifacts restored) and its receipt file's sha256.
fn read_task_run(run: &RunDir) -> CmdResult<(History, String)> {
    let bytes = run.receipt_bytes()?;
    let digest = hex::encode(Sha256::digest(&bytes));
    let (_, lines, _) = run.open_receipt_read()?;
    let (history, _) = crate::receipt::bounded::history_of(&lines, run.dir())
        .map_err(|e| Failure::workspace(format!("{}: {e}", run.receipt_path().display())))?;
    Ok((history, digest))
}
