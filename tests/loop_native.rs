//! The loop under native isolation (the default): the agent and the check run in zones that
//! cannot see the state dir, and the check's zone has no network at all.
mod common;
use common::*;
use std::net::TcpListener;

#[test]
fn the_state_dir_is_hidden_from_the_agent_and_the_check() {
    let dir = workdir();
    zone_writable(dir.path());
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            "h",
            "--max-iterations",
            "1",
            "--exec",
            "ls -A .loopexec > agent-saw",
            "--check",
            "ls -A .loopexec > check-saw",
        ],
    );
    assert_eq!(r.code, 11, "{r:?}");
    assert!(
        run_dir(dir.path(), "h").join("receipt.jsonl").exists(),
        "the state dir itself is intact"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("agent-saw")).unwrap(),
        "",
        "the agent sees an empty directory"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("check-saw")).unwrap(),
        "",
        "the check sees an empty directory"
    );
}

#[test]
fn the_check_has_no_network() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = workdir();
    zone_writable(dir.path());
    let check = format!(
        "python3 -c 'import socket\ntry:\n socket.create_connection((\"127.0.0.1\", {port}), timeout=3); print(\"connected\")\nexcept OSError: print(\"refused\")' > check-net; env | grep -ci proxy > check-proxy-vars || true"
    );
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "n",
            "--max-iterations",
            "1",
            "--exec",
            "true",
            "--check",
            &check,
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("check-net"))
            .unwrap()
            .trim(),
        "refused"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("check-proxy-vars"))
            .unwrap()
            .trim(),
        "0",
        "no proxy is offered to the check"
    );
}

#[test]
fn the_check_runs_in_a_hermetic_environment() {
    let dir = workdir();
    zone_writable(dir.path());
    let out = command()
        .current_dir(dir.path())
        .env("OPERATOR_SECRET", "s3cr3t")
        .env("TZ", "America/New_York")
        .args([
            "run",
            "--json",
            "--run-id",
            "h",
            "--max-iterations",
            "1",
            "--exec",
            "true",
            "--check",
            "env | sort > check-env",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(10),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let env = std::fs::read_to_string(dir.path().join("check-env")).unwrap();
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    assert!(
        env.contains("TZ=UTC\n")
            && env.contains("PYTHONHASHSEED=0\n")
            && env.contains("SOURCE_DATE_EPOCH=315532800\n"),
        "{env}"
    );
    // Python's bytecode cache outside the tree (docs/guards.md, "The check runs what would be committed").
    assert!(
        env.contains("PYTHONPYCACHEPREFIX=/tmp/loopexec-pycache\n"),
        "{env}"
    );
    assert!(
        !env.contains("s3cr3t"),
        "nothing of the operator's environment reaches the check: {env}"
    );
    for name in &names {
        assert!(
            name.starts_with("LOOPEXEC_")
                || [
                    "PATH",
                    "HOME",
                    "TMPDIR",
                    "TZ",
                    "LANG",
                    "LC_ALL",
                    "PYTHONHASHSEED",
                    "PYTHONPYCACHEPREFIX",
                    "SOURCE_DATE_EPOCH",
                    "PWD",
                    "SHLVL",
                    "_"
                ]
                .contains(name),
            "unexpected variable {name} in the check's environment"
        );
    }
}

#[test]
fn a_symlinked_protected_path_halts_isolation_unsatisfiable_naming_the_path() {
    let dir = workdir();
    zone_writable(dir.path());
    let outside = workdir();
    std::os::unix::fs::symlink(outside.path(), dir.path().join(".gitmodules")).unwrap();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "s",
            "--max-iterations",
            "1",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 30, "{r:?}");
    let out = r.json();
    assert_eq!(out["halt_reason"], "isolation_unsatisfiable", "{out}");
    let detail = out["run"]["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!(
            "{}/.gitmodules",
            dir.path().canonicalize().unwrap().display()
        )) && detail.contains("symlink"),
        "{detail}"
    );
}

/// Processes whose cgroup, and cgroup directories, name the zones of supervisor `pid`
/// (`loopexec-zone-<pid>-<n>`).
fn zone_leftovers(pid: u32) -> (Vec<String>, Vec<std::path::PathBuf>) {
    let marker = format!("loopexec-zone-{pid}-");
    let mut procs = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(text) = std::fs::read_to_string(e.path().join("cgroup")) {
            if text.contains(&marker) {
                procs.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    let mut dirs = Vec::new();
    let mut stack = vec![(std::path::PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_dir && e.file_name().to_string_lossy().starts_with(&marker) {
                dirs.push(e.path());
            } else if is_dir && depth < 6 {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    (procs, dirs)
}

#[test]
fn a_run_leaves_no_zone_process_and_no_zone_cgroup_behind() {
    // The launcher reuses each zone's cgroup every iteration and starts the next zone's init
    // ahead of time; when the run ends, the prepared init and the kept cgroups go too.
    let dir = workdir();
    zone_writable(dir.path());
    let child = command()
        .current_dir(dir.path())
        .args([
            "run",
            "--json",
            "--run-id",
            "z",
            "--max-iterations",
            "3",
            "--exec",
            "true",
            "--check",
            "false",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(12),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (procs, dirs) = zone_leftovers(pid);
    assert!(
        procs.is_empty(),
        "zone processes outlived the run: {procs:?}"
    );
    assert!(dirs.is_empty(), "zone cgroups outlived the run: {dirs:?}");
}
