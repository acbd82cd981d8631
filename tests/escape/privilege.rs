//! Category 13, privilege: NoNewPrivs=1 and every capability set empty, executing a setuid-root
//! file (root runs only: an unprivileged test cannot create one), chmod u+s / g+s, mknod,
//! /dev/mem, /dev/port, /dev/kmsg, switching uid, raising capabilities.

use crate::common::{host_control, is_root, probe_path, Scene, Zone};
use std::fs;
use std::os::unix::fs::PermissionsExt;

fn rw(s: &Scene) -> String {
    Scene::s(&s.rw)
}

#[test]
fn no_new_privs_is_set_and_every_capability_set_is_empty() {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("privilege", &["status"])
        .assert_blocked("status", &["no_new_privs_and_no_capabilities"]);
}

#[test]
fn host_control_status_shows_privileges_outside_a_zone() {
    // The test process has no_new_privs unset (and, as root, capabilities).
    let scene = Scene::new();
    host_control(&scene, "privilege", &["status"]).assert_escaped("status");
}

#[test]
fn host_control_device_nodes_open_for_root_outside_a_zone() {
    // As root the host control opens at least one of them. Unprivileged it opens what the host's
    // own modes allow (udev's default rules make /dev/net/tun 0666, for one): the control escapes
    // exactly when this user can open one of the probe's nodes itself, and is refused otherwise.
    let scene = Scene::new();
    let run = host_control(&scene, "privilege", &["dev_nodes"]);
    if is_root() || any_probe_node_opens_here() {
        run.assert_escaped("dev_nodes");
    } else {
        run.assert_blocked("dev_nodes", &["ENOENT", "EACCES", "EPERM"]);
    }
}

/// Whether this process opens one of the device nodes the `dev_nodes` probe tries (the list of
/// probes/privilege.c), read-only and non-blocking as the probe does.
fn any_probe_node_opens_here() -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    const NODES: [&str; 13] = [
        "/dev/userfaultfd",
        "/dev/kvm",
        "/dev/net/tun",
        "/dev/fuse",
        "/dev/vhost-net",
        "/dev/vhost-vsock",
        "/dev/loop-control",
        "/dev/mapper/control",
        "/dev/vda",
        "/dev/sda",
        "/dev/nvme0n1",
        "/dev/xvda",
        "/dev/dri/card0",
    ];
    NODES.iter().any(|node| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(node)
            .is_ok()
    })
}

#[test]
fn setuid_file_in_a_caller_owned_grant_is_refused() {
    // As root, a root-owned writable grant is never attached idmapped (what the zone created there
    // would be root's on the host, a set-id bit making a setuid-root binary): the launch is refused
    // with the fix. Unprivileged, the zone runs as the caller and seccomp refuses the set-id bits.
    let scene = Scene::with_caller_owned_grant();
    let rw = Scene::s(&scene.rw);
    let run = Zone::new(&scene).run("privilege", &["chmod_setuid", &rw]);
    let file = scene.rw.join("suid-file");
    if let Ok(md) = std::fs::metadata(&file) {
        use std::os::unix::fs::MetadataExt;
        assert!(
            md.mode() & 0o6000 == 0,
            "ESCAPE: {} is mode {:o}, owner uid {} on the host",
            file.display(),
            md.mode() & 0o7777,
            md.uid()
        );
    }
    if is_root() {
        assert_eq!(run.status.code(), Some(20), "{}", run.stderr);
        assert!(
            run.stderr.contains("never mapped onto root"),
            "{}",
            run.stderr
        );
        assert!(!file.exists(), "nothing was created in the grant");
    } else {
        run.assert_blocked("chmod_setuid", &["EPERM", "bits_silently_dropped"]);
    }
}

#[test]
fn file_capabilities_cannot_be_set_in_a_caller_owned_grant() {
    // As root a root-owned grant is refused at launch (never idmapped onto root); unprivileged
    // the zone cannot set file capabilities (no CAP_SETFCAP anywhere).
    let scene = Scene::with_caller_owned_grant();
    let rw = Scene::s(&scene.rw);
    let run = Zone::new(&scene).run("privilege", &["setfcap", &rw]);
    if is_root() {
        assert_eq!(run.status.code(), Some(20), "{}", run.stderr);
        assert!(
            run.stderr.contains("never mapped onto root"),
            "{}",
            run.stderr
        );
    } else {
        run.assert_blocked("setfcap", &["EPERM", "EACCES", "EOPNOTSUPP"]);
    }
    let file = scene.rw.join("fcap-file");
    let mut buf = [0u8; 64];
    let c = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: reads an xattr into a local buffer.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert!(
        n < 0,
        "ESCAPE: {} carries file capabilities on the host",
        file.display()
    );
}

#[test]
fn host_control_file_capabilities_are_settable_by_root() {
    // As root the host control sets them; unprivileged, the host refuses too.
    let scene = Scene::new();
    let rw = Scene::s(&scene.rw);
    let run = host_control(&scene, "privilege", &["setfcap", &rw]);
    if is_root() {
        run.assert_escaped("setfcap");
    } else {
        run.assert_blocked("setfcap", &["EPERM"]);
    }
}

#[test]
fn setuid_root_binary_grants_nothing() {
    let scene = Scene::new();
    let dir = scene.root().join("suid");
    fs::create_dir(&dir).expect("mkdir suid");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let target = dir.join("suid-probe");
    fs::copy(probe_path("privilege"), &target).expect("copy probe");
    if is_root() {
        std::os::unix::fs::chown(&target, Some(0), Some(0)).expect("chown root");
    }
    fs::set_permissions(&target, fs::Permissions::from_mode(0o4755)).expect("chmod u+s");
    let run = Zone::new(&scene)
        .ro(&dir)
        .run("privilege", &["setuid_exec", &Scene::s(&target)]);
    // Unprivileged, the file is setuid to the caller, which the zone maps to itself: still nothing.
    run.assert_blocked(
        "setuid_exec",
        &["ids_unchanged", "exec_EACCES", "exec_EPERM", "stat_ENOENT"],
    );
}

refused!(chmod_setuid_in_the_grant_is_refused: "privilege" "chmod_setuid" [rw] => ["EPERM", "bits_silently_dropped"]);
refused!(chown_to_root_in_the_grant_is_refused: "privilege" "chown_root" [rw] => ["EPERM", "EINVAL"]);
refused!(chmod_of_a_device_node_is_refused: "privilege" "chmod_device" [] => ["EPERM", "EROFS", "EACCES"]);
refused!(mknod_char_device_is_refused: "privilege" "mknod_char" [rw] => ["EPERM"]);
refused!(mknod_block_device_is_refused: "privilege" "mknod_block" [rw] => ["EPERM"]);
refused!(kernel_surface_and_disk_device_nodes_cannot_be_opened: "privilege" "dev_nodes" [] => ["ENOENT", "EACCES", "EPERM"]);
refused!(dev_mem_cannot_be_opened: "privilege" "dev_mem" [] => ["ENOENT", "EACCES", "EPERM"]);
refused!(dev_port_cannot_be_opened: "privilege" "dev_port" [] => ["ENOENT", "EACCES", "EPERM"]);
refused!(dev_kmsg_cannot_be_read: "privilege" "dev_kmsg_read" [] => ["ENOENT", "EACCES", "EPERM"]);
refused!(dev_kmsg_cannot_be_written: "privilege" "dev_kmsg_write" [] => ["ENOENT", "EACCES", "EPERM"]);
refused!(switching_to_another_uid_is_refused: "privilege" "setresuid_other" [] => ["EPERM", "EINVAL"]);
refused!(raising_capabilities_is_refused: "privilege" "capset_raise" [] => ["EPERM"]);
