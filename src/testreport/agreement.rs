//! The verdict is the exit code AND the evidence: a zero exit is green only when every source
//! the check left agrees with it.
//!
//! Sources: the declared reports ([`DeclaredReport`]), libtest's blocks in the captured stdout
//! (as a report of their own), and the runners' summary lines in stdout and stderr
//! ([`super::summary`]). With exit code 0, each of these is a disagreement:
//! - a declared report that is missing, unreadable, malformed or has zero tests;
//! - a report (or the libtest output) with a failing test, or a unit that ended abnormally (a
//!   libtest binary without its `test result:` line, a go package that failed on its own, a
//!   TAP stream that bailed out);
//! - a report whose own declared counts (JUnit's `tests`/`failures`, node's `# tests`) differ from
//!   its entries;
//! - a runner summary that reports a failure, or whose counts differ from the reports that
//!   runner wrote (pytest's final line against pytest's JUnit, nextest's `Summary` against
//!   nextest's JUnit, node's closing counts against node's TAP);
//! - captured output whose middle was dropped (the per-binary summaries cannot all be seen).
//!
//! A non-zero exit (or none: killed) is red whatever the evidence says: evidence can only keep a
//! run from being green, never make it green. A red run is examined by the same rules, and what
//! they find other than failures (a failing test or a failing summary is what red means) is its
//! evidence's *gaps* ([`Disagreement::is_gap`]): an incomplete unit, a missing result line,
//! truncated output, an unusable declared report, a report or summary contradicting itself. A red
//! run's sets count as met targets only without gaps (`rules::progress`): the one gate a green
//! passes too.

use super::libtest;
use super::paths::DeclaredReport;
use super::summary::{self, Runner, SummaryCounts, SummaryLine};
use super::{shown, Counts, ParsedReport, Producer, ReportError, ReportProblem};
use serde::Serialize;

/// At most this many failing ids are quoted in one disagreement.
const QUOTED_IDS: usize = 20;

/// The check's captured output, as the engine kept it.
#[derive(Debug, Clone, Copy)]
pub struct CapturedOutput<'a> {
    pub stdout: &'a [u8],
    pub stderr: &'a [u8],
    /// Whether the middle of either stream was dropped (bounded capture).
    pub truncated: bool,
}

/// A source of evidence that was consulted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// A report path, `libtest output in stdout`, or a runner's summary line.
    pub name: String,
    pub counts: Option<Counts>,
}

/// The verdict on one check run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Agreement {
    /// Exit code 0 and every source agrees (`sources` empty: the exit code was the only evidence).
    Green { sources: Vec<Source> },
    /// A non-zero exit code, or none (the check was killed), with the gaps in its evidence (the
    /// disagreements that are no failure: [`Disagreement::is_gap`]; empty: its evidence is whole).
    Red {
        exit_code: Option<i32>,
        gaps: Vec<Disagreement>,
    },
    /// Exit code 0 and at least one source disagrees.
    Disagree { disagreements: Vec<Disagreement> },
}

/// One source contradicting a green exit code, with its evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Disagreement {
    #[error("{}", .error)]
    ReportUnusable { error: ReportError },
    #[error("report {}: has zero tests", shown(report))]
    ReportHasNoTests { report: String },
    #[error(
        "report {}: {count} failing test(s), e.g. {}",
        shown(report),
        quoted(failing)
    )]
    ReportShowsFailures {
        report: String,
        count: usize,
        failing: Vec<String>,
    },
    #[error("report {}: ended abnormally: {}", shown(report), units.join("; "))]
    ReportIncomplete { report: String, units: Vec<String> },
    #[error("report {}: declares {} tests ({} failed, {} skipped) but holds {} ({} failed, {} skipped)",
        shown(report), declared.total, declared.failed, declared.skipped, counted.total, counted.failed, counted.skipped)]
    ReportContradictsItself {
        report: String,
        declared: Counts,
        counted: Counts,
    },
    #[error("{} {} line {}: reports a failure: {}", runner.name(), stream, line, text)]
    SummaryShowsFailures {
        runner: Runner,
        stream: &'static str,
        line: usize,
        text: String,
    },
    #[error("{} {} line {}: {} disagrees with the report(s) {} ({} tests, {} failed, {} skipped)",
        runner.name(), stream, line, text, reports.iter().map(|r| shown(r)).collect::<Vec<_>>().join(", "),
        counted.total, counted.failed, counted.skipped)]
    SummaryContradictsReports {
        runner: Runner,
        stream: &'static str,
        line: usize,
        text: String,
        summary: SummaryCounts,
        reports: Vec<String>,
        counted: Counts,
    },
    #[error("the captured output was truncated and no declared report holds the tests: the runners' summaries cannot all be checked")]
    OutputTruncated,
}

fn quoted(ids: &[String]) -> String {
    ids.iter().map(|i| shown(i)).collect::<Vec<_>>().join(", ")
}

/// The name libtest's output stands under as a source.
pub const LIBTEST_OUTPUT: &str = "libtest output in stdout";

/// libtest's blocks in the captured output as a report, when there are any.
pub fn output_report(output: &CapturedOutput<'_>) -> Option<Result<ParsedReport, ReportError>> {
    let run = match libtest::parse_output(output.stdout, Some(output.stderr), LIBTEST_OUTPUT) {
        Ok(run) => run,
        Err(e) => return Some(Err(e)),
    };
    if run.binaries.is_empty() {
        return None;
    }
    Some(run.to_report(LIBTEST_OUTPUT))
}

/// Decide the verdict from the exit code and every source of evidence: every rule is applied
/// whatever the exit code ([`examine`]); a zero exit is green without any disagreement, a red run
/// keeps its gaps.
pub fn agree(
    exit_code: Option<i32>,
    reports: &[DeclaredReport],
    output: &CapturedOutput<'_>,
) -> Agreement {
    let (sources, disagreements) = examine(reports, output);
    if exit_code != Some(0) {
        return Agreement::Red {
            exit_code,
            gaps: disagreements
                .into_iter()
                .filter(Disagreement::is_gap)
                .collect(),
        };
    }
    if disagreements.is_empty() {
        Agreement::Green { sources }
    } else {
        Agreement::Disagree { disagreements }
    }
}

/// The one examination of a check's evidence: the sources consulted and every disagreement of
/// them with a clean run (a zero exit's; a red run's failures among them are what red means).
fn examine(
    reports: &[DeclaredReport],
    output: &CapturedOutput<'_>,
) -> (Vec<Source>, Vec<Disagreement>) {
    let mut disagreements = Vec::new();
    let mut sources = Vec::new();
    // Truncated output (its middle dropped) is evidence only where the output is all there is:
    // with a declared report that parsed and holds tests, the report is the evidence and the
    // summaries are checked on the kept head and tail (a chatty suite can still be green).
    let a_report_holds_the_tests = reports
        .iter()
        .any(|d| matches!(&d.result, Ok(r) if r.counts.total > 0));
    if output.truncated && !a_report_holds_the_tests {
        disagreements.push(Disagreement::OutputTruncated);
    }
    let mut parsed: Vec<(String, &ParsedReport)> = Vec::new();
    for declared in reports {
        let name = declared
            .path
            .clone()
            .unwrap_or_else(|| declared.pattern.clone());
        match &declared.result {
            Ok(report) => parsed.push((name, report)),
            Err(error) => disagreements.push(Disagreement::ReportUnusable {
                error: error.clone(),
            }),
        }
    }
    let from_output = output_report(output);
    match &from_output {
        Some(Ok(report)) => parsed.push((LIBTEST_OUTPUT.to_string(), report)),
        Some(Err(error)) => disagreements.push(Disagreement::ReportUnusable {
            error: error.clone(),
        }),
        None => {}
    }
    for (name, report) in &parsed {
        check_report(name, report, &mut disagreements);
        sources.push(Source {
            name: name.clone(),
            counts: Some(report.counts),
        });
    }
    let mut summaries = Vec::new();
    for (bytes, stream) in [(output.stdout, "stdout"), (output.stderr, "stderr")] {
        match summary::find(bytes, stream) {
            Ok(found) => summaries.extend(found),
            Err(error) => disagreements.push(Disagreement::ReportUnusable { error }),
        }
    }
    for s in &summaries {
        if s.failed {
            disagreements.push(Disagreement::SummaryShowsFailures {
                runner: s.runner,
                stream: s.stream,
                line: s.line,
                text: s.text.clone(),
            });
        }
        sources.push(Source {
            name: format!("{} {} line {}", s.runner.name(), s.stream, s.line),
            counts: None,
        });
    }
    for (runner, producer) in [
        (Runner::Pytest, Producer::Pytest),
        (Runner::Nextest, Producer::Nextest),
        (Runner::NodeTest, Producer::NodeTest),
    ] {
        compare_with_reports(runner, producer, &summaries, &parsed, &mut disagreements);
    }
    (sources, disagreements)
}

fn check_report(name: &str, report: &ParsedReport, out: &mut Vec<Disagreement>) {
    if report.counts.total == 0 && report.failing.is_empty() {
        out.push(Disagreement::ReportHasNoTests {
            report: name.to_string(),
        });
    }
    if !report.failing.is_empty() {
        out.push(Disagreement::ReportShowsFailures {
            report: name.to_string(),
            count: report.failing.len(),
            failing: report.failing.iter().take(QUOTED_IDS).cloned().collect(),
        });
    }
    if !report.incomplete.is_empty() {
        out.push(Disagreement::ReportIncomplete {
            report: name.to_string(),
            units: report.incomplete.clone(),
        });
    }
    if let Some(declared) = report.declared {
        let same = declared.total == report.counts.total
            && declared.failed == report.counts.failed
            && declared.skipped == report.counts.skipped;
        if !same {
            out.push(Disagreement::ReportContradictsItself {
                report: name.to_string(),
                declared,
                counted: report.counts,
            });
        }
    }
}

/// The runner's summaries (summed) against the reports that runner wrote (summed), where both
/// are present.
fn compare_with_reports(
    runner: Runner,
    producer: Producer,
    summaries: &[SummaryLine],
    parsed: &[(String, &ParsedReport)],
    out: &mut Vec<Disagreement>,
) {
    let mine: Vec<&SummaryLine> = summaries.iter().filter(|s| s.runner == runner).collect();
    let theirs: Vec<&(String, &ParsedReport)> = parsed
        .iter()
        .filter(|(_, r)| r.producer == Some(producer))
        .collect();
    let (Some(last), false) = (mine.last(), theirs.is_empty()) else {
        return;
    };
    let mut summary = SummaryCounts {
        total: Some(0),
        failed: 0,
        skipped: Some(0),
    };
    for s in &mine {
        // Numbers the check printed or wrote: summed saturating, never overflowing.
        summary.total = summary
            .total
            .zip(s.counts.total)
            .map(|(a, b)| a.saturating_add(b));
        summary.failed = summary.failed.saturating_add(s.counts.failed);
        summary.skipped = summary
            .skipped
            .zip(s.counts.skipped)
            .map(|(a, b)| a.saturating_add(b));
    }
    let mut counted = Counts::default();
    for (_, r) in &theirs {
        let counts = r.runner_counts.unwrap_or(r.counts);
        counted.total = counted.total.saturating_add(counts.total);
        counted.passed = counted.passed.saturating_add(counts.passed);
        counted.failed = counted.failed.saturating_add(counts.failed);
        counted.skipped = counted.skipped.saturating_add(counts.skipped);
    }
    let agrees = summary.total.is_none_or(|t| t == counted.total)
        && summary.failed == counted.failed
        && summary.skipped.is_none_or(|s| s == counted.skipped);
    if !agrees {
        out.push(Disagreement::SummaryContradictsReports {
            runner,
            stream: last.stream,
            line: last.line,
            text: last.text.clone(),
            summary,
            reports: theirs.iter().map(|(n, _)| n.clone()).collect(),
            counted,
        });
    }
}

impl Agreement {
    /// The disagreements of a zero exit, or a red run's gaps (none when green).
    pub fn disagreements(&self) -> &[Disagreement] {
        match self {
            Agreement::Disagree { disagreements } => disagreements,
            Agreement::Red { gaps, .. } => gaps,
            Agreement::Green { .. } => &[],
        }
    }
}

impl Disagreement {
    /// The kind's name, as serialized (`report_shows_failures`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Disagreement::ReportUnusable { .. } => "report_unusable",
            Disagreement::ReportHasNoTests { .. } => "report_has_no_tests",
            Disagreement::ReportShowsFailures { .. } => "report_shows_failures",
            Disagreement::ReportIncomplete { .. } => "report_incomplete",
            Disagreement::ReportContradictsItself { .. } => "report_contradicts_itself",
            Disagreement::SummaryShowsFailures { .. } => "summary_shows_failures",
            Disagreement::SummaryContradictsReports { .. } => "summary_contradicts_reports",
            Disagreement::OutputTruncated => "output_truncated",
        }
    }

    /// The report or output the disagreement is about.
    pub fn subject(&self) -> String {
        match self {
            Disagreement::ReportUnusable { error } => error.report.clone(),
            Disagreement::ReportHasNoTests { report }
            | Disagreement::ReportShowsFailures { report, .. }
            | Disagreement::ReportIncomplete { report, .. }
            | Disagreement::ReportContradictsItself { report, .. } => report.clone(),
            Disagreement::SummaryShowsFailures { stream, .. }
            | Disagreement::SummaryContradictsReports { stream, .. } => stream.to_string(),
            Disagreement::OutputTruncated => "output".to_string(),
        }
    }

    /// Whether this is a gap in the evidence rather than a failure it shows: everything but a
    /// failing test in a report and a summary reporting a failure (which a red run has by rights).
    pub fn is_gap(&self) -> bool {
        !matches!(
            self,
            Disagreement::ReportShowsFailures { .. } | Disagreement::SummaryShowsFailures { .. }
        )
    }

    /// Whether a declared report was missing (the caller may word this case on its own).
    pub fn is_missing_report(&self) -> bool {
        matches!(self, Disagreement::ReportUnusable { error } if error.problem == ReportProblem::Missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreport::parse_report;

    const GREEN_LIB: &[u8] =
        b"running 1 test\ntest a ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";

    fn out(stdout: &[u8]) -> CapturedOutput<'_> {
        CapturedOutput {
            stdout,
            stderr: b"",
            truncated: false,
        }
    }

    fn declared(name: &str, text: &str) -> DeclaredReport {
        DeclaredReport {
            pattern: name.into(),
            path: Some(name.into()),
            result: parse_report(text.as_bytes(), name, None),
        }
    }

    fn kinds(a: &Agreement) -> Vec<&'static str> {
        assert!(matches!(a, Agreement::Disagree { .. }), "agreed: {a:?}");
        a.disagreements().iter().map(Disagreement::kind).collect()
    }

    #[test]
    fn each_kind_name_is_its_serialized_tag() {
        let d = Disagreement::ReportHasNoTests { report: "r".into() };
        assert_eq!(serde_json::to_value(&d).unwrap()["kind"], d.kind());
        assert_eq!(
            serde_json::to_value(Disagreement::OutputTruncated).unwrap()["kind"],
            "output_truncated"
        );
    }

    #[test]
    fn a_nonzero_exit_is_red_whatever_the_evidence() {
        assert_eq!(
            agree(Some(1), &[], &out(GREEN_LIB)),
            Agreement::Red {
                exit_code: Some(1),
                gaps: vec![]
            }
        );
        assert_eq!(
            agree(None, &[], &out(b"")),
            Agreement::Red {
                exit_code: None,
                gaps: vec![]
            }
        );
    }

    fn gaps(a: &Agreement) -> Vec<&'static str> {
        assert!(matches!(a, Agreement::Red { .. }), "not red: {a:?}");
        a.disagreements().iter().map(Disagreement::kind).collect()
    }

    #[test]
    fn a_red_run_whose_failures_are_all_shown_in_whole_evidence_has_no_gaps() {
        let red = b"running 2 tests\ntest a ... ok\ntest b ... FAILED\n\ntest result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
        let junit = r#"<testsuite name="s" tests="1" failures="1"><testcase classname="t" name="c"><failure/></testcase></testsuite>"#;
        assert_eq!(
            gaps(&agree(Some(101), &[declared("r.xml", junit)], &out(red))),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn a_red_libtest_binary_cut_off_after_a_passing_line_has_an_incomplete_unit() {
        let cut = b"running 3 tests\ntest b ... FAILED\ntest c ... ok\ntest z ... ok\n";
        assert_eq!(
            gaps(&agree(Some(101), &[], &out(cut))),
            ["report_incomplete"]
        );
    }

    #[test]
    fn a_red_run_with_truncated_output_and_no_report_holding_the_tests_has_a_gap() {
        let captured = CapturedOutput {
            stdout: GREEN_LIB,
            stderr: b"",
            truncated: true,
        };
        assert_eq!(gaps(&agree(Some(1), &[], &captured)), ["output_truncated"]);
    }

    #[test]
    fn a_red_run_with_an_unusable_declared_report_has_a_gap() {
        let missing = DeclaredReport {
            pattern: "r.xml".into(),
            path: None,
            result: Err(ReportError::new("r.xml", ReportProblem::Missing)),
        };
        assert_eq!(
            gaps(&agree(
                Some(1),
                &[missing, declared("m.xml", "<testsuite")],
                &out(GREEN_LIB)
            )),
            ["report_unusable", "report_unusable"]
        );
    }

    #[test]
    fn a_red_run_whose_report_contradicts_itself_or_its_summary_has_gaps() {
        let forged = r#"<testsuites><testsuite name="pytest" tests="3" failures="2"><testcase classname="t" name="a"/><testcase classname="t" name="b"/><testcase classname="t" name="c"><failure/></testcase></testsuite></testsuites>"#;
        let summary = b"========== 2 failed, 1 passed in 0.01s ==========\n";
        assert_eq!(
            gaps(&agree(Some(1), &[declared("r.xml", forged)], &out(summary))),
            ["report_contradicts_itself", "summary_contradicts_reports"]
        );
    }

    #[test]
    fn a_zero_exit_with_agreeing_libtest_output_is_green() {
        let a = agree(Some(0), &[], &out(GREEN_LIB));
        assert_eq!(
            a,
            Agreement::Green {
                sources: vec![Source {
                    name: LIBTEST_OUTPUT.into(),
                    counts: Some(Counts {
                        total: 1,
                        passed: 1,
                        failed: 0,
                        skipped: 0
                    })
                }]
            }
        );
    }

    #[test]
    fn a_zero_exit_with_no_evidence_is_green_on_the_exit_code_alone() {
        assert_eq!(
            agree(Some(0), &[], &out(b"done\n")),
            Agreement::Green { sources: vec![] }
        );
    }

    #[test]
    fn a_missing_declared_report_is_not_green() {
        let missing = DeclaredReport {
            pattern: "r.xml".into(),
            path: None,
            result: Err(ReportError::new("r.xml", ReportProblem::Missing)),
        };
        let a = agree(Some(0), &[missing], &out(b""));
        assert_eq!(kinds(&a), ["report_unusable"]);
        let Agreement::Disagree { disagreements } = a else {
            unreachable!()
        };
        assert!(disagreements[0].is_missing_report());
        assert_eq!(
            disagreements[0].to_string(),
            "report r.xml: missing (the check did not write it)"
        );
    }

    #[test]
    fn a_report_with_zero_tests_is_not_green() {
        let a = agree(Some(0), &[declared("r.xml", "<testsuites/>")], &out(b""));
        assert_eq!(kinds(&a), ["report_has_no_tests"]);
    }

    #[test]
    fn a_failing_report_with_exit_zero_is_not_green() {
        let r = declared(
            "r.xml",
            r#"<testsuite name="s"><testcase name="t"><failure/></testcase></testsuite>"#,
        );
        let a = agree(Some(0), &[r], &out(b""));
        assert_eq!(kinds(&a), ["report_shows_failures"]);
    }

    #[test]
    fn a_libtest_binary_without_its_result_line_is_not_green() {
        let a = agree(Some(0), &[], &out(b"running 2 tests\ntest a ... ok\n"));
        assert_eq!(kinds(&a), ["report_incomplete"]);
    }

    #[test]
    fn a_report_whose_attributes_contradict_its_entries_is_not_green() {
        let r = declared(
            "r.xml",
            r#"<testsuite name="s" tests="3"><testcase name="t"/></testsuite>"#,
        );
        assert_eq!(
            kinds(&agree(Some(0), &[r], &out(b""))),
            ["report_contradicts_itself"]
        );
    }

    #[test]
    fn a_pytest_summary_counting_other_tests_than_its_report_is_not_green() {
        let r = declared(
            "r.xml",
            r#"<testsuites><testsuite name="pytest" tests="1"><testcase classname="t" name="a"/></testsuite></testsuites>"#,
        );
        assert_eq!(r.result.as_ref().unwrap().producer, Some(Producer::Pytest));
        let a = agree(
            Some(0),
            &[r],
            &out(b"========== 2 passed in 0.01s ==========\n"),
        );
        assert_eq!(kinds(&a), ["summary_contradicts_reports"]);
    }

    #[test]
    fn summaries_whose_sum_passes_u64_contradict_their_report_rather_than_overflow() {
        let r = declared(
            "r.xml",
            r#"<testsuites><testsuite name="pytest" tests="1"><testcase classname="t" name="a"/></testsuite></testsuites>"#,
        );
        let line = format!(
            "========== {} passed, {} skipped in 0.01s ==========\n",
            u64::MAX,
            u64::MAX
        );
        let a = agree(Some(0), &[r], &out(line.repeat(2).as_bytes()));
        assert_eq!(kinds(&a), ["summary_contradicts_reports"]);
    }

    #[test]
    fn a_failing_summary_line_with_exit_zero_is_not_green() {
        let a = agree(Some(0), &[], &out(b"FAIL\texample.com/p\t0.01s\n"));
        assert_eq!(kinds(&a), ["summary_shows_failures"]);
    }

    #[test]
    fn truncated_output_without_a_declared_report_is_not_green() {
        let captured = CapturedOutput {
            stdout: GREEN_LIB,
            stderr: b"",
            truncated: true,
        };
        assert_eq!(kinds(&agree(Some(0), &[], &captured)), ["output_truncated"]);
    }

    #[test]
    fn truncated_output_with_a_declared_report_holding_the_tests_is_judged_by_the_report() {
        let junit = r#"<testsuite name="s" tests="1" failures="0" errors="0" skipped="0"><testcase classname="t" name="a"/></testsuite>"#;
        let captured = CapturedOutput {
            stdout: b"...\n",
            stderr: b"",
            truncated: true,
        };
        let green = agree(Some(0), &[declared("out/junit.xml", junit)], &captured);
        assert!(
            matches!(&green, Agreement::Green { sources } if sources.len() == 1 && sources[0].name == "out/junit.xml"),
            "{green:?}"
        );
        let failing = r#"<testsuite name="s" tests="1" failures="1" errors="0" skipped="0"><testcase classname="t" name="a"><failure message="x"/></testcase></testsuite>"#;
        assert_eq!(
            kinds(&agree(
                Some(0),
                &[declared("out/junit.xml", failing)],
                &captured
            )),
            ["report_shows_failures"]
        );
    }

    #[test]
    fn truncated_output_with_a_declared_report_of_zero_tests_is_not_green() {
        let empty =
            r#"<testsuite name="s" tests="0" failures="0" errors="0" skipped="0"></testsuite>"#;
        let captured = CapturedOutput {
            stdout: b"",
            stderr: b"",
            truncated: true,
        };
        assert_eq!(
            kinds(&agree(
                Some(0),
                &[declared("out/junit.xml", empty)],
                &captured
            )),
            ["output_truncated", "report_has_no_tests"]
        );
    }

    #[test]
    fn an_unknown_report_format_is_named_as_unusable() {
        let r = declared("r.txt", "hello\n");
        let a = agree(Some(0), &[r], &out(b""));
        let Agreement::Disagree { disagreements } = a else {
            panic!()
        };
        assert!(
            disagreements[0]
                .to_string()
                .starts_with("report r.txt: not a known report format"),
            "{}",
            disagreements[0]
        );
    }
}
