//! The state directory is never reached through a planted symlink, and `check` lists problems.
mod common;
use common::*;

fn run(dir: &std::path::Path) -> Ran {
    loopexec(
        dir,
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    )
}

fn assert_refused(r: &Ran) {
    assert_eq!(r.code, 30, "{r:?}");
    let v = r.json();
    assert_eq!(v["errors"][0]["code"], "workspace_invalid");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("symlink"),
        "{v}"
    );
}

#[test]
fn a_symlinked_runs_directory_is_refused_and_its_target_untouched() {
    let dir = workdir();
    let target = workdir();
    std::fs::create_dir(dir.path().join(".loopexec")).unwrap();
    std::os::unix::fs::symlink(target.path(), dir.path().join(".loopexec/runs")).unwrap();
    assert_refused(&run(dir.path()));
    assert_eq!(std::fs::read_dir(target.path()).unwrap().count(), 0);
}

#[test]
fn a_symlinked_state_file_is_refused_and_its_target_untouched() {
    let dir = workdir();
    let target = workdir();
    std::fs::write(target.path().join("precious"), "keep").unwrap();
    std::fs::create_dir(dir.path().join(".loopexec")).unwrap();
    std::os::unix::fs::symlink(
        target.path().join("precious"),
        dir.path().join(".loopexec/state.json"),
    )
    .unwrap();
    assert_refused(&run(dir.path()));
    assert_eq!(
        std::fs::read_to_string(target.path().join("precious")).unwrap(),
        "keep"
    );
    assert!(
        std::fs::symlink_metadata(dir.path().join(".loopexec/state.json"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn a_symlinked_latest_pointer_is_refused_by_run_status_and_check() {
    let dir = workdir();
    assert_eq!(run(dir.path()).code, 10);
    let target = workdir();
    std::fs::write(target.path().join("precious"), "keep").unwrap();
    std::fs::remove_file(dir.path().join(".loopexec/latest")).unwrap();
    std::os::unix::fs::symlink(
        target.path().join("precious"),
        dir.path().join(".loopexec/latest"),
    )
    .unwrap();
    assert_refused(&run(dir.path()));
    assert_refused(&loopexec(dir.path(), &["status", "--json"]));
    let check = loopexec(dir.path(), &["check", "--json"]);
    assert_eq!(check.code, 30);
    let errors = check.json()["errors"].as_array().unwrap().clone();
    assert_eq!(errors.len(), 1, "only the link is a problem: {errors:?}");
    assert!(errors[0]["message"].as_str().unwrap().contains("latest"));
    assert_eq!(
        std::fs::read_to_string(target.path().join("precious")).unwrap(),
        "keep"
    );
}

#[test]
fn a_symlinked_run_state_file_is_refused_on_resume() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--once",
            "--run-id",
            "p",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "false",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let target = workdir();
    std::fs::write(target.path().join("precious"), "keep").unwrap();
    let state = run_dir(dir.path(), "p").join("state.json");
    std::fs::remove_file(&state).unwrap();
    std::os::unix::fs::symlink(target.path().join("precious"), &state).unwrap();
    assert_refused(&loopexec(dir.path(), &["run", "--json", "--resume", "p"]));
    assert_eq!(
        std::fs::read_to_string(target.path().join("precious")).unwrap(),
        "keep"
    );
}

#[test]
fn check_lists_every_problem_of_the_state_dir() {
    let dir = workdir();
    assert_eq!(
        loopexec(
            dir.path(),
            &[
                "run",
                "--no-baseline",
                "--json",
                "--run-id",
                "a",
                "--isolation",
                "none",
                "--exec",
                "true",
                "--check",
                "true"
            ]
        )
        .code,
        11
    );
    assert_eq!(
        loopexec(
            dir.path(),
            &[
                "run",
                "--no-baseline",
                "--json",
                "--run-id",
                "b",
                "--isolation",
                "none",
                "--exec",
                "true",
                "--check",
                "true"
            ]
        )
        .code,
        11
    );
    // Edit a receipt line of run a, break the state of run b, plant a link among b's artifacts.
    let receipt = run_dir(dir.path(), "a").join("receipt.jsonl");
    let text = std::fs::read_to_string(&receipt).unwrap().replacen(
        "\"iteration\":1",
        "\"iteration\":7",
        1,
    );
    std::fs::write(&receipt, text).unwrap();
    std::fs::write(run_dir(dir.path(), "b").join("state.json"), "{").unwrap();
    std::os::unix::fs::symlink(
        "/etc/passwd",
        run_dir(dir.path(), "b").join("artifacts/evil"),
    )
    .unwrap();
    let r = loopexec(dir.path(), &["check", "--json"]);
    assert_eq!(r.code, 30);
    let v = r.json();
    let messages: Vec<String> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert!(
        messages
            .iter()
            .any(|m| m.contains("receipt does not verify")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("state.json") && m.contains("parse")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("evil") && m.contains("symlink")),
        "{messages:?}"
    );
}

#[test]
fn check_without_a_state_dir_is_a_workspace_error() {
    let dir = workdir();
    let r = loopexec(dir.path(), &["check", "--json"]);
    assert_eq!(r.code, 30);
    assert!(r.json()["errors"][0]["hint"]
        .as_str()
        .unwrap()
        .contains("init"));
}
