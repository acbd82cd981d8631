//! The host backend (`--isolation none`): commands run on the host as the operator's user.
//!
//! There is no sandbox here, only process control: each command runs as `/bin/sh -c` in its own
//! process group, dies with loopexec (`PR_SET_PDEATHSIG`), and loopexec is the child subreaper of
//! everything it starts. On exit, timeout or interrupt the process group is killed, then every
//! re-parented descendant (a `setsid` double-fork included) until none remains.

use super::liveness::ZoneIdentity;
use super::supervise::{children_cpu, pipe, watch, Supervised, Watched};
use super::{reap, Ending, Zone, ZoneCommand, ZoneError, ZoneRun, ZoneUsage};
use crate::capture::ArtifactSink;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The `--isolation none` zone.
#[derive(Debug)]
pub struct HostZone {
    supervisor_pid: i32,
}

impl HostZone {
    /// Prepare the host zone: loopexec becomes the subreaper of its descendants.
    pub fn new() -> Result<HostZone, ZoneError> {
        reap::become_subreaper().map_err(|e| ZoneError::io("PR_SET_CHILD_SUBREAPER", e))?;
        Ok(HostZone {
            supervisor_pid: std::process::id() as i32,
        })
    }
}

fn ending_of(status: WaitStatus) -> Option<Ending> {
    match status {
        WaitStatus::Exited(_, code) => Some(Ending::Exited { code }),
        WaitStatus::Signaled(_, sig, _) => Some(Ending::Signaled { signal: sig as i32 }),
        _ => None,
    }
}

/// Whether the child has exited, without reaping it: while it is an unreaped zombie its pid, and so
/// its process-group id, cannot be reused, which makes the group kill that follows safe.
fn has_exited(pid: Pid) -> bool {
    // SAFETY: waitid fills `info`, a zeroed siginfo_t we own.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    loop {
        let rc = unsafe { libc::waitid(libc::P_PID, pid.as_raw() as libc::id_t, &mut info, flags) };
        if rc == 0 {
            return unsafe { info.si_pid() } != 0;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // ECHILD: nothing left to wait for.
            return true;
        }
    }
}

/// Reap the child and return how it ended.
fn reap(pid: Pid) -> Ending {
    loop {
        match waitpid(pid, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(status) => {
                if let Some(ending) = ending_of(status) {
                    return ending;
                }
            }
            Err(e) => {
                return Ending::FailedToStart {
                    reason: format!("waitpid: {e}"),
                }
            }
        }
    }
}

/// A command on the host: its process group, led by the child we spawned, and the CPU time of
/// loopexec's reaped descendants when it started.
struct HostCommand {
    pid: Pid,
    reaped_cpu_before: std::time::Duration,
}

impl Supervised for HostCommand {
    type Exit = Ending;

    fn try_exit(&mut self) -> Result<Option<Ending>, ZoneError> {
        if !has_exited(self.pid) {
            return Ok(None);
        }
        reap::kill_group(self.pid.as_raw());
        Ok(Some(reap(self.pid)))
    }

    fn stop(&mut self) -> Result<(), ZoneError> {
        reap::kill_group(self.pid.as_raw());
        reap(self.pid);
        Ok(())
    }

    fn abandon(&mut self) {
        let _ = self.stop();
        let _ = reap::kill_remaining_descendants();
    }

    fn identity(&self) -> ZoneIdentity {
        let pid = self.pid.as_raw();
        ZoneIdentity {
            leader_pid: pid,
            leader_start: crate::procfs::start_time(pid),
            cgroup: Vec::new(),
            process_group: Some(pid),
        }
    }

    /// Nothing yet: its group was made for it (the child we just spawned), and the reaped count
    /// is taken from now. Scanning /proc for the group would cost more than many short commands.
    fn cpu_at_start(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::ZERO)
    }

    /// The live processes of its group, and the descendants loopexec reaped since it started.
    fn cpu(&self) -> Option<std::time::Duration> {
        Some(
            crate::procfs::group_cpu(self.pid.as_raw())
                + children_cpu().saturating_sub(self.reaped_cpu_before),
        )
    }
}

impl Zone for HostZone {
    fn name(&self) -> &str {
        "host"
    }

    fn isolation(&self) -> &str {
        "none"
    }

    fn run(&mut self, cmd: &ZoneCommand, capture: &ArtifactSink<'_>) -> Result<ZoneRun, ZoneError> {
        if !cmd.overlays.is_empty() {
            return Err(ZoneError::Spec(
                "the host backend cannot mount a workspace overlay; use native isolation".into(),
            ));
        }
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let parent = self.supervisor_pid;
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(&cmd.command_line)
            .env_clear()
            .envs(cmd.env.iter().map(|(k, v)| (k, v)))
            .envs(cmd.inject.iter().map(|(k, v)| (k, v.expose())))
            .current_dir(&cmd.cwd)
            .stdin(match &cmd.stdin {
                Some(path) => Stdio::from(super::open_stdin(path)?),
                None => Stdio::null(),
            })
            .stdout(Stdio::from(out_w))
            .stderr(Stdio::from(err_w));
        // SAFETY: only async-signal-safe calls (setpgid, prctl, getppid, kill) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
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
                // loopexec died between fork and prctl: do not outlive it.
                if libc::getppid() != parent {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
                Ok(())
            });
        }
        let started = Instant::now();
        let cpu_before = children_cpu();
        let spawned = command.spawn();
        drop(command); // closes our copies of the write ends
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                drop((out_r, err_r));
                let empty_r = pipe()?;
                let empty_e = pipe()?;
                drop((empty_r.1, empty_e.1));
                let output = capture.start(empty_r.0, empty_e.0)?.finish()?;
                return Ok(ZoneRun {
                    ending: Ending::FailedToStart {
                        reason: e.to_string(),
                    },
                    duration: started.elapsed(),
                    output,
                    usage: ZoneUsage::default(),
                    enforcement: None,
                });
            }
        };
        let mut running = capture.start(out_r, err_r)?;
        let pid = Pid::from_raw(child.id() as i32);
        let deadline = cmd.timeout.map(|t| started + t);
        let mut host_command = HostCommand {
            pid,
            reaped_cpu_before: cpu_before,
        };
        let ending = match watch(
            &mut host_command,
            pid.as_raw(),
            &mut running,
            started,
            deadline,
            &cmd.liveness,
        )? {
            Watched::Exited(ending) | Watched::Stopped(ending) => ending,
        };
        let duration = started.elapsed();
        reap::kill_remaining_descendants().map_err(ZoneError::Reap)?;
        let usage = ZoneUsage {
            cpu: Some(children_cpu().saturating_sub(cpu_before)),
            egress: None,
            outside_attempts: None,
        };
        let output = running.finish()?;
        Ok(ZoneRun {
            ending,
            duration,
            output,
            usage,
            enforcement: None,
        })
    }
}
