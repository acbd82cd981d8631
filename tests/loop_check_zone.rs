//! The check zone end to end (issue 12, item 4): a check must not change the tree it tests. A
//! check that modified, replaced or deleted a file of that tree halts
//! `metric_integrity_violation` naming the file, green or not; t0's protected paths are read-only
//! inside the check (a write fails with EROFS, a removal with EBUSY); an honest check that only
//! adds files (`__pycache__/`, `.pytest_cache/`, `target/`) still converges.
mod common;
use common::calc::{calc_project, write_package, PYTEST};
use common::*;
use serde_json::Value;
use std::path::Path;

fn write(dir: &Path, path: &str, text: &str) {
    let p = dir.join(path);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(p, text).unwrap();
}

fn run(repo: &Path, run_id: &str, agent: &str, check: &str, extra: &[&str]) -> (Ran, Vec<Value>) {
    let mut args = vec!["run", "--json", "--run-id", run_id, "--exec", agent, "--check", check, "--max-iterations", "2"];
    args.extend_from_slice(extra);
    let r = loopexec(repo, &args);
    let ev = events(repo, run_id);
    (r, ev)
}

/// Asserts the run halted `metric_integrity_violation` from the check-writes finding of
/// `iteration`, naming `path` as `what` (modified, deleted, replaced).
fn assert_check_wrote(r: &Ran, ev: &[Value], iteration: u64, path: &str, what: &str) {
    assert_eq!(r.code, 13, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "metric_integrity_violation", "{r:?}");
    let guard = ev
        .iter()
        .find(|e| e["type"] == "guard" && e["iteration"] == iteration && e["detail"].as_str().is_some_and(|d| d.contains("of the tree it tested")))
        .unwrap_or_else(|| panic!("no check-writes finding at iteration {iteration}: {ev:#?}"));
    assert_eq!(guard["guard"], "metric_integrity");
    assert_eq!(guard["stage"], "after_check");
    let findings = guard["findings"].as_array().unwrap();
    assert!(findings.iter().any(|f| f["path"] == path && f["what"] == format!("{what} by the check")), "{findings:#?}");
}

/// The fix of every function of the calc project (tests/common/calc.rs).
fn honest_fix() -> String {
    write_package(&["add", "sub", "mul", "div"])
}

#[test]
fn an_honest_pytest_run_that_writes_only_its_caches_converges() {
    let repo = calc_project();
    // Bytecode and pytest's cache on: `__pycache__/` and `.pytest_cache/` are new paths.
    let (r, ev) = run(repo.path(), "h", &honest_fix(), "/usr/bin/python3 -m pytest -q --junitxml=out/junit.xml", &["--no-baseline"]);
    assert_eq!(r.code, 10, "{r:?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

#[test]
fn a_check_that_deletes_a_tracked_file_halts_metric_integrity_violation() {
    let repo = calc_project();
    let check = format!("rm .gitignore && {PYTEST}");
    let (r, ev) = run(repo.path(), "d", &honest_fix(), &check, &["--no-baseline"]);
    assert_check_wrote(&r, &ev, 1, ".gitignore", "deleted");
    let check_result = ev.iter().find(|e| e["type"] == "check_result").unwrap();
    assert_eq!(check_result["check_exit"], 0, "the check itself was green");
}

#[test]
fn an_operators_check_that_rewrites_a_tracked_file_halts_at_t0_before_any_agent_call() {
    let repo = calc_project();
    let check = format!("echo '# touched' >> pyproject.toml && {PYTEST}");
    let (r, ev) = run(repo.path(), "t", "true", &check, &[]);
    assert_check_wrote(&r, &ev, 0, "pyproject.toml", "modified");
    assert!(ev.iter().all(|e| e["type"] != "exec_result"), "the agent was never called: {ev:#?}");
    assert!(r.json()["run"]["detail"].as_str().unwrap_or_default().starts_with("the check on t0 wrote to 1 path(s) of the tree it tested: pyproject.toml (modified)"), "{r:?}");
}

#[test]
fn t0s_protected_paths_are_read_only_inside_the_check() {
    let repo = calc_project();
    // tests/ is protected: appending fails with EROFS, removing with EBUSY (a mount point); the
    // check exits 0 only when both were refused that way.
    let probe = "import errno, os, sys\n\
try:\n    open('tests/test_calc.py', 'a').write('x')\n    sys.exit(3)\nexcept OSError as e:\n    assert e.errno == errno.EROFS, e\n\
try:\n    os.unlink('tests/test_calc.py')\n    sys.exit(4)\nexcept OSError as e:\n    assert e.errno in (errno.EBUSY, errno.EROFS), e\n";
    write(repo.path(), "probe.py", probe);
    git(repo.path(), &["add", "probe.py"]);
    git(repo.path(), &["commit", "-q", "-m", "probe"]);
    let check = format!("/usr/bin/python3 probe.py && {PYTEST}");
    let (r, ev) = run(repo.path(), "p", &honest_fix(), &check, &["--no-baseline"]);
    assert_eq!(r.code, 10, "{r:?} {ev:#?}");
}

/// A pytest project whose tests live in the package (`calc/testcore.py`, collected through
/// `python_files = test*.py`; no default protected pattern matches it) and import a helper
/// module `calc/support.py` the agent may change.
fn package_tests_project() -> tempfile::TempDir {
    require_pytest();
    let dir = workdir();
    write(dir.path(), "pytest.ini", "[pytest]\npython_files = test*.py\n");
    write(dir.path(), "calc/__init__.py", "from calc.core import add\n");
    write(dir.path(), "calc/core.py", "def add(a, b):\n    return a + b + 1\n");
    write(dir.path(), "calc/support.py", "def pairs():\n    return [(2, 3, 5), (-1, 1, 0)]\n");
    write(
        dir.path(),
        "calc/testcore.py",
        "from calc import add\nfrom calc.support import pairs\n\n\ndef test_add():\n    for a, b, total in pairs():\n        assert add(a, b) == total\n",
    );
    write(dir.path(), ".gitignore", "__pycache__/\n.loopexec/\n");
    commit_t0(dir.path());
    dir
}

#[test]
fn a_helper_module_that_rewrites_a_test_file_at_import_halts_naming_the_file() {
    let repo = package_tests_project();
    // The agent fixes the bug (the check is green) and makes the helper rewrite the test it
    // serves whenever it is imported: the next check would test nothing.
    let agent = "sed -i 's/return a + b + 1/return a + b/' calc/core.py && \
        printf '%s\\n' 'import pathlib' \"pathlib.Path(__file__).with_name('testcore.py').write_text('def test_add():\\\\n    pass\\\\n')\" >> calc/support.py";
    let (r, ev) = run(repo.path(), "w", agent, "/usr/bin/python3 -B -m pytest -q -p no:cacheprovider calc", &["--no-baseline"]);
    assert_check_wrote(&r, &ev, 1, "calc/testcore.py", "modified");
    let check_result = ev.iter().find(|e| e["type"] == "check_result").unwrap();
    assert_eq!(check_result["check_exit"], 0, "the check itself was green");
}
