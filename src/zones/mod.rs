//! Zones: where the agent command and the check command run.
//!
//! The engine only talks to the [`Zone`] trait, so the host backend (`--isolation none`), the native
//! sandbox and a container engine plug in without touching the loop. A zone runs one command line at
//! a time (through `/bin/sh -c`), captures its output into bounded artifacts and reports how it
//! ended. A zone backend must guarantee that when `run` returns, no process it started is left.

use std::path::PathBuf;
use std::time::Duration;

/// Which side of the loop a command belongs to. Each role has its own zone policy (the
/// [`setup::ZoneSetup`]'s role -> policy map); a backend looks a command's policy up by role and
/// never matches on the role itself, so a new role is one variant here and one policy entry where
/// the engine builds the setup.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The agent (`--exec`): untrusted, writes the workspace.
    Agent,
    /// The external check (`--check`): untrusted code too, but no network, hermetic environment.
    Check,
    /// The advisory reviewer (`--judge`), asked after a green check: a read-only view of the
    /// agent's tree, its own policy and egress allowlist (docs/guards.md, "The judge").
    Judge,
}

impl Role {
    /// Every role, in the order its zone runs within an iteration.
    pub const ALL: [Role; 3] = [Role::Agent, Role::Check, Role::Judge];

    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Check => "check",
            Role::Judge => "judge",
        }
    }

    /// Whether every sandboxed run has this role's zone (the judge's exists only with `--judge`).
    pub const fn always_present(self) -> bool {
        !matches!(self, Role::Judge)
    }

    /// Whether this role's command sees the workspace read-only (in place too: no writable grant).
    pub const fn reads_workspace_only(self) -> bool {
        matches!(self, Role::Judge)
    }

    /// Whether this role's command writes the workspace (the others see a throwaway copy).
    pub const fn writes_workspace(self) -> bool {
        matches!(self, Role::Agent)
    }

    /// Whether this role's policy must keep the network closed (network mode `none`).
    pub const fn must_be_offline(self) -> bool {
        matches!(self, Role::Check)
    }

    /// The role whose zone runs after this one (cyclically: the agent's follows the last).
    pub fn next(self) -> Role {
        let i = Role::ALL.iter().position(|r| *r == self).unwrap_or(0);
        Role::ALL[(i + 1) % Role::ALL.len()]
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
    /// minted credential, the check's pinned runner variables (`[runner]`). Only in the command's environment (never argv); `Debug` redacts them.
    pub inject: Vec<(String, crate::secret::Secret)>,
    /// A file the command reads as its stdin (the judge's packet); `None`: `/dev/null`. Opened by
    /// the supervisor without following links.
    pub stdin: Option<PathBuf>,
    /// Operator-owned paths outside the workspace the command may read, never write (the
    /// agent's feedback directory), bound at the same path by sandboxing backends.
    pub read_only: Vec<PathBuf>,
    /// Operator-owned directories outside the workspace the command may write (the agent's
    /// per-run usage directory, `LOOPEXEC_USAGE`), bound writable at the same path by
    /// sandboxing backends. Nothing the check or the judge sees.
    pub read_write: Vec<PathBuf>,
    /// Paths inside the command's first overlay (relative to its target) the command may read
    /// but never write, rename or remove (t0's protected paths in the check's copy), bound
    /// read-only there by the native backend.
    pub read_only_beneath: Vec<PathBuf>,
    /// The stall rule and the heartbeat hook while the command runs (docs/gates.md, "Liveness");
    /// the default is neither.
    pub liveness: liveness::Liveness,
}

/// Open a command's stdin file read-only, never through a symbolic link.
pub fn open_stdin(path: &std::path::Path) -> Result<std::fs::File, ZoneError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| ZoneError::io("the command's stdin", e))
}

pub use crate::ending::Ending;

pub mod container;
pub mod host;
pub mod liveness;
pub mod native;
pub mod pinned;
pub mod reap;
pub mod setup;
pub mod supervise;

use crate::capture::{ArtifactSink, CaptureError, CapturedOutput};

/// The isolation an operator chose for a run (`--isolation`, or `isolation` in loop.toml).
/// There is deliberately no default: running an agent unsandboxed must be a visible choice.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
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
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
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

/// How one command went, as observed by the zone, with what it used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneRun {
    pub ending: Ending,
    pub duration: Duration,
    pub output: CapturedOutput,
    pub usage: ZoneUsage,
    /// What the kernel applied to the command, read back from inside its zone (the native
    /// sandbox; none for the host and container backends, and for a zone that did not start).
    pub enforcement: Option<sandbox::Enforcement>,
}

/// What one command used, measured by its zone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZoneUsage {
    /// CPU time (user + system) of the command's whole process tree, where the backend can see it
    /// (its processes are loopexec's descendants: host and native zones; not a container engine's).
    pub cpu: Option<Duration>,
    /// The egress proxy's account, for a command whose zone the proxy served.
    pub egress: Option<EgressUsage>,
    /// What the command's zone tried to send beyond its network namespace (native zones, once
    /// ended by itself; `None` where it is not counted).
    pub outside_attempts: Option<sandbox::OutsideAttempts>,
}

/// The egress proxy's account after one command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressUsage {
    /// What the proxy served this command.
    pub command: crate::egress::ProxyStats,
    /// What it served over the run so far, this command included (the receipt's `egress.totals`).
    pub run_totals: crate::egress::ProxyStats,
    /// sha256 of the run's egress audit log after this command (`None` while it does not exist).
    pub audit_sha256: Option<String>,
}

/// Why a zone could not run a command at all (distinct from a command that ran and failed).
#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    /// Something a zone's policy needs that this host or backend cannot give (a missing isolation
    /// layer, a limit a container engine cannot enforce, a missing image), with what would fix it.
    #[error("{}{}{cause}; fix: {fix}", role.map(|r| format!("{} zone: ", r.as_str())).unwrap_or_default(), layer.map(|l| format!("isolation layer {} unavailable: ", l.as_str())).unwrap_or_default())]
    Unsatisfiable {
        role: Option<Role>,
        layer: Option<sandbox::Layer>,
        cause: String,
        fix: String,
    },
    /// What the zones were asked for cannot be set up as asked (a check policy with network, a
    /// workspace overlay on the host backend, a pinned policy missing, a zone spec the sandbox
    /// refuses).
    #[error("{0}")]
    Spec(String),
    /// An I/O error setting up or supervising a zone (pipes, the run directory, the egress audit
    /// log and proxy, the container engine's client).
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error("could not remove every process of the command: {0}")]
    Reap(String),
}

impl ZoneError {
    pub fn io(context: impl Into<String>, source: impl Into<std::io::Error>) -> Self {
        ZoneError::Io {
            context: context.into(),
            source: source.into(),
        }
    }

    /// Whether the zone could not be set up (once a run exists: halt `isolation_unsatisfiable`),
    /// as opposed to a failure while supervising a command that was set up.
    pub fn is_setup(&self) -> bool {
        matches!(
            self,
            ZoneError::Unsatisfiable { .. } | ZoneError::Spec(_) | ZoneError::Io { .. }
        )
    }
}

/// The sandbox's errors as a zone's: the one place a sandbox error becomes a zone error (a
/// missing layer stays typed; the rest is a spec the sandbox refused, or I/O).
impl From<sandbox::SandboxError> for ZoneError {
    fn from(err: sandbox::SandboxError) -> ZoneError {
        use sandbox::SandboxError;
        match err {
            SandboxError::Unsatisfiable { layer, cause, fix } => ZoneError::Unsatisfiable {
                role: None,
                layer: Some(layer),
                cause,
                fix,
            },
            SandboxError::Io { context, source } => ZoneError::Io { context, source },
            other => ZoneError::Spec(other.to_string()),
        }
    }
}

/// The one mapping of a zone error to a command failure: a zone that cannot be set up is
/// `isolation_unsatisfiable` (a refusal before the run exists), with the fix as the hint.
impl From<ZoneError> for crate::error::Failure {
    fn from(err: ZoneError) -> crate::error::Failure {
        use crate::error::Failure;
        match err {
            ZoneError::Unsatisfiable { ref fix, .. } => {
                let fix = fix.clone();
                Failure::isolation(err.to_string()).with_hint(fix)
            }
            ZoneError::Spec(_) | ZoneError::Io { .. } => Failure::isolation(err.to_string()),
            ZoneError::Capture(CaptureError::Artifact(e)) => crate::error::fs_failure(e),
            other => Failure::internal(other.to_string()),
        }
    }
}

/// A place where commands run. The engine only talks to this trait.
///
/// Contract for implementors: `run` executes `/bin/sh -c <command_line>` with exactly `cmd.env`
/// in `cmd.cwd` and stdin from `/dev/null`, in the zone of `cmd.role`'s policy; hands the read
/// ends of its stdout/stderr pipes to `capture.start` and waits through [`supervise::watch`], so
/// the pipes never fill, `cmd.timeout` is enforced on the whole process tree and
/// [`crate::interrupt::pending`] kills the tree and returns [`Ending::Interrupted`]; and returns
/// only when no process it started is left, after calling `finish` on the capture, with the
/// command's [`ZoneUsage`]. `Err` means the zone itself failed; a command that could not start is
/// `Ok` with [`Ending::FailedToStart`].
pub trait Zone {
    /// Backend name, e.g. `host`.
    fn name(&self) -> &str;
    /// The isolation recorded in the receipt, e.g. `none`.
    fn isolation(&self) -> &str;
    /// Run one command to completion (or timeout / interrupt).
    fn run(&mut self, cmd: &ZoneCommand, capture: &ArtifactSink<'_>) -> Result<ZoneRun, ZoneError>;
    /// Give the zone its run directory (for per-run logs such as the egress audit log), once the
    /// run exists.
    fn bind_run(&mut self, _run_dir: &std::path::Path) -> Result<(), ZoneError> {
        Ok(())
    }
    /// The delegated systemd scope the supervisor moved into for this backend's cgroups (recorded
    /// in `run_start`), if it asked for one.
    fn cgroup_scope(&self) -> Option<&crate::delegation::Scope> {
        None
    }
    /// Run the zone self-test's probe in a zone of `cmd`'s role instead of its command
    /// (docs/zones.md, "The zone self-test"). `Ok(Err(why))`: this backend or this zone cannot
    /// be probed (the host and container backends have no probe).
    fn self_test(
        &mut self,
        _cmd: &ZoneCommand,
        _plan: &sandbox::self_test::SelfTestPlan,
    ) -> Result<Result<SelfTestRun, String>, ZoneError> {
        Ok(Err(format!(
            "the {} backend has no zone self-test (it needs the native sandbox)",
            self.name()
        )))
    }
}

/// A self-test zone's outcome: each probe operation, and the zone's read-back enforcement.
#[derive(Debug, Clone)]
pub struct SelfTestRun {
    pub operations: Vec<sandbox::self_test::ProbeOutcome>,
    pub enforcement: Option<sandbox::Enforcement>,
}

/// Open the zone backend of a setup.
pub fn open_zone(setup: &setup::ZoneSetup) -> Result<Box<dyn Zone>, ZoneError> {
    if setup.clock_offset_s.is_some()
        && (setup.isolation == Isolation::None || setup.backend.engine().is_some())
    {
        return Err(ZoneError::Spec("a clock offset needs the native sandbox's time namespace (the host and container backends cannot apply one)".into()));
    }
    match setup.isolation {
        Isolation::None => Ok(Box::new(host::HostZone::new()?)),
        Isolation::Native => match setup.backend.engine() {
            None => Ok(Box::new(native::NativeZone::new(setup)?)),
            Some(engine) => Ok(Box::new(container::ContainerZone::new(setup, engine)?)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Failure, FailureCode};

    #[test]
    fn an_unsatisfiable_layer_is_refused_with_its_cause_and_fix() {
        let err = ZoneError::Unsatisfiable {
            role: Some(Role::Agent),
            layer: Some(sandbox::Layer::Landlock),
            cause: "the kernel has no Landlock".into(),
            fix: "boot with lsm=landlock".into(),
        };
        assert!(err.is_setup());
        let failure = Failure::from(err);
        assert_eq!(failure.code, FailureCode::IsolationUnsatisfiable);
        assert_eq!(failure.class().code(), 30);
        assert_eq!(
            failure.message,
            "agent zone: isolation layer landlock unavailable: the kernel has no Landlock; fix: boot with lsm=landlock"
        );
        assert_eq!(failure.hint.as_deref(), Some("boot with lsm=landlock"));
    }

    #[test]
    fn a_sandbox_layer_error_stays_typed_in_the_zone_error() {
        let err = ZoneError::from(sandbox::SandboxError::Unsatisfiable {
            layer: sandbox::Layer::Cgroup,
            cause: "no delegated cgroup".into(),
            fix: "see loopexec doctor".into(),
        });
        assert!(
            matches!(
                err,
                ZoneError::Unsatisfiable {
                    role: None,
                    layer: Some(sandbox::Layer::Cgroup),
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "isolation layer cgroup unavailable: no delegated cgroup; fix: see loopexec doctor"
        );
    }

    #[test]
    fn a_failure_supervising_a_command_is_not_a_setup_failure() {
        assert!(!ZoneError::Reap("gone".into()).is_setup());
        assert_eq!(
            Failure::from(ZoneError::Reap("gone".into())).code,
            FailureCode::InternalError
        );
    }

    #[test]
    fn the_next_role_cycles_through_every_role() {
        assert_eq!(Role::Agent.next(), Role::Check);
        assert_eq!(Role::Check.next(), Role::Judge);
        assert_eq!(Role::Judge.next(), Role::Agent);
    }
}
