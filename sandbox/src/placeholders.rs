//! Placeholders: the empty directories that hold missing protected paths (`.git`, `.gitmodules`,
//! `.loopexec`...) in a writable grant for a zone's lifetime, and the registry that lets the next
//! zone start remove the ones a SIGKILLed supervisor could not.
//!
//! Why a host-side directory at all: a mount needs a dentry to sit on, and the zone's read-only
//! bind over a missing path needs one in the grant's filesystem, i.e. on the host. It cannot be
//! removed while the zone runs either: since Linux 3.18 an `rmdir` from another mount namespace
//! succeeds and silently detaches the zone's mount on it (the protection would vanish).
//!
//! The registry is a supervisor-owned directory outside the workspace:
//! `$XDG_STATE_HOME/loopexec/placeholders` (else `$HOME/.local/state/loopexec/placeholders`),
//! mode 0700, owned by the caller. In it:
//! - `lock`: flock(2)ed (exclusive) around every read or change of the registry, so starts,
//!   teardowns and collections of several supervisors never interleave;
//! - one `<pid>-<n>-<nanos>.jsonl` record per zone, flock(2)ed by its supervisor for as long as the
//!   zone exists. The kernel drops that lock when the supervisor dies (even by SIGKILL), so a
//!   record whose lock can be taken belongs to a dead supervisor, whatever pid namespace it ran
//!   in and however pids were reused. Each line names one placeholder: grant, sub-path and the
//!   directory's identity (device, inode, ctime to the nanosecond), written right after mkdir.
//!
//! A directory is removed only if, looked up again beneath its grant without following any
//! symlink, it is still a directory with exactly the recorded identity (an operator's `rmdir` +
//! `mkdir` gets a new ctime even if the inode number is reused; any chmod, rename or entry added
//! changes the ctime), `rmdir` finds it empty, and no live record lists it. A zone that finds a
//! protected path held by another live zone's placeholder lists it in its own record too (it
//! "adopts" it), so the first of the two to end does not pull it from under the other; the last
//! one removes it. The agent cannot forge a record: the registry lies outside every grant, and
//! when a grant does contain it (e.g. `--rw $HOME`) the zone gets it protected (read-only, its
//! parents pinned) and hidden. Hidden, that is, whenever the zone's uid could enter it: a root
//! caller's registry (owned by root, kept at 0700) is closed to the zone's uid by its mode alone,
//! whatever directories lie above it, so it gets no mount (the zone, which resolves hidden paths
//! with its own credentials, could not even reach it under a 0700 home such as `/root`). It
//! cannot forge an identity either: a placeholder is read-only in the zone, and a directory it
//! makes itself has another inode or ctime.
//!
//! Left open: a supervisor killed between its `mkdir` and the record line (a few syscalls) leaves
//! a placeholder nobody can tell from an operator's empty directory, so it stays.

use crate::sys;
use serde::{Deserialize, Serialize};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufRead, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

const RECORD_SUFFIX: &str = ".jsonl";
const LOCK_FILE: &str = "lock";
static RECORD_COUNTER: AtomicU32 = AtomicU32::new(0);

/// One placeholder: where it is and which directory it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    grant: PathBuf,
    sub: PathBuf,
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

/// What the zone's supervisor records about a directory it holds.
fn identity(st: &libc::stat) -> (u64, u64, (i64, i64)) {
    (st.st_dev, st.st_ino, (st.st_ctime, st.st_ctime_nsec))
}

impl Entry {
    /// The same directory (whichever grant it was reached from).
    fn same_dir(&self, other: &Entry) -> bool {
        (self.dev, self.ino, self.ctime) == (other.dev, other.ino, other.ctime)
    }
}

fn listed(list: &[Entry], e: &Entry) -> bool {
    list.iter().any(|l| l.same_dir(e))
}

/// Where the registry lives for this caller, if anywhere.
pub(crate) fn registry_location() -> Option<PathBuf> {
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    let base = std::env::var_os("XDG_STATE_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|h| h.join(".local/state"))
        })?;
    Some(base.join("loopexec").join("placeholders"))
}

fn flock(fd: RawFd, op: libc::c_int) -> io::Result<bool> {
    loop {
        if unsafe { libc::flock(fd, op) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(e),
        }
    }
}

fn open_at(dir: RawFd, name: &OsStr, flags: i32, mode: libc::mode_t) -> io::Result<File> {
    let c = std::ffi::CString::new(name.as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let fd = unsafe {
        libc::openat(
            dir,
            c.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { File::from_raw_fd(fd) })
}

fn fstatat_nofollow(dir: RawFd, name: &OsStr) -> io::Result<libc::stat> {
    nix::sys::stat::fstatat(Some(dir), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(io::Error::from)
}

/// A record file of another supervisor, read under the registry lock.
struct Record {
    name: std::ffi::OsString,
    entries: Vec<Entry>,
    /// Some(file holding its lock) when its supervisor is dead.
    dead: Option<File>,
}

/// The registry, locked for as long as this value lives.
struct Registry {
    path: PathBuf,
    dir: OwnedFd,
    _lock: File,
}

impl Registry {
    /// Open (creating it, 0700, if needed) and lock the registry at `path`. It must be a real
    /// directory owned by us and not writable by anyone else.
    fn lock(path: &Path) -> io::Result<Registry> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(io::Error::other(format!(
                "{} cannot hold a registry",
                path.display()
            )));
        };
        // The parents are the operator's (a symlinked home is fine); the registry itself is not
        // followed if it is a symlink.
        std::fs::DirBuilder::new().recursive(true).create(parent)?;
        let path = std::fs::canonicalize(parent)?.join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let dir = sys::openat2(
            libc::AT_FDCWD,
            &path.to_string_lossy(),
            libc::O_RDONLY | libc::O_DIRECTORY,
            sys::RESOLVE_NO_SYMLINKS,
        )?;
        let st = nix::sys::stat::fstat(dir.as_raw_fd()).map_err(io::Error::from)?;
        if st.st_uid != nix::unistd::geteuid().as_raw() || st.st_mode & 0o022 != 0 {
            return Err(io::Error::other(format!(
                "{} is not a directory only we can write",
                path.display()
            )));
        }
        if st.st_mode & 0o077 != 0 {
            // Back to 0700 (also empties an ACL's mask): only the owner may enter it.
            nix::sys::stat::fchmod(dir.as_raw_fd(), nix::sys::stat::Mode::S_IRWXU)
                .map_err(io::Error::from)?;
        }
        let lock = open_at(
            dir.as_raw_fd(),
            OsStr::new(LOCK_FILE),
            libc::O_RDWR | libc::O_CREAT,
            0o600,
        )?;
        flock(lock.as_raw_fd(), libc::LOCK_EX)?;
        Ok(Registry {
            path,
            dir,
            _lock: lock,
        })
    }

    /// Every record but `own`, each with its lock taken if its supervisor is dead.
    fn records(&self, own: Option<&OsStr>) -> io::Result<Vec<Record>> {
        let mut out = Vec::new();
        let dir = nix::dir::Dir::openat(
            Some(self.dir.as_raw_fd()),
            ".",
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(io::Error::from)?;
        let names: Vec<std::ffi::OsString> = dir
            .into_iter()
            .filter_map(Result::ok)
            .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
            .filter(|n| {
                n.as_bytes().ends_with(RECORD_SUFFIX.as_bytes()) && Some(n.as_os_str()) != own
            })
            .collect();
        for name in names {
            let file = match open_at(self.dir.as_raw_fd(), &name, libc::O_RDONLY, 0) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let dead = flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB)?;
            // A torn last line (killed mid-write) is skipped.
            let entries = io::BufReader::new(&file)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| serde_json::from_str(&l).ok())
                .collect();
            out.push(Record {
                name,
                entries,
                dead: dead.then_some(file),
            });
        }
        Ok(out)
    }
}

/// Remove `e`'s directory if it is still exactly the one recorded and empty.
fn remove_if_unchanged(e: &Entry) -> bool {
    let (Some(name), parent) = (e.sub.file_name(), e.sub.parent().unwrap_or(Path::new(""))) else {
        return false;
    };
    let Ok(root) = sys::openat2(
        libc::AT_FDCWD,
        &e.grant.to_string_lossy(),
        libc::O_PATH | libc::O_DIRECTORY,
        sys::RESOLVE_NO_SYMLINKS,
    ) else {
        return false;
    };
    let parent_fd = if parent.as_os_str().is_empty() {
        root
    } else {
        match sys::openat2(
            root.as_raw_fd(),
            &parent.to_string_lossy(),
            libc::O_PATH | libc::O_DIRECTORY,
            sys::RESOLVE_BENEATH | sys::RESOLVE_NO_SYMLINKS,
        ) {
            Ok(fd) => fd,
            Err(_) => return false,
        }
    };
    match fstatat_nofollow(parent_fd.as_raw_fd(), name) {
        Ok(st)
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR
                && identity(&st) == (e.dev, e.ino, e.ctime) =>
        {
            nix::unistd::unlinkat(
                Some(parent_fd.as_raw_fd()),
                name,
                nix::unistd::UnlinkatFlags::RemoveDir,
            )
            .is_ok()
        }
        _ => false,
    }
}

/// The placeholders one zone holds (made by it, or adopted from another live zone), and its
/// record in the registry. Dropping it removes them (see [`Placeholders::release`]).
pub(crate) struct Placeholders {
    registry: Option<PathBuf>,
    /// Held between `begin` and `end_setup`.
    locked: Option<Registry>,
    record: Option<(std::ffi::OsString, File)>,
    entries: Vec<Entry>,
    /// Placeholders of other live zones, as seen at `begin`.
    live: Vec<Entry>,
    /// The directories this zone created (for the report).
    pub(crate) created: Vec<PathBuf>,
}

impl Placeholders {
    /// No registry: placeholders are still made and removed at teardown, but one a killed
    /// supervisor leaves cannot be collected.
    pub(crate) fn unrecorded() -> Placeholders {
        Placeholders {
            registry: None,
            locked: None,
            record: None,
            entries: Vec::new(),
            live: Vec::new(),
            created: Vec::new(),
        }
    }

    /// Lock the registry at `location` and remove what dead supervisors left (see the module
    /// comment). The lock is held until [`Placeholders::end_setup`].
    pub(crate) fn begin(location: &Path) -> io::Result<Placeholders> {
        let reg = Registry::lock(location)?;
        let records = reg.records(None)?;
        let live: Vec<Entry> = records
            .iter()
            .filter(|r| r.dead.is_none())
            .flat_map(|r| r.entries.iter().cloned())
            .collect();
        for r in records.iter().filter(|r| r.dead.is_some()) {
            for e in r.entries.iter().filter(|e| !listed(&live, e)) {
                remove_if_unchanged(e);
            }
            let _ = nix::unistd::unlinkat(
                Some(reg.dir.as_raw_fd()),
                r.name.as_os_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
        Ok(Placeholders {
            registry: Some(reg.path.clone()),
            locked: Some(reg),
            record: None,
            entries: Vec::new(),
            live,
            created: Vec::new(),
        })
    }

    /// The registry's canonical path, when there is one.
    pub(crate) fn registry(&self) -> Option<&Path> {
        self.registry.as_deref()
    }

    /// Whether a process running as `uid` (without capabilities over the registry's owner) could
    /// enter the registry: it owns it, or its mode lets group or others in. Asked while the
    /// registry is locked; unknown (no registry open) counts as yes.
    fn enterable_by(&self, uid: u32) -> bool {
        let Some(reg) = &self.locked else {
            return true;
        };
        match nix::sys::stat::fstat(reg.dir.as_raw_fd()) {
            Ok(st) => st.st_uid == uid || st.st_mode & 0o077 != 0,
            Err(_) => true,
        }
    }

    /// Release the registry lock (placeholders made, the zone may start).
    pub(crate) fn end_setup(&mut self) {
        self.locked = None;
    }

    /// Append `e` to our record (created on first use, locked for the zone's lifetime).
    fn record(&mut self, e: &Entry) -> io::Result<()> {
        let Some(reg) = &self.locked else {
            return Ok(());
        };
        if self.record.is_none() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let name = format!(
                "{}-{}-{now}{RECORD_SUFFIX}",
                std::process::id(),
                RECORD_COUNTER.fetch_add(1, Ordering::Relaxed)
            );
            let file = open_at(
                reg.dir.as_raw_fd(),
                OsStr::new(&name),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_APPEND,
                0o600,
            )?;
            flock(file.as_raw_fd(), libc::LOCK_EX)?;
            self.record = Some((name.into(), file));
        }
        let mut line = serde_json::to_vec(e).map_err(io::Error::other)?;
        line.push(b'\n');
        match &mut self.record {
            Some((_, f)) => f.write_all(&line),
            None => Ok(()),
        }
    }

    /// Create the placeholder `grant/sub` as `name` in `parent` (the directory `grant/sub`'s
    /// parent, opened beneath the grant) and record it.
    pub(crate) fn create(
        &mut self,
        parent: RawFd,
        name: &OsStr,
        grant: &Path,
        sub: &Path,
    ) -> io::Result<()> {
        nix::sys::stat::mkdirat(
            Some(parent),
            name,
            nix::sys::stat::Mode::from_bits_truncate(0o755),
        )
        .map_err(io::Error::from)?;
        let st = fstatat_nofollow(parent, name)?;
        let (dev, ino, ctime) = identity(&st);
        let e = Entry {
            grant: grant.to_path_buf(),
            sub: sub.to_path_buf(),
            dev,
            ino,
            ctime,
        };
        self.created.push(grant.join(sub));
        self.entries.push(e.clone());
        // Unrecorded, it is still removed at teardown; only a killed supervisor's would stay.
        if let Err(err) = self.record(&e) {
            tracing::debug!(
                "placeholder registry: recording {}: {err}",
                grant.join(sub).display()
            );
        }
        Ok(())
    }

    /// `grant/sub` exists (opened as `fd`): if it is another live zone's placeholder, hold it too
    /// (and say so: the caller then holds it as it is, and creates nothing inside it). An error
    /// here must refuse the launch: unrecorded, the other zone's end would remove the directory
    /// and with it this zone's mount on it.
    pub(crate) fn adopt_if_placeholder(
        &mut self,
        fd: RawFd,
        grant: &Path,
        sub: &Path,
    ) -> io::Result<bool> {
        let Ok(st) = nix::sys::stat::fstat(fd) else {
            return Ok(false);
        };
        let (dev, ino, ctime) = identity(&st);
        let e = Entry {
            grant: grant.to_path_buf(),
            sub: sub.to_path_buf(),
            dev,
            ino,
            ctime,
        };
        if !listed(&self.live, &e) {
            return Ok(false);
        }
        if !listed(&self.entries, &e) {
            self.entries.push(e.clone());
            self.record(&e)?;
        }
        Ok(true)
    }

    /// Remove our placeholders that no other live zone holds, then our record.
    pub(crate) fn release(&mut self) {
        if self.entries.is_empty() && self.record.is_none() {
            return;
        }
        let reg = match (self.locked.take(), &self.registry) {
            (Some(r), _) => Some(r),
            (None, Some(path)) => Registry::lock(path).ok(),
            (None, None) => None,
        };
        let own = self.record.as_ref().map(|(n, _)| n.clone());
        let live: Vec<Entry> = match &reg {
            Some(r) => r
                .records(own.as_deref())
                .unwrap_or_default()
                .into_iter()
                .filter(|r| r.dead.is_none())
                .flat_map(|r| r.entries)
                .collect(),
            None => Vec::new(),
        };
        for e in self.entries.drain(..).rev() {
            if !listed(&live, &e) {
                remove_if_unchanged(&e);
            }
        }
        if let (Some(r), Some(name)) = (&reg, own) {
            let _ = nix::unistd::unlinkat(
                Some(r.dir.as_raw_fd()),
                name.as_os_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
        self.record = None;
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        self.release();
    }
}

/// The placeholders of a zone about to start: with the registry (locked, dead supervisors'
/// leftovers collected) when this caller has one, else unrecorded (said at debug level only: a
/// computed outcome writes nothing on stderr, and this is hygiene, not a protection).
pub(crate) fn open() -> Placeholders {
    let Some(location) = registry_location() else {
        tracing::debug!("no XDG_STATE_HOME or HOME: placeholders a killed supervisor leaves will not be collected");
        return Placeholders::unrecorded();
    };
    Placeholders::begin(&location).unwrap_or_else(|e| {
        tracing::debug!("placeholder registry {}: {e}; placeholders a killed supervisor leaves will not be collected", location.display());
        Placeholders::unrecorded()
    })
}

/// Keep the zone off the registry when a grant contains it: hidden in the zone unless the zone's
/// uid (`zone_uid`; None: not known, e.g. a container engine's user) cannot enter it at all, and
/// when a writable grant contains it, also protected (read-only, its parents pinned) so it cannot
/// be moved away and replaced with forged records. A writable grant that is the registry itself
/// is refused.
pub(crate) fn shield_registry(
    held: &Placeholders,
    zone_uid: Option<u32>,
    read_only: &[PathBuf],
    writable: &[PathBuf],
    protected: &mut Vec<(PathBuf, PathBuf)>,
    hidden: &mut Vec<PathBuf>,
) -> Result<(), String> {
    let Some(reg) = held.registry() else {
        return Ok(());
    };
    for g in writable.iter().filter(|g| reg.starts_with(g)) {
        match reg.strip_prefix(g) {
            Ok(sub) if !sub.as_os_str().is_empty() => {
                protected.push((g.clone(), sub.to_path_buf()))
            }
            _ => {
                return Err(format!(
                    "the writable grant {} is loopexec's placeholder registry",
                    g.display()
                ))
            }
        }
    }
    let enterable = zone_uid.is_none_or(|uid| held.enterable_by(uid));
    if enterable && read_only.iter().chain(writable).any(|g| reg.starts_with(g)) {
        hidden.push(reg.to_path_buf());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scene {
        _dir: tempfile::TempDir,
        grant: PathBuf,
        registry: PathBuf,
    }

    fn scene() -> Scene {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let grant = base.join("grant");
        std::fs::create_dir(&grant).unwrap();
        Scene {
            grant,
            registry: base.join("state/loopexec/placeholders"),
            _dir: dir,
        }
    }

    fn make(p: &mut Placeholders, grant: &Path, name: &str) {
        let root = File::open(grant).unwrap();
        p.create(root.as_raw_fd(), OsStr::new(name), grant, Path::new(name))
            .unwrap();
    }

    /// A zone started over the grant, which held a missing `.git` with a placeholder.
    fn started_with_git(s: &Scene) -> Placeholders {
        let mut p = Placeholders::begin(&s.registry).unwrap();
        make(&mut p, &s.grant, ".git");
        p.end_setup();
        p
    }

    /// A zone started over the grant, finding `name` there.
    fn started_over(s: &Scene, name: &str) -> Placeholders {
        let mut p = Placeholders::begin(&s.registry).unwrap();
        let fd = File::open(s.grant.join(name)).unwrap();
        p.adopt_if_placeholder(fd.as_raw_fd(), &s.grant, Path::new(name))
            .unwrap();
        p.end_setup();
        p
    }

    /// What a SIGKILLed supervisor leaves: its placeholders and its record, lock released.
    fn leave_as_if_killed(mut p: Placeholders) {
        p.end_setup();
        p.entries.clear();
        p.record = None;
    }

    #[test]
    fn placeholders_of_a_dead_supervisor_are_removed_by_the_next_begin() {
        let s = scene();
        let mut killed = Placeholders::begin(&s.registry).unwrap();
        make(&mut killed, &s.grant, ".git");
        make(&mut killed, &s.grant, ".loopexec");
        leave_as_if_killed(killed);
        assert!(s.grant.join(".git").is_dir());
        let next = Placeholders::begin(&s.registry).unwrap();
        assert!(!s.grant.join(".git").exists());
        assert!(!s.grant.join(".loopexec").exists());
        drop(next);
        let left: Vec<_> = std::fs::read_dir(&s.registry)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from(LOCK_FILE)],
            "the dead record was not removed"
        );
    }

    #[test]
    fn a_directory_remade_at_a_recorded_path_is_not_removed() {
        let s = scene();
        let mut killed = Placeholders::begin(&s.registry).unwrap();
        make(&mut killed, &s.grant, ".git");
        leave_as_if_killed(killed);
        // The operator replaces it with their own empty `.git` (possibly the same inode number).
        std::fs::remove_dir(s.grant.join(".git")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::create_dir(s.grant.join(".git")).unwrap();
        drop(Placeholders::begin(&s.registry).unwrap());
        assert!(s.grant.join(".git").is_dir());
    }

    #[test]
    fn a_touched_placeholder_is_not_removed() {
        let s = scene();
        let mut killed = Placeholders::begin(&s.registry).unwrap();
        make(&mut killed, &s.grant, ".git");
        leave_as_if_killed(killed);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::set_permissions(
            s.grant.join(".git"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        drop(Placeholders::begin(&s.registry).unwrap());
        assert!(s.grant.join(".git").is_dir());
    }

    #[test]
    fn placeholders_of_a_live_supervisor_survive_another_begin_and_release() {
        let s = scene();
        let live = started_with_git(&s);
        drop(started_over(&s, ".git"));
        assert!(
            s.grant.join(".git").is_dir(),
            "another zone's end removed a live zone's placeholder"
        );
        drop(live);
        assert!(!s.grant.join(".git").exists());
    }

    #[test]
    fn an_adopted_placeholder_is_removed_by_the_last_holder() {
        let s = scene();
        let first = started_with_git(&s);
        let second = started_over(&s, ".git");
        drop(first);
        assert!(
            s.grant.join(".git").is_dir(),
            "the first zone's end removed what the second still holds"
        );
        drop(second);
        assert!(!s.grant.join(".git").exists());
    }

    #[test]
    fn a_directory_the_operator_made_is_neither_adopted_nor_removed() {
        let s = scene();
        std::fs::create_dir(s.grant.join(".git")).unwrap();
        let p = started_over(&s, ".git");
        assert!(
            p.entries.is_empty(),
            "an operator's directory was taken for a placeholder"
        );
        drop(p);
        assert!(s.grant.join(".git").is_dir());
    }

    #[test]
    fn a_registry_writable_by_others_is_refused() {
        let s = scene();
        std::fs::create_dir_all(&s.registry).unwrap();
        std::fs::set_permissions(
            &s.registry,
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        assert!(Placeholders::begin(&s.registry).is_err());
    }
}
