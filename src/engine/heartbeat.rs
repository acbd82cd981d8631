//! The supervisor's heartbeat (`heartbeat.json` in the run directory; docs/gates.md,
//! "Liveness"): [`Beacon`] rewrites it at every phase change of an iteration and, as the zones'
//! heartbeat hook, at most every second while a command runs, with that command's zone, CPU time
//! and output so far. Writing it is best effort: a heartbeat that cannot be written goes stale,
//! which is what `loopexec watch` reports, and the run itself goes on.

use crate::receipt::heartbeat::{self, HeartbeatRecord, ZoneRecord, HEARTBEAT_SCHEMA};
use crate::safefs::SafeDir;
use crate::zones::liveness::{Heartbeat, Liveness, Pulse, StallRule};
use crate::zones::{Role, ZoneCommand};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the supervisor is: its phase and iteration, and the role of the command it runs.
#[derive(Debug, Clone)]
struct Where {
    phase: &'static str,
    iteration: u64,
    role: Option<Role>,
}

/// The writer of one run's heartbeat.
#[derive(Debug)]
pub struct Beacon {
    dir: SafeDir,
    run_id: String,
    pid: i32,
    start: u64,
    at: Mutex<Where>,
}

impl Beacon {
    /// The beacon of run `run_id` whose directory is `run_dir` (opened again: the beacon keeps
    /// its own descriptor).
    pub fn new(run_dir: &std::path::Path, run_id: &str) -> Option<Arc<Beacon>> {
        let dir = SafeDir::open(run_dir).ok()?;
        let pid = std::process::id() as i32;
        let start = crate::procfs::start_time(pid)?;
        Some(Arc::new(Beacon { dir, run_id: run_id.to_string(), pid, start, at: Mutex::new(Where { phase: "baseline", iteration: 0, role: None }) }))
    }

    /// A phase change: record it, with no zone running.
    pub fn phase(&self, phase: &'static str, iteration: u64) {
        let at = Where { phase, iteration, role: None };
        if let Ok(mut guard) = self.at.lock() {
            *guard = at.clone();
        }
        self.write(&at, None);
    }

    /// Arm `cmd` (its stall rule kept) with this beacon as its heartbeat hook, for `phase` of
    /// `iteration`: the phase is recorded now.
    pub fn arm(self: &Arc<Self>, cmd: &mut ZoneCommand, phase: &'static str, iteration: u64) {
        self.phase(phase, iteration);
        if let Ok(mut guard) = self.at.lock() {
            guard.role = Some(cmd.role);
        }
        let hook: Arc<dyn Heartbeat> = self.clone();
        cmd.liveness = Liveness { stall: cmd.liveness.stall, heartbeat: Some(hook) };
    }

    fn write(&self, at: &Where, zone: Option<ZoneRecord>) {
        let record = HeartbeatRecord {
            schema: HEARTBEAT_SCHEMA.into(),
            run_id: self.run_id.clone(),
            supervisor_pid: self.pid,
            supervisor_start: self.start,
            phase: at.phase.into(),
            iteration: at.iteration,
            zone,
            updated_at: crate::receipt::chain::now_rfc3339(),
            updated_at_unix_ms: heartbeat::now_unix_ms(),
        };
        // Best effort: an unwritable heartbeat goes stale, which `watch` reports.
        let _ = heartbeat::write(&self.dir, &record);
    }
}

impl Heartbeat for Beacon {
    fn beat(&self, pulse: &Pulse) {
        let Ok(at) = self.at.lock().map(|g| g.clone()) else { return };
        let zone = ZoneRecord {
            role: at.role.map_or("unknown", Role::as_str).into(),
            leader_pid: pulse.zone.leader_pid,
            leader_start: pulse.zone.leader_start,
            cgroup: pulse.zone.cgroup.iter().map(|p| p.display().to_string()).collect(),
            process_group: pulse.zone.process_group,
            cpu_ms: pulse.cpu.map(|d| d.as_millis() as u64),
            output_bytes: pulse.output_bytes,
        };
        self.write(&at, Some(zone));
    }
}

/// The run's stall rule for a command of `role` (the agent's and the check's; none for the
/// judge), from the pinned configuration.
pub fn stall_rule(cfg: &super::config::LoopConfig, role: Role) -> Option<StallRule> {
    if !matches!(role, Role::Agent | Role::Check) {
        return None;
    }
    let idle = Duration::from_millis(cfg.stall_timeout_ms?);
    Some(StallRule::new(idle, cfg.stall_busy_timeout_ms.map(Duration::from_millis)))
}
