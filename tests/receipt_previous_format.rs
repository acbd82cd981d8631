//! Receipts written before events were typed (the format of commit ef9c555, schema 1 without a
//! `schema` field) still read and verify: `report`, `explain-halt` and `verify` of each say
//! exactly what that version's binary said (tests/fixtures/receipts_v1/make.sh wrote both).
mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(run: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/receipts_v1")
        .join(run)
}

/// A command's JSON output without its `receipt` path (the fixture's absolute path differs
/// between checkouts).
fn without_path(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("receipt");
    v
}

fn recorded(run: &str, command: &str) -> Value {
    without_path(
        serde_json::from_slice(
            &std::fs::read(fixture(run).join(format!("{command}.json"))).unwrap(),
        )
        .unwrap(),
    )
}

/// Take `verify`'s `halt_derivation` check (added since those versions) out of its JSON output,
/// asserting it passed with `derivation` as its detail: the halt of an earlier version's receipt
/// is replayed from its observations too, and what it lacks to replay a judgement (the progress
/// limits a receipt before progress events never pinned) is named.
fn halt_derived(now: &mut Value, derivation: &str) {
    let checks = now["verify"]["checks"].as_array_mut().unwrap();
    let at = checks
        .iter()
        .position(|c| c["name"] == "halt_derivation")
        .expect("a halt_derivation check");
    let check = checks.remove(at);
    assert_eq!(
        check,
        serde_json::json!({"name": "halt_derivation", "ok": true, "detail": derivation})
    );
}

/// Take `report`'s `halt_derivation` (added since those versions) out of its JSON output,
/// asserting it is the derivation `verify` passes with.
fn report_derived(now: &mut Value, derivation: &str) {
    let found = now["report"]
        .as_object_mut()
        .unwrap()
        .remove("halt_derivation");
    assert_eq!(
        found,
        Some(
            serde_json::json!({"consistent": true, "replayed": !derivation.contains("not replayable"), "detail": derivation})
        )
    );
}

fn reads_as_before(run: &str, derivation: &str) {
    let dir = workdir();
    let receipt = path_str(&fixture(run).join("receipt.jsonl"));
    for command in ["report", "explain-halt"] {
        let now = loopexec(dir.path(), &[command, "--json", "--receipt", &receipt]);
        assert_eq!(now.code, 0, "{now:?}");
        let mut now = without_path(now.json());
        if command == "report" {
            report_derived(&mut now, derivation);
        }
        assert_eq!(now, recorded(run, command), "{command} of {run}");
    }
    let pubkey = path_str(&fixture("operator.pub"));
    let verified = loopexec(
        dir.path(),
        &[
            "verify",
            "--json",
            &path_str(&fixture(run)),
            "--pubkey",
            &pubkey,
        ],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
    let mut now = verified.json();
    // Added since that version: which kind of receipt was checked, and with which key.
    assert_eq!(
        now.as_object_mut().unwrap().remove("kind"),
        Some(Value::from("run")),
        "verify of {run}"
    );
    let key = now
        .as_object_mut()
        .unwrap()
        .remove("key")
        .expect("the key verify used");
    assert_eq!(
        (key["source"].as_str(), key["path"].as_str()),
        (Some("pubkey"), Some(pubkey.as_str())),
        "verify of {run}"
    );
    halt_derived(&mut now, derivation);
    assert_eq!(now, recorded(run, "verify"), "verify of {run}");
}

#[test]
fn a_paused_and_resumed_in_place_run_with_a_failing_set_and_credentials_reads_and_verifies_as_before(
) {
    reads_as_before(
        "inplace",
        "success_condition_met follows from the recorded observations (3 iteration decision(s) re-derived); judgement(s) not replayed: \
         progress of iterations 1, 2, 3 (its run_start pins no progress limits (a receipt of an earlier version, before progress events))",
    );
}

#[test]
fn a_delivered_detached_run_reads_and_verifies_as_before() {
    reads_as_before(
        "detached",
        "success_condition_met follows from the recorded observations (2 iteration decision(s) re-derived); judgement(s) not replayed: \
         progress of iterations 1, 2 (its run_start pins no progress limits (a receipt of an earlier version, before progress events))",
    );
}

#[test]
fn a_blocked_detached_run_reads_and_verifies_as_before() {
    reads_as_before("blocked", "blocked_path_modified follows from the recorded observations (1 iteration decision(s) re-derived)");
}

/// A receipt from before doctest ids lost their line numbers (commit e340552; written by
/// tests/fixtures/receipts_doctest_lines/make.sh): its sets hold `src/lib.rs - add (line 3)`.
/// It still verifies, and `report`, `explain-halt` and `verify` say what that binary said.
#[test]
fn a_receipt_with_line_numbered_doctest_ids_reads_and_verifies_as_before() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/receipts_doctest_lines");
    let run = root.join("doctests");
    let text = std::fs::read_to_string(run.join("receipt.jsonl")).unwrap();
    assert!(
        text.contains("\"doc/demo::src/lib.rs - add (line 3)\""),
        "the fixture holds a line-numbered doctest id"
    );
    let dir = workdir();
    let receipt = path_str(&run.join("receipt.jsonl"));
    let recorded = |command: &str| {
        without_path(
            serde_json::from_slice(&std::fs::read(run.join(format!("{command}.json"))).unwrap())
                .unwrap(),
        )
    };
    for command in ["report", "explain-halt"] {
        let now = loopexec(dir.path(), &[command, "--json", "--receipt", &receipt]);
        assert_eq!(now.code, 0, "{now:?}");
        let mut now = without_path(now.json());
        if command == "report" {
            report_derived(&mut now, "human_required follows from the recorded observations (1 iteration decision(s) re-derived)");
        }
        assert_eq!(now, recorded(command), "{command}");
    }
    let verified = loopexec(
        dir.path(),
        &[
            "verify",
            "--json",
            &path_str(&run),
            "--pubkey",
            &path_str(&root.join("operator.pub")),
        ],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
    assert_eq!(verified.json()["verified"], true);
    let mut now = verified.json();
    // Added since that version: the key verify used.
    assert_eq!(
        now.as_object_mut()
            .unwrap()
            .remove("key")
            .map(|k| k["source"].clone()),
        Some(Value::from("pubkey"))
    );
    halt_derived(&mut now, "human_required follows from the recorded observations (1 iteration decision(s) re-derived)");
    assert_eq!(now, recorded("verify"));
}
