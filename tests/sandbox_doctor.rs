//! `loopexec doctor` tells the truth: for every policy, its verdict (`satisfiable`, exit 0 or 30)
//! is the outcome of launching a zone under that policy on this host. Runs as root and, through
//! ci/test-unprivileged.sh, as an unprivileged user (named sandbox_* for that), the matrix rows
//! of this machine; ci/vm/row.sh asserts the same on a fresh Debian 12 (docs/hosts.md).

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> String {
    std::env::var("LOOPEXEC_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_loopexec").to_string())
}

/// The shipped exec policy with `cgroup_delegation` set, written into `dir`.
fn exec_policy_with(dir: &Path, delegation: &str) -> PathBuf {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/exec.toml"))
            .unwrap();
    assert!(
        text.contains("\n[layers]\n"),
        "policies/exec.toml has a [layers] section"
    );
    let path = dir.join(format!("exec-{delegation}.toml"));
    std::fs::write(
        &path,
        text.replace(
            "\n[layers]\n",
            &format!("\n[layers]\ncgroup_delegation = \"{delegation}\"\n"),
        ),
    )
    .unwrap();
    path
}

/// (doctor's exit code, its `satisfiable`) and the launch's exit code, under one policy.
fn verdict_and_launch(policy: &Path) -> ((Option<i32>, serde_json::Value), Option<i32>) {
    let p = policy.to_str().unwrap();
    let doctor = Command::new(bin())
        .args(["--json", "doctor", "--policy", p])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let launch = Command::new(bin())
        .args(["sandbox", "--policy", p, "--", "/bin/true"])
        .current_dir("/")
        .output()
        .unwrap();
    (
        (doctor.status.code(), v["satisfiable"].clone()),
        launch.status.code(),
    )
}

fn assert_doctor_agrees(policy: &Path) {
    let ((doctor_code, satisfiable), launch_code) = verdict_and_launch(policy);
    match launch_code {
        Some(0) => assert_eq!(
            (doctor_code, satisfiable),
            (Some(0), serde_json::json!(true)),
            "{}",
            policy.display()
        ),
        Some(30) => assert_eq!(
            (doctor_code, satisfiable),
            (Some(30), serde_json::json!(false)),
            "{}",
            policy.display()
        ),
        other => panic!(
            "{}: the launch ended with {other:?}, neither started nor refused",
            policy.display()
        ),
    }
}

#[test]
fn doctors_verdict_equals_the_launchs_outcome_under_auto_delegation() {
    let dir = tempfile::tempdir().unwrap();
    assert_doctor_agrees(&exec_policy_with(dir.path(), "auto"));
}

#[test]
fn doctors_verdict_equals_the_launchs_outcome_under_inherited_delegation() {
    let dir = tempfile::tempdir().unwrap();
    assert_doctor_agrees(&exec_policy_with(dir.path(), "inherit"));
}

#[test]
fn doctors_verdict_equals_the_launchs_outcome_under_systemd_delegation() {
    let dir = tempfile::tempdir().unwrap();
    assert_doctor_agrees(&exec_policy_with(dir.path(), "systemd"));
}

#[test]
fn systemd_delegation_on_cgroup_v1_is_refused_by_doctor_and_launch_alike_naming_auto() {
    if std::fs::read_to_string("/proc/self/cgroup")
        .unwrap()
        .lines()
        .all(|l| l.starts_with("0::"))
    {
        return; // pure cgroup v2 (the VM rig covers it): systemd can delegate there
    }
    let dir = tempfile::tempdir().unwrap();
    let policy = exec_policy_with(dir.path(), "systemd");
    let launch = Command::new(bin())
        .args([
            "--json",
            "sandbox",
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "/bin/true",
        ])
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(launch.status.code(), Some(30));
    let v: serde_json::Value = serde_json::from_slice(&launch.stdout).unwrap();
    let text = v.to_string();
    assert!(
        text.contains("needs the unified cgroup v2 hierarchy"),
        "{text}"
    );
    assert!(text.contains("cgroup_delegation = \\\"auto\\\""), "{text}");
}
