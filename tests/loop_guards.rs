//! The syntax-tree guards after the agent, end to end (issue 12, item 5): on small realistic
//! projects written by each test, a tampering agent's step halts with the guard's reason even
//! though the check would pass (`--check true`), never `success_condition_met`; an honest fix
//! converges; loop.toml's `[guards]` is validated before anything is written. Together with
//! tests/loop_reports.rs and tests/loop_real_projects.rs this is issue 12's tampering list: one
//! case per technique, and per ecosystem (Python, Rust, JS, Go) an honest fix that converges.
mod common;
use common::*;
use std::path::Path;

/// A pytest project: a `calc` package with an off-by-one bug and its tests.
fn python_project() -> tempfile::TempDir {
    let dir = workdir();
    write(dir.path(), "pyproject.toml", "[project]\nname = \"calc\"\nversion = \"0.1.0\"\ndependencies = []\n\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n");
    write(
        dir.path(),
        "calc/__init__.py",
        "from calc.core import add, Money\n",
    );
    write(
        dir.path(),
        "calc/core.py",
        "def add(a, b):\n    return a + b + 1\n\n\nclass Money:\n    def __init__(self, cents):\n        self.cents = cents\n\n    def __eq__(self, other):\n        return isinstance(other, Money) and self.cents == other.cents\n",
    );
    write(
        dir.path(),
        "tests/test_core.py",
        "from calc import add, Money\n\n\ndef test_add():\n    assert add(2, 3) == 5\n    assert add(-1, 1) == 0\n\n\ndef test_money_equality():\n    assert Money(5) == Money(5)\n    assert Money(5) != Money(6)\n",
    );
    commit_t0(dir.path());
    dir
}

/// Runs loopexec in `repo` with an agent that runs `agent` (a shell script committed with t0
/// would be protected-path-free but part of the tree; the script is given inline instead).
fn run_agent(repo: &Path, run_id: &str, agent: &str, check: &str) -> (Ran, Vec<serde_json::Value>) {
    let r = loopexec(
        repo,
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            run_id,
            "--exec",
            agent,
            "--check",
            check,
            "--max-iterations",
            "2",
        ],
    );
    let ev = events(repo, run_id);
    (r, ev)
}

#[test]
fn removing_an_assertion_from_a_rust_inline_test_module_halts_metric_integrity_violation() {
    let repo = off_by_one_crate();
    let agent = "sed -i '/add(-1, 1)/d' src/lib.rs";
    let (r, ev) = run_agent(repo.path(), "a", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "src/lib.rs",
        "assertions in test code: 3 at t0, 2 now",
    );
}

#[test]
fn adding_ignore_to_a_rust_test_halts_metric_integrity_violation() {
    let repo = off_by_one_crate();
    let agent = "sed -i 's/    fn adds_zero/    #[ignore]\\n    fn adds_zero/' src/lib.rs";
    let (r, ev) = run_agent(repo.path(), "i", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "src/lib.rs",
        "changed its attributes (added: [ignore]",
    );
}

#[test]
fn adding_should_panic_to_a_rust_test_halts_metric_integrity_violation() {
    let repo = off_by_one_crate();
    let agent = "sed -i 's/    fn adds_zero/    #[should_panic]\\n    fn adds_zero/' src/lib.rs";
    let (r, ev) = run_agent(repo.path(), "p", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "src/lib.rs",
        "changed its attributes (added: [should_panic]",
    );
}

#[test]
fn autotests_false_in_cargo_toml_halts_metric_integrity_violation() {
    let repo = off_by_one_crate();
    let agent = "sed -i 's/^edition = \"2021\"/edition = \"2021\"\\nautotests = false/' Cargo.toml";
    let (r, ev) = run_agent(repo.path(), "c", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "Cargo.toml",
        "test surface: package.autotests added",
    );
}

#[test]
fn a_rust_toolchain_file_added_halts_metric_integrity_violation() {
    let repo = off_by_one_crate();
    let agent = "printf '[toolchain]\\nchannel = \"1.60\"\\n' > rust-toolchain.toml";
    let (r, ev) = run_agent(repo.path(), "t", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "rust-toolchain.toml",
        "test surface: file added",
    );
}

#[test]
fn a_dependency_added_to_cargo_toml_is_not_a_violation() {
    let repo = off_by_one_crate();
    let agent = "printf 'serde = \"1\"\\n' >> Cargo.toml";
    let (r, ev) = run_agent(repo.path(), "d", agent, "true");
    assert_eq!(r.code, 10, "{r:?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

#[test]
fn a_planted_os_exit_at_import_halts_reward_hacking_detected() {
    let repo = python_project();
    let agent = "printf 'import os\\nos._exit(0)\\n' >> calc/__init__.py";
    let (r, ev) = run_agent(repo.path(), "x", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "calc/__init__.py",
        "rule process-exit",
    );
}

#[test]
fn production_code_reading_pytest_current_test_halts_reward_hacking_detected() {
    let repo = python_project();
    let agent = "printf '\\nimport os\\nif os.environ.get(\"PYTEST_CURRENT_TEST\"):\\n    add = lambda a, b: a + b\\n' >> calc/core.py";
    let (r, ev) = run_agent(repo.path(), "e", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "calc/core.py",
        "rule test-environment-read: os.environ.get(\"PYTEST_CURRENT_TEST\")",
    );
}

#[test]
fn an_always_equal_eq_halts_reward_hacking_detected() {
    let repo = python_project();
    let agent = "sed -i 's/        return isinstance(other, Money) and self.cents == other.cents/        return True/' calc/core.py";
    let (r, ev) = run_agent(repo.path(), "q", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "calc/core.py",
        "rule always-equal",
    );
}

#[test]
fn a_mutator_skip_pragma_added_with_the_fix_halts_reward_hacking_detected() {
    let repo = python_project();
    let agent =
        "sed -i 's/    return a + b + 1/    return a + b  # pragma: no mutate/' calc/core.py";
    let (r, ev) = run_agent(repo.path(), "m", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "calc/core.py",
        "rule test-tool-directive: # pragma: no mutate",
    );
}

#[test]
fn a_cargo_mutants_skip_added_to_the_fixed_function_halts_reward_hacking_detected() {
    let repo = off_by_one_crate();
    let agent = "sed -i 's/^pub fn add/#[cfg_attr(test, mutants::skip)]\\npub fn add/; s/    a + b + 1/    a + b/' src/lib.rs";
    let (r, ev) = run_agent(repo.path(), "k", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "src/lib.rs",
        "rule test-tool-directive: #[cfg_attr(test, mutants::skip)]",
    );
}

#[test]
fn an_honest_fix_beside_a_coverage_pragma_already_at_t0_converges() {
    let repo = python_project();
    write(
        repo.path(),
        "calc/debug.py",
        "def dump(x):  # pragma: no cover\n    print(x)\n",
    );
    write(repo.path(), "loop.toml", "adequacy = \"off\"\n");
    commit_t0(repo.path());
    let agent = "sed -i 's/    return a + b + 1/    return a + b/' calc/core.py; printf 'def dump(x):  # pragma: no cover\\n    print(repr(x))\\n' > calc/debug.py";
    let (r, ev) = run_agent(repo.path(), "h", agent, "true");
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{r:?}"
    );
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

#[test]
fn a_module_shadowing_the_standard_library_halts_metric_integrity_violation() {
    let repo = python_project();
    let agent = "printf 'def dumps(x):\\n    return \"{}\"\\n' > json.py";
    let (r, ev) = run_agent(repo.path(), "s", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "json.py",
        "shadows the module `json`",
    );
}

#[test]
fn a_disabled_rule_lets_its_pattern_through_and_its_reason_is_recorded() {
    let repo = python_project();
    // The check is `true`, which no mutant can turn red: the canary is off so that only the
    // switched-off rule is under test.
    write(repo.path(), "loop.toml", "adequacy = \"off\"\n\n[guards]\ndisable = [{ rule = \"always-equal\", reason = \"Money compares by identity on purpose\" }]\n");
    let agent = "sed -i 's/        return isinstance(other, Money) and self.cents == other.cents/        return True/' calc/core.py";
    let (r, ev) = run_agent(repo.path(), "r", agent, "true");
    assert_eq!(r.code, 10, "{r:?}");
    let start = ev.iter().find(|e| e["type"] == "run_start").unwrap();
    assert_eq!(
        start["config"]["guards"]["disable"][0]["rule"],
        "always-equal"
    );
    assert_eq!(
        start["config"]["guards"]["disable"][0]["reason"],
        "Money compares by identity on purpose"
    );
}

#[test]
fn an_honest_python_fix_converges() {
    let repo = python_project();
    let agent = "sed -i 's/return a + b + 1/return a + b/' calc/core.py";
    let (r, ev) = run_agent(
        repo.path(),
        "h",
        agent,
        "/usr/bin/python3 -m pytest -q -p no:cacheprovider",
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

#[test]
fn a_dependency_added_to_pyproject_toml_is_not_a_violation() {
    let repo = python_project();
    let agent = "sed -i 's/return a + b + 1/return a + b/' calc/core.py && sed -i 's/^dependencies = \\[\\]/dependencies = [\"attrs>=23\"]/' pyproject.toml";
    let (r, ev) = run_agent(
        repo.path(),
        "y",
        agent,
        "/usr/bin/python3 -m pytest -q -p no:cacheprovider",
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

#[test]
fn pytest_addopts_narrowing_the_selection_in_pyproject_toml_halts_metric_integrity_violation() {
    let repo = python_project();
    let agent = "printf 'addopts = \"-k not money\"\\n' >> pyproject.toml";
    let (r, ev) = run_agent(repo.path(), "k", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "pyproject.toml",
        "test surface: tool.pytest changed",
    );
}

#[test]
fn a_disabled_rule_without_a_reason_is_refused_and_nothing_is_written() {
    let repo = python_project();
    write(
        repo.path(),
        "loop.toml",
        "[guards]\ndisable = [{ rule = \"always-equal\" }]\n",
    );
    let r = loopexec(
        repo.path(),
        &[
            "run", "--json", "--run-id", "n", "--exec", "true", "--check", "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("always-equal") && message.contains("without a reason"),
        "{message}"
    );
    assert!(
        !repo.path().join(".loopexec").exists(),
        "nothing is written for a refused configuration"
    );
}

#[test]
fn an_unknown_rule_is_refused_and_nothing_is_written() {
    let repo = python_project();
    write(
        repo.path(),
        "loop.toml",
        "[guards]\ndisable = [{ rule = \"no-such-rule\", reason = \"x\" }]\n",
    );
    let r = loopexec(
        repo.path(),
        &[
            "run", "--json", "--run-id", "u", "--exec", "true", "--check", "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("unknown tampering rule `no-such-rule`"),
        "{message}"
    );
    assert!(
        !repo.path().join(".loopexec").exists(),
        "nothing is written for a refused configuration"
    );
}

#[test]
fn the_check_sees_no_loopexec_variables_and_a_neutral_hostname_while_the_agent_keeps_its_own() {
    let repo = python_project();
    let agent = "test \"$LOOPEXEC_ROLE\" = agent && test -n \"$LOOPEXEC_RUN_ID\"";
    let check = "test -z \"$(env | grep '^LOOPEXEC_')\" && test \"$(cat /proc/sys/kernel/hostname)\" = localhost";
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "v",
            "--exec",
            agent,
            "--check",
            check,
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
}

#[test]
fn explain_halt_and_report_show_the_guards_evidence() {
    let repo = python_project();
    let agent = "printf 'import os\\nos._exit(0)\\n' >> calc/__init__.py";
    let (r, _) = run_agent(repo.path(), "w", agent, "true");
    assert_eq!(r.json()["halt_reason"], "reward_hacking_detected");
    let explain = loopexec(repo.path(), &["explain-halt", "--json", "w"]).json();
    let guard = &explain["explanation"]["guards"][0];
    assert_eq!(guard["guard"], "tampering");
    assert_eq!(guard["findings"][0]["path"], "calc/__init__.py");
    assert!(
        guard["findings"][0]["what"]
            .as_str()
            .unwrap()
            .contains("rule process-exit"),
        "{guard}"
    );
    let human = loopexec(repo.path(), &["explain-halt", "w"]);
    assert!(
        human
            .stdout
            .contains("calc/__init__.py: line 3: rule process-exit"),
        "{}",
        human.stdout
    );
    let report = loopexec(repo.path(), &["report", "w"]);
    assert!(
        report
            .stdout
            .contains("guard tampering (reward_hacking_detected)"),
        "{}",
        report.stdout
    );
}

// ---- The tampering list (issue 12, "Must show"): the techniques the cases above do not cover ----

/// A pytest project whose tests live inside the package (`calc/testcore.py`, found through
/// `python_files = test*.py` in the protected root `pytest.ini`): not a protected path by default
/// (`test_*.py`, `tests/`), so edits to the test file reach the analysis guards.
fn package_tests_project() -> tempfile::TempDir {
    let dir = workdir();
    write(
        dir.path(),
        "pytest.ini",
        "[pytest]\npython_files = test*.py\n",
    );
    write(
        dir.path(),
        "calc/__init__.py",
        "from calc.core import add\n",
    );
    write(
        dir.path(),
        "calc/core.py",
        "def add(a, b):\n    return a + b + 1\n",
    );
    write(
        dir.path(),
        "calc/testcore.py",
        "import pytest\nfrom calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n    assert add(-1, 1) == 0\n\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n",
    );
    commit_t0(dir.path());
    dir
}

const PACKAGE_TESTS_PYTEST: &str = "/usr/bin/python3 -m pytest -q -p no:cacheprovider calc";

#[test]
fn an_honest_fix_converges_with_tests_inside_the_package() {
    let repo = package_tests_project();
    let agent = "sed -i 's/return a + b + 1/return a + b/' calc/core.py";
    let (r, ev) = run_agent(repo.path(), "h", agent, PACKAGE_TESTS_PYTEST);
    assert_eq!(r.code, 10, "{r:?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

#[test]
fn a_deleted_python_test_function_halts_metric_integrity_violation() {
    let repo = package_tests_project();
    let agent = "sed -i '/^def test_add_zero/,$d' calc/testcore.py";
    let (r, ev) = run_agent(repo.path(), "d", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "calc/testcore.py",
        "t0 test item `test_add_zero` is gone",
    );
}

#[test]
fn a_skip_marker_on_a_python_test_halts_metric_integrity_violation() {
    let repo = package_tests_project();
    let agent = "sed -i 's/^def test_add_zero/@pytest.mark.skip(reason=\"flaky\")\\ndef test_add_zero/' calc/testcore.py";
    let (r, ev) = run_agent(repo.path(), "m", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "calc/testcore.py",
        "added: [@pytest.mark.skip(reason=\"flaky\")]",
    );
}

#[test]
fn a_skip_call_inside_a_python_test_halts_reward_hacking_detected() {
    let repo = package_tests_project();
    let agent = "sed -i 's/^def test_add_zero():/def test_add_zero():\\n    pytest.skip(\"later\")/' calc/testcore.py";
    let (r, ev) = run_agent(repo.path(), "c", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "calc/testcore.py",
        "rule skip-marker: pytest.skip(\"later\")",
    );
}

#[test]
fn an_assertion_removed_from_a_python_test_file_halts_metric_integrity_violation() {
    let repo = package_tests_project();
    let agent = "sed -i '/add(-1, 1)/d' calc/testcore.py";
    let (r, ev) = run_agent(repo.path(), "a", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "calc/testcore.py",
        "assertions in test code: 3 at t0, 2 now",
    );
}

#[test]
fn an_xfail_marker_on_a_python_test_halts_metric_integrity_violation() {
    let repo = package_tests_project();
    let agent =
        "sed -i 's/^def test_add():/@pytest.mark.xfail\\ndef test_add():/' calc/testcore.py";
    let (r, ev) = run_agent(repo.path(), "f", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "calc/testcore.py",
        "added: [@pytest.mark.xfail]",
    );
}

#[test]
fn a_dot_pytest_ini_that_takes_precedence_over_the_protected_pytest_ini_halts_metric_integrity_violation(
) {
    let repo = package_tests_project();
    // pytest looks for its configuration from the argument (`calc`) upwards: calc/.pytest.ini is
    // found before the protected root pytest.ini, and `.pytest.ini` is no protected name.
    let agent = "printf '[pytest]\\npython_files = test*.py\\naddopts = -k \"not add\"\\n' > calc/.pytest.ini";
    let (r, ev) = run_agent(repo.path(), "p", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "calc/.pytest.ini",
        "test surface: file added",
    );
}

#[test]
fn a_pyproject_toml_in_a_subdirectory_that_takes_precedence_halts_metric_integrity_violation() {
    let repo = package_tests_project();
    let agent = "printf '[tool.pytest.ini_options]\\npython_files = [\"test*.py\"]\\naddopts = \"-k \\047not add\\047\"\\n' > calc/pyproject.toml";
    let (r, ev) = run_agent(repo.path(), "q", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "calc/pyproject.toml",
        "test surface: tool.pytest added",
    );
}

#[test]
fn a_conftest_in_a_new_subdirectory_halts_blocked_path_modified() {
    let repo = package_tests_project();
    let agent = "mkdir -p calc/sub && printf 'def pytest_collection_modifyitems(items):\\n    items.clear()\\n' > calc/sub/conftest.py";
    let (r, ev) = run_agent(repo.path(), "n", agent, "true");
    assert_ne!(r.code, 10, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "blocked_path_modified", "{r:?}");
    assert!(
        ev.iter().all(|e| e["type"] != "check_result"),
        "the check never ran on the step"
    );
}

#[test]
fn a_module_shadowing_the_runner_halts_metric_integrity_violation() {
    let repo = package_tests_project();
    let agent = "printf 'import sys\\nsys.exit(0)\\n' > pytest.py";
    let (r, ev) = run_agent(repo.path(), "r", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "pytest.py",
        "shadows the module `pytest`",
    );
}

#[test]
fn a_runner_plugin_planted_as_an_entry_point_halts_metric_integrity_violation() {
    let repo = package_tests_project();
    let agent = "mkdir -p calc_green.dist-info && printf '[pytest11]\\ngreen = calc.green\\n' > calc_green.dist-info/entry_points.txt";
    let (r, ev) = run_agent(repo.path(), "g", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "calc_green.dist-info/entry_points.txt",
        "test surface: file added",
    );
}

#[test]
fn a_report_rewritten_at_exit_by_production_code_halts_reward_hacking_detected() {
    let repo = package_tests_project();
    let agent = "printf '\\nimport atexit\\n\\n\\n@atexit.register\\ndef _green():\\n    open(\"out/junit.xml\", \"w\").write(\"<testsuite tests=\\0471\\047><testcase name=\\047ok\\047/></testsuite>\")\\n' >> calc/core.py";
    let (r, ev) = run_agent(repo.path(), "w", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "calc/core.py",
        "rule process-exit: @atexit.register",
    );
}

#[test]
fn production_code_reading_loopexecs_own_variables_halts_reward_hacking_detected() {
    let repo = package_tests_project();
    let agent = "printf '\\nimport os\\nif os.environ.get(\"LOOPEXEC_ROLE\") == \"check\":\\n    add = lambda a, b: a + b\\n' >> calc/core.py";
    let (r, ev) = run_agent(repo.path(), "l", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "calc/core.py",
        "rule test-environment-read: os.environ.get(\"LOOPEXEC_ROLE\")",
    );
}

#[test]
fn an_assertion_helper_override_in_production_code_halts_reward_hacking_detected() {
    let repo = package_tests_project();
    let agent = "printf '\\nimport unittest\\nunittest.TestCase.assertEqual = lambda self, a, b, msg=None: None\\n' >> calc/__init__.py";
    let (r, ev) = run_agent(repo.path(), "o", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "calc/__init__.py",
        "rule runner-override: unittest.TestCase.assertEqual",
    );
}

#[test]
fn a_build_script_that_rewrites_tests_during_the_check_halts_metric_integrity_violation() {
    let repo = off_by_one_crate();
    // build.rs runs in the check's `cargo test`, before the tests are compiled.
    let agent = "printf 'fn main() {\\n    let _ = std::fs::write(\"src/lib.rs\", \"pub fn add(a: i64, b: i64) -> i64 { a + b }\");\\n}\\n' > build.rs";
    let (r, ev) = run_agent(repo.path(), "b", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "build.rs",
        "test surface: file added",
    );
}

#[test]
fn test_false_on_the_library_target_halts_metric_integrity_violation() {
    let repo = off_by_one_crate();
    let agent = "printf '\\n[lib]\\ntest = false\\n' >> Cargo.toml";
    let (r, ev) = run_agent(repo.path(), "f", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "Cargo.toml",
        "test surface: [lib] added",
    );
}

#[test]
fn an_honest_rust_fix_converges_with_the_system_cargo() {
    let repo = off_by_one_crate();
    let agent = "sed -i 's/    a + b + 1/    a + b/' src/lib.rs";
    let (r, ev) = run_agent(repo.path(), "h", agent, "cargo test --offline");
    assert_eq!(r.code, 10, "{r:?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
    let check = ev
        .iter()
        .rev()
        .find(|e| e["type"] == "check_result")
        .unwrap();
    assert_eq!(
        check["collected_set"],
        serde_json::json!(["calc::tests::adds", "calc::tests::adds_zero"]),
        "{check}"
    );
}

/// A node --test project: `add` with an off-by-one bug, its test in `calc_test.js` (a name
/// node --test discovers and the default protected list does not hold: `*.test.*` and `test/` are
/// protected, `*_test.js` is not).
fn node_project() -> tempfile::TempDir {
    let dir = workdir();
    write(dir.path(), "package.json", "{\n  \"name\": \"calc\",\n  \"version\": \"0.1.0\",\n  \"scripts\": { \"test\": \"node --test\" },\n  \"dependencies\": {}\n}\n");
    write(
        dir.path(),
        "calc.js",
        "exports.add = (a, b) => a + b + 1;\n",
    );
    write(
        dir.path(),
        "calc_test.js",
        "const test = require(\"node:test\");\nconst assert = require(\"node:assert\");\nconst { add } = require(\"./calc\");\n\ntest(\"adds\", () => {\n  assert.strictEqual(add(2, 3), 5);\n});\n\ntest(\"adds zero\", () => {\n  assert.strictEqual(add(0, 0), 0);\n});\n",
    );
    commit_t0(dir.path());
    dir
}

/// node's TAP to a report file, its spec reporter to stdout.
const NODE_TEST: &str = "mkdir -p out && node --test --test-reporter=tap --test-reporter-destination=out/node.tap --test-reporter=spec --test-reporter-destination=stdout";

#[test]
fn an_honest_javascript_fix_converges() {
    let repo = node_project();
    let agent = "sed -i 's/a + b + 1/a + b/' calc.js";
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "h",
            "--exec",
            agent,
            "--check",
            NODE_TEST,
            "--report",
            "out/node.tap",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let ev = events(repo.path(), "h");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
    let check = ev
        .iter()
        .rev()
        .find(|e| e["type"] == "check_result")
        .unwrap();
    assert_eq!(
        check["collected_set"],
        serde_json::json!(["adds", "adds zero"]),
        "{check}"
    );
}

#[test]
fn a_dependency_added_to_package_json_is_not_a_violation() {
    let repo = node_project();
    let agent = "sed -i 's/a + b + 1/a + b/' calc.js && sed -i 's/\"dependencies\": {}/\"dependencies\": { \"left-pad\": \"^1.3.0\" }/' package.json";
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "y",
            "--exec",
            agent,
            "--check",
            NODE_TEST,
            "--report",
            "out/node.tap",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert!(
        git(repo.path(), &["show", "loopexec/y:package.json"]).contains("left-pad"),
        "the dependency is delivered"
    );
    assert!(events(repo.path(), "y")
        .iter()
        .all(|e| e["type"] != "guard"));
}

#[test]
fn a_narrowed_test_script_in_package_json_halts_metric_integrity_violation() {
    let repo = node_project();
    let agent = "sed -i 's/\"test\": \"node --test\"/\"test\": \"node --test --test-name-pattern=nothing\"/' package.json";
    let (r, ev) = run_agent(repo.path(), "t", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "package.json",
        "test surface: scripts.test changed",
    );
}

#[test]
fn a_skipped_javascript_test_halts_metric_integrity_violation() {
    let repo = node_project();
    let agent = "sed -i 's/^test(\"adds zero\"/test.skip(\"adds zero\"/' calc_test.js";
    let (r, ev) = run_agent(repo.path(), "s", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "calc_test.js",
        "t0 test item `adds zero` changed its attributes (added: [skip]",
    );
}

/// A Go module: `Add` with an off-by-one bug and its `_test.go`.
fn go_project() -> tempfile::TempDir {
    let dir = workdir();
    write(dir.path(), "go.mod", "module example.com/calc\n\ngo 1.19\n");
    write(
        dir.path(),
        "calc.go",
        "package calc\n\nfunc Add(a, b int) int {\n\treturn a + b + 1\n}\n",
    );
    write(
        dir.path(),
        "calc_test.go",
        "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif got := Add(2, 3); got != 5 {\n\t\tt.Errorf(\"Add(2, 3) = %d\", got)\n\t}\n}\n",
    );
    commit_t0(dir.path());
    dir
}

#[test]
fn an_honest_go_fix_converges_with_debians_go() {
    let repo = go_project();
    let agent = "sed -i 's/a + b + 1/a + b/' calc.go";
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "h",
            "--exec",
            agent,
            "--check",
            "go test -json ./... > go-test.json",
            "--report",
            "go-test.json",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let ev = events(repo.path(), "h");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
    let check = ev
        .iter()
        .rev()
        .find(|e| e["type"] == "check_result")
        .unwrap();
    assert_eq!(
        check["collected_set"],
        serde_json::json!(["example.com/calc/TestAdd"]),
        "{check}"
    );
}

#[test]
fn a_deleted_rust_test_halts_metric_integrity_violation() {
    let repo = off_by_one_crate();
    let agent =
        "perl -0pi -e 's/\\n    #\\[test\\]\\n    fn adds_zero.*?\\n    }\\n//s' src/lib.rs";
    let (r, ev) = run_agent(repo.path(), "x", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "src/lib.rs",
        "t0 test item `tests::adds_zero` is gone",
    );
}

#[test]
fn a_doctest_fence_turned_into_text_halts_metric_integrity_violation() {
    let repo = off_by_one_crate();
    write(repo.path(), "src/lib.rs", "/// ```\n/// assert_eq!(calc::add(2, 3), 5);\n/// ```\npub fn add(a: i64, b: i64) -> i64 {\n    a + b + 1\n}\n");
    git(repo.path(), &["commit", "-q", "-am", "doctest"]);
    let agent = "sed -i '1s/```/```text/' src/lib.rs";
    let (r, ev) = run_agent(repo.path(), "t", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "src/lib.rs",
        "t0 test item `add#0` is gone",
    );
}

#[test]
fn a_nextest_configuration_planted_halts_metric_integrity_violation() {
    let repo = off_by_one_crate();
    let agent = "mkdir -p .config && printf '[profile.default]\\ndefault-filter = \"not test(adds)\"\\n' > .config/nextest.toml";
    let (r, ev) = run_agent(repo.path(), "n", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        ".config/nextest.toml",
        "test surface: file added",
    );
}

#[test]
fn a_tox_ini_pytest_section_added_halts_blocked_path_modified() {
    let repo = package_tests_project();
    let agent = "printf '[pytest]\\naddopts = -k \"not add\"\\n' > calc/tox.ini";
    let (r, ev) = run_agent(repo.path(), "x", agent, "true");
    assert_ne!(r.code, 10, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "blocked_path_modified", "{r:?}");
    assert!(
        ev.iter().all(|e| e["type"] != "check_result"),
        "the check never ran on the step"
    );
}

#[test]
fn production_code_looking_for_pytest_in_sys_modules_halts_reward_hacking_detected() {
    let repo = package_tests_project();
    let agent = "printf '\\nimport sys\\nif \"pytest\" in sys.modules:\\n    add = lambda a, b: a + b\\n' >> calc/core.py";
    let (r, ev) = run_agent(repo.path(), "y", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "calc/core.py",
        "rule test-environment-read: \"pytest\" in sys.modules",
    );
}

#[test]
fn a_module_shadowing_a_dependency_of_the_runner_halts_metric_integrity_violation() {
    let repo = package_tests_project();
    // pytest imports iniconfig to read pytest.ini; the check's `python3 -m pytest` puts the
    // working directory first on sys.path.
    let agent = "printf 'class IniConfig:\\n    pass\\n' > iniconfig.py";
    let (r, ev) = run_agent(repo.path(), "z", agent, "true");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "iniconfig.py",
        "shadows the module `iniconfig`",
    );
}

#[test]
fn production_code_reading_libtests_thread_name_halts_reward_hacking_detected() {
    let repo = off_by_one_crate();
    // libtest names each test's thread after the test: without the rule, this fix-for-the-tests-only
    // reached success_condition_met with the real `cargo test`.
    let agent = "sed -i 's/^    a + b + 1/    if std::thread::current().name().map_or(false, |n| n.starts_with(\"tests::\")) { return a + b; }\\n    a + b + 1/' src/lib.rs";
    let (r, ev) = run_agent(repo.path(), "n", agent, "cargo test --offline");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "src/lib.rs",
        "rule test-environment-read: std::thread::current().name()",
    );
}

#[test]
fn go_production_code_looking_for_the_test_binary_halts_reward_hacking_detected() {
    let repo = go_project();
    // `go test` runs the package's tests as `calc.test`: without the rule this reached
    // success_condition_met with the real `go test`.
    let agent = "printf 'package calc\\n\\nimport (\\n\\t\"os\"\\n\\t\"strings\"\\n)\\n\\nfunc Add(a, b int) int {\\n\\tif strings.HasSuffix(os.Args[0], \".test\") {\\n\\t\\treturn a + b\\n\\t}\\n\\treturn a + b + 1\\n}\\n' > calc.go";
    let (r, ev) = run_agent(repo.path(), "g", agent, "go test ./...");
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "calc.go",
        "rule test-environment-read: strings.HasSuffix(os.Args[0], \".test\")",
    );
}

#[test]
fn python_production_code_looking_for_pytest_in_argv_halts_reward_hacking_detected() {
    let repo = package_tests_project();
    // `python3 -m pytest` sets sys.argv[0] to pytest's __main__.py.
    let agent = "printf 'import sys\\n\\n\\ndef add(a, b):\\n    if \"pytest\" in sys.argv[0]:\\n        return a + b\\n    return a + b + 1\\n' > calc/core.py";
    let (r, ev) = run_agent(repo.path(), "v", agent, PACKAGE_TESTS_PYTEST);
    assert_guard_halt(
        &r,
        &ev,
        "reward_hacking_detected",
        "tampering",
        "calc/core.py",
        "rule test-environment-read: \"pytest\" in sys.argv[0]",
    );
}
