//! Size-capped volumes for a zone's writable layers (`resources.disk_bytes`, docs/policy.md):
//! an ext4 file system in a sparse image file of exactly the cap, attached to a loop device and
//! mounted with the new mount API as a *detached* mount the supervisor holds by descriptor
//! ([`Volume`]). Nothing appears in the host's mount table: the supervisor reaches the volume
//! through `/proc/self/fd/<n>` ([`Volume::path`]), the sandbox hands a zone a clone of it as an
//! overlay layer (`grants.rs`), and when the last descriptor and the last zone mount are gone
//! the file system is unmounted and the loop device released (`LO_FLAGS_AUTOCLEAR`), also when
//! the supervisor is killed. A write past the cap fails with ENOSPC in the zone, and the host's
//! file system never gives the image more blocks than its size.
//!
//! Loop devices and ext4 cannot be set up in a user namespace: an unprivileged supervisor gets a
//! tmpfs of the cap instead, made in a user namespace of its own (memory-backed, charged to the
//! memory cgroup of the zone that writes, gone with the supervisor) and handed to each zone the
//! same way (the zone clones it, Linux >= 6.15). [`unavailable`] says why a host cannot cap
//! (then a policy with `disk_bytes` needs `layers.may_skip = ["disk"]`).

use crate::error::Layer;
use crate::preflight::Missing;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What [`Volume`] is as root, as `policy show` and `doctor` name it.
pub const EXT4_IMAGE: &str = "ext4 image on a loop device (detached mount)";
/// What [`Volume`] is for an unprivileged loopexec.
pub const TMPFS: &str = "tmpfs of a held user namespace (memory-backed, detached mount)";

/// The mechanism this process caps disk use with.
pub fn mechanism() -> &'static str {
    if nix::unistd::geteuid().is_root() {
        EXT4_IMAGE
    } else {
        TMPFS
    }
}

/// Linux 6.15 let a zone clone a detached mount made in another mount namespace (the
/// unprivileged supervisor cannot clone one itself).
const TMPFS_MIN_KERNEL: (u32, u32) = (6, 15);

/// The smallest cap a policy may set: room for ext4's metadata and journal.
pub const MIN_DISK_BYTES: u64 = 16 << 20;

/// Where mkfs.ext4 is looked for (the environment's PATH is not used).
const MKFS: &[&str] = &[
    "/usr/sbin/mkfs.ext4",
    "/sbin/mkfs.ext4",
    "/usr/bin/mkfs.ext4",
];

// <linux/loop.h>: neither libc 0.2 nor nix 0.29 define the loop device ABI.
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

#[repr(C)]
#[allow(dead_code)] // fields the kernel reads
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

#[repr(C)]
#[allow(dead_code)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// The descriptors of the volumes alive in this process: the layer paths the sandbox resolves
/// beneath a volume instead of the host root.
static LIVE: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

/// A mounted, size-capped volume. Dropping it closes the supervisor's hold; the file system goes
/// away once no zone mounts it any more.
#[derive(Debug)]
pub struct Volume {
    mount: OwnedFd,
    bytes: u64,
}

fn ctx(what: impl std::fmt::Display, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Why this host cannot cap a zone's disk use, as a missing layer (None: it can).
pub fn unavailable() -> Option<Missing> {
    let missing = |cause: &str, fix: &str| {
        Some(Missing {
            layer: Layer::Disk,
            cause: cause.into(),
            fix: fix.into(),
        })
    };
    if !nix::unistd::geteuid().is_root() {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut nums = release
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().unwrap_or(0));
        let version = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
        if version < TMPFS_MIN_KERNEL {
            return missing(
                "resources.disk_bytes without root needs Linux >= 6.15 (a zone cloning the supervisor's detached tmpfs)",
                "run loopexec as root (an ext4 image on a loop device), or on Linux >= 6.15, or allow running uncapped with layers.may_skip = [\"disk\"]",
            );
        }
        return None;
    }
    if !Path::new("/dev/loop-control").exists() {
        return missing(
            "no /dev/loop-control (the loop driver is not loaded)",
            "modprobe loop, or allow running uncapped with layers.may_skip = [\"disk\"]",
        );
    }
    let ext4 = std::fs::read_to_string("/proc/filesystems")
        .map(|s| s.split_whitespace().any(|w| w == "ext4"))
        .unwrap_or(false);
    if !ext4 {
        return missing(
            "the kernel offers no ext4 file system",
            "modprobe ext4, or allow running uncapped with layers.may_skip = [\"disk\"]",
        );
    }
    if mkfs().is_none() {
        return missing(
            "mkfs.ext4 is not installed (looked in /usr/sbin, /sbin, /usr/bin)",
            "install e2fsprogs, or allow running uncapped with layers.may_skip = [\"disk\"]",
        );
    }
    None
}

/// The cap a zone's writable layers get under `policy`: None when it sets none, or when the
/// host cannot cap and the policy allows skipping the `disk` layer; refused (the zone must not
/// start) when the host cannot cap and the policy does not allow that.
pub fn cap_of(policy: &crate::Policy) -> Result<Option<u64>, crate::SandboxError> {
    let Some(bytes) = policy.resources.disk_bytes else {
        return Ok(None);
    };
    match unavailable() {
        None => Ok(Some(bytes)),
        Some(_) if policy.may_skip(Layer::Disk) => Ok(None),
        Some(m) => Err(crate::SandboxError::Unsatisfiable {
            layer: m.layer,
            cause: m.cause,
            fix: m.fix,
        }),
    }
}

fn mkfs() -> Option<&'static str> {
    MKFS.iter().copied().find(|p| Path::new(p).is_file())
}

impl Volume {
    /// Create the image `name` in the directory `dir` (at host path `dir_path`; refused if it
    /// exists), `bytes` long and sparse, format it with its root directory owned by `owner`,
    /// and mount it.
    ///
    /// Unprivileged, the volume is a tmpfs of `bytes` instead (made in a user namespace of its
    /// own, so it is in memory) and `name` an empty file marking that the layers were there.
    pub fn create(
        dir: RawFd,
        dir_path: &Path,
        name: &str,
        bytes: u64,
        owner: (u32, u32),
    ) -> io::Result<Volume> {
        let path = dir_path.join(name);
        let image = open_image(dir, name, true).map_err(|e| ctx(path.display(), e))?;
        if !nix::unistd::geteuid().is_root() {
            drop(image);
            let mount = tmpfs_in_own_userns(bytes).map_err(|e| ctx("capped tmpfs", e))?;
            return Ok(Volume::hold(mount, bytes));
        }
        nix::unistd::ftruncate(&image, bytes as libc::off_t)
            .map_err(|e| ctx(format!("size {}", path.display()), e.into()))?;
        format_ext4(&path, owner)?;
        Volume::attach(image, &path, bytes)
    }

    /// Mount the existing image `name` of `dir` (a resumed run's workspace).
    pub fn open(dir: RawFd, dir_path: &Path, name: &str) -> io::Result<Volume> {
        let path = dir_path.join(name);
        let image = open_image(dir, name, false).map_err(|e| ctx(path.display(), e))?;
        let st =
            nix::sys::stat::fstat(image.as_raw_fd()).map_err(|e| ctx(path.display(), e.into()))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(io::Error::other(format!(
                "{}: not a regular file",
                path.display()
            )));
        }
        if st.st_size == 0 {
            return Err(io::Error::other(format!(
                "{}: the capped layers were in a tmpfs (unprivileged), which did not outlive the process that made it",
                path.display()
            )));
        }
        Volume::attach(image, &path, st.st_size as u64)
    }

    fn attach(image: OwnedFd, path: &Path, bytes: u64) -> io::Result<Volume> {
        // The loop device stays open until the file system holds it: with autoclear, its last
        // close before that would release it.
        let (device, _held) = loop_device(&image)
            .map_err(|e| ctx(format!("loop device for {}", path.display()), e))?;
        let mount = mount_ext4(&device).map_err(|e| ctx(format!("mount {}", path.display()), e))?;
        Ok(Volume::hold(mount, bytes))
    }

    fn hold(mount: OwnedFd, bytes: u64) -> Volume {
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(mount.as_raw_fd());
        Volume { mount, bytes }
    }

    /// The volume's root as a path this process can open (`/proc/self/fd/<n>`); the sandbox
    /// recognises overlay layers beneath it.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.mount.as_raw_fd()))
    }

    /// The volume's root directory, for `*at` calls (a duplicate of the mount's descriptor).
    pub fn root(&self) -> io::Result<OwnedFd> {
        self.mount.try_clone()
    }

    /// The cap: the image's size.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let fd = self.mount.as_raw_fd();
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&l| l != fd);
    }
}

/// If `path` lies in a live volume (`/proc/self/fd/<n>[/rest]`): a descriptor of the volume's
/// mount (a duplicate, valid however long the caller keeps it) and the rest of the path.
pub(crate) fn beneath(path: &Path) -> Option<io::Result<(OwnedFd, PathBuf)>> {
    let rest = path.strip_prefix("/proc/self/fd").ok()?;
    let mut parts = rest.components();
    let n: RawFd = parts.next()?.as_os_str().to_str()?.parse().ok()?;
    let live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    if !live.contains(&n) {
        return None;
    }
    let dup = unsafe { libc::fcntl(n, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Some(Err(io::Error::last_os_error()));
    }
    // SAFETY: fcntl just returned this descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(dup) };
    Some(Ok((fd, parts.as_path().to_path_buf())))
}

fn open_image(dir: RawFd, name: &str, create: bool) -> io::Result<OwnedFd> {
    let mut flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    if create {
        flags |= libc::O_CREAT | libc::O_EXCL;
    }
    let c = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fd = unsafe { libc::openat(dir, c.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat just returned this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// mkfs.ext4 without reserved blocks (the zone is not root), its root directory the zone's. The
/// image is a fresh sparse file, which reads as zeros: the inode tables and the journal need no
/// zeroing (`lazy_*_init`), so formatting writes ~2 MiB for a 4 GiB cap instead of ~67 MiB.
fn format_ext4(path: &Path, (uid, gid): (u32, u32)) -> io::Result<()> {
    let mkfs = mkfs().ok_or_else(|| io::Error::other("mkfs.ext4 is not installed"))?;
    let out = std::process::Command::new(mkfs)
        .env_clear()
        .args(["-q", "-F", "-m", "0", "-L", "loopexec", "-E"])
        .arg(format!(
            "root_owner={uid}:{gid},nodiscard,lazy_itable_init=1,lazy_journal_init=1"
        ))
        .arg(path)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| ctx(mkfs, e))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{mkfs} {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// A free loop device backed by `image`, released when its last user (the mount) goes.
fn loop_device(image: &OwnedFd) -> io::Result<(String, OwnedFd)> {
    let control = open_dev("/dev/loop-control")?;
    let mut last = io::Error::other("no free loop device");
    // Another process may take the free device between the two calls: ask again.
    for _ in 0..16 {
        let n = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let name = format!("/dev/loop{n}");
        let dev = open_dev(&name)?;
        // SAFETY: an all-zero loop_config is the kernel's "defaults" value.
        let mut config: LoopConfig = unsafe { std::mem::zeroed() };
        config.fd = image.as_raw_fd() as u32;
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        let rc = unsafe {
            libc::ioctl(
                dev.as_raw_fd(),
                LOOP_CONFIGURE,
                &config as *const LoopConfig,
            )
        };
        if rc == 0 {
            return Ok((name, dev));
        }
        last = io::Error::last_os_error();
        if last.raw_os_error() != Some(libc::EBUSY) {
            return Err(last);
        }
    }
    Err(last)
}

fn open_dev(path: &str) -> io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(ctx(path, io::Error::last_os_error()));
    }
    // SAFETY: open just returned this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// fsopen("ext4") + source + create + fsmount (nosuid, nodev): a detached mount of `device`.
fn mount_ext4(device: &str) -> io::Result<OwnedFd> {
    let fs = crate::sys::fsopen("ext4")?;
    crate::sys::fsconfig_string(&fs, "source", device)?;
    // No background zeroing of the inode tables: the sparse image already reads as zeros.
    crate::sys::fsconfig_flag(&fs, "noinit_itable")?;
    crate::sys::fsconfig_create(&fs)?;
    crate::sys::fsmount(
        &fs,
        crate::sys::MOUNT_ATTR_NOSUID | crate::sys::MOUNT_ATTR_NODEV,
    )
}

/// A tmpfs of `bytes` (mode 0755, nosuid, nodev) as a detached mount, made by a child in a user
/// and mount namespace of its own (the caller's uid and gid mapped to 0 there) that shares our
/// descriptor table (`CLONE_FILES`): the mount's descriptor is ours when it exits. Between
/// clone3 and its exit the child makes only system calls on buffers prepared here.
fn tmpfs_in_own_userns(bytes: u64) -> io::Result<OwnedFd> {
    let uid_map = format!("0 {} 1", nix::unistd::geteuid().as_raw());
    let gid_map = format!("0 {} 1", nix::unistd::getegid().as_raw());
    let c = |s: &str| CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
    let files = [
        (c("/proc/self/setgroups")?, "deny".to_string()),
        (c("/proc/self/uid_map")?, uid_map),
        (c("/proc/self/gid_map")?, gid_map),
    ];
    let strings = TmpfsStrings {
        tmpfs: c("tmpfs")?,
        source: c("source")?,
        size_key: c("size")?,
        size: c(&bytes.to_string())?,
        mode_key: c("mode")?,
        mode: c("0755")?,
    };
    let mut fds = [0 as libc::c_int; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just returned these descriptors.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut args = crate::spawn::fork_like(
        (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_FILES) as u64,
    );
    let pid = crate::spawn::clone3(&mut args);
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // The child: system calls only, then _exit with the step that failed (0: the mount's
        // descriptor number is in the pipe).
        let mut step = 0;
        for (i, (path, text)) in files.iter().enumerate() {
            // SAFETY: plain system calls on buffers made before the clone.
            let ok = unsafe {
                let f = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                let ok = f >= 0
                    && libc::write(f, text.as_ptr().cast(), text.len()) == text.len() as isize;
                if f >= 0 {
                    libc::close(f);
                }
                ok
            };
            if !ok {
                step = 1 + i as i32;
                break;
            }
        }
        if step == 0 {
            step = strings.make(wr.as_raw_fd());
        }
        // SAFETY: the child ends here without running anything of the parent's.
        unsafe { libc::_exit(step) };
    }
    // The child shares our descriptor table: `wr` stays open until it has exited.
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    let status = loop {
        match nix::sys::wait::waitpid(pid, None) {
            Err(nix::Error::EINTR) => continue,
            other => break other.map_err(io::Error::from)?,
        }
    };
    let steps = [
        "setgroups",
        "uid_map",
        "gid_map",
        "fsopen",
        "fsconfig",
        "fsmount",
        "pipe",
    ];
    match status {
        nix::sys::wait::WaitStatus::Exited(_, 0) => {}
        nix::sys::wait::WaitStatus::Exited(_, n) => {
            let step = steps
                .get((n as usize).wrapping_sub(1))
                .copied()
                .unwrap_or("?");
            return Err(io::Error::other(format!(
                "making the tmpfs in a user namespace failed at {step}"
            )));
        }
        other => return Err(io::Error::other(format!("tmpfs helper: {other:?}"))),
    }
    drop(wr);
    let mut n = [0u8; 4];
    let got = nix::unistd::read(rd.as_raw_fd(), &mut n).map_err(io::Error::from)?;
    if got != 4 {
        return Err(io::Error::other("tmpfs helper: no descriptor"));
    }
    // SAFETY: the child made this descriptor in our shared table and handed us its number.
    Ok(unsafe { OwnedFd::from_raw_fd(i32::from_ne_bytes(n)) })
}

/// The strings of the tmpfs's `fsconfig` calls, made before the clone.
struct TmpfsStrings {
    tmpfs: CString,
    source: CString,
    size_key: CString,
    size: CString,
    mode_key: CString,
    mode: CString,
}

impl TmpfsStrings {
    /// The tmpfs steps of [`tmpfs_in_own_userns`]'s child: the failing step's code, or 0 once
    /// the mount's descriptor number is written to `out`. System calls only.
    fn make(&self, out: RawFd) -> i32 {
        // SAFETY: plain system calls on buffers made before the clone.
        unsafe {
            let fs = libc::syscall(libc::SYS_fsopen, self.tmpfs.as_ptr(), libc::FSOPEN_CLOEXEC);
            if fs < 0 {
                return 4;
            }
            let set = |k: &CString, v: &CString| {
                libc::syscall(
                    libc::SYS_fsconfig,
                    fs,
                    libc::FSCONFIG_SET_STRING,
                    k.as_ptr(),
                    v.as_ptr(),
                    0,
                )
            };
            if set(&self.source, &self.tmpfs) < 0
                || set(&self.size_key, &self.size) < 0
                || set(&self.mode_key, &self.mode) < 0
                || libc::syscall(
                    libc::SYS_fsconfig,
                    fs,
                    libc::FSCONFIG_CMD_CREATE,
                    std::ptr::null::<libc::c_char>(),
                    std::ptr::null::<libc::c_void>(),
                    0,
                ) < 0
            {
                return 5;
            }
            let attrs =
                (crate::sys::MOUNT_ATTR_NOSUID | crate::sys::MOUNT_ATTR_NODEV) as libc::c_uint;
            let m = libc::syscall(libc::SYS_fsmount, fs, libc::FSMOUNT_CLOEXEC, attrs);
            libc::close(fs as libc::c_int);
            if m < 0 {
                return 6;
            }
            let n = (m as i32).to_ne_bytes();
            if libc::write(out, n.as_ptr().cast(), 4) != 4 {
                return 7;
            }
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_outside_every_volume_is_not_beneath_one() {
        assert!(beneath(Path::new("/proc/self/fd/0/x")).is_none());
        assert!(beneath(Path::new("/tmp/x")).is_none());
    }

    /// As root an ext4 image, unprivileged a tmpfs (on a host that offers either).
    #[test]
    fn writes_past_the_cap_fail_with_enospc_and_the_host_gives_no_more_than_the_cap() {
        assert_eq!(unavailable(), None);
        let dir = tempfile::tempdir().unwrap();
        let d = std::fs::File::open(dir.path()).unwrap();
        let cap = 32 << 20;
        let free = |p: &Path| {
            let s = nix::sys::statvfs::statvfs(p).unwrap();
            s.blocks_available() as u64 * s.fragment_size() as u64
        };
        let before = free(dir.path());
        let v = Volume::create(d.as_raw_fd(), dir.path(), "disk.img", cap, (0, 0)).unwrap();
        let mut f = std::fs::File::create(v.path().join("big")).unwrap();
        let chunk = vec![7u8; 1 << 20];
        let mut written = 0u64;
        let err = loop {
            match std::io::Write::write_all(&mut f, &chunk) {
                Ok(()) => written += chunk.len() as u64,
                Err(e) => break e,
            }
        };
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        assert!(written > cap / 2 && written <= cap, "{written}");
        drop(f);
        let after = free(dir.path());
        assert!(before.saturating_sub(after) <= cap, "{before} -> {after}");
        assert!(!std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&dir.path().display().to_string()));
    }
}
