//! The event types of a `check_fixpoint` receipt. Their names and fields are a contract (the
//! signing and verification work keys on them); see docs/receipt.md.

use crate::capture::StreamRecord;
use crate::ending::Ending;
use serde_json::{json, Map, Value};

pub const RUN_START: &str = "run_start";
/// The detached workspace of a run: baseline t0 (commit, tree), protected paths.
pub const WORKSPACE: &str = "workspace";
/// The tree an agent step left, and the protected paths it touched.
pub const SNAPSHOT: &str = "snapshot";
pub const ITERATION_START: &str = "iteration_start";
pub const EXEC_RESULT: &str = "exec_result";
pub const CHECK_RESULT: &str = "check_result";
pub const ITERATION_INTERRUPTED: &str = "iteration_interrupted";
pub const RUN_RESUMED: &str = "run_resumed";
pub const RUN_INTERRUPTED: &str = "run_interrupted";
pub const HALT: &str = "halt";
/// The agent's credential was minted by the operator's hook (never the secret itself).
pub const CREDENTIAL_MINTED: &str = "credential_minted";
/// The operator's revoke hook ran.
pub const CREDENTIAL_REVOKED: &str = "credential_revoked";

/// Turn a `json!({...})` object into event fields.
pub fn fields(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The JSON form of a command's ending: `{"kind": "exited", "code": 0}` etc.
pub fn ending_value(ending: &Ending) -> Value {
    serde_json::to_value(ending).unwrap_or(Value::Null)
}

pub fn stream_value(stream: &StreamRecord) -> Value {
    json!({
        "bytes": stream.bytes,
        "sha256": stream.sha256,
        "artifact": stream.artifact,
        "truncated": stream.truncated,
    })
}

/// The iteration number carried by an event, if any.
pub fn iteration_of(event: &Map<String, Value>) -> Option<u64> {
    event.get("iteration").and_then(Value::as_u64)
}

/// The type of an event.
pub fn type_of(event: &Map<String, Value>) -> &str {
    event.get("type").and_then(Value::as_str).unwrap_or("")
}
