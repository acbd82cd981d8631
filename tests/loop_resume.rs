//! Crash and interrupt: SIGKILL of loopexec mid-iteration then `run --resume`, and SIGTERM /
//! SIGINT recorded as `run_interrupted` with a resumable run.
mod common;
use common::*;
use std::process::{Child, Stdio};
use std::time::Duration;

/// Iteration 1 of the agent records its pid and blocks; later iterations succeed at once.
const AGENT: &str = "echo $LOOPEXEC_ITERATION > iteration; if [ \"$LOOPEXEC_ITERATION\" = 1 ]; then echo $$ > agent.pid; exec sleep 300; fi";

fn spawn_run(dir: &std::path::Path, run_id: &str) -> Child {
    common::command()
        .current_dir(dir)
        .args([
            "run",
            "--json",
            "--isolation",
            "none",
            "--run-id",
            run_id,
            "--exec",
            AGENT,
            "--check",
            "test \"$(cat iteration)\" -ge 2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn loopexec")
}

fn wait_gone(pid: i32) {
    for _ in 0..250 {
        if !pid_alive(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("process {pid} is still alive");
}

#[test]
fn sigkill_mid_iteration_then_resume_records_the_interrupted_iteration_and_continues() {
    let dir = workdir();
    let mut child = spawn_run(dir.path(), "crash");
    let agent = read_pid(&dir.path().join("agent.pid"));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    wait_gone(agent); // PR_SET_PDEATHSIG took the agent down with loopexec

    let status = loopexec(dir.path(), &["status", "--json", "crash"]).json();
    assert_eq!(status["state"], "running");
    assert_eq!(
        status["run"]["active"], false,
        "no process drives the crashed run"
    );

    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "crash"]);
    assert_eq!(resumed.code, 11, "{resumed:?}");
    let v = resumed.json();
    assert_eq!(
        (v["iteration"].as_u64(), v["halt_reason"].as_str()),
        (Some(2), Some("human_required"))
    );
    assert_eq!(
        event_types(dir.path(), "crash"),
        [
            "run_start",
            "check_baseline",
            "iteration_start",
            "iteration_interrupted",
            "run_resumed",
            "iteration_start",
            "exec_result",
            "check_result",
            "guard",
            "halt"
        ]
    );
    let ev = events(dir.path(), "crash");
    assert_eq!(
        (ev[3]["iteration"].as_u64(), ev[3]["cause"].as_str()),
        (Some(1), Some("supervisor_lost"))
    );
    assert_eq!(ev[5]["iteration"], 2);
    let check = loopexec(dir.path(), &["check", "--json"]);
    assert_eq!(
        check.code, 0,
        "the chain verifies after the crash: {check:?}"
    );
}

#[test]
fn an_interrupted_iteration_counts_toward_the_cap() {
    let dir = workdir();
    let mut child = common::command()
        .current_dir(dir.path())
        .args([
            "run",
            "--no-baseline",
            "--json",
            "--isolation",
            "none",
            "--run-id",
            "cap",
            "--max-iterations",
            "1",
            "--exec",
            AGENT,
            "--check",
            "true",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    read_pid(&dir.path().join("agent.pid"));
    child.kill().unwrap();
    child.wait().unwrap();
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "cap"]);
    assert_eq!(resumed.code, 12, "{resumed:?}");
    assert_eq!(resumed.json()["halt_reason"], "max_iterations_reached");
    assert_eq!(
        event_types(dir.path(), "cap"),
        [
            "run_start",
            "iteration_start",
            "iteration_interrupted",
            "run_resumed",
            "halt"
        ]
    );
}

fn interrupt_with(signal: i32, expected_code: i32, name: &str) {
    let dir = workdir();
    let child = spawn_run(dir.path(), "int");
    let agent = read_pid(&dir.path().join("agent.pid"));
    unsafe { libc::kill(child.id() as i32, signal) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(expected_code));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["status"].as_str(), v["state"].as_str()),
        (Some("interrupted"), Some("interrupted"))
    );
    assert_eq!(v["run"]["signal"], name);
    assert!(!pid_alive(agent), "the agent was killed with its tree");
    let ev = events(dir.path(), "int");
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "run_start",
            "check_baseline",
            "iteration_start",
            "exec_result",
            "iteration_interrupted",
            "run_interrupted"
        ]
    );
    assert_eq!(ev[5]["signal"], name);
    assert_eq!(
        loopexec(dir.path(), &["status", "--json"]).json()["state"],
        "interrupted"
    );
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "int"]);
    assert_eq!(resumed.code, 11, "{resumed:?}");
    assert_eq!(loopexec(dir.path(), &["check", "--json"]).code, 0);
}

#[test]
fn sigterm_records_run_interrupted_and_exits_143() {
    interrupt_with(libc::SIGTERM, 143, "SIGTERM");
}

#[test]
fn sigint_records_run_interrupted_and_exits_130() {
    interrupt_with(libc::SIGINT, 130, "SIGINT");
}

#[test]
fn a_run_driven_by_a_live_process_cannot_be_resumed_and_shows_as_active() {
    let dir = workdir();
    let child = spawn_run(dir.path(), "live");
    read_pid(&dir.path().join("agent.pid"));
    let status = loopexec(dir.path(), &["status", "--json", "live"]).json();
    assert_eq!(
        (status["state"].as_str(), status["iteration"].as_u64()),
        (Some("running"), Some(1))
    );
    assert_eq!(status["run"]["active"], true);
    let second = loopexec(dir.path(), &["run", "--json", "--resume", "live"]);
    assert_eq!(second.code, 30, "{second:?}");
    assert!(second.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("another loopexec process"));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(143));
}

#[test]
fn resume_cuts_a_torn_final_line_and_the_chain_verifies() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--once",
            "--run-id",
            "torn",
            "--isolation",
            "none",
            "--exec",
            "echo $LOOPEXEC_ITERATION > iteration",
            "--check",
            "test \"$(cat iteration)\" -ge 2",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let receipt = run_dir(dir.path(), "torn").join("receipt.jsonl");
    let mut bytes = std::fs::read(&receipt).unwrap();
    let complete = bytes.len();
    bytes.extend_from_slice(b"{\"seq\":5,\"prev\":\"ab");
    std::fs::write(&receipt, &bytes).unwrap();
    let check = loopexec(dir.path(), &["check", "--json"]);
    assert_eq!(check.code, 30, "check reports the torn line: {check:?}");
    assert!(check.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("torn"));
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "torn"]);
    assert_eq!(resumed.code, 11, "{resumed:?}");
    let after = std::fs::read(&receipt).unwrap();
    let next: serde_json::Value =
        serde_json::from_slice(after[complete..].split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(
        (next["seq"].as_u64(), next["type"].as_str()),
        (Some(5), Some("run_resumed")),
        "the torn bytes were cut off"
    );
    assert_eq!(loopexec(dir.path(), &["check", "--json"]).code, 0);
    assert_eq!(
        event_types(dir.path(), "torn"),
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
fn resume_cuts_a_torn_group_back_to_before_it_and_reruns_the_iteration_it_held() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            "group",
            "--isolation",
            "none",
            "--exec",
            "echo x >> agent-runs",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 11, "{r:?}");
    // The check's group (check_result, guard: one write) torn by a crash inside its first line.
    let receipt = run_dir(dir.path(), "group").join("receipt.jsonl");
    let text = std::fs::read_to_string(&receipt).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("\"type\":\"check_result\""))
        .unwrap();
    assert!(lines[at + 1].contains("\"type\":\"guard\""), "{text}");
    let before: String = lines[..at].iter().map(|l| format!("{l}\n")).collect();
    let group = format!("{}\n{}\n", lines[at], lines[at + 1]);
    let torn = format!("{before}{}", &group[..lines[at].len() / 2]);
    std::fs::write(&receipt, &torn).unwrap();
    let check = loopexec(dir.path(), &["check", "--json"]);
    assert_eq!(check.code, 30, "check reports the torn group: {check:?}");
    assert!(check.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("torn"));
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "group"]);
    assert_eq!(resumed.code, 11, "{resumed:?}");
    assert_eq!(
        std::fs::read_to_string(&receipt).unwrap()[..before.len()],
        before,
        "everything before the torn group is kept as it was"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("agent-runs")).unwrap(),
        "x\nx\n",
        "the iteration whose check the torn group held ran again"
    );
    assert_eq!(
        event_types(dir.path(), "group"),
        [
            "run_start",
            "iteration_start",
            "exec_result",
            "iteration_interrupted",
            "run_resumed",
            "iteration_start",
            "exec_result",
            "check_result",
            "guard",
            "halt"
        ]
    );
    assert_eq!(loopexec(dir.path(), &["check", "--json"]).code, 0);
}

#[test]
fn a_decided_halt_lost_in_a_crash_is_appended_on_resume_without_rerunning_anything() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            "lost",
            "--isolation",
            "none",
            "--exec",
            "echo x >> agent-runs",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 11, "{r:?}");
    // Simulate a crash between appending check_result and appending halt.
    let receipt = run_dir(dir.path(), "lost").join("receipt.jsonl");
    let text = std::fs::read_to_string(&receipt).unwrap();
    let without_halt: String = text
        .lines()
        .take_while(|l| !l.contains("\"type\":\"halt\""))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&receipt, without_halt).unwrap();
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "lost"]);
    assert_eq!(resumed.code, 11, "{resumed:?}");
    assert_eq!(resumed.json()["halt_reason"], "human_required");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("agent-runs")).unwrap(),
        "x\n",
        "the agent ran once"
    );
    assert_eq!(
        event_types(dir.path(), "lost"),
        [
            "run_start",
            "iteration_start",
            "exec_result",
            "check_result",
            "guard",
            "run_resumed",
            "halt"
        ]
    );
    assert_eq!(loopexec(dir.path(), &["check", "--json"]).code, 0);
}

/// A detached run whose check fails on t0 and passes, slowly, once the agent wrote `done`; its
/// supervisor is killed (SIGKILL, by pid) as soon as the receipt holds `count` events of type
/// `kind` for iteration 1, while the next check run (a confirmation rerun) is still sleeping.
fn killed_after(dir: &std::path::Path, run_id: &str, kind: &str, count: usize) {
    killed_after_exec(dir, run_id, "touch done", kind, count)
}

fn killed_after_exec(dir: &std::path::Path, run_id: &str, exec: &str, kind: &str, count: usize) {
    let mut child = common::command()
        .current_dir(dir)
        .args([
            "run",
            "--json",
            "--run-id",
            run_id,
            "--exec",
            exec,
            "--check",
            "test -f done && sleep 3",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn loopexec");
    let receipt = run_dir(dir, run_id).join("receipt.jsonl");
    let seen = || {
        let text = std::fs::read_to_string(&receipt).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["type"] == kind && (e["iteration"] == 1 || e["check"]["iteration"] == 1))
            .count()
    };
    let mut polls = 0;
    while seen() < count {
        assert!(
            child.try_wait().unwrap().is_none(),
            "loopexec ended before the receipt held {count} {kind}"
        );
        polls += 1;
        assert!(polls < 12_000, "the receipt never held {count} {kind}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill(2) of the loopexec this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
}

fn confirmations(dir: &std::path::Path, run_id: &str) -> Vec<serde_json::Value> {
    events(dir, run_id)
        .into_iter()
        .filter(|e| e["type"] == "check_confirmation")
        .collect()
}

#[test]
fn a_supervisor_killed_between_a_green_and_its_confirmation_reruns_it_on_resume_before_success() {
    let dir = workdir();
    std::fs::write(dir.path().join("src"), "x\n").unwrap();
    commit_t0(dir.path());
    killed_after(dir.path(), "g", "check_result", 1);
    let before = event_types(dir.path(), "g");
    assert!(
        !before
            .iter()
            .any(|t| t == "check_confirmation" || t == "halt"),
        "the kill landed before the confirmation was recorded: {before:?}"
    );
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "g"]);
    assert_eq!(
        (resumed.code, resumed.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{resumed:?}"
    );
    let types = event_types(dir.path(), "g");
    let resumed_at = types.iter().position(|t| t == "run_resumed").unwrap();
    let confirmed_at = types
        .iter()
        .position(|t| t == "check_confirmation")
        .unwrap();
    assert!(
        resumed_at < confirmed_at && confirmed_at < types.len() - 1,
        "{types:?}"
    );
    let c = confirmations(dir.path(), "g");
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        (
            c[0]["confirmation"].as_u64(),
            c[0]["iteration"].as_u64(),
            c[0]["agrees"].as_bool()
        ),
        (Some(1), Some(1), Some(true))
    );
    assert!(
        !types[resumed_at..].iter().any(|t| t == "exec_result"),
        "the agent did not run again: {types:?}"
    );
    assert_eq!(loopexec(dir.path(), &["check", "--json"]).code, 0);
}

#[test]
fn a_supervisor_killed_between_two_confirmations_runs_only_the_missing_one_on_resume() {
    let dir = workdir();
    std::fs::write(dir.path().join("src"), "x\n").unwrap();
    std::fs::write(dir.path().join("loop.toml"), "confirm_runs = 2\n").unwrap();
    commit_t0(dir.path());
    killed_after(dir.path(), "g2", "check_confirmation", 1);
    assert_eq!(
        confirmations(dir.path(), "g2").len(),
        1,
        "the kill landed before the second confirmation was recorded"
    );
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "g2"]);
    assert_eq!(
        (resumed.code, resumed.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{resumed:?}"
    );
    let numbers: Vec<u64> = confirmations(dir.path(), "g2")
        .iter()
        .map(|c| c["confirmation"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, vec![1, 2]);
    // Wilson lower bound of 2 agreeing samples of 2 at 95%: 1 / (1 + z^2 / 2), z = 1.6448536...
    let second = &confirmations(dir.path(), "g2")[1];
    assert!(
        (second["stability_lower_bound"].as_f64().unwrap()
            - 1.0 / (1.0 + 1.6448536269514722f64.powi(2) / 2.0))
            .abs()
            < 1e-9,
        "{second}"
    );
}

#[test]
fn a_supervisor_killed_before_the_adequacy_canary_runs_it_on_resume_and_no_success_is_declared() {
    let dir = workdir();
    std::fs::write(dir.path().join("src"), "x\n").unwrap();
    std::fs::write(
        dir.path().join("loop.toml"),
        "adequacy = \"final\"\nmutants = 2\n",
    )
    .unwrap();
    commit_t0(dir.path());
    // The agent's change has mutable lines; the check never reads them, so every mutant survives.
    let exec = "printf 'def f(x):\\n    return x > 1\\n' > change.py && touch done";
    killed_after_exec(dir.path(), "c", exec, "check_confirmation", 1);
    assert!(
        !event_types(dir.path(), "c").iter().any(|t| t == "adequacy"),
        "the kill landed before the canary was recorded"
    );
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "c"]);
    assert_eq!(
        (resumed.code, resumed.json()["halt_reason"].as_str()),
        (15, Some("check_inadequate")),
        "{resumed:?}"
    );
    let adequacy: Vec<serde_json::Value> = events(dir.path(), "c")
        .into_iter()
        .filter(|e| e["type"] == "adequacy")
        .collect();
    assert_eq!(adequacy.len(), 1, "{adequacy:?}");
    assert_eq!(
        (
            adequacy[0]["iteration"].as_u64(),
            adequacy[0]["killed"].as_u64()
        ),
        (Some(1), Some(0)),
        "{adequacy:?}"
    );
}
