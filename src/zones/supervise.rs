//! Supervising one running command, for every backend: the output pipes, the pidfd, and the one
//! wait loop that pumps the capture while watching for the command's exit, its deadline and an
//! operator interrupt.
//!
//! A backend says how its command is observed and stopped ([`Supervised`]: the host's process
//! group, the native zone's init, a container engine's client); [`watch`] owns the order of the
//! checks (exit, interrupt, deadline, then a bounded wait on the pipes and wake-up descriptors),
//! and leaves nothing running when the capture itself fails. With a [`Liveness`] it also samples
//! the command (at most every [`SAMPLE_EVERY`]): gives the caller's heartbeat hook a pulse and
//! stops a command the stall rule finds stale ([`Ending::Stalled`]).

use super::liveness::{Liveness, Pulse, Tracker, ZoneIdentity, SAMPLE_EVERY};
use super::{Ending, ZoneError};
use crate::capture::CaptureInProgress;
use crate::interrupt;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// How long one wait lasts when no pidfd wakes us up on the command's exit.
const POLL_SLICE: Duration = Duration::from_millis(2);
/// How long one wait lasts when a pidfd does (a wake-up descriptor ends it early).
const PIDFD_SLICE: Duration = Duration::from_secs(3600);

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> Result<(OwnedFd, OwnedFd), ZoneError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| ZoneError::io("creating pipes for the command's output", e))
}

/// A pidfd for `pid`, readable once it exits; `None` on kernels without pidfd_open (the wait loop
/// then polls).
pub fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a non-negative return is a descriptor we now own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A running command as its backend observes and stops it.
pub trait Supervised {
    /// What the backend learns when the command exits by itself.
    type Exit;
    /// The command's exit, if it has exited (never blocks).
    fn try_exit(&mut self) -> Result<Option<Self::Exit>, ZoneError>;
    /// Kill the command's whole process tree (deadline or interrupt) and wait until it is gone.
    fn stop(&mut self) -> Result<(), ZoneError>;
    /// Capture failed: kill and remove everything, best effort (the capture error is reported).
    fn abandon(&mut self);
    /// Who the command is (its leader, its cgroup or process group), for the heartbeat.
    fn identity(&self) -> ZoneIdentity {
        ZoneIdentity::default()
    }
    /// CPU time of the command's whole tree so far, where the backend can read it while it runs.
    fn cpu(&self) -> Option<Duration> {
        None
    }
    /// [`Supervised::cpu`] at the first sample, as the command starts (the base its later samples
    /// are counted from). A backend that knows it without reading anything says so.
    fn cpu_at_start(&self) -> Option<Duration> {
        self.cpu()
    }
}

/// How a watched command ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Watched<E> {
    /// It exited by itself.
    Exited(E),
    /// We stopped it: [`Ending::TimedOut`], [`Ending::Interrupted`] or [`Ending::Stalled`].
    Stopped(Ending),
}

/// Pump `capture` until the command exits, its `deadline` passes or an interrupt is pending,
/// stopping it in the last two cases. `pid` is the process whose exit ends the wait (a pidfd on it
/// wakes the loop; without one the loop polls every few milliseconds). `liveness`: the stall rule
/// and the heartbeat hook, if any (the wait then lasts at most [`SAMPLE_EVERY`]).
pub fn watch<S: Supervised>(
    command: &mut S,
    pid: i32,
    capture: &mut CaptureInProgress<'_>,
    started: Instant,
    deadline: Option<Instant>,
    liveness: &Liveness,
) -> Result<Watched<S::Exit>, ZoneError> {
    let pidfd = pidfd_open(pid);
    let mut wake: Vec<BorrowedFd<'_>> = Vec::new();
    if let Some(fd) = &pidfd {
        wake.push(fd.as_fd());
    }
    if let Some(fd) = interrupt::wake_fd() {
        wake.push(fd);
    }
    let slice = match (pidfd.is_some(), liveness.is_off()) {
        (false, _) => POLL_SLICE,
        (true, true) => PIDFD_SLICE,
        (true, false) => SAMPLE_EVERY,
    };
    let mut tracker = Tracker::new(liveness.stall, started);
    let identity = if liveness.is_off() {
        ZoneIdentity::default()
    } else {
        command.identity()
    };
    let mut sampled: Option<Instant> = None;
    // The CPU counter at the first sample: a reused zone cgroup's counts its earlier commands.
    let mut cpu_base: Option<Duration> = None;
    loop {
        if let Some(exit) = command.try_exit()? {
            return Ok(Watched::Exited(exit));
        }
        if let Some(signal) = interrupt::pending() {
            command.stop()?;
            return Ok(Watched::Stopped(Ending::Interrupted { signal }));
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            command.stop()?;
            return Ok(Watched::Stopped(Ending::TimedOut {
                after_ms: started.elapsed().as_millis() as u64,
            }));
        }
        if !liveness.is_off()
            && sampled.is_none_or(|at| now.saturating_duration_since(at) >= SAMPLE_EVERY)
        {
            let raw = match sampled {
                None => command.cpu_at_start(),
                Some(_) => command.cpu(),
            };
            sampled = Some(now);
            if cpu_base.is_none() {
                cpu_base = raw;
            }
            let cpu = raw.map(|c| c.saturating_sub(cpu_base.unwrap_or_default()));
            let output_bytes = capture.bytes_so_far();
            if let Some(hook) = &liveness.heartbeat {
                hook.beat(&Pulse {
                    zone: identity.clone(),
                    cpu,
                    output_bytes,
                });
            }
            if let Some(stall) = tracker.observe(now, output_bytes, cpu) {
                command.stop()?;
                return Ok(Watched::Stopped(Ending::Stalled {
                    quiet_ms: stall.quiet_ms,
                    cpu_ms: stall.cpu_ms,
                    busy: stall.busy,
                }));
            }
        }
        let wait = deadline
            .map(|d| d.saturating_duration_since(now).min(slice))
            .unwrap_or(slice);
        if let Err(e) = capture.pump(&wake, wait) {
            // Capture broke: still leave no process behind before reporting it.
            command.abandon();
            return Err(e.into());
        }
    }
}

/// CPU time (user + system) of this process's waited-for descendants so far. The difference
/// around one command is that command's tree, as long as its processes were loopexec's
/// descendants and every one was reaped (by loopexec, or by a zone init loopexec reaped).
pub fn children_cpu() -> Duration {
    // SAFETY: getrusage fills `usage`, a zeroed rusage we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::ArtifactSink;
    use crate::safefs::SafeDir;

    /// A command that exits on its `n`-th poll, or never; counts the stops.
    struct Scripted {
        polls: u32,
        exit_on: Option<u32>,
        stops: u32,
    }

    impl Supervised for Scripted {
        type Exit = u32;
        fn try_exit(&mut self) -> Result<Option<u32>, ZoneError> {
            self.polls += 1;
            Ok(self
                .exit_on
                .filter(|n| self.polls >= *n)
                .map(|_| self.polls))
        }
        fn stop(&mut self) -> Result<(), ZoneError> {
            self.stops += 1;
            Ok(())
        }
        fn abandon(&mut self) {}
    }

    /// No process has pid 0, so the watch polls instead of waiting on a pidfd.
    const NO_PIDFD: i32 = 0;

    fn with_capture(f: impl FnOnce(&mut CaptureInProgress<'_>)) {
        let dir = tempfile::tempdir().unwrap();
        let safe = SafeDir::open(dir.path()).unwrap();
        let sink = ArtifactSink::new(&safe, "artifacts", "t");
        let (out_r, out_w) = pipe().unwrap();
        let (err_r, err_w) = pipe().unwrap();
        drop((out_w, err_w));
        let mut capture = sink.start(out_r, err_r).unwrap();
        f(&mut capture);
        capture.finish().unwrap();
    }

    #[test]
    fn a_command_that_exits_is_not_stopped() {
        with_capture(|capture| {
            let mut cmd = Scripted {
                polls: 0,
                exit_on: Some(3),
                stops: 0,
            };
            let watched = watch(
                &mut cmd,
                NO_PIDFD,
                capture,
                Instant::now(),
                None,
                &Liveness::default(),
            )
            .unwrap();
            assert_eq!(watched, Watched::Exited(3));
            assert_eq!(cmd.stops, 0);
        });
    }

    #[test]
    fn a_command_the_stall_rule_finds_stale_is_stopped_once_and_reports_the_stall() {
        with_capture(|capture| {
            let mut cmd = Scripted {
                polls: 0,
                exit_on: None,
                stops: 0,
            };
            let rule = super::super::liveness::StallRule::new(Duration::ZERO, None);
            let liveness = Liveness {
                stall: Some(rule),
                heartbeat: None,
            };
            let watched =
                watch(&mut cmd, NO_PIDFD, capture, Instant::now(), None, &liveness).unwrap();
            // Its CPU time is not readable (`Scripted`): judged by the busy limit only.
            assert!(
                matches!(
                    watched,
                    Watched::Stopped(Ending::Stalled {
                        cpu_ms: None,
                        busy: true,
                        ..
                    })
                ),
                "{watched:?}"
            );
            assert_eq!(cmd.stops, 1);
        });
    }

    #[test]
    fn a_passed_deadline_stops_the_command_once_and_reports_a_timeout() {
        with_capture(|capture| {
            let mut cmd = Scripted {
                polls: 0,
                exit_on: None,
                stops: 0,
            };
            let started = Instant::now();
            let watched = watch(
                &mut cmd,
                NO_PIDFD,
                capture,
                started,
                Some(started),
                &Liveness::default(),
            )
            .unwrap();
            assert!(
                matches!(watched, Watched::Stopped(Ending::TimedOut { .. })),
                "{watched:?}"
            );
            assert_eq!(cmd.stops, 1);
        });
    }
}
