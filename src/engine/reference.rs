//! The known-feasible reference (`--reference REV`, `reference` in loop.toml): a commit of the
//! operator's repository that passes the check, an existence proof that the task can be done.
//! At the start of a detached run, before any agent call, the check runs on the reference's tree
//! in an exec zone (under t0's protected paths, as every check); if it does not pass, the run
//! stops at iteration 0 with `infeasible_suspected` and the reference's failures. The outcome is
//! the receipt's `reference` event; a run without one pins `config.reference: null`, and
//! `explain-halt` says that no existence proof was given.
//!
//! The revision is resolved when the configuration is (`resolve_tree`), so a reference that does
//! not exist is refused before anything is written.

use super::check::{run_check, Artifacts, ReportSource};
use super::commands::RoleCommand;
use super::config::LoopConfig;
use super::detached::{zone_owner, RunWorkspace, WORKSPACE_TARGET};
use super::verdict::Verdict;
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::receipt::events::ReferenceRecord;
use crate::receipt::store::{fs_failure, RunDir, StateDir};
use crate::safefs::SafeDir;
use crate::testreport::paths::ReportPatterns;
use crate::workspace::git::Git;
use crate::workspace::{replay_layers, Baseline, ObjectId};
use crate::zones::Zone;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Where the reference check's scratch layers live, beneath the run directory.
const REFERENCE_DIR: &str = "reference";
const SCRATCH: &str = "check";
/// At most this many failing test ids are named in the halt's detail (all are in the event).
const NAMED_FAILURES: usize = 5;

/// The tree of `rev` in the repository at `workdir`; a usage error naming the revision when it
/// does not resolve to a commit or tree there.
pub fn resolve_tree(workdir: &Path, rev: &str) -> Result<ObjectId, Failure> {
    if rev.is_empty() || rev.starts_with('-') {
        return Err(Failure::usage(format!("--reference {rev:?}: not a revision")));
    }
    let tree = Git::new(workdir).resolve(&format!("{rev}^{{tree}}")).map_err(Failure::from)?;
    tree.ok_or_else(|| {
        Failure::usage(format!("--reference {rev}: no such commit or tree in {}", workdir.display()))
            .with_hint("name a commit of the workdir's repository that passes the check (e.g. a branch or a commit id)")
    })
}

#[allow(clippy::too_many_arguments)]
/// Check the reference of `cfg` on `ws`'s t0 protected paths in `zone`. Returns its record and,
/// when it did not pass, the halt (`infeasible_suspected` with its failures).
pub fn check(
    cfg: &LoopConfig,
    rev: &str,
    statedir: &StateDir,
    run: &RunDir,
    ws: &RunWorkspace,
    zone: &mut dyn Zone,
    artifacts: &SafeDir,
    (agent_policy, check_policy): (&sandbox::Policy, &sandbox::Policy),
) -> CmdResult<(ReferenceRecord, Option<(HaltReason, String)>)> {
    let workdir = Path::new(&cfg.workdir);
    let tree = resolve_tree(workdir, rev)?;
    let t0 = ws.baseline();
    let reference = Baseline::of_tree(workdir, statedir.root(), tree, t0.head_commit, zone_owner(agent_policy)).map_err(Failure::from)?;
    let patterns = ReportPatterns::new(&cfg.report_patterns()).map_err(|e| Failure::invalid_input(e.to_string()))?;
    let dir = run.dir().subdir_or_create(REFERENCE_DIR).map_err(fs_failure)?;
    let check_owner = zone_owner(check_policy);
    if check_owner.is_some() {
        crate::workspace::fsat::allow_traverse(&dir.fd()).map_err(|e| Failure::io(dir.path(), &e.into()))?;
    }
    let scratch = dir.subdir_or_create(SCRATCH).map_err(fs_failure)?;
    let layers = replay_layers(t0, &reference, ws.protected(), &|path| patterns.matches(path), &scratch, Path::new(WORKSPACE_TARGET), check_owner)
        .map_err(Failure::from)?;
    let command = RoleCommand { role: crate::zones::Role::Check, run_id: run.id().as_str(), iteration: 0, overlay: Some(layers.overlay), credential: None };
    let cmd = command.zone_command(cfg, &super::commands::operator_env());
    let writes = scratch.subdir("upper").map_err(fs_failure)?;
    let report = (!patterns.is_empty()).then_some(ReportSource { dir: &writes, patterns: &patterns });
    let stem = "0000-reference".to_string();
    let checked = run_check(zone, &cmd, Artifacts { dir: artifacts, rel: crate::receipt::store::ARTIFACTS, stem }, report);
    drop((writes, scratch));
    // Scratch layers are removed through descriptors (the overlay's work directory is mode 000).
    let _ = crate::workspace::fsat::remove_tree(run.dir().fd().as_raw_fd(), REFERENCE_DIR.as_bytes());
    let checked = checked?;
    let outcome = checked.map_err(Failure::isolation)?;
    let record = outcome.record(0);
    let passed = Verdict::of_check(&record) == Verdict::Pass;
    let failing = record.failing_set.clone();
    let detail = match (passed, &failing) {
        (true, _) => format!("the reference {rev} (tree {}) passes the check", tree.to_hex()),
        (false, Some(failing)) if !failing.is_empty() => {
            let named: Vec<&str> = failing.iter().take(NAMED_FAILURES).map(String::as_str).collect();
            let more = failing.len().saturating_sub(NAMED_FAILURES);
            let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
            format!("the reference {rev} does not pass the check: {} failing ({}{tail}); the task may be infeasible as checked", failing.len(), named.join(", "))
        }
        (false, _) => format!(
            "the reference {rev} does not pass the check ({}); the task may be infeasible as checked",
            record.check_exit.map_or_else(|| "it did not exit".to_string(), |code| format!("exit {code}"))
        ),
    };
    let halt = (!passed).then(|| (HaltReason::InfeasibleSuspected, detail.clone()));
    let record = ReferenceRecord {
        given: true,
        rev: Some(rev.to_string()),
        tree_id: Some(tree.to_hex()),
        passed: Some(passed),
        check_exit: record.check_exit,
        failing_set: failing,
        detail,
    };
    Ok((record, halt))
}
