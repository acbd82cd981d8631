//! The feedback file (docs/progress.md, "The feedback file"): before each agent call the oracle
//! writes `loopexec.feedback/v1` from the run's record into a directory outside the workdir,
//! names it in `LOOPEXEC_FEEDBACK` and in place of `{feedback}`, never reads it back, never
//! follows a link planted at its path, and never delivers it.
//!
//! The project is a small pytest package with four functions, each with one test, all failing at
//! t0; a scripted agent prints the feedback it was given (its stdout artifact is what it saw), then
//! rewrites the package in a planned sequence.
mod common;
use common::calc::{calc_project, plan_steps, test_id, PYTEST};
use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// `before` (the agent's look at its feedback), then the package of the plan's iteration.
fn agent(before: &str, plan: &[&[&str]]) -> String {
    format!("{before}; {}", plan_steps(plan))
}

/// Run the loop with `exec`; `extra` adds flags (e.g. `--isolation none`).
fn run(dir: &Path, exec: &str, extra: &[&str]) -> Ran {
    let mut args = vec![
        "run",
        "--json",
        "--run-id",
        "r",
        "--exec",
        exec,
        "--check",
        PYTEST,
        "--report",
        "out/junit.xml",
    ];
    args.extend_from_slice(extra);
    loopexec(dir, &args)
}

/// What the agent printed at iteration `n`.
fn agent_stdout(dir: &Path, n: u64) -> String {
    std::fs::read_to_string(run_dir(dir, "r").join(format!("artifacts/{n:04}-exec.stdout")))
        .unwrap_or_default()
}

fn feedback_seen(dir: &Path, n: u64) -> Value {
    let out = agent_stdout(dir, n);
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("iteration {n}'s feedback is not JSON ({e}): {out:?}"))
}

/// The feedback without its failure excerpts (pytest's wording is shown by its own test).
fn without_excerpts(mut feedback: Value) -> Value {
    for target in feedback["failing"].as_array_mut().into_iter().flatten() {
        target.as_object_mut().map(|t| t.remove("excerpt"));
    }
    feedback
}

#[test]
fn after_a_rejected_iteration_the_feedback_says_why_where_the_workspace_went_and_what_still_fails()
{
    let repo = calc_project();
    // Iteration 1 fixes add (kept), iteration 2 fixes sub and breaks add (rejected, reverted).
    let r = run(
        repo.path(),
        &agent("cat \"$LOOPEXEC_FEEDBACK\"", &[&["add"], &["sub"]]),
        &["--max-iterations", "3"],
    );
    assert_eq!(r.json()["iteration"], 3, "{r:?}");
    assert_eq!(
        without_excerpts(feedback_seen(repo.path(), 3)),
        json!({
            "schema": "loopexec.feedback/v1",
            "iteration": 3,
            "iterations_left": 0,
            "failing_count": 3,
            "failing": [
                {"test": test_id("div"), "truncated": false},
                {"test": test_id("mul"), "truncated": false},
                {"test": test_id("sub"), "truncated": false},
            ],
            "rejected": {"iteration": 2, "why": format!("it broke tests that passed before: {}", test_id("add")), "reverted_to": 1},
        })
    );
}

#[test]
fn after_a_red_iteration_each_failing_target_comes_with_its_failure_excerpt() {
    let repo = calc_project();
    // Iteration 1 fixes add; iteration 2 is told how sub, mul and div still fail.
    let look = "cat \"$LOOPEXEC_FEEDBACK\"; cat \"$(dirname \"$LOOPEXEC_FEEDBACK\")/feedback.md\"";
    let r = run(
        repo.path(),
        &agent(look, &[&["add"], &["add", "sub"]]),
        &["--max-iterations", "2"],
    );
    assert_eq!(r.json()["iteration"], 2, "{r:?}");
    let out = agent_stdout(repo.path(), 2);
    let (json_part, md) = out.split_at(
        out.find("# loopexec feedback")
            .expect("the markdown follows the JSON"),
    );
    let seen: Value = serde_json::from_str(json_part).unwrap();
    let failing = seen["failing"].as_array().unwrap();
    assert_eq!(
        failing
            .iter()
            .map(|t| t["test"].clone())
            .collect::<Vec<_>>(),
        [test_id("div"), test_id("mul"), test_id("sub")]
    );
    let sub = failing[2]["excerpt"]
        .as_str()
        .unwrap_or_else(|| panic!("no excerpt: {seen}"));
    assert!(sub.starts_with("assert 8 == 2\n"), "{sub}");
    assert!(sub.contains("where 8 = sub(5, 3)"), "{sub}");
    assert_eq!(failing[2]["truncated"], false);
    assert!(
        md.contains(&format!(
            "### ` {} `\n\n```\nassert 8 == 2\n",
            test_id("sub")
        )),
        "{md}"
    );
}

#[test]
fn in_place_a_rejected_iteration_is_told_with_no_revert_and_the_failures_it_left() {
    let repo = calc_project();
    let r = run(
        repo.path(),
        &agent("cat \"$LOOPEXEC_FEEDBACK\"", &[&["add"], &["sub"]]),
        &["--isolation", "none", "--max-iterations", "3"],
    );
    assert_eq!(r.json()["iteration"], 3, "{r:?}");
    let seen = feedback_seen(repo.path(), 3);
    assert_eq!(
        seen["rejected"],
        json!({"iteration": 2, "why": format!("it broke tests that passed before: {}", test_id("add"))})
    );
    let listed: Vec<Value> = seen["failing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["test"].clone())
        .collect();
    assert_eq!(listed, [test_id("add"), test_id("div"), test_id("mul")]);
}

#[test]
fn the_first_agent_call_is_told_the_t0_failures_and_its_markdown_sits_beside_the_json() {
    let repo = calc_project();
    let look = "cat \"$(dirname \"$LOOPEXEC_FEEDBACK\")/feedback.md\"";
    let r = run(
        repo.path(),
        &agent(look, &[&["add", "sub", "mul", "div"]]),
        &["--max-iterations", "2"],
    );
    assert_eq!(r.json()["halt_reason"], "success_condition_met", "{r:?}");
    let md = agent_stdout(repo.path(), 1);
    assert!(md.starts_with("# loopexec feedback, before iteration 1\n\nIterations left after this one: 1\n\n## Failing targets: 4\n\n"), "{md}");
    assert!(
        md.contains(&format!("### ` {} `\n", test_id("add"))),
        "{md}"
    );
}

#[test]
fn the_feedback_placeholder_in_the_exec_line_is_the_files_path() {
    let repo = calc_project();
    let r = run(
        repo.path(),
        &agent(
            "test {feedback} = \"$LOOPEXEC_FEEDBACK\" && cat {feedback}",
            &[&["add"]],
        ),
        &["--max-iterations", "1"],
    );
    assert_eq!(r.json()["iteration"], 1, "{r:?}");
    assert_eq!(feedback_seen(repo.path(), 1)["iteration"], 1);
}

#[test]
fn the_agent_zone_cannot_write_the_feedback_file() {
    let repo = calc_project();
    let r = run(
        repo.path(),
        &agent(
            "echo forged > \"$LOOPEXEC_FEEDBACK\"; echo \"exit $?\"",
            &[&["add"]],
        ),
        &["--max-iterations", "1"],
    );
    assert_eq!(r.json()["iteration"], 1, "{r:?}");
    assert_eq!(agent_stdout(repo.path(), 1), "exit 2\n");
    let stderr =
        std::fs::read_to_string(run_dir(repo.path(), "r").join("artifacts/0001-exec.stderr"))
            .unwrap();
    assert!(stderr.contains("Read-only file system"), "{stderr}");
}

#[test]
fn what_the_agent_wrote_into_the_file_is_replaced_by_feedback_regenerated_from_the_receipt() {
    let repo = calc_project();
    // On the host the agent can write the file; iteration 1 forges it, iteration 2 reads it.
    let look = "cat \"$LOOPEXEC_FEEDBACK\"; echo '{\"schema\": \"forged\", \"failing_count\": 0}' > \"$LOOPEXEC_FEEDBACK\"";
    let r = run(
        repo.path(),
        &agent(look, &[&["add"]]),
        &["--isolation", "none", "--max-iterations", "2"],
    );
    assert_eq!(r.json()["iteration"], 2, "{r:?}");
    let seen = agent_stdout(repo.path(), 2);
    let second: Value =
        serde_json::from_str(seen.lines().collect::<Vec<_>>().join("\n").as_str()).unwrap();
    let check_1 = events(repo.path(), "r")
        .into_iter()
        .find(|e| e["type"] == "check_result" && e["iteration"] == 1)
        .unwrap();
    assert_eq!(second["schema"], "loopexec.feedback/v1");
    assert_eq!(second["failing_count"], check_1["failing_count"]);
    let listed: Vec<Value> = second["failing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["test"].clone())
        .collect();
    assert_eq!(Value::Array(listed), check_1["failing_set"]);
}

#[test]
fn a_symlink_planted_at_the_feedback_path_is_replaced_not_followed() {
    let repo = calc_project();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "kept\n").unwrap();
    let plant = format!(
        "cat \"$LOOPEXEC_FEEDBACK\"; rm -f \"$LOOPEXEC_FEEDBACK\"; ln -s {} \"$LOOPEXEC_FEEDBACK\"",
        path_str(&victim)
    );
    let r = run(
        repo.path(),
        &agent(&plant, &[&["add"]]),
        &["--isolation", "none", "--max-iterations", "2"],
    );
    assert_eq!(r.json()["iteration"], 2, "{r:?}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "kept\n");
    assert_eq!(feedback_seen(repo.path(), 2)["iteration"], 2);
}

#[test]
fn the_feedback_is_not_in_the_delivered_branch_nor_left_behind() {
    let repo = calc_project();
    let r = run(
        repo.path(),
        &agent(
            "echo \"$LOOPEXEC_FEEDBACK\"",
            &[&["add", "sub", "mul", "div"]],
        ),
        &["--max-iterations", "1"],
    );
    assert_eq!(r.json()["halt_reason"], "success_condition_met", "{r:?}");
    let files = git(repo.path(), &["ls-tree", "-r", "--name-only", "loopexec/r"]);
    assert!(!files.contains("feedback"), "{files}");
    let path = agent_stdout(repo.path(), 1);
    let dir = Path::new(path.trim()).parent().unwrap().to_path_buf();
    assert!(!dir.starts_with(repo.path()), "{}", dir.display());
    assert!(!dir.exists(), "{} is left after the run", dir.display());
}

/// `cat path` as `uid`/`gid` with no supplementary groups: whether it read the file.
fn reads_as(uid: &str, gid: &str, path: &Path) -> bool {
    std::process::Command::new("setpriv")
        .args(["--reuid", uid, "--regid", gid, "--clear-groups", "cat"])
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn one_feedback() -> loopexec::feedback::Feedback {
    loopexec::feedback::Feedback::new(1, 0, [("secret_test", None)], None, vec![])
}

#[test]
fn another_local_user_cannot_read_the_feedback_the_zone_group_can() {
    use loopexec::engine::feedback_file::{FeedbackFile, MARKDOWN_NAME};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(other) = other_local_user() else {
        return;
    };
    let file = FeedbackFile::create(Some(ZONE_UID_WHEN_ROOT)).unwrap();
    file.write(&one_feedback()).unwrap();
    assert!(
        !reads_as(other, other, &file.json_path()),
        "{other} read the feedback file"
    );
    assert!(!reads_as(other, other, &file.dir().join(MARKDOWN_NAME)));
    let zone = ZONE_UID_WHEN_ROOT.to_string();
    assert!(
        reads_as(&zone, &zone, &file.json_path()),
        "the zone's uid/gid reads it"
    );
    let meta = std::fs::metadata(file.dir()).unwrap();
    assert_eq!(
        (meta.permissions().mode() & 0o7777, meta.gid()),
        (0o750, ZONE_UID_WHEN_ROOT)
    );
}

#[test]
fn without_a_zone_group_the_feedback_is_the_operators_alone() {
    use loopexec::engine::feedback_file::FeedbackFile;
    use std::os::unix::fs::PermissionsExt;
    let file = FeedbackFile::create(None).unwrap();
    file.write(&one_feedback()).unwrap();
    assert_eq!(
        std::fs::metadata(file.dir()).unwrap().permissions().mode() & 0o7777,
        0o700
    );
    assert_eq!(
        std::fs::metadata(file.json_path())
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o600
    );
}
