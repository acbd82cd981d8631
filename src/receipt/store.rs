//! The operator-side state directory `<workdir>/.loopexec/` and its run directories.
//!
//! Layout: `state.json` (summary of the latest run), `latest` (the latest run id), and
//! `runs/<id>/{receipt.jsonl, state.json, lock, artifacts/}`, and `probes/<id>/` (a probe's signed
//! receipt, `receipt::probe`). Everything is reached through
//! [`SafeDir`], so a symlink planted anywhere below `.loopexec/` is refused (`workspace_invalid`,
//! exit 30) and its target is never touched.

use super::chain::{LogError, ReceiptLog};
use super::state::{RunState, MAX_STATE_BYTES};
use crate::error::Failure;
use crate::run_id::RunId;
use crate::safefs::{SafeDir, SafeFsError};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

pub const STATE_DIR: &str = ".loopexec";
pub const RUNS: &str = "runs";
pub const RECEIPT: &str = "receipt.jsonl";
pub const STATE_FILE: &str = "state.json";
pub const LATEST: &str = "latest";
pub const ARTIFACTS: &str = "artifacts";
const LOCK: &str = "lock";

pub use crate::error::fs_failure;

pub fn log_failure(err: LogError) -> Failure {
    match err {
        LogError::Fs(e) => fs_failure(e),
        LogError::Chain(e) => Failure::workspace(format!("receipt does not verify: {e}")),
        LogError::Io(e) => Failure::new(
            crate::error::FailureCode::Io,
            format!("receipt write failed: {e}"),
        ),
    }
}

/// Refuse when one of `names` directly in `dir` is a symlink. Files that are replaced by rename
/// (state.json, latest) would otherwise silently replace a planted link instead of refusing it.
fn refuse_links(dir: &SafeDir, names: &[&str]) -> Result<(), Failure> {
    use nix::sys::stat::{fstatat, SFlag};
    for name in names {
        if let Ok(st) = fstatat(
            Some(dir.fd().as_raw_fd()),
            *name,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFLNK {
                return Err(fs_failure(SafeFsError::Symlink {
                    path: dir.path().join(name),
                }));
            }
        }
    }
    Ok(())
}

/// `<workdir>/.loopexec/`.
#[derive(Debug)]
pub struct StateDir {
    root: SafeDir,
}

impl StateDir {
    /// Open an existing state dir (for status, report, resume), refusing planted links.
    pub fn open(workdir: &Path) -> Result<StateDir, Failure> {
        let dir = StateDir::open_for_inspection(workdir)?;
        refuse_links(&dir.root, &[RUNS, LATEST, STATE_FILE])?;
        Ok(dir)
    }

    /// Open an existing state dir without refusing links inside it, for `check`, which lists
    /// every problem instead of stopping at the first (it still never follows a link).
    pub fn open_for_inspection(workdir: &Path) -> Result<StateDir, Failure> {
        let path = workdir.join(STATE_DIR);
        match SafeDir::open(&path) {
            Ok(root) => Ok(StateDir { root }),
            Err(e) if e.is_not_found() => Err(Failure::workspace(format!(
                "{}: no state directory",
                path.display()
            ))
            .with_hint("run `loopexec init` or `loopexec run` in this workdir first")),
            Err(e) => Err(fs_failure(e)),
        }
    }

    /// Open the state dir, creating it and `runs/` when missing.
    pub fn open_or_create(workdir: &Path) -> Result<StateDir, Failure> {
        let root = SafeDir::open_or_create(&workdir.join(STATE_DIR)).map_err(fs_failure)?;
        refuse_links(&root, &[RUNS, LATEST, STATE_FILE])?;
        root.subdir_or_create(RUNS).map_err(fs_failure)?;
        Ok(StateDir { root })
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    pub fn root(&self) -> &SafeDir {
        &self.root
    }

    pub fn runs(&self) -> Result<SafeDir, Failure> {
        self.root.subdir(RUNS).map_err(fs_failure)
    }

    /// Create the directory of a new run (refusing an id already used).
    pub fn create_run(&self, id: &RunId) -> Result<RunDir, Failure> {
        let runs = self.root.subdir_or_create(RUNS).map_err(fs_failure)?;
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o700);
        match nix::sys::stat::mkdirat(Some(runs.fd().as_raw_fd()), id.as_str(), mode) {
            Ok(()) => {}
            Err(nix::errno::Errno::EEXIST) => {
                return Err(Failure::usage(format!(
                    "run id {id} is already used in {}",
                    runs.path().display()
                ))
                .with_hint("choose another --run-id, or continue it with `run --resume <id>`"))
            }
            Err(e) => {
                return Err(Failure::io(
                    &runs.path().join(id.as_str()),
                    &std::io::Error::from(e),
                ))
            }
        }
        let dir = runs.subdir(id.as_str()).map_err(fs_failure)?;
        dir.subdir_or_create(ARTIFACTS).map_err(fs_failure)?;
        runs.sync().map_err(fs_failure)?;
        Ok(RunDir {
            dir,
            id: id.clone(),
        })
    }

    /// Open the directory of an existing run.
    pub fn open_run(&self, id: &RunId) -> Result<RunDir, Failure> {
        let runs = self.runs()?;
        match runs.subdir(id.as_str()) {
            Ok(dir) => {
                refuse_links(&dir, &[RECEIPT, STATE_FILE, LOCK, ARTIFACTS])?;
                Ok(RunDir {
                    dir,
                    id: id.clone(),
                })
            }
            Err(e) if e.is_not_found() => Err(Failure::workspace(format!(
                "no run {id} in {}",
                runs.path().display()
            ))
            .with_hint("`loopexec status` names the latest run; `ls .loopexec/runs` lists them")),
            Err(e) => Err(fs_failure(e)),
        }
    }

    /// The run id in `latest`, if any.
    pub fn latest(&self) -> Result<Option<RunId>, Failure> {
        match self.root.read(LATEST, 256) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                RunId::parse(text.trim()).map(Some).map_err(|f| {
                    Failure::workspace(format!("{}/latest: {}", self.path().display(), f.message))
                })
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(fs_failure(e)),
        }
    }

    /// The run named by the operator, or the latest one.
    pub fn resolve(&self, explicit: Option<&str>) -> Result<RunDir, Failure> {
        let id = match explicit {
            Some(raw) => RunId::parse(raw)?,
            None => self.latest()?.ok_or_else(|| {
                Failure::workspace(format!("{}: no run yet", self.path().display()))
                    .with_hint("start one with `loopexec run`")
            })?,
        };
        self.open_run(&id)
    }

    /// Point `latest` and `.loopexec/state.json` at this run (both atomic).
    pub fn publish_latest(&self, state: &RunState) -> Result<(), Failure> {
        self.root
            .write_atomic(LATEST, format!("{}\n", state.run_id).as_bytes())
            .map_err(fs_failure)?;
        self.root
            .write_atomic(STATE_FILE, &state.to_bytes())
            .map_err(fs_failure)
    }

    /// Whether `.loopexec/state.json` exists (used by `check`).
    pub fn read_summary(&self) -> Result<Option<RunState>, Failure> {
        match self.root.read(STATE_FILE, MAX_STATE_BYTES) {
            Ok(bytes) => RunState::from_bytes(&bytes).map(Some).map_err(|e| {
                Failure::workspace(format!("{}/state.json: {e}", self.path().display()))
            }),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(fs_failure(e)),
        }
    }
}

fn whole_file_write_lock() -> libc::flock {
    // SAFETY: flock is plain old data; all-zero is a valid value we then fill in.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl
}

/// `.loopexec/runs/<id>/`.
#[derive(Debug)]
pub struct RunDir {
    dir: SafeDir,
    id: RunId,
}

/// An exclusive lock on a run directory, held while a process drives the run.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

impl RunDir {
    pub fn id(&self) -> &RunId {
        &self.id
    }

    pub fn dir(&self) -> &SafeDir {
        &self.dir
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The receipt path relative to `.loopexec/`.
    pub fn receipt_rel(&self) -> String {
        format!("{RUNS}/{}/{RECEIPT}", self.id)
    }

    pub fn receipt_path(&self) -> PathBuf {
        self.dir.path().join(RECEIPT)
    }

    pub fn artifacts(&self) -> Result<SafeDir, Failure> {
        self.dir.subdir_or_create(ARTIFACTS).map_err(fs_failure)
    }

    /// Take the run's lock (an open-file-description write lock on `lock`), refusing when another
    /// process holds it. Released when the returned guard is dropped or the process dies.
    pub fn lock(&self) -> Result<RunLock, Failure> {
        let file = self.dir.open_rw(LOCK).map_err(fs_failure)?;
        let mut fl = whole_file_write_lock();
        // SAFETY: fcntl on a descriptor we own with a valid `struct flock`.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
        if rc != 0 {
            return Err(Failure::workspace(format!(
                "run {} is being driven by another loopexec process",
                self.id
            ))
            .with_hint("wait for it, or stop it with SIGINT/SIGTERM, then resume"));
        }
        Ok(RunLock { _file: file })
    }

    /// Whether some process holds the run's lock (tested without taking it).
    pub fn is_driven(&self) -> bool {
        let Ok(file) = self.dir.open_read(LOCK) else {
            return false;
        };
        let mut fl = whole_file_write_lock();
        // SAFETY: as above; F_OFD_GETLK only reports.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
        rc == 0 && fl.l_type != libc::F_UNLCK as libc::c_short
    }

    pub fn create_receipt(&self) -> Result<ReceiptLog, Failure> {
        ReceiptLog::create(&self.dir, RECEIPT).map_err(log_failure)
    }

    pub fn open_receipt(
        &self,
    ) -> Result<(ReceiptLog, Vec<serde_json::Map<String, serde_json::Value>>), Failure> {
        ReceiptLog::open(&self.dir, RECEIPT).map_err(log_failure)
    }

    /// [`RunDir::open_receipt`], with the bytes its events were verified from (read once).
    pub fn open_receipt_read(&self) -> Result<super::chain::OpenedReceipt, Failure> {
        ReceiptLog::open_read(&self.dir, RECEIPT).map_err(log_failure)
    }

    /// Raw receipt bytes (for verification without repairing anything).
    pub fn receipt_bytes(&self) -> Result<Vec<u8>, Failure> {
        self.dir
            .read(RECEIPT, super::chain::MAX_RECEIPT_BYTES)
            .map_err(fs_failure)
    }

    pub fn write_state(&self, state: &RunState) -> Result<(), Failure> {
        self.dir
            .write_atomic(STATE_FILE, &state.to_bytes())
            .map_err(fs_failure)
    }

    pub fn read_state(&self) -> Result<RunState, Failure> {
        let bytes = self
            .dir
            .read(STATE_FILE, MAX_STATE_BYTES)
            .map_err(fs_failure)?;
        RunState::from_bytes(&bytes)
            .map_err(|e| Failure::workspace(format!("{}/state.json: {e}", self.path().display())))
    }
}
