//! `loopexec probe-check`: the check run many times on copies of the same tree; a check that
//! changes its verdict under a perturbation is `check_flaky` (exit 14) naming the dimension and
//! runs; a stable one is certified with the exact bound; bad flags are exit 20 with one JSON
//! object. The checks run on the host (`--isolation none`) to keep the suite quick; the same runs
//! go through the exec zone by default (docs/oracle-trust.md).

mod common;

use common::{loopexec, workdir};
use serde_json::Value;
use std::path::Path;

fn probe(dir: &Path, check: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec![
        "--json",
        "probe-check",
        "--isolation",
        "none",
        "--check",
        check,
    ];
    args.extend_from_slice(extra);
    let ran = loopexec(dir, &args);
    (ran.code, ran.json())
}

/// The dimensions named as having broken the agreement.
fn broken_by(v: &Value) -> Vec<String> {
    v["probe"]["summary"]["broken_by"]
        .as_array()
        .unwrap_or(&vec![])
        .iter()
        .map(|b| b["dimension"].as_str().unwrap_or("none").to_string())
        .collect()
}

fn assert_flaky_by(v: &Value, code: i32, dimension: &str) {
    assert_eq!(code, 14, "{v}");
    assert_eq!(v["halt_reason"], "check_flaky", "{v}");
    assert_eq!(v["verdict"], "varies", "{v}");
    assert_eq!(broken_by(v), vec![dimension.to_string()], "{v}");
    let runs = v["probe"]["summary"]["broken_by"][0]["runs"]
        .as_array()
        .unwrap();
    for run in runs {
        let i = run.as_u64().unwrap() as usize;
        assert_eq!(
            v["probe"]["runs"][i]["dimension"], dimension,
            "run {i} is one of the dimension's runs: {v}"
        );
    }
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("broken by {dimension}")),
        "{v}"
    );
}

#[test]
fn a_check_that_fails_on_one_test_order_is_flaky_by_order() {
    let dir = workdir();
    // Fails whenever the order seed it is handed is odd.
    let (code, v) = probe(
        dir.path(),
        r#"test $(( ${LOOPEXEC_SEED:-0} % 2 )) -eq 0"#,
        &["--runs", "9", "--perturb", "order,seed", "--seed", "3"],
    );
    assert_flaky_by(&v, code, "order");
}

#[test]
fn a_check_that_depends_on_the_hash_seed_is_flaky_by_seed() {
    let dir = workdir();
    let (code, v) = probe(
        dir.path(),
        r#"test "${PYTHONHASHSEED:-0}" = 0"#,
        &["--runs", "5", "--perturb", "seed,order"],
    );
    assert_flaky_by(&v, code, "seed");
}

#[test]
fn a_check_that_reads_the_clock_is_flaky_by_clock() {
    let dir = workdir();
    // Passes only where local time is UTC: every zone the clock dimension picks is offset by hours.
    let (code, v) = probe(
        dir.path(),
        r#"test "$(date +%H%M)" = "$(date -u +%H%M)""#,
        &["--runs", "5", "--perturb", "clock,seed"],
    );
    assert_flaky_by(&v, code, "clock");
}

#[test]
fn a_check_that_fails_with_one_cpu_is_flaky_by_concurrency() {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    assert!(
        cores > 1,
        "this test needs a host with at least two CPUs, it has {cores}"
    );
    let dir = workdir();
    let (code, v) = probe(
        dir.path(),
        r#"test "$(nproc)" -gt 1"#,
        &["--runs", "5", "--perturb", "concurrency,seed"],
    );
    assert_flaky_by(&v, code, "concurrency");
}

#[test]
fn a_check_that_depends_on_its_environment_is_flaky_by_env() {
    let dir = workdir();
    // Needs an existing $HOME: the env dimension moves HOME (and locale, and the working directory).
    let (code, v) = probe(
        dir.path(),
        r#"test -d "$HOME""#,
        &["--runs", "5", "--perturb", "env,seed"],
    );
    assert_flaky_by(&v, code, "env");
}

#[test]
fn a_check_whose_failing_set_changes_is_flaky_though_its_exit_code_does_not() {
    let dir = workdir();
    // Always exits 1 and writes a JUnit report; the failing test's name depends on the hash seed.
    let check = r#"n=${PYTHONHASHSEED:-0}; printf '<testsuite tests="1" failures="1"><testcase classname="t" name="case%s"><failure/></testcase></testsuite>' "$n" > junit.xml; exit 1"#;
    let (code, v) = probe(
        dir.path(),
        check,
        &["--runs", "3", "--perturb", "seed", "--report", "junit.xml"],
    );
    assert_flaky_by(&v, code, "seed");
    let runs = v["probe"]["runs"].as_array().unwrap();
    assert!(runs.iter().all(|r| r["exit_code"] == 1), "{v}");
}

#[test]
fn a_stable_check_is_certified_with_the_exact_bound_of_fifty_nine_runs() {
    let dir = workdir();
    let (code, v) = probe(dir.path(), "true", &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["verdict"], "certified", "{v}");
    let summary = &v["probe"]["summary"];
    assert_eq!(summary["runs"], 59);
    assert_eq!(summary["disagreeing"], 0);
    assert_eq!(v["probe"]["runs_required"], 59);
    let bound = summary["flake_rate_bound"].as_f64().unwrap();
    assert!((bound - 0.049507609888227).abs() < 1e-12, "{bound}");
}

#[test]
fn too_few_runs_are_not_certified_and_the_bound_reached_is_printed() {
    let dir = workdir();
    let ran = loopexec(
        dir.path(),
        &[
            "probe-check",
            "--isolation",
            "none",
            "--check",
            "true",
            "--runs",
            "10",
        ],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    // 1 - 0.05^(1/10) = 0.258866
    assert!(
        ran.stdout.contains("verdict           not_certified"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout
            .contains("flake rate bound  0.258866 at confidence 0.95 (target 0.05)"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout
            .contains("10 (0 disagreeing; 59 needed for the target)"),
        "{}",
        ran.stdout
    );
}

#[test]
fn every_run_works_on_its_own_copy_and_the_operators_tree_is_untouched() {
    let dir = workdir();
    std::fs::write(dir.path().join("input"), "x").unwrap();
    // Each run appends to its copy: a shared tree would make later runs fail.
    let (code, v) = probe(
        dir.path(),
        r#"test "$(cat input)" = x && echo y >> input"#,
        &["--runs", "4", "--jobs", "2"],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["probe"]["summary"]["disagreeing"], 0, "{v}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("input")).unwrap(),
        "x"
    );
}

#[test]
fn the_check_and_target_come_from_loop_toml_when_no_flag_gives_them() {
    let dir = workdir();
    std::fs::write(dir.path().join("loop.toml"), "check = \"true\"\nexec = \"true\"\nisolation = \"none\"\nmax_flake_rate = 0.3\nconfidence = 0.9\n").unwrap();
    let ran = loopexec(dir.path(), &["--json", "probe-check"]);
    let v = ran.json();
    assert_eq!(ran.code, 0, "{v}");
    // ceil(ln 0.1 / ln 0.7) = 7 runs certify 30% at 90%.
    assert_eq!(v["probe"]["runs_required"], 7, "{v}");
    assert_eq!(v["verdict"], "certified", "{v}");
    assert_eq!(v["check"], "true");
}

fn assert_usage(dir: &Path, args: &[&str], names: &str) {
    let mut all = vec![
        "--json",
        "probe-check",
        "--isolation",
        "none",
        "--check",
        "true",
    ];
    all.extend_from_slice(args);
    let ran = loopexec(dir, &all);
    let v = ran.json();
    assert_eq!(ran.code, 20, "{v}");
    assert_eq!(v["status"], "error");
    assert_eq!(v["errors"].as_array().unwrap().len(), 1, "{v}");
    assert!(
        v["errors"][0]["message"].as_str().unwrap().contains(names),
        "{v}"
    );
}

#[test]
fn a_flake_rate_of_zero_is_refused() {
    assert_usage(
        workdir().path(),
        &["--max-flake-rate", "0"],
        "--max-flake-rate: flake rate 0 is outside (0, 1)",
    );
}

#[test]
fn a_flake_rate_of_one_or_more_is_refused() {
    let dir = workdir();
    assert_usage(
        dir.path(),
        &["--max-flake-rate", "1"],
        "--max-flake-rate: flake rate 1 is outside (0, 1)",
    );
    assert_usage(
        dir.path(),
        &["--max-flake-rate", "1.5"],
        "--max-flake-rate: flake rate 1.5 is outside (0, 1)",
    );
}

#[test]
fn a_confidence_outside_the_open_unit_interval_is_refused() {
    let dir = workdir();
    assert_usage(
        dir.path(),
        &["--confidence", "0"],
        "--confidence: confidence 0 is outside (0, 1)",
    );
    assert_usage(
        dir.path(),
        &["--confidence", "1"],
        "--confidence: confidence 1 is outside (0, 1)",
    );
    assert_usage(
        dir.path(),
        &["--confidence", "-0.5"],
        "--confidence: confidence -0.5 is outside (0, 1)",
    );
}

#[test]
fn an_unknown_dimension_is_refused_by_name() {
    assert_usage(
        workdir().path(),
        &["--perturb", "order,moon"],
        "unknown perturbation dimension \"moon\"",
    );
}

#[test]
fn its_progress_off_a_terminal_is_a_plain_line_per_tenth_of_the_runs_and_none_under_json() {
    let dir = workdir();
    let args = [
        "probe-check",
        "--isolation",
        "none",
        "--check",
        "true",
        "--runs",
        "20",
        "--jobs",
        "1",
    ];
    let ran = loopexec(dir.path(), &args);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let lines: Vec<&str> = ran
        .stderr
        .lines()
        .filter(|l| l.contains("probe-check"))
        .collect();
    let expected: Vec<String> = (1..=10)
        .map(|k| format!("loopexec: probe-check {} of 20 runs finished", 2 * k))
        .collect();
    assert_eq!(lines, expected, "{}", ran.stderr);
    assert!(
        !ran.stderr.contains('\u{1b}') && !ran.stderr.contains('\r'),
        "{:?}",
        ran.stderr
    );
    let quiet = loopexec(dir.path(), &[&["--json"][..], &args[..]].concat());
    assert_eq!(
        (quiet.code, quiet.stderr.as_str()),
        (0, ""),
        "{}",
        quiet.stderr
    );
}

#[test]
fn on_a_terminal_its_progress_is_a_bar_of_finished_runs() {
    let dir = workdir();
    let line = shlex::try_join([
        common::bin().as_str(),
        "probe-check",
        "--isolation",
        "none",
        "--check",
        "sleep 0.2",
        "--runs",
        "12",
        "--jobs",
        "1",
    ])
    .unwrap();
    // util-linux's `script` (Debian's essential bsdutils) gives loopexec a pseudo-terminal.
    let out = std::process::Command::new("script")
        .current_dir(dir.path())
        .args(["-qec", &line, "/dev/null"])
        .env("LOOPEXEC_CONFIG_DIR", common::key_dir())
        .env("TERM", "xterm")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let raw = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{raw}");
    let text = regex::Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]")
        .unwrap()
        .replace_all(&raw, "")
        .replace('\r', "\n");
    assert!(
        text.lines()
            .any(|l| l.starts_with("probe-check [") && l.contains("/12 runs")),
        "{text}"
    );
    assert!(
        !text.contains("runs finished"),
        "a terminal gets the bar, not the plain lines: {text}"
    );
}
