//! The zone's optional time namespace: its monotonic and boot clocks (CLOCK_MONOTONIC,
//! CLOCK_BOOTTIME and their variants, /proc/uptime) offset by a number of seconds.
//!
//! The kernel's rules decide the order. A process never changes its own time namespace:
//! unshare(CLONE_NEWTIME) only sets the one its *next children* are born into
//! (`/proc/self/ns/time_for_children`), and that namespace's offsets can be written to
//! `/proc/self/timens_offsets` only before any process is in it. So the zone init, which holds its
//! namespace capabilities (CAP_SYS_ADMIN to unshare, CAP_SYS_TIME to write the offsets, both in
//! the zone's user namespace, which then owns the time namespace: the same path for root and
//! unprivileged callers), unshares and writes the offsets right before it forks the command. The
//! init itself stays on the host's clocks; the command and everything it starts see the offset.
//! CLOCK_REALTIME (the wall clock) cannot be namespaced by Linux and is never moved.

use crate::error::SandboxError;

/// Largest offset accepted, either way: ten years (the kernel refuses offsets that would take a
/// clock below zero or past its range; ten years stays far inside both for a positive offset).
pub const MAX_OFFSET_S: i64 = 10 * 365 * 86_400;

/// Whether this kernel has time namespaces (Linux >= 5.6 built with CONFIG_TIME_NS).
pub fn supported() -> bool {
    std::path::Path::new("/proc/self/ns/time").exists()
}

/// Supervisor side (step 1): refuse an offset this host cannot apply, or one out of range.
pub(crate) fn check_offset(offset_s: Option<i64>, kernel: &str) -> Result<(), SandboxError> {
    let Some(s) = offset_s else { return Ok(()) };
    if !(-MAX_OFFSET_S..=MAX_OFFSET_S).contains(&s) {
        return Err(SandboxError::Spec(format!(
            "a clock offset of {s} s is out of range (at most {MAX_OFFSET_S} s either way)"
        )));
    }
    let ran_s = host_monotonic_s();
    if s < 0 && s.unsigned_abs() >= ran_s.unsigned_abs() {
        return Err(SandboxError::Spec(format!(
            "a clock offset of {s} s would take the zone's monotonic clock below zero (the host's has run {ran_s} s)"
        )));
    }
    if !supported() {
        return Err(SandboxError::TimeNamespaceUnsupported {
            cause: format!("a clock offset of {s} s was requested, but kernel {kernel} has no time namespaces (/proc/self/ns/time is missing)"),
        });
    }
    Ok(())
}

/// Whole seconds the host's monotonic clock has run (its boot clock is never behind it, so this
/// bounds how far back both can be offset: the kernel refuses an offset below zero).
fn host_monotonic_s() -> i64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the kernel to fill; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec
}

/// Zone side, in the zone init right before it forks the command: a new time namespace for the
/// children with the monotonic and boot clocks offset by `offset_s` seconds. Also for callers
/// that run commands without a zone (loopexec's `--isolation none` probe runs), from a
/// single-threaded process holding CAP_SYS_ADMIN and CAP_SYS_TIME in its user namespace.
pub fn offset_for_children(offset_s: i64) -> std::io::Result<()> {
    nix::sched::unshare(nix::sched::CloneFlags::from_bits_retain(
        libc::CLONE_NEWTIME,
    ))
    .map_err(std::io::Error::from)?;
    std::fs::write(
        "/proc/self/timens_offsets",
        format!("monotonic {offset_s} 0\nboottime {offset_s} 0\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_offset_needs_nothing_of_the_host() {
        assert!(check_offset(None, "any").is_ok());
    }

    #[test]
    fn an_offset_beyond_ten_years_is_refused_naming_it() {
        let e = check_offset(Some(MAX_OFFSET_S + 1), "6.1").unwrap_err();
        assert!(
            matches!(e, SandboxError::Spec(ref m) if m.contains(&(MAX_OFFSET_S + 1).to_string())),
            "{e}"
        );
    }

    #[test]
    fn a_negative_offset_beyond_the_hosts_uptime_is_refused_before_the_zone_starts() {
        let e = check_offset(Some(-(host_monotonic_s() + 1)), "6.1").unwrap_err();
        assert!(
            matches!(e, SandboxError::Spec(ref m) if m.contains("below zero")),
            "{e}"
        );
    }
}
