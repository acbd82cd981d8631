//! The in-toto Statement v1 that seals a run, and the loopexec predicate derived from the receipt.
//!
//! The predicate is a pure function of the receipt's events ([`predicate_from_events`]), so a
//! verifier recomputes it from the log and compares: a predicate that does not match its log is
//! refused.

use serde_json::{json, Map, Value};

pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub const PREDICATE_TYPE: &str = "https://loopexec.dev/attestation/run/v1";

/// Fields of every event that belong to the chain, not to the event.
const CHAIN_FIELDS: [&str; 4] = ["seq", "prev", "ts", "type"];

fn body(event: &Map<String, Value>) -> Map<String, Value> {
    event.iter().filter(|(k, _)| !CHAIN_FIELDS.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn event_type(event: &Map<String, Value>) -> &str {
    event.get("type").and_then(Value::as_str).unwrap_or("")
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

/// Derive the loopexec run predicate from the receipt's events.
pub fn predicate_from_events(events: &[Map<String, Value>]) -> Result<Value, PredicateError> {
    let run_start = events.iter().find(|e| event_type(e) == "run_start").ok_or(PredicateError::NoRunStart)?;
    let halt = events.iter().rev().find(|e| event_type(e) == "halt").ok_or(PredicateError::NoHalt)?;
    // A run mints a new key when it resumes after a crash (the old one died with the process):
    // every run_key event is listed, and the last one seals.
    let run_keys: Vec<Value> = events
        .iter()
        .filter(|e| event_type(e) == "run_key")
        .map(|e| body(e).get("public_key").cloned().unwrap_or(Value::Null))
        .collect();
    if run_keys.is_empty() {
        return Err(PredicateError::NoRunKey);
    }
    let mut iterations: Vec<Value> = Vec::new();
    let mut guards: Vec<Value> = Vec::new();
    for event in events {
        let n = event.get("iteration").cloned().unwrap_or(Value::Null);
        match event_type(event) {
            "iteration_start" => iterations.push(json!({"iteration": n})),
            "exec_result" | "check_result" | "iteration_interrupted" => {
                let key = match event_type(event) {
                    "exec_result" => "exec",
                    "check_result" => "check",
                    _ => "interrupted",
                };
                let mut summary = body(event);
                summary.remove("iteration");
                if let Some(Value::Object(slot)) = iterations.iter_mut().rev().find(|it| it.get("iteration") == Some(&n)) {
                    slot.insert(key.into(), Value::Object(summary));
                }
            }
            t if t.starts_with("guard") => guards.push(Value::Object(body(event))),
            _ => {}
        }
    }
    let start = body(run_start);
    Ok(json!({
        "run": start,
        "run_keys": run_keys,
        "iterations": iterations,
        "guards": guards,
        "halt": body(halt),
    }))
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
