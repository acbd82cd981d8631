//! Endorsing a run key and sealing a finished run.
//!
//! At run start (and again at each resume, since a minted key never outlives its process) the
//! operator key signs the run key; the endorsement is a `run_key` receipt event. At halt the run is
//! sealed: a DSSE envelope over an in-toto Statement whose subjects are the receipt (and the end
//! state when known) and whose predicate is derived from the receipt. The run key is consumed.

use super::chain::{self, LogError, ReceiptLog};
use super::dsse::{self, Envelope, EnvelopeSignature, IN_TOTO_PAYLOAD_TYPE};
use super::events::{Event, EventError, Recorded, RunKeyEndorsement};
use super::history::History;
use super::keys::{self, OperatorKey, RunKey};
use super::statement::{self, PredicateError};
use crate::safefs::{SafeDir, SafeFsError};
use serde_json::Value;

pub const RECEIPT_FILE: &str = "receipt.jsonl";
pub const ENVELOPE_FILE: &str = "envelope.dsse.json";
/// The last run key as SPKI PEM, for verifying the envelope with standard tools.
pub const RUN_PUBKEY_FILE: &str = "run-key.pub";
pub const ENVELOPE_MAX_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error(transparent)]
    Fs(#[from] SafeFsError),
    #[error(transparent)]
    Chain(#[from] chain::ChainError),
    #[error(transparent)]
    Events(#[from] EventError),
    #[error(transparent)]
    Predicate(#[from] PredicateError),
    #[error("the sealing key is not the last run key endorsed in the receipt")]
    WrongKey,
    #[error("could not encode the envelope: {0}")]
    Encode(String),
}

/// `keyid` of a run key signature.
pub fn run_keyid(key: &ed25519_dalek::VerifyingKey) -> String {
    format!("run:{}", hex::encode(key.as_bytes()))
}

/// `keyid` of an operator signature.
pub fn operator_keyid(key: &ed25519_dalek::VerifyingKey) -> String {
    format!("operator:{}", keys::fingerprint(key))
}

/// Append the `run_key` event: the run's public key endorsed by the operator key.
pub fn endorse_run_key(log: &mut ReceiptLog, run_id: &str, run_key: &RunKey, operator: &OperatorKey) -> Result<Recorded, LogError> {
    let public = run_key.verifying_key();
    let message = keys::endorsement_message(run_id, &public, log.head());
    log.append_event(&Event::RunKey(RunKeyEndorsement {
        public_key: hex::encode(public.as_bytes()),
        operator_key: keys::fingerprint(&operator.verifying_key()),
        endorsement: dsse::b64(&operator.sign(&message).to_bytes()),
    }))
}

/// What sealing produced.
#[derive(Debug, Clone)]
pub struct SealSummary {
    pub envelope_sha256: String,
    pub receipt_sha256: String,
    pub run_key: String,
}

/// Seal a finished run in `run_dir`: read and verify the receipt, derive the predicate, sign the
/// statement with `run_key` (which must be the last endorsed key), write the envelope atomically.
/// `extra_subjects` are additional `{name, digest}` subjects (e.g. the end-state tree).
pub fn seal_run(run_dir: &SafeDir, run_key: RunKey, extra_subjects: Vec<Value>) -> Result<SealSummary, SealError> {
    let receipt = run_dir.read(RECEIPT_FILE, chain::MAX_RECEIPT_BYTES)?;
    let verified = chain::verify(&receipt)?;
    let history = History::of_lines(&verified.events)?;
    let public = run_key.verifying_key();
    if history.run_keys.last().map(String::as_str) != Some(hex::encode(public.as_bytes()).as_str()) {
        return Err(SealError::WrongKey);
    }
    let predicate = statement::predicate(&history)?;
    let mut subjects = vec![statement::subject(RECEIPT_FILE, "sha256", &verified.file_sha256)];
    subjects.extend(extra_subjects);
    sign_statement(run_dir, run_key, &statement::statement(subjects, predicate), verified.file_sha256)
}

/// Sign `stmt` with `run_key` (consumed) and write the envelope and the run key's PEM into
/// `run_dir` atomically: the last step of sealing a run, and of sealing a probe's receipt
/// (`receipt::probe`).
pub fn sign_statement(run_dir: &SafeDir, run_key: RunKey, stmt: &Value, receipt_sha256: String) -> Result<SealSummary, SealError> {
    let public = run_key.verifying_key();
    let payload = serde_json::to_vec(stmt).map_err(|e| SealError::Encode(e.to_string()))?;
    let signature = run_key.sign(&dsse::pae(IN_TOTO_PAYLOAD_TYPE, &payload));
    drop(run_key);
    let envelope = Envelope {
        payload_type: IN_TOTO_PAYLOAD_TYPE.into(),
        payload: dsse::b64(&payload),
        signatures: vec![EnvelopeSignature { keyid: run_keyid(&public), sig: dsse::b64(&signature.to_bytes()) }],
    };
    let bytes = serde_json::to_vec_pretty(&envelope).map_err(|e| SealError::Encode(e.to_string()))?;
    run_dir.write_atomic(ENVELOPE_FILE, &bytes)?;
    let pem = ed25519_dalek::pkcs8::EncodePublicKey::to_public_key_pem(&public, ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .map_err(|e| SealError::Encode(e.to_string()))?;
    run_dir.write_atomic(RUN_PUBKEY_FILE, pem.as_bytes())?;
    Ok(SealSummary {
        envelope_sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
        receipt_sha256,
        run_key: hex::encode(public.as_bytes()),
    })
}

