//! Running a probe: many runs of the check on the same tree, `jobs` at a time, each in its own
//! process ([`super::zone_run`]) and exec zone, on its own throwaway copy of the operator's tree
//! (`.loopexec/` left out), all beneath one scratch directory that is removed when the probe ends.
//! The copies are made by `cp -a` (links kept as links, nothing followed); under native isolation
//! as root they are handed to the zone's uid, as the exec zone writes them as that user.

use super::perturb::RunPlan;
use super::zone_run::{RunReport, RunSpec};
use crate::error::{CmdResult, Failure, FailureCode};
use crate::zones::Isolation;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// What every run of a probe shares: the check and where it runs.
#[derive(Debug, Clone)]
pub struct CheckTarget {
    /// The operator's tree (copied, never written).
    pub workdir: PathBuf,
    pub isolation: Isolation,
    pub check_policy: Option<String>,
    pub check: String,
    pub timeout_ms: u64,
    pub reports: Vec<String>,
    /// The uid and gid the copies are handed to, as the exec zone writes them as that user
    /// (native isolation, as root: the engine's `probe_run::zone_owner`); `None`: the copies
    /// stay the caller's.
    pub zone_owner: Option<(u32, u32)>,
}

/// How one run departs from the probe's plan beyond its perturbation.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunMode {
    pub no_network: bool,
    pub repeat: u32,
}

/// The scratch directory of a probe, removed with everything in it when dropped.
pub struct Scratch {
    root: PathBuf,
}

impl Scratch {
    pub fn create() -> CmdResult<Scratch> {
        let mut random = [0u8; 6];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut random);
        let root = std::env::temp_dir().join(format!(
            "loopexec-probe-{}-{}",
            std::process::id(),
            hex::encode(random)
        ));
        std::fs::create_dir(&root).map_err(|e| Failure::io(&root, &e))?;
        // The exec zone's uid must reach the copies beneath it.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))
            .map_err(|e| Failure::io(&root, &e))?;
        Ok(Scratch { root })
    }

    pub fn path(&self) -> &Path {
        &self.root
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn run_tool(cmd: &mut Command, what: &str) -> CmdResult<()> {
    let out = cmd
        .output()
        .map_err(|e| Failure::internal(format!("{what}: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(Failure::workspace(format!(
        "{what}: {}",
        crate::inert::inert(stderr.trim())
    )))
}

/// Copy the operator's tree (without `.loopexec/`) to `dest`, a new directory.
fn copy_tree(workdir: &Path, dest: &Path, owner: Option<(u32, u32)>) -> CmdResult<()> {
    std::fs::create_dir_all(dest).map_err(|e| Failure::io(dest, &e))?;
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(workdir).map_err(|e| Failure::io(workdir, &e))? {
        let entry = entry.map_err(|e| Failure::io(workdir, &e))?;
        if entry.file_name() != crate::receipt::store::STATE_DIR {
            entries.push(entry.path());
        }
    }
    if !entries.is_empty() {
        run_tool(
            Command::new("cp")
                .arg("-a")
                .arg("--")
                .args(&entries)
                .arg(dest),
            &format!("copying {} for the probe", workdir.display()),
        )?;
    }
    if let Some((uid, gid)) = owner {
        run_tool(
            Command::new("chown")
                .arg("-R")
                .arg(format!("{uid}:{gid}"))
                .arg("--")
                .arg(dest),
            "handing the probe's copy to the exec zone's uid",
        )?;
    }
    Ok(())
}

/// The spec of the run with `plan`: its own copy beneath `scratch` (moved one level deeper when
/// the plan moves the working directory), its own output directory.
fn prepare(
    target: &CheckTarget,
    scratch: &Scratch,
    plan: &RunPlan,
    mode: RunMode,
    owner: Option<(u32, u32)>,
) -> CmdResult<(RunSpec, PathBuf)> {
    let run_dir = scratch.path().join(format!("run-{:04}", plan.run));
    let tree = match &plan.cwd_suffix {
        Some(suffix) => run_dir.join(suffix).join("tree"),
        None => run_dir.join("tree"),
    };
    copy_tree(&target.workdir, &tree, owner)?;
    if let Some(suffix) = &plan.cwd_suffix {
        std::fs::set_permissions(run_dir.join(suffix), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Failure::io(&run_dir, &e))?;
    }
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o711))
        .map_err(|e| Failure::io(&run_dir, &e))?;
    let artifacts = run_dir.join("out");
    std::fs::create_dir(&artifacts).map_err(|e| Failure::io(&artifacts, &e))?;
    let spec = RunSpec {
        isolation: target.isolation,
        check_policy: target.check_policy.clone(),
        check: target.check.clone(),
        timeout_ms: target.timeout_ms,
        reports: target.reports.clone(),
        tree,
        artifacts,
        plan: plan.clone(),
        no_network: mode.no_network,
        repeat: mode.repeat.max(1),
    };
    let path = run_dir.join("spec.json");
    let text = serde_json::to_vec(&spec)
        .map_err(|e| Failure::internal(format!("writing a probe spec: {e}")))?;
    std::fs::write(&path, text).map_err(|e| Failure::io(&path, &e))?;
    Ok((spec, path))
}

/// A failure the run process reported, with its own code.
fn reported_failure(value: &serde_json::Value) -> Failure {
    let first = &value["errors"][0];
    let code = first["code"].as_str().unwrap_or("internal_error");
    let code = FailureCode::ALL
        .into_iter()
        .find(|c| c.as_str() == code)
        .unwrap_or(FailureCode::InternalError);
    let message = first["message"]
        .as_str()
        .unwrap_or("a probe run failed without saying why");
    let failure = Failure::new(code, format!("probe run: {message}"));
    match first["hint"].as_str() {
        Some(hint) => failure.with_hint(hint),
        None => failure,
    }
}

/// Run one prepared spec in its own process and read its report.
fn run_process(spec_path: &Path) -> CmdResult<RunReport> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::internal(format!("finding loopexec's own executable: {e}")))?;
    let out = Command::new(exe)
        .args(["--json", "__probe-run", "--spec"])
        .arg(spec_path)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Failure::internal(format!("starting a probe run: {e}")))?;
    // Its stdout is loopexec's own one JSON object, bounded by what the run reports.
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        Failure::internal(format!(
            "a probe run printed no JSON object ({e}), exit {:?}",
            out.status.code()
        ))
    })?;
    if value["status"] != "ok" {
        return Err(reported_failure(&value));
    }
    serde_json::from_value(value["report"].clone())
        .map_err(|e| Failure::internal(format!("a probe run's report: {e}")))
}

/// Run `target`'s check once, unperturbed, on its own copy, and read the file `name` it left at
/// the top of that copy (at most `max` bytes, never through a link). For a command whose product
/// is a file (the operator's mutator's list), not its verdict.
pub fn run_once_reading(
    target: &CheckTarget,
    name: &str,
    max: u64,
) -> CmdResult<(RunReport, Result<Vec<u8>, crate::safefs::SafeFsError>)> {
    let scratch = Scratch::create()?;
    let plans = super::perturb::plan(1, &[], 0);
    let (spec, path) = prepare(
        target,
        &scratch,
        &plans[0],
        RunMode::default(),
        target.zone_owner,
    )?;
    let report = run_process(&path)?;
    let tree =
        crate::safefs::SafeDir::open(&spec.tree).map_err(crate::receipt::store::fs_failure)?;
    let bytes = tree.read(name, max);
    drop(scratch);
    Ok((report, bytes))
}

/// Told, from the worker threads, each time a run finishes: `(finished so far, all runs)`.
pub type RunsFinished<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// Run every plan (each with `mode`), `jobs` at a time; reports in plan order.
pub fn execute(
    target: &CheckTarget,
    plans: &[RunPlan],
    mode: RunMode,
    jobs: usize,
) -> CmdResult<Vec<RunReport>> {
    execute_observed(target, plans, mode, jobs, &|_, _| {})
}

/// [`execute`], telling `finished` as each run ends (probe-check's progress).
pub fn execute_observed(
    target: &CheckTarget,
    plans: &[RunPlan],
    mode: RunMode,
    jobs: usize,
    finished: RunsFinished<'_>,
) -> CmdResult<Vec<RunReport>> {
    execute_edited_observed(target, plans, mode, jobs, &|_, _| Ok(()), finished)
}

/// [`execute`], with `edit` applied to each run's copy once it is made (the adequacy canary
/// writes its mutant there).
pub fn execute_edited(
    target: &CheckTarget,
    plans: &[RunPlan],
    mode: RunMode,
    jobs: usize,
    edit: &(dyn Fn(&RunPlan, &Path) -> CmdResult<()> + Sync),
) -> CmdResult<Vec<RunReport>> {
    execute_edited_observed(target, plans, mode, jobs, edit, &|_, _| {})
}

fn execute_edited_observed(
    target: &CheckTarget,
    plans: &[RunPlan],
    mode: RunMode,
    jobs: usize,
    edit: &(dyn Fn(&RunPlan, &Path) -> CmdResult<()> + Sync),
    finished: RunsFinished<'_>,
) -> CmdResult<Vec<RunReport>> {
    let scratch = Scratch::create()?;
    let owner = target.zone_owner;
    let specs = plans
        .iter()
        .map(|p| {
            let (spec, path) = prepare(target, &scratch, p, mode, owner)?;
            edit(p, &spec.tree)?;
            Ok(path)
        })
        .collect::<CmdResult<Vec<_>>>()?;
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<CmdResult<RunReport>>>> =
        Mutex::new((0..specs.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, specs.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(path) = specs.get(i) else { break };
                let result = run_process(path);
                let failed = result.is_err();
                if let Ok(mut r) = results.lock() {
                    r[i] = Some(result);
                }
                finished(done.fetch_add(1, Ordering::SeqCst) + 1, specs.len());
                if failed {
                    // No further run starts once one could not run at all.
                    next.store(specs.len(), Ordering::SeqCst);
                }
            });
        }
    });
    let results = results
        .into_inner()
        .map_err(|_| Failure::internal("a probe run's thread panicked"))?;
    let mut reports = Vec::with_capacity(results.len());
    for result in results.into_iter().flatten() {
        reports.push(result?);
    }
    if reports.len() != plans.len() {
        return Err(Failure::internal("a probe run did not report"));
    }
    drop(scratch);
    Ok(reports)
}
