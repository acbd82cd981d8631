//! The in-loop monitor: a green is confirmed by `confirm_runs` reruns on the same tree (default 1)
//! before `success_condition_met`, each recorded as a `check_confirmation` with the Wilson lower
//! bound on stability; an agent step that changed nothing is a free sample, and a check that
//! disagrees on it halts `check_not_deterministic` (exit 14). (A confirmation that goes red is
//! decided in `engine::decide`'s unit tests: a check whose rerun flips needs state outside its
//! throwaway layers, which the exec zone does not give it.)

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

fn run(dir: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec![
        "run",
        "--json",
        "--isolation",
        "none",
        "--run-id",
        "r",
        "--exec",
        "true",
    ];
    args.extend_from_slice(extra);
    let r = loopexec(dir, &args);
    (r.code, r.json())
}

fn confirmations(dir: &Path) -> Vec<Value> {
    events(dir, "r")
        .into_iter()
        .filter(|e| e["type"] == "check_confirmation")
        .collect()
}

/// A repository whose check fails on t0 and passes once the agent wrote `done` (detached).
fn repo(loop_toml: Option<&str>) -> tempfile::TempDir {
    let dir = workdir();
    std::fs::write(dir.path().join("src"), "x\n").unwrap();
    if let Some(text) = loop_toml {
        std::fs::write(dir.path().join("loop.toml"), text).unwrap();
    }
    commit_t0(dir.path());
    dir
}

fn run_detached(dir: &Path) -> (i32, Value) {
    let r = loopexec(
        dir,
        &[
            "run",
            "--json",
            "--run-id",
            "r",
            "--exec",
            "touch done",
            "--check",
            "test -f done",
        ],
    );
    (r.code, r.json())
}

#[test]
fn a_confirmed_green_is_success_after_one_agreeing_rerun_by_default() {
    let dir = repo(None);
    let (code, v) = run_detached(dir.path());
    assert_eq!(
        (code, v["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{v}"
    );
    let c = confirmations(dir.path());
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0]["agrees"], true);
    // Wilson lower bound of 1 agreeing sample of 1 at 95%: 1 / (1 + z^2), z = 1.6448536...
    assert!(
        (c[0]["stability_lower_bound"].as_f64().unwrap() - 0.26986594878405434).abs() < 1e-9,
        "{c:?}"
    );
    assert_eq!(c[0]["stability_target"], 0.95);
}

#[test]
fn confirm_runs_in_loop_toml_sets_the_number_of_reruns_and_each_tightens_the_bound() {
    let dir = repo(Some("confirm_runs = 3\n"));
    let (code, v) = run_detached(dir.path());
    assert_eq!(code, 10, "{v}");
    let bounds: Vec<f64> = confirmations(dir.path())
        .iter()
        .map(|e| e["stability_lower_bound"].as_f64().unwrap())
        .collect();
    // statistics.NormalDist: 1 / (1 + z^2 / k) for k = 1, 2, 3 agreeing samples.
    assert_eq!(bounds.len(), 3);
    for (got, want) in
        bounds
            .iter()
            .zip([0.26986594878405434, 0.4250306090063466, 0.5258044258424874])
    {
        assert!((got - want).abs() < 1e-9, "{bounds:?}");
    }
}

#[test]
fn confirm_runs_zero_declares_success_on_the_first_green() {
    let dir = repo(Some("confirm_runs = 0\n"));
    let (code, _) = run_detached(dir.path());
    assert_eq!(code, 10);
    assert!(confirmations(dir.path()).is_empty());
}

#[test]
fn a_red_check_is_not_confirmed() {
    let dir = workdir();
    let (code, _) = run(dir.path(), &["--check", "false", "--max-iterations", "1"]);
    assert_eq!(code, 12);
    assert!(confirmations(dir.path()).is_empty());
}

#[test]
fn an_agent_step_that_changes_nothing_is_a_free_sample_and_a_flip_on_it_halts_check_not_deterministic(
) {
    let dir = workdir();
    std::fs::write(dir.path().join("src"), "x\n").unwrap();
    // The progress rules off: a red check whose failing set stays the same for a few iterations
    // would otherwise halt no_progress_detected or same_failure_repeated (exit 17) before the
    // coin shows its other side.
    std::fs::write(
        dir.path().join("loop.toml"),
        "[progress]\nno_progress_k = 0\nsame_failure_n = 0\n",
    )
    .unwrap();
    commit_t0(dir.path());
    // Always red, but which test fails is a coin flip per run: the failing set differs on an
    // unchanged tree. (All 20 runs naming the same test has probability 2^-19.)
    let check = r#"b=$(od -An -N1 -tu1 /dev/urandom | tr -d ' '); printf '<testsuite tests="1" failures="1"><testcase classname="t" name="case%s"><failure/></testcase></testsuite>' $((b % 2)) > junit.xml; exit 1"#;
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "r",
            "--exec",
            "true",
            "--check",
            check,
            "--report",
            "junit.xml",
            "--max-iterations",
            "20",
        ],
    );
    let v = r.json();
    assert_eq!(r.code, 14, "{v}");
    assert_eq!(v["halt_reason"], "check_not_deterministic", "{v}");
    assert!(
        v["run"]["detail"]
            .as_str()
            .unwrap()
            .contains("the agent changed nothing at iteration"),
        "{v}"
    );
    let c = confirmations(dir.path());
    assert_eq!(c.len(), 1, "{c:?}");
    let n = c[0]["iteration"].as_u64().unwrap();
    assert_eq!(
        (
            c[0]["confirmation"].as_u64(),
            c[0]["same_tree_as"].as_u64(),
            c[0]["agrees"].as_bool()
        ),
        (Some(0), Some(n - 1), Some(false))
    );
}
