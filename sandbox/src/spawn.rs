//! Creating processes in new namespaces with clone3(2), between clone and exec: the zone's pid 1
//! (straight into its user, mount, pid, net, ipc, uts and cgroup namespaces and its cgroup), and
//! the short-lived holder of a user namespace used only to idmap a mount.
//!
//! The supervisor may be multi-threaded, so between clone3 and execve a child only makes
//! async-signal-safe system calls on memory prepared before the clone.

use crate::cgroup::CgroupEntry;
use crate::error::{Layer, SandboxError};
use crate::plan::{PreExecFailure, ENV_MARKER, INIT_ARG0, PLAN_FD};
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

/// `clone3` arguments like fork(2) with `flags`: SIGCHLD on exit, no new stack, nothing else.
pub(crate) fn fork_like(flags: u64) -> libc::clone_args {
    libc::clone_args {
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

/// clone3(2), which neither nix 0.29 nor libc wrap, on fork-like arguments: the child continues
/// on a copy of our memory (no CLONE_VM) and returns 0.
pub(crate) fn clone3(args: &mut libc::clone_args) -> libc::c_long {
    unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args as *mut libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        )
    }
}

/// clone3's `CLONE_INTO_CGROUP` as the kernel defines it (libc's is a `c_int` that overflows), and
/// the capget/capset ABI (linux/capability.h, version 3), which libc does not define; the caps
/// crate's calls allocate, so they cannot run between clone and exec.
use linux_raw_sys::general::{
    __user_cap_data_struct as CapData, __user_cap_header_struct as CapHeader,
    _LINUX_CAPABILITY_VERSION_3, CLONE_INTO_CGROUP,
};

/// Step 4 of docs/zones.md ("The native zone's setup sequence"): clone3(2) the zone init
/// straight into its namespaces (and, on cgroup v2, its cgroup). The child makes only
/// async-signal-safe calls until it executes the zone init executable (`init_exe.rs`, opened before
/// the clone); each of its steps that can fail exits
/// with its own [`PreExecFailure`] code.
pub(crate) fn clone_zone_init(
    init_exe: &OwnedFd,
    drop_to: Option<(u32, u32)>,
    entry: &CgroupEntry,
) -> Result<Cloned, SandboxError> {
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
            return Err(SandboxError::io(
                "fcntl(F_DUPFD_CLOEXEC)",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(r) })
    };
    let task_files: Vec<OwnedFd> = task_files
        .iter()
        .map(|f| high(f.as_raw_fd()))
        .collect::<Result<_, _>>()?;
    let mut tasks: [RawFd; 8] = [-1; 8];
    if task_files.len() > tasks.len() {
        return Err(SandboxError::Spawn("too many cgroup controllers".into()));
    }
    for (slot, f) in tasks.iter_mut().zip(&task_files) {
        *slot = f.as_raw_fd();
    }
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| SandboxError::errno("socketpair", e))?;
    let theirs = high(theirs.as_raw_fd())?;
    let (hold_r, hold_w) = {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| SandboxError::errno("pipe", e))?;
        (high(r.as_raw_fd())?, high(w.as_raw_fd())?) // the low originals close here
    };
    let null = high(
        std::fs::File::open("/dev/null")
            .map_err(|e| SandboxError::io("/dev/null", e))?
            .as_raw_fd(),
    )?;
    let null_raw = null.as_raw_fd();
    let exe = high(init_exe.as_raw_fd())?;
    let exe_raw = exe.as_raw_fd();
    let arg0 = std::ffi::CString::new(INIT_ARG0).map_err(|_| SandboxError::Spawn("arg".into()))?;
    let marker = std::ffi::CString::new(format!("{ENV_MARKER}={PLAN_FD}"))
        .map_err(|_| SandboxError::Spawn("env".into()))?;
    let argv = [arg0.as_ptr(), std::ptr::null()];
    let envp = [marker.as_ptr(), std::ptr::null()];
    let (sock_raw, hold_raw, hold_w_raw) =
        (theirs.as_raw_fd(), hold_r.as_raw_fd(), hold_w.as_raw_fd());
    let mut pidfd: RawFd = -1;
    let mut args = libc::clone_args {
        pidfd: &mut pidfd as *mut RawFd as u64,
        cgroup: cgroup_dir.map(|d| d.as_raw_fd() as u64).unwrap_or(0),
        ..fork_like(
            NAMESPACES.bits() as u64
                | libc::CLONE_PIDFD as u64
                | if cgroup_dir.is_some() {
                    CLONE_INTO_CGROUP
                } else {
                    0
                },
        )
    };
    let ret = clone3(&mut args);
    if ret == 0 {
        // Async-signal-safe only from here to execve.
        let code = unsafe {
            // First (before any dup2 reuses descriptor numbers), cgroup v1: move ourselves (one
            // thread, "0" = the writer) into every controller of the zone cgroup; a thread moving
            // itself skips the global threadgroup lock and its RCU grace period.
            for fd in tasks.iter().filter(|fd| **fd >= 0) {
                if libc::write(*fd, b"0".as_ptr() as *const libc::c_void, 1) != 1 {
                    libc::_exit(PreExecFailure::EnterCgroup.code());
                }
            }
            for target in 0..3 {
                if libc::dup2(null_raw, target) < 0 {
                    libc::_exit(PreExecFailure::NullStdio.code());
                }
            }
            if libc::dup2(sock_raw, PLAN_FD) < 0 {
                libc::_exit(PreExecFailure::PlanSocket.code());
            }
            // Our copy of the write end must go, or a dead supervisor would leave us blocked.
            libc::close(hold_w_raw);
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                libc::_exit(PreExecFailure::ParentDeathSignal.code());
            }
            let mut byte = 0u8;
            if libc::read(hold_raw, &mut byte as *mut u8 as *mut libc::c_void, 1) != 1 {
                libc::_exit(PreExecFailure::NotReleased.code()); // the supervisor died or gave up before mapping our ids
            }
            if let Some((uid, gid)) = drop_to {
                // Raw system calls, not libc's wrappers: glibc's setgroups/setres[ug]id broadcast
                // the change to every thread it knows of and wait for them, and a child cloned
                // from a multi-threaded supervisor (the canary's parallel mutants) has one
                // thread but the parent's thread list: the wrapper waited forever.
                if libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) != 0
                    || libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
                    || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
                {
                    libc::_exit(PreExecFailure::ZoneIds.code());
                }
            }
            let mut head = CapHeader {
                version: _LINUX_CAPABILITY_VERSION_3,
                pid: 0,
            };
            let mut data = [CapData {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            }; 2];
            if libc::syscall(
                libc::SYS_capget,
                &mut head as *mut CapHeader,
                data.as_mut_ptr(),
            ) != 0
            {
                libc::_exit(PreExecFailure::KeepCapabilities.code());
            }
            for d in data.iter_mut() {
                d.inheritable = d.permitted;
            }
            if libc::syscall(libc::SYS_capset, &mut head as *mut CapHeader, data.as_ptr()) != 0 {
                libc::_exit(PreExecFailure::KeepCapabilities.code());
            }
            for cap in 0..64 {
                libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE, cap, 0, 0);
            }
            // Again, after every credential change (a change of uid clears it).
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                libc::_exit(PreExecFailure::ParentDeathSignal.code());
            }
            // The zone init executable, through the descriptor opened before the clone.
            libc::syscall(
                libc::SYS_execveat,
                exe_raw,
                c"".as_ptr(),
                argv.as_ptr(),
                envp.as_ptr(),
                libc::AT_EMPTY_PATH,
            );
            PreExecFailure::ExecInit.code()
        };
        unsafe { libc::_exit(code) }
    }
    if ret < 0 {
        let e = nix::Error::last();
        let (cause, fix) = userns_denied(e);
        return Err(SandboxError::Unsatisfiable {
            layer: Layer::UserNamespace,
            cause,
            fix,
        });
    }
    drop((theirs, hold_r, null, exe));
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
pub(crate) fn map_ids_and_release(
    cloned: &Cloned,
    uid: u32,
    gid: u32,
    root: bool,
) -> Result<(), SandboxError> {
    let w = |file: &str, text: String| {
        std::fs::write(format!("/proc/{}/{file}", cloned.pid), text).map_err(|e| {
            let (cause, fix) = userns_denied(nix::Error::from_raw(
                e.raw_os_error().unwrap_or(libc::EPERM),
            ));
            SandboxError::Unsatisfiable {
                layer: Layer::UserNamespace,
                cause: format!("writing {file}: {cause}"),
                fix,
            }
        })
    };
    if !root {
        w("setgroups", "deny".into())?;
    }
    w("uid_map", format!("{uid} {uid} 1"))?;
    w("gid_map", format!("{gid} {gid} 1"))?;
    nix::unistd::write(&cloned.release, &[1u8])
        .map_err(|e| SandboxError::errno("release the zone init", e))?;
    Ok(())
}

/// A user namespace mapping `inside_uid` -> `outside_uid` (and the gids), held by a short-lived
/// child that only waits on a pipe between clone and exit.
pub(crate) fn idmap_userns(
    inside_uid: u32,
    outside_uid: u32,
    inside_gid: u32,
    outside_gid: u32,
) -> std::io::Result<OwnedFd> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let mut args = fork_like(CloneFlags::CLONE_NEWUSER.bits() as u64);
    let (r_raw, w_raw) = (r.as_raw_fd(), w.as_raw_fd());
    let ret = clone3(&mut args);
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
        std::fs::write(
            format!("/proc/{pid}/uid_map"),
            format!("{inside_uid} {outside_uid} 1"),
        )?;
        std::fs::write(
            format!("/proc/{pid}/gid_map"),
            format!("{inside_gid} {outside_gid} 1"),
        )?;
        std::fs::File::open(format!("/proc/{pid}/ns/user")).map(OwnedFd::from)
    })();
    drop((r, w));
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    result
}
