//! Held-out checks (docs/guards.md, "Held-out checks"): `--holdout-check CMD --holdout-dir DIR`
//! runs a second check, on the same candidate tree, after a green the guards let through, with DIR
//! bound read-only into that exec zone only. Work fitted to the visible tests' inputs passes the
//! visible check and fails the held-out one: `objective_unverified` (13), nothing delivered.
//! Honest work converges. The agent's zone never sees DIR, and nothing of the held-out check
//! reaches the agent. Also `[feedback] include`: what of the visible check reaches the agent.
//!
//! Three languages, real runners: a pytest package (`square`), a `node --test` package (`add`) and a
//! cargo crate (`square`, its held-out test compiled by rustc against the candidate's library).
//! Each agent is a scripted shell line that writes the code under test.
mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The visible pytest check (JUnit report, no bytecode, no cache).
const PYTEST: &str =
    "/usr/bin/python3 -B -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml tests";
/// The held-out pytest check: the same runner and report, over the held-out directory, importing
/// the candidate's `src`.
const PYTEST_HOLDOUT: &str =
    "PYTHONPATH=src /usr/bin/python3 -B -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml \"$LOOPEXEC_HOLDOUT_DIR\"";
/// The hidden tests of `square`: inputs the visible test never uses.
const HIDDEN_PY: &str = "from sq import square\n\n\ndef test_square_of_seven():\n    assert square(7) == 49\n\n\ndef test_square_of_minus_two():\n    assert square(-2) == 4\n";

/// A pytest project whose `square` is wrong at t0 (it doubles); its one visible test uses 3.
fn python_project() -> tempfile::TempDir {
    require_pytest();
    let dir = workdir();
    write(
        dir.path(),
        "src/sq/__init__.py",
        "def square(x):\n    return x + x\n",
    );
    write(
        dir.path(),
        "tests/test_sq.py",
        "from sq import square\n\n\ndef test_square_of_three():\n    assert square(3) == 9\n",
    );
    write(
        dir.path(),
        "pyproject.toml",
        "[tool.pytest.ini_options]\npythonpath = [\"src\"]\n",
    );
    write(dir.path(), ".gitignore", "out/\n__pycache__/\n.loopexec/\n");
    commit_t0(dir.path());
    dir
}

/// A directory outside every workdir holding `files`, readable by the zone uid.
fn holdout_dir(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let outer = workdir();
    zone_traversable(outer.path());
    let dir = outer.path().join("holdout");
    for (name, text) in files {
        write(&dir, name, text);
    }
    (outer, dir)
}

const FIT_PY: &str =
    "printf 'def square(x):\\n    return 9 if x == 3 else x + x\\n' > src/sq/__init__.py";
const HONEST_PY: &str = "printf 'def square(x):\\n    return x * x\\n' > src/sq/__init__.py";

/// `loopexec run` with the held-out pytest check over `holdout`, plus `extra`.
fn run_python(repo: &Path, run_id: &str, agent: &str, holdout: &Path, extra: &[&str]) -> Ran {
    let held = path_str(holdout);
    let mut args = vec![
        "run",
        "--json",
        "--run-id",
        run_id,
        "--exec",
        agent,
        "--check",
        PYTEST,
        "--report",
        "out/junit.xml",
        "--holdout-check",
        PYTEST_HOLDOUT,
        "--holdout-dir",
        &held,
        "--max-iterations",
        "2",
    ];
    args.extend_from_slice(extra);
    loopexec(repo, &args)
}

fn of_type<'a>(ev: &'a [Value], kind: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["type"] == kind).collect()
}

/// The `holdout_check` events of iteration `n` (0: the held-out check on t0).
fn holdout_of(ev: &[Value], n: u64) -> Vec<&Value> {
    ev.iter()
        .filter(|e| e["type"] == "holdout_check" && e["check"]["iteration"] == n)
        .collect()
}

fn artifact(repo: &Path, run_id: &str, name: &str) -> String {
    std::fs::read_to_string(run_dir(repo, run_id).join("artifacts").join(name)).unwrap_or_default()
}

/// The halt of a run fitted to the visible inputs: the visible check green, the held-out check red,
/// `objective_unverified`, the step not accepted and nothing delivered.
fn assert_unverified(repo: &Path, run_id: &str, r: &Ran) {
    assert_eq!(r.code, 13, "{r:?}");
    let v = r.json();
    assert_eq!(v["halt_reason"], "objective_unverified", "{v}");
    let ev = events(repo, run_id);
    let check = of_type(&ev, "check_result");
    assert_eq!(
        check.last().map(|c| c["check_exit"].clone()),
        Some(Value::from(0)),
        "the visible check passed: {ev:#?}"
    );
    let last = check
        .last()
        .map(|c| c["iteration"].as_u64().unwrap())
        .unwrap();
    let holdout = holdout_of(&ev, last);
    assert_eq!(holdout.len(), 1, "{ev:#?}");
    assert_eq!(holdout[0]["verdict"], "red");
    assert!(
        holdout[0]["check"]["check_exit"]
            .as_i64()
            .is_some_and(|c| c != 0),
        "{}",
        holdout[0]
    );
    let halt = of_type(&ev, "halt")[0];
    assert!(
        halt["detail"]
            .as_str()
            .unwrap()
            .contains("the held-out check failed"),
        "{halt}"
    );
    assert_eq!(
        halt["delivery"]["branch"],
        Value::Null,
        "nothing is delivered: {halt}"
    );
    assert!(
        git(repo, &["branch", "--list", &format!("loopexec/{run_id}")])
            .trim()
            .is_empty()
    );
}

#[test]
fn a_python_agent_fitted_to_the_visible_inputs_passes_them_and_halts_objective_unverified() {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    let r = run_python(repo.path(), "fit", FIT_PY, &held, &[]);
    assert_unverified(repo.path(), "fit", &r);
    let ev = events(repo.path(), "fit");
    let holdout = holdout_of(&ev, 1)[0];
    let failing = serde_json::json!([
        "test_hidden::test_square_of_minus_two",
        "test_hidden::test_square_of_seven"
    ]);
    assert_eq!(holdout["check"]["failing_set"], failing, "{holdout}");
    assert_eq!(
        holdout["dir"],
        path_str(&std::fs::canonicalize(&held).unwrap())
    );
    assert_eq!(holdout["dir_changed"], false);
    // Its t0 run (before any agent call) was red, as the bug it tests was there.
    let t0 = holdout_of(&ev, 0);
    assert_eq!(
        (
            t0.len(),
            t0[0]["verdict"].clone(),
            t0[0]["check"]["failing_count"].clone()
        ),
        (1, Value::from("red"), Value::from(2)),
        "{ev:#?}"
    );
    // The receipt holds the directory's digest (the one run_start pinned), never its contents.
    let start = of_type(&ev, "run_start")[0];
    assert_eq!(
        holdout["dir_sha256"],
        start["config"]["holdout"]["digest"]["sha256"]
    );
    assert_eq!(start["config"]["holdout"]["digest"]["entries"], 1);
    let receipt =
        std::fs::read_to_string(run_dir(repo.path(), "fit").join("receipt.jsonl")).unwrap();
    assert!(
        !receipt.contains("square(7) == 49"),
        "the held-out tests' text is not in the receipt"
    );
    let report = loopexec(repo.path(), &["report", "--json", "fit"]);
    let iteration = &report.json()["report"]["iterations"][0];
    assert_eq!(iteration["holdout"]["verdict"], "red", "{iteration}");
    assert_eq!(iteration["holdout"]["failing_count"], 2);
    let human = loopexec(repo.path(), &["report", "fit"]);
    assert!(
        human
            .stdout
            .contains("       held-out check red (exit 1, failing 2)\n"),
        "{}",
        human.stdout
    );
    // Its output is kept beside the visible check's, as the run's artifact.
    assert!(artifact(repo.path(), "fit", "0001-holdout.stdout").contains("2 failed"));
}

#[test]
fn an_honest_python_fix_converges_with_the_held_out_check_green() {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    let r = run_python(repo.path(), "ok", HONEST_PY, &held, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    let ev = events(repo.path(), "ok");
    let holdout = holdout_of(&ev, 1);
    assert_eq!(holdout.len(), 1, "{ev:#?}");
    assert_eq!(holdout[0]["verdict"], "green");
    assert_eq!(holdout[0]["check"]["collected_count"], 2);
    assert_eq!(
        git(repo.path(), &["show", "loopexec/ok:src/sq/__init__.py"]),
        "def square(x):\n    return x * x\n"
    );
    let verify = loopexec(
        repo.path(),
        &[
            "verify",
            "--json",
            "ok",
            "--pubkey",
            &path_str(&key_dir().join("operator.pub")),
        ],
    );
    assert_eq!(verify.code, 0, "{verify:?}");
}

#[test]
fn a_resumed_run_gets_the_held_out_check_it_pinned() {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    // Iteration 1 changes nothing (red); the run pauses; the resumed iteration 2 fits the inputs.
    let agent = format!("case $LOOPEXEC_ITERATION in 2) {FIT_PY} ;; esac");
    let r = run_python(repo.path(), "res", &agent, &held, &["--once"]);
    assert_eq!(
        (r.code, r.json()["state"].clone()),
        (0, Value::from("paused")),
        "{r:?}"
    );
    let r = loopexec(repo.path(), &["run", "--json", "--resume", "res"]);
    assert_unverified(repo.path(), "res", &r);
}

/// The node --test project: `add` off by one; its visible tests use (2, 3) and (0, 0).
fn node_project() -> tempfile::TempDir {
    assert!(
        Path::new("/usr/bin/node").exists(),
        "Debian's nodejs is needed in /usr/bin (ci/setup.sh installs it)"
    );
    let dir = workdir();
    write(dir.path(), "package.json", "{\n  \"name\": \"calc\",\n  \"version\": \"0.1.0\",\n  \"scripts\": { \"test\": \"node --test\" }\n}\n");
    write(
        dir.path(),
        "calc.js",
        "exports.add = (a, b) => a + b + 1;\n",
    );
    write(
        dir.path(),
        "test/calc.test.js",
        "const test = require(\"node:test\");\nconst assert = require(\"node:assert\");\nconst { add } = require(\"../calc\");\n\ntest(\"adds\", () => {\n  assert.strictEqual(add(2, 3), 5);\n});\n\ntest(\"adds zero\", () => {\n  assert.strictEqual(add(0, 0), 0);\n});\n",
    );
    write(dir.path(), ".gitignore", "out/\n.loopexec/\n");
    commit_t0(dir.path());
    dir
}

const NODE_TEST: &str = "mkdir -p out && node --test --test-reporter=tap --test-reporter-destination=out/node.tap --test-reporter=spec --test-reporter-destination=stdout test/";
const NODE_HOLDOUT: &str = "mkdir -p out && node --test --test-reporter=tap --test-reporter-destination=out/node.tap --test-reporter=spec --test-reporter-destination=stdout \"$LOOPEXEC_HOLDOUT_DIR\"";
/// The hidden node tests: they load the candidate's `calc.js` from the check's working directory.
const HIDDEN_JS: &str = "const test = require(\"node:test\");\nconst assert = require(\"node:assert\");\nconst { add } = require(require(\"node:path\").join(process.cwd(), \"calc\"));\n\ntest(\"adds four and five\", () => {\n  assert.strictEqual(add(4, 5), 9);\n});\n";

fn run_node(repo: &Path, run_id: &str, agent: &str, holdout: &Path) -> Ran {
    let held = path_str(holdout);
    loopexec(
        repo,
        &[
            "run",
            "--json",
            "--run-id",
            run_id,
            "--exec",
            agent,
            "--check",
            NODE_TEST,
            "--report",
            "out/node.tap",
            "--holdout-check",
            NODE_HOLDOUT,
            "--holdout-dir",
            &held,
            "--max-iterations",
            "2",
        ],
    )
}

#[test]
fn a_javascript_agent_fitted_to_the_visible_inputs_halts_objective_unverified() {
    let repo = node_project();
    let (_outer, held) = holdout_dir(&[("hidden.test.js", HIDDEN_JS)]);
    let fit = "printf '%s\\n' 'exports.add = (a, b) => (a === 2 && b === 3 ? 5 : a === 0 && b === 0 ? 0 : a + b + 1);' > calc.js";
    let r = run_node(repo.path(), "fit", fit, &held);
    assert_unverified(repo.path(), "fit", &r);
    let holdout = holdout_of(&events(repo.path(), "fit"), 1)[0].clone();
    assert_eq!(
        holdout["check"]["failing_set"],
        serde_json::json!(["adds four and five"]),
        "{holdout}"
    );
}

#[test]
fn an_honest_javascript_fix_converges_with_the_held_out_check_green() {
    let repo = node_project();
    let (_outer, held) = holdout_dir(&[("hidden.test.js", HIDDEN_JS)]);
    let r = run_node(
        repo.path(),
        "ok",
        "sed -i 's/a + b + 1/a + b/' calc.js",
        &held,
    );
    assert_eq!(r.code, 10, "{r:?}");
    let holdout = holdout_of(&events(repo.path(), "ok"), 1)[0].clone();
    assert_eq!(
        (
            holdout["verdict"].clone(),
            holdout["check"]["collected_set"].clone()
        ),
        (
            Value::from("green"),
            serde_json::json!(["adds four and five"])
        )
    );
}

#[test]
fn the_agent_zone_finds_nothing_at_the_held_out_directory_and_no_variable_naming_it() {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    let h = path_str(&held);
    // The agent knows the path (a worst case) and looks: the directory, the file, its environment.
    let agent = format!(
        "ls -la {h}; cat {h}/test_hidden.py; env | grep -i holdout; echo looked; {HONEST_PY}"
    );
    let r = run_python(repo.path(), "look", &agent, &held, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    let (out, err) = (
        artifact(repo.path(), "look", "0001-exec.stdout"),
        artifact(repo.path(), "look", "0001-exec.stderr"),
    );
    assert_eq!(out, "looked\n", "the agent saw nothing: {out}");
    assert!(
        !err.contains("square(7)") && !out.contains("square(7)"),
        "{err}"
    );
    assert_eq!(err.matches("No such file or directory").count(), 2, "{err}");
}

#[test]
fn the_feedback_holds_the_visible_check_and_nothing_of_the_held_out_one() {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    // Iteration 1 changes nothing (red, its feedback follows); iteration 2 fits the inputs.
    let agent = format!("cat \"$LOOPEXEC_FEEDBACK\" \"$(dirname \"$LOOPEXEC_FEEDBACK\")/feedback.md\"; case $LOOPEXEC_ITERATION in 2) {FIT_PY} ;; esac");
    let r = run_python(repo.path(), "fb", &agent, &held, &[]);
    assert_unverified(repo.path(), "fb", &r);
    for n in 1..=2 {
        let seen = artifact(repo.path(), "fb", &format!("{n:04}-exec.stdout"));
        assert!(
            seen.contains("tests.test_sq::test_square_of_three"),
            "the visible failure crosses: {seen}"
        );
        for held_out in [
            "test_hidden",
            "square_of_seven",
            "49",
            "holdout",
            "held-out",
        ] {
            assert!(
                !seen.contains(held_out),
                "{held_out} reached the agent at iteration {n}: {seen}"
            );
        }
    }
}

/// The calc project of the feedback tests with `[feedback] include = "<include>"` in loop.toml.
fn feedback_run(include: &str) -> (tempfile::TempDir, Value, String) {
    use common::calc::{calc_project, plan_steps, PYTEST as CALC_PYTEST};
    let repo = calc_project();
    write(
        repo.path(),
        "loop.toml",
        &format!("[feedback]\ninclude = \"{include}\"\n"),
    );
    let look =
        "cat \"$LOOPEXEC_FEEDBACK\"; cat \"$(dirname \"$LOOPEXEC_FEEDBACK\")/feedback.md\" >&2";
    let agent = format!("{look}; {}", plan_steps(&[&["add"], &["add"]]));
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "f",
            "--exec",
            &agent,
            "--check",
            CALC_PYTEST,
            "--report",
            "out/junit.xml",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.json()["halt_reason"], "max_iterations_reached", "{r:?}");
    let seen: Value =
        serde_json::from_str(&artifact(repo.path(), "f", "0002-exec.stdout")).unwrap();
    let md = artifact(repo.path(), "f", "0002-exec.stderr");
    let start = of_type(&events(repo.path(), "f"), "run_start")[0].clone();
    assert_eq!(
        start["config"]["feedback"],
        serde_json::json!({"include": include}),
        "pinned in run_start"
    );
    (repo, seen, md)
}

#[test]
fn feedback_include_nothing_gives_the_agent_no_ids_no_excerpts_and_no_count() {
    let (_repo, seen, md) = feedback_run("nothing");
    assert_eq!(seen["failing"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["failing_count"], Value::Null);
    assert_eq!(seen["include"], "nothing");
    assert!(!md.contains("test_"), "no id in the Markdown: {md}");
    assert!(md.contains("withheld by the operator"), "{md}");
}

#[test]
fn feedback_include_ids_gives_the_failing_ids_without_their_excerpts() {
    let (_repo, seen, md) = feedback_run("ids");
    let failing = seen["failing"].as_array().unwrap();
    assert_eq!(failing.len(), 3, "{seen}");
    assert!(
        failing.iter().all(|t| t.get("excerpt").is_none()
            && t["test"].as_str().unwrap().starts_with("tests.test_calc::")),
        "{seen}"
    );
    assert!(!md.contains("assert "), "no excerpt in the Markdown: {md}");
}

/// A refusal before anything is written: exit 20, one JSON object naming the problem, no run.
fn assert_refused(repo: &Path, r: &Ran, says: &str) {
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    let message = v["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains(says), "{message:?} does not say {says:?}");
    assert!(!repo.join(".loopexec/runs/bad").exists(), "nothing written");
}

fn refused_run(repo: &Path, extra: &[&str]) -> Ran {
    let mut args = vec![
        "run", "--json", "--run-id", "bad", "--exec", "true", "--check", PYTEST,
    ];
    args.extend_from_slice(extra);
    loopexec(repo, &args)
}

#[test]
fn a_missing_held_out_directory_is_refused() {
    let repo = python_project();
    let missing = path_str(&repo.path().with_extension("absent"));
    let r = refused_run(
        repo.path(),
        &["--holdout-check", "true", "--holdout-dir", &missing],
    );
    assert_refused(
        repo.path(),
        &r,
        &format!("held-out directory {missing}: does not exist"),
    );
}

#[test]
fn a_held_out_directory_inside_the_workdir_is_refused() {
    let repo = python_project();
    std::fs::create_dir(repo.path().join("hidden")).unwrap();
    let inside = path_str(&repo.path().join("hidden"));
    let r = refused_run(
        repo.path(),
        &["--holdout-check", "true", "--holdout-dir", &inside],
    );
    assert_refused(repo.path(), &r, "lies inside the workdir");
}

#[test]
fn a_held_out_directory_given_as_a_symbolic_link_is_refused() {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    let link = held.with_file_name("link");
    std::os::unix::fs::symlink(&held, &link).unwrap();
    let r = refused_run(
        repo.path(),
        &["--holdout-check", "true", "--holdout-dir", &path_str(&link)],
    );
    assert_refused(repo.path(), &r, "is a symbolic link");
}

#[test]
fn a_held_out_directory_the_agent_zone_binds_is_refused() {
    let repo = python_project();
    let r = refused_run(
        repo.path(),
        &["--holdout-check", "true", "--holdout-dir", "/usr/share"],
    );
    assert_refused(
        repo.path(),
        &r,
        "overlaps /usr, which the agent's zone (or the judge's) binds",
    );
}

#[test]
fn a_held_out_directory_without_a_held_out_check_is_refused() {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    let r = refused_run(repo.path(), &["--holdout-dir", &path_str(&held)]);
    assert_refused(repo.path(), &r, "--holdout-dir needs --holdout-check");
    let r = refused_run(repo.path(), &["--holdout-check", "true"]);
    assert_refused(repo.path(), &r, "--holdout-check needs --holdout-dir DIR");
}

#[test]
fn loop_toml_holdout_dir_is_relative_to_the_workdir_and_validated_the_same() {
    let repo = python_project();
    write(
        repo.path(),
        "loop.toml",
        "holdout_check = \"true\"\nholdout_dir = \"hidden\"\n",
    );
    std::fs::create_dir(repo.path().join("hidden")).unwrap();
    let r = refused_run(repo.path(), &[]);
    assert_refused(
        repo.path(),
        &r,
        &format!(
            "held-out directory {}: lies inside the workdir",
            path_str(&repo.path().join("hidden"))
        ),
    );
}

#[test]
fn a_bad_feedback_include_is_refused_with_its_line() {
    let repo = python_project();
    write(
        repo.path(),
        "loop.toml",
        "max_iterations = 2\n[feedback]\ninclude = \"everything\"\n",
    );
    let r = refused_run(repo.path(), &[]);
    assert_refused(repo.path(), &r, "loop.toml line 3:");
}

#[test]
fn a_held_out_check_whose_evidence_disagrees_with_its_zero_exit_halts_objective_unverified() {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    let held = path_str(&held);
    // Exit 0 without the declared report: the held-out check is held to the visible one's evidence.
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "dis",
            "--exec",
            HONEST_PY,
            "--check",
            PYTEST,
            "--report",
            "out/junit.xml",
            "--holdout-check",
            "true",
            "--holdout-dir",
            &held,
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].clone()),
        (13, Value::from("objective_unverified")),
        "{r:?}"
    );
    let ev = events(repo.path(), "dis");
    let holdout = holdout_of(&ev, 1)[0];
    assert_eq!(holdout["verdict"], "disagree");
    assert_eq!(
        holdout["check"]["evidence"]["disagreements"][0]["kind"], "report_unusable",
        "{holdout}"
    );
    assert!(
        git(repo.path(), &["branch", "--list", "loopexec/dis"])
            .trim()
            .is_empty(),
        "nothing delivered"
    );
}

#[test]
fn a_held_out_check_that_writes_to_t0_halts_metric_integrity_violation_before_any_agent_call() {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    let writing = format!("echo '# touched' >> src/sq/__init__.py && {PYTEST_HOLDOUT}");
    let held_arg = path_str(&held);
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "w",
            "--exec",
            HONEST_PY,
            "--check",
            PYTEST,
            "--report",
            "out/junit.xml",
            "--holdout-check",
            &writing,
            "--holdout-dir",
            &held_arg,
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].clone()),
        (13, Value::from("metric_integrity_violation")),
        "{r:?}"
    );
    let ev = events(repo.path(), "w");
    assert!(
        of_type(&ev, "exec_result").is_empty(),
        "the agent never ran"
    );
    let guard = of_type(&ev, "guard")
        .into_iter()
        .find(|g| g["stage"] == "after_check")
        .unwrap_or_else(|| panic!("{ev:#?}"));
    assert!(guard["detail"].as_str().unwrap().starts_with("the held-out check on t0 wrote to 1 path(s) of the tree it tested: src/sq/__init__.py (modified)"), "{guard}");
}

#[test]
fn a_held_out_check_that_writes_to_the_agents_tree_halts_metric_integrity_violation() {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    // Only the fixed tree is written (as code under test that writes beside itself would).
    let writing = format!("if grep -q 'x \\* x' src/sq/__init__.py; then echo '# touched' >> src/sq/__init__.py; fi; {PYTEST_HOLDOUT}");
    let held_arg = path_str(&held);
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "w",
            "--exec",
            HONEST_PY,
            "--check",
            PYTEST,
            "--report",
            "out/junit.xml",
            "--holdout-check",
            &writing,
            "--holdout-dir",
            &held_arg,
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].clone()),
        (13, Value::from("metric_integrity_violation")),
        "{r:?}"
    );
    let ev = events(repo.path(), "w");
    let guard = of_type(&ev, "guard")
        .into_iter()
        .find(|g| g["stage"] == "after_check")
        .unwrap_or_else(|| panic!("{ev:#?}"));
    assert!(guard["detail"].as_str().unwrap().starts_with("the held-out check of iteration 1 wrote to 1 path(s) of the tree it tested: src/sq/__init__.py (modified)"), "{guard}");
    assert_guard_precedes_its_record(&ev);
    assert_eq!(
        guard["findings"][0],
        serde_json::json!({"path": "src/sq/__init__.py", "what": "modified by the check"})
    );
    assert!(
        git(repo.path(), &["branch", "--list", "loopexec/w"])
            .trim()
            .is_empty(),
        "nothing delivered"
    );
}

/// The held-out check's objection (a `guard`) is appended before its green `holdout_check` of
/// iteration 1: a receipt cut between the two still halts, never delivers.
fn assert_guard_precedes_its_record(ev: &[Value]) {
    let guard = ev
        .iter()
        .position(|e| e["type"] == "guard" && e["stage"] == "after_check")
        .unwrap();
    let record = ev
        .iter()
        .position(|e| e["type"] == "holdout_check" && e["check"]["iteration"] == 1)
        .unwrap();
    assert!(guard < record, "{ev:#?}");
}

/// A supervisor that died after a red held-out check was recorded, before its halt: the resumed
/// run takes the workspace again but does not accept the tree the held-out check refused, so it
/// halts `objective_unverified` with nothing delivered, as the live run would have.
#[test]
fn a_supervisor_killed_after_a_red_held_out_check_delivers_nothing_on_resume() {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    let r = run_python(repo.path(), "cut", FIT_PY, &held, &[]);
    assert_unverified(repo.path(), "cut", &r);
    // The crash: the receipt as it was once the red held-out check was recorded.
    let receipt = run_dir(repo.path(), "cut").join("receipt.jsonl");
    let text = std::fs::read_to_string(&receipt).unwrap();
    let cut: String = text
        .lines()
        .take_while(|l| !l.contains("\"type\":\"halt\""))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        cut.lines()
            .last()
            .is_some_and(|l| l.contains("\"type\":\"holdout_check\"")),
        "{cut}"
    );
    std::fs::write(&receipt, cut).unwrap();
    let resumed = loopexec(repo.path(), &["run", "--json", "--resume", "cut"]);
    assert_unverified(repo.path(), "cut", &resumed);
}

#[test]
fn a_supervisor_killed_between_the_green_and_its_held_out_check_runs_it_on_resume_and_delivers_nothing(
) {
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    let held = path_str(&held);
    let slow = format!("sleep 3; {PYTEST_HOLDOUT}");
    let mut child = command()
        .current_dir(repo.path())
        .args([
            "run",
            "--json",
            "--run-id",
            "k",
            "--exec",
            FIT_PY,
            "--check",
            PYTEST,
            "--report",
            "out/junit.xml",
            "--holdout-check",
            &slow,
            "--holdout-dir",
            &held,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn loopexec");
    let receipt = run_dir(repo.path(), "k").join("receipt.jsonl");
    let mut polls = 0;
    while !std::fs::read_to_string(&receipt)
        .unwrap_or_default()
        .contains("\"type\":\"check_result\"")
    {
        assert!(
            child.try_wait().unwrap().is_none(),
            "loopexec ended before the green was recorded"
        );
        polls += 1;
        assert!(polls < 12_000, "the green was never recorded");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: kill(2) of the loopexec this test started, while its held-out check sleeps.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    let before = events(repo.path(), "k");
    assert!(
        holdout_of(&before, 1).is_empty() && of_type(&before, "halt").is_empty(),
        "the kill landed before the held-out check was recorded"
    );
    let r = loopexec(repo.path(), &["run", "--json", "--resume", "k"]);
    assert_unverified(repo.path(), "k", &r);
    let types = event_types(repo.path(), "k");
    let resumed_at = types.iter().position(|t| t == "run_resumed").unwrap();
    assert_eq!(
        &types[resumed_at..],
        ["run_resumed", "guard_baseline", "holdout_check", "halt"],
        "the agent did not run again: {types:?}"
    );
}

#[test]
fn a_held_out_directory_gone_before_its_check_halts_objective_unverified_sealed() {
    let repo = python_project();
    let (outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    let slow = format!("sleep 2; {PYTEST}");
    let held_arg = path_str(&held);
    let mut child = command()
        .current_dir(repo.path())
        .args([
            "run",
            "--json",
            "--run-id",
            "gone",
            "--exec",
            HONEST_PY,
            "--check",
            &slow,
            "--report",
            "out/junit.xml",
            "--holdout-check",
            PYTEST_HOLDOUT,
            "--holdout-dir",
            &held_arg,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn loopexec");
    let receipt = run_dir(repo.path(), "gone").join("receipt.jsonl");
    let mut polls = 0;
    // While the visible check sleeps, the operator moves the held-out directory away.
    while !std::fs::read_to_string(&receipt)
        .unwrap_or_default()
        .contains("\"type\":\"exec_result\"")
    {
        assert!(
            child.try_wait().unwrap().is_none(),
            "loopexec ended before the agent step was recorded"
        );
        polls += 1;
        assert!(polls < 12_000, "the agent step was never recorded");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::rename(&held, outer.path().join("moved")).unwrap();
    let r = from_output(child.wait_with_output().unwrap());
    assert_eq!(
        (r.code, r.json()["halt_reason"].clone()),
        (13, Value::from("objective_unverified")),
        "{r:?}"
    );
    let ev = events(repo.path(), "gone");
    let guard = of_type(&ev, "guard")
        .into_iter()
        .find(|g| g["guard"] == "holdout")
        .unwrap_or_else(|| panic!("{ev:#?}"));
    assert!(
        guard["detail"]
            .as_str()
            .unwrap()
            .contains("can no longer be read"),
        "{guard}"
    );
    assert!(
        holdout_of(&ev, 1).is_empty(),
        "the held-out check did not run on the step"
    );
    assert_eq!(
        of_type(&ev, "halt")[0]["delivery"]["branch"],
        Value::Null,
        "nothing delivered"
    );
    assert!(
        run_dir(repo.path(), "gone")
            .join("envelope.dsse.json")
            .exists(),
        "sealed"
    );
}

#[test]
fn held_out_tests_that_the_agents_code_skips_halt_metric_integrity_violation_against_their_t0_run()
{
    let repo = python_project();
    let (_outer, held) = holdout_dir(&[("test_hidden.py", HIDDEN_PY)]);
    // Right on the visible input, and on any other the code raises pytest's skip exception,
    // reached by a name no tampering rule lists: every held-out test is skipped, pytest exits 0.
    let skip = "printf '%s\\n' 'def square(x):' '    if x == 3:' '        return 9' '    raise getattr(__import__(\"_py\" + \"test.outcomes\", fromlist=[\"o\"]), \"Skipped\")(\"unknown input\")' > src/sq/__init__.py";
    let r = run_python(repo.path(), "skip", skip, &held, &[]);
    assert_eq!(
        (r.code, r.json()["halt_reason"].clone()),
        (13, Value::from("metric_integrity_violation")),
        "{r:?}"
    );
    let ev = events(repo.path(), "skip");
    let holdout = holdout_of(&ev, 1)[0];
    assert_eq!(
        (
            holdout["verdict"].clone(),
            holdout["check"]["skipped_count"].clone()
        ),
        (Value::from("green"), Value::from(2)),
        "{holdout}"
    );
    let guard = of_type(&ev, "guard")
        .into_iter()
        .find(|g| g["stage"] == "after_check")
        .unwrap_or_else(|| panic!("{ev:#?}"));
    assert_eq!(guard["detail"], "the held-out check exited 0 at iteration 1 but against the t0 baseline 2 test(s) are skipped that t0 did not skip");
    assert_guard_precedes_its_record(&ev);
    assert!(
        git(repo.path(), &["branch", "--list", "loopexec/skip"])
            .trim()
            .is_empty(),
        "nothing delivered"
    );
}

/// A cargo crate whose `square` doubles at t0; its one visible integration test uses 3. The
/// held-out test is compiled against the candidate's library by Debian's rustc (the exec zone's).
fn rust_project() -> tempfile::TempDir {
    assert!(
        Path::new("/usr/bin/cargo").exists() && Path::new("/usr/bin/rustc").exists(),
        "Debian's cargo and rustc are needed (ci/setup.sh installs them)"
    );
    let dir = workdir();
    write(
        dir.path(),
        "Cargo.toml",
        "[package]\nname = \"sq\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    write(
        dir.path(),
        "src/lib.rs",
        "pub fn square(x: i64) -> i64 {\n    x + x\n}\n",
    );
    write(
        dir.path(),
        "tests/visible.rs",
        "use sq::square;\n\n#[test]\nfn square_of_three() {\n    assert_eq!(square(3), 9);\n}\n",
    );
    write(
        dir.path(),
        ".gitignore",
        "target/\nCargo.lock\n.loopexec/\n",
    );
    commit_t0(dir.path());
    dir
}

const HIDDEN_RS: &str = "use sq::square;\n\n#[test]\nfn square_of_seven() {\n    assert_eq!(square(7), 49);\n}\n\n#[test]\nfn square_of_minus_two() {\n    assert_eq!(square(-2), 4);\n}\n";
const CARGO_HOLDOUT: &str = "cargo build --offline --quiet && rustc --edition 2021 --test \"$LOOPEXEC_HOLDOUT_DIR/hidden.rs\" --extern sq=target/debug/libsq.rlib -L target/debug/deps -o target/hidden && ./target/hidden";

fn run_rust(repo: &Path, run_id: &str, agent: &str, holdout: &Path) -> Ran {
    let held = path_str(holdout);
    loopexec(
        repo,
        &[
            "run",
            "--json",
            "--run-id",
            run_id,
            "--exec",
            agent,
            "--check",
            "cargo test --offline",
            "--holdout-check",
            CARGO_HOLDOUT,
            "--holdout-dir",
            &held,
            "--max-iterations",
            "2",
        ],
    )
}

#[test]
fn a_rust_agent_fitted_to_the_visible_inputs_halts_objective_unverified() {
    let repo = rust_project();
    let (_outer, held) = holdout_dir(&[("hidden.rs", HIDDEN_RS)]);
    let fit = "printf 'pub fn square(x: i64) -> i64 {\\n    if x == 3 { 9 } else { x + x }\\n}\\n' > src/lib.rs";
    let r = run_rust(repo.path(), "fit", fit, &held);
    assert_unverified(repo.path(), "fit", &r);
    let holdout = holdout_of(&events(repo.path(), "fit"), 1)[0].clone();
    assert_eq!(holdout["check"]["failing_count"], 2, "{holdout}");
}

#[test]
fn an_honest_rust_fix_converges_with_the_held_out_check_green() {
    let repo = rust_project();
    let (_outer, held) = holdout_dir(&[("hidden.rs", HIDDEN_RS)]);
    let r = run_rust(
        repo.path(),
        "ok",
        "sed -i 's/x + x/x * x/' src/lib.rs",
        &held,
    );
    assert_eq!(r.code, 10, "{r:?}");
    let holdout = holdout_of(&events(repo.path(), "ok"), 1)[0].clone();
    assert_eq!(
        (
            holdout["verdict"].clone(),
            holdout["check"]["collected_count"].clone()
        ),
        (Value::from("green"), Value::from(2)),
        "{holdout}"
    );
}
