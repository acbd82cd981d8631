//! `loopexec doctor --check CMD --mutate-cmd MUTATOR`: the adequacy gate's mutants come from an
//! operator's mutator instead of the built-in operators. The mutator here is a Python script
//! written for the test: it prints a JSON array of `{file, line, description, diff}`, one
//! unified diff per mutant (the shape `cargo mutants --list --json --diff` prints), over a small
//! real pytest project. A suite that tests the code kills them; a suite that only imports the
//! module lets every one survive (exit 15, survivors with file and line); a mutator that fails
//! or prints garbage leaves the gate unable to conclude (exit 40, `execution_failure`).
//! cargo-mutants itself is not installed on CI, so no test runs it.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const CALC: &str = "def add(a, b):\n    return a + b\n\n\ndef is_even(n):\n    return n % 2 == 0\n";
const TESTING_SUITE: &str = "from calc import add, is_even\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_is_even():\n    assert is_even(4)\n    assert not is_even(3)\n";
const IMPORT_ONLY_SUITE: &str = "import calc\n\n\ndef test_imports():\n    assert calc\n";

/// Flips `+` to `-` and `==` to `!=` on each line of calc.py that has one, one mutant each.
const MUTATOR: &str = r#"import difflib, json
source = open("calc.py").read().splitlines(keepends=True)
mutants = []
for i, line in enumerate(source):
    for old, new in ((" + ", " - "), (" == ", " != ")):
        if old in line:
            mutated = source[:i] + [line.replace(old, new)] + source[i + 1:]
            diff = "".join(difflib.unified_diff(source, mutated, "a/calc.py", "b/calc.py"))
            mutants.append({"file": "calc.py", "line": i + 1, "description": f"{old.strip()} -> {new.strip()}", "diff": diff})
print(json.dumps(mutants))
"#;

const PYTEST: &str = "/usr/bin/python3 -B -m pytest -q -p no:cacheprovider test_calc.py";

fn project(suite: &str) -> tempfile::TempDir {
    require_pytest();
    let dir = workdir();
    std::fs::write(dir.path().join("calc.py"), CALC).unwrap();
    std::fs::write(dir.path().join("test_calc.py"), suite).unwrap();
    std::fs::write(dir.path().join("mutator.py"), MUTATOR).unwrap();
    dir
}

fn doctor(dir: &Path, isolation: &str, mutator: &str) -> (i32, Value) {
    let r = loopexec(
        dir,
        &[
            "--json",
            "doctor",
            "--isolation",
            isolation,
            "--check",
            PYTEST,
            "--runs",
            "2",
            "--mutate-cmd",
            mutator,
        ],
    );
    (r.code, r.json())
}

fn adequacy_gate(v: &Value) -> &Value {
    v["gates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["gate"] == "adequacy")
        .unwrap_or_else(|| panic!("no adequacy gate in {v:#}"))
}

#[test]
fn a_suite_that_tests_the_code_kills_the_mutators_mutants_in_the_exec_zone() {
    let dir = project(TESTING_SUITE);
    let (code, v) = doctor(dir.path(), "native", "/usr/bin/python3 -B mutator.py");
    let gate = adequacy_gate(&v);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(gate["verdict"], "passed", "{gate:#}");
    assert_eq!(gate["evidence"]["scope"], "mutate_cmd", "{gate:#}");
    assert_eq!(gate["evidence"]["generated"], 2, "{gate:#}");
    let mutants = gate["evidence"]["mutants"].as_array().unwrap();
    let seen: Vec<(&str, u64, &str, &str)> = mutants
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap(),
                m["line"].as_u64().unwrap(),
                m["change"].as_str().unwrap(),
                m["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("calc.py", 2, "external: + -> -", "killed"),
            ("calc.py", 6, "external: == -> !=", "killed")
        ],
        "{gate:#}"
    );
    assert!(
        mutants.iter().all(|m| m["operator"] == "external"),
        "{gate:#}"
    );
}

#[test]
fn a_suite_that_only_imports_the_module_is_inadequate_listing_the_survivors() {
    let dir = project(IMPORT_ONLY_SUITE);
    let (code, v) = doctor(dir.path(), "none", "/usr/bin/python3 -B mutator.py");
    assert_eq!(code, 15, "{v:#}");
    assert_eq!(v["halt_reason"], "check_inadequate", "{v:#}");
    let gate = adequacy_gate(&v);
    let survivors: Vec<(&str, u64)> = gate["evidence"]["mutants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["outcome"] == "survived")
        .map(|m| (m["path"].as_str().unwrap(), m["line"].as_u64().unwrap()))
        .collect();
    assert_eq!(survivors, vec![("calc.py", 2), ("calc.py", 6)], "{gate:#}");
    // The operator's tree is untouched: every mutant ran on its own copy.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("calc.py")).unwrap(),
        CALC
    );
}

fn assert_mutator_refused(v: &Value, code: i32, names: &str) {
    assert_eq!(code, 40, "{v:#}");
    assert_eq!(v["halt_reason"], "execution_failure", "{v:#}");
    let gate = adequacy_gate(v);
    assert_eq!(gate["verdict"], "failed", "{gate:#}");
    assert!(gate["detail"].as_str().unwrap().contains(names), "{gate:#}");
}

#[test]
fn a_mutator_that_prints_garbage_leaves_the_gate_unable_to_conclude() {
    let dir = project(TESTING_SUITE);
    let (code, v) = doctor(dir.path(), "none", "echo 'mutant 1: calc.py line 2'");
    assert_mutator_refused(&v, code, "the mutator (--mutate-cmd) printed no valid list: the mutator's output is not a JSON array");
}

#[test]
fn a_mutator_that_fails_leaves_the_gate_unable_to_conclude_with_its_exit_code() {
    let dir = project(TESTING_SUITE);
    let (code, v) = doctor(dir.path(), "none", "/usr/bin/python3 -B mutator.py; exit 3");
    assert_mutator_refused(&v, code, "the mutator (--mutate-cmd) failed (exit 3)");
}

#[test]
fn a_mutant_whose_path_leaves_the_tree_is_refused() {
    let dir = project(TESTING_SUITE);
    let list = r#"[{"file": "../calc.py", "diff": "@@ -1 +1 @@\n-x\n+y\n"}]"#;
    let (code, v) = doctor(dir.path(), "none", &format!("printf '%s' '{list}'"));
    assert_mutator_refused(
        &v,
        code,
        "mutant 0 of the mutator's list: `file` ../calc.py is not a relative tree path",
    );
}
