//! The container backends (`--backend podman|docker`) end to end, and `loopexec isolate`.
//!
//! The engine tests drive real engines prepared by `ci/container-engines.sh` (a private podman
//! store, a private dockerd, a static busybox image), which `ci/test.sh` starts as root and names
//! in `LOOPEXEC_TEST_ENGINES`. Outside CI, without that preparation, they say so and pass; under
//! `CI=true` a missing engine fails them. Containers are created beneath this test's own cgroup
//! (`--cgroup-parent`), and only containers of the loopexec processes a test started are removed.
mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Whether `engine` was prepared for these tests (as root); panics under CI when it was not.
fn engine_ready(engine: &str) -> bool {
    if !is_root() {
        eprintln!(
            "skipped: the {engine} tests of this file run as root (an unprivileged variant below)"
        );
        return false;
    }
    let ready = std::env::var("LOOPEXEC_TEST_ENGINES")
        .unwrap_or_default()
        .split_whitespace()
        .any(|e| e == engine);
    if !ready {
        assert!(
            std::env::var("CI").is_err(),
            "CI: {engine} was not prepared; ci/test.sh runs ci/container-engines.sh start"
        );
        eprintln!("skipped: {engine} not prepared (run ci/container-engines.sh start DIR and source DIR/env)");
    }
    ready
}

fn image() -> String {
    std::env::var("LOOPEXEC_TEST_IMAGE")
        .unwrap_or_else(|_| "localhost/loopexec-test-busybox:1".into())
}

/// A cgroup path beneath the cgroup this test runs in, in every controller: the deepest of this
/// process's cgroup paths (on a hybrid host the controllers may sit at different depths, each an
/// ancestor of the deepest here) plus a name of our own, unique to the call: tests run in
/// parallel threads of one process, and each one's [`CgroupCleanup`] removes its parent's tree,
/// which must never be a parent another test's engine is creating a container's cgroup in (runc's
/// mkdir then fails with ENOENT, which docker reports as exit 127, seen in CI).
fn cgroup_parent() -> String {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let deepest = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .max_by_key(|p| p.matches('/').count() + p.len())
        .unwrap_or("/")
        .trim_end_matches('/')
        .to_string();
    format!("{deepest}/lx-container-test-{}-{call}", std::process::id())
}

/// Remove the cgroup directories an engine created beneath [`cgroup_parent`] (empty by then).
struct CgroupCleanup(String);

impl Drop for CgroupCleanup {
    fn drop(&mut self) {
        for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
            let Ok(entries) = std::fs::read_dir(root) else {
                continue;
            };
            let mut roots: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            roots.push(PathBuf::from(root));
            for r in roots {
                let dir = r.join(self.0.trim_start_matches('/'));
                remove_cgroup_tree(&dir);
            }
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Run loopexec with a container backend: `--backend ENGINE --image ... --cgroup-parent ...`.
fn run_in(engine: &str, dir: &Path, extra: &[&str]) -> Ran {
    let parent = cgroup_parent();
    let _cleanup = CgroupCleanup(parent.clone());
    let img = image();
    let mut args = vec![
        "run",
        "--json",
        "--backend",
        engine,
        "--image",
        &img,
        "--cgroup-parent",
        &parent,
    ];
    args.extend_from_slice(extra);
    loopexec(dir, &args)
}

/// Containers whose supervisor label names the loopexec process `pid`.
fn containers_of(engine: &str, pid: u32) -> Vec<String> {
    let format = match engine {
        "podman" => "{{.Names}}\t{{index .Labels \"io.loopexec.supervisor\"}}",
        _ => "{{.Names}}\t{{.Label \"io.loopexec.supervisor\"}}",
    };
    let out = Command::new(engine)
        .args([
            "ps",
            "--all",
            "--filter",
            "label=io.loopexec.supervisor",
            "--format",
            format,
        ])
        .output()
        .expect("engine ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(_, sup)| sup.split(':').next() == Some(&pid.to_string()))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// A repository whose check passes once the agent has counted `a` up to 3.
fn counting_repo() -> tempfile::TempDir {
    let dir = workdir();
    std::fs::write(dir.path().join("a"), "1\n").unwrap();
    std::fs::create_dir(dir.path().join("tests")).unwrap();
    std::fs::write(dir.path().join("tests/check.sh"), "test \"$(cat a)\" = 3\n").unwrap();
    commit_t0(dir.path());
    dir
}

const COUNT_UP: &str = "echo $(( $(cat a) + 1 )) > a";

/// The engine clients' stderr the run kept as artifacts (what docker or podman said when a
/// container could not start), for a failing assertion's message.
fn client_stderr(dir: &Path, run_id: &str) -> String {
    let artifacts = run_dir(dir, run_id).join("artifacts");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&artifacts)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.retain(|p| p.extension().is_some_and(|e| e == "stderr"));
    names.sort();
    names
        .iter()
        .map(|p| {
            format!(
                "{}: {}",
                p.display(),
                String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default())
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn halted(r: &Ran) -> (i32, String) {
    let v = r.json();
    (r.code, v["halt_reason"].as_str().unwrap_or("").to_string())
}

// --- podman -----------------------------------------------------------------------------------

#[test]
fn podman_runs_a_detached_loop_to_convergence_and_delivers_a_branch() {
    if !engine_ready("podman") {
        return;
    }
    let repo = counting_repo();
    let r = run_in(
        "podman",
        repo.path(),
        &[
            "--run-id",
            "p",
            "--policy",
            "builtin:offline",
            "--exec",
            COUNT_UP,
            "--check",
            "sh tests/check.sh",
        ],
    );
    assert_eq!(
        halted(&r),
        (10, "success_condition_met".into()),
        "{r:?}\n{}",
        client_stderr(repo.path(), "p")
    );
    assert_eq!(
        std::fs::read_to_string(repo.path().join("a")).unwrap(),
        "1\n",
        "the operator's checkout is untouched"
    );
    assert_eq!(git(repo.path(), &["show", "loopexec/p:a"]), "3\n");
    let start = events(repo.path(), "p")
        .into_iter()
        .find(|e| e["type"] == "run_start")
        .unwrap();
    assert_eq!(
        (start["isolation"].as_str(), start["zone"].as_str()),
        (Some("container"), Some("podman"))
    );
    let verify = loopexec(
        repo.path(),
        &[
            "verify",
            "--json",
            "p",
            "--pubkey",
            &path_str(&key_dir().join("operator.pub")),
        ],
    );
    assert_eq!(verify.code, 0, "{verify:?}");
}

#[test]
fn podman_replay_reruns_the_check_in_the_runs_own_engine() {
    if !engine_ready("podman") {
        return;
    }
    let _cleanup = CgroupCleanup(cgroup_parent()); // the replay's container uses the pinned parent too
    let repo = counting_repo();
    // podman marks its containers with /run/.containerenv: this check passes only inside one.
    let check = "test -e /run/.containerenv && sh tests/check.sh";
    let r = run_in(
        "podman",
        repo.path(),
        &[
            "--run-id",
            "rp",
            "--policy",
            "builtin:offline",
            "--exec",
            COUNT_UP,
            "--check",
            check,
        ],
    );
    assert_eq!(halted(&r), (10, "success_condition_met".into()), "{r:?}");
    let replay = loopexec(repo.path(), &["replay", "--json", "rp"]);
    assert_eq!(replay.code, 0, "{replay:?}");
    assert_eq!(replay.json()["replay"]["match"], true);
}

#[test]
fn podman_agent_runs_unprivileged_without_capabilities_on_a_read_only_root() {
    if !engine_ready("podman") {
        return;
    }
    let repo = counting_repo();
    let probe = "id -u > uid; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\\t' > caps; (touch /probe 2>/dev/null && echo writable || echo read-only) > root; echo \"$LOOPEXEC_ROLE $LOOPEXEC_ITERATION $HOME\" > env";
    let r = run_in(
        "podman",
        repo.path(),
        &[
            "--run-id",
            "u",
            "--no-baseline",
            "--policy",
            "builtin:offline",
            "--max-iterations",
            "1",
            "--exec",
            probe,
            "--check",
            "true",
        ],
    );
    assert_eq!(halted(&r), (10, "success_condition_met".into()), "{r:?}");
    let show = |f: &str| git(repo.path(), &["show", &format!("loopexec/u:{f}")]);
    assert_eq!(show("uid"), "60200\n");
    assert_eq!(
        show("caps"),
        "CapEff:0000000000000000\nNoNewPrivs:1\nSeccomp:2\n",
        "no capabilities, no_new_privs, a seccomp filter"
    );
    assert_eq!(show("root"), "read-only\n");
    assert_eq!(
        show("env"),
        "agent 1 /tmp\n",
        "loopexec's variables (by name) and the policy's fixed ones reach the zone"
    );
}

#[test]
fn podman_check_has_no_network() {
    if !engine_ready("podman") {
        return;
    }
    let (port, _server) = hello_server();
    // The server answers on the host's loopback; the test reaches it, the check must not.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    let repo = counting_repo();
    let check = format!("wget -q -T 3 -O - http://127.0.0.1:{port}/ > /tmp/got 2>&1; echo wget=$?; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; exit 1");
    let r = run_in(
        "podman",
        repo.path(),
        &[
            "--run-id",
            "n",
            "--policy",
            "builtin:offline",
            "--max-iterations",
            "1",
            "--exec",
            "true",
            "--check",
            &check,
        ],
    );
    assert_eq!(halted(&r), (12, "max_iterations_reached".into()), "{r:?}");
    let out =
        std::fs::read_to_string(run_dir(repo.path(), "n").join("artifacts/0001-check.stdout"))
            .unwrap();
    assert_eq!(
        out, "wget=1\nlo\n",
        "the check saw only loopback and reached nothing"
    );
}

#[test]
fn podman_agent_edit_of_a_protected_path_halts_and_the_check_runs_t0s_copy() {
    if !engine_ready("podman") {
        return;
    }
    let repo = counting_repo();
    let agent = format!("{COUNT_UP}; {COUNT_UP}; echo 'exit 0' > tests/check.sh");
    let r = run_in(
        "podman",
        repo.path(),
        &[
            "--run-id",
            "b",
            "--policy",
            "builtin:offline",
            "--exec",
            &agent,
            "--check",
            "sh tests/check.sh",
        ],
    );
    assert_eq!(halted(&r), (13, "blocked_path_modified".into()), "{r:?}");
    assert!(r.json()["run"]["detail"]
        .as_str()
        .unwrap()
        .contains("tests/check.sh"));
}

#[test]
fn podman_proxied_agent_reaches_only_the_allowed_host_and_every_decision_is_audited() {
    if !engine_ready("podman") {
        return;
    }
    proxied_agent_reaches_only_the_allowed_host("podman");
}

/// A proxied agent (the default agent policy) under `engine`: the allowed host answers, another
/// host is denied by the proxy, a direct connection reaches nothing, every decision is audited
/// and the receipt pins the audit log.
fn proxied_agent_reaches_only_the_allowed_host(engine: &str) {
    let (port, _server) = hello_server();
    let repo = counting_repo();
    let allowed = format!("allowed.test:{port}");
    let resolve = format!("allowed.test:{port}:127.0.0.1");
    let agent = format!(
        "wget -q -O - http://allowed.test:{port}/ > got; \
         if wget -q -O /dev/null http://denied.test:{port}/ 2>/dev/null; then echo reached; else echo blocked; fi > denied; \
         if wget -q -T 3 -Y off -O /dev/null http://127.0.0.1:{port}/ 2>/dev/null; then echo reached; else echo blocked; fi > direct; true"
    );
    let r = run_in(
        engine,
        repo.path(),
        &[
            "--run-id",
            "e",
            "--no-baseline",
            "--allow-host",
            &allowed,
            "--resolve",
            &resolve,
            "--max-iterations",
            "1",
            "--exec",
            &agent,
            "--check",
            "true",
        ],
    );
    assert_eq!(halted(&r), (10, "success_condition_met".into()), "{r:?}");
    let show = |f: &str| git(repo.path(), &["show", &format!("loopexec/e:{f}")]);
    assert_eq!(show("got"), "hello");
    assert_eq!(show("denied"), "blocked\n");
    assert_eq!(
        show("direct"),
        "blocked\n",
        "only the proxy listens in the zone's network namespace"
    );
    let audit = std::fs::read_to_string(run_dir(repo.path(), "e").join("egress.jsonl")).unwrap();
    let mut decisions: Vec<(String, String)> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            (
                v["host"].as_str().unwrap().to_string(),
                v["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // A connection's line is written when it ends: the allowed tunnel can end after the denied
    // request was refused, so the lines' order is not the requests' order.
    decisions.sort();
    assert_eq!(
        decisions,
        vec![
            ("allowed.test".into(), "allowed".into()),
            ("denied.test".into(), "denied".into())
        ]
    );
    let exec = events(repo.path(), "e")
        .into_iter()
        .find(|e| e["type"] == "exec_result")
        .unwrap();
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(audit.as_bytes()));
    assert_eq!(
        exec["egress"]["audit_sha256"].as_str(),
        Some(digest.as_str()),
        "the receipt pins the audit log"
    );
}

#[test]
fn podman_agent_gets_the_minted_secret_in_its_environment_and_nowhere_else() {
    if !engine_ready("podman") {
        return;
    }
    let repo = counting_repo();
    let secret = "sk-container-7f3a9c";
    // The hook computes the secret, so that the command line recorded in the receipt does not hold it.
    let mint = "printf 'sk-container-%s\\n' 7f3a9c".to_string();
    let agent = "test \"$LOOPEXEC_AGENT_TOKEN\" = \"$(printf 'sk-container-%s' 7f3a9c)\" && echo seen > token-check";
    let r = run_in(
        "podman",
        repo.path(),
        &[
            "--run-id",
            "c",
            "--policy",
            "builtin:offline",
            "--max-iterations",
            "1",
            "--no-baseline",
            "--mint-cmd",
            &mint,
            "--revoke-cmd",
            "cat > /dev/null",
            "--exec",
            agent,
            "--check",
            "true",
        ],
    );
    assert_eq!(halted(&r), (10, "success_condition_met".into()), "{r:?}");
    assert_eq!(
        git(repo.path(), &["show", "loopexec/c:token-check"]),
        "seen\n"
    );
    let mut stack = vec![repo.path().join(".loopexec")];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap().flatten() {
            let path = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(secret),
                    "the secret is in {}",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn podman_agent_past_its_timeout_is_killed_and_its_container_removed() {
    if !engine_ready("podman") {
        return;
    }
    let repo = counting_repo();
    let parent = cgroup_parent();
    let _cleanup = CgroupCleanup(parent.clone());
    let img = image();
    let child = command()
        .current_dir(repo.path())
        .args([
            "run",
            "--json",
            "--backend",
            "podman",
            "--image",
            &img,
            "--cgroup-parent",
            &parent,
            "--policy",
            "builtin:offline",
        ])
        .args([
            "--run-id",
            "t",
            "--no-baseline",
            "--exec",
            "sleep 60",
            "--exec-timeout",
            "2",
            "--check",
            "true",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(40),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let exec = events(repo.path(), "t")
        .into_iter()
        .find(|e| e["type"] == "exec_result")
        .unwrap();
    assert_eq!(exec["ending"]["kind"], "timed_out");
    assert_eq!(containers_of("podman", pid), Vec::<String>::new());
}

#[test]
fn podman_containers_of_a_killed_loopexec_are_removed_by_the_next_start() {
    if !engine_ready("podman") {
        return;
    }
    let repo = counting_repo();
    let parent = cgroup_parent();
    let _cleanup = CgroupCleanup(parent.clone());
    let img = image();
    let mut child = command()
        .current_dir(repo.path())
        .args([
            "run",
            "--json",
            "--backend",
            "podman",
            "--image",
            &img,
            "--cgroup-parent",
            &parent,
            "--policy",
            "builtin:offline",
        ])
        .args([
            "--run-id",
            "k",
            "--no-baseline",
            "--exec",
            "sleep 120",
            "--check",
            "true",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let started = Instant::now();
    while containers_of("podman", pid).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the agent's container never appeared"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: kill(2) of the loopexec this test started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    child.wait().unwrap();
    assert_eq!(
        containers_of("podman", pid).len(),
        1,
        "the orphan outlives its supervisor"
    );
    let mounts_dir = repo.path().join(".loopexec/container-mounts");
    let mounted_beneath = || {
        let prefix = format!("{}/", path_str(&mounts_dir));
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&prefix)))
            .count()
    };
    assert_eq!(
        mounted_beneath(),
        1,
        "the killed supervisor's workspace overlay is still mounted"
    );
    let r = run_in(
        "podman",
        repo.path(),
        &[
            "--run-id",
            "k2",
            "--policy",
            "builtin:offline",
            "--max-iterations",
            "1",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        containers_of("podman", pid),
        Vec::<String>::new(),
        "the next start removed the orphan"
    );
    assert_eq!(mounted_beneath(), 0, "and took down its overlay");
    assert_eq!(std::fs::read_dir(&mounts_dir).unwrap().count(), 0);
}

#[test]
fn podman_runs_an_in_place_workdir_as_its_owner_with_the_state_dir_hidden() {
    if !engine_ready("podman") {
        return;
    }
    let dir = workdir();
    zone_writable(dir.path());
    zone_traversable(dir.path());
    let agent = "id -u > uid; ls -A .loopexec > listing 2>/dev/null; echo planted > .gitmodules/x 2> planted || true";
    let r = run_in(
        "podman",
        dir.path(),
        &[
            "--run-id",
            "i",
            "--no-baseline",
            "--policy",
            "builtin:offline",
            "--max-iterations",
            "1",
            "--exec",
            agent,
            "--check",
            "true",
        ],
    );
    // In place a green check is human_required (no guard can judge an in-place step).
    assert_eq!(halted(&r), (11, "human_required".into()), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("uid")).unwrap(),
        format!("{ZONE_UID_WHEN_ROOT}\n")
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("listing")).unwrap(),
        "",
        "nothing of the state dir shows"
    );
    assert!(
        !dir.path().join(".gitmodules").exists(),
        "the protected placeholder is gone and nothing was planted"
    );
}

#[test]
fn a_missing_image_is_refused_with_the_fix_and_nothing_is_pulled() {
    if !engine_ready("podman") {
        return;
    }
    let repo = counting_repo();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--backend",
            "podman",
            "--image",
            "localhost/no-such-image:404",
            "--policy",
            "builtin:offline",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 30, "{r:?}");
    let err = &r.json()["errors"][0];
    assert_eq!(err["code"], "isolation_unsatisfiable");
    assert!(
        err["message"].as_str().unwrap().contains("never pulls"),
        "{err}"
    );
}

// --- docker -----------------------------------------------------------------------------------

#[test]
fn docker_runs_a_detached_offline_loop_to_convergence() {
    if !engine_ready("docker") {
        return;
    }
    let repo = counting_repo();
    let r = run_in(
        "docker",
        repo.path(),
        &[
            "--run-id",
            "d",
            "--policy",
            "builtin:offline",
            "--exec",
            COUNT_UP,
            "--check",
            "sh tests/check.sh",
        ],
    );
    assert_eq!(
        halted(&r),
        (10, "success_condition_met".into()),
        "{r:?}\n{}",
        client_stderr(repo.path(), "d")
    );
    assert_eq!(git(repo.path(), &["show", "loopexec/d:a"]), "3\n");
    let start = events(repo.path(), "d")
        .into_iter()
        .find(|e| e["type"] == "run_start")
        .unwrap();
    assert_eq!(start["zone"], "docker");
}

#[test]
fn docker_check_has_no_network() {
    if !engine_ready("docker") {
        return;
    }
    let repo = counting_repo();
    let check = "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; exit 1";
    let r = run_in(
        "docker",
        repo.path(),
        &[
            "--run-id",
            "n",
            "--policy",
            "builtin:offline",
            "--max-iterations",
            "1",
            "--exec",
            "true",
            "--check",
            check,
        ],
    );
    assert_eq!(halted(&r), (12, "max_iterations_reached".into()), "{r:?}");
    let out =
        std::fs::read_to_string(run_dir(repo.path(), "n").join("artifacts/0001-check.stdout"))
            .unwrap();
    assert_eq!(out, "lo\n");
}

#[test]
fn docker_proxied_agent_reaches_only_the_allowed_host_through_its_network_holder() {
    if !engine_ready("docker") {
        return;
    }
    proxied_agent_reaches_only_the_allowed_host("docker");
}

// --- unprivileged -----------------------------------------------------------------------------

/// What rootless podman reports it can enforce here: Some(has the memory controller), or None
/// when it does not answer at all.
fn rootless_podman_has_memory_controller() -> Option<bool> {
    let out = Command::new("podman")
        .args(["info", "--format", "json"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(
        v["host"]["cgroupControllers"]
            .as_array()?
            .iter()
            .any(|c| c == "memory"),
    )
}

/// Rootless podman keeps a pause process (holding its user namespace) after any command. Ends
/// the one this test caused, by the pid podman recorded, unless one was there before the test.
struct RootlessPauseCleanup(Option<PathBuf>);

impl RootlessPauseCleanup {
    fn new() -> RootlessPauseCleanup {
        let uid = nix::unistd::getuid().as_raw();
        let runtime =
            std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| format!("/tmp/podman-run-{uid}"));
        let file = PathBuf::from(runtime).join("libpod/tmp/pause.pid");
        let already = std::fs::read_to_string(&file)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
            .is_some_and(pid_alive);
        RootlessPauseCleanup((!already).then_some(file))
    }
}

impl Drop for RootlessPauseCleanup {
    fn drop(&mut self) {
        let Some(file) = &self.0 else { return };
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            // SAFETY: kill(2) of the pause process podman started for this test.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
}

#[test]
fn unprivileged_podman_runs_only_where_it_can_enforce_the_policy() {
    if is_root() {
        eprintln!("skipped: the unprivileged variant (root runs the engine tests above)");
        return;
    }
    let _pause = RootlessPauseCleanup::new();
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--backend",
            "podman",
            "--image",
            &image(),
            "--policy",
            "builtin:offline",
            "--max-iterations",
            "1",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    match rootless_podman_has_memory_controller() {
        Some(true) => assert_eq!(
            r.code, 10,
            "rootless podman with delegated controllers runs the loop: {r:?}"
        ),
        Some(false) => {
            assert_eq!(r.code, 30, "{r:?}");
            let message = r.json()["errors"][0]["message"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(message.contains("cannot enforce memory_bytes"), "{message}");
        }
        None => {
            assert_eq!(r.code, 30, "{r:?}");
            assert_eq!(r.json()["errors"][0]["code"], "isolation_unsatisfiable");
        }
    }
}

#[test]
fn unprivileged_container_backend_refuses_a_detached_workspace() {
    if is_root() {
        eprintln!("skipped: the unprivileged variant (root mounts the overlay itself)");
        return;
    }
    let repo = counting_repo();
    let r = loopexec(
        repo.path(),
        &[
            "isolate",
            "--json",
            "--backend",
            "podman",
            "--image",
            &image(),
            "--policy",
            "builtin:offline",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 30, "{r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("detached workspace is an overlay"),
        "{message}"
    );
}

// --- isolate and flags (no engine needed) -----------------------------------------------------

fn isolate(dir: &Path, args: &[&str]) -> Ran {
    let mut all = vec!["isolate", "--json"];
    all.extend_from_slice(args);
    loopexec(dir, &all)
}

#[test]
fn isolate_prints_the_podman_command_of_each_zone_with_no_network_for_the_check() {
    let dir = workdir();
    zone_writable(dir.path()); // in place, as root, the zone writes as the workdir's owner
    let r = isolate(
        dir.path(),
        &[
            "--backend",
            "podman",
            "--image",
            "localhost/agent:1",
            "--workspace",
            "in-place",
            "--policy",
            "builtin:offline",
            "--exec",
            "agent",
            "--check",
            "make test",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    let zones = v["isolate"]["zones"].as_array().unwrap();
    let argv = |i: usize| {
        zones[i]["plan"]["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let (agent, check) = (argv(0), argv(1));
    assert_eq!(&check[..2], &["podman".to_string(), "run".to_string()]);
    let after = |argv: &[String], flag: &str| {
        argv.iter()
            .position(|a| a == flag)
            .map(|i| argv[i + 1].clone())
    };
    assert_eq!(after(&check, "--network").as_deref(), Some("none"));
    assert_eq!(after(&agent, "--network").as_deref(), Some("none"));
    assert_eq!(after(&check, "--cap-drop").as_deref(), Some("ALL"));
    assert_eq!(
        after(&check, "--security-opt").as_deref(),
        Some("no-new-privileges")
    );
    assert!(check.contains(&"--read-only".to_string()));
    assert_eq!(
        &check[check.len() - 3..],
        &[
            "localhost/agent:1".to_string(),
            "-c".into(),
            "make test".into()
        ]
    );
}

#[test]
fn isolate_shows_a_proxied_podman_agent_joining_the_namespace_loopexec_prepares() {
    let dir = workdir();
    zone_writable(dir.path()); // in place, as root, the zone writes as the workdir's owner
    let r = isolate(
        dir.path(),
        &[
            "--backend",
            "podman",
            "--image",
            "localhost/agent:1",
            "--workspace",
            "in-place",
            "--exec",
            "a",
            "--check",
            "b",
        ],
    );
    if !is_root() {
        assert_eq!(
            r.code, 30,
            "unprivileged, the proxy's namespace cannot be prepared for podman: {r:?}"
        );
        assert!(r.json()["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("needs root"));
        return;
    }
    assert_eq!(r.code, 0, "{r:?}");
    let agent = r.json()["isolate"]["zones"][0]["plan"]["argv"].clone();
    let argv: Vec<&str> = agent
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let at = argv.iter().position(|a| *a == "--network").unwrap();
    assert_eq!(argv[at + 1], "ns:<proxy network namespace>");
    assert!(argv.contains(&"HTTPS_PROXY=http://127.0.0.1:3128"));
}

#[test]
fn isolate_shows_a_proxied_docker_agent_sharing_its_network_holder() {
    let dir = workdir();
    zone_writable(dir.path()); // in place, as root, the zone writes as the workdir's owner
    let r = isolate(
        dir.path(),
        &[
            "--backend",
            "docker",
            "--image",
            "localhost/agent:1",
            "--workspace",
            "in-place",
            "--exec",
            "a",
            "--check",
            "b",
        ],
    );
    if !is_root() {
        assert_eq!(
            r.code, 30,
            "unprivileged, the listener cannot be put into the holder's namespace: {r:?}"
        );
        assert!(r.json()["errors"][0]["hint"]
            .as_str()
            .unwrap()
            .contains("builtin:offline"));
        return;
    }
    assert_eq!(r.code, 0, "{r:?}");
    let agent = r.json()["isolate"]["zones"][0]["plan"].clone();
    let argv: Vec<&str> = agent["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let at = argv.iter().position(|a| *a == "--network").unwrap();
    assert_eq!(argv[at + 1], "container:<egress network holder>");
    assert!(agent["prepared_at_run_time"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p.as_str().unwrap().contains("egress network holder")));
}

#[test]
fn isolate_of_the_native_backend_lists_its_namespaces_and_the_checks_network() {
    let dir = workdir();
    let r = isolate(dir.path(), &["--exec", "a", "--check", "b"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    let check = &v["isolate"]["zones"][1]["plan"];
    assert_eq!(
        check["namespaces"],
        serde_json::json!(["user", "mount", "pid", "network", "ipc", "uts", "cgroup"])
    );
    assert_eq!(check["network"]["mode"], "none");
    assert_eq!(
        v["isolate"]["zones"][0]["plan"]["network"]["proxy_listener"],
        "127.0.0.1:3128"
    );
}

#[test]
fn isolate_runs_nothing_and_writes_nothing() {
    let dir = workdir();
    zone_writable(dir.path()); // in place, as root, the zone writes as the workdir's owner
    let r = isolate(
        dir.path(),
        &[
            "--backend",
            "podman",
            "--image",
            "localhost/agent:1",
            "--workspace",
            "in-place",
            "--policy",
            "builtin:offline",
            "--exec",
            "touch x",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// `run` with `flags` (plus a trivial loop) is refused with exit 20 and a message holding `says`,
/// and leaves no run behind.
fn refused_as_usage(flags: &[&str], says: &str) {
    let dir = workdir();
    let mut args = vec!["run", "--json"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--exec", "true", "--check", "true"]);
    let r = loopexec(dir.path(), &args);
    assert_eq!(r.code, 20, "{r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains(says), "{message}");
    assert!(
        !dir.path().join(".loopexec/runs").exists(),
        "a refused run leaves nothing"
    );
}

#[test]
fn an_image_without_a_container_backend_is_a_usage_error() {
    refused_as_usage(
        &["--image", "x"],
        "--image and --cgroup-parent apply to a container backend",
    );
}

#[test]
fn a_container_backend_without_an_image_is_a_usage_error() {
    refused_as_usage(&["--backend", "docker"], "needs an image");
}

#[test]
fn an_image_that_looks_like_a_flag_is_refused() {
    refused_as_usage(
        &["--backend", "podman", "--image=--privileged"],
        "not a valid image reference",
    );
}

#[test]
fn a_container_backend_with_isolation_none_is_a_usage_error() {
    refused_as_usage(
        &["--backend", "podman", "--image", "x", "--isolation", "none"],
        "does not combine with --isolation none",
    );
}

#[test]
fn a_relative_cgroup_parent_is_a_usage_error() {
    refused_as_usage(
        &[
            "--backend",
            "podman",
            "--image",
            "x",
            "--cgroup-parent",
            "machine.slice",
        ],
        "must be an absolute cgroup path",
    );
}

#[test]
fn isolate_refuses_an_in_place_workdir_owned_by_root() {
    if !is_root() {
        eprintln!("skipped: only root creates root-owned workdirs");
        return;
    }
    let dir = workdir();
    let r = isolate(
        dir.path(),
        &[
            "--backend",
            "podman",
            "--image",
            "x",
            "--workspace",
            "in-place",
            "--policy",
            "builtin:offline",
            "--exec",
            "a",
            "--check",
            "b",
        ],
    );
    assert_eq!(r.code, 30, "{r:?}");
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("is owned by root"));
}

#[test]
fn isolate_of_a_loop_without_isolation_is_a_usage_error() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("loop.toml"),
        "check = \"true\"\nexec = \"true\"\nisolation = \"none\"\n",
    )
    .unwrap();
    let r = isolate(dir.path(), &[]);
    assert_eq!(r.code, 20, "{r:?}");
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("there are no zones to plan"));
}

#[test]
fn doctor_reports_what_podman_can_enforce_here() {
    if !engine_ready("podman") {
        return;
    }
    let dir = workdir();
    let offline = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/offline.toml");
    let r = loopexec(
        dir.path(),
        &[
            "doctor",
            "--json",
            "--backend",
            "podman",
            "--policy",
            &path_str(&offline),
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(
        (
            v["engine"]["engine"].as_str(),
            v["engine"]["rootless"].as_bool(),
            v["satisfiable"].as_bool()
        ),
        (Some("podman"), Some(false), Some(true))
    );
}

#[test]
fn doctor_says_docker_can_carry_the_default_agent_policy_as_root() {
    if !engine_ready("docker") {
        return;
    }
    let dir = workdir();
    let r = loopexec(dir.path(), &["doctor", "--json", "--backend", "docker"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["satisfiable"], true);
}

#[test]
fn an_unknown_backend_in_the_loop_file_is_refused_with_its_line() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("loop.toml"),
        "check = \"true\"\nexec = \"true\"\nbackend = \"lxc\"\nimage = \"x\"\n",
    )
    .unwrap();
    let r = loopexec(dir.path(), &["run", "--json"]);
    assert_eq!(r.code, 20, "{r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.starts_with("loop.toml line 3:"), "{message}");
    assert!(!dir.path().join(".loopexec").exists(), "nothing is written");
}

#[test]
fn an_unknown_backend_flag_value_is_a_usage_error() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--backend",
            "lxc",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("lxc"));
}

/// loopexec with a PATH holding no engine client.
fn without_engines(dir: &Path, args: &[&str]) -> Ran {
    from_output(
        command()
            .current_dir(dir)
            .env("PATH", "/nonexistent")
            .args(args)
            .output()
            .expect("spawn loopexec"),
    )
}

#[test]
fn a_missing_engine_refuses_the_run_naming_the_engine_and_writes_no_run() {
    let dir = workdir();
    let r = without_engines(
        dir.path(),
        &[
            "run",
            "--json",
            "--backend",
            "podman",
            "--image",
            "x",
            "--policy",
            "builtin:offline",
            "--workspace",
            "in-place",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 30, "{r:?}");
    let err = &r.json()["errors"][0];
    assert_eq!(err["code"], "isolation_unsatisfiable");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("podman: the client could not be started"),
        "{err}"
    );
    let runs = dir.path().join(".loopexec/runs");
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).unwrap().count() == 0,
        "no run is left behind"
    );
}

#[test]
fn doctor_with_a_missing_engine_refuses_naming_it() {
    let dir = workdir();
    let r = without_engines(dir.path(), &["doctor", "--json", "--backend", "docker"]);
    assert_eq!(r.code, 30, "{r:?}");
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("docker: the client could not be started"));
}
