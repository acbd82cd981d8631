//! Category 1, terminal injection: TIOCSTI / TIOCLINUX, also with the upper 32 bits of the request
//! set (the kernel ignores them; a 64-bit compare in seccomp would not), and opening /dev/tty.
//! `loopexec sandbox` gives the zone /dev/null as stdin but passes stdout/stderr through, so an
//! operator's terminal reaches the zone there: the harness hands the zone a pty it owns as stderr
//! and attacks fd 2. The same ioctls on fd 0 (/dev/null, where the kernel itself would answer
//! ENOTTY) prove the refusal comes from the seccomp filter. No host control: injecting into a
//! terminal is never run outside a zone.

use crate::common::{Run, Scene, Zone};

fn on_pty(attempt: &str, fd: &str) -> Run {
    let scene = Scene::new();
    Zone::new(&scene)
        .stderr_pty()
        .run("terminal", &[attempt, fd])
}

#[test]
fn the_terminal_reaches_the_zone_on_stderr_so_ioctl_tests_are_meaningful() {
    on_pty("is_tty", "2").assert_ok("is_tty");
}

#[test]
fn tiocsti_on_the_terminal_is_refused_with_eperm() {
    on_pty("tiocsti", "2").assert_blocked("tiocsti", &["EPERM"]);
}

#[test]
fn tiocsti_with_high_bits_on_the_terminal_is_refused_with_eperm() {
    on_pty("tiocsti_high_bits", "2").assert_blocked("tiocsti_high_bits", &["EPERM"]);
}

#[test]
fn tioclinux_on_the_terminal_is_refused_with_eperm() {
    on_pty("tioclinux", "2").assert_blocked("tioclinux", &["EPERM"]);
}

#[test]
fn tioclinux_with_high_bits_on_the_terminal_is_refused_with_eperm() {
    on_pty("tioclinux_high_bits", "2").assert_blocked("tioclinux_high_bits", &["EPERM"]);
}

#[test]
fn tiocsti_is_refused_by_the_filter_before_the_tty_layer() {
    on_pty("tiocsti", "0").assert_blocked("tiocsti", &["EPERM"]);
}

#[test]
fn tiocsti_with_high_bits_is_refused_by_the_filter_before_the_tty_layer() {
    on_pty("tiocsti_high_bits", "0").assert_blocked("tiocsti_high_bits", &["EPERM"]);
}

#[test]
fn tioclinux_is_refused_by_the_filter_before_the_tty_layer() {
    on_pty("tioclinux", "0").assert_blocked("tioclinux", &["EPERM"]);
}

#[test]
fn tioclinux_with_high_bits_is_refused_by_the_filter_before_the_tty_layer() {
    on_pty("tioclinux_high_bits", "0").assert_blocked("tioclinux_high_bits", &["EPERM"]);
}

#[test]
fn dev_tty_cannot_be_opened() {
    // The command runs in a new session: no controlling terminal (ENXIO), or no /dev/tty at all.
    on_pty("dev_tty", "2").assert_blocked("dev_tty", &["ENXIO", "ENOENT", "EACCES"]);
}

#[test]
fn the_terminal_device_mode_cannot_be_changed() {
    // The zone gets a pseudo-terminal of loopexec's own, never the operator's: whatever the probe
    // does to its tty, the operator's device keeps its mode.
    let run = on_pty("chmod_tty", "2");
    assert!(
        run.terminal_changes.is_empty(),
        "ESCAPE: the operator's terminal changed: {:?}",
        run.terminal_changes
    );
}

#[test]
fn operator_keystrokes_cannot_be_read_from_the_terminal() {
    // The zone is not in the terminal's session, but it holds the terminal (stderr, opened
    // read-write like every shell's terminal fd): what the operator types must not reach it.
    let scene = Scene::new();
    Zone::new(&scene)
        .stderr_pty()
        .type_on_pty(b"hunter2\n")
        .run("terminal", &["read_tty", "2"])
        .assert_blocked(
            "read_tty",
            &[
                "nothing_arrived",
                "read_EIO",
                "read_EPERM",
                "read_EBADF",
                "poll_",
            ],
        );
}

#[test]
fn the_terminal_settings_cannot_be_changed() {
    // As above: echo switched off on the zone's own pty leaves the operator's terminal as it was.
    let run = on_pty("tty_settings", "2");
    assert!(
        run.terminal_changes.is_empty(),
        "ESCAPE: the operator's terminal changed: {:?}",
        run.terminal_changes
    );
}
