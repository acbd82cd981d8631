//! Egress of a sandboxed agent, end to end through `loopexec run`: the agent zone reaches an
//! allowed host only through the proxy; a direct connection (ignoring the proxy variables) has no
//! route; a host not on the allowlist is refused with 403; every proxy decision is audited.
mod common;
use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

/// A tiny HTTP server on the host's loopback answering `hello` to every request, until dropped.
fn hello_server() -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let handle = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf);
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    (port, handle)
}

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
