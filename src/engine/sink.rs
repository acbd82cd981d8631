//! What the engine tells its caller while a run goes on, as typed events (the runner/reporter
//! split of cargo-nextest): the engine formats no human text; the CLI renders these as progress
//! lines (or nothing under `--json`).

/// One thing worth reporting while the run goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopEvent<'a> {
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
