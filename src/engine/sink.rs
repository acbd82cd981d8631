//! What the engine tells its caller while a run goes on, as typed events (the runner/reporter
//! split of cargo-nextest): the engine formats no human text; the CLI renders these as progress
//! (a live view on a terminal, plain lines otherwise, nothing under `--json` or `--quiet`).

/// A stage of the loop the supervisor is in (the heartbeat's `phase` names them the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The check on t0 before the first agent call (iteration 0).
    Baseline,
    /// The check on the known-feasible reference (iteration 0).
    Reference,
    Agent,
    /// The agent's tree snapshotted and judged by the guards that read it.
    Snapshot,
    /// The guards after the check.
    Guards,
    Check,
    /// The reruns of a green check.
    Confirmation,
    Holdout,
    Sentinel,
    Judge,
    /// The mutation canary on the final green.
    Canary,
    /// The halt recorded and the receipt sealed.
    Sealing,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Baseline => "baseline",
            Phase::Reference => "reference",
            Phase::Agent => "agent",
            Phase::Snapshot => "snapshot",
            Phase::Guards => "guards",
            Phase::Check => "check",
            Phase::Confirmation => "confirmation",
            Phase::Holdout => "holdout",
            Phase::Sentinel => "sentinel",
            Phase::Judge => "judge",
            Phase::Canary => "canary",
            Phase::Sealing => "sealing",
        }
    }
}

/// One thing worth reporting while the run goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopEvent<'a> {
    /// The supervisor entered `phase` of `iteration` (0: before the first agent call).
    PhaseStarted { phase: Phase, iteration: u64 },
    /// `done` of `total` units of the current phase are finished (confirmation reruns, mutants).
    Progress {
        phase: Phase,
        iteration: u64,
        done: u64,
        total: u64,
    },
    /// The t0 baseline check exited; `failing`: its failing set's size when a report named it.
    BaselineChecked {
        check_exit: Option<i32>,
        failing: Option<u64>,
    },
    /// What the run has spent so far, after a stage's usage was recorded (metered runs only).
    Spent {
        usd_micros: u64,
        unknown_money: u64,
        tokens: u64,
    },
    /// The run's egress through the proxy so far, after an agent step that used it.
    Egress { allowed: u64, denied: u64 },
    /// The run halts before its first agent ran (e.g. no credential could be minted).
    HaltingBeforeIterations { detail: &'a str },
    /// The run halts on what the agent did (its ending, a guard's objection), before any check.
    HaltingAfterAgent { iteration: u64, detail: &'a str },
    /// An iteration's check exited.
    Checked {
        iteration: u64,
        exec_ms: u64,
        check_exit: i32,
        check_ms: u64,
        failing: Option<u64>,
    },
}

/// Where the engine sends its [`LoopEvent`]s.
pub trait EventSink {
    fn event(&mut self, event: &LoopEvent<'_>);
}

/// A sink that drops everything.
pub struct Silent;

impl EventSink for Silent {
    fn event(&mut self, _event: &LoopEvent<'_>) {}
}
