//! `state.json`: the small, atomically replaced summary of one run (and, at `.loopexec/state.json`,
//! of the latest run). The receipt is the source of truth; state files are a fast index into it.

use serde::{Deserialize, Serialize};

/// Largest state file accepted when reading.
pub const MAX_STATE_BYTES: u64 = 1024 * 1024;

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunPhase {
    /// A loopexec process is (or was, if it was killed) driving the run.
    Running,
    /// Stopped after `--once` without a halt; `run --resume <id>` continues it.
    Paused,
    /// Stopped by SIGINT/SIGTERM; `run --resume <id>` continues it.
    Interrupted,
    /// Stopped by the comprehension gate (more unread diffs than `--comprehension-every`): not
    /// a halt, never sealed; `loopexec ack` then `run --resume <id>` continues it.
    Gated,
    /// Halted with a computed reason; final.
    Halted,
}

impl RunPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            RunPhase::Running => "running",
            RunPhase::Paused => "paused",
            RunPhase::Interrupted => "interrupted",
            RunPhase::Gated => "gated",
            RunPhase::Halted => "halted",
        }
    }
}

/// Contents of `runs/<id>/state.json` and `.loopexec/state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunState {
    pub run_id: String,
    pub state: RunPhase,
    pub mode: String,
    pub isolation: String,
    /// The last iteration started (0 before the first).
    pub iteration: u64,
    pub max_iterations: u64,
    pub halt_reason: Option<String>,
    pub exit_code: Option<i32>,
    /// The receipt, relative to `.loopexec/`.
    pub receipt: String,
    /// Number of receipt events and hash of the last one when this state was written.
    pub receipt_events: u64,
    pub receipt_head: String,
    /// The loopexec process that wrote this state.
    pub pid: u32,
    pub updated_at: String,
}

impl RunState {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<RunState, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}
