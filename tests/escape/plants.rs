//! Category 8, plants for the trusted side: the shipped policies protect `.git/hooks`,
//! `.git/config`, `.gitmodules` and `.loopexec` inside every writable root, existing or not. The
//! zone must not write, replace, move away, chmod or create them; afterwards the host copies are
//! byte-identical and no hook exists that the harness did not put there.

use crate::common::{Scene, Zone};
use std::fs;

const CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n";
const PRE_PUSH: &str = "#!/bin/sh\nexit 0\n";

fn scene_with_git() -> Scene {
    let scene = Scene::new();
    scene.rw_file(".git/config", CONFIG);
    scene.rw_file(".git/hooks/pre-push", PRE_PUSH);
    scene
}

fn assert_git_untouched(scene: &Scene) {
    let git = scene.rw.join(".git");
    assert!(
        fs::symlink_metadata(git.join("hooks"))
            .expect("hooks")
            .is_dir(),
        ".git/hooks was replaced"
    );
    assert_eq!(
        fs::read_to_string(git.join("config")).expect("config"),
        CONFIG,
        ".git/config changed"
    );
    let hooks: Vec<_> = fs::read_dir(git.join("hooks"))
        .expect("hooks")
        .map(|e| e.expect("e").file_name())
        .collect();
    assert_eq!(
        hooks,
        vec![std::ffi::OsString::from("pre-push")],
        "hooks dir content changed"
    );
    assert_eq!(
        fs::read_to_string(git.join("hooks/pre-push")).expect("pre-push"),
        PRE_PUSH
    );
}

fn attempt(scene: &Scene, what: &str, reasons: &[&str]) {
    let rw = Scene::s(&scene.rw);
    Zone::new(scene)
        .run("plants", &[what, &rw])
        .assert_blocked(what, reasons);
}

#[test]
fn git_hook_cannot_be_planted() {
    let scene = scene_with_git();
    attempt(&scene, "write_hook", &["EROFS", "EACCES", "EPERM"]);
    assert_git_untouched(&scene);
}

#[test]
fn git_config_cannot_be_written() {
    let scene = scene_with_git();
    attempt(&scene, "write_git_config", &["EROFS", "EACCES", "EPERM"]);
    assert_git_untouched(&scene);
}

#[test]
fn existing_hook_cannot_be_chmodded() {
    let scene = scene_with_git();
    attempt(&scene, "chmod_hook", &["EROFS", "EACCES", "EPERM"]);
    assert_git_untouched(&scene);
}

#[test]
fn protected_git_dirs_cannot_be_moved_away() {
    let scene = scene_with_git();
    attempt(
        &scene,
        "rename_git_away",
        &["EBUSY", "EROFS", "EACCES", "EPERM", "EXDEV"],
    );
    assert_git_untouched(&scene);
}

#[test]
fn hooks_dir_cannot_be_swapped_for_a_symlink() {
    let scene = scene_with_git();
    attempt(
        &scene,
        "symlink_swap_hooks",
        &["EROFS", "EACCES", "EPERM", "EBUSY"],
    );
    assert_git_untouched(&scene);
}

#[test]
fn git_config_cannot_be_hardlinked_into_the_writable_area() {
    let scene = scene_with_git();
    attempt(
        &scene,
        "hardlink_git_config",
        &["EXDEV", "EPERM", "EACCES", "EROFS"],
    );
    assert_git_untouched(&scene);
    assert!(
        !scene.rw.join("config-link").exists(),
        "a second name for .git/config exists on the host"
    );
}

#[test]
fn git_config_cannot_be_replaced_by_rename() {
    let scene = scene_with_git();
    attempt(
        &scene,
        "rename_over_git_config",
        &["EBUSY", "EROFS", "EACCES", "EPERM", "EXDEV"],
    );
    assert_git_untouched(&scene);
}

/// The documented answer to a protected path that is, or passes through, a symlink in the grant
/// (planted by an earlier zone, say): the launch is refused, naming the symlink, and the command
/// never runs: `isolation_unsatisfiable`, exit 30 (SPEC.md §2).
fn assert_launch_refused(run: &crate::common::Run) {
    assert_eq!(
        run.verdict,
        crate::common::Verdict::Missing,
        "the probe ran: {:?}",
        run.verdict
    );
    assert_eq!(
        run.status.code(),
        Some(30),
        "launch not refused as isolation_unsatisfiable: {:?}\n{}",
        run.status,
        run.stderr
    );
    assert!(
        run.stderr.contains("symlink"),
        "the refusal does not name the symlink: {}",
        run.stderr
    );
}

#[test]
fn symlinked_hooks_dir_refuses_the_launch() {
    let scene = Scene::new();
    let target = scene.outside.join("hooks");
    fs::create_dir(&target).expect("mkdir outside/hooks");
    scene.rw_file(".git/config", CONFIG);
    std::os::unix::fs::symlink(&target, scene.rw.join(".git/hooks")).expect("symlink hooks");
    let rw = Scene::s(&scene.rw);
    let run = Zone::new(&scene).run("plants", &["write_hook", &rw]);
    assert_launch_refused(&run);
    assert_eq!(
        fs::read_dir(&target).expect("outside/hooks").count(),
        0,
        "a hook landed outside the grant"
    );
}

#[test]
fn symlinked_git_dir_refuses_the_launch() {
    let scene = Scene::new();
    let fake = scene.outside.join("fakegit");
    fs::create_dir_all(fake.join("hooks")).expect("mkdir outside/fakegit");
    fs::write(fake.join("config"), CONFIG).expect("write fake config");
    std::os::unix::fs::symlink("../outside/fakegit", scene.rw.join(".git")).expect("symlink .git");
    let rw = Scene::s(&scene.rw);
    let run = Zone::new(&scene).run("plants", &["write_git_config", &rw]);
    assert_launch_refused(&run);
    assert_eq!(
        fs::read_to_string(fake.join("config")).expect("config"),
        CONFIG
    );
}

/// A missing protected path is held by a read-only placeholder (an empty directory) in the zone.
fn write_rel(scene: &Scene, rel: &str) {
    let rw = Scene::s(&scene.rw);
    Zone::new(scene)
        .run("plants", &["write_rel", &rw, rel])
        .assert_blocked(
            "write_rel",
            &["EROFS", "EACCES", "EPERM", "ENOENT", "EISDIR"],
        );
    let host = scene.rw.join(rel);
    assert!(
        fs::symlink_metadata(&host)
            .map(|m| m.len() == 0)
            .unwrap_or(true),
        "{rel} has content on the host"
    );
}

#[test]
fn gitmodules_cannot_be_planted() {
    write_rel(&Scene::new(), ".gitmodules");
}

#[test]
fn loopexec_state_dir_in_the_workspace_cannot_be_planted() {
    write_rel(&Scene::new(), ".loopexec/receipt.jsonl");
}

#[test]
fn protected_paths_cannot_be_created_when_absent_at_start() {
    let scene = Scene::new();
    attempt(
        &scene,
        "create_protected_later",
        &["EROFS", "EACCES", "EPERM", "EEXIST", "ENOENT"],
    );
    assert!(
        !scene.rw.join(".git/hooks/pre-commit").exists(),
        "a hook was created on the host"
    );
    let config = scene.rw.join(".git/config");
    assert!(
        fs::symlink_metadata(&config)
            .map(|m| m.len() == 0)
            .unwrap_or(true),
        ".git/config was created with content on the host"
    );
}
