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

fn self_test_run(dir: &std::path::Path, run_id: &str, extra: &[&str]) -> Ran {
    zone_writable(dir);
    let mut args = vec![
        "run",
        "--no-baseline",
        "--self-test",
        "--json",
        "--run-id",
        run_id,
        "--max-iterations",
        "1",
        "--exec",
        "true",
        "--check",
        "true",
    ];
    args.extend_from_slice(extra);
    loopexec(dir, &args)
}

fn self_test_event(dir: &std::path::Path, run_id: &str) -> Value {
    events(dir, run_id)
        .into_iter()
        .find(|e| e["type"] == "self_test")
        .expect("a self_test event")
}

#[test]
fn the_self_test_on_the_builtin_policies_holds_and_the_run_goes_on() {
    let dir = workdir();
    let r = self_test_run(dir.path(), "st", &[]);
    assert_eq!(r.code, 11, "{r:?}");
    let record = self_test_event(dir.path(), "st");
    assert_eq!(record["held"], true, "{record}");
    let roles: Vec<&str> = record["zones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["agent", "check"]);
    for zone in record["zones"].as_array().unwrap() {
        let ops: Vec<&str> = zone["operations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["operation"].as_str().unwrap())
            .collect();
        assert_eq!(
            ops,
            [
                "write_outside",
                "write_outside",
                "connect",
                "ptrace",
                "mount",
                "setuid_bit",
                "unshare_user"
            ],
            "{zone}"
        );
        for op in zone["operations"].as_array().unwrap() {
            assert_eq!(op["expected"], "fail", "{op}");
            let refused = op["errno"].is_number();
            assert!(refused || op["reached_host"] == false, "{op}");
        }
        for op in ["ptrace", "mount", "setuid_bit", "unshare_user"] {
            let o = zone["operations"]
                .as_array()
                .unwrap()
                .iter()
                .find(|o| o["operation"] == op)
                .unwrap();
            assert_eq!(o["observed"], "EPERM", "{o}");
        }
        assert_eq!(zone["enforcement"]["no_new_privs"], 1, "{zone}");
    }
    assert!(
        events(dir.path(), "st")
            .iter()
            .any(|e| e["type"] == "exec_result"),
        "the agent ran after the self-test held"
    );
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let v = loopexec(dir.path(), &["verify", "--json", "st", "--pubkey", &pubkey]);
    assert_eq!(v.code, 0, "{v:?}");
    let report = loopexec(dir.path(), &["report", "st"]);
    assert!(
        report.stdout.contains(
            "self-test held: agent zone: 7 of 7 operations refused; check zone: 7 of 7 operations refused"
        ),
        "{}",
        report.stdout
    );
}

#[test]
fn a_policy_granting_a_write_outside_the_workspace_halts_the_run_at_its_self_test() {
    let outer = workdir();
    zone_writable(outer.path());
    let work = outer.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let outer_path = path_str(outer.path());
    let policy = include_str!("../policies/agent.toml").replacen(
        "read_write = []",
        &format!("read_write = [\"{outer_path}\"]"),
        1,
    );
    let policy_file = outer.path().join("leaky.toml");
    std::fs::write(&policy_file, policy).unwrap();
    let r = self_test_run(&work, "lk", &["--policy", &path_str(&policy_file)]);
    assert_eq!(r.code, 30, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "isolation_unsatisfiable");
    let leaked = format!("{outer_path}/.loopexec-self-test-lk");
    assert_eq!(
        r.json()["run"]["detail"],
        format!("self-test: the agent zone does not hold: write_outside ({leaked}) succeeded")
    );
    assert!(
        !std::path::Path::new(&leaked).exists(),
        "the probe's file is removed from the host"
    );
    let record = self_test_event(&work, "lk");
    assert_eq!(record["held"], false);
    assert_eq!(record["zones"][0]["operations"][0]["reached_host"], true);
    assert!(
        !events(&work, "lk")
            .iter()
            .any(|e| e["type"] == "exec_result"),
        "no agent ran"
    );
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let v = loopexec(&work, &["verify", "--json", "lk", "--pubkey", &pubkey]);
    assert_eq!(v.code, 0, "{v:?}");
}

#[test]
fn self_test_true_in_loop_toml_runs_the_self_test_and_pins_it() {
    let dir = workdir();
    zone_writable(dir.path());
    write(
        dir.path(),
        "loop.toml",
        "exec = \"true\"\ncheck = \"true\"\nbaseline = false\nmax_iterations = 1\nself_test = true\n",
    );
    let r = loopexec(dir.path(), &["run", "--json", "--run-id", "lt"]);
    assert_eq!(r.code, 11, "{r:?}");
    let events = events(dir.path(), "lt");
    assert_eq!(events[0]["config"]["self_test"], true);
    assert_eq!(self_test_event(dir.path(), "lt")["held"], true);
}
