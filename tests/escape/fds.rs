//! Category 6, inherited file descriptors: the harness leaks a host file (the secret) as fd 9 and
//! a unix socket as fd 10 into loopexec without CLOEXEC; the zone must see only stdio.

use crate::common::{Scene, Zone, LEAKED_FILE_FD};
use std::os::unix::fs::PermissionsExt;

#[test]
fn only_stdio_reaches_the_zone() {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("fds", &["open_fds"])
        .assert_blocked("open_fds", &["only_stdio"]);
}

#[test]
fn leaked_host_file_descriptor_is_closed() {
    let scene = Scene::new();
    let fd = LEAKED_FILE_FD.to_string();
    Zone::new(&scene)
        .run("fds", &["read_leaked_fd", &fd])
        .assert_blocked("read_leaked_fd", &["EBADF"]);
}

/// An operator's log outside the grant, 0600, with earlier content, given to loopexec as stderr.
fn scene_with_log() -> (Scene, std::path::PathBuf) {
    let scene = Scene::new();
    let log = scene.outside.join("operator.log");
    std::fs::write(&log, "earlier output the zone never wrote\n").expect("write log");
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600)).expect("chmod log");
    (scene, log)
}

#[test]
fn a_write_only_stdio_file_cannot_be_reopened_for_reading() {
    let (scene, log) = scene_with_log();
    Zone::new(&scene)
        .stderr_to_file(&log)
        .run("fds", &["stdio_reopen_read", "2"])
        .assert_blocked(
            "stdio_reopen_read",
            &[
                "EACCES",
                "EPERM",
                "ENXIO",
                "read_EBADF",
                "relayed_through_a_pipe",
            ],
        );
}

#[test]
fn a_stdio_file_mode_cannot_be_changed() {
    // The harness also checks the log's mode is unchanged (it lies in `outside/`).
    let (scene, log) = scene_with_log();
    Zone::new(&scene)
        .stderr_to_file(&log)
        .run("fds", &["stdio_fchmod", "2"])
        .assert_blocked("stdio_fchmod", &["EPERM", "relayed_through_a_pipe"]);
}

#[test]
fn a_stdio_file_cannot_be_truncated() {
    // The operator opened the log for appending; what it held before the zone must survive.
    let (scene, log) = scene_with_log();
    Zone::new(&scene)
        .stderr_to_file(&log)
        .run("fds", &["stdio_truncate", "2"])
        .assert_blocked("stdio_truncate", &["EPERM", "EINVAL", "EACCES"]);
}
