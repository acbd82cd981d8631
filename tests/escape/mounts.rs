//! Category 3, mounts: mount, umount, pivot_root, chroot and the whole new mount API family.
//! Each test also compares the host's mount table before and after.

use crate::common::{Scene, Zone};

fn host_mounts() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .expect("read host mountinfo")
        .lines()
        .map(|l| l.split(' ').skip(3).take(2).collect::<Vec<_>>().join(" "))
        .collect();
    v.sort();
    v
}

fn refused(attempt: &str, reasons: &[&str]) {
    let before = host_mounts();
    let scene = Scene::new();
    Zone::new(&scene)
        .run("mounts", &[attempt])
        .assert_blocked(attempt, reasons);
    let after = host_mounts();
    let added: Vec<_> = after.iter().filter(|m| !before.contains(m)).collect();
    assert!(added.is_empty(), "host mount table gained {added:?}");
}

#[test]
fn mount_tmpfs_is_refused() {
    refused("mount_tmpfs", &["EPERM"]);
}
#[test]
fn bind_mount_of_root_is_refused() {
    refused("mount_bind_root", &["EPERM"]);
}
#[test]
fn remount_read_write_is_refused() {
    refused("remount_rw", &["EPERM"]);
}
#[test]
fn umount_proc_is_refused() {
    refused("umount_proc", &["EPERM"]);
}
#[test]
fn pivot_root_is_refused() {
    refused("pivot_root", &["EPERM"]);
}
#[test]
fn chroot_is_refused() {
    refused("chroot", &["EPERM"]);
}
#[test]
fn open_tree_is_refused() {
    refused("open_tree", &["EPERM"]);
}
#[test]
fn move_mount_is_refused() {
    refused("move_mount", &["EPERM"]);
}
#[test]
fn fsopen_is_refused() {
    refused("fsopen", &["EPERM"]);
}
#[test]
fn fsmount_is_refused() {
    refused("fsmount", &["EPERM"]);
}
#[test]
fn fsconfig_is_refused() {
    refused("fsconfig", &["EPERM"]);
}
#[test]
fn fspick_is_refused() {
    refused("fspick", &["EPERM"]);
}
#[test]
fn mount_setattr_is_refused() {
    refused("mount_setattr", &["EPERM"]);
}
