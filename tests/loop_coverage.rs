//! The declared coverage report and the coverage guard (issue 12 item 5): `--coverage PATH` names
//! an lcov or Cobertura report the check writes; it is hidden from the check's copy and read from
//! the check's own writes; a green check that leaves it missing or unparsable, or whose line
//! coverage fell below the t0 baseline's (beyond `coverage_tolerance`), halts
//! `metric_integrity_violation`. End to end in a detached workspace (native isolation) with a
//! protected check script that writes a hand-made lcov report: the report's contents are the
//! thing under test, so the script makes them exact (one lcov line per line of `app.txt`,
//! covered when the line starts with `hit`). The coverage-delta tier of the adequacy canary
//! (issue 14 item 5) runs on the final green iteration with `adequacy = "final"`. The last two
//! tests run pytest with Debian's pytest-cov (ci/setup.sh installs it): real lcov and Cobertura.
mod common;
use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// Writes `out/cov.lcov` from `app.txt` (not at all when `nocov` exists, garbage when `badcov`
/// exists, only touches it when `touchcov` exists) and passes when `app.txt` has a line `hit done`.
const CHECK_SCRIPT: &str = r#"mkdir -p out
if [ -f badcov ]; then
  printf 'SF:app.txt\nDA:x,y\nend_of_record\n' > out/cov.lcov
elif [ -f touchcov ]; then
  touch out/cov.lcov
elif [ ! -f nocov ]; then
  n=0
  {
    echo "SF:app.txt"
    while read -r l; do
      n=$((n+1))
      case "$l" in hit*) echo "DA:$n,1" ;; *) echo "DA:$n,0" ;; esac
    done < app.txt
    echo end_of_record
  } > out/cov.lcov
fi
grep -q '^hit done$' app.txt
"#;

/// A committed project whose t0 covers 1 of 2 lines (50%) and fails the check.
fn project(loop_toml: Option<&str>) -> tempfile::TempDir {
    let repo = workdir();
    let p = repo.path();
    write(p, "app.txt", "hit a\nmiss b\n");
    write(p, "tests/check.sh", CHECK_SCRIPT);
    write(p, ".gitignore", "out/\n");
    if let Some(text) = loop_toml {
        write(p, "loop.toml", text);
    }
    commit_t0(p);
    repo
}

fn run_loop(dir: &Path, id: &str, exec: &str) -> Ran {
    let args = [
        "run",
        "--json",
        "--run-id",
        id,
        "--exec",
        exec,
        "--check",
        "sh tests/check.sh",
        "--coverage",
        "out/cov.lcov",
        "--max-iterations",
        "1",
    ];
    loopexec(dir, &args)
}

fn of_type(dir: &Path, id: &str, kind: &str) -> Vec<Value> {
    events(dir, id)
        .into_iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

/// The one `guard` event of the run, from the metric-integrity seat after the check.
fn coverage_guard(dir: &Path, id: &str) -> Value {
    let guards = of_type(dir, id, "guard");
    assert_eq!(guards.len(), 1, "{guards:#?}");
    assert_eq!(
        (guards[0]["guard"].as_str(), guards[0]["stage"].as_str()),
        (Some("metric_integrity"), Some("after_check"))
    );
    guards[0].clone()
}

/// Appends `hit done`: 2 of 3 lines covered (66.67%), above t0's 50%.
const HONEST: &str = "echo 'hit done' >> app.txt";
/// Passes the check while leaving 1 of 4 lines covered (25%), below t0's 50%.
const COVERAGE_DROP: &str = "printf 'miss a\\nmiss b\\nmiss c\\nhit done\\n' > app.txt";

#[test]
fn the_baseline_records_the_line_coverage_of_t0() {
    let repo = project(None);
    let r = run_loop(repo.path(), "t0", HONEST);
    assert_eq!(r.code, 10, "{r:?}");
    let baseline = of_type(repo.path(), "t0", "check_baseline").pop().unwrap();
    assert_eq!(
        baseline["check"]["coverage"],
        json!({"report": "out/cov.lcov", "format": "lcov", "covered_lines": 1, "coverable_lines": 2})
    );
    let check = of_type(repo.path(), "t0", "check_result").pop().unwrap();
    assert_eq!(check["coverage"]["covered_lines"], 2);
    assert_eq!(check["coverage"]["coverable_lines"], 3);
}

#[test]
fn a_green_check_whose_coverage_fell_below_t0_halts_metric_integrity_violation() {
    let repo = project(None);
    let r = run_loop(repo.path(), "drop", COVERAGE_DROP);
    assert_eq!(r.code, 13, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "metric_integrity_violation");
    let guard = coverage_guard(repo.path(), "drop");
    assert_eq!(
        guard["detail"],
        "the check exited 0 at iteration 1 but its line coverage (out/cov.lcov) fell below t0's: 1/4 lines (25.00%) against t0's 1/2 (50.00%), tolerance 0 points"
    );
    assert_eq!(
        guard["findings"],
        json!([{"path": "out/cov.lcov", "what": "covered 1/4 lines; t0 covered 1/2"}])
    );
}

#[test]
fn a_fall_within_the_configured_tolerance_is_accepted() {
    let repo = project(Some("coverage_tolerance = 30.0\n"));
    let r = run_loop(repo.path(), "tol", COVERAGE_DROP);
    assert_eq!(r.code, 10, "{r:?}");
    assert!(of_type(repo.path(), "tol", "guard").is_empty());
}

#[test]
fn a_green_check_that_writes_no_coverage_report_halts_metric_integrity_violation() {
    let repo = project(None);
    let r = run_loop(
        repo.path(),
        "missing",
        "touch nocov && echo 'hit done' >> app.txt",
    );
    assert_eq!(r.code, 13, "{r:?}");
    assert_eq!(
        coverage_guard(repo.path(), "missing")["detail"],
        "the check exited 0 at iteration 1 but its declared coverage report out/cov.lcov cannot be used: the check did not write it"
    );
}

#[test]
fn a_report_the_agent_planted_is_hidden_from_the_check() {
    let repo = project(None);
    // The check only touches the report: had the planted one been visible, it would be read.
    let agent = "mkdir -p out && printf 'SF:app.txt\\nDA:1,1\\nDA:2,1\\nend_of_record\\n' > out/cov.lcov && touch touchcov && echo 'hit done' >> app.txt";
    let r = run_loop(repo.path(), "planted", agent);
    assert_eq!(r.code, 13, "{r:?}");
    assert_eq!(
        coverage_guard(repo.path(), "planted")["detail"],
        "the check exited 0 at iteration 1 but its declared coverage report out/cov.lcov cannot be used: the coverage report names no source file"
    );
}

#[test]
fn a_green_check_whose_coverage_report_is_malformed_halts_naming_the_problem() {
    let repo = project(None);
    let r = run_loop(
        repo.path(),
        "bad",
        "touch badcov && echo 'hit done' >> app.txt",
    );
    assert_eq!(r.code, 13, "{r:?}");
    let detail = coverage_guard(repo.path(), "bad")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        detail.starts_with("the check exited 0 at iteration 1 but its declared coverage report out/cov.lcov cannot be used: the lcov report is malformed: "),
        "{detail}"
    );
}

#[test]
fn a_malformed_coverage_path_is_refused_before_anything_is_written() {
    let repo = project(None);
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--exec",
            "true",
            "--check",
            "true",
            "--coverage",
            "../cov.lcov",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    assert_eq!(v["errors"][0]["code"], "usage");
    assert_eq!(
        v["errors"][0]["message"],
        "--coverage ../cov.lcov: the path must be normalised: no empty, `.` or `..` component"
    );
    assert!(
        !repo.path().join(".loopexec/runs").exists(),
        "no run was started"
    );
}

/// The coverage-delta tier (issue 14 item 5): a check whose hand-made lcov report says
/// `calc.py` lines 1 and 2 ran and line 3 never did; it passes when `add(2, 3)` is 5.
const PY_CHECK_SCRIPT: &str = r#"mkdir -p out
printf 'SF:calc.py\nDA:1,1\nDA:2,1\nDA:3,0\nend_of_record\n' > out/cov.lcov
/usr/bin/python3 -B -c 'import calc; assert calc.add(2, 3) == 5'
"#;

fn py_project() -> tempfile::TempDir {
    let repo = workdir();
    let p = repo.path();
    write(p, "calc.py", "def add(a, b):\n    return a - b\n");
    write(p, "tests/check.sh", PY_CHECK_SCRIPT);
    write(p, ".gitignore", "out/\n");
    write(p, "loop.toml", "adequacy = \"final\"\nmutants = 2\n");
    commit_t0(p);
    repo
}

fn adequacy_event(dir: &Path, id: &str) -> Value {
    let found = of_type(dir, id, "adequacy");
    assert_eq!(found.len(), 1, "{found:#?}");
    found[0].clone()
}

#[test]
fn a_changed_line_the_final_check_never_ran_halts_check_inadequate_naming_it() {
    let repo = py_project();
    let r = run_loop(
        repo.path(),
        "uncovered",
        "printf 'def add(a, b):\\n    return a + b\\nUNUSED = 1\\n' > calc.py",
    );
    assert_eq!(r.code, 15, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "check_inadequate");
    let coverage = &adequacy_event(repo.path(), "uncovered")["coverage"];
    assert_eq!(
        *coverage,
        json!({"report": "out/cov.lcov", "changed_lines": 2, "uncovered": [{"path": "calc.py", "line": 3, "file_missing": false}], "uncovered_count": 1})
    );
    let guard = of_type(repo.path(), "uncovered", "guard").pop().unwrap();
    assert_eq!(
        (guard["guard"].as_str(), guard["halt_reason"].as_str()),
        (Some("adequacy"), Some("check_inadequate"))
    );
    assert_eq!(guard["detail"], "1 of the 2 substantive lines the agent changed were never executed by the check (out/cov.lcov)");
    assert_eq!(
        guard["findings"],
        json!([{"path": "calc.py", "what": "line 3: never executed by the check"}])
    );
}

#[test]
fn a_change_whose_every_line_the_final_check_ran_passes_the_coverage_tier() {
    let repo = py_project();
    let r = run_loop(repo.path(), "covered", "sed -i 's/a - b/a + b/' calc.py");
    let coverage = &adequacy_event(repo.path(), "covered")["coverage"];
    assert_eq!(
        *coverage,
        json!({"report": "out/cov.lcov", "changed_lines": 1, "uncovered": [], "uncovered_count": 0})
    );
    assert_eq!(r.code, 10, "{r:?}");
}

/// pytest with Debian's pytest-cov (ci/setup.sh installs it), writing its reports into `out/`.
fn pytest_cov(report: &str) -> String {
    format!("/usr/bin/python3 -m pytest -q -p no:cacheprovider --cov=. --cov-report={report} --junitxml=out/junit.xml")
}

fn require_pytest_cov() {
    require_pytest();
    let ok = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import pytest_cov"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "Debian's python3-pytest-cov is needed (ci/setup.sh installs it)"
    );
}

/// A pytest project whose `add` subtracts; its one test covers every line of t0 (5 of 5
/// statements over `calc.py` and the test file).
fn pytest_project(loop_toml: &str) -> tempfile::TempDir {
    require_pytest_cov();
    let repo = workdir();
    let p = repo.path();
    write(p, "calc.py", "def add(a, b):\n    return a - b\n");
    write(
        p,
        "tests/test_calc.py",
        "import calc\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n",
    );
    write(p, ".gitignore", "out/\n.coverage\n__pycache__/\n");
    write(p, "loop.toml", loop_toml);
    commit_t0(p);
    repo
}

/// Fixes `add` and adds a branch no test reaches (line 3).
const FIX_WITH_DEAD_BRANCH: &str = "printf 'def add(a, b):\\n    if a < -1000:\\n        return 0\\n    return a + b\\n' > calc.py";

fn run_pytest_loop(dir: &Path, id: &str, report_flag: &str, report_path: &str) -> Ran {
    let check = pytest_cov(report_flag);
    let args = [
        "run",
        "--json",
        "--run-id",
        id,
        "--exec",
        FIX_WITH_DEAD_BRANCH,
        "--check",
        &check,
        "--report",
        "out/junit.xml",
        "--coverage",
        report_path,
        "--max-iterations",
        "1",
    ];
    loopexec(dir, &args)
}

#[test]
fn pytest_cov_lcov_coverage_below_t0_halts_metric_integrity_violation() {
    let repo = pytest_project("");
    let r = run_pytest_loop(repo.path(), "lcov", "lcov:out/cov.lcov", "out/cov.lcov");
    assert_eq!(r.code, 13, "{r:?}");
    assert_eq!(
        coverage_guard(repo.path(), "lcov")["detail"],
        "the check exited 0 at iteration 1 but its line coverage (out/cov.lcov) fell below t0's: 6/7 lines (85.71%) against t0's 5/5 (100.00%), tolerance 0 points"
    );
}

#[test]
fn pytest_cov_cobertura_names_the_changed_line_no_test_ran() {
    let repo = pytest_project("adequacy = \"final\"\nmutants = 2\ncoverage_tolerance = 50.0\n");
    let r = run_pytest_loop(repo.path(), "xml", "xml:out/cov.xml", "out/cov.xml");
    assert_eq!(r.code, 15, "{r:?}");
    let check = of_type(repo.path(), "xml", "check_result").pop().unwrap();
    assert_eq!(
        check["coverage"],
        json!({"report": "out/cov.xml", "format": "cobertura", "covered_lines": 6, "coverable_lines": 7})
    );
    assert_eq!(
        adequacy_event(repo.path(), "xml")["coverage"],
        json!({"report": "out/cov.xml", "changed_lines": 3, "uncovered": [{"path": "calc.py", "line": 3, "file_missing": false}], "uncovered_count": 1})
    );
}

// ---- Coverage paths resolve exactly (issue 19 item 9) ----

/// A pytest project with the package `lib/` whose `add` subtracts; its one test covers every
/// line of t0.
fn package_pytest_project() -> tempfile::TempDir {
    require_pytest_cov();
    let repo = workdir();
    let p = repo.path();
    write(p, "lib/__init__.py", "");
    write(p, "lib/calc.py", "def add(a, b):\n    return a - b\n");
    write(
        p,
        "tests/test_calc.py",
        "from lib import calc\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n",
    );
    write(p, ".gitignore", "out/\n.coverage\n__pycache__/\n");
    write(
        p,
        "loop.toml",
        "adequacy = \"final\"\nmutants = 2\ncoverage_tolerance = 50.0\n",
    );
    commit_t0(p);
    repo
}

/// Fixes `lib/calc.py` with a branch no test reaches (line 3), and adds the same-tail copy
/// `a/lib/calc.py`, which runs that branch at import; `lib/__init__.py` imports it.
const FIX_WITH_A_SAME_TAIL_COPY: &str = "printf 'def add(a, b):\\n    if a < -1000:\\n        return 0\\n    return a + b\\n' > lib/calc.py && \
    mkdir -p a/lib && : > a/__init__.py && : > a/lib/__init__.py && \
    printf 'def add(a, b):\\n    if a < -1000:\\n        return 0\\n    return a + b\\nadd(-2000, 0)\\nadd(1, 1)\\n' > a/lib/calc.py && \
    printf 'import a.lib.calc\\n' > lib/__init__.py";

fn run_copy_loop(dir: &Path, id: &str, report_flag: &str, report_path: &str, exec: &str) -> Ran {
    let check = pytest_cov(report_flag);
    let args = [
        "run",
        "--json",
        "--run-id",
        id,
        "--exec",
        exec,
        "--check",
        &check,
        "--report",
        "out/junit.xml",
        "--coverage",
        report_path,
        "--max-iterations",
        "1",
    ];
    loopexec(dir, &args)
}

/// The adequacy event's coverage names `lib/calc.py` line 3 uncovered, and the run halts on it.
fn assert_real_file_uncovered(r: &Ran, dir: &Path, id: &str, report: &str) {
    let coverage = &adequacy_event(dir, id)["coverage"];
    assert_eq!(coverage["report"], report);
    assert_eq!(
        coverage["uncovered"],
        json!([{"path": "lib/calc.py", "line": 3, "file_missing": false}]),
        "{coverage:#}"
    );
    assert_eq!(coverage["uncovered_count"], 1);
    assert_eq!(r.code, 15, "{r:?}");
    let guard = of_type(dir, id, "guard").pop().unwrap();
    assert_eq!(guard["halt_reason"], "check_inadequate");
    assert_eq!(
        guard["findings"],
        json!([{"path": "lib/calc.py", "what": "line 3: never executed by the check"}])
    );
}

#[test]
fn a_same_tail_copy_run_at_import_lends_no_hits_to_the_real_file_in_lcov() {
    let repo = package_pytest_project();
    let r = run_copy_loop(
        repo.path(),
        "copy-lcov",
        "lcov:out/cov.lcov",
        "out/cov.lcov",
        FIX_WITH_A_SAME_TAIL_COPY,
    );
    assert_real_file_uncovered(&r, repo.path(), "copy-lcov", "out/cov.lcov");
}

#[test]
fn a_same_tail_copy_run_at_import_lends_no_hits_to_the_real_file_in_cobertura() {
    let repo = package_pytest_project();
    let r = run_copy_loop(
        repo.path(),
        "copy-xml",
        "xml:out/cov.xml",
        "out/cov.xml",
        FIX_WITH_A_SAME_TAIL_COPY,
    );
    assert_real_file_uncovered(&r, repo.path(), "copy-xml", "out/cov.xml");
}

#[test]
fn an_honest_cobertura_report_of_a_package_resolves_and_converges() {
    let repo = package_pytest_project();
    let r = run_copy_loop(
        repo.path(),
        "honest-xml",
        "xml:out/cov.xml",
        "out/cov.xml",
        "sed -i 's/a - b/a + b/' lib/calc.py",
    );
    let coverage = &adequacy_event(repo.path(), "honest-xml")["coverage"];
    assert_eq!(
        *coverage,
        json!({"report": "out/cov.xml", "changed_lines": 1, "uncovered": [], "uncovered_count": 0})
    );
    assert_eq!(r.code, 10, "{r:?}");
}

/// A hand-made report naming files through `..` (as gcov's do: `/workspace/build/../src/x.c`):
/// the agent's copy `x/calc.py` as `/workspace/a/../x/calc.py`, every line run, sorting before the
/// real `calc.py` as `/workspace/out/../calc.py`, whose line 3 never ran. Each resolves to its own
/// file, through the real directories `a/` and `out/`.
#[test]
fn report_names_with_dot_dot_resolve_each_to_its_own_file() {
    let repo = workdir();
    let p = repo.path();
    write(p, "calc.py", "def add(a, b):\n    return a - b\n");
    write(p, "a/keep.txt", "kept\n");
    write(p, "out/keep.txt", "kept\n");
    write(
        p,
        "tests/check.sh",
        "printf 'SF:/workspace/a/../x/calc.py\\nDA:1,1\\nDA:2,1\\nDA:3,1\\nend_of_record\\nSF:/workspace/out/../calc.py\\nDA:1,1\\nDA:2,1\\nDA:3,0\\nend_of_record\\n' > cov.lcov\n/usr/bin/python3 -B -c 'import calc; assert calc.add(2, 3) == 5'\n",
    );
    write(p, ".gitignore", "cov.lcov\n");
    write(p, "loop.toml", "adequacy = \"final\"\nmutants = 2\n");
    commit_t0(p);
    let agent = "printf 'def add(a, b):\\n    return a + b\\nUNUSED = 1\\n' > calc.py && mkdir x && cp calc.py x/calc.py";
    let args = [
        "run",
        "--json",
        "--run-id",
        "dots",
        "--exec",
        agent,
        "--check",
        "sh tests/check.sh",
        "--coverage",
        "cov.lcov",
        "--max-iterations",
        "1",
    ];
    let r = loopexec(p, &args);
    assert_eq!(
        adequacy_event(p, "dots")["coverage"],
        json!({"report": "cov.lcov", "changed_lines": 5, "uncovered": [{"path": "calc.py", "line": 3, "file_missing": false}], "uncovered_count": 1})
    );
    assert_eq!(r.code, 15, "{r:?}");
}
