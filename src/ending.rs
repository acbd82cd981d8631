//! How a command that a zone ran ended: the one type both the zones (which observe it) and the
//! receipt (which records it) speak, so neither has to import the other for it.

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    /// Exited with this code.
    Exited { code: i32 },
    /// Killed by this signal (not by us).
    Signaled { signal: i32 },
    /// Killed by us when its timeout expired.
    TimedOut { after_ms: u64 },
    /// Could not be started at all.
    FailedToStart { reason: String },
    /// Interrupted because loopexec itself was asked to stop (SIGINT/SIGTERM).
    Interrupted { signal: i32 },
}

impl Ending {
    /// The exit code when the command exited normally.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            Ending::Exited { code } => Some(*code),
            _ => None,
        }
    }
}
