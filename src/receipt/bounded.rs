//! A bounded receipt whatever the agent does: the per-iteration sets and lists an agent or its
//! check can grow without limit (a report's failing, collected and skipped test ids, a snapshot's
//! protected changes, a guard's findings) stay inline only while they are small. Past
//! [`INLINE_ITEMS`] items or [`INLINE_BYTES`] bytes, the list is left out of its event (a set
//! becomes null, a list keeps its first [`SAMPLE_ITEMS`] items) and an `externalised` event
//! follows it ([`Externalised`]): per list its count, the SHA-256 of the whole list and a sample
//! of [`SAMPLE_ITEMS`] items (each at most [`SAMPLE_ITEM_CHARS`] characters), and the run
//! artifact (`artifacts/<event>-<iteration>.json`, 0600) holding the whole lists, by path, size
//! and digest ([`ArtifactRef`]). `loopexec verify` re-hashes each artifact that is present
//! ([`check_artifacts`]) and says which it could not check.

use crate::receipt::events::{CheckResult, Event, FindingRecord, GuardRecord, ProtectedChangeRecord, SnapshotRecord};
use crate::safefs::{SafeDir, SafeFsError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Most items a list keeps inline in its event.
pub const INLINE_ITEMS: usize = 1000;
/// Most bytes (its JSON) a list keeps inline in its event.
pub const INLINE_BYTES: usize = 64 * 1024;
/// Items of a bounded list's sample.
pub const SAMPLE_ITEMS: usize = 20;
/// Characters of one sampled item (longer ones are cut, marked with `…`).
pub const SAMPLE_ITEM_CHARS: usize = 200;
/// The directory of the run's artifacts, relative to the run directory.
pub const ARTIFACTS: &str = "artifacts";
/// Largest artifact `verify` reads back.
pub const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// A list recorded by count, digest and sample. `sha256` is the hex SHA-256 of the full list as
/// the artifact holds it (its JSON array, compact).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundedList {
    pub count: u64,
    pub sha256: String,
    pub sample: Vec<String>,
}

/// A run artifact named by an event: `path` relative to the run directory, its size and the hex
/// SHA-256 of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRef {
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// The lists of one event that were moved out of it, each by count, digest and sample (keyed by
/// the field name they replace), and the artifact holding them whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Externalised {
    /// The event they were left out of (`check_result`, `snapshot`, `guard`) and its iteration.
    pub of: String,
    pub iteration: u64,
    pub lists: std::collections::BTreeMap<String, BoundedList>,
    pub artifact: ArtifactRef,
}

fn hex_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The digest a [`BoundedList`] records of `items` (the SHA-256 of their compact JSON array).
pub fn list_sha256<T: Serialize>(items: &[T]) -> Option<String> {
    serde_json::to_vec(items).ok().map(|b| hex_sha256(&b))
}

fn too_large<T: Serialize>(items: &[T]) -> bool {
    items.len() > INLINE_ITEMS || serde_json::to_vec(items).map_or(true, |b| b.len() > INLINE_BYTES)
}

fn sample_of(items: impl Iterator<Item = String>) -> Vec<String> {
    items
        .take(SAMPLE_ITEMS)
        .map(|s| if s.chars().count() > SAMPLE_ITEM_CHARS { s.chars().take(SAMPLE_ITEM_CHARS).chain(std::iter::once('…')).collect() } else { s })
        .collect()
}

/// The lists being moved out of one event, collected before the artifact is written.
#[derive(Default)]
struct Moved {
    whole: serde_json::Map<String, serde_json::Value>,
    lists: std::collections::BTreeMap<String, BoundedList>,
}

impl Moved {
    fn take<T: Serialize>(&mut self, field: &str, items: &[T], show: impl Fn(&T) -> String) -> Result<(), SafeFsError> {
        let json = serde_json::to_vec(items).map_err(|e| SafeFsError::Io { path: field.into(), source: std::io::Error::other(e) })?;
        let value = serde_json::from_slice(&json).map_err(|e| SafeFsError::Io { path: field.into(), source: std::io::Error::other(e) })?;
        self.lists.insert(field.into(), BoundedList { count: items.len() as u64, sha256: hex_sha256(&json), sample: sample_of(items.iter().map(show)) });
        self.whole.insert(field.into(), value);
        Ok(())
    }

    /// Write the artifact `artifacts/<of>-<NNNN>[-<tag>].json`.
    fn write(self, run_dir: &SafeDir, of: &str, iteration: u64, tag: Option<&str>) -> Result<Externalised, SafeFsError> {
        let name = match tag {
            Some(t) => format!("{of}-{iteration:04}-{t}"),
            None => format!("{of}-{iteration:04}"),
        };
        let bytes = serde_json::to_vec(&self.whole).map_err(|e| SafeFsError::Io { path: name.clone().into(), source: std::io::Error::other(e) })?;
        let dir = run_dir.subdir_or_create(ARTIFACTS)?;
        let file = format!("{name}.json");
        dir.write_atomic(&file, &bytes)?;
        let artifact = ArtifactRef { path: format!("{ARTIFACTS}/{file}"), bytes: bytes.len() as u64, sha256: hex_sha256(&bytes) };
        Ok(Externalised { of: of.into(), iteration, lists: self.lists, artifact })
    }
}

/// The event as the receipt records it: `None` when it is small enough as it is; else a copy
/// without its large lists, and the `externalised` event to append after it (the lists were
/// written whole to an artifact in `run_dir`).
pub fn bound(event: &Event, run_dir: &SafeDir) -> Result<Option<(Event, Event)>, SafeFsError> {
    let pair = match event {
        Event::CheckResult(c) => bound_check(c, run_dir, "check_result")?.map(|(c, x)| (Event::CheckResult(c), x)),
        // The t0 baseline's check (iteration 0): its sets as a check_result's.
        Event::CheckBaseline(b) => bound_check(&b.check, run_dir, "check_baseline")?
            .map(|(check, x)| (Event::CheckBaseline(crate::receipt::events::CheckBaselineRecord { check, ..b.clone() }), x)),
        Event::HoldoutCheck(h) => bound_check(&h.check, run_dir, "holdout_check")?
            .map(|(check, x)| (Event::HoldoutCheck(crate::receipt::events::HoldoutRecord { check, ..h.clone() }), x)),
        Event::Snapshot(s) => bound_snapshot(s, run_dir)?.map(|(s, x)| (Event::Snapshot(s), x)),
        Event::Guard(g) => bound_guard(g, run_dir)?.map(|(g, x)| (Event::Guard(g), x)),
        _ => None,
    };
    Ok(pair.map(|(e, x)| (e, Event::Externalised(x))))
}

fn bound_check(c: &CheckResult, run_dir: &SafeDir, of: &str) -> Result<Option<(CheckResult, Externalised)>, SafeFsError> {
    let large = |s: &Option<Vec<String>>| s.as_deref().is_some_and(too_large);
    if !large(&c.failing_set) && !large(&c.collected_set) && !large(&c.skipped_set) {
        return Ok(None);
    }
    let mut out = c.clone();
    let mut moved = Moved::default();
    for (field, set) in [("failing_set", &mut out.failing_set), ("collected_set", &mut out.collected_set), ("skipped_set", &mut out.skipped_set)] {
        if let Some(items) = set.take() {
            moved.take(field, &items, String::clone)?;
        }
    }
    let x = moved.write(run_dir, of, c.iteration, None)?;
    Ok(Some((out, x)))
}

/// One list of an event, over the bound: its first [`SAMPLE_ITEMS`] items to keep inline, and
/// the `externalised` record of the whole list (written to its artifact).
fn bound_list<T: Serialize + Clone>(
    (field, items, show): (&str, &[T], fn(&T) -> String),
    (of, iteration, tag): (&str, u64, Option<&str>),
    run_dir: &SafeDir,
) -> Result<Option<(Vec<T>, Externalised)>, SafeFsError> {
    if !too_large(items) {
        return Ok(None);
    }
    let mut moved = Moved::default();
    moved.take(field, items, show)?;
    let x = moved.write(run_dir, of, iteration, tag)?;
    Ok(Some((items.iter().take(SAMPLE_ITEMS).cloned().collect(), x)))
}

fn bound_snapshot(s: &SnapshotRecord, run_dir: &SafeDir) -> Result<Option<(SnapshotRecord, Externalised)>, SafeFsError> {
    let show: fn(&ProtectedChangeRecord) -> String = |c| format!("{} {}", c.change, c.path);
    // The sample stays a list of changes, so the snapshot still reads as not accepted.
    Ok(bound_list(("protected_changes", &s.protected_changes, show), ("snapshot", s.iteration, None), run_dir)?
        .map(|(sample, x)| (SnapshotRecord { protected_changes: sample, ..s.clone() }, x)))
}

fn bound_guard(g: &GuardRecord, run_dir: &SafeDir) -> Result<Option<(GuardRecord, Externalised)>, SafeFsError> {
    let show: fn(&FindingRecord) -> String = |f| match &f.path {
        Some(p) => format!("{p}: {}", f.what),
        None => f.what.clone(),
    };
    let tag: String = g.guard.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(64).collect();
    Ok(bound_list(("findings", &g.findings, show), ("guard", g.iteration, Some(&tag)), run_dir)?
        .map(|(sample, x)| (GuardRecord { findings: sample, ..g.clone() }, x)))
}

/// Every artifact a receipt's events name, in order.
pub fn artifacts_named(events: &[Event]) -> Vec<&ArtifactRef> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Externalised(x) => Some(&x.artifact),
            // A check's failure excerpts (`engine::excerpts`).
            Event::CheckResult(c) => c.excerpts_artifact.as_ref(),
            Event::CheckBaseline(b) => b.check.excerpts_artifact.as_ref(),
            Event::CheckConfirmation(c) => c.check.excerpts_artifact.as_ref(),
            Event::HoldoutCheck(h) => h.check.excerpts_artifact.as_ref(),
            _ => None,
        })
        .collect()
}

/// What `verify` found of the artifacts a receipt names.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ArtifactCheck {
    /// Artifacts present whose size and digest match.
    pub matched: usize,
    /// Artifacts absent: their full lists cannot be checked (the receipt's counts, digests and
    /// samples still are, by the chain and the seal).
    pub absent: Vec<String>,
    /// Artifacts present that do not match (or cannot be read): a sentence each.
    pub mismatched: Vec<String>,
}

/// Re-hash each artifact present in `run_dir` against the event naming it.
pub fn check_artifacts(events: &[Event], run_dir: &SafeDir) -> ArtifactCheck {
    let mut out = ArtifactCheck::default();
    for a in artifacts_named(events) {
        let Some(name) = a.path.strip_prefix(&format!("{ARTIFACTS}/")).filter(|n| !n.is_empty() && !n.contains('/') && !n.starts_with('.')) else {
            out.mismatched.push(format!("{:?} is not a path in {ARTIFACTS}/", a.path));
            continue;
        };
        let dir = match run_dir.subdir(ARTIFACTS) {
            Ok(d) => d,
            Err(_) => {
                out.absent.push(a.path.clone());
                continue;
            }
        };
        if !dir.exists(name) {
            out.absent.push(a.path.clone());
            continue;
        }
        match dir.read(name, MAX_ARTIFACT_BYTES) {
            Ok(bytes) if bytes.len() as u64 == a.bytes && hex_sha256(&bytes) == a.sha256 => out.matched += 1,
            Ok(bytes) => out.mismatched.push(format!("{}: {} bytes, sha256 {}; the receipt says {} bytes, sha256 {}", a.path, bytes.len(), hex_sha256(&bytes), a.bytes, a.sha256)),
            Err(e) => out.mismatched.push(format!("{}: {e}", a.path)),
        }
    }
    out
}

/// A resumed run's history with the lists its receipt moved to artifacts read back whole, so the
/// guards judge the remaining iterations as the live run did. An artifact that is absent or does
/// not match its recorded digest restores nothing (its event keeps its counts and sample); the
/// sentences returned say which.
pub fn rehydrate(history: &mut crate::receipt::history::History, run_dir: &SafeDir) -> Vec<String> {
    let mut notes = Vec::new();
    for record in &mut history.iterations {
        for x in record.externalised.clone() {
            let whole = match read_whole(&x, run_dir) {
                Ok(w) => w,
                Err(why) => {
                    notes.push(format!("{}: {why}; iteration {}'s {} keeps its counts and sample", x.artifact.path, x.iteration, x.of));
                    continue;
                }
            };
            match x.of.as_str() {
                "check_result" => {
                    if let Some(c) = record.check.as_mut() {
                        c.failing_set = list(&whole, "failing_set").or(c.failing_set.take());
                        c.collected_set = list(&whole, "collected_set").or(c.collected_set.take());
                        c.skipped_set = list(&whole, "skipped_set").or(c.skipped_set.take());
                    }
                }
                "snapshot" => {
                    if let (Some(s), Some(all)) = (record.snapshot.as_mut(), list(&whole, "protected_changes")) {
                        s.protected_changes = all;
                    }
                }
                _ => {}
            }
        }
    }
    notes
}

/// The list `field` of an artifact, typed.
fn list<T: serde::de::DeserializeOwned>(whole: &serde_json::Map<String, serde_json::Value>, field: &str) -> Option<T> {
    whole.get(field).cloned().and_then(|v| serde_json::from_value(v).ok())
}

/// The artifact of `x`, checked against its recorded size and digest and against each list's.
fn read_whole(x: &Externalised, run_dir: &SafeDir) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let found = check_artifacts(&[Event::Externalised(x.clone())], run_dir);
    if found.matched != 1 {
        return Err(found.absent.first().map(|_| "absent".to_string()).or_else(|| found.mismatched.first().cloned()).unwrap_or_default());
    }
    let name = x.artifact.path.strip_prefix(&format!("{ARTIFACTS}/")).unwrap_or_default();
    let bytes = run_dir.subdir(ARTIFACTS).and_then(|d| d.read(name, MAX_ARTIFACT_BYTES)).map_err(|e| e.to_string())?;
    let whole: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes).map_err(|e| format!("not a JSON object: {e}"))?;
    for (field, bounded) in &x.lists {
        let ok = whole.get(field).and_then(|v| serde_json::to_vec(v).ok()).is_some_and(|b| hex_sha256(&b) == bounded.sha256);
        if !ok {
            return Err(format!("its {field} does not hash to the recorded digest"));
        }
    }
    Ok(whole)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::sample;

    fn run_dir() -> (tempfile::TempDir, SafeDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        (tmp, dir)
    }

    fn check_with_failing(n: usize) -> CheckResult {
        let Event::CheckResult(mut c) = sample::check_result(3, 1) else { unreachable!() };
        let ids: Vec<String> = (0..n).map(|i| format!("tests::case_{i:06}")).collect();
        c.failing_count = Some(n as u64);
        c.failing_set = Some(ids.clone());
        c.collected_count = Some(n as u64);
        c.collected_set = Some(ids);
        c
    }

    #[test]
    fn a_small_check_result_is_recorded_as_it_is() {
        let (_t, dir) = run_dir();
        assert_eq!(bound(&Event::CheckResult(check_with_failing(INLINE_ITEMS)), &dir).unwrap(), None);
        assert!(!dir.exists(ARTIFACTS));
    }

    #[test]
    fn a_large_failing_set_becomes_count_digest_sample_and_an_artifact_that_verifies() {
        let (_t, dir) = run_dir();
        let full = check_with_failing(200_000);
        let Some((Event::CheckResult(b), Event::Externalised(x))) = bound(&Event::CheckResult(full.clone()), &dir).unwrap() else { panic!("not bounded") };
        assert_eq!((b.failing_set.as_ref(), b.collected_set.as_ref(), b.failing_count), (None, None, Some(200_000)));
        assert_eq!((x.of.as_str(), x.iteration), ("check_result", 3));
        let failing = &x.lists["failing_set"];
        assert_eq!((failing.count, failing.sample.len(), failing.sample[0].as_str()), (200_000, SAMPLE_ITEMS, "tests::case_000000"));
        assert_eq!(failing.sha256, hex_sha256(&serde_json::to_vec(full.failing_set.as_ref().unwrap()).unwrap()));
        assert_eq!(x.artifact.path, "artifacts/check_result-0003.json");
        assert!(serde_json::to_vec(&b).unwrap().len() < 16 * 1024);
        let whole: serde_json::Value = serde_json::from_slice(&dir.subdir(ARTIFACTS).unwrap().read("check_result-0003.json", MAX_ARTIFACT_BYTES).unwrap()).unwrap();
        assert_eq!(whole["failing_set"].as_array().unwrap().len(), 200_000);
        assert!(serde_json::to_vec(&x).unwrap().len() < 16 * 1024);
        assert_eq!(check_artifacts(&[Event::Externalised(x)], &dir), ArtifactCheck { matched: 1, ..Default::default() });
    }

    #[test]
    fn verify_names_an_absent_artifact_and_refuses_a_changed_one() {
        let (_t, dir) = run_dir();
        let Some((_, bounded)) = bound(&Event::CheckResult(check_with_failing(5000)), &dir).unwrap() else { panic!("not bounded") };
        let arts = dir.subdir(ARTIFACTS).unwrap();
        arts.write_atomic("check_result-0003.json", b"{}").unwrap();
        let found = check_artifacts(std::slice::from_ref(&bounded), &dir);
        assert_eq!((found.matched, found.absent.len(), found.mismatched.len()), (0, 0, 1));
        assert!(found.mismatched[0].starts_with("artifacts/check_result-0003.json: 2 bytes"), "{:?}", found.mismatched);
        nix::unistd::unlinkat(Some(std::os::fd::AsRawFd::as_raw_fd(&arts.fd())), "check_result-0003.json", nix::unistd::UnlinkatFlags::NoRemoveDir).unwrap();
        assert_eq!(check_artifacts(&[bounded], &dir), ArtifactCheck { absent: vec!["artifacts/check_result-0003.json".into()], ..Default::default() });
    }

    #[test]
    fn many_protected_changes_keep_a_sample_so_the_snapshot_is_still_refused() {
        let (_t, dir) = run_dir();
        let changes: Vec<ProtectedChangeRecord> = (0..3000).map(|i| ProtectedChangeRecord { path: format!("tests/t{i}.py"), change: "added".into() }).collect();
        let s = SnapshotRecord { iteration: 1, tree_id: "0".repeat(40), changed_paths: 3000, protected_changes: changes, duration_ms: None, awareness: vec![], left_out: None };
        let Some((Event::Snapshot(b), Event::Externalised(x))) = bound(&Event::Snapshot(s), &dir).unwrap() else { panic!("not bounded") };
        assert_eq!((b.protected_changes.len(), b.accepted(), x.lists["protected_changes"].count), (SAMPLE_ITEMS, false, 3000));
    }

    #[test]
    fn a_resumed_history_gets_the_whole_sets_back_from_an_artifact_that_matches() {
        let (_t, dir) = run_dir();
        let full = check_with_failing(5000);
        let Some((bounded, x)) = bound(&Event::CheckResult(full.clone()), &dir).unwrap() else { panic!("not bounded") };
        let lines: Vec<serde_json::Map<String, serde_json::Value>> = [Event::IterationStart { iteration: 3 }, bounded, x]
            .iter()
            .map(|e| {
                let mut m = e.fields().unwrap();
                m.insert("type".into(), e.kind().into());
                m
            })
            .collect();
        let mut history = crate::receipt::history::History::of_lines(&lines).unwrap();
        assert_eq!(history.iterations[0].check.as_ref().unwrap().failing_set, None);
        assert!(rehydrate(&mut history, &dir).is_empty());
        assert_eq!(history.iterations[0].check.as_ref().unwrap().failing_set, full.failing_set);
        dir.subdir(ARTIFACTS).unwrap().write_atomic("check_result-0003.json", b"{}").unwrap();
        let mut tampered = crate::receipt::history::History::of_lines(&lines).unwrap();
        let notes = rehydrate(&mut tampered, &dir);
        assert_eq!((notes.len(), tampered.iterations[0].check.as_ref().unwrap().failing_set.as_ref()), (1, None));
    }

    #[test]
    fn a_sampled_item_is_cut_to_its_bound() {
        let s = sample_of(std::iter::once("x".repeat(10_000)));
        assert_eq!(s[0].chars().count(), SAMPLE_ITEM_CHARS + 1);
    }
}
