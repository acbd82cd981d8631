//! The known-feasible reference (`--reference REV|PATCH`, `reference` in loop.toml): a commit of
//! the operator's repository, or a unified diff applied to t0, that passes the check, an
//! existence proof that the task can be done. At the start of a detached run, before any agent
//! call, the check runs on the reference's tree in an exec zone (under t0's protected paths, as
//! every check); if it does not pass, the run stops at iteration 0 with `infeasible_suspected`
//! and the reference's failures. The outcome is the receipt's `reference` event; a run without
//! one pins `config.reference: null`, and `explain-halt` says that no existence proof was given.
//!
//! A value naming an existing file is a PATCH (a file wins over a revision of the same name); it
//! is applied to t0's tree with plumbing only (`read-tree` into a private index, `apply --cached`,
//! `write-tree`: no work tree, no hooks, no filters), so its tree is the one git would make. The
//! reference is resolved when the configuration is ([`resolve`]), so a revision that does not
//! exist or a patch that does not apply to HEAD's tree is refused before anything is written.

use super::check::{run_check, Artifacts, ReportSource};
use super::commands::RoleCommand;
use super::config::LoopConfig;
use super::detached::{zone_owner, RunWorkspace, WORKSPACE_TARGET};
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::receipt::events::ReferenceRecord;
use crate::receipt::store::{fs_failure, RunDir, StateDir};
use crate::rules::verdict::Verdict;
use crate::safefs::SafeDir;
use crate::testreport::paths::ReportPatterns;
use crate::workspace::git::Git;
use crate::workspace::{replay_layers, Baseline, ObjectId};
use crate::zones::Zone;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Where the reference check's scratch layers live, beneath the run directory.
const REFERENCE_DIR: &str = "reference";
const SCRATCH: &str = "check";
/// At most this many failing test ids are named in the halt's detail (all are in the event).
const NAMED_FAILURES: usize = 5;
/// A reference patch larger than this is refused.
const MAX_PATCH_BYTES: u64 = 16 * 1024 * 1024;
/// At most this many characters of git's reason for a patch that does not apply are shown.
const SHOWN_REASON_CHARS: usize = 1000;

/// What `--reference VALUE` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Given {
    /// A commit or tree of the workdir's repository.
    Rev(String),
    /// A unified diff to apply to t0 (an existing file; absolute once resolved).
    Patch(PathBuf),
}

impl Given {
    /// A value naming an existing file (relative to the current directory) is a patch; anything
    /// else is a revision.
    pub fn of(value: &str) -> Given {
        match std::fs::metadata(value) {
            Ok(meta) if meta.is_file() => {
                Given::Patch(std::path::absolute(value).unwrap_or_else(|_| PathBuf::from(value)))
            }
            _ => Given::Rev(value.to_string()),
        }
    }
}

/// The tree of `rev` in the repository at `workdir`; a usage error naming the revision when it
/// does not resolve to a commit or tree there.
pub fn resolve_tree(workdir: &Path, rev: &str) -> Result<ObjectId, Failure> {
    if rev.is_empty() || rev.starts_with('-') {
        return Err(Failure::usage(format!(
            "--reference {rev:?}: not a revision"
        )));
    }
    let tree = Git::new(workdir)
        .resolve(&format!("{rev}^{{tree}}"))
        .map_err(Failure::from)?;
    tree.ok_or_else(|| {
        Failure::usage(format!("--reference {rev}: no such commit or tree in {}", workdir.display()))
            .with_hint("name a commit of the workdir's repository that passes the check (e.g. a branch or a commit id), or a patch file")
    })
}

/// Validate `--reference VALUE` before anything is written, returning the value to pin (a patch
/// by its absolute path). A patch is tried on HEAD's tree, which is t0 unless the run includes
/// uncommitted changes (then it is tried on t0 at the start).
pub fn resolve(workdir: &Path, value: &str, include_uncommitted: bool) -> Result<String, Failure> {
    match Given::of(value) {
        Given::Rev(rev) => resolve_tree(workdir, &rev).map(|_| rev),
        Given::Patch(path) => {
            let bytes = read_patch(&path)?;
            if !include_uncommitted {
                let head = resolve_tree(workdir, "HEAD")?;
                apply_patch(workdir, head, &bytes)
                    .map_err(|why| Failure::usage(not_applying(&path, &why)))?;
            }
            Ok(path.to_string_lossy().into_owned())
        }
    }
}

/// The bytes of the patch at `path` (at most [`MAX_PATCH_BYTES`]).
fn read_patch(path: &Path) -> Result<Vec<u8>, Failure> {
    let unreadable =
        |e: std::io::Error| Failure::invalid_input(format!("--reference {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(MAX_PATCH_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_PATCH_BYTES {
        return Err(Failure::invalid_input(format!(
            "--reference {}: larger than {MAX_PATCH_BYTES} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

fn not_applying(path: &Path, why: &str) -> String {
    format!(
        "--reference {}: the patch does not apply to t0: {why}",
        path.display()
    )
}

/// The tree `patch` makes of `base` in the repository at `workdir`, by plumbing only, in a
/// private index; `Err`: git's reason (bounded, escaped).
fn apply_patch(workdir: &Path, base: ObjectId, patch: &[u8]) -> Result<ObjectId, String> {
    let scratch = tempfile::Builder::new()
        .prefix("loopexec-reference-")
        .tempdir()
        .map_err(|e| format!("a private index: {e}"))?;
    let git = Git::new(workdir).with_index_file(&scratch.path().join("index"));
    let reason = |e: crate::workspace::WorkspaceError| {
        let text = match e {
            crate::workspace::WorkspaceError::Git { detail, .. } => detail,
            other => other.to_string(),
        };
        crate::inert::inert(&text.chars().take(SHOWN_REASON_CHARS).collect::<String>()).into_owned()
    };
    git.run(["read-tree", &base.to_hex()], None)
        .map_err(reason)?;
    git.run(
        ["apply", "--cached", "--binary", "--whitespace=nowarn"],
        Some(patch),
    )
    .map_err(reason)?;
    let out = git.run(["write-tree"], None).map_err(reason)?;
    ObjectId::from_hex(out.strip_suffix(b"\n").unwrap_or(&out))
        .ok_or_else(|| "git write-tree gave no tree id".to_string())
}

/// The reference's tree over `t0`, with the patch's SHA-256 for a patch; `Err`: a patch that
/// does not apply (the detail).
fn reference_tree(
    workdir: &Path,
    given: &Given,
    t0: ObjectId,
) -> CmdResult<Result<(ObjectId, Option<String>), String>> {
    match given {
        Given::Rev(rev) => Ok(Ok((resolve_tree(workdir, rev)?, None))),
        Given::Patch(path) => {
            let bytes = read_patch(path)?;
            let sha256 = hex::encode(Sha256::digest(&bytes));
            Ok(apply_patch(workdir, t0, &bytes)
                .map(|tree| (tree, Some(sha256)))
                .map_err(|why| not_applying(path, &why)))
        }
    }
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
    let t0 = ws.baseline();
    let given = Given::of(rev);
    let (patch, rev_field) = match &given {
        Given::Patch(path) => (Some(path.to_string_lossy().into_owned()), None),
        Given::Rev(rev) => (None, Some(rev.clone())),
    };
    let (tree, patch_sha256) = match reference_tree(workdir, &given, t0.tree_id)? {
        Ok(tree) => tree,
        Err(detail) => {
            // Only with uncommitted changes in t0 (or a patch changed since the start): the
            // reference cannot be built, and nothing is spent on the agent.
            let record = ReferenceRecord {
                given: true,
                rev: rev_field,
                patch,
                patch_sha256: None,
                tree_id: None,
                passed: None,
                check_exit: None,
                failing_set: None,
                detail: detail.clone(),
            };
            return Ok((record, Some((HaltReason::InvariantFailed, detail))));
        }
    };
    let reference = Baseline::of_tree(
        workdir,
        statedir.root(),
        tree,
        t0.head_commit,
        zone_owner(agent_policy),
    )
    .map_err(Failure::from)?;
    let patterns = ReportPatterns::new(&cfg.report_patterns())
        .map_err(|e| Failure::invalid_input(e.to_string()))?;
    let dir = run
        .dir()
        .subdir_or_create(REFERENCE_DIR)
        .map_err(fs_failure)?;
    let check_owner = zone_owner(check_policy);
    if check_owner.is_some() {
        crate::workspace::fsat::allow_traverse(&dir.fd())
            .map_err(|e| Failure::io(dir.path(), &e.into()))?;
    }
    let scratch = dir.subdir_or_create(SCRATCH).map_err(fs_failure)?;
    let layers = replay_layers(
        t0,
        &reference,
        ws.protected(),
        &|path| patterns.matches(path),
        &scratch,
        Path::new(WORKSPACE_TARGET),
        check_owner,
    )
    .map_err(Failure::from)?;
    let command = RoleCommand {
        role: crate::zones::Role::Check,
        run_id: run.id().as_str(),
        iteration: 0,
        overlay: Some(layers.overlay),
        credential: None,
    };
    let mut cmd = command.zone_command(cfg, &super::commands::operator_env());
    cmd.read_only_beneath = ws.check_read_only();
    let writes = scratch.subdir("upper").map_err(fs_failure)?;
    let report = (!patterns.is_empty()).then_some(ReportSource {
        dir: &writes,
        patterns: &patterns,
    });
    let stem = "0000-reference".to_string();
    let checked = run_check(
        zone,
        &cmd,
        Artifacts {
            dir: artifacts,
            rel: crate::receipt::store::ARTIFACTS,
            stem,
        },
        report,
    );
    // The reference's check must leave its tree alone too (super::check_writes).
    let wrote = super::check_writes::writes(
        &layers.tested,
        writes.path(),
        ws.limits(),
        &|path, is_dir| ws.created_counts(path, is_dir, &|p| patterns.matches(p)),
    );
    let wrote =
        super::check_writes::finding(0, &format!("the check of the reference {rev}"), &wrote);
    drop((writes, scratch));
    // Scratch layers are removed through descriptors (the overlay's work directory is mode 000).
    let _ =
        crate::workspace::fsat::remove_tree(run.dir().fd().as_raw_fd(), REFERENCE_DIR.as_bytes());
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
    let (halt, detail) = match wrote {
        Some(finding) => (
            Some((HaltReason::MetricIntegrityViolation, finding.detail.clone())),
            finding.detail,
        ),
        None => (
            (!passed).then(|| (HaltReason::InfeasibleSuspected, detail.clone())),
            detail,
        ),
    };
    let record = ReferenceRecord {
        given: true,
        rev: rev_field,
        patch,
        patch_sha256,
        tree_id: Some(tree.to_hex()),
        passed: Some(passed),
        check_exit: record.check_exit,
        failing_set: failing,
        detail,
    };
    Ok((record, halt))
}
