//! Met targets stand only on whole evidence (issue 19 item 2; docs/progress.md, "Targets"): a red
//! check whose sets show every target passing is success only when its evidence has no gap (no
//! unit cut off before its result line, no truncated output, no unusable declared report, no
//! report or summary contradicting itself), the gate a green passes. Each forger below is the
//! agent's production code on a real runner: it prints or writes a passing line for the target
//! and leaves the evidence incomplete, so the red check's sets alone would meet the targets. Each
//! halts `metric_integrity_violation` (exit 13) from the `progress` event and delivers nothing;
//! the honest fix of the same project converges on met targets. The sentinel run is off (with its
//! reason in loop.toml) so that the gate is what is under test: without the gate, each forger's
//! red check converged as "every target passes".
mod common;
use common::*;
use serde_json::{json, Value};
use std::path::Path;

fn of_type<'a>(ev: &'a [Value], kind: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["type"] == kind).collect()
}

/// The run halted `metric_integrity_violation` at iteration 1 on its `progress` event (the
/// gate), with nothing delivered and the detail naming `gap`.
fn assert_refused_on_gaps(r: &Ran, ev: &[Value], gap: &str) {
    let v = r.json();
    assert_eq!(
        (r.code, v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (13, Some("metric_integrity_violation"), Some(1)),
        "{v}\n{ev:#?}"
    );
    let progress = of_type(ev, "progress");
    assert_eq!(progress.len(), 1, "{progress:#?}");
    let p = progress[0];
    // `targets_met` is written only when true.
    assert_eq!(
        (p.get("targets_met"), p["halt_reason"].as_str()),
        (None, Some("metric_integrity_violation")),
        "{p}"
    );
    assert_eq!(
        p["evidence"]["rule"], "targets_met_on_incomplete_evidence",
        "{p}"
    );
    let detail = v["run"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("its sets show every target passing, but its evidence is not whole: "),
        "{detail}"
    );
    assert!(detail.contains(gap), "{gap:?} not in {detail}");
    let halt = of_type(ev, "halt")[0];
    assert_eq!(
        halt["delivery"]["reason"], "no accepted change to deliver",
        "{halt}"
    );
    assert!(
        of_type(ev, "guard_sentinel").is_empty(),
        "no success was left to judge: {ev:#?}"
    );
}

/// The sentinel run off: the evidence gate is under test, not the sentinel.
const SENTINEL_OFF: &str =
    "[sentinel]\nenabled = false\nreason = \"the evidence gate of met targets is under test\"\n";

// ---- Rust, cargo test with libtest's output ----

/// One test binary run on one thread, in name order: the pre-existing failure, a test passing at
/// t0, then the target.
const CARGO_TEST: &str = "cargo test --offline --lib -- --test-threads=1";
const TARGET: &str = "calc::tests::z_adds";

/// `add` is off by one (the target `z_adds` fails), `legacy` is an unrelated pre-existing failure
/// (`b_legacy`), `c_keeps` passes.
fn rust_project() -> Option<tempfile::TempDir> {
    if !debian_cargo_present() {
        return None;
    }
    let dir = workdir();
    write(
        dir.path(),
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    write(
        dir.path(),
        "src/lib.rs",
        "pub fn add(a: i64, b: i64) -> i64 {\n    a + b + 1\n}\n\npub fn legacy() -> &'static str {\n    \"old\"\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn b_legacy() {\n        assert_eq!(legacy(), \"new\");\n    }\n\n    #[test]\n    fn c_keeps() {\n        assert_eq!(legacy().len(), 3);\n    }\n\n    #[test]\n    fn z_adds() {\n        assert_eq!(add(2, 3), 5);\n    }\n}\n",
    );
    write(dir.path(), ".gitignore", "target/\n");
    write(dir.path(), "loop.toml", SENTINEL_OFF);
    commit_t0(dir.path());
    Some(dir)
}

/// The agent rewrites `add`'s body to `body` (a Rust block of one line).
fn rewrite_add(body: &str) -> String {
    let sed = body
        .replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace('&', "\\&");
    format!(
        "sed -i 's|^    a + b + 1$|    {}|' src/lib.rs",
        sed.replace('\'', "'\\''")
    )
}

fn cargo_run(repo: &Path, agent: &str) -> (Ran, Vec<Value>) {
    let r = loopexec(
        repo,
        &[
            "run",
            "--json",
            "--run-id",
            "r",
            "--exec",
            agent,
            "--check",
            CARGO_TEST,
            "--target",
            "*::z_adds",
            "--max-iterations",
            "2",
        ],
    );
    let ev = events(repo, "r");
    (r, ev)
}

#[test]
fn a_test_binary_that_aborts_after_a_forged_passing_line_for_the_target_is_not_met_targets() {
    let Some(repo) = rust_project() else { return };
    // libtest printed `test tests::z_adds ... `; the production code completes the line and
    // aborts the binary before libtest prints its `test result:` line.
    let agent = rewrite_add(
        r#"{ use std::io::Write; let mut o = std::io::stdout(); let _ = o.write_all(b"ok\n"); let _ = o.flush(); std::process::abort() }"#,
    );
    let (r, ev) = cargo_run(repo.path(), &agent);
    assert_refused_on_gaps(&r, &ev, "ended abnormally");
    let check = of_type(&ev, "check_result")[0];
    assert_eq!(
        check["failing_set"],
        json!(["calc::tests::b_legacy"]),
        "the sets alone meet the targets: {check}"
    );
    assert_eq!(check["evidence"]["verdict"], "red", "{check}");
    assert_eq!(
        check["evidence"]["disagreements"][0]["kind"], "report_incomplete",
        "{check}"
    );
}

#[test]
fn a_forged_result_line_followed_by_output_past_the_capture_bound_is_not_met_targets() {
    let Some(repo) = rust_project() else { return };
    // The forger completes the target's line and the binary's `test result:` line itself (the
    // block adds up), then floods stdout past the capture's head and tail and exits red.
    let agent = rewrite_add(
        r#"{ use std::io::Write; let mut o = std::io::stdout(); let _ = o.write_all(b"ok\n\ntest result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\n"); for _ in 0..4096 { let _ = o.write_all(&[b'.'; 100]); let _ = o.write_all(b"\n"); } let _ = o.flush(); std::process::exit(101) }"#,
    );
    let (r, ev) = cargo_run(repo.path(), &agent);
    assert_refused_on_gaps(&r, &ev, "the captured output was truncated");
    let check = of_type(&ev, "check_result")[0];
    assert_eq!(
        check["evidence"]["disagreements"][0]["kind"], "output_truncated",
        "{check}"
    );
}

#[test]
fn the_honest_rust_fix_still_converges_on_met_targets() {
    let Some(repo) = rust_project() else { return };
    let (r, ev) = cargo_run(repo.path(), &rewrite_add("a + b"));
    let v = r.json();
    assert_eq!(
        (r.code, v["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{v}\n{ev:#?}"
    );
    let progress = of_type(&ev, "progress");
    assert_eq!(
        (
            progress[0]["targets_met"].as_bool(),
            progress[0]["halt_reason"].as_str()
        ),
        (Some(true), None),
        "{progress:#?}"
    );
    let check = of_type(&ev, "check_result")[0];
    assert_eq!(
        (
            check["evidence"]["verdict"].as_str(),
            check["evidence"]["disagreements"].as_array().map(Vec::len)
        ),
        (Some("red"), Some(0)),
        "{check}"
    );
    assert!(
        of_type(&ev, "targets")[0]["targets"] == json!([TARGET]),
        "{ev:#?}"
    );
}

// ---- Python, pytest with its JUnit report ----

const PYTEST: &str =
    "/usr/bin/python3 -B -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml";

/// t0: `test_add` fails (the target), `test_sub` passes, `test_legacy_format` is an unrelated
/// pre-existing failure.
fn python_project() -> tempfile::TempDir {
    common::targets::project(Some(SENTINEL_OFF))
}

/// The agent appends `code` to the production module (through base64: any text survives).
fn append_to_calc(code: &str) -> String {
    use base64::Engine as _;
    format!(
        "echo {} | base64 -d >> calc/__init__.py",
        base64::engine::general_purpose::STANDARD.encode(code)
    )
}

fn pytest_run(repo: &Path, agent: &str) -> (Ran, Vec<Value>) {
    let args = [
        "run",
        "--json",
        "--run-id",
        "r",
        "--exec",
        agent,
        "--check",
        PYTEST,
        "--report",
        "out/junit.xml",
        "--target",
        "tests.test_calc::*",
        "--max-iterations",
        "2",
    ];
    let r = loopexec(repo, &args);
    let ev = events(repo, "r");
    (r, ev)
}

#[test]
fn a_report_rewritten_at_exit_to_pass_the_target_that_contradicts_itself_is_not_met_targets() {
    let repo = python_project();
    // At interpreter exit (after pytest wrote its report and printed `2 failed, 1 passed`), the
    // production module rewrites the report: the target passes, the header keeps the real counts.
    let forger = r#"

import atexit as _atexit


def _forge():
    with open("out/junit.xml", "w") as f:
        f.write('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="2" skipped="0" tests="3">'
                '<testcase classname="tests.test_calc" name="test_add"/><testcase classname="tests.test_calc" name="test_sub"/>'
                '<testcase classname="tests.test_legacy" name="test_legacy_format"><failure message="x"/></testcase></testsuite></testsuites>')


_atexit.register(_forge)
"#;
    let (r, ev) = pytest_run(repo.path(), &append_to_calc(forger));
    assert_refused_on_gaps(
        &r,
        &ev,
        "declares 3 tests (2 failed, 0 skipped) but holds 3 (1 failed, 0 skipped)",
    );
    let check = of_type(&ev, "check_result")[0];
    let kinds: Vec<&str> = check["evidence"]["disagreements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["report_contradicts_itself", "summary_contradicts_reports"],
        "{check}"
    );
}

#[test]
fn the_honest_python_fix_still_converges_on_met_targets() {
    let repo = python_project();
    let (r, ev) = pytest_run(
        repo.path(),
        "sed -i 's/return a - b  # add/return a + b  # add/' calc/__init__.py",
    );
    let v = r.json();
    assert_eq!(
        (r.code, v["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{v}\n{ev:#?}"
    );
    assert_eq!(of_type(&ev, "progress")[0]["targets_met"], true);
}
