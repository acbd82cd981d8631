//! Category 2, nested namespaces: unshare and clone with every namespace flag, clone3 (answered
//! ENOSYS so libc falls back to clone, whose flags seccomp can read), setns through /proc/*/ns.

use crate::common::{host_control, Scene, Zone};

refused!(unshare_user_namespace_is_refused: "namespaces" "unshare" [|_| "user"] => ["EPERM"]);
refused!(unshare_mount_namespace_is_refused: "namespaces" "unshare" [|_| "mount"] => ["EPERM"]);
refused!(unshare_net_namespace_is_refused: "namespaces" "unshare" [|_| "net"] => ["EPERM"]);
refused!(unshare_pid_namespace_is_refused: "namespaces" "unshare" [|_| "pid"] => ["EPERM"]);
refused!(unshare_ipc_namespace_is_refused: "namespaces" "unshare" [|_| "ipc"] => ["EPERM"]);
refused!(unshare_uts_namespace_is_refused: "namespaces" "unshare" [|_| "uts"] => ["EPERM"]);
refused!(unshare_cgroup_namespace_is_refused: "namespaces" "unshare" [|_| "cgroup"] => ["EPERM"]);
refused!(unshare_time_namespace_is_refused: "namespaces" "unshare" [|_| "time"] => ["EPERM"]);
refused!(clone_with_new_user_namespace_is_refused: "namespaces" "clone" [|_| "user"] => ["EPERM"]);
refused!(clone_with_new_mount_namespace_is_refused: "namespaces" "clone" [|_| "mount"] => ["EPERM"]);
refused!(clone_with_new_net_namespace_is_refused: "namespaces" "clone" [|_| "net"] => ["EPERM"]);
refused!(clone_with_new_pid_namespace_is_refused: "namespaces" "clone" [|_| "pid"] => ["EPERM"]);
refused!(clone3_is_answered_enosys: "namespaces" "clone3" [] => ["ENOSYS"]);
refused!(setns_into_any_visible_namespace_is_refused: "namespaces" "setns" [] => ["EPERM"]);

#[test]
fn sethostname_does_not_reach_the_host() {
    // The harness's host snapshot includes kernel.hostname and kernel.domainname.
    let scene = Scene::new();
    let run = Zone::new(&scene).run("namespaces", &["sethostname"]);
    match &run.verdict {
        crate::common::Verdict::Ok { .. } => {}
        _ => run.assert_blocked("sethostname", &["EPERM"]),
    }
}

#[test]
fn plain_fork_still_works_in_the_zone() {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("namespaces", &["plain_fork_works"])
        .assert_ok("plain_fork_works");
}

#[test]
fn host_control_unshare_user_namespace_is_detected() {
    // Harmless on the host: the new user namespace dies with the probe.
    let scene = Scene::new();
    host_control(&scene, "namespaces", &["unshare", "user"]).assert_escaped("unshare");
}

#[test]
fn host_control_clone3_is_detected() {
    let scene = Scene::new();
    host_control(&scene, "namespaces", &["clone3"]).assert_escaped("clone3");
}
