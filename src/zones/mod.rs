//! Zones: where the agent command and the check command run.
//!
//! The engine only talks to the [`Zone`] trait, so the host backend (`--isolation none`), the native
//! sandbox and a container engine plug in without touching the loop. A zone runs one command line at
//! a time (through `/bin/sh -c`), captures its output into bounded artifacts and reports how it
//! ended. A zone backend must guarantee that when `run` returns, no process it started is left.

use std::path::PathBuf;
use std::time::Duration;

/// Which side of the loop a command belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The agent (`--exec`): untrusted, writes the workspace.
    Agent,
    /// The external check (`--check`): untrusted code too, but no network, hermetic environment.
    Check,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Check => "check",
        }
    }
}

/// One command for a zone to run.
#[derive(Debug, Clone)]
pub struct ZoneCommand {
    pub role: Role,
    /// The operator's command line, run as `/bin/sh -c <command_line>`.
    pub command_line: String,
    /// Working directory (the workspace, or the check's scratch copy).
    pub cwd: PathBuf,
    /// The complete environment of the command (nothing else is inherited).
    pub env: Vec<(String, String)>,
    /// Wall-clock limit; on expiry the whole process tree is killed.
    pub timeout: Option<Duration>,
}

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
