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
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map(owned)
}

/// Open the sub-directory `name` of `dir` (ELOOP/ENOTDIR when it is a symlink or not a directory).
pub fn open_dir(dir: RawFd, name: &[u8]) -> nix::Result<OwnedFd> {
    nix::fcntl::openat(
        Some(dir),
        os(name),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
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
    nix::fcntl::openat(
        Some(dir),
        os(name),
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY,
        Mode::empty(),
    )
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
pub fn hardlink(
    src_dir: RawFd,
    src_name: &[u8],
    dst_dir: RawFd,
    dst_name: &[u8],
) -> nix::Result<()> {
    nix::unistd::linkat(
        Some(src_dir),
        os(src_name),
        Some(dst_dir),
        os(dst_name),
        nix::fcntl::AtFlags::empty(),
    )
}

/// An overlayfs whiteout (character device 0:0) named `name` in `dir`. Unprivileged users may
/// create it (Linux >= 5.8).
pub fn whiteout(dir: RawFd, name: &[u8]) -> nix::Result<()> {
    nix::sys::stat::mknodat(
        Some(dir),
        os(name),
        nix::sys::stat::SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o000),
        0,
    )
}

/// chown without following a symlink.
pub fn chown_at(dir: RawFd, name: &[u8], owner: Option<(u32, u32)>) -> nix::Result<()> {
    let Some((uid, gid)) = owner else {
        return Ok(());
    };
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
    let Some((uid, gid)) = owner else {
        return Ok(());
    };
    nix::unistd::fchown(
        fd.as_raw_fd(),
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
}

/// Let others traverse (not list) an open directory: add `o+x`. Used when loopexec runs as root
/// and the zone, as its own uid, must reach a layer beneath this directory.
pub fn allow_traverse(fd: &impl AsRawFd) -> nix::Result<()> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
    nix::sys::stat::fchmod(
        fd.as_raw_fd(),
        Mode::from_bits_truncate((st.st_mode & 0o7777) | 0o001),
    )
}

/// The value of the extended attribute `name` of an open file, if set.
pub fn get_xattr(fd: &impl AsRawFd, name: &str) -> Option<Vec<u8>> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut buf = [0u8; 256];
    let n = unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            cname.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

/// Names in a directory (without `.` and `..`), sorted.
pub fn list(dir: RawFd) -> nix::Result<Vec<Vec<u8>>> {
    list_at_most(dir, usize::MAX).map(Option::unwrap_or_default)
}

/// Open the directory at relative `path` (`a/b/c`) beneath `root`, one component at a time.
pub fn open_dir_beneath(root: RawFd, path: &[u8]) -> nix::Result<OwnedFd> {
    let mut cur = nix::unistd::dup(root).map(owned)?;
    for c in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
        cur = open_dir(cur.as_raw_fd(), c)?;
    }
    Ok(cur)
}

/// Names in a directory (without `.` and `..`), sorted; `None` when it holds more than `max`
/// (the listing stops there, so a directory of millions of entries costs no more than `max`).
pub fn list_at_most(dir: RawFd, max: usize) -> nix::Result<Option<Vec<Vec<u8>>>> {
    let dup = nix::unistd::dup(dir)?;
    let mut d = nix::dir::Dir::from_fd(dup)?;
    let mut names = Vec::new();
    for entry in d.iter() {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            if names.len() == max {
                return Ok(None);
            }
            names.push(name);
        }
    }
    names.sort();
    Ok(Some(names))
}

/// The most directory descriptors a [`DirStack`] holds open, whatever its depth.
pub const MAX_OPEN_DIRS: usize = 32;

/// A path of directories beneath a root, entered one component at a time (`O_NOFOLLOW`), that
/// holds at most [`MAX_OPEN_DIRS`] descriptors whatever its depth: when it is deeper, the
/// descriptors nearest the root are closed. Leaving a directory whose parent's descriptor was
/// closed reopens the parent as `..` of the directory being left (never a symlink) and checks it
/// is the same directory (device and inode recorded on the way down); any other closed directory
/// is reopened by name from its nearest open ancestor. It is the one way the workspace walks a
/// tree (snapshot, materialising, delivery, removal): iteration with an explicit stack, never
/// recursion, and bounded descriptors.
pub struct DirStack {
    root: OwnedFd,
    frames: Vec<Frame>,
    open: usize,
}

struct Frame {
    name: Vec<u8>,
    fd: Option<OwnedFd>,
    id: (u64, u64),
}

fn identity(fd: RawFd) -> nix::Result<(u64, u64)> {
    let st = nix::sys::stat::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

impl DirStack {
    pub fn new(root: OwnedFd) -> DirStack {
        DirStack {
            root,
            frames: Vec::new(),
            open: 0,
        }
    }

    /// How many components deep the stack is (0 at the root).
    pub fn depth(&self) -> usize {
        self.frames.len()
    }

    /// The current directory's path relative to the root (`a/b/c`).
    pub fn path(&self) -> Vec<u8> {
        let names: Vec<&[u8]> = self.frames.iter().map(|f| f.name.as_slice()).collect();
        names.join(&b'/')
    }

    /// Enter the sub-directory `name` of the current directory (refusing a symlink). With
    /// `create`, a missing directory is made with that mode first.
    pub fn push(&mut self, name: &[u8], create: Option<u32>) -> nix::Result<()> {
        let parent = self.top()?;
        let fd = match create {
            Some(mode) => ensure_dir(parent, name, mode)?,
            None => open_dir(parent, name)?,
        };
        let id = identity(fd.as_raw_fd())?;
        self.frames.push(Frame {
            name: name.to_vec(),
            fd: Some(fd),
            id,
        });
        self.open += 1;
        if self.open > MAX_OPEN_DIRS {
            if let Some(frame) = self.frames.iter_mut().find(|f| f.fd.is_some()) {
                frame.fd = None;
                self.open -= 1;
            }
        }
        Ok(())
    }

    /// Leave the current directory; its name.
    pub fn pop(&mut self) -> Option<Vec<u8>> {
        let frame = self.frames.pop()?;
        if let Some(left) = &frame.fd {
            self.open -= 1;
            if let Some(parent) = self.frames.last_mut().filter(|p| p.fd.is_none()) {
                let up = nix::fcntl::openat(
                    Some(left.as_raw_fd()),
                    "..",
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map(owned);
                if let Ok(up) = up {
                    if identity(up.as_raw_fd()).is_ok_and(|id| id == parent.id) {
                        parent.fd = Some(up);
                        self.open += 1;
                    }
                }
            }
        }
        Some(frame.name)
    }

    /// The current directory's descriptor, reopened from its nearest open ancestor if closed
    /// (and checked to be the directory entered on the way down).
    pub fn top(&mut self) -> nix::Result<RawFd> {
        let Some(last) = self.frames.len().checked_sub(1) else {
            return Ok(self.root.as_raw_fd());
        };
        if self.frames[last].fd.is_none() {
            let from = self.frames.iter().rposition(|f| f.fd.is_some());
            let start = match from.and_then(|i| self.frames[i].fd.as_ref()) {
                Some(fd) => fd.as_raw_fd(),
                None => self.root.as_raw_fd(),
            };
            let mut cur = nix::unistd::dup(start).map(owned)?;
            for f in &self.frames[from.map_or(0, |i| i + 1)..] {
                cur = open_dir(cur.as_raw_fd(), &f.name)?;
            }
            if identity(cur.as_raw_fd())? != self.frames[last].id {
                return Err(Errno::ESTALE);
            }
            self.frames[last].fd = Some(cur);
            self.open += 1;
        }
        Ok(self.frames[last]
            .fd
            .as_ref()
            .map_or(self.root.as_raw_fd(), |f| f.as_raw_fd()))
    }

    /// Move to the directory `dir` (a `/`-separated path relative to the root), leaving the
    /// components it does not share with the current path and entering the others (created with
    /// `create`'s mode when missing, and each entered one passed to `entered`); its descriptor.
    pub fn seek(
        &mut self,
        dir: &[u8],
        create: Option<u32>,
        entered: &mut dyn FnMut(RawFd, &[u8]) -> nix::Result<()>,
    ) -> nix::Result<RawFd> {
        let wanted: Vec<&[u8]> = dir
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        let shared = self
            .frames
            .iter()
            .zip(&wanted)
            .take_while(|(f, w)| f.name.as_slice() == **w)
            .count();
        while self.frames.len() > shared {
            self.pop();
        }
        for name in &wanted[shared..] {
            self.push(name, create)?;
            let fd = self.top()?;
            entered(fd, &self.path())?;
        }
        self.top()
    }
}

/// Remove a directory tree we created (a failed baseline build, a check's scratch layers), never
/// following symlinks, iteratively with bounded descriptors ([`DirStack`]) whatever its depth. A
/// directory we cannot open (overlayfs makes its work directory mode 000) is first made ours.
pub fn remove_tree(parent: RawFd, name: &[u8]) -> nix::Result<()> {
    let is_dir = |dir: RawFd, n: &[u8]| {
        lstat(dir, n).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
    };
    if !is_dir(parent, name) {
        return nix::unistd::unlinkat(
            Some(parent),
            os(name),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    let enter = |stack: &mut DirStack, n: &[u8]| -> nix::Result<()> {
        let at = stack.top()?;
        let _ = nix::sys::stat::fchmodat(
            Some(at),
            os(n),
            Mode::from_bits_truncate(0o700),
            nix::sys::stat::FchmodatFlags::NoFollowSymlink,
        );
        stack.push(n, None)
    };
    let mut stack = DirStack::new(nix::unistd::dup(parent).map(owned)?);
    // Per entered directory: the sub-directories still to remove.
    let mut pending: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut next = Some(name.to_vec());
    loop {
        if let Some(n) = next.take() {
            enter(&mut stack, &n)?;
            let fd = stack.top()?;
            let mut subdirs = Vec::new();
            for child in list(fd)? {
                if is_dir(fd, &child) {
                    subdirs.push(child);
                } else {
                    nix::unistd::unlinkat(
                        Some(fd),
                        os(&child),
                        nix::unistd::UnlinkatFlags::NoRemoveDir,
                    )?;
                }
            }
            pending.push(subdirs);
        }
        match pending.last_mut().and_then(Vec::pop) {
            Some(sub) => next = Some(sub),
            None => {
                pending.pop();
                let Some(done) = stack.pop() else {
                    return Ok(());
                };
                let at = stack.top()?;
                nix::unistd::unlinkat(Some(at), os(&done), nix::unistd::UnlinkatFlags::RemoveDir)?;
                if stack.depth() == 0 {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deep_tree(root: &Path, depth: usize) {
        let dir = open_dir_path(root).unwrap();
        let mut stack = DirStack::new(dir);
        for i in 0..depth {
            stack.push(b"d", Some(0o755)).unwrap();
            if i % 100 == 0 {
                let fd = stack.top().unwrap();
                create_file(fd, b"f", 0o644).unwrap();
            }
        }
    }

    #[test]
    fn a_dir_stack_deeper_than_its_descriptor_bound_reopens_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        deep_tree(tmp.path(), 3 * MAX_OPEN_DIRS);
        let mut stack = DirStack::new(open_dir_path(tmp.path()).unwrap());
        for _ in 0..3 * MAX_OPEN_DIRS {
            stack.push(b"d", None).unwrap();
        }
        assert!(stack.open <= MAX_OPEN_DIRS);
        while stack.depth() > 1 {
            stack.pop();
        }
        let fd = stack.top().unwrap();
        assert!(
            lstat(fd, b"f").is_ok(),
            "the reopened directory is the first level"
        );
    }

    #[test]
    fn remove_tree_removes_a_tree_deeper_than_the_stack_would_allow_recursing() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("t")).unwrap();
        deep_tree(&tmp.path().join("t"), 20_000);
        let parent = open_dir_path(tmp.path()).unwrap();
        // A small-stack thread: a recursive removal of 20,000 levels would overflow it.
        std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || remove_tree(parent.as_raw_fd(), b"t").unwrap())
            .unwrap()
            .join()
            .unwrap();
        assert!(!tmp.path().join("t").exists());
    }
}
