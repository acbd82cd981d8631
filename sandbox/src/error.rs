//! Typed errors of the sandbox and the names of its protection layers.

use crate::policy::PolicyError;
use serde::{Deserialize, Serialize};

/// A protection layer of a zone, as named in reports and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    UserNamespace,
    MountNamespace,
    PidNamespace,
    NetNamespace,
    IpcUtsNamespaces,
    Landlock,
    Seccomp,
    NoNewPrivs,
    Capabilities,
    Cgroup,
    Rlimits,
    /// The cap on the zone's writable layers (`resources.disk_bytes`, `volume.rs`).
    Disk,
}

impl Layer {
    /// Every layer, in the order of the zone report.
    pub const ALL: [Layer; 12] = [
        Layer::UserNamespace,
        Layer::MountNamespace,
        Layer::PidNamespace,
        Layer::NetNamespace,
        Layer::IpcUtsNamespaces,
        Layer::Landlock,
        Layer::Seccomp,
        Layer::NoNewPrivs,
        Layer::Capabilities,
        Layer::Cgroup,
        Layer::Rlimits,
        Layer::Disk,
    ];

    /// The layer of a report name (`landlock`, `cgroup`, ...), if there is one.
    pub fn from_name(name: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Layer::UserNamespace => "user_namespace",
            Layer::MountNamespace => "mount_namespace",
            Layer::PidNamespace => "pid_namespace",
            Layer::NetNamespace => "net_namespace",
            Layer::IpcUtsNamespaces => "ipc_uts_namespaces",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::NoNewPrivs => "no_new_privs",
            Layer::Capabilities => "capabilities",
            Layer::Cgroup => "cgroup",
            Layer::Rlimits => "rlimits",
            Layer::Disk => "disk",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A layer the policy needs is missing on this host (maps to `isolation_unsatisfiable`, exit 30).
    #[error("isolation layer {} unavailable: {cause}", layer.as_str())]
    Unsatisfiable {
        layer: Layer,
        cause: String,
        fix: String,
    },
    /// The policy file is invalid (exit 20).
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A protected path of a writable grant is, or passes through, a symlink, so it cannot be
    /// held read-only (maps to `isolation_unsatisfiable`, exit 30, like a missing layer).
    #[error("protected path {} is or passes through a symlink; remove it before starting a zone", path.display())]
    ProtectedSymlink { path: std::path::PathBuf },
    /// The zone specification is invalid (bad cwd, missing grant...) (exit 20).
    #[error("invalid zone specification: {0}")]
    Spec(String),
    /// The command could not be started inside the zone (exit 40).
    #[error("could not start the command: {0}")]
    Spawn(String),
    /// A clock offset was asked for, but this kernel has no time namespaces (Linux >= 5.6 with
    /// CONFIG_TIME_NS) (maps to `isolation_unsatisfiable`, exit 30).
    #[error("time namespace unavailable: {cause}")]
    TimeNamespaceUnsupported { cause: String },
    /// An I/O error while setting up or tearing down the zone.
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

impl SandboxError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SandboxError::Io {
            context: context.into(),
            source,
        }
    }
    pub fn errno(context: impl Into<String>, e: nix::Error) -> Self {
        SandboxError::Io {
            context: context.into(),
            source: std::io::Error::from(e),
        }
    }
}
