//! The in-toto Statement v1 that seals a run, and the loopexec predicate derived from the receipt.
//!
//! The predicate is a pure function of the receipt's history ([`predicate`]), so a
//! verifier recomputes it from the log and compares: a predicate that does not match its log is
//! refused.

use super::events::CHAIN_FIELDS;
use super::history::History;
use serde_json::{json, Map, Value};

pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub const PREDICATE_TYPE: &str = "https://loopexec.dev/attestation/run/v1";

/// An event's own fields: its line without the chain's.
pub(crate) fn body(line: &Map<String, Value>) -> Map<String, Value> {
    line.iter()
        .filter(|(k, _)| !CHAIN_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Why a receipt cannot be sealed or its predicate derived.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PredicateError {
    #[error("receipt has no run_start event")]
    NoRunStart,
    #[error("receipt has no halt event: the run is not finished")]
    NoHalt,
    #[error("receipt has no run_key event: the run was never endorsed")]
    NoRunKey,
}

/// Derive the loopexec run predicate from the receipt's history. The bodies in it are the
/// events' own fields exactly as the receipt holds them.
pub fn predicate(history: &History) -> Result<Value, PredicateError> {
    let run_start = history
        .start_line
        .as_ref()
        .ok_or(PredicateError::NoRunStart)?;
    let halt = history.halt_line.as_ref().ok_or(PredicateError::NoHalt)?;
    // A run mints a new key when it resumes after a crash (the old one died with the process),
    // also after its halt when the crash came before the seal: every run_key event is listed,
    // and the last one seals.
    if history.run_keys.is_empty() {
        return Err(PredicateError::NoRunKey);
    }
    let iterations: Vec<Value> = history
        .iterations
        .iter()
        .map(|record| {
            let mut slot = Map::new();
            slot.insert("iteration".into(), Value::from(record.iteration));
            for (key, line) in [
                ("exec", &record.lines.exec),
                ("check", &record.lines.check),
                ("interrupted", &record.lines.interrupted),
                ("judge", &record.lines.judge),
            ] {
                if let Some(line) = line {
                    let mut summary = body(line);
                    summary.remove("iteration");
                    slot.insert(key.into(), Value::Object(summary));
                }
            }
            Value::Object(slot)
        })
        .collect();
    let guards: Vec<Value> = history
        .guard_bodies
        .iter()
        .cloned()
        .map(Value::Object)
        .collect();
    let mut predicate = json!({
        "run": body(run_start),
        "run_keys": history.run_keys,
        "iterations": iterations,
        "guards": guards,
        "halt": body(halt),
    });
    // A run whose supervisor died between the halt and the seal was sealed by the resume that
    // finished it (`seal_resumed`, then its run key): listed, so the statement alone says that
    // its sealing key was minted after the halt. Absent otherwise (earlier receipts' predicates
    // are unchanged).
    if let (false, Some(fields)) = (history.seal_resumes.is_empty(), predicate.as_object_mut()) {
        fields.insert(
            "seal_resumed".into(),
            Value::Array(
                history
                    .seal_resumes
                    .iter()
                    .cloned()
                    .map(Value::Object)
                    .collect(),
            ),
        );
    }
    Ok(predicate)
}

/// Build the Statement: subjects are matched by digest.
pub fn statement(subjects: Vec<Value>, predicate: Value) -> Value {
    json!({
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    })
}

/// A subject entry `{name, digest: {alg: value}}`.
pub fn subject(name: &str, alg: &str, digest: &str) -> Value {
    let mut d = Map::new();
    d.insert(alg.into(), Value::String(digest.into()));
    json!({"name": name, "digest": d})
}
