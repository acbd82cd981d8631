//! Symlink-proof file access beneath a directory the supervisor owns (the state dir, a run dir).
//!
//! Every open goes through `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, relative to a
//! directory file descriptor, so a symlink or `..` planted anywhere on the path is refused by the
//! kernel (ELOOP / EXDEV) instead of followed. Writes that replace a file are atomic: a temporary
//! file in the same directory, fsync, `renameat`, fsync of the directory.

use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A directory opened without following symlinks; all paths below it are resolved safely.
#[derive(Debug)]
pub struct SafeDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// Why a safe file operation failed, always naming the path.
#[derive(Debug, thiserror::Error)]
pub enum SafeFsError {
    #[error("{path}: refusing to follow a symlink or leave the directory (a planted link?)")]
    Symlink { path: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: larger than the {limit} bytes allowed")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{path}: not a regular file (a fifo, device or directory planted in its place?)")]
    NotRegular { path: PathBuf },
}

impl SafeFsError {
    fn from_errno(path: PathBuf, e: Errno) -> Self {
        match e {
            Errno::ELOOP | Errno::EXDEV => SafeFsError::Symlink { path },
            other => SafeFsError::Io {
                path,
                source: std::io::Error::from(other),
            },
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, SafeFsError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

fn resolve_flags() -> ResolveFlag {
    ResolveFlag::RESOLVE_BENEATH
        | ResolveFlag::RESOLVE_NO_SYMLINKS
        | ResolveFlag::RESOLVE_NO_MAGICLINKS
}

impl SafeDir {
    /// Open `path` as a directory. The last component must not be a symlink; components above it
    /// are the operator's choice (a workdir reached through a link is fine).
    pub fn open(path: &Path) -> Result<SafeDir, SafeFsError> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match nix::fcntl::open(path, flags, Mode::empty()) {
            Ok(fd) => Ok(SafeDir {
                fd: unsafe { OwnedFd::from_raw_fd(fd) },
                path: path.to_path_buf(),
            }),
            Err(Errno::ELOOP) | Err(Errno::ENOTDIR) if is_symlink(path) => {
                Err(SafeFsError::Symlink {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => Err(SafeFsError::from_errno(path.to_path_buf(), e)),
        }
    }

    /// A directory already open at `dir` (its descriptor duplicated, close-on-exec), named
    /// `path` in errors: for a caller holding a directory descriptor of its own walk.
    pub fn duplicate(dir: BorrowedFd<'_>, path: &Path) -> Result<SafeDir, SafeFsError> {
        let fd = dir.try_clone_to_owned().map_err(|source| SafeFsError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(SafeDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Open `path` as a directory, creating it (mode 0700) if it does not exist.
    pub fn open_or_create(path: &Path) -> Result<SafeDir, SafeFsError> {
        match std::fs::symlink_metadata(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(path)
                    .map_err(|source| SafeFsError::Io {
                        path: path.to_path_buf(),
                        source,
                    })?;
            }
            Err(source) => {
                return Err(SafeFsError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
        SafeDir::open(path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn join(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    fn open_beneath(&self, rel: &str, flags: OFlag, mode: u32) -> Result<OwnedFd, SafeFsError> {
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .mode(Mode::from_bits_truncate(mode))
            .resolve(resolve_flags());
        loop {
            match openat2(self.fd.as_raw_fd(), rel, how) {
                Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
                Err(Errno::EAGAIN) | Err(Errno::EINTR) => continue,
                Err(e) => return Err(SafeFsError::from_errno(self.join(rel), e)),
            }
        }
    }

    /// Open a sub-directory beneath this one.
    pub fn subdir(&self, rel: &str) -> Result<SafeDir, SafeFsError> {
        let fd = self.open_beneath(rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY, 0)?;
        Ok(SafeDir {
            fd,
            path: self.join(rel),
        })
    }

    /// Open a sub-directory, creating the last component (mode 0700) if needed.
    pub fn subdir_or_create(&self, rel: &str) -> Result<SafeDir, SafeFsError> {
        match nix::sys::stat::mkdirat(
            Some(self.fd.as_raw_fd()),
            rel,
            Mode::from_bits_truncate(0o700),
        ) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(SafeFsError::from_errno(self.join(rel), e)),
        }
        self.subdir(rel)
    }

    /// Whether `rel` exists (without following a final symlink; a symlink counts as existing).
    pub fn exists(&self, rel: &str) -> bool {
        nix::sys::stat::fstatat(
            Some(self.fd.as_raw_fd()),
            rel,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .is_ok()
    }

    /// Open an existing regular file for reading. Opened non-blocking and checked on its
    /// descriptor, so a fifo planted in its place (which would block the open, and every read,
    /// until a writer came) is refused instead of hanging the caller.
    fn open_regular(&self, rel: &str) -> Result<File, SafeFsError> {
        let fd = self.open_beneath(rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK, 0)?;
        let stat = nix::sys::stat::fstat(fd.as_raw_fd())
            .map_err(|e| SafeFsError::from_errno(self.join(rel), e))?;
        if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(SafeFsError::NotRegular {
                path: self.join(rel),
            });
        }
        nix::fcntl::fcntl(
            fd.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFL(OFlag::empty()),
        )
        .map_err(|e| SafeFsError::from_errno(self.join(rel), e))?;
        Ok(File::from(fd))
    }

    /// Read a whole regular file, refusing links, anything else than a regular file, and
    /// anything over `limit` bytes.
    pub fn read(&self, rel: &str, limit: u64) -> Result<Vec<u8>, SafeFsError> {
        let mut file = self.open_regular(rel)?;
        read_bounded(&mut file, &self.join(rel), limit)
    }

    /// Open a regular file for appending, creating it (mode 0600) if needed.
    pub fn open_append(&self, rel: &str) -> Result<File, SafeFsError> {
        let fd = self.open_beneath(
            rel,
            OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT,
            0o600,
        )?;
        Ok(File::from(fd))
    }

    /// Open a regular file read-write, creating it (mode 0600) if needed.
    pub fn open_rw(&self, rel: &str) -> Result<File, SafeFsError> {
        let fd = self.open_beneath(rel, OFlag::O_RDWR | OFlag::O_CREAT, 0o600)?;
        Ok(File::from(fd))
    }

    /// Open an existing regular file for reading (anything else is refused, see `open_regular`).
    pub fn open_read(&self, rel: &str) -> Result<File, SafeFsError> {
        self.open_regular(rel)
    }

    /// Create a new file (fails if it exists) with `mode`, for writing.
    pub fn create_new(&self, rel: &str, mode: u32) -> Result<File, SafeFsError> {
        let fd = self.open_beneath(rel, OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL, mode)?;
        Ok(File::from(fd))
    }

    /// Create `rel` (mode `mode`) or truncate it if it exists, for writing.
    pub fn create_truncate(&self, rel: &str, mode: u32) -> Result<File, SafeFsError> {
        let fd = self.open_beneath(rel, OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC, mode)?;
        Ok(File::from(fd))
    }

    /// Replace `rel` atomically with `bytes`: temp file, fsync, rename, fsync of the directory.
    pub fn write_atomic(&self, rel: &str, bytes: &[u8]) -> Result<(), SafeFsError> {
        self.replace_file(rel, bytes, true)?;
        self.sync()
    }

    /// Replace `rel` atomically for readers (temp file, rename) without making it durable: for a
    /// file that means nothing after a crash (the heartbeat, rewritten at every phase change).
    pub fn replace_unsynced(&self, rel: &str, bytes: &[u8]) -> Result<(), SafeFsError> {
        self.replace_file(rel, bytes, false)
    }

    fn replace_file(&self, rel: &str, bytes: &[u8], durable: bool) -> Result<(), SafeFsError> {
        let tmp = format!(".{rel}.tmp-{}", std::process::id());
        let _ = nix::unistd::unlinkat(
            Some(self.fd.as_raw_fd()),
            tmp.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        let mut file = self.create_new(&tmp, 0o600)?;
        let io = |source| SafeFsError::Io {
            path: self.join(rel),
            source,
        };
        file.write_all(bytes).map_err(io)?;
        if durable {
            file.sync_all().map_err(io)?;
        }
        drop(file);
        nix::fcntl::renameat(
            Some(self.fd.as_raw_fd()),
            tmp.as_str(),
            Some(self.fd.as_raw_fd()),
            rel,
        )
        .map_err(|e| SafeFsError::from_errno(self.join(rel), e))
    }

    /// fsync the directory itself, so that renames and creations are durable.
    pub fn sync(&self) -> Result<(), SafeFsError> {
        nix::unistd::fsync(self.fd.as_raw_fd())
            .map_err(|e| SafeFsError::from_errno(self.path.clone(), e))
    }

    /// Names of the entries of this directory (not `.`/`..`), sorted.
    pub fn list(&self) -> Result<Vec<String>, SafeFsError> {
        let dup = nix::unistd::dup(self.fd.as_raw_fd())
            .map_err(|e| SafeFsError::from_errno(self.path.clone(), e))?;
        let mut dir = nix::dir::Dir::from_fd(dup)
            .map_err(|e| SafeFsError::from_errno(self.path.clone(), e))?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| SafeFsError::from_errno(self.path.clone(), e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(false)
}

/// The rest of an open file, refusing (TooLarge, naming `path`) one over `limit` bytes; at most
/// `limit + 1` bytes are ever read.
pub fn read_bounded(file: &mut File, path: &Path, limit: u64) -> Result<Vec<u8>, SafeFsError> {
    let mut buf = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|source| SafeFsError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if buf.len() as u64 > limit {
        return Err(SafeFsError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_symlink_is_refused_on_read() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("secret"), b"x").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret"), tmp.path().join("link")).unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        assert!(matches!(
            dir.read("link", 10),
            Err(SafeFsError::Symlink { .. })
        ));
    }

    #[test]
    fn a_planted_fifo_is_refused_on_read_instead_of_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(
            &tmp.path().join("report.xml"),
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        assert!(matches!(
            dir.read("report.xml", 10),
            Err(SafeFsError::NotRegular { .. })
        ));
        assert!(matches!(
            dir.open_read("report.xml"),
            Err(SafeFsError::NotRegular { .. })
        ));
    }

    #[test]
    fn dot_dot_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("a")).unwrap();
        let dir = SafeDir::open(&tmp.path().join("a")).unwrap();
        assert!(matches!(
            dir.open_append("../escape"),
            Err(SafeFsError::Symlink { .. })
        ));
        assert!(!tmp.path().join("escape").exists());
    }

    #[test]
    fn write_atomic_replaces_contents() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        dir.write_atomic("state.json", b"one").unwrap();
        dir.write_atomic("state.json", b"two").unwrap();
        assert_eq!(
            std::fs::read(tmp.path().join("state.json")).unwrap(),
            b"two"
        );
        assert_eq!(dir.list().unwrap(), vec!["state.json".to_string()]);
    }

    #[test]
    fn write_atomic_refuses_a_symlinked_target_directory() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("real")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("real"), tmp.path().join("runs")).unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        let err = dir.subdir("runs").unwrap_err();
        assert!(matches!(err, SafeFsError::Symlink { .. }), "{err:?}");
    }
}
