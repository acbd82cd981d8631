//! `loopexec doctor --check CMD`: the oracle's gates before a loop, each with its verdict and
//! evidence: determinism (`check_flaky`), hermeticity (`check_not_hermetic`), side effects
//! (`check_has_side_effects`, told apart from flaky), after the isolation preflight.

mod common;

use common::{event_types, loopexec, workdir};
use serde_json::Value;
use std::path::Path;

fn doctor(dir: &Path, check: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec![
        "--json",
        "doctor",
        "--isolation",
        "none",
        "--check",
        check,
        "--runs",
        "3",
    ];
    args.extend_from_slice(extra);
    let ran = loopexec(dir, &args);
    (ran.code, ran.json())
}

/// Each gate's verdict, by name.
fn verdicts(v: &Value) -> Vec<(String, String)> {
    v["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["gate"].as_str().unwrap().to_string(),
                g["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(spec: &[(&str, &str)]) -> Vec<(String, String)> {
    spec.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn a_deterministic_hermetic_check_without_side_effects_passes_every_gate() {
    let dir = workdir();
    std::fs::write(dir.path().join("data"), "1").unwrap();
    let (code, v) = doctor(dir.path(), "test \"$(cat data)\" = 1", &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        verdicts(&v),
        pairs(&[
            ("determinism", "passed"),
            ("hermeticity", "passed"),
            ("side_effects", "passed")
        ])
    );
    assert_eq!(v["gates"][0]["evidence"]["runs"], 3);
}

#[test]
fn a_check_that_changes_its_own_tree_has_side_effects_and_is_not_called_flaky() {
    let dir = workdir();
    // Green on every fresh copy, red when run again on the copy it wrote.
    let (code, v) = doctor(dir.path(), "test ! -e marker && touch marker", &[]);
    assert_eq!(code, 14, "{v}");
    assert_eq!(v["halt_reason"], "check_has_side_effects", "{v}");
    assert_eq!(
        verdicts(&v),
        pairs(&[
            ("determinism", "passed"),
            ("hermeticity", "passed"),
            ("side_effects", "failed")
        ])
    );
    assert_eq!(v["gates"][2]["reason"], "check_has_side_effects");
    let same_copy = v["gates"][2]["evidence"]["same_copy_runs"]
        .as_array()
        .unwrap();
    assert_eq!(
        same_copy
            .iter()
            .map(|r| r["class"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["pass", "fail"]
    );
    assert!(
        !dir.path().join("marker").exists(),
        "the operator's tree is never written"
    );
}

#[test]
fn a_flaky_check_is_flaky_and_its_side_effects_are_not_judged() {
    let dir = workdir();
    let (code, v) = doctor(
        dir.path(),
        r#"test "${PYTHONHASHSEED:-0}" = 0"#,
        &["--perturb", "seed"],
    );
    assert_eq!(code, 14, "{v}");
    assert_eq!(v["halt_reason"], "check_flaky", "{v}");
    assert_eq!(
        verdicts(&v),
        pairs(&[
            ("determinism", "failed"),
            ("hermeticity", "inconclusive"),
            ("side_effects", "inconclusive")
        ])
    );
}

#[test]
fn a_check_that_reaches_the_network_is_not_hermetic() {
    let dir = workdir();
    let (port, _server) = common::hello_server();
    let check = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=5)'"
    );
    let (code, v) = doctor(dir.path(), &check, &[]);
    assert_eq!(code, 14, "{v}");
    assert_eq!(v["halt_reason"], "check_not_hermetic", "{v}");
    assert_eq!(
        verdicts(&v),
        pairs(&[
            ("determinism", "passed"),
            ("hermeticity", "failed"),
            ("side_effects", "passed")
        ])
    );
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .starts_with("hermeticity: the verdict changed with the network removed"),
        "{v}"
    );
    assert_eq!(v["gates"][1]["evidence"]["runs"][0]["class"], "fail", "{v}");
    assert_eq!(
        v["gates"][1]["evidence"]["reference"]["class"], "pass",
        "{v}"
    );
}

#[test]
fn a_check_that_reads_the_time_zone_is_not_hermetic() {
    let dir = workdir();
    let (code, v) = doctor(
        dir.path(),
        r#"test "$(date +%H%M)" = "$(date -u +%H%M)""#,
        &[],
    );
    assert_eq!(code, 14, "{v}");
    assert_eq!(v["halt_reason"], "check_not_hermetic", "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("another time zone"),
        "{v}"
    );
}

#[test]
fn under_native_isolation_the_isolation_preflight_runs_before_the_gates() {
    let dir = workdir();
    common::zone_traversable(dir.path());
    let ran = loopexec(
        dir.path(),
        &["--json", "doctor", "--check", "true", "--runs", "2"],
    );
    let v = ran.json();
    assert_eq!(ran.code, 0, "{v}");
    assert_eq!(v["zone_started"], true, "{v}");
    assert_eq!(v["satisfiable"], true, "{v}");
    assert_eq!(
        verdicts(&v),
        pairs(&[
            ("determinism", "passed"),
            ("hermeticity", "passed"),
            ("side_effects", "passed")
        ])
    );
}

#[test]
fn a_bad_target_is_refused_before_anything_runs() {
    let dir = workdir();
    let ran = loopexec(
        dir.path(),
        &[
            "--json",
            "doctor",
            "--isolation",
            "none",
            "--check",
            "true",
            "--confidence",
            "1",
        ],
    );
    let v = ran.json();
    assert_eq!(ran.code, 20, "{v}");
    assert_eq!(v["errors"].as_array().unwrap().len(), 1);
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("--confidence: confidence 1 is outside (0, 1)"),
        "{v}"
    );
}

#[test]
fn doctor_true_in_loop_toml_halts_the_run_sealed_on_a_check_with_side_effects_before_any_agent_call(
) {
    let dir = workdir();
    std::fs::write(dir.path().join("loop.toml"), "doctor = true\nisolation = \"none\"\nexec = \"touch agent-ran\"\ncheck = \"test ! -e marker && touch marker\"\n").unwrap();
    let ran = loopexec(dir.path(), &["--json", "run", "--run-id", "d"]);
    let v = ran.json();
    assert_eq!(ran.code, 14, "{v}");
    assert_eq!(v["halt_reason"], "check_has_side_effects", "{v}");
    assert_eq!(v["command"], "run");
    assert_eq!(
        event_types(dir.path(), "d"),
        ["run_start", "preconditions", "halt"],
        "the gates are recorded and the run halts before any agent call"
    );
    assert!(!dir.path().join("agent-ran").exists());
    assert!(
        dir.path()
            .join(".loopexec/runs/d/envelope.dsse.json")
            .exists(),
        "the halted run is sealed"
    );
}

#[test]
fn doctor_true_in_loop_toml_lets_a_trustworthy_check_loop() {
    let dir = workdir();
    std::fs::write(dir.path().join("loop.toml"), "doctor = true\nisolation = \"none\"\nexec = \"true\"\ncheck = \"true\"\nmax_flake_rate = 0.3\n").unwrap();
    let ran = loopexec(dir.path(), &["--json", "run"]);
    let v = ran.json();
    assert_eq!(ran.code, 10, "{v}");
    assert_eq!(v["halt_reason"], "success_condition_met", "{v}");
}
