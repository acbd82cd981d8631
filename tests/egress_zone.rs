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

#[test]
fn an_agent_reaches_an_allowed_host_only_through_the_proxy() {
    let (port, _server) = hello_server();
    let dir = workdir();
    std::fs::write(dir.path().join("agent.py"), AGENT).unwrap();
    zone_writable(dir.path());
    let allow = format!("allowed.test:{port}");
    let pin = format!("allowed.test:{port}:127.0.0.1");
    let exec = format!("python3 agent.py {port}");
    let r = loopexec(
        dir.path(),
        &["run", "--json", "--run-id", "e", "--max-iterations", "1", "--exec", &exec, "--check", "test -f got", "--allow-host", &allow, "--resolve", &pin],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    assert_eq!(read("got"), "hello", "the allowed host answered through the proxy");
    assert_eq!(read("direct"), "refused", "a direct connection has no route out of the zone");
    assert_eq!(read("denied"), "403", "a host off the allowlist is refused by the proxy");

    let audit = std::fs::read_to_string(run_dir(dir.path(), "e").join("egress.jsonl")).unwrap();
    let lines: Vec<Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "one audit line per proxy decision, none for the direct attempt: {audit}");
    let exec_result = events(dir.path(), "e").into_iter().find(|e| e["type"] == "exec_result").unwrap();
    assert_eq!(exec_result["egress"]["totals"]["allowed"], 1);
    assert_eq!(exec_result["egress"]["totals"]["denied"], 1);
    assert!(exec_result["egress"]["audit_sha256"].as_str().is_some_and(|h| h.len() == 64));

    let report = loopexec(dir.path(), &["report", "--json", "e"]).json();
    let egress = &report["report"]["egress"];
    assert_eq!((egress["summary"]["allowed"].as_u64(), egress["summary"]["denied"].as_u64()), (Some(1), Some(1)));
    assert_eq!(egress["audit_matches_receipt"], true);
}
