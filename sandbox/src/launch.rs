//! Starting a zone, from the supervisor's side: [`Launcher`] (and the one-zone [`launch`]) run
//! the setup as a list of named steps in the order the kernel needs them — `launch_with` and
//! `PreparedInit::start` read top to bottom as that list. What each step does, and what the zone
//! side does after it, is described once in docs/zones.md ("The native zone's setup sequence");
//! the steps live in the files named for what they own: `spec.rs` (1, 8), `preflight.rs` (2),
//! `timens.rs` (2: a clock offset's host check; the zone init's time namespace), `cgroup.rs` (3), `spawn.rs` (4, 5), `grants.rs` (6), `protected.rs` (7), `plan.rs` (9, 10:
//! the messages, the pre-exec failure codes and their decoder), `zone.rs` (the running zone and
//! its teardown), `report.rs` (what was applied), `evidence.rs` (what the kernel applied, read back).

use crate::cgroup::{Budget, CgroupEntry, CgroupPool, ZoneCgroup};
use crate::error::{Layer, SandboxError};
use crate::grants::{
    idmapped_trees, overlay_layer_trees, require_capped_uppers, resolve_grants, resolve_overlays,
    volume_layer_fds, RwGrant,
};
use crate::init_exe::InitExe;
use crate::placeholders::Placeholders;
use crate::plan::{
    self, decode_failure, Bind, LandlockPlan, Limits, Msg, NotReady, OverlayMount, Plan,
};
use crate::policy::{NetworkMode, Policy};
use crate::preflight::{self, Missing};
use crate::report::layer_table;
use crate::spawn::{clone_zone_init, map_ids_and_release, Cloned};
use crate::spec::{build_env, check_spec, command_stdio};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use crate::protected::{hold_protected_paths, ProtectedHolds, ProtectedPlaceholders};
pub use crate::report::{AppliedReport, LayerStatus};
pub use crate::spec::ZoneSpec;
pub use crate::zone::{RunningZone, ZoneExit};

/// Starts zones one after another for one supervisor (e.g. a run's agent and exec zones): the
/// host is probed once, the cgroup of an ended zone is reused by the next zone with the same
/// budget, and [`Launcher::prepare`] starts the next zone's init ahead of time. Dropping it kills a
/// prepared init and removes the cgroups it keeps (running zones keep theirs until they end).
pub struct Launcher {
    host: preflight::HostReport,
    init_exe: InitExe,
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
        Launcher {
            host: preflight::probe(),
            init_exe: InitExe::locate(),
            cgroups: Arc::new(CgroupPool::new(reuse)),
            prepared: Mutex::new(None),
        }
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
        *prepared = Some(PreparedInit::start(key, &self.init_exe, &self.cgroups)?);
        Ok(())
    }

    /// Start `spec.argv` in a new zone.
    pub fn launch(&self, spec: ZoneSpec) -> Result<RunningZone, SandboxError> {
        let prepared = self
            .prepared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        launch_with(self, prepared, spec)
    }
}

/// Start `spec.argv` in a new zone (a launcher of its own: probes the host, creates the cgroup and
/// removes it as soon as the zone has ended).
pub fn launch(spec: ZoneSpec) -> Result<RunningZone, SandboxError> {
    Launcher::with_reuse(false).launch(spec)
}

/// The setup sequence (docs/zones.md, "The native zone's setup sequence"). Any error after the
/// zone init is adopted drops the `RunningZone`, which kills the init and cleans up.
fn launch_with(
    launcher: &Launcher,
    prepared: Option<PreparedInit>,
    mut spec: ZoneSpec,
) -> Result<RunningZone, SandboxError> {
    let (host, cgroups) = (&launcher.host, &launcher.cgroups);
    let started = Instant::now();
    check_spec(&spec)?; // 1
    let skipped = check_host(&spec.policy, host)?; // 2
    crate::timens::check_offset(spec.clock_offset_s, &host.kernel)?; // 2: a clock offset needs time namespaces
    let key = InitKey::of(&spec.policy, &skipped);
    // 3-5, unless `Launcher::prepare` already did them: the init executes and initialises while
    // the plan is resolved.
    let init = match prepared {
        Some(p) if p.key == key => p,
        _ => PreparedInit::start(key, &launcher.init_exe, cgroups)?,
    };
    let init_ready = started.elapsed();
    let mut zone = adopt_init(
        init,
        applied_report(&spec.policy, host, &skipped, key),
        cgroups,
    )?;
    let (ro, grants) = resolve_grants(&spec, key.zone_ids())?; // 6
    let overlays = resolve_overlays(&spec.overlays, key.zone_ids())?;
    require_capped_uppers(
        &overlays,
        &spec.policy,
        skipped.iter().any(|m| m.layer == Layer::Disk),
    )?;
    let mut trees = idmapped_trees(&grants, key.uid, key.gid)?;
    let layers_from = overlay_layer_trees(&overlays, key.zone_ids())?.map(|layers| {
        let from = trees.len();
        trees.extend(layers.into_iter().map(|fd| (PathBuf::new(), fd)));
        from
    });
    let mut layer_fds = Vec::new();
    if layers_from.is_none() {
        for fd in volume_layer_fds(&overlays)? {
            layer_fds.push(fd.map(|fd| {
                trees.push((PathBuf::new(), fd));
                trees.len() - 1
            }));
        }
        if layer_fds.iter().all(Option::is_none) {
            layer_fds.clear();
        }
    }
    if trees.len() > plan::MAX_FDS - 3 {
        return Err(SandboxError::Spec(format!(
            "a zone takes at most {} idmapped grants and overlay layers together",
            plan::MAX_FDS - 3
        )));
    }
    let mut holds = hold_protected(&mut zone, &spec.policy, key.uid, &ro, &grants)?; // 7
    holds.0.extend(spec.read_only_beneath.iter().cloned());
    let mut plan = build_plan(
        &spec,
        host,
        &skipped,
        ro,
        &grants,
        &trees,
        (overlays, layers_from),
        holds,
    ); // 8
    plan.overlay_layer_fds = layer_fds;
    let stdio = command_stdio([spec.stdin.take(), spec.stdout.take(), spec.stderr.take()])?;
    send_plan(&mut zone, &plan, stdio, trees)?; // 9
    let plan_sent = started.elapsed();
    await_ready(&mut zone)?; // 10
    tracing::debug!(
        init_us = init_ready.as_micros() as u64,
        plan_us = (plan_sent - init_ready).as_micros() as u64,
        ready_us = (started.elapsed() - plan_sent).as_micros() as u64,
        "zone started"
    );
    Ok(zone)
}

/// Step 2: refuse missing layers the policy needs; return those skipped with its permission.
fn check_host(policy: &Policy, host: &preflight::HostReport) -> Result<Vec<Missing>, SandboxError> {
    if let Some(m) = host.can_satisfy(policy).into_iter().next() {
        return Err(SandboxError::Unsatisfiable {
            layer: m.layer,
            cause: m.cause,
            fix: m.fix,
        });
    }
    Ok(host
        .missing(policy)
        .into_iter()
        .filter(|m| policy.may_skip(m.layer))
        .collect())
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
            (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            )
        };
        let r = &policy.resources;
        let budget = (!skipped.iter().any(|m| m.layer == Layer::Cgroup)).then_some(Budget {
            memory_bytes: r.memory_bytes,
            pids_max: r.pids_max,
            cpu_percent: r.cpu_percent,
        });
        InitKey {
            uid,
            gid,
            drop_ids: root,
            budget,
        }
    }

    /// Root callers: the ids the zone takes, which grants and overlays are checked against.
    fn zone_ids(self) -> Option<(u32, u32)> {
        self.drop_ids.then_some((self.uid, self.gid))
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
    fn start(
        key: InitKey,
        init_exe: &InitExe,
        cgroups: &Arc<CgroupPool>,
    ) -> Result<PreparedInit, SandboxError> {
        let exe = init_exe.fd()?; // found and opened once per launcher (init_exe.rs)
        let cgroup = key.budget.map(|b| create_cgroup(cgroups, b)).transpose()?; // 3
        let mut init = PreparedInit {
            key,
            cloned: None,
            cgroup,
            cgroups: Arc::clone(cgroups),
        };
        let entry = cgroup_entry(init.cgroup.as_ref())?;
        let cloned = init
            .cloned
            .insert(clone_zone_init(exe, key.zone_ids(), &entry)?); // 4
        drop(entry);
        map_ids_and_release(cloned, key.uid, key.gid, key.drop_ids)?; // 5
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

/// Step 3: the budget, beneath our own cgroup (an idle one of the launcher's with the same budget
/// when it has one).
fn create_cgroup(cgroups: &CgroupPool, budget: Budget) -> Result<ZoneCgroup, SandboxError> {
    let fix = "run loopexec in a delegated cgroup (see `loopexec doctor`), or allow skipping with layers.may_skip = [\"cgroup\"]";
    let unsat = |cause: String| SandboxError::Unsatisfiable {
        layer: Layer::Cgroup,
        cause,
        fix: fix.into(),
    };
    cgroups
        .take(budget)
        .map_err(|e| unsat(format!("creating the zone cgroup: {e}")))
}

/// Step 3, for the clone: how the child enters the zone cgroup (v2 directory, v1 `tasks` files).
fn cgroup_entry(cgroup: Option<&ZoneCgroup>) -> Result<CgroupEntry, SandboxError> {
    let Some(c) = cgroup else {
        return Ok(CgroupEntry::None);
    };
    c.entry().map_err(|e| SandboxError::Unsatisfiable {
        layer: Layer::Cgroup,
        cause: format!("opening the zone cgroup: {e}"),
        fix: "run loopexec in a delegated cgroup (see `loopexec doctor`)".into(),
    })
}

fn applied_report(
    policy: &Policy,
    host: &preflight::HostReport,
    skipped: &[Missing],
    key: InitKey,
) -> AppliedReport {
    AppliedReport {
        policy_sha256: policy.sha256.clone(),
        layers: layer_table(
            host,
            skipped,
            policy.network.mode,
            policy.resources.disk_bytes,
        ),
        skipped: skipped.to_vec(),
        landlock_abi: if skipped.iter().any(|m| m.layer == Layer::Landlock) {
            0
        } else {
            host.landlock_abi
        },
        cgroup: Vec::new(),
        zone_uid: key.uid,
        zone_gid: key.gid,
        network_mode: policy.network.mode.as_str(),
        listener_port: None,
        placeholders: Vec::new(),
        enforcement: None,
        self_test: None,
    }
}

/// The started init becomes a `RunningZone`: from here on, dropping it kills and cleans up.
fn adopt_init(
    mut init: PreparedInit,
    mut report: AppliedReport,
    cgroups: &Arc<CgroupPool>,
) -> Result<RunningZone, SandboxError> {
    let (Some(cloned), cgroup) = (init.cloned.take(), init.cgroup.take()) else {
        return Err(SandboxError::Spawn("the zone init was already used".into()));
    };
    report.cgroup = cgroup
        .as_ref()
        .map(|c| c.paths().to_vec())
        .unwrap_or_default();
    Ok(RunningZone {
        pid: cloned.pid,
        sock: cloned.sock,
        pidfd: Some(cloned.pidfd),
        listener: None,
        report,
        cgroup,
        cgroups: Arc::clone(cgroups),
        placeholders: Placeholders::unrecorded(),
        exit: None,
        outside_attempts: None,
    })
}

/// Step 7: the policy's protected paths held in every writable grant; the zone keeps the
/// placeholders until its teardown.
/// Returns the (root, sub-path) pairs to hold read-only and the paths to hide.
fn hold_protected(
    zone: &mut RunningZone,
    policy: &Policy,
    zone_uid: u32,
    ro: &[PathBuf],
    grants: &[RwGrant],
) -> Result<Holds, SandboxError> {
    let rw: Vec<PathBuf> = grants.iter().map(|g| g.path.clone()).collect();
    let ProtectedHolds {
        protected,
        hidden,
        placeholders: ProtectedPlaceholders(held),
    } = crate::protected::hold_protected_paths_for(
        Some(zone_uid),
        ro,
        &rw,
        &policy.filesystem.protected,
        &policy.filesystem.hidden,
    )?;
    zone.report.placeholders = held.created.clone();
    zone.placeholders = held;
    Ok((protected, hidden))
}

type Holds = (Vec<(PathBuf, PathBuf)>, Vec<PathBuf>);

/// Step 8: everything the zone init needs, resolved (the environment filtered by the policy).
#[allow(clippy::too_many_arguments)]
fn build_plan(
    spec: &ZoneSpec,
    host: &preflight::HostReport,
    skipped: &[Missing],
    ro: Vec<PathBuf>,
    grants: &[RwGrant],
    trees: &[(PathBuf, OwnedFd)],
    (overlays, overlay_layers_from): (Vec<OverlayMount>, Option<usize>),
    (protected, hidden): Holds,
) -> Plan {
    let landlock = (!skipped.iter().any(|m| m.layer == Layer::Landlock)).then(|| LandlockPlan {
        abi: host.landlock_abi,
        read: ro
            .iter()
            .cloned()
            .chain(
                overlays
                    .iter()
                    .filter(|o| !o.writable())
                    .map(|o| o.target.clone()),
            )
            .collect(),
        write: grants
            .iter()
            .map(|g| g.path.clone())
            .chain(
                overlays
                    .iter()
                    .filter(|o| o.writable())
                    .map(|o| o.target.clone()),
            )
            .collect(),
        restrict_connect: spec.policy.network.mode == NetworkMode::Proxy,
    });
    let r = &spec.policy.resources;
    Plan {
        binds: ro
            .into_iter()
            .map(|path| Bind {
                path,
                writable: false,
                tree: None,
            })
            .chain(grants.iter().map(|g| Bind {
                path: g.path.clone(),
                writable: true,
                tree: trees.iter().position(|(p, _)| *p == g.path),
            }))
            .collect(),
        protected,
        hidden,
        overlays,
        overlay_layers_from,
        overlay_layer_fds: Vec::new(),
        tmp_size: spec.policy.filesystem.tmp_size_bytes,
        hostname: spec.policy.identity.hostname.clone(),
        listener_port: spec.loopback_listener,
        landlock,
        seccomp_extra_deny: spec.policy.syscalls.deny.clone(),
        limits: Limits {
            open_files: r.open_files_max,
            file_size: r.file_size_max_bytes,
            core: r.core_dump_bytes,
        },
        cwd: spec.cwd.clone(),
        argv: spec.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        env: build_env(spec),
        clock_offset_s: spec.clock_offset_s,
        self_test: spec.self_test.clone(),
    }
}

/// Step 9: the plan, with the command's stdin, stdout and stderr, then the idmapped trees and
/// the overlay layers.
fn send_plan(
    zone: &mut RunningZone,
    plan: &Plan,
    stdio: [OwnedFd; 3],
    trees: Vec<(PathBuf, OwnedFd)>,
) -> Result<(), SandboxError> {
    let bytes =
        serde_json::to_vec(plan).map_err(|e| SandboxError::Spawn(format!("encode plan: {e}")))?;
    let memfd = plan::plan_memfd(&bytes).map_err(|e| {
        let _ = zone.kill();
        SandboxError::Spec(format!(
            "the zone's plan ({} bytes: command line and environment) could not be written: {e}",
            bytes.len()
        ))
    })?;
    let fds: Vec<RawFd> = std::iter::once(memfd.as_raw_fd())
        .chain(stdio.iter().map(|f| f.as_raw_fd()))
        .chain(trees.iter().map(|(_, t)| t.as_raw_fd()))
        .collect();
    match plan::send(zone.sock.as_raw_fd(), plan::PLAN_IN_MEMFD, &fds) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPIPE) | Some(libc::ECONNRESET)) => {
            // An init that died before its plan (e.g. it could not enter its cgroup) says why.
            await_ready(zone)?;
            Err(SandboxError::io("send plan", e))
        }
        Err(e) => {
            // The init is alive and still waiting for its plan (e.g. more descriptors than one
            // message may carry): waiting for it would wait forever.
            let _ = zone.kill();
            Err(SandboxError::Spec(format!(
                "the zone's plan ({} bytes: command line and environment) could not be sent: {e}",
                bytes.len()
            )))
        }
    }
}

/// Step 10: the zone reports `Ready` only once the command was executed; anything else is
/// decoded by `plan::decode_failure`.
fn await_ready(zone: &mut RunningZone) -> Result<(), SandboxError> {
    let got =
        plan::recv(&zone.sock, false).map_err(|e| SandboxError::io("waiting for the zone", e))?;
    let Some((bytes, fds)) = got else {
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(zone.pid), None);
        zone.exit = Some(ZoneExit::Exited(127));
        let _ = zone.teardown();
        return Err(decode_failure(NotReady::Ended(status)));
    };
    let end = match serde_json::from_slice::<Msg>(&bytes) {
        Ok(Msg::Ready {
            listener_port,
            evidence,
            self_test,
        }) => {
            zone.report.self_test = self_test.map(crate::self_test::settle);
            zone.listener = fds.into_iter().next().map(TcpListener::from);
            zone.report.listener_port = listener_port;
            zone.report.enforcement =
                evidence.map(|e| crate::evidence::complete(*e, &zone.report.cgroup));
            return Ok(());
        }
        Ok(Msg::Failed { layer, message, .. }) => NotReady::Failed { layer, message },
        _ => NotReady::Unexpected,
    };
    let _ = zone.kill();
    Err(decode_failure(end))
}
