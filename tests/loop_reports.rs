//! The verdict is the exit code AND the evidence the one check run left: declared reports read
//! from the check's own writes (fresh: whatever the agent left at a report path is hidden from
//! the check), and their agreement with the exit code. End to end on a small pytest project in a
//! detached workspace (native isolation), with Debian's pytest (ci/setup.sh installs it).
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const PYTEST: &str = "/usr/bin/python3 -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml";

/// A committed pytest project with a `src/` layout whose `add` is wrong (t0 fails).
fn calc_project() -> tempfile::TempDir {
    require_pytest();
    let repo = workdir();
    let p = repo.path();
    std::fs::create_dir_all(p.join("src/calc")).unwrap();
    std::fs::create_dir_all(p.join("tests")).unwrap();
    std::fs::write(
        p.join("src/calc/__init__.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    std::fs::write(
        p.join("tests/test_calc.py"),
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n",
    )
    .unwrap();
    std::fs::write(
        p.join("pyproject.toml"),
        "[tool.pytest.ini_options]\npythonpath = [\"src\"]\n",
    )
    .unwrap();
    std::fs::write(p.join(".gitignore"), "out/\n__pycache__/\n").unwrap();
    commit_t0(p);
    repo
}

const HONEST_FIX: &str = "printf 'def add(a, b):\\n    return a + b\\n' > src/calc/__init__.py";

fn run_loop(dir: &Path, id: &str, exec: &str, check: &str, extra: &[&str]) -> Ran {
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
    loopexec(dir, &args)
}

fn last_check(dir: &Path, id: &str) -> Value {
    events(dir, id)
        .into_iter()
        .rev()
        .find(|e| e["type"] == "check_result")
        .unwrap()
}

fn halt(dir: &Path, id: &str) -> Value {
    events(dir, id)
        .into_iter()
        .rev()
        .find(|e| e["type"] == "halt")
        .unwrap()
}

#[test]
fn an_honest_fix_with_an_agreeing_junit_report_converges() {
    let repo = calc_project();
    let r = run_loop(
        repo.path(),
        "r",
        HONEST_FIX,
        PYTEST,
        &["--report", "out/junit.xml"],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let check = last_check(repo.path(), "r");
    assert_eq!(
        check["collected_set"],
        serde_json::json!(["tests.test_calc::test_add", "tests.test_calc::test_zero"])
    );
    assert_eq!(check["failing_set"], serde_json::json!([]));
    assert_eq!(check["skipped_set"], serde_json::json!([]));
    assert_eq!(check["evidence"]["verdict"], "green");
    assert_eq!(check["evidence"]["reports"][0]["path"], "out/junit.xml");
    assert_eq!(
        check["evidence"]["reports"][0]["counts"],
        serde_json::json!([2, 2, 0, 0])
    );
}

#[test]
fn a_failing_report_behind_a_zero_exit_halts_metric_integrity_violation() {
    let repo = calc_project();
    let check = format!("{PYTEST} || true");
    let r = run_loop(
        repo.path(),
        "r",
        "true",
        &check,
        &["--report", "out/junit.xml"],
    );
    assert_eq!(r.code, 13, "{r:?}");
    let h = halt(repo.path(), "r");
    assert_eq!(h["halt_reason"], "metric_integrity_violation");
    let detail = h["detail"].as_str().unwrap();
    assert!(
        detail.contains("report out/junit.xml: 1 failing test(s), e.g. tests.test_calc::test_add"),
        "{detail}"
    );
    let evidence = &last_check(repo.path(), "r")["evidence"];
    assert_eq!(evidence["verdict"], "disagree");
    let kinds: Vec<&str> = evidence["disagreements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["report_shows_failures", "summary_shows_failures"]);
}

/// The calc project with a third test that prints 2 MB (run with `-s`): the check's captured
/// output is truncated (64 KiB head and tail per stream).
fn chatty_calc_project() -> tempfile::TempDir {
    let repo = calc_project();
    std::fs::write(repo.path().join("tests/test_chatty.py"), "def test_chatty():\n    for i in range(40000):\n        print('progress line %06d of a chatty suite' % i)\n").unwrap();
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", "t0: a chatty test"]);
    repo
}

#[test]
fn a_chatty_suite_with_a_declared_report_converges_though_its_output_was_truncated() {
    let repo = chatty_calc_project();
    let check = format!("{PYTEST} -s");
    let r = run_loop(
        repo.path(),
        "chatty",
        HONEST_FIX,
        &check,
        &["--report", "out/junit.xml"],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{r:?}"
    );
    let check = last_check(repo.path(), "chatty");
    assert_eq!(check["stdout"]["truncated"], true, "{check}");
    assert_eq!(check["collected_count"], 3);
}

#[test]
fn a_chatty_suite_without_a_report_is_never_green_on_truncated_output() {
    let repo = chatty_calc_project();
    let check = format!("{PYTEST} -s");
    let r = run_loop(repo.path(), "chatty", HONEST_FIX, &check, &[]);
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (13, Some("metric_integrity_violation")),
        "{r:?}"
    );
    assert!(
        halt(repo.path(), "chatty")["detail"]
            .as_str()
            .unwrap()
            .contains("truncated"),
        "{r:?}"
    );
}

#[test]
fn explain_halt_and_report_show_the_disagreement_escaped() {
    let repo = calc_project();
    // A test id with a control character, as an agent could name one: shown escaped.
    let report = "mkdir -p out; printf '<testsuite><testcase classname=\"t\" name=\"bad\\033[2J\"><failure/></testcase></testsuite>' > out/r.xml";
    let r = run_loop(repo.path(), "r", "true", report, &["--report", "out/r.xml"]);
    assert_eq!(r.code, 13, "{r:?}");
    let explain = loopexec(repo.path(), &["explain-halt", "--json"]).json();
    let evidence = &explain["evidence"];
    assert_eq!(
        evidence["disagreements"][0]["kind"],
        "report_shows_failures"
    );
    assert_eq!(
        evidence["disagreements"][0]["detail"],
        "report out/r.xml: 1 failing test(s), e.g. t::bad\\u{1b}[2J"
    );
    let human = loopexec(repo.path(), &["report", "r"]);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(
        human
            .stdout
            .contains("evidence report_shows_failures: report out/r.xml: 1 failing test(s)"),
        "{}",
        human.stdout
    );
    assert!(
        !human.stdout.contains('\u{1b}'),
        "no raw escape reaches the terminal: {}",
        human.stdout
    );
}

#[test]
fn a_fake_report_left_in_the_workspace_is_not_read() {
    let repo = calc_project();
    // The agent leaves a green report at the declared path; the check writes none itself. Were
    // the agent's file visible to the check, the run would converge on it.
    let fake = "mkdir -p out && printf '<testsuite name=\"pytest\" tests=\"1\"><testcase classname=\"t\" name=\"ok\"/></testsuite>' > out/junit.xml";
    let r = run_loop(
        repo.path(),
        "r",
        fake,
        "true",
        &["--report", "out/junit.xml"],
    );
    assert_eq!(r.code, 13, "{r:?}");
    let h = halt(repo.path(), "r");
    assert_eq!(h["halt_reason"], "metric_integrity_violation");
    assert!(
        h["detail"]
            .as_str()
            .unwrap()
            .contains("report out/junit.xml: missing (the check did not write it)"),
        "{h}"
    );
    assert_eq!(last_check(repo.path(), "r")["collected_set"], Value::Null);
}

#[test]
fn a_zero_exit_without_the_declared_report_is_not_success() {
    let repo = calc_project();
    let r = run_loop(
        repo.path(),
        "r",
        HONEST_FIX,
        "true",
        &["--report", "out/*.xml"],
    );
    assert_eq!(r.code, 13, "{r:?}");
    assert_eq!(
        halt(repo.path(), "r")["halt_reason"],
        "metric_integrity_violation"
    );
    assert!(
        !git(repo.path(), &["branch", "--list", "loopexec/r"]).contains("loopexec/r"),
        "a disagreeing step is not delivered"
    );
}

#[test]
fn junit_is_an_alias_of_report_and_loop_toml_declares_reports() {
    let repo = calc_project();
    let r = run_loop(
        repo.path(),
        "a",
        HONEST_FIX,
        PYTEST,
        &["--junit", "out/junit.xml"],
    );
    assert_eq!(r.code, 10, "{r:?}");
    std::fs::write(repo.path().join("loop.toml"), "report = [\"out/*.xml\"]\n").unwrap();
    let r = run_loop(repo.path(), "b", HONEST_FIX, "true", &[]);
    assert_eq!(
        r.code, 13,
        "a declared report the check does not write: {r:?}"
    );
    assert_eq!(
        halt(repo.path(), "b")["halt_reason"],
        "metric_integrity_violation"
    );
}

#[test]
fn a_malformed_report_pattern_is_bad_input_and_writes_nothing() {
    let repo = calc_project();
    let r = run_loop(repo.path(), "r", "true", "true", &["--report", "out/[.xml"]);
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    assert_eq!(v["errors"][0]["code"], "invalid_input");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("--report out/[.xml: not a valid glob"),
        "{v}"
    );
    assert!(!repo.path().join(".loopexec/runs/r").exists());
}

/// A committed project whose tests are a real libtest binary (built here with `rustc --test`;
/// the exec zone has no Rust toolchain): `answer` must hold 42, and a planted `exit-early` file
/// makes a test end the binary with status 0 before libtest prints its `test result:` line.
/// Without rustc on PATH (the unprivileged re-run, whose user cannot reach root's toolchain) the
/// test says NOT RUN; under `CI=true` (the root run) a missing rustc is a failure.
fn libtest_project() -> Option<tempfile::TempDir> {
    let repo = workdir();
    let p = repo.path();
    let src = p.join("tests.rs");
    std::fs::write(
        &src,
        "#[test]\nfn answer_is_42() {\n    assert_eq!(std::fs::read_to_string(\"answer\").unwrap().trim(), \"42\");\n}\n\n\
         #[test]\nfn runs_to_the_end() {\n    if std::path::Path::new(\"exit-early\").exists() {\n        std::process::exit(0);\n    }\n}\n",
    )
    .unwrap();
    let rustc = match std::process::Command::new("rustc")
        .args(["--edition", "2021", "--test", "-o"])
        .arg(p.join("run-tests"))
        .arg(&src)
        .output()
    {
        Ok(out) => out,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && std::env::var("CI").as_deref() != Ok("true") =>
        {
            eprintln!("NOT RUN: rustc not found on PATH (CI=true makes this a failure)");
            return None;
        }
        Err(e) => panic!("rustc is needed to build the libtest binary: {e}"),
    };
    assert!(
        rustc.status.success(),
        "{}",
        String::from_utf8_lossy(&rustc.stderr)
    );
    std::fs::write(p.join("answer"), "41\n").unwrap();
    commit_t0(p);
    Some(repo)
}

/// One test at a time, so that the early exit always comes before the binary's summary.
const LIBTEST_CHECK: &str = "./run-tests --test-threads=1";

#[test]
fn an_honest_fix_converges_on_libtest_output_without_a_report_file() {
    let Some(repo) = libtest_project() else {
        return;
    };
    let r = run_loop(repo.path(), "r", "echo 42 > answer", LIBTEST_CHECK, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    let check = last_check(repo.path(), "r");
    assert_eq!(
        check["collected_set"],
        serde_json::json!(["#1::answer_is_42", "#1::runs_to_the_end"])
    );
    assert_eq!(check["evidence"]["verdict"], "green");
    assert_eq!(
        check["evidence"]["sources"],
        serde_json::json!(["libtest output in stdout"])
    );
}

#[test]
fn a_test_binary_that_exits_zero_before_its_summary_halts_metric_integrity_violation() {
    let Some(repo) = libtest_project() else {
        return;
    };
    let r = run_loop(
        repo.path(),
        "r",
        "echo 42 > answer && touch exit-early",
        LIBTEST_CHECK,
        &[],
    );
    assert_eq!(r.code, 13, "{r:?}");
    let evidence = &last_check(repo.path(), "r")["evidence"];
    assert_eq!(
        evidence["disagreements"][0]["kind"], "report_incomplete",
        "{evidence}"
    );
    assert_eq!(
        halt(repo.path(), "r")["halt_reason"],
        "metric_integrity_violation"
    );
}
