//! The syntax-tree guards after the agent (issue 12, item 5), each behind [`Guard`]:
//! metric integrity (`metric_integrity_violation`: the assertion count fell below A0, a t0 test
//! item is gone or changed its attributes, the test-surface digest differs from H0, a workspace
//! module shadows a standard-library or installed module) and tampering patterns
//! (`reward_hacking_detected`: new occurrences only, rules disabled in loop.toml with a reason).
//! They judge the detached workspace's snapshot against t0 with the pure `crate::analysis`; the
//! baseline facts (A0, H0) are computed once per run from t0 and recorded in the receipt.
//!
//! Every file is read descriptor-relative with `O_NOFOLLOW` and at most the parse cap plus one
//! byte: a larger file is never read whole (the analysis records it as not analysed, digested
//! over the bytes read).
//!
//! The judging itself is pure: [`metric_integrity`], [`tampering`] and [`awareness`] take the two
//! listings and a [`TreeBytes`] (where their bytes come from: the host's layers here, git objects
//! for `verify --repo`, the verifier's tree guards) and give the records the engine appends.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::allow_change::{self, Allowances};
use super::guards::{AgentStep, Guard, Objection};
use super::seats::Seat;
use crate::analysis::surface::{SurfaceChange, SurfaceDigest, SurfaceSpec};
use crate::analysis::{self, ChangedFile, Limits, RuleSet, SourceFile, TestItemChange};
use crate::halt::HaltReason;
use crate::receipt::events::{AllowanceUse, FindingRecord, GuardRecord, TestChangeAllowedRecord};
use crate::testreport::shown;
use crate::workspace::{fsat, EntryKind, Manifest, Snapshot};

/// At most this many findings are recorded per guard (the count of the rest is said).
pub const MAX_FINDINGS: usize = 50;

/// Where the bytes of t0 and of the agent's layer live on the host.
#[derive(Debug, Clone)]
pub struct TreeFiles {
    /// The baseline's files (t0).
    pub t0_dir: PathBuf,
    /// The agent's upper layer.
    pub upper: PathBuf,
}

/// Reads at most `limit + 1` bytes of `path` beneath `root`, never following a link.
pub(crate) fn read_bounded(root: &Path, path: &[u8], limit: usize) -> Option<Vec<u8>> {
    let root = fsat::open_dir_path(root).ok()?;
    let (dir, name) = match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (Some(&path[..i]), &path[i + 1..]),
        None => (None, path),
    };
    let dir = match dir {
        Some(d) => fsat::open_dir_beneath(root.as_raw_fd(), d).ok()?,
        None => root,
    };
    let file = fsat::open_file(dir.as_raw_fd(), name).ok()?;
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

fn is_file(kind: EntryKind) -> bool {
    matches!(kind, EntryKind::File | EntryKind::Executable)
}

fn utf8_path(path: &[u8]) -> Option<&str> {
    std::str::from_utf8(path).ok()
}

impl TreeFiles {
    pub(super) fn end(&self, snapshot: &Snapshot, path: &[u8], limits: Limits) -> Option<Vec<u8>> {
        let root = if snapshot.from_upper.contains(path) {
            &self.upper
        } else {
            &self.t0_dir
        };
        read_bounded(root, path, limits.max_parse_bytes)
    }
}

/// Where the guards read the files of t0 and of the agent's tree: at most `limit + 1` bytes of
/// the regular file at `path` (none when there is none, or it cannot be read).
pub trait TreeBytes {
    fn t0(&self, path: &[u8], limit: usize) -> Option<Vec<u8>>;
    fn end(&self, path: &[u8], limit: usize) -> Option<Vec<u8>>;
}

/// The host's layers of a snapshot: the baseline's files and the agent's upper layer.
struct HostBytes<'a> {
    files: &'a TreeFiles,
    snapshot: &'a Snapshot,
}

impl TreeBytes for HostBytes<'_> {
    fn t0(&self, path: &[u8], limit: usize) -> Option<Vec<u8>> {
        read_bounded(&self.files.t0_dir, path, limit)
    }

    fn end(&self, path: &[u8], limit: usize) -> Option<Vec<u8>> {
        let root = if self.snapshot.from_upper.contains(path) {
            &self.files.upper
        } else {
            &self.files.t0_dir
        };
        read_bounded(root, path, limit)
    }
}

/// One agent step as the syntax-tree guards judge it: t0's listing, the agent's, their bytes.
pub struct TreeStep<'a> {
    pub t0: &'a Manifest,
    pub end: &'a Manifest,
    pub bytes: &'a dyn TreeBytes,
}

impl TreeStep<'_> {
    /// The paths whose entry differs between t0 and the agent's tree, in path order (a
    /// hard-linked file with t0's content is no change of bytes, so it is not one here).
    fn changed_paths(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let (mut a, mut b) = (self.t0.iter().peekable(), self.end.iter().peekable());
        loop {
            match (a.peek(), b.peek()) {
                (None, None) => return out,
                (Some((pa, _)), None) => {
                    out.push((*pa).clone());
                    a.next();
                }
                (None, Some((pb, _))) => {
                    out.push((*pb).clone());
                    b.next();
                }
                (Some((pa, ea)), Some((pb, eb))) => match pa.cmp(pb) {
                    std::cmp::Ordering::Less => {
                        out.push((*pa).clone());
                        a.next();
                    }
                    std::cmp::Ordering::Greater => {
                        out.push((*pb).clone());
                        b.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if ea != eb {
                            out.push((*pa).clone());
                        }
                        a.next();
                        b.next();
                    }
                },
            }
        }
    }

    fn t0_file(&self, path: &[u8], limits: Limits) -> Option<Vec<u8>> {
        self.t0
            .get(path)
            .filter(|e| is_file(e.kind))
            .and_then(|_| self.bytes.t0(path, limits.max_parse_bytes))
    }

    fn end_file(&self, path: &[u8], limits: Limits) -> Option<Vec<u8>> {
        self.end
            .get(path)
            .filter(|e| is_file(e.kind))
            .and_then(|_| self.bytes.end(path, limits.max_parse_bytes))
    }
}

/// The facts of t0 the guards compare against, computed once per run.
#[derive(Debug, Clone)]
pub struct AnalysisBaseline {
    /// A0: assertions in test code over every t0 file with a grammar.
    pub assertions: u64,
    /// H0: the test-surface digest of t0.
    pub surface: SurfaceDigest,
    /// t0 files above the parse cap.
    pub not_analysed: Vec<String>,
}

/// The surface digest of a manifest's candidate files, read through `read`.
fn surface_of(
    spec: &SurfaceSpec,
    manifest: &Manifest,
    mut read: impl FnMut(&[u8]) -> Option<Vec<u8>>,
) -> SurfaceDigest {
    let files: Vec<(String, Vec<u8>)> = manifest
        .iter()
        .filter(|(_, e)| is_file(e.kind))
        .filter_map(|(p, _)| {
            utf8_path(p)
                .filter(|p| spec.is_candidate(p))
                .map(|s| (s.to_string(), p))
        })
        .filter_map(|(s, p)| read(p).map(|bytes| (s, bytes)))
        .collect();
    spec.digest(files.iter().map(|(p, b)| SourceFile { path: p, bytes: b }))
}

impl AnalysisBaseline {
    /// A0 and H0 of t0.
    pub fn of_t0(
        files: &TreeFiles,
        t0: &Manifest,
        spec: &SurfaceSpec,
        limits: Limits,
    ) -> Result<AnalysisBaseline, analysis::AnalysisError> {
        let host = HostT0(files);
        AnalysisBaseline::of_t0_bytes(&host, t0, spec, limits)
    }

    /// A0 and H0 of the t0 `bytes` hold.
    pub fn of_t0_bytes(
        bytes: &dyn TreeBytes,
        t0: &Manifest,
        spec: &SurfaceSpec,
        limits: Limits,
    ) -> Result<AnalysisBaseline, analysis::AnalysisError> {
        let mut assertions = 0;
        let mut not_analysed = Vec::new();
        for (path, entry) in t0.iter() {
            let Some(p) = utf8_path(path) else { continue };
            if !is_file(entry.kind) || analysis::Language::of_path(p).is_none() {
                continue;
            }
            let Some(content) = bytes.t0(path, limits.max_parse_bytes) else {
                continue;
            };
            let total = analysis::total_assertions(
                [SourceFile {
                    path: p,
                    bytes: &content,
                }],
                limits,
            )?;
            assertions += total.assertions;
            not_analysed.extend(total.not_analysed.into_iter().map(|na| na.path));
        }
        let surface = surface_of(spec, t0, |p| bytes.t0(p, limits.max_parse_bytes));
        Ok(AnalysisBaseline {
            assertions,
            surface,
            not_analysed,
        })
    }
}

/// t0's files on the host, for t0's facts (a t0 with itself as the end state).
struct HostT0<'a>(&'a TreeFiles);

impl TreeBytes for HostT0<'_> {
    fn t0(&self, path: &[u8], limit: usize) -> Option<Vec<u8>> {
        read_bounded(&self.0.t0_dir, path, limit)
    }

    fn end(&self, path: &[u8], limit: usize) -> Option<Vec<u8>> {
        read_bounded(&self.0.t0_dir, path, limit)
    }
}

/// The changed files of a snapshot against t0, both versions read bounded.
pub(super) struct ChangedBytes {
    pub(super) files: Vec<(String, Option<Vec<u8>>, Option<Vec<u8>>)>,
}

impl ChangedBytes {
    pub(super) fn read(
        files: &TreeFiles,
        snapshot: &Snapshot,
        t0: &Manifest,
        limits: Limits,
    ) -> ChangedBytes {
        let host = HostBytes { files, snapshot };
        // The snapshot's changes: a hard-linked file with t0's content is one too (for the canary).
        let paths = snapshot.changes(t0).into_iter().map(|(p, _)| p).collect();
        ChangedBytes::of_paths(
            &TreeStep {
                t0,
                end: &snapshot.manifest,
                bytes: &host,
            },
            paths,
            limits,
        )
    }

    fn of_step(step: &TreeStep<'_>, limits: Limits) -> ChangedBytes {
        ChangedBytes::of_paths(step, step.changed_paths(), limits)
    }

    fn of_paths(step: &TreeStep<'_>, paths: Vec<Vec<u8>>, limits: Limits) -> ChangedBytes {
        let mut out = Vec::new();
        for path in paths {
            let Some(p) = utf8_path(&path) else { continue };
            if analysis::Language::of_path(p).is_none() {
                continue;
            }
            out.push((
                p.to_string(),
                step.t0_file(&path, limits),
                step.end_file(&path, limits),
            ));
        }
        ChangedBytes { files: out }
    }

    /// Whether the snapshot changes any file `keep` lets through (in any language, with a grammar
    /// or not) beyond whitespace against t0, both versions read bounded (a file over the bound,
    /// or one deleted or new with a non-blank byte, counts as changed).
    pub(super) fn any_substantive(
        files: &TreeFiles,
        snapshot: &Snapshot,
        t0: &Manifest,
        limits: Limits,
        keep: impl Fn(&[u8]) -> bool,
    ) -> bool {
        let tokens = |bytes: &Option<Vec<u8>>| {
            bytes.as_ref().map(|b| {
                b.iter()
                    .filter(|c| !c.is_ascii_whitespace())
                    .copied()
                    .collect::<Vec<u8>>()
            })
        };
        let host = HostBytes { files, snapshot };
        let step = TreeStep {
            t0,
            end: &snapshot.manifest,
            bytes: &host,
        };
        step.changed_paths()
            .into_iter()
            .filter(|path| keep(path))
            .any(|path| {
                let (before, after) = (step.t0_file(&path, limits), step.end_file(&path, limits));
                match (tokens(&before), tokens(&after)) {
                    (None, None) => true,
                    (Some(b), None) | (None, Some(b)) => !b.is_empty(),
                    (Some(b), Some(a)) => a != b,
                }
            })
    }

    fn changed(&self) -> Vec<ChangedFile<'_>> {
        self.files
            .iter()
            .map(|(p, a, b)| ChangedFile {
                path: p,
                t0: a.as_deref(),
                end: b.as_deref(),
            })
            .filter(|c| c.t0 != c.end)
            .collect()
    }
}

fn record(
    iteration: u64,
    seat: Seat,
    halt_reason: HaltReason,
    detail: String,
    mut findings: Vec<FindingRecord>,
) -> GuardRecord {
    if findings.len() > MAX_FINDINGS {
        let rest = findings.len() - MAX_FINDINGS;
        findings.truncate(MAX_FINDINGS);
        findings.push(FindingRecord {
            path: None,
            what: format!("{rest} more findings not recorded"),
        });
    }
    GuardRecord {
        iteration,
        guard: seat.as_str().to_string(),
        stage: "after_agent".to_string(),
        halt_reason,
        detail,
        findings,
    }
}

/// How the detail of a syntax-tree guard's record begins: a step it objects to, one it could not analyse.
const WEAKENS: &str = "the agent's change weakens what the check measures";
const NOT_ANALYSED: &str = "the agent's change could not be analysed: ";

fn analysis_record(
    iteration: u64,
    seat: Seat,
    halt_reason: HaltReason,
    e: analysis::AnalysisError,
) -> GuardRecord {
    // A change the analysis cannot judge is not let through.
    record(
        iteration,
        seat,
        halt_reason,
        format!("{NOT_ANALYSED}{e}"),
        Vec::new(),
    )
}

/// Whether a `guard` record is the metric-integrity syntax-tree guard's after the agent (the
/// build-artefact guard sits in the same seat with its own detail).
pub fn is_syntax_tree_record(record: &GuardRecord) -> bool {
    record.guard == Seat::MetricIntegrity.as_str()
        && record.stage == "after_agent"
        && (record.detail.starts_with(WEAKENS) || record.detail.starts_with(NOT_ANALYSED))
}

fn surface_finding(change: &SurfaceChange) -> FindingRecord {
    let (path, what) = match change {
        SurfaceChange::Added { entry } => (
            &entry.path,
            format!(
                "test surface: {} added (sha256 {})",
                entry.part, entry.sha256
            ),
        ),
        SurfaceChange::Removed { entry } => (
            &entry.path,
            format!(
                "test surface: {} removed (was sha256 {})",
                entry.part, entry.sha256
            ),
        ),
        SurfaceChange::Changed { before, after } => (
            &after.path,
            format!(
                "test surface: {} changed (sha256 {} -> {})",
                after.part, before.sha256, after.sha256
            ),
        ),
    };
    FindingRecord {
        path: Some(path.clone()),
        what,
    }
}

fn assertions_of(
    path: &str,
    bytes: Option<&[u8]>,
    limits: Limits,
) -> Result<u64, analysis::AnalysisError> {
    let Some(bytes) = bytes else { return Ok(0) };
    Ok(
        match analysis::analyse_file(SourceFile { path, bytes }, limits)? {
            analysis::FileAnalysis::Analysed(facts) => facts.assertions,
            analysis::FileAnalysis::NotAnalysed(_) => 0,
        },
    )
}

/// The changed files whose own assertion count fell, each with both counts.
fn fewer_assertions(
    bytes: &ChangedBytes,
    limits: Limits,
) -> Result<Vec<FindingRecord>, analysis::AnalysisError> {
    let mut out = Vec::new();
    for change in bytes.changed() {
        let (before, after) = (
            assertions_of(change.path, change.t0, limits)?,
            assertions_of(change.path, change.end, limits)?,
        );
        if after < before {
            out.push(FindingRecord {
                path: Some(change.path.to_string()),
                what: format!("assertions in test code: {before} at t0, {after} now"),
            });
        }
    }
    Ok(out)
}

fn test_item_finding(change: &TestItemChange) -> FindingRecord {
    let (item, what) = match change {
        TestItemChange::Removed { item } => (item, "is gone".to_string()),
        TestItemChange::AttributesChanged {
            after,
            added,
            removed,
            ..
        } => (
            after,
            format!(
                "changed its attributes (added: [{}]; removed: [{}])",
                added.join(", "),
                removed.join(", ")
            ),
        ),
    };
    FindingRecord {
        path: Some(item.file.clone()),
        what: format!("line {}: t0 test item `{}` {what}", item.line, item.name),
    }
}

/// What the metric-integrity guard judges a step against, besides the two trees.
pub struct MetricIntegrityPins<'a> {
    pub baseline: &'a AnalysisBaseline,
    pub spec: &'a SurfaceSpec,
    pub limits: Limits,
    /// Names the check's interpreter resolves without the workspace (`Ok(None)`: t0 has no
    /// Python files; `Err`: they could not be obtained, so no step is vouched for).
    pub python_modules: Result<Option<&'a BTreeSet<String>>, &'a str>,
    /// The loop's `[[allow_test_change]]` paths: their own fall in assertions and their test
    /// items' changes are let through (recorded), nothing else of them.
    pub allowances: &'a Allowances,
}

/// The metric-integrity guard's judgement of `step` (iteration `iteration`): its `guard` record
/// when it objects, and the changes it let through under an allowance.
pub fn metric_integrity(
    iteration: u64,
    step: &TreeStep<'_>,
    pins: &MetricIntegrityPins<'_>,
) -> (Option<GuardRecord>, Option<TestChangeAllowedRecord>) {
    let reason = HaltReason::MetricIntegrityViolation;
    match metric_findings(step, pins) {
        Err(e) => (
            Some(analysis_record(iteration, Seat::MetricIntegrity, reason, e)),
            None,
        ),
        Ok((findings, uses)) => {
            let allowed = allow_change::record(
                iteration,
                Seat::MetricIntegrity.as_str(),
                "after_agent",
                uses,
            );
            if findings.is_empty() {
                return (None, allowed);
            }
            let detail = format!("{WEAKENS} ({} findings against t0)", findings.len());
            (
                Some(record(
                    iteration,
                    Seat::MetricIntegrity,
                    reason,
                    detail,
                    findings,
                )),
                allowed,
            )
        }
    }
}

fn metric_findings(
    step: &TreeStep<'_>,
    pins: &MetricIntegrityPins<'_>,
) -> Result<(Vec<FindingRecord>, Vec<AllowanceUse>), analysis::AnalysisError> {
    let limits = pins.limits;
    let mut findings = Vec::new();
    let mut uses = Vec::new();
    let bytes = ChangedBytes::of_step(step, limits);
    let change = analysis::analyse_change(&bytes.changed(), &RuleSet::all(), limits)?;
    // An allowed file's own fall in assertions is let through; its gains still count, so an
    // assertion moved out of another file into it is no fall either.
    let mut forgiven = 0;
    for changed in bytes.changed() {
        let Some(pin) = pins.allowances.for_path(changed.path) else {
            continue;
        };
        let (before, after) = (
            assertions_of(changed.path, changed.t0, limits)?,
            assertions_of(changed.path, changed.end, limits)?,
        );
        if after < before {
            forgiven += before - after;
            uses.push(allow_change::use_of(
                pin,
                format!(
                    "{}: assertions in test code: {before} at t0, {after} now",
                    shown(changed.path)
                ),
            ));
        }
    }
    let assertions_end = change.assertions_end + forgiven;
    if assertions_end < change.assertions_t0 {
        let a0 = pins.baseline.assertions;
        let end_total = a0 - change.assertions_t0.min(a0) + assertions_end;
        findings.push(FindingRecord {
            path: None,
            what: format!("assertions in test code fell from A0 = {a0} to {end_total}"),
        });
        let guarded = fewer_assertions(&bytes, limits)?.into_iter().filter(|f| {
            f.path
                .as_deref()
                .is_none_or(|p| pins.allowances.for_path(p).is_none())
        });
        findings.extend(guarded);
    }
    for item_change in &change.test_item_changes {
        let finding = test_item_finding(item_change);
        match finding
            .path
            .as_deref()
            .and_then(|p| pins.allowances.for_path(p))
        {
            Some(pin) => uses.push(allow_change::use_of(
                pin,
                format!(
                    "{}: {}",
                    shown(finding.path.as_deref().unwrap_or("")),
                    finding.what
                ),
            )),
            None => findings.push(finding),
        }
    }
    let end_surface = surface_of(pins.spec, step.end, |p| {
        step.bytes.end(p, limits.max_parse_bytes)
    });
    findings.extend(
        end_surface
            .diff_from(&pins.baseline.surface)
            .iter()
            .map(surface_finding),
    );
    let known = pins
        .python_modules
        .map_err(|e| analysis::AnalysisError::ModuleNamesCommand(e.to_string()))?;
    if let Some(known) = known {
        let paths: Vec<&str> = step.end.iter().filter_map(|(p, _)| utf8_path(p)).collect();
        let t0_paths: BTreeSet<&str> = step.t0.iter().filter_map(|(p, _)| utf8_path(p)).collect();
        for s in analysis::shadowing::shadowing(known, &paths) {
            if !t0_paths.contains(s.path.as_str()) {
                findings.push(FindingRecord {
                    path: Some(s.path.clone()),
                    what: shadowing_what(&s.module),
                });
            }
        }
    }
    Ok((findings, uses))
}

/// A shadowing finding's text ([`shadowed_module`] reads the module back from it).
pub fn shadowing_what(module: &str) -> String {
    format!("shadows the module `{module}` the check's interpreter would import")
}

/// The module a shadowing finding's text names (none for any other finding).
pub fn shadowed_module(what: &str) -> Option<String> {
    let module = what
        .strip_prefix("shadows the module `")?
        .strip_suffix("` the check's interpreter would import")?;
    (shadowing_what(module) == what).then(|| module.to_string())
}

/// `metric_integrity_violation` after the agent: assertions, test items, surface, shadowing.
pub struct MetricIntegrityGuard {
    files: TreeFiles,
    baseline: AnalysisBaseline,
    spec: SurfaceSpec,
    limits: Limits,
    python_modules: Result<Option<BTreeSet<String>>, String>,
    allowances: Allowances,
    allowed: Option<TestChangeAllowedRecord>,
}

impl MetricIntegrityGuard {
    pub fn new(
        files: TreeFiles,
        baseline: AnalysisBaseline,
        spec: SurfaceSpec,
        limits: Limits,
        python_modules: Result<Option<BTreeSet<String>>, String>,
    ) -> MetricIntegrityGuard {
        MetricIntegrityGuard {
            files,
            baseline,
            spec,
            limits,
            python_modules,
            allowances: Allowances::default(),
            allowed: None,
        }
    }

    /// The guard with the loop's allowances.
    pub fn allowing(self, allowances: Allowances) -> MetricIntegrityGuard {
        MetricIntegrityGuard { allowances, ..self }
    }
}

impl Guard for MetricIntegrityGuard {
    fn seat(&self) -> Seat {
        Seat::MetricIntegrity
    }

    fn after_agent(&mut self, step: &AgentStep<'_>) -> Option<Objection> {
        self.allowed = None;
        let (snapshot, t0) = step.workspace?;
        let host = HostBytes {
            files: &self.files,
            snapshot,
        };
        let pins = MetricIntegrityPins {
            baseline: &self.baseline,
            spec: &self.spec,
            limits: self.limits,
            python_modules: self
                .python_modules
                .as_ref()
                .map(Option::as_ref)
                .map_err(String::as_str),
            allowances: &self.allowances,
        };
        let (finding, allowed) = metric_integrity(
            step.iteration,
            &TreeStep {
                t0,
                end: &snapshot.manifest,
                bytes: &host,
            },
            &pins,
        );
        self.allowed = allowed;
        finding.map(Objection::Finding)
    }

    fn take_allowed(&mut self) -> Option<TestChangeAllowedRecord> {
        self.allowed.take()
    }
}

/// The tampering guard's judgement of `step`: new occurrences of the enabled `rules`.
pub fn tampering(
    iteration: u64,
    step: &TreeStep<'_>,
    rules: &RuleSet,
    limits: Limits,
) -> Option<GuardRecord> {
    let reason = HaltReason::RewardHackingDetected;
    let bytes = ChangedBytes::of_step(step, limits);
    let change = match analysis::analyse_change(&bytes.changed(), rules, limits) {
        Ok(c) => c,
        Err(e) => return Some(analysis_record(iteration, Seat::Tampering, reason, e)),
    };
    if change.findings.is_empty() {
        return None;
    }
    let findings: Vec<FindingRecord> = change
        .findings
        .iter()
        .map(|f| FindingRecord {
            path: Some(f.file.clone()),
            what: format!("line {}: rule {}: {}", f.line, f.rule, f.evidence),
        })
        .collect();
    let disabled: Vec<String> = change
        .disabled_rules
        .iter()
        .map(|d| format!("{} ({})", d.rule, d.reason))
        .collect();
    let mut detail = format!(
        "tampering patterns in the agent's change ({} new occurrences)",
        findings.len()
    );
    if !disabled.is_empty() {
        detail.push_str(&format!(
            "; rules disabled by the loop: {}",
            disabled.join(", ")
        ));
    }
    Some(record(iteration, Seat::Tampering, reason, detail, findings))
}

/// `reward_hacking_detected` after the agent: new tampering occurrences of enabled rules.
pub struct TamperingGuard {
    files: TreeFiles,
    rules: RuleSet,
    limits: Limits,
}

impl TamperingGuard {
    pub fn new(files: TreeFiles, rules: RuleSet, limits: Limits) -> TamperingGuard {
        TamperingGuard {
            files,
            rules,
            limits,
        }
    }
}

impl Guard for TamperingGuard {
    fn seat(&self) -> Seat {
        Seat::Tampering
    }

    fn after_agent(&mut self, step: &AgentStep<'_>) -> Option<Objection> {
        let (snapshot, t0) = step.workspace?;
        let host = HostBytes {
            files: &self.files,
            snapshot,
        };
        tampering(
            step.iteration,
            &TreeStep {
                t0,
                end: &snapshot.manifest,
                bytes: &host,
            },
            &self.rules,
            self.limits,
        )
        .map(Objection::Finding)
    }
}

/// The test-only features of the crate a Rust file of the agent's tree belongs to: its nearest
/// Cargo.toml in that tree, read bounded (cached per manifest).
fn context_of(
    step: &TreeStep<'_>,
    path: &str,
    limits: Limits,
    cache: &mut std::collections::HashMap<String, analysis::awareness::Context>,
) -> analysis::awareness::Context {
    if !path.ends_with(".rs") {
        return analysis::awareness::Context::default();
    }
    let mut dir = path.rsplit_once('/').map(|(d, _)| d);
    loop {
        let manifest = match dir {
            Some(d) => format!("{d}/Cargo.toml"),
            None => "Cargo.toml".to_string(),
        };
        if step
            .end
            .get(manifest.as_bytes())
            .is_some_and(|e| is_file(e.kind))
        {
            if let Some(context) = cache.get(&manifest) {
                return context.clone();
            }
            let text = step
                .bytes
                .end(manifest.as_bytes(), limits.max_parse_bytes)
                .and_then(|b| String::from_utf8(b).ok())
                .unwrap_or_default();
            let context = analysis::awareness::Context {
                test_only_features: analysis::awareness::test_only_features(&text),
            };
            cache.insert(manifest, context.clone());
            return context;
        }
        match dir {
            Some(d) => dir = d.rsplit_once('/').map(|(p, _)| p),
            None => return analysis::awareness::Context::default(),
        }
    }
}

/// The awareness guard's findings on `step`, as the snapshot records them (at most
/// [`MAX_FINDINGS`], then a count); empty when it observes nothing.
pub fn awareness(
    step: &TreeStep<'_>,
    allowances: &analysis::awareness::Allowances,
    limits: Limits,
) -> Vec<FindingRecord> {
    let bytes = ChangedBytes::of_step(step, limits);
    let mut cache = std::collections::HashMap::new();
    let contexts: std::collections::HashMap<String, analysis::awareness::Context> = bytes
        .files
        .iter()
        .map(|(p, _, _)| (p.clone(), context_of(step, p, limits, &mut cache)))
        .collect();
    let context_of = |p: &str| contexts.get(p).cloned().unwrap_or_default();
    let mut findings: Vec<FindingRecord> = match analysis::awareness::analyse_change(
        &bytes.changed(),
        &context_of,
        allowances,
        limits,
    ) {
        // A change that cannot be analysed is not vouched for: it needs the review too.
        Err(e) => vec![FindingRecord {
            path: None,
            what: format!("the agent's change could not be analysed for observations: {e}"),
        }],
        Ok(change) => {
            let mut out: Vec<FindingRecord> =
                change.findings.iter().map(awareness_record).collect();
            out.extend(
                change
                    .not_analysed
                    .iter()
                    .filter(|(v, _)| *v == analysis::Version::End)
                    .map(|(_, na)| FindingRecord {
                        path: Some(shown(&na.path)),
                        what: format!(
                            "not analysed for observations: {} (sha256 {})",
                            na.reason, na.sha256
                        ),
                    }),
            );
            out
        }
    };
    if findings.len() > MAX_FINDINGS {
        let rest = findings.len() - MAX_FINDINGS;
        findings.truncate(MAX_FINDINGS);
        findings.push(FindingRecord {
            path: None,
            what: format!("{rest} more observations not recorded"),
        });
    }
    findings
}

/// Awareness after the agent (issue 18, item 4): production code the agent changed that observes
/// what can tell a test run from a real one (`analysis::awareness`). Not a refusal: the step goes
/// on, and its observations are recorded in the `snapshot`; a green from a tree with any halts
/// `human_required` unless the judge answers on each (`decide`, `judge`). APIs the loop allows
/// (`[guards] allow`) are let through with their reason, recorded in `run_start`'s config.
pub struct AwarenessGuard {
    files: TreeFiles,
    allowances: analysis::awareness::Allowances,
    limits: Limits,
}

impl AwarenessGuard {
    pub fn new(
        files: TreeFiles,
        allowances: analysis::awareness::Allowances,
        limits: Limits,
    ) -> AwarenessGuard {
        AwarenessGuard {
            files,
            allowances,
            limits,
        }
    }
}

impl Guard for AwarenessGuard {
    fn seat(&self) -> Seat {
        Seat::Awareness
    }

    fn after_agent(&mut self, step: &AgentStep<'_>) -> Option<Objection> {
        let (snapshot, t0) = step.workspace?;
        let host = HostBytes {
            files: &self.files,
            snapshot,
        };
        let findings = awareness(
            &TreeStep {
                t0,
                end: &snapshot.manifest,
                bytes: &host,
            },
            &self.allowances,
            self.limits,
        );
        (!findings.is_empty()).then_some(Objection::ReviewRequired(findings))
    }
}

/// Whether a tree has Python files (only then are module names obtained).
pub fn has_python(manifest: &Manifest) -> bool {
    manifest
        .iter()
        .any(|(p, e)| is_file(e.kind) && (p.ends_with(b".py") || p.ends_with(b".pyi")))
}

/// The interpreter whose module names shadowing is judged against: the system's, the one the
/// builtin exec policy gives the check (`/usr` is bound read-only into the exec zone).
pub const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// How long the module-name command may take.
const MODULE_NAMES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The top-level module names the system interpreter resolves without the workspace, obtained
/// once per run on the host: the command only lists names (`-I`: no environment variables, no
/// user site, no current directory on `sys.path`; `pkgutil.iter_modules` imports nothing), run
/// in t0's files with an empty environment, its output bounded and its time limited.
pub fn python_module_names(t0_dir: &Path) -> Result<BTreeSet<String>, analysis::AnalysisError> {
    analysis::shadowing::module_names_via(|argv: &[&str]| -> Result<Vec<u8>, String> {
        let mut child = std::process::Command::new(SYSTEM_PYTHON)
            .args(&argv[1..])
            .current_dir(t0_dir)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("{SYSTEM_PYTHON}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let reader = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = stdout
                .take(analysis::shadowing::MAX_MODULE_NAMES_BYTES as u64 + 1)
                .read_to_end(&mut bytes);
            bytes
        });
        let deadline = std::time::Instant::now() + MODULE_NAMES_TIMEOUT;
        let status = loop {
            match child.try_wait().map_err(|e| e.to_string())? {
                Some(status) => break status,
                None if std::time::Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{SYSTEM_PYTHON} did not finish within {}s",
                        MODULE_NAMES_TIMEOUT.as_secs()
                    ));
                }
                None => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        };
        let bytes = reader
            .join()
            .map_err(|_| "the output reader failed".to_string())?;
        if !status.success() {
            return Err(format!("{SYSTEM_PYTHON} ended with {status}"));
        }
        Ok(bytes)
    })
}

/// An awareness finding as the receipt records it: its path and api (both may hold the text of
/// the agent's literals: a name with control bytes, of any length) escaped and bounded; the
/// evidence is already (`syntax::evidence_text`).
fn awareness_record(f: &analysis::awareness::AwarenessFinding) -> FindingRecord {
    FindingRecord {
        path: Some(shown(&f.file)),
        what: format!(
            "line {}: {} {}: {}",
            f.line,
            f.channel,
            shown(&f.api),
            f.evidence
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::awareness::{Allowances, Context};
    use crate::analysis::{ChangedFile, Limits};

    #[test]
    fn a_shadowing_finding_gives_back_the_module_it_names_and_no_other_finding_does() {
        assert_eq!(
            shadowed_module(&shadowing_what("json")).as_deref(),
            Some("json")
        );
        assert_eq!(
            shadowed_module("assertions in test code fell from A0 = 3 to 2"),
            None
        );
        assert_eq!(
            shadowed_module(
                "shadows the module `json` the check's interpreter would import (and more)"
            ),
            None
        );
    }

    #[test]
    fn the_build_artefact_guards_record_in_the_same_seat_is_not_the_syntax_tree_guards() {
        let artefacts = [crate::workspace::Artefact {
            path: b"calc/core.so".to_vec(),
            kind: "shared object",
            by: "name",
        }];
        let artefact = crate::engine::artefact_guard::finding(1, &artefacts).unwrap();
        assert_eq!(artefact.guard, "metric_integrity");
        assert!(!is_syntax_tree_record(&artefact));
        let weakened = record(
            1,
            Seat::MetricIntegrity,
            HaltReason::MetricIntegrityViolation,
            format!("{WEAKENS} (1 findings against t0)"),
            Vec::new(),
        );
        assert!(is_syntax_tree_record(&weakened));
        let failed = analysis_record(
            1,
            Seat::MetricIntegrity,
            HaltReason::MetricIntegrityViolation,
            analysis::AnalysisError::ModuleNamesCommand("gone".into()),
        );
        assert!(is_syntax_tree_record(&failed));
        assert!(!is_syntax_tree_record(&analysis_record(
            1,
            Seat::Tampering,
            HaltReason::RewardHackingDetected,
            analysis::AnalysisError::ModuleNamesCommand("gone".into())
        )));
    }

    #[test]
    fn an_awareness_finding_from_a_hostile_literal_is_escaped_and_bounded() {
        let long = "X".repeat(100 * 1024);
        let path = format!("calc/\u{1b}]0;{long}.py");
        let src = format!("import os\n\ndef add(a, b):\n    if os.environ.get('PYTEST_\u{1b}[2J\u{7}{long}'):\n        return a + b\n    return a + b + 1\n");
        let changed = ChangedFile {
            path: &path,
            t0: None,
            end: Some(src.as_bytes()),
        };
        let change = analysis::awareness::analyse_change(
            &[changed],
            &|_| Context::default(),
            &Allowances::default(),
            Limits::default(),
        )
        .unwrap();
        assert_eq!(
            change.findings.len(),
            1,
            "{:?}",
            change
                .findings
                .iter()
                .map(|f| &f.api[..40])
                .collect::<Vec<_>>()
        );
        assert!(
            change.findings[0].api.starts_with("env:PYTEST_\u{1b}[2J"),
            "the analysis keeps the api it matches by"
        );
        let record = awareness_record(&change.findings[0]);
        let (path, what) = (record.path.unwrap(), record.what);
        assert!(
            path.starts_with("calc/\\u{1b}]0;XX") && path.ends_with("X..."),
            "{}",
            &path[..40]
        );
        assert!(
            what.starts_with("line 4: runner-environment env:PYTEST_\\u{1b}[2J\\u{7}XX"),
            "{}",
            &what[..80]
        );
        for text in [&path, &what] {
            assert!(text.len() < 600, "{} bytes", text.len());
            assert!(!text.chars().any(char::is_control), "{text}");
        }
    }
}
