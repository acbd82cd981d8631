//! Descriptor-relative file operations that never follow a symlink, for the directories the
//! workspace builds and reads (baselines, upper layers, check layers). Every name passed here is a
//! single path component already checked by `tree_path`; directories are opened with
//! `O_NOFOLLOW | O_DIRECTORY` one component at a time, files are created with `O_EXCL` (which
//! never follows a link) and read with `O_NOFOLLOW`.

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode};
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn os(name: &[u8]) -> &OsStr {
    OsStr::from_bytes(name)
}

fn owned(fd: RawFd) -> OwnedFd {
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Open a directory by absolute or relative path; its last component must not be a symlink.
pub fn open_dir_path(path: &Path) -> nix::Result<OwnedFd> {
    nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty()).map(owned)
}

/// Open the sub-directory `name` of `dir` (ELOOP/ENOTDIR when it is a symlink or not a directory).
pub fn open_dir(dir: RawFd, name: &[u8]) -> nix::Result<OwnedFd> {
    nix::fcntl::openat(Some(dir), os(name), OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
        .map(owned)
}

/// Create (if missing) and open the sub-directory `name` of `dir`.
pub fn ensure_dir(dir: RawFd, name: &[u8], mode: u32) -> nix::Result<OwnedFd> {
    match nix::sys::stat::mkdirat(Some(dir), os(name), Mode::from_bits_truncate(mode)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(e),
    }
    open_dir(dir, name)
}

/// Create a new regular file `name` in `dir` for writing (fails if anything exists there).
pub fn create_file(dir: RawFd, name: &[u8], mode: u32) -> nix::Result<File> {
    nix::fcntl::openat(
        Some(dir),
        os(name),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(mode),
    )
    .map(|fd| File::from(owned(fd)))
}

/// Open the regular file `name` of `dir` for reading, refusing a symlink.
pub fn open_file(dir: RawFd, name: &[u8]) -> nix::Result<File> {
    nix::fcntl::openat(Some(dir), os(name), OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY, Mode::empty())
        .map(|fd| File::from(owned(fd)))
}

/// lstat of `name` in `dir`.
pub fn lstat(dir: RawFd, name: &[u8]) -> nix::Result<FileStat> {
    nix::sys::stat::fstatat(Some(dir), os(name), AtFlags::AT_SYMLINK_NOFOLLOW)
}

/// The target of the symlink `name` in `dir`, as bytes.
pub fn read_link(dir: RawFd, name: &[u8]) -> nix::Result<Vec<u8>> {
    nix::fcntl::readlinkat(Some(dir), os(name)).map(|t| t.as_bytes().to_vec())
}

/// Create the symlink `name` -> `target` in `dir`.
pub fn symlink(dir: RawFd, name: &[u8], target: &[u8]) -> nix::Result<()> {
    nix::unistd::symlinkat(os(target), Some(dir), os(name))
}

/// Hardlink `src_name` of `src_dir` as `dst_name` in `dst_dir` (a symlink is linked, not followed).
pub fn hardlink(src_dir: RawFd, src_name: &[u8], dst_dir: RawFd, dst_name: &[u8]) -> nix::Result<()> {
    nix::unistd::linkat(Some(src_dir), os(src_name), Some(dst_dir), os(dst_name), nix::fcntl::AtFlags::empty())
}

/// An overlayfs whiteout (character device 0:0) named `name` in `dir`. Unprivileged users may
/// create it (Linux >= 5.8).
pub fn whiteout(dir: RawFd, name: &[u8]) -> nix::Result<()> {
    nix::sys::stat::mknodat(Some(dir), os(name), nix::sys::stat::SFlag::S_IFCHR, Mode::from_bits_truncate(0o000), 0)
}

/// chown without following a symlink.
pub fn chown_at(dir: RawFd, name: &[u8], owner: Option<(u32, u32)>) -> nix::Result<()> {
    let Some((uid, gid)) = owner else { return Ok(()) };
    nix::unistd::fchownat(
        Some(dir),
        os(name),
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
}

/// chown an open descriptor.
pub fn chown_fd(fd: &impl AsRawFd, owner: Option<(u32, u32)>) -> nix::Result<()> {
    let Some((uid, gid)) = owner else { return Ok(()) };
    nix::unistd::fchown(fd.as_raw_fd(), Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid)))
}

/// Let others traverse (not list) an open directory: add `o+x`. Used when loopexec runs as root
/// and the zone, as its own uid, must reach a layer beneath this directory.
pub fn allow_traverse(fd: &impl AsRawFd) -> nix::Result<()> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
    nix::sys::stat::fchmod(fd.as_raw_fd(), Mode::from_bits_truncate((st.st_mode & 0o7777) | 0o001))
}

/// The value of the extended attribute `name` of an open file, if set.
pub fn get_xattr(fd: &impl AsRawFd, name: &str) -> Option<Vec<u8>> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut buf = [0u8; 256];
    let n = unsafe { libc::fgetxattr(fd.as_raw_fd(), cname.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

/// Names in a directory (without `.` and `..`), sorted.
pub fn list(dir: RawFd) -> nix::Result<Vec<Vec<u8>>> {
    let dup = nix::unistd::dup(dir)?;
    let mut d = nix::dir::Dir::from_fd(dup)?;
    let mut names = Vec::new();
    for entry in d.iter() {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Open the directory at relative `path` (`a/b/c`) beneath `root`, one component at a time.
pub fn open_dir_beneath(root: RawFd, path: &[u8]) -> nix::Result<OwnedFd> {
    let mut cur = nix::unistd::dup(root).map(owned)?;
    for c in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
        cur = open_dir(cur.as_raw_fd(), c)?;
    }
    Ok(cur)
}

/// Remove a directory tree we created (a failed baseline build, a check's scratch layers), never
/// following symlinks. A directory we cannot open (overlayfs makes its work directory mode 000)
/// is first made ours to read.
pub fn remove_tree(parent: RawFd, name: &[u8]) -> nix::Result<()> {
    let mut opened = open_dir(parent, name);
    if matches!(opened, Err(Errno::EACCES)) && lstat(parent, name).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR) {
        nix::sys::stat::fchmodat(Some(parent), os(name), Mode::from_bits_truncate(0o700), nix::sys::stat::FchmodatFlags::FollowSymlink)?;
        opened = open_dir(parent, name);
    }
    if let Ok(fd) = opened {
        let _ = nix::sys::stat::fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(0o700));
        for child in list(fd.as_raw_fd())? {
            match lstat(fd.as_raw_fd(), &child) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => remove_tree(fd.as_raw_fd(), &child)?,
                _ => nix::unistd::unlinkat(Some(fd.as_raw_fd()), os(&child), nix::unistd::UnlinkatFlags::NoRemoveDir)?,
            }
        }
    }
    nix::unistd::unlinkat(Some(parent), os(name), nix::unistd::UnlinkatFlags::RemoveDir)
}
