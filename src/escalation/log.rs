//! `escalations.jsonl` in the run's directory: every escalation of the run, delivered or not, one
//! JSON object a line, append-only and hash-chained (each line's `prev` is the hex sha256 of the
//! previous line's bytes, the first's is 64 zeros). The receipt may already be sealed, so an
//! escalation is never appended to it; this log is what `status` reads to show
//! `escalation_pending`. A line carries no secret: the channel's name and a target without one
//! (a Slack webhook is named by its variable), the packet's and the receipt's digests.

use crate::safefs::SafeDir;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;

pub const FILE: &str = "escalations.jsonl";
const MAX_LOG_BYTES: u64 = 16 * 1024 * 1024;
const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One escalation, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub seq: u64,
    pub time: String,
    pub run_id: String,
    pub packet_sha256: String,
    pub receipt_sha256: String,
    pub channel: String,
    pub target: String,
    pub delivered: bool,
    #[serde(default)]
    pub status: Option<u16>,
    pub attempts: u32,
    #[serde(default)]
    pub error: Option<String>,
    pub prev: String,
}

/// The log as read: its records, and whether its chain holds (a broken one is said, not fatal).
#[derive(Debug, Clone, Default)]
pub struct Log {
    pub records: Vec<Record>,
    pub head: Option<String>,
    /// The first line whose `prev` or shape is wrong (1-based), if any.
    pub broken_at: Option<usize>,
}

impl Log {
    /// The last delivered escalation: the run is `escalation_pending` on it.
    pub fn pending(&self) -> Option<&Record> {
        self.records.iter().rev().find(|r| r.delivered)
    }
}

/// Read the run's log (empty when it has none).
pub fn read(run_dir: &SafeDir) -> Result<Log, crate::safefs::SafeFsError> {
    let bytes = match run_dir.read(FILE, MAX_LOG_BYTES) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Ok(Log::default()),
        Err(e) => return Err(e),
    };
    let mut log = Log::default();
    let mut prev = GENESIS.to_string();
    for (n, line) in bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        match serde_json::from_slice::<Record>(line) {
            Ok(r) if r.prev == prev && log.broken_at.is_none() => log.records.push(r),
            _ => {
                log.broken_at.get_or_insert(n + 1);
            }
        }
        prev = hex::encode(Sha256::digest(line));
    }
    log.head = (prev != GENESIS).then_some(prev);
    Ok(log)
}

/// Append one record (its `seq` and `prev` filled in from the log as it is); returns it.
pub fn append(run_dir: &SafeDir, mut record: Record) -> Result<Record, String> {
    let log = read(run_dir).map_err(|e| e.to_string())?;
    if let Some(line) = log.broken_at {
        return Err(format!(
            "{FILE}: line {line} breaks its hash chain; refusing to append"
        ));
    }
    record.seq = log.records.len() as u64 + 1;
    record.prev = log.head.unwrap_or_else(|| GENESIS.to_string());
    let mut line = serde_json::to_vec(&record).map_err(|e| e.to_string())?;
    line.push(b'\n');
    let mut file = run_dir.open_append(FILE).map_err(|e| e.to_string())?;
    file.write_all(&line)
        .and_then(|_| file.sync_all())
        .map_err(|e| format!("{FILE}: {e}"))?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(delivered: bool) -> Record {
        Record {
            seq: 0,
            time: "t".into(),
            run_id: "r".into(),
            packet_sha256: "p".into(),
            receipt_sha256: "c".into(),
            channel: "file".into(),
            target: "x".into(),
            delivered,
            status: None,
            attempts: 1,
            error: None,
            prev: String::new(),
        }
    }

    #[test]
    fn records_chain_each_to_the_previous_line() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let first = append(&dir, record(true)).unwrap();
        let second = append(&dir, record(false)).unwrap();
        assert_eq!((first.seq, first.prev.as_str()), (1, GENESIS));
        let text = std::fs::read_to_string(tmp.path().join(FILE)).unwrap();
        let line1 = text.lines().next().unwrap();
        assert_eq!(second.prev, hex::encode(Sha256::digest(line1.as_bytes())));
        let log = read(&dir).unwrap();
        assert_eq!(log.records.len(), 2);
        assert_eq!(log.broken_at, None);
        assert_eq!(log.pending().map(|r| r.seq), Some(1));
    }

    #[test]
    fn an_edited_line_breaks_the_chain_and_blocks_appends() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        append(&dir, record(true)).unwrap();
        append(&dir, record(true)).unwrap();
        let path = tmp.path().join(FILE);
        let text = std::fs::read_to_string(&path).unwrap().replacen(
            "\"channel\":\"file\"",
            "\"channel\":\"slack\"",
            1,
        );
        std::fs::write(&path, text).unwrap();
        let log = read(&dir).unwrap();
        assert_eq!(log.broken_at, Some(2));
        assert!(append(&dir, record(true)).is_err());
    }
}
