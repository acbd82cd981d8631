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
    fn t0(&self, path: &[u8], limits: Limits) -> Option<Vec<u8>> {
        read_bounded(&self.t0_dir, path, limits.max_parse_bytes)
    }

    pub(super) fn end(&self, snapshot: &Snapshot, path: &[u8], limits: Limits) -> Option<Vec<u8>> {
        let root = if snapshot.from_upper.contains(path) { &self.upper } else { &self.t0_dir };
        read_bounded(root, path, limits.max_parse_bytes)
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
fn surface_of(spec: &SurfaceSpec, manifest: &Manifest, mut read: impl FnMut(&[u8]) -> Option<Vec<u8>>) -> SurfaceDigest {
    let files: Vec<(String, Vec<u8>)> = manifest
        .iter()
        .filter(|(_, e)| is_file(e.kind))
        .filter_map(|(p, _)| utf8_path(p).filter(|p| spec.is_candidate(p)).map(|s| (s.to_string(), p)))
        .filter_map(|(s, p)| read(p).map(|bytes| (s, bytes)))
        .collect();
    spec.digest(files.iter().map(|(p, b)| SourceFile { path: p, bytes: b }))
}

impl AnalysisBaseline {
    /// A0 and H0 of t0.
    pub fn of_t0(files: &TreeFiles, t0: &Manifest, spec: &SurfaceSpec, limits: Limits) -> Result<AnalysisBaseline, analysis::AnalysisError> {
        let mut assertions = 0;
        let mut not_analysed = Vec::new();
        for (path, entry) in t0.iter() {
            let Some(p) = utf8_path(path) else { continue };
            if !is_file(entry.kind) || analysis::Language::of_path(p).is_none() {
                continue;
            }
            let Some(bytes) = files.t0(path, limits) else { continue };
            let total = analysis::total_assertions([SourceFile { path: p, bytes: &bytes }], limits)?;
            assertions += total.assertions;
            not_analysed.extend(total.not_analysed.into_iter().map(|na| na.path));
        }
        let surface = surface_of(spec, t0, |p| files.t0(p, limits));
        Ok(AnalysisBaseline { assertions, surface, not_analysed })
    }
}

/// The changed files of a snapshot against t0, both versions read bounded.
pub(super) struct ChangedBytes {
    pub(super) files: Vec<(String, Option<Vec<u8>>, Option<Vec<u8>>)>,
}

impl ChangedBytes {
    pub(super) fn read(files: &TreeFiles, snapshot: &Snapshot, t0: &Manifest, limits: Limits) -> ChangedBytes {
        let mut out = Vec::new();
        for (path, _) in snapshot.changes(t0) {
            let Some(p) = utf8_path(&path) else { continue };
            if analysis::Language::of_path(p).is_none() {
                continue;
            }
            let before = t0.get(&path).filter(|e| is_file(e.kind)).and_then(|_| files.t0(&path, limits));
            let after = snapshot.manifest.get(&path).filter(|e| is_file(e.kind)).and_then(|_| files.end(snapshot, &path, limits));
            out.push((p.to_string(), before, after));
        }
        ChangedBytes { files: out }
    }

    /// Whether the snapshot changes any file `keep` lets through (in any language, with a grammar
    /// or not) beyond whitespace against t0, both versions read bounded (a file over the bound,
    /// or one deleted or new with a non-blank byte, counts as changed).
    pub(super) fn any_substantive(files: &TreeFiles, snapshot: &Snapshot, t0: &Manifest, limits: Limits, keep: impl Fn(&[u8]) -> bool) -> bool {
        let tokens = |bytes: &Option<Vec<u8>>| bytes.as_ref().map(|b| b.iter().filter(|c| !c.is_ascii_whitespace()).copied().collect::<Vec<u8>>());
        snapshot.changes(t0).into_iter().filter(|(path, _)| keep(path)).any(|(path, _)| {
            let before = t0.get(&path).filter(|e| is_file(e.kind)).and_then(|_| files.t0(&path, limits));
            let after = snapshot.manifest.get(&path).filter(|e| is_file(e.kind)).and_then(|_| files.end(snapshot, &path, limits));
            match (tokens(&before), tokens(&after)) {
                (None, None) => true,
                (Some(b), None) | (None, Some(b)) => !b.is_empty(),
                (Some(b), Some(a)) => a != b,
            }
        })
    }

    fn changed(&self) -> Vec<ChangedFile<'_>> {
        self.files.iter().map(|(p, a, b)| ChangedFile { path: p, t0: a.as_deref(), end: b.as_deref() }).filter(|c| c.t0 != c.end).collect()
    }
}

fn record(iteration: u64, seat: Seat, halt_reason: HaltReason, detail: String, mut findings: Vec<FindingRecord>) -> GuardRecord {
    if findings.len() > MAX_FINDINGS {
        let rest = findings.len() - MAX_FINDINGS;
        findings.truncate(MAX_FINDINGS);
        findings.push(FindingRecord { path: None, what: format!("{rest} more findings not recorded") });
    }
    GuardRecord { iteration, guard: seat.as_str().to_string(), stage: "after_agent".to_string(), halt_reason, detail, findings }
}

fn analysis_failure(iteration: u64, seat: Seat, halt_reason: HaltReason, e: analysis::AnalysisError) -> Objection {
    // A change the analysis cannot judge is not let through.
    Objection::Finding(record(iteration, seat, halt_reason, format!("the agent's change could not be analysed: {e}"), Vec::new()))
}

fn surface_finding(change: &SurfaceChange) -> FindingRecord {
    let (path, what) = match change {
        SurfaceChange::Added { entry } => (&entry.path, format!("test surface: {} added (sha256 {})", entry.part, entry.sha256)),
        SurfaceChange::Removed { entry } => (&entry.path, format!("test surface: {} removed (was sha256 {})", entry.part, entry.sha256)),
        SurfaceChange::Changed { before, after } => (&after.path, format!("test surface: {} changed (sha256 {} -> {})", after.part, before.sha256, after.sha256)),
    };
    FindingRecord { path: Some(path.clone()), what }
}

fn assertions_of(path: &str, bytes: Option<&[u8]>, limits: Limits) -> Result<u64, analysis::AnalysisError> {
    let Some(bytes) = bytes else { return Ok(0) };
    Ok(match analysis::analyse_file(SourceFile { path, bytes }, limits)? {
        analysis::FileAnalysis::Analysed(facts) => facts.assertions,
        analysis::FileAnalysis::NotAnalysed(_) => 0,
    })
}

/// The changed files whose own assertion count fell, each with both counts.
fn fewer_assertions(bytes: &ChangedBytes, limits: Limits) -> Result<Vec<FindingRecord>, analysis::AnalysisError> {
    let mut out = Vec::new();
    for change in bytes.changed() {
        let (before, after) = (assertions_of(change.path, change.t0, limits)?, assertions_of(change.path, change.end, limits)?);
        if after < before {
            out.push(FindingRecord { path: Some(change.path.to_string()), what: format!("assertions in test code: {before} at t0, {after} now") });
        }
    }
    Ok(out)
}

fn test_item_finding(change: &TestItemChange) -> FindingRecord {
    let (item, what) = match change {
        TestItemChange::Removed { item } => (item, "is gone".to_string()),
        TestItemChange::AttributesChanged { after, added, removed, .. } => {
            (after, format!("changed its attributes (added: [{}]; removed: [{}])", added.join(", "), removed.join(", ")))
        }
    };
    FindingRecord { path: Some(item.file.clone()), what: format!("line {}: t0 test item `{}` {what}", item.line, item.name) }
}

/// `metric_integrity_violation` after the agent: assertions, test items, surface, shadowing.
pub struct MetricIntegrityGuard {
    files: TreeFiles,
    baseline: AnalysisBaseline,
    spec: SurfaceSpec,
    limits: Limits,
    /// Names the check's interpreter resolves without the workspace (`Ok(None)`: t0 has no
    /// Python files; `Err`: they could not be obtained, so no step is vouched for).
    python_modules: Result<Option<BTreeSet<String>>, String>,
    /// The loop's `[[allow_test_change]]` paths: their own fall in assertions and their test
    /// items' changes are let through (recorded), nothing else of them.
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
        MetricIntegrityGuard { files, baseline, spec, limits, python_modules, allowances: Allowances::default(), allowed: None }
    }

    /// The guard with the loop's allowances.
    pub fn allowing(self, allowances: Allowances) -> MetricIntegrityGuard {
        MetricIntegrityGuard { allowances, ..self }
    }

    fn judge(&self, snapshot: &Snapshot, t0: &Manifest) -> Result<(Vec<FindingRecord>, Vec<AllowanceUse>), analysis::AnalysisError> {
        let mut findings = Vec::new();
        let mut uses = Vec::new();
        let bytes = ChangedBytes::read(&self.files, snapshot, t0, self.limits);
        let change = analysis::analyse_change(&bytes.changed(), &RuleSet::all(), self.limits)?;
        // An allowed file's own fall in assertions is let through; its gains still count, so an
        // assertion moved out of another file into it is no fall either.
        let mut forgiven = 0;
        for changed in bytes.changed() {
            let Some(pin) = self.allowances.for_path(changed.path) else { continue };
            let (before, after) = (assertions_of(changed.path, changed.t0, self.limits)?, assertions_of(changed.path, changed.end, self.limits)?);
            if after < before {
                forgiven += before - after;
                uses.push(allow_change::use_of(pin, format!("{}: assertions in test code: {before} at t0, {after} now", shown(changed.path))));
            }
        }
        let assertions_end = change.assertions_end + forgiven;
        if assertions_end < change.assertions_t0 {
            let end_total = self.baseline.assertions - change.assertions_t0.min(self.baseline.assertions) + assertions_end;
            findings.push(FindingRecord {
                path: None,
                what: format!("assertions in test code fell from A0 = {} to {end_total}", self.baseline.assertions),
            });
            let guarded = fewer_assertions(&bytes, self.limits)?.into_iter().filter(|f| f.path.as_deref().is_none_or(|p| self.allowances.for_path(p).is_none()));
            findings.extend(guarded);
        }
        for item_change in &change.test_item_changes {
            let finding = test_item_finding(item_change);
            match finding.path.as_deref().and_then(|p| self.allowances.for_path(p)) {
                Some(pin) => uses.push(allow_change::use_of(pin, format!("{}: {}", shown(finding.path.as_deref().unwrap_or("")), finding.what))),
                None => findings.push(finding),
            }
        }
        let end_surface = surface_of(&self.spec, &snapshot.manifest, |p| self.files.end(snapshot, p, self.limits));
        findings.extend(end_surface.diff_from(&self.baseline.surface).iter().map(surface_finding));
        let known = self.python_modules.as_ref().map_err(|e| analysis::AnalysisError::ModuleNamesCommand(e.clone()))?;
        if let Some(known) = known {
            let paths: Vec<&str> = snapshot.manifest.iter().filter_map(|(p, _)| utf8_path(p)).collect();
            let t0_paths: BTreeSet<&str> = t0.iter().filter_map(|(p, _)| utf8_path(p)).collect();
            for s in analysis::shadowing::shadowing(known, &paths) {
                if !t0_paths.contains(s.path.as_str()) {
                    findings.push(FindingRecord { path: Some(s.path.clone()), what: format!("shadows the module `{}` the check's interpreter would import", s.module) });
                }
            }
        }
        Ok((findings, uses))
    }
}

impl Guard for MetricIntegrityGuard {
    fn seat(&self) -> Seat {
        Seat::MetricIntegrity
    }

    fn after_agent(&mut self, step: &AgentStep<'_>) -> Option<Objection> {
        self.allowed = None;
        let (snapshot, t0) = step.workspace?;
        let reason = HaltReason::MetricIntegrityViolation;
        let judged = self.judge(snapshot, t0).map(|(findings, uses)| {
            self.allowed = allow_change::record(step.iteration, Seat::MetricIntegrity.as_str(), "after_agent", uses);
            findings
        });
        match judged {
            Err(e) => Some(analysis_failure(step.iteration, self.seat(), reason, e)),
            Ok(findings) if findings.is_empty() => None,
            Ok(findings) => {
                let detail = format!("the agent's change weakens what the check measures ({} findings against t0)", findings.len());
                Some(Objection::Finding(record(step.iteration, self.seat(), reason, detail, findings)))
            }
        }
    }

    fn take_allowed(&mut self) -> Option<TestChangeAllowedRecord> {
        self.allowed.take()
    }
}

/// `reward_hacking_detected` after the agent: new tampering occurrences of enabled rules.
pub struct TamperingGuard {
    files: TreeFiles,
    rules: RuleSet,
    limits: Limits,
}

impl TamperingGuard {
    pub fn new(files: TreeFiles, rules: RuleSet, limits: Limits) -> TamperingGuard {
        TamperingGuard { files, rules, limits }
    }
}

impl Guard for TamperingGuard {
    fn seat(&self) -> Seat {
        Seat::Tampering
    }

    fn after_agent(&mut self, step: &AgentStep<'_>) -> Option<Objection> {
        let (snapshot, t0) = step.workspace?;
        let reason = HaltReason::RewardHackingDetected;
        let bytes = ChangedBytes::read(&self.files, snapshot, t0, self.limits);
        let change = match analysis::analyse_change(&bytes.changed(), &self.rules, self.limits) {
            Ok(c) => c,
            Err(e) => return Some(analysis_failure(step.iteration, self.seat(), reason, e)),
        };
        if change.findings.is_empty() {
            return None;
        }
        let findings: Vec<FindingRecord> = change
            .findings
            .iter()
            .map(|f| FindingRecord { path: Some(f.file.clone()), what: format!("line {}: rule {}: {}", f.line, f.rule, f.evidence) })
            .collect();
        let disabled: Vec<String> = change.disabled_rules.iter().map(|d| format!("{} ({})", d.rule, d.reason)).collect();
        let mut detail = format!("tampering patterns in the agent's change ({} new occurrences)", findings.len());
        if !disabled.is_empty() {
            detail.push_str(&format!("; rules disabled by the loop: {}", disabled.join(", ")));
        }
        Some(Objection::Finding(record(step.iteration, self.seat(), reason, detail, findings)))
    }
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
    pub fn new(files: TreeFiles, allowances: analysis::awareness::Allowances, limits: Limits) -> AwarenessGuard {
        AwarenessGuard { files, allowances, limits }
    }

    /// The test-only features of the crate a Rust file belongs to: its nearest Cargo.toml in the
    /// end state, read bounded (cached per manifest).
    fn context_of(&self, snapshot: &Snapshot, path: &str, cache: &mut std::collections::HashMap<String, analysis::awareness::Context>) -> analysis::awareness::Context {
        if !path.ends_with(".rs") {
            return analysis::awareness::Context::default();
        }
        let mut dir = path.rsplit_once('/').map(|(d, _)| d);
        loop {
            let manifest = match dir {
                Some(d) => format!("{d}/Cargo.toml"),
                None => "Cargo.toml".to_string(),
            };
            if snapshot.manifest.get(manifest.as_bytes()).is_some_and(|e| is_file(e.kind)) {
                if let Some(context) = cache.get(&manifest) {
                    return context.clone();
                }
                let text = self.files.end(snapshot, manifest.as_bytes(), self.limits).and_then(|b| String::from_utf8(b).ok()).unwrap_or_default();
                let context = analysis::awareness::Context { test_only_features: analysis::awareness::test_only_features(&text) };
                cache.insert(manifest, context.clone());
                return context;
            }
            match dir {
                Some(d) => dir = d.rsplit_once('/').map(|(p, _)| p),
                None => return analysis::awareness::Context::default(),
            }
        }
    }

    /// The findings of the step, as the snapshot records them (at most [`MAX_FINDINGS`], then a count).
    fn judge(&self, snapshot: &Snapshot, t0: &Manifest) -> Vec<FindingRecord> {
        let bytes = ChangedBytes::read(&self.files, snapshot, t0, self.limits);
        let mut cache = std::collections::HashMap::new();
        let contexts: std::collections::HashMap<String, analysis::awareness::Context> =
            bytes.files.iter().map(|(p, _, _)| (p.clone(), self.context_of(snapshot, p, &mut cache))).collect();
        let context_of = |p: &str| contexts.get(p).cloned().unwrap_or_default();
        let mut findings: Vec<FindingRecord> = match analysis::awareness::analyse_change(&bytes.changed(), &context_of, &self.allowances, self.limits) {
            // A change that cannot be analysed is not vouched for: it needs the review too.
            Err(e) => vec![FindingRecord { path: None, what: format!("the agent's change could not be analysed for observations: {e}") }],
            Ok(change) => {
                let mut out: Vec<FindingRecord> = change
                    .findings
                    .iter()
                    .map(awareness_record)
                    .collect();
                out.extend(change.not_analysed.iter().filter(|(v, _)| *v == analysis::Version::End).map(|(_, na)| FindingRecord {
                    path: Some(shown(&na.path)),
                    what: format!("not analysed for observations: {} (sha256 {})", na.reason, na.sha256),
                }));
                out
            }
        };
        if findings.len() > MAX_FINDINGS {
            let rest = findings.len() - MAX_FINDINGS;
            findings.truncate(MAX_FINDINGS);
            findings.push(FindingRecord { path: None, what: format!("{rest} more observations not recorded") });
        }
        findings
    }
}

impl Guard for AwarenessGuard {
    fn seat(&self) -> Seat {
        Seat::Awareness
    }

    fn after_agent(&mut self, step: &AgentStep<'_>) -> Option<Objection> {
        let (snapshot, t0) = step.workspace?;
        let findings = self.judge(snapshot, t0);
        (!findings.is_empty()).then_some(Objection::ReviewRequired(findings))
    }
}

/// Whether a tree has Python files (only then are module names obtained).
pub fn has_python(manifest: &Manifest) -> bool {
    manifest.iter().any(|(p, e)| is_file(e.kind) && (p.ends_with(b".py") || p.ends_with(b".pyi")))
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
            let _ = stdout.take(analysis::shadowing::MAX_MODULE_NAMES_BYTES as u64 + 1).read_to_end(&mut bytes);
            bytes
        });
        let deadline = std::time::Instant::now() + MODULE_NAMES_TIMEOUT;
        let status = loop {
            match child.try_wait().map_err(|e| e.to_string())? {
                Some(status) => break status,
                None if std::time::Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("{SYSTEM_PYTHON} did not finish within {}s", MODULE_NAMES_TIMEOUT.as_secs()));
                }
                None => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        };
        let bytes = reader.join().map_err(|_| "the output reader failed".to_string())?;
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
    FindingRecord { path: Some(shown(&f.file)), what: format!("line {}: {} {}: {}", f.line, f.channel, shown(&f.api), f.evidence) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::awareness::{Allowances, Context};
    use crate::analysis::{ChangedFile, Limits};

    #[test]
    fn an_awareness_finding_from_a_hostile_literal_is_escaped_and_bounded() {
        let long = "X".repeat(100 * 1024);
        let path = format!("calc/\u{1b}]0;{long}.py");
        let src = format!("import os\n\ndef add(a, b):\n    if os.environ.get('PYTEST_\u{1b}[2J\u{7}{long}'):\n        return a + b\n    return a + b + 1\n");
        let changed = ChangedFile { path: &path, t0: None, end: Some(src.as_bytes()) };
        let change = analysis::awareness::analyse_change(&[changed], &|_| Context::default(), &Allowances::default(), Limits::default()).unwrap();
        assert_eq!(change.findings.len(), 1, "{:?}", change.findings.iter().map(|f| &f.api[..40]).collect::<Vec<_>>());
        assert!(change.findings[0].api.starts_with("env:PYTEST_\u{1b}[2J"), "the analysis keeps the api it matches by");
        let record = awareness_record(&change.findings[0]);
        let (path, what) = (record.path.unwrap(), record.what);
        assert!(path.starts_with("calc/\\u{1b}]0;XX") && path.ends_with("X..."), "{}", &path[..40]);
        assert!(what.starts_with("line 4: runner-environment env:PYTEST_\\u{1b}[2J\\u{7}XX"), "{}", &what[..80]);
        for text in [&path, &what] {
            assert!(text.len() < 600, "{} bytes", text.len());
            assert!(!text.chars().any(char::is_control), "{text}");
        }
    }
}
