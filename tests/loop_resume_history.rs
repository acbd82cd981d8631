//! Resume continues from what the receipt recorded, whatever event loopexec died after: a guard's
//! finding recorded in a `snapshot` is a decided halt, exactly as a recorded check result is.
mod common;
use common::*;

/// A repository whose t0 holds a test the agent is told to weaken (a protected path).
fn repo_with_a_test() -> tempfile::TempDir {
    let repo = workdir();
    std::fs::create_dir(repo.path().join("tests")).unwrap();
    std::fs::write(
        repo.path().join("tests/test_answer.sh"),
        "test \"$(cat answer)\" = 42\n",
    )
    .unwrap();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    repo
}

/// Simulate loopexec dying right after it appended the `snapshot` event: the receipt loses every
/// line after it. Cutting lines off the end keeps the hash chain valid (each line only binds the
/// one before it), exactly what a crash between two appends leaves on disk.
fn crash_after_snapshot(repo: &std::path::Path, run_id: &str) {
    let dir = run_dir(repo, run_id);
    let receipt = dir.join("receipt.jsonl");
    let text = std::fs::read_to_string(&receipt).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let snapshot = lines
        .iter()
        .position(|l| l.contains("\"type\":\"snapshot\""))
        .expect("a snapshot event");
    let kept: String = lines[..=snapshot]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&receipt, kept).unwrap();
    // A process that dies before its halt never sealed the run.
    for sealed in ["envelope.dsse.json", "run-key.pub"] {
        let _ = std::fs::remove_file(dir.join(sealed));
    }
}

fn weakening_run(repo: &std::path::Path, run_id: &str, max_iterations: &str) {
    let r = loopexec(
        repo,
        &[
            "run",
            "--json",
            "--no-baseline",
            "--run-id",
            run_id,
            "--max-iterations",
            max_iterations,
            "--exec",
            "echo 'exit 0' > tests/test_answer.sh",
            "--check",
            "sh tests/test_answer.sh",
        ],
    );
    assert_eq!(r.code, 13, "{r:?}");
    crash_after_snapshot(repo, run_id);
}

#[test]
fn a_crash_between_a_blocking_snapshot_and_its_halt_resumes_to_blocked_path_modified_at_the_last_iteration(
) {
    let repo = repo_with_a_test();
    weakening_run(repo.path(), "last", "1");
    let resumed = loopexec(repo.path(), &["run", "--json", "--resume", "last"]);
    assert_eq!(resumed.code, 13, "{resumed:?}");
    assert_eq!(resumed.json()["halt_reason"], "blocked_path_modified");
    assert_eq!(
        event_types(repo.path(), "last"),
        [
            "run_start",
            "workspace",
            "guard_baseline",
            "iteration_start",
            "exec_result",
            "snapshot",
            "run_resumed",
            "guard_baseline",
            "halt"
        ]
    );
    let pubkey = path_str(&key_dir().join("operator.pub"));
    assert_eq!(
        loopexec(
            repo.path(),
            &["verify", "--json", "last", "--pubkey", &pubkey]
        )
        .code,
        0
    );
}

#[test]
fn a_crash_between_a_blocking_snapshot_and_its_halt_does_not_run_the_agent_again() {
    let repo = repo_with_a_test();
    weakening_run(repo.path(), "again", "3");
    let resumed = loopexec(repo.path(), &["run", "--json", "--resume", "again"]);
    assert_eq!(resumed.code, 13, "{resumed:?}");
    let v = resumed.json();
    assert_eq!(
        (v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (Some("blocked_path_modified"), Some(1))
    );
    let ev = events(repo.path(), "again");
    assert_eq!(
        ev.iter().filter(|e| e["type"] == "exec_result").count(),
        1,
        "the agent ran once"
    );
    assert_eq!(
        ev.last().unwrap()["detail"],
        "the agent changed protected paths: tests/test_answer.sh"
    );
}
