//! Creating processes in new namespaces with clone3(2), between clone and exec: the zone's pid 1
//! (straight into its user, mount, pid, net, ipc, uts and cgroup namespaces and its cgroup), and
//! the short-lived holder of a user namespace used only to idmap a mount.
//!
//! The supervisor may be multi-threaded, so between clone3 and execve a child only makes
//! async-signal-safe system calls on memory prepared before the clone.

use crate::cgroup::CgroupEntry;
use crate::error::{Layer, SandboxError};
use crate::init::{ENV_MARKER, PLAN_FD};
use crate::preflight;
use nix::sched::CloneFlags;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The namespaces of a zone.
pub const NAMESPACES: CloneFlags = CloneFlags::CLONE_NEWUSER
    .union(CloneFlags::CLONE_NEWNS)
    .union(CloneFlags::CLONE_NEWPID)
    .union(CloneFlags::CLONE_NEWNET)
    .union(CloneFlags::CLONE_NEWIPC)
    .union(CloneFlags::CLONE_NEWUTS)
    .union(CloneFlags::CLONE_NEWCGROUP);

/// The zone's pid 1, started but held before its exec until its id maps are written.
pub(crate) struct Cloned {
    pub pid: i32,
    pub pidfd: OwnedFd,
    pub sock: OwnedFd,
    release: OwnedFd,
}

#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

impl CloneArgs {
    /// `clone3` arguments like fork(2) with `flags`: SIGCHLD on exit, no new stack, nothing else.
    fn fork_like(flags: u64) -> CloneArgs {
        CloneArgs {
            flags,
            pidfd: 0,
            child_tid: 0,
            parent_tid: 0,
            exit_signal: libc::SIGCHLD as u64,
            stack: 0,
            stack_size: 0,
            tls: 0,
            set_tid: 0,
            set_tid_size: 0,
            cgroup: 0,
        }
    }
}
const CLONE_PIDFD: u64 = 0x1000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// clone3(2) the zone init straight into new user, mount, pid, net, ipc, uts and cgroup
/// namespaces (and, on cgroup v2, straight into the zone cgroup). Between clone and exec the
/// child only makes async-signal-safe system calls: it enters the cgroup (v1), puts /dev/null on
/// its stdio (the command's own stdio travels with the plan) and the plan socket on fd 3, arms the parent-death signal, waits until the supervisor
/// has written its id maps, (root callers) becomes the zone uid/gid, raises its namespace
/// capabilities into the ambient set so they survive the exec of a non-root uid, and execs
/// /proc/self/exe.
pub(crate) fn clone_zone_init(drop_to: Option<(u32, u32)>, entry: &CgroupEntry) -> Result<Cloned, SandboxError> {
    let (cgroup_dir, task_files): (Option<&OwnedFd>, &[OwnedFd]) = match entry {
        CgroupEntry::V2Dir(d) => (Some(d), &[]),
        CgroupEntry::V1Tasks(t) => (None, t.as_slice()),
        CgroupEntry::None => (None, &[]),
    };
    // Every descriptor the child reads from is first copied above the numbers it dup2()s onto
    // (0-3), so that no dup2 in the child can overwrite a source it still needs.
    let high = |fd: RawFd| -> Result<OwnedFd, SandboxError> {
        let r = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
        if r < 0 {
            return Err(SandboxError::io("fcntl(F_DUPFD_CLOEXEC)", std::io::Error::last_os_error()));
        }
        Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(r) })
    };
    let task_files: Vec<OwnedFd> = task_files.iter().map(|f| high(f.as_raw_fd())).collect::<Result<_, _>>()?;
    let mut tasks: [RawFd; 8] = [-1; 8];
    if task_files.len() > tasks.len() {
        return Err(SandboxError::Spawn("too many cgroup controllers".into()));
    }
    for (slot, f) in tasks.iter_mut().zip(&task_files) {
        *slot = f.as_raw_fd();
    }
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
        .map_err(|e| SandboxError::errno("socketpair", e))?;
    let theirs = high(theirs.as_raw_fd())?;
    let (hold_r, hold_w) = {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| SandboxError::errno("pipe", e))?;
        (high(r.as_raw_fd())?, high(w.as_raw_fd())?) // the low originals close here
    };
    let null = high(std::fs::File::open("/dev/null").map_err(|e| SandboxError::io("/dev/null", e))?.as_raw_fd())?;
    let null_raw = null.as_raw_fd();
    let exe = std::ffi::CString::new("/proc/self/exe").map_err(|_| SandboxError::Spawn("path".into()))?;
    let arg0 = std::ffi::CString::new("loopexec-zone-init").map_err(|_| SandboxError::Spawn("arg".into()))?;
    let marker = std::ffi::CString::new(format!("{ENV_MARKER}={PLAN_FD}")).map_err(|_| SandboxError::Spawn("env".into()))?;
    let argv = [arg0.as_ptr(), std::ptr::null()];
    let envp = [marker.as_ptr(), std::ptr::null()];
    let (sock_raw, hold_raw, hold_w_raw) = (theirs.as_raw_fd(), hold_r.as_raw_fd(), hold_w.as_raw_fd());
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        pidfd: &mut pidfd as *mut RawFd as u64,
        cgroup: cgroup_dir.map(|d| d.as_raw_fd() as u64).unwrap_or(0),
        ..CloneArgs::fork_like(NAMESPACES.bits() as u64 | CLONE_PIDFD | if cgroup_dir.is_some() { CLONE_INTO_CGROUP } else { 0 })
    };
    // Like fork: the child continues here on a copy of our memory (no CLONE_VM).
    let ret = unsafe { libc::syscall(libc::SYS_clone3, &mut args as *mut CloneArgs, std::mem::size_of::<CloneArgs>()) };
    if ret == 0 {
        // Async-signal-safe only from here to execve.
        let code = unsafe {
            // First (before any dup2 reuses descriptor numbers), cgroup v1: move ourselves (one
            // thread, "0" = the writer) into every controller of the zone cgroup; a thread moving
            // itself skips the global threadgroup lock and its RCU grace period.
            for fd in tasks.iter().filter(|fd| **fd >= 0) {
                if libc::write(*fd, b"0".as_ptr() as *const libc::c_void, 1) != 1 {
                    libc::_exit(119);
                }
            }
            for target in 0..3 {
                if libc::dup2(null_raw, target) < 0 {
                    libc::_exit(120);
                }
            }
            if libc::dup2(sock_raw, PLAN_FD) < 0 {
                libc::_exit(121);
            }
            // Our copy of the write end must go, or a dead supervisor would leave us blocked.
            libc::close(hold_w_raw);
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                libc::_exit(122);
            }
            let mut byte = 0u8;
            if libc::read(hold_raw, &mut byte as *mut u8 as *mut libc::c_void, 1) != 1 {
                libc::_exit(123); // the supervisor died or gave up before mapping our ids
            }
            if let Some((uid, gid)) = drop_to {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresgid(gid, gid, gid) != 0
                    || libc::setresuid(uid, uid, uid) != 0
                {
                    libc::_exit(124);
                }
            }
            let mut head = CapHeader { version: 0x2008_0522, pid: 0 };
            let mut data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
            if libc::syscall(libc::SYS_capget, &mut head as *mut CapHeader, data.as_mut_ptr()) != 0 {
                libc::_exit(125);
            }
            for d in data.iter_mut() {
                d.inheritable = d.permitted;
            }
            if libc::syscall(libc::SYS_capset, &mut head as *mut CapHeader, data.as_ptr()) != 0 {
                libc::_exit(125);
            }
            for cap in 0..64 {
                libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE, cap, 0, 0);
            }
            // Again, after every credential change (a change of uid clears it).
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                libc::_exit(122);
            }
            libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr());
            126
        };
        unsafe { libc::_exit(code) }
    }
    if ret < 0 {
        let e = nix::Error::last();
        let (cause, fix) = userns_denied(e);
        return Err(SandboxError::Unsatisfiable { layer: Layer::UserNamespace, cause, fix });
    }
    drop((theirs, hold_r, null));
    Ok(Cloned {
        pid: ret as i32,
        pidfd: unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(pidfd) },
        sock: ours,
        release: hold_w,
    })
}

fn userns_denied(e: nix::Error) -> (String, String) {
    let cause = format!("clone(CLONE_NEWUSER | other namespaces): {e}");
    if preflight::probe().apparmor_restrict_unprivileged_userns == Some(true) {
        let m = preflight::apparmor_missing();
        (format!("{cause}; {}", m.cause), m.fix)
    } else {
        (cause, "allow user namespaces (user.max_user_namespaces > 0; no LSM or container seccomp policy blocking clone(CLONE_NEWUSER)); `loopexec doctor` checks this host".into())
    }
}

/// Map the zone uid/gid to the same numbers inside its user namespace, then let it exec.
pub(crate) fn map_ids_and_release(cloned: &Cloned, uid: u32, gid: u32, root: bool) -> Result<(), SandboxError> {
    let w = |file: &str, text: String| {
        std::fs::write(format!("/proc/{}/{file}", cloned.pid), text).map_err(|e| {
            let (cause, fix) = userns_denied(nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EPERM)));
            SandboxError::Unsatisfiable { layer: Layer::UserNamespace, cause: format!("writing {file}: {cause}"), fix }
        })
    };
    if !root {
        w("setgroups", "deny".into())?;
    }
    w("uid_map", format!("{uid} {uid} 1"))?;
    w("gid_map", format!("{gid} {gid} 1"))?;
    nix::unistd::write(&cloned.release, &[1u8]).map_err(|e| SandboxError::errno("release the zone init", e))?;
    Ok(())
}

/// A user namespace mapping `inside_uid` -> `outside_uid` (and the gids), held by a short-lived
/// child that only waits on a pipe between clone and exit.
pub(crate) fn idmap_userns(inside_uid: u32, outside_uid: u32, inside_gid: u32, outside_gid: u32) -> std::io::Result<OwnedFd> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let mut args = CloneArgs::fork_like(CloneFlags::CLONE_NEWUSER.bits() as u64);
    let (r_raw, w_raw) = (r.as_raw_fd(), w.as_raw_fd());
    let ret = unsafe { libc::syscall(libc::SYS_clone3, &mut args as *mut CloneArgs, std::mem::size_of::<CloneArgs>()) };
    if ret == 0 {
        // Async-signal-safe only: wait until the supervisor closes the pipe, then leave.
        unsafe {
            libc::close(w_raw);
            let mut b = 0u8;
            libc::read(r_raw, &mut b as *mut u8 as *mut libc::c_void, 1);
            libc::_exit(0);
        }
    }
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let pid = ret as i32;
    let result = (|| {
        std::fs::write(format!("/proc/{pid}/uid_map"), format!("{inside_uid} {outside_uid} 1"))?;
        std::fs::write(format!("/proc/{pid}/gid_map"), format!("{inside_gid} {outside_gid} 1"))?;
        std::fs::File::open(format!("/proc/{pid}/ns/user")).map(OwnedFd::from)
    })();
    drop((r, w));
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    result
}
