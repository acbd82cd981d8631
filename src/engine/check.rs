//! The one check runner: runs the check command in its zone and reads the evidence that one run
//! left (the declared reports in the directory of its writes, libtest's output in its captured
//! stdout, the runners' summary lines), once its process tree is dead. The loop and `replay` run
//! the check through it; its result is one typed value, [`CheckOutcome`], that the verdict, the
//! guards and `decide` see. Parsing and the agreement of the evidence with the exit code are
//! `crate::testreport`'s; this module only gathers the inputs and shapes the receipt's record.

use super::commands::run_in_zone;
use crate::ending::Ending;
use crate::error::Failure;
use crate::receipt::events::{CheckEvidence, CheckResult, DisagreementRecord, ReportRecord};
use crate::rules::verdict::Verdict;
use crate::safefs::SafeDir;
use crate::testreport::agreement::{self, Agreement, CapturedOutput};
use crate::testreport::excerpt::MAX_EXCERPTS;
use crate::testreport::paths::{self, DeclaredReport, ReportPatterns};
use crate::testreport::{shown, Excerpt, ParsedReport};
use crate::zones::{Zone, ZoneCommand, ZoneRun};
use std::collections::{BTreeMap, BTreeSet};

/// Longest disagreement detail recorded (characters); the ids in it are escaped.
const MAX_DETAIL_CHARS: usize = 1000;
/// Most characters of a report's path (escaped) or pattern a `check_result` records (the rest cut,
/// marked `...`): a path the check's glob matched is the check's to choose, up to PATH_MAX.
pub const MAX_REPORT_PATH_CHARS: usize = 512;

/// The tests one check run showed, over every source that parsed (the declared reports and
/// libtest's output): sorted, de-duplicated ids, and how many entries bear an id that some
/// source shows more than once (the largest count any one source shows: two sources are two
/// views of one run, not twice the tests).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TestSets {
    pub collected: BTreeSet<String>,
    pub failing: BTreeSet<String>,
    pub skipped: BTreeSet<String>,
    /// Ids of `collected` shown more than once, with their count (absent: once).
    pub collected_repeats: BTreeMap<String, u64>,
    /// Ids of `skipped` shown more than once, with their count (absent: once).
    pub skipped_repeats: BTreeMap<String, u64>,
    /// What failing tests printed, by id: the first source's excerpt of each, at most
    /// [`MAX_EXCERPTS`] over every source.
    pub excerpts: BTreeMap<String, Excerpt>,
}

impl TestSets {
    /// `set` as the receipt lists it: sorted, an id repeated once per entry bearing it.
    pub fn listed(set: &BTreeSet<String>, repeats: &BTreeMap<String, u64>) -> Vec<String> {
        let mut out = Vec::with_capacity(set.len());
        for id in set {
            let n = repeats.get(id).copied().unwrap_or(1).max(1);
            out.extend(std::iter::repeat_n(id, n as usize).cloned());
        }
        out
    }

    /// How many entries [`TestSets::listed`] lists.
    pub fn entries(set: &BTreeSet<String>, repeats: &BTreeMap<String, u64>) -> u64 {
        set.len() as u64
            + repeats
                .iter()
                .filter(|(id, _)| set.contains(*id))
                .map(|(_, n)| n.saturating_sub(1))
                .sum::<u64>()
    }

    /// A receipt's list read back as a set and its repeats (the inverse of [`TestSets::listed`];
    /// a list without repeats, as every receipt before repeats were recorded has, reads as
    /// each id once).
    pub fn unlisted(list: &[String]) -> (BTreeSet<String>, BTreeMap<String, u64>) {
        let mut set = BTreeSet::new();
        let mut repeats = BTreeMap::new();
        for id in list {
            if !set.insert(id.clone()) {
                *repeats.entry(id.clone()).or_insert(1) += 1;
            }
        }
        (set, repeats)
    }

    /// The sets with one more source's (its ids joined, its repeats as the larger count).
    pub fn add(&mut self, report: &ParsedReport) {
        self.collected.extend(report.collected.iter().cloned());
        self.failing.extend(report.failing.iter().cloned());
        self.skipped.extend(report.skipped.iter().cloned());
        for (mine, theirs) in [
            (&mut self.collected_repeats, &report.collected_repeats),
            (&mut self.skipped_repeats, &report.skipped_repeats),
        ] {
            for (id, n) in theirs {
                let count = mine.entry(id.clone()).or_insert(*n);
                *count = (*count).max(*n);
            }
        }
        for (id, excerpt) in &report.excerpts {
            if self.excerpts.len() < MAX_EXCERPTS && !self.excerpts.contains_key(id) {
                self.excerpts.insert(id.clone(), excerpt.clone());
            }
        }
    }
}

/// What the check's evidence said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportOutcome {
    /// The check did not exit (timed out, killed, never started): nothing is read.
    NotRead,
    /// The declared reports as read, the sets over every source that parsed (none: no source
    /// named any test), and the agreement of the evidence with the exit code.
    Read {
        reports: Vec<DeclaredReport>,
        sets: Option<TestSets>,
        agreement: Agreement,
    },
    /// The report patterns could not be resolved (a walk past its bounds).
    Unresolvable(String),
}

impl ReportOutcome {
    pub fn sets(&self) -> Option<&TestSets> {
        match self {
            ReportOutcome::Read { sets, .. } => sets.as_ref(),
            _ => None,
        }
    }

    /// The first reason a declared report could not be used.
    pub fn error(&self) -> Option<String> {
        match self {
            ReportOutcome::Read { reports, .. } => reports
                .iter()
                .find_map(|r| r.result.as_ref().err())
                .map(|e| e.to_string()),
            ReportOutcome::Unresolvable(e) => Some(e.clone()),
            ReportOutcome::NotRead => None,
        }
    }
}

/// Where the check's evidence is read from: the directory holding the check's writes (its
/// scratch upper layer, or the workdir in place) and the run's report patterns.
pub struct ReportSource<'a> {
    pub dir: &'a SafeDir,
    pub patterns: &'a ReportPatterns,
}

/// Everything one check run observed.
#[derive(Debug, Clone)]
pub struct CheckOutcome {
    pub run: ZoneRun,
    pub report: ReportOutcome,
    /// The declared coverage report as read (`super::coverage_guard`; none: none declared, or
    /// the check did not exit).
    pub coverage: Option<super::coverage_guard::CoverageRead>,
    /// The check-writes guard's finding (`super::check_writes`): the check wrote to the tree it
    /// tested (none: it did not, or it ran in place).
    pub tree_writes: Option<crate::receipt::events::GuardRecord>,
    /// The artifact the failing tests' excerpts were written to (none: there were none).
    pub excerpts_artifact: Option<crate::receipt::bounded::ArtifactRef>,
    /// The declared score as read after the check (`super::score`; none: none declared, or the
    /// check did not exit).
    pub score: Option<crate::receipt::events::ScoreRecord>,
    /// What the check's output showed about the reach of its evidence (the runners whose
    /// summaries it printed, cargo stopping at its first failing target; empty when it did not exit).
    pub sight: crate::testreport::sight::OutputSight,
    /// The sentinel run's proof files as read back from its scratch layer (`super::sentinel`;
    /// empty for any other run), in the plan's order; `None`: absent or unreadable.
    pub sentinel_proofs: Vec<Option<Vec<u8>>>,
}

impl CheckOutcome {
    pub fn ending(&self) -> &Ending {
        &self.run.ending
    }

    /// The verdict of the exit code and the evidence (see [`Verdict::of_check`]).
    pub fn verdict(&self) -> Verdict {
        let disagrees = matches!(
            &self.report,
            ReportOutcome::Read {
                agreement: Agreement::Disagree { .. },
                ..
            }
        ) || matches!(&self.report, ReportOutcome::Unresolvable(_));
        Verdict::of_evidence(&self.run.ending, disagrees)
    }

    /// The `check_result` event of iteration `iteration`.
    pub fn record(&self, iteration: u64) -> CheckResult {
        let sets = self.report.sets();
        let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>();
        CheckResult {
            iteration,
            ending: self.run.ending.clone(),
            check_exit: self.run.ending.exit_code(),
            duration_ms: self.run.duration.as_millis() as u64,
            stdout: self.run.output.stdout.clone(),
            stderr: self.run.output.stderr.clone(),
            failing_set: sets.map(|s| list(&s.failing)),
            failing_count: sets.map(|s| s.failing.len() as u64),
            collected_set: sets.map(|s| TestSets::listed(&s.collected, &s.collected_repeats)),
            collected_count: sets.map(|s| TestSets::entries(&s.collected, &s.collected_repeats)),
            skipped_set: sets.map(|s| TestSets::listed(&s.skipped, &s.skipped_repeats)),
            skipped_count: sets.map(|s| TestSets::entries(&s.skipped, &s.skipped_repeats)),
            junit_error: self.report.error(),
            evidence: self.evidence(),
            coverage: self.coverage.as_ref().map(|c| c.record.clone()),
            failure_digests: sets
                .map(|s| super::excerpts::digests(&s.excerpts))
                .filter(|d| !d.is_empty()),
            excerpts_artifact: self.excerpts_artifact.clone(),
            score: self.score.clone(),
            // The baseline records it (`super::baseline`); an iteration's check does not.
            output_sight: None,
            outside_attempts: self.run.usage.outside_attempts.map(|a| {
                crate::receipt::events::OutsideAttemptsRecord {
                    ipv4: a.ipv4,
                    ipv6: a.ipv6,
                }
            }),
            enforcement: self.run.enforcement.clone(),
        }
    }

    /// The evidence as the receipt records it: bounded (counts, escaped details).
    fn evidence(&self) -> Option<CheckEvidence> {
        match &self.report {
            ReportOutcome::NotRead => None,
            ReportOutcome::Unresolvable(detail) => Some(CheckEvidence {
                verdict: "disagree".into(),
                reports: vec![],
                sources: vec![],
                disagreements: vec![DisagreementRecord {
                    kind: "report_unusable".into(),
                    subject: "--report".into(),
                    detail: bounded(detail),
                }],
            }),
            ReportOutcome::Read {
                reports, agreement, ..
            } => {
                let reports = reports
                    .iter()
                    .map(|r| ReportRecord {
                        pattern: cut(&crate::inert::inert(&r.pattern), MAX_REPORT_PATH_CHARS),
                        path: r
                            .path
                            .as_deref()
                            .map(|p| cut(&crate::inert::inert(p), MAX_REPORT_PATH_CHARS)),
                        format: r.result.as_ref().ok().map(|p| p.format.name().to_string()),
                        counts: r.result.as_ref().ok().map(|p| {
                            [
                                p.counts.total,
                                p.counts.passed,
                                p.counts.failed,
                                p.counts.skipped,
                            ]
                        }),
                        error: r.result.as_ref().err().map(|e| bounded(&e.to_string())),
                    })
                    .collect();
                let records = |found: &[agreement::Disagreement]| {
                    found
                        .iter()
                        .map(|d| DisagreementRecord {
                            kind: d.kind().into(),
                            subject: shown(&d.subject()),
                            detail: bounded(&d.to_string()),
                        })
                        .collect()
                };
                // A red run's disagreements are the gaps in its evidence (no failure among them):
                // its sets count as met targets only without any (`crate::rules::verdict::evidence_gaps`).
                let (verdict, sources, disagreements) = match agreement {
                    Agreement::Green { sources } => (
                        "green",
                        sources.iter().map(|s| shown(&s.name)).collect(),
                        vec![],
                    ),
                    Agreement::Red { gaps, .. } => ("red", vec![], records(gaps)),
                    Agreement::Disagree { disagreements } => {
                        ("disagree", vec![], records(disagreements))
                    }
                };
                Some(CheckEvidence {
                    verdict: verdict.into(),
                    reports,
                    sources,
                    disagreements,
                })
            }
        }
    }
}

fn bounded(text: &str) -> String {
    cut(text, MAX_DETAIL_CHARS)
}

fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// Where a check's output artifacts go: a directory, its path relative to the run directory, and
/// the file stem (`NNNN-check`).
pub struct Artifacts<'a> {
    pub dir: &'a SafeDir,
    pub rel: &'a str,
    pub stem: String,
}

impl CheckOutcome {
    /// The check's captured stdout as its artifact in `dir` (the run directory's `rel`) kept it.
    pub fn stdout(&self, dir: &SafeDir, rel: &str) -> Vec<u8> {
        captured(
            &Artifacts {
                dir,
                rel,
                stem: String::new(),
            },
            self.run.output.stdout.artifact.as_deref(),
        )
    }
}

/// The bytes of a captured stream as its artifact kept them (bounded head and tail).
fn captured(artifacts: &Artifacts<'_>, artifact: Option<&str>) -> Vec<u8> {
    let Some(name) = artifact
        .and_then(|a| a.strip_prefix(artifacts.rel))
        .map(|a| a.trim_start_matches('/'))
    else {
        return Vec::new();
    };
    let limit = (crate::capture::HEAD_BYTES + crate::capture::TAIL_BYTES) as u64 + 4096;
    artifacts.dir.read(name, limit).unwrap_or_default()
}

/// Read the evidence of a check that exited with `exit_code`.
fn read_evidence(
    exit_code: Option<i32>,
    run: &ZoneRun,
    artifacts: &Artifacts<'_>,
    source: Option<ReportSource<'_>>,
) -> ReportOutcome {
    let reports = match source {
        None => Vec::new(),
        Some(source) => match paths::collect(source.dir, source.patterns, None) {
            Ok(reports) => reports,
            Err(e) => return ReportOutcome::Unresolvable(e.to_string()),
        },
    };
    let stdout = captured(artifacts, run.output.stdout.artifact.as_deref());
    let stderr = captured(artifacts, run.output.stderr.artifact.as_deref());
    let output = CapturedOutput {
        stdout: &stdout,
        stderr: &stderr,
        truncated: run.output.stdout.truncated || run.output.stderr.truncated,
    };
    let mut sets: Option<TestSets> = None;
    for parsed in reports.iter().filter_map(|r| r.result.as_ref().ok()) {
        sets.get_or_insert_with(TestSets::default).add(parsed);
    }
    if let Some(Ok(libtest)) = agreement::output_report(&output) {
        sets.get_or_insert_with(TestSets::default).add(&libtest);
    }
    let agreement = agreement::agree(exit_code, &reports, &output);
    ReportOutcome::Read {
        reports,
        sets,
        agreement,
    }
}

/// Run the check `cmd` in `zone` and, when it exited, read its evidence: the reports `report`
/// names (none: the run declared no report) and its captured output. The zone returns once the
/// check's process tree is dead, so nothing the check started writes a report while it is read.
/// `Ok(Err(detail))`: the zone could not be set up for the check.
pub fn run_check(
    zone: &mut dyn Zone,
    cmd: &ZoneCommand,
    artifacts: Artifacts<'_>,
    report: Option<ReportSource<'_>>,
) -> Result<Result<CheckOutcome, String>, Failure> {
    let run = match run_in_zone(zone, cmd, artifacts.dir, artifacts.rel, &artifacts.stem)? {
        Ok(run) => run,
        Err(detail) => return Ok(Err(detail)),
    };
    let report = match run.ending.exit_code() {
        None => ReportOutcome::NotRead,
        Some(code) => read_evidence(Some(code), &run, &artifacts, report),
    };
    let sight = match run.ending.exit_code() {
        None => Default::default(),
        Some(_) => crate::testreport::sight::of_output(
            &captured(&artifacts, run.output.stdout.artifact.as_deref()),
            &captured(&artifacts, run.output.stderr.artifact.as_deref()),
        ),
    };
    let excerpts = report.sets().map(|s| &s.excerpts);
    let excerpts_artifact = match excerpts {
        Some(e) => super::excerpts::write(artifacts.dir, artifacts.rel, &artifacts.stem, e)
            .map_err(|e| {
                Failure::internal(format!("the check's failure excerpts cannot be kept: {e}"))
            })?,
        None => None,
    };
    Ok(Ok(CheckOutcome {
        run,
        report,
        coverage: None,
        tree_writes: None,
        excerpts_artifact,
        score: None,
        sight,
        sentinel_proofs: Vec::new(),
    }))
}
