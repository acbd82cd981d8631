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

/// Every code a failure can carry: the one table of failure codes and their exit classes.
///
/// The string of a code (`errors[].code` in JSON) and the number of its class never change within
/// a major version (SPEC.md §1 and §2), and a code has exactly one class whatever the command.
/// Four codes share their string and class with a halt reason (`workspace_invalid`,
/// `isolation_unsatisfiable`, `invariant_failed`, `internal_error`): before a run exists they are refusals, once it
/// exists the engine halts with the reason of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// Bad flag values or a malformed command line.
    Usage,
    /// A malformed input file (loop file, policy, key file) named by the caller.
    InvalidInput,
    /// `run --resume` of a run that already halted (a halted run is final).
    RunAlreadyHalted,
    /// Unusable state dir, planted symlink, missing run, receipt that does not verify.
    WorkspaceInvalid,
    /// A protection the policy needs is missing on this host, or a zone cannot be set up.
    IsolationUnsatisfiable,
    /// An I/O error on a named path.
    Io,
    /// `replay` of a run that cannot be replayed.
    NotReplayable,
    /// `reexecute` of a run that cannot be re-executed.
    NotReexecutable,
    /// `attest` of a run that does not verify against the operator's key.
    NotVerified,
    /// `sandbox`: the command ran longer than the policy's wall clock and was killed.
    WallClockExceeded,
    /// `sandbox`: the command could not be started inside the zone.
    SpawnFailed,
    /// `escalate`: the escalation could not be delivered (after its retries).
    DeliveryFailed,
    /// A SMALL workspace (`.small/`) that breaks a strict rule, does not parse, is v2, or a
    /// transition that would leave it invalid (shares its string and class with the halt reason).
    InvariantFailed,
    /// Anything we did not expect (a bug).
    InternalError,
}

impl FailureCode {
    /// Every code, in the order of the table above (used by the contract tests).
    pub const ALL: [FailureCode; 14] = [
        FailureCode::Usage,
        FailureCode::InvalidInput,
        FailureCode::RunAlreadyHalted,
        FailureCode::WorkspaceInvalid,
        FailureCode::IsolationUnsatisfiable,
        FailureCode::Io,
        FailureCode::NotReplayable,
        FailureCode::NotReexecutable,
        FailureCode::NotVerified,
        FailureCode::WallClockExceeded,
        FailureCode::SpawnFailed,
        FailureCode::DeliveryFailed,
        FailureCode::InvariantFailed,
        FailureCode::InternalError,
    ];

    /// The exit class, i.e. the process exit code, of a failure with this code.
    pub const fn class(self) -> ExitClass {
        use FailureCode::*;
        match self {
            Usage | InvalidInput | RunAlreadyHalted | InvariantFailed => ExitClass::Invariant,
            WorkspaceInvalid | IsolationUnsatisfiable | Io | NotReplayable | NotReexecutable => {
                ExitClass::Workspace
            }
            NotVerified => ExitClass::Integrity,
            WallClockExceeded => ExitClass::Budget,
            SpawnFailed | DeliveryFailed => ExitClass::Execution,
            InternalError => ExitClass::Internal,
        }
    }

    /// The contract string of this code, e.g. `invalid_input`.
    pub const fn as_str(self) -> &'static str {
        use FailureCode::*;
        match self {
            Usage => "usage",
            InvalidInput => "invalid_input",
            RunAlreadyHalted => "run_already_halted",
            WorkspaceInvalid => HaltReason::WorkspaceInvalid.as_str(),
            IsolationUnsatisfiable => HaltReason::IsolationUnsatisfiable.as_str(),
            Io => "io",
            NotReplayable => "not_replayable",
            NotReexecutable => "not_reexecutable",
            NotVerified => "not_verified",
            WallClockExceeded => "wall_clock_exceeded",
            SpawnFailed => "spawn_failed",
            DeliveryFailed => "delivery_failed",
            InvariantFailed => HaltReason::InvariantFailed.as_str(),
            InternalError => HaltReason::InternalError.as_str(),
        }
    }
}

impl std::fmt::Display for FailureCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure of a command: its code (which fixes its exit class), a sentence and a hint.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: FailureCode,
    pub message: String,
    pub hint: Option<String>,
}

impl Failure {
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            hint: None,
        }
    }

    /// The exit class of this failure (its code's).
    pub const fn class(&self) -> ExitClass {
        self.code.class()
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Bad flag values or a malformed command line (exit 20, like `invariant_failed`).
    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(FailureCode::Usage, message)
    }

    /// A malformed input file (loop file, policy, report) named by the caller (exit 20).
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Failure::new(FailureCode::InvalidInput, message)
    }

    /// Unusable state dir, planted symlink, missing run (exit 30).
    pub fn workspace(message: impl Into<String>) -> Self {
        Failure::new(FailureCode::WorkspaceInvalid, message)
    }

    /// A protection the policy needs is missing on this host (exit 30).
    pub fn isolation(message: impl Into<String>) -> Self {
        Failure::new(FailureCode::IsolationUnsatisfiable, message)
    }

    /// Anything we did not expect (exit 50).
    pub fn internal(message: impl Into<String>) -> Self {
        Failure::new(FailureCode::InternalError, message)
    }

    /// An I/O error on a named path (exit 30: the workspace or state is not usable).
    pub fn io(path: &std::path::Path, err: &std::io::Error) -> Self {
        Failure::new(FailureCode::Io, format!("{}: {err}", path.display()))
    }

    pub fn entry(&self) -> ErrorEntry {
        ErrorEntry {
            code: self.code.as_str().to_string(),
            message: self.message.clone(),
            hint: self.hint.clone(),
        }
    }
}

/// The one mapping of a sandbox error to a command failure (`loopexec sandbox`, and the zones'
/// errors that carry a sandbox error's cause).
impl From<sandbox::SandboxError> for Failure {
    fn from(e: sandbox::SandboxError) -> Failure {
        use sandbox::SandboxError;
        match e {
            SandboxError::Unsatisfiable { layer, cause, fix } => {
                Failure::isolation(format!("isolation layer {} unavailable: {cause}", layer.as_str())).with_hint(fix)
            }
            e @ SandboxError::ProtectedSymlink { .. } => {
                Failure::isolation(e.to_string()).with_hint("replace the symlink with the real directory or file, or remove it")
            }
            e @ SandboxError::TimeNamespaceUnsupported { .. } => {
                Failure::isolation(e.to_string()).with_hint("run on Linux >= 5.6 built with CONFIG_TIME_NS, or leave out the clock offset (probe-check without the clock dimension)")
            }
            SandboxError::Policy(p) => Failure::from(p),
            SandboxError::Spec(m) => Failure::usage(m),
            SandboxError::Spawn(m) => Failure::new(FailureCode::SpawnFailed, m),
            e @ SandboxError::Io { .. } => Failure::new(FailureCode::Io, e.to_string()),
        }
    }
}

/// A policy file that does not parse or validate is malformed input (exit 20, with its line).
impl From<sandbox::PolicyError> for Failure {
    fn from(e: sandbox::PolicyError) -> Failure {
        Failure::invalid_input(e.to_string())
    }
}

/// The one mapping of a SMALL workspace error to a failure: `invariant_failed` (exit 20), except
/// an I/O error on a named path, which is `io` (exit 30) like every other.
impl From<crate::small::SmallError> for Failure {
    fn from(e: crate::small::SmallError) -> Failure {
        use crate::small::SmallError;
        match e {
            SmallError::Fs(crate::safefs::SafeFsError::Io { path, source }) => {
                Failure::io(&path, &source)
            }
            e @ SmallError::V2Unsupported { .. } => {
                Failure::new(FailureCode::InvariantFailed, e.to_string())
                    .with_hint("loopexec reads SMALL v1.0.0 workspaces only")
            }
            e => Failure::new(FailureCode::InvariantFailed, e.to_string()),
        }
    }
}

pub type CmdResult<T> = Result<T, Failure>;

/// Map a safe-fs error to a command failure: planted links and missing pieces are
/// `workspace_invalid` (exit 30).
pub fn fs_failure(err: crate::safefs::SafeFsError) -> Failure {
    match &err {
        crate::safefs::SafeFsError::Symlink { path } => Failure::workspace(format!(
            "{}: is a symlink or leaves the state directory; refusing to follow it",
            path.display()
        ))
        .with_hint("remove the planted link; loopexec never follows links under .loopexec/"),
        crate::safefs::SafeFsError::TooLarge { .. }
        | crate::safefs::SafeFsError::NotRegular { .. } => Failure::workspace(err.to_string()),
        crate::safefs::SafeFsError::Io { path, source } => Failure::io(path, source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_code_has_its_contract_class() {
        let expect = [
            (FailureCode::Usage, 20),
            (FailureCode::InvalidInput, 20),
            (FailureCode::RunAlreadyHalted, 20),
            (FailureCode::WorkspaceInvalid, 30),
            (FailureCode::IsolationUnsatisfiable, 30),
            (FailureCode::Io, 30),
            (FailureCode::NotReplayable, 30),
            (FailureCode::NotReexecutable, 30),
            (FailureCode::NotVerified, 13),
            (FailureCode::WallClockExceeded, 18),
            (FailureCode::SpawnFailed, 40),
            (FailureCode::DeliveryFailed, 40),
            (FailureCode::InvariantFailed, 20),
            (FailureCode::InternalError, 50),
        ];
        assert_eq!(expect.len(), FailureCode::ALL.len());
        for (code, exit) in expect {
            assert_eq!(code.class().code(), exit, "{code}");
            assert_eq!(Failure::new(code, "m").class().code(), exit, "{code}");
        }
    }

    #[test]
    fn every_failure_code_serialises_to_its_contract_string() {
        let expect = [
            "usage",
            "invalid_input",
            "run_already_halted",
            "workspace_invalid",
            "isolation_unsatisfiable",
            "io",
            "not_replayable",
            "not_reexecutable",
            "not_verified",
            "wall_clock_exceeded",
            "spawn_failed",
            "delivery_failed",
            "invariant_failed",
            "internal_error",
        ];
        for (code, name) in FailureCode::ALL.into_iter().zip(expect) {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::String(name.into())
            );
            assert_eq!(code.as_str(), name);
            assert_eq!(Failure::new(code, "m").entry().code, name);
        }
    }

    #[test]
    fn a_code_named_like_a_halt_reason_exits_like_it() {
        for code in FailureCode::ALL {
            if let Some(reason) = HaltReason::ALL.iter().find(|r| r.as_str() == code.as_str()) {
                assert_eq!(code.class(), reason.class(), "{code}");
            }
        }
    }

    #[test]
    fn a_sandbox_io_error_exits_like_every_other_io_error() {
        let e =
            sandbox::SandboxError::io("cgroup", std::io::Error::from_raw_os_error(libc::EACCES));
        let failure = Failure::from(e);
        assert_eq!(failure.code, FailureCode::Io);
        assert_eq!(
            failure.class(),
            Failure::io(
                std::path::Path::new("/x"),
                &std::io::Error::from_raw_os_error(libc::EACCES)
            )
            .class()
        );
    }
}
