//! Category 15, secrets: environment variables the harness gives loopexec (tokens, SSH_AUTH_SOCK,
//! D-Bus) are absent; the fake ~/.ssh and ~/.aws, the fake state dir's signing key and
//! /etc/shadow are unreadable; the state dir and the ungranted `outside` dir are not visible.

use crate::common::{host_control, is_root, Scene, Zone, SECRET_ENV};

fn read_refused(scene: &Scene, path: &str) {
    Zone::new(scene)
        .run("secrets", &["read_file", path])
        .assert_blocked("read_file", &["ENOENT", "EACCES"]);
}

#[test]
fn operator_environment_secrets_are_absent() {
    let scene = Scene::new();
    let mut args = vec!["env"];
    args.extend(SECRET_ENV);
    Zone::new(&scene)
        .run("secrets", &args)
        .assert_blocked("env", &[&format!("{}_names_absent", SECRET_ENV.len())]);
}

#[test]
fn loader_and_interpreter_variables_do_not_reach_the_zone() {
    let scene = Scene::new();
    let evil = Scene::s(&scene.outside.join("evil.so"));
    let names = [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "BASH_ENV",
        "ENV",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "NODE_OPTIONS",
        "GIT_CONFIG_GLOBAL",
    ];
    let mut zone = Zone::new(&scene);
    for n in names {
        zone = zone.env(n, &evil);
    }
    let mut args = vec!["env"];
    args.extend(names);
    zone.run("secrets", &args)
        .assert_blocked("env", &[&format!("{}_names_absent", names.len())]);
}

#[test]
fn host_control_environment_secret_is_detected() {
    let scene = Scene::new();
    host_control(&scene, "secrets", &["env", "LOOPEXEC_ESCAPE_SECRET"]).assert_escaped("env");
}

#[test]
fn ssh_private_key_in_home_is_unreadable() {
    let scene = Scene::new();
    read_refused(&scene, &Scene::s(&scene.home.join(".ssh/id_ed25519")));
}

#[test]
fn host_control_ssh_private_key_is_detected() {
    let scene = Scene::new();
    let key = Scene::s(&scene.home.join(".ssh/id_ed25519"));
    host_control(&scene, "secrets", &["read_file", &key]).assert_escaped("read_file");
}

#[test]
fn aws_credentials_in_home_are_unreadable() {
    let scene = Scene::new();
    read_refused(&scene, &Scene::s(&scene.home.join(".aws/credentials")));
}

#[test]
fn signing_key_in_the_state_dir_is_unreadable() {
    let scene = Scene::new();
    read_refused(&scene, &Scene::s(&scene.state_dir.join("signing.key")));
}

#[test]
fn etc_shadow_is_unreadable() {
    let scene = Scene::new();
    read_refused(&scene, "/etc/shadow");
}

#[test]
fn host_control_etc_shadow_is_readable_by_root() {
    // As root the host control reads it; unprivileged, the host refuses too.
    let scene = Scene::new();
    let run = host_control(&scene, "secrets", &["read_file", "/etc/shadow"]);
    if is_root() {
        run.assert_escaped("read_file");
    } else {
        run.assert_blocked("read_file", &["EACCES"]);
    }
}

#[test]
fn state_dir_and_ungranted_dirs_are_not_visible() {
    let scene = Scene::new();
    let state = Scene::s(&scene.state_dir);
    let outside = Scene::s(&scene.outside);
    let mut args = vec![
        "visible".to_string(),
        state,
        outside,
        "/root/.ssh".into(),
        "/var/run/docker.sock".into(),
        "/run/dbus".into(),
    ];
    // $HOME too, unless the scene itself lives beneath it (then part of it is granted).
    if let Some(home) = std::env::var_os("HOME").map(std::path::PathBuf::from) {
        if home.components().count() > 1 && !scene.root().starts_with(&home) {
            args.push(Scene::s(&home));
        }
    }
    let args: Vec<&str> = args.iter().map(|a| a.as_str()).collect();
    Zone::new(&scene)
        .run("secrets", &args)
        .assert_blocked("visible", &["ENOENT", "EACCES"]);
}

#[test]
fn hidden_paths_of_the_policy_are_unreadable_inside_the_grant() {
    let scene = Scene::new();
    let secret = scene.rw_file("private/token", crate::common::SECRET_CONTENT);
    let hidden = Scene::s(&scene.rw.join("private"));
    let policy = crate::common::policy_variant(
        scene.root(),
        "exec",
        &[("hidden", &format!("[\"{hidden}\"]"))],
    );
    Zone::new(&scene)
        .policy(&policy)
        .run("secrets", &["read_file", &Scene::s(&secret)])
        .assert_blocked("read_file", &["ENOENT", "EACCES"]);
}
