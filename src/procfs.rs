//! What `/proc` and the cgroup filesystem say about a process, a process group or a cgroup, read
//! bounded and parsed without trusting it: a process's start time (field 22 of `/proc/PID/stat`,
//! which with the pid names one process for its whole life), its process group, its CPU time, the
//! cgroup it is in, and a cgroup's CPU time and members. The liveness machinery (the zones' CPU
//! samples, the heartbeat's identities, `watch --kill`'s checks before it signals) reads through
//! here; nothing here signals or writes.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// At most this many bytes of one `/proc` or cgroup file are read (a `stat` line is far shorter;
/// `cgroup.procs` of a zone lists a few pids).
const MAX_READ: u64 = 64 * 1024;

fn read_bounded(path: &Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_READ).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The fields of `/proc/PID/stat` after the parenthesised command name (which may itself hold
/// spaces and parentheses): index 0 is field 3 (`state`).
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = read_bounded(Path::new(&format!("/proc/{pid}/stat")))?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_string).collect())
}

/// Field `n` (1-based, as proc(5) numbers them) of `/proc/PID/stat`, as a number.
fn stat_field(fields: &[String], n: usize) -> Option<u64> {
    fields.get(n.checked_sub(3)?)?.parse().ok()
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

fn ticks(n: u64) -> Duration {
    Duration::from_micros(n.saturating_mul(1_000_000) / clock_ticks())
}

/// The start time of process `pid` (field 22 of its stat, in clock ticks since boot): `None` when
/// there is no such process (or it is a zombie whose stat is gone).
pub fn start_time(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    stat_field(&stat_fields(pid)?, 22)
}

/// Whether `pid` is alive and is the process that started at `start` (not a reused pid). A
/// zombie counts as gone.
pub fn is_same_process(pid: i32, start: u64) -> bool {
    match stat_fields(pid) {
        Some(fields) => {
            fields.first().map(String::as_str) != Some("Z")
                && stat_field(&fields, 22) == Some(start)
        }
        None => false,
    }
}

/// Whether `pid` is stopped (state `T`: SIGSTOP, or `t`: traced).
pub fn is_stopped(pid: i32) -> bool {
    stat_fields(pid).is_some_and(|f| matches!(f.first().map(String::as_str), Some("T") | Some("t")))
}

/// Every live process whose process group is `pgid`, with its start time.
pub fn group_members(pgid: i32) -> Vec<(i32, u64)> {
    let mut members = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return members;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Some(fields) = stat_fields(pid) else {
            continue;
        };
        if fields.first().map(String::as_str) == Some("Z") {
            continue;
        }
        if stat_field(&fields, 5) == Some(pgid as u64) {
            if let Some(start) = stat_field(&fields, 22) {
                members.push((pid, start));
            }
        }
    }
    members
}

/// CPU time (user + system, its reaped children's included) of every live process of group
/// `pgid`.
pub fn group_cpu(pgid: i32) -> Duration {
    let mut total = 0u64;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Some(fields) = stat_fields(pid) else {
            continue;
        };
        if stat_field(&fields, 5) != Some(pgid as u64) {
            continue;
        }
        // utime, stime, cutime, cstime: fields 14 to 17.
        total = total.saturating_add((14..=17).filter_map(|n| stat_field(&fields, n)).sum());
    }
    ticks(total)
}

/// CPU time (user + system, its reaped children's included) of each live process of `pids`,
/// summed (a cgroup whose CPU controller is not accounted for it: its `cgroup.procs`).
pub fn pids_cpu(pids: &[i32]) -> Duration {
    let total: u64 = pids
        .iter()
        .filter_map(|&pid| stat_fields(pid))
        .map(|f| (14..=17).filter_map(|n| stat_field(&f, n)).sum::<u64>())
        .sum();
    ticks(total)
}

/// The CPU time a cgroup's processes used so far: `usage_usec` of `cpu.stat` (v2), else
/// `cpuacct.usage` (v1, nanoseconds). `None` when neither can be read.
pub fn cgroup_cpu(dir: &Path) -> Option<Duration> {
    if let Some(stat) = read_bounded(&dir.join("cpu.stat")) {
        let usec = stat
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(usec) = usec {
            return Some(Duration::from_micros(usec));
        }
    }
    let ns = read_bounded(&dir.join("cpuacct.usage"))?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(Duration::from_nanos(ns))
}

/// The pids listed in a cgroup's `cgroup.procs` (`None`: the cgroup is gone or unreadable).
pub fn cgroup_procs(dir: &Path) -> Option<Vec<i32>> {
    let text = read_bounded(&dir.join("cgroup.procs"))?;
    Some(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// The cgroup directories process `pid` is in, as `/proc/PID/cgroup` names them, under the
/// mount `root` (normally `/sys/fs/cgroup`): v2's one line (`0::/path`) gives `root/path`; a v1
/// line with a controller list gives `root/<controllers>/path`.
pub fn cgroups_of(pid: i32, root: &Path) -> Vec<PathBuf> {
    let Some(text) = read_bounded(Path::new(&format!("/proc/{pid}/cgroup"))) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let rel = path.trim_start_matches('/');
            Some(if controllers.is_empty() {
                root.join(rel)
            } else {
                root.join(controllers).join(rel)
            })
        })
        .collect()
}

/// The cgroup filesystem's usual mount point.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_the_same_process_as_its_own_start_time_says() {
        let me = std::process::id() as i32;
        let start = start_time(me).unwrap();
        assert!(is_same_process(me, start));
        assert!(!is_same_process(me, start + 1));
    }

    #[test]
    fn no_process_has_pid_zero() {
        assert_eq!(start_time(0), None);
        assert_eq!(start_time(-5), None);
    }

    #[test]
    fn a_cgroup_directory_that_does_not_exist_has_no_cpu_and_no_procs() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_cpu(&dir.path().join("gone")), None);
        assert_eq!(cgroup_procs(&dir.path().join("gone")), None);
    }

    #[test]
    fn a_v2_cpu_stat_gives_its_usage_usec() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cpu.stat"),
            "usage_usec 1500000\nuser_usec 1000000\n",
        )
        .unwrap();
        assert_eq!(cgroup_cpu(dir.path()), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn a_v1_cpuacct_usage_gives_its_nanoseconds() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cpuacct.usage"), "2500000000\n").unwrap();
        assert_eq!(cgroup_cpu(dir.path()), Some(Duration::from_millis(2500)));
    }
}
