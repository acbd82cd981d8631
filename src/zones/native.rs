//! The native sandbox backend (`--isolation native`, the default): the agent runs in an agent
//! zone (policy `agent` unless `--policy`), the check in an exec zone (policy `exec`: no network),
//! both through the `sandbox` crate. The workdir is the only writable grant; the state dir inside
//! it (`.loopexec/`) is hidden from both zones. When the agent policy's network mode is `proxy`,
//! the zone gets one loopback listener whose connections the egress proxy (in this process)
//! serves against the allowlist, with an audit line per decision.

use super::liveness::ZoneIdentity;
use super::pinned::{command_limit, EgressSetup, PROXY_PORT};
use super::setup::ZoneSetup;
use super::supervise::{children_cpu, pipe, watch, Supervised, Watched};
use super::{EgressUsage, Ending, Role, Zone, ZoneCommand, ZoneError, ZoneRun, ZoneUsage};
use crate::capture::ArtifactSink;
use crate::egress::proxy_env;
use crate::egress::ProxyHandle;
use sandbox::launch::{Launcher, RunningZone, ZoneExit, ZoneSpec};
use sandbox::policy::{NetworkMode, Policy};
use sandbox::SandboxError;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The native sandbox zones, one per role.
pub struct NativeZone {
    /// Starts every zone: the host is probed once, and each zone's cgroup is reused every iteration.
    launcher: Launcher,
    /// The delegated systemd scope this supervisor moved into for its zones' cgroups, if any.
    scope: Option<crate::delegation::Scope>,
    policies: BTreeMap<Role, Policy>,
    workdir: PathBuf,
    state_dir: PathBuf,
    egress: Option<EgressSetup>,
    clock_offset_s: Option<i64>,
}

impl NativeZone {
    /// Prepare every role's zone from the run's setup. Fails closed (`isolation_unsatisfiable`)
    /// when the host cannot provide a layer a policy needs and the policy does not allow skipping
    /// it, when an offline role's policy has network, or when a policy wants the proxy and the
    /// setup has no egress configuration.
    pub fn new(setup: &ZoneSetup) -> Result<NativeZone, ZoneError> {
        let policies = setup.sandboxed_policies()?;
        let all: Vec<&Policy> = policies.values().collect();
        let scope =
            crate::delegation::place_supervisor(&all).map_err(|r| ZoneError::Unsatisfiable {
                role: None,
                layer: Some(sandbox::Layer::Cgroup),
                cause: r.cause,
                fix: r.fix,
            })?;
        let launcher = Launcher::new();
        for (role, policy) in &policies {
            if let Some(missing) = launcher.host().can_satisfy(policy).into_iter().next() {
                return Err(ZoneError::Unsatisfiable {
                    role: Some(*role),
                    layer: Some(missing.layer),
                    cause: missing.cause,
                    fix: missing.fix,
                });
            }
        }
        Ok(NativeZone {
            launcher,
            scope,
            policies,
            workdir: setup.workdir.clone(),
            state_dir: setup.state_dir.clone(),
            egress: setup.egress_setup(),
            clock_offset_s: setup.clock_offset_s,
        })
    }

    fn policy(&self, role: Role) -> Result<&Policy, ZoneError> {
        self.policies
            .get(&role)
            .ok_or_else(|| ZoneError::Spec(format!("no {} policy pinned", role.as_str())))
    }

    /// The egress account of a command of `role`, when its zone goes through the proxy.
    fn egress_usage(&mut self, role: Role, proxy: Option<ProxyHandle>) -> Option<EgressUsage> {
        crate::zones::pinned::egress_usage(&mut self.egress, self.policies.get(&role), proxy)
    }

    fn spec(&self, cmd: &ZoneCommand) -> Result<ZoneSpec, ZoneError> {
        let mut policy = self.policy(cmd.role)?.clone();
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
        let proxied = policy.network.mode == NetworkMode::Proxy;
        if proxied {
            for (k, v) in proxy_env(PROXY_PORT) {
                policy.env.set.insert(k, v);
            }
        }
        let argv: Vec<OsString> = vec![
            "/bin/sh".into(),
            "-c".into(),
            cmd.command_line.clone().into(),
        ];
        let mut spec = ZoneSpec::new(policy, argv);
        spec.cwd = cmd.cwd.clone();
        spec.env = cmd
            .env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        if cmd.overlays.is_empty() && cmd.role.reads_workspace_only() {
            // In place, for a role that only reads the workspace: the workdir read-only.
            spec.extra_ro = vec![self.workdir.clone()];
        } else if cmd.overlays.is_empty() {
            // In place: the workdir itself is the one writable grant.
            spec.extra_rw = vec![self.workdir.clone()];
        } else {
            // Detached: the workspace overlay is all the zone sees of the operator's files.
            spec.overlays = cmd.overlays.clone();
        }
        spec.extra_ro.extend(cmd.read_only.iter().cloned());
        spec.extra_rw.extend(cmd.read_write.iter().cloned());
        if let Some(overlay) = cmd.overlays.first() {
            spec.read_only_beneath = cmd
                .read_only_beneath
                .iter()
                .map(|sub| (overlay.target.clone(), sub.clone()))
                .collect();
        }
        spec.clock_offset_s = self.clock_offset_s;
        if proxied {
            spec.loopback_listener = Some(PROXY_PORT);
        }
        Ok(spec)
    }
}

fn ending_of(exit: ZoneExit) -> Ending {
    match exit {
        ZoneExit::Exited(code) => Ending::Exited { code },
        ZoneExit::Signaled(signal) => Ending::Signaled { signal },
    }
}

/// How long a self-test zone's probe may take (a handful of system calls).
const SELF_TEST_LIMIT: Duration = Duration::from_secs(30);

/// A command in a native zone: the zone's init, whose exit ends the zone.
struct NativeCommand(RunningZone);

impl Supervised for NativeCommand {
    type Exit = ZoneExit;

    fn try_exit(&mut self) -> Result<Option<ZoneExit>, ZoneError> {
        self.0
            .wait_timeout(Duration::ZERO)
            .map_err(|e| ZoneError::Reap(e.to_string()))
    }

    fn stop(&mut self) -> Result<(), ZoneError> {
        self.0.kill().map_err(|e| ZoneError::Reap(e.to_string()))
    }

    fn abandon(&mut self) {
        let _ = self.0.kill();
    }

    fn identity(&self) -> ZoneIdentity {
        let pid = self.0.pid();
        ZoneIdentity {
            leader_pid: pid,
            leader_start: crate::procfs::start_time(pid),
            cgroup: self.0.report().cgroup.clone(),
            process_group: None,
        }
    }

    /// The zone cgroup's CPU time (the first of its directories that accounts it), else (a v1
    /// hierarchy without `cpuacct` for the zone) that of the processes its cgroup lists.
    fn cpu(&self) -> Option<Duration> {
        let dirs = &self.0.report().cgroup;
        dirs.iter()
            .find_map(|dir| crate::procfs::cgroup_cpu(dir))
            .or_else(|| {
                dirs.iter()
                    .find_map(|dir| crate::procfs::cgroup_procs(dir))
                    .map(|pids| crate::procfs::pids_cpu(&pids))
            })
    }
}

impl Zone for NativeZone {
    fn name(&self) -> &str {
        "native"
    }

    fn isolation(&self) -> &str {
        "native"
    }

    fn cgroup_scope(&self) -> Option<&crate::delegation::Scope> {
        self.scope.as_ref()
    }

    fn self_test(
        &mut self,
        cmd: &ZoneCommand,
        plan: &sandbox::self_test::SelfTestPlan,
    ) -> Result<Result<super::SelfTestRun, String>, ZoneError> {
        let mut spec = self.spec(cmd)?;
        spec.self_test = Some(plan.clone());
        let mut zone = match self.launcher.launch(spec) {
            Ok(zone) => zone,
            Err(SandboxError::Spawn(reason)) => return Ok(Err(reason)),
            Err(other) => return Err(other.into()),
        };
        let reap = |e: SandboxError| ZoneError::Reap(e.to_string());
        if zone.wait_timeout(SELF_TEST_LIMIT).map_err(reap)?.is_none() {
            zone.kill().map_err(reap)?;
            return Ok(Err(format!(
                "the {} zone's probe did not end within {}s",
                cmd.role.as_str(),
                SELF_TEST_LIMIT.as_secs()
            )));
        }
        let report = zone.report();
        Ok(Ok(super::SelfTestRun {
            operations: report.self_test.clone().unwrap_or_default(),
            enforcement: report.enforcement.clone(),
        }))
    }

    fn bind_run(&mut self, run_dir: &std::path::Path) -> Result<(), ZoneError> {
        match self.egress.as_mut() {
            Some(egress) => egress.bind(run_dir),
            None => Ok(()),
        }
    }

    fn run(&mut self, cmd: &ZoneCommand, capture: &ArtifactSink<'_>) -> Result<ZoneRun, ZoneError> {
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let mut spec = self.spec(cmd)?;
        if let Some(path) = &cmd.stdin {
            spec.stdin = Some(super::open_stdin(path)?.into());
        }
        spec.stdout = Some(out_w);
        spec.stderr = Some(err_w);
        let limit = command_limit(cmd.timeout, self.policy(cmd.role)?);
        let started = Instant::now();
        let cpu_before = children_cpu();
        let zone = match self.launcher.launch(spec) {
            Ok(zone) => zone,
            Err(SandboxError::Spawn(reason)) => {
                let output = capture.start(out_r, err_r)?.finish()?;
                let usage = ZoneUsage {
                    cpu: None,
                    egress: self.egress_usage(cmd.role, None),
                    outside_attempts: None,
                };
                return Ok(ZoneRun {
                    ending: Ending::FailedToStart { reason },
                    duration: started.elapsed(),
                    output,
                    usage,
                    enforcement: None,
                });
            }
            Err(other) => return Err(other.into()),
        };
        // Our copies of the write ends went into the spec and were closed by launch.
        let mut running = capture.start(out_r, err_r)?;
        // The next role's zone comes next: its init starts now and executes while this command
        // runs (best effort; a failure shows again when that zone is launched).
        let next = std::iter::successors(Some(cmd.role.next()), |r| Some(r.next()))
            .take(Role::ALL.len())
            .find_map(|r| self.policies.get(&r));
        if let Some(next) = next {
            let _ = self.launcher.prepare(next);
        }
        let mut zone = NativeCommand(zone);
        let proxy = match (zone.0.take_listener(), &self.egress) {
            (Some(listener), Some(egress)) => Some(egress.serve(listener, cmd.role)?),
            _ => None,
        };
        let pid = zone.0.pid();
        let ending = match watch(
            &mut zone,
            pid,
            &mut running,
            started,
            Some(started + limit),
            &cmd.liveness,
        )? {
            Watched::Exited(exit) => ending_of(exit),
            Watched::Stopped(ending) => ending,
        };
        let duration = started.elapsed();
        let outside_attempts = zone.0.outside_attempts();
        let enforcement = zone.0.report().enforcement.clone();
        drop(zone);
        let egress = self.egress_usage(cmd.role, proxy);
        let usage = ZoneUsage {
            cpu: Some(children_cpu().saturating_sub(cpu_before)),
            egress,
            outside_attempts,
        };
        let output = running.finish()?;
        Ok(ZoneRun {
            ending,
            duration,
            output,
            usage,
            enforcement,
        })
    }
}
