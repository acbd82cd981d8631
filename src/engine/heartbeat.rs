//! The supervisor's heartbeat (`heartbeat.json` in the run directory; docs/gates.md,
//! "Liveness"): [`Beacon`] rewrites it at every phase change of an iteration and, as the zones'
//! heartbeat hook, at most every second while a command runs, with that command's zone, CPU time
//! and output so far; and, from a pulse thread of its own, every [`PULSE`] whatever the supervisor
//! is doing (a long snapshot, the guards, delivery), so that only a supervisor that is stopped,
//! gone or wholly hung goes stale. `phase_since_unix_ms` says since when the phase has lasted.
//! Writing it is best effort: a heartbeat that cannot be written goes stale, which is what
//! `loopexec watch` reports, and the run itself goes on.

use crate::receipt::heartbeat::{self, HeartbeatRecord, ZoneRecord, HEARTBEAT_SCHEMA};
use crate::safefs::SafeDir;
use crate::zones::liveness::{Heartbeat, Liveness, Pulse, StallRule};
use crate::zones::{Role, ZoneCommand};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the pulse thread rewrites the heartbeat.
pub const PULSE: Duration = Duration::from_secs(2);

/// Where the supervisor is: its phase and iteration, since when, the role of the command it runs
/// and that command's zone as last seen.
#[derive(Debug, Clone)]
struct Where {
    phase: &'static str,
    iteration: u64,
    since_unix_ms: u64,
    role: Option<Role>,
    zone: Option<ZoneRecord>,
}

/// The writer of one run's heartbeat.
#[derive(Debug)]
pub struct Beacon {
    dir: SafeDir,
    run_id: String,
    pid: i32,
    start: u64,
    at: Mutex<Where>,
    /// Held while the file is rewritten (the main thread and the pulse thread both write it).
    writing: Mutex<()>,
}

impl Beacon {
    /// The beacon of run `run_id` whose directory is `run_dir` (opened again: the beacon keeps
    /// its own descriptor).
    pub fn new(run_dir: &std::path::Path, run_id: &str) -> Option<Arc<Beacon>> {
        let dir = SafeDir::open(run_dir).ok()?;
        let pid = std::process::id() as i32;
        let start = crate::procfs::start_time(pid)?;
        let at = Where {
            phase: "baseline",
            iteration: 0,
            since_unix_ms: heartbeat::now_unix_ms(),
            role: None,
            zone: None,
        };
        let beacon = Arc::new(Beacon {
            dir,
            run_id: run_id.to_string(),
            pid,
            start,
            at: Mutex::new(at),
            writing: Mutex::new(()),
        });
        Self::pulse(Arc::downgrade(&beacon));
        Some(beacon)
    }

    /// The pulse thread: while the beacon lives, rewrite the heartbeat every [`PULSE`] with where
    /// the supervisor is. It ends with the beacon (within one pulse); a thread that cannot be
    /// started leaves the phase changes and the zones' hook as the only writers.
    fn pulse(beacon: std::sync::Weak<Beacon>) {
        let _ = std::thread::Builder::new()
            .name("loopexec-heartbeat".into())
            .spawn(move || loop {
                std::thread::sleep(PULSE);
                let Some(beacon) = beacon.upgrade() else {
                    return;
                };
                let Ok(at) = beacon.at.lock().map(|g| g.clone()) else {
                    return;
                };
                beacon.write(&at);
            });
    }

    /// A phase change: record it, with no zone running.
    pub fn phase(&self, phase: &'static str, iteration: u64) {
        let at = Where {
            phase,
            iteration,
            since_unix_ms: heartbeat::now_unix_ms(),
            role: None,
            zone: None,
        };
        if let Ok(mut guard) = self.at.lock() {
            *guard = at.clone();
        }
        self.write(&at);
    }

    /// Arm `cmd` (its stall rule kept) with this beacon as its heartbeat hook, for `phase` of
    /// `iteration`: the phase is recorded now.
    pub fn arm(self: &Arc<Self>, cmd: &mut ZoneCommand, phase: &'static str, iteration: u64) {
        self.phase(phase, iteration);
        if let Ok(mut guard) = self.at.lock() {
            guard.role = Some(cmd.role);
        }
        let hook: Arc<dyn Heartbeat> = self.clone();
        cmd.liveness = Liveness {
            stall: cmd.liveness.stall,
            heartbeat: Some(hook),
        };
    }

    fn write(&self, at: &Where) {
        let zone = at.zone.clone();
        let record = HeartbeatRecord {
            schema: HEARTBEAT_SCHEMA.into(),
            run_id: self.run_id.clone(),
            supervisor_pid: self.pid,
            supervisor_start: self.start,
            phase: at.phase.into(),
            iteration: at.iteration,
            phase_since_unix_ms: Some(at.since_unix_ms),
            zone,
            updated_at: crate::timestamp::now_rfc3339(),
            updated_at_unix_ms: heartbeat::now_unix_ms(),
        };
        // Best effort: an unwritable heartbeat goes stale, which `watch` reports.
        let _writing = self.writing.lock();
        let _ = heartbeat::write(&self.dir, &record);
    }
}

impl Heartbeat for Beacon {
    fn beat(&self, pulse: &Pulse) {
        let Ok(mut guard) = self.at.lock() else {
            return;
        };
        let zone = ZoneRecord {
            role: guard.role.map_or("unknown", Role::as_str).into(),
            leader_pid: pulse.zone.leader_pid,
            leader_start: pulse.zone.leader_start,
            cgroup: pulse
                .zone
                .cgroup
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            process_group: pulse.zone.process_group,
            cpu_ms: pulse.cpu.map(|d| d.as_millis() as u64),
            output_bytes: pulse.output_bytes,
        };
        guard.zone = Some(zone);
        let at = guard.clone();
        drop(guard);
        self.write(&at);
    }
}

/// The run's stall rule for a command of `role` (the agent's and the check's; none for the
/// judge), from the pinned configuration.
pub fn stall_rule(cfg: &super::config::LoopConfig, role: Role) -> Option<StallRule> {
    if !matches!(role, Role::Agent | Role::Check) {
        return None;
    }
    let idle = Duration::from_millis(cfg.stall_timeout_ms?);
    Some(StallRule::new(
        idle,
        cfg.stall_busy_timeout_ms.map(Duration::from_millis),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pulse_thread_refreshes_the_heartbeat_of_a_phase_with_no_zone_and_keeps_when_it_began() {
        let tmp = tempfile::tempdir().unwrap();
        let beacon = Beacon::new(tmp.path(), "r1").unwrap();
        beacon.phase("guards", 3);
        let dir = SafeDir::open(tmp.path()).unwrap();
        let first = heartbeat::read(&dir).unwrap();
        std::thread::sleep(PULSE + PULSE / 2);
        let later = heartbeat::read(&dir).unwrap();
        assert!(
            later.updated_at_unix_ms > first.updated_at_unix_ms,
            "{first:?} {later:?}"
        );
        assert_eq!(
            (
                later.phase.as_str(),
                later.iteration,
                later.phase_since_unix_ms
            ),
            ("guards", 3, first.phase_since_unix_ms)
        );
        assert!(later.zone.is_none());
    }
}
