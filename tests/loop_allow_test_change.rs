//! A named path for a legitimate test change (issue 18, item 1): `[[allow_test_change]]` in
//! loop.toml names the test files (`path`) and test ids (`id`) the operator allows the agent to
//! change, each with a reason. End to end with Debian's pytest and node --test in the zones: an
//! honest fix that must change an assertion in a protected test file halts
//! `blocked_path_modified` without the
//! allowance and converges with it; the allowance lets exactly that file through (another test
//! file, a tampering pattern in the allowed file, a test id it loses stay judged); every use is a
//! `test_change_allowed` event with the reason, shown by `report` and `explain-halt`; a resumed
//! run reads the pinned allowances back; bad entries are refused before anything is written.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const REASON: &str = "total() pinned the off-by-one of add(); the fix changes its expected value";

/// A pytest project whose `add` has an off-by-one bug that `tests/test_api.py` pinned: fixing
/// `add` honestly makes the pinned assertion wrong, so the fix must change it.
fn pinned_bug_project() -> tempfile::TempDir {
    require_pytest();
    let dir = workdir();
    write(dir.path(), "pyproject.toml", "[project]\nname = \"calc\"\nversion = \"0.1.0\"\n\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n");
    write(
        dir.path(),
        "calc/__init__.py",
        "from calc.core import add, total\n",
    );
    write(
        dir.path(),
        "calc/core.py",
        "def add(a, b):\n    return a + b + 1\n\n\ndef total(items):\n    result = 0\n    for item in items:\n        result = add(result, item)\n    return result\n",
    );
    write(
        dir.path(),
        "tests/test_core.py",
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    );
    write(
        dir.path(),
        "tests/test_api.py",
        "from calc import total\n\n\ndef test_total_of_two():\n    assert total([1, 2]) == 5\n\n\ndef test_sum_pair():\n    assert total([2, 3]) == 5\n",
    );
    commit_t0(dir.path());
    dir
}

const CHECK: &str = "/usr/bin/python3 -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml";
/// The honest fix: `add` corrected, and the assertion that pinned its bug corrected with it.
const HONEST_FIX: &str = "sed -i 's/return a + b + 1/return a + b/' calc/core.py && sed -i 's/total(\\[1, 2\\]) == 5/total([1, 2]) == 3/' tests/test_api.py";

fn allowance(path: &str) -> String {
    format!("[[allow_test_change]]\npath = \"{path}\"\nreason = \"{REASON}\"\n")
}

fn run(repo: &Path, run_id: &str, agent: &str) -> (Ran, Vec<Value>) {
    let r = loopexec(
        repo,
        &[
            "run",
            "--json",
            "--run-id",
            run_id,
            "--exec",
            agent,
            "--check",
            CHECK,
            "--report",
            "out/junit.xml",
            "--max-iterations",
            "2",
        ],
    );
    let ev = events(repo, run_id);
    (r, ev)
}

fn allowed(ev: &[Value]) -> Vec<&Value> {
    ev.iter()
        .filter(|e| e["type"] == "test_change_allowed")
        .collect()
}

#[test]
fn an_honest_fix_that_changes_a_pinned_assertion_halts_blocked_path_modified_without_an_allowance()
{
    let repo = pinned_bug_project();
    let (r, ev) = run(repo.path(), "n", HONEST_FIX);
    assert_eq!(r.json()["halt_reason"], "blocked_path_modified", "{r:?}");
    let snapshot = ev.iter().find(|e| e["type"] == "snapshot").unwrap();
    assert_eq!(
        snapshot["protected_changes"],
        serde_json::json!([{"path": "tests/test_api.py", "change": "modified"}])
    );
    assert!(allowed(&ev).is_empty());
}

#[test]
fn the_same_fix_converges_under_an_allowance_for_that_file_and_the_use_is_recorded_with_its_reason()
{
    let repo = pinned_bug_project();
    write(repo.path(), "loop.toml", &allowance("tests/test_api.py"));
    let (r, ev) = run(repo.path(), "a", HONEST_FIX);
    assert_eq!(r.code, 10, "{r:?}");
    let start = ev.iter().find(|e| e["type"] == "run_start").unwrap();
    assert_eq!(
        start["config"]["allow_test_change"],
        serde_json::json!([{"path": "tests/test_api.py", "reason": REASON}])
    );
    let uses = allowed(&ev);
    assert_eq!(uses.len(), 1, "{uses:#?}");
    assert_eq!(
        (
            uses[0]["iteration"].as_u64(),
            uses[0]["guard"].as_str(),
            uses[0]["stage"].as_str()
        ),
        (Some(1), Some("protected_paths"), Some("after_agent"))
    );
    assert_eq!(
        uses[0]["uses"],
        serde_json::json!([{"path": "tests/test_api.py", "reason": REASON, "what": "tests/test_api.py modified"}])
    );
    // The check ran the agent's version of the allowed file (t0's is not frozen over it), and
    // the delivery carries it.
    let check = ev
        .iter()
        .rev()
        .find(|e| e["type"] == "check_result")
        .unwrap();
    assert_eq!(check["check_exit"], 0, "{check}");
    assert!(git(repo.path(), &["show", "loopexec/a:tests/test_api.py"]).contains("== 3"));
    let explain = loopexec(repo.path(), &["explain-halt", "a"]);
    assert!(explain.stdout.contains(&format!("iteration 1: tests/test_api.py modified under allowance path tests/test_api.py: {REASON}")), "{}", explain.stdout);
    let json = loopexec(repo.path(), &["explain-halt", "--json", "a"]).json();
    assert_eq!(
        json["explanation"]["allowed"][0]["uses"][0]["what"],
        "tests/test_api.py modified"
    );
    let report = loopexec(repo.path(), &["report", "a"]);
    assert!(report.stdout.contains(&format!("allowed (protected_paths): tests/test_api.py modified under allowance path tests/test_api.py: {REASON}")), "{}", report.stdout);
}

#[test]
fn an_allowance_for_one_test_file_does_not_let_a_change_to_another_through() {
    let repo = pinned_bug_project();
    write(repo.path(), "loop.toml", &allowance("tests/test_api.py"));
    let agent = format!("{HONEST_FIX} && sed -i 's/== 5$/== add(2, 3)/' tests/test_core.py");
    let (r, ev) = run(repo.path(), "o", &agent);
    assert_eq!(r.json()["halt_reason"], "blocked_path_modified", "{r:?}");
    let snapshot = ev.iter().find(|e| e["type"] == "snapshot").unwrap();
    assert_eq!(
        snapshot["protected_changes"],
        serde_json::json!([{"path": "tests/test_core.py", "change": "modified"}]),
        "only the other file objects"
    );
    assert_eq!(
        allowed(&ev)[0]["uses"][0]["what"],
        "tests/test_api.py modified"
    );
    assert!(
        ev.iter().all(|e| e["type"] != "check_result"),
        "the check never ran on the step"
    );
}

#[test]
fn a_tampering_pattern_in_the_allowed_file_still_halts_reward_hacking_detected() {
    let repo = pinned_bug_project();
    write(repo.path(), "loop.toml", &allowance("tests/test_api.py"));
    let agent = "sed -i 's/return a + b + 1/return a + b/' calc/core.py && sed -i 's/^    assert total/    import pytest; pytest.skip(\"later\")\\n    assert total/' tests/test_api.py";
    let (r, ev) = run(repo.path(), "t", agent);
    assert_eq!(r.json()["halt_reason"], "reward_hacking_detected", "{r:?}");
    let guard = ev
        .iter()
        .find(|e| e["type"] == "guard" && e["guard"] == "tampering")
        .unwrap();
    assert_eq!(guard["findings"][0]["path"], "tests/test_api.py", "{guard}");
}

#[test]
fn a_file_the_check_creates_under_an_allowed_path_is_still_a_write_by_the_check() {
    let repo = pinned_bug_project();
    write(repo.path(), "loop.toml", &allowance("tests/**"));
    // The fix, and a module the tests import that writes a new test file whenever it is imported.
    let agent = format!(
        "{HONEST_FIX} && printf '%s\\n' 'import pathlib' \"pathlib.Path(__file__).parent.parent.joinpath('tests', 'test_made.py').write_text('def test_made():\\\\n    pass\\\\n')\" >> calc/__init__.py"
    );
    let (r, ev) = run(repo.path(), "c", &agent);
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    let guard = ev
        .iter()
        .find(|e| {
            e["type"] == "guard"
                && e["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("of the tree it tested"))
        })
        .unwrap_or_else(|| panic!("no check-writes finding: {ev:#?}"));
    let findings = guard["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["path"] == "tests/test_made.py" && f["what"] == "created by the check"),
        "{findings:#?}"
    );
}

#[test]
fn a_renamed_test_in_the_allowed_file_loses_its_id_to_the_set_guard_unless_the_id_is_allowed_too() {
    // `test_sum_pair` fails at t0 (a target, so the ratchet, which keeps what passed, does not
    // hold it); renamed, its id leaves C0.
    let rename = format!("{HONEST_FIX} && sed -i 's/def test_sum_pair/def test_sum_of_two_and_three/' tests/test_api.py");
    // The path allowance lets the file and its test item through; the id it loses is the set
    // guard's, which only an id allowance exempts.
    let repo = pinned_bug_project();
    write(repo.path(), "loop.toml", &allowance("tests/test_api.py"));
    let (r, ev) = run(repo.path(), "p", &rename);
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    let guard = ev
        .iter()
        .find(|e| e["type"] == "guard" && e["stage"] == "after_check")
        .unwrap();
    assert_eq!(
        guard["findings"],
        serde_json::json!([{"path": null, "what": "no longer collected: tests.test_api::test_sum_pair"}]),
        "{guard}"
    );
    let item_use = allowed(&ev)
        .into_iter()
        .find(|a| a["guard"] == "metric_integrity")
        .expect("the test item change is an allowance use");
    assert!(
        item_use["uses"][0]["what"]
            .as_str()
            .unwrap()
            .contains("t0 test item `test_sum_pair` is gone"),
        "{item_use}"
    );

    let repo = pinned_bug_project();
    let both = format!("{}[[allow_test_change]]\nid = \"tests.test_api::test_sum_pair\"\nreason = \"renamed to say what it sums\"\n", allowance("tests/test_api.py"));
    write(repo.path(), "loop.toml", &both);
    let (r, ev) = run(repo.path(), "i", &rename);
    assert_eq!(r.code, 10, "{r:?}");
    let set_use = allowed(&ev)
        .into_iter()
        .find(|a| a["stage"] == "after_check")
        .expect("the lost id is an allowance use");
    assert_eq!(
        set_use["uses"],
        serde_json::json!([{"id": "tests.test_api::test_sum_pair", "reason": "renamed to say what it sums", "what": "no longer collected: tests.test_api::test_sum_pair"}])
    );
}

#[test]
fn an_assertion_dropped_from_the_allowed_file_is_let_through_by_the_assertion_guard_and_recorded() {
    let repo = pinned_bug_project();
    write(repo.path(), "loop.toml", &allowance("tests/test_api.py"));
    let agent = "sed -i 's/return a + b + 1/return a + b/' calc/core.py && sed -i 's/    assert total(\\[1, 2\\]) == 5/    pass/' tests/test_api.py";
    let (r, ev) = run(repo.path(), "d", agent);
    assert_eq!(r.code, 10, "{r:?}");
    let guards: Vec<&str> = allowed(&ev)
        .iter()
        .map(|a| a["guard"].as_str().unwrap())
        .collect();
    assert_eq!(guards, vec!["protected_paths", "metric_integrity"]);
    let assertions = allowed(&ev)
        .into_iter()
        .find(|a| a["guard"] == "metric_integrity")
        .unwrap();
    assert_eq!(
        assertions["uses"][0]["what"], "tests/test_api.py: assertions in test code: 2 at t0, 1 now",
        "{assertions}"
    );
}

#[test]
fn a_resumed_run_reads_its_pinned_allowances_back_even_when_loop_toml_changed() {
    let repo = pinned_bug_project();
    write(repo.path(), "loop.toml", &allowance("tests/test_api.py"));
    // Iteration 1 does nothing useful; iteration 2 (after the resume) makes the honest fix.
    let agent = format!("if [ -e .first ]; then {HONEST_FIX}; else touch .first; fi");
    let paused = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--once",
            "--run-id",
            "r",
            "--exec",
            &agent,
            "--check",
            CHECK,
            "--report",
            "out/junit.xml",
            "--max-iterations",
            "3",
        ],
    );
    assert_eq!(paused.code, 0, "{paused:?}");
    std::fs::remove_file(repo.path().join("loop.toml")).unwrap();
    let resumed = loopexec(repo.path(), &["run", "--json", "--resume", "r"]);
    assert_eq!(resumed.code, 10, "{resumed:?}");
    let ev = events(repo.path(), "r");
    assert_eq!(allowed(&ev)[0]["iteration"], 2);
    assert_eq!(allowed(&ev)[0]["uses"][0]["reason"], REASON);
}

/// A node --test package whose `total` pinned the off-by-one of `add` in `calc.test.js` (a
/// protected name: `*.test.*`).
fn node_pinned_bug_project() -> tempfile::TempDir {
    let dir = workdir();
    write(dir.path(), "package.json", "{\n  \"name\": \"calc\",\n  \"version\": \"0.1.0\",\n  \"scripts\": { \"test\": \"node --test\" }\n}\n");
    write(dir.path(), "calc.js", "const add = (a, b) => a + b + 1;\nconst total = (xs) => xs.reduce((acc, x) => add(acc, x), 0);\nmodule.exports = { add, total };\n");
    write(
        dir.path(),
        "calc.test.js",
        "const test = require(\"node:test\");\nconst assert = require(\"node:assert\");\nconst { add, total } = require(\"./calc\");\n\ntest(\"adds\", () => {\n  assert.strictEqual(add(2, 3), 5);\n});\n\ntest(\"totals two\", () => {\n  assert.strictEqual(total([1, 2]), 5);\n});\n",
    );
    commit_t0(dir.path());
    dir
}

#[test]
fn an_honest_javascript_fix_that_changes_a_pinned_assertion_converges_under_an_allowance() {
    let repo = node_pinned_bug_project();
    write(repo.path(), "loop.toml", &allowance("calc.test.js"));
    let check = "mkdir -p out && node --test --test-reporter=tap --test-reporter-destination=out/node.tap --test-reporter=spec --test-reporter-destination=stdout";
    let agent = "sed -i 's/a + b + 1/a + b/' calc.js && sed -i 's/total(\\[1, 2\\]), 5/total([1, 2]), 3/' calc.test.js";
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "js",
            "--exec",
            agent,
            "--check",
            check,
            "--report",
            "out/node.tap",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let ev = events(repo.path(), "js");
    assert_eq!(
        allowed(&ev)[0]["uses"],
        serde_json::json!([{"path": "calc.test.js", "reason": REASON, "what": "calc.test.js modified"}])
    );
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

fn refused(loop_toml: &str) -> String {
    let repo = pinned_bug_project();
    write(repo.path(), "loop.toml", loop_toml);
    let r = loopexec(
        repo.path(),
        &[
            "run", "--json", "--run-id", "x", "--exec", "true", "--check", "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    assert_eq!(v["errors"].as_array().unwrap().len(), 1, "{v}");
    assert!(
        !repo.path().join(".loopexec").exists(),
        "nothing is written for a refused configuration"
    );
    v["errors"][0]["message"].as_str().unwrap().to_string()
}

#[test]
fn an_unknown_key_in_an_allowance_is_refused_with_its_line_and_nothing_is_written() {
    let message = refused(
        "[[allow_test_change]]\npath = \"tests/test_api.py\"\nreason = \"x\"\nglob = \"tests/*\"\n",
    );
    assert!(
        message.starts_with("loop.toml line ") && message.contains("unknown field `glob`"),
        "{message}"
    );
}

#[test]
fn an_allowance_with_an_empty_reason_is_refused_and_nothing_is_written() {
    let message = refused("[[allow_test_change]]\npath = \"tests/test_api.py\"\nreason = \"\"\n");
    assert_eq!(message, "[[allow_test_change]] path tests/test_api.py: give a non-empty `reason = \"...\"`, which the receipt records with every use");
}

#[test]
fn an_allowance_with_a_bad_glob_is_refused_and_nothing_is_written() {
    let message = refused("[[allow_test_change]]\npath = \"tests/[api\"\nreason = \"x\"\n");
    assert!(
        message.starts_with("[[allow_test_change]] path tests/[api: not a glob"),
        "{message}"
    );
}
