//! `loopexec watch`: is a run alive, stale or halted (docs/gates.md, "Liveness")? It reads the
//! run's `heartbeat.json` (bounded and untrusted: it lies in the run directory) and its state (a
//! paused or interrupted run nobody drives is `paused`); `--follow` re-checks every second until
//! the run is halted or stale. With `--kill` it is the
//! actuator for a supervisor that is itself wedged or stopped: once the run is stale it checks
//! that the recorded supervisor and zone leader are still the run's processes (start time, and
//! the leader's cgroup or process group), kills the zone and the supervisor, removes the zone's
//! cgroup, records the `heartbeat_stale` halt with what it observed, and seals the run the way
//! `run --resume` finishes the seal of a halted, unsealed run.

use super::operator::{absolute_workdir, load_operator_key};
use crate::error::{CmdResult, Failure};
use crate::halt::{ExitClass, HaltReason};
use crate::output::{aligned, Outcome};
use crate::procfs;
use crate::receipt::events::{Event, HaltRecord};
use crate::receipt::heartbeat::{self, HeartbeatRecord, ReadError};
use crate::receipt::history::History;
use crate::receipt::state::RunPhase;
use crate::receipt::store::{RunDir, StateDir};
use crate::run_id::RunId;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `watch`'s default staleness limit, in seconds.
pub const DEFAULT_STALE_SECS: f64 = 60.0;
/// How often `--follow` re-checks.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);
/// How long `--kill` waits for a killed process or cgroup to be gone.
const GONE_WITHIN: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (default: the latest run).
    #[arg(value_name = "RUN_ID")]
    pub run_id: Option<String>,
    /// Seconds without a heartbeat update after which the run is stale (default 60).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub stall_timeout: Option<f64>,
    /// Re-check every second until the run is halted or stale.
    #[arg(long)]
    pub follow: bool,
    /// Once the run is stale: kill its zone and its supervisor, and record and seal the halt
    /// `heartbeat_stale`.
    #[arg(long)]
    pub kill: bool,
    /// The operator key that endorses the sealing run key (with --kill; default: the key dir's).
    #[arg(long, value_name = "FILE")]
    pub operator_key: Option<PathBuf>,
    /// Directory holding .loopexec/.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
}

/// What `watch` concluded about a run.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    Alive,
    /// Why it is stale.
    Stale(String),
    Halted(HaltReason),
    /// Paused (`--once`) or interrupted, and driven by no process: waiting for `run --resume`.
    Paused(&'static str),
}

/// One look at the run.
struct Look {
    verdict: Verdict,
    beat: Option<HeartbeatRecord>,
    age_ms: Option<u64>,
}

fn look(run: &RunDir, limit_ms: u64) -> CmdResult<Look> {
    if let Some(reason) = halted(run)? {
        return Ok(Look {
            verdict: Verdict::Halted(reason),
            beat: heartbeat::read(run.dir()).ok(),
            age_ms: None,
        });
    }
    if let Ok(state) = run.read_state() {
        if matches!(
            state.state,
            RunPhase::Paused | RunPhase::Interrupted | RunPhase::Gated
        ) && !run.is_driven()
        {
            return Ok(Look {
                verdict: Verdict::Paused(state.state.as_str()),
                beat: heartbeat::read(run.dir()).ok(),
                age_ms: None,
            });
        }
    }
    let beat = match heartbeat::read(run.dir()) {
        Ok(beat) => beat,
        Err(ReadError::Missing) => {
            return Ok(Look {
                verdict: Verdict::Stale("the run has no heartbeat.json".into()),
                beat: None,
                age_ms: None,
            })
        }
        Err(e) => {
            return Ok(Look {
                verdict: Verdict::Stale(format!("its heartbeat cannot be read: {e}")),
                beat: None,
                age_ms: None,
            })
        }
    };
    if beat.run_id != run.id().as_str() {
        let why = format!(
            "its heartbeat names another run ({})",
            crate::inert::inert(&beat.run_id)
        );
        return Ok(Look {
            verdict: Verdict::Stale(why),
            beat: Some(beat),
            age_ms: None,
        });
    }
    let age_ms = heartbeat::now_unix_ms().saturating_sub(beat.updated_at_unix_ms);
    let pid = beat.supervisor_pid;
    let verdict = if !procfs::is_same_process(pid, beat.supervisor_start) {
        Verdict::Stale(format!("its supervisor (pid {pid}) is gone"))
    } else if procfs::is_stopped(pid) {
        Verdict::Stale(format!(
            "its supervisor (pid {pid}) is stopped; last heartbeat {:.1} s ago",
            age_ms as f64 / 1000.0
        ))
    } else if age_ms > limit_ms {
        Verdict::Stale(format!(
            "no heartbeat for {:.1} s (limit {:.1} s)",
            age_ms as f64 / 1000.0,
            limit_ms as f64 / 1000.0
        ))
    } else {
        Verdict::Alive
    };
    Ok(Look {
        verdict,
        beat: Some(beat),
        age_ms: Some(age_ms),
    })
}

/// The run's halt, from the receipt (the live record) or else its state file.
fn halted(run: &RunDir) -> CmdResult<Option<HaltReason>> {
    let history = run
        .receipt_bytes()
        .ok()
        .and_then(|b| crate::receipt::chain::verify(&b).ok())
        .and_then(|chain| History::of_lines(&chain.events).ok());
    if let Some(halt) = history.as_ref().and_then(|h| h.halt.as_ref()) {
        return Ok(Some(halt.halt_reason));
    }
    let state = run.read_state().ok();
    Ok(state.filter(|s| s.state == RunPhase::Halted).and_then(|s| {
        HaltReason::ALL
            .into_iter()
            .find(|r| Some(r.as_str()) == s.halt_reason.as_deref())
    }))
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let secs = args.stall_timeout.unwrap_or(DEFAULT_STALE_SECS);
    if !secs.is_finite() || secs <= 0.0 || secs > 30.0 * 86400.0 {
        return Err(Failure::usage(format!(
            "--stall-timeout must be a number of seconds in (0, 2592000], got {secs}"
        )));
    }
    let limit_ms = ((secs * 1000.0).round() as u64).max(1);
    let workdir = absolute_workdir(&args.workdir)?;
    // The key is loaded before anything is signalled: a kill that could not be sealed is refused.
    let operator = if args.kill {
        Some(load_operator_key(args.operator_key.as_deref())?)
    } else {
        None
    };
    let statedir = StateDir::open(&workdir)?;
    let run = statedir.resolve(args.run_id.as_deref())?;
    let mut seen = look(&run, limit_ms)?;
    // A paused run stays paused until someone resumes it: following waits for that too.
    while args.follow && matches!(seen.verdict, Verdict::Alive | Verdict::Paused(_)) {
        std::thread::sleep(FOLLOW_EVERY);
        if crate::interrupt::pending().is_some() {
            break;
        }
        seen = look(&run, limit_ms)?;
    }
    match (&seen.verdict, operator) {
        (Verdict::Stale(why), Some(operator)) => {
            let why = why.clone();
            kill(&statedir, run, seen, &why, &operator)
        }
        (Verdict::Paused(phase), Some(_)) => Err(Failure::usage(format!(
            "run {} is {phase} and no process drives it: there is nothing to kill",
            run.id()
        ))
        .with_hint(format!("`loopexec run --resume {}` continues it", run.id()))),
        (Verdict::Alive, Some(_)) => Err(Failure::usage(format!(
            "run {} is alive (its heartbeat is fresh); --kill stops only a stale run",
            run.id()
        ))
        .with_hint("use --follow --kill to wait until it is stale")),
        _ => Ok(report(&run, &seen)),
    }
}

fn report(run: &RunDir, seen: &Look) -> Outcome {
    let (verdict, detail) = match &seen.verdict {
        Verdict::Alive => ("alive", String::new()),
        Verdict::Stale(why) => ("stale", why.clone()),
        Verdict::Halted(reason) => ("halted", format!("halted with {reason}")),
        Verdict::Paused(phase) => (
            "paused",
            format!(
                "{phase}: no process drives it; `loopexec run --resume {}` continues it",
                run.id()
            ),
        ),
    };
    let mut out = match &seen.verdict {
        Verdict::Halted(reason) => {
            let mut out = Outcome::ok("watch");
            out.set("halt_reason", reason.as_str());
            out
        }
        Verdict::Stale(_) => {
            let mut out = Outcome::ok("watch");
            out.status = "stale";
            out.exit = ExitClass::LivenessDrift;
            out
        }
        Verdict::Alive | Verdict::Paused(_) => Outcome::ok("watch"),
    };
    let beat = seen.beat.as_ref();
    out.set("run_id", run.id().as_str());
    out.set(
        "watch",
        json!({
            "verdict": verdict,
            "detail": detail,
            "phase": beat.map(|b| b.phase.clone()),
            "iteration": beat.map(|b| b.iteration),
            "phase_for_ms": beat.and_then(|b| b.phase_since_unix_ms).map(|since| heartbeat::now_unix_ms().saturating_sub(since)),
            "heartbeat_age_ms": seen.age_ms,
            "supervisor_pid": beat.map(|b| b.supervisor_pid),
            "zone": beat.and_then(|b| b.zone.as_ref()).map(|z| json!({
                "role": z.role, "leader_pid": z.leader_pid, "cgroup": z.cgroup, "process_group": z.process_group,
                "cpu_ms": z.cpu_ms, "output_bytes": z.output_bytes,
            })),
        }),
    );
    let mut rows = vec![
        ("run_id", run.id().to_string()),
        ("verdict", verdict.to_string()),
    ];
    if !detail.is_empty() {
        rows.push(("detail", detail));
    }
    if let Some(b) = beat {
        let lasted = b
            .phase_since_unix_ms
            .map(|since| {
                format!(
                    ", for {:.0} s",
                    heartbeat::now_unix_ms().saturating_sub(since) as f64 / 1000.0
                )
            })
            .unwrap_or_default();
        rows.push((
            "phase",
            format!(
                "{} (iteration {}{lasted})",
                crate::inert::inert(&b.phase),
                b.iteration
            ),
        ));
    }
    out.human(aligned(&rows))
}

/// The zone `--kill` is to stop, checked against `/proc`.
enum Zone {
    /// No zone was running (between commands), or it has already ended.
    None,
    /// A host zone: its verified process group.
    Group(i32),
    /// A native zone: its verified cgroup directories.
    Cgroup(Vec<PathBuf>),
}

fn refuse(what: String) -> Failure {
    Failure::workspace(format!("refusing to kill: {what}")).with_hint("the heartbeat does not name this run's live processes; stop them by hand, then `loopexec run --resume`")
}

/// Whether `p` is a cgroup directory under the cgroup mount (a recorded path is untrusted).
fn under_cgroup_root(p: &Path) -> bool {
    p.is_absolute()
        && p.starts_with(procfs::CGROUP_ROOT)
        && !p
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// The recorded zone, verified: its leader is alive with the recorded start time and is in the
/// recorded cgroup (or leads the recorded process group). A zone whose leader is gone is
/// stopped through its cgroup only while that still exists (a process group is then no longer
/// identifiable and is left).
fn verified_zone(beat: &HeartbeatRecord) -> Result<Zone, Failure> {
    let Some(z) = &beat.zone else {
        return Ok(Zone::None);
    };
    let cgroups: Vec<PathBuf> = z.cgroup.iter().map(PathBuf::from).collect();
    if let Some(bad) = cgroups.iter().find(|p| !under_cgroup_root(p)) {
        return Err(refuse(format!(
            "the recorded zone cgroup {} is not beneath {}",
            crate::inert::inert(&bad.display().to_string()),
            procfs::CGROUP_ROOT
        )));
    }
    let leader_alive = z
        .leader_start
        .is_some_and(|s| procfs::is_same_process(z.leader_pid, s));
    if !leader_alive {
        if procfs::start_time(z.leader_pid).is_some()
            && z.leader_start.is_some()
            && procfs::start_time(z.leader_pid) != z.leader_start
        {
            // The pid is someone else's now: only a cgroup that still exists identifies the zone.
            if cgroups.is_empty() {
                return Err(refuse(format!("the zone leader pid {} now belongs to another process (its start time differs)", z.leader_pid)));
            }
        }
        let left: Vec<PathBuf> = cgroups.into_iter().filter(|p| p.is_dir()).collect();
        return Ok(if left.is_empty() {
            Zone::None
        } else {
            Zone::Cgroup(left)
        });
    }
    if !cgroups.is_empty() {
        let actual = procfs::cgroups_of(z.leader_pid, Path::new(procfs::CGROUP_ROOT));
        if let Some(missing) = cgroups.iter().find(|p| !actual.contains(p)) {
            return Err(refuse(format!(
                "the zone leader pid {} is not in the recorded cgroup {}",
                z.leader_pid,
                crate::inert::inert(&missing.display().to_string())
            )));
        }
        return Ok(Zone::Cgroup(cgroups));
    }
    match z.process_group {
        Some(pgid) if pgid == z.leader_pid => Ok(Zone::Group(pgid)),
        other => Err(refuse(format!(
            "the recorded process group {other:?} is not led by the zone leader pid {}",
            z.leader_pid
        ))),
    }
}

fn wait_until(mut done: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while !done() {
        if start.elapsed() > GONE_WITHIN {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn sigkill(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Kill every process of the zone and wait until none is left.
fn kill_zone(zone: &Zone) -> Result<(), Failure> {
    match zone {
        Zone::None => Ok(()),
        Zone::Group(pgid) => {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(*pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
            if wait_until(|| procfs::group_members(*pgid).is_empty()) {
                Ok(())
            } else {
                Err(Failure::internal(format!(
                    "process group {pgid} still has processes after SIGKILL"
                )))
            }
        }
        Zone::Cgroup(dirs) => {
            for dir in dirs {
                // v2: cgroup.kill kills the whole subtree at once; otherwise every listed pid.
                let _ = std::fs::write(dir.join("cgroup.kill"), "1");
                let emptied = wait_until(|| match procfs::cgroup_procs(dir) {
                    None => true,
                    Some(pids) if pids.is_empty() => true,
                    Some(pids) => {
                        pids.iter().for_each(|&p| sigkill(p));
                        false
                    }
                });
                if !emptied {
                    return Err(Failure::internal(format!(
                        "cgroup {} still has processes after SIGKILL",
                        dir.display()
                    )));
                }
            }
            Ok(())
        }
    }
}

/// Remove the zone's (now empty) cgroup directories, children first.
fn remove_cgroups(zone: &Zone) -> Result<(), Failure> {
    let Zone::Cgroup(dirs) = zone else {
        return Ok(());
    };
    for dir in dirs {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for sub in entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            {
                let _ = std::fs::remove_dir(sub.path());
            }
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Failure::internal(format!(
                    "removing the zone cgroup {}: {e}",
                    dir.display()
                )))
            }
        }
    }
    Ok(())
}

fn kill(
    statedir: &StateDir,
    run: RunDir,
    seen: Look,
    why: &str,
    operator: &crate::receipt::keys::OperatorKey,
) -> CmdResult<Outcome> {
    let Some(beat) = seen.beat else {
        return Err(refuse(format!(
            "run {} is stale ({why}) but has no readable heartbeat naming its processes",
            run.id()
        )));
    };
    if beat.run_id != run.id().as_str() {
        return Err(refuse(format!("run {} is stale ({why})", run.id())));
    }
    // Everything is verified before anything is signalled.
    let supervisor_alive = procfs::is_same_process(beat.supervisor_pid, beat.supervisor_start);
    if !supervisor_alive && procfs::start_time(beat.supervisor_pid).is_some() && run.is_driven() {
        return Err(refuse(format!("the supervisor pid {} now belongs to another process, and the run is driven by someone", beat.supervisor_pid)));
    }
    let zone = verified_zone(&beat)?;
    kill_zone(&zone)?;
    if supervisor_alive {
        sigkill(beat.supervisor_pid);
        if !wait_until(|| !procfs::is_same_process(beat.supervisor_pid, beat.supervisor_start)) {
            return Err(Failure::internal(format!(
                "the supervisor pid {} is still alive after SIGKILL",
                beat.supervisor_pid
            )));
        }
        // Its leader shows as a zombie while its other threads (the heartbeat's pulse) still
        // exit, holding its descriptors and so the run's lock: wait for the lock to be free.
        if !wait_until(|| !run.is_driven()) {
            return Err(Failure::internal(format!(
                "the run's lock is still held after its supervisor pid {} was killed",
                beat.supervisor_pid
            )));
        }
    }
    remove_cgroups(&zone)?;
    record_halt(&run, &beat, why, &zone)?;
    let id: RunId = run.id().clone();
    drop(run);
    let outcome = crate::engine::resume(
        statedir,
        id,
        operator,
        false,
        &mut crate::engine::sink::Silent,
    )?;
    let reason = match &outcome.end {
        crate::engine::LoopEnd::Halted { reason, .. } => *reason,
        _ => {
            return Err(Failure::internal(
                "the run was not halted after its heartbeat_stale halt was recorded",
            ))
        }
    };
    let mut out = Outcome::halted("watch", reason);
    out.set("run_id", outcome.run_id.clone());
    out.set("receipt", outcome.receipt.display().to_string());
    out.set("watch", json!({"verdict": "killed", "detail": why, "supervisor_pid": beat.supervisor_pid, "sealed": true}));
    let rows = vec![
        ("run_id", outcome.run_id.clone()),
        ("verdict", "killed".into()),
        ("detail", why.to_string()),
        ("halt_reason", reason.as_str().into()),
    ];
    Ok(out.human(aligned(&rows)))
}

/// Append the `heartbeat_stale` halt, under the run's lock (free now that its supervisor is
/// dead), unless the receipt already records a halt (its supervisor died before sealing it).
fn record_halt(run: &RunDir, beat: &HeartbeatRecord, why: &str, zone: &Zone) -> CmdResult<()> {
    let _lock = run.lock()?;
    let (mut log, lines) = run.open_receipt()?;
    let history = History::of_lines(&lines)
        .map_err(|e| Failure::workspace(format!("{}: {e}", run.receipt_path().display())))?;
    if history.halt.is_some() {
        return Ok(());
    }
    let stopped = match zone {
        Zone::None => "no zone was running".to_string(),
        Zone::Group(pgid) => format!("killed the zone's process group {pgid}"),
        Zone::Cgroup(dirs) => format!(
            "killed and removed the zone cgroup {}",
            dirs.first()
                .map(|d| d.display().to_string())
                .unwrap_or_default()
        ),
    };
    let zone_seen = beat.zone.as_ref().map_or(String::new(), |z| {
        let cpu = z.cpu_ms.map_or("CPU not readable".to_string(), |ms| {
            format!("{:.2} CPU s", ms as f64 / 1000.0)
        });
        format!(
            "; its {} zone (leader pid {}, start {}) had written {} output bytes, {cpu}",
            crate::inert::inert(&z.role),
            z.leader_pid,
            z.leader_start.unwrap_or(0),
            z.output_bytes
        )
    });
    let detail = format!(
        "watch --kill: {why} (supervisor pid {}, start {}; last phase {}, iteration {}, at {}){zone_seen}; {stopped} and SIGKILLed the supervisor",
        beat.supervisor_pid,
        beat.supervisor_start,
        crate::inert::inert(&beat.phase),
        beat.iteration,
        crate::inert::inert(&beat.updated_at),
    );
    let reason = HaltReason::HeartbeatStale;
    log.append_event(&Event::Halt(HaltRecord {
        halt_reason: reason,
        exit_code: reason.class().code(),
        iteration: history.last_started,
        detail,
        delivery: None,
    }))
    .map_err(crate::receipt::store::log_failure)?;
    Ok(())
}
