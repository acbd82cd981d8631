//! The loop's stall rule (`--stall-timeout`; docs/gates.md, "Liveness"): an agent that writes no
//! output and uses no CPU for S seconds ("idle"), or writes no output for the busy limit however
//! busy ("busy", 4 x S unless `--stall-timeout-busy`), is killed through its zone and the run halts
//! `heartbeat_stale` (19), sealed; one that keeps writing is never stale. The heartbeat file it
//! keeps meanwhile is `heartbeat.json` in the run directory.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

fn verified(dir: &Path, run_id: &str) {
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let r = loopexec(dir, &["verify", "--json", run_id, "--pubkey", &pubkey]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["verified"], true, "{r:?}");
}

fn exec_result(dir: &Path, run_id: &str) -> Value {
    events(dir, run_id)
        .into_iter()
        .find(|e| e["type"] == "exec_result")
        .expect("an exec_result")
}

fn halt_detail(r: &Ran) -> String {
    r.json()["run"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn an_agent_that_sleeps_forever_is_stopped_as_idle_and_the_run_halts_heartbeat_stale() {
    let dir = workdir();
    let exec = "sleep 300 & echo $! > sleeper.pid; wait";
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "s",
            "--no-baseline",
            "--isolation",
            "none",
            "--stall-timeout",
            "1",
            "--exec",
            exec,
            "--check",
            "true",
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (19, Some("heartbeat_stale")),
        "{r:?}"
    );
    let ending = &exec_result(dir.path(), "s")["ending"];
    assert_eq!(
        (ending["kind"].as_str(), ending["busy"].as_bool()),
        (Some("stalled"), Some(false)),
        "{ending}"
    );
    assert!(ending["quiet_ms"].as_u64().unwrap() >= 1000, "{ending}");
    assert!(
        !pid_alive(read_pid(&dir.path().join("sleeper.pid"))),
        "the sleeping agent survived the stall"
    );
    assert!(
        halt_detail(&r).starts_with("exec (agent) stalled: no output for "),
        "{r:?}"
    );
    assert!(
        halt_detail(&r).ends_with("(idle); its process tree was killed"),
        "{r:?}"
    );
    assert_eq!(r.json()["run"]["sealed"], true, "{r:?}");
    verified(dir.path(), "s");
}

#[test]
fn an_agent_that_spins_without_output_is_stopped_as_busy_at_four_times_the_limit() {
    let dir = workdir();
    let exec = "echo $$ > spinner.pid; while :; do :; done";
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "b",
            "--no-baseline",
            "--isolation",
            "none",
            "--stall-timeout",
            "0.5",
            "--exec",
            exec,
            "--check",
            "true",
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (19, Some("heartbeat_stale")),
        "{r:?}"
    );
    let ending = &exec_result(dir.path(), "b")["ending"];
    assert_eq!(
        (ending["kind"].as_str(), ending["busy"].as_bool()),
        (Some("stalled"), Some(true)),
        "{ending}"
    );
    assert!(
        ending["quiet_ms"].as_u64().unwrap() >= 2000,
        "busy limit is 4 x 0.5 s: {ending}"
    );
    assert!(ending["cpu_ms"].as_u64().unwrap() > 0, "{ending}");
    assert!(halt_detail(&r).contains("(busy)"), "{r:?}");
    assert!(
        !pid_alive(read_pid(&dir.path().join("spinner.pid"))),
        "the spinning agent survived the stall"
    );
    verified(dir.path(), "b");
}

#[test]
fn an_agent_that_prints_every_second_for_longer_than_the_limit_is_not_stale() {
    let dir = workdir();
    let exec = "for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done";
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "t",
            "--no-baseline",
            "--isolation",
            "none",
            "--stall-timeout",
            "3",
            "--max-iterations",
            "1",
            "--exec",
            exec,
            "--check",
            "false",
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (12, Some("max_iterations_reached")),
        "{r:?}"
    );
    assert_eq!(
        exec_result(dir.path(), "t")["ending"],
        serde_json::json!({"kind": "exited", "code": 0})
    );
}

#[test]
fn a_check_that_hangs_is_stopped_by_the_stall_rule_too() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "c",
            "--no-baseline",
            "--isolation",
            "none",
            "--stall-timeout",
            "0.5",
            "--exec",
            "true",
            "--check",
            "sleep 300",
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (19, Some("heartbeat_stale")),
        "{r:?}"
    );
    assert!(
        halt_detail(&r).starts_with("check stalled: no output for"),
        "{r:?}"
    );
    verified(dir.path(), "c");
}

#[test]
fn the_run_keeps_a_heartbeat_naming_its_supervisor_and_its_last_phase() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "h",
            "--no-baseline",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "false",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 12, "{r:?}");
    let beat: Value = serde_json::from_slice(
        &std::fs::read(run_dir(dir.path(), "h").join("heartbeat.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (
            beat["schema"].as_str(),
            beat["run_id"].as_str(),
            beat["phase"].as_str(),
            beat["iteration"].as_u64()
        ),
        (
            Some("loopexec.heartbeat/v1"),
            Some("h"),
            Some("sealing"),
            Some(1)
        ),
        "{beat}"
    );
    assert!(
        beat["supervisor_pid"].as_i64().unwrap() > 0
            && beat["supervisor_start"].as_u64().unwrap() > 0,
        "{beat}"
    );
}

#[test]
fn a_busy_limit_below_the_idle_limit_is_refused_before_anything_is_written() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--stall-timeout",
            "5",
            "--stall-timeout-busy",
            "2",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(
        r.json()["errors"][0]["message"].as_str(),
        Some("stall_timeout_busy (2 s) must not be below stall_timeout (5 s): a busy command is given at least the idle limit"),
        "{r:?}"
    );
    assert!(!dir.path().join(".loopexec").exists());
}

#[test]
fn a_busy_limit_without_an_idle_limit_is_refused() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--stall-timeout-busy",
            "2",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(
        r.json()["errors"][0]["message"].as_str(),
        Some("stall_timeout_busy needs stall_timeout (the idle limit) as well"),
        "{r:?}"
    );
}

#[test]
fn a_stall_timeout_that_is_not_a_positive_number_is_refused() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--stall-timeout",
            "0",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(
        r.json()["errors"][0]["message"].as_str(),
        Some("stall_timeout must be a number of seconds in (0, 2592000], got 0"),
        "{r:?}"
    );
}

#[test]
fn the_loop_file_sets_the_stall_timeout() {
    let dir = workdir();
    write(dir.path(), "loop.toml", "exec = \"sleep 300\"\ncheck = \"true\"\nisolation = \"none\"\nbaseline = false\nstall_timeout_seconds = 0.5\n");
    let r = loopexec(dir.path(), &["run", "--json", "--run-id", "f"]);
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (19, Some("heartbeat_stale")),
        "{r:?}"
    );
    let start = events(dir.path(), "f")
        .into_iter()
        .find(|e| e["type"] == "run_start")
        .unwrap();
    assert_eq!(
        start["config"]["stall_timeout_ms"], 500,
        "pinned in the run's config"
    );
}

/// The zone cgroup directories a `/proc/self/cgroup` text names (the root of a hierarchy is none).
fn zone_cgroups(text: &str) -> Vec<std::path::PathBuf> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let rel = path.trim_start_matches('/');
            if rel.is_empty() {
                return None;
            }
            let root = Path::new("/sys/fs/cgroup");
            Some(if controllers.is_empty() {
                root.join(rel)
            } else {
                root.join(controllers.trim_start_matches("name=")).join(rel)
            })
        })
        .collect()
}

#[test]
fn a_sleeping_agent_in_a_native_zone_is_stopped_and_leaves_no_cgroup() {
    let dir = workdir();
    zone_writable(dir.path());
    let exec = "cat /proc/self/cgroup > agent-cgroup; sleep 300";
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "n",
            "--no-baseline",
            "--stall-timeout",
            "1",
            "--exec",
            exec,
            "--check",
            "true",
        ],
    );
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["run"]["isolation"].as_str()
        ),
        (19, Some("heartbeat_stale"), Some("native")),
        "{r:?}"
    );
    assert!(
        halt_detail(&r).ends_with("(idle); its process tree was killed"),
        "{r:?}"
    );
    let cgroups = zone_cgroups(&std::fs::read_to_string(dir.path().join("agent-cgroup")).unwrap());
    assert!(!cgroups.is_empty(), "the agent ran in a zone cgroup");
    for cg in &cgroups {
        assert!(!cg.exists(), "{} is left after the stall", cg.display());
    }
    verified(dir.path(), "n");
}
