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
    /// The mode a receipt names (`run_start.mode`), the inverse of [`Mode::as_str`].
    pub fn of_name(name: &str) -> Option<Mode> {
        [Mode::CheckFixpoint]
            .into_iter()
            .find(|m| m.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::CheckFixpoint => "check_fixpoint",
        }
    }
}
