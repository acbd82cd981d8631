//! Shared helpers for the black-box tests of the `loopexec` binary.
#![allow(dead_code)]

pub mod calc;
pub mod targets;
pub mod verdicts;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The binary under test: `LOOPEXEC_BIN` when set (ci/test-unprivileged.sh runs the test
/// binaries as another user with it), else cargo's build of it.
pub fn bin() -> String {
    std::env::var("LOOPEXEC_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_loopexec").to_string())
}

/// Whether the tests run as root (the zones then run as the policies' `uid_when_root`).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Who a zone runs as, and so who must own what it writes: the zone uid as root, else the caller.
pub fn zone_owner() -> Option<(u32, u32)> {
    is_root().then_some((ZONE_UID_WHEN_ROOT, ZONE_UID_WHEN_ROOT))
}

/// One finished invocation.
#[derive(Debug)]
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// The single JSON object on stdout (panics unless stdout is exactly one object).
    pub fn json(&self) -> Value {
        let trimmed = self.stdout.trim_end_matches('\n');
        assert!(
            !trimmed.contains('\n'),
            "stdout must be one line of JSON, got:\n{}",
            self.stdout
        );
        let v: Value = serde_json::from_str(trimmed)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout));
        assert!(v.is_object(), "not an object: {v}");
        for key in ["tool", "version", "status", "errors"] {
            assert!(v.get(key).is_some(), "missing {key} in {v}");
        }
        assert!(v["errors"].is_array(), "errors must be an array: {v}");
        v
    }
}

pub fn from_output(out: Output) -> Ran {
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A key directory with an operator key pair, made once per test binary with `loopexec keygen`.
/// Every run needs an operator key: there is no default one.
pub fn key_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir").keep();
        let out = Command::new(bin())
            .args(["keygen", "--dir"])
            .arg(&dir)
            .output()
            .expect("spawn keygen");
        assert!(
            out.status.success(),
            "keygen failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
}

/// A `loopexec` command with the test operator key configured.
pub fn command() -> Command {
    let mut c = Command::new(bin());
    c.env("LOOPEXEC_CONFIG_DIR", key_dir());
    c
}

/// Run loopexec in `dir` with `args`.
pub fn loopexec(dir: &Path, args: &[&str]) -> Ran {
    let out = command()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("spawn loopexec");
    from_output(out)
}

/// A temporary workdir.
pub fn workdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Every event of a run's receipt, in order.
pub fn all_events(dir: &Path, run_id: &str) -> Vec<Value> {
    let bytes = std::fs::read(
        dir.join(".loopexec/runs")
            .join(run_id)
            .join("receipt.jsonl"),
    )
    .expect("receipt");
    let text = String::from_utf8(bytes).expect("utf8");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("event json"))
        .collect()
}

/// The loop's own events of a run's receipt: every event but the `run_key` endorsements (which
/// tests/receipt_signing.rs asserts), so loop tests read as the loop's lifecycle.
pub fn events(dir: &Path, run_id: &str) -> Vec<Value> {
    all_events(dir, run_id)
        .into_iter()
        .filter(|e| e["type"] != "run_key")
        .collect()
}

pub fn event_types(dir: &Path, run_id: &str) -> Vec<String> {
    events(dir, run_id)
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Whether a process exists and is not a zombie.
pub fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next().map(str::to_string));
            state.as_deref() != Some("Z")
        }
        Err(_) => false,
    }
}

/// Wait until `path` exists (or panic after `limit`).
pub fn wait_for_file(path: &Path, limit: Duration) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < limit, "{} did not appear", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Read a pid written by a test command.
pub fn read_pid(path: &Path) -> i32 {
    wait_for_file(path, Duration::from_secs(10));
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Ok(pid) = text.trim().parse() {
            return pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no pid in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

pub fn run_dir(dir: &Path, run_id: &str) -> PathBuf {
    dir.join(".loopexec/runs").join(run_id)
}

/// The uid a zone runs as when loopexec runs as root (policies' `identity.uid_when_root`).
pub const ZONE_UID_WHEN_ROOT: u32 = 60200;

/// Make `dir` writable by the zone: as root the zone runs as an unprivileged uid, so a workdir it
/// writes must belong to that uid (unprivileged, the zone runs as the caller and nothing changes).
pub fn zone_writable(dir: &Path) {
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(dir, Some(ZONE_UID_WHEN_ROOT), Some(ZONE_UID_WHEN_ROOT))
            .expect("chown workdir");
    }
}

/// Let the zone uid pass through `dir` (as root the zones run as an unprivileged uid and reach
/// the workspace layers beneath it; a fresh tempdir is 0700).
pub fn zone_traversable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if nix::unistd::geteuid().is_root() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))
            .expect("chmod workdir");
    }
}

/// A tiny HTTP server on the host's loopback answering `hello` to every request, until dropped.
pub fn hello_server() -> (u16, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let handle = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                        .unwrap();
                    let mut buf = [0u8; 4096];
                    let _ = std::io::Read::read(&mut s, &mut buf);
                    let _ = std::io::Write::write_all(
                        &mut s,
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                    );
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
    });
    (port, handle)
}

/// Run git in `dir` with a fixed identity and no global config; panics on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`git`]'s output without surrounding whitespace (an object id, a name).
pub fn git_value(dir: &Path, args: &[&str]) -> String {
    git(dir, args).trim().to_string()
}

/// Writes `text` to `path` beneath `dir`, creating its parent directories (a test project's file).
pub fn write(dir: &Path, path: &str, text: &str) {
    let p = dir.join(path);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(p, text).unwrap();
}

/// Make `dir` a repository whose first commit (t0) holds everything in it, reachable by the zone uid.
pub fn commit_t0(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "t0"]);
    zone_traversable(dir);
}

/// Asserts the run halted with `reason` from the guard `guard`, the check never ran on the
/// step, and a finding names `path` with `what` in its text.
pub fn assert_guard_halt(r: &Ran, ev: &[Value], reason: &str, guard: &str, path: &str, what: &str) {
    assert_ne!(r.code, 10, "a tampering step never succeeds: {r:?}");
    let v = r.json();
    assert_eq!(v["halt_reason"], reason, "{r:?}");
    let record = ev
        .iter()
        .find(|e| e["type"] == "guard" && e["guard"] == guard)
        .unwrap_or_else(|| panic!("no {guard} guard event in {ev:#?}"));
    assert_eq!(record["halt_reason"], reason);
    assert_eq!(record["stage"], "after_agent");
    let findings = record["findings"].as_array().unwrap();
    let named =
        |f: &&Value| f["path"] == path && f["what"].as_str().is_some_and(|w| w.contains(what));
    assert!(
        findings.iter().any(|f| named(&f)),
        "no finding names {path} with `{what}`: {findings:#?}"
    );
    assert!(
        ev.iter().all(|e| e["type"] != "check_result"),
        "the check never ran on the step"
    );
}

/// pytest must be there (CI installs it; elsewhere a missing pytest fails loudly too: the tests
/// that need it mean nothing without it).
pub fn require_pytest() {
    let ok = Command::new("/usr/bin/python3")
        .args(["-m", "pytest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "Debian's python3-pytest is needed (ci/setup.sh installs it)"
    );
}

/// Whether Debian's cargo (`/usr/bin/cargo`, the one the exec zone sees) is there: under CI its
/// absence fails the test; elsewhere the test says NOT RUN and does nothing.
pub fn debian_cargo_present() -> bool {
    if Path::new("/usr/bin/cargo").exists() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "Debian's cargo is needed in /usr/bin (ci/setup.sh installs it)"
    );
    eprintln!("NOT RUN: /usr/bin/cargo is missing (CI=true makes this a failure)");
    false
}

/// The second unprivileged local user of ci/setup-test-user.sh, when this test runs as root.
pub fn other_local_user() -> Option<&'static str> {
    let exists = std::process::Command::new("id")
        .arg("loopexec-other")
        .output()
        .is_ok_and(|o| o.status.success());
    match (nix::unistd::geteuid().is_root(), exists) {
        (true, true) => Some("loopexec-other"),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI runs this as root with the user loopexec-other (ci/setup-test-user.sh)")
        }
        _ => {
            eprintln!("skipped: needs root and the user loopexec-other (ci/setup-test-user.sh)");
            None
        }
    }
}

/// Runs `loopexec ARGS` in `repo` (run id `run_id`), waits (at most 300 s) until its receipt holds
/// an event of type `after`, gives the stage after it 3 s to be under way, interrupts it with
/// SIGINT and asserts it exited 130 (the operator's interrupt); returns the receipt's event types.
pub fn interrupted_after(repo: &Path, run_id: &str, args: &[&str], after: &str) -> Vec<String> {
    let mut child = command()
        .current_dir(repo)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn loopexec");
    let receipt = run_dir(repo, run_id).join("receipt.jsonl");
    let has = |kind: &str| {
        std::fs::read_to_string(&receipt)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains(&format!("\"type\":\"{kind}\"")))
    };
    let started = std::time::Instant::now();
    while !has(after) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "loopexec ended before its {after} event"
        );
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no {after} event within 300 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill(2) of the loopexec this function started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    event_types(repo, run_id)
}

/// A check's probe: for each path given, rewrite the file and write the original back (by
/// `open('w')`, then by renaming a copy over it); exits 3 when any rewrite went through, 0 when
/// every one was refused by the zone (`EROFS`, `EACCES`, `EPERM`, `EBUSY`).
pub const REWRITE_AND_RESTORE: &str = r#"import errno, os, sys
refused = (errno.EROFS, errno.EACCES, errno.EPERM, errno.EBUSY)
for t in sys.argv[1:]:
    original = open(t, 'rb').read()
    try:
        with open(t, 'wb') as f:
            f.write(b'def test_nothing():\n    pass\n')
        with open(t, 'wb') as f:
            f.write(original)
        sys.exit(3)
    except OSError as e:
        assert e.errno in refused, (t, e)
    tmp = os.path.join(os.path.dirname(t), 'rewrite.tmp')
    try:
        with open(tmp, 'wb') as f:
            f.write(original)
        os.replace(tmp, t)
        sys.exit(4)
    except OSError as e:
        assert e.errno in refused, (t, e)
    if os.path.exists(tmp):
        os.unlink(tmp)
"#;

/// A crate with an inline `#[cfg(test)]` module (not a protected path) and an off-by-one bug in
/// `add`, committed as t0.
pub fn off_by_one_crate() -> tempfile::TempDir {
    let dir = workdir();
    write(
        dir.path(),
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    write(
        dir.path(),
        "src/lib.rs",
        "pub fn add(a: i64, b: i64) -> i64 {\n    a + b + 1\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn adds() {\n        assert_eq!(add(2, 3), 5);\n        assert_eq!(add(-1, 1), 0);\n    }\n\n    #[test]\n    fn adds_zero() {\n        assert_eq!(add(0, 0), 0);\n    }\n}\n",
    );
    commit_t0(dir.path());
    dir
}
