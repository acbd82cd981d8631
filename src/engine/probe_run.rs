//! One probe run, in its own process (the hidden `__probe-run --spec FILE`): the check of the
//! spec (`crate::trust::zone_run::RunSpec`) run once in an exec zone on its throwaway copy of the
//! tree, with the run's perturbation applied, and what it showed (`RunReport`), printed as one
//! JSON object. The probe that planned the run (`crate::trust::runner`) reads it back.
//!
//! What the process itself moves before the zone starts (children inherit it): the network
//! (`no_network`: a new network namespace, under `--isolation none`; the exec zone of native
//! isolation has none anyway), the monotonic and boot clocks (a clock offset: a time namespace
//! under `--isolation none`; the exec zone applies its own), the CPUs (`one_cpu`: affinity to one
//! CPU), and the load (the exec zone's CPU quota lowered to `cpu_quota_percent`; under
//! `--isolation none`, busy threads beside the check while it runs). The variables of the plan
//! reach the check whatever the zone's environment policy says.

use super::check::{run_check, Artifacts, ReportSource};
use super::commands::operator_env;
use super::config::{PolicyPin, DEFAULT_CHECK_POLICY};
use crate::error::{CmdResult, Failure};
use crate::receipt::probe::RunClass;
use crate::receipt::store::fs_failure;
use crate::rules::verdict::Verdict;
use crate::safefs::SafeDir;
use crate::testreport::paths::ReportPatterns;
use crate::testreport::sight::CheckSight;
use crate::trust::zone_run::{RunReport, RunSpec, ShownRun, MAX_SPEC_BYTES};
use crate::zones::setup::ZoneSetup;
use crate::zones::{Isolation, Role, ZoneCommand};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn class_of(verdict: Verdict) -> RunClass {
    match verdict {
        Verdict::Pass => RunClass::Pass,
        // A zero exit whose evidence disagrees is no pass: for agreement it counts as red.
        Verdict::Fail | Verdict::Disagrees => RunClass::Fail,
        Verdict::CouldNotRun => RunClass::CouldNotRun,
    }
}

/// sha256 of the sorted failing set, one id a line; empty when no source named any test.
fn failing_digest(failing: Option<&std::collections::BTreeSet<String>>) -> String {
    match failing {
        None => String::new(),
        Some(set) => {
            let mut h = Sha256::new();
            for id in set {
                h.update(id.as_bytes());
                h.update(b"\n");
            }
            hex::encode(h.finalize())
        }
    }
}

/// Namespaces for what this process starts (`--isolation none`; the exec zone has its own): a new
/// network namespace (only loopback, down) when `no_network`, a time namespace with the
/// monotonic and boot clocks offset when `clock_offset_s`. Without root, inside a new user
/// namespace mapping the caller to itself (which then owns them, so the capabilities they need
/// are ours there).
fn own_namespaces(no_network: bool, clock_offset_s: Option<i64>) -> Result<(), Failure> {
    use nix::sched::{unshare, CloneFlags};
    let refuse =
        |e: String| Failure::isolation(format!("giving the probe run its own namespaces: {e}"));
    let mut flags = CloneFlags::empty();
    if no_network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    if let Some(s) = clock_offset_s {
        if !sandbox::time_namespaces_supported() {
            return Err(Failure::isolation(format!("a clock offset of {s} s was planned, but this kernel has no time namespaces (/proc/self/ns/time is missing)"))
                .with_hint("run on Linux >= 5.6 built with CONFIG_TIME_NS, or probe without the clock dimension"));
        }
    }
    if !nix::unistd::geteuid().is_root() && (no_network || clock_offset_s.is_some()) {
        let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
        unshare(CloneFlags::CLONE_NEWUSER | flags).map_err(|e| refuse(e.to_string()))?;
        std::fs::write("/proc/self/setgroups", "deny").map_err(|e| refuse(e.to_string()))?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
            .map_err(|e| refuse(e.to_string()))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
            .map_err(|e| refuse(e.to_string()))?;
    } else if !flags.is_empty() {
        unshare(flags).map_err(|e| refuse(e.to_string()))?;
    }
    if let Some(s) = clock_offset_s {
        sandbox::offset_clocks_for_children(s)
            .map_err(|e| refuse(format!("time namespace (clock offset {s} s): {e}")))?;
    }
    Ok(())
}

/// Pin this process (and what it starts) to the first CPU it may run on.
fn one_cpu() -> Result<(), Failure> {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let refuse = |e: nix::Error| Failure::internal(format!("limiting the check to one CPU: {e}"));
    let current = sched_getaffinity(Pid::from_raw(0)).map_err(refuse)?;
    let first = (0..CpuSet::count())
        .find(|&i| current.is_set(i).unwrap_or(false))
        .unwrap_or(0);
    let mut set = CpuSet::new();
    set.set(first).map_err(refuse)?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(refuse)
}

/// Busy threads beside the check until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(workers: u32) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..workers)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The zones' setup of a probe run: the exec zone's policy for every role (only the check runs).
fn setup_of(spec: &RunSpec) -> CmdResult<ZoneSetup> {
    let state_dir = spec.tree.join(".loopexec");
    let mut setup = ZoneSetup::new(spec.isolation, spec.tree.clone(), state_dir);
    if spec.isolation == Isolation::Native {
        // The exec zone's own time namespace (under `--isolation none`: this process's, above).
        setup.clock_offset_s = spec.plan.clock_offset_s;
        let source = spec
            .check_policy
            .clone()
            .unwrap_or_else(|| DEFAULT_CHECK_POLICY.to_string());
        let (pin, mut policy) = PolicyPin::resolve(&source)?;
        // Load: the zone held to its quota, however idle the host (the policy's own when lower).
        if let Some(quota) = spec.plan.cpu_quota_percent {
            policy.resources.cpu_percent = policy.resources.cpu_percent.min(quota);
        }
        for role in Role::ALL {
            setup = setup.with_policy(role, pin.source.clone(), policy.clone());
        }
    }
    Ok(setup)
}

/// The uid and gid the exec zone runs as when the files it writes must belong to it (native
/// isolation, as root): the probe hands its copies to them (`crate::trust::runner::CheckTarget`).
pub fn zone_owner(
    isolation: Isolation,
    check_policy: Option<&str>,
) -> CmdResult<Option<(u32, u32)>> {
    if isolation != Isolation::Native || !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let (_, policy) = PolicyPin::resolve(check_policy.unwrap_or(DEFAULT_CHECK_POLICY))?;
    Ok(Some((
        policy.identity.uid_when_root,
        policy.identity.gid_when_root,
    )))
}

/// Run the probe run of `spec` in this process.
pub fn run(spec: &RunSpec) -> CmdResult<RunReport> {
    // Namespaces first, while this process has one thread.
    if spec.isolation == Isolation::None {
        own_namespaces(spec.no_network, spec.plan.clock_offset_s)?;
    }
    if spec.plan.one_cpu {
        one_cpu()?;
    }
    let patterns =
        ReportPatterns::new(&spec.reports).map_err(|e| Failure::invalid_input(e.to_string()))?;
    let setup = setup_of(spec)?;
    let mut zone = crate::zones::open_zone(&setup)?;
    let tree = SafeDir::open(&spec.tree).map_err(fs_failure)?;
    let out = SafeDir::open(&spec.artifacts).map_err(fs_failure)?;
    let mut env = operator_env();
    env.retain(|(k, _)| !spec.plan.env.iter().any(|(p, _)| p == k));
    env.extend(spec.plan.env.iter().cloned());
    let cmd = ZoneCommand {
        role: Role::Check,
        command_line: spec.check.clone(),
        cwd: spec.tree.clone(),
        env,
        timeout: Some(Duration::from_millis(spec.timeout_ms)),
        overlays: Vec::new(),
        // The plan's variables reach the check whatever the exec zone's `env.allow` says.
        inject: spec
            .plan
            .env
            .iter()
            .map(|(k, v)| (k.clone(), crate::secret::Secret::new(v.clone())))
            .collect(),
        stdin: None,
        read_only: Vec::new(),
        read_write: Vec::new(),
        read_only_beneath: Vec::new(),
        liveness: Default::default(),
    };
    // Busy threads only without isolation: in the exec zone the quota is the load, and threads
    // here would load the probe's other runs as well.
    let threads = if spec.isolation == Isolation::None {
        spec.plan.load_workers
    } else {
        0
    };
    let _load = (threads > 0).then(|| Load::start(threads));
    let mut shown = Vec::new();
    for repetition in 0..spec.repeat.max(1) {
        let artifacts = Artifacts {
            dir: &out,
            rel: "out",
            stem: format!("{:04}-{repetition}-check", spec.plan.run),
        };
        let report = (!patterns.is_empty()).then_some(ReportSource {
            dir: &tree,
            patterns: &patterns,
        });
        let outcome =
            run_check(zone.as_mut(), &cmd, artifacts, report)?.map_err(Failure::isolation)?;
        let sets = outcome.report.sets();
        let mut record = outcome.record(0);
        record.output_sight = Some(outcome.sight.clone());
        shown.push(ShownRun {
            sight: Some(CheckSight::of_check(&record)),
            class: class_of(outcome.verdict()),
            failing_digest: failing_digest(sets.map(|s| &s.failing)),
            failing_count: sets.map(|s| s.failing.len() as u64),
            exit_code: outcome.run.ending.exit_code(),
            duration_ms: outcome.run.duration.as_millis() as u64,
        });
    }
    // Reaching here, the plan's offset was applied: a zone or namespace that could not apply it
    // refused above.
    Ok(RunReport {
        run: spec.plan.run,
        shown,
        clock_offset_applied_s: spec.plan.clock_offset_s,
    })
}

/// The hidden `__probe-run --spec FILE` command: one run, its report as one JSON object.
pub fn command(spec_path: &std::path::Path) -> CmdResult<crate::output::Outcome> {
    let dir = spec_path
        .parent()
        .ok_or_else(|| Failure::usage("--spec names no file"))?;
    let name = spec_path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Failure::usage("--spec names no file"))?;
    let bytes = SafeDir::open(dir)
        .map_err(fs_failure)?
        .read(name, MAX_SPEC_BYTES)
        .map_err(fs_failure)?;
    let spec: RunSpec = serde_json::from_slice(&bytes)
        .map_err(|e| Failure::invalid_input(format!("{}: {e}", spec_path.display())))?;
    let report = run(&spec)?;
    Ok(crate::output::Outcome::ok("__probe-run")
        .field("report", serde_json::to_value(&report).unwrap_or_default()))
}
