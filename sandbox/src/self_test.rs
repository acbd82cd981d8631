//! The zone self-test (`self_test = true`, `run --self-test`): instead of executing its command,
//! a zone's command process, with every protection applied exactly as it would be at its execve,
//! tries a handful of operations a zone must not be able to do, and reports each one's outcome
//! (the errno it failed with, or that it succeeded) to the supervisor with its `Ready`. A probe
//! operation that succeeds means the zone does not hold: the caller stops before any agent runs.
//! A write outside the grants that succeeded in the zone counts only when the supervisor finds
//! the file on the host ([`settle`]): the zone's own /tmp and mountpoint directories are private.

use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::path::PathBuf;

/// What the supervisor asks a self-testing zone to try.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfTestPlan {
    /// Paths outside the zone's writable grants the probe tries to create (and removes again if
    /// it could).
    pub write_outside: Vec<PathBuf>,
    /// An IPv4 address and port the zone's network may not reach.
    pub connect_to: std::net::SocketAddrV4,
}

/// One forbidden operation and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    /// `write_outside`, `connect`, `ptrace`, `mount`, `setuid_bit`, `unshare_user`.
    pub operation: String,
    /// What it was tried on (a path, an address, a pid), or empty.
    pub target: String,
    /// Always `fail`: every probe operation must fail.
    pub expected: String,
    /// The errno it failed with; None when it succeeded.
    pub errno: Option<i32>,
    /// The errno's name (`EPERM`), or `succeeded`.
    pub observed: String,
    /// A `write_outside` that succeeded in the zone: whether the file reached the host (the
    /// supervisor found it at that path, and removed it). false: the write landed on a layer
    /// private to the zone (its own /tmp, a mountpoint directory), gone with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached_host: Option<bool>,
}

impl ProbeOutcome {
    /// The operation failed, as it must, or had no effect outside the zone.
    pub fn held(&self) -> bool {
        self.errno.is_some() || self.reached_host == Some(false)
    }
}

/// Supervisor side, on `Ready`: each `write_outside` the zone says succeeded is looked for on the
/// host (without following a link) and removed there; the outcome says whether it was found.
pub(crate) fn settle(mut outcomes: Vec<ProbeOutcome>) -> Vec<ProbeOutcome> {
    for o in outcomes
        .iter_mut()
        .filter(|o| o.operation == "write_outside" && o.errno.is_none())
    {
        let path = std::path::Path::new(&o.target);
        let found = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file());
        if found {
            let _ = std::fs::remove_file(path);
        }
        o.reached_host = Some(found);
    }
    outcomes
}

fn outcome(operation: &str, target: String, rc: Result<(), nix::Error>) -> ProbeOutcome {
    let (errno, observed) = match rc {
        Ok(()) => (None, "succeeded".to_string()),
        Err(e) => (Some(e as i32), format!("{e:?}")),
    };
    ProbeOutcome {
        operation: operation.into(),
        target,
        expected: "fail".into(),
        errno,
        observed,
        reached_host: None,
    }
}

fn errno_of(rc: libc::c_long) -> Result<(), nix::Error> {
    if rc < 0 {
        Err(nix::Error::last())
    } else {
        Ok(())
    }
}

/// Try every operation of `plan`, in the calling (fully restricted) process.
pub(crate) fn run(plan: &SelfTestPlan) -> Vec<ProbeOutcome> {
    let mut out = Vec::new();
    for path in &plan.write_outside {
        let rc = CString::new(path.as_os_str().as_encoded_bytes().to_vec())
            .map_err(|_| nix::Error::EINVAL)
            .and_then(|c| {
                let fd = unsafe {
                    libc::open(
                        c.as_ptr(),
                        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                        0o600,
                    )
                };
                errno_of(fd as libc::c_long)?;
                // Left in place: the supervisor looks for it on the host (`settle`).
                unsafe { libc::close(fd) };
                Ok(())
            });
        out.push(outcome("write_outside", path.display().to_string(), rc));
    }
    let addr = plan.connect_to;
    let rc = (|| {
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        errno_of(fd as libc::c_long)?;
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*addr.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let rc = unsafe {
            libc::connect(
                fd,
                &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        let r = errno_of(rc as libc::c_long);
        unsafe { libc::close(fd) };
        r
    })();
    out.push(outcome("connect", addr.to_string(), rc));
    // The zone's pid 1 (its init, the supervisor's child: the supervisor itself is not even
    // visible in the zone's pid namespace).
    let rc =
        errno_of(unsafe { libc::ptrace(libc::PTRACE_ATTACH, 1 as libc::pid_t, 0usize, 0usize) });
    if rc.is_ok() {
        unsafe { libc::ptrace(libc::PTRACE_DETACH, 1 as libc::pid_t, 0usize, 0usize) };
    }
    out.push(outcome("ptrace", "1".into(), rc));
    let rc = (|| {
        let (none, tmp, tmpfs) = (c"none", c"/tmp", c"tmpfs");
        errno_of(unsafe {
            libc::mount(
                none.as_ptr(),
                tmp.as_ptr(),
                tmpfs.as_ptr(),
                0,
                std::ptr::null(),
            )
        } as libc::c_long)?;
        unsafe { libc::umount2(tmp.as_ptr(), libc::MNT_DETACH) };
        Ok(())
    })();
    out.push(outcome("mount", "tmpfs on /tmp".into(), rc));
    // A set-user-id file the zone's own user could execute to gain privileges: the bit is refused.
    let rc = (|| {
        let path = CString::new(format!("/tmp/.loopexec-self-test-{}", std::process::id()))
            .map_err(|_| nix::Error::EINVAL)?;
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
                0o700,
            )
        };
        errno_of(fd as libc::c_long)?;
        let rc = errno_of(unsafe { libc::fchmod(fd, 0o4755) } as libc::c_long);
        unsafe {
            libc::close(fd);
            libc::unlink(path.as_ptr());
        }
        rc
    })();
    out.push(outcome("setuid_bit", "/tmp (fchmod 04755)".into(), rc));
    let rc = errno_of(unsafe { libc::unshare(libc::CLONE_NEWUSER) } as libc::c_long);
    out.push(outcome("unshare_user", String::new(), rc));
    out
}
