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
    /// Overlays the zone mounts (the detached workspace); `cwd` lies inside one of them. Only
    /// sandboxing backends can honour them: the host backend refuses a command that has any.
    pub overlays: Vec<sandbox::OverlayMount>,
    /// Variables set for this command whatever the zone's environment policy: the agent's
    /// minted credential. Only in the command's environment (never argv); `Debug` redacts them.
    pub inject: Vec<(String, crate::secret::Secret)>,
}

pub use crate::ending::Ending;

pub mod container;
pub mod host;
pub mod native;
pub mod pinned;
pub mod reap;

use crate::capture::{ArtifactSink, CaptureError, CapturedOutput};

/// The isolation an operator chose for a run (`--isolation`, or `isolation` in loop.toml).
/// There is deliberately no default: running an agent unsandboxed must be a visible choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// No isolation: commands run on the host as the operator's user (process-group + subreaper
    /// tree control only).
    None,
    /// The native sandbox: agent zone and exec zone (namespaces, Landlock, seccomp, cgroups).
    Native,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::None => "none",
            Isolation::Native => "native",
        }
    }
}

/// What provides the sandboxed zones (`--backend`): the native sandbox, or a container engine
/// expressing the same policies in its own flags (docs/containers.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// loopexec's own sandbox (namespaces, Landlock, seccomp, cgroups): needs only the kernel.
    #[default]
    Native,
    /// Containers run by podman, from a local image (`--image`).
    Podman,
    /// Containers run by docker, from a local image (`--image`).
    Docker,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Native => "native",
            Backend::Podman => "podman",
            Backend::Docker => "docker",
        }
    }

    /// The container engine behind this backend, if it is one.
    pub fn engine(self) -> Option<container::engine::Engine> {
        match self {
            Backend::Native => None,
            Backend::Podman => Some(container::engine::Engine::Podman),
            Backend::Docker => Some(container::engine::Engine::Docker),
        }
    }
}

/// How one command went, as observed by the zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneRun {
    pub ending: Ending,
    pub duration: Duration,
    pub output: CapturedOutput,
}

/// Why a zone could not run a command at all (distinct from a command that ran and failed).
#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    #[error("zone setup failed: {0}")]
    Setup(String),
    #[error("creating pipes for the command's output: {0}")]
    Pipe(std::io::Error),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error("could not remove every process of the command: {0}")]
    Reap(String),
}

/// A place where commands run. The engine only talks to this trait.
///
/// Contract for implementors: `run` executes `/bin/sh -c <command_line>` with exactly `cmd.env`
/// in `cmd.cwd` and stdin from `/dev/null`; hands the read ends of its stdout/stderr pipes to
/// `capture.start` and, while waiting, calls `pump` on the returned capture with its own wake-up
/// descriptors (e.g. a pidfd and [`crate::interrupt::wake_fd`]) so the pipes never fill; enforces
/// `cmd.timeout` on the whole process tree; reacts to [`crate::interrupt::pending`] by killing the
/// tree and returning [`Ending::Interrupted`]; and returns only when no process it started is
/// left, after calling `finish` on the capture. `Err` means the zone itself failed; a command
/// that could not start is `Ok` with [`Ending::FailedToStart`].
pub trait Zone {
    /// Backend name, e.g. `host`.
    fn name(&self) -> &str;
    /// The isolation recorded in the receipt, e.g. `none`.
    fn isolation(&self) -> &str;
    /// Run one command to completion (or timeout / interrupt).
    fn run(&mut self, cmd: &ZoneCommand, capture: &ArtifactSink<'_>) -> Result<ZoneRun, ZoneError>;
    /// The egress proxy setup of a backend that serves one (a proxied agent policy); the egress
    /// methods below follow from it.
    fn egress(&self) -> Option<&pinned::EgressSetup> {
        None
    }
    fn egress_mut(&mut self) -> Option<&mut pinned::EgressSetup> {
        None
    }
    /// Give the zone its run directory (for per-run logs such as the egress audit log), once the
    /// run exists.
    fn bind_run(&mut self, run_dir: &std::path::Path) -> Result<(), ZoneError> {
        match self.egress_mut() {
            Some(egress) => egress.bind(run_dir),
            None => Ok(()),
        }
    }
    /// Egress totals of the run so far, for backends with an egress proxy.
    fn egress_totals(&self) -> Option<crate::egress::ProxyStats> {
        self.egress().map(|e| e.totals.clone())
    }
    /// sha256 of the run's egress audit log as it is now (a running digest, O(1)), for backends
    /// with an egress proxy; None while the log does not exist.
    fn egress_audit_sha256(&self) -> Option<String> {
        self.egress().and_then(|e| e.audit_digest.sha256_hex())
    }
}

/// Open the zone backend for an isolation choice.
pub fn open_zone(cfg: &crate::engine::config::LoopConfig, state_dir: &std::path::Path) -> Result<Box<dyn Zone>, ZoneError> {
    match cfg.isolation {
        Isolation::None => Ok(Box::new(host::HostZone::new()?)),
        Isolation::Native => match cfg.backend.engine() {
            None => Ok(Box::new(native::NativeZone::from_config(cfg, state_dir)?)),
            Some(engine) => Ok(Box::new(container::ContainerZone::from_config(cfg, state_dir, engine)?)),
        },
    }
}
