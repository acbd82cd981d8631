//! The four-function pytest project of the progress and feedback tests: `calc` with `add`, `sub`,
//! `mul`, `div`, each with one test, all wrong at t0; a scripted agent makes a chosen set right.

use super::{commit_t0, require_pytest, workdir};

/// The check: pytest writing its JUnit report to `out/junit.xml`.
/// `-B`: no bytecode. In place, an agent that rewrites a module within the second of its last
/// check with the same size would leave a `.pyc` Python still takes as fresh (its mtime has
/// one-second granularity), and the check would test the old code.
pub const PYTEST: &str =
    "/usr/bin/python3 -B -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml";

pub const FUNCTIONS: [(&str, &str, &str); 4] = [
    ("add", "a + b", "a - b"),
    ("sub", "a - b", "a + b"),
    ("mul", "a * b", "a + b"),
    ("div", "a / b", "a * b"),
];

/// The report id of `function`'s test.
pub fn test_id(function: &str) -> String {
    format!("tests.test_calc::test_{function}")
}

/// The package with exactly the functions in `right` correct, as a `printf` writing it.
pub fn write_package(right: &[&str]) -> String {
    let mut lines = Vec::new();
    for (name, good, bad) in FUNCTIONS {
        lines.push(format!("'def {name}(a, b):'"));
        lines.push(format!(
            "'    return {}'",
            if right.contains(&name) { good } else { bad }
        ));
    }
    format!("printf '%s\\n' {} > src/calc/__init__.py", lines.join(" "))
}

/// The `case` on `LOOPEXEC_ITERATION` writing, at iteration i (1-based), the package with
/// `plan[i-1]` correct; past the plan it changes nothing.
pub fn plan_steps(plan: &[&[&str]]) -> String {
    let arms: String = plan
        .iter()
        .enumerate()
        .map(|(i, right)| format!("{}) {} ;; ", i + 1, write_package(right)))
        .collect();
    format!("case $LOOPEXEC_ITERATION in {arms}*) true ;; esac")
}

/// A committed project where every function is wrong (t0: four failing tests).
pub fn calc_project() -> tempfile::TempDir {
    require_pytest();
    let repo = workdir();
    let p = repo.path();
    std::fs::create_dir_all(p.join("src/calc")).unwrap();
    std::fs::create_dir_all(p.join("tests")).unwrap();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(write_package(&[]))
        .current_dir(p)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(
        p.join("tests/test_calc.py"),
        "from calc import add, sub, mul, div\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n\n\ndef test_div():\n    assert div(6, 3) == 2\n",
    )
    .unwrap();
    std::fs::write(
        p.join("pyproject.toml"),
        "[tool.pytest.ini_options]\npythonpath = [\"src\"]\n",
    )
    .unwrap();
    std::fs::write(p.join(".gitignore"), "out/\n__pycache__/\n.loopexec/\n").unwrap();
    commit_t0(p);
    repo
}
