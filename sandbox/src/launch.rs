//! Starting a zone, from the supervisor's side. The setup sequence, in the order the kernel needs.
//!
//! Supervisor (this module, [`Launcher::launch`]; [`launch`] is a one-zone launcher):
//! 1. `check_spec`: argv, cwd and grant paths are well-formed (absolute, no `..`).
//! 2. `check_host`: preflight (the host is probed once per launcher); every layer the policy
//!    needs exists, or the policy lets us skip it (then the report says so); otherwise
//!    `Unsatisfiable`.
//! 3. `create_cgroup`: the budget, beneath our own cgroup; the launcher's idle cgroup of an
//!    ended zone with the same budget when it has one (it is empty, its limits unchanged).
//! 4. `clone_zone_init`: clone3(2) straight into new user, mount, pid, net, ipc, uts and cgroup
//!    namespaces (cgroup v2: straight into the zone cgroup). The child holds before exec until
//!    its ids are mapped, then re-executes /proc/self/exe (fresh, single-threaded) as the zone's
//!    pid 1, with the plan socket on fd 3, /dev/null on 0-2, the parent-death signal set, and
//!    nothing else. The child enters the zone cgroup before anything else: on v2 it is born there
//!    (`CLONE_INTO_CGROUP`); on v1 it writes "0" to each controller's `tasks` file (opened by the
//!    supervisor), which moves a single thread without the global lock a `cgroup.procs` write
//!    takes (and its RCU grace period, milliseconds on a busy host).
//! 5. `map_ids_and_release`: uid_map/gid_map (the zone uid to itself), setgroups denied.
//!    Steps 3-5 depend only on the policy's identity and budget ([`PreparedInit`]):
//!    [`Launcher::prepare`] runs them ahead of time for the next zone. While the init executes
//!    (or waits for its plan), the plan is resolved:
//! 6. `resolve_grants`, `idmapped_trees`: grants canonicalised; writable ones must exist. For
//!    root callers, a writable grant the zone uid cannot write becomes an idmapped mount tree
//!    (its on-disk owner seen as the zone uid), sent with the plan; refused with the chown fix
//!    when the filesystem cannot idmap.
//!    `resolve_overlays`: overlay layers canonicalised; for root callers reachable by the zone uid
//!    and its upper/work its own.
//! 7. `hold_protected`: protected sub-paths of writable roots are found without following
//!    symlinks; a missing one gets an empty placeholder directory (removed at teardown) so it
//!    can be held read-only; a symlinked one refuses. Placeholders are recorded in a registry
//!    outside the grants, and ones a killed supervisor left are removed first
//!    (`placeholders.rs`).
//! 8. `build_env`: allowed names from the caller, then the policy's fixed set.
//! 9. Send the plan, with the command's stdin, stdout and stderr (the init reads nothing else and
//!    runs no untrusted code before it).
//! 10. `await_ready`: the zone reports `Ready` only once the command was executed.
//!
//! Any error after step 4 drops the `RunningZone`, which kills the init and cleans up.
//!
//! Zone side (clone child, then `init.rs`, `mounts.rs`): /dev/null stdio and plan socket,
//! parent-death signal, zone cgroup (v1), wait for id maps, (root callers) zone uid/gid,
//! capabilities into the ambient set, exec as pid 1, read the plan, the command's stdio onto 0-2,
//! non-dumpable, private propagation, staging pivot, fresh root with /tmp, grants,
//! protected and hidden paths, /dev, /proc, pivot_root and detach of the old root, root sealed
//! read-only, hostname, loopback up, proxy listener, fork the command. Command:
//! setsid, parent-death signal, rlimits, cwd, close-on-exec on every fd above stdio,
//! no_new_privs, Landlock, capabilities emptied and verified, seccomp, execve.
//!
//! Teardown (`RunningZone::kill` / `Drop`): SIGKILL the zone's pid 1 (the kernel then kills every
//! process of its pid namespace), then every member of the zone cgroup; the placeholders are
//! removed, and the cgroup goes back to the launcher once no process is left in it (otherwise it
//! is emptied and removed). Dropping the launcher removes its idle cgroups.

use crate::cgroup::{Budget, CgroupEntry, CgroupPool, ZoneCgroup};
use crate::spawn::{clone_zone_init, idmap_userns, map_ids_and_release, Cloned};
use crate::error::{Layer, SandboxError};
use crate::placeholders::{self, Placeholders};
use crate::plan::{self, Bind, LandlockPlan, Limits, Msg, OverlayMount, Plan};
use crate::policy::{check_absolute, NetworkMode, Policy};
use crate::preflight::{self, Missing};
use crate::sys;
use serde::Serialize;
use std::ffi::OsString;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to run and how (see the crate's API brief).
#[derive(Debug)]
pub struct ZoneSpec {
    pub policy: Policy,
    /// argv[0] absolute, or looked up in the zone environment's PATH.
    pub argv: Vec<OsString>,
    /// Must be `/`, `/tmp`, or lie inside a granted path.
    pub cwd: PathBuf,
    /// Candidate environment; only names the policy allows pass.
    pub env: Vec<(OsString, OsString)>,
    /// None: /dev/null.
    pub stdin: Option<OwnedFd>,
    /// None: inherited from the supervisor.
    pub stdout: Option<OwnedFd>,
    /// None: inherited from the supervisor.
    pub stderr: Option<OwnedFd>,
    pub extra_rw: Vec<PathBuf>,
    pub extra_ro: Vec<PathBuf>,
    /// Some(port): a TCP listener on 127.0.0.1:port inside the zone, handed back (0: any port).
    pub loopback_listener: Option<u16>,
    /// Overlay filesystems mounted inside the zone (e.g. a workspace over a read-only baseline).
    /// A target must not overlap any granted path; it is readable, and writable when the overlay
    /// has an upper layer.
    pub overlays: Vec<OverlayMount>,
}

impl ZoneSpec {
    /// A spec with closed defaults: cwd `/`, empty environment, stdin /dev/null.
    pub fn new(policy: Policy, argv: Vec<OsString>) -> Self {
        ZoneSpec {
            policy,
            argv,
            cwd: PathBuf::from("/"),
            env: Vec::new(),
            stdin: None,
            stdout: None,
            stderr: None,
            extra_rw: Vec::new(),
            extra_ro: Vec::new(),
            loopback_listener: None,
            overlays: Vec::new(),
        }
    }
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum ZoneExit {
    Exited(i32),
    Signaled(i32),
}

impl ZoneExit {
    /// Shell convention: the code, or 128 + signal.
    pub fn code(self) -> i32 {
        match self {
            ZoneExit::Exited(c) => c,
            ZoneExit::Signaled(s) => 128 + s,
        }
    }
}

/// One layer and whether it was applied.
#[derive(Debug, Clone, Serialize)]
pub struct LayerStatus {
    pub layer: Layer,
    pub applied: bool,
    pub detail: String,
}

/// What protections the zone actually got.
#[derive(Debug, Clone, Serialize)]
pub struct AppliedReport {
    pub policy_sha256: String,
    pub layers: Vec<LayerStatus>,
    /// Layers skipped with the policy's permission (`layers.may_skip`).
    pub skipped: Vec<Missing>,
    pub landlock_abi: u32,
    pub cgroup: Vec<PathBuf>,
    pub zone_uid: u32,
    pub zone_gid: u32,
    pub network_mode: &'static str,
    pub listener_port: Option<u16>,
    /// Placeholders created for protected paths that did not exist (removed at teardown).
    pub placeholders: Vec<PathBuf>,
}

/// A started zone. Dropping it kills every process of the zone and removes its cgroup.
pub struct RunningZone {
    pid: i32,
    sock: OwnedFd,
    pidfd: Option<OwnedFd>,
    listener: Option<TcpListener>,
    report: AppliedReport,
    cgroup: Option<ZoneCgroup>,
    /// Where the cgroup goes once the zone has ended.
    cgroups: Arc<CgroupPool>,
    placeholders: Placeholders,
    exit: Option<ZoneExit>,
}

/// Starts zones one after another for one supervisor (e.g. a run's agent and exec zones): the
/// host is probed once, the cgroup of an ended zone is reused by the next zone with the same
/// budget, and [`Launcher::prepare`] starts the next zone's init ahead of time. Dropping it kills a
/// prepared init and removes the cgroups it keeps (running zones keep theirs until they end).
pub struct Launcher {
    host: preflight::HostReport,
    cgroups: Arc<CgroupPool>,
    prepared: Mutex<Option<PreparedInit>>,
}

impl Default for Launcher {
    fn default() -> Self {
        Launcher::new()
    }
}

impl Launcher {
    /// Probe the host now; every zone this launcher starts is checked against this report.
    pub fn new() -> Launcher {
        Launcher::with_reuse(true)
    }

    fn with_reuse(reuse: bool) -> Launcher {
        Launcher { host: preflight::probe(), cgroups: Arc::new(CgroupPool::new(reuse)), prepared: Mutex::new(None) }
    }

    /// What this host offers, as probed when the launcher was made.
    pub fn host(&self) -> &preflight::HostReport {
        &self.host
    }

    /// Start the init of the next zone to run under `policy` now (steps 2-5), so that it executes
    /// while the caller does other work (e.g. while the current zone runs). The next `launch`
    /// with a policy of the same identity and budget uses it; any other `launch` kills it. The
    /// init runs nothing but its own code until it gets its plan.
    pub fn prepare(&self, policy: &Policy) -> Result<(), SandboxError> {
        let key = InitKey::of(policy, &check_host(policy, &self.host)?);
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        if prepared.as_ref().is_some_and(|p| p.key == key) {
            return Ok(());
        }
        *prepared = None;
        *prepared = Some(PreparedInit::start(key, &self.cgroups)?);
        Ok(())
    }

    /// Start `spec.argv` in a new zone.
    pub fn launch(&self, spec: ZoneSpec) -> Result<RunningZone, SandboxError> {
        let prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner()).take();
        launch_with(&self.host, &self.cgroups, prepared, spec)
    }
}

/// Start `spec.argv` in a new zone (a launcher of its own: probes the host, creates the cgroup and
/// removes it as soon as the zone has ended).
pub fn launch(spec: ZoneSpec) -> Result<RunningZone, SandboxError> {
    Launcher::with_reuse(false).launch(spec)
}

/// What a zone init is started with, before any plan: its uid/gid and its cgroup budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InitKey {
    uid: u32,
    gid: u32,
    /// Root callers: the init becomes `uid`/`gid` (otherwise it keeps the caller's).
    drop_ids: bool,
    /// None: no cgroup (skipped with the policy's permission).
    budget: Option<Budget>,
}

impl InitKey {
    fn of(policy: &Policy, skipped: &[Missing]) -> InitKey {
        let root = nix::unistd::geteuid().is_root();
        let (uid, gid) = if root {
            (policy.identity.uid_when_root, policy.identity.gid_when_root)
        } else {
            (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw())
        };
        let r = &policy.resources;
        let budget = (!skipped.iter().any(|m| m.layer == Layer::Cgroup))
            .then_some(Budget { memory_bytes: r.memory_bytes, pids_max: r.pids_max, cpu_percent: r.cpu_percent });
        InitKey { uid, gid, drop_ids: root, budget }
    }
}

/// A zone init started (steps 3-5) and waiting for its plan; dropping it kills it and gives its
/// cgroup back.
struct PreparedInit {
    key: InitKey,
    cloned: Option<Cloned>,
    cgroup: Option<ZoneCgroup>,
    cgroups: Arc<CgroupPool>,
}

impl PreparedInit {
    /// Steps 3-5: the cgroup, the clone, the id maps.
    fn start(key: InitKey, cgroups: &Arc<CgroupPool>) -> Result<PreparedInit, SandboxError> {
        let cgroup = key.budget.map(|b| create_cgroup(cgroups, b)).transpose()?;
        let entry = match &cgroup {
            Some(c) => c.entry().map_err(|e| SandboxError::Unsatisfiable {
                layer: Layer::Cgroup,
                cause: format!("opening the zone cgroup: {e}"),
                fix: "run loopexec in a delegated cgroup (see `loopexec doctor`)".into(),
            })?,
            None => CgroupEntry::None,
        };
        let mut init = PreparedInit { key, cloned: None, cgroup, cgroups: Arc::clone(cgroups) };
        let cloned = clone_zone_init(key.drop_ids.then_some((key.uid, key.gid)), &entry)?;
        drop(entry);
        let cloned = init.cloned.insert(cloned);
        map_ids_and_release(cloned, key.uid, key.gid, key.drop_ids)?;
        Ok(init)
    }
}

impl Drop for PreparedInit {
    fn drop(&mut self) {
        if let Some(c) = self.cloned.take() {
            let pid = nix::unistd::Pid::from_raw(c.pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            while let Err(nix::Error::EINTR) = nix::sys::wait::waitpid(pid, None) {}
        }
        if let Some(cg) = self.cgroup.take() {
            let _ = self.cgroups.give_back(cg);
        }
    }
}

fn launch_with(
    host: &preflight::HostReport,
    cgroups: &Arc<CgroupPool>,
    prepared: Option<PreparedInit>,
    mut spec: ZoneSpec,
) -> Result<RunningZone, SandboxError> {
    let started = std::time::Instant::now();
    check_spec(&spec)?;
    let skipped = check_host(&spec.policy, host)?;
    let skip = |l: Layer| skipped.iter().any(|m| m.layer == l);
    let key = InitKey::of(&spec.policy, &skipped);
    let (root, zone_uid, zone_gid) = (key.drop_ids, key.uid, key.gid);
    // The init is started first (or was, by `Launcher::prepare`): it executes and initialises
    // while we resolve the plan.
    let mut init = match prepared {
        Some(p) if p.key == key => p,
        _ => PreparedInit::start(key, cgroups)?,
    };
    let init_ready = started.elapsed();
    let (Some(cloned), cgroup) = (init.cloned.take(), init.cgroup.take()) else {
        return Err(SandboxError::Spawn("the zone init was already used".into()));
    };
    let mut zone = RunningZone {
        pid: cloned.pid,
        sock: cloned.sock,
        pidfd: Some(cloned.pidfd),
        listener: None,
        report: AppliedReport {
            policy_sha256: spec.policy.sha256.clone(),
            layers: layer_table(host, &skipped, spec.policy.network.mode),
            skipped: skipped.clone(),
            landlock_abi: if skip(Layer::Landlock) { 0 } else { host.landlock_abi },
            cgroup: cgroup.as_ref().map(|c| c.paths().to_vec()).unwrap_or_default(),
            zone_uid,
            zone_gid,
            network_mode: spec.policy.network.mode.as_str(),
            listener_port: None,
            placeholders: Vec::new(),
        },
        cgroup,
        cgroups: Arc::clone(cgroups),
        placeholders: Placeholders::unrecorded(),
        exit: None,
    };
    drop(init);
    let (ro, grants) = resolve_grants(&spec, root.then_some((zone_uid, zone_gid)))?;
    let overlays = resolve_overlays(&spec.overlays, root.then_some((zone_uid, zone_gid)))?;
    let rw: Vec<PathBuf> = grants.iter().map(|g| g.path.clone()).collect();
    let trees = idmapped_trees(&grants, zone_uid, zone_gid)?;
    let ProtectedHolds { protected, hidden, placeholders: ProtectedPlaceholders(held) } =
        hold_protected_paths(&ro, &rw, &spec.policy.filesystem.protected, &spec.policy.filesystem.hidden)?;
    zone.report.placeholders = held.created.clone();
    zone.placeholders = held;
    let landlock = (!skip(Layer::Landlock)).then(|| LandlockPlan {
        abi: host.landlock_abi,
        read: ro.iter().cloned().chain(overlays.iter().filter(|o| !o.writable()).map(|o| o.target.clone())).collect(),
        write: rw.iter().cloned().chain(overlays.iter().filter(|o| o.writable()).map(|o| o.target.clone())).collect(),
        restrict_connect: spec.policy.network.mode == NetworkMode::Proxy,
    });
    let r = &spec.policy.resources;
    let plan = Plan {
        binds: ro
            .iter()
            .map(|p| Bind { path: p.clone(), writable: false, tree: None })
            .chain(grants.iter().map(|g| Bind {
                path: g.path.clone(),
                writable: true,
                tree: trees.iter().position(|(p, _)| *p == g.path),
            }))
            .collect(),
        protected,
        hidden,
        overlays,
        tmp_size: spec.policy.filesystem.tmp_size_bytes,
        hostname: spec.policy.identity.hostname.clone(),
        listener_port: spec.loopback_listener,
        landlock,
        seccomp_extra_deny: spec.policy.syscalls.deny.clone(),
        limits: Limits { open_files: r.open_files_max, file_size: r.file_size_max_bytes, core: r.core_dump_bytes },
        cwd: spec.cwd.clone(),
        argv: spec.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        env: build_env(&spec),
    };
    let bytes = serde_json::to_vec(&plan).map_err(|e| SandboxError::Spawn(format!("encode plan: {e}")))?;
    let stdio = command_stdio([spec.stdin.take(), spec.stdout.take(), spec.stderr.take()])?;
    let fds: Vec<RawFd> = stdio.iter().map(|f| f.as_raw_fd()).chain(trees.iter().map(|(_, t)| t.as_raw_fd())).collect();
    if let Err(e) = plan::send(zone.sock.as_raw_fd(), &bytes, &fds) {
        if matches!(e.raw_os_error(), Some(libc::EPIPE) | Some(libc::ECONNRESET)) {
            // An init that died before its plan (e.g. it could not enter its cgroup) says why.
            await_ready(&mut zone)?;
            return Err(SandboxError::io("send plan", e));
        }
        // The init is alive and still waiting for its plan (e.g. EMSGSIZE: argv and environment
        // larger than one message may carry): waiting for it would wait forever.
        let _ = zone.kill();
        return Err(SandboxError::Spec(format!("the zone's plan ({} bytes: command line and environment) could not be sent: {e}", bytes.len())));
    }
    drop((stdio, trees));
    let plan_sent = started.elapsed();
    await_ready(&mut zone)?;
    tracing::debug!(
        init_us = init_ready.as_micros() as u64,
        plan_us = (plan_sent - init_ready).as_micros() as u64,
        ready_us = (started.elapsed() - plan_sent).as_micros() as u64,
        "zone started"
    );
    Ok(zone)
}

fn check_spec(spec: &ZoneSpec) -> Result<(), SandboxError> {
    if spec.argv.is_empty() {
        return Err(SandboxError::Spec("no command given".into()));
    }
    for p in spec.extra_rw.iter().chain(&spec.extra_ro) {
        check_absolute(p).map_err(SandboxError::Spec)?;
    }
    check_absolute(&spec.cwd).or_else(|e| if spec.cwd == Path::new("/") { Ok(()) } else { Err(e) }).map_err(SandboxError::Spec)?;
    let grants = spec.policy.filesystem.read_only.iter().chain(&spec.policy.filesystem.read_write).chain(&spec.extra_rw).chain(&spec.extra_ro);
    check_overlays(spec, grants.clone())?;
    let inside = spec.cwd == Path::new("/")
        || spec.cwd.starts_with("/tmp")
        || grants.clone().any(|g| spec.cwd.starts_with(g))
        || spec.overlays.iter().any(|o| spec.cwd.starts_with(&o.target));
    if !inside {
        return Err(SandboxError::Spec(format!("working directory {} is not inside a granted path", spec.cwd.display())));
    }
    if spec.loopback_listener.is_some() && spec.policy.network.mode != NetworkMode::Proxy {
        return Err(SandboxError::Spec("a proxy listener needs network.mode = \"proxy\"".into()));
    }
    Ok(())
}

/// Overlay paths are absolute and `..`-free, free of the characters overlayfs options reserve
/// (`,` `:` `\\`), at least one lower, upper and work given together, and no target overlapping
/// a grant, a zone system directory or another target (it would hide it, or be created on the host).
fn check_overlays<'a>(spec: &ZoneSpec, grants: impl Iterator<Item = &'a PathBuf>) -> Result<(), SandboxError> {
    let grants: Vec<&PathBuf> = grants.collect();
    let bad = |m: String| Err(SandboxError::Spec(m));
    for (i, o) in spec.overlays.iter().enumerate() {
        if o.lowers.is_empty() {
            return bad(format!("overlay {}: at least one lower layer is needed", o.target.display()));
        }
        if o.upper.is_some() != o.work.is_some() {
            return bad(format!("overlay {}: upper and work directories go together", o.target.display()));
        }
        for p in std::iter::once(&o.target).chain(&o.lowers).chain(o.upper.iter()).chain(o.work.iter()) {
            check_absolute(p).map_err(SandboxError::Spec)?;
            if p.as_os_str().as_encoded_bytes().iter().any(|b| matches!(b, b',' | b':' | b'\\')) {
                return bad(format!("overlay path {} contains `,`, `:` or `\\`, which overlayfs options cannot carry", p.display()));
            }
        }
        let overlaps = |a: &Path, b: &Path| a.starts_with(b) || b.starts_with(a);
        let reserved = ["/", "/tmp", "/dev", "/proc"].iter().map(Path::new);
        if let Some(r) = reserved.clone().find(|r| o.target == *r || (*r != Path::new("/") && o.target.starts_with(r))) {
            return bad(format!("overlay target {} lies in the zone's {}", o.target.display(), r.display()));
        }
        if let Some(g) = grants.iter().find(|g| overlaps(&o.target, g)) {
            return bad(format!("overlay target {} overlaps the granted path {}", o.target.display(), g.display()));
        }
        if let Some(other) = spec.overlays[..i].iter().find(|x| overlaps(&o.target, &x.target)) {
            return bad(format!("overlay targets {} and {} overlap", o.target.display(), other.target.display()));
        }
    }
    Ok(())
}

/// Layer paths canonicalised (so the zone can open them without following any symlink); every
/// layer must be an existing directory. For root callers the zone mounts as its own uid, so every
/// directory on the way to a layer must let it pass, and the upper and work directories must be
/// its own: refused here with the fix, rather than failing inside the zone.
fn resolve_overlays(overlays: &[OverlayMount], zone_ids: Option<(u32, u32)>) -> Result<Vec<OverlayMount>, SandboxError> {
    if !overlays.is_empty() {
        require_unprivileged_overlayfs()?;
    }
    if let Some((uid, gid)) = zone_ids {
        let may = |m: &std::fs::Metadata, bits: u32| {
            (m.uid() == uid && m.mode() & (bits << 6) == bits << 6) || (m.gid() == gid && m.mode() & (bits << 3) == bits << 3) || m.mode() & bits == bits
        };
        for o in overlays {
            for layer in o.lowers.iter().chain(o.upper.iter()).chain(o.work.iter()) {
                let c = std::fs::canonicalize(layer).map_err(|e| SandboxError::Spec(format!("overlay layer {}: {e}", layer.display())))?;
                for dir in c.ancestors().skip(1) {
                    let m = std::fs::metadata(dir).map_err(|e| SandboxError::io(dir.display().to_string(), e))?;
                    if !may(&m, 0o1) {
                        return Err(SandboxError::Spec(format!(
                            "overlay layer {} is not reachable by the zone uid {uid}: {} does not let it pass (`chmod o+x {}`, or run loopexec unprivileged)",
                            layer.display(),
                            dir.display(),
                            dir.display()
                        )));
                    }
                }
            }
            for own in o.upper.iter().chain(o.work.iter()) {
                let m = std::fs::metadata(own).map_err(|e| SandboxError::io(own.display().to_string(), e))?;
                if m.uid() != uid {
                    return Err(SandboxError::Spec(format!(
                        "overlay directory {} must belong to the zone uid {uid} (`chown {uid}:{gid} {}`)",
                        own.display(),
                        own.display()
                    )));
                }
            }
        }
    }
    let canon = |p: &PathBuf| -> Result<PathBuf, SandboxError> {
        let c = std::fs::canonicalize(p).map_err(|e| SandboxError::Spec(format!("overlay layer {}: {e}", p.display())))?;
        if !c.is_dir() {
            return Err(SandboxError::Spec(format!("overlay layer {} is not a directory", p.display())));
        }
        if c.as_os_str().as_encoded_bytes().iter().any(|b| matches!(b, b',' | b':' | b'\\')) {
            return Err(SandboxError::Spec(format!("overlay layer {} resolves to a path with `,`, `:` or `\\`", p.display())));
        }
        Ok(c)
    };
    overlays
        .iter()
        .map(|o| {
            Ok(OverlayMount {
                target: o.target.clone(),
                lowers: o.lowers.iter().map(canon).collect::<Result<_, _>>()?,
                upper: o.upper.as_ref().map(canon).transpose()?,
                work: o.work.as_ref().map(canon).transpose()?,
                volatile: o.volatile,
            })
        })
        .collect()
}

/// Overlayfs inside a user namespace (with `userxattr`) needs Linux >= 5.11: refuse up front
/// instead of failing inside the zone. (A kernel without overlayfs fails the mount itself.)
fn require_unprivileged_overlayfs() -> Result<(), SandboxError> {
    let unsat = |cause: String| SandboxError::Unsatisfiable {
        layer: Layer::MountNamespace,
        cause,
        fix: "run on Linux >= 5.11 with overlayfs available".into(),
    };
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut nums = release.trim().split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u32>().ok());
    let (major, minor) = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
    if (major, minor) < (5, 11) {
        return Err(unsat(format!("kernel {} cannot mount overlayfs in a user namespace", release.trim())));
    }
    Ok(())
}

/// Refuse missing layers the policy needs; return those skipped with its permission.
fn check_host(policy: &Policy, host: &preflight::HostReport) -> Result<Vec<Missing>, SandboxError> {
    if let Some(m) = host.can_satisfy(policy).into_iter().next() {
        return Err(SandboxError::Unsatisfiable { layer: m.layer, cause: m.cause, fix: m.fix });
    }
    Ok(host.missing(policy).into_iter().filter(|m| policy.may_skip(m.layer)).collect())
}

fn layer_table(host: &preflight::HostReport, skipped: &[Missing], mode: NetworkMode) -> Vec<LayerStatus> {
    let skip = |l: Layer| skipped.iter().any(|m| m.layer == l);
    let s = |layer, detail: String| LayerStatus { layer, applied: !skip(layer), detail: if skip(layer) { "skipped (policy layers.may_skip)".into() } else { detail } };
    vec![
        s(Layer::UserNamespace, "own uid/gid mapped, setgroups denied".into()),
        s(Layer::MountNamespace, "fresh root, pivot_root, old root detached".into()),
        s(Layer::PidNamespace, "own pid 1 reaper".into()),
        s(Layer::NetNamespace, format!("loopback only (mode {})", mode.as_str())),
        s(Layer::IpcUtsNamespaces, "own ipc and uts".into()),
        s(Layer::Landlock, format!("ABI {}", host.landlock_abi)),
        s(Layer::Seccomp, "deny list, foreign ABIs killed".into()),
        s(Layer::NoNewPrivs, "set".into()),
        s(Layer::Capabilities, "all sets empty".into()),
        s(Layer::Cgroup, format!("cgroup v{}", host.cgroup.version.unwrap_or(0))),
        s(Layer::Rlimits, "nofile, fsize, core".into()),
    ]
}

/// A writable grant, and (root callers) the on-disk owner to map onto the zone uid when the
/// zone uid could not write it otherwise.
#[derive(Debug, Clone)]
struct RwGrant {
    path: PathBuf,
    idmap_owner: Option<(u32, u32)>,
}

/// Read-only grants (absent ones kept: the zone skips them) and canonical writable grants.
fn resolve_grants(spec: &ZoneSpec, zone_ids: Option<(u32, u32)>) -> Result<(Vec<PathBuf>, Vec<RwGrant>), SandboxError> {
    let mut ro: Vec<PathBuf> = spec.policy.filesystem.read_only.clone();
    for p in &spec.extra_ro {
        let c = std::fs::canonicalize(p).map_err(|e| SandboxError::Spec(format!("read-only grant {}: {e}", p.display())))?;
        ro.push(c);
    }
    let mut rw = Vec::new();
    for p in spec.policy.filesystem.read_write.iter().chain(&spec.extra_rw) {
        let c = std::fs::canonicalize(p).map_err(|e| SandboxError::Spec(format!("writable grant {}: {e}", p.display())))?;
        if c == Path::new("/") {
            return Err(SandboxError::Spec("the host root cannot be granted writable".into()));
        }
        let mut idmap_owner = None;
        if let Some((uid, gid)) = zone_ids {
            let m = std::fs::metadata(&c).map_err(|e| SandboxError::io(c.display().to_string(), e))?;
            let mode = m.mode();
            let writable = (m.uid() == uid && mode & 0o200 != 0) || (m.gid() == gid && mode & 0o020 != 0) || mode & 0o002 != 0;
            if !writable {
                idmap_owner = Some((m.uid(), m.gid()));
            }
        }
        rw.push(RwGrant { path: c, idmap_owner });
    }
    Ok((ro, rw))
}

/// Root callers: for each writable grant the zone uid cannot write, a detached copy of its mounts
/// whose on-disk owner is seen as the zone uid (an idmapped mount): the zone writes the
/// operator's files, and what it creates is stored as owned by the grant's owner. Other on-disk
/// owners stay unmapped (read-only to the zone, shown as the overflow uid).
fn idmapped_trees(grants: &[RwGrant], zone_uid: u32, zone_gid: u32) -> Result<Vec<(PathBuf, OwnedFd)>, SandboxError> {
    let mut out = Vec::new();
    for g in grants {
        let Some((owner_uid, owner_gid)) = g.idmap_owner else { continue };
        let refuse = |cause: String| {
            SandboxError::Spec(format!(
                "writable grant {} is not writable by the zone uid {zone_uid} and cannot be idmapped ({cause}): `chown -R {zone_uid}:{zone_gid} {}`, or run loopexec unprivileged",
                g.path.display(),
                g.path.display()
            ))
        };
        if owner_uid == 0 || owner_gid == 0 {
            // The zone's files would be root's on the host: a setuid-root binary made in the zone
            // would be one on the host too. Never map the zone onto root.
            return Err(refuse("it belongs to root, and the zone is never mapped onto root".into()));
        }
        let userns = idmap_userns(owner_uid, zone_uid, owner_gid, zone_gid).map_err(|e| refuse(format!("user namespace: {e}")))?;
        let tree = sys::clone_tree_at(&g.path).map_err(|e| refuse(format!("open_tree: {e}")))?;
        sys::idmap_tree(&tree, &userns, sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV).map_err(|e| refuse(format!("mount_setattr: {e}")))?;
        out.push((g.path.clone(), tree));
    }
    // The plan carries the command's three stdio descriptors, then the trees.
    if out.len() > plan::MAX_FDS - 3 {
        return Err(SandboxError::Spec(format!("at most {} writable grants need idmapping", plan::MAX_FDS - 3)));
    }
    Ok(out)
}

/// The placeholders a zone holds; released (removed unless another live zone holds them) when
/// dropped.
pub struct ProtectedPlaceholders(Placeholders);

/// What a backend that mounts protected paths itself must hold for a zone.
pub struct ProtectedHolds {
    /// (root, sub-path) pairs to bind read-only (parents pinned).
    pub protected: Vec<(PathBuf, PathBuf)>,
    /// Paths to hide: the policy's, plus the placeholder registry when a grant contains it.
    pub hidden: Vec<PathBuf>,
    pub placeholders: ProtectedPlaceholders,
}

/// Step 7 (`hold_protected`), also for a backend that mounts the holds itself: placeholders
/// made (and recorded, so that a killed supervisor's are collected) for missing ones, the
/// registry shielded, a symlinked protected path refused, exactly as for a native zone.
pub fn hold_protected_paths(read_only: &[PathBuf], rw: &[PathBuf], protected: &[PathBuf], hidden: &[PathBuf]) -> Result<ProtectedHolds, SandboxError> {
    let mut held = placeholders::open();
    let mut pairs = hold_protected(rw, protected, &mut held)?;
    let mut hidden = hidden.to_vec();
    placeholders::shield_registry(&held, read_only, rw, &mut pairs, &mut hidden).map_err(SandboxError::Spec)?;
    held.end_setup();
    Ok(ProtectedHolds { protected: pairs, hidden, placeholders: ProtectedPlaceholders(held) })
}

/// For every writable root and protected sub-path: the (root, sub-path) pairs the zone must hold
/// read-only. Nothing is followed through a symlink.
fn hold_protected(rw: &[PathBuf], protected: &[PathBuf], held: &mut Placeholders) -> Result<Vec<(PathBuf, PathBuf)>, SandboxError> {
    let mut out: Vec<(PathBuf, PathBuf)> = Vec::new();
    let nofollow = sys::RESOLVE_BENEATH | sys::RESOLVE_NO_SYMLINKS;
    for root in rw {
        if !root.is_dir() {
            continue;
        }
        let root_fd = sys::openat2(libc::AT_FDCWD, &root.to_string_lossy(), libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| SandboxError::io(root.display().to_string(), e))?;
        'each: for sub in protected {
            if out.iter().any(|(r, s)| r == root && sub.starts_with(s)) {
                continue; // already covered by a held ancestor
            }
            match sys::openat2(root_fd.as_raw_fd(), &sub.to_string_lossy(), libc::O_PATH, nofollow) {
                Ok(fd) => {
                    held.adopt_if_placeholder(fd.as_raw_fd(), root, sub).map_err(|e| SandboxError::io("placeholder registry", e))?;
                    out.push((root.clone(), sub.clone()));
                    continue;
                }
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::EXDEV) => {
                    return Err(SandboxError::ProtectedSymlink { path: root.join(sub) });
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) || e.raw_os_error() == Some(libc::ENOTDIR) => {}
                Err(e) => return Err(SandboxError::io(root.join(sub).display().to_string(), e)),
            }
            // Walk down to the first missing component and hold it with an empty directory.
            let mut prefix = PathBuf::new();
            let mut dir: Option<OwnedFd> = None;
            for comp in sub.components() {
                let parent: RawFd = dir.as_ref().map(|d| d.as_raw_fd()).unwrap_or(root_fd.as_raw_fd());
                let name = comp.as_os_str();
                prefix.push(name);
                match sys::openat2(parent, &name.to_string_lossy(), libc::O_PATH, nofollow) {
                    Ok(fd) => {
                        let is_dir = nix::sys::stat::fstat(fd.as_raw_fd()).map(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR).unwrap_or(false);
                        // A file, or another live zone's placeholder: held as it is.
                        let adopted = is_dir && held.adopt_if_placeholder(fd.as_raw_fd(), root, &prefix).map_err(|e| SandboxError::io("placeholder registry", e))?;
                        if !is_dir || adopted {
                            out.push((root.clone(), prefix.clone()));
                            continue 'each;
                        }
                        dir = Some(fd);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                        held.create(parent, name, root, &prefix)
                            .map_err(|e| SandboxError::io(format!("placeholder {}", root.join(&prefix).display()), e))?;
                        out.push((root.clone(), prefix.clone()));
                        continue 'each;
                    }
                    Err(e) => return Err(SandboxError::io(root.join(&prefix).display().to_string(), e)),
                }
            }
        }
    }
    Ok(out)
}

fn build_env(spec: &ZoneSpec) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut env: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for (k, v) in &spec.env {
        let allowed = spec.policy.env.allow.iter().any(|a| a.as_bytes() == k.as_bytes());
        if allowed && !spec.policy.env.set.contains_key(&*k.to_string_lossy()) && !env.iter().any(|(e, _)| e == k.as_bytes()) {
            env.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
        }
    }
    for (k, v) in &spec.policy.env.set {
        env.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
    }
    env
}

fn create_cgroup(cgroups: &CgroupPool, budget: Budget) -> Result<ZoneCgroup, SandboxError> {
    let fix = "run loopexec in a delegated cgroup (see `loopexec doctor`), or allow skipping with layers.may_skip = [\"cgroup\"]";
    let unsat = |cause: String| SandboxError::Unsatisfiable { layer: Layer::Cgroup, cause, fix: fix.into() };
    cgroups.take(budget).map_err(|e| unsat(format!("creating the zone cgroup: {e}")))
}

/// The command's stdin, stdout and stderr, sent with the plan: the caller's, or /dev/null for
/// stdin and our own stdout/stderr when not given.
fn command_stdio(given: [Option<OwnedFd>; 3]) -> Result<[OwnedFd; 3], SandboxError> {
    let [stdin, stdout, stderr] = given;
    let own = |fd: RawFd| {
        // SAFETY: fds 1 and 2 stay open for the life of the process; the borrow ends here.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned().map_err(|e| SandboxError::io("stdio", e))
    };
    let stdin = match stdin {
        Some(f) => f,
        None => std::fs::File::open("/dev/null").map_err(|e| SandboxError::io("/dev/null", e))?.into(),
    };
    let stdout = match stdout {
        Some(f) => f,
        None => own(1)?,
    };
    let stderr = match stderr {
        Some(f) => f,
        None => own(2)?,
    };
    Ok([stdin, stdout, stderr])
}

fn await_ready(zone: &mut RunningZone) -> Result<(), SandboxError> {
    let got = plan::recv(&zone.sock, false).map_err(|e| SandboxError::io("waiting for the zone", e))?;
    let Some((bytes, fds)) = got else {
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(zone.pid), None);
        zone.exit = Some(ZoneExit::Exited(127));
        let _ = zone.teardown();
        let why = match status {
            Ok(nix::sys::wait::WaitStatus::Exited(_, 119)) => {
                return Err(SandboxError::Unsatisfiable {
                    layer: Layer::Cgroup,
                    cause: "the zone init could not enter its cgroup".into(),
                    fix: "run loopexec in a delegated cgroup (see `loopexec doctor`)".into(),
                })
            }
            Ok(nix::sys::wait::WaitStatus::Exited(_, 124)) => "could not become the zone uid/gid".to_string(),
            Ok(nix::sys::wait::WaitStatus::Exited(_, 125)) => "could not keep its namespace capabilities across exec".to_string(),
            Ok(nix::sys::wait::WaitStatus::Exited(_, 126)) => "could not execute /proc/self/exe".to_string(),
            other => format!("ended with {other:?}"),
        };
        return Err(SandboxError::Spawn(format!("the zone init failed before the command started: {why} (is run_if_zone_init() called first in main?)")));
    };
    match serde_json::from_slice::<Msg>(&bytes) {
        Ok(Msg::Ready { listener_port }) => {
            zone.listener = fds.into_iter().next().map(TcpListener::from);
            zone.report.listener_port = listener_port;
            Ok(())
        }
        Ok(Msg::Failed { layer, message, .. }) => {
            let _ = zone.kill();
            Err(setup_error(layer, message))
        }
        _ => {
            let _ = zone.kill();
            Err(SandboxError::Spawn("unexpected message from the zone".into()))
        }
    }
}

/// Turn a zone-side failure into the right error: a protection that could not be applied is
/// `Unsatisfiable`; anything else (bad grant, missing command) is a spawn failure.
fn setup_error(layer: Option<Layer>, message: String) -> SandboxError {
    match layer {
        Some(l @ (Layer::Landlock | Layer::Seccomp | Layer::Capabilities | Layer::NoNewPrivs | Layer::NetNamespace | Layer::IpcUtsNamespaces | Layer::Cgroup)) => {
            SandboxError::Unsatisfiable { layer: l, cause: message, fix: "see `loopexec doctor` for this host's isolation support".into() }
        }
        _ => SandboxError::Spawn(message),
    }
}

impl RunningZone {
    /// Host pid of the zone's init (pid 1 inside; the whole zone dies with it).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn take_listener(&mut self) -> Option<TcpListener> {
        self.listener.take()
    }

    pub fn report(&self) -> &AppliedReport {
        &self.report
    }

    /// Wait for the command to end; the zone is torn down before this returns.
    pub fn wait(&mut self) -> Result<ZoneExit, SandboxError> {
        if let Some(e) = self.exit {
            return Ok(e);
        }
        let waiting = std::time::Instant::now();
        let status = loop {
            match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(self.pid), None) {
                Err(nix::Error::EINTR) => continue,
                other => break other.map_err(|e| SandboxError::errno("wait for the zone", e))?,
            }
        };
        let mut exit = None;
        while let Ok(Some((bytes, _))) = plan::recv(&self.sock, true) {
            match serde_json::from_slice::<Msg>(&bytes) {
                Ok(Msg::Exited { code }) => exit = Some(ZoneExit::Exited(code)),
                Ok(Msg::Signaled { signal }) => exit = Some(ZoneExit::Signaled(signal)),
                _ => {}
            }
        }
        use nix::sys::wait::WaitStatus;
        let exit = exit.unwrap_or(match status {
            WaitStatus::Exited(_, c) => ZoneExit::Exited(c),
            WaitStatus::Signaled(_, s, _) => ZoneExit::Signaled(s as i32),
            _ => ZoneExit::Exited(127),
        });
        self.exit = Some(exit);
        let reaped = waiting.elapsed();
        self.teardown()?;
        tracing::debug!(reap_us = reaped.as_micros() as u64, teardown_us = (waiting.elapsed() - reaped).as_micros() as u64, "zone ended");
        Ok(exit)
    }

    /// Wait at most `limit`; `Ok(None)` if the command is still running.
    pub fn wait_timeout(&mut self, limit: Duration) -> Result<Option<ZoneExit>, SandboxError> {
        if let Some(e) = self.exit {
            return Ok(Some(e));
        }
        if let Some(pidfd) = &self.pidfd {
            let mut fds = [libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            let ms = limit.as_millis().min(i32::MAX as u128) as i32;
            let deadline = std::time::Instant::now() + limit;
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now()).as_millis().min(ms as u128) as i32;
                let rc = unsafe { libc::poll(fds.as_mut_ptr(), 1, left) };
                if rc > 0 {
                    return self.wait().map(Some);
                }
                if rc == 0 {
                    return Ok(None);
                }
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::Interrupted {
                    return Err(SandboxError::io("poll pidfd", err));
                }
            }
        }
        let deadline = std::time::Instant::now() + limit;
        loop {
            use nix::sys::wait::{waitid, Id, WaitPidFlag};
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
            match waitid(Id::Pid(nix::unistd::Pid::from_raw(self.pid)), flags) {
                Ok(nix::sys::wait::WaitStatus::StillAlive) => {}
                _ => return self.wait().map(Some),
            }
            if std::time::Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kill every process of the zone (also double-forked ones) and tear it down.
    pub fn kill(&mut self) -> Result<(), SandboxError> {
        if self.exit.is_none() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::SIGKILL);
            if let Some(cg) = &self.cgroup {
                let _ = cg.kill_all();
            }
            let _ = self.wait();
        }
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), SandboxError> {
        let mut result = Ok(());
        if let Some(cg) = self.cgroup.take() {
            if let Err(e) = self.cgroups.give_back(cg) {
                result = Err(SandboxError::io("remove the zone cgroup", e));
            }
        }
        self.placeholders.release();
        result
    }
}

impl Drop for RunningZone {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(policy_text: &str) -> ZoneSpec {
        let policy = Policy::parse(policy_text.as_bytes(), "t.toml").unwrap();
        ZoneSpec::new(policy, vec!["/bin/true".into()])
    }

    #[test]
    fn environment_keeps_only_allowed_names_and_fixed_values_win() {
        let mut s = spec("[env]\nallow = [\"LANG\", \"HOME\"]\nset = { HOME = \"/tmp\" }\n");
        s.env = vec![("LANG".into(), "C".into()), ("TOKEN".into(), "secret".into()), ("HOME".into(), "/root".into())];
        let env = build_env(&s);
        assert_eq!(env, vec![(b"LANG".to_vec(), b"C".to_vec()), (b"HOME".to_vec(), b"/tmp".to_vec())]);
    }

    #[test]
    fn cwd_outside_every_grant_is_refused() {
        let mut s = spec("[filesystem]\nread_only = [\"/usr\"]\n");
        s.cwd = PathBuf::from("/etc");
        assert!(matches!(check_spec(&s), Err(SandboxError::Spec(m)) if m.contains("/etc")));
        s.cwd = PathBuf::from("/usr/share");
        assert!(check_spec(&s).is_ok());
    }

    #[test]
    fn relative_extra_grant_is_refused() {
        let mut s = spec("");
        s.extra_rw = vec![PathBuf::from("work")];
        assert!(matches!(check_spec(&s), Err(SandboxError::Spec(_))));
    }

    #[test]
    fn listener_needs_proxy_mode() {
        let mut s = spec("[network]\nmode = \"none\"\n");
        s.loopback_listener = Some(0);
        assert!(matches!(check_spec(&s), Err(SandboxError::Spec(m)) if m.contains("proxy")));
        let mut s = spec("[network]\nmode = \"proxy\"\n");
        s.loopback_listener = Some(0);
        assert!(check_spec(&s).is_ok());
    }

    #[test]
    fn empty_command_is_refused() {
        let mut s = spec("");
        s.argv.clear();
        assert!(matches!(check_spec(&s), Err(SandboxError::Spec(_))));
    }

    #[test]
    fn missing_protected_path_gets_a_placeholder_that_is_removed_afterwards() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut held = Placeholders::unrecorded();
        let pairs = hold_protected(std::slice::from_ref(&root), &[PathBuf::from(".git/hooks"), PathBuf::from(".git/config")], &mut held).unwrap();
        // `.git` is missing: it is held itself, and covers both protected paths.
        assert_eq!(pairs, vec![(root.clone(), PathBuf::from(".git"))]);
        assert!(root.join(".git").is_dir());
        drop(held);
        assert!(!root.join(".git").exists());
    }

    #[test]
    fn symlinked_protected_path_refuses_the_launch() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("/etc", root.join(".git")).unwrap();
        let mut held = Placeholders::unrecorded();
        let r = hold_protected(std::slice::from_ref(&root), &[PathBuf::from(".git/config")], &mut held);
        assert!(matches!(r, Err(SandboxError::ProtectedSymlink { path }) if path == root.join(".git/config")));
    }
}
