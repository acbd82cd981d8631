//! The t0 baseline (issue 12, items 1 and 5): the check runs once on t0 before the first agent
//! call, its result (C0, F0, S0) is recorded as `check_baseline` and cached under `.loopexec/`,
//! a check already green on t0 halts at iteration 0 without the agent, and after every check
//! with exit 0 the collected set may not lose a member of C0 nor the skipped set gain one
//! against S0. End to end on small pytest projects in a detached workspace (native isolation),
//! with Debian's pytest (ci/setup.sh installs it).
mod common;
use common::*;
use serde_json::{json, Value};
use std::path::Path;

const PYTEST: &str = "/usr/bin/python3 -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml";

/// A committed pytest project whose `add` is wrong for negative numbers: the data-driven
/// `test_add[-1-1-0]` and `test_add_negative` fail on t0, `test_add[2-3-5]` passes.
/// `test_add_negative` runs only while the production flag `SIGNED` is true.
fn calc_project() -> tempfile::TempDir {
    require_pytest();
    let repo = workdir();
    let p = repo.path();
    write(p, "calc/__init__.py", "SIGNED = True\nCASES = [(2, 3, 5), (-1, 1, 0)]\n\n\ndef add(a, b):\n    return a + b if a >= 0 else a + b + 1\n");
    write(
        p,
        "tests/test_calc.py",
        "import pytest\n\nimport calc\n\n\n@pytest.mark.parametrize(\"a,b,expected\", calc.CASES)\ndef test_add(a, b, expected):\n    assert calc.add(a, b) == expected\n\n\n@pytest.mark.skipif(not calc.SIGNED, reason=\"unsigned build\")\ndef test_add_negative():\n    assert calc.add(-1, 1) == 0\n",
    );
    write(p, ".gitignore", "out/\n__pycache__/\n");
    commit_t0(p);
    repo
}

const HONEST_FIX: &str = "sed -i 's/a + b if a >= 0 else a + b + 1/a + b/' calc/__init__.py";

const T0_COLLECTED: [&str; 3] = [
    "tests.test_calc::test_add[-1-1-0]",
    "tests.test_calc::test_add[2-3-5]",
    "tests.test_calc::test_add_negative",
];

fn run_loop(dir: &Path, id: &str, exec: &str, extra: &[&str]) -> Ran {
    let mut args = vec![
        "run",
        "--json",
        "--run-id",
        id,
        "--exec",
        exec,
        "--check",
        PYTEST,
        "--report",
        "out/junit.xml",
    ];
    if !extra.contains(&"--max-iterations") {
        args.extend(["--max-iterations", "2"]);
    }
    args.extend_from_slice(extra);
    loopexec(dir, &args)
}

fn of_type(dir: &Path, id: &str, kind: &str) -> Vec<Value> {
    events(dir, id)
        .into_iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

fn baseline(dir: &Path, id: &str) -> Value {
    let found = of_type(dir, id, "check_baseline");
    assert_eq!(found.len(), 1, "one check_baseline event: {found:#?}");
    found[0].clone()
}

fn cache_entries(dir: &Path) -> Vec<std::path::PathBuf> {
    match std::fs::read_dir(dir.join(".loopexec/check-baselines")) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => vec![],
    }
}

#[test]
fn the_baseline_records_the_exit_code_and_the_collected_failing_and_skipped_sets_of_t0() {
    let repo = calc_project();
    let r = run_loop(repo.path(), "b", HONEST_FIX, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    let b = baseline(repo.path(), "b");
    assert_eq!(
        b["tree_id"],
        git_value(repo.path(), &["rev-parse", "HEAD^{tree}"])
    );
    assert_eq!(
        (
            b["cache_hit"].as_bool(),
            b["check"]["iteration"].as_u64(),
            b["check"]["check_exit"].as_i64()
        ),
        (Some(false), Some(0), Some(1))
    );
    assert_eq!(b["check"]["collected_set"], json!(T0_COLLECTED));
    assert_eq!(
        b["check"]["failing_set"],
        json!([
            "tests.test_calc::test_add[-1-1-0]",
            "tests.test_calc::test_add_negative"
        ])
    );
    assert_eq!(b["check"]["skipped_set"], json!([]));
    assert_eq!(b.get("sets_unmeasured"), None);
    let types = event_types(repo.path(), "b");
    assert_eq!(
        types[..4],
        ["run_start", "workspace", "guard_baseline", "check_baseline"],
        "the baseline comes before the first iteration"
    );
}

#[test]
fn a_second_run_on_the_same_commit_hits_the_cache_and_a_new_commit_misses_it() {
    let repo = calc_project();
    assert_eq!(
        run_loop(repo.path(), "first", "true", &["--max-iterations", "1"]).code,
        12
    );
    let first = baseline(repo.path(), "first");
    assert_eq!(cache_entries(repo.path()).len(), 1);

    assert_eq!(
        run_loop(repo.path(), "second", "true", &["--max-iterations", "1"]).code,
        12
    );
    let second = baseline(repo.path(), "second");
    assert_eq!(
        (second["cache_hit"].as_bool(), &second["cache_key"]),
        (Some(true), &first["cache_key"])
    );
    assert_eq!(
        second["check"]["collected_set"],
        first["check"]["collected_set"]
    );
    assert_eq!(
        second["check"]["stdout"]["artifact"],
        Value::Null,
        "a cached result names no artifact of this run"
    );
    assert!(
        !run_dir(repo.path(), "second")
            .join("artifacts/0000-check.stdout")
            .exists(),
        "the check did not run on t0 again"
    );

    write(repo.path(), "README", "a new commit\n");
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", "t1"]);
    assert_eq!(
        run_loop(repo.path(), "third", "true", &["--max-iterations", "1"]).code,
        12
    );
    let third = baseline(repo.path(), "third");
    assert_eq!(third["cache_hit"], false);
    assert_ne!(third["cache_key"], first["cache_key"]);
    assert_eq!(cache_entries(repo.path()).len(), 2);
}

#[test]
fn a_corrupt_cache_entry_is_ignored_said_so_and_recomputed() {
    let repo = calc_project();
    assert_eq!(
        run_loop(repo.path(), "first", "true", &["--max-iterations", "1"]).code,
        12
    );
    let entries = cache_entries(repo.path());
    assert_eq!(entries.len(), 1);
    // A planted entry that would make t0 look green and lose every test of C0.
    std::fs::write(
        &entries[0],
        b"{\"format\":1,\"key\":\"x\",\"check\":{\"iteration\":0",
    )
    .unwrap();
    assert_eq!(
        run_loop(repo.path(), "second", "true", &["--max-iterations", "1"]).code,
        12
    );
    let second = baseline(repo.path(), "second");
    assert_eq!(second["cache_hit"], false);
    let note = second["cache_note"].as_str().unwrap();
    let name = entries[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        note.starts_with(&format!(
            "cache entry check-baselines/{name} ignored (malformed: "
        )),
        "{note}"
    );
    assert!(note.ends_with("; the baseline was recomputed"), "{note}");
    assert_eq!(second["check"]["collected_set"], json!(T0_COLLECTED));
    assert!(
        run_dir(repo.path(), "second")
            .join("artifacts/0000-check.stdout")
            .exists(),
        "the check ran on t0 again"
    );
    assert_eq!(
        run_loop(repo.path(), "third", "true", &["--max-iterations", "1"]).code,
        12
    );
    assert_eq!(
        baseline(repo.path(), "third")["cache_hit"],
        true,
        "the recomputed entry replaced the corrupt one"
    );
}

#[test]
fn a_check_already_green_on_t0_halts_at_iteration_0_without_calling_the_agent() {
    let repo = calc_project();
    let p = repo.path();
    write(
        p,
        "calc/__init__.py",
        "SIGNED = True\nCASES = [(2, 3, 5), (-1, 1, 0)]\n\n\ndef add(a, b):\n    return a + b\n",
    );
    git(p, &["commit", "-q", "-am", "fixed"]);
    let marker = workdir();
    zone_writable(marker.path());
    let agent = format!("touch {}/agent-ran", path_str(marker.path()));
    let r = run_loop(p, "g", &agent, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    let v = r.json();
    assert_eq!(
        (v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (Some("success_condition_met"), Some(0))
    );
    assert_eq!(
        v["run"]["detail"],
        "the check already passes on t0 (the baseline run before any agent call, confirmed by 1 agreeing rerun(s)): halted at iteration 0, the agent was not called"
    );
    let types = event_types(p, "g");
    assert!(
        !types
            .iter()
            .any(|t| t == "iteration_start" || t == "exec_result"),
        "no iteration ran: {types:?}"
    );
    assert!(
        !marker.path().join("agent-ran").exists(),
        "the agent never ran"
    );
    let halt = of_type(p, "g", "halt").pop().unwrap();
    assert_eq!(halt["iteration"], 0);
}

#[test]
fn a_resumed_run_does_not_rerun_the_baseline() {
    let repo = calc_project();
    let p = repo.path();
    assert_eq!(run_loop(p, "r", "true", &["--once"]).code, 0);
    // The cache must not be what spares the rerun: remove it.
    for entry in cache_entries(p) {
        std::fs::remove_file(entry).unwrap();
    }
    let resumed = loopexec(p, &["run", "--json", "--resume", "r"]);
    assert_eq!(resumed.code, 12, "{resumed:?}");
    assert_eq!(of_type(p, "r", "check_baseline").len(), 1);
    assert_eq!(of_type(p, "r", "run_resumed").len(), 1);
    assert!(
        cache_entries(p).is_empty(),
        "the resumed run ran no baseline, so it wrote no cache entry"
    );
}

#[test]
fn a_test_of_t0_no_longer_collected_halts_metric_integrity_violation() {
    let repo = calc_project();
    // Pruning the failing case from the data table: no test file changes, the check is green.
    let agent = format!(
        "sed -i 's/, (-1, 1, 0)//' calc/__init__.py && {}",
        "sed -i 's/else a + b + 1/else a + b/' calc/__init__.py"
    );
    let r = run_loop(repo.path(), "lost", &agent, &[]);
    assert_eq!(r.code, 13, "{r:?}");
    let v = r.json();
    assert_eq!(v["halt_reason"], "metric_integrity_violation");
    let guard = of_type(repo.path(), "lost", "guard").pop().unwrap();
    assert_eq!(
        (guard["guard"].as_str(), guard["stage"].as_str()),
        (Some("metric_integrity"), Some("after_check"))
    );
    assert_eq!(guard["detail"], "the check exited 0 at iteration 1 but against the t0 baseline 1 test(s) of t0's 3 collected are no longer collected");
    assert_eq!(
        guard["findings"],
        json!([{"path": null, "what": "no longer collected: tests.test_calc::test_add[-1-1-0]"}])
    );
    assert_eq!(
        of_type(repo.path(), "lost", "check_result")[0]["check_exit"],
        0
    );
    let halt = of_type(repo.path(), "lost", "halt").pop().unwrap();
    assert_eq!(
        halt["delivery"]["branch"],
        Value::Null,
        "the step is not delivered"
    );
}

#[test]
fn a_test_skipped_that_t0_ran_halts_metric_integrity_violation() {
    let repo = calc_project();
    // Turning a production flag off skips the failing test through its existing skipif.
    let agent =
        "sed -i 's/SIGNED = True/SIGNED = False/; s/(-1, 1, 0)/(-1, 1, 1)/' calc/__init__.py";
    let r = run_loop(repo.path(), "skip", agent, &[]);
    assert_eq!(r.code, 13, "{r:?}");
    let guard = of_type(repo.path(), "skip", "guard").pop().unwrap();
    assert_eq!(guard["halt_reason"], "metric_integrity_violation");
    assert_eq!(
        guard["findings"],
        json!([
            {"path": null, "what": "no longer collected: tests.test_calc::test_add[-1-1-0]"},
            {"path": null, "what": "newly skipped: tests.test_calc::test_add_negative"}
        ])
    );
}

#[test]
fn an_honest_fix_keeps_every_set_and_converges() {
    let repo = calc_project();
    let r = run_loop(repo.path(), "h", HONEST_FIX, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    assert!(of_type(repo.path(), "h", "guard").is_empty());
    assert_eq!(
        of_type(repo.path(), "h", "check_result")[0]["collected_set"],
        json!(T0_COLLECTED)
    );
}

#[test]
fn a_check_naming_no_tests_records_that_the_sets_cannot_be_measured() {
    let repo = calc_project();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "u",
            "--exec",
            HONEST_FIX,
            "--check",
            "/usr/bin/python3 -m pytest -q -p no:cacheprovider",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let b = baseline(repo.path(), "u");
    assert_eq!(b["check"]["collected_set"], Value::Null);
    assert_eq!(
        b["sets_unmeasured"],
        "the check on t0 left no declared report and no libtest output naming tests: the collected and skipped sets cannot be measured, so no set guard runs"
    );
}

#[test]
fn no_baseline_runs_no_check_on_t0() {
    let repo = calc_project();
    let r = run_loop(repo.path(), "n", HONEST_FIX, &["--no-baseline"]);
    assert_eq!(r.code, 10, "{r:?}");
    assert!(of_type(repo.path(), "n", "check_baseline").is_empty());
    assert!(cache_entries(repo.path()).is_empty());
    assert_eq!(
        of_type(repo.path(), "n", "run_start")[0]["config"]["baseline"],
        false
    );
}

#[test]
fn a_check_passing_in_place_after_the_agent_halts_human_required_not_success() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "ip",
            "--isolation",
            "none",
            "--exec",
            "touch done",
            "--check",
            "test -f done",
        ],
    );
    assert_eq!(r.code, 11, "{r:?}");
    let v = r.json();
    assert_eq!(
        (v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (Some("human_required"), Some(1))
    );
    let guard = of_type(dir.path(), "ip", "guard").pop().unwrap();
    assert_eq!(
        (guard["guard"].as_str(), guard["stage"].as_str()),
        (Some("in_place"), Some("after_check"))
    );
    assert!(v["run"]["detail"].as_str().unwrap().starts_with("the check passed at iteration 1 in place, where no guard can compare the agent's change with t0"), "{v}");
}

#[test]
fn a_check_green_on_t0_in_place_still_halts_success_at_iteration_0_and_is_never_cached() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "ip0",
            "--isolation",
            "none",
            "--exec",
            "touch agent-ran",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(r.json()["iteration"], 0);
    assert!(
        !dir.path().join("agent-ran").exists(),
        "the agent never ran"
    );
    let b = baseline(dir.path(), "ip0");
    assert_eq!(
        (&b["tree_id"], &b["cache_key"], b["cache_hit"].as_bool()),
        (&Value::Null, &Value::Null, Some(false))
    );
    assert_eq!(
        b["cache_note"],
        "not cached: an in-place run has no t0 tree the agent cannot change"
    );
    assert!(cache_entries(dir.path()).is_empty());
}

#[test]
fn a_resumed_run_reads_a_large_baseline_back_from_its_artifact_and_still_guards_the_sets() {
    let repo = calc_project();
    let p = repo.path();
    // 1200 cases: over the receipt's inline bound, so check_baseline's sets go to an artifact.
    write(p, "calc/__init__.py", "SIGNED = True\nCASES = [(i, 0, i) for i in range(1200)] + [(-1, 1, 0)]\n\n\ndef add(a, b):\n    return a + b if a >= 0 else a + b + 1\n");
    git(p, &["commit", "-q", "-am", "many cases"]);
    // Iteration 1 changes nothing (red); iteration 2, after the resume, prunes the failing case.
    let agent = "if [ \"$LOOPEXEC_ITERATION\" = 2 ]; then sed -i 's/ + \\[(-1, 1, 0)\\]//; s/else a + b + 1/else a + b/' calc/__init__.py; fi";
    assert_eq!(run_loop(p, "big", agent, &["--once"]).code, 0);
    let b = baseline(p, "big");
    assert_eq!(
        (
            b["check"]["collected_set"].is_null(),
            b["check"]["collected_count"].as_u64()
        ),
        (true, Some(1202))
    );
    let resumed = loopexec(p, &["run", "--json", "--resume", "big"]);
    assert_eq!(resumed.code, 13, "{resumed:?}");
    let guard = of_type(p, "big", "guard").pop().unwrap();
    assert_eq!(
        guard["findings"],
        json!([{"path": null, "what": "no longer collected: tests.test_calc::test_add[-1-1-0]"}])
    );
}
