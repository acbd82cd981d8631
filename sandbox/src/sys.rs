//! The few system calls the sandbox makes outside nix: the new mount API (`open_tree`,
//! `mount_setattr`, `move_mount`, and `fsopen`/`fsconfig`/`fsmount` for the capped volumes) and the Landlock ABI query, which neither nix 0.29 nor libc
//! 0.2 wrap as functions (libc gives their numbers, flags and `struct mount_attr`, used here).
//! Also `openat2` (nix's wrapper, always close-on-exec) and `close_range` (libc's), so that
//! every descriptor-level call has one home. Each function is one syscall returning `io::Result`.

use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub use libc::{
    MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS,
};

fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `AT_EMPTY_PATH` (plus `AT_RECURSIVE`) as the mount API's `c_uint` flags.
fn at_flags(recursive: bool) -> libc::c_uint {
    libc::AT_EMPTY_PATH as libc::c_uint
        | if recursive {
            libc::AT_RECURSIVE as libc::c_uint
        } else {
            0
        }
}

/// openat2(dirfd, path, flags | O_CLOEXEC, resolve): e.g. without following symlinks, beneath `dir`.
pub fn openat2(dir: RawFd, path: &str, flags: libc::c_int, resolve: u64) -> io::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(OFlag::from_bits_retain(flags | libc::O_CLOEXEC))
        .resolve(ResolveFlag::from_bits_retain(resolve));
    let fd = nix::fcntl::openat2(dir, path, how)?;
    // SAFETY: openat2 just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// open_tree(dirfd, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | flags): a detached copy of a mount.
fn open_tree(dir: RawFd, path: &CString, flags: libc::c_uint) -> io::Result<OwnedFd> {
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | flags;
    let rc = unsafe { libc::syscall(libc::SYS_open_tree, dir, path.as_ptr(), flags) };
    // SAFETY: a descriptor open_tree just returned; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(check(rc)? as RawFd) })
}

/// A detached copy of the mount at `fd` (and the mounts below it when `recursive`).
pub fn clone_tree(fd: &OwnedFd, recursive: bool) -> io::Result<OwnedFd> {
    open_tree(fd.as_raw_fd(), &CString::default(), at_flags(recursive))
}

/// A detached, recursive copy of the mounts at a host path (operator-given and canonical).
pub fn clone_tree_at(path: &std::path::Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    open_tree(libc::AT_FDCWD, &c, libc::AT_RECURSIVE as libc::c_uint)
}

/// mount_setattr(fd, "", AT_EMPTY_PATH[|AT_RECURSIVE], attr).
fn setattr(fd: RawFd, attr: &libc::mount_attr, recursive: bool) -> io::Result<()> {
    let empty = CString::default();
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            empty.as_ptr(),
            at_flags(recursive),
            attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    check(rc).map(|_| ())
}

/// Add mount flags (`MOUNT_ATTR_RDONLY`, `_NOSUID`, `_NODEV`) to the mount at `fd`.
pub fn mount_setattr(fd: RawFd, set: u64, recursive: bool) -> io::Result<()> {
    setattr(
        fd,
        &libc::mount_attr {
            attr_set: set,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        },
        recursive,
    )
}

/// Idmap a detached tree recursively (with `set` flags added): ids on disk are seen through the
/// user namespace's mapping.
pub fn idmap_tree(tree: &OwnedFd, userns: &OwnedFd, set: u64) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: set | libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    setattr(tree.as_raw_fd(), &attr, true)
}

/// move_mount(from, "", to, "", F_EMPTY_PATH|T_EMPTY_PATH): attach a detached mount onto `to`.
pub fn move_mount_onto(from: &OwnedFd, to: RawFd) -> io::Result<()> {
    let empty = CString::default();
    let flags = libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH;
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            empty.as_ptr(),
            to,
            empty.as_ptr(),
            flags,
        )
    };
    check(rc).map(|_| ())
}

/// close_range(first, last, 0).
pub fn close_range(first: u32, last: u32) -> io::Result<()> {
    check(unsafe { libc::close_range(first, last, 0) } as libc::c_long).map(|_| ())
}

/// close_range(first, ~0, flags): close (or only mark close-on-exec) every descriptor from `first`.
pub fn close_range_from(first: u32, cloexec_only: bool) -> io::Result<()> {
    let flags = if cloexec_only {
        libc::CLOSE_RANGE_CLOEXEC as libc::c_int
    } else {
        0
    };
    check(unsafe { libc::close_range(first, u32::MAX, flags) } as libc::c_long).map(|_| ())
}

/// The raw Landlock ABI version of the running kernel (0 when unsupported). The landlock crate
/// only exposes it through a ruleset's best-effort compatibility, and libc has neither a wrapper
/// nor the flag, so the one query is made here.
pub fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if rc < 0 {
        0
    } else {
        rc as u32
    }
}

/// fsopen(fstype, FSOPEN_CLOEXEC): a file system context (`volume.rs`).
pub fn fsopen(fstype: &str) -> io::Result<OwnedFd> {
    let c = CString::new(fstype).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let rc = unsafe { libc::syscall(libc::SYS_fsopen, c.as_ptr(), libc::FSOPEN_CLOEXEC) };
    // SAFETY: a descriptor fsopen just returned; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(check(rc)? as RawFd) })
}

/// fsconfig(fs, FSCONFIG_SET_STRING, key, value, 0).
pub fn fsconfig_string(fs: &OwnedFd, key: &str, value: &str) -> io::Result<()> {
    let k = CString::new(key).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let v = CString::new(value).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            libc::FSCONFIG_SET_STRING,
            k.as_ptr(),
            v.as_ptr(),
            0,
        )
    };
    check(rc).map(|_| ())
}

/// fsconfig(fs, FSCONFIG_SET_FLAG, key, NULL, 0).
pub fn fsconfig_flag(fs: &OwnedFd, key: &str) -> io::Result<()> {
    let k = CString::new(key).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            libc::FSCONFIG_SET_FLAG,
            k.as_ptr(),
            std::ptr::null::<libc::c_char>(),
            0,
        )
    };
    check(rc).map(|_| ())
}

/// fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0): create the superblock.
pub fn fsconfig_create(fs: &OwnedFd) -> io::Result<()> {
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            libc::FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    check(rc).map(|_| ())
}

/// fsmount(fs, FSMOUNT_CLOEXEC, attrs): a detached mount of the created file system.
pub fn fsmount(fs: &OwnedFd, attrs: u64) -> io::Result<OwnedFd> {
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            libc::FSMOUNT_CLOEXEC,
            attrs as libc::c_uint,
        )
    };
    // SAFETY: a descriptor fsmount just returned; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(check(rc)? as RawFd) })
}
