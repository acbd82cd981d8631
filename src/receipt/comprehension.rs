//! The comprehension gate's files in the state dir (docs/gates.md, "The comprehension gate"):
//! the workspace's ledger of accepted diffs and its ack log, both under
//! `<workdir>/.loopexec/comprehension/`, kept across runs.
//!
//! `ledger.jsonl`: a header line (`loopexec.comprehension/v1`, the ledger id minted when it was
//! created) then one entry per accepted iteration (run id, iteration, from-tree, to-tree and the
//! diff digest: sha256 over `loopexec.diff/v1` NUL from NUL to). `acks.jsonl`: one signed
//! `loopexec.ack/v1` line per `loopexec ack`, hash-chained (seq, the sha256 of the line before)
//! and bound to the ledger id. Both are append-only (one write per line, fsync'd) and read
//! bounded; what an ack line proves is judged by the ack rule (`rules/comprehension.rs`). A ledger that
//! does not read as one is bad state: an error, never a guess.

use super::keys::{self, OperatorKey};
use crate::error::{fs_failure, CmdResult, Failure};
use crate::safefs::SafeDir;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::fd::AsRawFd;

/// The directory under `.loopexec/`.
pub const DIR: &str = "comprehension";
pub const LEDGER_FILE: &str = "ledger.jsonl";
pub const ACKS_FILE: &str = "acks.jsonl";
const LOCK_FILE: &str = "lock";
pub const LEDGER_SCHEMA: &str = "loopexec.comprehension/v1";
pub const ACK_SCHEMA: &str = "loopexec.ack/v1";
/// Domain separation of a diff digest and of an ack signature.
const DIFF_CONTEXT: &[u8] = b"loopexec.diff/v1";
const ACK_CONTEXT: &[u8] = b"loopexec.ack/v1";
/// The `prev` of the first ack line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// Bounds on what is read back (both files are in the workdir, writable by whoever can write it).
pub const MAX_LEDGER_BYTES: u64 = 16 * 1024 * 1024;
pub const MAX_ACKS_BYTES: u64 = 8 * 1024 * 1024;

/// The ledger's first line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    schema: String,
    ledger_id: String,
    created_at: String,
}

/// One accepted iteration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerEntry {
    pub run_id: String,
    pub iteration: u64,
    pub from_tree: String,
    pub to_tree: String,
    pub digest: String,
}

/// The ledger as read.
#[derive(Debug, Clone)]
pub struct Ledger {
    pub ledger_id: String,
    pub entries: Vec<LedgerEntry>,
}

/// One ack: what its reviewer key signs, and the signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckLine {
    pub schema: String,
    pub ledger_id: String,
    pub seq: u64,
    /// sha256 (hex) of the ack log's line before this one ([`GENESIS`] for the first).
    pub prev: String,
    /// The run the ack was made for (`loopexec ack RUN`).
    pub run_id: String,
    /// The reviewer's raw Ed25519 public key, hex.
    pub reviewer: String,
    pub digests: Vec<String>,
    pub signed_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// At most this many unread digests and ack outcomes are listed in a `comprehension` event.
pub const LISTED: usize = 200;

/// What one ack line did for the run: the digests it cleared, or why it cleared nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckOutcome {
    pub line: u64,
    pub line_sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
    /// The unread digests this ack cleared (empty: nothing it listed was still unread).
    #[serde(default)]
    pub cleared: Vec<String>,
    /// Why it cleared nothing, when it proves nothing for this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
}

/// The diff digest of an accepted step from `from` to `to` (git tree ids).
pub fn diff_digest(from: &str, to: &str) -> String {
    let mut h = Sha256::new();
    h.update(DIFF_CONTEXT);
    for part in [from, to] {
        h.update([0u8]);
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize())
}

/// sha256 (hex) of one raw line (without its newline).
pub fn line_hash(line: &[u8]) -> String {
    hex::encode(Sha256::digest(line))
}

/// The exact bytes a reviewer key signs for an ack line.
pub fn ack_message(
    ledger_id: &str,
    seq: u64,
    prev: &str,
    run_id: &str,
    digests: &[String],
) -> Vec<u8> {
    let mut msg = ACK_CONTEXT.to_vec();
    for part in [
        ledger_id,
        &seq.to_string(),
        prev,
        run_id,
        &digests.join(","),
    ] {
        msg.push(0);
        msg.extend_from_slice(part.as_bytes());
    }
    msg
}

/// Sign the next ack line of a log whose last line hashes to `prev` (`lines` lines so far).
pub fn sign_ack(
    key: &OperatorKey,
    ledger_id: &str,
    lines: usize,
    prev: &str,
    run_id: &str,
    digests: Vec<String>,
) -> AckLine {
    let seq = lines as u64 + 1;
    let signature = super::dsse::b64(
        &key.sign(&ack_message(ledger_id, seq, prev, run_id, &digests))
            .to_bytes(),
    );
    AckLine {
        schema: ACK_SCHEMA.into(),
        ledger_id: ledger_id.into(),
        seq,
        prev: prev.into(),
        run_id: run_id.into(),
        reviewer: hex::encode(key.verifying_key().as_bytes()),
        digests,
        signed_at: crate::timestamp::now_rfc3339(),
        signature: Some(signature),
    }
}

/// Whether `text` is a reviewer public key as loop.toml and `--reviewer-pubkey` give it.
pub fn is_public_key(text: &str) -> bool {
    keys::public_key_from_hex(text).is_some() && text.len() == 64
}

/// The raw lines of a JSON-lines file (empty lines skipped).
pub fn lines_of(bytes: &[u8]) -> Vec<&[u8]> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect()
}

/// The comprehension directory of a state dir.
pub struct Files {
    dir: SafeDir,
}

/// The ack log's lock, held while a line is appended (the chain needs one writer at a time).
pub struct AckLock {
    _file: std::fs::File,
}

impl Files {
    /// Open (creating it) the directory under the state dir root.
    pub fn open_or_create(statedir: &SafeDir) -> CmdResult<Files> {
        Ok(Files {
            dir: statedir.subdir_or_create(DIR).map_err(fs_failure)?,
        })
    }

    /// Open the directory if it exists.
    pub fn open(statedir: &SafeDir) -> CmdResult<Option<Files>> {
        if !statedir.exists(DIR) {
            return Ok(None);
        }
        Ok(Some(Files {
            dir: statedir.subdir(DIR).map_err(fs_failure)?,
        }))
    }

    fn bad(&self, file: &str, what: String) -> Failure {
        Failure::workspace(format!("{}: {what}", self.dir.path().join(file).display()))
            .with_hint("the comprehension ledger is loopexec's own state; restore it, or remove .loopexec/comprehension/ to start the workspace's debt over")
    }

    /// Read the ledger (`None`: there is none yet).
    pub fn ledger(&self) -> CmdResult<Option<Ledger>> {
        if !self.dir.exists(LEDGER_FILE) {
            return Ok(None);
        }
        let bytes = self
            .dir
            .read(LEDGER_FILE, MAX_LEDGER_BYTES)
            .map_err(fs_failure)?;
        let mut lines = lines_of(&bytes).into_iter();
        let header: Header = lines
            .next()
            .and_then(|l| serde_json::from_slice(l).ok())
            .filter(|h: &Header| h.schema == LEDGER_SCHEMA && !h.ledger_id.is_empty())
            .ok_or_else(|| {
                self.bad(
                    LEDGER_FILE,
                    format!("line 1 is not a {LEDGER_SCHEMA} header"),
                )
            })?;
        let mut entries = Vec::new();
        for (i, line) in lines.enumerate() {
            let entry: LedgerEntry = serde_json::from_slice(line).map_err(|e| {
                self.bad(
                    LEDGER_FILE,
                    format!("line {} is not a ledger entry ({e})", i + 2),
                )
            })?;
            let tree = |t: &str| {
                !t.is_empty() && t.len() <= 64 && t.bytes().all(|b| b.is_ascii_hexdigit())
            };
            if !tree(&entry.from_tree)
                || !tree(&entry.to_tree)
                || crate::run_id::RunId::parse(&entry.run_id).is_err()
            {
                return Err(self.bad(
                    LEDGER_FILE,
                    format!("line {}: names no run id and git trees", i + 2),
                ));
            }
            if entry.digest != diff_digest(&entry.from_tree, &entry.to_tree) {
                return Err(self.bad(
                    LEDGER_FILE,
                    format!(
                        "line {}: its digest is not the digest of {} -> {}",
                        i + 2,
                        entry.from_tree,
                        entry.to_tree
                    ),
                ));
            }
            entries.push(entry);
        }
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            return Err(self.bad(LEDGER_FILE, "its last line is incomplete".into()));
        }
        Ok(Some(Ledger {
            ledger_id: header.ledger_id,
            entries,
        }))
    }

    /// The ledger, created with a new id when there is none.
    pub fn ledger_or_create(&self) -> CmdResult<Ledger> {
        if let Some(ledger) = self.ledger()? {
            return Ok(ledger);
        }
        let mut id = [0u8; 16];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut id);
        let header = Header {
            schema: LEDGER_SCHEMA.into(),
            ledger_id: hex::encode(id),
            created_at: crate::timestamp::now_rfc3339(),
        };
        let mut line = serde_json::to_vec(&header).map_err(|e| Failure::internal(e.to_string()))?;
        line.push(b'\n');
        // Written whole under a temporary name, then moved in place: a reader never sees half a header.
        let tmp = format!(".{LEDGER_FILE}.new-{}", std::process::id());
        self.dir.write_atomic(&tmp, &line).map_err(fs_failure)?;
        let fd = self.dir.fd().as_raw_fd();
        // Hard link (fails if another process created the ledger first), then drop the temporary name.
        let linked = nix::unistd::linkat(
            Some(fd),
            tmp.as_str(),
            Some(fd),
            LEDGER_FILE,
            nix::fcntl::AtFlags::empty(),
        );
        let _ = nix::unistd::unlinkat(
            Some(fd),
            tmp.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        match linked {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => {
                return Err(Failure::io(
                    &self.dir.path().join(LEDGER_FILE),
                    &std::io::Error::from(e),
                ))
            }
        }
        self.dir.sync().map_err(fs_failure)?;
        self.ledger()?
            .ok_or_else(|| Failure::internal("the ledger just created is gone"))
    }

    /// Append one entry (one write, fsync'd).
    pub fn append_entry(&self, entry: &LedgerEntry) -> CmdResult<()> {
        let mut line = serde_json::to_vec(entry).map_err(|e| Failure::internal(e.to_string()))?;
        line.push(b'\n');
        append(&self.dir, LEDGER_FILE, &line)
    }

    /// The ack log's raw bytes (empty when there is none yet), bounded.
    pub fn acks(&self) -> CmdResult<Vec<u8>> {
        if !self.dir.exists(ACKS_FILE) {
            return Ok(Vec::new());
        }
        self.dir.read(ACKS_FILE, MAX_ACKS_BYTES).map_err(fs_failure)
    }

    /// Take the ack log's lock (waits for another `ack` to finish).
    pub fn lock_acks(&self) -> CmdResult<AckLock> {
        let file = self.dir.open_rw(LOCK_FILE).map_err(fs_failure)?;
        // SAFETY: flock is plain old data; all-zero is a valid value we then fill in.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        // SAFETY: fcntl on a descriptor we own with a valid `struct flock`.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLKW, &mut fl) };
        if rc != 0 {
            return Err(Failure::io(
                &self.dir.path().join(LOCK_FILE),
                &std::io::Error::last_os_error(),
            ));
        }
        Ok(AckLock { _file: file })
    }

    /// Append one ack line (under [`Files::lock_acks`]).
    pub fn append_ack(&self, _lock: &AckLock, ack: &AckLine) -> CmdResult<Vec<u8>> {
        let line = serde_json::to_vec(ack).map_err(|e| Failure::internal(e.to_string()))?;
        let mut whole = line.clone();
        whole.push(b'\n');
        append(&self.dir, ACKS_FILE, &whole)?;
        Ok(line)
    }

    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

fn append(dir: &SafeDir, name: &str, bytes: &[u8]) -> CmdResult<()> {
    let mut file = dir.open_append(name).map_err(fs_failure)?;
    file.write_all(bytes)
        .and_then(|_| file.sync_all())
        .map_err(|e| Failure::io(&dir.path().join(name), &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> (tempfile::TempDir, Files) {
        let tmp = tempfile::tempdir().unwrap();
        let root = SafeDir::open(tmp.path()).unwrap();
        let files = Files::open_or_create(&root).unwrap();
        (tmp, files)
    }

    #[test]
    fn a_diff_digest_binds_both_trees_in_order() {
        assert_ne!(diff_digest("a", "b"), diff_digest("b", "a"));
        assert_ne!(diff_digest("ab", ""), diff_digest("a", "b"));
        assert_eq!(diff_digest("a", "b").len(), 64);
    }

    #[test]
    fn a_ledger_is_created_once_and_reads_back_its_entries() {
        let (_tmp, files) = files();
        let ledger = files.ledger_or_create().unwrap();
        let entry = LedgerEntry {
            run_id: "r".into(),
            iteration: 1,
            from_tree: "aa0".into(),
            to_tree: "aa1".into(),
            digest: diff_digest("aa0", "aa1"),
        };
        files.append_entry(&entry).unwrap();
        let again = files.ledger_or_create().unwrap();
        assert_eq!(again.ledger_id, ledger.ledger_id);
        assert_eq!(again.entries, vec![entry]);
    }

    #[test]
    fn a_ledger_entry_whose_digest_is_not_its_trees_is_bad_state() {
        let (_tmp, files) = files();
        files.ledger_or_create().unwrap();
        let entry = LedgerEntry {
            run_id: "r".into(),
            iteration: 1,
            from_tree: "aa0".into(),
            to_tree: "aa1".into(),
            digest: diff_digest("aa0", "aa2"),
        };
        files.append_entry(&entry).unwrap();
        let err = files.ledger().unwrap_err();
        assert_eq!(err.code, crate::error::FailureCode::WorkspaceInvalid);
        assert!(
            err.message
                .ends_with("line 2: its digest is not the digest of aa0 -> aa1"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_ledger_without_its_header_is_bad_state() {
        let (_tmp, files) = files();
        std::fs::write(files.path().join(LEDGER_FILE), b"{\"run_id\":\"r\"}\n").unwrap();
        let err = files.ledger().unwrap_err();
        assert!(
            err.message
                .ends_with("line 1 is not a loopexec.comprehension/v1 header"),
            "{}",
            err.message
        );
    }
}
