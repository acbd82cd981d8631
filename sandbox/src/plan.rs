//! What the supervisor hands to the zone init (the `Plan`, sent as one JSON message over an
//! inherited SOCK_SEQPACKET socket) and what the zone init answers (`Msg`). Everything in the plan
//! is already validated and resolved by the supervisor; the zone init only executes it.

use crate::error::Layer;
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
/// stdin, stdout and stderr, then the mount trees `Bind::tree` indexes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub binds: Vec<Bind>,
    /// Absolute zone paths (existing, symlink-free) re-bound read-only.
    pub protected: Vec<(PathBuf, PathBuf)>,
    pub hidden: Vec<PathBuf>,
    /// Overlays mounted after the grants (layer paths canonical, symlink-free).
    pub overlays: Vec<OverlayMount>,
    pub tmp_size: u64,
    pub hostname: String,
    pub listener_port: Option<u16>,
    pub landlock: Option<LandlockPlan>,
    pub seccomp_extra_deny: Vec<String>,
    pub limits: Limits,
    pub cwd: PathBuf,
    pub argv: Vec<Vec<u8>>,
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Messages from the zone to the supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Msg {
    /// The command was executed; a listener descriptor travels with this message when asked for.
    Ready { listener_port: Option<u16> },
    /// Setup failed (the layer, when a protection could not be applied).
    Failed { layer: Option<Layer>, errno: Option<i32>, message: String },
    /// The command exited with this code.
    Exited { code: i32 },
    /// The command was killed by this signal.
    Signaled { signal: i32 },
}

/// Most descriptors sent with one message.
pub const MAX_FDS: usize = 16;

/// Send one message, with descriptors (at most `MAX_FDS`).
pub fn send(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    if fds.len() > MAX_FDS {
        return Err(std::io::Error::other("too many descriptors for one message"));
    }
    let iov = [std::io::IoSlice::new(bytes)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(sock, &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None).map_err(std::io::Error::from)?;
    Ok(())
}

/// Largest message accepted (a plan carries argv and environment).
const MAX_MESSAGE: usize = 16 << 20;

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
        return Err(std::io::Error::other(format!("message of {len} bytes is too large")));
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
