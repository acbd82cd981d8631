//! Egress of a sandboxed agent, end to end through `loopexec run`: the agent zone reaches an
//! allowed host only through the proxy; a direct connection (ignoring the proxy variables) has no
//! route; a host not on the allowlist is refused with 403; every proxy decision is audited.
mod common;
use common::*;
use serde_json::Value;

const AGENT: &str = r#"
import socket, sys, urllib.request, urllib.error
port = int(sys.argv[1])
body = urllib.request.urlopen("http://allowed.test:%d/" % port, timeout=10).read()
open("got", "wb").write(body)
try:
    socket.create_connection(("127.0.0.1", port), timeout=3)
    open("direct", "w").write("connected")
except OSError as e:
    open("direct", "w").write("refused")
try:
    urllib.request.urlopen("http://denied.test:%d/" % port, timeout=10)
    open("denied", "w").write("allowed")
except urllib.error.HTTPError as e:
    open("denied", "w").write(str(e.code))
"#;

/// A workdir the agent zone may write, holding AGENT.
fn agent_workdir() -> tempfile::TempDir {
    let dir = workdir();
    std::fs::write(dir.path().join("agent.py"), AGENT).unwrap();
    zone_writable(dir.path());
    dir
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The first `n` lines of `bytes` (each with its newline).
fn first_lines(bytes: &[u8], n: usize) -> &[u8] {
    let end = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(n.wrapping_sub(1))
        .map(|(i, _)| i + 1)
        .unwrap_or(0);
    &bytes[..end]
}

/// `--allow-host` and `--resolve` for AGENT's allowed host, served on loopback `port`.
fn egress_flags(port: u16) -> Vec<String> {
    vec![
        "--allow-host".into(),
        format!("allowed.test:{port}"),
        "--resolve".into(),
        format!("allowed.test:{port}:127.0.0.1"),
    ]
}

/// `loopexec run` of AGENT (two proxied requests per iteration) with extra arguments.
fn proxied_run(dir: &std::path::Path, port: u16, run_id: &str, extra: &[&str]) -> Ran {
    let flags = egress_flags(port);
    let mut args = vec!["run", "--json", "--run-id", run_id];
    args.extend(flags.iter().map(String::as_str));
    args.extend_from_slice(extra);
    loopexec(dir, &args)
}

#[test]
fn an_agent_reaches_an_allowed_host_only_through_the_proxy() {
    let (port, _server) = hello_server();
    let dir = agent_workdir();
    let exec = format!("python3 agent.py {port}");
    let r = proxied_run(
        dir.path(),
        port,
        "e",
        &[
            "--max-iterations",
            "1",
            "--exec",
            &exec,
            "--check",
            "test -f got",
        ],
    );
    assert_eq!(r.code, 11, "{r:?}");
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    assert_eq!(
        read("got"),
        "hello",
        "the allowed host answered through the proxy"
    );
    assert_eq!(
        read("direct"),
        "refused",
        "a direct connection has no route out of the zone"
    );
    assert_eq!(
        read("denied"),
        "403",
        "a host off the allowlist is refused by the proxy"
    );

    let audit = std::fs::read_to_string(run_dir(dir.path(), "e").join("egress.jsonl")).unwrap();
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        2,
        "one audit line per proxy decision, none for the direct attempt: {audit}"
    );
    let exec_result = events(dir.path(), "e")
        .into_iter()
        .find(|e| e["type"] == "exec_result")
        .unwrap();
    assert_eq!(exec_result["egress"]["totals"]["allowed"], 1);
    assert_eq!(exec_result["egress"]["totals"]["denied"], 1);
    assert!(exec_result["egress"]["audit_sha256"]
        .as_str()
        .is_some_and(|h| h.len() == 64));

    let report = loopexec(dir.path(), &["report", "--json", "e"]).json();
    let egress = &report["report"]["egress"];
    assert_eq!(
        (
            egress["summary"]["allowed"].as_u64(),
            egress["summary"]["denied"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(egress["audit_matches_receipt"], true);
}

#[test]
fn each_recorded_audit_digest_is_the_sha256_of_the_log_at_that_iteration_and_report_detects_tampering(
) {
    let (port, _server) = hello_server();
    let dir = agent_workdir();
    let exec = format!("echo $LOOPEXEC_ITERATION > iteration; python3 agent.py {port}");
    let r = proxied_run(
        dir.path(),
        port,
        "d",
        &[
            "--max-iterations",
            "3",
            "--exec",
            &exec,
            "--check",
            "test \"$(cat iteration)\" -ge 3",
        ],
    );
    assert_eq!(r.code, 11, "{r:?}");
    let log = run_dir(dir.path(), "d").join("egress.jsonl");
    let bytes = std::fs::read(&log).unwrap();
    let results: Vec<Value> = events(dir.path(), "d")
        .into_iter()
        .filter(|e| e["type"] == "exec_result")
        .collect();
    assert_eq!(results.len(), 3);
    for (i, result) in results.iter().enumerate() {
        let logged_so_far = first_lines(&bytes, 2 * (i + 1));
        assert_eq!(
            result["egress"]["audit_sha256"],
            sha256_hex(logged_so_far),
            "iteration {}",
            i + 1
        );
    }
    assert_eq!(
        results[2]["egress"]["audit_sha256"],
        sha256_hex(&bytes),
        "the last digest covers the whole log"
    );

    let report = loopexec(dir.path(), &["report", "--json", "d"]).json();
    assert_eq!(
        report["report"]["egress"]["audit_matches_receipt"], true,
        "{report}"
    );
    let tampered = String::from_utf8(bytes)
        .unwrap()
        .replacen("\"denied\"", "\"allowed\"", 1);
    std::fs::write(&log, tampered).unwrap();
    let report = loopexec(dir.path(), &["report", "--json", "d"]).json();
    assert_eq!(
        report["report"]["egress"]["audit_matches_receipt"], false,
        "{report}"
    );
}

#[test]
fn a_resumed_run_continues_the_audit_digest_from_the_bytes_already_logged() {
    let (port, _server) = hello_server();
    let dir = agent_workdir();
    // Iteration 1 makes its requests, then blocks until loopexec is SIGKILLed; later ones return.
    let exec = format!("echo $LOOPEXEC_ITERATION > iteration; python3 agent.py {port}; if [ \"$LOOPEXEC_ITERATION\" = 1 ]; then touch blocked; exec sleep 300; fi");
    let mut child = command()
        .current_dir(dir.path())
        .args(["run", "--json", "--run-id", "r"])
        .args(egress_flags(port))
        .args([
            "--exec",
            &exec,
            "--check",
            "test \"$(cat iteration)\" -ge 2",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(
        &dir.path().join("blocked"),
        std::time::Duration::from_secs(30),
    );
    // The proxy writes a request's audit line when its connection ends, which may come after the
    // agent moved on: wait for both lines before the kill, so the kill cannot race the audit.
    let log = run_dir(dir.path(), "r").join("egress.jsonl");
    let lines = || {
        std::fs::read(&log)
            .unwrap_or_default()
            .iter()
            .filter(|b| **b == b'\n')
            .count()
    };
    let start = std::time::Instant::now();
    while lines() < 2 && start.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: the run stays resumable
    child.wait().unwrap();
    assert_eq!(lines(), 2, "iteration 1 was audited");

    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "r"]);
    assert_eq!(resumed.code, 11, "{resumed:?}");
    let bytes = std::fs::read(&log).unwrap();
    assert_eq!(
        bytes.iter().filter(|b| **b == b'\n').count(),
        4,
        "the resumed iteration appended to the same log"
    );
    let last = events(dir.path(), "r")
        .into_iter()
        .rfind(|e| e["type"] == "exec_result")
        .unwrap();
    assert_eq!(last["egress"]["audit_sha256"], sha256_hex(&bytes));
}

const FETCH: &str = r#"
import sys, urllib.request
port, iteration = int(sys.argv[1]), sys.argv[2]
try:
    body = urllib.request.urlopen("http://allowed.test:%d/" % port, timeout=10).read().decode()
except Exception:
    body = "error"
open("got-" + iteration, "w").write(body)
"#;

/// The builtin agent policy with `max_bytes` set to `max_bytes`, written into `dir`.
fn agent_policy_with_max_bytes(dir: &std::path::Path, max_bytes: u64) -> String {
    let builtin =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/policies/agent.toml"))
            .unwrap();
    let policy = builtin.replace(
        "max_bytes = 10737418240",
        &format!("max_bytes = {max_bytes}"),
    );
    assert_ne!(policy, builtin);
    let path = dir.join("agent-policy.toml");
    std::fs::write(&path, policy).unwrap();
    path_str(&path)
}

fn last_egress_totals(dir: &std::path::Path, run_id: &str) -> Value {
    events(dir, run_id)
        .into_iter()
        .rfind(|e| e["type"] == "exec_result")
        .unwrap()["egress"]["totals"]
        .clone()
}

#[test]
fn the_byte_budget_bounds_the_run_across_three_steps_and_a_resume() {
    let (port, _server) = hello_server();
    let dir = workdir();
    std::fs::write(dir.path().join("fetch.py"), FETCH).unwrap();
    zone_writable(dir.path());
    let exec = format!(
        "echo $LOOPEXEC_ITERATION > iteration; python3 fetch.py {port} $LOOPEXEC_ITERATION"
    );
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();

    // What one fetch costs, from a run with the default budget.
    let r = proxied_run(
        dir.path(),
        port,
        "calibrate",
        &[
            "--no-baseline",
            "--max-iterations",
            "1",
            "--exec",
            &exec,
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 11, "{r:?}");
    let totals = last_egress_totals(dir.path(), "calibrate");
    let per_fetch = totals["bytes_up"].as_u64().unwrap() + totals["bytes_down"].as_u64().unwrap();
    assert_eq!(read("got-1"), "hello");
    std::fs::remove_file(dir.path().join("got-1")).unwrap();

    // A run whose budget holds two and a half fetches: step 1, a pause, step 2 (resumed), a pause,
    // step 3 (resumed): the third fetch is cut where the run's budget ends.
    let budget = 2 * per_fetch + per_fetch / 2;
    eprintln!("one fetch relays {per_fetch} bytes; the run's budget is {budget}");
    let policy = agent_policy_with_max_bytes(dir.path(), budget);
    let check = "test \"$(cat iteration)\" -ge 3";
    let first = proxied_run(
        dir.path(),
        port,
        "b",
        &[
            "--policy", &policy, "--once", "--exec", &exec, "--check", check,
        ],
    );
    assert!(first.code == 0, "{first:?}");
    for once in [true, false] {
        let mut args = vec!["run", "--json", "--resume", "b"];
        if once {
            args.push("--once");
        }
        let resumed = loopexec(dir.path(), &args);
        assert!(resumed.code == if once { 0 } else { 11 }, "{resumed:?}");
    }
    assert_eq!(
        (read("got-1"), read("got-2"), read("got-3")),
        ("hello".into(), "hello".into(), "error".into())
    );
    let totals = last_egress_totals(dir.path(), "b");
    assert_eq!(
        totals["bytes_up"].as_u64().unwrap() + totals["bytes_down"].as_u64().unwrap(),
        budget,
        "{totals}"
    );
    assert_eq!(
        (
            totals["byte_cap_hits"].as_u64(),
            totals["connections"].as_u64()
        ),
        (Some(1), Some(3)),
        "{totals}"
    );
}
