//! A patch as the known-feasible reference (`--reference PATCH`, docs/progress.md "The
//! reference"): a unified diff applied to t0 by plumbing, checked exactly as a revision's tree
//! before the first agent call; one that does not apply is refused before anything is written.
mod common;
use common::calc::{calc_project, plan_steps as agent, test_id, write_package, PYTEST};
use common::*;
use serde_json::json;
use std::path::{Path, PathBuf};

/// Make `right` correct (and add a small binary file) on a branch `name`, leave `main` checked
/// out, and write `git diff --binary main name` to a file outside the repository.
fn patch_of(repo: &Path, name: &str, right: &[&str], out: &Path) -> PathBuf {
    git(repo, &["checkout", "-q", "-b", name]);
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(write_package(right))
        .current_dir(repo)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(repo.join("logo.bin"), [0u8, 159, 146, 150, 0, 255, 10, 0]).unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", name]);
    git(repo, &["checkout", "-q", "main"]);
    let diff = std::process::Command::new("git")
        .args(["diff", "--binary", "main", name])
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(diff.status.success());
    let path = out.join(format!("{name}.patch"));
    std::fs::write(&path, diff.stdout).unwrap();
    path
}

fn run_with_reference(dir: &Path, plan: &[&[&str]], reference: &Path) -> Ran {
    let exec = agent(plan);
    let reference = path_str(reference);
    loopexec(
        dir,
        &[
            "run",
            "--json",
            "--run-id",
            "r",
            "--exec",
            &exec,
            "--check",
            PYTEST,
            "--report",
            "out/junit.xml",
            "--reference",
            &reference,
        ],
    )
}

fn reference_event(dir: &Path) -> serde_json::Value {
    events(dir, "r")
        .into_iter()
        .find(|e| e["type"] == "reference")
        .expect("a reference event")
}

fn sha256_hex(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn a_passing_patch_is_recorded_with_its_digest_and_the_tree_it_makes_and_the_loop_goes_on() {
    let repo = calc_project();
    let out = tempfile::tempdir().unwrap();
    let patch = patch_of(
        repo.path(),
        "solution",
        &["add", "sub", "mul", "div"],
        out.path(),
    );
    let r = run_with_reference(repo.path(), &[&["add", "sub", "mul", "div"]], &patch);
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{r:?}"
    );
    let reference = reference_event(repo.path());
    let solution_tree = git_value(repo.path(), &["rev-parse", "solution^{tree}"]);
    assert_eq!(
        (
            reference["passed"].as_bool(),
            reference["tree_id"].as_str(),
            reference["patch"].as_str()
        ),
        (
            Some(true),
            Some(solution_tree.as_str()),
            Some(path_str(&patch).as_str())
        )
    );
    assert_eq!(reference["patch_sha256"], sha256_hex(&patch).as_str());
    assert!(reference.get("rev").is_none(), "{reference}");
}

#[test]
fn a_failing_patch_halts_infeasible_suspected_at_iteration_0_before_the_agent_is_called() {
    let repo = calc_project();
    let out = tempfile::tempdir().unwrap();
    let patch = patch_of(repo.path(), "half", &["add", "sub"], out.path());
    let r = run_with_reference(repo.path(), &[&["add", "sub", "mul", "div"]], &patch);
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["iteration"].as_u64()
        ),
        (17, Some("infeasible_suspected"), Some(0)),
        "{r:?}"
    );
    let types = event_types(repo.path(), "r");
    assert!(
        !types
            .iter()
            .any(|t| t == "iteration_start" || t == "exec_result"),
        "{types:?}"
    );
    let reference = reference_event(repo.path());
    assert_eq!(reference["passed"], false);
    assert_eq!(
        reference["failing_set"],
        json!([test_id("div"), test_id("mul")])
    );
    assert_eq!(
        reference["tree_id"],
        git_value(repo.path(), &["rev-parse", "half^{tree}"]).as_str()
    );
}

#[test]
fn a_patch_that_does_not_apply_is_refused_with_gits_reason_and_nothing_is_written() {
    let repo = calc_project();
    let out = tempfile::tempdir().unwrap();
    let patch = out.path().join("stale.patch");
    std::fs::write(
        &patch,
        "diff --git a/src/calc/__init__.py b/src/calc/__init__.py\n--- a/src/calc/__init__.py\n+++ b/src/calc/__init__.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a * b\x1b[31m\n+    return a + b\n",
    )
    .unwrap();
    let r = run_with_reference(repo.path(), &[&["add"]], &patch);
    assert_eq!(r.code, 20, "{r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with(&format!(
            "--reference {}: the patch does not apply to t0: ",
            path_str(&patch)
        )),
        "{message}"
    );
    assert!(
        message.contains("patch failed: src/calc/__init__.py:1"),
        "{message}"
    );
    assert!(
        !repo.path().join(".loopexec/runs/r").exists(),
        "nothing is written"
    );
}

#[test]
fn a_file_that_is_no_patch_is_refused_with_gits_reason() {
    let repo = calc_project();
    let out = tempfile::tempdir().unwrap();
    let patch = out.path().join("notes.txt");
    std::fs::write(&patch, "not a diff\n").unwrap();
    let r = run_with_reference(repo.path(), &[&["add"]], &patch);
    assert_eq!(r.code, 20, "{r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("the patch does not apply to t0: error: No valid patches in input"),
        "{message}"
    );
    assert!(
        !repo.path().join(".loopexec/runs/r").exists(),
        "nothing is written"
    );
}

#[test]
fn with_uncommitted_changes_a_patch_that_does_not_apply_to_t0_halts_invariant_failed_before_the_agent(
) {
    let repo = calc_project();
    let out = tempfile::tempdir().unwrap();
    let patch = patch_of(
        repo.path(),
        "solution",
        &["add", "sub", "mul", "div"],
        out.path(),
    );
    // t0 includes this change to the file the patch rewrites: the patch no longer applies.
    std::fs::write(
        repo.path().join("src/calc/__init__.py"),
        "def add(a, b):\n    return 0\n",
    )
    .unwrap();
    let exec = agent(&[&["add"]]);
    let reference = path_str(&patch);
    let args = [
        "run",
        "--json",
        "--run-id",
        "r",
        "--include-uncommitted",
        "--exec",
        &exec,
        "--check",
        PYTEST,
        "--report",
        "out/junit.xml",
        "--reference",
        &reference,
    ];
    let r = loopexec(repo.path(), &args);
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["iteration"].as_u64()
        ),
        (20, Some("invariant_failed"), Some(0)),
        "{r:?}"
    );
    let types = event_types(repo.path(), "r");
    assert!(
        !types
            .iter()
            .any(|t| t == "iteration_start" || t == "exec_result"),
        "{types:?}"
    );
    let reference = reference_event(repo.path());
    let detail = reference["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!(
            "--reference {}: the patch does not apply to t0: ",
            path_str(&patch)
        )),
        "{detail}"
    );
    assert_eq!(
        (reference.get("tree_id"), reference.get("passed")),
        (None, None),
        "{reference}"
    );
    assert!(
        run_dir(repo.path(), "r")
            .join("envelope.dsse.json")
            .exists(),
        "the run ends sealed"
    );
}
