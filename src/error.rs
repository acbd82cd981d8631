//! Typed failures at the command boundary: what went wrong, which exit class it belongs to, and a
//! stable machine-readable code.
//!
//! A *failure* is not a halt. A halt is a computed outcome of a loop (see `halt.rs`); a failure is
//! bad usage, unreadable state, refused input or an I/O error. Both end up as one JSON object under
//! `--json`, but only failures write error text to stderr in human mode.

use crate::halt::{ExitClass, HaltReason};
use serde::Serialize;

/// One entry of the `errors` array of the JSON contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorEntry {
    /// Stable short code, e.g. `usage`, `workspace_invalid`, `io`.
    pub code: String,
    /// Human sentence naming the problem.
    pub message: String,
    /// How to fix it, when we know.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// A failure of a command, carrying its exit class.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub class: ExitClass,
    pub code: String,
    pub message: String,
    pub hint: Option<String>,
}

impl Failure {
    pub fn new(class: ExitClass, code: impl Into<String>, message: impl Into<String>) -> Self {
        Failure { class, code: code.into(), message: message.into(), hint: None }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Bad flag values or a malformed command line (exit 20, like `invariant_failed`).
    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(ExitClass::Invariant, "usage", message)
    }

    /// A malformed input file (loop file, policy, report) named by the caller (exit 20).
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Failure::new(ExitClass::Invariant, "invalid_input", message)
    }

    /// Unusable state dir, planted symlink, missing run (exit 30).
    pub fn workspace(message: impl Into<String>) -> Self {
        Failure::new(ExitClass::Workspace, HaltReason::WorkspaceInvalid.as_str(), message)
    }

    /// A protection the policy needs is missing on this host (exit 30).
    pub fn isolation(message: impl Into<String>) -> Self {
        Failure::new(ExitClass::Workspace, HaltReason::IsolationUnsatisfiable.as_str(), message)
    }

    /// Anything we did not expect (exit 50).
    pub fn internal(message: impl Into<String>) -> Self {
        Failure::new(ExitClass::Internal, "internal_error", message)
    }

    /// An I/O error on a named path (exit 30: the workspace or state is not usable).
    pub fn io(path: &std::path::Path, err: &std::io::Error) -> Self {
        Failure::new(ExitClass::Workspace, "io", format!("{}: {err}", path.display()))
    }

    pub fn entry(&self) -> ErrorEntry {
        ErrorEntry { code: self.code.clone(), message: self.message.clone(), hint: self.hint.clone() }
    }
}

pub type CmdResult<T> = Result<T, Failure>;
