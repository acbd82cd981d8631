//! Signed receipts through the binary: every run's key is endorsed by the operator key, every
//! halted run is sealed, and `verify` refuses any tampering with exit 13 (integrity).
mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A run that halts at iteration 2 (in place its green check is `human_required`: no guard can
/// judge an in-place step; a run is sealed whatever its halt). Each run counts in its own file,
/// so that a second run in the same directory does not pass its t0 baseline.
fn halted_run(dir: &Path, id: &str) {
    let (exec, check) = (
        format!("echo $LOOPEXEC_ITERATION > iteration-{id}"),
        format!("test \"$(cat iteration-{id})\" -ge 2"),
    );
    let r = loopexec(
        dir,
        &[
            "run",
            "--json",
            "--run-id",
            id,
            "--isolation",
            "none",
            "--exec",
            &exec,
            "--check",
            &check,
        ],
    );
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["iteration"].as_u64()
        ),
        (11, Some("human_required"), Some(2)),
        "{r:?}"
    );
}

fn pubkey() -> String {
    path_str(&key_dir().join("operator.pub"))
}

fn verify(dir: &Path, id: &str, key: &str) -> Ran {
    loopexec(dir, &["verify", "--json", id, "--pubkey", key])
}

fn failed_checks(r: &Ran) -> Vec<String> {
    r.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap().to_string())
        .collect()
}

fn receipt(dir: &Path, id: &str) -> PathBuf {
    run_dir(dir, id).join("receipt.jsonl")
}

#[test]
fn a_halted_run_is_sealed_and_verifies_offline() {
    let dir = workdir();
    halted_run(dir.path(), "r");
    let types: Vec<String> = all_events(dir.path(), "r")
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        &types[..2],
        ["run_start", "run_key"],
        "the run key is endorsed right after run_start"
    );
    let r = verify(dir.path(), "r", &pubkey());
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["verified"], true);
    assert_eq!(v["halt_reason"], "human_required");
    assert!(run_dir(dir.path(), "r").join("envelope.dsse.json").exists());
}

#[test]
fn a_resumed_run_endorses_its_new_run_key_and_verifies() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--once",
            "--run-id",
            "p",
            "--isolation",
            "none",
            "--exec",
            "echo $LOOPEXEC_ITERATION > iteration",
            "--check",
            "test \"$(cat iteration)\" -ge 2",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let r = loopexec(dir.path(), &["run", "--json", "--resume", "p"]);
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (11, Some("human_required")),
        "{r:?}"
    );
    let keys = all_events(dir.path(), "p")
        .into_iter()
        .filter(|e| e["type"] == "run_key")
        .count();
    assert_eq!(keys, 2);
    assert_eq!(verify(dir.path(), "p", &pubkey()).code, 0);
}

#[test]
fn a_tampered_receipt_line_fails_verify() {
    let dir = workdir();
    halted_run(dir.path(), "r");
    let path = receipt(dir.path(), "r");
    let text =
        std::fs::read_to_string(&path)
            .unwrap()
            .replacen("\"check_exit\":1", "\"check_exit\":0", 1);
    std::fs::write(&path, text).unwrap();
    let r = verify(dir.path(), "r", &pubkey());
    assert_eq!(r.code, 13);
    assert_eq!(r.json()["status"], "failed");
    assert_eq!(failed_checks(&r), ["verify_receipt_chain"]);
}

#[test]
fn reordered_receipt_lines_fail_verify() {
    let dir = workdir();
    halted_run(dir.path(), "r");
    let path = receipt(dir.path(), "r");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.swap(2, 3);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let r = verify(dir.path(), "r", &pubkey());
    assert_eq!(r.code, 13);
    assert_eq!(failed_checks(&r), ["verify_receipt_chain"]);
}

#[test]
fn an_envelope_swapped_in_from_another_run_fails_verify() {
    let dir = workdir();
    halted_run(dir.path(), "a");
    halted_run(dir.path(), "b");
    std::fs::copy(
        run_dir(dir.path(), "b").join("envelope.dsse.json"),
        run_dir(dir.path(), "a").join("envelope.dsse.json"),
    )
    .unwrap();
    let r = verify(dir.path(), "a", &pubkey());
    assert_eq!(r.code, 13);
    assert_eq!(failed_checks(&r), ["verify_envelope_signature"]);
}

#[test]
fn a_receipt_endorsed_by_an_unknown_key_fails_verify() {
    let dir = workdir();
    halted_run(dir.path(), "r");
    let other = workdir();
    assert_eq!(
        loopexec(
            dir.path(),
            &["keygen", "--json", "--dir", &path_str(other.path())]
        )
        .code,
        0
    );
    let r = verify(
        dir.path(),
        "r",
        &path_str(&other.path().join("operator.pub")),
    );
    assert_eq!(r.code, 13);
    assert_eq!(failed_checks(&r), ["verify_run_key_endorsement"]);
}

#[test]
fn verify_without_a_pubkey_checks_against_the_operators_own_key_and_says_so() {
    let dir = workdir();
    halted_run(dir.path(), "r");
    let r = loopexec(dir.path(), &["verify", "--json", "r"]);
    assert_eq!(r.code, 0, "{r:?}");
    let key = r.json()["key"].clone();
    assert_eq!(
        (key["source"].as_str(), key["path"].as_str()),
        (
            Some("operator_default"),
            Some(path_str(&key_dir().join("operator.pub")).as_str())
        )
    );
}

#[test]
fn a_malformed_envelope_fails_verify_with_its_name() {
    let dir = workdir();
    halted_run(dir.path(), "r");
    std::fs::write(
        run_dir(dir.path(), "r").join("envelope.dsse.json"),
        b"{\"payloadType\":",
    )
    .unwrap();
    let r = verify(dir.path(), "r", &pubkey());
    assert_eq!(r.code, 13);
    assert_eq!(failed_checks(&r), ["verify_envelope_format"]);
}

#[test]
fn a_malformed_public_key_is_an_input_error() {
    let dir = workdir();
    halted_run(dir.path(), "r");
    std::fs::write(dir.path().join("bad.pub"), b"not a key").unwrap();
    let r = verify(dir.path(), "r", &path_str(&dir.path().join("bad.pub")));
    assert_eq!(r.code, 20);
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("not an Ed25519 public key"));
}

#[test]
fn attest_adds_the_operator_signature_and_the_run_still_verifies() {
    let dir = workdir();
    halted_run(dir.path(), "r");
    let key = path_str(&key_dir().join("operator.key"));
    let r = loopexec(dir.path(), &["attest", "--json", "r", "--key", &key]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = verify(dir.path(), "r", &pubkey()).json();
    assert_eq!(
        (v["verified"].as_bool(), v["verify"]["attested"].as_bool()),
        (Some(true), Some(true))
    );
}

#[test]
fn keygen_refuses_to_overwrite_a_key_pair() {
    let dir = workdir();
    let keys = workdir();
    assert_eq!(
        loopexec(
            dir.path(),
            &["keygen", "--json", "--dir", &path_str(keys.path())]
        )
        .code,
        0
    );
    let before = std::fs::read(keys.path().join("operator.key")).unwrap();
    let r = loopexec(
        dir.path(),
        &["keygen", "--json", "--dir", &path_str(keys.path())],
    );
    assert_eq!(r.code, 20);
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("--force"));
    assert_eq!(
        std::fs::read(keys.path().join("operator.key")).unwrap(),
        before
    );
}

#[test]
fn no_private_key_material_is_left_in_the_state_dir() {
    let dir = workdir();
    halted_run(dir.path(), "r");
    let mut stack = vec![dir.path().join(".loopexec")];
    while let Some(p) = stack.pop() {
        for entry in std::fs::read_dir(&p).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                let text =
                    String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap()).into_owned();
                assert!(
                    !text.contains("PRIVATE KEY"),
                    "{} holds a private key",
                    entry.path().display()
                );
            }
        }
    }
    let v: Value = serde_json::from_slice(
        &std::fs::read(run_dir(dir.path(), "r").join("envelope.dsse.json")).unwrap(),
    )
    .unwrap();
    assert!(v["signatures"][0]["keyid"]
        .as_str()
        .unwrap()
        .starts_with("run:"));
}
