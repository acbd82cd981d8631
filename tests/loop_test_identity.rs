//! Test identity that survives honest edits, end to end (issue 18, "Honest work converges"): a
//! real `loopexec run` with a scripted honest agent on a Rust crate whose fix adds lines above
//! its doctests (a doctest's id carries no line number, and two doctests of one item are two
//! entries of one id), and on a `node --test` project whose check writes node's own JUnit
//! report, declared with `--report`. Both must converge (`success_condition_met`, exit 10) with
//! no guard objecting. Debian's cargo (/usr/bin, which the exec zone binds) and node run them;
//! without them the tests say NOT RUN, under `CI=true` they fail.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

fn under_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Whether `program` is there; NOT RUN said when it is not (a failure under CI).
fn have(program: &str) -> bool {
    if Path::new(program).exists() {
        return true;
    }
    assert!(!under_ci(), "{program} is needed (ci/setup.sh installs it)");
    eprintln!("NOT RUN: {program} is missing (CI=true makes this a failure)");
    false
}

fn run_loop(dir: &Path, id: &str, exec: &str, check: &str, extra: &[&str]) -> (Ran, Vec<Value>) {
    let mut args = vec![
        "run",
        "--json",
        "--run-id",
        id,
        "--exec",
        exec,
        "--check",
        check,
        "--max-iterations",
        "2",
    ];
    args.extend_from_slice(extra);
    let r = loopexec(dir, &args);
    let ev = events(dir, id);
    (r, ev)
}

fn assert_converged(r: &Ran, ev: &[Value]) -> Value {
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "success_condition_met");
    assert!(
        ev.iter().all(|e| e["type"] != "guard"),
        "no guard objected: {ev:#?}"
    );
    let check = ev
        .iter()
        .rev()
        .find(|e| e["type"] == "check_result")
        .unwrap()
        .clone();
    assert_eq!(check["evidence"]["verdict"], "green", "{check}");
    assert_eq!(check["failing_set"], serde_json::json!([]));
    check
}

fn listed(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect()
}

/// A crate whose `add` subtracts (its doctest fails at t0); `double` has two doctests.
fn doctest_crate() -> tempfile::TempDir {
    let repo = workdir();
    let p = repo.path();
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::write(
        p.join("Cargo.toml"),
        "[package]\nname = \"shifty\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    )
    .unwrap();
    std::fs::write(
        p.join("src/lib.rs"),
        "/// Adds two numbers.\n///\n/// ```\n/// assert_eq!(shifty::add(2, 3), 5);\n/// ```\npub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n\n\
         /// Doubles.\n///\n/// ```\n/// assert_eq!(shifty::double(2), 4);\n/// ```\n///\n/// ```\n/// assert_eq!(shifty::double(0), 0);\n/// ```\n\
         pub fn double(x: i32) -> i32 {\n    x * 2\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn doubles() {\n        assert_eq!(super::double(3), 6);\n    }\n}\n",
    )
    .unwrap();
    std::fs::write(p.join(".gitignore"), "target/\n").unwrap();
    commit_t0(p);
    repo
}

#[test]
fn an_honest_fix_that_adds_lines_above_the_doctests_converges() {
    if !have("/usr/bin/cargo") {
        return;
    }
    let repo = doctest_crate();
    // The fix, and a helper with its comment above `add`: every doctest moves down four lines.
    let agent = "sed -i -e 's/    a - b/    sum(a, b)/' -e '1i // Sums two numbers (the one place that adds).\\nfn sum(a: i32, b: i32) -> i32 {\\n    a + b\\n}\\n' src/lib.rs";
    let (r, ev) = run_loop(
        repo.path(),
        "h",
        agent,
        "cargo test --offline --no-fail-fast",
        &[],
    );
    let check = assert_converged(&r, &ev);
    let baseline = ev.iter().find(|e| e["type"] == "check_baseline").unwrap();
    assert_eq!(
        listed(&baseline["check"]["failing_set"]),
        ["doc/shifty::src/lib.rs - add"]
    );
    let halt = ev.iter().rev().find(|e| e["type"] == "halt").unwrap();
    let commit = halt["delivery"]["commit"]
        .as_str()
        .unwrap_or_else(|| panic!("delivered: {halt}"));
    let lib = git(repo.path(), &["show", &format!("{commit}:src/lib.rs")]);
    assert!(
        lib.starts_with("// Sums two numbers"),
        "the delivered fix holds the lines above the doctests: {lib}"
    );
    // `double`'s two doctests are two entries of one id, in the baseline and at the green.
    let expected = [
        "doc/shifty::src/lib.rs - add",
        "doc/shifty::src/lib.rs - double",
        "doc/shifty::src/lib.rs - double",
        "shifty::tests::doubles",
    ];
    assert_eq!(listed(&baseline["check"]["collected_set"]), expected);
    assert_eq!(listed(&check["collected_set"]), expected);
    assert_eq!(check["collected_count"], 4);
}

/// A `node --test` project whose `add` subtracts: a top-level test, a `describe` with a nested
/// one, and a test with subtests, in two files.
fn node_project() -> tempfile::TempDir {
    let repo = workdir();
    let p = repo.path();
    std::fs::create_dir_all(p.join("test")).unwrap();
    std::fs::write(
        p.join("package.json"),
        "{ \"name\": \"calc\", \"version\": \"0.1.0\", \"private\": true }\n",
    )
    .unwrap();
    std::fs::write(
        p.join("calc.js"),
        "exports.add = (a, b) => a - b;\nexports.double = (x) => x * 2;\n",
    )
    .unwrap();
    std::fs::write(
        p.join("test/add.test.js"),
        "const { describe, it, test } = require('node:test');\nconst assert = require('node:assert');\nconst { add } = require('../calc');\n\n\
         test('adds', () => { assert.strictEqual(add(2, 3), 5); });\n\
         describe('add', () => {\n  it('is zero on zeros', () => { assert.strictEqual(add(0, 0), 0); });\n  describe('negatives', () => { it('adds them', () => { assert.strictEqual(add(-1, -2), -3); }); });\n  it.skip('someday', () => {});\n});\n",
    )
    .unwrap();
    std::fs::write(
        p.join("test/double.test.js"),
        "const { test } = require('node:test');\nconst assert = require('node:assert');\nconst { double } = require('../calc');\n\n\
         test('adds', () => { assert.strictEqual(double(1), 2); });\n\
         test('doubles', async (t) => {\n  await t.test('two', () => { assert.strictEqual(double(2), 4); });\n  await t.test('zero', () => { assert.strictEqual(double(0), 0); });\n});\n",
    )
    .unwrap();
    std::fs::write(p.join(".gitignore"), "junit.xml\n").unwrap();
    commit_t0(p);
    repo
}

#[test]
fn a_node_test_project_with_its_own_junit_report_declared_converges() {
    if !have("/usr/bin/node") {
        return;
    }
    let repo = node_project();
    let check = "node --test --test-reporter=junit --test-reporter-destination=junit.xml --test-reporter=spec --test-reporter-destination=stdout";
    let agent = "sed -i 's/(a, b) => a - b/(a, b) => a + b/' calc.js";
    let (r, ev) = run_loop(repo.path(), "n", agent, check, &["--report", "junit.xml"]);
    let green = assert_converged(&r, &ev);
    let baseline = ev.iter().find(|e| e["type"] == "check_baseline").unwrap();
    assert_eq!(
        baseline["check"]["evidence"]["verdict"], "red",
        "a usable t0 baseline: {baseline}"
    );
    assert_eq!(
        listed(&baseline["check"]["failing_set"]),
        ["add > negatives > adds them", "adds"]
    );
    // Both files' top-level `adds` are two entries of one id (node's JUnit has no file level).
    let expected = [
        "add > is zero on zeros",
        "add > negatives > adds them",
        "add > someday",
        "adds",
        "adds",
        "doubles > two",
        "doubles > zero",
    ];
    assert_eq!(listed(&baseline["check"]["collected_set"]), expected);
    assert_eq!(listed(&green["collected_set"]), expected);
    assert_eq!(listed(&green["skipped_set"]), ["add > someday"]);
    assert_eq!(green["evidence"]["reports"][0]["format"], "junit");
}
