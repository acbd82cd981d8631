//! Liveness of one running command: the stall rule (no output and no CPU progress for a while:
//! the command is wedged) and the periodic pulse a zone gives its caller while the command runs
//! (the heartbeat hook), both sampled by the one wait loop (`supervise::watch`).
//!
//! The rule, with `S` the idle limit and `B` the busy limit (`4 x S` unless set; docs/gates.md,
//! "Liveness"): let `q` be the time since the command's output (stdout + stderr bytes) last grew
//! and `c` the time since its CPU time last grew (both from its start). It is stale when
//! `q >= S` and `c >= S` ("idle"), or when `q >= B` ("busy": it spins without a word). A command
//! whose CPU time cannot be read is only ever judged by `B`. Samples are taken at most every
//! [`SAMPLE_EVERY`], so a stall is seen within that much of its limit.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the wait loop samples a command's CPU time and gives a pulse (at most).
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The busy limit's default multiple of the idle limit.
pub const BUSY_FACTOR: u32 = 4;

/// The stall rule's two limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallRule {
    /// No output and no CPU progress for this long: stale ("idle").
    pub idle: Duration,
    /// No output for this long, whatever the CPU does: stale ("busy").
    pub busy: Duration,
}

impl StallRule {
    /// The rule with idle limit `idle` and the busy limit given, or `4 x idle`.
    pub fn new(idle: Duration, busy: Option<Duration>) -> StallRule {
        StallRule {
            idle,
            busy: busy.unwrap_or(idle * BUSY_FACTOR),
        }
    }
}

/// What the wait loop observed of a stalled command when it stopped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    /// Time since its output last grew (or since it started).
    pub quiet_ms: u64,
    /// CPU time it used in that window (`None`: not readable).
    pub cpu_ms: Option<u64>,
    /// Whether it was judged by the busy limit (CPU progress, no output).
    pub busy: bool,
}

/// Who a running command is, for whoever must find (and perhaps stop) it from outside.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZoneIdentity {
    /// The process whose exit ends the command (the host zone's `/bin/sh`, the native zone's init).
    pub leader_pid: i32,
    /// Its start time (field 22 of `/proc/PID/stat`).
    pub leader_start: Option<u64>,
    /// The zone's cgroup directories (native zones).
    pub cgroup: Vec<PathBuf>,
    /// The command's process group (host zone).
    pub process_group: Option<i32>,
}

/// One pulse of a running command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulse {
    pub zone: ZoneIdentity,
    /// CPU time of the command so far (`None`: the zone cannot read it).
    pub cpu: Option<Duration>,
    /// stdout + stderr bytes so far.
    pub output_bytes: u64,
}

/// The caller's hook, given a pulse at most every [`SAMPLE_EVERY`] while a command runs. It must
/// not block for long (the wait loop pumps the command's output after it).
pub trait Heartbeat {
    fn beat(&self, pulse: &Pulse);
}

/// What a command's caller asks of its liveness: the stall rule, the heartbeat hook, or both.
#[derive(Clone, Default)]
pub struct Liveness {
    pub stall: Option<StallRule>,
    pub heartbeat: Option<Arc<dyn Heartbeat>>,
}

impl std::fmt::Debug for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Liveness")
            .field("stall", &self.stall)
            .field("heartbeat", &self.heartbeat.is_some())
            .finish()
    }
}

impl Liveness {
    pub fn is_off(&self) -> bool {
        self.stall.is_none() && self.heartbeat.is_none()
    }
}

/// The stall rule's state over one command's samples.
#[derive(Debug)]
pub struct Tracker {
    rule: Option<StallRule>,
    bytes: u64,
    output_at: Instant,
    /// CPU time when the output last grew (the start of the quiet window).
    cpu_at_output: Option<Duration>,
    cpu: Option<Duration>,
    cpu_at: Instant,
}

impl Tracker {
    pub fn new(rule: Option<StallRule>, started: Instant) -> Tracker {
        Tracker {
            rule,
            bytes: 0,
            output_at: started,
            cpu_at_output: Some(Duration::ZERO),
            cpu: Some(Duration::ZERO),
            cpu_at: started,
        }
    }

    /// Record a sample taken at `now` and judge it: `Some` when the command is stale.
    pub fn observe(&mut self, now: Instant, bytes: u64, cpu: Option<Duration>) -> Option<Stall> {
        if bytes > self.bytes {
            self.bytes = bytes;
            self.output_at = now;
            self.cpu_at_output = cpu;
        }
        match (cpu, self.cpu) {
            (Some(new), Some(old)) if new > old => {
                self.cpu = Some(new);
                self.cpu_at = now;
            }
            (Some(_), Some(_)) => {}
            (new, _) => {
                // Unreadable now or before: no CPU observation to judge idleness by.
                self.cpu = new;
                self.cpu_at = now;
                if new.is_none() {
                    self.cpu_at_output = None;
                }
            }
        }
        let rule = self.rule?;
        let quiet = now.saturating_duration_since(self.output_at);
        let cpu_quiet = now.saturating_duration_since(self.cpu_at);
        let idle = cpu.is_some() && quiet >= rule.idle && cpu_quiet >= rule.idle;
        let busy = quiet >= rule.busy;
        if !idle && !busy {
            return None;
        }
        let cpu_ms = match (cpu, self.cpu_at_output) {
            (Some(now), Some(then)) => Some(now.saturating_sub(then).as_millis() as u64),
            _ => None,
        };
        Some(Stall {
            quiet_ms: quiet.as_millis() as u64,
            cpu_ms,
            busy: !idle,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(10);

    fn tracker() -> (Tracker, Instant) {
        let t0 = Instant::now();
        (Tracker::new(Some(StallRule::new(S, None)), t0), t0)
    }

    #[test]
    fn the_busy_limit_is_four_times_the_idle_limit_unless_set() {
        assert_eq!(StallRule::new(S, None).busy, S * 4);
        assert_eq!(
            StallRule::new(S, Some(Duration::from_secs(15))).busy,
            Duration::from_secs(15)
        );
    }

    #[test]
    fn no_output_and_no_cpu_for_the_idle_limit_is_an_idle_stall() {
        let (mut t, t0) = tracker();
        assert_eq!(
            t.observe(t0 + S - Duration::from_millis(1), 0, Some(Duration::ZERO)),
            None
        );
        assert_eq!(
            t.observe(t0 + S, 0, Some(Duration::ZERO)),
            Some(Stall {
                quiet_ms: 10_000,
                cpu_ms: Some(0),
                busy: false
            })
        );
    }

    #[test]
    fn cpu_progress_without_output_is_stale_only_at_the_busy_limit() {
        let (mut t, t0) = tracker();
        for s in 1..40u64 {
            assert_eq!(
                t.observe(t0 + Duration::from_secs(s), 0, Some(Duration::from_secs(s))),
                None,
                "at {s} s"
            );
        }
        assert_eq!(
            t.observe(
                t0 + Duration::from_secs(40),
                0,
                Some(Duration::from_secs(40))
            ),
            Some(Stall {
                quiet_ms: 40_000,
                cpu_ms: Some(40_000),
                busy: true
            })
        );
    }

    #[test]
    fn output_restarts_the_quiet_window() {
        let (mut t, t0) = tracker();
        assert_eq!(
            t.observe(t0 + Duration::from_secs(9), 5, Some(Duration::ZERO)),
            None
        );
        assert_eq!(
            t.observe(t0 + Duration::from_secs(18), 5, Some(Duration::ZERO)),
            None
        );
        assert!(t
            .observe(t0 + Duration::from_secs(19), 5, Some(Duration::ZERO))
            .is_some());
    }

    #[test]
    fn unreadable_cpu_is_judged_by_the_busy_limit_only() {
        let (mut t, t0) = tracker();
        assert_eq!(t.observe(t0 + Duration::from_secs(39), 0, None), None);
        assert_eq!(
            t.observe(t0 + Duration::from_secs(40), 0, None),
            Some(Stall {
                quiet_ms: 40_000,
                cpu_ms: None,
                busy: true
            })
        );
    }

    #[test]
    fn without_a_rule_nothing_is_stale() {
        let t0 = Instant::now();
        let mut t = Tracker::new(None, t0);
        assert_eq!(
            t.observe(t0 + Duration::from_secs(3600), 0, Some(Duration::ZERO)),
            None
        );
    }
}
