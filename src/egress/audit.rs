//! The egress audit log: one JSON line per proxy decision, appended (never rewritten) to a file
//! beneath the run directory through `SafeDir`, fsynced when each connection closes; its sha256 for
//! the receipt, kept as a running digest updated with every line appended (`AuditDigest`: O(1) to
//! read, whatever the log's size); and a per-host summary for `loopexec report`.
//!
//! Line fields: `ts` (RFC 3339 UTC), `zone`, `method`, `host` (normalised, A-label), `port`,
//! `address` (the `ip:port` connected to, or the refused address), `via` (upstream proxy, if any),
//! `decision` (`allowed` | `denied`), `rule` (the allowing entry), `reason` + `detail` (why denied or
//! why an allowed connection failed), `status` (the proxy's own HTTP answer, when it gave one),
//! `end` (how an allowed connection ended), `bytes_up`, `bytes_down`, `duration_ms`; on an
//! aggregate line only, `aggregated` (refusals by reason that got no line of their own, see
//! `RefusalTally`).

use crate::safefs::{SafeDir, SafeFsError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

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
    /// On an aggregate line only: refusals (by reason) that got no line of their own since the
    /// previous aggregate line of the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregated: Option<BTreeMap<String, u64>>,
}

impl AuditRecord {
    /// A decision about a request as far as it was seen: who asked what, nothing relayed yet.
    pub fn new(
        ts: String,
        zone: String,
        decision: Decision,
        method: Option<String>,
        host: Option<String>,
        port: Option<u16>,
    ) -> AuditRecord {
        AuditRecord {
            ts,
            zone,
            method,
            host,
            port,
            address: None,
            via: None,
            decision,
            rule: None,
            reason: None,
            detail: None,
            status: None,
            end: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            aggregated: None,
        }
    }

    /// An aggregate line: `counts` refusals by reason, none of which got a line of its own.
    pub fn aggregate(ts: String, zone: String, counts: BTreeMap<String, u64>) -> AuditRecord {
        let total: u64 = counts.values().sum();
        AuditRecord {
            reason: Some(AGGREGATED.to_string()),
            detail: Some(format!(
                "{total} refusals counted here, not written as lines of their own"
            )),
            aggregated: Some(counts),
            ..AuditRecord::new(ts, zone, Decision::Denied, None, None, None)
        }
    }

    /// How many decisions the line stands for (an aggregate line stands for its counts).
    pub fn decisions(&self) -> u64 {
        self.aggregated
            .as_ref()
            .map_or(1, |counts| counts.values().sum())
    }
}

/// The `reason` of an aggregate line.
pub const AGGREGATED: &str = "aggregated";

/// Which refusals of one step get a line of their own, so that a flood of refused requests leaves
/// a log of bounded size: the first `individual` refusals do; later ones are only counted by
/// reason, and an aggregate line with the counts is written when the step's refusals reach
/// `2·individual`, `4·individual`, `8·individual`, ... and when the step ends (`flush`). `n`
/// refusals thus leave at most `individual + log2(n / individual) + 2` lines, whatever the rate,
/// and the counts add up exactly.
#[derive(Debug)]
pub struct RefusalTally {
    individual: u64,
    seen: u64,
    next_aggregate: u64,
    pending: BTreeMap<String, u64>,
}

/// What to write for one refusal.
#[derive(Debug, PartialEq, Eq)]
pub enum TallyStep {
    /// A line of its own.
    Line,
    /// Counted; write this aggregate line, if any.
    Counted(Option<BTreeMap<String, u64>>),
}

impl RefusalTally {
    pub fn new(individual: u64) -> RefusalTally {
        let individual = individual.max(1);
        RefusalTally {
            individual,
            seen: 0,
            next_aggregate: individual.saturating_mul(2),
            pending: BTreeMap::new(),
        }
    }

    /// Count one refusal with `reason`.
    pub fn refusal(&mut self, reason: &str) -> TallyStep {
        self.seen += 1;
        if self.seen <= self.individual {
            return TallyStep::Line;
        }
        *self.pending.entry(reason.to_string()).or_default() += 1;
        if self.seen < self.next_aggregate {
            return TallyStep::Counted(None);
        }
        self.next_aggregate = self.next_aggregate.saturating_mul(2);
        TallyStep::Counted(self.flush())
    }

    /// The counts not yet written, if any (at the end of the step).
    pub fn flush(&mut self) -> Option<BTreeMap<String, u64>> {
        (!self.pending.is_empty()).then(|| std::mem::take(&mut self.pending))
    }
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

/// The sha256 of an audit file's bytes, kept current as [`AuditLog`]s append to it, so reading it
/// costs O(1). Shared (cheap clones) by every log opened on the same file over a run; seeded once
/// from the bytes already there (a resumed run continues the same file).
#[derive(Debug, Clone, Default)]
pub struct AuditDigest(Arc<Mutex<DigestState>>);

#[derive(Debug, Default)]
struct DigestState {
    hasher: Sha256,
    /// Bytes hashed so far (the file's size when in step).
    len: u64,
    /// The file exists (seen at seeding, or opened since).
    present: bool,
    /// A failed append left bytes we could not account for: no digest until reseeded.
    lost: bool,
}

impl AuditDigest {
    /// A digest of `rel` beneath `dir` as it is now: its bytes are read once (a missing file is
    /// an empty, not yet present one).
    pub fn of_file(dir: &SafeDir, rel: &str) -> Result<AuditDigest, AuditError> {
        let digest = AuditDigest::default();
        match dir.open_read(rel) {
            Ok(file) => digest.reseed(file, &dir.path().join(rel))?,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        Ok(digest)
    }

    /// The hex sha256 of the file's bytes, or None if the file does not exist (or a failed
    /// append made it unknowable).
    pub fn sha256_hex(&self) -> Option<String> {
        let state = self.state();
        (state.present && !state.lost).then(|| hex::encode(state.hasher.clone().finalize()))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, DigestState> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Start over from `file`'s bytes.
    fn reseed(&self, mut file: File, path: &std::path::Path) -> Result<(), AuditError> {
        let mut state = DigestState {
            present: true,
            ..DigestState::default()
        };
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = file.read(&mut buf).map_err(|source| AuditError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            if n == 0 {
                break;
            }
            state.hasher.update(&buf[..n]);
            state.len += n as u64;
        }
        *self.state() = state;
        Ok(())
    }

    /// `line` was appended to `file` (whose size is now known by fstat when the write failed
    /// part-way): hash exactly the bytes that reached it.
    fn appended(&self, file: &File, line: &[u8], complete: bool) {
        let mut state = self.state();
        if complete {
            state.hasher.update(line);
            state.len += line.len() as u64;
            return;
        }
        match file.metadata() {
            Ok(m) if m.len() >= state.len && m.len() - state.len <= line.len() as u64 => {
                let written = (m.len() - state.len) as usize;
                state.hasher.update(&line[..written]);
                state.len = m.len();
            }
            _ => state.lost = true,
        }
    }
}

/// An open, append-only audit log.
#[derive(Debug)]
pub struct AuditLog {
    file: Mutex<File>,
    path: PathBuf,
    digest: Option<AuditDigest>,
}

impl AuditLog {
    /// Open (creating, mode 0600) `rel` beneath `dir` for appending; symlinks are refused.
    pub fn open(dir: &SafeDir, rel: &str) -> Result<AuditLog, AuditError> {
        let file = dir.open_append(rel)?;
        Ok(AuditLog {
            file: Mutex::new(file),
            path: dir.path().join(rel),
            digest: None,
        })
    }

    /// Like [`AuditLog::open`], keeping `digest` current with every line appended. If the file's
    /// size is not what `digest` has hashed (it was changed behind our back), `digest` is
    /// reseeded from the file first.
    pub fn open_tracked(
        dir: &SafeDir,
        rel: &str,
        digest: &AuditDigest,
    ) -> Result<AuditLog, AuditError> {
        let mut log = AuditLog::open(dir, rel)?;
        let size = log
            .file
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .metadata()
            .map_err(|source| AuditError::Io {
                path: log.path.clone(),
                source,
            })?
            .len();
        let in_step = {
            let mut state = digest.state();
            state.present = true;
            state.len == size && !state.lost
        };
        if !in_step {
            digest.reseed(dir.open_read(rel)?, &log.path)?;
        }
        log.digest = Some(digest.clone());
        Ok(log)
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
        let written = file.write_all(&line);
        if let Some(digest) = &self.digest {
            digest.appended(&file, &line, written.is_ok());
        }
        written.map_err(io)?;
        file.sync_data().map_err(io)
    }
}

/// Per-host counts for `loopexec report`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostSummary {
    pub allowed: u64,
    pub denied: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

/// Summary of a whole audit log (aggregate lines count as the refusals they stand for).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EgressSummary {
    pub allowed: u64,
    pub denied: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Keyed by `host:port`; decisions taken before a host was known are under `(unparsed)`,
    /// refusals counted on aggregate lines under `(aggregated)`.
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
            _ if record.aggregated.is_some() => "(aggregated)".to_string(),
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.clone(),
            _ => "(unparsed)".to_string(),
        };
        let decisions = record.decisions();
        let entry = summary.hosts.entry(key).or_default();
        match record.decision {
            Decision::Allowed => {
                entry.allowed += decisions;
                summary.allowed += decisions;
            }
            Decision::Denied => {
                entry.denied += decisions;
                summary.denied += decisions;
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
        let r = AuditRecord::new(
            crate::timestamp::now_rfc3339(),
            "agent".into(),
            decision,
            Some("CONNECT".into()),
            Some(host.into()),
            Some(443),
        );
        AuditRecord { bytes_up: up, ..r }
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

    fn sha256_of(path: &std::path::Path) -> String {
        hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
    }

    #[test]
    fn the_running_digest_is_the_sha256_of_the_file_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let digest = AuditDigest::of_file(&dir, "egress.jsonl").unwrap();
        assert_eq!(digest.sha256_hex(), None, "no digest before the log exists");
        let log = AuditLog::open_tracked(&dir, "egress.jsonl", &digest).unwrap();
        assert_eq!(
            digest.sha256_hex(),
            Some(sha256_of(&tmp.path().join("egress.jsonl"))),
            "an empty log"
        );
        log.record(&record("a.example", Decision::Allowed, 1))
            .unwrap();
        log.record(&record("b.example", Decision::Denied, 0))
            .unwrap();
        assert_eq!(
            digest.sha256_hex(),
            Some(sha256_of(&tmp.path().join("egress.jsonl")))
        );
    }

    #[test]
    fn a_resumed_digest_starts_from_the_bytes_already_logged() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let first = AuditDigest::of_file(&dir, "egress.jsonl").unwrap();
        AuditLog::open_tracked(&dir, "egress.jsonl", &first)
            .unwrap()
            .record(&record("a.example", Decision::Allowed, 1))
            .unwrap();
        // A new process binds the same run: the log so far is read once.
        let resumed = AuditDigest::of_file(&dir, "egress.jsonl").unwrap();
        assert_eq!(resumed.sha256_hex(), first.sha256_hex());
        AuditLog::open_tracked(&dir, "egress.jsonl", &resumed)
            .unwrap()
            .record(&record("b.example", Decision::Denied, 0))
            .unwrap();
        assert_eq!(
            resumed.sha256_hex(),
            Some(sha256_of(&tmp.path().join("egress.jsonl")))
        );
    }

    #[test]
    fn a_log_changed_behind_the_digest_is_rehashed_when_next_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let digest = AuditDigest::of_file(&dir, "egress.jsonl").unwrap();
        AuditLog::open_tracked(&dir, "egress.jsonl", &digest)
            .unwrap()
            .record(&record("a.example", Decision::Allowed, 1))
            .unwrap();
        let mut other = std::fs::OpenOptions::new()
            .append(true)
            .open(tmp.path().join("egress.jsonl"))
            .unwrap();
        other.write_all(b"{}\n").unwrap();
        AuditLog::open_tracked(&dir, "egress.jsonl", &digest).unwrap();
        assert_eq!(
            digest.sha256_hex(),
            Some(sha256_of(&tmp.path().join("egress.jsonl")))
        );
    }

    #[test]
    fn a_tally_writes_the_first_refusals_then_aggregates_at_doubling_counts() {
        let mut tally = RefusalTally::new(4);
        let steps: Vec<TallyStep> = (0..100)
            .map(|i| {
                tally.refusal(if i % 2 == 0 {
                    "no_matching_rule"
                } else {
                    "malformed"
                })
            })
            .collect();
        assert!(steps[..4].iter().all(|s| *s == TallyStep::Line));
        let aggregates: Vec<(usize, u64)> = steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                TallyStep::Counted(Some(counts)) => Some((i + 1, counts.values().sum())),
                _ => None,
            })
            .collect();
        assert_eq!(aggregates, vec![(8, 4), (16, 8), (32, 16), (64, 32)]);
        let rest = tally.flush().unwrap();
        assert_eq!(
            rest,
            BTreeMap::from([
                ("malformed".to_string(), 18),
                ("no_matching_rule".to_string(), 18)
            ])
        );
        assert_eq!(tally.flush(), None);
    }

    #[test]
    fn an_aggregate_line_counts_as_its_refusals_in_the_summary() {
        let mut bytes = serde_json::to_vec(&record("a.example", Decision::Denied, 0)).unwrap();
        bytes.push(b'\n');
        let counts = BTreeMap::from([
            ("no_matching_rule".to_string(), 7),
            ("malformed".to_string(), 2),
        ]);
        bytes.extend(
            serde_json::to_vec(&AuditRecord::aggregate(
                crate::timestamp::now_rfc3339(),
                "agent".into(),
                counts,
            ))
            .unwrap(),
        );
        let summary = summarize(&bytes).unwrap();
        assert_eq!(summary.denied, 10);
        assert_eq!(summary.hosts["(aggregated)"].denied, 9);
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
