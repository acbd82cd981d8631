//! Test reports read out of the one check run, and whether they agree with its exit code.
//!
//! A check leaves evidence besides its exit code: report files it was told to write (JUnit XML,
//! `go test -json`, TAP) and the runner's own lines in its captured output (libtest's per-test
//! lines and `test result:` lines, pytest's final line, go's `ok`/`FAIL` lines). This module turns
//! that evidence into typed sets and decides whether every source agrees. It is pure: it reads
//! bytes it is given, or files beneath a [`SafeDir`] without following links, and decides nothing
//! about halting (the engine maps a disagreement to `metric_integrity_violation`).
//!
//! - [`format`]: the report formats, sniffing a format from content.
//! - [`junit`], [`gojson`], [`tap`], [`libtest`]: one parser per format, each returning a
//!   [`ParsedReport`] or a [`ReportError`] naming the report and what is wrong with it.
//! - [`excerpt`]: the bounded, escaped failure excerpt each parser keeps per failing test.
//! - [`summary`]: the runners' own summary lines found in captured output.
//! - [`paths`]: `--report` patterns (globs) and resolving them beneath a directory.
//! - [`agreement`]: the verdict from the exit code AND the evidence.
//!
//! Everything here reads hostile input (the agent may have written any of it): reports are read
//! with a size cap, line-based formats with a line-length cap, XML without DTDs or entity
//! expansion and with a nesting cap, and no parser recurses. Test ids are kept exactly as the
//! report spells them (control bytes included); messages show them escaped ([`shown`]).
//! The id scheme of each format is documented in docs/guards.md ("Test reports").

pub mod agreement;
pub mod excerpt;
pub mod format;
pub mod gojson;
pub mod junit;
pub mod libtest;
pub mod paths;
pub mod sight;
pub mod summary;
pub mod tap;

use crate::safefs::SafeDir;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

pub use excerpt::Excerpt;
pub use format::Format;

/// Largest report file read.
pub const MAX_REPORT_BYTES: u64 = 32 * 1024 * 1024;
/// Longest line accepted in a line-based report (go -json, TAP, libtest output).
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// Longest test id accepted.
pub const MAX_TEST_ID_BYTES: usize = 16 * 1024;

/// What one report says: the three sets (sorted, de-duplicated), the raw counts, and the
/// numbers the report declares about itself where its format has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParsedReport {
    pub format: Format,
    /// The tool that wrote the report, where the report says so (it pairs the report with that
    /// runner's summary line in the captured output).
    pub producer: Option<Producer>,
    /// Every test the report shows, whatever its result.
    pub collected: BTreeSet<String>,
    /// Tests that failed or errored (a subset of `collected`), plus units that failed without a
    /// failing test in them: a go package (or import path) by its name, a TAP suite whose hook
    /// failed by its id, `Bail out!` for a TAP stream that bailed out.
    pub failing: BTreeSet<String>,
    /// Tests skipped, ignored, xfailed or marked TODO.
    pub skipped: BTreeSet<String>,
    /// Ids of `collected` the report shows more than once (two doctests of one item, two node
    /// tests of one name in two files), with how many entries bear each; an id not here was
    /// shown once. The set guard compares collected ids as this multiset.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub collected_repeats: BTreeMap<String, u64>,
    /// The same for `skipped`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub skipped_repeats: BTreeMap<String, u64>,
    /// Counted over the report's entries (a duplicated id counts twice here, once in the sets).
    pub counts: Counts,
    /// What the report declares about itself (JUnit's `tests`/`failures` attributes, node's
    /// `# tests` comments), to be checked against `counts`.
    pub declared: Option<Counts>,
    /// The report's counts in its runner's own terms, where they differ from its entries: node's
    /// JUnit writes a test with subtests as a suite, which node's summary counts as a test (its
    /// closing comments, the same numbers its spec reporter prints). The runner's summary line
    /// is compared with these (none: with `counts`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner_counts: Option<Counts>,
    /// Units of the run that ended abnormally or without their result (a go package that
    /// failed without a failing test, a libtest binary without its `test result:` line).
    pub incomplete: Vec<String>,
    /// What the failing tests printed, by id (a subset of `failing`), bounded ([`excerpt`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub excerpts: BTreeMap<String, Excerpt>,
}

/// Counts of test entries by result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Counts {
    pub total: u64,
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

/// A tool known to have written a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Producer {
    Pytest,
    Nextest,
    Jest,
    GoTest,
    NodeTest,
    Libtest,
}

/// Entries of a report while it is parsed; [`ReportBuilder::finish`] makes the sets.
#[derive(Debug, Default)]
pub(crate) struct ReportBuilder {
    collected: BTreeSet<String>,
    failing: BTreeSet<String>,
    skipped: BTreeSet<String>,
    collected_repeats: BTreeMap<String, u64>,
    skipped_repeats: BTreeMap<String, u64>,
    counts: Counts,
    excerpts: excerpt::Excerpts,
}

/// One more entry bearing `id` in `set`: counted in `repeats` from its second entry on.
fn insert_counted(set: &mut BTreeSet<String>, repeats: &mut BTreeMap<String, u64>, id: &str) {
    if set.contains(id) {
        *repeats.entry(id.to_string()).or_insert(1) += 1;
    } else {
        set.insert(id.to_string());
    }
}

/// The result of one test entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Passed,
    Failed,
    Skipped,
}

impl ReportBuilder {
    pub(crate) fn add(&mut self, id: String, outcome: Outcome) {
        self.counts.total += 1;
        match outcome {
            Outcome::Passed => self.counts.passed += 1,
            Outcome::Failed => {
                self.counts.failed += 1;
                self.failing.insert(id.clone());
            }
            Outcome::Skipped => {
                self.counts.skipped += 1;
                insert_counted(&mut self.skipped, &mut self.skipped_repeats, &id);
            }
        }
        insert_counted(&mut self.collected, &mut self.collected_repeats, &id);
    }

    /// The entries counted so far.
    pub(crate) fn counts(&self) -> Counts {
        self.counts
    }

    /// What the failing test `id` printed (kept within the report's excerpt bounds).
    pub(crate) fn add_excerpt(&mut self, id: &str, gathered: excerpt::Gathering) {
        self.excerpts.add(id, gathered);
    }

    /// A failure that belongs to no test entry (a go package that failed on its own).
    pub(crate) fn add_unit_failure(&mut self, id: String) {
        self.failing.insert(id);
    }

    pub(crate) fn finish(
        self,
        format: Format,
        producer: Option<Producer>,
        declared: Option<Counts>,
        incomplete: Vec<String>,
    ) -> ParsedReport {
        let excerpts = self.excerpts.of_failing(&self.failing);
        ParsedReport {
            format,
            producer,
            excerpts,
            collected: self.collected,
            failing: self.failing,
            skipped: self.skipped,
            collected_repeats: self.collected_repeats,
            skipped_repeats: self.skipped_repeats,
            counts: self.counts,
            declared,
            runner_counts: None,
            incomplete,
        }
    }
}

/// Why a report gave no sets. Always names the report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("report {}: {problem}", shown(report))]
pub struct ReportError {
    /// The report's path (or name) as given.
    pub report: String,
    pub problem: ReportProblem,
}

/// What is wrong with a report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReportProblem {
    #[error("missing (the check did not write it)")]
    Missing,
    #[error("unreadable: {detail}")]
    Unreadable { detail: String },
    #[error("larger than the {limit} bytes allowed")]
    TooLarge { limit: u64 },
    #[error("empty")]
    Empty,
    #[error("not a known report format (JUnit XML, go test -json, TAP, libtest output); it starts with {start}")]
    UnknownFormat { start: String },
    #[error("malformed {format} at {location}: {detail}")]
    Malformed {
        format: Format,
        location: String,
        detail: String,
    },
}

impl ReportError {
    pub(crate) fn new(report: &str, problem: ReportProblem) -> Self {
        ReportError {
            report: report.to_string(),
            problem,
        }
    }

    pub(crate) fn malformed(
        report: &str,
        format: Format,
        location: String,
        detail: impl Into<String>,
    ) -> Self {
        ReportError::new(
            report,
            ReportProblem::Malformed {
                format,
                location,
                detail: detail.into(),
            },
        )
    }
}

/// Parse report bytes. `format` is the declared format, or `None` to sniff it from the content.
pub fn parse_report(
    bytes: &[u8],
    report: &str,
    format: Option<Format>,
) -> Result<ParsedReport, ReportError> {
    if bytes.len() as u64 > MAX_REPORT_BYTES {
        return Err(ReportError::new(
            report,
            ReportProblem::TooLarge {
                limit: MAX_REPORT_BYTES,
            },
        ));
    }
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(ReportError::new(report, ReportProblem::Empty));
    }
    let format = match format {
        Some(f) => f,
        None => format::sniff(bytes).ok_or_else(|| {
            ReportError::new(
                report,
                ReportProblem::UnknownFormat {
                    start: shown_bytes(bytes, 40),
                },
            )
        })?,
    };
    match format {
        Format::Junit => junit::parse(bytes, report),
        Format::GoJson => gojson::parse(bytes, report),
        Format::Tap => tap::parse(bytes, report),
        Format::Libtest => libtest::parse_report(bytes, report),
    }
}

/// Read the report at `rel` beneath `dir` (no link followed, size-capped) and parse it.
pub fn read_report(
    dir: &SafeDir,
    rel: &str,
    format: Option<Format>,
) -> Result<ParsedReport, ReportError> {
    let bytes = dir.read(rel, MAX_REPORT_BYTES).map_err(|e| {
        let problem = match e {
            crate::safefs::SafeFsError::TooLarge { limit, .. } => ReportProblem::TooLarge { limit },
            ref other if other.is_not_found() => ReportProblem::Missing,
            other => ReportProblem::Unreadable {
                detail: other.to_string(),
            },
        };
        ReportError::new(rel, problem)
    })?;
    parse_report(&bytes, rel, format)
}

/// Text as it may be shown in a message or a log: control and other non-printable characters
/// escaped, at most 200 characters (then `...`).
pub fn shown(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == 200 {
            out.push_str("...");
            break;
        }
        out.extend(c.escape_debug());
    }
    out
}

/// A captured line without its ANSI colour sequences (`ESC [ ... final byte`, `ESC ( B`), so a runner
/// forced to colour its output (`--color=yes`, `CARGO_TERM_COLOR=always`) still reads as its
/// plain lines. Other escape sequences are left in place (and so match nothing).
pub(crate) fn without_colours(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\u{1b}') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if ('\u{40}'..='\u{7e}').contains(&c) {
                    break;
                }
            }
            continue;
        }
        if c == '\u{1b}' && matches!(chars.peek(), Some('(' | ')')) {
            // A character-set designation (`ESC ( B`), which libtest's colours end with.
            chars.next();
            chars.next();
            continue;
        }
        out.push(c);
    }
    std::borrow::Cow::Owned(out)
}

/// The first `max` bytes of `bytes`, shown escaped and quoted.
pub(crate) fn shown_bytes(bytes: &[u8], max: usize) -> String {
    let head = &bytes[..bytes.len().min(max)];
    format!("\"{}\"", shown(&String::from_utf8_lossy(head)))
}

/// Lines of a line-based report, each without its line ending, numbered from 1; a line longer
/// than [`MAX_LINE_BYTES`] is an error naming its number.
pub(crate) fn lines<'a>(bytes: &'a [u8], report: &'a str, format: Format) -> Lines<'a> {
    Lines {
        rest: bytes,
        number: 0,
        report,
        format,
        skip_long: false,
    }
}

/// Lines of captured output: as [`lines`], but a line longer than [`MAX_LINE_BYTES`] is passed
/// over (it cannot be a runner's line, and a program may print anything), never an error.
pub(crate) fn output_lines<'a>(bytes: &'a [u8], name: &'a str) -> Lines<'a> {
    Lines {
        rest: bytes,
        number: 0,
        report: name,
        format: Format::Libtest,
        skip_long: true,
    }
}

/// See [`lines`].
pub(crate) struct Lines<'a> {
    rest: &'a [u8],
    number: usize,
    report: &'a str,
    format: Format,
    skip_long: bool,
}

impl<'a> Iterator for Lines<'a> {
    type Item = Result<(usize, &'a [u8]), ReportError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.rest.is_empty() {
                return None;
            }
            let (line, rest) = match self.rest.iter().position(|b| *b == b'\n') {
                Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
                None => (self.rest, &self.rest[self.rest.len()..]),
            };
            self.rest = rest;
            self.number += 1;
            if line.len() > MAX_LINE_BYTES && self.skip_long {
                continue;
            }
            return Some(self.line(line));
        }
    }
}

impl<'a> Lines<'a> {
    fn line(&mut self, line: &'a [u8]) -> Result<(usize, &'a [u8]), ReportError> {
        if line.len() > MAX_LINE_BYTES {
            self.rest = &[];
            return Err(ReportError::malformed(
                self.report,
                self.format,
                format!("line {}", self.number),
                format!(
                    "a line of {} bytes is longer than the {MAX_LINE_BYTES} allowed",
                    line.len()
                ),
            ));
        }
        Ok((self.number, line.strip_suffix(b"\r").unwrap_or(line)))
    }
}

/// A test id, refused when longer than [`MAX_TEST_ID_BYTES`].
pub(crate) fn bounded_id(
    id: String,
    report: &str,
    format: Format,
    location: impl FnOnce() -> String,
) -> Result<String, ReportError> {
    if id.len() > MAX_TEST_ID_BYTES {
        return Err(ReportError::malformed(
            report,
            format,
            location(),
            format!(
                "test id of {} bytes is longer than the {MAX_TEST_ID_BYTES} allowed",
                id.len()
            ),
        ));
    }
    Ok(id)
}
