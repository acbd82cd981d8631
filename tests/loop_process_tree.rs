//! Zones leave no process behind: timeouts kill the whole tree (a `setsid` double-fork included),
//! and so does a command that exits while its background children still run.
mod common;
use common::*;

#[test]
fn a_timeout_kills_a_setsid_double_forked_grandchild() {
    let dir = workdir();
    let exec = "setsid sh -c 'sleep 300 & echo $! > grandchild.pid; wait' & sleep 300";
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--isolation",
            "none",
            "--exec",
            exec,
            "--check",
            "true",
            "--exec-timeout",
            "2",
        ],
    );
    assert_eq!(r.code, 40, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "execution_failure");
    let pid = read_pid(&dir.path().join("grandchild.pid"));
    assert!(!pid_alive(pid), "grandchild {pid} survived the timeout");
}

#[test]
fn background_children_of_a_finished_command_are_killed() {
    let dir = workdir();
    let exec = "sleep 300 & echo $! > bg.pid";
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--isolation",
            "none",
            "--exec",
            exec,
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 11, "{r:?}");
    let pid = read_pid(&dir.path().join("bg.pid"));
    assert!(
        !pid_alive(pid),
        "background child {pid} survived its command"
    );
}

#[test]
fn a_check_timeout_kills_the_check_tree() {
    let dir = workdir();
    let check = "sh -c 'sleep 300 & echo $! > check-child.pid; wait'";
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            check,
            "--check-timeout",
            "0.5",
        ],
    );
    assert_eq!(r.code, 40, "{r:?}");
    let pid = read_pid(&dir.path().join("check-child.pid"));
    assert!(!pid_alive(pid), "check child {pid} survived the timeout");
}
