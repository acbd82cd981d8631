//! Every convention between the supervisor and a zone's processes, in one place: how the zone
//! init is started (its marker variable, `argv[0]`, the plan socket's descriptor), what the
//! supervisor hands it (the `Plan`, JSON in a sealed memfd sent as one message over the inherited
//! SOCK_SEQPACKET socket, with the command's stdio and the idmapped mount trees), what the zone answers (`Msg`),
//! how a step between clone3 and execve fails (`PreExecFailure`, an exit code), and the one
//! decoder turning whatever the zone ended with into a typed error ([`decode_failure`]).
//! Everything in the plan is already validated and resolved by the supervisor; the zone init
//! only executes it. The sequence these serve is described in docs/zones.md ("The native zone's
//! setup sequence").

use crate::error::{Layer, SandboxError};
use nix::sys::wait::WaitStatus;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// One bind of a host path at the same path inside the zone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bind {
    pub path: PathBuf,
    pub writable: bool,
    /// Index of a detached, idmapped mount tree sent with the plan (root callers' writable
    /// grants not owned by the zone uid); None: bind `path` from the old root.
    pub tree: Option<usize>,
}

/// An overlay filesystem mounted at `target` inside the zone (unprivileged overlayfs with
/// `userxattr`, in the zone's own mount namespace). `lowers[0]` is the topmost lower layer. The
/// target is writable only when `upper` (and `work`, on the same filesystem) are given; writes
/// then land in `upper`, the lowers are never modified. All paths are host paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayMount {
    pub target: PathBuf,
    pub lowers: Vec<PathBuf>,
    pub upper: Option<PathBuf>,
    pub work: Option<PathBuf>,
    /// For a scratch upper layer that is thrown away after the zone: mount with `volatile`, so
    /// that unmounting skips the sync of the upper layer's filesystem. Such an upper/work pair
    /// cannot be mounted again (overlayfs refuses a work directory a volatile mount used).
    #[serde(default)]
    pub volatile: bool,
}

impl OverlayMount {
    pub fn writable(&self) -> bool {
        self.upper.is_some()
    }
}

/// Landlock rules over zone paths.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LandlockPlan {
    /// Kernel ABI to use (the best the host offers).
    pub abi: u32,
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    /// Restrict TCP connect (to the listener's port only, if any) — network mode "proxy".
    pub restrict_connect: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Limits {
    pub open_files: u64,
    pub file_size: u64,
    pub core: u64,
}

/// Everything the zone init needs, in the order it uses it. Sent with descriptors: the command's
/// stdin, stdout and stderr, then the mount trees `Bind::tree` indexes, then the overlay layers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub binds: Vec<Bind>,
    /// Absolute zone paths (existing, symlink-free) re-bound read-only.
    pub protected: Vec<(PathBuf, PathBuf)>,
    pub hidden: Vec<PathBuf>,
    /// Overlays mounted after the grants (layer paths canonical, symlink-free).
    pub overlays: Vec<OverlayMount>,
    /// Root callers: where the overlay layers' detached trees start among the descriptors after
    /// stdio, one per layer in order (each overlay's lowers, then its upper and work
    /// directories). None: the zone clones each layer from its path.
    pub overlay_layers_from: Option<usize>,
    /// Unprivileged callers: for each overlay layer in plan order, the index (among the
    /// descriptors after stdio) of the capped volume's layer the zone clones itself
    /// (`volume.rs`); None, or an empty list: the zone clones the layer from its path.
    #[serde(default)]
    pub overlay_layer_fds: Vec<Option<usize>>,
    pub tmp_size: u64,
    pub hostname: String,
    pub listener_port: Option<u16>,
    pub landlock: Option<LandlockPlan>,
    pub seccomp_extra_deny: Vec<String>,
    pub limits: Limits,
    pub cwd: PathBuf,
    pub argv: Vec<Vec<u8>>,
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    /// Some(s): the command's own time namespace, monotonic and boot clocks offset by `s` seconds.
    #[serde(default)]
    pub clock_offset_s: Option<i64>,
    /// Some: a self-test zone; the command is not executed, the probe runs instead (`self_test`).
    #[serde(default)]
    pub self_test: Option<crate::self_test::SelfTestPlan>,
}

/// Environment variable marking a process as a zone init (its value: the plan socket's fd).
pub const ENV_MARKER: &str = "LOOPEXEC_ZONE_INIT";
/// Environment variable asking the binary for the doctor's namespace probe instead: it exits 0
/// when it could create the zone's namespaces and map its ids, else with the errno of the failing
/// step (clamped to 1-125).
pub const PROBE_MARKER: &str = "LOOPEXEC_ZONE_PROBE";
/// The plan socket's descriptor in the zone init.
pub const PLAN_FD: RawFd = 3;
/// `argv[0]` of the zone init.
pub const INIT_ARG0: &str = "loopexec-zone-init";
/// The zone init's exit code after it reported `Msg::Failed` (and the command's, when its own
/// setup failed after it wrote its `CommandFailure` to the init).
pub const SETUP_FAILED_EXIT: i32 = 127;

/// What the command's process writes to the zone init (on a close-on-exec pipe) when one of its
/// steps before execve fails: the layer that could not be applied, if any, and the message.
pub type CommandFailure = (Option<Layer>, String);

/// One line (JSON, newline-ended) the command's process writes to the zone init on that pipe:
/// its enforcement evidence just before execve, and a failure when a step fails (after the
/// evidence, when execve itself failed).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CommandReport {
    Evidence(Box<crate::evidence::Readback>),
    /// A self-test zone's probe outcomes (in place of execve).
    SelfTest(Vec<crate::self_test::ProbeOutcome>),
    Failed(CommandFailure),
}

/// How the zone init's clone child exits when a step between clone3 and execve fails. It may
/// only make async-signal-safe calls there (no allocation, no message), so each step has its own
/// exit code; [`decode_failure`] turns it back into an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum PreExecFailure {
    /// cgroup v1: writing to a controller's `tasks` file.
    EnterCgroup = 119,
    /// /dev/null onto fds 0-2.
    NullStdio = 120,
    /// The plan socket onto `PLAN_FD`.
    PlanSocket = 121,
    /// `PR_SET_PDEATHSIG`.
    ParentDeathSignal = 122,
    /// The supervisor closed the release pipe before writing the id maps (it died or gave up).
    NotReleased = 123,
    /// setgroups/setresgid/setresuid to the zone ids (root callers).
    ZoneIds = 124,
    /// capget/capset, raising the namespace capabilities to inheritable (for the ambient set).
    KeepCapabilities = 125,
    /// execveat of the zone init executable.
    ExecInit = 126,
}

impl PreExecFailure {
    pub const ALL: [PreExecFailure; 8] = [
        PreExecFailure::EnterCgroup,
        PreExecFailure::NullStdio,
        PreExecFailure::PlanSocket,
        PreExecFailure::ParentDeathSignal,
        PreExecFailure::NotReleased,
        PreExecFailure::ZoneIds,
        PreExecFailure::KeepCapabilities,
        PreExecFailure::ExecInit,
    ];

    pub const fn code(self) -> i32 {
        self as i32
    }

    pub fn from_code(code: i32) -> Option<PreExecFailure> {
        PreExecFailure::ALL.into_iter().find(|f| f.code() == code)
    }

    /// What the zone init could not do.
    pub fn message(self) -> &'static str {
        match self {
            PreExecFailure::EnterCgroup => "the zone init could not enter its cgroup",
            PreExecFailure::NullStdio => "could not put /dev/null on its stdin, stdout and stderr",
            PreExecFailure::PlanSocket => "could not put the plan socket on descriptor 3",
            PreExecFailure::ParentDeathSignal => "could not set its parent-death signal",
            PreExecFailure::NotReleased => {
                "the supervisor gave up before mapping its user and group ids"
            }
            PreExecFailure::ZoneIds => "could not become the zone uid/gid",
            PreExecFailure::KeepCapabilities => {
                "could not keep its namespace capabilities across exec"
            }
            PreExecFailure::ExecInit => "could not execute the zone init executable",
        }
    }
}

/// How a zone that did not report `Ready` ended, as the supervisor saw it.
#[derive(Debug)]
pub enum NotReady {
    /// The plan socket closed without a message; the init's wait status (or why there is none).
    Ended(nix::Result<WaitStatus>),
    /// The zone reported a failed step.
    Failed {
        layer: Option<Layer>,
        message: String,
    },
    /// A message other than `Ready` or `Failed`, or one that does not parse.
    Unexpected,
}

/// The one decoder of a zone's failure to start. A protection that could not be applied
/// (including the v1 cgroup the init could not enter) is `Unsatisfiable`; anything else (bad
/// grant, missing command, a pre-exec step) is a spawn failure saying what failed.
pub fn decode_failure(end: NotReady) -> SandboxError {
    let doctor = "see `loopexec doctor` for this host's isolation support";
    match end {
        NotReady::Ended(Ok(WaitStatus::Exited(_, code)))
            if code == PreExecFailure::EnterCgroup.code() =>
        {
            SandboxError::Unsatisfiable {
                layer: Layer::Cgroup,
                cause: PreExecFailure::EnterCgroup.message().into(),
                fix: "run loopexec in a delegated cgroup (see `loopexec doctor`)".into(),
            }
        }
        NotReady::Ended(status) => {
            let why = match status {
                Ok(WaitStatus::Exited(_, code)) => match PreExecFailure::from_code(code) {
                    Some(f) => {
                        return SandboxError::Spawn(format!(
                            "the zone init failed before the command started: {}",
                            f.message()
                        ))
                    }
                    None => format!("exited with code {code}"),
                },
                Ok(WaitStatus::Signaled(_, signal, _)) => format!("was killed by {signal}"),
                other => format!("ended with {other:?}"),
            };
            // Not one of our codes: the binary may have run its own `main` instead of the init.
            SandboxError::Spawn(format!("the zone init failed before the command started: it {why} (is run_if_zone_init() called first in main?)"))
        }
        NotReady::Failed {
            layer:
                Some(
                    l @ (Layer::Landlock
                    | Layer::Seccomp
                    | Layer::Capabilities
                    | Layer::NoNewPrivs
                    | Layer::NetNamespace
                    | Layer::IpcUtsNamespaces
                    | Layer::Cgroup),
                ),
            message,
        } => SandboxError::Unsatisfiable {
            layer: l,
            cause: message,
            fix: doctor.into(),
        },
        NotReady::Failed { message, .. } => SandboxError::Spawn(message),
        NotReady::Unexpected => SandboxError::Spawn("unexpected message from the zone".into()),
    }
}

/// Messages from the zone to the supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Msg {
    /// The command was executed; a listener descriptor travels with this message when asked for.
    /// `evidence`: what the command read back of itself just before its execve.
    Ready {
        listener_port: Option<u16>,
        #[serde(default)]
        evidence: Option<Box<crate::evidence::Readback>>,
        /// A self-test zone: its probe's outcomes (its command was not executed).
        #[serde(default)]
        self_test: Option<Vec<crate::self_test::ProbeOutcome>>,
    },
    /// Setup failed (the layer, when a protection could not be applied).
    Failed {
        layer: Option<Layer>,
        errno: Option<i32>,
        message: String,
    },
    /// What the zone tried to send beyond its network namespace while the command ran; sent just
    /// before `Exited` or `Signaled` (absent when the counters could not be read).
    OutsideAttempts(crate::outside_reach::OutsideAttempts),
    /// The command exited with this code.
    Exited { code: i32 },
    /// The command was killed by this signal.
    Signaled { signal: i32 },
}

/// Most descriptors sent with one message.
pub const MAX_FDS: usize = 32;

/// Send one message, with descriptors (at most `MAX_FDS`).
pub fn send(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    if fds.len() > MAX_FDS {
        return Err(std::io::Error::other(
            "too many descriptors for one message",
        ));
    }
    let iov = [std::io::IoSlice::new(bytes)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(sock, &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None).map_err(std::io::Error::from)?;
    Ok(())
}

/// Largest message accepted (the plan itself travels in a memfd: [`plan_memfd`]).
const MAX_MESSAGE: usize = 16 << 20;

/// Largest plan accepted. A socket message is bounded by the socket's buffer (a few hundred KiB),
/// far below what a command line and environment may hold; the plan goes in a sealed memfd
/// instead, the first descriptor of the one message that announces it ([`PLAN_IN_MEMFD`]).
pub const MAX_PLAN: u64 = 64 << 20;

/// The bytes of the message that carries the plan's memfd.
pub const PLAN_IN_MEMFD: &[u8] = b"plan-in-memfd";

/// The encoded plan in a memfd, sealed against every change (size, contents, seals).
pub fn plan_memfd(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    use std::io::Write;
    if bytes.len() as u64 > MAX_PLAN {
        return Err(std::io::Error::other(format!(
            "{} bytes, more than the {MAX_PLAN} a plan may hold",
            bytes.len()
        )));
    }
    let name = c"loopexec-plan";
    let raw =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}

/// The plan's bytes from the memfd [`plan_memfd`] made: refused unless it is sealed and within
/// [`MAX_PLAN`].
pub fn read_plan_memfd(fd: OwnedFd) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let required = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & required != required {
        return Err(std::io::Error::other("the plan's memfd is not sealed"));
    }
    let file = std::fs::File::from(fd);
    let len = file.metadata()?.len();
    if len > MAX_PLAN {
        return Err(std::io::Error::other(format!(
            "a plan of {len} bytes, more than {MAX_PLAN}"
        )));
    }
    // From offset 0: the descriptor shares its file offset with the writer's, left at the end.
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(bytes)
}

/// Receive one message and the descriptors sent with it. `Ok(None)` on EOF.
pub fn recv(sock: &OwnedFd, nonblocking: bool) -> std::io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    use nix::sys::socket::{recv as peek, recvmsg, ControlMessageOwned, MsgFlags};
    // Size the buffer to the message (MSG_PEEK | MSG_TRUNC returns its full length).
    let mut peek_flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_TRUNC;
    if nonblocking {
        peek_flags |= MsgFlags::MSG_DONTWAIT;
    }
    let len = loop {
        match peek(sock.as_raw_fd(), &mut [0u8; 1], peek_flags) {
            Err(nix::Error::EINTR) => continue,
            other => break other.map_err(std::io::Error::from)?,
        }
    };
    if len > MAX_MESSAGE {
        return Err(std::io::Error::other(format!(
            "message of {len} bytes is too large"
        )));
    }
    let mut buf = vec![0u8; len.max(1)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut flags = MsgFlags::MSG_CMSG_CLOEXEC;
    if nonblocking {
        flags |= MsgFlags::MSG_DONTWAIT;
    }
    let (n, fd) = {
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), flags)
            .map_err(std::io::Error::from)?;
        let mut fds = Vec::new();
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
                }
            }
        }
        (msg.bytes, fds)
    };
    if n == 0 {
        return Ok(None);
    }
    buf.truncate(n);
    Ok(Some((buf, fd)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::unistd::Pid;

    #[test]
    fn a_plan_larger_than_a_socket_message_round_trips_through_its_sealed_memfd() {
        let bytes: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
        let fd = plan_memfd(&bytes).unwrap();
        assert_eq!(read_plan_memfd(fd).unwrap(), bytes);
    }

    #[test]
    fn a_plan_memfd_cannot_be_written_once_sealed() {
        let fd = plan_memfd(b"{}").unwrap();
        let written = nix::unistd::write(&fd, b"x");
        assert_eq!(written, Err(nix::Error::EPERM));
    }

    #[test]
    fn an_unsealed_descriptor_is_refused_as_a_plan() {
        let file = tempfile::tempfile().unwrap();
        let err = read_plan_memfd(OwnedFd::from(file)).unwrap_err();
        assert_eq!(err.to_string(), "the plan's memfd is not sealed");
    }

    fn exited(code: i32) -> NotReady {
        NotReady::Ended(Ok(WaitStatus::Exited(Pid::from_raw(7), code)))
    }

    fn spawn_message(e: SandboxError) -> String {
        match e {
            SandboxError::Spawn(m) => m,
            other => panic!("expected a spawn failure, got {other:?}"),
        }
    }

    #[test]
    fn every_pre_exec_code_is_distinct_and_reads_back() {
        for f in PreExecFailure::ALL {
            assert_eq!(PreExecFailure::from_code(f.code()), Some(f));
        }
        let codes: Vec<i32> = PreExecFailure::ALL.iter().map(|f| f.code()).collect();
        assert_eq!(codes, (119..=126).collect::<Vec<_>>());
        assert_eq!(PreExecFailure::from_code(SETUP_FAILED_EXIT), None);
    }

    #[test]
    fn cgroup_entry_failure_decodes_to_an_unsatisfiable_cgroup_layer() {
        match decode_failure(exited(119)) {
            SandboxError::Unsatisfiable { layer, cause, fix } => {
                assert_eq!(layer, Layer::Cgroup);
                assert_eq!(cause, "the zone init could not enter its cgroup");
                assert_eq!(
                    fix,
                    "run loopexec in a delegated cgroup (see `loopexec doctor`)"
                );
            }
            other => panic!("expected Unsatisfiable, got {other:?}"),
        }
    }

    #[test]
    fn each_other_pre_exec_code_decodes_to_its_message() {
        let expected = [
            (
                120,
                "could not put /dev/null on its stdin, stdout and stderr",
            ),
            (121, "could not put the plan socket on descriptor 3"),
            (122, "could not set its parent-death signal"),
            (
                123,
                "the supervisor gave up before mapping its user and group ids",
            ),
            (124, "could not become the zone uid/gid"),
            (125, "could not keep its namespace capabilities across exec"),
            (126, "could not execute the zone init executable"),
        ];
        for (code, message) in expected {
            assert_eq!(
                spawn_message(decode_failure(exited(code))),
                format!("the zone init failed before the command started: {message}")
            );
        }
    }

    #[test]
    fn an_unknown_exit_code_names_the_code_and_the_likely_cause() {
        assert_eq!(
            spawn_message(decode_failure(exited(2))),
            "the zone init failed before the command started: it exited with code 2 (is run_if_zone_init() called first in main?)"
        );
    }

    #[test]
    fn a_killed_init_names_the_signal() {
        let end = NotReady::Ended(Ok(WaitStatus::Signaled(
            Pid::from_raw(7),
            nix::sys::signal::Signal::SIGKILL,
            false,
        )));
        assert_eq!(
            spawn_message(decode_failure(end)),
            "the zone init failed before the command started: it was killed by SIGKILL (is run_if_zone_init() called first in main?)"
        );
    }

    #[test]
    fn a_protection_that_failed_in_the_zone_is_unsatisfiable() {
        let end = NotReady::Failed {
            layer: Some(Layer::Landlock),
            message: "landlock: ENOSYS".into(),
        };
        assert!(
            matches!(decode_failure(end), SandboxError::Unsatisfiable { layer: Layer::Landlock, cause, .. } if cause == "landlock: ENOSYS")
        );
    }

    #[test]
    fn a_failed_step_without_a_protection_layer_is_a_spawn_failure() {
        let end = NotReady::Failed {
            layer: Some(Layer::MountNamespace),
            message: "filesystem view: ENOENT".into(),
        };
        assert_eq!(
            spawn_message(decode_failure(end)),
            "filesystem view: ENOENT"
        );
        let end = NotReady::Failed {
            layer: None,
            message: "nosuch: No such file or directory".into(),
        };
        assert_eq!(
            spawn_message(decode_failure(end)),
            "nosuch: No such file or directory"
        );
    }

    #[test]
    fn an_unexpected_message_is_a_spawn_failure() {
        assert_eq!(
            spawn_message(decode_failure(NotReady::Unexpected)),
            "unexpected message from the zone"
        );
    }
}
