//! The report parsers and the agreement on real samples: the files under
//! tests/fixtures/reports/ were written by the real tools (ci/report-samples.sh, versions in
//! tests/fixtures/reports/VERSIONS) on the projects in tests/fixtures/reports/projects/, each
//! of which has one test that fails only when asked to, so every tool left a green and a red
//! sample of the same collected set.

use loopexec::testreport::agreement::{
    agree, output_report, Agreement, CapturedOutput, Disagreement,
};
use loopexec::testreport::paths::DeclaredReport;
use loopexec::testreport::{parse_report, Counts, Format, ParsedReport, Producer};
use std::path::PathBuf;

fn sample(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/reports")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn report(name: &str) -> ParsedReport {
    parse_report(&sample(name), name, None).unwrap_or_else(|e| panic!("{e}"))
}

fn ids(set: &std::collections::BTreeSet<String>) -> Vec<&str> {
    set.iter().map(String::as_str).collect()
}

fn declared(name: &str) -> DeclaredReport {
    DeclaredReport {
        pattern: name.into(),
        path: Some(name.into()),
        result: parse_report(&sample(name), name, None),
    }
}

fn kinds(a: &Agreement) -> Vec<&'static str> {
    assert!(
        matches!(a, Agreement::Disagree { .. }),
        "not a disagreement: {a:?}"
    );
    a.disagreements().iter().map(Disagreement::kind).collect()
}

fn no_output() -> CapturedOutput<'static> {
    CapturedOutput {
        stdout: b"",
        stderr: b"",
        truncated: false,
    }
}

const PYTEST_IDS: [&str; 8] = [
    "tests.test_calc.TestCalc::test_wrong_when_asked",
    "tests.test_calc.TestCalc::test_zero",
    "tests.test_calc::test_add",
    "tests.test_calc::test_add_table[1-1-2]",
    "tests.test_calc::test_add_table[2-3-5]",
    "tests.test_calc::test_known_bug",
    "tests.test_calc::test_skipped",
    "tests.test_strs::test_upper",
];

#[test]
fn pytest_junit_green_sample_gives_the_collected_and_skipped_sets() {
    let r = report("pytest-green.xml");
    assert_eq!(
        (r.format, r.producer),
        (Format::Junit, Some(Producer::Pytest))
    );
    assert_eq!(ids(&r.collected), PYTEST_IDS);
    assert_eq!(
        ids(&r.skipped),
        [
            "tests.test_calc::test_known_bug",
            "tests.test_calc::test_skipped"
        ]
    );
    assert!(r.failing.is_empty());
    assert_eq!(
        r.counts,
        Counts {
            total: 8,
            passed: 6,
            failed: 0,
            skipped: 2
        }
    );
    assert_eq!(r.declared, Some(r.counts));
}

#[test]
fn pytest_junit_red_sample_gives_the_failing_test() {
    let r = report("pytest-red.xml");
    assert_eq!(ids(&r.collected), PYTEST_IDS);
    assert_eq!(
        ids(&r.failing),
        ["tests.test_calc.TestCalc::test_wrong_when_asked"]
    );
    assert_eq!(r.declared, Some(r.counts));
}

#[test]
fn pytest_green_run_agrees_with_its_final_line() {
    let stdout = sample("pytest-green.stdout");
    let out = CapturedOutput {
        stdout: &stdout,
        stderr: b"",
        truncated: false,
    };
    let a = agree(Some(0), &[declared("pytest-green.xml")], &out);
    assert!(
        matches!(a, Agreement::Green { ref sources } if sources.len() == 2),
        "{a:?}"
    );
}

#[test]
fn pytest_red_run_with_exit_zero_disagrees_by_report_and_final_line() {
    let stdout = sample("pytest-red.stdout");
    let out = CapturedOutput {
        stdout: &stdout,
        stderr: b"",
        truncated: false,
    };
    assert_eq!(
        kinds(&agree(Some(0), &[declared("pytest-red.xml")], &out)),
        ["report_shows_failures", "summary_shows_failures"]
    );
}

#[test]
fn pytest_green_report_against_another_runs_final_line_disagrees() {
    let out = CapturedOutput {
        stdout: b"============ 7 passed, 1 skipped in 0.10s ============\n",
        stderr: b"",
        truncated: false,
    };
    assert_eq!(
        kinds(&agree(Some(0), &[declared("pytest-green.xml")], &out)),
        ["summary_contradicts_reports"]
    );
}

const NEXTEST_IDS: [&str; 5] = [
    "sample::bin/sample::tests::adds",
    "sample::it::adds_from_outside",
    "sample::tests::adds",
    "sample::tests::overflows",
    "sample::tests::wrong_when_asked",
];

#[test]
fn nextest_junit_samples_give_binary_qualified_ids() {
    let green = report("nextest-green.xml");
    assert_eq!(green.producer, Some(Producer::Nextest));
    assert_eq!(ids(&green.collected), NEXTEST_IDS);
    assert!(green.failing.is_empty());
    assert_eq!(green.declared, Some(green.counts));
    let red = report("nextest-red.xml");
    assert_eq!(ids(&red.collected), NEXTEST_IDS);
    assert_eq!(ids(&red.failing), ["sample::tests::wrong_when_asked"]);
}

#[test]
fn nextest_green_run_agrees_with_its_summary_line_and_red_does_not() {
    let stderr = sample("nextest-green.stderr");
    let out = CapturedOutput {
        stdout: b"",
        stderr: &stderr,
        truncated: false,
    };
    let a = agree(Some(0), &[declared("nextest-green.xml")], &out);
    assert!(
        matches!(a, Agreement::Green { ref sources } if sources.len() == 2),
        "{a:?}"
    );
    let stderr = sample("nextest-red.stderr");
    let out = CapturedOutput {
        stdout: b"",
        stderr: &stderr,
        truncated: false,
    };
    assert_eq!(
        kinds(&agree(Some(0), &[declared("nextest-red.xml")], &out)),
        ["report_shows_failures", "summary_shows_failures"]
    );
}

const CARGO_IDS: [&str; 8] = [
    "bin/sample::tests::adds",
    "doc/sample::src/lib.rs - add",
    "doc/sample::src/lib.rs - add - compile",
    "sample::tests::adds",
    "sample::tests::overflows - should panic",
    "sample::tests::slow_one",
    "sample::tests::wrong_when_asked",
    "test/it::adds_from_outside",
];

fn cargo_output(colour: &str) -> (Vec<u8>, Vec<u8>) {
    (
        sample(&format!("cargo-test-{colour}.stdout")),
        sample(&format!("cargo-test-{colour}.stderr")),
    )
}

#[test]
fn cargo_test_output_is_a_report_with_ids_per_test_binary() {
    let (stdout, stderr) = cargo_output("green");
    let out = CapturedOutput {
        stdout: &stdout,
        stderr: &stderr,
        truncated: false,
    };
    let r = output_report(&out).unwrap().unwrap();
    assert_eq!(
        (r.format, r.producer),
        (Format::Libtest, Some(Producer::Libtest))
    );
    assert_eq!(ids(&r.collected), CARGO_IDS);
    assert_eq!(ids(&r.skipped), ["sample::tests::slow_one"]);
    assert!(r.failing.is_empty());
    assert!(r.incomplete.is_empty(), "{:?}", r.incomplete);
    assert_eq!(r.declared, Some(r.counts));
}

#[test]
fn cargo_test_green_output_agrees_and_red_output_with_exit_zero_does_not() {
    let (stdout, stderr) = cargo_output("green");
    let a = agree(
        Some(0),
        &[],
        &CapturedOutput {
            stdout: &stdout,
            stderr: &stderr,
            truncated: false,
        },
    );
    assert!(
        matches!(a, Agreement::Green { ref sources } if sources.len() == 1),
        "{a:?}"
    );
    let (stdout, stderr) = cargo_output("red");
    let a = agree(
        Some(0),
        &[],
        &CapturedOutput {
            stdout: &stdout,
            stderr: &stderr,
            truncated: false,
        },
    );
    assert_eq!(kinds(&a), ["report_shows_failures"]);
    let Agreement::Disagree { disagreements } = a else {
        unreachable!()
    };
    assert!(
        matches!(&disagreements[0], Disagreement::ReportShowsFailures { failing, .. } if failing == &["sample::tests::wrong_when_asked"])
    );
}

#[test]
fn cargo_test_output_cut_after_a_running_line_disagrees() {
    let (stdout, stderr) = cargo_output("green");
    let text = String::from_utf8(stdout).unwrap();
    let cut = &text[..text.rfind("test result:").unwrap()];
    let a = agree(
        Some(0),
        &[],
        &CapturedOutput {
            stdout: cut.as_bytes(),
            stderr: &stderr,
            truncated: false,
        },
    );
    assert_eq!(kinds(&a), ["report_incomplete"]);
}

const GO_IDS: [&str; 7] = [
    "example.com/sample/calc/TestAdd",
    "example.com/sample/calc/TestSkipped",
    "example.com/sample/calc/TestTable",
    "example.com/sample/calc/TestTable/negative",
    "example.com/sample/calc/TestTable/small",
    "example.com/sample/calc/TestWrongWhenAsked",
    "example.com/sample/strs/TestShout",
];

#[test]
fn go_test_json_samples_give_package_slash_test_ids() {
    let green = report("go-test-json-green.jsonl");
    assert_eq!(
        (green.format, green.producer),
        (Format::GoJson, Some(Producer::GoTest))
    );
    assert_eq!(ids(&green.collected), GO_IDS);
    assert_eq!(ids(&green.skipped), ["example.com/sample/calc/TestSkipped"]);
    assert!(green.failing.is_empty() && green.incomplete.is_empty());
    let red = report("go-test-json-red.jsonl");
    assert_eq!(ids(&red.collected), GO_IDS);
    assert_eq!(
        ids(&red.failing),
        ["example.com/sample/calc/TestWrongWhenAsked"]
    );
}

#[test]
fn go_plain_output_green_agrees_and_red_with_exit_zero_does_not() {
    let stdout = sample("go-test-green.stdout");
    let a = agree(
        Some(0),
        &[declared("go-test-json-green.jsonl")],
        &CapturedOutput {
            stdout: &stdout,
            stderr: b"",
            truncated: false,
        },
    );
    assert!(matches!(a, Agreement::Green { .. }), "{a:?}");
    let stdout = sample("go-test-red.stdout");
    let a = agree(
        Some(0),
        &[],
        &CapturedOutput {
            stdout: &stdout,
            stderr: b"",
            truncated: false,
        },
    );
    // `--- FAIL: TestWrongWhenAsked` and `FAIL\texample.com/sample/calc\t0.006s`.
    assert_eq!(
        kinds(&a),
        ["summary_shows_failures", "summary_shows_failures"]
    );
}

#[test]
fn go_json_stream_as_captured_stdout_shows_its_fail_lines() {
    let stdout = sample("go-test-json-red.jsonl");
    let a = agree(
        Some(0),
        &[],
        &CapturedOutput {
            stdout: &stdout,
            stderr: b"",
            truncated: false,
        },
    );
    assert!(
        kinds(&a).iter().all(|k| *k == "summary_shows_failures"),
        "{a:?}"
    );
}

const NODE_IDS: [&str; 8] = [
    "math > adds",
    "math > skipped one",
    "math > todo one",
    "math > wrong when asked",
    "upper",
    "with subtests",
    "with subtests > inner a",
    "with subtests > inner b # not a directive",
];

#[test]
fn node_tap_samples_give_suite_chain_ids_and_node_counts() {
    let green = report("node-tap-green.tap");
    assert_eq!(
        (green.format, green.producer),
        (Format::Tap, Some(Producer::NodeTest))
    );
    assert_eq!(ids(&green.collected), NODE_IDS);
    assert_eq!(
        ids(&green.skipped),
        ["math > skipped one", "math > todo one"]
    );
    assert!(green.failing.is_empty());
    assert_eq!(
        green.counts,
        Counts {
            total: 8,
            passed: 6,
            failed: 0,
            skipped: 2
        }
    );
    assert_eq!(green.declared, Some(green.counts));
    let red = report("node-tap-red.tap");
    assert_eq!(ids(&red.collected), NODE_IDS);
    assert_eq!(ids(&red.failing), ["math > wrong when asked"]);
    assert_eq!(red.declared, Some(red.counts));
}

#[test]
fn node_tap_as_captured_stdout_agrees_with_the_tap_report() {
    let stdout = sample("node-tap-green.tap");
    let a = agree(
        Some(0),
        &[declared("node-tap-green.tap")],
        &CapturedOutput {
            stdout: &stdout,
            stderr: b"",
            truncated: false,
        },
    );
    assert!(matches!(a, Agreement::Green { .. }), "{a:?}");
    let stdout = sample("node-tap-red.tap");
    let a = agree(
        Some(0),
        &[declared("node-tap-red.tap")],
        &CapturedOutput {
            stdout: &stdout,
            stderr: b"",
            truncated: false,
        },
    );
    assert_eq!(
        kinds(&a),
        ["report_shows_failures", "summary_shows_failures"]
    );
}

#[test]
fn node_spec_reporter_counts_agree_with_the_tap_report_of_the_same_run() {
    let stdout = sample("node-spec-green.stdout");
    let a = agree(
        Some(0),
        &[declared("node-tap-green.tap")],
        &CapturedOutput {
            stdout: &stdout,
            stderr: b"",
            truncated: false,
        },
    );
    assert!(
        matches!(a, Agreement::Green { ref sources } if sources.len() == 2),
        "{a:?}"
    );
    let stdout = sample("node-spec-red.stdout");
    let a = agree(
        Some(0),
        &[declared("node-tap-red.tap")],
        &CapturedOutput {
            stdout: &stdout,
            stderr: b"",
            truncated: false,
        },
    );
    assert_eq!(
        kinds(&a),
        ["report_shows_failures", "summary_shows_failures"]
    );
}

#[test]
fn perl_tap_samples_treat_skip_and_todo_as_skipped() {
    let green = report("perl-tap-green.tap");
    assert_eq!(green.producer, None);
    assert_eq!(
        ids(&green.collected),
        ["#2", "adds", "known bug", "wrong when asked"]
    );
    assert_eq!(ids(&green.skipped), ["#2", "known bug"]);
    assert!(green.failing.is_empty());
    assert_eq!(
        ids(&report("perl-tap-red.tap").failing),
        ["wrong when asked"]
    );
}

#[test]
fn prove_output_green_agrees_and_red_with_exit_zero_does_not() {
    let stdout = sample("prove-green.stdout");
    let a = agree(
        Some(0),
        &[declared("perl-tap-green.tap")],
        &CapturedOutput {
            stdout: &stdout,
            stderr: b"",
            truncated: false,
        },
    );
    assert!(matches!(a, Agreement::Green { .. }), "{a:?}");
    let stdout = sample("prove-red.stdout");
    let a = agree(
        Some(0),
        &[],
        &CapturedOutput {
            stdout: &stdout,
            stderr: b"",
            truncated: false,
        },
    );
    assert_eq!(kinds(&a), ["summary_shows_failures"]);
}

#[test]
fn every_red_sample_is_red_with_its_real_exit_code() {
    for name in [
        "pytest-red.xml",
        "nextest-red.xml",
        "go-test-json-red.jsonl",
        "node-tap-red.tap",
        "perl-tap-red.tap",
    ] {
        assert_eq!(
            agree(Some(1), &[declared(name)], &no_output()),
            Agreement::Red {
                exit_code: Some(1),
                gaps: vec![]
            },
            "{name}"
        );
    }
}
