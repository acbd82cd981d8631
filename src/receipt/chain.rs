//! The hash-chained, append-only JSONL receipt log.
//!
//! Line format: one compact JSON object per line (keys in lexicographic order) with `seq` (0-based,
//! contiguous), `prev` (the lowercase hex sha256 of the previous line's bytes without its newline;
//! 64 zeros for line 0), `ts` (RFC 3339 UTC) and `type` (the event type), plus the event's own
//! fields. Lines are written in groups: each event is chained as it is staged, and a commit writes
//! every staged line with one `write` followed by one `fdatasync` (an append is one staged line
//! committed at once). A final line without its newline is a torn write from a crash: it was never
//! acknowledged, so opening for append cuts it off and `verify` reports it; the complete lines of a
//! torn group before it are a prefix of the chain and verify as they are.

use super::events::{Event, Recorded};
use crate::safefs::{SafeDir, SafeFsError};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};

/// The `prev` of the first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Receipts larger than this are refused as malformed (a zone cannot write here, so this only
/// bounds damage from a corrupted disk).
pub const MAX_RECEIPT_BYTES: u64 = 256 * 1024 * 1024;

/// Why a receipt log does not verify. `line` is 1-based.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChainError {
    #[error("receipt line {line}: not a JSON object: {detail}")]
    NotJson { line: usize, detail: String },
    #[error("receipt line {line}: missing or malformed field `{field}`")]
    Field { line: usize, field: &'static str },
    #[error("receipt line {line}: seq is {found}, expected {expected} (lines removed, duplicated or reordered)")]
    Seq {
        line: usize,
        expected: u64,
        found: u64,
    },
    #[error(
        "receipt line {line}: prev hash does not match line {prev_line} (the receipt was edited)"
    )]
    Broken { line: usize, prev_line: usize },
    #[error("receipt line {line}: torn final line without newline (interrupted write)")]
    Torn { line: usize },
    #[error("receipt is empty")]
    Empty,
}

/// sha256 of a line's bytes (without the newline), lowercase hex.
pub fn line_hash(line: &[u8]) -> String {
    hex::encode(Sha256::digest(line))
}

/// A verified receipt: its events in order and the hash of its last line.
#[derive(Debug, Clone)]
pub struct VerifiedChain {
    pub events: Vec<Map<String, Value>>,
    /// sha256 of the last line (the chain head), or GENESIS when empty.
    pub head: String,
    /// sha256 of the whole file's bytes.
    pub file_sha256: String,
}

/// Verify the whole chain of a receipt's bytes.
pub fn verify(bytes: &[u8]) -> Result<VerifiedChain, ChainError> {
    if bytes.is_empty() {
        return Err(ChainError::Empty);
    }
    let mut events = Vec::new();
    let mut prev = GENESIS.to_string();
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // split yields a final empty slice when the file ends with a newline.
    let (complete, tail) = lines.split_at(lines.len() - 1);
    if !tail[0].is_empty() {
        return Err(ChainError::Torn { line: lines.len() });
    }
    for (i, line) in complete.iter().enumerate() {
        let n = i + 1;
        let value: Value = serde_json::from_slice(line).map_err(|e| ChainError::NotJson {
            line: n,
            detail: e.to_string(),
        })?;
        let Value::Object(obj) = value else {
            return Err(ChainError::NotJson {
                line: n,
                detail: "not an object".into(),
            });
        };
        let seq = obj
            .get("seq")
            .and_then(Value::as_u64)
            .ok_or(ChainError::Field {
                line: n,
                field: "seq",
            })?;
        if seq != i as u64 {
            return Err(ChainError::Seq {
                line: n,
                expected: i as u64,
                found: seq,
            });
        }
        let p = obj
            .get("prev")
            .and_then(Value::as_str)
            .ok_or(ChainError::Field {
                line: n,
                field: "prev",
            })?;
        if p != prev {
            return Err(ChainError::Broken {
                line: n,
                prev_line: i,
            });
        }
        obj.get("type")
            .and_then(Value::as_str)
            .ok_or(ChainError::Field {
                line: n,
                field: "type",
            })?;
        obj.get("ts")
            .and_then(Value::as_str)
            .ok_or(ChainError::Field {
                line: n,
                field: "ts",
            })?;
        prev = line_hash(line);
        events.push(obj);
    }
    Ok(VerifiedChain {
        events,
        head: prev,
        file_sha256: hex::encode(Sha256::digest(bytes)),
    })
}

/// An open receipt log positioned for appending.
#[derive(Debug)]
pub struct ReceiptLog {
    file: File,
    /// The seq and head of the chain including the staged lines.
    next_seq: u64,
    head: String,
    /// Lines chained but not yet written (each with its newline), and what is on disk before them.
    staged: Vec<u8>,
    committed: Committed,
    /// The crash trials' torn write (the `mid_append` test stopping point): where in `staged`
    /// the next commit stops, half-way through a `check_result` line.
    #[cfg(debug_assertions)]
    tear_at: Option<usize>,
}

/// The durable end of the log: its length, event count and head after the last commit.
#[derive(Debug, Clone)]
struct Committed {
    bytes: u64,
    seq: u64,
    head: String,
}

/// Errors opening or appending to a receipt log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error(transparent)]
    Fs(#[from] SafeFsError),
    #[error("receipt does not verify: {0}")]
    Chain(#[from] ChainError),
    #[error("receipt write failed: {0}")]
    Io(#[from] std::io::Error),
}

/// An opened receipt: the log to append to, its verified events, and the bytes they came from.
pub type OpenedReceipt = (ReceiptLog, Vec<Map<String, Value>>, Vec<u8>);

impl ReceiptLog {
    /// Create a new, empty receipt `name` in `dir` (fails if it exists).
    pub fn create(dir: &SafeDir, name: &str) -> Result<ReceiptLog, LogError> {
        let file = dir.create_new(name, 0o600)?;
        dir.sync()?;
        Ok(ReceiptLog::at_end(file, 0, 0, GENESIS.to_string()))
    }

    /// Open an existing receipt for appending: verify it, cut off a torn final line.
    /// Returns the log and the verified events.
    pub fn open(
        dir: &SafeDir,
        name: &str,
    ) -> Result<(ReceiptLog, Vec<Map<String, Value>>), LogError> {
        Self::open_read(dir, name).map(|(log, events, _)| (log, events))
    }

    /// [`ReceiptLog::open`], also returning the receipt's bytes the events were verified from
    /// (torn final line cut off): one read, so whatever else is checked over the bytes (the
    /// hand acceptances' signatures) is checked over what the events came from.
    pub fn open_read(dir: &SafeDir, name: &str) -> Result<OpenedReceipt, LogError> {
        let mut bytes = dir.read(name, MAX_RECEIPT_BYTES)?;
        let mut file = dir.open_rw(name)?;
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            let keep = bytes
                .iter()
                .rposition(|b| *b == b'\n')
                .map(|p| p + 1)
                .unwrap_or(0);
            bytes.truncate(keep);
            file.set_len(keep as u64)?;
            file.sync_all()?;
        }
        let (events, head) = if bytes.is_empty() {
            (Vec::new(), GENESIS.to_string())
        } else {
            let chain = verify(&bytes)?;
            (chain.events, chain.head)
        };
        file.seek(SeekFrom::End(0))?;
        let log = ReceiptLog::at_end(file, bytes.len() as u64, events.len() as u64, head);
        Ok((log, events, bytes))
    }

    fn at_end(file: File, bytes: u64, seq: u64, head: String) -> ReceiptLog {
        ReceiptLog {
            file,
            next_seq: seq,
            head: head.clone(),
            staged: Vec::new(),
            #[cfg(debug_assertions)]
            tear_at: None,
            committed: Committed { bytes, seq, head },
        }
    }

    /// Append one typed event durably (with every line staged before it, in one write and one
    /// `fdatasync`); returns it as a reader of the receipt will see it.
    pub fn append_event(&mut self, event: &Event) -> Result<Recorded, LogError> {
        let recorded = self.stage_event(event)?;
        self.commit()?;
        Ok(recorded)
    }

    /// Chain one typed event after the staged ones without writing it: it is written, with the
    /// rest of its group, by the next [`ReceiptLog::commit`] (or append).
    pub fn stage_event(&mut self, event: &Event) -> Result<Recorded, LogError> {
        let fields = event.fields().map_err(std::io::Error::other)?;
        let (_, line) = self.stage_line(event.kind(), fields)?;
        Ok(Recorded {
            event: event.clone(),
            line,
        })
    }

    /// Write every staged line with one `write` and make it durable with one `fdatasync`; nothing
    /// to do when none is staged. On failure the file is cut back to its last committed length
    /// and the staged lines are dropped, so that the log stays the chain on disk.
    pub fn commit(&mut self) -> Result<(), LogError> {
        if self.staged.is_empty() {
            return Ok(());
        }
        #[cfg(debug_assertions)]
        if let Some(at) = self.tear_at.take() {
            // The group written up to half of its `check_result` line, synced: what a crash in
            // the middle of this write leaves.
            self.file.write_all(&self.staged[..at])?;
            self.file.sync_data()?;
            crate::test_pause::at(crate::test_pause::MID_APPEND);
        }
        let written = self
            .file
            .write_all(&self.staged)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            self.roll_back();
            return Err(LogError::Io(e));
        }
        self.committed = Committed {
            bytes: self.committed.bytes + self.staged.len() as u64,
            seq: self.next_seq,
            head: self.head.clone(),
        };
        self.staged.clear();
        Ok(())
    }

    /// Forget the staged lines and cut off whatever part of them reached the file.
    fn roll_back(&mut self) {
        self.staged.clear();
        self.next_seq = self.committed.seq;
        self.head = self.committed.head.clone();
        let _ = self.file.set_len(self.committed.bytes);
        let _ = self.file.seek(SeekFrom::End(0));
    }

    /// Whether lines are staged and not yet committed.
    pub fn has_staged(&self) -> bool {
        !self.staged.is_empty()
    }

    /// Append one line (`type` plus fields) durably; returns the new line's hash. Everything
    /// loopexec records goes through [`ReceiptLog::append_event`]; this is the raw line writer.
    pub fn append(
        &mut self,
        event_type: &str,
        fields: Map<String, Value>,
    ) -> Result<String, LogError> {
        let (hash, _) = self.stage_line(event_type, fields)?;
        self.commit()?;
        Ok(hash)
    }

    fn stage_line(
        &mut self,
        event_type: &str,
        fields: Map<String, Value>,
    ) -> Result<(String, Map<String, Value>), LogError> {
        let mut obj = Map::new();
        obj.insert("seq".into(), Value::from(self.next_seq));
        obj.insert("prev".into(), Value::String(self.head.clone()));
        obj.insert("ts".into(), Value::String(crate::timestamp::now_rfc3339()));
        obj.insert("type".into(), Value::String(event_type.into()));
        for (k, v) in fields {
            if !matches!(k.as_str(), "seq" | "prev" | "ts" | "type") {
                obj.insert(k, v);
            }
        }
        let line = serde_json::to_vec(&obj).map_err(std::io::Error::other)?;
        let hash = line_hash(&line);
        #[cfg(debug_assertions)]
        if event_type == "check_result" && crate::test_pause::armed(crate::test_pause::MID_APPEND) {
            self.tear_at = Some(self.staged.len() + line.len() / 2);
        }
        self.staged.extend_from_slice(&line);
        self.staged.push(b'\n');
        self.head = hash.clone();
        self.next_seq += 1;
        Ok((hash, obj))
    }

    /// The head of the chain on disk (staged lines not counted).
    pub fn head(&self) -> &str {
        &self.committed.head
    }

    /// The number of events on disk (staged lines not counted).
    pub fn len(&self) -> u64 {
        self.committed.seq
    }

    pub fn is_empty(&self) -> bool {
        self.committed.seq == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    fn sample(dir: &SafeDir) -> Vec<u8> {
        let mut log = ReceiptLog::create(dir, "r.jsonl").unwrap();
        log.append("run_start", fields(serde_json::json!({"run_id": "a"})))
            .unwrap();
        log.append(
            "iteration_start",
            fields(serde_json::json!({"iteration": 1})),
        )
        .unwrap();
        log.append(
            "halt",
            fields(serde_json::json!({"halt_reason": "success_condition_met"})),
        )
        .unwrap();
        dir.read("r.jsonl", 1 << 20).unwrap()
    }

    #[test]
    fn open_read_returns_the_bytes_its_events_were_verified_from_torn_tail_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let whole = sample(&dir);
        let mut torn = whole.clone();
        torn.extend_from_slice(b"{\"type\":\"iteration_st");
        std::fs::write(tmp.path().join("r.jsonl"), &torn).unwrap();
        let (log, events, bytes) = ReceiptLog::open_read(&dir, "r.jsonl").unwrap();
        assert_eq!(bytes, whole);
        assert_eq!(verify(&bytes).unwrap().events, events);
        assert_eq!(log.head(), verify(&bytes).unwrap().head);
    }

    #[test]
    fn an_untouched_chain_verifies() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let chain = verify(&sample(&dir)).unwrap();
        assert_eq!(chain.events.len(), 3);
    }

    #[test]
    fn an_edited_line_breaks_the_chain_at_the_next_line() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let text = String::from_utf8(sample(&dir))
            .unwrap()
            .replace("\"iteration\":1", "\"iteration\":2");
        assert_eq!(
            verify(text.as_bytes()).unwrap_err(),
            ChainError::Broken {
                line: 3,
                prev_line: 2
            }
        );
    }

    #[test]
    fn swapped_lines_are_detected() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let text = String::from_utf8(sample(&dir)).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.swap(1, 2);
        let swapped = lines.join("\n") + "\n";
        assert_eq!(
            verify(swapped.as_bytes()).unwrap_err(),
            ChainError::Seq {
                line: 2,
                expected: 1,
                found: 2
            }
        );
    }

    #[test]
    fn reopening_cuts_a_torn_tail_and_continues_the_chain() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let mut bytes = sample(&dir);
        bytes.extend_from_slice(b"{\"seq\":3,\"pr");
        std::fs::write(tmp.path().join("r.jsonl"), &bytes).unwrap();
        assert_eq!(verify(&bytes).unwrap_err(), ChainError::Torn { line: 4 });
        let (mut log, events) = ReceiptLog::open(&dir, "r.jsonl").unwrap();
        assert_eq!(events.len(), 3);
        log.append("resume", Map::new()).unwrap();
        let chain = verify(&dir.read("r.jsonl", 1 << 20).unwrap()).unwrap();
        assert_eq!(chain.events.len(), 4);
    }

    fn staged(log: &mut ReceiptLog, kinds: &[&str]) {
        for kind in kinds {
            log.stage_line(kind, fields(serde_json::json!({"iteration": 1})))
                .unwrap();
        }
    }

    #[test]
    fn staged_lines_reach_the_file_only_at_their_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let before = sample(&dir);
        let (mut log, _) = ReceiptLog::open(&dir, "r.jsonl").unwrap();
        staged(&mut log, &["check_result", "progress"]);
        assert_eq!(dir.read("r.jsonl", 1 << 20).unwrap(), before);
        assert_eq!(
            (log.len(), log.head()),
            (3, verify(&before).unwrap().head.as_str())
        );
        log.commit().unwrap();
        let chain = verify(&dir.read("r.jsonl", 1 << 20).unwrap()).unwrap();
        let types: Vec<&str> = chain
            .events
            .iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "run_start",
                "iteration_start",
                "halt",
                "check_result",
                "progress"
            ]
        );
        assert_eq!((log.len(), log.head()), (5, chain.head.as_str()));
    }

    #[test]
    fn an_append_writes_the_staged_group_before_its_own_line() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        sample(&dir);
        let (mut log, _) = ReceiptLog::open(&dir, "r.jsonl").unwrap();
        staged(&mut log, &["check_result"]);
        log.append("iteration_start", Map::new()).unwrap();
        let chain = verify(&dir.read("r.jsonl", 1 << 20).unwrap()).unwrap();
        let types: Vec<&str> = chain
            .events
            .iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        assert_eq!(types[3..], ["check_result", "iteration_start"]);
        assert!(!log.has_staged());
    }

    /// The receipt after a group of three lines was committed, and the offset where the group's
    /// `k`th line (0-based) starts.
    fn grouped(dir: &SafeDir) -> (Vec<u8>, Vec<usize>) {
        let before = sample(dir).len();
        let (mut log, _) = ReceiptLog::open(dir, "r.jsonl").unwrap();
        staged(&mut log, &["check_result", "guard", "progress"]);
        log.commit().unwrap();
        let bytes = dir.read("r.jsonl", 1 << 20).unwrap();
        let mut starts = vec![before];
        for (i, b) in bytes.iter().enumerate().skip(before) {
            if *b == b'\n' && i + 1 < bytes.len() {
                starts.push(i + 1);
            }
        }
        (bytes, starts)
    }

    #[test]
    fn a_group_torn_inside_its_second_line_is_reported_and_cut_back_to_its_first() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let (bytes, starts) = grouped(&dir);
        let torn = &bytes[..starts[1] + 20];
        std::fs::write(tmp.path().join("r.jsonl"), torn).unwrap();
        assert_eq!(verify(torn).unwrap_err(), ChainError::Torn { line: 5 });
        let (mut log, events) = ReceiptLog::open(&dir, "r.jsonl").unwrap();
        assert_eq!(events.len(), 4);
        assert_eq!(events[3]["type"], "check_result");
        assert_eq!(dir.read("r.jsonl", 1 << 20).unwrap(), bytes[..starts[1]]);
        log.append("run_resumed", Map::new()).unwrap();
        let chain = verify(&dir.read("r.jsonl", 1 << 20).unwrap()).unwrap();
        assert_eq!(chain.events.len(), 5);
        assert_eq!(chain.events[4]["type"], "run_resumed");
    }

    #[test]
    fn a_group_torn_inside_its_first_line_leaves_the_receipt_as_before_the_group() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let (bytes, starts) = grouped(&dir);
        let torn = &bytes[..starts[0] + 7];
        std::fs::write(tmp.path().join("r.jsonl"), torn).unwrap();
        assert_eq!(verify(torn).unwrap_err(), ChainError::Torn { line: 4 });
        let (mut log, events) = ReceiptLog::open(&dir, "r.jsonl").unwrap();
        assert_eq!(events.len(), 3);
        log.append("run_resumed", Map::new()).unwrap();
        assert_eq!(
            verify(&dir.read("r.jsonl", 1 << 20).unwrap())
                .unwrap()
                .events
                .len(),
            4
        );
    }

    #[test]
    fn a_failed_commit_drops_its_group_and_the_next_append_chains_onto_the_disk() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let before = sample(&dir);
        let (mut log, _) = ReceiptLog::open(&dir, "r.jsonl").unwrap();
        let writable = std::mem::replace(
            &mut log.file,
            File::open(tmp.path().join("r.jsonl")).unwrap(),
        );
        staged(&mut log, &["check_result", "progress"]);
        assert!(matches!(log.commit(), Err(LogError::Io(_))));
        assert!(!log.has_staged());
        assert_eq!(dir.read("r.jsonl", 1 << 20).unwrap(), before);
        log.file = writable;
        log.append("run_interrupted", Map::new()).unwrap();
        let chain = verify(&dir.read("r.jsonl", 1 << 20).unwrap()).unwrap();
        assert_eq!(chain.events.len(), 4);
        assert_eq!(chain.events[3]["seq"], 3);
    }
}
