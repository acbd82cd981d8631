//! The per-run directories the supervisor shares with a zone under the system temporary
//! directory (`loopexec-held-feedback-*`, `loopexec-held-usage-*`): created private to the operator, shared
//! with the zone's group only when asked, held with an exclusive `flock` on the directory for the
//! supervisor's lifetime, and removed when dropped. A supervisor killed by SIGKILL cannot remove
//! its own: the next run or resume of any run sweeps every such directory of this user whose
//! lock can be taken (the kernel dropped it with its holder). A directory is made under a
//! `.loopexec-new-` name and renamed only once locked; one left under that name (a kill in
//! between) is swept once older than a minute.

use crate::error::Failure;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The kinds of these directories (`loopexec-held-<kind>-<random>`). The `held-` names are only
/// ever given to locked directories: a directory an older loopexec made (`loopexec-<kind>-*`,
/// never locked) is never taken for an abandoned one.
const KINDS: [&str; 2] = ["feedback", "usage"];

/// A `.loopexec-new-` directory younger than this is never swept: its supervisor may be about to
/// lock it.
const SWEEP_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// One shared directory, held (locked) while this value lives; removed when it is dropped.
pub struct SharedDir {
    path: PathBuf,
    _owner: File,
}

impl SharedDir {
    /// A fresh `loopexec-held-<what>-*` directory, mode 0700; with `gid`, its group is that gid and
    /// its mode `group_mode`. Made under a `.loopexec-new-` name, locked, then renamed: a
    /// directory under the final name is always locked while its supervisor lives.
    pub fn create(what: &str, gid: Option<u32>, group_mode: u32) -> Result<SharedDir, Failure> {
        let made = tempfile::Builder::new()
            .prefix(&format!(".loopexec-new-{what}-"))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|e| Failure::internal(format!("the {what} directory cannot be created: {e}")))?
            .keep();
        let owner = lock(&made)
            .map_err(|e| Failure::io(&made, &e))?
            .ok_or_else(|| {
                Failure::internal(format!(
                    "the {what} directory {} is locked by another process",
                    made.display()
                ))
            })?;
        let suffix = made
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(&format!(".loopexec-new-{what}-")))
            .unwrap_or_default()
            .to_string();
        let path = made.with_file_name(format!("loopexec-held-{what}-{suffix}"));
        if let Err(e) = std::fs::rename(&made, &path) {
            let _ = std::fs::remove_dir(&made);
            return Err(Failure::io(&path, &e));
        }
        let dir = SharedDir {
            path,
            _owner: owner,
        };
        if let Some(gid) = gid {
            std::os::unix::fs::chown(&dir.path, None, Some(gid))
                .map_err(|e| Failure::io(&dir.path, &e))?;
        }
        let mode = if gid.is_some() { group_mode } else { 0o700 };
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Failure::io(&dir.path, &e))?;
        Ok(dir)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SharedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// An exclusive, non-blocking `flock` on the directory at `path` (not following a link):
/// `Ok(None)` when another open file description holds a lock on it.
fn lock(path: &Path) -> std::io::Result<Option<File>> {
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(dir));
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(None),
        _ => Err(err),
    }
}

/// Remove the shared directories that supervisors of this user left when they were killed;
/// returns how many. Best effort: what cannot be read or removed is left.
pub fn sweep_abandoned() -> usize {
    let tmp = std::env::temp_dir();
    let Ok(entries) = std::fs::read_dir(&tmp) else {
        return 0;
    };
    let uid = nix::unistd::geteuid().as_raw();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let fresh = KINDS
            .iter()
            .any(|kind| name.starts_with(&format!(".loopexec-new-{kind}-")));
        let named = KINDS
            .iter()
            .any(|kind| name.starts_with(&format!("loopexec-held-{kind}-")));
        if !fresh && !named {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let young = fresh
            && meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_none_or(|age| age < SWEEP_AFTER);
        if !meta.is_dir() || meta.uid() != uid || young {
            continue;
        }
        if let Ok(Some(_held)) = lock(&path) {
            if std::fs::remove_dir_all(&path).is_ok() {
                removed += 1;
            }
        }
    }
    if removed > 0 {
        tracing::info!(removed, "removed shared directories of killed supervisors");
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_directory_cannot_be_locked_by_another_and_is_removed_when_dropped() {
        let shared = SharedDir::create("feedback", None, 0o750).unwrap();
        let path = shared.path().to_path_buf();
        assert!(lock(&path).unwrap().is_none(), "held by its supervisor");
        drop(shared);
        assert!(!path.exists());
    }

    #[test]
    fn a_directory_whose_holder_is_gone_is_swept_and_a_held_one_is_not() {
        let held = SharedDir::create("usage", None, 0o770).unwrap();
        let abandoned = SharedDir::create("feedback", None, 0o750).unwrap();
        let abandoned_path = abandoned.path().to_path_buf();
        // What a SIGKILL leaves: the directory, its holder's descriptor closed, nothing removed.
        let fd = abandoned._owner.as_raw_fd();
        std::mem::forget(abandoned);
        // SAFETY: the descriptor of the forgotten value, closed once, never used again.
        unsafe { libc::close(fd) };
        assert!(sweep_abandoned() >= 1);
        assert!(!abandoned_path.exists());
        assert!(held.path().exists());
    }
}
