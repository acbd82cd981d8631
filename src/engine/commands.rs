//! How a role's command is built for its zone and run there: the command line, timeout and
//! environment of the pinned configuration (the operator's environment without `LOOPEXEC_*`,
//! plus, for the agent only, `LOOPEXEC_RUN_ID`, `LOOPEXEC_ITERATION`, `LOOPEXEC_ROLE`), the overlays, the artifact
//! stem `NNNN-{exec,check}`. A zone that cannot be set up for the command (a missing isolation
//! layer, a grant the zone cannot use) is an outcome the caller decides on, not a crash.

use super::config::LoopConfig;
use crate::capture::ArtifactSink;
use crate::error::Failure;
use crate::safefs::SafeDir;
use crate::secret::Secret;
use crate::zones::{Role, Zone, ZoneCommand, ZoneRun};
use std::path::PathBuf;
use std::time::Duration;

/// The operator's environment for the commands: everything but loopexec's own `LOOPEXEC_*`
/// variables, and without entries that are not UTF-8 (`std::env::vars` would panic on them).
pub fn operator_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| !k.starts_with("LOOPEXEC_"))
        .collect()
}

/// One command of an iteration, before it runs.
pub struct RoleCommand<'a> {
    pub role: Role,
    pub run_id: &'a str,
    pub iteration: u64,
    /// Where the command runs: inside the overlay when there is one, else the workdir.
    pub overlay: Option<sandbox::OverlayMount>,
    /// The agent's minted credential, injected into its environment only.
    pub credential: Option<(String, Secret)>,
}

impl RoleCommand<'_> {
    /// The artifact stem of this command's output.
    pub fn stem(&self) -> String {
        let kind = match self.role {
            Role::Agent => "exec",
            Role::Check => "check",
            Role::Judge => "judge",
        };
        format!("{:04}-{kind}", self.iteration)
    }

    /// The command as the zone runs it.
    pub fn zone_command(self, cfg: &LoopConfig, base_env: &[(String, String)]) -> ZoneCommand {
        let (line, timeout_ms) = match self.role {
            Role::Agent => (cfg.exec.clone(), cfg.exec_timeout_ms),
            Role::Check => (cfg.check.clone(), cfg.check_timeout_ms),
            Role::Judge => cfg
                .judge
                .as_ref()
                .map_or((String::new(), 1), |j| (j.command.clone(), j.timeout_ms)),
        };
        let mut env = base_env.to_vec();
        // Only the agent learns the run it is in: the check's zone gives code under test no
        // way to know it runs under the oracle (no `LOOPEXEC_*` at all).
        if self.role == Role::Agent {
            env.push(("LOOPEXEC_RUN_ID".into(), self.run_id.to_string()));
            env.push(("LOOPEXEC_ITERATION".into(), self.iteration.to_string()));
            env.push(("LOOPEXEC_ROLE".into(), self.role.as_str().into()));
            // task_list mode: the plan's task this run works on (docs/task-list.md).
            if let Some(task) = &cfg.task {
                env.push(("LOOPEXEC_TASK_ID".into(), task.id.clone()));
            }
        }
        // The check's pinned toolchain and runner plugins (`[runner]`), set whatever the exec
        // policy's `env.allow` says.
        let mut inject: Vec<(String, Secret)> = self.credential.into_iter().collect();
        if self.role == Role::Check {
            inject.extend(
                cfg.runner
                    .check_env()
                    .into_iter()
                    .map(|(k, v)| (k, Secret::new(v))),
            );
        }
        let cwd = match &self.overlay {
            Some(o) => o.target.clone(),
            None => PathBuf::from(&cfg.workdir),
        };
        ZoneCommand {
            role: self.role,
            command_line: line,
            cwd,
            env,
            timeout: Some(Duration::from_millis(timeout_ms)),
            overlays: self.overlay.into_iter().collect(),
            inject,
            stdin: None,
            read_only: Vec::new(),
            read_write: Vec::new(),
            read_only_beneath: Vec::new(),
            liveness: crate::zones::liveness::Liveness {
                stall: super::heartbeat::stall_rule(cfg, self.role),
                heartbeat: None,
            },
        }
    }
}

/// Run `cmd` in `zone`, its output captured beneath `artifacts` (`rel` is that directory
/// relative to the run directory). `Ok(Err(detail))`: the zone could not be set up for it.
pub fn run_in_zone(
    zone: &mut dyn Zone,
    cmd: &ZoneCommand,
    artifacts: &SafeDir,
    rel: &str,
    stem: &str,
) -> Result<Result<ZoneRun, String>, Failure> {
    run_observed(zone, cmd, artifacts, rel, stem, None)
}

/// [`run_in_zone`], every stdout byte shown to `observer` as well (the agent CLI's output meter).
pub fn run_observed(
    zone: &mut dyn Zone,
    cmd: &ZoneCommand,
    artifacts: &SafeDir,
    rel: &str,
    stem: &str,
    observer: Option<&std::cell::RefCell<dyn crate::capture::StreamObserver>>,
) -> Result<Result<ZoneRun, String>, Failure> {
    let sink = match observer {
        Some(o) => ArtifactSink::new(artifacts, rel, stem).observing_stdout(o),
        None => ArtifactSink::new(artifacts, rel, stem),
    };
    match zone.run(cmd, &sink) {
        Ok(run) => Ok(Ok(run)),
        Err(e) if e.is_setup() => Ok(Err(format!("{} zone: {e}", cmd.role.as_str()))),
        Err(other) => Err(other.into()),
    }
}

/// The record of a proxied command's egress: the run's totals after it, and the audit digest.
pub fn egress_record(egress: crate::zones::EgressUsage) -> crate::receipt::events::EgressRecord {
    crate::receipt::events::EgressRecord {
        totals: serde_json::to_value(egress.run_totals).unwrap_or_default(),
        audit: crate::zones::pinned::EGRESS_AUDIT_FILE.into(),
        audit_sha256: egress.audit_sha256,
        denied: egress.command.denied_hosts,
    }
}
