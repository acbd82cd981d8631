//! The failing set of a check, read from the JUnit XML report it writes.
//!
//! The report is read from the workdir without following symlinks (it is written by untrusted
//! code), bounded in size, and parsed with a real XML parser. The failing set is the sorted,
//! de-duplicated list of `classname::name` of every `<testcase>` with a `<failure>` or `<error>`;
//! the collected set is the same list over every `<testcase>` of the report, whatever its result
//! (what the check ran: a dropped test shows as a smaller collected set).

use crate::safefs::SafeDir;
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

/// Largest report accepted.
pub const MAX_REPORT_BYTES: u64 = 16 * 1024 * 1024;

/// Why no failing set could be read.
#[derive(Debug, thiserror::Error)]
pub enum JunitError {
    #[error("junit report {path}: {detail}")]
    Unreadable { path: String, detail: String },
    #[error("junit report {path}: malformed XML at byte {position}: {detail}")]
    Malformed { path: String, position: u64, detail: String },
}

fn attr(start: &BytesStart<'_>, key: &[u8]) -> String {
    start
        .attributes()
        .flatten()
        .find(|a| a.key.as_ref() == key)
        .and_then(|a| a.unescape_value().ok().map(|v| v.into_owned()))
        .unwrap_or_default()
}

fn testcase_id(start: &BytesStart<'_>) -> String {
    format!("{}::{}", attr(start, b"classname"), attr(start, b"name"))
}

/// What a report says: the failing set and the collected set, each sorted and de-duplicated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReportSets {
    pub failing: Vec<String>,
    pub collected: Vec<String>,
}

/// Parse report bytes into the failing set.
pub fn parse_failing_set(bytes: &[u8], path: &str) -> Result<Vec<String>, JunitError> {
    parse_report(bytes, path).map(|sets| sets.failing)
}

/// Parse report bytes into the failing and collected sets.
pub fn parse_report(bytes: &[u8], path: &str) -> Result<ReportSets, JunitError> {
    let mut reader = Reader::from_reader(bytes);
    let mut buf = Vec::new();
    let mut current: Option<(String, bool)> = None;
    let mut failing = Vec::new();
    let mut collected = Vec::new();
    let mut saw_root = false;
    loop {
        let event = reader.read_event_into(&mut buf).map_err(|e| JunitError::Malformed {
            path: path.to_string(),
            position: reader.error_position(),
            detail: e.to_string(),
        })?;
        match event {
            Event::Start(e) => {
                saw_root = true;
                match e.name().as_ref() {
                    b"testcase" => {
                        let id = testcase_id(&e);
                        collected.push(id.clone());
                        current = Some((id, false));
                    }
                    b"failure" | b"error" => {
                        if let Some((_, failed)) = current.as_mut() {
                            *failed = true;
                        }
                    }
                    _ => {}
                }
            }
            Event::Empty(e) => {
                saw_root = true;
                match e.name().as_ref() {
                    b"failure" | b"error" => {
                        if let Some((_, failed)) = current.as_mut() {
                            *failed = true;
                        }
                    }
                    b"testcase" => collected.push(testcase_id(&e)),
                    _ => {}
                }
            }
            Event::End(e) if e.name().as_ref() == b"testcase" => {
                if let Some((id, true)) = current.take() {
                    failing.push(id);
                }
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    if !saw_root {
        return Err(JunitError::Malformed { path: path.to_string(), position: 0, detail: "no XML element".into() });
    }
    failing.sort();
    failing.dedup();
    collected.sort();
    collected.dedup();
    Ok(ReportSets { failing, collected })
}

/// Read `rel` beneath the workdir and return its failing set.
pub fn failing_set(workdir: &SafeDir, rel: &str) -> Result<Vec<String>, JunitError> {
    read_report(workdir, rel).map(|sets| sets.failing)
}

/// Read `rel` beneath the workdir and return its failing and collected sets.
pub fn read_report(workdir: &SafeDir, rel: &str) -> Result<ReportSets, JunitError> {
    let bytes = workdir
        .read(rel, MAX_REPORT_BYTES)
        .map_err(|e| JunitError::Unreadable { path: rel.to_string(), detail: e.to_string() })?;
    parse_report(&bytes, rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_and_errors_form_the_sorted_failing_set() {
        let xml = br#"<?xml version="1.0"?>
<testsuites><testsuite name="s">
  <testcase classname="b" name="two"><failure message="x"/></testcase>
  <testcase classname="a" name="one"><error>boom</error></testcase>
  <testcase classname="a" name="ok"/>
  <testcase classname="c" name="skip"><skipped/></testcase>
</testsuite></testsuites>"#;
        assert_eq!(parse_failing_set(xml, "r.xml").unwrap(), vec!["a::one".to_string(), "b::two".to_string()]);
    }

    #[test]
    fn every_testcase_is_collected_whatever_its_result() {
        let xml = br#"<testsuite>
  <testcase classname="b" name="two"><failure/></testcase>
  <testcase classname="a" name="ok"/>
  <testcase classname="a" name="ok"/>
  <testcase classname="c" name="skip"><skipped/></testcase>
</testsuite>"#;
        let sets = parse_report(xml, "r.xml").unwrap();
        assert_eq!(sets.collected, vec!["a::ok".to_string(), "b::two".to_string(), "c::skip".to_string()]);
        assert_eq!(sets.failing, vec!["b::two".to_string()]);
    }

    #[test]
    fn a_malformed_report_is_an_error_not_an_empty_set() {
        let err = parse_failing_set(b"<testsuite><testcase name='x'></testsuite>", "r.xml").unwrap_err();
        assert!(matches!(err, JunitError::Malformed { .. }), "{err}");
        assert!(parse_failing_set(b"", "r.xml").is_err());
    }

    #[test]
    fn a_symlinked_report_is_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("real.xml"), b"<testsuite/>").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("real.xml"), tmp.path().join("r.xml")).unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        assert!(matches!(failing_set(&dir, "r.xml"), Err(JunitError::Unreadable { .. })));
    }
}
