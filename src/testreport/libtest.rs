//! libtest's own output (what `cargo test` prints), read from the captured stdout, so a Rust
//! check needs no report file.
//!
//! Each test binary prints `running N tests`, one `test NAME ... ok|FAILED|ignored` line per
//! test and `test result: ok|FAILED. P passed; F failed; I ignored; M measured; X filtered out`.
//! Cargo names the binary before it on stderr (`Running unittests src/lib.rs (…/deps/NAME-HASH)`,
//! `Running tests/it.rs (…)`, `Doc-tests NAME`); with stdout and stderr captured apart the two are
//! paired in order, with `2>&1` the labels are read inline. A test's id is `BINARY::NAME`, where
//! BINARY is `NAME` for a library's unit tests, `bin/NAME`, `example/NAME`, `bench/NAME`,
//! `test/NAME` for an integration test target, `doc/CRATE` for doctests, and `#K` (the K-th
//! binary) when no label was captured; NAME is what libtest prints between `test ` and ` ... `
//! (its ` - should panic` / ` - compile` marks included, so a changed attribute changes the id),
//! except that a doctest's ` (line N)` is dropped ([`doctest_identity`]): a doctest is named by
//! its file and item (`doc/CRATE::src/lib.rs - f`), so an edit that shifts lines above it keeps
//! its id, and two doctests of one item share that id (counted, see
//! [`super::ParsedReport::collected_repeats`]).
//!
//! A binary that printed `running N tests` and no `test result:` line ended abnormally; one that
//! cargo started and that printed nothing did too; a block whose lines do not add up to its own
//! counts was cut or interleaved. Each of these lands in the report's `incomplete` list.
//!
//! A failing test's excerpt ([`super::excerpt`]) is its `---- NAME stdout ----` section of the
//! `failures:` replay: what the test printed and its panic message.

use super::excerpt::Gathering;
use super::{
    bounded_id, lines, output_lines, Counts, Format, Outcome, ParsedReport, Producer,
    ReportBuilder, ReportError,
};

/// A doctest's name without its line number: rustdoc names a doctest `FILE - ITEM (line N)`,
/// followed by marks such as ` - compile` or ` - should panic`; the ` (line N)` goes, the rest
/// stays. A name of any other shape (a unit test's path has no ` - `) is returned as it is.
pub fn doctest_identity(name: &str) -> std::borrow::Cow<'_, str> {
    let Some(dash) = name.find(" - ") else {
        return name.into();
    };
    let mut from = dash + 2;
    while let Some(at) = name[from..].find(" (line ").map(|i| from + i) {
        let digits_start = at + " (line ".len();
        let digits = name[digits_start..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        if digits > 0 && name[digits_start + digits..].starts_with(')') {
            let end = digits_start + digits + 1;
            let rest = &name[end..];
            if rest.is_empty() || rest.starts_with(" - ") {
                return format!("{}{rest}", &name[..at]).into();
            }
        }
        from = digits_start;
    }
    name.into()
}

/// One `test result:` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultLine {
    pub line: usize,
    pub ok: bool,
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    pub measured: u64,
    pub filtered_out: u64,
}

/// One test binary's block of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    pub key: String,
    /// Cargo's line naming the binary, when captured.
    pub label: Option<String>,
    /// The line of `running N tests` and its N; `None` when the binary printed nothing.
    pub running: Option<(usize, u64)>,
    pub tests: Vec<(String, Outcome)>,
    /// Results libtest's terse format (`cargo test -q`) printed as `.`, `F` and `i`, unnamed.
    pub terse: u64,
    pub result: Option<ResultLine>,
    /// The `---- NAME stdout ----` sections of the failures replay, by NAME as the header spells it.
    pub excerpts: Vec<(String, Gathering)>,
}

/// Every test binary found in a capture, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LibtestRun {
    pub binaries: Vec<Binary>,
}

/// Whether a line is libtest's `running N tests` (or `running 1 test`).
pub fn is_running_line(line: &[u8]) -> bool {
    running_count(&String::from_utf8_lossy(line)).is_some()
}

fn running_count(line: &str) -> Option<u64> {
    let rest = line.strip_prefix("running ")?;
    let (n, word) = rest.split_once(' ')?;
    matches!(word, "tests" | "test").then_some(())?;
    n.parse().ok()
}

/// The binary key cargo's label line gives, or `None` when the line is no label.
fn label_key(line: &str) -> Option<String> {
    let line = line.trim();
    if let Some(krate) = line.strip_prefix("Doc-tests ") {
        return Some(format!("doc/{}", krate.trim()));
    }
    let rest = line.strip_prefix("Running ")?;
    let (unit, rest) = match rest.strip_prefix("unittests ") {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let (source, path) = match rest.rsplit_once(" (") {
        Some((source, path)) => (source.trim(), path.trim_end_matches(')')),
        None => ("", rest),
    };
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = match file.rsplit_once('-') {
        Some((stem, hash)) if !hash.is_empty() && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            stem
        }
        _ => file,
    };
    let kind = if source.starts_with("src/bin/") || source == "src/main.rs" {
        Some("bin")
    } else if source.starts_with("examples/") {
        Some("example")
    } else if source.starts_with("benches/") {
        Some("bench")
    } else if unit || source.is_empty() {
        None
    } else {
        Some("test")
    };
    Some(match kind {
        Some(kind) => format!("{kind}/{stem}"),
        None => stem.to_string(),
    })
}

fn parse_result_line(line: &str, number: usize) -> Option<ResultLine> {
    let rest = line.strip_prefix("test result: ")?;
    let (status, counts) = rest.split_once(". ")?;
    let ok = match status {
        "ok" => true,
        "FAILED" => false,
        _ => return None,
    };
    let mut r = ResultLine {
        line: number,
        ok,
        passed: 0,
        failed: 0,
        ignored: 0,
        measured: 0,
        filtered_out: 0,
    };
    for part in counts.split(';') {
        let part = part.trim();
        let Some((n, what)) = part.split_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        match what {
            "passed" => r.passed = n,
            "failed" => r.failed = n,
            "ignored" => r.ignored = n,
            "measured" => r.measured = n,
            "filtered out" => r.filtered_out = n,
            _ => {}
        }
    }
    Some(r)
}

/// `test NAME ... RESULT` as (NAME, RESULT or `None` when the result is not on this line).
fn parse_test_line(line: &str) -> Option<(&str, Option<Outcome>)> {
    let rest = line.strip_prefix("test ")?;
    if rest.starts_with("result: ") {
        return None;
    }
    let (name, result) = rest.rsplit_once(" ...")?;
    Some((name, outcome_word(result.trim())))
}

/// The NAME of a replay section's header, `---- NAME stdout ----` (or `stderr`).
fn section_header(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("---- ")?;
    rest.strip_suffix(" stdout ----")
        .or_else(|| rest.strip_suffix(" stderr ----"))
}

/// The section being read, kept by its binary (none: there is no binary to keep it).
fn close_section(section: &mut Option<(String, Gathering)>, block: Option<&mut Binary>) {
    if let (Some(done), Some(block)) = (section.take(), block) {
        block.excerpts.push(done);
    }
}

/// A line of the terse format's results (`..i.F`, with ` 88/100` progress on long runs).
fn terse_results(line: &str) -> Option<u64> {
    let marks = line.split(' ').next()?;
    if marks.is_empty() || !marks.chars().all(|c| matches!(c, '.' | 'F' | 'i')) {
        return None;
    }
    let rest = line[marks.len()..].trim();
    let progress = rest
        .split_once('/')
        .is_some_and(|(a, b)| a.parse::<u64>().is_ok() && b.parse::<u64>().is_ok());
    (rest.is_empty() || progress).then_some(marks.len() as u64)
}

fn outcome_word(word: &str) -> Option<Outcome> {
    let first = word.split([' ', ',']).next().unwrap_or("");
    match first {
        "ok" => Some(Outcome::Passed),
        "FAILED" => Some(Outcome::Failed),
        "ignored" => Some(Outcome::Skipped),
        _ => None,
    }
}

/// Read libtest blocks out of captured stdout, with cargo's labels from `stderr` when it was
/// captured apart (labels printed inline in `stdout` win). Over-long lines are passed over.
pub fn parse_output(
    stdout: &[u8],
    stderr: Option<&[u8]>,
    name: &str,
) -> Result<LibtestRun, ReportError> {
    parse_lines(stdout, stderr, name, false)
}

/// `strict`: a saved report, where an over-long line is an error.
fn parse_lines(
    stdout: &[u8],
    stderr: Option<&[u8]>,
    name: &str,
    strict: bool,
) -> Result<LibtestRun, ReportError> {
    let split = |bytes| {
        if strict {
            lines(bytes, name, Format::Libtest)
        } else {
            output_lines(bytes, name)
        }
    };
    let mut blocks: Vec<Binary> = Vec::new();
    let mut inline_label: Option<String> = None;
    let mut saw_inline_label = false;
    let mut open = false;
    let mut pending: Option<String> = None;
    // After `failures:` / `successes:` libtest replays the tests' own output: no result lines there.
    let mut replaying = false;
    // The `---- NAME stdout ----` section being read, in the replay.
    let mut section: Option<(String, Gathering)> = None;
    for line in split(stdout) {
        let (number, raw) = line?;
        let lossy = String::from_utf8_lossy(raw);
        let text = super::without_colours(&lossy);
        let text = text.as_ref();
        if let Some(n) = running_count(text) {
            close_section(&mut section, blocks.last_mut());
            blocks.push(Binary {
                key: String::new(),
                label: inline_label.take(),
                running: Some((number, n)),
                tests: Vec::new(),
                terse: 0,
                result: None,
                excerpts: Vec::new(),
            });
            open = true;
            pending = None;
            replaying = false;
            continue;
        }
        if label_key(text).is_some()
            && (text.starts_with(' ')
                || text.starts_with("Running")
                || text.starts_with("Doc-tests"))
        {
            if let Some(label) = inline_label.replace(text.trim().to_string()) {
                blocks.push(Binary {
                    key: String::new(),
                    label: Some(label),
                    running: None,
                    tests: Vec::new(),
                    terse: 0,
                    result: None,
                    excerpts: Vec::new(),
                });
            }
            saw_inline_label = true;
            open = false;
            continue;
        }
        let Some(block) = blocks.last_mut().filter(|_| open) else {
            continue;
        };
        if let Some(result) = parse_result_line(text, number) {
            close_section(&mut section, Some(&mut *block));
            block.result = Some(result);
            open = false;
            continue;
        }
        if text == "failures:" || text == "successes:" {
            close_section(&mut section, Some(&mut *block));
            replaying = true;
            continue;
        }
        if replaying {
            if let Some(name) = section_header(text) {
                close_section(&mut section, Some(&mut *block));
                section = Some((name.to_string(), Gathering::default()));
            } else if let Some((_, gathering)) = section.as_mut() {
                gathering.push_line(text);
            }
            continue;
        }
        if let Some(n) = terse_results(text) {
            block.terse = block.terse.saturating_add(n);
            continue;
        }
        if let Some((test, outcome)) = parse_test_line(text) {
            let test = bounded_id(test.to_string(), name, Format::Libtest, || {
                format!("line {number}")
            })?;
            match outcome {
                Some(o) => block.tests.push((test, o)),
                None => pending = Some(test),
            }
            continue;
        }
        if let Some(test) = pending.take() {
            match outcome_word(text.trim()) {
                Some(o) if text.trim().len() < 200 => block.tests.push((test, o)),
                _ => pending = Some(test),
            }
        }
    }
    if let Some(label) = inline_label.take() {
        blocks.push(Binary {
            key: String::new(),
            label: Some(label),
            running: None,
            tests: Vec::new(),
            terse: 0,
            result: None,
            excerpts: Vec::new(),
        });
    }
    if !saw_inline_label {
        if let Some(stderr) = stderr {
            let mut labels = Vec::new();
            for line in split(stderr) {
                let (_, raw) = line?;
                let text = String::from_utf8_lossy(raw);
                if label_key(&text).is_some() && text.starts_with(' ') {
                    labels.push(text.trim().to_string());
                }
            }
            let mut labels = labels.into_iter();
            for block in blocks.iter_mut() {
                block.label = labels.next();
            }
            for label in labels {
                blocks.push(Binary {
                    key: String::new(),
                    label: Some(label),
                    running: None,
                    tests: Vec::new(),
                    terse: 0,
                    result: None,
                    excerpts: Vec::new(),
                });
            }
        }
    }
    let mut used: Vec<String> = Vec::new();
    for (i, block) in blocks.iter_mut().enumerate() {
        let base = match block.label.as_deref().and_then(label_key) {
            Some(key) => key,
            None => format!("#{}", i + 1),
        };
        let mut key = base.clone();
        let mut n = 1;
        while used.contains(&key) {
            n += 1;
            key = format!("{base}#{n}");
        }
        used.push(key.clone());
        block.key = key;
    }
    Ok(LibtestRun { binaries: blocks })
}

impl Binary {
    /// What is wrong with this block: it ended without its summary, or its lines do not add up.
    pub fn problems(&self) -> Vec<String> {
        let key = super::shown(&self.key);
        let Some((_, declared)) = self.running else {
            return vec![format!("{key}: cargo started the binary and it printed no `running N tests` line (it exited abnormally)")];
        };
        let Some(result) = &self.result else {
            return vec![format!("{key}: printed `running {declared} tests` and no `test result:` line (it exited abnormally)")];
        };
        if self.tests.is_empty() && self.terse > 0 {
            return vec![format!(
                "{key}: terse output (`cargo test -q`) names no test; run the check without -q so each test is named"
            )];
        }
        let mut problems = Vec::new();
        let summed = result
            .passed
            .saturating_add(result.failed)
            .saturating_add(result.ignored)
            .saturating_add(result.measured);
        if summed != declared {
            problems.push(format!(
                "{key}: `running {declared} tests` but its `test result:` line adds up to {summed}"
            ));
        }
        if self.tests.len() as u64 != declared {
            problems.push(format!(
                "{key}: `running {declared} tests` but {} `test ... ` result lines",
                self.tests.len()
            ));
        }
        let failed_lines = self
            .tests
            .iter()
            .filter(|(_, o)| *o == Outcome::Failed)
            .count() as u64;
        if failed_lines != result.failed {
            problems.push(format!(
                "{key}: its `test result:` line says {} failed, its test lines {failed_lines}",
                result.failed
            ));
        }
        if result.ok != (result.failed == 0) {
            problems.push(format!(
                "{key}: `test result: {}` with {} failed",
                if result.ok { "ok" } else { "FAILED" },
                result.failed
            ));
        }
        problems
    }
}

impl LibtestRun {
    /// The run as a report: ids `BINARY::NAME`, the result lines summed as declared counts, every
    /// block's problems as `incomplete`.
    pub fn to_report(&self, name: &str) -> Result<ParsedReport, ReportError> {
        let mut builder = ReportBuilder::default();
        let mut declared = Some(Counts::default());
        let mut incomplete = Vec::new();
        for binary in &self.binaries {
            for (test, outcome) in &binary.tests {
                let test = doctest_identity(test);
                let id = bounded_id(
                    format!("{}::{test}", binary.key),
                    name,
                    Format::Libtest,
                    || binary.key.clone(),
                )?;
                builder.add(id, *outcome);
            }
            for (section, gathering) in &binary.excerpts {
                // The header names the test without libtest's ` - should panic` mark.
                let marked = format!("{section} - ");
                let failed = binary
                    .tests
                    .iter()
                    .filter(|(_, o)| *o == Outcome::Failed)
                    .map(|(t, _)| t);
                let test = failed
                    .clone()
                    .find(|t| *t == section)
                    .or_else(|| failed.clone().find(|t| t.starts_with(&marked)));
                if let Some(test) = test {
                    builder.add_excerpt(
                        &format!("{}::{}", binary.key, doctest_identity(test)),
                        gathering.clone(),
                    );
                }
            }
            match (&binary.result, declared.as_mut()) {
                (Some(r), Some(d)) => {
                    // The check printed these numbers: summed saturating, never overflowing.
                    let all = r
                        .passed
                        .saturating_add(r.failed)
                        .saturating_add(r.ignored)
                        .saturating_add(r.measured);
                    d.total = d.total.saturating_add(all);
                    d.passed = d.passed.saturating_add(r.passed.saturating_add(r.measured));
                    d.failed = d.failed.saturating_add(r.failed);
                    d.skipped = d.skipped.saturating_add(r.ignored);
                }
                _ => declared = None,
            }
            incomplete.extend(binary.problems());
        }
        Ok(builder.finish(
            Format::Libtest,
            Some(Producer::Libtest),
            declared,
            incomplete,
        ))
    }
}

/// A saved libtest output as a report file (no stderr labels: binaries are keyed `#K` unless
/// the file holds cargo's labels inline, as `cargo test 2>&1 > file` does).
pub fn parse_report(bytes: &[u8], report: &str) -> Result<ParsedReport, ReportError> {
    let run = parse_lines(bytes, None, report, true)?;
    if run.binaries.is_empty() {
        return Err(ReportError::malformed(
            report,
            Format::Libtest,
            "line 1".into(),
            "no `running N tests` line",
        ));
    }
    run.to_report(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIB: &str = "\nrunning 3 tests\ntest a::one ... ok\ntest a::two ... FAILED\ntest a::three ... ignored, slow\n\nfailures:\n    a::two\n\ntest result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";

    #[test]
    fn labels_name_the_binaries_by_target_kind() {
        assert_eq!(
            label_key(
                "     Running unittests src/lib.rs (target/debug/deps/sample-e6daf73c296d6df0)"
            )
            .as_deref(),
            Some("sample")
        );
        assert_eq!(
            label_key(
                "     Running unittests src/main.rs (target/debug/deps/sample-8917508c3a363e88)"
            )
            .as_deref(),
            Some("bin/sample")
        );
        assert_eq!(
            label_key("     Running unittests src/bin/tool.rs (target/debug/deps/tool-0a)")
                .as_deref(),
            Some("bin/tool")
        );
        assert_eq!(
            label_key("     Running tests/it.rs (target/debug/deps/it-14fb52c9beb4c1fa)")
                .as_deref(),
            Some("test/it")
        );
        assert_eq!(
            label_key("   Doc-tests sample").as_deref(),
            Some("doc/sample")
        );
        assert_eq!(label_key("running 3 tests"), None);
    }

    #[test]
    fn a_block_becomes_entries_keyed_by_its_stderr_label() {
        let stderr = b"     Running unittests src/lib.rs (target/debug/deps/demo-0123abcd)\n";
        let r = parse_output(LIB.as_bytes(), Some(stderr), "stdout")
            .unwrap()
            .to_report("stdout")
            .unwrap();
        assert_eq!(
            r.collected.iter().collect::<Vec<_>>(),
            ["demo::a::one", "demo::a::three", "demo::a::two"]
        );
        assert_eq!(r.failing.iter().collect::<Vec<_>>(), ["demo::a::two"]);
        assert_eq!(r.skipped.iter().collect::<Vec<_>>(), ["demo::a::three"]);
        assert_eq!(r.declared, Some(r.counts));
        assert!(r.incomplete.is_empty(), "{:?}", r.incomplete);
    }

    #[test]
    fn without_labels_binaries_are_keyed_by_their_order() {
        let r = parse_output(LIB.as_bytes(), None, "stdout").unwrap();
        assert_eq!(r.binaries[0].key, "#1");
    }

    #[test]
    fn inline_labels_from_a_merged_stream_are_used() {
        let merged = format!("     Running tests/it.rs (target/debug/deps/it-00ff)\n{LIB}");
        let r = parse_output(merged.as_bytes(), None, "out").unwrap();
        assert_eq!(r.binaries.len(), 1);
        assert_eq!(r.binaries[0].key, "test/it");
    }

    #[test]
    fn a_binary_without_its_result_line_ended_abnormally() {
        let out = "running 2 tests\ntest a ... ok\n";
        let r = parse_output(out.as_bytes(), None, "stdout").unwrap();
        assert_eq!(
            r.binaries[0].problems(),
            vec![
                "#1: printed `running 2 tests` and no `test result:` line (it exited abnormally)"
                    .to_string()
            ]
        );
    }

    #[test]
    fn a_binary_cargo_started_that_printed_nothing_ended_abnormally() {
        let stderr = b"     Running unittests src/lib.rs (target/debug/deps/demo-0a)\n     Running tests/it.rs (target/debug/deps/it-0b)\n";
        let r = parse_output(LIB.as_bytes(), Some(stderr), "stdout").unwrap();
        assert_eq!(r.binaries.len(), 2);
        assert_eq!(
            r.binaries[1].problems(),
            vec!["test/it: cargo started the binary and it printed no `running N tests` line (it exited abnormally)".to_string()]
        );
    }

    #[test]
    fn a_result_line_that_does_not_add_up_is_a_problem() {
        let out = "running 2 tests\ntest a ... ok\ntest b ... ok\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n";
        let r = parse_output(out.as_bytes(), None, "stdout").unwrap();
        assert_eq!(
            r.binaries[0].problems(),
            vec!["#1: `running 2 tests` but its `test result:` line adds up to 1".to_string()]
        );
    }

    #[test]
    fn result_numbers_whose_sum_passes_u64_saturate_rather_than_overflow() {
        let max = u64::MAX;
        let out = format!("running 1 test\ntest a ... ok\ntest result: ok. {max} passed; {max} failed; {max} ignored; {max} measured; 0 filtered out\n").repeat(2);
        let r = parse_output(out.as_bytes(), None, "stdout").unwrap();
        assert_eq!(
            r.binaries[0].problems()[0],
            format!("#1: `running 1 tests` but its `test result:` line adds up to {max}")
        );
        let report = r.to_report("stdout").unwrap();
        assert_eq!(
            report.declared,
            Some(Counts {
                total: max,
                passed: max,
                failed: max,
                skipped: max
            })
        );
    }

    #[test]
    fn a_result_printed_after_the_tests_own_output_completes_the_line() {
        let out = "running 1 test\ntest a ... hello from the test\nok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n";
        let r = parse_output(out.as_bytes(), None, "stdout").unwrap();
        assert_eq!(
            r.binaries[0].tests,
            vec![("a".to_string(), Outcome::Passed)]
        );
    }

    #[test]
    fn result_lines_replayed_in_the_failures_section_are_not_tests() {
        let out = "running 1 test\ntest a ... FAILED\n\nfailures:\n\n---- a stdout ----\ntest fake ... ok\n\nfailures:\n    a\n\ntest result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n";
        let r = parse_output(out.as_bytes(), None, "stdout").unwrap();
        assert_eq!(
            r.binaries[0].tests,
            vec![("a".to_string(), Outcome::Failed)]
        );
    }

    #[test]
    fn a_should_panic_test_keeps_its_section_under_its_marked_id() {
        let out = "running 1 test\ntest a - should panic ... FAILED\n\nfailures:\n\n---- a stdout ----\nnote: test did not panic as expected\n\nfailures:\n    a\n\ntest result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n";
        let r = parse_output(out.as_bytes(), None, "stdout")
            .unwrap()
            .to_report("stdout")
            .unwrap();
        assert_eq!(
            r.excerpts["#1::a - should panic"].text,
            "note: test did not panic as expected"
        );
    }

    #[test]
    fn an_over_long_line_in_captured_output_is_passed_over() {
        let out = format!(
            "{}\n{LIB}",
            "x".repeat(crate::testreport::MAX_LINE_BYTES + 1)
        );
        let r = parse_output(out.as_bytes(), None, "stdout").unwrap();
        assert_eq!(r.binaries[0].tests.len(), 3);
        assert!(parse_report(out.as_bytes(), "saved.txt").is_err());
    }

    #[test]
    fn terse_output_is_a_named_problem_not_a_count_mismatch() {
        let out = "running 4 tests\n.i..\ntest result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.27s\n";
        let r = parse_output(out.as_bytes(), None, "stdout").unwrap();
        assert_eq!(r.binaries[0].terse, 4);
        assert_eq!(
            r.binaries[0].problems(),
            vec!["#1: terse output (`cargo test -q`) names no test; run the check without -q so each test is named".to_string()]
        );
    }

    #[test]
    fn coloured_output_reads_as_its_plain_lines() {
        let out = "running 1 test\ntest a ... \u{1b}[32mok\u{1b}(B\u{1b}[m\n\ntest result: \u{1b}[32mok\u{1b}[0m. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n";
        let r = parse_output(out.as_bytes(), None, "stdout").unwrap();
        assert_eq!(
            r.binaries[0].tests,
            vec![("a".to_string(), Outcome::Passed)]
        );
        assert!(r.binaries[0].problems().is_empty());
    }

    #[test]
    fn a_doctest_is_named_by_its_file_and_item_without_its_line() {
        assert_eq!(
            doctest_identity("src/lib.rs - add (line 3)"),
            "src/lib.rs - add"
        );
        assert_eq!(
            doctest_identity("src/lib.rs - add (line 7) - compile"),
            "src/lib.rs - add - compile"
        );
        assert_eq!(
            doctest_identity("src/lib.rs - add (line 7) - compile fail"),
            "src/lib.rs - add - compile fail"
        );
        assert_eq!(
            doctest_identity("src/a b.rs - S::f (line 12) - should panic"),
            "src/a b.rs - S::f - should panic"
        );
        assert_eq!(doctest_identity("src/lib.rs - (line 1)"), "src/lib.rs -");
    }

    #[test]
    fn a_name_of_another_shape_keeps_its_line_words() {
        assert_eq!(
            doctest_identity("tests::line_numbers"),
            "tests::line_numbers"
        );
        assert_eq!(
            doctest_identity("src/lib.rs - f (line x)"),
            "src/lib.rs - f (line x)"
        );
        assert_eq!(
            doctest_identity("src/lib.rs - f (line 3)x"),
            "src/lib.rs - f (line 3)x"
        );
        assert_eq!(doctest_identity("f (line 3)"), "f (line 3)");
    }

    #[test]
    fn two_doctests_of_one_item_share_an_id_and_are_counted() {
        let out = "running 3 tests\ntest src/lib.rs - add (line 3) ... ok\ntest src/lib.rs - add (line 9) ... ok\ntest src/lib.rs - sub (line 20) ... ignored\n\ntest result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out\n";
        let stderr = b"   Doc-tests demo\n";
        let r = parse_output(out.as_bytes(), Some(stderr), "stdout")
            .unwrap()
            .to_report("stdout")
            .unwrap();
        assert_eq!(
            r.collected.iter().collect::<Vec<_>>(),
            ["doc/demo::src/lib.rs - add", "doc/demo::src/lib.rs - sub"]
        );
        assert_eq!(
            r.collected_repeats.iter().collect::<Vec<_>>(),
            [(&"doc/demo::src/lib.rs - add".to_string(), &2)]
        );
        assert_eq!(r.counts.total, 3);
        assert_eq!(r.declared, Some(r.counts));
    }

    #[test]
    fn a_failing_doctest_keeps_its_excerpt_under_its_lineless_id() {
        let out = "running 1 test\ntest src/lib.rs - add (line 3) ... FAILED\n\nfailures:\n\n---- src/lib.rs - add (line 3) stdout ----\nassertion failed\n\nfailures:\n    src/lib.rs - add (line 3)\n\ntest result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n";
        let r = parse_output(out.as_bytes(), Some(b"   Doc-tests demo\n"), "stdout")
            .unwrap()
            .to_report("stdout")
            .unwrap();
        assert_eq!(
            r.failing.iter().collect::<Vec<_>>(),
            ["doc/demo::src/lib.rs - add"]
        );
        assert_eq!(
            r.excerpts["doc/demo::src/lib.rs - add"].text,
            "assertion failed"
        );
    }

    #[test]
    fn indented_lines_are_not_libtest_lines() {
        let out = "    running 1 test\n    test a ... FAILED\n";
        assert!(parse_output(out.as_bytes(), None, "stderr")
            .unwrap()
            .binaries
            .is_empty());
    }
}
