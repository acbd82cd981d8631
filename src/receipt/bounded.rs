//! A bounded receipt whatever the agent does: the per-iteration sets and lists an agent or its
//! check can grow without limit (a report's failing, collected and skipped test ids, a snapshot's
//! protected changes, a guard's findings) stay inline only while they are small. Past
//! [`INLINE_ITEMS`] items or [`INLINE_BYTES`] bytes, the list is left out of its event (a set
//! becomes null, a list keeps its first [`SAMPLE_ITEMS`] items) and an `externalised` event
//! follows it ([`Externalised`]): per list its count, the SHA-256 of the whole list and a sample
//! of [`SAMPLE_ITEMS`] items (each at most [`SAMPLE_ITEM_CHARS`] characters), and the run
//! artifact (`artifacts/<event>-<iteration>.json`, 0600) holding the whole lists, by path, size
//! and digest ([`ArtifactRef`]). The lists so bounded are those of every event embedding check
//! evidence (a check result's sets and failure digests, its evidence's reports, sources and disagreements, in
//! `check_result`, `check_confirmation`, `check_baseline`, `holdout_check`; the `reference`'s
//! failing set), a snapshot's protected changes and a guard's findings; and any event at all
//! whose line would still pass [`MAX_LINE_BYTES`] is trimmed whole ([`fit_whole`]), so no line
//! of a receipt does (never one of [`NEVER_TRIMMED`]). `loopexec verify` re-hashes each artifact
//! that is present ([`check_artifacts`]) and says which it could not check; a resumed run reads
//! every externalised event's lists back through them ([`history_of`]), restoring an event only
//! when the bound run again on it gives back exactly its recorded line ([`resolve`]), and refusing
//! the resume otherwise or when a whole event's artifact cannot be read.

use crate::receipt::events::{
    CheckResult, DisagreementRecord, Event, FailureDigest, FindingRecord, GuardRecord,
    ProtectedChangeRecord, ReferenceRecord, ReportRecord, SnapshotRecord,
};
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
    /// The artifact holds the whole event as the engine built it (`{"event": ...}`), and the
    /// lists are the places trimmed, by JSON pointer ([`fit_whole`]); absent for the typed bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole_event: bool,
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
        .map(|s| {
            if s.chars().count() > SAMPLE_ITEM_CHARS {
                s.chars()
                    .take(SAMPLE_ITEM_CHARS)
                    .chain(std::iter::once('…'))
                    .collect()
            } else {
                s
            }
        })
        .collect()
}

/// The lists being moved out of one event, collected before the artifact is written.
#[derive(Default)]
struct Moved {
    whole: serde_json::Map<String, serde_json::Value>,
    lists: std::collections::BTreeMap<String, BoundedList>,
}

impl Moved {
    fn take<T: Serialize>(
        &mut self,
        field: &str,
        items: &[T],
        show: impl Fn(&T) -> String,
    ) -> Result<(), SafeFsError> {
        let json = serde_json::to_vec(items).map_err(|e| SafeFsError::Io {
            path: field.into(),
            source: std::io::Error::other(e),
        })?;
        let value: serde_json::Value =
            serde_json::from_slice(&json).map_err(|e| SafeFsError::Io {
                path: field.into(),
                source: std::io::Error::other(e),
            })?;
        // The digest is of the list as the artifact holds it (records' keys in sorted order).
        let json = serde_json::to_vec(&value).map_err(|e| SafeFsError::Io {
            path: field.into(),
            source: std::io::Error::other(e),
        })?;
        self.lists.insert(
            field.into(),
            BoundedList {
                count: items.len() as u64,
                sha256: hex_sha256(&json),
                sample: sample_of(items.iter().map(show)),
            },
        );
        self.whole.insert(field.into(), value);
        Ok(())
    }

    /// Write the artifact `artifacts/<of>-<NNNN>[-<tag>].json`.
    /// `run_dir` `None`: nothing is written (the record a resume recomputes to check the one in
    /// the receipt, [`rehydrate`]).
    fn write(
        self,
        run_dir: Option<&SafeDir>,
        of: &str,
        iteration: u64,
        tag: Option<&str>,
    ) -> Result<Externalised, SafeFsError> {
        let name = match tag {
            Some(t) => format!("{of}-{iteration:04}-{t}"),
            None => format!("{of}-{iteration:04}"),
        };
        let bytes = serde_json::to_vec(&self.whole).map_err(|e| SafeFsError::Io {
            path: name.clone().into(),
            source: std::io::Error::other(e),
        })?;
        let file = format!("{name}.json");
        if let Some(run_dir) = run_dir {
            run_dir
                .subdir_or_create(ARTIFACTS)?
                .write_atomic(&file, &bytes)?;
        }
        let artifact = ArtifactRef {
            path: format!("{ARTIFACTS}/{file}"),
            bytes: bytes.len() as u64,
            sha256: hex_sha256(&bytes),
        };
        Ok(Externalised {
            of: of.into(),
            iteration,
            lists: self.lists,
            artifact,
            whole_event: false,
        })
    }
}

/// Most bytes of one receipt line (its compact JSON, the chain's `seq`, `prev`, `ts` and `type`
/// included) that [`bound`] lets through, whatever the event: the guarantee every event keeps.
/// The typed bound keeps each of an event's lists within [`INLINE_ITEMS`] / [`INLINE_BYTES`];
/// an event still over this after it (a string or list no typed rule knows) is trimmed whole
/// ([`fit_whole`]).
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// Room left in [`MAX_LINE_BYTES`] for the chain's own fields.
const CHAIN_ROOM: usize = 512;
/// Most trimmed places an `externalised` event of a whole-event trim names (the artifact holds
/// the whole event either way).
pub const MAX_TRIMMED_NAMED: usize = 20;

/// The event as the receipt records it, and the `externalised` events to append right after it
/// (each naming the artifact holding what was left out).
#[derive(Debug, Clone, PartialEq)]
pub struct Bounded {
    pub event: Event,
    pub after: Vec<Event>,
}

/// The event as the receipt records it: `None` when it is small enough as it is; else a copy
/// without its large lists, and the `externalised` events to append after it (the lists were
/// written whole to an artifact in `run_dir`). Every event goes through here (the engine's one
/// append path): the typed rules below bound the lists of the events that carry check evidence,
/// snapshots and guards, and any event (of any type, now or added later) whose line would still
/// be over [`MAX_LINE_BYTES`] is trimmed whole ([`fit_whole`]).
pub fn bound(event: &Event, run_dir: &SafeDir) -> Result<Option<Bounded>, SafeFsError> {
    bound_in(event, Some(run_dir))
}

/// [`bound`], writing its artifacts to `run_dir` (`None`: writing nothing).
fn bound_in(event: &Event, run_dir: Option<&SafeDir>) -> Result<Option<Bounded>, SafeFsError> {
    use crate::receipt::events::{CheckBaselineRecord, ConfirmationRecord, HoldoutRecord};
    let typed = match event {
        Event::CheckResult(c) => {
            bound_check(c, run_dir, "check_result", None)?.map(|(c, x)| (Event::CheckResult(c), x))
        }
        // The t0 baseline's check (iteration 0): its sets as a check_result's.
        Event::CheckBaseline(b) => {
            bound_check(&b.check, run_dir, "check_baseline", None)?.map(|(check, x)| {
                (
                    Event::CheckBaseline(CheckBaselineRecord { check, ..b.clone() }),
                    x,
                )
            })
        }
        Event::HoldoutCheck(h) => bound_check(&h.check, run_dir, "holdout_check", None)?
            .map(|(check, x)| (Event::HoldoutCheck(HoldoutRecord { check, ..h.clone() }), x)),
        // A rerun embeds a whole check result: bounded like its iteration's, in an artifact of
        // its own per rerun (`check_confirmation-NNNN-cK.json`).
        Event::CheckConfirmation(c) => bound_check(
            &c.check,
            run_dir,
            "check_confirmation",
            Some(&format!("c{}", c.confirmation)),
        )?
        .map(|(check, x)| {
            (
                Event::CheckConfirmation(ConfirmationRecord { check, ..c.clone() }),
                x,
            )
        }),
        Event::Reference(r) => bound_reference(r, run_dir)?.map(|(r, x)| (Event::Reference(r), x)),
        Event::Snapshot(s) => bound_snapshot(s, run_dir)?.map(|(s, x)| (Event::Snapshot(s), x)),
        Event::Guard(g) => bound_guard(g, run_dir)?.map(|(g, x)| (Event::Guard(g), x)),
        _ => None,
    };
    let (recorded, mut after) = match typed {
        Some((e, x)) => (e, vec![Event::Externalised(x)]),
        None => (event.clone(), vec![]),
    };
    match fit_in(event, &recorded, run_dir)? {
        Some((fitted, x)) => {
            after.push(Event::Externalised(x));
            Ok(Some(Bounded {
                event: fitted,
                after,
            }))
        }
        None if after.is_empty() => Ok(None),
        None => Ok(Some(Bounded {
            event: recorded,
            after,
        })),
    }
}

/// Most characters kept of one string of a record sampled inline (a report's path or error, a
/// disagreement's detail).
pub const SAMPLED_FIELD_CHARS: usize = SAMPLE_ITEM_CHARS;

fn cut(s: &str, chars: usize) -> String {
    match s.char_indices().nth(chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn cut_opt(s: &Option<String>) -> Option<String> {
    s.as_deref().map(|s| cut(s, SAMPLED_FIELD_CHARS))
}

/// A report record as a sample keeps it: every string cut to [`SAMPLED_FIELD_CHARS`].
pub fn sampled_report(r: &ReportRecord) -> ReportRecord {
    ReportRecord {
        pattern: cut(&r.pattern, SAMPLED_FIELD_CHARS),
        path: cut_opt(&r.path),
        format: cut_opt(&r.format),
        counts: r.counts,
        error: cut_opt(&r.error),
    }
}

fn sampled_disagreement(d: &DisagreementRecord) -> DisagreementRecord {
    DisagreementRecord {
        kind: cut(&d.kind, SAMPLED_FIELD_CHARS),
        subject: cut(&d.subject, SAMPLED_FIELD_CHARS),
        detail: cut(&d.detail, SAMPLED_FIELD_CHARS),
    }
}

/// `items` as a sample keeps them inline: the first [`SAMPLE_ITEMS`], each through `cap`.
pub fn sample_items<T>(items: &[T], cap: impl Fn(&T) -> T) -> Vec<T> {
    items.iter().take(SAMPLE_ITEMS).map(cap).collect()
}

/// Whether `items` is over the inline bound ([`INLINE_ITEMS`] items or [`INLINE_BYTES`] bytes).
pub fn over_bound<T: Serialize>(items: &[T]) -> bool {
    too_large(items)
}

fn bound_check(
    c: &CheckResult,
    run_dir: Option<&SafeDir>,
    of: &str,
    tag: Option<&str>,
) -> Result<Option<(CheckResult, Externalised)>, SafeFsError> {
    let large = |s: &Option<Vec<String>>| s.as_deref().is_some_and(too_large);
    let sets_large = large(&c.failing_set) || large(&c.collected_set) || large(&c.skipped_set);
    let evidence = c.evidence.as_ref();
    let reports_large = evidence.is_some_and(|e| too_large(&e.reports));
    let sources_large = evidence.is_some_and(|e| too_large(&e.sources));
    let disagreements_large = evidence.is_some_and(|e| too_large(&e.disagreements));
    // One digest per failing test with an excerpt: as many as the check has failures.
    let digests_large = large_digests(&c.failure_digests);
    if !sets_large && !reports_large && !sources_large && !disagreements_large && !digests_large {
        return Ok(None);
    }
    let mut out = c.clone();
    let mut moved = Moved::default();
    if sets_large {
        for (field, set) in [
            ("failing_set", &mut out.failing_set),
            ("collected_set", &mut out.collected_set),
            ("skipped_set", &mut out.skipped_set),
        ] {
            if let Some(items) = set.take() {
                moved.take(field, &items, String::clone)?;
            }
        }
    }
    if digests_large {
        if let Some(items) = out.failure_digests.take() {
            let show: fn(&FailureDigest) -> String = |d| format!("{} {}", d.test, d.sha256);
            moved.take("failure_digests", &items, show)?;
        }
    }
    // The evidence's lists keep a sample inline (never empty when the list was not), so a
    // reader still sees that there were reports and what kind of disagreement there was; the
    // verdict is a field of its own and is never sampled.
    if let Some(e) = out.evidence.as_mut() {
        if reports_large {
            let show: fn(&ReportRecord) -> String = |r| {
                format!(
                    "{} {}",
                    r.path.as_deref().unwrap_or("(no file)"),
                    r.error.as_deref().unwrap_or("")
                )
            };
            moved.take("evidence.reports", &e.reports, show)?;
            e.reports = sample_items(&e.reports, sampled_report);
        }
        if sources_large {
            moved.take("evidence.sources", &e.sources, String::clone)?;
            e.sources = sample_items(&e.sources, |s| cut(s, SAMPLED_FIELD_CHARS));
        }
        if disagreements_large {
            let show: fn(&DisagreementRecord) -> String =
                |d| format!("{} {}: {}", d.kind, d.subject, d.detail);
            moved.take("evidence.disagreements", &e.disagreements, show)?;
            e.disagreements = sample_items(&e.disagreements, sampled_disagreement);
        }
    }
    let x = moved.write(run_dir, of, c.iteration, tag)?;
    Ok(Some((out, x)))
}

fn large_digests(d: &Option<Vec<FailureDigest>>) -> bool {
    d.as_deref().is_some_and(too_large)
}

/// The reference's failing set, over the bound: left out (null) like a check's.
fn bound_reference(
    r: &ReferenceRecord,
    run_dir: Option<&SafeDir>,
) -> Result<Option<(ReferenceRecord, Externalised)>, SafeFsError> {
    let Some(failing) = r.failing_set.as_deref().filter(|f| too_large(f)) else {
        return Ok(None);
    };
    let mut moved = Moved::default();
    moved.take("failing_set", failing, String::clone)?;
    let x = moved.write(run_dir, "reference", 0, None)?;
    Ok(Some((
        ReferenceRecord {
            failing_set: None,
            ..r.clone()
        },
        x,
    )))
}

/// The compact JSON line `event` makes, without the chain's fields.
fn line_bytes(event: &Event) -> Result<usize, SafeFsError> {
    serde_json::to_vec(event)
        .map(|b| b.len())
        .map_err(|e| SafeFsError::Io {
            path: event.kind().into(),
            source: std::io::Error::other(e),
        })
}

/// The iteration an event names (`iteration`, top level; 0 without one).
fn iteration_of(value: &serde_json::Value) -> u64 {
    value
        .get("iteration")
        .and_then(serde_json::Value::as_u64)
        .or_else(|| {
            value
                .pointer("/check/iteration")
                .and_then(serde_json::Value::as_u64)
        })
        .unwrap_or(0)
}

/// The trims of a whole-event fit, by pass: lists cut to so many items, strings to so many
/// characters. Lists of up to 5 items (fixed-size tuples such as a report's counts) are never cut,
/// nor strings of up to [`UNCUT_CHARS`] characters (the `type` tag, enum values, identifiers),
/// nor the `type` tag whatever its length, so a trimmed event still reads as its type.
const FIT_PASSES: [(usize, usize); 2] = [(SAMPLE_ITEMS, SAMPLE_ITEM_CHARS), (5, UNCUT_CHARS)];
/// Strings of up to so many characters are never cut by a whole-event trim.
pub const UNCUT_CHARS: usize = 64;
/// The event types a whole-event trim refuses (their append fails): what a resume acts on as the
/// receipt says it (the run's start and keys, an operator's acceptance, the halt, a task_list
/// run's plan and its tasks' starts and checkpoints) or an
/// `externalised` event itself, which is small by construction; none of them is ever restored
/// from an artifact.
pub const NEVER_TRIMMED: [&str; 8] = [
    "run_start",
    "run_key",
    "ratchet_accept",
    "halt",
    "externalised",
    "task_plan",
    "task_started",
    "task_checkpoint",
];

/// The last resort of the bound, for any event: when `recorded` (the event after its typed
/// bound) still makes a line over [`MAX_LINE_BYTES`], every list in it past a pass's item count
/// keeps its first items and every string past its character count is cut (marked `…`), pass
/// after pass until the line fits; `original` (the event as the engine built it) is written whole
/// to the artifact `artifacts/<type>-<NNNN>-whole-<digest>.json` (as `{"event": ...}`), and the
/// `externalised` event returned (`whole_event`) names it, with the count, digest and sample of
/// the first [`MAX_TRIMMED_NAMED`] places trimmed (by JSON pointer). A trimmed event that no
/// longer reads as its type, or that does not fit even trimmed, is an error: nothing over the
/// bound is ever written.
pub fn fit_whole(
    original: &Event,
    recorded: &Event,
    run_dir: &SafeDir,
) -> Result<Option<(Event, Externalised)>, SafeFsError> {
    fit_in(original, recorded, Some(run_dir))
}

fn fit_in(
    original: &Event,
    recorded: &Event,
    run_dir: Option<&SafeDir>,
) -> Result<Option<(Event, Externalised)>, SafeFsError> {
    let limit = MAX_LINE_BYTES - CHAIN_ROOM;
    if line_bytes(recorded)? <= limit {
        return Ok(None);
    }
    let kind = original.kind();
    let fail = |why: String| SafeFsError::Io {
        path: kind.into(),
        source: std::io::Error::other(why),
    };
    if NEVER_TRIMMED.contains(&kind) {
        return Err(fail(format!("a {kind} event is over the receipt's line bound ({MAX_LINE_BYTES} bytes), and a {kind} event is never trimmed")));
    }
    let value = serde_json::to_value(recorded).map_err(|e| fail(e.to_string()))?;
    let mut fitted = None;
    let mut lists = std::collections::BTreeMap::new();
    for (items, chars) in FIT_PASSES {
        let mut v = value.clone();
        let mut trimmed = Vec::new();
        trim(&mut v, items, chars, &mut trimmed);
        let event: Event = serde_json::from_value(v).map_err(|e| {
            fail(format!(
                "a trimmed {kind} event no longer reads as one: {e}"
            ))
        })?;
        if event.kind() != kind {
            return Err(fail(format!(
                "a trimmed {kind} event reads as {}",
                event.kind()
            )));
        }
        if line_bytes(&event)? <= limit {
            lists = trimmed.into_iter().take(MAX_TRIMMED_NAMED).collect();
            fitted = Some(event);
            break;
        }
    }
    let Some(fitted) = fitted else {
        return Err(fail(format!(
            "a {kind} event is over the receipt's line bound ({MAX_LINE_BYTES} bytes) even trimmed"
        )));
    };
    let whole = serde_json::to_vec(&serde_json::json!({ "event": original }))
        .map_err(|e| fail(e.to_string()))?;
    let digest = hex_sha256(&whole);
    let iteration = iteration_of(&value);
    let file = format!("{kind}-{iteration:04}-whole-{}.json", &digest[..16]);
    if let Some(run_dir) = run_dir {
        run_dir
            .subdir_or_create(ARTIFACTS)?
            .write_atomic(&file, &whole)?;
    }
    let artifact = ArtifactRef {
        path: format!("{ARTIFACTS}/{file}"),
        bytes: whole.len() as u64,
        sha256: digest,
    };
    Ok(Some((
        fitted,
        Externalised {
            of: kind.into(),
            iteration,
            lists,
            artifact,
            whole_event: true,
        },
    )))
}

/// Trim `v` in place (lists past `items` items, strings past `chars` characters), noting each
/// place trimmed (its JSON pointer, and the count, digest and sample of what was there). The
/// values are the engine's own typed events made JSON (a depth its types fix), walked with an
/// explicit stack.
fn trim(
    v: &mut serde_json::Value,
    items: usize,
    chars: usize,
    trimmed: &mut Vec<(String, BoundedList)>,
) {
    use serde_json::Value;
    let mut stack: Vec<(String, &mut Value)> = vec![(String::new(), v)];
    while let Some((pointer, v)) = stack.pop() {
        match v {
            Value::String(s)
                if pointer != "/type" && s.chars().nth(chars.max(UNCUT_CHARS)).is_some() =>
            {
                if trimmed.len() < MAX_TRIMMED_NAMED {
                    let json = serde_json::to_vec(&*s).unwrap_or_default();
                    trimmed.push((
                        pointer,
                        BoundedList {
                            count: s.chars().count() as u64,
                            sha256: hex_sha256(&json),
                            sample: sample_of(std::iter::once(s.clone())),
                        },
                    ));
                }
                *s = cut(s, chars.max(UNCUT_CHARS));
            }
            Value::Array(a) => {
                if a.len() > items.max(5) {
                    if trimmed.len() < MAX_TRIMMED_NAMED {
                        let json = serde_json::to_vec(&*a).unwrap_or_default();
                        let shown = a
                            .iter()
                            .map(|x| serde_json::to_string(x).unwrap_or_default());
                        trimmed.push((
                            pointer.clone(),
                            BoundedList {
                                count: a.len() as u64,
                                sha256: hex_sha256(&json),
                                sample: sample_of(shown),
                            },
                        ));
                    }
                    a.truncate(items.max(5));
                }
                for (i, x) in a.iter_mut().enumerate() {
                    stack.push((format!("{pointer}/{i}"), x));
                }
            }
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    let key = k.replace('~', "~0").replace('/', "~1");
                    stack.push((format!("{pointer}/{key}"), x));
                }
            }
            _ => {}
        }
    }
}

/// One list of an event, over the bound: its first [`SAMPLE_ITEMS`] items to keep inline, and
/// the `externalised` record of the whole list (written to its artifact).
fn bound_list<T: Serialize + Clone>(
    (field, items, show): (&str, &[T], fn(&T) -> String),
    (of, iteration, tag): (&str, u64, Option<&str>),
    run_dir: Option<&SafeDir>,
) -> Result<Option<(Vec<T>, Externalised)>, SafeFsError> {
    if !too_large(items) {
        return Ok(None);
    }
    let mut moved = Moved::default();
    moved.take(field, items, show)?;
    let x = moved.write(run_dir, of, iteration, tag)?;
    Ok(Some((
        items.iter().take(SAMPLE_ITEMS).cloned().collect(),
        x,
    )))
}

fn bound_snapshot(
    s: &SnapshotRecord,
    run_dir: Option<&SafeDir>,
) -> Result<Option<(SnapshotRecord, Externalised)>, SafeFsError> {
    let show: fn(&ProtectedChangeRecord) -> String = |c| format!("{} {}", c.change, c.path);
    // The sample stays a list of changes, so the snapshot still reads as not accepted.
    Ok(bound_list(
        ("protected_changes", &s.protected_changes, show),
        ("snapshot", s.iteration, None),
        run_dir,
    )?
    .map(|(sample, x)| {
        (
            SnapshotRecord {
                protected_changes: sample,
                ..s.clone()
            },
            x,
        )
    }))
}

fn bound_guard(
    g: &GuardRecord,
    run_dir: Option<&SafeDir>,
) -> Result<Option<(GuardRecord, Externalised)>, SafeFsError> {
    let show: fn(&FindingRecord) -> String = |f| match &f.path {
        Some(p) => format!("{p}: {}", f.what),
        None => f.what.clone(),
    };
    let tag: String = g
        .guard
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(64)
        .collect();
    Ok(bound_list(
        ("findings", &g.findings, show),
        ("guard", g.iteration, Some(&tag)),
        run_dir,
    )?
    .map(|(sample, x)| {
        (
            GuardRecord {
                findings: sample,
                ..g.clone()
            },
            x,
        )
    }))
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
        let Some(name) = a
            .path
            .strip_prefix(&format!("{ARTIFACTS}/"))
            .filter(|n| !n.is_empty() && !n.contains('/') && !n.starts_with('.'))
        else {
            out.mismatched
                .push(format!("{:?} is not a path in {ARTIFACTS}/", a.path));
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
            Ok(bytes) if bytes.len() as u64 == a.bytes && hex_sha256(&bytes) == a.sha256 => {
                out.matched += 1
            }
            Ok(bytes) => out.mismatched.push(format!(
                "{}: {} bytes, sha256 {}; the receipt says {} bytes, sha256 {}",
                a.path,
                bytes.len(),
                hex_sha256(&bytes),
                a.bytes,
                a.sha256
            )),
            Err(e) => out.mismatched.push(format!("{}: {e}", a.path)),
        }
    }
    out
}

/// A resumed run's history with what its receipt moved to artifacts read back whole, so the
/// guards and the progress rules judge the remaining iterations as the live run did (see
/// [`rehydrate`] for what is restored and when the resume is refused instead); the sentences
/// returned say which typed lists could not be restored.
pub fn history_of(
    lines: &[serde_json::Map<String, serde_json::Value>],
    run_dir: &SafeDir,
) -> Result<(crate::receipt::history::History, Vec<String>), Unrestorable> {
    let mut recorded =
        crate::receipt::events::Recorded::decode_all(lines).map_err(Unrestorable::Decode)?;
    let notes = rehydrate(&mut recorded, run_dir).map_err(Unrestorable::Refused)?;
    Ok((crate::receipt::history::History::fold(&recorded), notes))
}

/// Why a receipt's history cannot be read back for a resume.
#[derive(Debug)]
pub enum Unrestorable {
    /// A line does not decode as an event.
    Decode(crate::receipt::events::EventError),
    /// An `externalised` event is not the bound's own record of the event it follows, or a
    /// trimmed event's whole copy cannot be read back (a sentence each).
    Refused(Vec<String>),
}

impl std::fmt::Display for Unrestorable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unrestorable::Decode(e) => write!(f, "{e}"),
            Unrestorable::Refused(why) => write!(f, "{}", why.join("; ")),
        }
    }
}

/// What [`resolve`] found of a receipt's `externalised` events.
#[derive(Debug, Default)]
pub struct Resolved {
    /// Typed lists whose artifact is absent or changed: their event keeps its counts, nulls and
    /// samples (a sentence each).
    pub notes: Vec<String>,
    /// Whole events trimmed to fit whose artifact is absent or changed: a resume cannot judge
    /// them (a sentence each).
    pub unrestorable: Vec<String>,
    /// `externalised` events that are not the bound's own record of the event they follow
    /// (placed after no event or another type's, an artifact whose event or lists the bound
    /// would not have recorded so): the receipt is tampered (a sentence each).
    pub forged: Vec<String>,
}

/// Restore, in place, each event that `externalised` events follow from their artifacts, for a
/// resume: the notes of [`Resolved`], or the refusal (forged or unrestorable, named).
pub fn rehydrate(
    recorded: &mut [crate::receipt::events::Recorded],
    run_dir: &SafeDir,
) -> Result<Vec<String>, Vec<String>> {
    let found = resolve(recorded, run_dir);
    if found.forged.is_empty() && found.unrestorable.is_empty() {
        Ok(found.notes)
    } else {
        Err(found.forged.into_iter().chain(found.unrestorable).collect())
    }
}

/// Each event followed by `externalised` events is restored only when the bound, run again on
/// the restored event, gives back EXACTLY what the receipt recorded (the event's line and every
/// `externalised` event after it, their artifact references aside, which are checked against
/// the artifacts' bytes): so an artifact restores only the original of its line. The shapes the
/// bound writes are the event, then its typed record, its whole-event record, or the typed then
/// the whole one; a whole-event record restores the whole event (never one of
/// [`NEVER_TRIMMED`]); a typed one alone restores the lists it names.
pub fn resolve(recorded: &mut [crate::receipt::events::Recorded], run_dir: &SafeDir) -> Resolved {
    let mut out = Resolved::default();
    let mut i = 0;
    while i < recorded.len() {
        if let Event::Externalised(x) = &recorded[i].event {
            out.forged.push(format!(
                "{}: the externalised event at line {} follows no event it bounds",
                x.artifact.path,
                i + 1
            ));
            i += 1;
            continue;
        }
        let j = i;
        let mut end = j + 1;
        while end < recorded.len() && matches!(recorded[end].event, Event::Externalised(_)) {
            end += 1;
        }
        i = end;
        let xs: Vec<Externalised> = recorded[j + 1..end]
            .iter()
            .filter_map(|r| {
                if let Event::Externalised(x) = &r.event {
                    Some(x.clone())
                } else {
                    None
                }
            })
            .collect();
        if xs.is_empty() {
            continue;
        }
        let pristine = &recorded[j].event;
        let kind = pristine.kind();
        let line = j + 1;
        let shape_ok = xs.iter().all(|x| x.of == kind)
            && match xs.as_slice() {
                [_] => true,
                [a, b] => !a.whole_event && b.whole_event,
                _ => false,
            };
        if !shape_ok {
            let named: Vec<String> = xs
                .iter()
                .map(|x| {
                    format!(
                        "{} ({} of {})",
                        x.artifact.path,
                        if x.whole_event { "whole" } else { "lists" },
                        x.of
                    )
                })
                .collect();
            out.forged.push(format!("the {kind} event at line {line} is followed by externalised events the bound does not write: {}", named.join(", ")));
            continue;
        }
        let last = &xs[xs.len() - 1];
        if NEVER_TRIMMED.contains(&kind) {
            out.forged.push(format!("{}: the {kind} event at line {line} is never bounded, so never restored from an artifact", last.artifact.path));
            continue;
        }
        let candidate = if last.whole_event {
            let whole = match read_whole(last, run_dir) {
                Ok(w) => w,
                Err(why) => {
                    out.unrestorable.push(format!(
                        "{}: {why}; the {kind} event at line {line} was trimmed to fit the line bound and cannot be read back whole",
                        last.artifact.path
                    ));
                    continue;
                }
            };
            match whole
                .get("event")
                .cloned()
                .map(serde_json::from_value::<Event>)
            {
                Some(Ok(original)) => original,
                Some(Err(e)) => {
                    out.forged.push(format!(
                        "{}: its event does not read: {e}",
                        last.artifact.path
                    ));
                    continue;
                }
                None => {
                    out.forged
                        .push(format!("{}: it holds no event", last.artifact.path));
                    continue;
                }
            }
        } else {
            let whole = match read_whole(last, run_dir) {
                Ok(w) => w,
                Err(why) => {
                    out.notes.push(format!(
                        "{}: {why}; iteration {}'s {kind} keeps its counts and sample",
                        last.artifact.path, last.iteration
                    ));
                    continue;
                }
            };
            let mut candidate = pristine.clone();
            if let Err(why) = restore(&mut candidate, &whole) {
                out.forged.push(format!("{}: {why}", last.artifact.path));
                continue;
            }
            candidate
        };
        match exactly_recorded(&candidate, pristine, &xs) {
            Ok(()) => recorded[j].event = candidate,
            Err(why) => out.forged.push(format!(
                "{}: {why}; it is not the original of the {kind} event at line {line}",
                last.artifact.path
            )),
        }
    }
    out
}

/// Whether the bound of `candidate` is exactly `pristine` followed by `xs` (artifact references
/// aside).
fn exactly_recorded(
    candidate: &Event,
    pristine: &Event,
    xs: &[Externalised],
) -> Result<(), String> {
    let bounded = bound_in(candidate, None)
        .map_err(|e| format!("the bound refuses its event: {e}"))?
        .ok_or("its event needs no bound")?;
    if bounded.event != *pristine {
        return Err("its event, bounded, is not the recorded one".into());
    }
    let without_ref =
        |x: &Externalised| (x.of.clone(), x.iteration, x.lists.clone(), x.whole_event);
    let again: Vec<_> = bounded
        .after
        .iter()
        .filter_map(|e| {
            if let Event::Externalised(x) = e {
                Some(without_ref(x))
            } else {
                None
            }
        })
        .collect();
    if again != xs.iter().map(without_ref).collect::<Vec<_>>() {
        return Err("the externalised records its event makes are not the recorded ones".into());
    }
    Ok(())
}

/// Put the lists of `whole` (a typed artifact, already checked) back into `event`.
fn restore(
    event: &mut Event,
    whole: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), String> {
    let check = match event {
        Event::CheckResult(c) => Some(c),
        Event::CheckBaseline(b) => Some(&mut b.check),
        Event::HoldoutCheck(h) => Some(&mut h.check),
        Event::CheckConfirmation(c) => Some(&mut c.check),
        _ => None,
    };
    if let Some(c) = check {
        c.failing_set = list(whole, "failing_set")?.or(c.failing_set.take());
        c.collected_set = list(whole, "collected_set")?.or(c.collected_set.take());
        c.skipped_set = list(whole, "skipped_set")?.or(c.skipped_set.take());
        c.failure_digests = list(whole, "failure_digests")?.or(c.failure_digests.take());
        if let Some(e) = c.evidence.as_mut() {
            if let Some(all) = list(whole, "evidence.reports")? {
                e.reports = all;
            }
            if let Some(all) = list(whole, "evidence.sources")? {
                e.sources = all;
            }
            if let Some(all) = list(whole, "evidence.disagreements")? {
                e.disagreements = all;
            }
        }
        return Ok(());
    }
    match event {
        Event::Reference(r) => r.failing_set = list(whole, "failing_set")?.or(r.failing_set.take()),
        Event::Snapshot(s) => {
            if let Some(all) = list(whole, "protected_changes")? {
                s.protected_changes = all;
            }
        }
        Event::Guard(g) => {
            if let Some(all) = list(whole, "findings")? {
                g.findings = all;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The list `field` of an artifact, typed (`None`: the artifact does not hold it).
fn list<T: serde::de::DeserializeOwned>(
    whole: &serde_json::Map<String, serde_json::Value>,
    field: &str,
) -> Result<Option<T>, String> {
    whole
        .get(field)
        .cloned()
        .map(|v| serde_json::from_value(v).map_err(|e| format!("its {field} does not read: {e}")))
        .transpose()
}

/// The artifact of `x`, checked against its recorded size and digest and against each list's.
fn read_whole(
    x: &Externalised,
    run_dir: &SafeDir,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let found = check_artifacts(&[Event::Externalised(x.clone())], run_dir);
    if found.matched != 1 {
        return Err(found
            .absent
            .first()
            .map(|_| "absent".to_string())
            .or_else(|| found.mismatched.first().cloned())
            .unwrap_or_default());
    }
    let name = x
        .artifact
        .path
        .strip_prefix(&format!("{ARTIFACTS}/"))
        .unwrap_or_default();
    let bytes = run_dir
        .subdir(ARTIFACTS)
        .and_then(|d| d.read(name, MAX_ARTIFACT_BYTES))
        .map_err(|e| e.to_string())?;
    let whole: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|e| format!("not a JSON object: {e}"))?;
    // A whole event's places are pointers into the trimmed event: the artifact's own digest,
    // which the chain holds, is what vouches for it.
    for (field, bounded) in x.lists.iter().filter(|_| !x.whole_event) {
        let ok = whole
            .get(field)
            .and_then(|v| serde_json::to_vec(v).ok())
            .is_some_and(|b| hex_sha256(&b) == bounded.sha256);
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

    /// The bounded event and its one `externalised` event.
    fn pair(b: Option<Bounded>) -> Option<(Event, Event)> {
        let b = b?;
        let [x] = <[Event; 1]>::try_from(b.after).ok()?;
        Some((b.event, x))
    }

    fn check_with_failing(n: usize) -> CheckResult {
        let Event::CheckResult(mut c) = sample::check_result(3, 1) else {
            unreachable!()
        };
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
        assert_eq!(
            bound(&Event::CheckResult(check_with_failing(INLINE_ITEMS)), &dir).unwrap(),
            None
        );
        assert!(!dir.exists(ARTIFACTS));
    }

    #[test]
    fn a_large_failing_set_becomes_count_digest_sample_and_an_artifact_that_verifies() {
        let (_t, dir) = run_dir();
        let full = check_with_failing(200_000);
        let Some((Event::CheckResult(b), Event::Externalised(x))) =
            pair(bound(&Event::CheckResult(full.clone()), &dir).unwrap())
        else {
            panic!("not bounded")
        };
        assert_eq!(
            (
                b.failing_set.as_ref(),
                b.collected_set.as_ref(),
                b.failing_count
            ),
            (None, None, Some(200_000))
        );
        assert_eq!((x.of.as_str(), x.iteration), ("check_result", 3));
        let failing = &x.lists["failing_set"];
        assert_eq!(
            (
                failing.count,
                failing.sample.len(),
                failing.sample[0].as_str()
            ),
            (200_000, SAMPLE_ITEMS, "tests::case_000000")
        );
        assert_eq!(
            failing.sha256,
            hex_sha256(&serde_json::to_vec(full.failing_set.as_ref().unwrap()).unwrap())
        );
        assert_eq!(x.artifact.path, "artifacts/check_result-0003.json");
        assert!(serde_json::to_vec(&b).unwrap().len() < 16 * 1024);
        let whole: serde_json::Value = serde_json::from_slice(
            &dir.subdir(ARTIFACTS)
                .unwrap()
                .read("check_result-0003.json", MAX_ARTIFACT_BYTES)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(whole["failing_set"].as_array().unwrap().len(), 200_000);
        assert!(serde_json::to_vec(&x).unwrap().len() < 16 * 1024);
        assert_eq!(
            check_artifacts(&[Event::Externalised(x)], &dir),
            ArtifactCheck {
                matched: 1,
                ..Default::default()
            }
        );
    }

    #[test]
    fn verify_names_an_absent_artifact_and_refuses_a_changed_one() {
        let (_t, dir) = run_dir();
        let Some((_, bounded)) =
            pair(bound(&Event::CheckResult(check_with_failing(5000)), &dir).unwrap())
        else {
            panic!("not bounded")
        };
        let arts = dir.subdir(ARTIFACTS).unwrap();
        arts.write_atomic("check_result-0003.json", b"{}").unwrap();
        let found = check_artifacts(std::slice::from_ref(&bounded), &dir);
        assert_eq!(
            (found.matched, found.absent.len(), found.mismatched.len()),
            (0, 0, 1)
        );
        assert!(
            found.mismatched[0].starts_with("artifacts/check_result-0003.json: 2 bytes"),
            "{:?}",
            found.mismatched
        );
        nix::unistd::unlinkat(
            Some(std::os::fd::AsRawFd::as_raw_fd(&arts.fd())),
            "check_result-0003.json",
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
        .unwrap();
        assert_eq!(
            check_artifacts(&[bounded], &dir),
            ArtifactCheck {
                absent: vec!["artifacts/check_result-0003.json".into()],
                ..Default::default()
            }
        );
    }

    #[test]
    fn many_protected_changes_keep_a_sample_so_the_snapshot_is_still_refused() {
        let (_t, dir) = run_dir();
        let changes: Vec<ProtectedChangeRecord> = (0..3000)
            .map(|i| ProtectedChangeRecord {
                path: format!("tests/t{i}.py"),
                change: "added".into(),
            })
            .collect();
        let s = SnapshotRecord {
            iteration: 1,
            tree_id: "0".repeat(40),
            changed_paths: 3000,
            protected_changes: changes,
            duration_ms: None,
            awareness: vec![],
            left_out: None,
        };
        let Some((Event::Snapshot(b), Event::Externalised(x))) =
            pair(bound(&Event::Snapshot(s), &dir).unwrap())
        else {
            panic!("not bounded")
        };
        assert_eq!(
            (
                b.protected_changes.len(),
                b.accepted(),
                x.lists["protected_changes"].count
            ),
            (SAMPLE_ITEMS, false, 3000)
        );
    }

    #[test]
    fn a_resumed_history_gets_the_whole_sets_back_from_an_artifact_that_matches() {
        let (_t, dir) = run_dir();
        let full = check_with_failing(5000);
        let Some((bounded, x)) = pair(bound(&Event::CheckResult(full.clone()), &dir).unwrap())
        else {
            panic!("not bounded")
        };
        let lines: Vec<serde_json::Map<String, serde_json::Value>> =
            [Event::IterationStart { iteration: 3 }, bounded, x]
                .iter()
                .map(|e| {
                    let mut m = e.fields().unwrap();
                    m.insert("type".into(), e.kind().into());
                    m
                })
                .collect();
        let history = crate::receipt::history::History::of_lines(&lines).unwrap();
        assert_eq!(
            history.iterations[0].check.as_ref().unwrap().failing_set,
            None
        );
        let (history, notes) = history_of(&lines, &dir).unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(
            history.iterations[0].check.as_ref().unwrap().failing_set,
            full.failing_set
        );
        dir.subdir(ARTIFACTS)
            .unwrap()
            .write_atomic("check_result-0003.json", b"{}")
            .unwrap();
        let (tampered, notes) = history_of(&lines, &dir).unwrap();
        assert_eq!(
            (
                notes.len(),
                tampered.iterations[0]
                    .check
                    .as_ref()
                    .unwrap()
                    .failing_set
                    .as_ref()
            ),
            (1, None)
        );
    }

    fn lines_of(events: &[Event]) -> Vec<serde_json::Map<String, serde_json::Value>> {
        events
            .iter()
            .map(|e| {
                let mut m = e.fields().unwrap();
                m.insert("type".into(), e.kind().into());
                m
            })
            .collect()
    }

    #[test]
    fn a_resumed_history_gets_a_confirmations_reports_back_and_keeps_the_sample_of_a_changed_artifact(
    ) {
        use crate::receipt::events::{CheckEvidence, ConfirmationRecord};
        let (_t, dir) = run_dir();
        let mut check = check_with_failing(3);
        let reports: Vec<ReportRecord> = (0..5000)
            .map(|i| ReportRecord {
                pattern: "out/*.xml".into(),
                path: Some(format!("out/r{i:05}.xml")),
                format: Some("junit".into()),
                counts: Some([1, 0, 1, 0]),
                error: None,
            })
            .collect();
        check.evidence = Some(CheckEvidence {
            verdict: "red".into(),
            reports: reports.clone(),
            sources: vec![],
            disagreements: vec![],
        });
        let c = Event::CheckConfirmation(ConfirmationRecord {
            confirmation: 2,
            same_tree_as: None,
            agrees: true,
            stability_lower_bound: 0.5,
            confidence: 0.95,
            stability_target: 0.99,
            check,
        });
        let Some((bounded, x)) = pair(bound(&c, &dir).unwrap()) else {
            panic!("not bounded")
        };
        let Event::Externalised(ext) = &x else {
            panic!("{}", x.kind())
        };
        assert_eq!(
            (
                ext.artifact.path.as_str(),
                ext.lists["evidence.reports"].count
            ),
            ("artifacts/check_confirmation-0003-c2.json", 5000)
        );
        let lines = lines_of(&[Event::IterationStart { iteration: 3 }, bounded, x]);
        let (history, notes) = history_of(&lines, &dir).unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        let confirmed = &history.iterations[0].confirmations[0].check;
        assert_eq!(confirmed.evidence.as_ref().unwrap().reports, reports);
        dir.subdir(ARTIFACTS)
            .unwrap()
            .write_atomic("check_confirmation-0003-c2.json", b"{}")
            .unwrap();
        let (tampered, notes) = history_of(&lines, &dir).unwrap();
        assert_eq!(
            (
                notes.len(),
                tampered.iterations[0].confirmations[0]
                    .check
                    .evidence
                    .as_ref()
                    .unwrap()
                    .reports
                    .len()
            ),
            (1, SAMPLE_ITEMS)
        );
        assert!(notes[0].starts_with("artifacts/check_confirmation-0003-c2.json: artifacts/check_confirmation-0003-c2.json: 2 bytes"), "{notes:?}");
    }

    #[test]
    fn an_event_over_the_line_bound_is_trimmed_whole_and_restored_from_its_artifact() {
        let (_t, dir) = run_dir();
        let Event::CheckResult(mut c) = sample::check_result(4, 1) else {
            unreachable!()
        };
        c.junit_error = Some("e\u{7}".repeat(MAX_LINE_BYTES));
        let Some((bounded, x)) = pair(bound(&Event::CheckResult(c.clone()), &dir).unwrap()) else {
            panic!("not bounded")
        };
        let Event::Externalised(ext) = &x else {
            panic!("{}", x.kind())
        };
        assert_eq!(
            (ext.whole_event, ext.lists["/junit_error"].count),
            (true, 2 * MAX_LINE_BYTES as u64)
        );
        assert!(serde_json::to_vec(&bounded).unwrap().len() < 4096);
        let Event::CheckResult(b) = &bounded else {
            unreachable!()
        };
        assert_eq!(
            b.junit_error.as_deref().map(|e| e.chars().count()),
            Some(SAMPLE_ITEM_CHARS + 1)
        );
        let (history, notes) = history_of(
            &lines_of(&[Event::IterationStart { iteration: 4 }, bounded, x]),
            &dir,
        )
        .unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(history.iterations[0].check.as_ref(), Some(&c));
    }

    /// `lines` with a forged `externalised` whole-event line appended, its artifact holding `held`.
    fn with_forged_whole(
        dir: &SafeDir,
        events: &[Event],
        held: &Event,
    ) -> Vec<serde_json::Map<String, serde_json::Value>> {
        let bytes = serde_json::to_vec(&serde_json::json!({ "event": held })).unwrap();
        dir.subdir_or_create(ARTIFACTS)
            .unwrap()
            .write_atomic("forged.json", &bytes)
            .unwrap();
        let artifact = ArtifactRef {
            path: "artifacts/forged.json".into(),
            bytes: bytes.len() as u64,
            sha256: hex_sha256(&bytes),
        };
        let x = Event::Externalised(Externalised {
            of: held.kind().into(),
            iteration: 1,
            lists: Default::default(),
            artifact,
            whole_event: true,
        });
        let mut all = events.to_vec();
        all.push(x);
        lines_of(&all)
    }

    #[test]
    fn a_forged_whole_event_record_after_an_acceptance_refuses_the_resume_and_keeps_the_recorded_one(
    ) {
        use crate::receipt::events::RatchetAcceptRecord;
        let (_t, dir) = run_dir();
        let accept = |tree: &str| {
            Event::RatchetAccept(RatchetAcceptRecord {
                iteration: 1,
                tree_id: tree.repeat(40),
                operator_key: "k".into(),
                signature: "s".into(),
            })
        };
        let lines = with_forged_whole(
            &dir,
            &[Event::IterationStart { iteration: 1 }, accept("a")],
            &accept("b"),
        );
        let Err(Unrestorable::Refused(why)) = history_of(&lines, &dir) else {
            panic!("the forged acceptance was restored")
        };
        assert_eq!(why, vec!["artifacts/forged.json: the ratchet_accept event at line 2 is never bounded, so never restored from an artifact".to_string()]);
        let mut recorded = crate::receipt::events::Recorded::decode_all(&lines).unwrap();
        let found = resolve(&mut recorded, &dir);
        assert_eq!((found.forged.len(), &recorded[1].event), (1, &accept("a")));
    }

    #[test]
    fn a_forged_whole_event_record_after_a_check_result_refuses_the_resume() {
        let (_t, dir) = run_dir();
        let red = Event::CheckResult(check_with_failing(3));
        let Event::CheckResult(mut green) = sample::check_result(3, 0) else {
            unreachable!()
        };
        green.junit_error = Some("g".repeat(MAX_LINE_BYTES));
        let lines = with_forged_whole(
            &dir,
            &[Event::IterationStart { iteration: 3 }, red.clone()],
            &Event::CheckResult(green),
        );
        let Err(Unrestorable::Refused(why)) = history_of(&lines, &dir) else {
            panic!("the forged check was restored")
        };
        assert!(why[0].contains("its event, bounded, is not the recorded one; it is not the original of the check_result event at line 2"), "{why:?}");
    }

    #[test]
    fn a_forged_typed_record_after_a_small_check_result_refuses_the_resume() {
        let (_t, dir) = run_dir();
        let small = Event::CheckResult(check_with_failing(3));
        let mut moved = Moved::default();
        moved
            .take("failing_set", &Vec::<String>::new(), String::clone)
            .unwrap();
        let x = moved.write(Some(&dir), "check_result", 3, None).unwrap();
        let lines = lines_of(&[
            Event::IterationStart { iteration: 3 },
            small,
            Event::Externalised(x),
        ]);
        let Err(Unrestorable::Refused(why)) = history_of(&lines, &dir) else {
            panic!("the forged set was restored")
        };
        assert!(
            why[0].starts_with("artifacts/check_result-0003.json: its event needs no bound"),
            "{why:?}"
        );
    }

    #[test]
    fn a_trimmed_event_whose_artifact_is_absent_refuses_the_resume_naming_it() {
        let (_t, dir) = run_dir();
        let Event::CheckResult(mut c) = sample::check_result(4, 1) else {
            unreachable!()
        };
        c.junit_error = Some("e".repeat(2 * MAX_LINE_BYTES));
        let Some((bounded, x)) = pair(bound(&Event::CheckResult(c), &dir).unwrap()) else {
            panic!("not bounded")
        };
        let Event::Externalised(ext) = &x else {
            panic!("{}", x.kind())
        };
        let path = ext.artifact.path.clone();
        let arts = dir.subdir(ARTIFACTS).unwrap();
        nix::unistd::unlinkat(
            Some(std::os::fd::AsRawFd::as_raw_fd(&arts.fd())),
            path.strip_prefix("artifacts/").unwrap(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
        .unwrap();
        let Err(Unrestorable::Refused(why)) = history_of(
            &lines_of(&[Event::IterationStart { iteration: 4 }, bounded, x]),
            &dir,
        ) else {
            panic!("a trimmed check was judged")
        };
        assert_eq!(why, vec![format!("{path}: absent; the check_result event at line 2 was trimmed to fit the line bound and cannot be read back whole")]);
    }

    #[test]
    fn many_failure_digests_become_null_and_an_artifact_and_come_back_on_resume() {
        use crate::receipt::events::FailureDigest;
        let (_t, dir) = run_dir();
        for n in [INLINE_ITEMS + 1, 20_000] {
            let mut c = check_with_failing(3);
            let digests: Vec<FailureDigest> = (0..n)
                .map(|i| FailureDigest {
                    test: format!("t::{i}"),
                    sha256: "0".repeat(64),
                })
                .collect();
            c.failure_digests = Some(digests.clone());
            let Some((Event::CheckResult(b), x)) =
                pair(bound(&Event::CheckResult(c.clone()), &dir).unwrap())
            else {
                panic!("not bounded")
            };
            let Event::Externalised(ext) = &x else {
                panic!("{}", x.kind())
            };
            assert_eq!(
                (
                    b.failure_digests.as_ref(),
                    ext.whole_event,
                    ext.lists["failure_digests"].count
                ),
                (None, false, n as u64)
            );
            let (history, notes) = history_of(
                &lines_of(&[
                    Event::IterationStart { iteration: 3 },
                    Event::CheckResult(b),
                    x,
                ]),
                &dir,
            )
            .unwrap();
            assert!(notes.is_empty(), "{notes:?}");
            assert_eq!(
                history.iterations[0]
                    .check
                    .as_ref()
                    .unwrap()
                    .failure_digests
                    .as_ref(),
                Some(&digests)
            );
        }
    }

    #[test]
    fn a_whole_event_trim_never_cuts_the_type_tag_or_short_strings() {
        use crate::receipt::events::ConfirmationRecord;
        let mut check = check_with_failing(3);
        check.junit_error = Some("x".repeat(100));
        let c = Event::CheckConfirmation(ConfirmationRecord {
            confirmation: 1,
            same_tree_as: None,
            agrees: true,
            stability_lower_bound: 0.5,
            confidence: 0.95,
            stability_target: 0.99,
            check,
        });
        let value = serde_json::to_value(&c).unwrap();
        for (items, chars) in FIT_PASSES.into_iter().chain([(5, 16), (5, 0)]) {
            let mut v = value.clone();
            trim(&mut v, items, chars, &mut Vec::new());
            let back: Event = serde_json::from_value(v).unwrap();
            assert_eq!(back.kind(), "check_confirmation");
            let Event::CheckConfirmation(b) = back else {
                unreachable!()
            };
            assert_eq!(
                (
                    b.check.failing_set.as_ref().unwrap()[0].as_str(),
                    b.check.junit_error.unwrap().chars().count()
                ),
                (
                    "tests::case_000000",
                    if 100 > chars.max(UNCUT_CHARS) {
                        chars.max(UNCUT_CHARS) + 1
                    } else {
                        100
                    }
                )
            );
        }
    }

    #[test]
    fn an_event_never_trimmed_fails_its_append_over_the_line_bound() {
        use crate::receipt::events::RatchetAcceptRecord;
        let (_t, dir) = run_dir();
        for e in [
            Event::RatchetAccept(RatchetAcceptRecord {
                iteration: 1,
                tree_id: "t".repeat(2 * MAX_LINE_BYTES),
                operator_key: "k".into(),
                signature: "s".into(),
            }),
            Event::RatchetAccept(RatchetAcceptRecord {
                iteration: 1,
                tree_id: "t".into(),
                operator_key: "k".into(),
                signature: "é".repeat(MAX_LINE_BYTES),
            }),
        ] {
            let err = bound(&e, &dir).unwrap_err().to_string();
            assert!(err.contains("a ratchet_accept event is over the receipt's line bound (1048576 bytes), and a ratchet_accept event is never trimmed"), "{err}");
        }
        assert!(!dir.exists(ARTIFACTS));
    }

    #[test]
    fn a_sampled_item_is_cut_to_its_bound() {
        let s = sample_of(std::iter::once("x".repeat(10_000)));
        assert_eq!(s[0].chars().count(), SAMPLE_ITEM_CHARS + 1);
    }
}
