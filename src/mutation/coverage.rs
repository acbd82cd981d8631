//! The coverage-delta tier: every substantive line the agent changed must be executed by the
//! check, as a coverage report the check wrote says (lcov through the `lcov` crate, Cobertura XML
//! through quick-xml). The report is the check's output, so hostile: it is parsed from a bounded
//! buffer, without recursion, and its paths only ever name lines, never files to open.

use std::collections::{BTreeMap, BTreeSet};

use quick_xml::events::Event;
use serde::{Deserialize, Serialize};

/// Largest coverage report read (bytes).
pub const MAX_REPORT_BYTES: u64 = 64 * 1024 * 1024;

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

/// Hits per line per file, as a report gave them (paths as written in the report).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineHits {
    files: BTreeMap<String, BTreeMap<u32, u64>>,
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
        lines.fold((0, 0), |(covered, coverable), &hits| (covered + u64::from(hits > 0), coverable + 1))
    }

    /// The report's lines of the repository-relative `path`: an entry equal to it or ending in
    /// `/path` (reports name files absolutely or relative to a source root).
    fn of(&self, path: &str) -> Option<&BTreeMap<u32, u64>> {
        let suffix = format!("/{path}");
        self.files.iter().find(|(p, _)| p.as_str() == path || p.ends_with(&suffix)).map(|(_, lines)| lines)
    }
}

fn lcov_hits(bytes: &[u8]) -> Result<LineHits, CoverageError> {
    let mut hits = LineHits::default();
    let mut current: Option<String> = None;
    for record in lcov::Reader::new(bytes) {
        match record.map_err(|e| CoverageError::Lcov(e.to_string()))? {
            lcov::Record::SourceFile { path } => current = Some(path.to_string_lossy().into_owned()),
            lcov::Record::LineData { line, count, .. } => {
                let file = current.clone().ok_or_else(|| CoverageError::Lcov(format!("DA:{line} before any SF record")))?;
                *hits.files.entry(file).or_default().entry(line).or_default() += count;
            }
            lcov::Record::EndOfRecord => current = None,
            _ => {}
        }
    }
    Ok(hits)
}

fn attribute(e: &quick_xml::events::BytesStart<'_>, name: &[u8]) -> Result<Option<String>, CoverageError> {
    for a in e.attributes() {
        let a = a.map_err(|err| CoverageError::Cobertura(err.to_string()))?;
        if a.key.as_ref() == name {
            let v = a.unescape_value().map_err(|err| CoverageError::Cobertura(err.to_string()))?;
            return Ok(Some(v.into_owned()));
        }
    }
    Ok(None)
}

fn cobertura_hits(bytes: &[u8]) -> Result<LineHits, CoverageError> {
    let mut reader = quick_xml::Reader::from_reader(bytes);
    let mut hits = LineHits::default();
    let mut class: Option<String> = None;
    let mut buf = Vec::new();
    loop {
        let event = reader.read_event_into(&mut buf).map_err(|e| CoverageError::Cobertura(e.to_string()))?;
        match &event {
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"class" => class = attribute(e, b"filename")?,
                // `<line>` of a class's `<lines>`; those under `<methods>` repeat them.
                b"line" => {
                    if let Some(file) = &class {
                        let number = attribute(e, b"number")?.and_then(|n| n.parse::<u32>().ok());
                        let count = attribute(e, b"hits")?.and_then(|h| h.parse::<u64>().ok());
                        let (Some(number), Some(count)) = (number, count) else {
                            return Err(CoverageError::Cobertura(format!("a <line> of {file} without a numeric number and hits")));
                        };
                        let entry = hits.files.entry(file.clone()).or_default().entry(number).or_default();
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
}

/// The changed lines (per file, substantive lines only) that `report` shows with zero hits or,
/// for a file the report does not name, all of them. Lines the report does not instrument
/// (a closing brace, a `def` line some tools skip) are not counted against the check.
pub fn uncovered(changed: &BTreeMap<String, BTreeSet<u32>>, report: &LineHits) -> Vec<Uncovered> {
    let mut out = Vec::new();
    for (path, lines) in changed {
        match report.of(path) {
            None => out.extend(lines.iter().map(|&line| Uncovered { path: path.clone(), line, file_missing: true })),
            Some(hits) => out.extend(
                lines.iter().filter(|l| hits.get(l) == Some(&0)).map(|&line| Uncovered { path: path.clone(), line, file_missing: false }),
            ),
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

    #[test]
    fn lcov_lines_with_zero_hits_are_uncovered() {
        let report = LineHits::parse(b"TN:\nSF:/work/src/calc.py\nDA:1,1\nDA:2,0\nDA:3,4\nend_of_record\n").unwrap();
        let got = uncovered(&changed("src/calc.py", &[2, 3, 9]), &report);
        assert_eq!(got, vec![Uncovered { path: "src/calc.py".into(), line: 2, file_missing: false }]);
    }

    #[test]
    fn cobertura_lines_with_zero_hits_are_uncovered() {
        let xml = br#"<?xml version="1.0"?><coverage><packages><package><classes>
            <class filename="calc.py"><methods/><lines><line number="1" hits="3"/><line number="2" hits="0"/></lines></class>
            </classes></package></packages></coverage>"#;
        let report = LineHits::parse(xml).unwrap();
        let got = uncovered(&changed("calc.py", &[1, 2]), &report);
        assert_eq!(got, vec![Uncovered { path: "calc.py".into(), line: 2, file_missing: false }]);
    }

    #[test]
    fn a_changed_file_the_report_does_not_name_is_uncovered_whole() {
        let report = LineHits::parse(b"SF:other.py\nDA:1,1\nend_of_record\n").unwrap();
        let got = uncovered(&changed("calc.py", &[4]), &report);
        assert_eq!(got, vec![Uncovered { path: "calc.py".into(), line: 4, file_missing: true }]);
    }

    #[test]
    fn totals_count_executed_and_instrumented_lines_over_every_file() {
        let report = LineHits::parse(b"SF:a.py\nDA:1,1\nDA:2,0\nend_of_record\nSF:b.py\nDA:1,0\nDA:7,2\nend_of_record\n").unwrap();
        assert_eq!(report.totals(), (2, 4));
    }

    #[test]
    fn a_malformed_report_is_an_error_naming_its_format() {
        assert!(matches!(LineHits::parse(b"SF:a.py\nDA:x,y\n"), Err(CoverageError::Lcov(_))));
        assert!(matches!(LineHits::parse(b"<coverage><class filename=\"a\"><line number=\"z\"/></class></coverage>"), Err(CoverageError::Cobertura(_))));
        assert_eq!(LineHits::parse(b""), Err(CoverageError::Empty));
    }
}
