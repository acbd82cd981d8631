//! SMALL workspaces (`.small/`, SMALL spec 1.0.0): detecting one, loading it through the
//! symlink-proof `SafeDir`, its strict validation, the next task, its replayId and the transitions
//! loopexec writes (start a task, checkpoint it, the handoff, the sticky replayId). The format is
//! described in docs/task-list.md ("SMALL format") and SPEC.md ("SMALL workspaces").
//!
//! One concept per file: `yaml` (positioned parse and emit), `model` (typed tasks and the next
//! task), `rules` (strict validation), `replay` (replayId), `write` (atomic transitions).

mod model;
mod replay;
mod rules;
#[cfg(test)]
mod tests;
mod write;
pub mod yaml;

pub use model::{next_of, Next, PlannedTask, Status, Task};
pub use write::{checkpoint, ensure_replay_id, reconcile, recover, start_task, write_handoff};

use crate::safefs::{SafeDir, SafeFsError};
use yaml::Node;

/// The directory of a SMALL workspace, beneath the workdir.
pub const SMALL_DIR: &str = ".small";
/// Its presence marks a SMALL v2 workspace (not supported).
pub const V2_MARKER: &str = "profile.json";
pub const INTENT: &str = "intent.small.yml";
pub const CONSTRAINTS: &str = "constraints.small.yml";
pub const PLAN: &str = "plan.small.yml";
pub const PROGRESS: &str = "progress.small.yml";
pub const HANDOFF: &str = "handoff.small.yml";
pub const WORKSPACE: &str = "workspace.small.yml";
/// Every file a v1 workspace may hold, in the order they are validated.
pub const FILES: [&str; 6] = [INTENT, CONSTRAINTS, PLAN, PROGRESS, HANDOFF, WORKSPACE];
/// The files that must exist (workspace.small.yml is created by the first transition).
pub const REQUIRED: [&str; 5] = [INTENT, CONSTRAINTS, PLAN, PROGRESS, HANDOFF];
/// Largest file read from `.small/`.
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// The only SMALL version read and written.
pub const SMALL_VERSION: &str = "1.0.0";

/// A UTC instant (progress entries write it with nanoseconds).
pub type Timestamp = time::OffsetDateTime;

/// What a workdir holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detected {
    /// No `.small/`.
    Absent,
    V1,
    /// `.small/profile.json` exists: SMALL v2, refused until supported.
    V2,
}

/// One broken strict rule, naming the file and the key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// e.g. "S1", "schema", "cycle" (docs/task-list.md lists every rule).
    pub rule: &'static str,
    /// File name inside `.small/`.
    pub file: String,
    /// e.g. "tasks[2].dependencies" ("" for the file itself).
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {} [{}]", self.file, self.message, self.rule)
        } else {
            write!(
                f,
                "{}: {}: {} [{}]",
                self.file, self.key, self.message, self.rule
            )
        }
    }
}

/// The evidence of a checkpoint: the acceptance check's command and result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    pub command: String,
    pub exit_code: Option<i32>,
    /// The failing set (test ids), empty when green.
    pub failing: Vec<String>,
    /// The git tree id the check ran on.
    pub tree_id: String,
    pub summary: String,
}

/// How a checkpoint ends a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    Blocked,
}

/// Why a SMALL workspace could not be read or changed. Every variant maps to exit class 20
/// (`invariant_failed`) except an I/O error (see `From<SmallError> for Failure` in error.rs).
#[derive(Debug, thiserror::Error)]
pub enum SmallError {
    #[error("{path}: no SMALL workspace (.small/ does not exist)")]
    Absent { path: String },
    #[error("{path}: .small must be a real directory (a symlink or file is refused)")]
    NotADirectory { path: String },
    #[error("{path}: a SMALL v2 workspace (.small/profile.json); only SMALL v1.0.0 is supported")]
    V2Unsupported { path: String },
    #[error("{file}:{line}:{col}: {message}")]
    Parse {
        file: String,
        line: usize,
        col: usize,
        message: String,
    },
    #[error("{}", violations_text(.violations))]
    Invalid { violations: Vec<Violation> },
    #[error("{file}: {key}: {message}")]
    Refused {
        file: String,
        key: String,
        message: String,
    },
    #[error("{0}")]
    Fs(#[from] SafeFsError),
    #[error("{failed}; rolling back {file} failed too: {rollback}")]
    RollbackFailed {
        failed: SafeFsError,
        file: String,
        rollback: SafeFsError,
    },
}

fn violations_text(v: &[Violation]) -> String {
    let mut text = format!("{} SMALL rule violation(s)", v.len());
    for one in v {
        text.push_str("; ");
        text.push_str(&one.to_string());
    }
    text
}

/// One file as read: its raw bytes and its tree.
#[derive(Debug, Clone)]
pub(crate) struct File {
    pub raw: Vec<u8>,
    pub root: Node,
}

/// A loaded `.small/`: the files that could be read (raw bytes and parsed tree) and what was wrong
/// on disk (missing files, links, extra entries), reported with the rules.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub(crate) files: Vec<(&'static str, File)>,
    pub(crate) disk: Vec<Violation>,
    tasks: Vec<Task>,
}

impl Workspace {
    pub(crate) fn new(files: Vec<(&'static str, File)>, disk: Vec<Violation>) -> Workspace {
        let mut ws = Workspace {
            files,
            disk,
            tasks: Vec::new(),
        };
        ws.tasks = ws.root(PLAN).map(model::tasks_of).unwrap_or_default();
        ws
    }

    pub(crate) fn file(&self, name: &str) -> Option<&File> {
        self.files.iter().find(|(n, _)| *n == name).map(|(_, f)| f)
    }

    pub(crate) fn root(&self, name: &str) -> Option<&Node> {
        self.file(name).map(|f| &f.root)
    }

    /// The same workspace with `name` replaced by (or given) `file`.
    pub(crate) fn with(&self, name: &'static str, file: File) -> Workspace {
        let mut files = self.files.clone();
        match files.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = file,
            None => files.push((name, file)),
        }
        let mut disk = self.disk.clone();
        disk.retain(|v| v.file != name);
        Workspace::new(files, disk)
    }

    /// Every broken strict rule; empty when the workspace is valid.
    pub fn violations(&self) -> Vec<Violation> {
        rules::check(self)
    }

    /// The plan's tasks, in file order.
    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }

    /// The plan task `id`, if there is one.
    pub fn task(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.id == id)
    }

    /// The task to work on (SMALL.md): the first in_progress task, else the first pending one
    /// whose dependencies all exist and are completed.
    pub fn next(&self) -> Next {
        model::next(&self.tasks)
    }

    /// The sticky replayId (workspace.small.yml `run.replay_id`) if set, else the computed one.
    pub fn replay_id(&self) -> String {
        replay::sticky(self).unwrap_or_else(|| replay::compute(self))
    }
}

fn display(dir: &SafeDir) -> String {
    dir.path().display().to_string()
}

/// What the workdir holds: no `.small/`, a v1 workspace, or a v2 one.
pub fn detect(workdir: &SafeDir) -> Result<Detected, SmallError> {
    use nix::sys::stat::{fstatat, SFlag};
    use std::os::fd::AsRawFd;
    let stat = match fstatat(
        Some(workdir.fd().as_raw_fd()),
        SMALL_DIR,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    ) {
        Ok(st) => st,
        Err(nix::errno::Errno::ENOENT) => return Ok(Detected::Absent),
        Err(e) => {
            return Err(SmallError::Fs(SafeFsError::Io {
                path: workdir.path().join(SMALL_DIR),
                source: std::io::Error::from(e),
            }))
        }
    };
    if SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFDIR {
        return Err(SmallError::NotADirectory {
            path: workdir.path().join(SMALL_DIR).display().to_string(),
        });
    }
    let small = open_small(workdir)?;
    Ok(if small.exists(V2_MARKER) {
        Detected::V2
    } else {
        Detected::V1
    })
}

fn open_small(workdir: &SafeDir) -> Result<SafeDir, SmallError> {
    workdir.subdir(SMALL_DIR).map_err(|e| match e {
        SafeFsError::Symlink { path } => SmallError::NotADirectory {
            path: path.display().to_string(),
        },
        other => SmallError::Fs(other),
    })
}

/// Open `.small/` of a v1 workspace (refusing an absent, linked or v2 one).
pub(crate) fn open_v1(workdir: &SafeDir) -> Result<SafeDir, SmallError> {
    match detect(workdir)? {
        Detected::Absent => Err(SmallError::Absent {
            path: display(workdir),
        }),
        Detected::V2 => Err(SmallError::V2Unsupported {
            path: display(workdir),
        }),
        Detected::V1 => open_small(workdir),
    }
}

/// Read and parse `.small/` (no validation beyond the YAML: see `Workspace::violations`). A file
/// that does not parse is an error naming file, line and column; a missing file, a link, a fifo
/// or an extra entry is a violation of the loaded workspace.
pub fn load(workdir: &SafeDir) -> Result<Workspace, SmallError> {
    let small = open_v1(workdir)?;
    let mut disk = Vec::new();
    let mut files = Vec::new();
    let names = small.list()?;
    for name in &names {
        if !FILES.contains(&name.as_str()) {
            let message = if write::is_leftover(name) {
                "a temporary left by an interrupted transition (removed by the next resume)"
            } else {
                "not a SMALL v1 file: nothing else may be in .small/"
            };
            disk.push(Violation {
                rule: "S4",
                file: name.clone(),
                key: String::new(),
                message: message.into(),
            });
        }
    }
    for name in FILES {
        if !names.iter().any(|n| n == name) {
            if REQUIRED.contains(&name) {
                disk.push(Violation {
                    rule: "schema",
                    file: name.into(),
                    key: String::new(),
                    message: "required file is missing".into(),
                });
            }
            continue;
        }
        match small.read(name, MAX_FILE_BYTES) {
            Ok(raw) => {
                let root = yaml::parse(name, &raw)?;
                files.push((name, File { raw, root }));
            }
            Err(SafeFsError::Symlink { .. } | SafeFsError::NotRegular { .. }) => {
                disk.push(Violation {
                    rule: "file",
                    file: name.into(),
                    key: String::new(),
                    message:
                        "not a regular file (a symlink, fifo or device is refused, never followed)"
                            .into(),
                });
            }
            Err(SafeFsError::TooLarge { limit, .. }) => disk.push(Violation {
                rule: "file",
                file: name.into(),
                key: String::new(),
                message: format!("larger than the {limit} bytes allowed"),
            }),
            Err(e) => return Err(SmallError::Fs(e)),
        }
    }
    Ok(Workspace::new(files, disk))
}
