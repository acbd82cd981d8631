//! Progress (docs/progress.md): the ratchet keeps only iterations that lose no passing test, the
//! no-convergence halts fire from the trajectory of failing sets with their evidence in the
//! receipt, and `explain-halt` gives a verdict with a next command that works, the same verdict
//! `verify` reaches offline.
//!
//! The project is a small pytest package with four functions, each with one test, all failing at
//! t0 (the `check_baseline` run is the rules' start); a scripted agent rewrites the package in a
//! planned sequence (which functions are right at which iteration).
mod common;
use common::calc::{calc_project, plan_steps as agent, test_id, write_package, PYTEST};
use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// Run the loop on the host (in place) with the agent's `plan`.
fn run_plan(dir: &Path, plan: &[&[&str]], extra: &[&str]) -> Ran {
    let exec = agent(plan);
    let mut args = vec![
        "run",
        "--json",
        "--run-id",
        "r",
        "--isolation",
        "none",
        "--exec",
        &exec,
        "--check",
        PYTEST,
        "--report",
        "out/junit.xml",
    ];
    args.extend_from_slice(extra);
    loopexec(dir, &args)
}

fn progress(dir: &Path, iteration: u64) -> Value {
    events(dir, "r")
        .into_iter()
        .find(|e| e["type"] == "progress" && e["iteration"] == iteration)
        .expect("a progress event")
}

fn explain(dir: &Path) -> Value {
    let r = loopexec(dir, &["explain-halt", "r", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()["explanation"]["verdict"].clone()
}

/// Run `next_command` as an operator would (`loopexec` on PATH, the test operator key).
fn run_next_command(dir: &Path, command: &str) -> Ran {
    let bin_dir = Path::new(&bin()).parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("PATH", path)
        .env("LOOPEXEC_CONFIG_DIR", key_dir())
        .output()
        .unwrap();
    from_output(out)
}

#[test]
fn the_same_failures_three_times_in_a_row_halt_same_failure_repeated_with_the_iterations() {
    let repo = calc_project();
    let r = run_plan(repo.path(), &[&["add"]], &["--max-iterations", "8"]);
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["iteration"].as_u64()
        ),
        (17, Some("same_failure_repeated"), Some(3))
    );
    let fired = progress(repo.path(), 3);
    assert_eq!(fired["halt_reason"], "same_failure_repeated");
    assert_eq!(fired["evidence"]["rule"], "same_failure_repeated");
    assert_eq!(fired["evidence"]["iterations"], json!([1, 2, 3]));
}

#[test]
fn no_new_best_over_k_accepted_iterations_halts_no_progress_detected() {
    let repo = calc_project();
    // loop.toml switches the same-failure rule off; the flag sets K.
    std::fs::write(
        repo.path().join("loop.toml"),
        "[progress]\nsame_failure_n = 0\n",
    )
    .unwrap();
    let r = run_plan(
        repo.path(),
        &[&["add"]],
        &["--max-iterations", "8", "--no-progress-k", "2"],
    );
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["iteration"].as_u64()
        ),
        (17, Some("no_progress_detected"), Some(3))
    );
    assert_eq!(
        progress(repo.path(), 3)["evidence"],
        json!({"rule": "no_progress_detected", "best": 3, "best_at": 1, "since": [[2, 3], [3, 3]]})
    );
    let start = events(repo.path(), "r")
        .into_iter()
        .find(|e| e["type"] == "run_start")
        .unwrap();
    assert_eq!(start["config"]["progress"]["no_progress_k"], 2);
    assert_eq!(start["config"]["progress"]["same_failure_n"], 0);
}

#[test]
fn a_fix_that_breaks_a_passing_test_is_rejected_naming_the_test() {
    let repo = calc_project();
    let r = run_plan(
        repo.path(),
        &[&["add"], &["sub"]],
        &["--max-iterations", "2"],
    );
    assert_eq!(r.code, 12, "{r:?}");
    assert_eq!(progress(repo.path(), 1)["accepted"], true);
    let rejected = progress(repo.path(), 2);
    assert_eq!(rejected["accepted"], false);
    assert_eq!(rejected["frontier"], 1);
    assert_eq!(
        rejected["rejection"],
        json!({"kind": "lost_tests", "lost": [test_id("add")]})
    );
}

#[test]
fn a_failing_set_that_comes_back_halts_oscillation_detected() {
    let repo = calc_project();
    let r = run_plan(
        repo.path(),
        &[&["add"], &["sub"], &["add"]],
        &["--max-iterations", "8"],
    );
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["iteration"].as_u64()
        ),
        (17, Some("oscillation_detected"), Some(3))
    );
    let evidence = &progress(repo.path(), 3)["evidence"];
    assert_eq!(
        (evidence["iteration"].as_u64(), evidence["same_as"].as_u64()),
        (Some(3), Some(1))
    );
}

#[test]
fn a_test_broken_again_and_again_halts_same_test_regressed() {
    let repo = calc_project();
    let r = run_plan(
        repo.path(),
        &[&["add"], &["mul"], &["div"]],
        &["--max-iterations", "8"],
    );
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["iteration"].as_u64()
        ),
        (17, Some("same_test_regressed"), Some(3))
    );
    assert_eq!(
        progress(repo.path(), 3)["evidence"],
        json!({"rule": "same_test_regressed", "test": test_id("add"), "regressed_at": [2, 3]})
    );
}

#[test]
fn a_rejected_iteration_is_reverted_to_the_accepted_tree_exactly_and_that_tree_is_delivered() {
    let repo = calc_project();
    let exec = agent(&[&["add"], &["sub"]]);
    let args = [
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
        "--max-iterations",
        "2",
    ];
    let r = loopexec(repo.path(), &args);
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (12, Some("max_iterations_reached")),
        "{r:?}"
    );
    assert_eq!(progress(repo.path(), 2)["accepted"], false);
    let snapshots: Vec<Value> = events(repo.path(), "r")
        .into_iter()
        .filter(|e| e["type"] == "snapshot")
        .collect();
    let accepted_tree = snapshots[0]["tree_id"].as_str().unwrap().to_string();
    assert_ne!(
        snapshots[1]["tree_id"],
        accepted_tree.as_str(),
        "the rejected iteration left another tree"
    );
    assert_eq!(
        progress(repo.path(), 2)["reverted_to_tree"],
        accepted_tree.as_str()
    );
    let halt = events(repo.path(), "r").pop().unwrap();
    assert_eq!(halt["delivery"]["tree"], accepted_tree.as_str(), "{halt}");
    assert_eq!(
        git_value(repo.path(), &["rev-parse", "loopexec/r^{tree}"]),
        accepted_tree
    );
}

#[test]
fn the_agent_call_after_a_rejection_starts_from_the_reverted_tree() {
    let repo = calc_project();
    // Iteration 3 changes nothing: its snapshot is what the agent was given.
    let exec = agent(&[&["add"], &["sub"]]);
    let args = [
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
        "--max-iterations",
        "3",
    ];
    let r = loopexec(repo.path(), &args);
    assert_eq!(r.json()["iteration"], 3, "{r:?}");
    let trees: Vec<String> = events(repo.path(), "r")
        .into_iter()
        .filter(|e| e["type"] == "snapshot")
        .map(|e| e["tree_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(trees[2], trees[0]);
}

#[test]
fn a_cap_reached_while_improving_is_raise_the_limit_and_its_command_finishes_the_job() {
    let repo = calc_project();
    let plan: [&[&str]; 4] = [
        &["add"],
        &["add", "sub"],
        &["add", "sub", "mul"],
        &["add", "sub", "mul", "div"],
    ];
    // Detached, so that the suggested new run starts from the same committed t0.
    let r = run_detached(repo.path(), &plan, &["--max-iterations", "2"]);
    assert_eq!(r.code, 12, "{r:?}");
    let verdict = explain(repo.path());
    assert_eq!(verdict["verdict"], "raise_the_limit");
    assert_eq!(verdict["trajectory"], json!([[0, 4], [1, 3], [2, 2]]));
    assert_eq!(
        (
            verdict["rate"].as_f64(),
            verdict["more_iterations"].as_u64()
        ),
        (Some(1.0), Some(2))
    );
    let command = verdict["next_command"].as_str().unwrap();
    assert!(command.contains("--max-iterations 4"), "{command}");
    let again = run_next_command(repo.path(), &format!("{command} --json"));
    assert_eq!(
        (again.code, again.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{again:?}"
    );
}

#[test]
fn a_no_convergence_halt_is_do_not_retry_naming_the_decisive_iterations_and_its_command_works() {
    let repo = calc_project();
    assert_eq!(
        run_plan(repo.path(), &[&["add"]], &["--max-iterations", "8"]).code,
        17
    );
    let verdict = explain(repo.path());
    assert_eq!(verdict["verdict"], "do_not_retry");
    assert_eq!(verdict["decisive_iterations"], json!([1, 2, 3]));
    let command = verdict["next_command"].as_str().unwrap();
    assert!(
        command.starts_with("loopexec report r --workdir "),
        "{command}"
    );
    assert_eq!(run_next_command(repo.path(), command).code, 0);
}

#[test]
fn success_is_done_and_verify_reaches_the_verdict_explain_halt_gives_from_the_receipt() {
    let repo = calc_project();
    // Detached: in place a green check is human_required (no guard can judge the step).
    let r = run_detached(
        repo.path(),
        &[&["add", "sub"], &["add", "sub", "mul", "div"]],
        &["--max-iterations", "4"],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let verdict = explain(repo.path());
    assert_eq!(verdict["verdict"], "done");
    let pubkey = key_dir().join("operator.pub");
    let verified = loopexec(
        repo.path(),
        &[
            "verify",
            "r",
            "--json",
            "--pubkey",
            pubkey.to_str().unwrap(),
        ],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
    assert_eq!(verified.json()["verdict"], verdict);
}

/// A branch `solution` of the project on which every function is right (a known-feasible
/// reference), leaving `main` checked out.
fn add_solution_branch(repo: &Path) {
    git(repo, &["checkout", "-q", "-b", "solution"]);
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(write_package(&["add", "sub", "mul", "div"]))
        .current_dir(repo)
        .status()
        .unwrap();
    assert!(status.success());
    git(repo, &["commit", "-q", "-am", "solution"]);
    git(repo, &["checkout", "-q", "main"]);
}

fn run_detached(dir: &Path, plan: &[&[&str]], extra: &[&str]) -> Ran {
    let exec = agent(plan);
    let mut args = vec![
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
    ];
    args.extend_from_slice(extra);
    loopexec(dir, &args)
}

#[test]
fn a_reference_that_fails_the_check_stops_before_the_first_agent_call_infeasible_suspected() {
    let repo = calc_project();
    let r = run_detached(
        repo.path(),
        &[&["add", "sub", "mul", "div"]],
        &["--reference", "main"],
    );
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
    let reference = events(repo.path(), "r")
        .into_iter()
        .find(|e| e["type"] == "reference")
        .unwrap();
    assert_eq!(reference["passed"], false);
    let all: Vec<String> = ["add", "div", "mul", "sub"]
        .iter()
        .map(|f| test_id(f))
        .collect();
    assert_eq!(reference["failing_set"], json!(all));
    assert_eq!(explain(repo.path())["verdict"], "do_not_retry");
}

#[test]
fn a_passing_reference_is_recorded_and_the_loop_goes_on() {
    let repo = calc_project();
    add_solution_branch(repo.path());
    let r = run_detached(
        repo.path(),
        &[&["add", "sub", "mul", "div"]],
        &["--reference", "solution"],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{r:?}"
    );
    let reference = events(repo.path(), "r")
        .into_iter()
        .find(|e| e["type"] == "reference")
        .unwrap();
    assert_eq!(
        (reference["passed"].as_bool(), reference["tree_id"].as_str()),
        (
            Some(true),
            Some(git_value(repo.path(), &["rev-parse", "solution^{tree}"]).as_str())
        )
    );
}

#[test]
fn a_reference_that_does_not_exist_is_refused_before_anything_is_written() {
    let repo = calc_project();
    let r = run_detached(repo.path(), &[&["add"]], &["--reference", "no-such-branch"]);
    assert_eq!(r.code, 20, "{r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("--reference no-such-branch: no such commit or tree"),
        "{message}"
    );
    assert!(
        !repo.path().join(".loopexec/runs/r").exists(),
        "nothing is written"
    );
}

#[test]
fn without_a_reference_explain_halt_says_no_existence_proof_was_given() {
    let repo = calc_project();
    assert_eq!(
        run_detached(repo.path(), &[&["add", "sub", "mul", "div"]], &[]).code,
        10
    );
    let r = loopexec(repo.path(), &["explain-halt", "r", "--json"]);
    assert_eq!(
        r.json()["explanation"]["reference"],
        json!({"given": false})
    );
}

#[test]
fn ratchet_shows_the_frontier_and_what_each_rejected_iteration_lost() {
    let repo = calc_project();
    assert_eq!(
        run_detached(
            repo.path(),
            &[&["add"], &["sub"]],
            &["--max-iterations", "2"]
        )
        .code,
        12
    );
    let r = loopexec(repo.path(), &["ratchet", "r", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let ratchet = &r.json()["ratchet"];
    let first_tree = events(repo.path(), "r")
        .into_iter()
        .find(|e| e["type"] == "snapshot")
        .unwrap()["tree_id"]
        .clone();
    assert_eq!(
        ratchet["frontier"],
        json!({"iteration": 1, "tree_id": first_tree})
    );
    assert_eq!(
        (
            ratchet["judged"][1]["accepted"].as_bool(),
            &ratchet["judged"][1]["lost"]
        ),
        (Some(false), &json!([test_id("add")]))
    );
    assert_eq!(ratchet["judged"][1]["reverted_to_tree"], first_tree);
}
