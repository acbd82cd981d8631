//! Static analysis of the agent's change against t0, for the guards of issue 12: assertion
//! counts, test items and their attribute changes, tampering patterns (`reward_hacking_detected`),
//! the test-determining surface digest H0, and Python module shadowing. Pure: inputs are files
//! as (repository-relative path, bytes), outputs are typed facts and findings; nothing here
//! touches the file system, runs a process or knows the engine.
//!
//! - `syntax`: bounded tree-sitter parsing and non-recursive walks.
//! - `test_code`: which files and which parts of files are test code.
//! - `assertions`, `test_items`, `rust_doc`, `tampering`: the per-file facts.
//! - `surface`: the test-determining surface digest H0 and its diff.
//! - `shadowing`: workspace modules named like standard-library or installed modules.
//! - `awareness`: production code observing what can tell a test run from a real one.
//!
//! What each rule catches and misses is in docs/guards.md. These are best-effort checks against
//! a determined agent; the judge and the adequacy canary are the next lines.

pub mod assertions;
pub mod awareness;
pub mod rust_doc;
pub mod shadowing;
pub mod surface;
pub mod syntax;
pub mod tampering;
pub mod test_code;
pub mod test_items;

use serde::Serialize;

pub use syntax::{Language, Limits, NotAnalysed, NotAnalysedReason};
pub use tampering::{Finding, Occurrence, RuleId, RuleSet};
pub use test_items::{TestItem, TestItemChange, TestItemKind};

/// Every failure of the analysis. Problems of single files (too large, no grammar) are not
/// errors: they are [`NotAnalysed`] records.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    #[error("the {language} grammar could not be loaded: {message}")]
    Grammar { language: Language, message: String },
    #[error("parsing {path} as {language} was aborted")]
    ParseAborted { path: String, language: Language },
    #[error("unknown tampering rule `{0}` (known: skip-marker, test-environment-read, process-exit, production-skip, runner-override, runner-internals, runner-introspection, always-equal, test-tool-directive)")]
    UnknownRule(String),
    #[error("tampering rule `{0}` is disabled without a reason")]
    DisabledWithoutReason(RuleId),
    #[error("[guards] allow: `{0}` is not an observation the awareness rule reports (see docs/guards.md, \"The code under test must not know it is tested\")")]
    UnknownObservationApi(String),
    #[error("[guards] allow: `{0}` is allowed without a reason")]
    AllowedWithoutReason(String),
    #[error("surface glob `{glob}` is invalid: {message}")]
    InvalidGlob { glob: String, message: String },
    #[error("the module-name command failed: {0}")]
    ModuleNamesCommand(String),
    #[error("the module-name command printed {0}")]
    ModuleNamesOutput(String),
}

/// One version of one file.
#[derive(Debug, Clone, Copy)]
pub struct SourceFile<'a> {
    pub path: &'a str,
    pub bytes: &'a [u8],
}

/// One path the agent changed, with its t0 and end versions (`None`: absent in that version).
#[derive(Debug, Clone, Copy)]
pub struct ChangedFile<'a> {
    pub path: &'a str,
    pub t0: Option<&'a [u8]>,
    pub end: Option<&'a [u8]>,
}

/// The facts of one analysed file version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileFacts {
    pub path: String,
    pub language: Language,
    /// Whether the whole file is test code (see `test_code::is_test_file`).
    pub test_file: bool,
    pub assertions: u64,
    pub test_items: Vec<TestItem>,
    pub occurrences: Vec<Occurrence>,
}

/// A file version's analysis: its facts, or why there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileAnalysis {
    Analysed(FileFacts),
    NotAnalysed(NotAnalysed),
}

/// Parses one file version and derives all its facts from the one tree.
pub fn analyse_file(file: SourceFile<'_>, limits: Limits) -> Result<FileAnalysis, AnalysisError> {
    let parsed = match syntax::parse(file.path, file.bytes, limits)? {
        syntax::Parse::Parsed(parsed) => parsed,
        syntax::Parse::NotAnalysed(na) => return Ok(FileAnalysis::NotAnalysed(na)),
    };
    let test_file = test_code::is_test_file(file.path, parsed.language);
    Ok(FileAnalysis::Analysed(FileFacts {
        path: file.path.to_string(),
        language: parsed.language,
        test_file,
        assertions: assertions::count(&parsed, test_file, limits)?,
        test_items: test_items::items(&parsed, test_file),
        occurrences: tampering::occurrences(&parsed, test_file),
    }))
}

/// The assertion count of a whole tree (A0 at t0): the sum over its files.
pub fn total_assertions<'a>(
    files: impl IntoIterator<Item = SourceFile<'a>>,
    limits: Limits,
) -> Result<AssertionTotal, AnalysisError> {
    let mut total = AssertionTotal::default();
    for file in files {
        match analyse_file(file, limits)? {
            FileAnalysis::Analysed(facts) => total.assertions += facts.assertions,
            FileAnalysis::NotAnalysed(na) => {
                if matches!(na.reason, NotAnalysedReason::TooLarge { .. }) {
                    total.not_analysed.push(na);
                }
            }
        }
    }
    Ok(total)
}

/// An assertion count and the files that could not be counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AssertionTotal {
    pub assertions: u64,
    /// Files above the parse cap (files without a grammar count nothing and are not listed).
    pub not_analysed: Vec<NotAnalysed>,
}

/// Which version of a file a not-analysed record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    T0,
    End,
}

/// A rule switched off, as the receipt records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DisabledRule {
    pub rule: RuleId,
    pub reason: String,
}

/// The analysis of the agent's change: everything the guards need besides H0 and shadowing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangeAnalysis {
    /// Assertions in the changed files at t0 and at the end. The end state's total is
    /// `A0 - assertions_t0 + assertions_end`; it fell below A0 exactly when
    /// `assertions_end < assertions_t0`.
    pub assertions_t0: u64,
    pub assertions_end: u64,
    /// Test items of t0 that are gone or changed their attributes.
    pub test_item_changes: Vec<TestItemChange>,
    /// New tampering occurrences of enabled rules.
    pub findings: Vec<Finding>,
    pub disabled_rules: Vec<DisabledRule>,
    /// Changed file versions above the parse cap, never silently skipped.
    pub not_analysed: Vec<(Version, NotAnalysed)>,
}

/// The paths whose bytes differ between two trees, with both versions.
pub fn changed_files<'a>(t0: &[SourceFile<'a>], end: &[SourceFile<'a>]) -> Vec<ChangedFile<'a>> {
    let mut by_path: std::collections::BTreeMap<&'a str, ChangedFile<'a>> =
        std::collections::BTreeMap::new();
    for f in t0 {
        by_path.insert(
            f.path,
            ChangedFile {
                path: f.path,
                t0: Some(f.bytes),
                end: None,
            },
        );
    }
    for f in end {
        by_path
            .entry(f.path)
            .or_insert(ChangedFile {
                path: f.path,
                t0: None,
                end: None,
            })
            .end = Some(f.bytes);
    }
    by_path.into_values().filter(|c| c.t0 != c.end).collect()
}

/// Analyses the changed files in both versions and compares them.
pub fn analyse_change(
    changed: &[ChangedFile<'_>],
    rules: &RuleSet,
    limits: Limits,
) -> Result<ChangeAnalysis, AnalysisError> {
    let mut t0_facts = Vec::new();
    let mut end_facts = Vec::new();
    let mut not_analysed = Vec::new();
    for change in changed {
        for (version, bytes, facts) in [
            (Version::T0, change.t0, &mut t0_facts),
            (Version::End, change.end, &mut end_facts),
        ] {
            let Some(bytes) = bytes else { continue };
            match analyse_file(
                SourceFile {
                    path: change.path,
                    bytes,
                },
                limits,
            )? {
                FileAnalysis::Analysed(f) => facts.push(f),
                FileAnalysis::NotAnalysed(na) => {
                    if matches!(na.reason, NotAnalysedReason::TooLarge { .. }) {
                        not_analysed.push((version, na));
                    }
                }
            }
        }
    }
    let t0_items: Vec<TestItem> = t0_facts
        .iter()
        .flat_map(|f| f.test_items.iter().cloned())
        .collect();
    let end_items: Vec<TestItem> = end_facts
        .iter()
        .flat_map(|f| f.test_items.iter().cloned())
        .collect();
    let findings = tampering::new_findings(
        t0_facts
            .iter()
            .map(|f| (f.path.as_str(), f.occurrences.as_slice())),
        end_facts
            .iter()
            .map(|f| (f.path.as_str(), f.occurrences.as_slice())),
        rules,
    );
    Ok(ChangeAnalysis {
        assertions_t0: t0_facts.iter().map(|f| f.assertions).sum(),
        assertions_end: end_facts.iter().map(|f| f.assertions).sum(),
        test_item_changes: test_items::diff(&t0_items, &end_items),
        findings,
        disabled_rules: rules
            .disabled()
            .map(|(rule, reason)| DisabledRule {
                rule,
                reason: reason.to_string(),
            })
            .collect(),
        not_analysed,
    })
}
