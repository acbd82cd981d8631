//! The hermeticity rule end to end (issue 24, item 6): a check that tried to reach an address
//! outside its zone while judging the agent's tree halts `hermeticity_violation` (exit 14), with
//! the attempts counted by the exec zone's kernel, whatever made them (Python's sockets, a shell's
//! `/dev/tcp`, an IPv6 datagram); a check that already reached out on t0 is recorded, not halted
//! on; an honest check records that it tried none; the halt is re-derived by `verify`.
mod common;
use common::calc::{calc_project, write_package, PYTEST};
use common::*;
use loopexec::receipt::events::{Event, OutsideAttemptsRecord};
use serde_json::Value;
use std::path::Path;

fn run(repo: &Path, run_id: &str, agent: &str) -> (Ran, Vec<Value>) {
    let args = [
        "run",
        "--json",
        "--run-id",
        run_id,
        "--exec",
        agent,
        "--check",
        PYTEST,
        "--max-iterations",
        "2",
    ];
    let r = loopexec(repo, &args);
    let ev = events(repo, run_id);
    (r, ev)
}

/// The honest fix, then `snippet` appended to the package (run when the tests import it).
fn fix_and_append(snippet: &str) -> String {
    format!(
        "{} && cat >> src/calc/__init__.py <<'EOF'\n{snippet}\nEOF",
        write_package(&["add", "sub", "mul", "div"])
    )
}

fn check_of(ev: &[Value], iteration: u64) -> &Value {
    ev.iter()
        .find(|e| e["type"] == "check_result" && e["iteration"] == iteration)
        .unwrap_or_else(|| panic!("no check_result of iteration {iteration}: {ev:#?}"))
}

fn baseline_check(ev: &[Value]) -> &Value {
    let baseline = ev
        .iter()
        .find(|e| e["type"] == "check_baseline")
        .unwrap_or_else(|| panic!("no check_baseline: {ev:#?}"));
    &baseline["check"]
}

/// The run halted `hermeticity_violation` at iteration 1 on a green check whose zone counted
/// `ipv4` and `ipv6` attempts, and t0 counted none.
fn assert_violation(r: &Ran, ev: &[Value], ipv4: u64, ipv6: u64) {
    assert_eq!(r.code, 14, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "hermeticity_violation", "{r:?}");
    assert_eq!(
        baseline_check(ev)["outside_attempts"],
        serde_json::json!({"ipv4": 0, "ipv6": 0})
    );
    let check = check_of(ev, 1);
    assert_eq!(check["check_exit"], 0, "the check itself passed: {check:#}");
    assert_eq!(
        check["outside_attempts"],
        serde_json::json!({"ipv4": ipv4, "ipv6": ipv6})
    );
    let halt = ev.iter().find(|e| e["type"] == "halt").expect("a halt");
    let detail = halt["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with(&format!(
            "the check of iteration 1 tried to reach an address outside its zone {} (IPv4 {ipv4}, IPv6 {ipv6};",
            match ipv4 + ipv6 {
                1 => "once".to_string(),
                k => format!("{k} times"),
            }
        )),
        "{detail}"
    );
}

#[test]
fn a_check_whose_code_under_test_opens_a_tcp_connection_out_halts_hermeticity_violation() {
    let repo = calc_project();
    let agent = fix_and_append(
        "import socket\ntry:\n    socket.create_connection(('203.0.113.7', 443), timeout=2)\nexcept OSError:\n    pass",
    );
    let (r, ev) = run(repo.path(), "tcp", &agent);
    assert_violation(&r, &ev, 1, 0);
}

#[test]
fn a_check_whose_code_under_test_reaches_out_through_a_shell_halts_hermeticity_violation() {
    let repo = calc_project();
    // Another language in a child process: bash's /dev/tcp, twice.
    let agent = fix_and_append(
        "import subprocess\nfor _ in range(2):\n    subprocess.run(['bash', '-c', 'echo x > /dev/tcp/198.51.100.1/80'], stderr=subprocess.DEVNULL)",
    );
    let (r, ev) = run(repo.path(), "shell", &agent);
    assert_violation(&r, &ev, 2, 0);
}

#[test]
fn a_check_whose_code_under_test_sends_an_ipv6_datagram_out_halts_hermeticity_violation() {
    let repo = calc_project();
    let agent = fix_and_append(
        "import socket\ntry:\n    socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendto(b'x', ('2001:db8::1', 53))\nexcept OSError:\n    pass",
    );
    let (r, ev) = run(repo.path(), "udp6", &agent);
    assert_violation(&r, &ev, 0, 1);
}

#[test]
fn an_honest_check_records_that_it_tried_to_reach_nothing_and_converges() {
    let repo = calc_project();
    let (r, ev) = run(
        repo.path(),
        "honest",
        &write_package(&["add", "sub", "mul", "div"]),
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        check_of(&ev, 1)["outside_attempts"],
        serde_json::json!({"ipv4": 0, "ipv6": 0})
    );
}

#[test]
fn a_check_that_already_reached_out_on_t0_is_recorded_and_not_halted_on() {
    let repo = calc_project();
    // The operator's own suite tries the network (and copes with its absence) from t0 on.
    write(
        repo.path(),
        "tests/conftest.py",
        "import socket\ntry:\n    socket.create_connection(('192.0.2.10', 80), timeout=2)\nexcept OSError:\n    pass\n",
    );
    git(repo.path(), &["add", "-A"]);
    git(
        repo.path(),
        &["commit", "-q", "-m", "conftest probes the network"],
    );
    let (r, ev) = run(
        repo.path(),
        "t0",
        &write_package(&["add", "sub", "mul", "div"]),
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        baseline_check(&ev)["outside_attempts"],
        serde_json::json!({"ipv4": 1, "ipv6": 0})
    );
    assert_eq!(
        check_of(&ev, 1)["outside_attempts"],
        serde_json::json!({"ipv4": 1, "ipv6": 0})
    );
}

#[test]
fn the_halt_is_re_derived_by_verify_and_a_receipt_resealed_without_the_attempts_fails_it() {
    let repo = calc_project();
    let agent = fix_and_append(
        "import socket\ntry:\n    socket.create_connection(('203.0.113.7', 443), timeout=2)\nexcept OSError:\n    pass",
    );
    let (r, _) = run(repo.path(), "v", &agent);
    assert_eq!(r.code, 14, "{r:?}");
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let verified = loopexec(repo.path(), &["verify", "--json", "v", "--pubkey", &pubkey]);
    assert_eq!(verified.code, 0, "{verified:?}");
    // The same receipt, its iteration's attempts erased and the chain re-signed: the recorded
    // halt no longer follows from what it records.
    reseal_without_attempts(repo.path(), "v");
    let verified = loopexec(repo.path(), &["verify", "--json", "v", "--pubkey", &pubkey]);
    assert_eq!(verified.code, 13, "{verified:?}");
    let failed: Vec<String> = verified.json()["verify"]["checks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(failed, vec!["halt_derivation".to_string()], "{verified:?}");
}

/// Rewrite run `run_id`'s receipt with every iteration check's `outside_attempts` zeroed, signed
/// again with a fresh run key the operator endorses, and sealed.
fn reseal_without_attempts(repo: &Path, run_id: &str) {
    use loopexec::receipt::{
        chain::ReceiptLog,
        events::Recorded,
        keys::{OperatorKey, RunKey},
        seal,
    };
    let dir = run_dir(repo, run_id);
    let run = loopexec::safefs::SafeDir::open(&dir).unwrap();
    let (_, lines) = ReceiptLog::open(&run, "receipt.jsonl").unwrap();
    let recorded = Recorded::decode_all(&lines).unwrap();
    for sealed in ["receipt.jsonl", "receipt.dsse.json", "receipt.intoto.json"] {
        let _ = std::fs::remove_file(dir.join(sealed));
    }
    let operator = OperatorKey::load(&key_dir().join("operator.key")).unwrap();
    let run_key = RunKey::mint();
    let mut log = ReceiptLog::create(&run, "receipt.jsonl").unwrap();
    for record in &recorded {
        match &record.event {
            Event::RunKey(_) => seal::endorse_run_key(&mut log, run_id, &run_key, &operator)
                .map(drop)
                .unwrap(),
            Event::CheckResult(check) if check.iteration > 0 => {
                let mut check = check.clone();
                check.outside_attempts = Some(OutsideAttemptsRecord::default());
                log.append_event(&Event::CheckResult(check))
                    .map(drop)
                    .unwrap()
            }
            event => log.append_event(event).map(drop).unwrap(),
        }
    }
    drop(log);
    seal::seal_run(&run, run_key, Vec::new()).unwrap();
}
