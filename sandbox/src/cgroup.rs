//! The zone's cgroup budget (memory, pids, CPU quota), created beneath the cgroup loopexec itself
//! runs in, never at a hierarchy's root: delegation works, and any limit the host put around
//! loopexec still holds. Teardown kills every process of the zone and removes the cgroup.
//!
//! This module writes cgroupfs files directly (a few dozen lines per version): cgroups-rs 0.3
//! builds groups from a hierarchy root, which is exactly what delegation forbids, and has no
//! notion of moving the caller into a leaf first on v2.
//!
//! - v2: `<mount>/<own path>/loopexec-zone-<pid>-<n>` with memory.max, pids.max, cpu.max. If the
//!   controllers are not enabled for children of our cgroup and our cgroup holds processes, we
//!   first move ourselves into a leaf child `loopexec-supervisor-<pid>` ("no internal processes");
//!   if enabling them still fails (other processes in our cgroup: EBUSY; a controller the parent
//!   does not offer: ENOENT) we move back and remove the leaf at once. [`Hierarchy::fitness`] says
//!   beforehand whether this can work (the supervisor asks systemd for a delegated scope when it
//!   cannot, `src/delegation.rs`). Teardown writes `cgroup.kill`.
//! - v1: one directory per controller (memory, pids, cpu, and freezer when mounted) beneath the
//!   controller's own path of this process (e.g. memory under /process_api/<id>). Teardown freezes,
//!   SIGKILLs every member, thaws, until empty.
//!
//! New zone processes enter without a `cgroup.procs` write by the supervisor (see `entry`).
//!
//! A [`CgroupPool`] keeps the cgroup of an ended zone (empty, limits unchanged) for the next zone
//! with the same budget, so a supervisor that starts zones one after another (a run's agent and
//! exec zones, every iteration) creates each cgroup once; dropping the pool removes them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const V1_CONTROLLERS: &[&str] = &["memory", "pids", "cpu"];
const CPU_PERIOD_US: u64 = 100_000;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Which cgroup version this host uses for our process, and where we may create children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// Unified hierarchy; `base` is the directory of our own cgroup.
    V2 { base: PathBuf },
    /// Legacy hierarchies; one base directory per required controller, plus freezer if present.
    V1 {
        bases: Vec<(String, PathBuf)>,
        freezer: Option<PathBuf>,
    },
}

/// The budget of one zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub memory_bytes: u64,
    pub pids_max: u64,
    pub cpu_percent: u32,
}

/// Find our cgroup(s) from /proc/self/cgroup and the mounted hierarchy.
pub fn detect() -> io::Result<Hierarchy> {
    let own = fs::read_to_string("/proc/self/cgroup")?;
    let st = nix::sys::statfs::statfs(CGROUP_ROOT).map_err(io::Error::from)?;
    if st.filesystem_type().0 as i64 == CGROUP2_SUPER_MAGIC {
        let path = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .ok_or_else(|| io::Error::other("no cgroup v2 entry in /proc/self/cgroup"))?;
        let mut base = join(Path::new(CGROUP_ROOT), path);
        // Already moved into our own supervisor leaf (an earlier pool of this process): zones go
        // beside it, beneath the cgroup we were started in.
        if base
            .file_name()
            .is_some_and(|n| n.to_str() == Some(supervisor_leaf_name().as_str()))
        {
            base.pop();
        }
        return Ok(Hierarchy::V2 { base });
    }
    let path_of = |ctrl: &str| -> Option<PathBuf> {
        own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            list.split(',')
                .any(|c| c == ctrl)
                .then(|| join(&Path::new(CGROUP_ROOT).join(ctrl), path))
        })
    };
    let mut bases = Vec::new();
    for ctrl in V1_CONTROLLERS {
        let base = path_of(ctrl).filter(|p| p.is_dir()).ok_or_else(|| {
            io::Error::other(format!("cgroup v1 controller {ctrl} is not mounted"))
        })?;
        bases.push((ctrl.to_string(), base));
    }
    Ok(Hierarchy::V1 {
        bases,
        freezer: path_of("freezer").filter(|p| p.is_dir()),
    })
}

fn supervisor_leaf_name() -> String {
    format!("loopexec-supervisor-{}", std::process::id())
}

/// Why the cgroup v2 directory we run in cannot hold zone cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    /// Not ours to write (no delegation).
    NotWritable(PathBuf),
    /// Controllers the zones need that the parent does not make available here.
    ControllersMissing { base: PathBuf, missing: Vec<String> },
    /// Other processes share our cgroup: enabling controllers for children would break the "no
    /// internal processes" rule (EBUSY), and moving them is not ours to do.
    SharedWithOtherProcesses { base: PathBuf, others: usize },
}

impl std::fmt::Display for Unfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unfit::NotWritable(d) => write!(f, "{} is not writable by this user (no delegated cgroup)", d.display()),
            Unfit::ControllersMissing { base, missing } => write!(
                f,
                "controller(s) {} not available in {} (its parent does not delegate them)",
                missing.join(", "),
                base.display()
            ),
            Unfit::SharedWithOtherProcesses { base, others } => write!(
                f,
                "{} holds {others} other process(es): cgroup v2 allows no controllers for children of a cgroup with member processes",
                base.display()
            ),
        }
    }
}

/// Controllers the zones need that `cgroup.controllers` of `dir` lacks.
fn missing_v2_controllers(dir: &Path) -> io::Result<Vec<String>> {
    let available = fs::read_to_string(dir.join("cgroup.controllers"))?;
    Ok(V1_CONTROLLERS
        .iter()
        .filter(|c| !available.split_whitespace().any(|a| a == **c))
        .map(|c| c.to_string())
        .collect())
}

/// Member processes of `dir` other than this one.
fn other_members(dir: &Path) -> io::Result<usize> {
    let me = std::process::id().to_string();
    Ok(fs::read_to_string(dir.join("cgroup.procs"))?
        .lines()
        .filter(|l| l.trim() != me && !l.trim().is_empty())
        .count())
}

fn join(root: &Path, cgroup_path: &str) -> PathBuf {
    root.join(cgroup_path.trim().trim_start_matches('/'))
}

fn writable(dir: &Path) -> bool {
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
        && nix::unistd::access(&dir.join("cgroup.procs"), nix::unistd::AccessFlags::W_OK).is_ok()
}

impl Hierarchy {
    pub fn version(&self) -> u8 {
        match self {
            Hierarchy::V2 { .. } => 2,
            Hierarchy::V1 { .. } => 1,
        }
    }

    /// Whether zone cgroups can be created here, checked the way [`Hierarchy::create`] needs it:
    /// writable (root, or a delegated subtree), and on v2 memory, pids and cpu available, and
    /// either already enabled for children or no process but ours to move into a leaf.
    pub fn fitness(&self) -> Result<(), Unfit> {
        match self {
            Hierarchy::V1 { bases, .. } => match bases.iter().find(|(_, b)| !writable(b)) {
                Some((_, b)) => Err(Unfit::NotWritable(b.clone())),
                None => Ok(()),
            },
            Hierarchy::V2 { base } => {
                let subtree = base.join("cgroup.subtree_control");
                if !writable(base)
                    || nix::unistd::access(&subtree, nix::unistd::AccessFlags::W_OK).is_err()
                {
                    return Err(Unfit::NotWritable(base.clone()));
                }
                let missing =
                    missing_v2_controllers(base).map_err(|_| Unfit::NotWritable(base.clone()))?;
                if !missing.is_empty() {
                    return Err(Unfit::ControllersMissing {
                        base: base.clone(),
                        missing,
                    });
                }
                let enabled = fs::read_to_string(&subtree).unwrap_or_default();
                if V1_CONTROLLERS
                    .iter()
                    .all(|c| enabled.split_whitespace().any(|e| e == *c))
                {
                    return Ok(());
                }
                match other_members(base) {
                    Ok(0) => Ok(()),
                    Ok(others) => Err(Unfit::SharedWithOtherProcesses {
                        base: base.clone(),
                        others,
                    }),
                    Err(_) => Err(Unfit::NotWritable(base.clone())),
                }
            }
        }
    }

    /// Create the zone's cgroup with its budget.
    pub fn create(&self, budget: Budget) -> io::Result<ZoneCgroup> {
        self.remove_stale();
        let name = format!(
            "loopexec-zone-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        match self {
            Hierarchy::V2 { base } => {
                enable_v2_controllers(base)?;
                let dir = base.join(&name);
                fs::create_dir(&dir)?;
                // Dropped on any error below: the new directory is removed at once.
                let zone = ZoneCgroup {
                    dirs: vec![dir.clone()],
                    kill_v2: true,
                    freezer: None,
                    budget,
                };
                let quota = budget.cpu_percent as u64 * CPU_PERIOD_US / 100;
                let result = (|| {
                    fs::write(dir.join("memory.max"), budget.memory_bytes.to_string())?;
                    if dir.join("memory.swap.max").exists() {
                        fs::write(dir.join("memory.swap.max"), "0")?;
                    }
                    fs::write(dir.join("pids.max"), budget.pids_max.to_string())?;
                    fs::write(dir.join("cpu.max"), format!("{quota} {CPU_PERIOD_US}"))
                })();
                result.map(|_| zone)
            }
            Hierarchy::V1 { bases, freezer } => {
                // Dropped on any error below: every directory made so far is removed at once.
                let mut zone = ZoneCgroup {
                    dirs: Vec::new(),
                    kill_v2: false,
                    freezer: None,
                    budget,
                };
                for (ctrl, base) in bases {
                    let dir = base.join(&name);
                    fs::create_dir(&dir)?;
                    zone.dirs.push(dir.clone());
                    match ctrl.as_str() {
                        "memory" => {
                            fs::write(
                                dir.join("memory.limit_in_bytes"),
                                budget.memory_bytes.to_string(),
                            )?;
                            let memsw = dir.join("memory.memsw.limit_in_bytes");
                            if memsw.exists() {
                                let _ = fs::write(memsw, budget.memory_bytes.to_string());
                            }
                        }
                        "pids" => fs::write(dir.join("pids.max"), budget.pids_max.to_string())?,
                        "cpu" => {
                            fs::write(dir.join("cpu.cfs_period_us"), CPU_PERIOD_US.to_string())?;
                            let quota = budget.cpu_percent as u64 * CPU_PERIOD_US / 100;
                            fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string())?;
                        }
                        _ => {}
                    }
                }
                if let Some(f) = freezer.as_ref().filter(|f| writable(f)) {
                    let dir = f.join(&name);
                    if fs::create_dir(&dir).is_ok() {
                        zone.dirs.push(dir.clone());
                        zone.freezer = Some(dir);
                    }
                }
                Ok(zone)
            }
        }
    }
}

impl Hierarchy {
    /// Remove empty zone cgroups and supervisor leaves left by supervisors that were killed (their
    /// pid is gone).
    pub(crate) fn remove_stale(&self) {
        let bases: Vec<&PathBuf> = match self {
            Hierarchy::V2 { base } => vec![base],
            Hierarchy::V1 { bases, freezer } => {
                bases.iter().map(|(_, b)| b).chain(freezer.iter()).collect()
            }
        };
        for base in bases {
            let Ok(entries) = fs::read_dir(base) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(rest) = name.to_str().and_then(|n| {
                    n.strip_prefix("loopexec-zone-")
                        .or_else(|| n.strip_prefix("loopexec-supervisor-"))
                }) else {
                    continue;
                };
                let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
                    continue;
                };
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = fs::remove_dir(e.path()); // only succeeds when empty
                }
            }
        }
    }
}

/// Make memory, pids and cpu available to children of `base`, moving ourselves into a leaf first
/// when we are a member of `base` (cgroup v2 forbids controllers on groups with member processes).
/// When that fails (EBUSY: other processes in `base`; ENOENT: a controller `base` lacks), we move
/// back and remove the leaf at once: a refused attempt leaves no cgroup behind.
fn enable_v2_controllers(base: &Path) -> io::Result<()> {
    let enabled = fs::read_to_string(base.join("cgroup.subtree_control"))?;
    let missing: Vec<&str> = V1_CONTROLLERS
        .iter()
        .copied()
        .filter(|c| !enabled.split_whitespace().any(|e| e == *c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let me = std::process::id().to_string();
    let member = fs::read_to_string(base.join("cgroup.procs"))?
        .lines()
        .any(|l| l.trim() == me);
    let leaf = base.join(supervisor_leaf_name());
    let mut made_leaf = false;
    if member {
        match fs::create_dir(&leaf) {
            Ok(()) => made_leaf = true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        if let Err(e) = fs::write(leaf.join("cgroup.procs"), &me) {
            if made_leaf {
                let _ = fs::remove_dir(&leaf);
            }
            return Err(e);
        }
    }
    let line = missing
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    let enabled = fs::write(base.join("cgroup.subtree_control"), line);
    if enabled.is_err() && member {
        let _ = fs::write(base.join("cgroup.procs"), &me);
        let _ = fs::remove_dir(&leaf);
    }
    enabled
}

/// Descriptors a new zone process uses to enter its cgroup.
pub enum CgroupEntry {
    None,
    V2Dir(std::os::fd::OwnedFd),
    V1Tasks(Vec<std::os::fd::OwnedFd>),
}

/// One zone's cgroup directories (one per v1 controller, or one on v2).
#[derive(Debug)]
pub struct ZoneCgroup {
    dirs: Vec<PathBuf>,
    kill_v2: bool,
    freezer: Option<PathBuf>,
    budget: Budget,
}

impl ZoneCgroup {
    /// How a new process enters this cgroup: born in it (v2 directory descriptor for
    /// clone3 `CLONE_INTO_CGROUP`), or moving itself through each v1 controller's `tasks` file.
    pub fn entry(&self) -> io::Result<CgroupEntry> {
        if self.kill_v2 {
            let dir = self
                .dirs
                .first()
                .ok_or_else(|| io::Error::other("no cgroup directory"))?;
            return Ok(CgroupEntry::V2Dir(fs::File::open(dir)?.into()));
        }
        let mut files = Vec::new();
        for d in &self.dirs {
            files.push(
                fs::OpenOptions::new()
                    .write(true)
                    .open(d.join("tasks"))?
                    .into(),
            );
        }
        Ok(CgroupEntry::V1Tasks(files))
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.dirs
    }

    fn members(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        for d in &self.dirs {
            if let Ok(s) = fs::read_to_string(d.join("cgroup.procs")) {
                pids.extend(s.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// SIGKILL every process of the zone, including double-forked ones, and wait until none is left
    /// (bounded: 2 s).
    pub fn kill_all(&self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(2);
        if self.kill_v2 {
            if let Some(d) = self.dirs.first() {
                let kill = d.join("cgroup.kill");
                if kill.exists() {
                    fs::write(kill, "1")?;
                }
            }
        }
        loop {
            let pids = self.members();
            if pids.is_empty() {
                return Ok(());
            }
            if let Some(f) = &self.freezer {
                let _ = fs::write(f.join("freezer.state"), "FROZEN");
            }
            for pid in &pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            if let Some(f) = &self.freezer {
                let _ = fs::write(f.join("freezer.state"), "THAWED");
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "{} process(es) survived SIGKILL",
                    pids.len()
                )));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Kill everything left and remove the directories.
    pub fn destroy(&mut self) -> io::Result<()> {
        // Usually the pid namespace is gone already and the groups are empty: try that first.
        self.dirs.retain(|d| fs::remove_dir(d).is_err());
        if self.dirs.is_empty() {
            return Ok(());
        }
        let killed = self.kill_all();
        let mut last = Ok(());
        for d in self.dirs.drain(..) {
            let mut tries = 0;
            loop {
                match fs::remove_dir(&d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if tries < 100 && e.raw_os_error() == Some(libc::EBUSY) => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(e) => {
                        last = Err(e);
                        break;
                    }
                }
            }
        }
        killed.and(last)
    }
}

/// Cgroups of ended zones, kept for the next zone with the same budget (see the module comment).
#[derive(Debug)]
pub struct CgroupPool {
    /// false: every cgroup is removed as soon as its zone has ended (a supervisor of one zone).
    reuse: bool,
    hierarchy: Mutex<Option<Hierarchy>>,
    idle: Mutex<Vec<ZoneCgroup>>,
}

impl CgroupPool {
    pub fn new(reuse: bool) -> CgroupPool {
        CgroupPool {
            reuse,
            hierarchy: Mutex::new(None),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle cgroup with this budget, or a new one (the hierarchy is detected once per pool).
    pub fn take(&self, budget: Budget) -> io::Result<ZoneCgroup> {
        {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = idle.iter().position(|c| c.budget == budget) {
                return Ok(idle.swap_remove(i));
            }
        }
        let mut hierarchy = self.hierarchy.lock().unwrap_or_else(|p| p.into_inner());
        let h = match hierarchy.as_ref() {
            Some(h) => h,
            None => hierarchy.insert(detect()?),
        };
        h.create(budget)
    }

    /// Keep the cgroup of an ended zone if no process is left in it (and the pool reuses
    /// cgroups); otherwise kill what is left and remove it.
    pub fn give_back(&self, mut cgroup: ZoneCgroup) -> io::Result<()> {
        if !self.reuse || !cgroup.members().is_empty() {
            return cgroup.destroy();
        }
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(cgroup);
        Ok(())
    }
}

impl Drop for ZoneCgroup {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests create cgroups of this one process: one at a time, so that each sees only its own.
    static SERIAL: Mutex<()> = Mutex::new(());

    const BUDGET: Budget = Budget {
        memory_bytes: 256 << 20,
        pids_max: 64,
        cpu_percent: 50,
    };

    /// Whether this test process may create cgroups beneath its own (root, or a delegated user).
    fn may_create_cgroups() -> bool {
        detect().is_ok_and(|h| h.fitness().is_ok())
    }

    #[test]
    fn an_ended_zones_cgroup_is_reused_for_the_same_budget_and_removed_with_the_pool() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        if !may_create_cgroups() {
            return; // no delegated cgroup: the launcher refuses zones here (see preflight tests)
        }
        let pool = CgroupPool::new(true);
        let first = pool.take(BUDGET).unwrap();
        let paths = first.paths().to_vec();
        pool.give_back(first).unwrap();
        let again = pool.take(BUDGET).unwrap();
        assert_eq!(again.paths(), &paths[..]);
        let other = pool
            .take(Budget {
                pids_max: 32,
                ..BUDGET
            })
            .unwrap();
        assert_ne!(other.paths(), &paths[..]);
        let other_paths = other.paths().to_vec();
        pool.give_back(again).unwrap();
        pool.give_back(other).unwrap();
        assert!(
            paths.iter().chain(&other_paths).all(|p| p.is_dir()),
            "idle cgroups are kept"
        );
        drop(pool);
        assert!(
            paths.iter().chain(&other_paths).all(|p| !p.exists()),
            "dropping the pool removes them"
        );
    }

    #[test]
    fn a_cgroup_with_a_process_left_in_it_is_emptied_and_removed_not_kept() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        if !may_create_cgroups() {
            return;
        }
        let pool = CgroupPool::new(true);
        let cg = pool.take(BUDGET).unwrap();
        let paths = cg.paths().to_vec();
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        for d in &paths {
            fs::write(d.join("cgroup.procs"), child.id().to_string()).unwrap();
        }
        pool.give_back(cg).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        assert!(paths.iter().all(|p| !p.exists()));
        assert!(pool.idle.lock().unwrap().is_empty());
    }

    /// Every `loopexec-zone-<our pid>-*` directory beneath the bases of this process's cgroups.
    fn our_zone_dirs() -> Vec<PathBuf> {
        let h = detect().unwrap();
        let bases: Vec<PathBuf> = match &h {
            Hierarchy::V2 { base } => vec![base.clone()],
            Hierarchy::V1 { bases, freezer } => bases
                .iter()
                .map(|(_, b)| b.clone())
                .chain(freezer.clone())
                .collect(),
        };
        let prefix = format!("loopexec-zone-{}-", std::process::id());
        bases
            .iter()
            .flat_map(|b| fs::read_dir(b).into_iter().flatten().flatten())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .collect()
    }

    #[test]
    fn a_refused_cgroup_creation_leaves_no_empty_cgroup_behind() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        if !may_create_cgroups() {
            return;
        }
        // A zero CPU quota is refused by the kernel (EINVAL) after the memory and pids limits
        // were written: every directory made for this zone must be gone at once.
        let refused = CgroupPool::new(false).take(Budget {
            cpu_percent: 0,
            ..BUDGET
        });
        assert_eq!(
            refused.map(|_| ()).map_err(|e| e.raw_os_error()),
            Err(Some(libc::EINVAL))
        );
        assert_eq!(our_zone_dirs(), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_pool_without_reuse_removes_each_cgroup_when_its_zone_ends() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        if !may_create_cgroups() {
            return;
        }
        let pool = CgroupPool::new(false);
        let cg = pool.take(BUDGET).unwrap();
        let paths = cg.paths().to_vec();
        pool.give_back(cg).unwrap();
        assert!(paths.iter().all(|p| !p.exists()));
    }
}
