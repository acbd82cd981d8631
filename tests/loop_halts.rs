//! Every halt path of the check_fixpoint loop, `--once`/`step`, and the failing set.
mod common;
use common::*;
use serde_json::Value;

fn run(dir: &std::path::Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["run", "--json", "--isolation", "none", "--run-id", "r"];
    args.extend_from_slice(extra);
    let r = loopexec(dir, &args);
    assert_eq!(r.stderr, "", "nothing on stderr: {r:?}");
    (r.code, r.json())
}

#[test]
fn a_check_passing_in_place_halts_human_required() {
    let dir = workdir();
    let (code, v) = run(
        dir.path(),
        &[
            "--no-baseline",
            "--exec",
            "echo $LOOPEXEC_ITERATION >> it",
            "--check",
            "test $(wc -l < it) -ge 3",
        ],
    );
    assert_eq!(
        (code, v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (11, Some("human_required"), Some(3))
    );
    assert_eq!(
        event_types(dir.path(), "r"),
        [
            "run_start",
            "iteration_start",
            "exec_result",
            "check_result",
            "iteration_start",
            "exec_result",
            "check_result",
            "iteration_start",
            "exec_result",
            "check_result",
            "guard",
            "halt"
        ]
    );
}

#[test]
fn a_red_check_at_the_cap_halts_max_iterations_reached() {
    let dir = workdir();
    let (code, v) = run(
        dir.path(),
        &[
            "--exec",
            "true",
            "--check",
            "exit 3",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(
        (code, v["halt_reason"].as_str(), v["check_exit"].as_i64()),
        (12, Some("max_iterations_reached"), Some(3))
    );
    let halt = events(dir.path(), "r").pop().unwrap();
    assert_eq!(
        (
            halt["type"].as_str(),
            halt["iteration"].as_u64(),
            halt["exit_code"].as_i64()
        ),
        (Some("halt"), Some(2), Some(12))
    );
}

#[test]
fn an_agent_exiting_non_zero_halts_execution_failure_without_running_the_check() {
    let dir = workdir();
    let (code, v) = run(
        dir.path(),
        &[
            "--no-baseline",
            "--exec",
            "exit 4",
            "--check",
            "touch checked",
        ],
    );
    assert_eq!(
        (code, v["halt_reason"].as_str()),
        (40, Some("execution_failure"))
    );
    assert!(v["run"]["detail"].as_str().unwrap().contains("exited 4"));
    assert!(!dir.path().join("checked").exists());
    assert_eq!(
        event_types(dir.path(), "r"),
        ["run_start", "iteration_start", "exec_result", "halt"]
    );
}

#[test]
fn a_check_that_cannot_run_halts_execution_failure() {
    let dir = workdir();
    let (code, v) = run(
        dir.path(),
        &["--exec", "true", "--check", "./no-such-check-script"],
    );
    assert_eq!(
        (code, v["halt_reason"].as_str()),
        (40, Some("execution_failure"))
    );
    assert!(v["run"]["detail"]
        .as_str()
        .unwrap()
        .contains("could not run"));
}

#[test]
fn an_agent_timeout_halts_execution_failure() {
    let dir = workdir();
    let (code, v) = run(
        dir.path(),
        &[
            "--no-baseline",
            "--exec",
            "sleep 30",
            "--check",
            "true",
            "--exec-timeout",
            "0.3",
        ],
    );
    assert_eq!(
        (code, v["halt_reason"].as_str()),
        (40, Some("execution_failure"))
    );
    assert!(v["run"]["detail"].as_str().unwrap().contains("timed out"));
    let exec = &events(dir.path(), "r")[2];
    assert_eq!(exec["ending"]["kind"], "timed_out");
}

#[test]
fn a_check_timeout_halts_execution_failure() {
    let dir = workdir();
    let (code, v) = run(
        dir.path(),
        &[
            "--no-baseline",
            "--exec",
            "true",
            "--check",
            "sleep 30",
            "--check-timeout",
            "0.3",
        ],
    );
    assert_eq!(
        (code, v["halt_reason"].as_str()),
        (40, Some("execution_failure"))
    );
    let check = &events(dir.path(), "r")[3];
    assert_eq!(
        (check["type"].as_str(), check["ending"]["kind"].as_str()),
        (Some("check_result"), Some("timed_out"))
    );
    assert_eq!(check["check_exit"], Value::Null);
}

#[test]
fn output_is_captured_into_artifacts_with_size_and_hash() {
    let dir = workdir();
    let (code, _) = run(
        dir.path(),
        &[
            "--no-baseline",
            "--exec",
            "printf agent-out; printf agent-err >&2",
            "--check",
            "true",
        ],
    );
    assert_eq!(code, 11);
    let exec = &events(dir.path(), "r")[2];
    assert_eq!(exec["stdout"]["bytes"], 9);
    assert_eq!(exec["stdout"]["truncated"], false);
    let artifact = run_dir(dir.path(), "r").join(exec["stdout"]["artifact"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(artifact).unwrap(), "agent-out");
    use sha2::Digest;
    assert_eq!(
        exec["stderr"]["sha256"].as_str().unwrap(),
        hex::encode(sha2::Sha256::digest(b"agent-err"))
    );
    assert_eq!(
        events(dir.path(), "r")[3]["stdout"]["artifact"],
        Value::Null,
        "an empty stream has no artifact"
    );
}

#[test]
fn once_pauses_and_resume_once_continues_until_the_halt() {
    let dir = workdir();
    let (code, v) = run(
        dir.path(),
        &[
            "--no-baseline",
            "--once",
            "--exec",
            "echo x >> it",
            "--check",
            "test $(wc -l < it) -ge 2",
        ],
    );
    assert_eq!(
        (
            code,
            v["status"].as_str(),
            v["state"].as_str(),
            v["iteration"].as_u64()
        ),
        (0, Some("ok"), Some("paused"), Some(1))
    );
    assert_eq!(v["halt_reason"], Value::Null);
    let status = loopexec(dir.path(), &["status", "--json"]).json();
    assert_eq!(status["state"], "paused");
    assert_eq!(status["run"]["resumable"], true);
    let next = loopexec(dir.path(), &["step", "--json", "--resume", "r"]);
    assert_eq!(next.code, 11, "{next:?}");
    assert_eq!(next.json()["iteration"], 2);
    assert_eq!(
        event_types(dir.path(), "r"),
        [
            "run_start",
            "iteration_start",
            "exec_result",
            "check_result",
            "run_resumed",
            "iteration_start",
            "exec_result",
            "check_result",
            "guard",
            "halt"
        ]
    );
}

#[test]
fn a_halted_run_cannot_be_resumed() {
    let dir = workdir();
    run(dir.path(), &["--exec", "true", "--check", "true"]);
    let r = loopexec(dir.path(), &["run", "--json", "--resume", "r"]);
    assert_eq!(r.code, 20);
    assert_eq!(r.json()["errors"][0]["code"], "run_already_halted");
}

#[test]
fn resume_refuses_config_flags() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &["run", "--json", "--resume", "r", "--check", "true"],
    );
    assert_eq!(r.code, 20);
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("--check"));
}

#[test]
fn the_failing_set_is_recorded_and_explain_halt_sees_improvement() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("agent.sh"),
        "n=$(cat n 2>/dev/null || echo 0); echo $((n+1)) > n\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("check.sh"), "f=$((6 - $(cat n))); i=$f; { echo '<testsuite>'; while [ $i -gt 0 ]; do echo \"<testcase classname='t' name='c$i'><failure/></testcase>\"; i=$((i-1)); done; echo '</testsuite>'; } > report.xml; exit 1\n").unwrap();
    let (code, v) = run(
        dir.path(),
        &[
            "--exec",
            "sh agent.sh",
            "--check",
            "sh check.sh",
            "--junit",
            "report.xml",
            "--max-iterations",
            "4",
        ],
    );
    assert_eq!(code, 12);
    assert_eq!(v["run"]["failing_count"], 2);
    let third = events(dir.path(), "r")
        .into_iter()
        .filter(|e| e["type"] == "check_result")
        .nth(2)
        .unwrap();
    assert_eq!(
        third["failing_set"],
        serde_json::json!(["t::c1", "t::c2", "t::c3"])
    );
    let explain = loopexec(dir.path(), &["explain-halt", "--json"]).json();
    assert_eq!(
        explain["explanation"]["verdict"]["verdict"],
        "raise_the_limit"
    );
    assert_eq!(
        explain["explanation"]["verdict"]["trajectory"],
        serde_json::json!([[1, 5], [2, 4], [3, 3], [4, 2]])
    );
    assert!(explain["explanation"]["summary"]
        .as_str()
        .unwrap()
        .contains("raise the limit"));
}

#[test]
fn a_stalled_failing_set_is_reported_as_stalled() {
    let dir = workdir();
    std::fs::write(dir.path().join("check.sh"), "echo \"<testsuite><testcase classname='t' name='a'><error/></testcase></testsuite>\" > r.xml; exit 1\n").unwrap();
    // A cap of 2: with t0 and two iterations failing alike, same_failure_repeated (3 in a row,
    // docs/progress.md) is not reached yet.
    let (code, _) = run(
        dir.path(),
        &[
            "--exec",
            "true",
            "--check",
            "sh check.sh",
            "--junit",
            "r.xml",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(code, 12);
    let explain = loopexec(dir.path(), &["explain-halt", "--json"]).json();
    assert_eq!(explain["explanation"]["verdict"]["verdict"], "do_not_retry");
}

#[test]
fn a_malformed_report_records_the_parse_error_and_no_failing_set() {
    let dir = workdir();
    let (code, _) = run(
        dir.path(),
        &[
            "--no-baseline",
            "--exec",
            "true",
            "--check",
            "echo '<testsuite><oops' > r.xml; exit 1",
            "--junit",
            "r.xml",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(code, 12);
    let check = &events(dir.path(), "r")[3];
    assert_eq!(check["failing_set"], Value::Null);
    assert!(
        check["junit_error"].as_str().unwrap().contains("r.xml"),
        "{check}"
    );
}

#[test]
fn a_symlinked_junit_report_is_not_followed() {
    let dir = workdir();
    let outside = workdir();
    std::fs::write(
        outside.path().join("r.xml"),
        "<testsuite><testcase classname='x' name='y'><failure/></testcase></testsuite>",
    )
    .unwrap();
    let target = path_str(&outside.path().join("r.xml"));
    let check = format!("ln -sf {target} r.xml; exit 1");
    let (code, _) = run(
        dir.path(),
        &[
            "--no-baseline",
            "--exec",
            "true",
            "--check",
            &check,
            "--junit",
            "r.xml",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(code, 12);
    let event = &events(dir.path(), "r")[3];
    assert_eq!(event["failing_set"], Value::Null);
    assert!(
        event["junit_error"].as_str().unwrap().contains("symlink"),
        "{event}"
    );
}

#[test]
fn a_fifo_in_place_of_the_junit_report_is_an_error_not_a_hang() {
    let dir = workdir();
    let (code, _) = run(
        dir.path(),
        &[
            "--no-baseline",
            "--exec",
            "true",
            "--check",
            "mkfifo r.xml; exit 1",
            "--junit",
            "r.xml",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(code, 12);
    let event = &events(dir.path(), "r")[3];
    assert_eq!(event["failing_set"], Value::Null);
    assert!(
        event["junit_error"]
            .as_str()
            .unwrap()
            .contains("not a regular file"),
        "{event}"
    );
}
