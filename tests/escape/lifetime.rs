//! Category 12, lifetime: a double-forked, setsid daemon that ignores SIGHUP/SIGTERM and keeps
//! appending to a heartbeat file in the grant must not survive the zone; neither may the zone
//! survive the supervisor being SIGKILLed. The harness also scans the host's /proc for any
//! process of the zone after every run.

use crate::common::{Scene, Zone};
use std::time::{Duration, Instant};

fn beats(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Wait (at most 10 s) until the heartbeat file holds `n` beats.
fn wait_for_beats(path: &std::path::Path, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while beats(path) < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_heartbeat_stopped(path: &std::path::Path) {
    let first = beats(path);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        beats(path),
        first,
        "a zone process is still writing {}",
        path.display()
    );
}

#[test]
fn double_forked_setsid_daemon_does_not_outlive_the_zone() {
    let scene = Scene::new();
    let hb = scene.rw.join("heartbeat");
    let run = Zone::new(&scene).run("lifetime", &["double_fork_daemon", &Scene::s(&hb)]);
    run.assert_ok("double_fork_daemon");
    assert!(
        beats(&hb) > 0,
        "the daemon never ran, so the test proves nothing"
    );
    assert_heartbeat_stopped(&hb);
}

fn run_and_kill_the_supervisor(scene: &Scene) -> crate::common::Run {
    run_and_signal_the_supervisor(scene, nix::sys::signal::Signal::SIGKILL)
}

fn run_and_signal_the_supervisor(
    scene: &Scene,
    signal: nix::sys::signal::Signal,
) -> crate::common::Run {
    let hb = scene.rw.join("heartbeat");
    let hb_in = hb.clone();
    let run = Zone::new(scene)
        .timeout(Duration::from_secs(30))
        .report_leaked_cgroups()
        .during(move |pid, _| {
            wait_for_beats(&hb_in, 20);
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal)
                .expect("signal loopexec");
        })
        .run("lifetime", &["sleep_with_heartbeat", &Scene::s(&hb)]);
    assert!(
        !run.status.success(),
        "loopexec reported success after {signal}: {:?}",
        run.status
    );
    assert!(
        beats(&hb) >= 20,
        "the zone never ran, so the test proves nothing"
    );
    assert_heartbeat_stopped(&hb);
    run
}

#[test]
fn sigkill_of_the_supervisor_ends_every_zone_process() {
    // The harness fails the run if any zone process is left (scan of the host's /proc).
    let scene = Scene::new();
    run_and_kill_the_supervisor(&scene);
}

fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read rw")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn sigkill_of_the_supervisor_leaves_nothing_in_the_workspace() {
    // The launcher holds missing protected paths (.git, .gitmodules, .loopexec) with placeholder
    // directories in the writable grant for the zone's lifetime. A SIGKILLed supervisor cannot
    // remove them; the next zone start does (like stale cgroups).
    let scene = Scene::new();
    run_and_kill_the_supervisor(&scene);
    assert!(
        scene.rw.join(".git").is_dir(),
        "no placeholder was left, so the test proves nothing"
    );
    Zone::new(&scene)
        .run("privilege", &["status"])
        .assert_blocked("status", &["no_new_privs_and_no_capabilities"]);
    assert_eq!(
        entries(&scene.rw),
        vec!["heartbeat".to_string()],
        "the workspace holds more than the zone wrote"
    );
}

#[test]
fn an_empty_git_the_operator_made_after_a_sigkill_is_never_removed() {
    // Same path as a placeholder the killed supervisor recorded, empty, maybe the same inode
    // number: still the operator's, so the next start leaves it.
    let scene = Scene::new();
    run_and_kill_the_supervisor(&scene);
    std::fs::remove_dir(scene.rw.join(".git")).expect("remove the stale placeholder by hand");
    std::thread::sleep(Duration::from_millis(20));
    std::fs::create_dir(scene.rw.join(".git")).expect("operator's own empty .git");
    Zone::new(&scene)
        .run("privilege", &["status"])
        .assert_blocked("status", &["no_new_privs_and_no_capabilities"]);
    assert!(
        scene.rw.join(".git").is_dir(),
        "the operator's empty .git was removed"
    );
}

#[test]
fn an_empty_git_the_operator_made_outlives_the_zone() {
    let scene = Scene::new();
    std::fs::create_dir(scene.rw.join(".git")).expect("operator's own empty .git");
    Zone::new(&scene)
        .run("privilege", &["status"])
        .assert_blocked("status", &["no_new_privs_and_no_capabilities"]);
    assert_eq!(
        entries(&scene.rw),
        vec![".git".to_string()],
        "the operator's empty .git was removed (or placeholders left)"
    );
}

#[test]
fn another_start_leaves_a_live_supervisors_placeholders_in_place() {
    // A second zone over the same grant starts (and ends) while the first runs: the first zone's
    // placeholders (which still hold its protected paths) stay until the first zone ends.
    let scene = Scene::new();
    let hb = scene.rw.join("heartbeat");
    let hb_in = hb.clone();
    let seen = std::cell::RefCell::new(None);
    let run = Zone::new(&scene)
        .timeout(Duration::from_secs(30))
        .during(|pid, scene| {
            wait_for_beats(&hb_in, 5);
            let second = crate::common::run_concurrent_zone(scene, "privilege", &["status"]);
            *seen.borrow_mut() = Some((second.status, entries(&scene.rw)));
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            )
            .expect("signal loopexec");
        })
        .run("lifetime", &["sleep_with_heartbeat", &Scene::s(&hb)]);
    assert!(
        !run.status.success(),
        "the first zone was not ended by SIGTERM: {:?}",
        run.status
    );
    let (second_status, during) = seen.into_inner().expect("the second zone ran");
    assert!(
        second_status.code().is_some(),
        "the second zone did not end normally: {second_status:?}"
    );
    assert_eq!(
        during,
        vec![".git", ".gitmodules", ".loopexec", "heartbeat"],
        "placeholders of the live zone went missing"
    );
    assert_eq!(
        entries(&scene.rw),
        vec!["heartbeat".to_string()],
        "placeholders outlived both zones"
    );
}

#[test]
fn cgroups_of_a_killed_supervisor_are_gone_once_the_next_zone_starts() {
    // A killed supervisor cannot remove its zone's cgroups; the next zone's start removes empty
    // ones whose supervisor is gone, so they do not pile up.
    let scene = Scene::new();
    let hb = scene.rw.join("heartbeat");
    let hb_in = hb.clone();
    let killed = Zone::new(&scene)
        .timeout(Duration::from_secs(30))
        .keep_leaked_cgroups()
        .during(move |pid, _| {
            wait_for_beats(&hb_in, 20);
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .expect("kill");
        })
        .run("lifetime", &["sleep_with_heartbeat", &Scene::s(&hb)]);
    let next = Scene::new();
    Zone::new(&next)
        .run("privilege", &["status"])
        .assert_blocked("status", &["no_new_privs_and_no_capabilities"]);
    let still: Vec<_> = killed
        .leaked_cgroups
        .iter()
        .filter(|d| d.exists())
        .cloned()
        .collect();
    crate::common::remove_cgroups(&still);
    assert!(
        still.is_empty(),
        "cgroups of the killed supervisor survived the next start: {still:?}"
    );
}

#[test]
fn sigterm_of_the_supervisor_ends_every_zone_process() {
    let scene = Scene::new();
    run_and_signal_the_supervisor(&scene, nix::sys::signal::Signal::SIGTERM);
}

#[test]
fn sigterm_of_the_supervisor_cleans_up_cgroups_and_workspace() {
    // Unlike SIGKILL, SIGTERM leaves loopexec the chance to tear the zone down properly.
    let scene = Scene::new();
    let run = run_and_signal_the_supervisor(&scene, nix::sys::signal::Signal::SIGTERM);
    assert!(
        run.leaked_cgroups.is_empty(),
        "cgroups left after SIGTERM: {:?}",
        run.leaked_cgroups
    );
    assert_eq!(
        entries(&scene.rw),
        vec!["heartbeat".to_string()],
        "the workspace holds more than the zone wrote"
    );
}
