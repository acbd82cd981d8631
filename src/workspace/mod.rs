//! The detached workspace of a run, from the operator's repository to the delivered branch.
//!
//! One concept per file, in the order a run uses them:
//! - [`baseline`]: the t0 tree of the operator's repository, materialised with git plumbing only
//!   (no hook, filter, textconv or fsmonitor runs) and cached read-only per tree id under
//!   `.loopexec/baselines/<key>/`.
//! - [`overlay`]: the per-run [`Workspace`]: an overlay (mounted inside the zone) whose lower layer
//!   is the baseline and whose upper and work directories live in the run directory. Creating one
//!   costs two `mkdir`s, whatever the repository's size.
//! - [`snapshot`]: the merged tree after an agent step (baseline manifest + the upper layer's
//!   files, whiteouts and opaque directories) and its git tree id.
//! - [`ignore_rules`]: what git would not commit (t0's ignore rules, caches), left out of the tree.
//! - [`artefact`]: build artefacts recognised by name and content (bytecode, shared objects, ...).
//! - [`protected`]: the protected path patterns and the protected paths an agent step changed.
//! - [`command_files`]: the t0 files the check and the operator's mutator run (protected too).
//! - [`check_layers`]: the overlay of the exec zone's throwaway copy, with protected paths from t0.
//! - [`agent_repo`]: the agent's own git repository whose only commit is t0 (`agent_git = "t0"`).
//! - [`deliver`]: the branch `loopexec/<run-id>` and the patch file, written with plumbing only.
//!
//! Support: [`git`] (the hardened git invocation), [`tree_path`] (which paths a tree may hold),
//! [`object_id`] (git object hashing), [`manifest`] (a flat tree listing), [`fsat`] (symlink-proof
//! descriptor-relative file operations, [`fsat::DirStack`] the bounded-descriptor walk), [`bounds`]
//! (the limits and time bound of a post-agent phase).

pub mod agent_repo;
pub mod artefact;
pub mod baseline;
pub mod bounds;
pub mod check_layers;
pub mod command_files;
pub mod deliver;
pub mod fsat;
pub mod git;
pub mod ignore_rules;
pub mod manifest;
pub mod object_id;
pub mod overlay;
pub mod plan_branch;
pub mod protected;
pub mod snapshot;
pub mod tree_path;

pub use baseline::{Baseline, BaselineOptions};
pub use bounds::Bounds;
pub use check_layers::{check_layers, replay_layers, CheckLayers, FrozenLayer};
pub use deliver::{deliver, Delivery};
pub use ignore_rules::{IgnoreRules, LeftOut};
pub use manifest::{Entry, EntryKind, Manifest};
pub use object_id::ObjectId;
pub use overlay::Workspace;
pub use protected::{protected_changes, ProtectedChange, ProtectedPaths};
pub use snapshot::{Artefact, ChangeKind, Snapshot};

use crate::error::Failure;
use crate::safefs::SafeFsError;
use std::path::PathBuf;

/// Why a workspace operation failed; every variant names what it was working on.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("{repo}: not a git repository with a commit at HEAD ({detail})")]
    NoCommit { repo: PathBuf, detail: String },
    #[error("`git {command}` failed in {repo}: {detail}")]
    Git {
        repo: PathBuf,
        command: String,
        detail: String,
    },
    #[error("could not run git: {0}")]
    GitSpawn(std::io::Error),
    #[error("unexpected output from `git {command}`: {detail}")]
    GitOutput { command: String, detail: String },
    #[error("tree entry {path:?} refused: {reason}")]
    UnsafePath { path: String, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Fs(#[from] SafeFsError),
    #[error("protected path pattern {pattern:?}: {detail}")]
    Pattern { pattern: String, detail: String },
    #[error("branch {0} already exists in the operator's repository; loopexec never overwrites a branch")]
    BranchExists(String),
    #[error("{what} changed while loopexec was reading it (expected {expected}, found {found})")]
    Changed {
        what: String,
        expected: String,
        found: String,
    },
    #[error("cached baseline {0} is damaged: {1}")]
    DamagedCache(PathBuf, String),
    /// The agent's workspace holds more than the policy's `[workspace]` table allows.
    #[error("the workspace exceeds workspace.{limit} = {allowed} at {path:?}")]
    Limit {
        limit: &'static str,
        allowed: u64,
        path: String,
    },
    /// A name git resolves to `.git`, `.gitmodules` or `.gitattributes` on HFS+ or NTFS.
    #[error("{path:?} is {alias} to git on HFS+ or NTFS (core.protectHFS/protectNTFS); loopexec never delivers it")]
    GitAlias { path: String, alias: &'static str },
    /// An upper-layer entry owned by another uid than the zone's: another local user wrote it
    /// (through a directory the agent left writable to others); it is never delivered.
    #[error("{path:?} belongs to uid {uid}, not to the zone's uid {zone_uid}: another local user wrote it")]
    ForeignOwner {
        path: String,
        uid: u32,
        zone_uid: u32,
    },
    /// A post-agent phase ran past its time bound.
    #[error("the {phase} took longer than workspace.{key} = {seconds} s")]
    Timeout {
        phase: &'static str,
        key: &'static str,
        seconds: u64,
    },
    /// t0's protected paths need more read-only holds in the check's zone than it takes.
    #[error(
        "t0's protected paths need {holds} read-only holds in the check's zone ({} mounts with the directories pinned above them, {bytes} bytes of paths in the zone's plan), more than it takes ({max_mounts} mounts, {max_bytes} bytes); no protected path is left writable, so the run cannot start: protect whole directories (`--protect DIR/` or `protected` in loop.toml, one hold each) rather than many files in them",
        holds + pinned
    )]
    TooManyHolds {
        holds: usize,
        pinned: usize,
        bytes: usize,
        max_mounts: usize,
        max_bytes: usize,
    },
    /// The operator interrupted a post-agent phase (SIGINT/SIGTERM); the run stays resumable.
    #[error("the {phase} was interrupted by the operator")]
    Interrupted { phase: &'static str, signal: i32 },
}

impl WorkspaceError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        WorkspaceError::Io {
            path: path.into(),
            source,
        }
    }
    pub(crate) fn unsafe_path(path: &[u8], reason: impl Into<String>) -> Self {
        WorkspaceError::UnsafePath {
            path: String::from_utf8_lossy(path).into_owned(),
            reason: reason.into(),
        }
    }
}

impl From<WorkspaceError> for Failure {
    fn from(e: WorkspaceError) -> Failure {
        match &e {
            WorkspaceError::Pattern { .. } => Failure::invalid_input(e.to_string()),
            WorkspaceError::NoCommit { .. } => Failure::workspace(e.to_string())
                .with_hint("run loopexec inside a git repository with at least one commit"),
            WorkspaceError::BranchExists(b) => Failure::workspace(e.to_string()).with_hint(
                format!("delete or rename {b} first (`git branch -m {b} {b}-old`)"),
            ),
            _ => Failure::workspace(e.to_string()),
        }
    }
}

pub type WsResult<T> = Result<T, WorkspaceError>;
