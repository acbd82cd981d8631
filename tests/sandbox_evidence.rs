//! Enforcement evidence (docs/zones.md, "Enforcement evidence"): every native zone start records
//! what the kernel applied, read back from inside the zone, in the signed receipt; `verify` fails
//! when it is edited, and `report` shows it.
mod common;
use common::*;
use serde_json::Value;

/// The built-in agent and exec policies' `resources.memory_bytes` and `pids_max`.
const POLICY_MEMORY: &str = "2147483648";
const POLICY_PIDS: &str = "512";

fn sandboxed_run(dir: &std::path::Path, run_id: &str) -> Vec<Value> {
    zone_writable(dir);
    let r = loopexec(
        dir,
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            run_id,
            "--max-iterations",
            "1",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    // A green check in place is `human_required` (no guard compares the change with t0).
    assert_eq!(r.code, 11, "{r:?}");
    events(dir, run_id)
}

fn enforcement_of<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    let e = events
        .iter()
        .find(|e| e["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {events:?}"));
    &e["enforcement"]
}

/// The zone's uid as the tests expect it mapped: the policy's zone uid for root, else ours.
fn zone_uid() -> u64 {
    if is_root() {
        60200
    } else {
        nix::unistd::geteuid().as_raw() as u64
    }
}

#[test]
fn each_zone_start_records_what_the_kernel_applied_read_back_from_inside() {
    let dir = workdir();
    let events = sandboxed_run(dir.path(), "ev");
    for kind in ["exec_result", "check_result"] {
        let e = enforcement_of(&events, kind);
        for ns in ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"] {
            assert_eq!(e["namespaces"][ns]["new"], true, "{kind} {ns}: {e}");
            assert_ne!(
                e["namespaces"][ns]["zone"], e["namespaces"][ns]["supervisor"],
                "{kind} {ns}"
            );
        }
        assert_eq!(
            e["uid_map"],
            serde_json::json!([{"inside": zone_uid(), "outside": zone_uid(), "count": 1}]),
            "{kind}"
        );
        assert_eq!(e["no_new_privs"], 1, "{kind}");
        assert_eq!(e["seccomp_mode"], 2, "{kind}");
        assert_eq!(e["seccomp_programs"]["programs"], 3, "{kind}");
        assert!(
            e["seccomp_filters"].as_u64().unwrap() >= 3,
            "{kind}: {}",
            e["seccomp_filters"]
        );
        assert_eq!(e["seccomp_programs"]["sha256"].as_str().unwrap().len(), 64);
        for set in [
            "effective",
            "permitted",
            "inheritable",
            "bounding",
            "ambient",
        ] {
            assert_eq!(e["capabilities"][set], 0, "{kind} {set}");
        }
        let cgroup = &e["cgroup"];
        assert_eq!(cgroup["member"], true, "{kind}: {cgroup}");
        let memory = cgroup["limits"]
            .get("memory.max")
            .or_else(|| cgroup["limits"].get("memory.limit_in_bytes"));
        assert_eq!(
            memory.and_then(Value::as_str),
            Some(POLICY_MEMORY),
            "{kind}"
        );
        assert_eq!(cgroup["limits"]["pids.max"], POLICY_PIDS, "{kind}");
        assert_eq!(e["unread"], serde_json::json!([]), "{kind}");
    }
    let landlock = &enforcement_of(&events, "exec_result")["landlock"];
    assert!(
        matches!(
            landlock["status"].as_str(),
            Some("fully_enforced" | "partially_enforced")
        ),
        "{landlock}"
    );
    assert_eq!(landlock["rules_sha256"].as_str().unwrap().len(), 64);
}

#[test]
fn an_edited_enforcement_record_fails_verify_on_the_chain() {
    let dir = workdir();
    sandboxed_run(dir.path(), "ed");
    let path = run_dir(dir.path(), "ed").join("receipt.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"no_new_privs\":1"));
    std::fs::write(
        &path,
        text.replacen("\"no_new_privs\":1", "\"no_new_privs\":0", 1),
    )
    .unwrap();
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let r = loopexec(dir.path(), &["verify", "--json", "ed", "--pubkey", &pubkey]);
    assert_eq!(r.code, 13, "{r:?}");
    let failed: Vec<Value> = r.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].clone())
        .collect();
    assert_eq!(failed, ["verify_receipt_chain"]);
}

#[test]
fn report_and_verify_show_the_enforcement_of_each_zone() {
    let dir = workdir();
    sandboxed_run(dir.path(), "rp");
    let r = loopexec(dir.path(), &["report", "--json", "rp"]);
    assert_eq!(r.code, 0, "{r:?}");
    let zones = &r.json()["report"]["enforcement"];
    assert_eq!(zones["zone_starts"], 2, "{zones}");
    assert_eq!(zones["all_hold"], true, "{zones}");
    let text = loopexec(dir.path(), &["report", "rp"]);
    assert!(
        text.stdout
            .contains("enforcement: 2 zone starts read back, every one as expected"),
        "{}",
        text.stdout
    );
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let v = loopexec(dir.path(), &["verify", "--json", "rp", "--pubkey", &pubkey]);
    assert_eq!(v.code, 0, "{v:?}");
    let check = v.json()["verify"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "enforcement")
        .cloned()
        .expect("an enforcement check");
    assert_eq!(check["ok"], true, "{check}");
}
