//! Endorsing a run key and sealing a finished run.
//!
//! At run start (and again at each resume, since a minted key never outlives its process) the
//! operator key signs the run key; the endorsement is a `run_key` receipt event. At halt the run is
//! sealed: a DSSE envelope over an in-toto Statement whose subjects are the receipt (and the end
//! state when known) and whose predicate is derived from the receipt. The run key is consumed.
//!
//! A supervisor that dies between the `halt` line and the seal takes its run key with it: the
//! `run --resume` that finishes the seal appends a `seal_resumed` event and endorses a run key of
//! its own after the halt. [`after_halt`] is the one rule for what may follow a halt (sealing,
//! resuming and verifying all apply it): nothing, or only such seal completions.

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
    #[error("{0}")]
    AfterHalt(String),
}

/// What a receipt holds after its `halt` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterHalt {
    /// The receipt records no halt.
    NotHalted,
    /// Nothing follows the halt: its own supervisor sealed it (or died before it could).
    Nothing,
    /// Only seal completions follow: `resumes` `seal_resumed` events, each followed by its
    /// `run_key` unless that resume died before endorsing one; `keyed`: the last one did.
    Completions { resumes: usize, keyed: bool },
}

/// What follows the receipt's first `halt`, by the one rule: each event after it is a
/// `seal_resumed`, or a `run_key` right after a `seal_resumed`. `Err` names the first line that
/// breaks the rule (a second halt, an iteration, a key no resume minted).
pub fn after_halt(records: &[Recorded]) -> Result<AfterHalt, String> {
    let Some(at) = records
        .iter()
        .position(|r| matches!(r.event, Event::Halt(_)))
    else {
        return Ok(AfterHalt::NotHalted);
    };
    let mut resumes = 0;
    let mut keyed = false;
    let mut previous_resumed = false;
    for (i, record) in records.iter().enumerate().skip(at + 1) {
        match &record.event {
            Event::SealResumed(_) => {
                resumes += 1;
                keyed = false;
                previous_resumed = true;
            }
            Event::RunKey(_) if previous_resumed => {
                keyed = true;
                previous_resumed = false;
            }
            Event::RunKey(_) => {
                return Err(format!(
                    "receipt line {}: a run_key after the halt (line {}) that does not directly follow a seal_resumed",
                    i + 1,
                    at + 1
                ))
            }
            _ => {
                return Err(format!(
                    "receipt line {}: event {} after the halt (line {}); only a seal_resumed and its run_key may follow a halt",
                    i + 1,
                    crate::inert::inert(record.kind()),
                    at + 1
                ))
            }
        }
    }
    Ok(match resumes {
        0 => AfterHalt::Nothing,
        _ => AfterHalt::Completions { resumes, keyed },
    })
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
pub fn endorse_run_key(
    log: &mut ReceiptLog,
    run_id: &str,
    run_key: &RunKey,
    operator: &OperatorKey,
) -> Result<Recorded, LogError> {
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
pub fn seal_run(
    run_dir: &SafeDir,
    run_key: RunKey,
    extra_subjects: Vec<Value>,
) -> Result<SealSummary, SealError> {
    let receipt = run_dir.read(RECEIPT_FILE, chain::MAX_RECEIPT_BYTES)?;
    let verified = chain::verify(&receipt)?;
    let records = Recorded::decode_all(&verified.events)?;
    match after_halt(&records).map_err(SealError::AfterHalt)? {
        AfterHalt::Completions { keyed: false, .. } => {
            return Err(SealError::AfterHalt(
                "the last seal_resumed after the halt has no run_key after it".into(),
            ))
        }
        AfterHalt::NotHalted | AfterHalt::Nothing | AfterHalt::Completions { .. } => {}
    }
    let history = History::fold(&records);
    let public = run_key.verifying_key();
    if history.run_keys.last().map(String::as_str) != Some(hex::encode(public.as_bytes()).as_str())
    {
        return Err(SealError::WrongKey);
    }
    let predicate = statement::predicate(&history)?;
    let mut subjects = vec![statement::subject(
        RECEIPT_FILE,
        "sha256",
        &verified.file_sha256,
    )];
    subjects.extend(extra_subjects);
    sign_statement(
        run_dir,
        run_key,
        &statement::statement(subjects, predicate),
        verified.file_sha256,
    )
}

/// Sign `stmt` with `run_key` (consumed) and write the envelope and the run key's PEM into
/// `run_dir` atomically: the last step of sealing a run, and of sealing a probe's receipt
/// (`receipt::probe`).
pub fn sign_statement(
    run_dir: &SafeDir,
    run_key: RunKey,
    stmt: &Value,
    receipt_sha256: String,
) -> Result<SealSummary, SealError> {
    let public = run_key.verifying_key();
    let payload = serde_json::to_vec(stmt).map_err(|e| SealError::Encode(e.to_string()))?;
    let signature = run_key.sign(&dsse::pae(IN_TOTO_PAYLOAD_TYPE, &payload));
    drop(run_key);
    let envelope = Envelope {
        payload_type: IN_TOTO_PAYLOAD_TYPE.into(),
        payload: dsse::b64(&payload),
        signatures: vec![EnvelopeSignature {
            keyid: run_keyid(&public),
            sig: dsse::b64(&signature.to_bytes()),
        }],
    };
    let bytes =
        serde_json::to_vec_pretty(&envelope).map_err(|e| SealError::Encode(e.to_string()))?;
    run_dir.write_atomic(ENVELOPE_FILE, &bytes)?;
    let pem = ed25519_dalek::pkcs8::EncodePublicKey::to_public_key_pem(
        &public,
        ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF,
    )
    .map_err(|e| SealError::Encode(e.to_string()))?;
    run_dir.write_atomic(RUN_PUBKEY_FILE, pem.as_bytes())?;
    Ok(SealSummary {
        envelope_sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
        receipt_sha256,
        run_key: hex::encode(public.as_bytes()),
    })
}

#[cfg(test)]
mod tests {
    use super::{after_halt, AfterHalt};
    use crate::halt::HaltReason;
    use crate::receipt::events::{sample, Event, Recorded, RunKeyEndorsement, SealResumed};

    fn recorded(event: Event) -> Recorded {
        let mut line = event.fields().unwrap();
        line.insert("type".into(), event.kind().into());
        Recorded { event, line }
    }

    fn key() -> Event {
        Event::RunKey(RunKeyEndorsement {
            public_key: "00".into(),
            operator_key: "11".into(),
            endorsement: "sig".into(),
        })
    }

    fn resumed() -> Event {
        Event::SealResumed(SealResumed {
            run_id: "r".into(),
            previous_state: Some("running".into()),
            halt_reason: HaltReason::SuccessConditionMet,
            pid: 1,
        })
    }

    /// A run of one green iteration, its halt, then `after`.
    fn halted_then(after: Vec<Event>) -> Vec<Recorded> {
        let mut events = vec![
            sample::run_start("r"),
            key(),
            Event::IterationStart { iteration: 1 },
            sample::exec_result(1, 0),
            sample::check_result(1, 0),
        ];
        events.push(sample::halt(HaltReason::SuccessConditionMet, 1));
        events.extend(after);
        events.into_iter().map(recorded).collect()
    }

    #[test]
    fn a_receipt_without_a_halt_is_not_halted() {
        let mut records = halted_then(vec![]);
        records.pop();
        assert_eq!(after_halt(&records), Ok(AfterHalt::NotHalted));
    }

    #[test]
    fn nothing_after_the_halt_is_nothing() {
        assert_eq!(after_halt(&halted_then(vec![])), Ok(AfterHalt::Nothing));
    }

    #[test]
    fn a_seal_resumed_and_its_run_key_are_one_keyed_completion() {
        assert_eq!(
            after_halt(&halted_then(vec![resumed(), key()])),
            Ok(AfterHalt::Completions {
                resumes: 1,
                keyed: true
            })
        );
    }

    #[test]
    fn a_resume_that_died_before_its_run_key_then_one_that_endorsed_its_own_are_two_completions() {
        assert_eq!(
            after_halt(&halted_then(vec![resumed(), resumed(), key()])),
            Ok(AfterHalt::Completions {
                resumes: 2,
                keyed: true
            })
        );
    }

    #[test]
    fn a_seal_resumed_without_its_run_key_is_an_unkeyed_completion() {
        assert_eq!(
            after_halt(&halted_then(vec![resumed(), key(), resumed()])),
            Ok(AfterHalt::Completions {
                resumes: 2,
                keyed: false
            })
        );
    }

    #[test]
    fn a_run_key_right_after_the_halt_is_refused_naming_its_line() {
        assert_eq!(
            after_halt(&halted_then(vec![key()])),
            Err("receipt line 7: a run_key after the halt (line 6) that does not directly follow a seal_resumed".into())
        );
    }

    #[test]
    fn two_run_keys_after_one_seal_resumed_are_refused() {
        assert_eq!(
            after_halt(&halted_then(vec![resumed(), key(), key()])),
            Err("receipt line 9: a run_key after the halt (line 6) that does not directly follow a seal_resumed".into())
        );
    }

    #[test]
    fn an_iteration_after_the_halt_is_refused_naming_its_line_and_type() {
        assert_eq!(
            after_halt(&halted_then(vec![resumed(), Event::IterationStart { iteration: 2 }, key()])),
            Err("receipt line 8: event iteration_start after the halt (line 6); only a seal_resumed and its run_key may follow a halt".into())
        );
    }

    #[test]
    fn a_second_halt_is_refused() {
        assert_eq!(
            after_halt(&halted_then(vec![resumed(), sample::halt(HaltReason::SuccessConditionMet, 1)])),
            Err("receipt line 8: event halt after the halt (line 6); only a seal_resumed and its run_key may follow a halt".into())
        );
    }
}
