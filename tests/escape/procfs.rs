//! Category 5, /proc and /sys: other processes' environ and root, opening any visible process's
//! executable for writing (the zone init is the loopexec binary: runc CVE-2019-5736),
//! sysrq-trigger, core_pattern, kcore, host paths in mountinfo, cgroup and /sys writes. Files are
//! only ever opened, never written; the harness checks the loopexec binary, sysctls and cgroups
//! are unchanged after every run.

use crate::common::{host_control, is_root, Scene, Zone};

refused!(other_processes_environ_has_no_host_secret: "procfs" "other_environ" [|_| "LOOPEXEC_ESCAPE_SECRET="] => ["absent_in_"]);
refused!(other_processes_root_does_not_reach_the_host: "procfs" "other_root" [|s: &Scene| Scene::s(&s.secret)] => ["ENOENT", "EACCES"]);
refused!(no_process_executable_can_be_opened_for_writing: "procfs" "overwrite_exe" [] => ["ETXTBSY", "EACCES", "EROFS", "EPERM", "ENOENT"]);
refused!(other_processes_descriptors_cannot_be_opened: "procfs" "other_fds" [] => ["EACCES", "EPERM", "ENOENT"]);
refused!(sysrq_trigger_cannot_be_opened_for_writing: "procfs" "sysrq_trigger" [] => ["EACCES", "EROFS", "ENOENT", "EPERM"]);
refused!(core_pattern_cannot_be_opened_for_writing: "procfs" "core_pattern" [] => ["EACCES", "EROFS", "ENOENT", "EPERM"]);
refused!(kcore_cannot_be_opened: "procfs" "kcore" [] => ["EACCES", "ENOENT", "EPERM"]);
refused!(cgroupfs_cannot_be_written: "procfs" "cgroup_write" [] => ["EACCES", "EROFS", "ENOENT", "EPERM"]);
refused!(host_critical_proc_knobs_cannot_be_opened_for_writing: "procfs" "proc_knobs" [] => ["EACCES", "EROFS", "EPERM"]);
refused!(sys_knobs_cannot_be_opened_for_writing: "procfs" "sys_write" [] => ["EACCES", "EROFS", "ENOENT", "EPERM"]);

#[test]
fn mountinfo_shows_no_ungranted_host_path() {
    let scene = Scene::new();
    let repo = env!("CARGO_MANIFEST_DIR").to_string();
    let outside = Scene::s(&scene.outside);
    let mut paths = vec![repo, outside];
    // $HOME too, unless the scene itself lives beneath it (then it is granted).
    if let Some(home) = std::env::var_os("HOME").map(std::path::PathBuf::from) {
        if home.components().count() > 1 && !scene.root().starts_with(&home) {
            paths.push(Scene::s(&home));
        }
    }
    let mut args = vec!["mountinfo_host_paths"];
    args.extend(paths.iter().map(|p| p.as_str()));
    Zone::new(&scene)
        .run("procfs", &args)
        .assert_blocked("mountinfo_host_paths", &["none_of_"]);
}

#[test]
fn host_control_environ_secret_is_detected() {
    let scene = Scene::new();
    host_control(
        &scene,
        "procfs",
        &["other_environ", "LOOPEXEC_ESCAPE_SECRET="],
    )
    .assert_escaped("other_environ");
}

#[test]
fn host_control_kcore_is_readable_by_root_when_the_kernel_has_it() {
    // As root the host control must see the attack work; unprivileged, the host refuses it too.
    let scene = Scene::new();
    let run = host_control(&scene, "procfs", &["kcore"]);
    if !std::path::Path::new("/proc/kcore").exists() {
        // Kernel built without CONFIG_PROC_KCORE: nothing to reach, anywhere.
        run.assert_blocked("kcore", &["ENOENT"]);
    } else if is_root() {
        run.assert_escaped("kcore");
    } else {
        run.assert_blocked("kcore", &["EACCES", "EPERM"]);
    }
}
