//! A running zone, from the supervisor's side ([`RunningZone`]): waiting for it, with or without
//! a deadline, killing it, and its teardown (docs/zones.md, "The native zone's setup sequence").

use crate::cgroup::{CgroupPool, ZoneCgroup};
use crate::error::SandboxError;
use crate::placeholders::Placeholders;
use crate::plan::{self, Msg};
use crate::report::AppliedReport;
use serde::Serialize;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

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

/// A started zone. Dropping it kills every process of the zone and removes its cgroup.
pub struct RunningZone {
    pub(crate) pid: i32,
    pub(crate) sock: OwnedFd,
    pub(crate) pidfd: Option<OwnedFd>,
    pub(crate) listener: Option<TcpListener>,
    pub(crate) report: AppliedReport,
    pub(crate) cgroup: Option<ZoneCgroup>,
    /// Where the cgroup goes once the zone has ended.
    pub(crate) cgroups: Arc<CgroupPool>,
    pub(crate) placeholders: Placeholders,
    pub(crate) exit: Option<ZoneExit>,
    /// What the zone tried to send beyond its network namespace, as its init reported it.
    pub(crate) outside_attempts: Option<crate::outside_reach::OutsideAttempts>,
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

    /// What the command's zone tried to send to addresses outside its network namespace (no
    /// route: every such attempt failed), once the zone has ended and its init reported it
    /// (`None` before, and when the zone was killed or its counters could not be read).
    pub fn outside_attempts(&self) -> Option<crate::outside_reach::OutsideAttempts> {
        self.outside_attempts
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
                Ok(Msg::OutsideAttempts(attempts)) => self.outside_attempts = Some(attempts),
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
        tracing::debug!(
            reap_us = reaped.as_micros() as u64,
            teardown_us = (waiting.elapsed() - reaped).as_micros() as u64,
            "zone ended"
        );
        Ok(exit)
    }

    /// Wait at most `limit`; `Ok(None)` if the command is still running.
    pub fn wait_timeout(&mut self, limit: Duration) -> Result<Option<ZoneExit>, SandboxError> {
        if let Some(e) = self.exit {
            return Ok(Some(e));
        }
        if let Some(pidfd) = &self.pidfd {
            let mut fds = [libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            let ms = limit.as_millis().min(i32::MAX as u128) as i32;
            let deadline = std::time::Instant::now() + limit;
            loop {
                let left = deadline
                    .saturating_duration_since(std::time::Instant::now())
                    .as_millis()
                    .min(ms as u128) as i32;
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
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            if let Some(cg) = &self.cgroup {
                let _ = cg.kill_all();
            }
            let _ = self.wait();
        }
        self.teardown()
    }

    pub(crate) fn teardown(&mut self) -> Result<(), SandboxError> {
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
