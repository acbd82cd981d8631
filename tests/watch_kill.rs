//! `loopexec watch` (docs/gates.md, "Liveness"): a run is `alive` while its supervisor beats,
//! `stale` when it stops (exit 19), `halted` once it has halted; `--kill` ends a stale run's zone
//! and supervisor after checking they are still the run's processes, and records and seals the
//! halt `heartbeat_stale` so that `status`, `verify` and `--resume` see it.
mod common;
use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A run whose agent records its shell's pid and its sleeping child's, then sleeps.
fn start_sleeping_run(dir: &Path, run_id: &str, isolation: &[&str]) -> Child {
    let exec = "echo $$ > agent.pid; cat /proc/self/cgroup > agent-cgroup; sleep 300 & echo $! > sleeper.pid; wait";
    let mut args = vec![
        "run",
        "--json",
        "--run-id",
        run_id,
        "--no-baseline",
        "--exec",
        exec,
        "--check",
        "true",
    ];
    args.extend_from_slice(isolation);
    command()
        .current_dir(dir)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn loopexec run")
}

/// Wait until the heartbeat names a running zone (the supervisor is in the agent's wait loop).
fn wait_for_zone_beat(dir: &Path, run_id: &str) -> Value {
    let path = run_dir(dir, run_id).join("heartbeat.json");
    let start = std::time::Instant::now();
    loop {
        if let Some(beat) = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        {
            if beat["zone"].is_object() {
                return beat;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no heartbeat with a zone at {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn verified(dir: &Path, run_id: &str) -> Value {
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let r = loopexec(dir, &["verify", "--json", run_id, "--pubkey", &pubkey]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["verified"], true, "{v:#}");
    v
}

#[test]
fn a_stopped_supervisor_is_stale_and_watch_kill_ends_it_and_seals_heartbeat_stale() {
    let dir = workdir();
    let mut run = start_sleeping_run(dir.path(), "w", &["--isolation", "none"]);
    let supervisor = run.id() as i32;
    let beat = wait_for_zone_beat(dir.path(), "w");
    assert_eq!(
        (beat["phase"].as_str(), beat["supervisor_pid"].as_i64()),
        (Some("agent"), Some(supervisor as i64)),
        "{beat}"
    );
    let agent = read_pid(&dir.path().join("agent.pid"));
    let sleeper = read_pid(&dir.path().join("sleeper.pid"));
    kill(Pid::from_raw(supervisor), Signal::SIGSTOP).unwrap();

    let r = loopexec(
        dir.path(),
        &[
            "watch",
            "--json",
            "w",
            "--stall-timeout",
            "1",
            "--follow",
            "--kill",
        ],
    );
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["watch"]["verdict"].as_str()
        ),
        (19, Some("heartbeat_stale"), Some("killed")),
        "{r:?}"
    );
    let status = run.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the supervisor was SIGKILLed"
    );
    for (name, pid) in [("agent shell", agent), ("sleeping child", sleeper)] {
        assert!(!pid_alive(pid), "the {name} {pid} survived watch --kill");
    }

    let s = loopexec(dir.path(), &["status", "--json", "w"]);
    assert_eq!(
        (s.json()["state"].as_str(), s.json()["halt_reason"].as_str()),
        (Some("halted"), Some("heartbeat_stale")),
        "{s:?}"
    );
    let v = verified(dir.path(), "w");
    let checks = v["verify"]["checks"].as_array().unwrap();
    let derivation = checks
        .iter()
        .find(|c| c["name"] == "halt_derivation")
        .unwrap();
    assert_eq!(
        derivation["detail"].as_str().unwrap(),
        "heartbeat_stale not replayable: heartbeat_stale at iteration 1 was observed outside the receipt (a supervisor that stopped beating, ended by `watch --kill`); \
         the halt's detail carries the observations (no recorded agent step by the stages) (0 iteration decision(s) re-derived)"
    );
    let halt = events(dir.path(), "w")
        .into_iter()
        .find(|e| e["type"] == "halt")
        .unwrap();
    let detail = halt["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!(
            "watch --kill: its supervisor (pid {supervisor}) is stopped"
        )),
        "{detail}"
    );
    assert!(
        detail.contains(&format!(
            "killed the zone's process group {agent} and SIGKILLed the supervisor"
        )),
        "{detail}"
    );
    // A sealed run is final: resuming it is refused.
    let again = loopexec(dir.path(), &["run", "--json", "--resume", "w"]);
    assert_ne!(again.code, 0, "{again:?}");
}

#[test]
fn a_stopped_supervisor_of_a_native_zone_is_killed_with_its_zone_and_no_cgroup_is_left() {
    let dir = workdir();
    zone_writable(dir.path());
    let mut run = start_sleeping_run(dir.path(), "n", &[]);
    let supervisor = run.id() as i32;
    let beat = wait_for_zone_beat(dir.path(), "n");
    let cgroups: Vec<String> = beat["zone"]["cgroup"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert!(
        !cgroups.is_empty(),
        "a native zone records its cgroup: {beat}"
    );
    let leader = beat["zone"]["leader_pid"].as_i64().unwrap() as i32;
    kill(Pid::from_raw(supervisor), Signal::SIGSTOP).unwrap();

    let r = loopexec(
        dir.path(),
        &[
            "watch",
            "--json",
            "n",
            "--stall-timeout",
            "1",
            "--follow",
            "--kill",
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (19, Some("heartbeat_stale")),
        "{r:?}"
    );
    run.wait().unwrap();
    assert!(!pid_alive(leader), "the zone's init {leader} survived");
    for cg in &cgroups {
        assert!(!Path::new(cg).exists(), "the zone cgroup {cg} is left");
    }
    verified(dir.path(), "n");
}

#[test]
fn a_beating_run_is_alive_and_kill_refuses_it() {
    let dir = workdir();
    let mut run = start_sleeping_run(dir.path(), "a", &["--isolation", "none"]);
    wait_for_zone_beat(dir.path(), "a");
    let r = loopexec(
        dir.path(),
        &["watch", "--json", "a", "--stall-timeout", "30"],
    );
    let refused = loopexec(
        dir.path(),
        &["watch", "--json", "a", "--stall-timeout", "30", "--kill"],
    );
    kill(Pid::from_raw(run.id() as i32), Signal::SIGTERM).unwrap();
    run.wait().unwrap();
    assert_eq!(
        (
            r.code,
            r.json()["watch"]["verdict"].as_str(),
            r.json()["watch"]["phase"].as_str()
        ),
        (0, Some("alive"), Some("agent")),
        "{r:?}"
    );
    assert_eq!(refused.code, 20, "{refused:?}");
    assert_eq!(
        refused.json()["errors"][0]["message"].as_str(),
        Some("run a is alive (its heartbeat is fresh); --kill stops only a stale run"),
        "{refused:?}"
    );
}

#[test]
fn a_halted_run_is_reported_halted() {
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
    let w = loopexec(dir.path(), &["watch", "--json", "h"]);
    assert_eq!(
        (
            w.code,
            w.json()["watch"]["verdict"].as_str(),
            w.json()["halt_reason"].as_str()
        ),
        (0, Some("halted"), Some("max_iterations_reached")),
        "{w:?}"
    );
}

#[test]
fn a_paused_run_is_paused_and_kill_leaves_it_alone() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "step",
            "--json",
            "--run-id",
            "p",
            "--no-baseline",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "false",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let w = loopexec(dir.path(), &["watch", "--json", "p"]);
    assert_eq!(
        (w.code, w.json()["watch"]["verdict"].as_str()),
        (0, Some("paused")),
        "{w:?}"
    );
    let k = loopexec(dir.path(), &["watch", "--json", "p", "--kill"]);
    assert_eq!(k.code, 20, "{k:?}");
    assert_eq!(
        k.json()["errors"][0]["message"].as_str(),
        Some("run p is paused and no process drives it: there is nothing to kill"),
        "{k:?}"
    );
    assert!(
        events(dir.path(), "p").iter().all(|e| e["type"] != "halt"),
        "nothing was recorded"
    );
}

/// A run whose supervisor was SIGKILLed while its agent slept: `running`, driven by nobody.
fn crashed_run(dir: &Path, run_id: &str) {
    let mut run = start_sleeping_run(dir, run_id, &["--isolation", "none"]);
    wait_for_zone_beat(dir, run_id);
    let sleeper = read_pid(&dir.join("sleeper.pid"));
    run.kill().unwrap();
    run.wait().unwrap();
    // The agent's shell dies with its supervisor (PR_SET_PDEATHSIG); its background child does not.
    let _ = kill(Pid::from_raw(sleeper), Signal::SIGKILL);
}

#[test]
fn a_run_whose_supervisor_died_is_stale() {
    let dir = workdir();
    crashed_run(dir.path(), "d");
    let w = loopexec(dir.path(), &["watch", "--json", "d"]);
    assert_eq!(
        (
            w.code,
            w.json()["status"].as_str(),
            w.json()["watch"]["verdict"].as_str()
        ),
        (19, Some("stale"), Some("stale")),
        "{w:?}"
    );
    assert!(
        w.json()["watch"]["detail"]
            .as_str()
            .unwrap()
            .ends_with(") is gone"),
        "{w:?}"
    );
}

#[test]
fn kill_refuses_when_the_recorded_zone_leader_is_another_process() {
    let dir = workdir();
    crashed_run(dir.path(), "f");
    // An unrelated process, named in a forged heartbeat with a start time that is not its own.
    let mut other = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let pid = other.id() as i32;
    let path = run_dir(dir.path(), "f").join("heartbeat.json");
    let mut beat: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    beat["zone"] = serde_json::json!({"role": "agent", "leader_pid": pid, "leader_start": 1, "cgroup": [], "process_group": pid, "cpu_ms": 0, "output_bytes": 0});
    std::fs::write(&path, serde_json::to_vec(&beat).unwrap()).unwrap();
    let w = loopexec(dir.path(), &["watch", "--json", "f", "--kill"]);
    let alive = pid_alive(pid);
    other.kill().unwrap();
    other.wait().unwrap();
    assert_eq!(w.code, 30, "{w:?}");
    assert_eq!(
        w.json()["errors"][0]["message"].as_str(),
        Some(format!("refusing to kill: the zone leader pid {pid} now belongs to another process (its start time differs)").as_str()),
        "{w:?}"
    );
    assert!(alive, "the unrelated process was signalled");
    assert!(
        events(dir.path(), "f").iter().all(|e| e["type"] != "halt"),
        "nothing was recorded"
    );
}

#[test]
fn a_stall_timeout_for_watch_that_is_not_positive_is_refused() {
    let dir = workdir();
    let w = loopexec(dir.path(), &["watch", "--json", "--stall-timeout", "-1"]);
    assert_eq!(w.code, 20, "{w:?}");
    assert_eq!(
        w.json()["errors"][0]["message"].as_str(),
        Some("--stall-timeout must be a number of seconds in (0, 2592000], got -1"),
        "{w:?}"
    );
}
