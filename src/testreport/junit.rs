//! JUnit XML reports (pytest `--junitxml`, cargo-nextest, jest-junit, go-junit-report, Surefire),
//! read with quick-xml's streaming reader.
//!
//! The root is `<testsuites>` or `<testsuite>`; every `<testcase>` inside a `<testsuite>` is one
//! entry, failed when it has a `<failure>` or `<error>` child, skipped when it has a `<skipped>`
//! child (pytest writes xfail as a skip), passed otherwise (nextest's `<flakyFailure>` and
//! `<rerunFailure>` of a test that passed on retry do not fail it). A failing case's excerpt
//! ([`super::excerpt`]) is each `<failure>`/`<error>` child's `message` attribute and text
//! (character data included). Its id is
//! `classname::name`, or `suite::name` when it has no classname (the innermost suite), or
//! `name` alone for a case with neither (directly under `<testsuites>`). The `tests`,
//! `failures`, `errors` and `skipped` attributes of the outermost suites (or of `<testsuites>`,
//! when a case stands outside every suite) are the report's declared counts.
//!
//! Node's own reporter (`node --test --test-reporter=junit`, recognised by its closing
//! `<!-- tests N -->`, `<!-- pass N -->` and `<!-- fail N -->` comments in `<testsuites>`) is read
//! by its own shape: a top-level test is a `<testcase>` directly under `<testsuites>`, a
//! `describe` (or a test with subtests) is a `<testsuite>` holding its children, and every
//! case's classname is the constant `test`. A node case's id is therefore the chain of its
//! suites' names and its own, joined with ` > ` (`math > inner > deep`, `adds` at top level),
//! the id node's TAP reporter gives the same test. Node's suite attributes count direct
//! children, not tests, so the declared counts come from the comments instead: total
//! `tests + suites - <testsuite> elements` (a test with subtests is counted in `tests` but
//! written as a suite), skipped `skipped + todo` plus at most `suites` (a skipped `describe` is
//! a case with a `<skipped>` child, counted in `suites`), and failed `fail + cancelled` less at
//! most one per `<testsuite>` element (node counts a failing parent test in `fail`; its JUnit
//! writes it as a suite), so counts of skipped and failing cases within those ranges agree. A
//! case with a `<skipped type="todo">` child is skipped even when it also has a `<failure>`
//! (node's failing TODO test, which does not fail the run). Node's summary line
//! (`ℹ tests N` from its spec reporter) is compared with the comments themselves
//! ([`ParsedReport::runner_counts`]), which count what node counts.
//!
//! jest-junit (root `name="jest tests"`) writes a `todo` test as a case without any result
//! element and leaves it out of its `tests` attributes, so in its report passing cases beyond
//! the declared `tests` (with failures and skips as declared) are read as those todo tests and
//! agree.
//!
//! Hostile input: a DTD is refused (so no entity is ever declared or expanded; quick-xml itself
//! only resolves the five predefined entities and character references), nesting is capped at
//! [`MAX_DEPTH`] elements and tracked on a flat stack, and a document that ends inside an
//! element is truncated, not complete.

use super::excerpt::Gathering;
use super::{
    bounded_id, Counts, Format, Outcome, ParsedReport, Producer, ReportBuilder, ReportError,
};
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

/// Deepest element nesting accepted.
pub const MAX_DEPTH: usize = 256;

/// The closing comments of node's reporter that are read (any other comment is ignored).
const NODE_COUNTS: [&str; 7] = [
    "tests",
    "suites",
    "pass",
    "fail",
    "cancelled",
    "skipped",
    "todo",
];

enum Frame {
    Suite {
        name: String,
    },
    /// `todo`: a `<skipped type="todo">` child (node's TODO test: an expected failure).
    Case {
        id: String,
        node_id: String,
        failed: bool,
        skipped: bool,
        todo: bool,
        excerpt: Gathering,
    },
    /// A `<failure>` or `<error>` child of a case: its text is the case's excerpt.
    Failure,
    Other,
}

/// Counts declared by suite attributes, summed over the suites seen.
#[derive(Default)]
struct Declared {
    counts: Counts,
    complete: bool,
    seen: bool,
}

impl Declared {
    fn add(&mut self, attrs: Option<Counts>) {
        match attrs {
            Some(c) if !self.seen || self.complete => {
                self.counts.total = self.counts.total.saturating_add(c.total);
                self.counts.failed = self.counts.failed.saturating_add(c.failed);
                self.counts.skipped = self.counts.skipped.saturating_add(c.skipped);
                self.counts.passed = self.counts.passed.saturating_add(c.passed);
                self.complete = true;
            }
            _ => self.complete = false,
        }
        self.seen = true;
    }

    fn get(&self) -> Option<Counts> {
        (self.seen && self.complete).then_some(self.counts)
    }
}

/// One `<testcase>` read, its id decided once the whole document is read (node's shape is
/// known only from its closing comments).
struct Case {
    id: String,
    node_id: String,
    outcome: Outcome,
    excerpt: Option<Gathering>,
}

struct Parser<'a> {
    report: &'a str,
    stack: Vec<Frame>,
    cases: Vec<Case>,
    root_declared: Option<Counts>,
    suites_declared: Declared,
    producer: Option<Producer>,
    root_closed: bool,
    /// `<!-- key N -->` comments directly in the root (node's closing counts), each with the
    /// byte it was read at.
    root_comments: std::collections::BTreeMap<String, (u64, u64)>,
    /// `<testsuite>` elements seen.
    suite_elements: u64,
}

/// Node's closing comments, when the report has them: `tests`, `pass` and `fail` at least.
fn node_counts(
    comments: &std::collections::BTreeMap<String, (u64, u64)>,
) -> Option<impl Fn(&str) -> u64 + '_> {
    ["tests", "pass", "fail"]
        .iter()
        .all(|k| comments.contains_key(*k))
        .then_some(|k: &str| comments.get(k).map_or(0, |(n, _)| *n))
}

/// A closing comment's number as a count: a whole number from 0 to `u64::MAX`, else `None`.
fn node_count(n: f64) -> Option<u64> {
    // 2^64 as f64 is exact; anything at or above it does not fit.
    (n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n < 18_446_744_073_709_551_616.0)
        .then_some(n as u64)
}

/// Parse a JUnit XML report.
pub fn parse(bytes: &[u8], report: &str) -> Result<ParsedReport, ReportError> {
    let mut reader = Reader::from_reader(bytes);
    let config = reader.config_mut();
    config.check_end_names = true;
    config.expand_empty_elements = false;
    let mut p = Parser {
        report,
        stack: Vec::new(),
        cases: Vec::new(),
        root_declared: None,
        suites_declared: Declared::default(),
        producer: None,
        root_closed: false,
        root_comments: Default::default(),
        suite_elements: 0,
    };
    loop {
        let at = reader.buffer_position();
        let event = reader
            .read_event()
            .map_err(|e| p.error(reader.error_position(), format!("not well-formed XML: {e}")))?;
        match event {
            Event::Start(e) => p.open(&e, at, false)?,
            Event::Empty(e) => p.open(&e, at, true)?,
            Event::End(_) => p.close(at)?,
            Event::DocType(_) => {
                return Err(p.error(
                    at,
                    "a DOCTYPE is not allowed in a test report (no entity is declared or expanded)",
                ))
            }
            Event::Decl(d) => {
                if let Some(Ok(enc)) = d.encoding() {
                    if !enc.eq_ignore_ascii_case(b"utf-8") {
                        return Err(p.error(
                            at,
                            format!(
                                "encoding {} is not supported (UTF-8 only)",
                                super::shown_bytes(&enc, 40)
                            ),
                        ));
                    }
                }
            }
            Event::Text(t) if p.stack.is_empty() && !t.iter().all(u8::is_ascii_whitespace) => {
                return Err(p.error(at, "text outside the root element"));
            }
            Event::Text(t) if matches!(p.stack.last(), Some(Frame::Failure)) => {
                let text = t
                    .unescape()
                    .map_err(|e| p.error(at, format!("bad text: {e}")))?;
                p.failure_text(&text);
            }
            Event::CData(c) if matches!(p.stack.last(), Some(Frame::Failure)) => {
                p.failure_text(&String::from_utf8_lossy(&c));
            }
            Event::Comment(c) if p.stack.len() == 1 => {
                let text = String::from_utf8_lossy(&c);
                if let Some((key, value)) = text.trim().split_once(' ') {
                    if let (true, Ok(n)) = (NODE_COUNTS.contains(&key), value.trim().parse::<f64>())
                    {
                        let count = node_count(n).ok_or_else(|| {
                            p.error(
                                at,
                                format!(
                                    "the closing comment `{key} {}` is not a count",
                                    super::shown(value.trim())
                                ),
                            )
                        })?;
                        p.root_comments.insert(key.to_string(), (count, at));
                    }
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if let Some(open) = p.stack.last() {
        let what = match open {
            Frame::Suite { .. } => "<testsuite>",
            Frame::Case { .. } => "<testcase>",
            Frame::Failure | Frame::Other => "an element",
        };
        return Err(p.error(
            bytes.len() as u64,
            format!("truncated: the document ends inside {what}"),
        ));
    }
    if !p.root_closed {
        return Err(p.error(0, "no root element"));
    }
    // Every count node writes is of elements it wrote: one above them all is a contradiction.
    let elements = (p.cases.len() as u64).saturating_add(p.suite_elements);
    if let Some((key, (n, at))) = p.root_comments.iter().find(|(_, (n, _))| *n > elements) {
        return Err(p.error(
            *at,
            format!("the closing comment `{key} {n}` counts more than the {elements} cases and suites the report holds"),
        ));
    }
    Ok(p.finish())
}

impl Parser<'_> {
    /// The report: ids by node's rule when the closing comments say node wrote it, else by the
    /// classname/suite rule; the declared counts of that producer.
    fn finish(self) -> ParsedReport {
        let node = node_counts(&self.root_comments).is_some();
        let mut builder = ReportBuilder::default();
        for case in self.cases {
            let id = if node { case.node_id } else { case.id };
            if let Some(excerpt) = case.excerpt {
                builder.add_excerpt(&id, excerpt);
            }
            builder.add(id, case.outcome);
        }
        let counted = builder.counts();
        let Some(get) = node_counts(&self.root_comments) else {
            let mut declared = self.suites_declared.get().or(self.root_declared);
            if let Some(d) = declared.filter(|_| self.producer == Some(Producer::Jest)) {
                // jest-junit writes a `todo` test as a case with no result element and leaves it
                // out of `tests`: passing cases beyond `tests` are those.
                if counted.total > d.total
                    && counted.failed == d.failed
                    && counted.skipped == d.skipped
                {
                    declared = Some(counted);
                }
            }
            return builder.finish(Format::Junit, self.producer, declared, Vec::new());
        };
        // The comments were bounded by the elements seen (`parse`); the sums saturate all the same.
        let total = get("tests")
            .saturating_add(get("suites"))
            .saturating_sub(self.suite_elements);
        // A skipped `describe` is a case with a `<skipped>` child that node counts in `suites`.
        let least_skipped = get("skipped").saturating_add(get("todo"));
        let skipped = counted
            .skipped
            .clamp(least_skipped, least_skipped.saturating_add(get("suites")));
        let most_failed = get("fail").saturating_add(get("cancelled"));
        let least_failed = most_failed.saturating_sub(self.suite_elements);
        let failed = counted.failed.clamp(least_failed, most_failed);
        let declared = Counts {
            total,
            failed,
            skipped,
            passed: total.saturating_sub(failed.saturating_add(skipped)),
        };
        let mut report = builder.finish(
            Format::Junit,
            Some(Producer::NodeTest),
            Some(declared),
            Vec::new(),
        );
        report.runner_counts = Some(Counts {
            total: get("tests"),
            passed: get("pass"),
            failed: most_failed,
            skipped: least_skipped,
        });
        report
    }

    fn error(&self, at: u64, detail: impl Into<String>) -> ReportError {
        ReportError::malformed(self.report, Format::Junit, format!("byte {at}"), detail)
    }

    /// Text inside a `<failure>`/`<error>`, appended to its case's excerpt.
    fn failure_text(&mut self, text: &str) {
        let depth = self.stack.len();
        if let Some(Frame::Case { excerpt, .. }) =
            depth.checked_sub(2).and_then(|i| self.stack.get_mut(i))
        {
            excerpt.push(text);
        }
    }

    fn attr(&self, e: &BytesStart<'_>, key: &[u8], at: u64) -> Result<Option<String>, ReportError> {
        for a in e.attributes() {
            let a = a.map_err(|err| self.error(at, format!("bad attribute: {err}")))?;
            if a.key.local_name().as_ref() == key {
                let value = a
                    .unescape_value()
                    .map_err(|err| self.error(at, format!("bad attribute value: {err}")))?;
                return Ok(Some(value.into_owned()));
            }
        }
        Ok(None)
    }

    fn count_attr(
        &self,
        e: &BytesStart<'_>,
        key: &[u8],
        at: u64,
    ) -> Result<Option<u64>, ReportError> {
        match self.attr(e, key, at)? {
            None => Ok(None),
            Some(v) => v.trim().parse::<u64>().map(Some).map_err(|_| {
                self.error(
                    at,
                    format!(
                        "attribute {}=\"{}\" is not a count",
                        String::from_utf8_lossy(key),
                        super::shown(&v)
                    ),
                )
            }),
        }
    }

    /// The `tests`/`failures`/`errors`/`skipped` attributes of a suite element, when it has `tests`.
    fn declared_counts(&self, e: &BytesStart<'_>, at: u64) -> Result<Option<Counts>, ReportError> {
        let Some(total) = self.count_attr(e, b"tests", at)? else {
            return Ok(None);
        };
        let failed = self
            .count_attr(e, b"failures", at)?
            .unwrap_or(0)
            .saturating_add(self.count_attr(e, b"errors", at)?.unwrap_or(0));
        let skipped = match self.count_attr(e, b"skipped", at)? {
            Some(s) => s,
            None => self.count_attr(e, b"disabled", at)?.unwrap_or(0),
        };
        Ok(Some(Counts {
            total,
            failed,
            skipped,
            passed: total.saturating_sub(failed.saturating_add(skipped)),
        }))
    }

    fn open(&mut self, e: &BytesStart<'_>, at: u64, empty: bool) -> Result<(), ReportError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(self.error(at, format!("elements nested deeper than {MAX_DEPTH}")));
        }
        let name = e.local_name();
        let name = name.as_ref();
        if self.stack.is_empty() {
            if self.root_closed {
                return Err(self.error(at, "a second root element"));
            }
            if name != b"testsuites" && name != b"testsuite" {
                return Err(self.error(
                    at,
                    format!(
                        "the root element is <{}>, not <testsuites> or <testsuite>",
                        super::shown(&String::from_utf8_lossy(name))
                    ),
                ));
            }
            if name == b"testsuites" {
                self.root_declared = self.declared_counts(e, at)?;
                self.producer = match self.attr(e, b"name", at)?.as_deref() {
                    Some("nextest-run") => Some(Producer::Nextest),
                    Some("jest tests") => Some(Producer::Jest),
                    _ => None,
                };
            }
        }
        let in_case = matches!(self.stack.last(), Some(Frame::Case { .. }));
        let frame = match name {
            b"testsuite" if !in_case => {
                self.suite_elements += 1;
                let suite_name = self.attr(e, b"name", at)?.unwrap_or_default();
                if !self.stack.iter().any(|f| matches!(f, Frame::Suite { .. })) {
                    let counts = self.declared_counts(e, at)?;
                    self.suites_declared.add(counts);
                    if suite_name == "pytest" && self.producer.is_none() {
                        self.producer = Some(Producer::Pytest);
                    }
                }
                Frame::Suite { name: suite_name }
            }
            b"testcase" if !in_case => {
                let suites: Vec<&str> = self
                    .stack
                    .iter()
                    .filter_map(|f| match f {
                        Frame::Suite { name } => Some(name.as_str()),
                        _ => None,
                    })
                    .collect();
                let Some(case_name) = self.attr(e, b"name", at)? else {
                    return Err(self.error(at, "a <testcase> without a name attribute"));
                };
                let suite = suites.last().copied().unwrap_or("");
                let id = match self.attr(e, b"classname", at)? {
                    Some(class) if !class.is_empty() => format!("{class}::{case_name}"),
                    _ if !suite.is_empty() => format!("{suite}::{case_name}"),
                    _ => case_name.clone(),
                };
                let node_id = suites
                    .iter()
                    .copied()
                    .chain([case_name.as_str()])
                    .collect::<Vec<_>>()
                    .join(" > ");
                if suites.is_empty() {
                    // A case outside every suite: the outermost suites' counts do not cover it.
                    self.suites_declared.add(None);
                }
                let id = bounded_id(id, self.report, Format::Junit, || format!("byte {at}"))?;
                let node_id =
                    bounded_id(node_id, self.report, Format::Junit, || format!("byte {at}"))?;
                Frame::Case {
                    id,
                    node_id,
                    failed: false,
                    skipped: false,
                    todo: false,
                    excerpt: Gathering::default(),
                }
            }
            b"skipped" if in_case => {
                let is_todo = self.attr(e, b"type", at)?.as_deref() == Some("todo");
                if let Some(Frame::Case { skipped, todo, .. }) = self.stack.last_mut() {
                    *skipped = true;
                    *todo |= is_todo;
                }
                Frame::Other
            }
            b"failure" | b"error" if in_case => {
                let message = self.attr(e, b"message", at)?;
                if let Some(Frame::Case {
                    failed, excerpt, ..
                }) = self.stack.last_mut()
                {
                    *failed = true;
                    if let Some(message) = message.filter(|m| !m.trim().is_empty()) {
                        excerpt.push_line(&message);
                    }
                }
                Frame::Failure
            }
            _ => Frame::Other,
        };
        self.stack.push(frame);
        if empty {
            self.close(at)?;
        }
        Ok(())
    }

    fn close(&mut self, at: u64) -> Result<(), ReportError> {
        let Some(frame) = self.stack.pop() else {
            return Err(self.error(at, "a closing tag without its opening tag"));
        };
        if let Frame::Case {
            id,
            node_id,
            failed,
            skipped,
            todo,
            excerpt,
        } = frame
        {
            // A TODO test that fails is expected to (node exits 0 for it): skipped, as in TAP.
            let failed = failed && !todo;
            let outcome = if failed {
                Outcome::Failed
            } else if skipped {
                Outcome::Skipped
            } else {
                Outcome::Passed
            };
            self.cases.push(Case {
                id,
                node_id,
                outcome,
                excerpt: failed.then_some(excerpt),
            });
        }
        if self.stack.is_empty() {
            self.root_closed = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreport::ReportProblem;

    fn parsed(xml: &str) -> ParsedReport {
        parse(xml.as_bytes(), "r.xml").unwrap()
    }

    fn detail(xml: &[u8]) -> String {
        match parse(xml, "r.xml").unwrap_err().problem {
            ReportProblem::Malformed { detail, .. } => detail,
            other => panic!("not malformed: {other:?}"),
        }
    }

    #[test]
    fn failure_and_error_fail_skipped_skips_and_the_rest_pass() {
        let r = parsed(
            r#"<testsuites><testsuite name="s" tests="4" failures="1" errors="1" skipped="1">
  <testcase classname="b" name="two"><failure message="x"/></testcase>
  <testcase classname="a" name="one"><error>boom</error></testcase>
  <testcase classname="a" name="ok"/>
  <testcase classname="c" name="skip"><skipped/></testcase>
</testsuite></testsuites>"#,
        );
        assert_eq!(r.failing.iter().collect::<Vec<_>>(), ["a::one", "b::two"]);
        assert_eq!(r.skipped.iter().collect::<Vec<_>>(), ["c::skip"]);
        assert_eq!(r.collected.len(), 4);
        assert_eq!(
            r.counts,
            Counts {
                total: 4,
                passed: 1,
                failed: 2,
                skipped: 1
            }
        );
        assert_eq!(r.declared, Some(r.counts));
    }

    #[test]
    fn a_failing_case_keeps_its_message_and_text_escaped_and_bounded() {
        let body = "x".repeat(crate::testreport::excerpt::MAX_EXCERPT_BYTES);
        let r = parsed(&format!(
            r#"<testsuite name="s"><testcase name="t"><failure message="bad &#27;[2J">{body}</failure></testcase><testcase name="ok"/></testsuite>"#
        ));
        let e = &r.excerpts["s::t"];
        assert!(e.cut);
        assert!(e.text.starts_with("bad \\u{1b}[2J\nxxx"), "{}", e.text);
        assert_eq!(r.excerpts.len(), 1);
    }

    #[test]
    fn an_error_keeps_its_character_data() {
        let r = parsed(
            r#"<testsuite name="s"><testcase name="t"><error><![CDATA[<boom> & more]]></error></testcase></testsuite>"#,
        );
        assert_eq!(r.excerpts["s::t"].text, "<boom> & more");
    }

    #[test]
    fn a_testcase_without_classname_is_named_by_its_suite() {
        let r = parsed(r#"<testsuite name="suite"><testcase name="t"/></testsuite>"#);
        assert_eq!(r.collected.iter().collect::<Vec<_>>(), ["suite::t"]);
    }

    #[test]
    fn a_failure_nested_deeper_than_a_direct_child_does_not_fail_the_case() {
        let r = parsed(
            r#"<testsuite name="s"><testcase name="t"><system-out><failure/></system-out></testcase></testsuite>"#,
        );
        assert!(r.failing.is_empty());
    }

    #[test]
    fn the_root_must_be_a_suite_element() {
        assert_eq!(
            detail(b"<html><testcase name='x'/></html>"),
            "the root element is <html>, not <testsuites> or <testsuite>"
        );
    }

    #[test]
    fn a_truncated_document_is_an_error() {
        assert_eq!(
            detail(b"<testsuites><testsuite name='s'><testcase name='x'/>"),
            "truncated: the document ends inside <testsuite>"
        );
    }

    #[test]
    fn a_doctype_is_refused_so_no_entity_is_expanded() {
        let xml = br#"<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa">]><testsuite name="&a;"/>"#;
        assert!(detail(xml).starts_with("a DOCTYPE is not allowed"));
    }

    #[test]
    fn an_undeclared_entity_is_an_error() {
        assert!(
            detail(br#"<testsuite name="s"><testcase name="&lol;"/></testsuite>"#)
                .starts_with("bad attribute value")
        );
    }

    #[test]
    fn nesting_beyond_the_cap_is_an_error_not_a_stack_overflow() {
        let xml = format!("<testsuite>{}", "<a>".repeat(100_000));
        assert_eq!(
            detail(xml.as_bytes()),
            format!("elements nested deeper than {MAX_DEPTH}")
        );
    }

    #[test]
    fn control_characters_in_ids_are_kept_as_data() {
        let r = parsed(
            "<testsuite name=\"s\"><testcase classname=\"c\" name=\"a&#27;[31mb\"/></testsuite>",
        );
        assert_eq!(r.collected.iter().collect::<Vec<_>>(), ["c::a\u{1b}[31mb"]);
    }

    #[test]
    fn a_count_attribute_that_is_no_number_is_an_error() {
        assert_eq!(
            detail(br#"<testsuite name="s" tests="many"/>"#),
            "attribute tests=\"many\" is not a count"
        );
    }

    #[test]
    fn a_testcase_outside_every_suite_is_named_by_its_classname_or_its_name() {
        let r = parsed(
            r#"<testsuites tests="3" failures="1"><testcase name="t"/><testcase classname="c" name="u"><failure/></testcase><testsuite name="s" tests="1"><testcase name="v"/></testsuite></testsuites>"#,
        );
        assert_eq!(
            r.collected.iter().collect::<Vec<_>>(),
            ["c::u", "s::v", "t"]
        );
        assert_eq!(
            r.declared,
            Some(Counts {
                total: 3,
                passed: 2,
                failed: 1,
                skipped: 0
            })
        );
    }

    /// What node 20's `--test-reporter=junit` writes (trimmed): top-level tests under the root,
    /// `describe`s and tests with subtests as suites, classname `test`, closing comments.
    const NODE: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<testsuites>
	<testcase name="adds" time="0.001" classname="test"/>
	<testcase name="fails" time="0.001" classname="test" failure="2 !== 3">
		<failure type="testCodeFailure" message="2 !== 3">
[Error [ERR_TEST_FAILURE]: 2 !== 3]
		</failure>
	</testcase>
	<testcase name="skipped" time="0.000189" classname="test">
		<skipped type="skipped" message="true"/>
	</testcase>
	<testcase name="todo one" time="0.000096" classname="test">
		<skipped type="todo" message="true"/>
	</testcase>
	<testsuite name="math" time="0.000885" disabled="0" errors="0" tests="2" failures="0" skipped="0" hostname="vm">
		<testcase name="nested ok" time="0.000185" classname="test"/>
		<testsuite name="inner" time="0.000229" disabled="0" errors="0" tests="1" failures="0" skipped="0" hostname="vm">
			<testcase name="deep" time="0.000109" classname="test"/>
		</testsuite>
	</testsuite>
	<testsuite name="parent" time="0.001867" disabled="0" errors="0" tests="1" failures="1" skipped="0" hostname="vm">
		<testcase name="subfail" time="0.000691" classname="test" failure="x">
			<failure type="testCodeFailure" message="x">boom</failure>
		</testcase>
	</testsuite>
	<testcase name="adds" time="0.001105" classname="test"/>
	<!-- tests 9 -->
	<!-- suites 2 -->
	<!-- pass 4 -->
	<!-- fail 3 -->
	<!-- cancelled 0 -->
	<!-- skipped 1 -->
	<!-- todo 1 -->
	<!-- duration_ms 203.677335 -->
</testsuites>"#;

    #[test]
    fn node_cases_are_named_by_their_suites_and_name() {
        let r = parsed(NODE);
        assert_eq!(r.producer, Some(Producer::NodeTest));
        assert_eq!(
            r.collected.iter().collect::<Vec<_>>(),
            [
                "adds",
                "fails",
                "math > inner > deep",
                "math > nested ok",
                "parent > subfail",
                "skipped",
                "todo one"
            ]
        );
        assert_eq!(
            r.failing.iter().collect::<Vec<_>>(),
            ["fails", "parent > subfail"]
        );
        assert_eq!(
            r.skipped.iter().collect::<Vec<_>>(),
            ["skipped", "todo one"]
        );
        assert_eq!(r.excerpts["parent > subfail"].text, "x\nboom");
    }

    #[test]
    fn two_node_tests_of_one_name_are_counted_twice() {
        let r = parsed(NODE);
        assert_eq!(
            r.collected_repeats.iter().collect::<Vec<_>>(),
            [(&"adds".to_string(), &2)]
        );
        assert_eq!(
            r.counts,
            Counts {
                total: 8,
                passed: 4,
                failed: 2,
                skipped: 2
            }
        );
    }

    #[test]
    fn node_closing_comments_are_its_declared_counts() {
        let r = parsed(NODE);
        // tests 9 + suites 2 - 3 <testsuite> elements = 8 cases; fail 3 holds the parent test.
        assert_eq!(r.declared, Some(r.counts));
        // What node's summary line counts: the parent test too.
        assert_eq!(
            r.runner_counts,
            Some(Counts {
                total: 9,
                passed: 4,
                failed: 3,
                skipped: 2
            })
        );
    }

    #[test]
    fn a_failing_node_todo_test_and_a_skipped_describe_are_skipped_and_agree_with_the_comments() {
        // node 20 on `describe.skip('skipped suite', ...)`, a failing `{ todo }` test and a
        // `describe` holding one test.
        let r = parsed(
            r#"<testsuites>
	<testcase name="skipped suite" time="0.000722" classname="test"><skipped type="skipped" message="true"/></testcase>
	<testcase name="todo failing" time="0.000609" classname="test" failure="nope"><skipped type="todo" message="later"/><failure type="testCodeFailure" message="nope">boom</failure></testcase>
	<testsuite name="d" time="0.000345" disabled="0" errors="0" tests="1" failures="0" skipped="0" hostname="vm"><testcase name="x" time="0.000139" classname="test"/></testsuite>
	<!-- tests 2 --><!-- suites 2 --><!-- pass 1 --><!-- fail 0 --><!-- cancelled 0 --><!-- skipped 0 --><!-- todo 1 -->
</testsuites>"#,
        );
        assert!(r.failing.is_empty(), "{:?}", r.failing);
        assert_eq!(
            r.skipped.iter().collect::<Vec<_>>(),
            ["skipped suite", "todo failing"]
        );
        assert_eq!(r.declared, Some(r.counts));
        assert_eq!(
            r.runner_counts,
            Some(Counts {
                total: 2,
                passed: 1,
                failed: 0,
                skipped: 1
            })
        );
    }

    #[test]
    fn node_comments_that_do_not_add_up_to_its_cases_are_declared_as_they_say() {
        let r = parsed(&NODE.replace("<!-- tests 9 -->", "<!-- tests 10 -->"));
        assert_eq!(r.declared.map(|d| d.total), Some(9));
        let r = parsed(&NODE.replace("<!-- fail 3 -->", "<!-- fail 9 -->"));
        assert_eq!(r.declared.map(|d| d.failed), Some(6));
    }

    #[test]
    fn node_comments_counting_more_than_the_elements_written_are_a_contradiction() {
        // NODE holds 8 cases and 3 <testsuite> elements: 11 at most for any count.
        for key in NODE_COUNTS {
            for n in ["12", "1e19", "1e15", "18446744073709549568"] {
                let xml = format!(
                    "{}<!-- {key} {n} --></testsuites>\n",
                    NODE.trim_end().trim_end_matches("</testsuites>")
                );
                let d = detail(xml.as_bytes());
                assert!(
                    d.contains("counts more than the 11 cases and suites"),
                    "{key} {n}: {d}"
                );
            }
        }
        assert!(parse(
            NODE.replace("<!-- tests 9 -->", "<!-- tests 11 -->")
                .as_bytes(),
            "r.xml"
        )
        .is_ok());
    }

    #[test]
    fn node_comments_that_are_not_whole_counts_are_malformed() {
        for n in [
            "2.5",
            "-1",
            "1e400",
            "-0.5",
            "NaN",
            "inf",
            "1e20",
            "18446744073709551615",
            "1.8446744073709552e19",
        ] {
            let d = detail(
                NODE.replace("<!-- skipped 1 -->", &format!("<!-- skipped {n} -->"))
                    .as_bytes(),
            );
            assert_eq!(
                d,
                format!("the closing comment `skipped {n}` is not a count"),
                "{n}"
            );
        }
    }

    #[test]
    fn suite_attributes_at_the_limit_of_u64_saturate_rather_than_overflow() {
        let max = u64::MAX;
        let r = parsed(&format!(
            r#"<testsuites><testsuite name="a" tests="{max}" failures="{max}" errors="{max}" skipped="{max}"><testcase classname="a" name="x"/></testsuite><testsuite name="b" tests="{max}" failures="1"><testcase classname="b" name="y"/></testsuite></testsuites>"#
        ));
        assert_eq!(
            r.declared,
            Some(Counts {
                total: max,
                failed: max,
                skipped: max,
                passed: max - 1
            })
        );
    }

    #[test]
    fn jest_junit_todo_cases_beyond_its_declared_tests_agree_and_other_surpluses_do_not() {
        let jest = |failures: u32| {
            format!(
                r#"<testsuites name="jest tests" tests="2" failures="{failures}"><testsuite name="m" tests="2" failures="{failures}" skipped="1"><testcase classname="m a" name="m a"/><testcase classname="m s" name="m s"><skipped/></testcase><testcase classname="m todo" name="m todo"/></testsuite></testsuites>"#
            )
        };
        let r = parsed(&jest(0));
        assert_eq!(r.declared, Some(r.counts));
        let r = parsed(&jest(1));
        assert_eq!(r.declared.map(|d| (d.total, d.failed)), Some((2, 1)));
    }

    #[test]
    fn without_node_comments_a_classname_of_test_is_a_classname() {
        let r = parsed(
            r#"<testsuites><testsuite name="s"><testcase classname="test" name="a"/></testsuite></testsuites>"#,
        );
        assert_eq!(r.collected.iter().collect::<Vec<_>>(), ["test::a"]);
        assert_eq!(r.producer, None);
    }

    #[test]
    fn a_second_root_is_an_error() {
        assert_eq!(
            detail(b"<testsuite name='a'/><testsuite name='b'/>"),
            "a second root element"
        );
    }

    #[test]
    fn a_non_utf8_encoding_is_refused() {
        assert!(
            detail(b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><testsuite/>")
                .starts_with("encoding")
        );
    }
}
