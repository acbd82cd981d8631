//! The event stream of `go test -json` (test2json): one JSON object a line, parsed with
//! serde_json.
//!
//! Every test that reached `pass`, `fail` or `skip` is one entry with the id `package/TestName`
//! (subtests keep go's own `/` path: `package/TestName/sub`). A package's own `fail` with no
//! failing test in it (a build failure, a panic or an exit in TestMain) puts the package itself in
//! the failing set and in `incomplete` (as does go 1.24's `build-fail` event, by import path); a test that started but has no result in a package that
//! failed counts as failed (the binary died under it). A line that is not such an event, a
//! package without its final `pass`/`fail`/`skip` (a truncated stream) are errors. A failing
//! test's excerpt ([`super::excerpt`]) is its own `output` lines, go's `=== RUN`/`PAUSE`/`CONT`/
//! `NAME` framing lines left out.

use super::excerpt::Gathering;
use super::{
    bounded_id, lines, Format, Outcome, ParsedReport, Producer, ReportBuilder, ReportError,
};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "Action")]
    action: String,
    #[serde(rename = "Package", default)]
    package: String,
    #[serde(rename = "Test", default)]
    test: String,
    /// go >= 1.24 reports a build failure by import path, outside any package's events.
    #[serde(rename = "ImportPath", default)]
    import_path: String,
    #[serde(rename = "Output", default)]
    output: String,
}

#[derive(Default)]
struct Package {
    /// Tests started and not yet ended, by name.
    running: BTreeMap<String, usize>,
    /// What each test printed so far (bounded each), by name, until its result.
    output: BTreeMap<String, Gathering>,
    failed_tests: usize,
    result: Option<String>,
    last_line: usize,
}

/// Parse a `go test -json` stream.
pub fn parse(bytes: &[u8], report: &str) -> Result<ParsedReport, ReportError> {
    let mut packages: BTreeMap<String, Package> = BTreeMap::new();
    let mut builder = ReportBuilder::default();
    let mut incomplete = Vec::new();
    for line in lines(bytes, report, Format::GoJson) {
        let (number, line) = line?;
        if line.trim_ascii().is_empty() {
            continue;
        }
        let event: Event = serde_json::from_slice(line).map_err(|e| {
            ReportError::malformed(
                report,
                Format::GoJson,
                format!("line {number}"),
                format!(
                    "not a go test -json event ({e}): {}",
                    super::shown_bytes(line, 80)
                ),
            )
        })?;
        if event.package.is_empty() {
            if event.action == "build-fail" {
                builder.add_unit_failure(event.import_path.clone());
                incomplete.push(format!("{}: build failed", event.import_path));
            }
            continue;
        }
        let pkg = packages.entry(event.package.clone()).or_default();
        pkg.last_line = number;
        match (event.action.as_str(), event.test.is_empty()) {
            ("run", false) => *pkg.running.entry(event.test).or_default() += 1,
            ("output", false) => {
                if !is_framing(&event.output) {
                    pkg.output
                        .entry(event.test)
                        .or_default()
                        .push(&event.output);
                }
            }
            ("pass" | "fail" | "skip", false) => {
                if let Some(n) = pkg.running.get_mut(&event.test) {
                    *n -= 1;
                    if *n == 0 {
                        pkg.running.remove(&event.test);
                    }
                }
                let outcome = match event.action.as_str() {
                    "pass" => Outcome::Passed,
                    "fail" => {
                        pkg.failed_tests += 1;
                        Outcome::Failed
                    }
                    _ => Outcome::Skipped,
                };
                let id = bounded_id(
                    format!("{}/{}", event.package, event.test),
                    report,
                    Format::GoJson,
                    || format!("line {number}"),
                )?;
                let printed = pkg.output.remove(&event.test).unwrap_or_default();
                if outcome == Outcome::Failed {
                    builder.add_excerpt(&id, printed);
                }
                builder.add(id, outcome);
            }
            ("pass" | "fail" | "skip", true) => pkg.result = Some(event.action),
            _ => {}
        }
    }
    for (name, mut pkg) in packages {
        let Some(result) = pkg.result else {
            return Err(ReportError::malformed(
                report,
                Format::GoJson,
                format!("line {}", pkg.last_line),
                format!(
                    "truncated: package {} has no final pass/fail/skip event",
                    super::shown(&name)
                ),
            ));
        };
        for test in pkg.running.keys() {
            let id = format!("{name}/{test}");
            builder.add_excerpt(&id, pkg.output.remove(test).unwrap_or_default());
            builder.add(id, Outcome::Failed);
            incomplete.push(format!(
                "{name}/{test}: started and never ended (package {result})"
            ));
        }
        if result == "fail" && pkg.failed_tests == 0 && pkg.running.is_empty() {
            builder.add_unit_failure(name.clone());
            incomplete.push(format!(
                "{name}: package failed without a failing test (build failure, panic or exit)"
            ));
        }
    }
    Ok(builder.finish(Format::GoJson, Some(Producer::GoTest), None, incomplete))
}

/// go's own lines framing a test's output (`=== RUN   TestA`, `=== PAUSE`, `=== CONT`, `=== NAME`).
fn is_framing(output: &str) -> bool {
    ["=== RUN", "=== PAUSE", "=== CONT", "=== NAME"]
        .iter()
        .any(|p| output.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreport::{Counts, ReportProblem};

    fn ev(action: &str, pkg: &str, test: &str) -> String {
        if test.is_empty() {
            format!("{{\"Action\":\"{action}\",\"Package\":\"{pkg}\"}}\n")
        } else {
            format!("{{\"Action\":\"{action}\",\"Package\":\"{pkg}\",\"Test\":\"{test}\"}}\n")
        }
    }

    fn detail(text: &str) -> (String, String) {
        match parse(text.as_bytes(), "go.json").unwrap_err().problem {
            ReportProblem::Malformed {
                location, detail, ..
            } => (location, detail),
            other => panic!("not malformed: {other:?}"),
        }
    }

    #[test]
    fn results_become_sets_with_package_slash_test_ids() {
        let s = [
            ev("run", "m/p", "TestA"),
            ev("pass", "m/p", "TestA"),
            ev("run", "m/p", "TestB"),
            ev("run", "m/p", "TestB/sub"),
            ev("fail", "m/p", "TestB/sub"),
            ev("fail", "m/p", "TestB"),
            ev("run", "m/p", "TestC"),
            ev("skip", "m/p", "TestC"),
            ev("fail", "m/p", ""),
        ]
        .concat();
        let r = parse(s.as_bytes(), "go.json").unwrap();
        assert_eq!(
            r.failing.iter().collect::<Vec<_>>(),
            ["m/p/TestB", "m/p/TestB/sub"]
        );
        assert_eq!(r.skipped.iter().collect::<Vec<_>>(), ["m/p/TestC"]);
        assert_eq!(
            r.counts,
            Counts {
                total: 4,
                passed: 1,
                failed: 2,
                skipped: 1
            }
        );
        assert!(r.incomplete.is_empty());
    }

    #[test]
    fn a_package_failing_without_a_failing_test_fails_as_a_unit() {
        let s = [ev("output", "m/p", ""), ev("fail", "m/p", "")].concat();
        let r = parse(s.as_bytes(), "go.json").unwrap();
        assert_eq!(r.failing.iter().collect::<Vec<_>>(), ["m/p"]);
        assert_eq!(r.collected.len(), 0);
        assert_eq!(r.incomplete.len(), 1);
    }

    #[test]
    fn a_build_failure_reported_by_import_path_fails_as_a_unit() {
        let s = "{\"ImportPath\":\"m/p [m/p.test]\",\"Action\":\"build-output\",\"Output\":\"x.go:1: bad\\n\"}\n\
                 {\"ImportPath\":\"m/p [m/p.test]\",\"Action\":\"build-fail\"}\n"
            .to_string()
            + &ev("start", "m/p", "")
            + &ev("fail", "m/p", "");
        let r = parse(s.as_bytes(), "go.json").unwrap();
        assert_eq!(
            r.failing.iter().collect::<Vec<_>>(),
            ["m/p", "m/p [m/p.test]"]
        );
    }

    #[test]
    fn a_test_that_never_ended_in_a_failed_package_counts_as_failed() {
        let s = [ev("run", "m/p", "TestA"), ev("fail", "m/p", "")].concat();
        let r = parse(s.as_bytes(), "go.json").unwrap();
        assert_eq!(r.failing.iter().collect::<Vec<_>>(), ["m/p/TestA"]);
        assert_eq!(
            r.incomplete,
            vec!["m/p/TestA: started and never ended (package fail)".to_string()]
        );
    }

    #[test]
    fn a_garbage_line_is_an_error_naming_its_line() {
        let s = [
            ev("run", "m/p", "TestA"),
            "panic: oops\n".to_string(),
            ev("pass", "m/p", "TestA"),
        ]
        .concat();
        let (location, detail) = detail(&s);
        assert_eq!(location, "line 2");
        assert!(detail.starts_with("not a go test -json event"), "{detail}");
    }

    #[test]
    fn a_stream_cut_before_the_package_result_is_truncated() {
        let s = [ev("run", "m/p", "TestA"), ev("pass", "m/p", "TestA")].concat();
        assert_eq!(
            detail(&s),
            (
                "line 2".to_string(),
                "truncated: package m/p has no final pass/fail/skip event".to_string()
            )
        );
    }

    #[test]
    fn a_line_over_the_cap_is_an_error() {
        let s = format!(
            "{}{}\n",
            ev("run", "m/p", "TestA"),
            "x".repeat(10 * 1024 * 1024)
        );
        let (location, detail) = detail(&s);
        assert_eq!(location, "line 2");
        assert!(detail.contains("longer than"), "{detail}");
    }
}
