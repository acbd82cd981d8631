//! Raw system calls that nix/libc do not wrap: the new mount API, openat2, close_range, the
//! Landlock ABI query.
//! Each wrapper is one syscall, returning `io::Result`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub const OPEN_TREE_CLONE: u32 = 1;
pub const AT_RECURSIVE: u32 = 0x8000;
pub const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
pub const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_BENEATH: u64 = 0x08;

fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn cpath(p: &str) -> io::Result<CString> {
    CString::new(p).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// openat2(dirfd, path, flags, resolve): open without following symlinks, beneath `dir`.
pub fn openat2(dir: RawFd, path: &str, flags: i32, resolve: u64) -> io::Result<OwnedFd> {
    let c = cpath(path)?;
    let how = OpenHow { flags: (flags | libc::O_CLOEXEC) as u64, mode: 0, resolve };
    let rc = unsafe {
        libc::syscall(libc::SYS_openat2, dir, c.as_ptr(), &how as *const OpenHow, std::mem::size_of::<OpenHow>())
    };
    Ok(unsafe { OwnedFd::from_raw_fd(check(rc)? as RawFd) })
}

/// open_tree(fd, "", OPEN_TREE_CLONE|AT_EMPTY_PATH[|AT_RECURSIVE]): a detached copy of a mount.
pub fn clone_tree(fd: &OwnedFd, recursive: bool) -> io::Result<OwnedFd> {
    let empty = cpath("")?;
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | libc::AT_EMPTY_PATH as u32;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    let rc = unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), empty.as_ptr(), flags) };
    Ok(unsafe { OwnedFd::from_raw_fd(check(rc)? as RawFd) })
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// mount_setattr(fd, "", AT_EMPTY_PATH[|AT_RECURSIVE], set): add mount flags (read-only, nosuid...).
pub fn mount_setattr(fd: RawFd, set: u64, recursive: bool) -> io::Result<()> {
    let empty = cpath("")?;
    let attr = MountAttr { attr_set: set, attr_clr: 0, propagation: 0, userns_fd: 0 };
    let mut flags = libc::AT_EMPTY_PATH as u32;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    let rc = unsafe {
        libc::syscall(libc::SYS_mount_setattr, fd, empty.as_ptr(), flags, &attr as *const MountAttr, std::mem::size_of::<MountAttr>())
    };
    check(rc).map(|_| ())
}

/// move_mount(from, "", to, "", F_EMPTY_PATH|T_EMPTY_PATH): attach a detached mount onto `to`.
pub fn move_mount_onto(from: &OwnedFd, to: RawFd) -> io::Result<()> {
    let empty = cpath("")?;
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            empty.as_ptr(),
            to,
            empty.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    check(rc).map(|_| ())
}

/// close_range(first, last, 0).
pub fn close_range(first: u32, last: u32) -> io::Result<()> {
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    check(rc).map(|_| ())
}

/// open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | AT_RECURSIVE): a detached copy of the mounts at a
/// host path (the path is operator-given and canonical).
pub fn clone_tree_at(path: &std::path::Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | AT_RECURSIVE;
    let rc = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, c.as_ptr(), flags) };
    Ok(unsafe { OwnedFd::from_raw_fd(check(rc)? as RawFd) })
}

/// mount_setattr(tree, MOUNT_ATTR_IDMAP | set, userns) recursively: ids on disk are seen through
/// the user namespace's mapping.
pub fn idmap_tree(tree: &OwnedFd, userns: &OwnedFd, set: u64) -> io::Result<()> {
    const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
    let empty = cpath("")?;
    let attr = MountAttr { attr_set: set | MOUNT_ATTR_IDMAP, attr_clr: 0, propagation: 0, userns_fd: userns.as_raw_fd() as u64 };
    let flags = libc::AT_EMPTY_PATH as u32 | AT_RECURSIVE;
    let rc = unsafe {
        libc::syscall(libc::SYS_mount_setattr, tree.as_raw_fd(), empty.as_ptr(), flags, &attr as *const MountAttr, std::mem::size_of::<MountAttr>())
    };
    check(rc).map(|_| ())
}

/// close_range(first, ~0, flags).
pub fn close_range_from(first: u32, cloexec_only: bool) -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    let flags = if cloexec_only { CLOSE_RANGE_CLOEXEC } else { 0 };
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, flags) };
    check(rc).map(|_| ())
}

/// The raw Landlock ABI version of the running kernel (0 when unsupported).
pub fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    let rc = unsafe {
        libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, LANDLOCK_CREATE_RULESET_VERSION)
    };
    if rc < 0 {
        0
    } else {
        rc as u32
    }
}
