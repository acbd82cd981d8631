//! The container backends (`--backend podman|docker`): the agent zone and the exec zone run as
//! containers of an engine the operator already standardises on, from an image they name
//! (`--image`, never pulled), under the same policy files as the native sandbox, expressed in the
//! engine's flags ([`plan`]). Before a run, the engine is asked what it can enforce here, and a
//! policy it cannot express fails closed (`isolation_unsatisfiable`) instead of running weaker:
//! limits the engine cannot apply, a seccomp deny list beyond the engine's profile, an egress
//! proxy or a detached workspace without the privilege to set them up.
//!
//! Per command: the host side is prepared ([`host_side`]: the workspace overlay, the proxy's
//! network namespace, which podman joins by path and docker shares from a network holder
//! container), the engine's client runs `run` in the foreground with the command's output
//! on our capture pipes, and on timeout or interrupt the container is killed through the engine.
//! When `run` returns, the container has been removed and its mounts taken down.

pub mod engine;
pub mod host_side;
pub mod plan;

use super::pinned::{command_limit, EgressSetup, PROXY_PORT};
use super::setup::ZoneSetup;
use super::supervise::{pipe, watch, Supervised, Watched};
use super::{EgressUsage, Ending, Role, Zone, ZoneCommand, ZoneError, ZoneRun, ZoneUsage};
use crate::capture::ArtifactSink;
use crate::egress::{proxy_env, ProxyHandle};
use crate::safefs::SafeDir;
use engine::Engine;
pub use engine::EngineCapabilities;
use plan::{ContainerMount, ContainerNetwork, ContainerPlan, ZoneParts};
use sandbox::policy::NetworkMode;
use sandbox::Policy;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The directory under the state dir where detached workspaces are mounted for the engine.
const MOUNT_DIR: &str = "container-mounts";
/// How long the engine's client may take to return once its container was killed.
const CLIENT_GRACE: Duration = Duration::from_secs(20);

/// A container engine's zone pair.
pub struct ContainerZone {
    engine: Engine,
    image: String,
    cgroup_parent: Option<String>,
    policies: BTreeMap<Role, Policy>,
    workdir: PathBuf,
    state_dir: PathBuf,
    egress: Option<EgressSetup>,
    capabilities: EngineCapabilities,
    supervisor: String,
    root: bool,
}

fn setup(message: impl Into<String>) -> ZoneError {
    ZoneError::Spec(message.into())
}

/// What the engine cannot give here, typed: the cause and the fix.
fn unsatisfiable(r: Refusal) -> ZoneError {
    ZoneError::Unsatisfiable {
        role: None,
        layer: None,
        cause: r.cause,
        fix: r.fix,
    }
}

/// Something a policy needs that the engine cannot give here, and what would fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub cause: String,
    pub fix: String,
}

/// A detached workspace is an overlay loopexec mounts on the host for the engine to bind: root only.
pub fn detached_refusal(engine: Engine) -> Refusal {
    Refusal {
        cause: format!("a detached workspace is an overlay that loopexec mounts for {} to bind, which needs root", engine.program()),
        fix: "run as root, pass --workspace in-place, or use --backend native".into(),
    }
}

/// What a policy needs that the engine cannot give (empty: it can run).
pub fn unexpressible(
    engine: Engine,
    caps: &EngineCapabilities,
    role: Role,
    policy: &Policy,
    root: bool,
) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    let name = engine.program();
    let zone = role.as_str();
    let limits_fix = format!(
        "run {name} where it can enforce cgroup limits (rootful, or rootless on cgroup v2 with the memory, pids and cpu controllers delegated), or use --backend native"
    );
    let r = &policy.resources;
    for (wanted, available, key) in [
        (r.memory_bytes > 0, caps.memory_limit, "memory_bytes"),
        (r.pids_max > 0, caps.pids_limit, "pids_max"),
        (r.cpu_percent > 0, caps.cpu_limit, "cpu_percent"),
    ] {
        if wanted && !available {
            let rootless = if caps.rootless {
                ", rootless: the controller is not delegated"
            } else {
                ""
            };
            refusals.push(Refusal {
                cause: format!(
                    "{zone} zone: {name} cannot enforce {key} here (cgroup {}{rootless})",
                    caps.cgroup_version
                ),
                fix: limits_fix.clone(),
            });
        }
    }
    if !caps.seccomp {
        refusals.push(Refusal {
            cause: format!("{zone} zone: {name} runs containers without a seccomp profile here"),
            fix: format!("enable seccomp in {name}, or use --backend native"),
        });
    }
    if !policy.syscalls.deny.is_empty() {
        refusals.push(Refusal {
            cause: format!(
                "{zone} zone: the policy denies extra syscalls ({}), which a container backend cannot add to the engine's seccomp profile",
                policy.syscalls.deny.join(", ")
            ),
            fix: "use --backend native for this policy".into(),
        });
    }
    if policy.resources.disk_bytes.is_some() && !policy.may_skip(sandbox::Layer::Disk) {
        refusals.push(Refusal {
            cause: format!(
                "{zone} zone: the policy caps its writable layers (resources.disk_bytes), which the {name} backend does not do"
            ),
            fix: "use --backend native for this policy, or allow running uncapped with layers.may_skip = [\"disk\"]".into(),
        });
    }
    if policy.network.mode == NetworkMode::Proxy && !root {
        refusals.push(Refusal {
            cause: format!("{zone} zone: putting the egress proxy's listener into a network namespace for {name} needs root"),
            fix: "run loopexec as root, use --backend native, or an agent policy with network mode \"none\" (e.g. --policy builtin:offline)".into(),
        });
    }
    refusals
}

impl ContainerZone {
    /// Prepare every role's zone from the run's setup, failing closed when the engine is missing,
    /// the image is not present, or a policy asks for what the engine cannot enforce.
    pub fn new(zones: &ZoneSetup, engine: Engine) -> Result<ContainerZone, ZoneError> {
        let image = zones.image.clone().ok_or_else(|| {
            setup(format!(
                "the {} backend needs an image (--image)",
                engine.program()
            ))
        })?;
        plan::check_image(&image).map_err(|e| setup(e.to_string()))?;
        let policies = zones.sandboxed_policies()?;
        let root = nix::unistd::geteuid().is_root();
        let capabilities = engine.capabilities().map_err(|e| {
            unsatisfiable(Refusal {
                cause: e.to_string(),
                fix: format!(
                    "install and start {}, or use --backend native",
                    engine.program()
                ),
            })
        })?;
        let mut refusals: Vec<Refusal> = policies
            .iter()
            .flat_map(|(role, policy)| unexpressible(engine, &capabilities, *role, policy, root))
            .collect();
        if zones.detached && !root {
            refusals.push(detached_refusal(engine));
        }
        if let Some(first) = refusals.into_iter().next() {
            return Err(unsatisfiable(first));
        }
        if !engine.has_image(&image).map_err(|e| setup(e.to_string()))? {
            return Err(unsatisfiable(Refusal {
                cause: format!(
                    "image {image:?} is not present in {}'s local store, and loopexec never pulls",
                    engine.program()
                ),
                fix: format!(
                    "`{} pull {image}` (or build it) before the run",
                    engine.program()
                ),
            }));
        }
        let zone = ContainerZone {
            engine,
            image,
            cgroup_parent: zones.cgroup_parent.clone(),
            policies,
            workdir: zones.workdir.clone(),
            state_dir: zones.state_dir.clone(),
            egress: zones.egress_setup(),
            capabilities,
            supervisor: host_side::supervisor_identity(),
            root,
        };
        zone.remove_orphans()?;
        Ok(zone)
    }

    /// Remove the containers a killed loopexec left (their supervisor label names a dead process),
    /// then the workspace overlays it left mounted for them (named after their supervisor).
    fn remove_orphans(&self) -> Result<(), ZoneError> {
        let labelled = self
            .engine
            .labelled(plan::SUPERVISOR_LABEL)
            .map_err(|e| setup(e.to_string()))?;
        for (name, supervisor) in labelled {
            if host_side::supervisor_is_dead(&supervisor) {
                self.engine
                    .remove(&name)
                    .map_err(|e| ZoneError::Reap(e.to_string()))?;
            }
        }
        if self.root {
            let Ok(base) = SafeDir::open(&self.state_dir) else {
                return Ok(());
            };
            let Ok(dir) = base.subdir(MOUNT_DIR) else {
                return Ok(());
            };
            for entry in dir.list().unwrap_or_default() {
                let supervisor = entry.split('-').next().unwrap_or("").replacen('_', ":", 1);
                if host_side::supervisor_is_dead(&supervisor) {
                    host_side::unmount_stale(&dir.path().join(&entry));
                }
            }
        }
        Ok(())
    }

    fn policy(&self, role: Role) -> Result<&Policy, ZoneError> {
        self.policies
            .get(&role)
            .ok_or_else(|| setup(format!("no {} policy pinned", role.as_str())))
    }

    /// The egress account of a command of `role`, when its zone goes through the proxy.
    fn egress_usage(&mut self, role: Role, proxy: Option<ProxyHandle>) -> Option<EgressUsage> {
        crate::zones::pinned::egress_usage(&mut self.egress, self.policies.get(&role), proxy)
    }

    /// The uid/gid the command runs as, and whether rootless podman must keep it.
    fn user(&self, policy: &Policy, detached: bool) -> Result<((u32, u32), bool), ZoneError> {
        let ids = zone_user(policy, detached, self.root, &self.workdir).map_err(unsatisfiable)?;
        Ok((
            ids,
            !self.root && self.capabilities.rootless && self.engine == Engine::Podman,
        ))
    }
}

/// The uid/gid a container zone's command runs as: unprivileged, the caller's; as root, the
/// policy's zone uid on a detached workspace, or in place the workdir's owner (the command writes
/// it as its owner, never as root: a root-owned workdir is refused).
pub fn zone_user(
    policy: &Policy,
    detached: bool,
    root: bool,
    workdir: &Path,
) -> Result<(u32, u32), Refusal> {
    if !root {
        return Ok((
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        ));
    }
    if detached {
        return Ok((policy.identity.uid_when_root, policy.identity.gid_when_root));
    }
    let meta = std::fs::metadata(workdir).map_err(|e| Refusal {
        cause: format!("workdir {}: {e}", workdir.display()),
        fix: "check --workdir".into(),
    })?;
    if meta.uid() == 0 {
        return Err(Refusal {
            cause: format!(
                "workdir {} is owned by root, and a container zone would write it as root",
                workdir.display()
            ),
            fix: "chown it to an unprivileged user, or use a detached workspace".into(),
        });
    }
    Ok((meta.uid(), meta.gid()))
}

/// A proxied docker zone's network holder: a container whose network namespace (loopback and
/// the proxy's listener) the agent's container shares; removed when dropped.
struct NetworkHolder {
    engine: Engine,
    name: String,
}

impl NetworkHolder {
    /// Start the holder and put the proxy's listener into its network namespace.
    fn start(
        zone: &ContainerZone,
        agent: &str,
        user: (u32, u32),
        hostname: &str,
    ) -> Result<(NetworkHolder, host_side::ProxyNamespace), ZoneError> {
        let name = format!("{agent}-net");
        let argv = plan::holder_argv(
            &name,
            &zone.image,
            &zone.supervisor,
            user,
            hostname,
            zone.cgroup_parent.as_deref(),
        )
        .map_err(|e| setup(e.to_string()))?;
        zone.engine
            .start_detached(&argv)
            .map_err(|e| setup(format!("the egress network holder: {e}")))?;
        let holder = NetworkHolder {
            engine: zone.engine,
            name,
        };
        let pid = zone
            .engine
            .pid_of(&holder.name)
            .map_err(|e| setup(format!("the egress network holder: {e}")))?;
        let ns = host_side::ProxyNamespace::join(pid, PROXY_PORT)
            .map_err(|e| setup(format!("the proxy's network namespace: {e}")))?;
        // The pid was read before its namespace was opened: make sure it is still the holder's.
        if zone.engine.pid_of(&holder.name).ok() != Some(pid) {
            return Err(setup(
                "the egress network holder ended while the proxy's listener was being set up",
            ));
        }
        Ok((holder, ns))
    }
}

impl Drop for NetworkHolder {
    fn drop(&mut self) {
        let _ = self.engine.remove(&self.name);
    }
}

/// The mounts of one command and what keeps them alive until it ends.
struct PreparedMounts {
    mounts: Vec<ContainerMount>,
    _overlays: Vec<host_side::HostOverlay>,
    _placeholders: Option<sandbox::ProtectedPlaceholders>,
}

impl ContainerZone {
    fn prepare_mounts(
        &self,
        cmd: &ZoneCommand,
        policy: &Policy,
        name: &str,
    ) -> Result<PreparedMounts, ZoneError> {
        let mut mounts: Vec<ContainerMount> = policy
            .filesystem
            .hidden
            .iter()
            .map(|h| hidden_mount(h))
            .collect();
        let mut overlays = Vec::new();
        let mut placeholders = None;
        if cmd.overlays.is_empty() {
            let mut rw = vec![self.workdir.clone()];
            rw.extend(policy.filesystem.read_write.iter().cloned());
            let holds = sandbox::hold_protected_paths(
                &[],
                &rw,
                &policy.filesystem.protected,
                &policy.filesystem.hidden,
            )
            .map_err(|e| setup(e.to_string()))?;
            // The registry of placeholders, when a grant contains it, is hidden too.
            mounts = holds.hidden.iter().map(|h| hidden_mount(h)).collect();
            mounts.extend(in_place_mounts(&rw, &self.state_dir, &holds.protected));
            placeholders = Some(holds.placeholders);
        } else {
            if !self.root {
                return Err(unsatisfiable(detached_refusal(self.engine)));
            }
            let base =
                SafeDir::open(&self.state_dir).map_err(|e| setup(format!("state dir: {e}")))?;
            let dir = base
                .subdir_or_create(MOUNT_DIR)
                .map_err(|e| setup(format!("state dir: {e}")))?;
            for (i, overlay) in cmd.overlays.iter().enumerate() {
                let at = format!("{}-{name}-{i}", self.supervisor.replace(':', "_"));
                let mounted = host_side::mount_overlay(overlay, &dir, &at)
                    .map_err(|e| setup(e.to_string()))?;
                mounts.push(ContainerMount::Bind {
                    source: mounted.path().to_path_buf(),
                    target: overlay.target.clone(),
                    writable: overlay.writable(),
                });
                overlays.push(mounted);
            }
        }
        mounts.extend(cmd.read_only.iter().map(|p| ContainerMount::Bind {
            source: p.clone(),
            target: p.clone(),
            writable: false,
        }));
        mounts.extend(cmd.read_write.iter().map(|p| ContainerMount::Bind {
            source: p.clone(),
            target: p.clone(),
            writable: true,
        }));
        Ok(PreparedMounts {
            mounts,
            _overlays: overlays,
            _placeholders: placeholders,
        })
    }
}

/// The mounts of an in-place zone beyond the policy's hidden paths: the workdir and the extra
/// grants read-write, the state dir hidden, and the protected (root, sub-path) pairs held
/// read-only as the native zone holds them (one at or under a hidden path stays hidden).
pub fn in_place_mounts(
    rw: &[PathBuf],
    state_dir: &Path,
    protected: &[(PathBuf, PathBuf)],
) -> Vec<ContainerMount> {
    let mut mounts: Vec<ContainerMount> = rw
        .iter()
        .map(|root| ContainerMount::Bind {
            source: root.clone(),
            target: root.clone(),
            writable: true,
        })
        .collect();
    mounts.push(ContainerMount::EmptyDir {
        target: state_dir.to_path_buf(),
    });
    mounts.extend(
        protected_mounts(protected)
            .into_iter()
            .filter(|m| !mount_target(m).starts_with(state_dir)),
    );
    mounts
}

/// A hidden path: a directory covered by an empty read-only tmpfs, anything else by /dev/null.
pub fn hidden_mount(path: &Path) -> ContainerMount {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.is_dir() => ContainerMount::Bind {
            source: "/dev/null".into(),
            target: path.to_path_buf(),
            writable: false,
        },
        _ => ContainerMount::EmptyDir {
            target: path.to_path_buf(),
        },
    }
}

fn mount_target(m: &ContainerMount) -> &Path {
    match m {
        ContainerMount::Bind { target, .. } | ContainerMount::EmptyDir { target } => target,
    }
}

/// Protected (root, sub-path) pairs as binds: every directory between the root and a protected
/// path bound onto itself (a mount point cannot be renamed away), the protected path read-only.
fn protected_mounts(pairs: &[(PathBuf, PathBuf)]) -> Vec<ContainerMount> {
    let mut out: Vec<ContainerMount> = Vec::new();
    let mut pinned: Vec<PathBuf> = Vec::new();
    for (root, sub) in pairs {
        let mut prefix = root.clone();
        let comps: Vec<_> = sub.components().collect();
        for comp in &comps[..comps.len().saturating_sub(1)] {
            prefix.push(comp);
            if !pinned.contains(&prefix) && !pairs.iter().any(|(r, s)| r.join(s) == prefix) {
                pinned.push(prefix.clone());
                out.push(ContainerMount::Bind {
                    source: prefix.clone(),
                    target: prefix.clone(),
                    writable: true,
                });
            }
        }
    }
    let mut held: Vec<PathBuf> = pairs.iter().map(|(r, s)| r.join(s)).collect();
    held.sort_by_key(|p| p.components().count());
    for p in held {
        out.push(ContainerMount::Bind {
            source: p.clone(),
            target: p,
            writable: false,
        });
    }
    out
}

fn container_name() -> String {
    let mut bytes = [0u8; 8];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut bytes);
    format!("loopexec-{}", hex::encode(bytes))
}

/// Wait for the client to exit, at most `limit`; SIGKILL its process group after that.
fn wait_client(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if started.elapsed() < limit => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                // SAFETY: the client leads its own process group (setpgid in pre_exec) and is
                // not reaped yet, so the group id cannot have been reused.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                return child.wait().ok();
            }
        }
    }
}

impl Zone for ContainerZone {
    fn name(&self) -> &str {
        self.engine.program()
    }

    fn isolation(&self) -> &str {
        "container"
    }

    fn bind_run(&mut self, run_dir: &Path) -> Result<(), ZoneError> {
        match self.egress.as_mut() {
            Some(egress) => egress.bind(run_dir),
            None => Ok(()),
        }
    }

    fn run(&mut self, cmd: &ZoneCommand, capture: &ArtifactSink<'_>) -> Result<ZoneRun, ZoneError> {
        if cmd.stdin.is_some() {
            return Err(setup("a container backend gives no command a stdin (the judge runs under the native backend only)"));
        }
        let policy = self.policy(cmd.role)?.clone();
        let name = container_name();
        let proxied = policy.network.mode == NetworkMode::Proxy;
        let prepared = self.prepare_mounts(cmd, &policy, &name)?;
        let (user, keep_id) = self.user(&policy, !cmd.overlays.is_empty())?;
        // A proxied zone's network: a namespace podman joins by path, or a holder container's
        // that docker shares.
        let (mut netns, holder) = match (proxied, self.engine) {
            (false, _) => (None, None),
            (true, Engine::Podman) => (
                Some(
                    host_side::ProxyNamespace::create(PROXY_PORT)
                        .map_err(|e| setup(format!("the proxy's network namespace: {e}")))?,
                ),
                None,
            ),
            (true, Engine::Docker) => {
                let (holder, ns) =
                    NetworkHolder::start(self, &name, user, &policy.identity.hostname)?;
                (Some(ns), Some(holder))
            }
        };
        let extra_env = if proxied {
            proxy_env(PROXY_PORT)
        } else {
            Vec::new()
        };
        let env = plan::zone_env(&policy, &cmd.env, &extra_env);
        let container = ContainerPlan::new(
            self.engine,
            cmd.role,
            &policy,
            ZoneParts {
                name: name.clone(),
                image: self.image.clone(),
                supervisor: self.supervisor.clone(),
                user,
                keep_id,
                network: match (&holder, &netns) {
                    (Some(h), _) => ContainerNetwork::Container(h.name.clone()),
                    (None, Some(ns)) => ContainerNetwork::Namespace(ns.path()),
                    (None, None) => ContainerNetwork::None,
                },
                mounts: prepared.mounts.clone(),
                env: env.fixed.clone(),
                env_from_client: env
                    .passed
                    .iter()
                    .map(|(k, _)| k.clone())
                    .chain(cmd.inject.iter().map(|(k, _)| k.clone()))
                    .collect(),
                cwd: cmd.cwd.clone(),
                cgroup_parent: self.cgroup_parent.clone(),
                command_line: cmd.command_line.clone(),
            },
        );
        let argv = container.argv().map_err(|e| setup(e.to_string()))?;
        let proxy = match (netns.as_mut().and_then(|ns| ns.take_listener()), &self.egress) {
            (Some(listener), Some(egress)) => Some(egress.serve(listener, cmd.role)?),
            (Some(_), None) => return Err(setup("the agent policy routes through the egress proxy, but no egress configuration was set up")),
            _ => None,
        };

        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let mut client = Command::new(self.engine.program());
        client
            .args(&argv)
            .envs(env.passed.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(cmd.inject.iter().map(|(k, v)| (k.as_str(), v.expose())))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out_w))
            .stderr(Stdio::from(err_w))
            .process_group(0);
        // SAFETY: prctl is async-signal-safe.
        unsafe {
            client.pre_exec(|| {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let started = Instant::now();
        let spawned = client.spawn();
        drop(client); // closes our copies of the write ends
        let mut running = capture.start(out_r, err_r)?;
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let output = running.finish()?;
                let usage = ZoneUsage {
                    cpu: None,
                    egress: self.egress_usage(cmd.role, proxy),
                    outside_attempts: None,
                };
                return Ok(ZoneRun {
                    ending: Ending::FailedToStart {
                        reason: format!("{}: {e}", self.engine.program()),
                    },
                    duration: started.elapsed(),
                    output,
                    usage,
                    enforcement: None,
                });
            }
        };
        let pid = child.id() as i32;
        let mut client = EngineClient {
            engine: self.engine,
            name: name.clone(),
            child,
        };
        let deadline = Some(started + command_limit(cmd.timeout, &policy));
        let stopped_by_us = match watch(
            &mut client,
            pid,
            &mut running,
            started,
            deadline,
            &cmd.liveness,
        )? {
            Watched::Exited(()) => None,
            Watched::Stopped(ending) => Some(ending),
        };
        let client_status = wait_client(&mut client.child, CLIENT_GRACE);
        let duration = started.elapsed();
        let state = self
            .engine
            .inspect_state(&name)
            .map_err(|e| ZoneError::Reap(e.to_string()))?;
        self.engine
            .remove(&name)
            .map_err(|e| ZoneError::Reap(e.to_string()))?;
        drop(prepared);
        drop(netns);
        drop(holder);
        // The container's processes are the engine's, not our descendants: no CPU time here.
        let usage = ZoneUsage {
            cpu: None,
            egress: self.egress_usage(cmd.role, proxy),
            outside_attempts: None,
        };
        let output = running.finish()?;
        let ending = match (stopped_by_us, state) {
            (Some(ending), _) => ending,
            // The kernel's OOM killer ended it: a signal, as the native backend reports it.
            (None, Some(state)) if state.ever_started() && state.oom_killed => Ending::Signaled { signal: libc::SIGKILL },
            (None, Some(state)) if state.ever_started() => Ending::Exited { code: state.exit_code },
            (None, _) => Ending::FailedToStart {
                reason: format!(
                    "{} could not start the container (client {}); its message is in the command's stderr",
                    self.engine.program(),
                    client_status.map(|s| s.to_string()).unwrap_or_else(|| "status unknown".into())
                ),
            },
        };
        Ok(ZoneRun {
            ending,
            duration,
            output,
            usage,
            enforcement: None,
        })
    }
}

/// A command in a container: the engine's client in the foreground, the container by its name.
struct EngineClient {
    engine: Engine,
    name: String,
    child: std::process::Child,
}

impl Supervised for EngineClient {
    /// How the container ended is asked of the engine once the client returned.
    type Exit = ();

    fn try_exit(&mut self) -> Result<Option<()>, ZoneError> {
        match self.child.try_wait() {
            Ok(status) => Ok(status.map(|_| ())),
            Err(e) => {
                let _ = self.engine.remove(&self.name);
                Err(ZoneError::Reap(format!(
                    "waiting for {}: {e}",
                    self.engine.program()
                )))
            }
        }
    }

    fn stop(&mut self) -> Result<(), ZoneError> {
        self.engine
            .kill(&self.name)
            .map_err(|e| ZoneError::Reap(e.to_string()))
    }

    fn abandon(&mut self) {
        let _ = self.engine.kill(&self.name);
        wait_client(&mut self.child, CLIENT_GRACE);
        let _ = self.engine.remove(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protected_path_inside_a_directory_pins_the_directory_then_binds_the_path_read_only() {
        let pairs = vec![
            ("/w".into(), PathBuf::from(".git/hooks")),
            ("/w".into(), PathBuf::from(".git/config")),
        ];
        let mounts = protected_mounts(&pairs);
        assert_eq!(
            mounts,
            vec![
                ContainerMount::Bind {
                    source: "/w/.git".into(),
                    target: "/w/.git".into(),
                    writable: true
                },
                ContainerMount::Bind {
                    source: "/w/.git/hooks".into(),
                    target: "/w/.git/hooks".into(),
                    writable: false
                },
                ContainerMount::Bind {
                    source: "/w/.git/config".into(),
                    target: "/w/.git/config".into(),
                    writable: false
                },
            ]
        );
    }

    fn caps(memory: bool) -> EngineCapabilities {
        EngineCapabilities {
            rootless: true,
            memory_limit: memory,
            pids_limit: true,
            cpu_limit: true,
            seccomp: true,
            cgroup_version: "v1".into(),
        }
    }

    #[test]
    fn a_disk_cap_is_refused_by_a_container_backend_unless_it_may_be_skipped() {
        let capped = Policy::parse(b"[resources]\ndisk_bytes = 16777216\n", "t").unwrap();
        let refusals = unexpressible(Engine::Podman, &caps(true), Role::Agent, &capped, true);
        let causes: Vec<&str> = refusals.iter().map(|r| r.cause.as_str()).collect();
        assert_eq!(causes, vec!["agent zone: the policy caps its writable layers (resources.disk_bytes), which the podman backend does not do"]);
        let lenient = Policy::parse(
            b"[resources]\ndisk_bytes = 16777216\n[layers]\nmay_skip = [\"disk\"]\n",
            "t",
        )
        .unwrap();
        assert!(unexpressible(Engine::Podman, &caps(true), Role::Agent, &lenient, true).is_empty());
    }

    #[test]
    fn a_memory_budget_the_engine_cannot_enforce_is_refused() {
        let policy = Policy::builtin("exec").unwrap();
        let refusals = unexpressible(Engine::Podman, &caps(false), Role::Check, &policy, false);
        let causes: Vec<&str> = refusals.iter().map(|r| r.cause.as_str()).collect();
        assert_eq!(causes, vec!["check zone: podman cannot enforce memory_bytes here (cgroup v1, rootless: the controller is not delegated)"]);
    }

    #[test]
    fn the_egress_proxy_needs_root_for_either_engine() {
        let policy = Policy::builtin("agent").unwrap();
        for engine in [Engine::Podman, Engine::Docker] {
            let refusals = unexpressible(engine, &caps(true), Role::Agent, &policy, false);
            assert_eq!(refusals.len(), 1);
            assert!(refusals[0].cause.contains("needs root"), "{refusals:?}");
            assert!(refusals[0].fix.contains("builtin:offline"), "{refusals:?}");
        }
    }

    #[test]
    fn docker_carries_the_egress_proxy_as_root() {
        let policy = Policy::builtin("agent").unwrap();
        assert!(unexpressible(Engine::Docker, &caps(true), Role::Agent, &policy, true).is_empty());
    }

    #[test]
    fn podman_carries_the_egress_proxy_as_root() {
        let policy = Policy::builtin("agent").unwrap();
        assert!(unexpressible(Engine::Podman, &caps(true), Role::Agent, &policy, true).is_empty());
    }
}
