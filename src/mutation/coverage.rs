//! The coverage-delta tier: every substantive line the agent changed must be executed by the
//! check, as a coverage report the check wrote says (lcov through the `lcov` crate, Cobertura XML
//! through quick-xml). The report is the check's output, so hostile: it is parsed from a bounded
//! buffer, without recursion, and its paths only ever name lines, never files to open.
//!
//! A report's file names are resolved to tree paths exactly ([`resolve_entry`]): an absolute name
//! beneath the check's mount point of the tree, a relative one against the report's declared
//! source roots (Cobertura's `<sources>`; lcov's and a Cobertura without sources: the check's
//! working directory, the tree's root), `.` and `..` folded only through real directories of the
//! tree (never a symlink), the result a file of the tree. A name that resolves to no tree file
//! names none (a library outside the tree); one that resolves to two is ambiguous, and lends its
//! hits to neither: the changed files it could name are uncovered (issue 19 item 9).

use std::collections::{BTreeMap, BTreeSet};

use quick_xml::events::Event;
use serde::{Deserialize, Serialize};

/// Largest coverage report read (bytes).
pub const MAX_REPORT_BYTES: u64 = 64 * 1024 * 1024;

/// Most source roots a Cobertura report may declare (each relative file name is resolved against
/// every one of them).
pub const MAX_SOURCE_ROOTS: usize = 64;

/// The format of a coverage report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CoverageFormat {
    Lcov,
    Cobertura,
}

impl CoverageFormat {
    /// Cobertura is XML (its first non-blank byte is `<`); everything else is read as lcov.
    pub fn sniff(bytes: &[u8]) -> CoverageFormat {
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'<') => CoverageFormat::Cobertura,
            _ => CoverageFormat::Lcov,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CoverageFormat::Lcov => "lcov",
            CoverageFormat::Cobertura => "cobertura",
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CoverageError {
    #[error("the lcov report is malformed: {0}")]
    Lcov(String),
    #[error("the Cobertura report is malformed: {0}")]
    Cobertura(String),
    #[error("the coverage report names no source file")]
    Empty,
}

/// Hits per line per file, as a report gave them (paths as written in the report), and the
/// source roots the report declares its relative names against (Cobertura's `<source>`s).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineHits {
    files: BTreeMap<String, BTreeMap<u32, u64>>,
    sources: Vec<String>,
}

impl LineHits {
    /// Parse a report in either format.
    pub fn parse(bytes: &[u8]) -> Result<LineHits, CoverageError> {
        let hits = match CoverageFormat::sniff(bytes) {
            CoverageFormat::Lcov => lcov_hits(bytes)?,
            CoverageFormat::Cobertura => cobertura_hits(bytes)?,
        };
        if hits.files.is_empty() {
            return Err(CoverageError::Empty);
        }
        Ok(hits)
    }

    /// Overall line coverage: (lines executed at least once, lines the report instruments), over
    /// every file it names.
    pub fn totals(&self) -> (u64, u64) {
        let lines = self.files.values().flat_map(|lines| lines.values());
        lines.fold((0, 0), |(covered, coverable), &hits| {
            (covered + u64::from(hits > 0), coverable + 1)
        })
    }

    /// The bases the report's relative names are resolved against, as tree-relative component
    /// lists: each declared source root that resolves to a directory of the tree (Cobertura),
    /// else the tree's root.
    fn bases<'a>(&'a self, mount: &str, tree: &dyn Fn(&str) -> TreeKind) -> Vec<Vec<&'a str>> {
        if self.sources.is_empty() {
            return vec![Vec::new()];
        }
        let mut bases: Vec<Vec<&str>> = Vec::new();
        for source in &self.sources {
            let base = match source.strip_prefix('/') {
                Some(_) => {
                    beneath_mount(source, mount).and_then(|rest| fold(Vec::new(), rest, tree))
                }
                None => fold(Vec::new(), source, tree),
            };
            if let Some(base) = base.filter(|b| b.is_empty() || tree(&b.join("/")) == TreeKind::Dir)
            {
                if !bases.contains(&base) {
                    bases.push(base);
                }
            }
        }
        bases
    }
}

/// What a tree path is in the tree the check ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeKind {
    /// A regular or executable file.
    File,
    /// A directory (something lies beneath it).
    Dir,
    /// A symlink, a submodule, or nothing.
    Other,
}

/// The part of the absolute `name` beneath the mount point `mount` (`/workspace`), if it lies
/// beneath it (empty and `.` components skipped on the way).
fn beneath_mount<'a>(name: &'a str, mount: &str) -> Option<&'a str> {
    let mut rest = name;
    for want in mount.split('/').filter(|c| !c.is_empty()) {
        loop {
            rest = rest.trim_start_matches('/');
            match rest.strip_prefix("./") {
                Some(r) => rest = r,
                None if rest == "." => rest = "",
                None => break,
            }
        }
        let (first, tail) = rest.split_once('/').unwrap_or((rest, ""));
        if first != want {
            return None;
        }
        rest = tail;
    }
    Some(rest)
}

/// `base` (tree-relative components) with the components of `name` appended: empty and `.` ones
/// skipped, `..` folded only when the component it removes is a real directory of the tree (so
/// the lexical result is the physical one: no symlink is ever crossed backwards); `None` when a
/// `..` climbs above the tree's root or out of anything but a directory.
fn fold<'a>(
    mut base: Vec<&'a str>,
    name: &'a str,
    tree: &dyn Fn(&str) -> TreeKind,
) -> Option<Vec<&'a str>> {
    for comp in name.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                if base.is_empty() || tree(&base.join("/")) != TreeKind::Dir {
                    return None;
                }
                base.pop();
            }
            c => base.push(c),
        }
    }
    Some(base)
}

/// The tree files the report name `name` can stand for: one for an absolute name beneath the
/// mount point or a relative name against each of `bases`, kept when it is a file of the tree
/// (its last component a plain name), without duplicates.
pub fn resolve_entry(
    name: &str,
    mount: &str,
    bases: &[Vec<&str>],
    tree: &dyn Fn(&str) -> TreeKind,
) -> Vec<String> {
    if matches!(name.rsplit('/').next(), None | Some("" | "." | "..")) {
        return Vec::new();
    }
    let folded: Vec<Option<Vec<&str>>> = match name.strip_prefix('/') {
        Some(_) => vec![beneath_mount(name, mount).and_then(|rest| fold(Vec::new(), rest, tree))],
        None => bases
            .iter()
            .map(|base| fold(base.clone(), name, tree))
            .collect(),
    };
    let mut out: Vec<String> = Vec::new();
    for path in folded.into_iter().flatten().map(|comps| comps.join("/")) {
        if !path.is_empty() && tree(&path) == TreeKind::File && !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// A report entry that could name more than one file of the tree, one of them changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmbiguousEntry {
    /// The name as the report wrote it.
    pub entry: String,
    /// The tree files it could name.
    pub candidates: Vec<String>,
}

/// What the report says of the changed lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeCoverage {
    pub uncovered: Vec<Uncovered>,
    /// The report entries that could name a changed file and another tree file.
    pub ambiguous: Vec<AmbiguousEntry>,
}

fn lcov_hits(bytes: &[u8]) -> Result<LineHits, CoverageError> {
    let mut hits = LineHits::default();
    let mut current: Option<String> = None;
    for record in lcov::Reader::new(bytes) {
        match record.map_err(|e| CoverageError::Lcov(e.to_string()))? {
            lcov::Record::SourceFile { path } => {
                current = Some(path.to_string_lossy().into_owned())
            }
            lcov::Record::LineData { line, count, .. } => {
                let file = current.clone().ok_or_else(|| {
                    CoverageError::Lcov(format!("DA:{line} before any SF record"))
                })?;
                *hits.files.entry(file).or_default().entry(line).or_default() += count;
            }
            lcov::Record::EndOfRecord => current = None,
            _ => {}
        }
    }
    Ok(hits)
}

fn attribute(
    e: &quick_xml::events::BytesStart<'_>,
    name: &[u8],
) -> Result<Option<String>, CoverageError> {
    for a in e.attributes() {
        let a = a.map_err(|err| CoverageError::Cobertura(err.to_string()))?;
        if a.key.as_ref() == name {
            let v = a
                .unescape_value()
                .map_err(|err| CoverageError::Cobertura(err.to_string()))?;
            return Ok(Some(v.into_owned()));
        }
    }
    Ok(None)
}

fn cobertura_hits(bytes: &[u8]) -> Result<LineHits, CoverageError> {
    let mut reader = quick_xml::Reader::from_reader(bytes);
    let mut hits = LineHits::default();
    let mut class: Option<String> = None;
    // Inside `<sources><source>`: the text read so far.
    let (mut in_sources, mut source): (bool, Option<String>) = (false, None);
    let mut buf = Vec::new();
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| CoverageError::Cobertura(e.to_string()))?;
        match &event {
            Event::Start(e) if e.name().as_ref() == b"sources" => in_sources = true,
            Event::End(e) if e.name().as_ref() == b"sources" => in_sources = false,
            Event::Start(e) if in_sources && e.name().as_ref() == b"source" => {
                source = Some(String::new())
            }
            Event::Text(t) if source.is_some() => {
                let text = t
                    .unescape()
                    .map_err(|err| CoverageError::Cobertura(err.to_string()))?;
                if let Some(s) = source.as_mut() {
                    s.push_str(&text);
                }
            }
            Event::End(e) if e.name().as_ref() == b"source" => {
                if let Some(text) = source.take() {
                    if hits.sources.len() == MAX_SOURCE_ROOTS {
                        return Err(CoverageError::Cobertura(format!(
                            "more than {MAX_SOURCE_ROOTS} <source> roots"
                        )));
                    }
                    hits.sources.push(text.trim().to_string());
                }
            }
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"class" => class = attribute(e, b"filename")?,
                // `<line>` of a class's `<lines>`; those under `<methods>` repeat them.
                b"line" => {
                    if let Some(file) = &class {
                        let number = attribute(e, b"number")?.and_then(|n| n.parse::<u32>().ok());
                        let count = attribute(e, b"hits")?.and_then(|h| h.parse::<u64>().ok());
                        let (Some(number), Some(count)) = (number, count) else {
                            return Err(CoverageError::Cobertura(format!(
                                "a <line> of {file} without a numeric number and hits"
                            )));
                        };
                        let entry = hits
                            .files
                            .entry(file.clone())
                            .or_default()
                            .entry(number)
                            .or_default();
                        *entry = (*entry).max(count);
                    }
                }
                _ => {}
            },
            Event::End(e) if e.name().as_ref() == b"class" => class = None,
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    Ok(hits)
}

/// A changed line the report says the check never executed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uncovered {
    pub path: String,
    pub line: u32,
    /// The file is absent from the report altogether (never loaded by the check).
    pub file_missing: bool,
    /// An entry of the report could name this file or another tree file: its hits count for
    /// neither (absent when false, and in older receipts).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ambiguous: bool,
}

/// The changed lines (per file, substantive lines only) that `report` shows with zero hits or,
/// for a file no entry of the report resolves to, all of them; every line of a changed file an
/// ambiguous entry could name. Report names are resolved exactly ([`resolve_entry`]) against the
/// tree the check ran on, `tree`, seen at `mount` by the check. Lines the report does not
/// instrument (a closing brace, a `def` line some tools skip) are not counted against the check.
pub fn uncovered(
    changed: &BTreeMap<String, BTreeSet<u32>>,
    report: &LineHits,
    mount: &str,
    tree: &dyn Fn(&str) -> TreeKind,
) -> ChangeCoverage {
    let names: BTreeSet<&str> = changed
        .keys()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    let bases = report.bases(mount, tree);
    let mut resolved: BTreeMap<String, BTreeMap<u32, u64>> = BTreeMap::new();
    let mut out = ChangeCoverage::default();
    // Only an entry whose last component is a changed file's name can resolve to one.
    for (name, lines) in report
        .files
        .iter()
        .filter(|(n, _)| names.contains(n.rsplit('/').next().unwrap_or(n)))
    {
        let candidates = resolve_entry(name, mount, &bases, tree);
        match candidates.as_slice() {
            [] => {}
            [path] => {
                let merged = resolved.entry(path.clone()).or_default();
                for (&line, &hits) in lines {
                    let entry = merged.entry(line).or_default();
                    *entry = (*entry).max(hits);
                }
            }
            _ if candidates.iter().any(|c| changed.contains_key(c)) => {
                out.ambiguous.push(AmbiguousEntry {
                    entry: name.clone(),
                    candidates,
                })
            }
            _ => {}
        }
    }
    for (path, lines) in changed {
        let ambiguous = out.ambiguous.iter().any(|a| a.candidates.contains(path));
        match resolved.get(path) {
            _ if ambiguous => out.uncovered.extend(lines.iter().map(|&line| Uncovered {
                path: path.clone(),
                line,
                file_missing: false,
                ambiguous: true,
            })),
            None => out.uncovered.extend(lines.iter().map(|&line| Uncovered {
                path: path.clone(),
                line,
                file_missing: true,
                ambiguous: false,
            })),
            Some(hits) => {
                out.uncovered
                    .extend(
                        lines
                            .iter()
                            .filter(|l| hits.get(l) == Some(&0))
                            .map(|&line| Uncovered {
                                path: path.clone(),
                                line,
                                file_missing: false,
                                ambiguous: false,
                            }),
                    )
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changed(path: &str, lines: &[u32]) -> BTreeMap<String, BTreeSet<u32>> {
        BTreeMap::from([(path.to_string(), lines.iter().copied().collect())])
    }

    /// A tree of these files (and the directories above them).
    fn tree_of(files: &'static [&'static str]) -> impl Fn(&str) -> TreeKind {
        move |p: &str| {
            if files.contains(&p) {
                TreeKind::File
            } else if files
                .iter()
                .any(|f| f.len() > p.len() && f.starts_with(p) && f.as_bytes()[p.len()] == b'/')
            {
                TreeKind::Dir
            } else {
                TreeKind::Other
            }
        }
    }

    const MOUNT: &str = "/workspace";

    fn missed(
        changed: &BTreeMap<String, BTreeSet<u32>>,
        report: &LineHits,
        files: &'static [&'static str],
    ) -> Vec<Uncovered> {
        uncovered(changed, report, MOUNT, &tree_of(files)).uncovered
    }

    fn at(path: &str, line: u32) -> Uncovered {
        Uncovered {
            path: path.into(),
            line,
            file_missing: false,
            ambiguous: false,
        }
    }

    #[test]
    fn lcov_lines_with_zero_hits_are_uncovered() {
        let report = LineHits::parse(
            b"TN:\nSF:/workspace/src/calc.py\nDA:1,1\nDA:2,0\nDA:3,4\nend_of_record\n",
        )
        .unwrap();
        let got = missed(
            &changed("src/calc.py", &[2, 3, 9]),
            &report,
            &["src/calc.py"],
        );
        assert_eq!(got, vec![at("src/calc.py", 2)]);
    }

    #[test]
    fn cobertura_lines_with_zero_hits_are_uncovered() {
        let xml = br#"<?xml version="1.0"?><coverage><packages><package><classes>
            <class filename="calc.py"><methods/><lines><line number="1" hits="3"/><line number="2" hits="0"/></lines></class>
            </classes></package></packages></coverage>"#;
        let report = LineHits::parse(xml).unwrap();
        let got = missed(&changed("calc.py", &[1, 2]), &report, &["calc.py"]);
        assert_eq!(got, vec![at("calc.py", 2)]);
    }

    #[test]
    fn a_changed_file_the_report_does_not_name_is_uncovered_whole() {
        let report = LineHits::parse(b"SF:other.py\nDA:1,1\nend_of_record\n").unwrap();
        let got = missed(&changed("calc.py", &[4]), &report, &["calc.py", "other.py"]);
        assert_eq!(
            got,
            vec![Uncovered {
                file_missing: true,
                ..at("calc.py", 4)
            }]
        );
    }

    #[test]
    fn totals_count_executed_and_instrumented_lines_over_every_file() {
        let report = LineHits::parse(
            b"SF:a.py\nDA:1,1\nDA:2,0\nend_of_record\nSF:b.py\nDA:1,0\nDA:7,2\nend_of_record\n",
        )
        .unwrap();
        assert_eq!(report.totals(), (2, 4));
    }

    #[test]
    fn a_malformed_report_is_an_error_naming_its_format() {
        assert!(matches!(
            LineHits::parse(b"SF:a.py\nDA:x,y\n"),
            Err(CoverageError::Lcov(_))
        ));
        assert!(matches!(
            LineHits::parse(
                b"<coverage><class filename=\"a\"><line number=\"z\"/></class></coverage>"
            ),
            Err(CoverageError::Cobertura(_))
        ));
        assert_eq!(LineHits::parse(b""), Err(CoverageError::Empty));
    }

    /// The agent's same-tail copy `a/lib/calc.py`, run whole at import, beside the real
    /// `lib/calc.py` whose line 3 no test reaches.
    const COPY_TREE: &[&str] = &["a/lib/calc.py", "lib/calc.py"];

    #[test]
    fn a_same_tail_copy_lends_no_hits_to_the_real_file_in_lcov() {
        for (copy, real) in [
            ("/workspace/a/lib/calc.py", "/workspace/lib/calc.py"),
            ("a/lib/calc.py", "lib/calc.py"),
            ("/workspace/./a/lib/calc.py", "lib/calc.py"),
        ] {
            let lcov = format!("SF:{copy}\nDA:1,1\nDA:2,1\nDA:3,1\nend_of_record\nSF:{real}\nDA:1,1\nDA:2,1\nDA:3,0\nend_of_record\n");
            let report = LineHits::parse(lcov.as_bytes()).unwrap();
            assert_eq!(
                missed(&changed("lib/calc.py", &[2, 3]), &report, COPY_TREE),
                vec![at("lib/calc.py", 3)],
                "{copy} {real}"
            );
        }
    }

    #[test]
    fn a_same_tail_copy_lends_no_hits_to_the_real_file_in_cobertura() {
        let xml = br#"<?xml version="1.0"?><coverage><sources><source>/workspace</source></sources><packages><package><classes>
            <class filename="a/lib/calc.py"><lines><line number="1" hits="1"/><line number="2" hits="1"/><line number="3" hits="1"/></lines></class>
            <class filename="lib/calc.py"><lines><line number="1" hits="1"/><line number="2" hits="1"/><line number="3" hits="0"/></lines></class>
            </classes></package></packages></coverage>"#;
        let report = LineHits::parse(xml).unwrap();
        assert_eq!(
            missed(&changed("lib/calc.py", &[2, 3]), &report, COPY_TREE),
            vec![at("lib/calc.py", 3)]
        );
    }

    #[test]
    fn a_real_file_named_only_by_its_tail_elsewhere_is_missing_not_borrowed() {
        // Only the copy is in the report: the real file is not named at all.
        let report =
            LineHits::parse(b"SF:/workspace/a/lib/calc.py\nDA:3,1\nend_of_record\n").unwrap();
        assert_eq!(
            missed(&changed("lib/calc.py", &[3]), &report, COPY_TREE),
            vec![Uncovered {
                file_missing: true,
                ..at("lib/calc.py", 3)
            }]
        );
    }

    #[test]
    fn a_name_with_dot_dot_resolves_through_real_directories_only() {
        let tree: &'static [&'static str] = &["lib/calc.py", "a/lib/calc.py", "a/x.py"];
        let report = |name: &str| {
            LineHits::parse(format!("SF:{name}\nDA:3,1\nend_of_record\n").as_bytes()).unwrap()
        };
        // `a/..` folds through the real directory `a`: it names lib/calc.py exactly.
        assert_eq!(
            missed(
                &changed("lib/calc.py", &[3]),
                &report("/workspace/a/../lib/calc.py"),
                tree
            ),
            vec![]
        );
        assert_eq!(
            missed(
                &changed("lib/calc.py", &[3]),
                &report("a/lib/../../lib/calc.py"),
                tree
            ),
            vec![]
        );
        // Out of something that is not a directory of the tree, or above the root: it names nothing.
        let nothing = vec![Uncovered {
            file_missing: true,
            ..at("lib/calc.py", 3)
        }];
        assert_eq!(
            missed(
                &changed("lib/calc.py", &[3]),
                &report("/workspace/nowhere/../lib/calc.py"),
                tree
            ),
            nothing
        );
        assert_eq!(
            missed(
                &changed("lib/calc.py", &[3]),
                &report("/workspace/a/x.py/../../lib/calc.py"),
                tree
            ),
            nothing
        );
        assert_eq!(
            missed(
                &changed("lib/calc.py", &[3]),
                &report("/workspace/../workspace/lib/calc.py"),
                tree
            ),
            nothing
        );
        assert_eq!(
            missed(
                &changed("lib/calc.py", &[3]),
                &report("/elsewhere/lib/calc.py"),
                tree
            ),
            nothing
        );
        // And the tail alone never matches: `../lib/calc.py` from the root climbs out of the tree.
        assert_eq!(
            missed(
                &changed("lib/calc.py", &[3]),
                &report("../lib/calc.py"),
                tree
            ),
            nothing
        );
    }

    #[test]
    fn a_name_two_source_roots_resolve_to_two_tree_files_is_ambiguous_and_lends_nothing() {
        let xml = br#"<coverage><sources><source>/workspace/lib</source><source>/workspace/a/lib</source></sources>
            <class filename="calc.py"><lines><line number="3" hits="1"/></lines></class></coverage>"#;
        let report = LineHits::parse(xml).unwrap();
        let got = uncovered(
            &changed("lib/calc.py", &[3]),
            &report,
            MOUNT,
            &tree_of(COPY_TREE),
        );
        assert_eq!(
            got.uncovered,
            vec![Uncovered {
                ambiguous: true,
                ..at("lib/calc.py", 3)
            }]
        );
        assert_eq!(
            got.ambiguous,
            vec![AmbiguousEntry {
                entry: "calc.py".into(),
                candidates: vec!["lib/calc.py".into(), "a/lib/calc.py".into()]
            }]
        );
    }

    #[test]
    fn an_honest_cobertura_with_a_package_source_root_resolves() {
        // pytest-cov with `--cov=lib`: the source is the package, names are relative to it.
        let xml = br#"<coverage><sources><source>/workspace/lib</source></sources>
            <class filename="calc.py"><lines><line number="2" hits="4"/><line number="3" hits="0"/></lines></class></coverage>"#;
        let report = LineHits::parse(xml).unwrap();
        assert_eq!(
            missed(&changed("lib/calc.py", &[2, 3]), &report, COPY_TREE),
            vec![at("lib/calc.py", 3)]
        );
    }

    #[test]
    fn more_source_roots_than_the_bound_make_the_report_malformed() {
        let sources: String = (0..=MAX_SOURCE_ROOTS)
            .map(|i| format!("<source>/workspace/s{i}</source>"))
            .collect();
        let xml = format!("<coverage><sources>{sources}</sources><class filename=\"a.py\"><lines><line number=\"1\" hits=\"1\"/></lines></class></coverage>");
        assert_eq!(
            LineHits::parse(xml.as_bytes()),
            Err(CoverageError::Cobertura(format!(
                "more than {MAX_SOURCE_ROOTS} <source> roots"
            )))
        );
    }
}
