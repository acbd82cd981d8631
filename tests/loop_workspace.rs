//! The detached workspace under native isolation: the agent works on an overlay over the
//! repository's committed tree, never in the operator's checkout; changes to protected paths halt
//! `blocked_path_modified`; the last accepted state is delivered as a branch and a patch.
mod common;
use common::*;
use std::path::Path;

/// A git repository holding the bundled fizzbuzz example, committed, reachable by the zone uid.
fn example_repo() -> tempfile::TempDir {
    let dir = workdir();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fizzbuzz");
    for entry in std::fs::read_dir(&example).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    commit_t0(dir.path());
    dir
}

#[test]
fn a_repository_runs_in_a_detached_workspace_delivered_as_a_branch() {
    let repo = example_repo();
    let before = std::fs::read(repo.path().join("fizzbuzz.sh")).unwrap();
    let head = git(repo.path(), &["rev-parse", "HEAD"]);
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "d"]);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        std::fs::read(repo.path().join("fizzbuzz.sh")).unwrap(),
        before,
        "the operator's checkout is untouched"
    );
    assert_eq!(
        git(repo.path(), &["rev-parse", "HEAD"]),
        head,
        "the current branch did not move"
    );
    let ev = events(repo.path(), "d");
    let ws = ev.iter().find(|e| e["type"] == "workspace").unwrap();
    assert_eq!(ws["mode"], "detached");
    assert_eq!(ws["head_commit"].as_str().unwrap(), head.trim());
    let snapshots: Vec<&str> = ev
        .iter()
        .filter(|e| e["type"] == "snapshot")
        .map(|e| e["tree_id"].as_str().unwrap())
        .collect();
    assert_eq!(snapshots.len(), 3);
    let halt = ev.last().unwrap();
    assert_eq!(halt["delivery"]["branch"], "loopexec/d");
    let delivered_tree = git(repo.path(), &["rev-parse", "loopexec/d^{tree}"]);
    assert_eq!(
        delivered_tree.trim(),
        snapshots[2],
        "the branch holds the last accepted tree"
    );
    let patch = run_dir(repo.path(), "d").join(halt["delivery"]["patch"].as_str().unwrap());
    assert!(std::fs::read_to_string(patch)
        .unwrap()
        .contains("fizzbuzz.sh"));
    let report = loopexec(repo.path(), &["report", "--json", "d"]).json();
    assert_eq!(report["report"]["delivery"]["branch"], "loopexec/d");
}

#[test]
fn the_checks_scratch_overlay_is_volatile_and_the_agents_workspace_is_not() {
    // The check's upper layer is thrown away: unmounting it need not sync the host filesystem.
    // The agent's is what gets delivered, and its overlay keeps the sync.
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let r = loopexec(
        repo.path(),
        &[
            "run", "--json", "--run-id", "v", "--max-iterations", "1",
            "--exec", "grep ' /workspace ' /proc/self/mountinfo > agent-mount",
            "--check", "grep ' /workspace ' /proc/self/mountinfo | grep -q volatile && grep -q overlay agent-mount && ! grep -q volatile agent-mount",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
}

#[test]
fn the_frozen_layer_is_built_once_per_run_and_each_checks_scratch_is_removed() {
    let repo = workdir();
    std::fs::create_dir(repo.path().join("tests")).unwrap();
    std::fs::write(
        repo.path().join("tests/test_answer.sh"),
        "test \"$(cat answer)\" = 42\n",
    )
    .unwrap();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "o",
            "--max-iterations",
            "3",
            "--exec",
            "echo 41 > answer",
            "--check",
            "sh tests/test_answer.sh",
        ],
    );
    assert_eq!(r.code, 12, "{r:?}");
    let checks = run_dir(repo.path(), "o").join("checks");
    let left: Vec<String> = std::fs::read_dir(&checks)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["frozen".to_string()]);
    assert_eq!(
        std::fs::read_to_string(checks.join("frozen/tests/test_answer.sh")).unwrap(),
        "test \"$(cat answer)\" = 42\n"
    );
}

#[test]
fn an_agent_editing_a_test_halts_blocked_path_modified_before_the_check_runs() {
    let repo = workdir();
    std::fs::create_dir(repo.path().join("tests")).unwrap();
    std::fs::write(
        repo.path().join("tests/test_answer.sh"),
        "test \"$(cat answer)\" = 42\n",
    )
    .unwrap();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "b",
            "--exec",
            "echo 'exit 0' > tests/test_answer.sh",
            "--check",
            "sh tests/test_answer.sh",
        ],
    );
    assert_eq!(r.code, 13, "{r:?}");
    let v = r.json();
    assert_eq!(v["halt_reason"], "blocked_path_modified");
    let ev = events(repo.path(), "b");
    let snap = ev.iter().find(|e| e["type"] == "snapshot").unwrap();
    assert_eq!(snap["protected_changes"][0]["path"], "tests/test_answer.sh");
    assert!(
        ev.iter().all(|e| e["type"] != "check_result"),
        "the check never ran on the weakened test"
    );
    assert_eq!(
        ev.last().unwrap()["delivery"]["branch"],
        serde_json::Value::Null,
        "nothing accepted, nothing delivered"
    );
}

#[test]
fn a_fix_outside_protected_paths_passes_the_t0_tests_and_is_delivered() {
    let repo = workdir();
    std::fs::create_dir(repo.path().join("tests")).unwrap();
    std::fs::write(
        repo.path().join("tests/run.sh"),
        "for t in tests/test_*.sh; do sh \"$t\" || exit 1; done\n",
    )
    .unwrap();
    std::fs::write(
        repo.path().join("tests/test_answer.sh"),
        "test \"$(cat answer)\" = 42\n",
    )
    .unwrap();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    // The agent fixes the answer: the check (t0's tests) passes, and the fix is delivered.
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "f",
            "--exec",
            "echo 42 > answer",
            "--check",
            "sh tests/run.sh",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("answer")).unwrap(),
        "41\n",
        "the checkout is untouched"
    );
    assert_eq!(git(repo.path(), &["show", "loopexec/f:answer"]), "42\n");
}

/// A repository whose check is a script outside the test trees (`ci/check.sh`, which sources
/// `ci/lib.sh`) and whose answer is wrong at t0.
fn ci_script_repo() -> tempfile::TempDir {
    let repo = workdir();
    std::fs::create_dir(repo.path().join("ci")).unwrap();
    std::fs::write(repo.path().join("ci/check.sh"), ". ci/lib.sh\nverify\n").unwrap();
    std::fs::write(
        repo.path().join("ci/lib.sh"),
        "verify() { test \"$(cat answer)\" = 42; }\n",
    )
    .unwrap();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    repo
}

/// Asserts the run halted `blocked_path_modified` on `path` before any check ran on the step.
fn assert_blocked(r: &Ran, repo: &Path, run_id: &str, path: &str) {
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (13, Some("blocked_path_modified")),
        "{r:?}"
    );
    let ev = events(repo, run_id);
    let snap = ev.iter().find(|e| e["type"] == "snapshot").unwrap();
    assert_eq!(snap["protected_changes"][0]["path"], path);
    assert!(
        ev.iter()
            .filter(|e| e["type"] == "check_result")
            .all(|c| c["iteration"] == 0),
        "the check never ran on the step"
    );
}

#[test]
fn a_check_script_the_command_runs_is_protected_and_rewriting_it_halts_blocked_path_modified() {
    let repo = ci_script_repo();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "s",
            "--exec",
            "echo 'exit 0' > ci/check.sh",
            "--check",
            "sh ci/check.sh",
        ],
    );
    assert_blocked(&r, repo.path(), "s", "ci/check.sh");
}

#[test]
fn a_helper_the_check_script_sources_is_protected_through_a_quoted_command_too() {
    let repo = ci_script_repo();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "h",
            "--exec",
            "echo 'verify() { :; }' > ci/lib.sh",
            "--check",
            "bash -c 'sh ci/check.sh'",
        ],
    );
    assert_blocked(&r, repo.path(), "h", "ci/lib.sh");
}

#[test]
fn an_honest_fix_under_a_check_script_converges_and_the_receipt_names_the_scripts_protected() {
    let repo = ci_script_repo();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "o",
            "--exec",
            "echo 42 > answer",
            "--check",
            "sh ci/check.sh",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let ev = events(repo.path(), "o");
    let protected = ev.iter().find(|e| e["type"] == "workspace").unwrap()["protected"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        protected.contains(&"/ci/check.sh".into()) && protected.contains(&"/ci/lib.sh".into()),
        "{protected:?}"
    );
    assert!(
        !protected.contains(&"/answer".into()),
        "a file the check only reads stays the agent's"
    );
}

#[test]
fn a_detached_run_resumes_with_its_workspace() {
    let repo = example_repo();
    let r = loopexec(repo.path(), &["run", "--json", "--once", "--run-id", "p"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = loopexec(repo.path(), &["run", "--json", "--resume", "p"]);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        r.json()["iteration"],
        3,
        "the second process continued the first one's workspace"
    );
    let pubkey = path_str(&key_dir().join("operator.pub"));
    assert_eq!(
        loopexec(repo.path(), &["verify", "--json", "p", "--pubkey", &pubkey]).code,
        0
    );
}

#[test]
fn a_detached_workspace_outside_a_repository_is_refused() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--workspace",
            "detached",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 30);
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("not a git repository"));
    assert!(!dir.path().join(".loopexec").exists());
}

#[test]
fn a_malformed_protected_pattern_is_refused_and_no_run_is_left() {
    let repo = example_repo();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "g",
            "--protect",
            "src/[",
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
        .contains("src/["));
    assert!(
        !run_dir(repo.path(), "g").exists(),
        "nothing is written for a refused configuration"
    );
}

/// Receipt and delivery agree: the last halt event's `delivery.branch` names a branch holding
/// `delivery.commit` exactly when that branch exists in the operator's repository.
fn assert_receipt_matches_delivery(repo: &Path, run_id: &str) {
    let ev = events(repo, run_id);
    let halt = ev
        .iter()
        .rev()
        .find(|e| e["type"] == "halt")
        .expect("a halt event");
    let branch = format!("refs/heads/loopexec/{run_id}");
    let out = std::process::Command::new("git")
        .current_dir(repo)
        .args(["rev-parse", "--verify", "-q", &branch])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    let on_disk = out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string());
    match halt["delivery"]["branch"].as_str() {
        Some(b) => {
            assert_eq!(b, format!("loopexec/{run_id}"));
            assert_eq!(
                on_disk.as_deref(),
                halt["delivery"]["commit"].as_str(),
                "the branch holds the receipt's commit"
            );
        }
        None => assert_eq!(
            on_disk, None,
            "the receipt says nothing was delivered, and no branch exists: {halt}"
        ),
    }
}

/// The run's receipt verifies offline against the operator key (it was sealed).
fn assert_sealed(repo: &Path, run_id: &str) {
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let r = loopexec(repo, &["verify", "--json", run_id, "--pubkey", &pubkey]);
    assert_eq!(r.code, 0, "{r:?}");
}

/// An agent policy: the shipped one with a `[workspace]` table, written outside the repository.
fn agent_policy_with(workspace_table: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    zone_traversable(dir.path());
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/agent.toml"))
            .unwrap();
    let path = dir.path().join("agent.toml");
    std::fs::write(
        &path,
        format!("{shipped}\n[workspace]\n{workspace_table}\n"),
    )
    .unwrap();
    let p = path_str(&path);
    (dir, p)
}

/// `loopexec` run through `sh -c "<limits>; exec loopexec ..."`, e.g. a small stack or few descriptors.
fn loopexec_under(limits: &str, dir: &Path, args: &[&str]) -> Ran {
    let out = command_under(limits, dir, args).output().expect("spawn");
    from_output(out)
}

fn command_under(limits: &str, dir: &Path, args: &[&str]) -> std::process::Command {
    let c = command();
    let program = c.get_program().to_owned();
    let mut sh = std::process::Command::new("bash");
    sh.arg("-c")
        .arg(format!("{limits} && exec \"$0\" \"$@\""))
        .arg(program)
        .args(args)
        .current_dir(dir);
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            sh.env(k, v);
        }
    }
    sh
}

const DEEP_TREE: &str = "/usr/bin/python3 -c \"import os,sys\nfor _ in range(int(sys.argv[1])):\n    os.mkdir('d'); os.chdir('d')\nopen('leaf','w').write('x')\"";

/// Remove a tree thousands of levels deep with `rm -rf` (fts: a bounded number of descriptors)
/// before its TempDir is dropped: the TempDir's own removal holds a descriptor per level in this
/// test process, which starved the test running beside it (EMFILE under the unprivileged user's
/// 1024-descriptor limit).
fn remove_deep_tree(dir: &Path) {
    let removed = std::process::Command::new("rm")
        .arg("-rf")
        .arg(dir)
        .status()
        .unwrap();
    assert!(removed.success(), "rm -rf {}: {removed:?}", dir.display());
}

#[test]
fn a_tree_over_max_depth_halts_workspace_invalid_sealed_and_resume_reports_the_halt() {
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let exec = format!("{DEEP_TREE} 300");
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            "deep",
            "--exec",
            &exec,
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 30, "{r:?}");
    let v = r.json();
    assert_eq!(v["halt_reason"], "workspace_invalid");
    let halt = events(repo.path(), "deep")
        .into_iter()
        .rev()
        .find(|e| e["type"] == "halt")
        .unwrap();
    let detail = halt["detail"].as_str().unwrap();
    assert!(detail.contains("workspace.max_depth = 256"), "{detail}");
    assert!(
        detail.contains(&["d"; 257].join("/")),
        "the path is named: {detail}"
    );
    assert_sealed(repo.path(), "deep");
    assert_receipt_matches_delivery(repo.path(), "deep");
    let again = loopexec(repo.path(), &["run", "--json", "--resume", "deep"]);
    assert_eq!(
        again.json()["errors"][0]["code"],
        "run_already_halted",
        "{again:?}"
    );
    assert!(again.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("workspace_invalid"));
}

#[test]
fn a_workspace_5000_levels_deep_is_read_on_a_small_stack_and_the_run_ends_sealed() {
    // The policy lets the tree through, so every phase (snapshot, tree ids, check layers,
    // delivery) meets the whole depth, on a 1 MiB main-thread stack (recursing, about 2,000
    // levels overflowed it; 18,000 overflowed the default 8 MiB).
    let (_p, policy) = agent_policy_with("max_depth = 20000\nmax_path_bytes = 100000");
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let exec = format!("{DEEP_TREE} 5000");
    let r = loopexec_under(
        "ulimit -s 1024",
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "stack",
            "--policy",
            &policy,
            "--max-iterations",
            "1",
            "--exec",
            &exec,
            "--check",
            "true",
        ],
    );
    let v = r.json();
    assert!(
        v["halt_reason"].is_string(),
        "a computed halt, not an abort: {r:?}"
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert_sealed(repo.path(), "stack");
    assert_receipt_matches_delivery(repo.path(), "stack");
    remove_deep_tree(repo.path());
}

#[test]
fn a_workspace_deeper_than_the_descriptor_limit_is_delivered_under_ulimit_n_256() {
    let (_p, policy) = agent_policy_with("max_depth = 2000");
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let exec = format!("{DEEP_TREE} 1100");
    let r = loopexec_under(
        "ulimit -Sn 256",
        repo.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--run-id",
            "fds",
            "--policy",
            &policy,
            "--max-iterations",
            "1",
            "--exec",
            &exec,
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(r.json()["state"], "halted", "{r:?}");
    assert_sealed(repo.path(), "fds");
    assert_receipt_matches_delivery(repo.path(), "fds");
    let leaf = format!("loopexec/fds:{}/leaf", ["d"; 1100].join("/"));
    assert_eq!(git(repo.path(), &["show", &leaf]), "x");
    remove_deep_tree(repo.path());
}

#[test]
fn each_name_git_treats_as_dot_git_elsewhere_halts_at_snapshot_and_is_never_delivered() {
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let aliases = [
        (".git\u{200c}", ".git"),
        (".g\u{feff}it", ".git"),
        ("GIT~1", ".git"),
        ("git~1", ".git"),
        (".git::$INDEX_ALLOCATION", ".git"),
        (".git. ", ".git"),
        (".GITMODULES", ".gitmodules"),
        ("GITMOD~1", ".gitmodules"),
        ("gi7eba~1", ".gitmodules"),
        (".gitattributes\u{200d}", ".gitattributes"),
    ];
    for (i, (name, alias)) in aliases.iter().enumerate() {
        let id = format!("alias{i}");
        let exec =
            format!("echo 42 > answer && mkdir -p 'sub/{name}' && echo x > 'sub/{name}/config'");
        let r = loopexec(
            repo.path(),
            &[
                "run",
                "--no-baseline",
                "--json",
                "--run-id",
                &id,
                "--exec",
                &exec,
                "--check",
                "true",
            ],
        );
        assert_eq!(r.code, 30, "{name:?}: {r:?}");
        assert_eq!(r.json()["halt_reason"], "workspace_invalid", "{name:?}");
        let halt = events(repo.path(), &id)
            .into_iter()
            .rev()
            .find(|e| e["type"] == "halt")
            .unwrap();
        let detail = halt["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("is {alias} to git")),
            "{name:?}: {detail}"
        );
        assert_eq!(
            halt["delivery"]["branch"],
            serde_json::Value::Null,
            "{name:?}"
        );
        assert_receipt_matches_delivery(repo.path(), &id);
    }
}

#[test]
fn gitmodules_gitattributes_and_the_threat_models_read_only_paths_are_protected() {
    let repo = workdir();
    std::fs::write(
        repo.path().join(".gitmodules"),
        "[submodule \"lib\"]\n\tpath = lib\n\turl = https://example.invalid/lib\n",
    )
    .unwrap();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let plants = [
        (
            "sed -i s/example.invalid/attacker.invalid/ .gitmodules",
            ".gitmodules",
        ),
        ("echo '* filter=evil' > .gitattributes", ".gitattributes"),
        (
            "mkdir -p src && echo '*.c diff=evil' > src/.gitattributes",
            "src/.gitattributes",
        ),
        (
            "mkdir -p .loopexec && echo x > .loopexec/state.json",
            ".loopexec/state.json",
        ),
    ];
    for (i, (exec, path)) in plants.iter().enumerate() {
        let id = format!("ro{i}");
        let r = loopexec(
            repo.path(),
            &[
                "run",
                "--no-baseline",
                "--json",
                "--run-id",
                &id,
                "--exec",
                exec,
                "--check",
                "true",
            ],
        );
        assert_eq!(r.code, 13, "{exec}: {r:?}");
        assert_eq!(r.json()["halt_reason"], "blocked_path_modified");
        let snap = events(repo.path(), &id)
            .into_iter()
            .find(|e| e["type"] == "snapshot")
            .unwrap();
        assert_eq!(snap["protected_changes"][0]["path"], *path, "{exec}");
        assert_receipt_matches_delivery(repo.path(), &id);
    }
    // `.git/hooks` and `.git/config` cannot be planted at all: a `.git` is never part of the tree.
    let r = loopexec(repo.path(), &["run", "--no-baseline", "--json", "--run-id", "hooks", "--exec", "echo 42 > answer && mkdir -p .git/hooks && echo evil > .git/hooks/post-checkout && echo evil > .git/config", "--check", "true"]);
    assert_eq!(r.code, 10, "{r:?}");
    assert_receipt_matches_delivery(repo.path(), "hooks");
    let tree = git(
        repo.path(),
        &["ls-tree", "-r", "--name-only", "loopexec/hooks"],
    );
    assert_eq!(tree, ".gitmodules\nanswer\n");
}

/// Run loopexec to the end; its outcome, wall time and the peak RSS (KiB) of the largest process
/// of the run (loopexec or one of its children), from `wait4`.
fn measured(dir: &Path, args: &[&str]) -> (Ran, std::time::Duration, i64) {
    use std::io::Read;
    let started = std::time::Instant::now();
    let mut child = command()
        .current_dir(dir)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    let elapsed = started.elapsed();
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (
        Ran {
            code,
            stdout: out_reader.join().unwrap(),
            stderr: err_reader.join().unwrap(),
        },
        elapsed,
        usage.ru_maxrss,
    )
}

/// One iteration of `exec` then a passing check, measured; prints the figures, returns the
/// snapshot and halt events and the peak RSS (KiB).
fn measured_run(
    repo: &Path,
    run_id: &str,
    exec: &str,
    what: &str,
) -> (serde_json::Value, serde_json::Value, i64) {
    let (r, elapsed, rss_kib) = measured(
        repo,
        &[
            "run",
            "--json",
            "--no-baseline",
            "--run-id",
            run_id,
            "--max-iterations",
            "1",
            "--exec",
            exec,
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let ev = events(repo, run_id);
    let snap = ev.iter().find(|e| e["type"] == "snapshot").unwrap().clone();
    let halt = ev
        .iter()
        .rev()
        .find(|e| e["type"] == "halt")
        .unwrap()
        .clone();
    println!(
        "{what}: run {:.1} s end to end (snapshot {} ms, delivery {} ms), peak RSS {} MiB",
        elapsed.as_secs_f64(),
        snap["duration_ms"],
        halt["delivery"]["duration_ms"],
        rss_kib / 1024
    );
    (snap, halt, rss_kib)
}

#[test]
fn two_hundred_thousand_files_are_snapshotted_and_delivered_in_one_streaming_pass() {
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let exec = "/usr/bin/python3 -c \"import os\nfor d in range(200):\n    os.makedirs('many/%03d' % d)\n    for f in range(1000):\n        open('many/%03d/%04d' % (d, f), 'w').close()\"";
    let (snap, _, _) = measured_run(repo.path(), "many", exec, "200k files");
    assert_eq!(snap["changed_paths"], 200_000);
    assert_receipt_matches_delivery(repo.path(), "many");
    let listed = git(
        repo.path(),
        &["ls-tree", "-r", "--name-only", "loopexec/many", "many"],
    );
    assert_eq!(listed.lines().count(), 200_000);
}

#[test]
fn three_sparse_gigabyte_files_are_streamed_never_read_whole() {
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let exec = "truncate -s 1G a b c && printf end >> c && echo 42 > answer";
    let (_, halt, rss_kib) = measured_run(repo.path(), "sparse", exec, "3 x 1 GiB sparse files");
    assert_receipt_matches_delivery(repo.path(), "sparse");
    assert_eq!(
        git(repo.path(), &["cat-file", "-s", "loopexec/sparse:c"]).trim(),
        ((1u64 << 30) + 3).to_string()
    );
    assert!(
        rss_kib < 512 * 1024,
        "a file is never held whole in memory: peak {rss_kib} KiB"
    );
    let patch = std::fs::read_to_string(
        run_dir(repo.path(), "sparse").join(halt["delivery"]["patch"].as_str().unwrap()),
    )
    .unwrap();
    let c_blob = git(repo.path(), &["rev-parse", "loopexec/sparse:c"]);
    assert!(
        patch.contains(&format!("{} A\tc", c_blob.trim())),
        "large files are listed, not inlined, in the patch"
    );
    assert!(patch.len() < 1 << 20);
    assert!(
        patch.contains("-41\n+42\n"),
        "the other changes are in the patch as usual"
    );
}

#[test]
fn another_local_user_reaches_neither_the_baseline_cache_nor_the_run_directory() {
    let Some(other) = other_local_user() else {
        return;
    };
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    // The agent leaves a 1777 directory in its workspace, as an invitation.
    let exec = "mkdir shared && chmod 1777 shared && echo 42 > answer";
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            "other",
            "--max-iterations",
            "1",
            "--exec",
            exec,
            "--check",
            "true",
        ],
    );
    assert_eq!(r.json()["halt_reason"], "success_condition_met", "{r:?}");
    let key = events(repo.path(), "other")
        .into_iter()
        .find(|e| e["type"] == "workspace")
        .unwrap()["baseline_key"]
        .as_str()
        .unwrap()
        .to_string();
    let cached = repo
        .path()
        .join(".loopexec/baselines")
        .join(&key)
        .join("tree/answer");
    let shared = run_dir(repo.path(), "other").join("workspace/upper/shared");
    let receipt = run_dir(repo.path(), "other").join("receipt.jsonl");
    assert!(
        cached.is_file() && shared.is_dir() && receipt.is_file(),
        "the paths the other user tries exist"
    );
    let as_other = |script: String| {
        std::process::Command::new("runuser")
            .args(["-u", other, "--", "sh", "-c", &script])
            .output()
            .unwrap()
    };
    for attempt in [
        format!("cat '{}'", cached.display()),
        format!("echo planted > '{}/planted'", shared.display()),
        format!("cat '{}'", receipt.display()),
        format!("ls '{}'", repo.path().join(".loopexec").display()),
    ] {
        let out = as_other(attempt.clone());
        assert!(!out.status.success(), "{other} succeeded: {attempt}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{attempt}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(git(repo.path(), &["show", "loopexec/other:answer"]), "42\n");
    assert_receipt_matches_delivery(repo.path(), "other");
}
