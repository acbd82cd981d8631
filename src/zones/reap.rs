//! Process-tree removal for zones that run commands as loopexec's own descendants.
//!
//! loopexec makes itself a child subreaper, so every orphaned descendant of a command (including
//! one that called `setsid` and double-forked) is re-parented to loopexec instead of init. After
//! killing a command's process group, [`kill_remaining_descendants`] repeatedly kills and reaps
//! loopexec's remaining children until none is left; each round's victims' own children become
//! loopexec's children and are caught in the next round.

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Make this process the subreaper of its descendants (`PR_SET_CHILD_SUBREAPER`).
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments has no memory effects.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// SIGKILL a whole process group (no error if it is already gone).
pub fn kill_group(pgid: i32) {
    let _ = kill(Pid::from_raw(-pgid), Signal::SIGKILL);
}

/// Reap every exited child without blocking. Returns whether any child (alive) remains.
fn reap_exited() -> Result<bool, Errno> {
    loop {
        match waitpid(
            None::<Pid>,
            Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
        ) {
            Ok(WaitStatus::StillAlive) => return Ok(true),
            Ok(_) => continue,
            Err(Errno::ECHILD) => return Ok(false),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Direct children of this process, read from /proc.
fn own_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut kids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the parenthesised command name: state, ppid, ...
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let ppid = after
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<i32>().ok());
        if ppid == Some(me) {
            kids.push(pid);
        }
    }
    kids
}

/// Kill and reap every remaining descendant of this process. Only call this when every child of
/// loopexec belongs to the command being cleaned up (the engine runs one command at a time).
pub fn kill_remaining_descendants() -> Result<(), String> {
    const MAX_ROUNDS: usize = 10_000;
    for _ in 0..MAX_ROUNDS {
        match reap_exited() {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            Err(e) => return Err(format!("waitpid: {e}")),
        }
        let kids = own_children();
        for &pid in &kids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        for &pid in &kids {
            while let Err(Errno::EINTR) = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::__WALL)) {}
        }
        if kids.is_empty() {
            // A child exists but /proc did not show it yet (just re-parented): yield briefly.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    Err(format!(
        "descendants still present after {MAX_ROUNDS} kill rounds"
    ))
}
