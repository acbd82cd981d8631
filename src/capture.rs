//! Output capture: reads a child's stdout and stderr from raw pipe descriptors, concurrently and
//! to the end, keeping only a bounded head and tail of each stream in memory while a sha256 and a
//! byte count run over everything. When both streams reach end-of-file the kept bytes are written
//! as bounded artifact files (through [`SafeDir`], so no planted link is followed).
//!
//! Capture knows nothing about how the process was started: a zone backend creates the pipes and
//! hands the read ends to [`ArtifactSink::start`]. While it waits for its child it calls
//! [`CaptureInProgress::pump`], which polls the pipes together with the zone's own wake-up
//! descriptors (a pidfd, the interrupt socket) on the calling thread: no reader threads, no extra
//! scheduling per command. Each pump reads a bounded amount, so a flooding child can neither block
//! (the pipes keep being drained) nor starve the zone's timeout checks. Once no process holding a
//! write end is left, [`CaptureInProgress::finish`] drains to end-of-file and writes the artifacts.

use crate::safefs::{SafeDir, SafeFsError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// Bytes kept from the start of a stream.
pub const HEAD_BYTES: usize = 64 * 1024;
/// Bytes kept from the end of a stream.
pub const TAIL_BYTES: usize = 64 * 1024;
const READ_CHUNK: usize = 64 * 1024;
/// Reads per stream in one pump before control returns to the zone (bounds a pump to 1 MiB).
const READS_PER_PUMP: usize = 16;

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

impl StreamRecord {
    /// The stream's artifact bytes, when the whole stream fits `max_bytes` (`None`: it does not,
    /// it has no artifact, or the artifact cannot be read). The judge's answer is read with it,
    /// live by the engine and again by `verify`.
    pub fn artifact_within(
        &self,
        run_dir: &crate::safefs::SafeDir,
        max_bytes: u64,
    ) -> Option<Vec<u8>> {
        let rel = self.artifact.as_deref()?;
        (self.bytes <= max_bytes)
            .then(|| run_dir.read(rel, max_bytes).ok())
            .flatten()
    }
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
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("waiting for command output: {0}")]
    Poll(std::io::Error),
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
            self.tail
                .extend_from_slice(&chunk[chunk.len() - TAIL_BYTES..]);
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

/// One stream being drained: its (non-blocking) read end until end-of-file, and what was kept.
#[derive(Debug)]
struct Drain {
    file: Option<File>,
    tap: StreamTap,
}

impl Drain {
    fn new(fd: OwnedFd) -> Result<Drain, CaptureError> {
        let flags = nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)
            .map_err(|e| CaptureError::Read(e.into()))?;
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(flags))
            .map_err(|e| CaptureError::Read(e.into()))?;
        Ok(Drain {
            file: Some(File::from(fd)),
            tap: StreamTap::default(),
        })
    }

    /// Read what is available (at most `max_reads` chunks), showing it to `observer`; closes the
    /// stream at end-of-file.
    fn read_available(
        &mut self,
        buf: &mut [u8],
        max_reads: usize,
        observer: Option<&std::cell::RefCell<dyn StreamObserver + 'static>>,
    ) -> Result<(), CaptureError> {
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        for _ in 0..max_reads {
            match file.read(buf) {
                Ok(0) => {
                    self.file = None;
                    return Ok(());
                }
                Ok(n) => {
                    self.tap.feed(&buf[..n]);
                    if let Some(o) = observer {
                        o.borrow_mut().observe(&buf[..n]);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(CaptureError::Read(e)),
            }
        }
        Ok(())
    }
}

/// Something shown every byte of a command's stdout as it is read, in order, in chunks of any
/// size (the meter of an agent CLI's machine-readable output). It must bound its own memory.
pub trait StreamObserver {
    fn observe(&mut self, bytes: &[u8]);
}

/// Where the artifacts of one command go: `<dir>/<stem>.stdout` and `<stem>.stderr`, recorded in
/// the receipt as `<rel_prefix>/<stem>.stdout`; and who else sees the stdout.
pub struct ArtifactSink<'a> {
    dir: &'a SafeDir,
    rel_prefix: String,
    stem: String,
    stdout_observer: Option<&'a std::cell::RefCell<dyn StreamObserver + 'static>>,
}

impl std::fmt::Debug for ArtifactSink<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactSink")
            .field("rel_prefix", &self.rel_prefix)
            .field("stem", &self.stem)
            .field("stdout_observer", &self.stdout_observer.is_some())
            .finish()
    }
}

impl<'a> ArtifactSink<'a> {
    /// `dir` is the artifacts directory; `rel_prefix` its path relative to the run directory.
    pub fn new(dir: &'a SafeDir, rel_prefix: &str, stem: &str) -> Self {
        ArtifactSink {
            dir,
            rel_prefix: rel_prefix.to_string(),
            stem: stem.to_string(),
            stdout_observer: None,
        }
    }

    /// Show every stdout byte to `observer` too.
    pub fn observing_stdout(
        mut self,
        observer: &'a std::cell::RefCell<dyn StreamObserver + 'static>,
    ) -> Self {
        self.stdout_observer = Some(observer);
        self
    }

    /// Start capturing from the read ends of a command's stdout and stderr pipes.
    pub fn start(
        &self,
        stdout: OwnedFd,
        stderr: OwnedFd,
    ) -> Result<CaptureInProgress<'_>, CaptureError> {
        Ok(CaptureInProgress {
            sink: self,
            streams: [Drain::new(stdout)?, Drain::new(stderr)?],
            buf: vec![0u8; READ_CHUNK],
        })
    }

    fn write_artifact(&self, suffix: &str, tap: StreamTap) -> Result<StreamRecord, CaptureError> {
        let sha256 = hex::encode(tap.hasher.clone().finalize());
        let truncated = tap.omitted() > 0;
        if tap.total == 0 {
            return Ok(StreamRecord {
                bytes: 0,
                sha256,
                artifact: None,
                truncated: false,
            });
        }
        let name = format!("{}.{suffix}", self.stem);
        let mut file = self.dir.create_truncate(&name, 0o600)?;
        let io = |source| CaptureError::Write {
            path: format!("{}/{name}", self.rel_prefix),
            source,
        };
        file.write_all(&tap.head).map_err(io)?;
        if truncated {
            let marker = format!(
                "\n[loopexec: {} bytes omitted of {} total]\n",
                tap.omitted(),
                tap.total
            );
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
    streams: [Drain; 2],
    buf: Vec<u8>,
}

impl CaptureInProgress<'_> {
    /// Wait up to `timeout` for output or for one of `wake` to become readable, and read a bounded
    /// amount of whatever output is available. Returns whether a `wake` descriptor is readable.
    pub fn pump(
        &mut self,
        wake: &[BorrowedFd<'_>],
        timeout: Duration,
    ) -> Result<bool, CaptureError> {
        let open: Vec<usize> = (0..2).filter(|&i| self.streams[i].file.is_some()).collect();
        let mut fds: Vec<libc::pollfd> = open
            .iter()
            .filter_map(|&i| self.streams[i].file.as_ref())
            .map(|f| f.as_raw_fd())
            .chain(wake.iter().map(|w| w.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a valid pollfd array for the duration of the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(CaptureError::Poll(err));
        }
        for (slot, &i) in open.iter().enumerate() {
            if fds[slot].revents != 0 {
                let observer = if i == 0 {
                    self.sink.stdout_observer
                } else {
                    None
                };
                self.streams[i].read_available(&mut self.buf, READS_PER_PUMP, observer)?;
            }
        }
        Ok(fds[open.len()..].iter().any(|p| p.revents != 0))
    }

    /// stdout + stderr bytes read so far.
    pub fn bytes_so_far(&self) -> u64 {
        self.streams.iter().map(|s| s.tap.total).sum()
    }

    /// Drain both streams to end-of-file (the caller guarantees no writer is left) and write the
    /// artifacts.
    pub fn finish(mut self) -> Result<CapturedOutput, CaptureError> {
        while self.streams.iter().any(|s| s.file.is_some()) {
            self.pump(&[], Duration::from_secs(3600))?;
        }
        let [out, err] = self.streams;
        Ok(CapturedOutput {
            stdout: self.sink.write_artifact("stdout", out.tap)?,
            stderr: self.sink.write_artifact("stderr", err.tap)?,
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
        let data: Vec<u8> = (0..(HEAD_BYTES + TAIL_BYTES + 1000))
            .map(|i| (i % 251) as u8)
            .collect();
        for chunk in data.chunks(777) {
            tap.feed(chunk);
        }
        assert_eq!(tap.total, data.len() as u64);
        assert_eq!(tap.head, &data[..HEAD_BYTES]);
        assert_eq!(tap.tail(), &data[data.len() - TAIL_BYTES..]);
        assert_eq!(tap.omitted(), 1000);
        assert_eq!(
            hex::encode(tap.hasher.finalize()),
            hex::encode(Sha256::digest(&data))
        );
    }

    #[derive(Default)]
    struct Seen(Vec<u8>);

    impl StreamObserver for Seen {
        fn observe(&mut self, bytes: &[u8]) {
            self.0.extend_from_slice(bytes);
        }
    }

    #[test]
    fn an_observer_sees_every_stdout_byte_in_order_and_none_of_stderr() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let (out_r, out_w) = nix::unistd::pipe().unwrap();
        let (err_r, err_w) = nix::unistd::pipe().unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
        let writer = {
            let data = data.clone();
            std::thread::spawn(move || {
                let mut out = File::from(out_w);
                let mut err = File::from(err_w);
                out.write_all(&data).unwrap();
                err.write_all(b"not for the observer").unwrap();
            })
        };
        let seen = std::cell::RefCell::new(Seen::default());
        let sink = ArtifactSink::new(&dir, "artifacts", "t").observing_stdout(&seen);
        let capture = sink.start(out_r, err_r).unwrap();
        // finish drains both pipes to end-of-file, which the writer reaches once it has written all.
        let captured = capture.finish().unwrap();
        writer.join().unwrap();
        assert_eq!(captured.stdout.bytes, data.len() as u64);
        assert_eq!(seen.into_inner().0, data);
    }
}
