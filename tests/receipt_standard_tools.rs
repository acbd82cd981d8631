//! The sealed envelope and the run-key endorsement verify with OpenSSL alone, following the steps
//! of docs/signing.md: a third party needs no loopexec binary to check a receipt's signatures.

use loopexec::receipt::chain::ReceiptLog;
use loopexec::receipt::dsse::{pae, Envelope};
use loopexec::receipt::keys::{endorsement_message, generate_operator_key, OperatorKey, RunKey};
use loopexec::receipt::seal::{
    endorse_run_key, seal_run, ENVELOPE_FILE, RECEIPT_FILE, RUN_PUBKEY_FILE,
};
use loopexec::safefs::SafeDir;
use serde_json::{json, Map, Value};
use std::path::Path;
use std::process::Command;

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn openssl_verifies(pubkey: &Path, message: &Path, signature: &Path) -> bool {
    Command::new("openssl")
        .args(["pkeyutl", "-verify", "-pubin", "-inkey"])
        .arg(pubkey)
        .arg("-rawin")
        .arg("-in")
        .arg(message)
        .arg("-sigfile")
        .arg(signature)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn the_envelope_and_the_endorsement_verify_with_openssl() {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("openssl not installed; ci/setup.sh installs it");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let generated = generate_operator_key(&tmp.path().join("keys"), false).unwrap();
    let operator = OperatorKey::load(&generated.private_key).unwrap();
    let run_path = tmp.path().join("run");
    std::fs::create_dir(&run_path).unwrap();
    let run_dir = SafeDir::open(&run_path).unwrap();
    let mut log = ReceiptLog::create(&run_dir, RECEIPT_FILE).unwrap();
    log.append(
        "run_start",
        obj(json!({"run_id": "r", "mode": "check_fixpoint"})),
    )
    .unwrap();
    let run_start_hash = log.head().to_string();
    let run_key = RunKey::mint();
    let run_public = run_key.verifying_key();
    endorse_run_key(&mut log, "r", &run_key, &operator).unwrap();
    log.append(
        "halt",
        obj(json!({"halt_reason": "max_iterations_reached"})),
    )
    .unwrap();
    seal_run(&run_dir, run_key, vec![]).unwrap();

    // Envelope: PAE(payloadType, payload) signed by the run key in run-key.pub.
    let envelope: Envelope =
        serde_json::from_slice(&std::fs::read(run_path.join(ENVELOPE_FILE)).unwrap()).unwrap();
    let payload = envelope.payload_bytes().unwrap();
    std::fs::write(
        tmp.path().join("pae.bin"),
        pae(&envelope.payload_type, &payload),
    )
    .unwrap();
    std::fs::write(
        tmp.path().join("env.sig"),
        loopexec::receipt::dsse::unb64(&envelope.signatures[0].sig).unwrap(),
    )
    .unwrap();
    assert!(openssl_verifies(
        &run_path.join(RUN_PUBKEY_FILE),
        &tmp.path().join("pae.bin"),
        &tmp.path().join("env.sig")
    ));

    // Endorsement: context NUL run_id NUL run-key-hex NUL sha256(run_start line), by operator.pub.
    let receipt = std::fs::read_to_string(run_path.join(RECEIPT_FILE)).unwrap();
    let run_key_event: Value = serde_json::from_str(receipt.lines().nth(1).unwrap()).unwrap();
    std::fs::write(
        tmp.path().join("endorse.msg"),
        endorsement_message("r", &run_public, &run_start_hash),
    )
    .unwrap();
    let sig =
        loopexec::receipt::dsse::unb64(run_key_event["endorsement"].as_str().unwrap()).unwrap();
    std::fs::write(tmp.path().join("endorse.sig"), sig).unwrap();
    assert!(openssl_verifies(
        &generated.public_key,
        &tmp.path().join("endorse.msg"),
        &tmp.path().join("endorse.sig")
    ));

    // And a flipped byte in the message does not verify.
    let mut bad = pae(&envelope.payload_type, &payload);
    bad[10] ^= 1;
    std::fs::write(tmp.path().join("pae.bin"), bad).unwrap();
    assert!(!openssl_verifies(
        &run_path.join(RUN_PUBKEY_FILE),
        &tmp.path().join("pae.bin"),
        &tmp.path().join("env.sig")
    ));
}
