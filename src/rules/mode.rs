//! The loop's mode: what it drives towards. The decision routes through it.

use serde::Serialize;

/// What the loop drives towards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Run the agent, then the check, until the check passes or a halt stops the run.
    CheckFixpoint,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::CheckFixpoint => "check_fixpoint",
        }
    }
}
