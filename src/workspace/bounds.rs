//! The bounds of one post-agent phase (a snapshot, a delivery): the policy's `[workspace]`
//! limits on what the agent's upper layer may hold, the phase's time bound, and the operator's
//! interrupt. The phase calls [`Bounds::tick`] as it reads, so neither a huge or deep tree nor a
//! slow file system keeps the supervisor from halting or stopping cleanly.

use super::{WorkspaceError, WsResult};
use sandbox::WorkspaceLimits;
use std::time::{Duration, Instant};

/// How often (in ticks) the clock and the interrupt flag are read.
const CHECK_EVERY: u32 = 256;

/// The running bounds of one phase.
#[derive(Debug, Clone)]
pub struct Bounds {
    pub limits: WorkspaceLimits,
    phase: &'static str,
    key: &'static str,
    seconds: u64,
    deadline: Instant,
    ticks: u32,
    entries: u64,
    bytes: u64,
}

impl Bounds {
    /// The bounds of a snapshot under `limits` (its clock starts now).
    pub fn snapshot(limits: &WorkspaceLimits) -> Bounds {
        Bounds::new(
            limits,
            "snapshot",
            "snapshot_timeout_seconds",
            limits.snapshot_timeout_seconds,
        )
    }

    /// The bounds of a delivery under `limits` (its clock starts now).
    pub fn delivery(limits: &WorkspaceLimits) -> Bounds {
        Bounds::new(
            limits,
            "delivery",
            "delivery_timeout_seconds",
            limits.delivery_timeout_seconds,
        )
    }

    fn new(
        limits: &WorkspaceLimits,
        phase: &'static str,
        key: &'static str,
        seconds: u64,
    ) -> Bounds {
        Bounds {
            limits: limits.clone(),
            phase,
            key,
            seconds,
            deadline: Instant::now() + Duration::from_secs(seconds),
            ticks: 0,
            entries: 0,
            bytes: 0,
        }
    }

    /// Called once per unit of work: an interrupt or the time bound ends the phase.
    pub fn tick(&mut self) -> WsResult<()> {
        self.ticks = self.ticks.wrapping_add(1);
        if self.ticks % CHECK_EVERY == 0 {
            self.check_now()?;
        }
        Ok(())
    }

    /// Check the interrupt flag and the clock now (before and after a long step).
    pub fn check_now(&self) -> WsResult<()> {
        if let Some(signal) = crate::interrupt::pending() {
            return Err(WorkspaceError::Interrupted {
                phase: self.phase,
                signal,
            });
        }
        if Instant::now() > self.deadline {
            return Err(WorkspaceError::Timeout {
                phase: self.phase,
                key: self.key,
                seconds: self.seconds,
            });
        }
        Ok(())
    }

    /// Time left before the phase's bound (for a child process's own timeout).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    fn over(limit: &'static str, allowed: u64, path: &[u8]) -> WorkspaceError {
        WorkspaceError::Limit {
            limit,
            allowed,
            path: String::from_utf8_lossy(path).into_owned(),
        }
    }

    /// One more upper-layer entry at `path`, `depth` components deep.
    pub fn entry(&mut self, path: &[u8], depth: usize) -> WsResult<()> {
        self.tick()?;
        self.entries += 1;
        let l = &self.limits;
        if self.entries > l.max_entries {
            return Err(Self::over("max_entries", l.max_entries, path));
        }
        if depth as u64 > u64::from(l.max_depth) {
            return Err(Self::over("max_depth", u64::from(l.max_depth), path));
        }
        if path.len() as u64 > u64::from(l.max_path_bytes) {
            return Err(Self::over(
                "max_path_bytes",
                u64::from(l.max_path_bytes),
                path,
            ));
        }
        Ok(())
    }

    /// How many more entries one directory may list before `max_entries` is reached.
    pub fn entries_left(&self) -> usize {
        usize::try_from(self.limits.max_entries.saturating_sub(self.entries)).unwrap_or(usize::MAX)
    }

    /// A file of `size` bytes at `path` (checked before it is read).
    pub fn file(&mut self, path: &[u8], size: u64) -> WsResult<()> {
        let l = &self.limits;
        if size > l.max_file_bytes {
            return Err(Self::over("max_file_bytes", l.max_file_bytes, path));
        }
        self.bytes = self.bytes.saturating_add(size);
        if self.bytes > l.max_total_bytes {
            return Err(Self::over("max_total_bytes", l.max_total_bytes, path));
        }
        Ok(())
    }
}
