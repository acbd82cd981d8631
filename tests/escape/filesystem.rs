//! Category 7, filesystem tricks: symlinks and hardlinks made in the writable grant that point at
//! host files (the scene's secret outside the grant, /etc/shadow), `..` out of the grant, writes
//! to ungranted paths. Host controls prove the same probe reads the secret when unsandboxed.

use crate::common::{host_control, Scene, Zone};

fn rw(s: &Scene) -> String {
    Scene::s(&s.rw)
}
fn secret(s: &Scene) -> String {
    Scene::s(&s.secret)
}

refused!(ungranted_host_file_is_unreadable: "filesystem" "read_path" [rw, secret] => ["ENOENT", "EACCES"]);
refused!(symlink_in_grant_to_host_secret_reads_nothing: "filesystem" "symlink_read" [rw, secret] => ["ENOENT", "EACCES"]);
refused!(relative_symlink_out_of_the_grant_reads_nothing: "filesystem" "relative_symlink_read" [rw, |_| "../outside/secret"] => ["ENOENT", "EACCES"]);
refused!(symlink_in_grant_to_etc_shadow_reads_nothing: "filesystem" "symlink_read" [rw, |_| "/etc/shadow"] => ["ENOENT", "EACCES"]);
refused!(hardlink_of_host_secret_into_grant_is_refused: "filesystem" "hardlink" [rw, secret] => ["ENOENT", "EACCES", "EXDEV", "EPERM"]);
refused!(dotdot_out_of_the_grant_reads_nothing: "filesystem" "dotdot_read" [rw, |_| "../outside/secret"] => ["ENOENT", "EACCES"]);
refused!(dotdot_out_of_the_grant_creates_nothing: "filesystem" "dotdot_create" [rw, |_| "../outside/planted"] => ["ENOENT", "EACCES", "EROFS"]);
refused!(ungranted_host_file_cannot_be_opened_for_writing: "filesystem" "write_path" [rw, secret] => ["ENOENT", "EACCES", "EROFS"]);
refused!(symlink_in_grant_to_host_secret_cannot_be_written: "filesystem" "symlink_write" [rw, secret] => ["ENOENT", "EACCES", "EROFS"]);
refused!(system_files_cannot_be_opened_for_writing: "filesystem" "write_path" [rw, |_| "/etc/passwd"] => ["EROFS", "EACCES"]);
refused!(system_dirs_cannot_be_written: "filesystem" "create_path" [rw, |_| "/usr/bin/loopexec-escape-planted"] => ["EROFS", "EACCES"]);
refused!(read_only_grant_cannot_be_written: "filesystem" "create_path" [rw, |_| crate::common::probe_dir().join("planted").display().to_string()] => ["EROFS", "EACCES"]);
refused!(root_of_the_zone_cannot_be_written: "filesystem" "create_path" [rw, |_| "/planted"] => ["EROFS", "EACCES"]);

#[test]
fn read_only_grant_nested_in_the_writable_grant_stays_read_only() {
    // Landlock rules add up (rw on the parent would allow writes below); the mount order must not.
    let scene = Scene::new();
    let nested = scene.rw.join("vendor");
    std::fs::create_dir(&nested).expect("mkdir nested");
    scene.grant_rw_to_zone(&nested);
    let rw = Scene::s(&scene.rw);
    let target = Scene::s(&nested.join("planted"));
    let run = Zone::new(&scene)
        .ro(&nested)
        .run("filesystem", &["create_path", &rw, &target]);
    run.assert_blocked("create_path", &["EROFS", "EACCES"]);
    assert!(
        !nested.join("planted").exists(),
        "a file was created in the read-only grant"
    );
}

#[test]
fn the_grant_itself_is_writable() {
    let scene = Scene::new();
    let rw = Scene::s(&scene.rw);
    Zone::new(&scene)
        .run("filesystem", &["rw_works", &rw, "written-by-zone"])
        .assert_ok("rw_works");
    assert_eq!(
        std::fs::read_to_string(scene.rw.join("written-by-zone")).expect("file written in grant"),
        "ok\n"
    );
}

#[test]
fn host_control_symlink_to_secret_is_detected() {
    let scene = Scene::new();
    let (rw, secret) = (Scene::s(&scene.rw), Scene::s(&scene.secret));
    host_control(&scene, "filesystem", &["symlink_read", &rw, &secret])
        .assert_escaped("symlink_read");
}

#[test]
fn host_control_dotdot_is_detected() {
    let scene = Scene::new();
    let rw = Scene::s(&scene.rw);
    host_control(
        &scene,
        "filesystem",
        &["dotdot_read", &rw, "../outside/secret"],
    )
    .assert_escaped("dotdot_read");
}

#[test]
fn host_control_hardlink_is_detected() {
    // The scene's files belong to the test user, so protected_hardlinks allows the link on the host.
    let scene = Scene::new();
    let (rw, secret) = (Scene::s(&scene.rw), Scene::s(&scene.secret));
    host_control(&scene, "filesystem", &["hardlink", &rw, &secret]).assert_escaped("hardlink");
}
