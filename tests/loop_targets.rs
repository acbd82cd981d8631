//! Targets (docs/progress.md, "Targets"): `--target PATTERN` (or `target` in loop.toml) selects
//! the tests the loop must fix from t0's collected set; by default every test failing at t0 is a
//! target. Tests already failing at t0 that are not targets are recorded as pre-existing failures
//! and neither block success nor count as regressions; a test that passed at t0 must still pass.
//!
//! The project is a small pytest package in a detached workspace (native isolation): `add` is
//! wrong (its test fails at t0), `sub` is right, and an unrelated legacy test fails at t0. Scripted
//! agents rewrite the package with `sed`.
mod common;
use common::*;
use serde_json::{json, Value};
use std::path::Path;

// `-B`: no bytecode (see tests/common/calc.rs: a stale `.pyc` in place).
const PYTEST: &str =
    "/usr/bin/python3 -B -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml";
const ADD: &str = "tests.test_calc::test_add";
const SUB: &str = "tests.test_calc::test_sub";
const LEGACY: &str = "tests.test_legacy::test_legacy_format";

/// Fixes `add`.
const FIX_ADD: &str = "sed -i 's/return a - b  # add/return a + b  # add/' calc/__init__.py";
/// Fixes `add` and breaks `sub`.
const FIX_ADD_BREAK_SUB: &str =
    "sed -i -e 's/return a - b  # add/return a + b  # add/' -e 's/return a - b  # sub/return a * b  # sub/' calc/__init__.py";

/// t0: `test_add` and `test_legacy_format` fail, `test_sub` passes.
fn project() -> tempfile::TempDir {
    common::targets::project(None)
}

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

fn of_type(dir: &Path, kind: &str) -> Vec<Value> {
    events(dir, "r")
        .into_iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

fn only(dir: &Path, kind: &str) -> Value {
    let found = of_type(dir, kind);
    assert_eq!(found.len(), 1, "one {kind} event: {found:#?}");
    found[0].clone()
}

#[test]
fn a_preexisting_unrelated_failure_does_not_block_success() {
    let repo = project();
    let r = run(
        repo.path(),
        FIX_ADD,
        &["--target", "tests.test_calc::*", "--max-iterations", "3"],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{r:?}"
    );
    let targets = only(repo.path(), "targets");
    assert_eq!(targets["patterns"], json!(["tests.test_calc::*"]));
    assert_eq!(targets["targets"], json!([ADD, SUB]));
    assert_eq!(targets["preexisting_failures"], json!([LEGACY]));
    let progress = only(repo.path(), "progress");
    assert_eq!(
        (
            progress["iteration"].as_u64(),
            progress["failing_targets"].as_u64()
        ),
        (Some(1), Some(0))
    );
    assert_eq!(
        (
            progress["accepted"].as_bool(),
            progress["targets_met"].as_bool()
        ),
        (Some(true), Some(true))
    );
    // The sentinel run judged the red success too: only the sentinel and the pre-existing
    // failure failed in it.
    let sentinel = only(repo.path(), "guard_sentinel");
    assert_eq!(
        (&sentinel["active"], &sentinel["holds"]),
        (&json!(true), &json!(true)),
        "{sentinel}"
    );
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
    assert_eq!(
        verified.json()["verdict"]["verdict"],
        json!("done"),
        "{verified:?}"
    );
}

#[test]
fn a_fix_that_breaks_a_test_passing_at_t0_is_never_success() {
    let repo = project();
    let r = run(
        repo.path(),
        FIX_ADD_BREAK_SUB,
        &["--target", ADD, "--max-iterations", "1"],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (12, Some("max_iterations_reached")),
        "{r:?}"
    );
    let progress = only(repo.path(), "progress");
    assert_eq!(progress["targets_met"], Value::Null);
    assert_eq!(progress["accepted"], json!(false));
    assert_eq!(
        progress["rejection"],
        json!({"kind": "lost_tests", "lost": [SUB]})
    );
    assert_eq!(progress["failing_targets"], json!(0));
}

#[test]
fn by_default_every_test_failing_at_t0_is_a_target() {
    let repo = project();
    let r = run(repo.path(), FIX_ADD, &["--max-iterations", "1"]);
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (12, Some("max_iterations_reached")),
        "{r:?}"
    );
    let targets = only(repo.path(), "targets");
    assert_eq!(
        (targets["patterns"].clone(), targets["targets"].clone()),
        (json!([]), json!([ADD, LEGACY]))
    );
    assert_eq!(targets["preexisting_failures"], json!([]));
    assert_eq!(only(repo.path(), "progress")["failing_targets"], json!(1));
}

#[test]
fn a_target_selecting_a_subset_counts_only_its_failing_tests() {
    let repo = project();
    // The agent changes nothing: `test_add` stays the one failing target.
    let r = run(
        repo.path(),
        "true",
        &[
            "--target",
            "*::test_add",
            "--target",
            SUB,
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 12, "{r:?}");
    assert_eq!(only(repo.path(), "targets")["targets"], json!([ADD, SUB]));
    assert_eq!(only(repo.path(), "progress")["failing_targets"], json!(1));
}

#[test]
fn targets_in_loop_toml_select_as_the_flag_does() {
    let repo = project();
    write(repo.path(), "loop.toml", &format!("target = [\"{ADD}\"]\n"));
    let r = run(repo.path(), FIX_ADD, &["--max-iterations", "2"]);
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{r:?}"
    );
    assert_eq!(
        only(repo.path(), "targets")["preexisting_failures"],
        json!([LEGACY])
    );
}

#[test]
fn targets_that_all_pass_at_t0_halt_at_iteration_0_without_the_agent() {
    let repo = project();
    let r = run(repo.path(), "touch agent-ran", &["--target", SUB]);
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{r:?}"
    );
    assert_eq!(of_type(repo.path(), "iteration_start"), Vec::<Value>::new());
    assert_eq!(
        only(repo.path(), "targets")["preexisting_failures"],
        json!([ADD, LEGACY])
    );
}

#[test]
fn a_target_matching_no_test_at_t0_halts_invariant_failed_before_the_first_agent_call() {
    let repo = project();
    let r = run(
        repo.path(),
        "touch agent-ran",
        &["--target", ADD, "--target", "tests.test_nothing::*"],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (20, Some("invariant_failed")),
        "{r:?}"
    );
    assert_eq!(
        r.stdout.trim().lines().count(),
        1,
        "exactly one JSON object: {r:?}"
    );
    let halt = only(repo.path(), "halt");
    assert_eq!(
        halt["detail"],
        json!("--target \"tests.test_nothing::*\" matched no test of t0's collected set (3 tests); nothing was spent on the agent")
    );
    assert_eq!(
        (
            halt["iteration"].as_u64(),
            of_type(repo.path(), "iteration_start").len()
        ),
        (Some(0), 0)
    );
    assert_eq!(of_type(repo.path(), "targets"), Vec::<Value>::new());
    assert_eq!(of_type(repo.path(), "check_baseline").len(), 1);
}

#[test]
fn a_target_that_is_no_glob_is_refused_before_anything_is_written() {
    let repo = project();
    let r = run(
        repo.path(),
        "true",
        &["--target", "tests.test_calc::test_add["],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(r.json()["errors"][0]["code"], json!("usage"), "{r:?}");
    assert!(!run_dir(repo.path(), "r").exists(), "no run was created");
}

#[test]
fn explain_halts_next_command_after_the_cap_keeps_the_runs_targets() {
    let repo = project();
    let r = run(
        repo.path(),
        FIX_ADD,
        &["--target", "*", "--max-iterations", "1"],
    );
    assert_eq!(r.code, 12, "{r:?}");
    let explained = loopexec(repo.path(), &["explain-halt", "r", "--json"]);
    let verdict = &explained.json()["explanation"]["verdict"];
    assert_eq!(
        (verdict["verdict"].as_str(), verdict["trajectory"].clone()),
        (Some("raise_the_limit"), json!([[0, 2], [1, 1]])),
        "{verdict}"
    );
    assert!(
        verdict["next_command"]
            .as_str()
            .unwrap()
            .contains(" --target '*' "),
        "{verdict}"
    );
}

#[test]
fn a_resumed_run_keeps_its_targets_and_records_them_once() {
    let repo = project();
    let agent = format!("case $LOOPEXEC_ITERATION in 1) true ;; *) {FIX_ADD} ;; esac");
    let first = run(
        repo.path(),
        &agent,
        &[
            "--target",
            "tests.test_calc::*",
            "--max-iterations",
            "3",
            "--once",
        ],
    );
    assert_eq!(first.json()["halt_reason"], Value::Null, "{first:?}");
    let resumed = loopexec(repo.path(), &["run", "--json", "--resume", "r"]);
    assert_eq!(
        (resumed.code, resumed.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{resumed:?}"
    );
    assert_eq!(
        only(repo.path(), "targets")["preexisting_failures"],
        json!([LEGACY])
    );
    assert_eq!(
        of_type(repo.path(), "progress").last().unwrap()["targets_met"],
        json!(true)
    );
}

#[test]
fn met_targets_in_place_are_human_required_as_a_green_check_there() {
    let repo = project();
    let r = run(
        repo.path(),
        FIX_ADD,
        &[
            "--isolation",
            "none",
            "--target",
            ADD,
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (11, Some("human_required")),
        "{r:?}"
    );
    let guard = only(repo.path(), "guard");
    assert_eq!(
        (guard["guard"].as_str(), guard["iteration"].as_u64()),
        (Some("in_place"), Some(1))
    );
    assert_eq!(only(repo.path(), "progress")["targets_met"], json!(true));
}
