//! A guard that cannot see says so (issue 18, item 1): the t0 baseline records which guards of
//! the run are inactive or partly blind, why (from the evidence) and the switch that enables
//! each (`check_baseline`'s `inactive_guards`); `report`, `explain-halt` and `doctor` show them.
//! End to end with the real runners in the zones: plain `go test ./...` names no test (the set
//! guard and the progress rules are inactive; `go test -json` with `--report` is the switch, and
//! with it nothing is blind); a `cargo test` whose unit tests fail at t0 stops before its
//! integration and doc tests (the set guard is partly blind; `--no-fail-fast` is the switch, and
//! with it C0 holds those tests); `--no-baseline` switches the set guard off.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

/// A Go module whose `Add` has an off-by-one bug.
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

/// A crate whose unit test fails at t0, with an integration test and a doctest after it.
fn rust_project() -> tempfile::TempDir {
    let dir = workdir();
    write(
        dir.path(),
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    write(
        dir.path(),
        "src/lib.rs",
        "/// ```\n/// assert_eq!(calc::double(2), 4);\n/// ```\npub fn double(a: i64) -> i64 {\n    a * 2\n}\n\npub fn add(a: i64, b: i64) -> i64 {\n    a + b + 1\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add(2, 3), 5);\n    }\n}\n",
    );
    write(
        dir.path(),
        "tests/it.rs",
        "#[test]\nfn doubles_from_outside() {\n    assert_eq!(calc::double(3), 6);\n}\n",
    );
    commit_t0(dir.path());
    dir
}

/// One iteration of an agent that does nothing; the run's `check_baseline`.
fn baseline_of(repo: &Path, run_id: &str, check: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "run",
        "--json",
        "--run-id",
        run_id,
        "--exec",
        "true",
        "--check",
        check,
        "--max-iterations",
        "1",
    ];
    args.extend_from_slice(extra);
    let r = loopexec(repo, &args);
    assert_eq!(r.code, 12, "the cap is reached on a red check: {r:?}");
    events(repo, run_id)
        .into_iter()
        .find(|e| e["type"] == "check_baseline")
        .expect("a check_baseline")
}

fn kinds(inactive: &Value) -> Vec<(String, String, String)> {
    inactive
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["guard"].as_str().unwrap().into(),
                g["blindness"].as_str().unwrap().into(),
                g["cause"].as_str().unwrap().into(),
            )
        })
        .collect()
}

fn triple(guard: &str, blindness: &str, cause: &str) -> (String, String, String) {
    (guard.into(), blindness.into(), cause.into())
}

#[test]
fn plain_go_test_names_no_test_so_the_set_guard_and_progress_are_inactive_and_go_test_json_is_named(
) {
    let repo = go_project();
    let baseline = baseline_of(repo.path(), "g", "go test ./...", &[]);
    let inactive = &baseline["inactive_guards"];
    assert_eq!(
        kinds(inactive),
        vec![
            triple("test_set", "inactive", "no_test_ids"),
            triple("progress", "inactive", "no_test_ids")
        ],
        "{baseline}"
    );
    let enable = inactive[0]["enable"].as_str().unwrap();
    assert!(
        enable.starts_with(
            "run `go test -json ./... > go-test.json` and declare it: `--report go-test.json`"
        ),
        "{enable}"
    );
    assert_eq!(
        baseline["check"]["output_sight"]["runners"],
        serde_json::json!(["go test"]),
        "the evidence: go's own summary lines"
    );

    let report = loopexec(repo.path(), &["report", "g"]);
    assert!(
        report.stdout.contains("guards 2 inactive or partly blind:"),
        "{}",
        report.stdout
    );
    assert!(report.stdout.contains("  blind test_set inactive: the check on t0 left no declared report and no libtest output naming tests"), "{}", report.stdout);
    assert_eq!(
        loopexec(repo.path(), &["report", "--json", "g"]).json()["report"]["inactive_guards"],
        *inactive
    );
    let explain = loopexec(repo.path(), &["explain-halt", "--json", "g"]).json();
    assert_eq!(explain["explanation"]["inactive_guards"], *inactive);
    let human = loopexec(repo.path(), &["explain-halt", "g"]);
    assert!(
        human
            .stdout
            .contains("enable: run `go test -json ./... > go-test.json`"),
        "{}",
        human.stdout
    );
}

#[test]
fn go_test_json_with_its_report_leaves_no_guard_blind() {
    let repo = go_project();
    let baseline = baseline_of(
        repo.path(),
        "j",
        "go test -json ./... > go-test.json",
        &["--report", "go-test.json"],
    );
    assert_eq!(
        baseline["inactive_guards"],
        serde_json::json!([]),
        "{baseline}"
    );
    let report = loopexec(repo.path(), &["report", "j"]);
    assert!(
        report
            .stdout
            .contains("guards every guard could see (none inactive)"),
        "{}",
        report.stdout
    );
}

#[test]
fn cargo_stopping_at_failing_unit_tests_leaves_the_set_guard_partly_blind_and_no_fail_fast_is_named(
) {
    let repo = rust_project();
    let baseline = baseline_of(repo.path(), "c", "cargo test --offline", &[]);
    let inactive = &baseline["inactive_guards"];
    assert_eq!(
        kinds(inactive),
        vec![triple("test_set", "partial", "cargo_stopped_early")],
        "{baseline}"
    );
    assert!(inactive[0]["detail"].as_str().unwrap().starts_with("cargo stopped at its first failing test target on t0 (`--lib`, its default fail-fast) (it ran: unittests src/lib.rs)"), "{inactive}");
    assert_eq!(
        inactive[0]["enable"],
        "run `cargo test --no-fail-fast` (every target runs whatever an earlier one showed)"
    );
    assert_eq!(
        baseline["check"]["collected_set"],
        serde_json::json!(["calc::tests::adds"]),
        "C0 holds the unit tests only"
    );
}

#[test]
fn cargo_test_no_fail_fast_runs_every_target_on_t0_and_nothing_is_blind() {
    let repo = rust_project();
    let baseline = baseline_of(repo.path(), "n", "cargo test --offline --no-fail-fast", &[]);
    assert_eq!(
        baseline["inactive_guards"],
        serde_json::json!([]),
        "{baseline}"
    );
    let collected: Vec<&str> = baseline["check"]["collected_set"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        collected.contains(&"test/it::doubles_from_outside"),
        "{collected:?}"
    );
    assert!(
        collected.iter().any(|id| id.starts_with("doc/calc::")),
        "{collected:?}"
    );
}

#[test]
fn no_baseline_switches_the_set_guard_off_and_report_says_so_from_the_pinned_config() {
    let repo = go_project();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--run-id",
            "o",
            "--exec",
            "true",
            "--check",
            "false",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 12, "{r:?}");
    let v = loopexec(repo.path(), &["report", "--json", "o"]).json();
    assert_eq!(
        kinds(&v["report"]["inactive_guards"]),
        vec![triple("test_set", "inactive", "no_baseline")],
        "{v}"
    );
    assert_eq!(
        v["report"]["inactive_guards"][0]["enable"],
        "drop `--no-baseline` (`baseline = true` in loop.toml)"
    );
}

#[test]
fn a_t0_test_file_above_the_parse_cap_leaves_the_syntax_tree_guards_partly_blind_and_is_named() {
    let repo = workdir();
    write(
        repo.path(),
        "calc.py",
        "def add(a, b):\n    return a + b + 1\n",
    );
    let padding = "# padding\n".repeat(110_000);
    write(
        repo.path(),
        "tests/test_huge.py",
        &format!("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n{padding}"),
    );
    commit_t0(repo.path());
    let baseline = baseline_of(repo.path(), "p", "false", &[]);
    let inactive = baseline["inactive_guards"].as_array().unwrap();
    let syntax = inactive
        .iter()
        .find(|g| g["guard"] == "syntax_tree")
        .unwrap_or_else(|| panic!("{baseline}"));
    assert_eq!(
        (syntax["blindness"].as_str(), syntax["cause"].as_str()),
        (Some("partial"), Some("not_parsed"))
    );
    assert!(
        syntax["detail"]
            .as_str()
            .unwrap()
            .ends_with("no tampering rule reads them: tests/test_huge.py"),
        "{syntax}"
    );
}

#[test]
fn doctor_names_the_guards_a_loop_on_plain_go_test_would_have_blind() {
    let repo = go_project();
    let ran = loopexec(
        repo.path(),
        &[
            "--json",
            "doctor",
            "--check",
            "go test ./...",
            "--runs",
            "2",
        ],
    );
    let v = ran.json();
    let inactive = &v["inactive_guards"];
    assert_eq!(
        kinds(inactive),
        vec![
            triple("test_set", "inactive", "no_test_ids"),
            triple("progress", "inactive", "no_test_ids")
        ],
        "{v}"
    );
    assert!(
        inactive[0]["enable"]
            .as_str()
            .unwrap()
            .contains("go test -json ./..."),
        "{inactive}"
    );
    let human = loopexec(
        repo.path(),
        &[
            "doctor",
            "--isolation",
            "none",
            "--check",
            "go test ./...",
            "--runs",
            "2",
        ],
    );
    assert!(
        human
            .stdout
            .contains("blind            test_set inactive: "),
        "{}",
        human.stdout
    );
}
