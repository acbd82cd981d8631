//! The egress audit log: one JSON line per proxy decision, appended (never rewritten) to a file
//! beneath the run directory through `SafeDir`, fsynced when each connection closes; its sha256 for
//! the receipt; and a per-host summary for `loopexec report`.
//!
//! Line fields: `ts` (RFC 3339 UTC), `zone`, `method`, `host` (normalised, A-label), `port`,
//! `address` (the `ip:port` connected to, or the refused address), `via` (upstream proxy, if any),
//! `decision` (`allowed` | `denied`), `rule` (the allowing entry), `reason` + `detail` (why denied or
//! why an allowed connection failed), `status` (the proxy's own HTTP answer, when it gave one),
//! `end` (how an allowed connection ended), `bytes_up`, `bytes_down`, `duration_ms`.

use crate::safefs::{SafeDir, SafeFsError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Mutex;

/// Allowed or denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allowed,
    Denied,
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub ts: String,
    pub zone: String,
    pub method: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub address: Option<String>,
    pub via: Option<String>,
    pub decision: Decision,
    pub rule: Option<String>,
    pub reason: Option<String>,
    pub detail: Option<String>,
    pub status: Option<u16>,
    pub end: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

/// Audit log failures.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("egress audit log: {0}")]
    Fs(#[from] SafeFsError),
    #[error("egress audit log {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("egress audit log line {line}: {problem}")]
    Malformed { line: usize, problem: String },
}

/// An open, append-only audit log.
#[derive(Debug)]
pub struct AuditLog {
    file: Mutex<File>,
    path: PathBuf,
}

impl AuditLog {
    /// Open (creating, mode 0600) `rel` beneath `dir` for appending; symlinks are refused.
    pub fn open(dir: &SafeDir, rel: &str) -> Result<AuditLog, AuditError> {
        let file = dir.open_append(rel)?;
        Ok(AuditLog {
            file: Mutex::new(file),
            path: dir.path().join(rel),
        })
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Append one record as one line (a single `write` on an O_APPEND file) and fsync it.
    pub fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let mut line = serde_json::to_vec(record).map_err(|e| AuditError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        line.push(b'\n');
        let io = |source| AuditError::Io {
            path: self.path.clone(),
            source,
        };
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        file.write_all(&line).map_err(io)?;
        file.sync_data().map_err(io)
    }
}

/// The current UTC time as RFC 3339 with milliseconds.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let format = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    now.format(format)
        .unwrap_or_else(|_| now.unix_timestamp().to_string())
}

/// sha256 (hex) of the audit file's current bytes, for the receipt.
pub fn file_sha256(dir: &SafeDir, rel: &str) -> Result<String, AuditError> {
    let mut file = dir.open_read(rel)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf).map_err(|source| AuditError::Io {
            path: dir.path().join(rel),
            source,
        })?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Per-host counts for `loopexec report`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostSummary {
    pub allowed: u64,
    pub denied: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

/// Summary of a whole audit log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EgressSummary {
    pub allowed: u64,
    pub denied: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Keyed by `host:port`; decisions taken before a host was known are under `(unparsed)`.
    pub hosts: BTreeMap<String, HostSummary>,
}

/// Parse the audit log's bytes and count decisions per host; a malformed line is an error naming it.
pub fn summarize(bytes: &[u8]) -> Result<EgressSummary, AuditError> {
    let mut summary = EgressSummary::default();
    for (index, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let record: AuditRecord =
            serde_json::from_slice(line).map_err(|e| AuditError::Malformed {
                line: index + 1,
                problem: e.to_string(),
            })?;
        let key = match (&record.host, record.port) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.clone(),
            _ => "(unparsed)".to_string(),
        };
        let entry = summary.hosts.entry(key).or_default();
        match record.decision {
            Decision::Allowed => {
                entry.allowed += 1;
                summary.allowed += 1;
            }
            Decision::Denied => {
                entry.denied += 1;
                summary.denied += 1;
            }
        }
        entry.bytes_up += record.bytes_up;
        entry.bytes_down += record.bytes_down;
        summary.bytes_up += record.bytes_up;
        summary.bytes_down += record.bytes_down;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(host: &str, decision: Decision, up: u64) -> AuditRecord {
        AuditRecord {
            ts: now_rfc3339(),
            zone: "agent".into(),
            method: Some("CONNECT".into()),
            host: Some(host.into()),
            port: Some(443),
            address: None,
            via: None,
            decision,
            rule: None,
            reason: None,
            detail: None,
            status: None,
            end: None,
            bytes_up: up,
            bytes_down: 0,
            duration_ms: 0,
        }
    }

    #[test]
    fn records_append_one_line_each_and_summarize_per_host() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let log = AuditLog::open(&dir, "egress.jsonl").unwrap();
        log.record(&record("a.example", Decision::Allowed, 10))
            .unwrap();
        log.record(&record("a.example", Decision::Denied, 0))
            .unwrap();
        log.record(&record("b.example", Decision::Denied, 0))
            .unwrap();
        let bytes = std::fs::read(tmp.path().join("egress.jsonl")).unwrap();
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 3);
        let summary = summarize(&bytes).unwrap();
        assert_eq!(
            (summary.allowed, summary.denied, summary.bytes_up),
            (1, 2, 10)
        );
        assert_eq!(
            summary.hosts["a.example:443"],
            HostSummary {
                allowed: 1,
                denied: 1,
                bytes_up: 10,
                bytes_down: 0
            }
        );
        assert_eq!(summary.hosts["b.example:443"].denied, 1);
    }

    #[test]
    fn the_digest_is_the_sha256_of_the_file_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let log = AuditLog::open(&dir, "egress.jsonl").unwrap();
        log.record(&record("a.example", Decision::Allowed, 1))
            .unwrap();
        let bytes = std::fs::read(tmp.path().join("egress.jsonl")).unwrap();
        assert_eq!(
            file_sha256(&dir, "egress.jsonl").unwrap(),
            hex::encode(Sha256::digest(&bytes))
        );
    }

    #[test]
    fn a_malformed_line_is_named() {
        let err = summarize(b"{\"bad\":1}\n").unwrap_err();
        assert!(
            matches!(err, AuditError::Malformed { line: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn a_symlinked_audit_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("elsewhere"), b"").unwrap();
        std::os::unix::fs::symlink(
            tmp.path().join("elsewhere"),
            tmp.path().join("egress.jsonl"),
        )
        .unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        assert!(matches!(
            AuditLog::open(&dir, "egress.jsonl"),
            Err(AuditError::Fs(SafeFsError::Symlink { .. }))
        ));
    }
}
