//! `replay`: re-run a halted run's recorded check on its recorded end-state tree and compare what
//! it observes with what the receipt says the loop observed.
//!
//! The end state is the tree of the last accepted `snapshot` (the delivered tree of a detached
//! run), materialised from the operator's repository by its id (never the working copy as it is
//! now), under the same frozen layer of t0's protected paths the loop's check had
//! ([`crate::workspace::replay_layers`]). The check runs in an exec zone with the run's pinned
//! check policy, command, timeout and environment (the loop's check's: no `LOOPEXEC_*`). What is compared is a normalised [`Fingerprint`]:
//! the exit class (pass / fail / could-not-run), the failing set and the collected set (from the
//! JUnit report, when one was configured and recorded). Timing, output bytes and paths are not
//! part of it: a replay is a statistical witness, not a byte-identity claim.
//!
//! Replay writes nothing into the receipt; its check's bounded output goes to
//! `runs/<id>/replay/NNNN-check.{stdout,stderr}` (the latest replay's) and its scratch layers
//! are removed after it.

use super::check::{run_check, Artifacts, CheckOutcome, ReportSource};
use super::commands::{operator_env, RoleCommand};
use super::config::LoopConfig;
use super::detached::{zone_owner, WorkspaceMode, WORKSPACE_TARGET};
use crate::capture::StreamRecord;
use crate::ending::Ending;
use crate::error::{CmdResult, Failure};
use crate::receipt::chain::verify;
use crate::receipt::events::CheckResult;
use crate::receipt::history::History;
use crate::receipt::store::{fs_failure, RunDir, StateDir};
use crate::rules::verdict::Verdict;
use crate::testreport::paths::ReportPatterns;
use crate::workspace::{replay_layers, Baseline, ObjectId, ProtectedPaths};
use crate::zones::Role;
use ed25519_dalek::VerifyingKey;
use serde::Serialize;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The replay's files, beneath the run directory.
pub const REPLAY_DIR: &str = "replay";
const SCRATCH: &str = "check";

/// What is compared between the recorded check and the replayed one. A set is `None` when it
/// is not known (no JUnit report configured, or an older receipt without a collected set); a set
/// the receipt holds in a run artifact (over its bound) is compared by its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fingerprint {
    pub exit_class: Verdict,
    pub failing_set: Option<Vec<String>>,
    pub collected_set: Option<Vec<String>>,
    /// The SHA-256 of a set the receipt moved to an artifact (`receipt::bounded::BoundedList`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing_sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collected_sha256: Option<String>,
}

impl Fingerprint {
    /// Whether `observed` matches this recorded fingerprint: the same exit class, and each set
    /// the receipt recorded is observed identically, inline or by digest (a set the receipt
    /// lacks is not compared).
    pub fn matched_by(&self, observed: &Fingerprint) -> bool {
        let same = |set: &Option<Vec<String>>,
                    digest: &Option<String>,
                    seen: &Option<Vec<String>>| match (set, digest) {
            (Some(_), _) => set == seen,
            (None, Some(d)) => seen
                .as_ref()
                .is_some_and(|s| crate::receipt::bounded::list_sha256(s).as_ref() == Some(d)),
            (None, None) => true,
        };
        self.exit_class == observed.exit_class
            && same(
                &self.failing_set,
                &self.failing_sha256,
                &observed.failing_set,
            )
            && same(
                &self.collected_set,
                &self.collected_sha256,
                &observed.collected_set,
            )
    }

    /// The fingerprint of a recorded `check_result`, with the lists the receipt moved to an
    /// artifact (`externalised`), if any.
    pub fn recorded(
        check: &CheckResult,
        externalised: Option<&crate::receipt::bounded::Externalised>,
    ) -> Fingerprint {
        let digest = |field: &str| {
            externalised
                .and_then(|x| x.lists.get(field))
                .map(|l| l.sha256.clone())
        };
        Fingerprint {
            exit_class: Verdict::of_check(check),
            failing_set: check.failing_set.clone(),
            collected_set: check.collected_set.clone(),
            failing_sha256: check
                .failing_set
                .is_none()
                .then(|| digest("failing_set"))
                .flatten(),
            collected_sha256: check
                .collected_set
                .is_none()
                .then(|| digest("collected_set"))
                .flatten(),
        }
    }

    /// The fingerprint of a check that just ran.
    pub fn observed(outcome: &CheckOutcome) -> Fingerprint {
        let sets = outcome.report.sets();
        Fingerprint {
            exit_class: outcome.verdict(),
            failing_set: sets.map(|s| s.failing.iter().cloned().collect()),
            collected_set: sets
                .map(|s| super::check::TestSets::listed(&s.collected, &s.collected_repeats)),
            failing_sha256: None,
            collected_sha256: None,
        }
    }
}

/// The outcome of one replay.
#[derive(Debug, Clone, Serialize)]
pub struct Replay {
    pub run_id: String,
    /// The iteration whose check result is replayed (the last one).
    pub iteration: u64,
    /// The end-state tree the check ran on.
    pub tree_id: String,
    pub recorded: Fingerprint,
    pub observed: Fingerprint,
    #[serde(rename = "match")]
    pub matched: bool,
    /// How the replayed check ended, and its exit code when it exited.
    pub ending: Ending,
    pub check_exit: Option<i32>,
    pub duration_ms: u64,
    pub stdout: StreamRecord,
    pub stderr: StreamRecord,
    /// Why the replayed report could not be read (when the run configured one).
    pub junit_error: Option<String>,
}

fn refuse(message: String) -> Failure {
    Failure::new(crate::error::FailureCode::NotReplayable, message)
}

/// What replay needs from a receipt.
struct Recorded {
    cfg: LoopConfig,
    repo: String,
    head_commit: ObjectId,
    t0_tree: ObjectId,
    end_tree: ObjectId,
    iteration: u64,
    fingerprint: Fingerprint,
}

/// A run's verified receipt, folded, and the configuration its `run_start` pinned (for `replay`
/// and `reexecute`). The hash chain needs no key to extend, so every hand acceptance the history
/// honours (it decides which tree is the run's end state) is checked against the operator's key
/// `operator`, the same bytes the history is folded from; an acceptance that fails, or any
/// acceptance when no operator key is available, refuses with `not_verified` (13).
pub fn pinned_run(
    run: &RunDir,
    operator: Option<&VerifyingKey>,
) -> CmdResult<(LoopConfig, History)> {
    let bytes = run.receipt_bytes()?;
    let chain = verify(&bytes).map_err(|e| {
        Failure::workspace(format!(
            "{}: receipt does not verify: {e}",
            run.receipt_path().display()
        ))
    })?;
    let history = History::of_lines(&chain.events)
        .map_err(|e| Failure::workspace(format!("{}: {e}", run.receipt_path().display())))?;
    if let Some((first, _)) = history.hand_accepted.first() {
        let not_verified = |why: String| {
            Failure::new(crate::error::FailureCode::NotVerified, format!("{}: {why}", run.receipt_path().display()))
                .with_hint("a hand acceptance is honoured only when it verifies against the operator's public key (--pubkey FILE, or operator.pub in the configuration directory)")
        };
        match operator {
            None => {
                return Err(not_verified(format!(
                    "the receipt holds a ratchet_accept (of iteration {}) and no operator public key is available to verify it",
                    first.iteration
                )))
            }
            Some(key) => {
                if let Some(Err(why)) = crate::receipt::acceptance::verify_receipt(&bytes, key) {
                    return Err(not_verified(why));
                }
            }
        }
    }
    let cfg = super::pinned_config(run, &history)?;
    Ok((cfg, history))
}

fn read_recorded(run: &RunDir, operator: Option<&VerifyingKey>) -> CmdResult<Recorded> {
    let id = run.id().to_string();
    let (cfg, history) = pinned_run(run, operator)?;
    let broken =
        |what: &str| Failure::workspace(format!("{}: {what}", run.receipt_path().display()));
    let Some(halt) = &history.halt else {
        return Err(refuse(format!(
            "run {id} has not halted; only a halted run has an end state to replay"
        ))
        .with_hint(format!("finish it first (`loopexec run --resume {id}`)")));
    };
    if cfg.workspace != WorkspaceMode::Detached {
        return Err(refuse(format!(
            "run {id} ran in place: no end-state tree was recorded, so there is nothing to replay the check on"
        ))
        .with_hint("replay needs a run with a detached workspace (native isolation in a git repository)"));
    }
    let (iteration, check) = history.last_check().ok_or_else(|| {
        refuse(format!(
            "run {id} recorded no check result: there is nothing to compare with"
        ))
    })?;
    let tree_of =
        |s: &crate::receipt::events::SnapshotRecord| ObjectId::from_hex(s.tree_id.as_bytes());
    let end_tree = history
        .last_accepted_snapshot()
        .and_then(tree_of)
        .ok_or_else(|| broken("no accepted snapshot with a tree id"))?;
    let checked_tree = history
        .iterations
        .iter()
        .filter(|r| r.iteration == iteration)
        .find_map(|r| r.snapshot.as_ref().filter(|s| s.accepted()))
        .and_then(tree_of)
        .ok_or_else(|| {
            broken(&format!(
                "no accepted snapshot for the check of iteration {iteration}"
            ))
        })?;
    if checked_tree != end_tree {
        return Err(refuse(format!(
            "run {id}'s last check (iteration {iteration}) ran on tree {checked_tree}, but the run ended on tree {end_tree}, which no check ran on"
        )));
    }
    let delivered = halt.delivery.as_ref().and_then(|d| d.tree.clone());
    if let Some(delivered) = delivered.filter(|d| *d != end_tree.to_hex()) {
        return Err(refuse(format!(
            "run {id} delivered tree {delivered}, but its last recorded check ran on tree {end_tree}: the delivered state was never checked"
        )));
    }
    let ws = history
        .workspace
        .as_ref()
        .ok_or_else(|| broken("no workspace event"))?;
    let oid = |h: &str| ObjectId::from_hex(h.as_bytes());
    Ok(Recorded {
        repo: ws.repo.clone(),
        head_commit: oid(&ws.head_commit)
            .ok_or_else(|| broken("the workspace event has no head_commit"))?,
        t0_tree: oid(&ws.tree_id).ok_or_else(|| broken("the workspace event has no tree_id"))?,
        fingerprint: Fingerprint::recorded(check, history.externalised(iteration, "check_result")),
        cfg,
        end_tree,
        iteration,
    })
}

/// Replay run `run`'s last check on its end-state tree.
pub fn replay(
    statedir: &StateDir,
    run: &RunDir,
    operator: Option<&VerifyingKey>,
) -> CmdResult<Replay> {
    let rec = read_recorded(run, operator)?;
    let cfg = &rec.cfg;
    let missing =
        || Failure::workspace("the run pinned no agent/check policy (a detached run is native)");
    let zones = super::zone_setup::zone_setup(cfg, statedir.path())?;
    let agent_policy = &zones.policy(Role::Agent).ok_or_else(missing)?.policy;
    let check_policy = &zones.policy(Role::Check).ok_or_else(missing)?.policy;
    let owner = zone_owner(agent_policy);
    let repo = Path::new(&rec.repo);
    let t0 = Baseline::of_tree(repo, statedir.root(), rec.t0_tree, rec.head_commit, owner)
        .map_err(Failure::from)?;
    let end = Baseline::of_tree(repo, statedir.root(), rec.end_tree, rec.head_commit, owner)
        .map_err(Failure::from)?;
    // The loop's allowed test paths came from the agent's tree in its checks: so they do here.
    let exempt = super::allow_change::Allowances::path_globs(&cfg.allow_test_change);
    let protected = ProtectedPaths::new(true, &cfg.protected)
        .and_then(|p| p.exempting(&exempt))
        .map_err(Failure::from)?;

    let dir = run.dir().subdir_or_create(REPLAY_DIR).map_err(fs_failure)?;
    let check_owner = zone_owner(check_policy);
    if check_owner.is_some() {
        crate::workspace::fsat::allow_traverse(&dir.fd())
            .map_err(|e| Failure::io(dir.path(), &e.into()))?;
    }
    // Scratch layers are removed through descriptors (the overlay's work directory is mode 000).
    let remove_scratch =
        || crate::workspace::fsat::remove_tree(dir.fd().as_raw_fd(), SCRATCH.as_bytes());
    let _ = remove_scratch();
    let scratch = dir.subdir_or_create(SCRATCH).map_err(fs_failure)?;
    let result = replay_check(
        &zones,
        run,
        &rec,
        (&t0, &end),
        &protected,
        &dir,
        &scratch,
        check_owner,
    );
    drop(scratch);
    let _ = remove_scratch();
    result
}

#[allow(clippy::too_many_arguments)]
fn replay_check(
    zones: &crate::zones::setup::ZoneSetup,
    run: &RunDir,
    rec: &Recorded,
    (t0, end): (&Baseline, &Baseline),
    protected: &ProtectedPaths,
    dir: &crate::safefs::SafeDir,
    scratch: &crate::safefs::SafeDir,
    check_owner: Option<(u32, u32)>,
) -> CmdResult<Replay> {
    let cfg = &rec.cfg;
    let patterns = ReportPatterns::new(&cfg.report_patterns())
        .map_err(|e| Failure::invalid_input(e.to_string()))?;
    let layers = replay_layers(
        t0,
        end,
        protected,
        &|path| patterns.matches(path),
        scratch,
        Path::new(WORKSPACE_TARGET),
        check_owner,
    )
    .map_err(Failure::from)?;
    // The run's own backend (the native sandbox or its container engine), from the pinned config.
    let mut zone = crate::zones::open_zone(zones)?;
    zone.bind_run(run.path())?;
    let read_only = layers
        .read_only
        .iter()
        .map(|p| {
            std::path::PathBuf::from(
                <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(p),
            )
        })
        .collect();
    let command = RoleCommand {
        role: Role::Check,
        run_id: run.id().as_str(),
        iteration: rec.iteration,
        overlay: Some(layers.overlay),
        credential: None,
    };
    let artifacts = Artifacts {
        dir,
        rel: REPLAY_DIR,
        stem: command.stem(),
    };
    let mut cmd = command.zone_command(cfg, &operator_env());
    // t0's protected paths read-only, as in the loop's own check.
    cmd.read_only_beneath = read_only;
    let writes = scratch.subdir("upper").map_err(fs_failure)?;
    let report = (!patterns.is_empty()).then_some(ReportSource {
        dir: &writes,
        patterns: &patterns,
    });
    let outcome = run_check(zone.as_mut(), &cmd, artifacts, report)?.map_err(Failure::isolation)?;
    let observed = Fingerprint::observed(&outcome);
    Ok(Replay {
        run_id: run.id().to_string(),
        iteration: rec.iteration,
        tree_id: rec.end_tree.to_hex(),
        matched: rec.fingerprint.matched_by(&observed),
        recorded: rec.fingerprint.clone(),
        observed,
        ending: outcome.run.ending.clone(),
        check_exit: outcome.run.ending.exit_code(),
        duration_ms: outcome.run.duration.as_millis() as u64,
        stdout: outcome.run.output.stdout.clone(),
        stderr: outcome.run.output.stderr.clone(),
        junit_error: outcome.report.error(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(
        exit_class: Verdict,
        failing: Option<&[&str]>,
        collected: Option<&[&str]>,
    ) -> Fingerprint {
        let set = |s: Option<&[&str]>| s.map(|s| s.iter().map(|x| x.to_string()).collect());
        Fingerprint {
            exit_class,
            failing_set: set(failing),
            collected_set: set(collected),
            failing_sha256: None,
            collected_sha256: None,
        }
    }

    #[test]
    fn a_different_failing_or_collected_set_is_a_mismatch() {
        let recorded = fp(Verdict::Fail, Some(&["a::x"]), Some(&["a::x", "a::y"]));
        assert!(recorded.matched_by(&fp(Verdict::Fail, Some(&["a::x"]), Some(&["a::x", "a::y"]))));
        assert!(!recorded.matched_by(&fp(Verdict::Fail, Some(&["a::y"]), Some(&["a::x", "a::y"]))));
        assert!(!recorded.matched_by(&fp(Verdict::Fail, Some(&["a::x"]), Some(&["a::x"]))));
        assert!(
            !recorded.matched_by(&fp(Verdict::Fail, None, None)),
            "an unreadable report does not match a recorded set"
        );
        assert!(!recorded.matched_by(&fp(Verdict::Pass, Some(&["a::x"]), Some(&["a::x", "a::y"]))));
    }

    #[test]
    fn a_set_the_receipt_holds_in_an_artifact_is_compared_by_its_digest() {
        let ids: Vec<String> = ["a::x", "a::y"].iter().map(|s| s.to_string()).collect();
        let recorded = Fingerprint {
            failing_sha256: crate::receipt::bounded::list_sha256(&ids),
            ..fp(Verdict::Fail, None, None)
        };
        assert!(recorded.matched_by(&fp(Verdict::Fail, Some(&["a::x", "a::y"]), None)));
        assert!(!recorded.matched_by(&fp(Verdict::Fail, Some(&["a::x"]), None)));
        assert!(
            !recorded.matched_by(&fp(Verdict::Fail, None, None)),
            "an unreadable report does not match a recorded digest"
        );
    }

    #[test]
    fn sets_the_receipt_did_not_record_are_not_compared() {
        let recorded = fp(Verdict::Pass, None, None);
        assert!(recorded.matched_by(&fp(Verdict::Pass, Some(&[]), Some(&["a::x"]))));
    }
}
