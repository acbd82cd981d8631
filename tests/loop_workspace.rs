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
    assert_eq!(std::fs::read(repo.path().join("fizzbuzz.sh")).unwrap(), before, "the operator's checkout is untouched");
    assert_eq!(git(repo.path(), &["rev-parse", "HEAD"]), head, "the current branch did not move");
    let ev = events(repo.path(), "d");
    let ws = ev.iter().find(|e| e["type"] == "workspace").unwrap();
    assert_eq!(ws["mode"], "detached");
    assert_eq!(ws["head_commit"].as_str().unwrap(), head.trim());
    let snapshots: Vec<&str> = ev.iter().filter(|e| e["type"] == "snapshot").map(|e| e["tree_id"].as_str().unwrap()).collect();
    assert_eq!(snapshots.len(), 3);
    let halt = ev.last().unwrap();
    assert_eq!(halt["delivery"]["branch"], "loopexec/d");
    let delivered_tree = git(repo.path(), &["rev-parse", "loopexec/d^{tree}"]);
    assert_eq!(delivered_tree.trim(), snapshots[2], "the branch holds the last accepted tree");
    let patch = run_dir(repo.path(), "d").join(halt["delivery"]["patch"].as_str().unwrap());
    assert!(std::fs::read_to_string(patch).unwrap().contains("fizzbuzz.sh"));
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
    std::fs::write(repo.path().join("tests/test_answer.sh"), "test \"$(cat answer)\" = 42\n").unwrap();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let r = loopexec(
        repo.path(),
        &["run", "--json", "--run-id", "o", "--max-iterations", "3", "--exec", "echo 41 > answer", "--check", "sh tests/test_answer.sh"],
    );
    assert_eq!(r.code, 12, "{r:?}");
    let checks = run_dir(repo.path(), "o").join("checks");
    let left: Vec<String> = std::fs::read_dir(&checks).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(left, vec!["frozen".to_string()]);
    assert_eq!(std::fs::read_to_string(checks.join("frozen/tests/test_answer.sh")).unwrap(), "test \"$(cat answer)\" = 42\n");
}

#[test]
fn an_agent_editing_a_test_halts_blocked_path_modified_before_the_check_runs() {
    let repo = workdir();
    std::fs::create_dir(repo.path().join("tests")).unwrap();
    std::fs::write(repo.path().join("tests/test_answer.sh"), "test \"$(cat answer)\" = 42\n").unwrap();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    let r = loopexec(
        repo.path(),
        &["run", "--json", "--run-id", "b", "--exec", "echo 'exit 0' > tests/test_answer.sh", "--check", "sh tests/test_answer.sh"],
    );
    assert_eq!(r.code, 13, "{r:?}");
    let v = r.json();
    assert_eq!(v["halt_reason"], "blocked_path_modified");
    let ev = events(repo.path(), "b");
    let snap = ev.iter().find(|e| e["type"] == "snapshot").unwrap();
    assert_eq!(snap["protected_changes"][0]["path"], "tests/test_answer.sh");
    assert!(ev.iter().all(|e| e["type"] != "check_result"), "the check never ran on the weakened test");
    assert_eq!(ev.last().unwrap()["delivery"]["branch"], serde_json::Value::Null, "nothing accepted, nothing delivered");
}

#[test]
fn a_fix_outside_protected_paths_passes_the_t0_tests_and_is_delivered() {
    let repo = workdir();
    std::fs::create_dir(repo.path().join("tests")).unwrap();
    std::fs::write(repo.path().join("tests/run.sh"), "for t in tests/test_*.sh; do sh \"$t\" || exit 1; done\n").unwrap();
    std::fs::write(repo.path().join("tests/test_answer.sh"), "test \"$(cat answer)\" = 42\n").unwrap();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    // The agent fixes the answer: the check (t0's tests) passes, and the fix is delivered.
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "f", "--exec", "echo 42 > answer", "--check", "sh tests/run.sh"]);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(std::fs::read_to_string(repo.path().join("answer")).unwrap(), "41\n", "the checkout is untouched");
    assert_eq!(git(repo.path(), &["show", "loopexec/f:answer"]), "42\n");
}

#[test]
fn a_detached_run_resumes_with_its_workspace() {
    let repo = example_repo();
    let r = loopexec(repo.path(), &["run", "--json", "--once", "--run-id", "p"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = loopexec(repo.path(), &["run", "--json", "--resume", "p"]);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(r.json()["iteration"], 3, "the second process continued the first one's workspace");
    let pubkey = path_str(&key_dir().join("operator.pub"));
    assert_eq!(loopexec(repo.path(), &["verify", "--json", "p", "--pubkey", &pubkey]).code, 0);
}

#[test]
fn a_detached_workspace_outside_a_repository_is_refused() {
    let dir = workdir();
    let r = loopexec(dir.path(), &["run", "--json", "--workspace", "detached", "--exec", "true", "--check", "true"]);
    assert_eq!(r.code, 30);
    assert!(r.json()["errors"][0]["message"].as_str().unwrap().contains("not a git repository"));
    assert!(!dir.path().join(".loopexec").exists());
}

#[test]
fn a_malformed_protected_pattern_is_refused_and_no_run_is_left() {
    let repo = example_repo();
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "g", "--protect", "src/[", "--exec", "true", "--check", "true"]);
    assert_eq!(r.code, 20, "{r:?}");
    assert!(r.json()["errors"][0]["message"].as_str().unwrap().contains("src/["));
    assert!(!run_dir(repo.path(), "g").exists(), "nothing is written for a refused configuration");
}
