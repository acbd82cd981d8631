//! The escape suite's harness: compiles the C probes once per test binary, lays out a scene on the
//! host (a granted rw dir next to an ungranted `outside` dir holding secrets), runs one probe in a
//! zone through the real `loopexec sandbox` binary, parses its verdict line, and checks that the
//! host is unchanged afterwards (files outside the grant, leftover processes, cgroups, sysctls,
//! hostname, the loopexec binary).
//!
//! Verdict protocol (see probes/probe.h): one stdout line `BLOCKED|ESCAPED|OK|ERROR <what> <why>`.
//!
//! Runs are serialized by a process-wide lock: exhaustion probes must not overlap, and the
//! before/after host snapshots must not see another test's zone.

#![allow(dead_code)] // each test module uses a different part of the harness

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The loopexec binary under test: `LOOPEXEC_ESCAPE_BIN` (e.g. a release build), else
/// `LOOPEXEC_BIN` (set by ci/test-unprivileged.sh), else the one cargo built for this test.
pub fn loopexec_bin() -> PathBuf {
    std::env::var_os("LOOPEXEC_ESCAPE_BIN")
        .or_else(|| std::env::var_os("LOOPEXEC_BIN"))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_loopexec")))
}

/// The uid/gid a zone runs as when loopexec runs as root (policy `identity.uid_when_root`).
pub const ZONE_ID_WHEN_ROOT: u32 = 60200;

/// Environment variables the harness gives loopexec that must never reach a zone.
pub const SECRET_ENV: &[&str] = &[
    "LOOPEXEC_ESCAPE_SECRET",
    "AWS_SECRET_ACCESS_KEY",
    "GITHUB_TOKEN",
    "SSH_AUTH_SOCK",
    "DBUS_SESSION_BUS_ADDRESS",
];

/// The marker written into every secret file the harness plants outside the grant.
pub const SECRET_CONTENT: &str = "loopexec-escape-secret-7c1f\n";

/// File descriptor numbers the harness leaks (without CLOEXEC) into loopexec.
pub const LEAKED_FILE_FD: i32 = 9;
pub const LEAKED_SOCKET_FD: i32 = 10;

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Base directory for scenes and compiled probes: `LOOPEXEC_ESCAPE_TMPDIR`, else the system temp dir.
fn base_tmp() -> PathBuf {
    std::env::var_os("LOOPEXEC_ESCAPE_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Probes

static PROBES: OnceLock<PathBuf> = OnceLock::new();

/// Statics are never dropped: remove the compiled probes when the test binary exits.
extern "C" fn remove_probes() {
    if let Some(dir) = PROBES.get() {
        let _ = fs::remove_dir_all(dir);
    }
}

/// Compile every probes/*.c (statically, in parallel) into one world-readable temp dir, once.
fn probes() -> &'static Path {
    PROBES.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/escape/probes");
        let dir = tempfile::Builder::new()
            .prefix("loopexec-escape-probes-")
            .tempdir_in(base_tmp())
            .expect("create probe build dir")
            .keep();
        // SAFETY: registers a plain extern "C" function with no captured state.
        unsafe { libc::atexit(remove_probes) };
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod probe dir");
        let mut jobs = Vec::new();
        for entry in fs::read_dir(&src).expect("read probes dir") {
            let path = entry.expect("probe entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("c") {
                continue;
            }
            let name = path
                .file_stem()
                .expect("stem")
                .to_string_lossy()
                .into_owned();
            let out = dir.join(&name);
            let child = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
                .args(["-static", "-O1", "-Wall", "-Wno-unused-result", "-o"])
                .arg(&out)
                .arg(&path)
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn cc (gcc and libc6-dev with libc.a are required)");
            jobs.push((name, child));
        }
        for (name, child) in jobs {
            let out = child.wait_with_output().expect("wait cc");
            assert!(
                out.status.success(),
                "compiling probe {name} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        dir
    })
}

pub fn probe_path(name: &str) -> PathBuf {
    let p = probes().join(name);
    assert!(p.exists(), "no probe named {name}");
    p
}

pub fn probe_dir() -> PathBuf {
    probes().to_path_buf()
}

// ---------------------------------------------------------------------------------------------
// Scene: what exists on the host around one zone

/// `root/` (0755) holds `rw/` (the only grant) and `outside/` (never granted): a secret file, a
/// fake home with ~/.ssh and ~/.aws, a fake state dir with a signing key.
pub struct Scene {
    root: tempfile::TempDir,
    pub rw: PathBuf,
    pub outside: PathBuf,
    pub secret: PathBuf,
    pub home: PathBuf,
    pub state_dir: PathBuf,
}

impl Default for Scene {
    fn default() -> Self {
        Scene::new()
    }
}

impl Scene {
    pub fn new() -> Scene {
        let root = tempfile::Builder::new()
            .prefix("loopexec-escape-")
            .tempdir_in(base_tmp())
            .expect("scene dir");
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).expect("chmod scene");
        let rw = root.path().join("rw");
        let outside = root.path().join("outside");
        fs::create_dir(&rw).expect("mkdir rw");
        fs::create_dir(&outside).expect("mkdir outside");
        let secret = outside.join("secret");
        fs::write(&secret, SECRET_CONTENT).expect("write secret");
        let home = outside.join("home");
        for (rel, body) in [
            (".ssh/id_ed25519", SECRET_CONTENT),
            (".aws/credentials", SECRET_CONTENT),
        ] {
            let p = home.join(rel);
            fs::create_dir_all(p.parent().expect("parent")).expect("mkdir home");
            fs::write(&p, body).expect("write home secret");
        }
        let state_dir = outside.join("state/loopexec");
        fs::create_dir_all(&state_dir).expect("mkdir state");
        fs::write(state_dir.join("signing.key"), SECRET_CONTENT).expect("write key");
        // Everything world-readable: only the sandbox may stand between a zone and these files.
        for p in [
            &outside,
            &home,
            &home.join(".ssh"),
            &home.join(".aws"),
            &state_dir,
        ] {
            fs::set_permissions(p, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let scene = Scene {
            root,
            rw,
            outside,
            secret,
            home,
            state_dir,
        };
        scene.grant_rw_to_zone(&scene.rw.clone());
        scene
    }

    /// A scene whose writable grant keeps the caller as owner (root in root runs): loopexec then
    /// attaches it through an idmapped mount, the zone seeing itself as the owner.
    pub fn with_caller_owned_grant() -> Scene {
        let scene = Scene::new();
        if is_root() {
            std::os::unix::fs::chown(&scene.rw, Some(0), Some(0)).expect("chown rw to root");
        }
        scene
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Where loopexec keeps its placeholder registry under the `XDG_STATE_HOME` zones are run with.
    pub fn supervisor_registry(&self) -> PathBuf {
        self.outside.join("state/loopexec/placeholders")
    }

    /// As root the zone runs as `ZONE_ID_WHEN_ROOT`: the writable grant must belong to it.
    pub fn grant_rw_to_zone(&self, path: &Path) {
        if is_root() {
            std::os::unix::fs::chown(path, Some(ZONE_ID_WHEN_ROOT), Some(ZONE_ID_WHEN_ROOT))
                .expect("chown rw");
        }
    }

    /// Create a file (and parents) inside the rw grant, owned by the zone's identity.
    pub fn rw_file(&self, rel: &str, body: &str) -> PathBuf {
        let p = self.rw.join(rel);
        let mut dirs = Vec::new();
        let mut d = p.parent().expect("parent").to_path_buf();
        while d != self.rw && !d.exists() {
            dirs.push(d.clone());
            d = d.parent().expect("parent").to_path_buf();
        }
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir in rw");
        fs::write(&p, body).expect("write in rw");
        for dir in dirs {
            self.grant_rw_to_zone(&dir);
        }
        self.grant_rw_to_zone(&p);
        p
    }

    pub fn s(path: &Path) -> String {
        path.to_str().expect("utf-8 path").to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// Verdicts and runs

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Blocked {
        what: String,
        why: String,
    },
    Escaped {
        what: String,
        detail: String,
    },
    Ok {
        what: String,
        detail: String,
    },
    Error {
        what: String,
        detail: String,
    },
    /// No verdict line at all (the probe was killed, or the zone never started).
    Missing,
}

fn parse_verdict(stdout: &str) -> Verdict {
    for line in stdout.lines().rev() {
        let mut parts = line.splitn(3, ' ');
        let (kind, what, rest) = (parts.next(), parts.next(), parts.next());
        let (Some(kind), Some(what)) = (kind, what) else {
            continue;
        };
        let what = what.to_string();
        let rest = rest.unwrap_or("").to_string();
        return match kind {
            "BLOCKED" => Verdict::Blocked { what, why: rest },
            "ESCAPED" => Verdict::Escaped { what, detail: rest },
            "OK" => Verdict::Ok { what, detail: rest },
            "ERROR" => Verdict::Error { what, detail: rest },
            _ => continue,
        };
    }
    Verdict::Missing
}

/// The operator's terminal as the harness sees it: device mode and termios settings.
fn terminal_state(slave: &OwnedFd) -> (u32, String) {
    use std::os::unix::fs::MetadataExt;
    let mode = fs::File::from(slave.try_clone().expect("dup pty slave"))
        .metadata()
        .map(|m| m.mode() & 0o7777)
        .unwrap_or(0);
    let settings = nix::sys::termios::tcgetattr(slave)
        .map(|t| {
            format!(
                "{:?} {:?} {:?}",
                t.local_flags, t.input_flags, t.output_flags
            )
        })
        .unwrap_or_default();
    (mode, settings)
}

pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stdout_bytes: u64,
    pub stderr: String,
    pub verdict: Verdict,
    pub elapsed: Duration,
    /// Highest VmRSS (KiB) of the loopexec supervisor seen while it ran.
    pub supervisor_max_rss_kib: u64,
    /// Cgroups created during the run that were still there 3 s after it (then removed).
    pub leaked_cgroups: Vec<PathBuf>,
    /// With `stderr_pty`: how the operator's terminal (the pty the harness handed loopexec)
    /// differs after the run (settings, device mode); empty when unchanged.
    pub terminal_changes: Vec<String>,
}

impl Run {
    fn context(&self) -> String {
        format!(
            "status={:?} verdict={:?}\n--- stdout (first 64 KiB) ---\n{}\n--- stderr ---\n{}",
            self.status, self.verdict, self.stdout, self.stderr
        )
    }

    /// The attempt failed, with one of the given reasons (errno names such as "EPERM", signal
    /// names such as "SIGSYS", or a fact the probe prints; a reason matches as a prefix).
    pub fn assert_blocked(&self, what: &str, reasons: &[&str]) {
        match &self.verdict {
            Verdict::Blocked { what: w, why } if w == what => assert!(
                reasons.iter().any(|r| why.starts_with(r)),
                "{what}: blocked, but by {why}, expected one of {reasons:?}\n{}",
                self.context()
            ),
            Verdict::Escaped { .. } => panic!("ESCAPE: {what}\n{}", self.context()),
            _ => panic!("{what}: no BLOCKED verdict\n{}", self.context()),
        }
    }

    pub fn assert_ok(&self, what: &str) {
        assert!(
            matches!(&self.verdict, Verdict::Ok { what: w, .. } if w == what),
            "{what}: sanity attempt did not work in the zone\n{}",
            self.context()
        );
    }

    pub fn assert_escaped(&self, what: &str) {
        assert!(
            matches!(&self.verdict, Verdict::Escaped { what: w, .. } if w == what),
            "{what}: the host control did not detect the attack, so the probe proves nothing\n{}",
            self.context()
        );
    }

    /// The process was ended by `sig` (loopexec reports a signalled command as 128+sig).
    pub fn ended_by_signal(&self, sig: i32) -> bool {
        self.status.signal() == Some(sig) || self.status.code() == Some(128 + sig)
    }

    /// For a probe that may be either refused or killed by the kernel/sandbox (OOM, seccomp kill).
    pub fn assert_blocked_or_killed(&self, what: &str, reasons: &[&str], signals: &[i32]) {
        if matches!(self.verdict, Verdict::Missing)
            && signals.iter().any(|s| self.ended_by_signal(*s))
        {
            return;
        }
        self.assert_blocked(what, reasons);
    }
}

// ---------------------------------------------------------------------------------------------
// Host state

/// What must be identical before and after a zone ran.
#[derive(Debug, PartialEq, Eq)]
struct HostState {
    /// Every file under the scene's `outside` dir: path -> (mode, size, content hash-ish).
    outside: BTreeMap<PathBuf, (u32, u64, Vec<u8>)>,
    sysctls: BTreeMap<&'static str, String>,
    loopexec_bin: (u64, i64, u32),
    probe_files: BTreeMap<PathBuf, (u32, u64, i64)>,
}

const SYSCTLS: &[&str] = &[
    "/proc/sys/kernel/hostname",
    "/proc/sys/kernel/domainname",
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/kernel/sysrq",
    "/proc/sys/kernel/perf_event_paranoid",
    "/proc/sys/kernel/unprivileged_bpf_disabled",
    "/proc/sys/kernel/modules_disabled",
    "/proc/sys/kernel/kexec_load_disabled",
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/net/ipv4/ping_group_range",
    "/proc/sys/dev/tty/legacy_tiocsti",
    "/proc/sys/user/max_user_namespaces",
];

fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, (u32, u64, Vec<u8>)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(md) = fs::symlink_metadata(&p) else {
            continue;
        };
        let body = if md.is_file() {
            fs::read(&p).unwrap_or_default()
        } else {
            Vec::new()
        };
        out.insert(p.clone(), (md.mode(), md.len(), body));
        if md.is_dir() {
            walk(&p, out);
        }
    }
}

impl HostState {
    fn capture(scene: &Scene) -> HostState {
        let mut outside = BTreeMap::new();
        walk(&scene.outside, &mut outside);
        // The supervisor's own placeholder registry (XDG_STATE_HOME is `outside/state`): loopexec
        // writes it, outside every grant, to collect what a killed supervisor leaves.
        outside.retain(|p, _| !p.starts_with(scene.supervisor_registry()));
        let sysctls = SYSCTLS
            .iter()
            .map(|p| (*p, fs::read_to_string(p).unwrap_or_default()))
            .collect();
        let md = fs::metadata(loopexec_bin()).expect("stat loopexec");
        let mut probe_files = BTreeMap::new();
        for e in fs::read_dir(probe_dir()).expect("probe dir").flatten() {
            if let Ok(m) = e.metadata() {
                probe_files.insert(e.path(), (m.mode(), m.len(), m.mtime()));
            }
        }
        HostState {
            outside,
            sysctls,
            loopexec_bin: (md.len(), md.mtime(), md.mode()),
            probe_files,
        }
    }
}

/// Cgroup directories beneath the cgroups this test process runs in, in every mounted hierarchy.
fn cgroup_dirs() -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let Ok(own) = fs::read_to_string("/proc/self/cgroup") else {
        return out;
    };
    for line in own.lines() {
        let mut f = line.splitn(3, ':');
        let (_, ctrls, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or("/"));
        let mount = match ctrls {
            "" => PathBuf::from("/sys/fs/cgroup/unified"),
            c if c.starts_with("name=") => PathBuf::from(format!("/sys/fs/cgroup/{}", &c[5..])),
            c => PathBuf::from(format!("/sys/fs/cgroup/{c}")),
        };
        let mount = if ctrls.is_empty() && !mount.exists() {
            PathBuf::from("/sys/fs/cgroup")
        } else {
            mount
        };
        let base = mount.join(path.trim_start_matches('/'));
        collect_dirs(&base, 4, &mut out);
    }
    out
}

fn collect_dirs(dir: &Path, depth: u32, out: &mut BTreeSet<PathBuf>) {
    if depth == 0 {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.insert(e.path());
            collect_dirs(&e.path(), depth - 1, out);
        }
    }
}

/// Host pids of processes that belong to a zone of this suite: running a probe binary, running the
/// loopexec binary under test, or mentioning the scene's directory in their argv.
pub fn zone_processes(scene_root: &Path) -> Vec<i32> {
    let me = std::process::id() as i32;
    let probe_dir = probe_dir();
    let bin = loopexec_bin();
    let root = scene_root.as_os_str().as_encoded_bytes().to_vec();
    let mut pids = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return pids;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let exe = fs::read_link(e.path().join("exe")).unwrap_or_default();
        let exe_s = exe.to_string_lossy();
        let exe_s = exe_s.trim_end_matches(" (deleted)");
        let cmdline = fs::read(e.path().join("cmdline")).unwrap_or_default();
        if Path::new(exe_s).starts_with(&probe_dir)
            || Path::new(exe_s) == bin
            || (!root.is_empty() && cmdline.windows(root.len()).any(|w| w == root.as_slice()))
        {
            pids.push(pid);
        }
    }
    pids
}

// ---------------------------------------------------------------------------------------------
// Running a zone

/// A step run while loopexec runs, given its pid.
type During<'a> = Box<dyn FnOnce(i32, &Scene) + 'a>;

pub struct Zone<'a> {
    scene: &'a Scene,
    policy: Option<PathBuf>,
    extra_ro: Vec<PathBuf>,
    env: Vec<(OsString, OsString)>,
    stderr_pty: bool,
    stderr_file: Option<PathBuf>,
    typed: Option<Vec<u8>>,
    stall_stdout: bool,
    timeout: Duration,
    /// Called with loopexec's pid once it runs (e.g. to kill it mid-flight).
    during: Option<During<'a>>,
    check_cgroups: bool,
    remove_leaked_cgroups: bool,
}

impl<'a> Zone<'a> {
    pub fn new(scene: &'a Scene) -> Zone<'a> {
        let env = vec![
            (
                "LOOPEXEC_ESCAPE_SECRET".into(),
                "s3cr3t-escape-value".into(),
            ),
            ("AWS_SECRET_ACCESS_KEY".into(), "AKIAESCAPESUITE".into()),
            ("GITHUB_TOKEN".into(), "ghp_escape_suite".into()),
            (
                "SSH_AUTH_SOCK".into(),
                scene.outside.join("agent.sock").into(),
            ),
            (
                "DBUS_SESSION_BUS_ADDRESS".into(),
                format!("unix:path={}", scene.outside.join("bus").display()).into(),
            ),
            ("HOME".into(), scene.home.clone().into()),
            ("XDG_STATE_HOME".into(), scene.outside.join("state").into()),
        ];
        Zone {
            scene,
            policy: None,
            extra_ro: vec![probe_dir()],
            env,
            stderr_pty: false,
            stderr_file: None,
            typed: None,
            check_cgroups: true,
            remove_leaked_cgroups: true,
            stall_stdout: false,
            timeout: Duration::from_secs(60),
            during: None,
        }
    }

    pub fn policy(mut self, path: &Path) -> Self {
        self.policy = Some(path.to_path_buf());
        self
    }

    /// Add a variable to loopexec's environment.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn ro(mut self, path: &Path) -> Self {
        self.extra_ro.push(path.to_path_buf());
        self
    }

    /// Give loopexec a pseudo-terminal the test owns as stderr (for terminal injection attempts);
    /// stderr is then not captured.
    pub fn stderr_pty(mut self) -> Self {
        self.stderr_pty = true;
        self
    }

    /// With `stderr_pty`: "type" these bytes on the terminal (write them to the pty master) 300 ms
    /// after loopexec started, as an operator would.
    pub fn type_on_pty(mut self, bytes: &[u8]) -> Self {
        self.typed = Some(bytes.to_vec());
        self
    }

    /// Report cgroups the zone left behind in `Run::leaked_cgroups` and leave them in place (the
    /// test removes whatever is still there once it has made its point).
    pub fn keep_leaked_cgroups(mut self) -> Self {
        self.check_cgroups = false;
        self.remove_leaked_cgroups = false;
        self
    }

    /// Give loopexec an existing host file (opened write-only, append) as stderr, like an
    /// operator's `2>>log`; stderr is then not captured.
    pub fn stderr_to_file(mut self, path: &Path) -> Self {
        self.stderr_file = Some(path.to_path_buf());
        self
    }

    /// Report cgroups the zone left behind in `Run::leaked_cgroups` (and remove them) instead of
    /// failing the run; for tests that assert on them separately.
    pub fn report_leaked_cgroups(mut self) -> Self {
        self.check_cgroups = false;
        self
    }

    /// Never read the zone's stdout (a stalled consumer).
    pub fn stall_stdout(mut self) -> Self {
        self.stall_stdout = true;
        self
    }

    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    pub fn during(mut self, f: impl FnOnce(i32, &Scene) + 'a) -> Self {
        self.during = Some(Box::new(f));
        self
    }

    /// Run `probe attempt args...` inside `loopexec sandbox`, then check the host is unchanged.
    pub fn run(self, probe: &str, args: &[&str]) -> Run {
        let probe = probe_path(probe);
        let _guard = serial();
        let bin = loopexec_bin();
        let mut cmd = Command::new(&bin);
        cmd.arg("sandbox");
        if let Some(p) = &self.policy {
            cmd.arg("--policy").arg(p);
        }
        cmd.arg("--rw").arg(&self.scene.rw);
        for p in &self.extra_ro {
            cmd.arg("--ro").arg(p);
        }
        cmd.arg("--").arg(&probe).args(args);
        cmd.current_dir(&self.scene.rw);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.execute(cmd)
    }

    fn execute(mut self, mut cmd: Command) -> Run {
        let before = HostState::capture(self.scene);
        let cgroups_before = cgroup_dirs();
        let leftovers_before = zone_processes(self.scene.root());
        assert!(
            leftovers_before.is_empty(),
            "zone processes exist before the run: {leftovers_before:?}"
        );

        // stdin: /dev/null; stderr: a pipe, or the slave side of a pty we own.
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        let mut _pty_master: Option<OwnedFd> = None;
        let mut terminal_before: Option<(u32, String)> = None;
        let mut terminal_slave: Option<OwnedFd> = None;
        if let Some(path) = &self.stderr_file {
            let f = fs::OpenOptions::new()
                .append(true)
                .open(path)
                .expect("open stderr file");
            cmd.stderr(Stdio::from(f));
        } else if self.stderr_pty {
            let pty = nix::pty::openpty(None, None).expect("openpty");
            terminal_before = Some(terminal_state(&pty.slave));
            terminal_slave = Some(pty.slave.try_clone().expect("dup pty slave"));
            cmd.stderr(Stdio::from(pty.slave));
            _pty_master = Some(pty.master);
        } else {
            cmd.stderr(Stdio::piped());
        }

        // Leak a host file (the secret) and a socket into loopexec without CLOEXEC.
        let leaked_file = fs::File::open(&self.scene.secret).expect("open secret");
        let (leaked_sock, _peer) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let file_fd = leaked_file.as_raw_fd();
        let sock_fd = leaked_sock.as_raw_fd();
        // SAFETY: only async-signal-safe dup2 calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(file_fd, LEAKED_FILE_FD) < 0
                    || libc::dup2(sock_fd, LEAKED_SOCKET_FD) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }

        let start = Instant::now();
        let mut child = cmd.spawn().expect("spawn loopexec");
        if let (Some(bytes), Some(master)) = (self.typed.take(), _pty_master.as_ref()) {
            let master = master.try_clone().expect("dup pty master");
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                let _ = nix::unistd::write(&master, &bytes);
            });
        }
        let pid = child.id() as i32;
        let out_reader = if self.stall_stdout {
            None
        } else {
            Some(capture(child.stdout.take().expect("stdout")))
        };
        let _stalled_stdout = if self.stall_stdout {
            child.stdout.take()
        } else {
            None
        };
        let err_reader = child.stderr.take().map(capture);

        if let Some(f) = self.during.take() {
            f(pid, self.scene);
        }
        let (status, max_rss, timed_out) =
            wait_bounded(&mut child, self.timeout, self.scene.root());
        let elapsed = start.elapsed();
        drop(_stalled_stdout);

        // Nothing of the zone may remain (checked before joining the readers: a survivor would
        // hold the pipes open).
        let survivors = wait_for_no_zone_processes(self.scene.root(), Duration::from_secs(3));
        for p in &survivors {
            // Only processes this test started (they run our probe / our loopexec).
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let (stdout, stdout_bytes) = out_reader
            .map(|r| r.join().expect("stdout reader"))
            .unwrap_or_default();
        let (stderr, _) = err_reader
            .map(|r| r.join().expect("stderr reader"))
            .unwrap_or_default();
        eprintln!(
            "zone run: {:?} status={:?} elapsed={:?}",
            parse_verdict(&stdout),
            status,
            elapsed
        );
        let mut run = Run {
            status,
            verdict: parse_verdict(&stdout),
            stdout,
            stdout_bytes,
            stderr,
            elapsed,
            supervisor_max_rss_kib: max_rss,
            leaked_cgroups: Vec::new(),
            terminal_changes: Vec::new(),
        };
        if let (Some((mode, settings)), Some(slave)) = (terminal_before, terminal_slave.as_ref()) {
            let (mode_after, settings_after) = terminal_state(slave);
            if mode_after != mode {
                run.terminal_changes
                    .push(format!("device mode {mode:o} -> {mode_after:o}"));
            }
            if settings_after != settings {
                run.terminal_changes
                    .push(format!("settings {settings} -> {settings_after}"));
            }
        }
        // Cgroups the zone left behind (empty once its processes are gone): removed here, children
        // first, so that a finding does not leave the host changed.
        if !survivors.is_empty() {
            wait_for_no_zone_processes(self.scene.root(), Duration::from_secs(3));
        }
        run.leaked_cgroups = wait_for_cgroups(&cgroups_before, pid, Duration::from_secs(3));
        if self.remove_leaked_cgroups {
            remove_cgroups(&run.leaked_cgroups);
        }
        assert!(
            !timed_out,
            "loopexec sandbox did not finish within {:?}; killed it\n{}",
            self.timeout,
            run.context()
        );
        assert!(
            survivors.is_empty(),
            "zone processes survived the zone: pids {survivors:?}\n{}",
            run.context()
        );
        let after = HostState::capture(self.scene);
        assert_host_unchanged(&before, &after, &run);
        if self.check_cgroups {
            assert!(
                run.leaked_cgroups.is_empty(),
                "cgroups left behind by the zone: {:?}\n{}",
                run.leaked_cgroups,
                run.context()
            );
        }
        run
    }
}

/// Run a probe in a second zone while another zone runs (from inside `Zone::during`): no lock, no
/// host snapshot (the outer run makes those), a 30 s bound.
pub fn run_concurrent_zone(scene: &Scene, probe: &str, args: &[&str]) -> Run {
    let start = Instant::now();
    let mut child = Command::new(loopexec_bin())
        .arg("sandbox")
        .arg("--rw")
        .arg(&scene.rw)
        .arg("--ro")
        .arg(probe_dir())
        .arg("--")
        .arg(probe_path(probe))
        .args(args)
        .current_dir(&scene.rw)
        // The same operator environment as `Zone::new`: both supervisors share one placeholder registry.
        .env("HOME", &scene.home)
        .env("XDG_STATE_HOME", scene.outside.join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn second loopexec");
    let out_reader = capture(child.stdout.take().expect("stdout"));
    let err_reader = capture(child.stderr.take().expect("stderr"));
    let (status, _, timed_out) = wait_bounded(&mut child, Duration::from_secs(30), scene.root());
    assert!(
        !timed_out,
        "the second zone did not finish within 30 s; killed it"
    );
    let (stdout, stdout_bytes) = out_reader.join().expect("stdout reader");
    let (stderr, _) = err_reader.join().expect("stderr reader");
    Run {
        status,
        verdict: parse_verdict(&stdout),
        stdout,
        stdout_bytes,
        stderr,
        elapsed: start.elapsed(),
        supervisor_max_rss_kib: 0,
        leaked_cgroups: Vec::new(),
        terminal_changes: Vec::new(),
    }
}

/// Run the same probe directly on the host (no sandbox), as a control proving it detects escapes.
pub fn host_control(scene: &Scene, probe: &str, args: &[&str]) -> Run {
    let _guard = serial();
    let start = Instant::now();
    let out = Command::new(probe_path(probe))
        .args(args)
        .current_dir(&scene.rw)
        .env("LOOPEXEC_ESCAPE_SECRET", "s3cr3t-escape-value")
        .stdin(Stdio::null())
        .output()
        .expect("run host control");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    Run {
        status: out.status,
        verdict: parse_verdict(&stdout),
        stdout_bytes: out.stdout.len() as u64,
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: start.elapsed(),
        supervisor_max_rss_kib: 0,
        leaked_cgroups: Vec::new(),
        terminal_changes: Vec::new(),
    }
}

fn assert_host_unchanged(before: &HostState, after: &HostState, run: &Run) {
    for (path, was) in &before.outside {
        match after.outside.get(path) {
            None => panic!(
                "host file outside the grant was removed: {}\n{}",
                path.display(),
                run.context()
            ),
            Some(now) => assert!(
                now == was,
                "host file outside the grant changed: {}\n{}",
                path.display(),
                run.context()
            ),
        }
    }
    for path in after.outside.keys() {
        assert!(
            before.outside.contains_key(path),
            "file created outside the grant: {}\n{}",
            path.display(),
            run.context()
        );
    }
    assert_eq!(
        before.sysctls,
        after.sysctls,
        "host sysctls changed\n{}",
        run.context()
    );
    assert_eq!(
        before.loopexec_bin,
        after.loopexec_bin,
        "the loopexec binary changed\n{}",
        run.context()
    );
    assert_eq!(
        before.probe_files,
        after.probe_files,
        "the read-only probe dir changed\n{}",
        run.context()
    );
}

fn wait_for_no_zone_processes(root: &Path, limit: Duration) -> Vec<i32> {
    let deadline = Instant::now() + limit;
    loop {
        let left = zone_processes(root);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Remove (empty) cgroup directories, children first.
pub fn remove_cgroups(dirs: &[PathBuf]) {
    let mut dirs = dirs.to_vec();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for dir in dirs {
        let _ = fs::remove_dir(dir);
    }
}

/// Cgroups created during the run that are still there after `limit`. Other loopexec processes on
/// the host (other test binaries, other checkouts running this suite) create zone cgroups too:
/// loopexec names them `loopexec-zone-<supervisor pid>-<n>`, so a `loopexec-*` directory naming a
/// different pid is theirs; any other new directory naming a different, live pid is theirs too.
fn wait_for_cgroups(before: &BTreeSet<PathBuf>, our_pid: i32, limit: Duration) -> Vec<PathBuf> {
    let deadline = Instant::now() + limit;
    loop {
        let new: Vec<PathBuf> = cgroup_dirs()
            .difference(before)
            .filter(|p| !belongs_to_another_process(p, our_pid))
            .cloned()
            .collect();
        if new.is_empty() || Instant::now() >= deadline {
            return new;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn belongs_to_another_process(dir: &Path, our_pid: i32) -> bool {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let pids: Vec<i32> = name
        .split(['-', '.', '_'])
        .filter_map(|t| t.parse().ok())
        .collect();
    if pids.is_empty() || pids.contains(&our_pid) {
        return false;
    }
    name.starts_with("loopexec-")
        || pids
            .iter()
            .any(|p| *p > 1 && Path::new(&format!("/proc/{p}")).exists())
}

/// Read a stream to its end on a thread, keeping the first 64 KiB and counting the rest.
fn capture(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<(String, u64)> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut total = 0u64;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    total += n as u64;
                    if kept.len() < 64 * 1024 {
                        let take = n.min(64 * 1024 - kept.len());
                        kept.extend_from_slice(&buf[..take]);
                    }
                }
            }
        }
        (String::from_utf8_lossy(&kept).into_owned(), total)
    })
}

fn rss_kib(pid: i32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Wait for loopexec, sampling its RSS; past `limit`, kill it and the zone processes we started
/// (by pid) and say so: a hung supervisor is a finding, never a hang of the suite.
fn wait_bounded(child: &mut Child, limit: Duration, scene_root: &Path) -> (ExitStatus, u64, bool) {
    let deadline = Instant::now() + limit;
    let mut max_rss = 0;
    loop {
        max_rss = max_rss.max(rss_kib(child.id() as i32));
        match child.try_wait().expect("try_wait") {
            Some(st) => return (st, max_rss, false),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let st = child.wait().expect("wait killed loopexec");
                for p in zone_processes(scene_root) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                return (st, max_rss, true);
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// A copy of a shipped policy with some `key = value` lines replaced (first occurrence of each
/// key), written into `dir`.  The shipped files live in policies/ of the repository.
pub fn policy_variant(dir: &Path, base: &str, replace: &[(&str, &str)]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("policies")
        .join(format!("{base}.toml"));
    let text = fs::read_to_string(&src).unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
    let mut out = String::new();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for line in text.lines() {
        let key = line.split('=').next().unwrap_or("").trim();
        if let Some((k, v)) = replace.iter().find(|(k, _)| *k == key && !done.contains(k)) {
            out.push_str(&format!("{k} = {v}\n"));
            done.insert(k);
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    for (k, _) in replace {
        assert!(done.contains(k), "policy {base} has no key {k}");
    }
    let path = dir.join(format!("{base}-variant.toml"));
    fs::write(&path, out).expect("write policy variant");
    path
}

/// One test per refused attempt: run `probe attempt args...` in a fresh scene and assert the
/// verdict is BLOCKED with one of the listed reasons (plus the host checks every run makes).
#[macro_export]
macro_rules! refused {
    ($(#[$m:meta])* $name:ident: $probe:literal $what:literal [$($arg:expr),*] => [$($r:literal),+]) => {
        $(#[$m])*
        #[test]
        fn $name() {
            let scene = $crate::common::Scene::new();
            #[allow(unused_variables)]
            let s = &scene;
            let args: Vec<String> = vec![$(($arg)(s).to_string()),*];
            let args: Vec<&str> = args.iter().map(|a| a.as_str()).collect();
            let mut argv = vec![$what];
            argv.extend(args);
            $crate::common::Zone::new(&scene).run($probe, &argv).assert_blocked($what, &[$($r),+]);
        }
    };
}
