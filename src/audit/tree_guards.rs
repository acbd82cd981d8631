//! `verify --repo DIR`: the syntax-tree guards re-run on the trees a run recorded, read as git
//! objects from a repository the reviewer names, and compared with what the receipt says they
//! found (the `tree_guards` check). No agent, no check, no zone: the guards are pure functions of
//! t0, the agent's tree and the configuration `run_start` pinned (`engine::analysis_guards`).
//!
//! What is re-run, per iteration whose `snapshot` names a tree, against the `workspace` event's t0:
//! - the metric-integrity guard (assertion counts against A0, t0's test items, the test-surface
//!   digest against H0, shadowing) and its `[[allow_test_change]]` uses: its `guard` event and its
//!   `test_change_allowed` event of that iteration. Shadowing depends on the module names the
//!   check's interpreter knew, which the receipt counts but does not list: it is re-run with the
//!   modules the recorded findings name, so a recorded shadowing must be one, and a shadowing
//!   the receipt left out cannot be told;
//! - the tampering rules (the `tampering` guard event);
//! - the awareness rule (the snapshot's `awareness`);
//! - and on t0 itself, A0, H0 and the files over the parse cap (each `guard_baseline` event).
//!
//! The protected-path and build-artefact guards, and every guard after the check, are not re-run
//! here. A tree the repository does not hold is named as not replayable, never passed silently;
//! when no recorded tree is there at all the check fails.
//!
//! The repository is untrusted input. git runs as a child with the hardened invocation
//! (`workspace::git`: cleared environment, no hooks, fsmonitor or pager, no replace objects, no
//! transport) and `GIT_DIR` fixed to the repository found, a partial clone's missing objects never
//! fetched (`GIT_NO_LAZY_FETCH`); only `cat-file --batch(-check)` and `ls-tree` run.
//! Nothing is written to disk: a listing is read bounded and must hash to its tree id, a blob is
//! read at most the parse cap plus one byte (the rest streamed past while hashing) and must hash
//! to its id, and only regular files are read (a symlink is never followed: it is never read).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use sha1::{Digest, Sha1};

use super::verify::Verification;
use crate::analysis::Limits;
use crate::engine::allow_change::{AllowTestChange, Allowances};
use crate::engine::analysis_guards::{
    self, AnalysisBaseline, MetricIntegrityPins, TreeBytes, TreeStep,
};
use crate::engine::config::GuardPins;
use crate::error::Failure;
use crate::receipt::events::{
    Event, FindingRecord, GuardBaselineRecord, GuardRecord, TestChangeAllowedRecord,
};
use crate::workspace::git::Git;
use crate::workspace::{Manifest, ObjectId};

/// The name of the check.
pub const CHECK: &str = "tree_guards";

/// At most this many bytes of one tree's recursive listing are read (about a million entries).
pub const MAX_LISTING_BYTES: usize = 128 << 20;

/// Why the repository cannot be used: each names the repository or the object.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RepoError {
    #[error("--repo {dir}: not a git repository ({detail})")]
    NotARepository { dir: PathBuf, detail: String },
    #[error("--repo {dir}: {detail}")]
    Unreadable { dir: PathBuf, detail: String },
    #[error("--repo {dir}: {object} is corrupt: {detail}")]
    Corrupt {
        dir: PathBuf,
        object: String,
        detail: String,
    },
}

impl RepoError {
    /// The command-boundary failure: a repository that is not one, or whose objects are not what
    /// their ids say, is refused input; one that cannot be read is an I/O failure.
    pub fn failure(&self) -> Failure {
        match self {
            RepoError::NotARepository { .. } => Failure::invalid_input(self.to_string()).with_hint(
                "pass the operator's repository (its working tree or its .git directory)",
            ),
            RepoError::Unreadable { .. } => {
                Failure::new(crate::error::FailureCode::Io, self.to_string())
            }
            RepoError::Corrupt { .. } => Failure::invalid_input(self.to_string())
                .with_hint("run `git fsck` on the repository"),
        }
    }
}

/// The reviewer's repository, reached through the hardened git invocation with `GIT_DIR` fixed.
#[derive(Debug, Clone)]
pub struct Repo {
    dir: PathBuf,
    git_dir: PathBuf,
}

impl Repo {
    /// Open `dir`: it must be a directory loopexec can read that git finds a repository at.
    pub fn open(dir: &Path) -> Result<Repo, RepoError> {
        let unreadable = |detail: String| RepoError::Unreadable {
            dir: dir.to_path_buf(),
            detail,
        };
        let meta = std::fs::metadata(dir).map_err(|e| unreadable(e.to_string()))?;
        if !meta.is_dir() {
            return Err(RepoError::NotARepository {
                dir: dir.to_path_buf(),
                detail: "not a directory".into(),
            });
        }
        std::fs::read_dir(dir).map_err(|e| unreadable(e.to_string()))?;
        let out = Git::new(dir)
            .run(["rev-parse", "--absolute-git-dir"], None)
            .map_err(|e| RepoError::NotARepository {
                dir: dir.to_path_buf(),
                detail: match e {
                    crate::workspace::WorkspaceError::Git { detail, .. } => detail,
                    other => other.to_string(),
                },
            })?;
        let text = String::from_utf8_lossy(&out)
            .trim_end_matches('\n')
            .to_string();
        if text.is_empty() || !text.starts_with('/') {
            return Err(RepoError::NotARepository {
                dir: dir.to_path_buf(),
                detail: format!("git named no repository ({text:?})"),
            });
        }
        Ok(Repo {
            dir: dir.to_path_buf(),
            git_dir: PathBuf::from(text),
        })
    }

    fn command<I, S>(&self, args: I) -> std::process::Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut c = Git::new(&self.git_dir).command(args);
        // A partial clone's missing object is never fetched (besides `protocol.allow=never`).
        c.env("GIT_DIR", &self.git_dir)
            .env("GIT_NO_LAZY_FETCH", "1");
        c
    }

    fn failed(&self, what: &str, detail: impl std::fmt::Display) -> RepoError {
        RepoError::Unreadable {
            dir: self.dir.clone(),
            detail: format!("`git {what}`: {detail}"),
        }
    }

    fn corrupt(&self, object: String, detail: impl Into<String>) -> RepoError {
        RepoError::Corrupt {
            dir: self.dir.clone(),
            object,
            detail: detail.into(),
        }
    }

    /// What the repository holds under `id`: `None` when it lacks it.
    fn object_type(&self, id: ObjectId) -> Result<Option<String>, RepoError> {
        let mut child = self
            .command(["cat-file", "--batch-check"])
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|e| self.failed("cat-file", e))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = writeln!(stdin, "{id}");
        }
        let mut line = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout.take(512)).read_until(b'\n', &mut line);
        }
        let _ = child.kill();
        let _ = child.wait();
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        let mut fields = text.split(' ');
        match (fields.next(), fields.next()) {
            (Some(found), Some("missing")) if found == id.to_hex() => Ok(None),
            (Some(found), Some(kind)) if found == id.to_hex() => Ok(Some(kind.to_string())),
            _ => Err(self.failed(
                "cat-file --batch-check",
                format!("unexpected answer {text:?}"),
            )),
        }
    }

    /// The listing of tree `id`, which must hash to `id`; `Err(reason)` inside when it cannot be
    /// replayed (absent, over the bound).
    fn listing(&self, id: ObjectId) -> Result<Result<Manifest, String>, RepoError> {
        match self.object_type(id)?.as_deref() {
            None => return Ok(Err(format!("tree {id} is not in the repository"))),
            Some("tree") => {}
            Some(other) => {
                return Err(self.corrupt(
                    format!("tree {id}"),
                    format!("the repository holds a {other} under that id"),
                ))
            }
        }
        let hex = id.to_hex();
        let mut child = self
            .command(["ls-tree", "-r", "-z", "--full-tree", hex.as_str()])
            .spawn()
            .map_err(|e| self.failed("ls-tree", e))?;
        let mut bytes = Vec::new();
        let read = child
            .stdout
            .take()
            .map(|s| s.take(MAX_LISTING_BYTES as u64 + 1).read_to_end(&mut bytes));
        if bytes.len() > MAX_LISTING_BYTES {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Err(format!(
                "tree {id}'s listing is over {MAX_LISTING_BYTES} bytes"
            )));
        }
        let mut stderr = Vec::new();
        if let Some(s) = child.stderr.take() {
            let _ = s.take(4096).read_to_end(&mut stderr);
        }
        let status = child.wait().map_err(|e| self.failed("ls-tree", e))?;
        if !status.success() || !matches!(read, Some(Ok(_))) {
            let said: Vec<String> = String::from_utf8_lossy(&stderr)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect();
            return Err(self.corrupt(
                format!("tree {id}"),
                format!("`git ls-tree` failed: {}", said.join("; ")),
            ));
        }
        let manifest = Manifest::parse(&bytes)
            .map_err(|e| self.corrupt(format!("tree {id}"), e.to_string()))?;
        let found = manifest.tree_id();
        if found != id {
            return Err(self.corrupt(
                format!("tree {id}"),
                format!("its listing hashes to {found}"),
            ));
        }
        Ok(Ok(manifest))
    }
}

/// One `cat-file --batch` child, asked one blob at a time.
struct Objects {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Objects {
    fn start(repo: &Repo) -> Result<Objects, RepoError> {
        let mut child = repo
            .command(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| repo.failed("cat-file --batch", e))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(repo.failed("cat-file --batch", "no pipes"));
        };
        Ok(Objects {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    /// At most `limit + 1` bytes of blob `id`, the whole blob hashed on the way.
    fn blob(&mut self, repo: &Repo, id: ObjectId, limit: usize) -> Result<Vec<u8>, RepoError> {
        let object = format!("blob {id}");
        writeln!(self.stdin, "{id}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| repo.failed("cat-file --batch", e))?;
        let mut header = Vec::new();
        (&mut self.stdout)
            .take(512)
            .read_until(b'\n', &mut header)
            .map_err(|e| repo.failed("cat-file --batch", e))?;
        let text = String::from_utf8_lossy(&header).trim_end().to_string();
        let fields: Vec<&str> = text.split(' ').collect();
        let size: u64 = match fields.as_slice() {
            [found, "blob", size] if *found == id.to_hex() => size
                .parse()
                .map_err(|_| repo.failed("cat-file --batch", format!("no size in {text:?}")))?,
            [found, "missing"] if *found == id.to_hex() => {
                return Err(repo.corrupt(
                    object,
                    "a tree the repository holds names it, but the repository lacks it",
                ))
            }
            _ => return Err(repo.corrupt(object, format!("the repository answers {text:?}"))),
        };
        let mut hash = Sha1::new();
        hash.update(format!("blob {size}\0").as_bytes());
        let mut kept = Vec::new();
        let mut left = size;
        let mut buf = vec![0u8; 64 * 1024];
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let n = self
                .stdout
                .read(&mut buf[..want])
                .map_err(|e| repo.failed("cat-file --batch", e))?;
            if n == 0 {
                return Err(repo.corrupt(object, "short object"));
            }
            hash.update(&buf[..n]);
            let room = (limit + 1).saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
            left -= n as u64;
        }
        let mut nl = [0u8; 1];
        self.stdout
            .read_exact(&mut nl)
            .map_err(|e| repo.failed("cat-file --batch", e))?;
        let found = ObjectId(hash.finalize().into());
        if found != id {
            return Err(repo.corrupt(object, format!("its content hashes to {found}")));
        }
        Ok(kept)
    }
}

impl Drop for Objects {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bytes of t0 and of one agent tree, read from the repository; the first failure is kept
/// (the guards see an unreadable file as absent, so the caller asks for it after each guard).
struct RepoBytes<'a> {
    repo: &'a Repo,
    objects: &'a std::cell::RefCell<Objects>,
    t0: &'a Manifest,
    end: &'a Manifest,
    error: std::cell::RefCell<Option<RepoError>>,
}

impl<'a> RepoBytes<'a> {
    fn new(
        repo: &'a Repo,
        objects: &'a std::cell::RefCell<Objects>,
        t0: &'a Manifest,
        end: &'a Manifest,
    ) -> RepoBytes<'a> {
        RepoBytes {
            repo,
            objects,
            t0,
            end,
            error: std::cell::RefCell::new(None),
        }
    }

    fn read(&self, manifest: &Manifest, path: &[u8], limit: usize) -> Option<Vec<u8>> {
        let entry = manifest.get(path)?;
        if !matches!(
            entry.kind,
            crate::workspace::EntryKind::File | crate::workspace::EntryKind::Executable
        ) {
            return None;
        }
        match self.objects.borrow_mut().blob(self.repo, entry.oid, limit) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e);
                None
            }
        }
    }

    fn failure(&self) -> Result<(), RepoError> {
        match self.error.borrow_mut().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl TreeBytes for RepoBytes<'_> {
    fn t0(&self, path: &[u8], limit: usize) -> Option<Vec<u8>> {
        self.read(self.t0, path, limit)
    }

    fn end(&self, path: &[u8], limit: usize) -> Option<Vec<u8>> {
        self.read(self.end, path, limit)
    }
}

/// What the run pinned that the guards judge with (`run_start`'s `config`).
struct Pins {
    guards: GuardPins,
    allow: Vec<AllowTestChange>,
}

impl Pins {
    fn of(events: &[Event]) -> Result<Pins, String> {
        let Some(start) = events.iter().find_map(|e| {
            if let Event::RunStart(s) = e {
                Some(s)
            } else {
                None
            }
        }) else {
            return Err("the receipt has no run_start".into());
        };
        let field = |name: &str| {
            start
                .config
                .get(name)
                .cloned()
                .unwrap_or(serde_json::Value::Null)
        };
        let guards = match field("guards") {
            serde_json::Value::Null => GuardPins::default(),
            v => serde_json::from_value(v)
                .map_err(|e| format!("run_start's config.guards is not readable: {e}"))?,
        };
        let allow = match field("allow_test_change") {
            serde_json::Value::Null => Vec::new(),
            v => serde_json::from_value(v).map_err(|e| {
                format!("run_start's config.allow_test_change is not readable: {e}")
            })?,
        };
        Ok(Pins { guards, allow })
    }
}

/// What one iteration's record says the after-agent tree guards found.
#[derive(Default)]
struct IterationRecord<'a> {
    tree: Option<&'a str>,
    awareness: Option<&'a [FindingRecord]>,
    metric: Option<&'a GuardRecord>,
    allowed: Option<&'a TestChangeAllowedRecord>,
    tampering: Option<&'a GuardRecord>,
    /// The `guard_baseline` in force (the last one before the snapshot).
    baseline: Option<&'a GuardBaselineRecord>,
}

/// The iterations' records, in iteration order.
fn recorded(events: &[Event]) -> BTreeMap<u64, IterationRecord<'_>> {
    let mut out: BTreeMap<u64, IterationRecord<'_>> = BTreeMap::new();
    let mut baseline = None;
    for event in events {
        match event {
            Event::GuardBaseline(b) => baseline = Some(b),
            Event::Snapshot(s) => {
                let r = out.entry(s.iteration).or_default();
                r.tree = Some(s.tree_id.as_str());
                r.awareness = Some(s.awareness.as_slice());
                r.baseline = baseline;
            }
            Event::Guard(g) if g.stage == "after_agent" && g.guard == "tampering" => {
                out.entry(g.iteration).or_default().tampering = Some(g)
            }
            Event::Guard(g)
                if g.stage == "after_agent" && analysis_guards::is_syntax_tree_record(g) =>
            {
                out.entry(g.iteration).or_default().metric = Some(g)
            }
            Event::TestChangeAllowed(a)
                if a.stage == "after_agent" && a.guard == "metric_integrity" =>
            {
                out.entry(a.iteration).or_default().allowed = Some(a)
            }
            _ => {}
        }
    }
    out.retain(|_, r| r.tree.is_some());
    out
}

/// Findings as a sentence: `no finding`, or each `path: what`.
fn described(findings: &[FindingRecord]) -> String {
    if findings.is_empty() {
        return "no finding".into();
    }
    let each: Vec<String> = findings
        .iter()
        .map(|f| match &f.path {
            Some(p) => format!("{p}: {}", f.what),
            None => f.what.clone(),
        })
        .collect();
    format!("{} finding(s): {}", findings.len(), each.join("; "))
}

fn described_record(record: Option<&GuardRecord>) -> String {
    match record {
        None => "no finding".into(),
        Some(r) if r.findings.is_empty() => r.detail.clone(),
        Some(r) => described(&r.findings),
    }
}

fn described_allowed(record: Option<&TestChangeAllowedRecord>) -> String {
    match record {
        None => "no allowance used".into(),
        Some(r) => {
            let each: Vec<String> = r.uses.iter().map(|u| u.what.clone()).collect();
            format!("{} use(s): {}", r.uses.len(), each.join("; "))
        }
    }
}

/// The modules the recorded shadowing findings name.
fn shadowed_modules(record: Option<&GuardRecord>) -> BTreeSet<String> {
    record
        .into_iter()
        .flat_map(|r| r.findings.iter())
        .filter_map(|f| analysis_guards::shadowed_module(&f.what))
        .collect()
}

/// Whether two metric-integrity records agree: equal, or, when the recorded one was cut at
/// [`analysis_guards::MAX_FINDINGS`] with shadowing possible (the modules it left out are unknown),
/// equal up to the cut.
fn metric_agrees(
    recorded: Option<&GuardRecord>,
    replayed: Option<&GuardRecord>,
    shadowing: bool,
) -> bool {
    match (recorded, replayed) {
        (Some(r), Some(p)) if shadowing && r.findings.len() > analysis_guards::MAX_FINDINGS => {
            let n = analysis_guards::MAX_FINDINGS;
            p.findings.len() >= n
                && r.findings[..n] == p.findings[..n]
                && (r.guard.as_str(), r.halt_reason) == (p.guard.as_str(), p.halt_reason)
        }
        (r, p) => r == p,
    }
}

/// The outcome of re-running the guards.
struct Tally {
    guards: usize,
    trees: BTreeSet<String>,
    disagreements: Vec<String>,
    unreplayable: Vec<String>,
    notes: Vec<String>,
}

/// Re-run the tree guards of the run whose receipt holds `events` on the trees `repo` holds, and
/// record the `tree_guards` check in `v`. `Err` only when the repository cannot be used.
pub fn check(events: &[Event], repo: &Repo, v: &mut Verification) -> Result<(), RepoError> {
    let Some(t0_id) = events.iter().find_map(|e| {
        if let Event::Workspace(w) = e {
            Some(w.tree_id.as_str())
        } else {
            None
        }
    }) else {
        v.pass_step(
            CHECK,
            "not re-run: the run is in place, it recorded no tree and its tree guards never ran",
        );
        return Ok(());
    };
    let pins = match Pins::of(events) {
        Ok(p) => p,
        Err(detail) => {
            v.fail_step(CHECK, detail);
            return Ok(());
        }
    };
    match replay(events, repo, t0_id, &pins)? {
        Err(detail) => v.fail_step(CHECK, detail),
        Ok(t) if !t.disagreements.is_empty() => v.fail_step(CHECK, t.disagreements.join("; ")),
        Ok(t) if t.trees.is_empty() => v.fail_step(
            CHECK,
            format!(
                "no recorded tree is in {}: not replayable: {}",
                repo.dir.display(),
                t.unreplayable.join(", ")
            ),
        ),
        Ok(t) => {
            let mut detail = format!(
                "re-ran {} guard(s) on {} tree(s), all agree with the receipt",
                t.guards,
                t.trees.len()
            );
            if !t.unreplayable.is_empty() {
                detail.push_str(&format!("; not replayable: {}", t.unreplayable.join(", ")));
            }
            for note in &t.notes {
                detail.push_str(&format!("; {note}"));
            }
            v.pass_step(CHECK, detail);
        }
    }
    Ok(())
}

fn tree_id(text: &str) -> Option<ObjectId> {
    ObjectId::from_hex(text.as_bytes())
}

fn replay(
    events: &[Event],
    repo: &Repo,
    t0_text: &str,
    pins: &Pins,
) -> Result<Result<Tally, String>, RepoError> {
    let limits = Limits::default();
    let (rules, spec, api_allowances, allowances) = match (
        pins.guards.rule_set(),
        pins.guards.surface_spec(),
        pins.guards.allowances(),
        Allowances::new(&pins.allow),
    ) {
        (Ok(r), Ok(s), Ok(a), Ok(l)) => (r, s, a, l),
        (r, s, a, l) => {
            let why = [r.err(), s.err(), a.err(), l.err()]
                .into_iter()
                .flatten()
                .map(|f| f.message)
                .collect::<Vec<_>>()
                .join("; ");
            return Ok(Err(format!(
                "the pinned guard configuration is not usable: {why}"
            )));
        }
    };
    let iterations = recorded(events);
    let mut tally = Tally {
        guards: 0,
        trees: BTreeSet::new(),
        disagreements: Vec::new(),
        unreplayable: Vec::new(),
        notes: Vec::new(),
    };
    let Some(t0_id) = tree_id(t0_text) else {
        return Ok(Err(format!(
            "the workspace event's tree id {t0_text:?} is not an object id"
        )));
    };
    let t0 = match repo.listing(t0_id)? {
        Ok(m) => m,
        Err(why) => {
            tally.unreplayable.push(format!("t0 ({why})"));
            for (n, r) in &iterations {
                tally.unreplayable.push(format!(
                    "iteration {n} (tree {}: t0 is not there to judge it against)",
                    r.tree.unwrap_or_default()
                ));
            }
            return Ok(Ok(tally));
        }
    };
    let objects = std::cell::RefCell::new(Objects::start(repo)?);
    // t0: A0, H0 and the files over the parse cap, against every guard_baseline.
    let t0_bytes = RepoBytes::new(repo, &objects, &t0, &t0);
    let baseline = AnalysisBaseline::of_t0_bytes(&t0_bytes, &t0, &spec, limits);
    t0_bytes.failure()?;
    let baseline = match baseline {
        Ok(b) => b,
        Err(e) => return Ok(Err(format!("t0 {t0_id}: the analysis failed: {e}"))),
    };
    tally.trees.insert(t0_id.to_hex());
    for recorded in events.iter().filter_map(|e| {
        if let Event::GuardBaseline(b) = e {
            Some(b)
        } else {
            None
        }
    }) {
        tally.guards += 1;
        let (a0, h0) = (baseline.assertions, baseline.surface.sha256.as_str());
        if (
            recorded.assertions,
            recorded.surface_sha256.as_str(),
            &recorded.not_analysed,
        ) != (a0, h0, &baseline.not_analysed)
        {
            tally.disagreements.push(format!(
                "t0, guard_baseline: recorded A0 = {}, H0 = {}, not analysed [{}]; re-run A0 = {a0}, H0 = {h0}, not analysed [{}]",
                recorded.assertions,
                recorded.surface_sha256,
                recorded.not_analysed.join(", "),
                baseline.not_analysed.join(", ")
            ));
        }
    }
    let has_python = analysis_guards::has_python(&t0);
    let mut listings: BTreeMap<String, Result<Manifest, String>> = BTreeMap::new();
    let mut shadowing_noted = false;
    for (n, r) in &iterations {
        let Some(tree) = r.tree else { continue };
        let listing = match listings.get(tree) {
            Some(l) => l.clone(),
            None => {
                let l = match tree_id(tree) {
                    Some(id) => repo.listing(id)?,
                    None => Err(format!("{tree:?} is not an object id")),
                };
                listings.insert(tree.to_string(), l.clone());
                l
            }
        };
        let end = match listing {
            Ok(m) => m,
            Err(why) => {
                tally.unreplayable.push(format!("iteration {n} ({why})"));
                continue;
            }
        };
        tally.trees.insert(tree.to_string());
        let bytes = RepoBytes::new(repo, &objects, &t0, &end);
        let step = TreeStep {
            t0: &t0,
            end: &end,
            bytes: &bytes,
        };
        // Metric integrity, with the interpreter's module names as far as the receipt shows them.
        let known = shadowed_modules(r.metric);
        let names_obtained = r.baseline.is_some_and(|b| b.python_module_names.is_some());
        if has_python && !names_obtained {
            tally.unreplayable.push(format!("iteration {n}'s metric_integrity (the run obtained no module names of the check's interpreter)"));
        } else {
            let python_modules = if has_python {
                Ok(Some(&known))
            } else {
                Ok(None)
            };
            if has_python && !shadowing_noted {
                shadowing_noted = true;
                tally.notes.push("shadowing re-run against the modules the recorded findings name (the receipt does not list the interpreter's)".into());
            }
            let metric_pins = MetricIntegrityPins {
                baseline: &baseline,
                spec: &spec,
                limits,
                python_modules,
                allowances: &allowances,
            };
            let (finding, allowed) = analysis_guards::metric_integrity(*n, &step, &metric_pins);
            bytes.failure()?;
            tally.guards += 1;
            if !metric_agrees(r.metric, finding.as_ref(), has_python) {
                tally.disagreements.push(format!(
                    "iteration {n}, guard metric_integrity: recorded {}; re-run {}",
                    described_record(r.metric),
                    described_record(finding.as_ref())
                ));
            }
            if r.allowed != allowed.as_ref() {
                tally.disagreements.push(format!(
                    "iteration {n}, guard metric_integrity's allowances: recorded {}; re-run {}",
                    described_allowed(r.allowed),
                    described_allowed(allowed.as_ref())
                ));
            }
        }
        // Tampering rules.
        let finding = analysis_guards::tampering(*n, &step, &rules, limits);
        bytes.failure()?;
        tally.guards += 1;
        if r.tampering != finding.as_ref() {
            tally.disagreements.push(format!(
                "iteration {n}, guard tampering: recorded {}; re-run {}",
                described_record(r.tampering),
                described_record(finding.as_ref())
            ));
        }
        // Awareness (the snapshot's record).
        let observed = analysis_guards::awareness(&step, &api_allowances, limits);
        bytes.failure()?;
        tally.guards += 1;
        let recorded_awareness = r.awareness.unwrap_or_default();
        if recorded_awareness != observed.as_slice() {
            tally.disagreements.push(format!(
                "iteration {n}, guard awareness: recorded {}; re-run {}",
                described(recorded_awareness),
                described(&observed)
            ));
        }
    }
    Ok(Ok(tally))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::halt::HaltReason;

    fn record(findings: Vec<FindingRecord>) -> GuardRecord {
        GuardRecord {
            iteration: 1,
            guard: "metric_integrity".into(),
            stage: "after_agent".into(),
            halt_reason: HaltReason::MetricIntegrityViolation,
            detail: format!(
                "the agent's change weakens what the check measures ({} findings against t0)",
                findings.len()
            ),
            findings,
        }
    }

    fn findings(n: usize, tail: &str) -> Vec<FindingRecord> {
        let mut out: Vec<FindingRecord> = (0..n)
            .map(|i| FindingRecord {
                path: Some(format!("t{i}.py")),
                what: "assertions fell".into(),
            })
            .collect();
        out.push(FindingRecord {
            path: None,
            what: tail.into(),
        });
        out
    }

    #[test]
    fn a_record_cut_at_the_bound_agrees_up_to_the_cut_when_unrecorded_shadowing_may_make_the_rest()
    {
        let recorded = record(findings(
            analysis_guards::MAX_FINDINGS,
            "3 more findings not recorded",
        ));
        let replayed = record(findings(
            analysis_guards::MAX_FINDINGS,
            "1 more findings not recorded",
        ));
        assert!(metric_agrees(Some(&recorded), Some(&replayed), true));
        assert!(
            !metric_agrees(Some(&recorded), Some(&replayed), false),
            "without shadowing the rest is the re-run's exactly"
        );
        // The unrecorded rest all shadowing: the re-run, knowing none of those modules, is not cut.
        let mut uncut = findings(analysis_guards::MAX_FINDINGS, "");
        uncut.pop();
        assert!(metric_agrees(Some(&recorded), Some(&record(uncut)), true));
    }

    #[test]
    fn a_record_cut_at_the_bound_disagrees_when_a_finding_before_the_cut_differs() {
        let recorded = record(findings(
            analysis_guards::MAX_FINDINGS,
            "3 more findings not recorded",
        ));
        let mut other = findings(
            analysis_guards::MAX_FINDINGS,
            "3 more findings not recorded",
        );
        other[7].what = "assertions rose".into();
        assert!(!metric_agrees(Some(&recorded), Some(&record(other)), true));
    }

    #[test]
    fn a_recorded_finding_the_re_run_does_not_make_disagrees_whatever_the_shadowing() {
        let recorded = record(findings(1, "assertions in test code fell from A0 = 3 to 2"));
        assert!(!metric_agrees(Some(&recorded), None, true));
        assert!(!metric_agrees(None, Some(&recorded), false));
    }
}
