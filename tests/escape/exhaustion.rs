//! Category 11, exhaustion, bounded twice: by the zone's budget (what is asserted) and by the
//! probe's own caps (so a regression fails the test instead of taking the machine down): a fork
//! bomb that stops at 3000 processes, a memory bomb that stops at 4 GiB, fd exhaustion, /tmp fill
//! capped at 1 GiB, a CPU spin and an output flood ended by the wall clock. The shipped exec
//! policy allows 512 pids, 2 GiB memory, 1024 fds and a 256 MiB /tmp.

use crate::common::{policy_variant, Scene, Verdict, Zone};
use std::time::Duration;

fn count_after(why: &str) -> u64 {
    why.rsplit('_')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

#[test]
fn fork_bomb_stops_at_the_pids_limit() {
    let scene = Scene::new();
    let run = Zone::new(&scene).run("exhaustion", &["fork_bomb", "3000"]);
    run.assert_blocked("fork_bomb", &["EAGAIN_after_"]);
    if let Verdict::Blocked { why, .. } = &run.verdict {
        assert!(
            count_after(why) < 512,
            "fork bomb got {why}, more than the policy's 512 pids"
        );
    }
}

#[test]
fn memory_bomb_is_stopped_by_the_memory_limit() {
    let scene = Scene::new();
    let run = Zone::new(&scene).run("exhaustion", &["memory_bomb", "4096"]);
    // Either allocation fails below the cap, or the OOM killer ends the probe inside the zone.
    run.assert_blocked_or_killed("memory_bomb", &["ENOMEM_after_"], &[libc::SIGKILL]);
    if let Verdict::Blocked { why, .. } = &run.verdict {
        assert!(
            count_after(why.trim_end_matches("_MiB")) <= 2048,
            "memory bomb got {why}, above 2 GiB"
        );
    }
}

#[test]
fn fd_exhaustion_stops_at_the_open_files_limit() {
    let scene = Scene::new();
    let run = Zone::new(&scene).run("exhaustion", &["fd_exhaustion", "1048576"]);
    run.assert_blocked("fd_exhaustion", &["EMFILE_after_"]);
    if let Verdict::Blocked { why, .. } = &run.verdict {
        assert!(
            count_after(why) <= 1024,
            "opened {why}, above the policy's 1024"
        );
    }
}

#[test]
fn filling_tmp_stops_at_its_size_cap() {
    let scene = Scene::new();
    let run = Zone::new(&scene).run("exhaustion", &["fill_tmp", "1024"]);
    run.assert_blocked(
        "fill_tmp",
        &["ENOSPC_after_", "EFBIG_after_", "ENOMEM_after_"],
    );
    if let Verdict::Blocked { why, .. } = &run.verdict {
        assert!(
            count_after(why.trim_end_matches("_MiB")) <= 256,
            "wrote {why} to /tmp, above 256 MiB"
        );
    }
    assert!(
        !std::path::Path::new("/tmp/loopexec-escape-fill").exists(),
        "the fill file landed on the host's /tmp"
    );
}

#[test]
fn pids_limit_from_the_policy_is_enforced() {
    let scene = Scene::new();
    let policy = policy_variant(scene.root(), "exec", &[("pids_max", "64")]);
    let run = Zone::new(&scene)
        .policy(&policy)
        .run("exhaustion", &["fork_bomb", "1000"]);
    run.assert_blocked("fork_bomb", &["EAGAIN_after_"]);
    if let Verdict::Blocked { why, .. } = &run.verdict {
        assert!(
            count_after(why) < 64,
            "fork bomb got {why}, more than the policy's 64 pids"
        );
    }
}

#[test]
fn memory_limit_from_the_policy_is_enforced() {
    let scene = Scene::new();
    let policy = policy_variant(scene.root(), "exec", &[("memory_bytes", "268435456")]);
    let run = Zone::new(&scene)
        .policy(&policy)
        .run("exhaustion", &["memory_bomb", "1024"]);
    run.assert_blocked_or_killed("memory_bomb", &["ENOMEM_after_"], &[libc::SIGKILL]);
    if let Verdict::Blocked { why, .. } = &run.verdict {
        assert!(
            count_after(why.trim_end_matches("_MiB")) <= 256,
            "memory bomb got {why}, above 256 MiB"
        );
    }
}

#[test]
fn cpu_quota_from_the_policy_caps_a_spinning_process() {
    // cpu_percent = 25: over 2 s of wall time the spinner may get about 0.5 s of CPU.
    let scene = Scene::new();
    let policy = policy_variant(scene.root(), "exec", &[("cpu_percent", "25")]);
    let run = Zone::new(&scene)
        .policy(&policy)
        .run("exhaustion", &["cpu_share", "2000"]);
    run.assert_blocked("cpu_share", &["percent_"]);
    if let Verdict::Blocked { why, .. } = &run.verdict {
        let percent = count_after(why);
        assert!(
            percent <= 40,
            "a 25% quota let the spinner use {percent}% of a core"
        );
    }
}

#[test]
fn file_size_limit_caps_one_file_in_the_workspace() {
    // The workspace is host disk: one file is capped by RLIMIT_FSIZE (policy
    // `file_size_max_bytes`, set to 8 MiB here). Total workspace usage has no cap of its own.
    let scene = Scene::new();
    let policy = policy_variant(scene.root(), "exec", &[("file_size_max_bytes", "8388608")]);
    let target = Scene::s(&scene.rw.join("fill"));
    let run = Zone::new(&scene)
        .policy(&policy)
        .run("exhaustion", &["fill_tmp", "64", &target]);
    run.assert_blocked("fill_tmp", &["EFBIG_after_8_MiB"]);
}

#[test]
fn realtime_scheduling_is_refused() {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("exhaustion", &["realtime"])
        .assert_blocked("realtime", &["EPERM"]);
}

#[test]
fn raising_priority_is_refused() {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("exhaustion", &["nice_raise"])
        .assert_blocked("nice_raise", &["EACCES", "EPERM"]);
}

#[test]
fn oom_killer_immunity_is_refused() {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("exhaustion", &["oom_immune"])
        .assert_blocked("oom_immune", &["EACCES", "EPERM", "EROFS"]);
}

#[test]
fn no_hard_resource_limit_can_be_raised() {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("exhaustion", &["raise_rlimits"])
        .assert_blocked("raise_rlimits", &["EPERM"]);
}

#[test]
fn core_dump_limit_is_zero_and_cannot_be_raised() {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("exhaustion", &["core_limit"])
        .assert_blocked("core_limit", &["EPERM"]);
}

#[test]
fn a_crash_in_the_zone_dumps_no_core() {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("exhaustion", &["crash"])
        .assert_blocked("crash", &["no_core_SIGSEGV"]);
    let cores: Vec<_> = std::fs::read_dir(&scene.rw)
        .expect("read rw")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("core"))
        .collect();
    assert!(cores.is_empty(), "core files in the grant: {cores:?}");
}

fn short_wall_clock(scene: &Scene) -> std::path::PathBuf {
    policy_variant(scene.root(), "exec", &[("wall_clock_seconds", "2")])
}

#[test]
fn cpu_spin_is_ended_by_the_wall_clock() {
    let scene = Scene::new();
    let policy = short_wall_clock(&scene);
    let run = Zone::new(&scene)
        .policy(&policy)
        .timeout(Duration::from_secs(30))
        .run("exhaustion", &["cpu_spin"]);
    assert_eq!(
        run.verdict,
        Verdict::Missing,
        "the spinning probe printed a verdict: {:?}",
        run.verdict
    );
    assert!(
        !run.status.success(),
        "a zone killed by the wall clock reported success"
    );
    assert!(
        run.elapsed < Duration::from_secs(15),
        "wall clock of 2 s took {:?}",
        run.elapsed
    );
}

#[test]
fn output_flood_is_streamed_without_the_supervisor_growing() {
    let scene = Scene::new();
    let run = Zone::new(&scene)
        .timeout(Duration::from_secs(60))
        .run("exhaustion", &["output_flood", "512"]);
    assert!(
        run.stderr.contains("FLOODED 536870912"),
        "flood did not complete: {}",
        run.stderr
    );
    assert_eq!(
        run.stdout_bytes,
        512 << 20,
        "bytes lost or added on the way"
    );
    assert!(
        run.supervisor_max_rss_kib < 64 * 1024,
        "supervisor grew to {} KiB",
        run.supervisor_max_rss_kib
    );
}

#[test]
fn output_flood_into_a_stalled_reader_is_ended_by_the_wall_clock() {
    let scene = Scene::new();
    let policy = short_wall_clock(&scene);
    let run = Zone::new(&scene)
        .policy(&policy)
        .stall_stdout()
        .timeout(Duration::from_secs(30))
        .run("exhaustion", &["output_flood", "4096"]);
    assert!(
        !run.status.success(),
        "a zone killed by the wall clock reported success"
    );
    assert!(
        run.elapsed < Duration::from_secs(15),
        "wall clock of 2 s took {:?} with a stalled reader",
        run.elapsed
    );
    assert!(
        run.supervisor_max_rss_kib < 64 * 1024,
        "supervisor grew to {} KiB",
        run.supervisor_max_rss_kib
    );
}
