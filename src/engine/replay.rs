//! `replay`: re-run a halted run's recorded check on its recorded end-state tree and compare what
//! it observes with what the receipt says the loop observed.
//!
//! The end state is the tree of the last accepted `snapshot` (the delivered tree of a detached
//! run), materialised from the operator's repository by its id (never the working copy as it is
//! now), under the same frozen layer of t0's protected paths the loop's check had
//! ([`crate::workspace::replay_layers`]). The check runs in an exec zone with the run's pinned
//! check policy, command, timeout and environment (`LOOPEXEC_RUN_ID`, `LOOPEXEC_ITERATION` of the
//! recorded check, `LOOPEXEC_ROLE=check`). What is compared is a normalised [`Fingerprint`]:
//! the exit class (pass / fail / could-not-run), the failing set and the collected set (from the
//! JUnit report, when one was configured and recorded). Timing, output bytes and paths are not
//! part of it: a replay is a statistical witness, not a byte-identity claim.
//!
//! Replay writes nothing into the receipt; its check's bounded output goes to
//! `runs/<id>/replay/NNNN-check.{stdout,stderr}` (the latest replay's) and its scratch layers
//! are removed after it.

use super::config::LoopConfig;
use super::detached::{zone_owner, WorkspaceMode, WORKSPACE_TARGET};
use crate::capture::ArtifactSink;
use crate::error::{CmdResult, Failure};
use crate::oracle::junit;
use crate::receipt::chain::verify;
use crate::receipt::events::{self, iteration_of, stream_value, type_of};
use crate::receipt::store::{fs_failure, RunDir, StateDir};
use crate::workspace::{replay_layers, Baseline, ObjectId, ProtectedPaths};
use crate::zones::{Ending, Role, ZoneCommand};
use serde::Serialize;
use serde_json::{Map, Value};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

/// The replay's files, beneath the run directory.
pub const REPLAY_DIR: &str = "replay";
const SCRATCH: &str = "check";

/// How a check ended, normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitKind {
    /// Exited 0.
    Pass,
    /// Exited non-zero (not 126/127).
    Fail,
    /// 126/127 (the shell could not find or run it), a signal, a timeout, or no start at all.
    CouldNotRun,
}

impl ExitKind {
    pub fn of(ending: &Ending) -> ExitKind {
        match ending {
            Ending::Exited { code: 0 } => ExitKind::Pass,
            Ending::Exited { code: 126 | 127 } => ExitKind::CouldNotRun,
            Ending::Exited { .. } => ExitKind::Fail,
            _ => ExitKind::CouldNotRun,
        }
    }
}

/// What is compared between the recorded check and the replayed one. A set is `None` when it
/// is not known (no JUnit report configured, or an older receipt without a collected set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fingerprint {
    pub exit_class: ExitKind,
    pub failing_set: Option<Vec<String>>,
    pub collected_set: Option<Vec<String>>,
}

impl Fingerprint {
    /// Whether `observed` matches this recorded fingerprint: the same exit class, and each set
    /// the receipt recorded is observed identically (a set the receipt lacks is not compared).
    pub fn matched_by(&self, observed: &Fingerprint) -> bool {
        self.exit_class == observed.exit_class
            && (self.failing_set.is_none() || self.failing_set == observed.failing_set)
            && (self.collected_set.is_none() || self.collected_set == observed.collected_set)
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
    pub ending: Value,
    pub check_exit: Option<i32>,
    pub duration_ms: u64,
    pub stdout: Value,
    pub stderr: Value,
    /// Why the replayed report could not be read (when the run configured one).
    pub junit_error: Option<String>,
}

fn refuse(message: String) -> Failure {
    Failure::new(crate::error::FailureCode::NotReplayable, message)
}

fn string_set(v: Option<&Value>) -> Option<Vec<String>> {
    v?.as_array()?.iter().map(|s| s.as_str().map(str::to_string)).collect()
}

/// The recorded fingerprint of a `check_result` event.
fn recorded_fingerprint(event: &Map<String, Value>) -> Fingerprint {
    let ending: Option<Ending> = event.get("ending").cloned().and_then(|v| serde_json::from_value(v).ok());
    Fingerprint {
        exit_class: ending.as_ref().map(ExitKind::of).unwrap_or(ExitKind::CouldNotRun),
        failing_set: string_set(event.get("failing_set")),
        collected_set: string_set(event.get("collected_set")),
    }
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

/// A run's verified receipt and the configuration its `run_start` pinned (for `replay` and
/// `reexecute`).
pub fn pinned_run(run: &RunDir) -> CmdResult<(LoopConfig, Vec<Map<String, Value>>)> {
    let bytes = run.receipt_bytes()?;
    let chain = verify(&bytes)
        .map_err(|e| Failure::workspace(format!("{}: receipt does not verify: {e}", run.receipt_path().display())))?;
    let cfg = super::pinned_config(run, &chain.events)?;
    Ok((cfg, chain.events))
}

/// The `halt_reason` of a halted run's receipt.
pub fn halt_reason_of(events: &[Map<String, Value>]) -> Option<String> {
    events.iter().find(|e| type_of(e) == events::HALT).and_then(|e| e.get("halt_reason")).and_then(Value::as_str).map(str::to_string)
}

fn read_recorded(run: &RunDir) -> CmdResult<Recorded> {
    let id = run.id().to_string();
    let (cfg, events) = pinned_run(run)?;
    let broken = |what: &str| Failure::workspace(format!("{}: {what}", run.receipt_path().display()));
    if !events.iter().any(|e| type_of(e) == events::HALT) {
        return Err(refuse(format!("run {id} has not halted; only a halted run has an end state to replay"))
            .with_hint(format!("finish it first (`loopexec run --resume {id}`)")));
    }
    if cfg.workspace != WorkspaceMode::Detached {
        return Err(refuse(format!(
            "run {id} ran in place: no end-state tree was recorded, so there is nothing to replay the check on"
        ))
        .with_hint("replay needs a run with a detached workspace (native isolation in a git repository)"));
    }
    let check = events
        .iter()
        .rev()
        .find(|e| type_of(e) == events::CHECK_RESULT)
        .ok_or_else(|| refuse(format!("run {id} recorded no check result: there is nothing to compare with")))?;
    let iteration = iteration_of(check).ok_or_else(|| broken("a check_result without an iteration"))?;
    let accepted = |e: &&Map<String, Value>| {
        type_of(e) == events::SNAPSHOT && e.get("protected_changes").and_then(Value::as_array).is_some_and(|a| a.is_empty())
    };
    let tree_of = |e: &Map<String, Value>| {
        e.get("tree_id").and_then(Value::as_str).and_then(|t| ObjectId::from_hex(t.as_bytes()))
    };
    let end_tree = events
        .iter()
        .rev()
        .find(accepted)
        .and_then(&tree_of)
        .ok_or_else(|| broken("no accepted snapshot with a tree id"))?;
    let checked_tree = events
        .iter()
        .find(|e| accepted(e) && iteration_of(e) == Some(iteration))
        .and_then(&tree_of)
        .ok_or_else(|| broken(&format!("no accepted snapshot for the check of iteration {iteration}")))?;
    if checked_tree != end_tree {
        return Err(refuse(format!(
            "run {id}'s last check (iteration {iteration}) ran on tree {checked_tree}, but the run ended on tree {end_tree}, which no check ran on"
        )));
    }
    let delivered = events
        .iter()
        .find(|e| type_of(e) == events::HALT)
        .and_then(|h| h.get("delivery")?.get("tree")?.as_str().map(str::to_string));
    if let Some(delivered) = delivered.filter(|d| *d != end_tree.to_hex()) {
        return Err(refuse(format!(
            "run {id} delivered tree {delivered}, but its last recorded check ran on tree {end_tree}: the delivered state was never checked"
        )));
    }
    let ws = events.iter().find(|e| type_of(e) == events::WORKSPACE).ok_or_else(|| broken("no workspace event"))?;
    let text = |k: &str| ws.get(k).and_then(Value::as_str).map(str::to_string);
    let oid = |k: &str| text(k).and_then(|h| ObjectId::from_hex(h.as_bytes()));
    Ok(Recorded {
        repo: text("repo").ok_or_else(|| broken("the workspace event names no repository"))?,
        head_commit: oid("head_commit").ok_or_else(|| broken("the workspace event has no head_commit"))?,
        t0_tree: oid("tree_id").ok_or_else(|| broken("the workspace event has no tree_id"))?,
        cfg,
        end_tree,
        iteration,
        fingerprint: recorded_fingerprint(check),
    })
}

/// Replay run `run`'s last check on its end-state tree.
pub fn replay(statedir: &StateDir, run: &RunDir) -> CmdResult<Replay> {
    let rec = read_recorded(run)?;
    let cfg = &rec.cfg;
    let missing = || Failure::workspace("the run pinned no agent/check policy (a detached run is native)");
    let zones = crate::engine::zone_setup::zone_setup(cfg, statedir.path())?;
    let agent_policy = &zones.policy(Role::Agent).ok_or_else(missing)?.policy;
    let check_policy = &zones.policy(Role::Check).ok_or_else(missing)?.policy;
    let owner = zone_owner(agent_policy);
    let repo = Path::new(&rec.repo);
    let t0 = Baseline::of_tree(repo, statedir.root(), rec.t0_tree, rec.head_commit, owner).map_err(Failure::from)?;
    let end = Baseline::of_tree(repo, statedir.root(), rec.end_tree, rec.head_commit, owner).map_err(Failure::from)?;
    let protected = ProtectedPaths::new(true, &cfg.protected).map_err(Failure::from)?;

    let dir = run.dir().subdir_or_create(REPLAY_DIR).map_err(fs_failure)?;
    let check_owner = zone_owner(check_policy);
    if check_owner.is_some() {
        crate::workspace::fsat::allow_traverse(&dir.fd()).map_err(|e| Failure::io(dir.path(), &e.into()))?;
    }
    // Scratch layers are removed through descriptors (the overlay's work directory is mode 000).
    let remove_scratch = || crate::workspace::fsat::remove_tree(dir.fd().as_raw_fd(), SCRATCH.as_bytes());
    let _ = remove_scratch();
    let scratch = dir.subdir_or_create(SCRATCH).map_err(fs_failure)?;
    let result = run_check(&zones, run, &rec, &t0, &end, &protected, &dir, &scratch, check_owner);
    drop(scratch);
    let _ = remove_scratch();
    result
}

#[allow(clippy::too_many_arguments)]
fn run_check(
    zones: &crate::zones::setup::ZoneSetup,
    run: &RunDir,
    rec: &Recorded,
    t0: &Baseline,
    end: &Baseline,
    protected: &ProtectedPaths,
    dir: &crate::safefs::SafeDir,
    scratch: &crate::safefs::SafeDir,
    check_owner: Option<(u32, u32)>,
) -> CmdResult<Replay> {
    let cfg = &rec.cfg;
    let layers = replay_layers(t0, end, protected, scratch, Path::new(WORKSPACE_TARGET), check_owner).map_err(Failure::from)?;
    // The run's own backend (the native sandbox or its container engine), from the pinned config.
    let mut zone = crate::zones::open_zone(zones)?;
    zone.bind_run(run.path())?;
    let mut env: Vec<(String, String)> = crate::engine::operator_env();
    env.push(("LOOPEXEC_RUN_ID".into(), run.id().to_string()));
    env.push(("LOOPEXEC_ITERATION".into(), rec.iteration.to_string()));
    env.push(("LOOPEXEC_ROLE".into(), Role::Check.as_str().into()));
    let cmd = ZoneCommand {
        role: Role::Check,
        command_line: cfg.check.clone(),
        cwd: layers.overlay.target.clone(),
        env,
        timeout: Some(Duration::from_millis(cfg.check_timeout_ms)),
        overlays: vec![layers.overlay],
        inject: Vec::new(),
    };
    let stem = format!("{:04}-check", rec.iteration);
    let sink = ArtifactSink::new(dir, REPLAY_DIR, &stem);
    let ran = zone.run(&cmd, &sink).map_err(|e| {
        let mut failure = Failure::from(e);
        failure.message = format!("check zone: {}", failure.message);
        failure
    })?;
    let check_exit = ran.ending.exit_code();
    let mut observed = Fingerprint { exit_class: ExitKind::of(&ran.ending), failing_set: None, collected_set: None };
    let mut junit_error = None;
    if let (Some(rel), Some(_)) = (&cfg.junit, check_exit) {
        let writes = scratch.subdir("upper").map_err(fs_failure)?;
        match junit::read_report(&writes, rel) {
            Ok(sets) => {
                observed.failing_set = Some(sets.failing);
                observed.collected_set = Some(sets.collected);
            }
            Err(e) => junit_error = Some(e.to_string()),
        }
    }
    Ok(Replay {
        run_id: run.id().to_string(),
        iteration: rec.iteration,
        tree_id: rec.end_tree.to_hex(),
        matched: rec.fingerprint.matched_by(&observed),
        recorded: rec.fingerprint.clone(),
        observed,
        ending: events::ending_value(&ran.ending),
        check_exit,
        duration_ms: ran.duration.as_millis() as u64,
        stdout: stream_value(&ran.output.stdout),
        stderr: stream_value(&ran.output.stderr),
        junit_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(exit_class: ExitKind, failing: Option<&[&str]>, collected: Option<&[&str]>) -> Fingerprint {
        let set = |s: Option<&[&str]>| s.map(|s| s.iter().map(|x| x.to_string()).collect());
        Fingerprint { exit_class, failing_set: set(failing), collected_set: set(collected) }
    }

    #[test]
    fn exit_codes_normalise_to_three_classes() {
        assert_eq!(ExitKind::of(&Ending::Exited { code: 0 }), ExitKind::Pass);
        assert_eq!(ExitKind::of(&Ending::Exited { code: 3 }), ExitKind::Fail);
        assert_eq!(ExitKind::of(&Ending::Exited { code: 127 }), ExitKind::CouldNotRun);
        assert_eq!(ExitKind::of(&Ending::TimedOut { after_ms: 5 }), ExitKind::CouldNotRun);
        assert_eq!(ExitKind::of(&Ending::Signaled { signal: 9 }), ExitKind::CouldNotRun);
    }

    #[test]
    fn a_different_failing_or_collected_set_is_a_mismatch() {
        let recorded = fp(ExitKind::Fail, Some(&["a::x"]), Some(&["a::x", "a::y"]));
        assert!(recorded.matched_by(&fp(ExitKind::Fail, Some(&["a::x"]), Some(&["a::x", "a::y"]))));
        assert!(!recorded.matched_by(&fp(ExitKind::Fail, Some(&["a::y"]), Some(&["a::x", "a::y"]))));
        assert!(!recorded.matched_by(&fp(ExitKind::Fail, Some(&["a::x"]), Some(&["a::x"]))));
        assert!(!recorded.matched_by(&fp(ExitKind::Fail, None, None)), "an unreadable report does not match a recorded set");
        assert!(!recorded.matched_by(&fp(ExitKind::Pass, Some(&["a::x"]), Some(&["a::x", "a::y"]))));
    }

    #[test]
    fn sets_the_receipt_did_not_record_are_not_compared() {
        let recorded = fp(ExitKind::Pass, None, None);
        assert!(recorded.matched_by(&fp(ExitKind::Pass, Some(&[]), Some(&["a::x"]))));
    }
}
