//! The native sandbox backend (`--isolation native`, the default): the agent runs in an agent
//! zone (policy `agent` unless `--policy`), the check in an exec zone (policy `exec`: no network),
//! both through the `sandbox` crate. The workdir is the only writable grant; the state dir inside
//! it (`.loopexec/`) is hidden from both zones. When the agent policy's network mode is `proxy`,
//! the zone gets one loopback listener whose connections the egress proxy (in this process)
//! serves against the allowlist, with an audit line per decision.

use super::pinned::{command_limit, pinned_policies, EgressSetup, PROXY_PORT};
use super::{Ending, Role, Zone, ZoneCommand, ZoneError, ZoneRun};
use crate::capture::ArtifactSink;
use crate::egress::proxy_env;
use crate::interrupt;
use sandbox::launch::{Launcher, ZoneExit, ZoneSpec};
use sandbox::policy::{NetworkMode, Policy};
use sandbox::SandboxError;
use std::ffi::OsString;
use crate::engine::config::LoopConfig;
use std::path::{Path, PathBuf};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// The native sandbox zone pair.
pub struct NativeZone {
    /// Starts both zones: the host is probed once, and each zone's cgroup is reused every iteration.
    launcher: Launcher,
    /// The delegated systemd scope this supervisor moved into for its zones' cgroups, if any.
    scope: Option<crate::delegation::Scope>,
    agent_policy: Policy,
    check_policy: Policy,
    workdir: PathBuf,
    state_dir: PathBuf,
    egress: Option<EgressSetup>,
}

/// Map a sandbox error to a zone error: a missing layer is an isolation failure.
fn sandbox_failure(err: SandboxError) -> ZoneError {
    match err {
        SandboxError::Unsatisfiable { layer, cause, fix } => {
            ZoneError::Setup(format!("isolation layer {} unavailable: {cause}; fix: {fix}", layer.as_str()))
        }
        other => ZoneError::Setup(other.to_string()),
    }
}

impl NativeZone {
    /// Prepare both zones. Fails closed (`ZoneError::Setup`, i.e. `isolation_unsatisfiable`) when
    /// the host cannot provide a layer either policy needs and the policy does not allow skipping
    /// it, or when the agent policy wants a proxy and no egress configuration was given.
    pub fn new(
        agent_policy: Policy,
        check_policy: Policy,
        workdir: PathBuf,
        state_dir: PathBuf,
        egress: Option<EgressSetup>,
    ) -> Result<NativeZone, ZoneError> {
        let scope = crate::delegation::place_supervisor(&[&agent_policy, &check_policy]).map_err(|r| {
            ZoneError::Setup(format!("isolation layer cgroup unavailable: {}; fix: {}", r.cause, r.fix))
        })?;
        let launcher = Launcher::new();
        for (name, policy) in [("agent", &agent_policy), ("check", &check_policy)] {
            if let Some(missing) = launcher.host().can_satisfy(policy).into_iter().next() {
                return Err(ZoneError::Setup(format!(
                    "{name} zone: isolation layer {} unavailable: {}; fix: {}",
                    missing.layer.as_str(),
                    missing.cause,
                    missing.fix
                )));
            }
        }
        if check_policy.network.mode != NetworkMode::None {
            return Err(ZoneError::Setup("the check's policy must have network mode \"none\"".into()));
        }
        if agent_policy.network.mode == NetworkMode::Proxy && egress.is_none() {
            return Err(ZoneError::Setup("the agent policy routes through the egress proxy, but no egress configuration was set up".into()));
        }
        Ok(NativeZone { launcher, scope, agent_policy, check_policy, workdir, state_dir, egress })
    }

    /// Build both zones from a run's pinned configuration: the pinned policies (read again and
    /// checked against their digests) and the egress allowlist of the agent policy plus the
    /// command line's additions.
    pub fn from_config(cfg: &LoopConfig, state_dir: &Path) -> Result<NativeZone, ZoneError> {
        let (agent_policy, check_policy, egress) = pinned_policies(cfg)?;
        NativeZone::new(agent_policy, check_policy, PathBuf::from(&cfg.workdir), state_dir.to_path_buf(), egress)
    }

    fn spec(&self, cmd: &ZoneCommand) -> ZoneSpec {
        let mut policy = match cmd.role {
            Role::Agent => self.agent_policy.clone(),
            Role::Check => self.check_policy.clone(),
        };
        // The state dir lives inside the workdir: neither zone may see it.
        policy.filesystem.hidden.push(self.state_dir.clone());
        // loopexec's own variables (run id, iteration, role) always reach the command; the rest
        // of the candidate environment passes only where the policy's `env.allow` says so.
        for (k, v) in cmd.env.iter().filter(|(k, _)| k.starts_with("LOOPEXEC_")) {
            policy.env.set.insert(k.clone(), v.clone());
        }
        // The minted credential (agent zone) is set the same way, whatever `env.allow` says.
        for (k, v) in &cmd.inject {
            policy.env.set.insert(k.clone(), v.expose().to_string());
        }
        let proxied = cmd.role == Role::Agent && self.agent_policy.network.mode == NetworkMode::Proxy;
        if proxied {
            for (k, v) in proxy_env(PROXY_PORT) {
                policy.env.set.insert(k, v);
            }
        }
        let argv: Vec<OsString> = vec!["/bin/sh".into(), "-c".into(), cmd.command_line.clone().into()];
        let mut spec = ZoneSpec::new(policy, argv);
        spec.cwd = cmd.cwd.clone();
        spec.env = cmd.env.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect();
        if cmd.overlays.is_empty() {
            // In place: the workdir itself is the one writable grant.
            spec.extra_rw = vec![self.workdir.clone()];
        } else {
            // Detached: the workspace overlay is all the zone sees of the operator's files.
            spec.overlays = cmd.overlays.clone();
        }
        if proxied {
            spec.loopback_listener = Some(PROXY_PORT);
        }
        spec
    }
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn pipe() -> Result<(OwnedFd, OwnedFd), ZoneError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| ZoneError::Pipe(e.into()))
}


fn ending_of(exit: ZoneExit) -> Ending {
    match exit {
        ZoneExit::Exited(code) => Ending::Exited { code },
        ZoneExit::Signaled(signal) => Ending::Signaled { signal },
    }
}

impl Zone for NativeZone {
    fn name(&self) -> &str {
        "native"
    }

    fn isolation(&self) -> &str {
        "native"
    }

    fn egress(&self) -> Option<&EgressSetup> {
        self.egress.as_ref()
    }

    fn cgroup_scope(&self) -> Option<&crate::delegation::Scope> {
        self.scope.as_ref()
    }

    fn egress_mut(&mut self) -> Option<&mut EgressSetup> {
        self.egress.as_mut()
    }

    fn run(&mut self, cmd: &ZoneCommand, capture: &ArtifactSink<'_>) -> Result<ZoneRun, ZoneError> {
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let mut spec = self.spec(cmd);
        spec.stdout = Some(out_w);
        spec.stderr = Some(err_w);
        let started = Instant::now();
        let mut zone = match self.launcher.launch(spec) {
            Ok(zone) => zone,
            Err(SandboxError::Spawn(reason)) => {
                let output = capture.start(out_r, err_r)?.finish()?;
                return Ok(ZoneRun { ending: Ending::FailedToStart { reason }, duration: started.elapsed(), output });
            }
            Err(other) => return Err(sandbox_failure(other)),
        };
        // Our copies of the write ends went into the spec and were closed by launch.
        let mut running = capture.start(out_r, err_r)?;
        // The other role's zone comes next: its init starts now and executes while this command
        // runs (best effort; a failure shows again when that zone is launched).
        let next = match cmd.role {
            Role::Agent => &self.check_policy,
            Role::Check => &self.agent_policy,
        };
        let _ = self.launcher.prepare(next);
        let proxy = match (zone.take_listener(), &self.egress) {
            (Some(listener), Some(egress)) => Some(egress.serve(listener, cmd.role)?),
            _ => None,
        };
        let pidfd = pidfd_open(zone.pid());
        let mut wake: Vec<BorrowedFd<'_>> = Vec::new();
        if let Some(fd) = &pidfd {
            wake.push(fd.as_fd());
        }
        if let Some(fd) = interrupt::wake_fd() {
            wake.push(fd);
        }
        let policy = match cmd.role {
            Role::Agent => &self.agent_policy,
            Role::Check => &self.check_policy,
        };
        let deadline = Some(started + command_limit(cmd.timeout, policy));
        let ending = loop {
            match zone.wait_timeout(Duration::ZERO) {
                Ok(Some(exit)) => break ending_of(exit),
                Ok(None) => {}
                Err(e) => return Err(ZoneError::Reap(e.to_string())),
            }
            if let Some(sig) = interrupt::pending() {
                zone.kill().map_err(|e| ZoneError::Reap(e.to_string()))?;
                break Ending::Interrupted { signal: sig };
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                zone.kill().map_err(|e| ZoneError::Reap(e.to_string()))?;
                break Ending::TimedOut { after_ms: started.elapsed().as_millis() as u64 };
            }
            let slice = if pidfd.is_some() { Duration::from_secs(3600) } else { Duration::from_millis(2) };
            let wait = deadline.map(|d| d.saturating_duration_since(now).min(slice)).unwrap_or(slice);
            if let Err(e) = running.pump(&wake, wait) {
                // Capture broke: still leave no process behind before reporting it.
                let _ = zone.kill();
                return Err(e.into());
            }
        };
        let duration = started.elapsed();
        drop(zone);
        if let (Some(proxy), Some(egress)) = (proxy, self.egress.as_mut()) {
            egress.record(&proxy.stop());
        }
        let output = running.finish()?;
        Ok(ZoneRun { ending, duration, output })
    }
}
