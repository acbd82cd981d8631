//! `heartbeat.json` in a run directory (schema `loopexec.heartbeat/v1`; docs/gates.md,
//! "Liveness"): the supervisor's latest word on what it is doing, rewritten atomically at every
//! phase change of an iteration and at most every second while a zone runs. It is not part of
//! the receipt (it changes too often and proves nothing): `loopexec watch` reads it to tell a
//! live run from a wedged one, and to find the processes `watch --kill` may stop. It lies in the
//! run directory, so it is read bounded and never trusted: every identity in it is checked
//! against `/proc` before anything is signalled.

use crate::safefs::{SafeDir, SafeFsError};
use serde::{Deserialize, Serialize};

pub const HEARTBEAT_FILE: &str = "heartbeat.json";
pub const HEARTBEAT_SCHEMA: &str = "loopexec.heartbeat/v1";
/// At most this many bytes of heartbeat.json are read (a real one is well under 2 KiB).
pub const MAX_HEARTBEAT_BYTES: u64 = 16 * 1024;

/// The zone a running command is in, as the supervisor saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneRecord {
    /// `agent` or `check` (or `judge`).
    pub role: String,
    /// The process whose exit ends the command (the host zone's shell, the native zone's init).
    pub leader_pid: i32,
    /// Its start time (field 22 of `/proc/PID/stat`).
    pub leader_start: Option<u64>,
    /// The zone's cgroup directories (native zones; empty for the host zone).
    #[serde(default)]
    pub cgroup: Vec<String>,
    /// The command's process group (host zone).
    #[serde(default)]
    pub process_group: Option<i32>,
    /// CPU time of the command so far, in ms (`None`: not readable).
    pub cpu_ms: Option<u64>,
    /// stdout + stderr bytes so far.
    pub output_bytes: u64,
}

/// One heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatRecord {
    pub schema: String,
    pub run_id: String,
    pub supervisor_pid: i32,
    /// The supervisor's start time (field 22 of `/proc/PID/stat`).
    pub supervisor_start: u64,
    /// `baseline`, `agent`, `snapshot`, `guards`, `check`, `confirmation`, `holdout`, `sentinel`,
    /// `judge`, `canary`, `sealing`.
    pub phase: String,
    pub iteration: u64,
    /// When the phase began, in ms since the Unix epoch (absent in heartbeats of earlier versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_since_unix_ms: Option<u64>,
    /// The zone running now (`None` between commands).
    pub zone: Option<ZoneRecord>,
    /// RFC 3339, UTC.
    pub updated_at: String,
    /// The same instant in ms since the Unix epoch (what staleness is measured from).
    pub updated_at_unix_ms: u64,
}

/// Milliseconds since the Unix epoch, now.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Replace the run's heartbeat.json with `record` (temp file + rename).
pub fn write(run_dir: &SafeDir, record: &HeartbeatRecord) -> Result<(), SafeFsError> {
    let bytes = serde_json::to_vec(record).unwrap_or_default();
    // Atomic for its readers, never synced: after a crash it is stale whatever it says.
    run_dir.replace_unsynced(HEARTBEAT_FILE, &bytes)
}

/// Why a heartbeat could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no heartbeat.json (the run was started without one, or by an earlier version)")]
    Missing,
    #[error("{0}")]
    Fs(SafeFsError),
    #[error("heartbeat.json is not a {HEARTBEAT_SCHEMA} record: {0}")]
    Malformed(String),
}

/// Read the run's heartbeat.json, bounded; a record of another schema is malformed.
pub fn read(run_dir: &SafeDir) -> Result<HeartbeatRecord, ReadError> {
    let bytes = match run_dir.read(HEARTBEAT_FILE, MAX_HEARTBEAT_BYTES) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Err(ReadError::Missing),
        Err(e) => return Err(ReadError::Fs(e)),
    };
    let record: HeartbeatRecord =
        serde_json::from_slice(&bytes).map_err(|e| ReadError::Malformed(e.to_string()))?;
    if record.schema != HEARTBEAT_SCHEMA {
        return Err(ReadError::Malformed(format!(
            "schema {}",
            crate::inert::inert(&record.schema)
        )));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> HeartbeatRecord {
        HeartbeatRecord {
            schema: HEARTBEAT_SCHEMA.into(),
            run_id: "r1".into(),
            supervisor_pid: 42,
            supervisor_start: 7,
            phase: "agent".into(),
            iteration: 1,
            phase_since_unix_ms: None,
            zone: None,
            updated_at: "2026-01-01T00:00:00Z".into(),
            updated_at_unix_ms: 1,
        }
    }

    #[test]
    fn a_written_heartbeat_reads_back_equal() {
        let dir = tempfile::tempdir().unwrap();
        let safe = SafeDir::open(dir.path()).unwrap();
        write(&safe, &record()).unwrap();
        assert_eq!(read(&safe).unwrap(), record());
    }

    #[test]
    fn a_heartbeat_of_another_schema_is_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let safe = SafeDir::open(dir.path()).unwrap();
        write(
            &safe,
            &HeartbeatRecord {
                schema: "other/v9".into(),
                ..record()
            },
        )
        .unwrap();
        assert!(
            matches!(read(&safe), Err(ReadError::Malformed(m)) if m == "schema other/v9"),
            "{:?}",
            read(&safe)
        );
    }

    #[test]
    fn an_oversized_heartbeat_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(HEARTBEAT_FILE),
            vec![b' '; MAX_HEARTBEAT_BYTES as usize + 1],
        )
        .unwrap();
        let safe = SafeDir::open(dir.path()).unwrap();
        assert!(matches!(
            read(&safe),
            Err(ReadError::Fs(SafeFsError::TooLarge { .. }))
        ));
    }

    #[test]
    fn no_heartbeat_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let safe = SafeDir::open(dir.path()).unwrap();
        assert!(matches!(read(&safe), Err(ReadError::Missing)));
    }
}
