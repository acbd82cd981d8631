//! `loopexec sandbox` with a proxied policy: the command reaches allowed hosts through the egress
//! proxy only, a direct connection has no route, and every decision lands in the audit log.
mod common;
use common::*;
use std::process::Command;

#[test]
fn a_sandboxed_command_reaches_an_allowed_host_only_through_the_proxy() {
    let (port, _server) = hello_server();
    let logs = workdir();
    let log = logs.path().join("egress.jsonl");
    let script = format!(
        "import socket, urllib.request\n\
         print(urllib.request.urlopen('http://allowed.test:{port}/', timeout=10).read().decode())\n\
         try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('direct connected')\n\
         except OSError: print('direct refused')\n"
    );
    let out = Command::new(bin())
        .args([
            "--json",
            "sandbox",
            "--builtin",
            "agent",
            "--allow-host",
            &format!("allowed.test:{port}"),
        ])
        .args([
            "--resolve",
            &format!("allowed.test:{port}:127.0.0.1"),
            "--egress-log",
            &path_str(&log),
            "--",
            "python3",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(out.status.code(), Some(0), "{v}");
    // Under --json the command's stdout goes to stderr, so stdout holds the one object.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .collect::<Vec<_>>(),
        ["hello", "direct refused"]
    );
    assert_eq!(v["egress"]["totals"]["allowed"], 1);
    assert_eq!(
        std::fs::read_to_string(&log).unwrap().lines().count(),
        1,
        "one audit line per decision"
    );
}

#[test]
fn egress_flags_need_a_proxied_policy() {
    let out = Command::new(bin())
        .args([
            "--json",
            "sandbox",
            "--builtin",
            "exec",
            "--allow-host",
            "example.com",
            "--",
            "/bin/true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(20));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("network mode"));
}
