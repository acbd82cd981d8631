//! Output capture: reads a child's stdout and stderr from raw pipe descriptors, concurrently and
//! to the end, keeping only a bounded head and tail of each stream in memory while a sha256 and a
//! byte count run over everything. When both streams reach end-of-file the kept bytes are written
//! as bounded artifact files (through [`SafeDir`], so no planted link is followed).
//!
//! Capture knows nothing about how the process was started: a zone backend creates the pipes, hands
//! the read ends to [`ArtifactSink::start`], and calls [`CaptureInProgress::finish`] once no process
//! that holds a write end is left. The reader threads never stop reading, so a flooding child is
//! never blocked on a full pipe and memory stays at a few hundred KiB whatever the volume.

use crate::safefs::{SafeDir, SafeFsError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::thread::JoinHandle;

/// Bytes kept from the start of a stream.
pub const HEAD_BYTES: usize = 64 * 1024;
/// Bytes kept from the end of a stream.
pub const TAIL_BYTES: usize = 64 * 1024;
const READ_CHUNK: usize = 64 * 1024;

/// What the receipt records about one captured stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    /// Total bytes the command wrote.
    pub bytes: u64,
    /// sha256 (lowercase hex) over all of them.
    pub sha256: String,
    /// The artifact file, relative to the run directory; `None` when the stream was empty.
    pub artifact: Option<String>,
    /// Whether the middle of the stream was dropped from the artifact.
    pub truncated: bool,
}

/// Both streams of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedOutput {
    pub stdout: StreamRecord,
    pub stderr: StreamRecord,
}

/// Why capture failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("reading command output: {0}")]
    Read(std::io::Error),
    #[error("writing output artifact: {0}")]
    Artifact(#[from] SafeFsError),
    #[error("writing output artifact {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("an output reader thread panicked")]
    ReaderPanicked,
}

/// The bounded in-memory view of one stream plus its digest. The tail is kept in a buffer of at
/// most `2 * TAIL_BYTES` that is compacted (one memmove) when full, so each byte costs O(1).
#[derive(Debug, Default)]
struct StreamTap {
    head: Vec<u8>,
    tail: Vec<u8>,
    total: u64,
    hasher: Sha256,
}

impl StreamTap {
    fn feed(&mut self, mut chunk: &[u8]) {
        self.hasher.update(chunk);
        self.total += chunk.len() as u64;
        if self.head.len() < HEAD_BYTES {
            let take = (HEAD_BYTES - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        if chunk.is_empty() {
            return;
        }
        if chunk.len() >= TAIL_BYTES {
            self.tail.clear();
            self.tail.extend_from_slice(&chunk[chunk.len() - TAIL_BYTES..]);
            return;
        }
        if self.tail.len() + chunk.len() > 2 * TAIL_BYTES {
            let keep_from = self.tail.len() - (TAIL_BYTES - chunk.len());
            self.tail.drain(..keep_from);
        }
        self.tail.extend_from_slice(chunk);
    }

    /// The kept end of the stream (at most `TAIL_BYTES`).
    fn tail(&self) -> &[u8] {
        &self.tail[self.tail.len().saturating_sub(TAIL_BYTES)..]
    }

    /// Bytes of the stream that are in neither the head nor the tail.
    fn omitted(&self) -> u64 {
        self.total - self.head.len() as u64 - self.tail().len() as u64
    }
}

fn read_to_end(fd: OwnedFd) -> Result<StreamTap, std::io::Error> {
    let mut file = File::from(fd);
    let mut tap = StreamTap::default();
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(tap),
            Ok(n) => tap.feed(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Where the artifacts of one command go: `<dir>/<stem>.stdout` and `<stem>.stderr`, recorded in
/// the receipt as `<rel_prefix>/<stem>.stdout`.
#[derive(Debug)]
pub struct ArtifactSink<'a> {
    dir: &'a SafeDir,
    rel_prefix: String,
    stem: String,
}

impl<'a> ArtifactSink<'a> {
    /// `dir` is the artifacts directory; `rel_prefix` its path relative to the run directory.
    pub fn new(dir: &'a SafeDir, rel_prefix: &str, stem: &str) -> Self {
        ArtifactSink { dir, rel_prefix: rel_prefix.to_string(), stem: stem.to_string() }
    }

    /// Start draining both read ends on their own threads.
    pub fn start(&self, stdout: OwnedFd, stderr: OwnedFd) -> CaptureInProgress<'_> {
        let out = std::thread::spawn(move || read_to_end(stdout));
        let err = std::thread::spawn(move || read_to_end(stderr));
        CaptureInProgress { sink: self, stdout: out, stderr: err }
    }

    fn write_artifact(&self, suffix: &str, tap: StreamTap) -> Result<StreamRecord, CaptureError> {
        let sha256 = hex::encode(tap.hasher.clone().finalize());
        let truncated = tap.omitted() > 0;
        if tap.total == 0 {
            return Ok(StreamRecord { bytes: 0, sha256, artifact: None, truncated: false });
        }
        let name = format!("{}.{suffix}", self.stem);
        let mut file = self.dir.create_truncate(&name, 0o600)?;
        let io = |source| CaptureError::Write { path: format!("{}/{name}", self.rel_prefix), source };
        file.write_all(&tap.head).map_err(io)?;
        if truncated {
            let marker = format!("\n[loopexec: {} bytes omitted of {} total]\n", tap.omitted(), tap.total);
            file.write_all(marker.as_bytes()).map_err(io)?;
        }
        file.write_all(tap.tail()).map_err(io)?;
        Ok(StreamRecord {
            bytes: tap.total,
            sha256,
            artifact: Some(format!("{}/{name}", self.rel_prefix)),
            truncated,
        })
    }
}

/// Both streams being drained.
#[derive(Debug)]
pub struct CaptureInProgress<'a> {
    sink: &'a ArtifactSink<'a>,
    stdout: JoinHandle<Result<StreamTap, std::io::Error>>,
    stderr: JoinHandle<Result<StreamTap, std::io::Error>>,
}

impl CaptureInProgress<'_> {
    /// Wait for end-of-file on both streams (the caller guarantees no writer is left) and write
    /// the artifacts.
    pub fn finish(self) -> Result<CapturedOutput, CaptureError> {
        let out = self.stdout.join().map_err(|_| CaptureError::ReaderPanicked)?.map_err(CaptureError::Read)?;
        let err = self.stderr.join().map_err(|_| CaptureError::ReaderPanicked)?.map_err(CaptureError::Read)?;
        Ok(CapturedOutput {
            stdout: self.sink.write_artifact("stdout", out)?,
            stderr: self.sink.write_artifact("stderr", err)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_stream_is_kept_whole() {
        let mut tap = StreamTap::default();
        tap.feed(b"hello ");
        tap.feed(b"world");
        assert_eq!(tap.head, b"hello world");
        assert!(tap.tail().is_empty());
        assert_eq!(tap.omitted(), 0);
    }

    #[test]
    fn a_long_stream_keeps_head_and_tail_and_counts_the_rest() {
        let mut tap = StreamTap::default();
        let data: Vec<u8> = (0..(HEAD_BYTES + TAIL_BYTES + 1000)).map(|i| (i % 251) as u8).collect();
        for chunk in data.chunks(777) {
            tap.feed(chunk);
        }
        assert_eq!(tap.total, data.len() as u64);
        assert_eq!(tap.head, &data[..HEAD_BYTES]);
        assert_eq!(tap.tail(), &data[data.len() - TAIL_BYTES..]);
        assert_eq!(tap.omitted(), 1000);
        assert_eq!(hex::encode(tap.hasher.finalize()), hex::encode(Sha256::digest(&data)));
    }
}
