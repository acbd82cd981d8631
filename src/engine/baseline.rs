//! The t0 baseline: the check run once on t0, in its exec zone through the one check runner,
//! before the first agent call. It owns:
//!
//! - [`Baseline`], the typed result others build on: the exit code, the collected set C0, the
//!   failing set F0 and the skipped set S0 (from the reports and libtest output of that one run);
//! - its cache under the state dir (`.loopexec/check-baselines/<key>.json`), keyed by t0's tree
//!   id, the check command, the exec policy, the report patterns, the environment and loopexec's
//!   version. An entry is operator data: written atomically, read with a size bound, and one
//!   that is malformed or does not match its key is ignored (recomputed) and said so. A green is
//!   cached only once confirmed, with its confirmations; a green entry holding fewer agreeing
//!   confirmations than the run asks for (one written before confirmations were cached, format
//!   2, has a key of its own and is never read) is ignored and recomputed, never trusted as
//!   confirmed;
//! - the `check_baseline` receipt event, and the iteration-0 halt when the check already passes
//!   on t0 (the agent is never called): a green t0 is confirmed like any green first, by
//!   `confirm_runs` reruns on t0 (`super::confirm`, recorded as `check_confirmation` events of
//!   iteration 0 after `check_baseline`); one that disagrees halts `check_not_deterministic` as a
//!   flaky green does at any iteration (`crate::rules::decide::flake`), and is never cached; a red t0
//!   whose targets all pass (`super::targets`) is the same success at iteration 0, confirmed and
//!   cached by the same rule ([`decide_t0_success`], a pure rule of `crate::rules::baseline`);
//! - [`BaselineSetGuard`], the guard after every check with exit 0: the collected set lost a
//!   member of C0, or the skipped set gained one against S0 (`metric_integrity_violation`; the
//!   comparison is the pure rule `crate::rules::set_guards`, which the halt derivation replays).
//!
//! A resumed run never reruns it: the baseline is read back from the receipt's history.

use super::check::TestSets;
use super::config::LoopConfig;
use super::detached::{Taken, WorkspaceMode};
use super::guards::{CheckStep, Guard};
use super::lifecycle::ActiveRun;
use super::seats::Seat;
use crate::ending::Ending;
use crate::error::CmdResult;
use crate::halt::HaltReason;
use crate::receipt::events::{
    CheckBaselineRecord, CheckResult, ConfirmationRecord, Event, GuardRecord,
};
pub use crate::rules::baseline::{decide_t0_success, succeeds_at_t0, T0Success};
use crate::rules::decide::Step;
use crate::rules::set_guards::T0Sets;
use crate::rules::verdict::{shell_could_not_run, Verdict};
use crate::safefs::SafeDir;
use crate::testreport::shown;
use crate::workspace::Snapshot;
use crate::zones::Zone;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The cache's directory beneath the state dir.
pub const CACHE_DIR: &str = "check-baselines";
/// The entries' locks, beside it (`<key>.lock`; the cache directory holds entries only).
pub const LOCK_DIR: &str = "check-baseline-locks";
/// Largest cache entry read.
const MAX_CACHE_ENTRY_BYTES: u64 = 64 * 1024 * 1024;
/// The cache entry format this version writes (part of the key, too): 2 since the baseline's
/// check records its `output_sight` (entries of format 1 lack it and are recomputed), 3 since a
/// green is cached with its confirmation reruns (entries of format 2 hold an unconfirmed green
/// and are never read: their key is another), 4 since the check records its `outside_attempts`
/// (an entry without them would hold every iteration's check to none: the hermeticity rule).
const CACHE_FORMAT: u32 = 4;

/// The check's result on t0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Baseline {
    pub ending: Ending,
    /// Null unless the check exited.
    pub exit_code: Option<i32>,
    /// C0, F0, S0 (none: no source of that run named any test, so the sets cannot be measured).
    pub sets: Option<TestSets>,
    /// Pass only when the exit code was 0 and every source of evidence agreed.
    pub verdict: Verdict,
    /// Whether it came from the cache.
    pub cached: bool,
}

impl Baseline {
    /// The baseline a `check_baseline` event recorded.
    pub fn of_record(record: &CheckBaselineRecord) -> Baseline {
        let check = &record.check;
        let set = |s: &Option<Vec<String>>| TestSets::unlisted(s.as_deref().unwrap_or_default());
        let sets = check.collected_set.as_ref().map(|_| {
            let (collected, collected_repeats) = set(&check.collected_set);
            let (skipped, skipped_repeats) = set(&check.skipped_set);
            TestSets {
                collected,
                failing: set(&check.failing_set).0,
                skipped,
                collected_repeats,
                skipped_repeats,
                // The receipt keeps the excerpts' digests, not the excerpts.
                excerpts: Default::default(),
            }
        });
        Baseline {
            ending: check.ending.clone(),
            exit_code: check.check_exit,
            sets,
            verdict: Verdict::of_check(check),
            cached: record.cache_hit,
        }
    }

    /// Whether the check already passes on t0.
    pub fn passes(&self) -> bool {
        self.verdict == Verdict::Pass
    }
}

/// The cache key of a baseline on tree `tree_id` under `cfg` with the environment `env`: hex
/// SHA-256 over length-prefixed fields, so no two inputs share a key.
pub fn cache_key(tree_id: &str, cfg: &LoopConfig, env: &[(String, String)]) -> String {
    let mut env: Vec<&(String, String)> = env.iter().collect();
    env.sort();
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(format!("loopexec check baseline {CACHE_FORMAT}").as_bytes());
    field(env!("CARGO_PKG_VERSION").as_bytes());
    field(tree_id.as_bytes());
    field(cfg.check.as_bytes());
    field(cfg.check_timeout_ms.to_string().as_bytes());
    field(format!("{:?}/{:?}/{:?}", cfg.isolation, cfg.backend, cfg.image).as_bytes());
    field(
        cfg.check_policy
            .as_ref()
            .map_or("", |p| p.sha256.as_str())
            .as_bytes(),
    );
    for pattern in cfg.report_patterns() {
        field(pattern.as_bytes());
    }
    // A NUL cannot start a report pattern from argv, so this field is never one of them.
    if let Some(coverage) = &cfg.coverage.report {
        field(b"\0coverage");
        field(coverage.as_bytes());
    }
    // The check's pinned runner variables (`[runner]`), NUL-prefixed like the coverage field.
    let runner = cfg.runner.check_env();
    if !runner.is_empty() {
        field(b"\0runner");
        for (k, v) in &runner {
            field(k.as_bytes());
            field(v.as_bytes());
        }
    }
    field(b"env");
    for (k, v) in env {
        field(k.as_bytes());
        field(v.as_bytes());
    }
    hex::encode(h.finalize())
}

/// One cache entry as stored.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheEntry {
    format: u32,
    key: String,
    check: CheckResult,
    /// The confirmation reruns of a green (all agreeing), in order; empty for any other verdict.
    confirmations: Vec<ConfirmationRecord>,
}

/// What reading the cache gave.
#[derive(Debug)]
pub enum CacheRead {
    /// The baseline's check and, for a green, its confirmations (as many as the run asks for).
    Hit {
        check: CheckResult,
        confirmations: Vec<ConfirmationRecord>,
    },
    /// No usable entry; the note says why when an entry was there and was ignored.
    Miss(Option<String>),
}

fn entry_name(key: &str) -> String {
    format!("{key}.json")
}

/// Read the entry of `key` beneath `dir`, never trusting it: bounded, without following a link,
/// and only when it parses and names the same key and format; a success at iteration 0 (a green,
/// or a red whose targets all pass: `confirmed(check)`) only when it holds at least
/// `confirm_runs` confirmations of iteration 0, all agreeing (the first `confirm_runs` are
/// returned).
pub fn read_cache(
    dir: &SafeDir,
    key: &str,
    confirm_runs: u64,
    confirmed: &dyn Fn(&CheckResult) -> bool,
) -> CacheRead {
    let name = entry_name(key);
    let ignored = |why: String| {
        CacheRead::Miss(Some(format!(
            "cache entry {CACHE_DIR}/{name} ignored ({why}); the baseline was recomputed"
        )))
    };
    let bytes = match dir.read(&name, MAX_CACHE_ENTRY_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.is_not_found() => return CacheRead::Miss(None),
        Err(e) => return ignored(e.to_string()),
    };
    match serde_json::from_slice::<CacheEntry>(&bytes) {
        Err(e) => ignored(format!("malformed: {e}")),
        Ok(entry) if entry.format != CACHE_FORMAT => {
            ignored(format!("format {} is not {CACHE_FORMAT}", entry.format))
        }
        Ok(entry) if entry.key != key => ignored("it names another key".into()),
        Ok(entry) if entry.check.iteration != 0 || entry.check.check_exit.is_none() => {
            ignored("it holds no exited baseline check".into())
        }
        Ok(entry) if confirmed(&entry.check) => {
            let agreeing = entry
                .confirmations
                .iter()
                .take_while(|c| c.agrees && c.check.iteration == 0)
                .count() as u64;
            if agreeing < confirm_runs {
                let what = match Verdict::of_check(&entry.check) {
                    Verdict::Pass => "a green",
                    _ => "a red whose targets all pass",
                };
                return ignored(format!("{what} confirmed by {agreeing} agreeing rerun(s), not the {confirm_runs} this run asks for"));
            }
            let confirmations = entry
                .confirmations
                .into_iter()
                .take(confirm_runs as usize)
                .map(|c| ConfirmationRecord {
                    check: as_cached(c.check),
                    ..c
                })
                .collect();
            CacheRead::Hit {
                check: entry.check,
                confirmations,
            }
        }
        Ok(entry) => CacheRead::Hit {
            check: entry.check,
            confirmations: Vec::new(),
        },
    }
}

/// The lock of one cache entry (`<key>.lock` in [`LOCK_DIR`]: an open-file-description write lock),
/// released when dropped or when its process dies.
pub struct EntryLock {
    _file: std::fs::File,
}

/// What waiting for an entry's lock gave.
pub enum Locked {
    Held(EntryLock),
    /// The operator asked loopexec to stop while another run held it.
    Interrupted(i32),
}

/// How often a run waiting for another's baseline tries the lock again.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// Take the lock of `key`'s entry (its file beneath `dir`, [`LOCK_DIR`]), waiting while another run holds it (it is
/// computing that baseline; its entry is then read instead of computed again).
pub fn lock_entry(dir: &SafeDir, key: &str) -> Result<Locked, String> {
    let file = dir
        .open_rw(&format!("{key}.lock"))
        .map_err(|e| e.to_string())?;
    loop {
        // SAFETY: flock is plain old data; all-zero is a valid value we then fill in.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        // SAFETY: fcntl on a descriptor we own with a valid `struct flock`.
        let rc = unsafe {
            libc::fcntl(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                libc::F_OFD_SETLK,
                &mut fl,
            )
        };
        if rc == 0 {
            return Ok(Locked::Held(EntryLock { _file: file }));
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EACCES) | Some(libc::EINTR) => {}
            _ => return Err(err.to_string()),
        }
        if let Some(signal) = crate::interrupt::pending() {
            return Ok(Locked::Interrupted(signal));
        }
        std::thread::sleep(LOCK_RETRY);
    }
}

/// Store `check` (a green: with its agreeing `confirmations`) as the entry of `key` beneath
/// `dir` (atomically: a reader sees the old entry or the new one, never half of one).
pub fn write_cache(
    dir: &SafeDir,
    key: &str,
    check: &CheckResult,
    confirmations: &[ConfirmationRecord],
) -> Result<(), String> {
    let entry = CacheEntry {
        format: CACHE_FORMAT,
        key: key.to_string(),
        check: check.clone(),
        confirmations: confirmations.to_vec(),
    };
    let bytes = serde_json::to_vec(&entry).map_err(|e| e.to_string())?;
    dir.write_atomic(&entry_name(key), &bytes)
        .map_err(|e| e.to_string())
}

/// Whether a baseline result is worth keeping: the check exited and its shell found it.
fn cacheable(check: &CheckResult) -> bool {
    check
        .check_exit
        .is_some_and(|code| !shell_could_not_run(code))
}

/// Why the sets of `check` cannot be measured, if they cannot.
fn sets_unmeasured(check: &CheckResult) -> Option<String> {
    match (&check.ending, &check.collected_set) {
        (_, Some(_)) => None,
        (Ending::Exited { .. }, None) => Some(
            "the check on t0 left no declared report and no libtest output naming tests: the collected and skipped sets cannot be measured, so no set guard runs"
                .into(),
        ),
        (_, None) => Some("the check on t0 did not exit: the collected and skipped sets cannot be measured, so no set guard runs".into()),
    }
}

/// The result a cache hit is recorded with: its output artifacts belong to the run that computed
/// it, so none is named (their byte counts and digests stay).
fn as_cached(mut check: CheckResult) -> CheckResult {
    check.stdout.artifact = None;
    check.stderr.artifact = None;
    check.excerpts_artifact = None;
    // No zone of this run ran it.
    check.enforcement = None;
    check
}

impl ActiveRun<'_> {
    /// The t0 baseline of this run: read back from the history when the receipt has it, else
    /// computed (or taken from the cache) and recorded as `check_baseline`. Returns the step that
    /// ends the run before any agent call: the halt when the check already passes on t0, a zone
    /// that cannot be set up, or an interrupt. Nothing happens when the loop switched the
    /// baseline off or an iteration already started.
    pub(super) fn t0_baseline(&mut self, zone: &mut dyn Zone) -> CmdResult<Option<Step>> {
        if !self.cfg.baseline {
            return Ok(None);
        }
        if let Err(why) = self.restore_externalised_sets() {
            return Ok(Some(Step::Halt(HaltReason::WorkspaceInvalid, why)));
        }
        if self.history.last_started > 0 {
            return Ok(None);
        }
        let mut t0_tree = None;
        // Held from before the cache is read until its entry is written (after the confirmation
        // reruns of a green), so that runs started together compute one baseline, not one each.
        let mut _entry_lock = None;
        if self.history.check_baseline.is_none() {
            if let Some(stop) = self.record_baseline(zone, &mut t0_tree, &mut _entry_lock)? {
                return Ok(Some(stop));
            }
        }
        let Some(record) = &self.history.check_baseline else {
            return Ok(None);
        };
        let baseline = Baseline::of_record(record);
        let success = match baseline.passes() {
            true => T0Success::Green,
            // A red t0: the loop's targets are selected from it (engine::targets); all of them
            // already passing is a success at iteration 0 too.
            false => match self.select_targets()? {
                Some(Step::Halt(HaltReason::SuccessConditionMet, detail)) => {
                    T0Success::TargetsMet(detail)
                }
                other => return Ok(other),
            },
        };
        // A success on t0 is confirmed like any green before it stands (or is cached).
        if let Some(stop) = self.confirm_baseline(zone, t0_tree)? {
            return Ok(Some(stop));
        }
        Ok(Some(decide_t0_success(
            &self.history,
            self.cfg.confirm_runs,
            &success,
        )))
    }

    /// The confirmation reruns of the t0 baseline that succeeded (green, or its targets met) that the receipt does not hold yet (all
    /// of them; on resume, those a stopped run did not record), on t0 (`tree`: its snapshot,
    /// taken again when `None` in a detached workspace), then the green cached with them when
    /// every one agreed. `Some(step)`: an interrupt, a zone that could not be set up, or a rerun
    /// that wrote to t0 (`metric_integrity_violation`).
    fn confirm_baseline(
        &mut self,
        zone: &mut dyn Zone,
        tree: Option<Snapshot>,
    ) -> CmdResult<Option<Step>> {
        let Some(record) = self.history.check_baseline.clone() else {
            return Ok(None);
        };
        let done = self.history.baseline_confirmations.len() as u64;
        let flaked = self
            .history
            .baseline_confirmations
            .iter()
            .any(|c| !c.agrees);
        if !flaked && done < self.cfg.confirm_runs {
            let tree = match (tree, self.workspace.as_mut()) {
                (Some(tree), _) => Some(tree),
                (None, Some(ws)) => match ws.snapshot() {
                    Taken::Snapshot { snapshot, .. } => Some(snapshot),
                    Taken::Refused(detail) => {
                        return Ok(Some(Step::Halt(HaltReason::WorkspaceInvalid, detail)))
                    }
                    Taken::Interrupted(signal) => return Ok(Some(Step::Interrupted(signal))),
                },
                (None, None) => None,
            };
            match self.rerun_green(zone, 0, tree.as_ref(), &record.check, done + 1, done)? {
                super::confirm::Rerun::Done => {}
                super::confirm::Rerun::Stopped(step) | super::confirm::Rerun::WroteTree(step) => {
                    return Ok(Some(step))
                }
            }
        }
        // Only a confirmed success is cached, with its confirmations (a hit is not written again).
        let confirmations = &self.history.baseline_confirmations;
        let confirmed = confirmations.len() as u64 >= self.cfg.confirm_runs
            && confirmations.iter().all(|c| c.agrees);
        if let (true, false, Some(key)) = (confirmed, record.cache_hit, record.cache_key.as_ref()) {
            let written = self
                .statedir
                .root()
                .subdir_or_create(CACHE_DIR)
                .map_err(|e| e.to_string())
                .and_then(|dir| write_cache(&dir, key, &record.check, confirmations));
            if let Err(e) = written {
                tracing::warn!(error = %e, "the confirmed t0 baseline could not be cached");
            }
        }
        Ok(None)
    }

    /// Run (or read from the cache) the check on t0 and append `check_baseline` (a cache hit on
    /// a green: with the confirmations cached with it). `t0_tree`: the snapshot the check ran on.
    /// `entry_lock`: the cache entry's lock, taken (waiting for another run that holds it)
    /// before the cache is read; the caller holds it until the entry is written.
    fn record_baseline(
        &mut self,
        zone: &mut dyn Zone,
        t0_tree: &mut Option<Snapshot>,
        entry_lock: &mut Option<EntryLock>,
    ) -> CmdResult<Option<Step>> {
        let tree_id = match (&self.workspace, &self.history.workspace) {
            (Some(_), Some(ws)) if self.cfg.workspace == WorkspaceMode::Detached => {
                Some(ws.tree_id.clone())
            }
            _ => None,
        };
        let cache = match &tree_id {
            Some(tree) => Some((
                self.statedir.root().subdir_or_create(CACHE_DIR),
                cache_key(tree, &self.cfg, &self.env),
            )),
            None => None,
        };
        let mut cache_note = match &cache {
            None => Some(
                "not cached: an in-place run has no t0 tree the agent cannot change".to_string(),
            ),
            Some((Err(e), _)) => Some(format!("not cached: {e}")),
            Some((Ok(_), _)) => None,
        };
        if let Some((Ok(dir), key)) = &cache {
            let locks = self
                .statedir
                .root()
                .subdir_or_create(LOCK_DIR)
                .map_err(|e| e.to_string());
            match locks.and_then(|locks| lock_entry(&locks, key)) {
                Ok(Locked::Held(lock)) => *entry_lock = Some(lock),
                Ok(Locked::Interrupted(signal)) => return Ok(Some(Step::Interrupted(signal))),
                Err(e) => {
                    let note = format!("the cache entry could not be locked ({e}): other runs may compute this baseline too");
                    cache_note = Some(cache_note.map_or(note.clone(), |n| format!("{n}; {note}")));
                }
            }
            let targets = self.cfg.targets.clone();
            match read_cache(dir, key, self.cfg.confirm_runs, &|check| {
                succeeds_at_t0(&targets, check)
            }) {
                CacheRead::Hit {
                    check,
                    confirmations,
                } => {
                    let check = as_cached(check);
                    self.append_baseline(check, tree_id, Some(key.clone()), true, None)?;
                    for confirmation in confirmations {
                        self.append(Event::CheckConfirmation(confirmation))?;
                    }
                    return Ok(None);
                }
                CacheRead::Miss(note) => {
                    cache_note = match (note, cache_note) {
                        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
                        (a, b) => a.or(b),
                    }
                }
            }
        }
        let snapshot = match self.workspace.as_mut().map(|ws| ws.snapshot()) {
            None => None,
            Some(Taken::Snapshot { snapshot, .. }) => Some(snapshot),
            Some(Taken::Refused(detail)) => {
                return Ok(Some(Step::Halt(HaltReason::WorkspaceInvalid, detail)))
            }
            Some(Taken::Interrupted(signal)) => return Ok(Some(Step::Interrupted(signal))),
        };
        let outcome = match self.run_check(
            zone,
            0,
            snapshot.as_ref(),
            super::iteration::CheckRun::Iteration,
        )? {
            Ok(outcome) => outcome,
            Err(stop) => return Ok(Some(stop)),
        };
        if let Ending::Interrupted { signal } = outcome.ending() {
            return Ok(Some(Step::Interrupted(*signal)));
        }
        let mut check = outcome.record(0);
        // What the output showed of the evidence's reach: the inactive-guard assessment reads it.
        check.output_sight = (!outcome.sight.is_empty()).then(|| outcome.sight.clone());
        // The operator's own check wrote to t0: it would do so on every tree, so no verdict of
        // it can be trusted; the run halts before any agent call (nothing cached).
        if let Some(finding) = outcome.tree_writes {
            let detail = finding.detail.clone();
            self.append_baseline(
                check,
                tree_id,
                cache.map(|(_, key)| key),
                false,
                Some("not cached: the check wrote to t0".into()),
            )?;
            self.append(Event::Guard(finding))?;
            return Ok(Some(Step::Halt(
                HaltReason::MetricIntegrityViolation,
                detail,
            )));
        }
        // A success at iteration 0 (a green, or a red whose targets all pass) is cached once
        // confirmed (`confirm_baseline`), with its confirmations.
        let unconfirmed = succeeds_at_t0(&self.cfg.targets, &check) && self.cfg.confirm_runs > 0;
        match (&cache, cacheable(&check)) {
            (Some((Ok(_), _)), true) if unconfirmed => {
                let note = match Verdict::of_check(&check) {
                    Verdict::Pass => "a green is cached once its confirmation reruns agree",
                    _ => {
                        "a red whose targets all pass is cached once its confirmation reruns agree"
                    }
                }
                .to_string();
                cache_note = Some(cache_note.map_or(note.clone(), |n| format!("{n}; {note}")));
            }
            (Some((Ok(dir), key)), true) => {
                if let Err(e) = write_cache(dir, key, &check, &[]) {
                    let note = format!("the cache entry could not be written: {e}");
                    cache_note = Some(cache_note.map_or(note.clone(), |n| format!("{n}; {note}")));
                }
            }
            _ => {}
        }
        *t0_tree = snapshot;
        let key = cache.map(|(_, key)| key);
        self.append_baseline(check, tree_id, key, false, cache_note)?;
        Ok(None)
    }

    /// A resumed run's baseline whose sets the receipt moved to a run artifact (over its inline
    /// bound) gets them back from it, checked against the digest the receipt recorded; the set
    /// guard never runs on a baseline it cannot read whole.
    fn restore_externalised_sets(&mut self) -> Result<(), String> {
        let (Some(record), Some(x)) = (
            &self.history.check_baseline,
            &self.history.check_baseline_externalised,
        ) else {
            return Ok(());
        };
        if record.check.collected_set.is_some() {
            return Ok(());
        }
        let path = x.artifact.path.clone();
        let why =
            |e: String| format!("the t0 baseline's sets cannot be read back from {path}: {e}");
        let name = path
            .strip_prefix(crate::receipt::bounded::ARTIFACTS)
            .map(|p| p.trim_start_matches('/'))
            .unwrap_or(&path);
        let bytes = self
            .artifacts
            .read(name, crate::receipt::bounded::MAX_ARTIFACT_BYTES)
            .map_err(|e| why(e.to_string()))?;
        if hex::encode(Sha256::digest(&bytes)) != x.artifact.sha256 {
            return Err(why(
                "its SHA-256 differs from the one the receipt recorded".into()
            ));
        }
        let whole: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&bytes).map_err(|e| why(e.to_string()))?;
        let list = |field: &str| -> Result<Option<Vec<String>>, String> {
            whole
                .get(field)
                .map(|v| {
                    serde_json::from_value(v.clone()).map_err(|e| why(format!("{field}: {e}")))
                })
                .transpose()
        };
        let mut record = record.clone();
        for (field, set) in [
            ("failing_set", &mut record.check.failing_set),
            ("collected_set", &mut record.check.collected_set),
            ("skipped_set", &mut record.check.skipped_set),
        ] {
            if let Some(items) = list(field)? {
                *set = Some(items);
            }
        }
        self.history.check_baseline = Some(record);
        Ok(())
    }

    fn append_baseline(
        &mut self,
        check: CheckResult,
        tree_id: Option<String>,
        cache_key: Option<String>,
        cache_hit: bool,
        cache_note: Option<String>,
    ) -> CmdResult<()> {
        let sets_unmeasured = sets_unmeasured(&check);
        // Which guards cannot see, from the run's setting and what this check on t0 showed.
        let inactive_guards = Some(self.inactive_guards(&check));
        self.append(Event::CheckBaseline(CheckBaselineRecord {
            check,
            tree_id,
            cache_key,
            cache_hit,
            cache_note,
            sets_unmeasured,
            inactive_guards,
        }))
    }
}

/// After every check that exited 0, before its green verdict: the collected set must hold every
/// member of C0 and the skipped set no member that S0 lacks.
#[derive(Debug, Default)]
pub struct BaselineSetGuard {
    /// The loop's `[[allow_test_change]]` ids: exempt from the comparison (each use recorded).
    allowances: super::allow_change::Allowances,
    allowed: Option<crate::receipt::events::TestChangeAllowedRecord>,
}

impl BaselineSetGuard {
    pub fn new(allowances: super::allow_change::Allowances) -> BaselineSetGuard {
        BaselineSetGuard {
            allowances,
            allowed: None,
        }
    }

    /// `check` as the comparison sees it: each allowed id of C0 it lost counted as collected, each
    /// allowed id it newly skipped as not skipped, and those uses. C0, S0 and the comparison
    /// itself ([`set_violation`]) are untouched.
    fn exempting(
        &self,
        check: &CheckResult,
        baseline: &TestSets,
    ) -> (CheckResult, Vec<crate::receipt::events::AllowanceUse>) {
        let mut check = check.clone();
        let mut uses = Vec::new();
        if self.allowances.is_empty() {
            return (check, uses);
        }
        if let Some(collected) = check.collected_set.as_mut() {
            // Counted as the set guard counts (a multiset): each entry of an allowed t0 id that
            // the check lost is put back, once per lost entry.
            let mut have: BTreeMap<&str, u64> = BTreeMap::new();
            for id in collected.iter() {
                *have.entry(id.as_str()).or_insert(0) += 1;
            }
            let mut restored = Vec::new();
            for id in &baseline.collected {
                let at_t0 = baseline
                    .collected_repeats
                    .get(id)
                    .copied()
                    .unwrap_or(1)
                    .max(1);
                let lost = at_t0.saturating_sub(have.get(id.as_str()).copied().unwrap_or(0));
                if lost == 0 {
                    continue;
                }
                if let Some(pin) = self.allowances.for_id(id) {
                    uses.push(super::allow_change::use_of(
                        pin,
                        format!("no longer collected: {}", shown(id)),
                    ));
                    restored.extend(std::iter::repeat_n(id.clone(), lost as usize));
                }
            }
            collected.extend(restored);
        }
        if let Some(skipped) = check.skipped_set.as_mut() {
            // Counted as the set guard counts: the entries of an allowed id beyond its t0 count
            // (none when t0 did not skip it) are taken out, its use named once.
            let mut now: BTreeMap<String, u64> = BTreeMap::new();
            for id in skipped.iter() {
                *now.entry(id.clone()).or_insert(0) += 1;
            }
            let mut excess: BTreeMap<String, (u64, bool)> = BTreeMap::new();
            for (id, n) in now {
                let at_t0 = if baseline.skipped.contains(&id) {
                    baseline.skipped_repeats.get(&id).copied().unwrap_or(1)
                } else {
                    0
                };
                if n > at_t0 && self.allowances.for_id(&id).is_some() {
                    excess.insert(id, (n - at_t0, false));
                }
            }
            skipped.retain(
                |id| match (excess.get_mut(id), self.allowances.for_id(id)) {
                    (Some((left, named)), Some(pin)) if *left > 0 => {
                        if !*named {
                            uses.push(super::allow_change::use_of(
                                pin,
                                format!("newly skipped: {}", shown(id)),
                            ));
                            *named = true;
                        }
                        *left -= 1;
                        false
                    }
                    _ => true,
                },
            );
        }
        (check, uses)
    }
}

/// The set guard's finding on `check` against `baseline`, if the sets moved the wrong way
/// (`crate::rules::set_guards`, which the halt derivation replays).
pub fn set_violation(
    iteration: u64,
    check: &CheckResult,
    baseline: &TestSets,
) -> Option<GuardRecord> {
    set_violation_of("the check", iteration, check, baseline)
}

/// [`set_violation`] of a check named `subject` in the finding (`the held-out check`).
pub fn set_violation_of(
    subject: &str,
    iteration: u64,
    check: &CheckResult,
    baseline: &TestSets,
) -> Option<GuardRecord> {
    crate::rules::set_guards::violation_of(subject, iteration, check, &t0_sets(baseline))
}

/// The t0 sets the set guard compares with, of the baseline's [`TestSets`].
fn t0_sets(sets: &TestSets) -> T0Sets {
    T0Sets {
        collected: sets.collected.clone(),
        skipped: sets.skipped.clone(),
        collected_repeats: sets.collected_repeats.clone(),
        skipped_repeats: sets.skipped_repeats.clone(),
    }
}

impl Guard for BaselineSetGuard {
    fn seat(&self) -> Seat {
        Seat::MetricIntegrity
    }

    fn after_check(&mut self, step: &CheckStep<'_>) -> Option<GuardRecord> {
        self.allowed = None;
        if step.check.check_exit != Some(0) {
            return None;
        }
        let baseline = Baseline::of_record(step.history.check_baseline.as_ref()?);
        let sets = baseline.sets.as_ref()?;
        let (check, uses) = self.exempting(step.check, sets);
        self.allowed = super::allow_change::record(
            step.iteration,
            Seat::MetricIntegrity.as_str(),
            "after_check",
            uses,
        );
        set_violation(step.iteration, &check, sets)
    }

    fn take_allowed(&mut self) -> Option<crate::receipt::events::TestChangeAllowedRecord> {
        self.allowed.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::{sample, FindingRecord};
    use std::collections::BTreeSet;

    fn sets(collected: &[&str], skipped: &[&str]) -> TestSets {
        let collected: Vec<String> = collected.iter().map(|s| s.to_string()).collect();
        let skipped: Vec<String> = skipped.iter().map(|s| s.to_string()).collect();
        let (collected, collected_repeats) = TestSets::unlisted(&collected);
        let (skipped, skipped_repeats) = TestSets::unlisted(&skipped);
        TestSets {
            collected,
            failing: BTreeSet::new(),
            skipped,
            collected_repeats,
            skipped_repeats,
            excerpts: Default::default(),
        }
    }

    #[test]
    fn a_baseline_recorded_without_repeats_reads_each_id_once() {
        let Event::CheckResult(mut c) = sample::check_result(0, 1) else {
            unreachable!()
        };
        c.collected_set = Some(vec!["a".into(), "b".into(), "b".into()]);
        c.skipped_set = Some(vec![]);
        let record = CheckBaselineRecord {
            check: c,
            tree_id: None,
            cache_key: None,
            cache_hit: false,
            cache_note: None,
            sets_unmeasured: None,
            inactive_guards: None,
        };
        let sets = Baseline::of_record(&record).sets.unwrap();
        assert_eq!(sets.collected.iter().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(
            sets.collected_repeats.iter().collect::<Vec<_>>(),
            [(&"b".to_string(), &2)]
        );
    }

    fn allowing(ids: &[&str]) -> BaselineSetGuard {
        let pins: Vec<_> = ids
            .iter()
            .map(|id| crate::engine::allow_change::AllowTestChange {
                path: None,
                id: Some(id.to_string()),
                reason: format!("{id} changes on purpose"),
            })
            .collect();
        BaselineSetGuard::new(crate::engine::allow_change::Allowances::new(&pins).unwrap())
    }

    #[test]
    fn an_allowed_id_lost_or_newly_skipped_is_let_through_and_each_use_is_named() {
        let guard = allowing(&["b", "c"]);
        let t0 = sets(&["a", "b", "c"], &[]);
        let (check, uses) = guard.exempting(&sample::check_with_sets(&["a", "c"], &["c"]), &t0);
        assert_eq!(set_violation(1, &check, &t0), None);
        let what: Vec<&str> = uses.iter().map(|u| u.what.as_str()).collect();
        assert_eq!(what, vec!["no longer collected: b", "newly skipped: c"]);
        assert_eq!(uses[0].reason, "b changes on purpose");
    }

    #[test]
    fn an_allowance_for_one_id_does_not_let_another_lost_id_through() {
        let guard = allowing(&["b"]);
        let t0 = sets(&["a", "b", "c"], &[]);
        let (check, _) = guard.exempting(&sample::check_with_sets(&["a"], &[]), &t0);
        let found = set_violation(1, &check, &t0).unwrap();
        assert_eq!(
            found.findings,
            vec![FindingRecord {
                path: None,
                what: "no longer collected: c".into()
            }]
        );
    }

    #[test]
    fn an_allowed_id_that_lost_one_of_its_repeated_entries_is_put_back_once_per_lost_entry() {
        let guard = allowing(&["doc/c::src/lib.rs - f"]);
        let t0 = sets(
            &[
                "a",
                "doc/c::src/lib.rs - f",
                "doc/c::src/lib.rs - f",
                "doc/c::src/lib.rs - f",
            ],
            &[],
        );
        let (check, uses) = guard.exempting(
            &sample::check_with_sets(&["a", "doc/c::src/lib.rs - f"], &[]),
            &t0,
        );
        assert_eq!(set_violation(1, &check, &t0), None);
        assert_eq!(uses.len(), 1);
        assert_eq!(
            check
                .collected_set
                .unwrap()
                .iter()
                .filter(|id| id.as_str() == "doc/c::src/lib.rs - f")
                .count(),
            3
        );
    }

    #[test]
    fn an_allowed_id_skipped_at_t0_and_now_skipped_more_times_is_let_through_once_per_extra_entry()
    {
        let doc = "doc/c::src/lib.rs - f";
        let guard = allowing(&[doc]);
        let t0 = sets(&["a", doc, doc, doc], &[doc]);
        let (check, uses) = guard.exempting(
            &sample::check_with_sets(&["a", doc, doc, doc], &[doc, doc, doc]),
            &t0,
        );
        assert_eq!(set_violation(1, &check, &t0), None);
        assert_eq!(
            uses.iter().map(|u| u.what.as_str()).collect::<Vec<_>>(),
            vec![format!("newly skipped: {doc}")]
        );
        assert_eq!(check.skipped_set.unwrap(), vec![doc.to_string()]);
    }

    #[test]
    fn an_id_skipped_as_often_as_at_t0_uses_no_allowance() {
        let guard = allowing(&["b"]);
        let t0 = sets(&["a", "b"], &["b"]);
        let (check, uses) = guard.exempting(&sample::check_with_sets(&["a", "b"], &["b"]), &t0);
        assert_eq!(
            (uses.len(), check.skipped_set.unwrap()),
            (0, vec!["b".to_string()])
        );
    }

    #[test]
    fn a_cache_entry_is_read_back_only_under_its_own_key() {
        let dir = tempfile::tempdir().unwrap();
        let safe = SafeDir::open(dir.path()).unwrap();
        let Event::CheckResult(mut check) = sample::check_result(0, 1) else {
            unreachable!()
        };
        check.iteration = 0;
        write_cache(&safe, "k1", &check, &[]).unwrap();
        assert!(
            matches!(read_cache(&safe, "k1", 1, &green_only), CacheRead::Hit { check: c, confirmations } if c == check && confirmations.is_empty())
        );
        assert!(matches!(
            read_cache(&safe, "k2", 1, &green_only),
            CacheRead::Miss(None)
        ));
        std::fs::rename(dir.path().join("k1.json"), dir.path().join("k2.json")).unwrap();
        let CacheRead::Miss(Some(note)) = read_cache(&safe, "k2", 1, &green_only) else {
            panic!("a moved entry was trusted")
        };
        assert_eq!(note, "cache entry check-baselines/k2.json ignored (it names another key); the baseline was recomputed");
    }

    #[test]
    fn a_malformed_cache_entry_is_ignored_and_said_so() {
        let dir = tempfile::tempdir().unwrap();
        let safe = SafeDir::open(dir.path()).unwrap();
        std::fs::write(dir.path().join("k.json"), b"{\"format\":1,").unwrap();
        let CacheRead::Miss(Some(note)) = read_cache(&safe, "k", 1, &green_only) else {
            panic!("a malformed entry was trusted")
        };
        assert!(
            note.starts_with("cache entry check-baselines/k.json ignored (malformed: "),
            "{note}"
        );
    }

    fn green_only(check: &CheckResult) -> bool {
        Verdict::of_check(check) == Verdict::Pass
    }

    fn green_t0() -> CheckResult {
        let Event::CheckResult(mut check) = sample::check_result(0, 0) else {
            unreachable!()
        };
        check.iteration = 0;
        check.stdout.artifact = Some("artifacts/0000-check.stdout".into());
        check
    }

    fn confirmation(k: u64, agrees: bool) -> ConfirmationRecord {
        ConfirmationRecord {
            confirmation: k,
            same_tree_as: None,
            agrees,
            stability_lower_bound: 0.27,
            confidence: 0.95,
            stability_target: 0.95,
            check: green_t0(),
        }
    }

    #[test]
    fn a_cached_green_is_read_back_with_the_confirmations_the_run_asks_for_their_artifacts_unnamed()
    {
        let dir = tempfile::tempdir().unwrap();
        let safe = SafeDir::open(dir.path()).unwrap();
        write_cache(
            &safe,
            "k",
            &green_t0(),
            &[confirmation(1, true), confirmation(2, true)],
        )
        .unwrap();
        let CacheRead::Hit { confirmations, .. } = read_cache(&safe, "k", 1, &green_only) else {
            panic!("a confirmed green was not read back")
        };
        assert_eq!(
            confirmations
                .iter()
                .map(|c| (c.confirmation, c.check.stdout.artifact.clone()))
                .collect::<Vec<_>>(),
            vec![(1, None)]
        );
        assert!(
            matches!(read_cache(&safe, "k", 0, &green_only), CacheRead::Hit { confirmations, .. } if confirmations.is_empty())
        );
    }

    #[test]
    fn a_cached_green_with_fewer_agreeing_confirmations_than_the_run_asks_for_is_ignored_and_recomputed(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let safe = SafeDir::open(dir.path()).unwrap();
        write_cache(&safe, "k", &green_t0(), &[]).unwrap();
        let CacheRead::Miss(Some(note)) = read_cache(&safe, "k", 1, &green_only) else {
            panic!("an unconfirmed green was trusted")
        };
        assert_eq!(note, "cache entry check-baselines/k.json ignored (a green confirmed by 0 agreeing rerun(s), not the 1 this run asks for); the baseline was recomputed");
        write_cache(
            &safe,
            "k",
            &green_t0(),
            &[confirmation(1, true), confirmation(2, false)],
        )
        .unwrap();
        assert!(
            matches!(
                read_cache(&safe, "k", 2, &green_only),
                CacheRead::Miss(Some(_))
            ),
            "a disagreeing confirmation confirms nothing"
        );
        assert!(matches!(
            read_cache(&safe, "k", 1, &green_only),
            CacheRead::Hit { .. }
        ));
    }

    #[test]
    fn a_cache_entry_without_its_confirmations_field_is_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let safe = SafeDir::open(dir.path()).unwrap();
        let entry = serde_json::json!({"format": CACHE_FORMAT, "key": "k", "check": green_t0()});
        std::fs::write(
            dir.path().join("k.json"),
            serde_json::to_vec(&entry).unwrap(),
        )
        .unwrap();
        let CacheRead::Miss(Some(note)) = read_cache(&safe, "k", 0, &green_only) else {
            panic!("an entry without confirmations was trusted")
        };
        assert!(
            note.contains("malformed: missing field `confirmations`"),
            "{note}"
        );
    }
}
