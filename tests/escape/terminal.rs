//! Category 1, terminal injection: TIOCSTI / TIOCLINUX on a terminal stdin, also with the upper
//! 32 bits of the request set (the kernel ignores them; a 64-bit compare in seccomp would not),
//! and opening /dev/tty. No host control: injecting into a terminal is never run outside a zone.

use crate::common::{Scene, Zone};

fn on_pty(attempt: &str) -> crate::common::Run {
    let scene = Scene::new();
    Zone::new(&scene).stdin_pty().run("terminal", &[attempt])
}

#[test]
fn zone_stdin_can_be_a_terminal_so_ioctl_tests_are_meaningful() {
    on_pty("stdin_is_tty").assert_ok("stdin_is_tty");
}

#[test]
fn tiocsti_is_refused_with_eperm() {
    on_pty("tiocsti").assert_blocked("tiocsti", &["EPERM"]);
}

#[test]
fn tiocsti_with_high_bits_set_is_refused_with_eperm() {
    on_pty("tiocsti_high_bits").assert_blocked("tiocsti_high_bits", &["EPERM"]);
}

#[test]
fn tioclinux_is_refused_with_eperm() {
    on_pty("tioclinux").assert_blocked("tioclinux", &["EPERM"]);
}

#[test]
fn tioclinux_with_high_bits_set_is_refused_with_eperm() {
    on_pty("tioclinux_high_bits").assert_blocked("tioclinux_high_bits", &["EPERM"]);
}

#[test]
fn dev_tty_cannot_be_opened() {
    // The zone runs in a new session: no controlling terminal (ENXIO), or no /dev/tty at all.
    on_pty("dev_tty").assert_blocked("dev_tty", &["ENXIO", "ENOENT", "EACCES"]);
}
