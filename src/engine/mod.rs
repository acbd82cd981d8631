//! The loop engine: drives a `check_fixpoint` run and keeps its durable record.
//!
//! The stages, one concept per module, data flowing one way:
//! - [`lifecycle`]: start or resume a run (one active run either way), its lock, keys, state
//!   file and credential; halt (deliver, seal), pause, interrupt.
//! - [`budget`]: the run-total caps as given and pinned, enforced before and after the agent and at the end of each iteration.
//! - [`comprehension`]: the comprehension gate before each agent step and the ledger entry of each accepted iteration.
//! - [`iteration`]: one iteration's stages: agent, guards, check, acceptance.
//! - [`commands`]: a role's command built for its zone and run there.
//! - `confirm`: confirmation reruns of a green check before `success_condition_met`.
//! - [`baseline`]: the check run once on t0 before the first agent call (C0/F0/S0, its cache,
//!   the iteration-0 halt) and the guard of the collected and skipped sets against it.
//! - [`check`]: the one check runner (the loop's and `replay`'s), returning a typed
//!   [`check::CheckOutcome`].
//! - [`check_writes`]: a check that wrote to the tree it tests (its scratch layer against that
//!   tree) is a `metric_integrity_violation`.
//! - [`artefact_guard`]: a build artefact the agent put in the tree (bytecode, shared objects,
//!   `.node`, `.wasm`, ...) halts the step `metric_integrity_violation`.
//! - [`runner_pin`]: the toolchain and runner plugins the check is pinned to (`[runner]`).
//! - [`verdict`]: pass / fail / could-not-run (the 126/127 rule).
//! - [`guards`]: judges of the agent's step behind one trait (protected paths today).
//! - [`in_place`]: a green check in place (no guard can judge the step) is `human_required`.
//! - [`feedback_file`]: the agent's feedback file, written before each agent call from the
//!   history (never read back).
//! - [`judge`]: the advisory reviewer after a green check: its packet, answer and decision.
//! - [`holdout`]: the held-out check after an approved green: its directory (validated,
//!   digested), its zone command, its record and decision.
//! - [`decide`]: the pure halt decision over the receipt's history.
//! - [`targets`]: the tests the loop must fix, selected from t0, and the pre-existing failures.
//! - [`usage_meter`]: the agent's usage file (`LOOPEXEC_USAGE`) and the agent stage's `usage` record.
//! - [`task_list`]: the task_list run: the SMALL plan task by task, each task its own
//!   `check_fixpoint` run, checkpointed on the run's plan branch.
//! - [`seats`]: the mode and the kinds of guard the coming features add.
//! - [`sink`]: typed progress events for the caller to render.
//! - [`replay`]: re-running a halted run's last check on its end state.
//! - [`sentinel`]: the sentinel run before a green counts (the check must be able to fail, and
//!   must run what it reports).
//! - [`zone_setup`]: the pinned configuration made into the zones' setup, once per run.
//! - [`probe_run`]: one run of a probe (`probe-check`, `doctor`) in its own process, its check run
//!   by [`check`] in an exec zone with the run's perturbation applied.
//!
//! Every event is appended (fsync'd) to the hash-chained receipt before the next step starts, and
//! recorded into the run's [`History`](crate::receipt::history::History); `state.json` is
//! replaced atomically when the run starts, resumes and stops (while it runs, the receipt is the
//! live record: `status` reads the current iteration from it). A run stops in one of three ways:
//! a computed halt (final), a pause after `--once`, or an operator interrupt (SIGINT/SIGTERM).
//! Paused, interrupted and crashed runs continue with [`resume`].

pub mod allow_change;
pub mod analysis_guards;
pub mod artefact_guard;
pub mod baseline;
pub mod budget;
pub mod canary;
pub mod check;
pub mod check_writes;
pub mod commands;
pub mod comprehension;
pub mod config;
mod confirm;
pub mod coverage_guard;
pub mod credentials;
pub mod detached;
pub mod excerpts;
pub mod feedback_file;
pub mod guards;
pub mod heartbeat;
pub mod holdout;
pub mod in_place;
pub mod inactive_guards;
mod iteration;
pub mod judge;
pub mod lifecycle;
pub mod loopfile;
pub mod probe_run;
pub mod reference;
pub mod replay;
pub mod revert;
pub mod runner_pin;
pub mod score;
mod seal_window;
pub mod seats;
pub mod self_test;
pub mod sentinel;
pub mod shared_dir;
pub mod sink;
pub mod targets;
pub mod task_list;
pub mod usage_meter;
pub mod zone_setup;

pub use commands::operator_env;
pub use confirm::{replay_sample, FreeSample};
pub use lifecycle::{pinned_config, resume, start, start_after_gates};

use crate::halt::HaltReason;
use crate::receipt::state::RunPhase;
use std::path::PathBuf;

/// How a call to the engine ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopEnd {
    /// A computed halt; the run is final.
    Halted { reason: HaltReason, detail: String },
    /// `--once` finished an iteration without a halt; resumable.
    Paused,
    /// Stopped by SIGINT/SIGTERM; resumable.
    Interrupted { signal: i32 },
    /// Stopped by the comprehension gate (`comprehension_debt_exceeded`, exit 19): resumable,
    /// not sealed; an ack by a pinned reviewer then `run --resume` continues it.
    Gated { reason: HaltReason, detail: String },
}

/// What the CLI reports about a run after the engine returns.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run_id: String,
    /// `check_fixpoint` or `task_list` (`run_start.mode`).
    pub mode: &'static str,
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
    /// This call only finished the seal of a halt recorded by a supervisor that died before
    /// sealing (`run --resume`; `seal_window`).
    pub finished_seal: bool,
}
