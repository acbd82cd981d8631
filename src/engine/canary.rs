//! The adequacy canary on the loop's final green iteration (issue 14 item 5; docs/oracle-trust.md,
//! "Adequacy"): a check that stays green whatever the code does is useless, so before the loop
//! declares `success_condition_met` it mutates the agent's change and runs the check on each
//! mutant, each in its own throwaway copy (the check's layers plus one layer holding the mutated
//! file) in its own exec zone, as many at a time as there are cores. If no mutant turns the check
//! red the run halts `check_inadequate` instead (a `guard` event from the `adequacy` guard).
//! Everything goes into one `adequacy` event: seed, counts, score, every mutant's result.
//! With a declared coverage report (`--coverage`) the coverage-delta tier runs too
//! (`super::coverage_guard::changed_line_tier`): a changed line the green check never executed
//! halts `check_inadequate` before the mutants' verdict is looked at.
//!
//! The mutants are `crate::mutation`'s (pure); this module only materialises and runs them.
//! With `mutate_cmd` (an operator's mutator, `crate::mutation::external`) the mutants are the
//! ones it lists, on the files the agent changed: it runs once in an exec zone on the green
//! tree's throwaway layers, and a mutator that fails or prints no valid list halts
//! `execution_failure` (the canary cannot conclude; nothing is said against the check). A
//! mutator that lists no mutant on the agent's change is no verdict either: the built-in
//! operators judge the change instead (`tier` `mutation`, `external_exit` recorded), so an empty
//! list never lets a change with lines to mutate through unmutated.

use super::analysis_guards::ChangedBytes;
use super::check::{run_check, Artifacts, ReportSource};
use super::commands::RoleCommand;
use super::detached::RunWorkspace;
use super::lifecycle::ActiveRun;
use super::sink::{LoopEvent, Phase};
use super::zone_setup::zone_setup;
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::mutation::{
    self, verdict::score, Adequacy, ChangedSource, Mutant, MutantOutcome, MutantResult,
};
use crate::receipt::events::{AdequacyRecord, Event, GuardRecord};
use crate::receipt::store::ARTIFACTS;
use crate::rules::decide::Step;
use crate::rules::verdict::Verdict;
use crate::testreport::paths::ReportPatterns;
use crate::workspace::Snapshot;
use crate::zones::{open_zone, Ending, Role};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// When the loop runs the canary (`adequacy` in loop.toml).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdequacyMode {
    /// On the iteration whose check went green, before success is declared.
    Final,
    /// Never (`adequacy = "off"`; what a receipt without the key pinned, and an in-place run).
    #[default]
    Off,
}

/// The canary's settings (loop.toml: `adequacy`, `mutants`, `mutate_cmd`; the coverage-delta tier
/// takes its report from `coverage`, `super::coverage_guard`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdequacyPins {
    #[serde(default)]
    pub mode: AdequacyMode,
    /// How many mutants to sample (default [`mutation::DEFAULT_MUTANTS`]).
    #[serde(default)]
    pub mutants: Option<u64>,
    /// The operator's mutator: its mutants replace the built-in operators' (docs/oracle-trust.md,
    /// "An operator's mutator").
    #[serde(default)]
    pub mutate_cmd: Option<String>,
}

/// The canary's settings as loop.toml gives them, before the workspace is known: without an
/// `adequacy` key a detached run gets the canary by default, on a small sample
/// ([`mutation::DEFAULT_SMALL_MUTANTS`] unless `mutants` says otherwise); an in-place run cannot
/// (it has no t0 to mutate against) and gets none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdequacyInput {
    pub mode: Option<AdequacyMode>,
    pub mutants: Option<u64>,
    pub mutate_cmd: Option<String>,
}

impl AdequacyInput {
    /// The pinned settings for a run on a detached workspace or not, validated.
    pub fn resolve(self, detached: bool) -> Result<AdequacyPins, Failure> {
        let pins = match self.mode {
            Some(mode) => AdequacyPins {
                mode,
                mutants: self.mutants,
                mutate_cmd: self.mutate_cmd,
            },
            None if detached => AdequacyPins {
                mode: AdequacyMode::Final,
                mutants: Some(
                    self.mutants
                        .unwrap_or(mutation::DEFAULT_SMALL_MUTANTS as u64),
                ),
                mutate_cmd: self.mutate_cmd,
            },
            None => AdequacyPins {
                mode: AdequacyMode::Off,
                mutants: self.mutants,
                mutate_cmd: self.mutate_cmd,
            },
        };
        pins.validate(detached)?;
        Ok(pins)
    }
}

/// Most mutants one canary may run.
pub const MAX_MUTANTS: u64 = 1000;

impl AdequacyPins {
    /// Refuse settings the canary cannot honour, before anything is written.
    pub fn validate(&self, detached: bool) -> Result<(), Failure> {
        if let Some(k) = self.mutants {
            if k == 0 || k > MAX_MUTANTS {
                return Err(Failure::usage(format!(
                    "mutants must be in 1..={MAX_MUTANTS}, got {k}"
                )));
            }
        }
        if self
            .mutate_cmd
            .as_deref()
            .is_some_and(|c| c.trim().is_empty())
        {
            return Err(Failure::usage("mutate_cmd is empty"));
        }
        if self.mode == AdequacyMode::Final && !detached {
            return Err(Failure::usage("adequacy = \"final\" needs a detached workspace: the canary mutates the change against t0")
                .with_hint("run in a git repository under native isolation, or set adequacy = \"off\""));
        }
        Ok(())
    }

    pub fn sample_size(&self) -> usize {
        self.mutants
            .map_or(mutation::DEFAULT_MUTANTS, |k| k as usize)
    }
}

/// The canary's seed: the run's sampling seed when one is pinned, else derived from the run id
/// (so a run's mutants are fixed by its receipt either way).
pub fn canary_seed(pinned: Option<u64>, run_id: &str) -> u64 {
    pinned.unwrap_or_else(|| {
        let digest = Sha256::digest(run_id.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    })
}

/// Write `bytes` as `path` (a `/`-separated tree path) beneath the new directory `layer`.
pub(super) fn write_layer_file(layer: &Path, path: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let parts: Vec<&str> = path.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a tree path: {path:?}"),
        ));
    }
    std::fs::DirBuilder::new().mode(0o755).create(layer)?;
    let mut dir = layer.to_path_buf();
    for part in &parts[..parts.len() - 1] {
        dir.push(part);
        std::fs::DirBuilder::new().mode(0o755).create(&dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(parts[parts.len() - 1]))?;
    file.write_all(bytes)
}

/// How the check's run on a mutant answered.
fn outcome_of(
    checked: CmdResult<Result<super::check::CheckOutcome, String>>,
) -> (MutantOutcome, Option<i32>, u64, Option<String>) {
    match checked {
        Ok(Ok(outcome)) => {
            let exit = outcome.run.ending.exit_code();
            let ms = outcome.run.duration.as_millis() as u64;
            match (outcome.verdict(), outcome.ending()) {
                (Verdict::Pass, _) => (MutantOutcome::Survived, exit, ms, None),
                (Verdict::Fail | Verdict::Disagrees, _) => (MutantOutcome::Killed, exit, ms, None),
                // A mutant that makes the check hang is caught by its timeout.
                (Verdict::CouldNotRun, Ending::TimedOut { .. }) => (
                    MutantOutcome::Killed,
                    exit,
                    ms,
                    Some("the check timed out".into()),
                ),
                (Verdict::CouldNotRun, ending) => (
                    MutantOutcome::NotRun,
                    exit,
                    ms,
                    Some(format!("the check could not run: {ending:?}")),
                ),
            }
        }
        Ok(Err(detail)) => (MutantOutcome::NotRun, None, 0, Some(detail)),
        Err(failure) => (MutantOutcome::NotRun, None, 0, Some(failure.message)),
    }
}

/// What the mutant workers share.
struct Canary<'r> {
    ws: &'r RunWorkspace,
    snapshot: &'r Snapshot,
    cfg: &'r super::config::LoopConfig,
    state_dir: &'r Path,
    run_id: &'r str,
    iteration: u64,
    env: &'r [(String, String)],
    artifacts: &'r crate::safefs::SafeDir,
    patterns: &'r ReportPatterns,
}

impl Canary<'_> {
    /// Run the check on `mutant` (whose file's end version is `original`) in `zone`.
    fn run_one(
        &self,
        zone: &mut dyn crate::zones::Zone,
        index: usize,
        mutant: &Mutant,
        original: &[u8],
    ) -> MutantResult {
        let name = format!("{:04}-mutant-{index:02}", self.iteration);
        let Some(bytes) = mutant.apply(original) else {
            return MutantResult::of(
                mutant,
                MutantOutcome::NotRun,
                None,
                0,
                Some("the mutant's range is outside its file".into()),
            );
        };
        let (overlay, scratch) = match self.ws.mutant_overlay(
            &name,
            self.snapshot,
            &|p| self.patterns.matches(p),
            &mutant.path,
            &bytes,
        ) {
            Ok(layers) => layers,
            Err(f) => {
                return MutantResult::of(mutant, MutantOutcome::NotRun, None, 0, Some(f.message))
            }
        };
        let command = RoleCommand {
            role: Role::Check,
            run_id: self.run_id,
            iteration: self.iteration,
            overlay: Some(overlay),
            credential: None,
        };
        let mut cmd = command.zone_command(self.cfg, self.env);
        // t0's protected paths read-only, as in every run of the check (docs/guards.md).
        cmd.read_only_beneath = self.ws.check_read_only();
        let artifacts = Artifacts {
            dir: self.artifacts,
            rel: ARTIFACTS,
            stem: name,
        };
        let report = (!self.patterns.is_empty()).then_some(ReportSource {
            dir: scratch.writes(),
            patterns: self.patterns,
        });
        let (outcome, exit, ms, detail) = outcome_of(run_check(zone, &cmd, artifacts, report));
        drop(scratch);
        MutantResult::of(mutant, outcome, exit, ms, detail)
    }

    /// Run the operator's mutator once on the green tree's layers, in an exec zone, and read the
    /// list it printed. `Err((exit, why))`: it failed, or its list is refused.
    fn list_external(
        &self,
        mutate_cmd: &str,
    ) -> Result<(Option<i32>, Vec<Mutant>), (Option<i32>, String)> {
        use crate::mutation::external::{self, MAX_LIST_BYTES, MUTANTS_FILE};
        let name = format!("{:04}-mutator", self.iteration);
        let (overlay, scratch) = self
            .ws
            .named_check_overlay(&name, self.snapshot, &|p| self.patterns.matches(p))
            .map_err(|f| (None, f.message))?;
        let command = RoleCommand {
            role: Role::Check,
            run_id: self.run_id,
            iteration: self.iteration,
            overlay: Some(overlay),
            credential: None,
        };
        let mut cmd = command.zone_command(self.cfg, self.env);
        cmd.command_line = external::wrapped(mutate_cmd);
        let mut zone = zone_setup(self.cfg, self.state_dir)
            .and_then(|z| open_zone(&z).map_err(Failure::from))
            .map_err(|f| (None, format!("no exec zone: {}", f.message)))?;
        let artifacts = Artifacts {
            dir: self.artifacts,
            rel: ARTIFACTS,
            stem: name,
        };
        let ran = match run_check(zone.as_mut(), &cmd, artifacts, None) {
            Ok(Ok(outcome)) => outcome.run.ending,
            Ok(Err(detail)) => return Err((None, format!("could not run: {detail}"))),
            Err(f) => return Err((None, format!("could not run: {}", f.message))),
        };
        let exit = ran.exit_code();
        match exit {
            Some(0) => {}
            Some(code) => return Err((exit, format!("failed (exit {code})"))),
            None => return Err((exit, format!("was killed or timed out ({ran:?})"))),
        }
        let listed = external::list_from(scratch.writes().read(MUTANTS_FILE, MAX_LIST_BYTES));
        drop(scratch);
        listed
            .map(|listed| (exit, listed))
            .map_err(|why| (exit, why))
    }

    /// Every mutant's result, `jobs` exec zones at a time, in the mutants' order.
    fn run_all(
        &self,
        mutants: &[(Mutant, mutation::Stratum, &[u8])],
        jobs: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Vec<MutantResult> {
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<Option<MutantResult>>> = Mutex::new(vec![None; mutants.len()]);
        let total = mutants.len() as u64;
        if total > 0 {
            progress(0, total);
        }
        std::thread::scope(|scope| {
            // Each worker says when it finished a mutant; this thread counts them for `progress`.
            let (finished, finishes) = std::sync::mpsc::channel::<()>();
            let (next, results) = (&next, &results);
            for _ in 0..jobs.clamp(1, mutants.len().max(1)) {
                let finished = finished.clone();
                scope.spawn(move || {
                    let mut zone = zone_setup(self.cfg, self.state_dir)
                        .and_then(|z| open_zone(&z).map_err(Failure::from));
                    loop {
                        // An operator interrupt ends the sample: the caller records nothing.
                        if crate::interrupt::pending().is_some() {
                            return;
                        }
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        let Some((mutant, stratum, original)) = mutants.get(i) else {
                            return;
                        };
                        let result = match zone.as_mut() {
                            Ok(zone) => self.run_one(zone.as_mut(), i, mutant, original),
                            Err(f) => MutantResult::of(
                                mutant,
                                MutantOutcome::NotRun,
                                None,
                                0,
                                Some(format!("no exec zone: {}", f.message)),
                            ),
                        }
                        .in_stratum(*stratum);
                        if let Ok(mut slots) = results.lock() {
                            slots[i] = Some(result);
                        }
                        let _ = finished.send(());
                    }
                });
            }
            drop(finished);
            let mut done = 0;
            for () in finishes {
                done += 1;
                progress(done, total);
            }
        });
        results
            .into_inner()
            .unwrap_or_default()
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Most files of the green tree scanned for the tests failing at t0 and the functions they call
/// (test files first); a larger tree is scanned this far and no further.
const MAX_SCANNED_FILES: usize = 4000;

/// The production functions (`path: name`) the tests failing at t0 call, and per file of them its
/// end version and the lines of those functions: the `t0_failure` stratum's sources. Files are
/// the green tree's (test files are protected, so their bodies are t0's), read bounded without
/// following a link; protected files are never mutated.
fn t0_failure_sources(
    files: &super::analysis_guards::TreeFiles,
    snapshot: &Snapshot,
    protected: &crate::workspace::ProtectedPaths,
    failing: &[String],
    limits: crate::analysis::Limits,
) -> (
    Vec<String>,
    Vec<(String, Vec<u8>, std::collections::BTreeSet<u32>)>,
) {
    use crate::analysis::syntax::{parse, Parse};
    use crate::analysis::Language;
    use crate::mutation::targets::{lines_by_file, test_names, Scan};
    let tests = test_names(failing);
    if tests.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let mut paths: Vec<(bool, &str)> = snapshot
        .manifest
        .iter()
        .filter(|(_, e)| {
            matches!(
                e.kind,
                crate::workspace::manifest::EntryKind::File
                    | crate::workspace::manifest::EntryKind::Executable
            )
        })
        .filter_map(|(p, _)| std::str::from_utf8(p).ok())
        .filter_map(|p| {
            Language::of_path(p).map(|l| (!crate::analysis::test_code::is_test_file(p, l), p))
        })
        .collect();
    paths.sort();
    let mut scan = Scan::default();
    for (_, path) in paths.into_iter().take(MAX_SCANNED_FILES) {
        let Some(bytes) = files.end(snapshot, path.as_bytes(), limits) else {
            continue;
        };
        if let Ok(Parse::Parsed(parsed)) = parse(path, &bytes, limits) {
            scan.add(&parsed, &tests);
        }
    }
    let targets: Vec<_> = scan
        .targets()
        .into_iter()
        .filter(|d| !protected.is_protected(d.path.as_bytes()))
        .collect();
    let names = targets
        .iter()
        .map(|d| crate::analysis::syntax::evidence_text(&format!("{}: {}", d.path, d.name)))
        .collect();
    let sources = lines_by_file(&targets)
        .into_iter()
        .filter_map(|(path, lines)| {
            files
                .end(snapshot, path.as_bytes(), limits)
                .map(|bytes| (path, bytes, lines))
        })
        .collect();
    (names, sources)
}

/// The number of exec zones run at once: the cores.
fn jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl ActiveRun<'_> {
    /// Run the canary on iteration `n`'s accepted green step when loop.toml asks for it, and
    /// record it; an inadequate check (or one the canary could not run on any mutant) is also a
    /// `guard` event, which `decide` turns into the halt. `coverage`: the final green check's
    /// declared coverage report (`--coverage`), for the coverage-delta tier. The guard is
    /// appended before the record, so the receipt decides the halt by itself.
    /// `Some(Step::Interrupted)`: the operator stopped it; nothing is recorded (no verdict on a
    /// partial sample), so the resumed run runs the canary again.
    pub(super) fn adequacy_canary(
        &mut self,
        n: u64,
        coverage: Option<&crate::mutation::coverage::LineHits>,
    ) -> CmdResult<Option<Step>> {
        self.beat(super::sink::Phase::Canary, n)?;
        if self.cfg.adequacy.mode == AdequacyMode::Off {
            return Ok(None);
        }
        let Some(ws) = self.workspace.as_ref() else {
            return Ok(None);
        };
        let Some(snapshot) = ws.last_accepted().cloned() else {
            return Ok(None);
        };
        let started = std::time::Instant::now();
        let seed = canary_seed(self.cfg.sampling.seed, &self.state.run_id);
        let patterns = ReportPatterns::new(&self.cfg.report_patterns())
            .map_err(|e| Failure::invalid_input(e.to_string()))?;
        let limits = crate::analysis::Limits::default();
        let changed =
            ChangedBytes::read(&ws.tree_files(), &snapshot, ws.baseline_manifest()?, limits);
        let sources: Vec<ChangedSource<'_>> = changed
            .files
            .iter()
            .filter(|(path, _, _)| {
                !ws.protected().is_protected(path.as_bytes())
                    && !ws.protected().is_exempt(path.as_bytes())
            })
            .filter_map(|(path, t0, end)| {
                end.as_deref().map(|end| ChangedSource {
                    path,
                    t0: t0.as_deref(),
                    end,
                })
            })
            .collect();
        let coverage = match (&self.cfg.coverage.report, coverage) {
            (Some(report), Some(hits)) => Some(super::coverage_guard::changed_line_tier(
                report,
                &sources,
                hits,
                super::detached::WORKSPACE_TARGET,
                &snapshot.manifest,
            )),
            _ => None,
        };
        let canary = Canary {
            ws,
            snapshot: &snapshot,
            cfg: &self.cfg,
            state_dir: self.statedir.path(),
            run_id: &self.state.run_id,
            iteration: n,
            env: &self.env,
            artifacts: &self.artifacts,
            patterns: &patterns,
        };
        // The second stratum: the production functions the tests failing at t0 call.
        let t0_failing = self
            .history
            .check_baseline
            .as_ref()
            .and_then(|b| b.check.failing_set.clone())
            .unwrap_or_default();
        let (t0_functions, t0_sources) = t0_failure_sources(
            &ws.tree_files(),
            &snapshot,
            ws.protected(),
            &t0_failing,
            limits,
        );
        let t0_lines: Vec<(&str, &[u8], &std::collections::BTreeSet<u32>)> = t0_sources
            .iter()
            .map(|(p, b, l)| (p.as_str(), b.as_slice(), l))
            .collect();
        let t0_mutants = mutation::generate_on_lines(&t0_lines, limits)
            .map_err(|e| Failure::internal(format!("generating mutants: {e}")))?;
        let built_in = || {
            mutation::generate(&sources, false, limits)
                .map_err(|e| Failure::internal(format!("generating mutants: {e}")))
        };
        // Whether the agent changed any file it may change beyond whitespace, in any language.
        let substantive_change = self.cfg.adequacy.mutate_cmd.is_some()
            && ChangedBytes::any_substantive(
                &ws.tree_files(),
                &snapshot,
                ws.baseline_manifest()?,
                limits,
                |p| !ws.protected().is_protected(p) && !ws.protected().is_exempt(p),
            );
        let (tier, generated, external_exit) = match self.cfg.adequacy.mutate_cmd.as_deref() {
            None => ("mutation", built_in()?, None),
            Some(cmd) => match canary.list_external(cmd) {
                // The canary judges the agent's change: mutants of files it did not change are left out.
                Ok((exit, listed)) => match listed
                    .into_iter()
                    .filter(|m| sources.iter().any(|s| s.path == m.path))
                    .collect::<Vec<_>>()
                {
                    // A mutator that lists nothing on a change the built-in operators find
                    // something to mutate in has not judged it (steered, or blind to the
                    // language): the built-in operators do, the mutator's exit still recorded.
                    listed if listed.is_empty() => match built_in()? {
                        // Nor do the built-in operators (a language they cannot mutate, why the
                        // operator gave a mutator): nothing judged the change, so no verdict.
                        none if none.is_empty() && t0_mutants.is_empty() && substantive_change => {
                            let why = "listed no mutant of the agent's change, and the built-in operators generate none in it either (a language they do not mutate): the canary judged nothing, so no verdict";
                            return self
                                .mutator_refused(n, seed, exit, why, coverage, started)
                                .map(|()| None);
                        }
                        generated => ("mutation", generated, exit),
                    },
                    listed => ("external", listed, exit),
                },
                Err(_) if crate::interrupt::pending().is_some() => {
                    return Ok(crate::interrupt::pending().map(Step::Interrupted))
                }
                Err((exit, why)) => {
                    return self
                        .mutator_refused(n, seed, exit, &why, coverage, started)
                        .map(|()| None)
                }
            },
        };
        // The operator's mutator judges the change alone.
        let t0_mutants = if tier == "external" {
            Vec::new()
        } else {
            t0_mutants
        };
        let generated_count = (generated.len() + t0_mutants.len()) as u64;
        let chosen = mutation::sample::stratified(
            generated,
            t0_mutants,
            self.cfg.adequacy.sample_size(),
            seed,
        );
        let original = |path: &str| -> Option<&[u8]> {
            sources
                .iter()
                .find(|s| s.path == path)
                .map(|s| s.end)
                .or_else(|| {
                    t0_sources
                        .iter()
                        .find(|(p, _, _)| p == path)
                        .map(|(_, b, _)| b.as_slice())
                })
        };
        let with_sources: Vec<(Mutant, mutation::Stratum, &[u8])> = chosen
            .into_iter()
            .filter_map(|(m, stratum)| original(&m.path).map(|b| (m, stratum, b)))
            .collect();
        let sink = &mut *self.sink;
        let results = canary.run_all(&with_sources, jobs(), &mut |done, total| {
            sink.event(&LoopEvent::Progress {
                phase: Phase::Canary,
                iteration: n,
                done,
                total,
            })
        });
        if let Some(signal) = crate::interrupt::pending() {
            return Ok(Some(Step::Interrupted(signal)));
        }
        let s = score(&results);
        let record = AdequacyRecord {
            iteration: n,
            tier: tier.into(),
            seed,
            generated: generated_count,
            sampled: results.len() as u64,
            killed: s.killed,
            survived: s.survived,
            not_run: s.not_run,
            score: s.score,
            verdict: s.verdict.as_str().into(),
            mutants: results,
            external_exit,
            coverage,
            t0_failure_functions: if tier == "external" {
                Vec::new()
            } else {
                t0_functions
            },
            duration_ms: started.elapsed().as_millis() as u64,
        };
        // Changed lines the check never ran decide first: no mutant there could have been killed.
        let guard = crate::rules::canary::canary_guard(&record, s.verdict);
        if let Some(guard) = guard {
            self.append(Event::Guard(guard))?;
        }
        self.append(Event::Adequacy(record))?;
        Ok(None)
    }
}

impl ActiveRun<'_> {
    /// The operator's mutator failed or printed no valid list: the canary cannot conclude. An
    /// `adequacy` event (`tier` `external`, `verdict` `not_run`, the mutator's exit) and a `guard`
    /// halting `execution_failure` with the reason; uncovered changed lines still decide first.
    fn mutator_refused(
        &mut self,
        n: u64,
        seed: u64,
        exit: Option<i32>,
        why: &str,
        coverage: Option<crate::receipt::events::CoverageRecord>,
        started: std::time::Instant,
    ) -> CmdResult<()> {
        let record = AdequacyRecord {
            iteration: n,
            tier: "external".into(),
            seed,
            generated: 0,
            sampled: 0,
            killed: 0,
            survived: 0,
            not_run: 0,
            score: None,
            verdict: Adequacy::NotRun.as_str().into(),
            mutants: Vec::new(),
            external_exit: exit,
            coverage,
            t0_failure_functions: Vec::new(),
            duration_ms: started.elapsed().as_millis() as u64,
        };
        let refused = GuardRecord {
            iteration: n,
            guard: "adequacy".into(),
            stage: "after_check".into(),
            halt_reason: HaltReason::ExecutionFailure,
            detail: format!("the mutator (mutate_cmd) {why}"),
            findings: Vec::new(),
        };
        let guard = record
            .coverage
            .as_ref()
            .and_then(|c| crate::rules::canary::uncovered_guard(n, c))
            .unwrap_or(refused);
        self.append(Event::Guard(guard))?;
        self.append(Event::Adequacy(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_sampling_seed_is_the_canary_seed() {
        assert_eq!(canary_seed(Some(7), "run-a"), 7);
    }

    #[test]
    fn without_a_pinned_seed_the_run_id_fixes_the_seed() {
        assert_eq!(canary_seed(None, "run-a"), canary_seed(None, "run-a"));
        assert_ne!(canary_seed(None, "run-a"), canary_seed(None, "run-b"));
    }

    #[test]
    fn adequacy_final_needs_a_detached_workspace() {
        let pins = AdequacyPins {
            mode: AdequacyMode::Final,
            ..AdequacyPins::default()
        };
        assert!(pins.validate(true).is_ok());
        assert!(pins
            .validate(false)
            .unwrap_err()
            .message
            .contains("needs a detached workspace"));
    }

    #[test]
    fn without_an_adequacy_key_a_detached_run_gets_a_small_canary_and_in_place_none() {
        let detached = AdequacyInput::default().resolve(true).unwrap();
        assert_eq!(
            (detached.mode, detached.mutants),
            (
                AdequacyMode::Final,
                Some(mutation::DEFAULT_SMALL_MUTANTS as u64)
            )
        );
        assert_eq!(
            AdequacyInput::default().resolve(false).unwrap().mode,
            AdequacyMode::Off
        );
        let asked = AdequacyInput {
            mode: Some(AdequacyMode::Off),
            ..AdequacyInput::default()
        }
        .resolve(true)
        .unwrap();
        assert_eq!(asked.mode, AdequacyMode::Off);
        let explicit = AdequacyInput {
            mode: Some(AdequacyMode::Final),
            ..AdequacyInput::default()
        }
        .resolve(false)
        .unwrap_err();
        assert!(
            explicit.message.contains("needs a detached workspace"),
            "{}",
            explicit.message
        );
    }

    #[test]
    fn a_layer_file_path_with_a_parent_component_is_refused() {
        let dir = std::env::temp_dir().join(format!("loopexec-canary-test-{}", std::process::id()));
        let err = write_layer_file(&dir, "a/../b.py", b"x").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(!dir.exists());
    }
}
