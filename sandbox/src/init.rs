//! The zone side: the entry point of the zone init executable (`loopexec-zone-init`,
//! `init_exe.rs`), from the zone init's first instruction after its exec to the command's execve.
//! Its `main` calls [`run_if_zone_init`] before anything else, while the process is fresh and
//! single-threaded; when the supervisor started us as a zone init we never return (loopexec's own
//! `main` calls it too, for the doctor's namespace probe). Two processes run here: the zone init (pid 1: reads
//! the plan, builds the filesystem view with `mounts`, forks the command, reports `Ready`, reaps,
//! reports how the command ended) and the command (its own steps, then execve). The order of
//! every step, supervisor and zone side, is described once in docs/zones.md ("The native zone's
//! setup sequence"); the messages and exit codes in `plan.rs`.

use crate::error::Layer;
use crate::plan::{self, CommandFailure, CommandReport, Msg, Plan, SETUP_FAILED_EXIT};
use crate::{
    evidence, landlock_rules, mounts, netns, outside_reach, privileges, seccomp_filter, sys, timens,
};
use nix::sched::CloneFlags;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

pub use crate::plan::{ENV_MARKER, PLAN_FD, PROBE_MARKER};

/// The doctor's live probe: can this user create the zone's namespaces and map its ids?
/// Exits 0 on success, else with the errno of the failing step (never returns).
fn probe_namespaces() -> ! {
    let (uid, gid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    let code = match enter_namespaces().and_then(|_| write_id_maps(uid, gid)) {
        Ok(()) => 0,
        Err((_, errno, _)) => errno.unwrap_or(1).clamp(1, 125),
    };
    unsafe { libc::_exit(code) }
}

/// Call first in `main`. Returns only when this process is not a zone init.
pub fn run_if_zone_init() {
    if std::env::var_os(PROBE_MARKER).is_some() {
        probe_namespaces();
    }
    if std::env::var_os(ENV_MARKER).is_none() {
        return;
    }
    let sock = unsafe { OwnedFd::from_raw_fd(PLAN_FD) };
    let code = match read_plan(&sock).and_then(|(plan, trees)| {
        let trees = take_stdio(trees)?;
        close_stray_descriptors(&trees)?;
        zone_init(&sock, &plan, trees)
    }) {
        Ok(code) => code,
        Err((layer, errno, message)) => {
            report(
                &sock,
                &Msg::Failed {
                    layer,
                    errno,
                    message,
                },
            );
            SETUP_FAILED_EXIT
        }
    };
    unsafe { libc::_exit(code) }
}

type StepError = (Option<Layer>, Option<i32>, String);

fn fail(layer: Option<Layer>, what: &str, e: std::io::Error) -> StepError {
    (layer, e.raw_os_error(), format!("{what}: {e}"))
}

fn report(sock: &OwnedFd, msg: &Msg) {
    if let Ok(bytes) = serde_json::to_vec(msg) {
        let _ = plan::send(sock.as_raw_fd(), &bytes, &[]);
    }
}

/// The plan (from the sealed memfd that comes first), and the descriptors sent after it (stdio,
/// then the detached mount trees).
fn read_plan(sock: &OwnedFd) -> Result<(Plan, Vec<OwnedFd>), StepError> {
    let (message, mut fds) = plan::recv(sock, false)
        .map_err(|e| fail(None, "read plan", e))?
        .ok_or((None, None, "supervisor closed the plan socket".to_string()))?;
    if message != plan::PLAN_IN_MEMFD || fds.is_empty() {
        return Err((None, None, "the plan message carries no plan".to_string()));
    }
    let bytes = plan::read_plan_memfd(fds.remove(0)).map_err(|e| fail(None, "read plan", e))?;
    let trees = fds;
    let plan =
        serde_json::from_slice(&bytes).map_err(|e| (None, None, format!("malformed plan: {e}")))?;
    Ok((plan, trees))
}

/// Put the first three descriptors sent with the plan (the command's stdin, stdout, stderr) on
/// fds 0-2, where the command inherits them; return the rest (the mount trees).
fn take_stdio(mut fds: Vec<OwnedFd>) -> Result<Vec<OwnedFd>, StepError> {
    if fds.len() < 3 {
        return Err((
            None,
            None,
            "the plan came without the command's stdin, stdout and stderr".into(),
        ));
    }
    let trees = fds.split_off(3);
    for (target, fd) in fds.iter().enumerate() {
        // dup2 leaves the copy without close-on-exec; the received descriptor closes when dropped.
        if unsafe { libc::dup2(fd.as_raw_fd(), target as RawFd) } < 0 {
            return Err(fail(None, "stdio", std::io::Error::last_os_error()));
        }
    }
    Ok(trees)
}

/// Close every descriptor above the plan socket except the mount trees we were sent.
fn close_stray_descriptors(keep: &[OwnedFd]) -> Result<(), StepError> {
    let mut keep: Vec<u32> = keep.iter().map(|f| f.as_raw_fd() as u32).collect();
    keep.sort_unstable();
    let mut first = PLAN_FD as u32 + 1;
    for k in keep {
        if k > first {
            sys::close_range(first, k - 1).map_err(|e| fail(None, "close_range", e))?;
        }
        first = first.max(k + 1);
    }
    sys::close_range_from(first, false).map_err(|e| fail(None, "close_range", e))
}

/// The doctor's probe only: the namespaces a zone gets, created by unshare from a fresh process.
fn enter_namespaces() -> Result<(), StepError> {
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| {
        fail(
            Some(Layer::UserNamespace),
            "unshare(CLONE_NEWUSER)",
            e.into(),
        )
    })?;
    nix::sched::unshare(crate::spawn::NAMESPACES.difference(CloneFlags::CLONE_NEWUSER)).map_err(
        |e| {
            fail(
                Some(Layer::MountNamespace),
                "unshare(mount, pid, net, ipc, uts, cgroup)",
                e.into(),
            )
        },
    )
}

/// The doctor's probe only: map our uid/gid to the same numbers inside.
fn write_id_maps(uid: u32, gid: u32) -> Result<(), StepError> {
    let w = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| fail(Some(Layer::UserNamespace), file, e))
    };
    w("/proc/self/setgroups", "deny".into())?;
    w("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    w("/proc/self/gid_map", format!("{gid} {gid} 1"))
}

fn zone_init(sock: &OwnedFd, plan: &Plan, trees: Vec<OwnedFd>) -> Result<i32, StepError> {
    // The namespace's no-route counters, opened while the host's /proc is still in view; read
    // again when the command has ended.
    let counters = outside_reach::Counters::open();
    // The time namespace of the children (the command) first, while /proc/self is still ours:
    // once non-dumpable, its files belong to the host's root and `timens_offsets` cannot be opened.
    // The init forks nothing before the command, and a time namespace holds only children.
    if let Some(offset_s) = plan.clock_offset_s {
        timens::offset_for_children(offset_s)
            .map_err(|e| fail(None, "time namespace (clock offset)", e))?;
    }
    // pid 1 keeps its namespace capabilities: nothing in the zone may open its /proc/1/mem.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(fail(
            None,
            "PR_SET_DUMPABLE",
            std::io::Error::last_os_error(),
        ));
    }
    mounts::build_root(plan, trees)
        .map_err(|e| fail(Some(Layer::MountNamespace), "filesystem view", e))?;
    nix::unistd::sethostname(&plan.hostname)
        .map_err(|e| fail(Some(Layer::IpcUtsNamespaces), "sethostname", e.into()))?;
    netns::bring_up_loopback().map_err(|e| fail(Some(Layer::NetNamespace), "loopback up", e))?;
    let listener = match plan.listener_port {
        Some(port) => Some(
            netns::listen(port)
                .map_err(|e| fail(Some(Layer::NetNamespace), "proxy listener", e))?,
        ),
        None => None,
    };
    let port = listener
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.port());
    let (status_r, status_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| fail(None, "pipe", e.into()))?;
    let child = match unsafe { fork() }.map_err(|e| fail(None, "fork command", e.into()))? {
        ForkResult::Child => {
            drop(status_r);
            let failure = command(plan, port, &status_w);
            write_report(&status_w, &CommandReport::Failed(failure));
            unsafe { libc::_exit(SETUP_FAILED_EXIT) }
        }
        ForkResult::Parent { child } => child,
    };
    drop(status_w);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match nix::unistd::read(status_r.as_raw_fd(), &mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(nix::Error::EINTR) => continue,
            Err(_) => break,
        }
    }
    let mut evidence = None;
    let mut self_test = None;
    let mut failure = None;
    for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<CommandReport>(line) {
            Ok(CommandReport::Evidence(e)) => evidence = Some(e),
            Ok(CommandReport::SelfTest(outcomes)) => self_test = Some(outcomes),
            Ok(CommandReport::Failed(f)) => failure = Some(f),
            Err(_) => failure = Some((None, "command setup failed".into())),
        }
    }
    if let Some((layer, message)) = failure {
        let _ = waitpid(child, None);
        return Err((layer, None, message));
    }
    let ready = serde_json::to_vec(&Msg::Ready {
        listener_port: port,
        evidence,
        self_test,
    })
    .unwrap_or_default();
    let fds: Vec<RawFd> = listener.iter().map(|l| l.as_raw_fd()).collect();
    plan::send(sock.as_raw_fd(), &ready, &fds).map_err(|e| fail(None, "report ready", e))?;
    drop(listener);
    Ok(reap_until(sock, child, counters.as_ref()))
}

/// Reap every child (orphans are re-parented to us) until the command itself ends; then report
/// what the zone tried to send beyond its namespace, and how the command ended.
fn reap_until(sock: &OwnedFd, command: Pid, counters: Option<&outside_reach::Counters>) -> i32 {
    let report_attempts = || {
        if let Some(attempts) = counters.and_then(outside_reach::Counters::since_open) {
            report(sock, &Msg::OutsideAttempts(attempts));
        }
    };
    loop {
        match waitpid(None::<Pid>, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == command => {
                report_attempts();
                report(sock, &Msg::Exited { code });
                return code;
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == command => {
                report_attempts();
                report(sock, &Msg::Signaled { signal: sig as i32 });
                return 128 + sig as i32;
            }
            Ok(_) | Err(nix::Error::EINTR) => continue,
            Err(_) => return 127,
        }
    }
}

/// One line to the zone init on the command's status pipe.
fn write_report(status: &OwnedFd, report: &CommandReport) {
    let Ok(mut line) = serde_json::to_vec(report) else {
        return;
    };
    line.push(b'\n');
    let mut rest = line.as_slice();
    while !rest.is_empty() {
        match nix::unistd::write(status, rest) {
            Ok(0) => return,
            Ok(n) => rest = &rest[n..],
            Err(nix::Error::EINTR) => continue,
            Err(_) => return,
        }
    }
}

/// The command's own steps; returns only on failure. Just before execve it reads back what it
/// runs with and sends that evidence to the zone init on `status`.
fn command(plan: &Plan, listener_port: Option<u16>, status: &OwnedFd) -> CommandFailure {
    macro_rules! step {
        ($layer:expr, $what:expr, $e:expr) => {
            if let Err(err) = $e {
                return ($layer, format!("{}: {}", $what, err));
            }
        };
    }
    step!(None, "setsid", nix::unistd::setsid());
    step!(None, "signal dispositions", reset_signals());
    step!(
        None,
        "PR_SET_PDEATHSIG",
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
    );
    step!(Some(Layer::Rlimits), "rlimits", set_rlimits(plan));
    step!(
        None,
        format!("chdir {}", plan.cwd.display()),
        nix::unistd::chdir(&plan.cwd)
    );
    step!(None, "close_range", sys::close_range_from(3, true));
    step!(
        Some(Layer::NoNewPrivs),
        "no_new_privs",
        privileges::set_no_new_privs()
    );
    let mut landlock = None;
    if let Some(ll) = &plan.landlock {
        match landlock_rules::restrict(ll, listener_port) {
            Ok(applied) => landlock = Some(applied),
            Err(e) => return (Some(Layer::Landlock), format!("landlock: {e}")),
        }
    }
    step!(
        Some(Layer::Capabilities),
        "capabilities",
        privileges::drop_all_capabilities()
    );
    let programs = match seccomp_filter::build(&plan.seccomp_extra_deny) {
        Ok(p) => p,
        Err(e) => return (Some(Layer::Seccomp), format!("seccomp filter: {e}")),
    };
    let argv: Vec<CString> = match plan.argv.iter().map(|a| CString::new(a.clone())).collect() {
        Ok(v) => v,
        Err(_) => return (None, "argument contains a NUL byte".into()),
    };
    // check_spec refused a NUL in the environment already; never drop a variable silently.
    let envp: Vec<CString> = match plan
        .env
        .iter()
        .map(|(k, v)| CString::new([k.as_slice(), b"=", v.as_slice()].concat()))
        .collect()
    {
        Ok(v) => v,
        Err(_) => return (None, "an environment variable contains a NUL byte".into()),
    };
    let Some(first) = plan.argv.first() else {
        return (None, "empty command".into());
    };
    let candidates = resolve(first, &plan.env);
    step!(
        Some(Layer::Seccomp),
        "seccomp",
        seccomp_filter::install(&programs)
    );
    let readback = evidence::read_in_zone(landlock, evidence::seccomp_programs(&programs));
    write_report(status, &CommandReport::Evidence(Box::new(readback)));
    if let Some(probe) = &plan.self_test {
        write_report(
            status,
            &CommandReport::SelfTest(crate::self_test::run(probe)),
        );
        unsafe { libc::_exit(0) }
    }
    let mut last = nix::Error::ENOENT;
    for path in &candidates {
        match nix::unistd::execve(path, &argv, &envp) {
            Err(e) => last = if e == nix::Error::ENOENT { last } else { e },
            Ok(_) => unreachable_exec(),
        }
    }
    (
        None,
        format!("{}: {}", String::from_utf8_lossy(first), last.desc()),
    )
}

fn unreachable_exec() -> ! {
    unsafe { libc::_exit(127) }
}

/// `argv[0]` as given when it contains a slash, else every PATH entry (zone environment's PATH).
fn resolve(arg0: &[u8], env: &[(Vec<u8>, Vec<u8>)]) -> Vec<CString> {
    if arg0.contains(&b'/') {
        return CString::new(arg0.to_vec()).into_iter().collect();
    }
    let path = env
        .iter()
        .find(|(k, _)| k == b"PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| b"/usr/local/bin:/usr/bin:/bin".to_vec());
    path.split(|&b| b == b':')
        .filter(|d| !d.is_empty())
        .filter_map(|d| {
            let full = std::path::Path::new(OsStr::from_bytes(d)).join(OsStr::from_bytes(arg0));
            CString::new(full.as_os_str().as_bytes().to_vec()).ok()
        })
        .collect()
}

/// The Rust runtime ignores SIGPIPE, and callers may ignore real-time signals; ignored
/// dispositions survive execve. Restore the default for every signal 1..=64 (through the raw
/// syscall: libc refuses the two real-time signals it reserves) and unblock them all.
fn reset_signals() -> nix::Result<()> {
    // The kernel's `struct sigaction` (an 8-byte mask, linux-raw-sys's generated UAPI type): libc's
    // `sigaction` is glibc's userspace layout (a 128-byte mask), and nix goes through libc's
    // wrapper, which refuses the reserved real-time signals.
    use linux_raw_sys::general::{kernel_sigaction as KernelSigaction, kernel_sigset_t};
    // SIG_DFL is the null handler.
    let default = KernelSigaction {
        sa_handler_kernel: None,
        sa_flags: 0,
        sa_restorer: None,
        sa_mask: kernel_sigset_t { sig: [0] },
    };
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let rc = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                &default as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                std::mem::size_of::<kernel_sigset_t>(),
            )
        };
        if rc != 0 {
            return Err(nix::Error::last());
        }
    }
    nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    )
}

fn set_rlimits(plan: &Plan) -> nix::Result<()> {
    use nix::sys::resource::{setrlimit, Resource};
    setrlimit(
        Resource::RLIMIT_NOFILE,
        plan.limits.open_files,
        plan.limits.open_files,
    )?;
    setrlimit(
        Resource::RLIMIT_FSIZE,
        plan.limits.file_size,
        plan.limits.file_size,
    )?;
    setrlimit(Resource::RLIMIT_CORE, plan.limits.core, plan.limits.core)
}
