//! Failure excerpts on real samples: each red sample under tests/fixtures/reports/ (written by
//! the real tools, ci/report-samples.sh) keeps, for its one failing test, what that failure
//! printed, and nothing for the tests that passed.

use loopexec::testreport::agreement::{output_report, CapturedOutput};
use loopexec::testreport::{parse_report, Excerpt, ParsedReport};
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

/// The one excerpt of a red sample, checked to belong to its one failing test.
fn only_excerpt(r: &ParsedReport, id: &str) -> Excerpt {
    assert_eq!(r.excerpts.keys().collect::<Vec<_>>(), [id]);
    r.excerpts[id].clone()
}

#[test]
fn pytest_junit_keeps_the_failure_message_and_traceback() {
    let e = only_excerpt(
        &report("pytest-red.xml"),
        "tests.test_calc.TestCalc::test_wrong_when_asked",
    );
    assert!(!e.cut);
    assert!(e.text.starts_with("AssertionError: assert '1' != '1'\nself = <test_calc.TestCalc object at 0x7f512382bc50>\n"), "{}", e.text);
    assert!(
        e.text.ends_with(
            "E       AssertionError: assert '1' != '1'\n\ntests/test_calc.py:36: AssertionError"
        ),
        "{}",
        e.text
    );
}

#[test]
fn nextest_junit_keeps_the_panic_message() {
    let e = only_excerpt(
        &report("nextest-red.xml"),
        "sample::tests::wrong_when_asked",
    );
    assert!(e.text.contains("panicked at src/lib.rs:39:9:\nassertion `left != right` failed\n  left: Ok(\"1\")\n right: Ok(\"1\")"), "{}", e.text);
}

#[test]
fn go_test_json_keeps_the_failing_tests_own_output_lines() {
    let e = only_excerpt(
        &report("go-test-json-red.jsonl"),
        "example.com/sample/calc/TestWrongWhenAsked",
    );
    assert_eq!(
        e.text,
        "calc_test.go:34: asked to fail\n--- FAIL: TestWrongWhenAsked (0.00s)"
    );
}

#[test]
fn node_tap_keeps_the_yaml_diagnostic_block_of_the_failing_point() {
    let e = only_excerpt(&report("node-tap-red.tap"), "math > wrong when asked");
    assert!(
        e.text.starts_with(
            "duration_ms: 0.960898\nlocation: '/tmp/samples/node/test/math.test.js:9:3'\n"
        ),
        "{}",
        e.text
    );
    assert!(
        e.text
            .contains("error: `Expected \"actual\" to be strictly unequal to: '1'`\n"),
        "{}",
        e.text
    );
}

#[test]
fn libtest_output_keeps_the_failing_tests_stdout_section_and_panic() {
    let stdout = sample("cargo-test-red.stdout");
    let stderr = sample("cargo-test-red.stderr");
    let r = output_report(&CapturedOutput {
        stdout: &stdout,
        stderr: &stderr,
        truncated: false,
    })
    .unwrap()
    .unwrap();
    let e = only_excerpt(&r, "sample::tests::wrong_when_asked");
    assert_eq!(
        e.text,
        "thread 'tests::wrong_when_asked' (8591) panicked at src/lib.rs:39:9:\nassertion `left != right` failed\n  left: Ok(\"1\")\n right: Ok(\"1\")"
    );
}

#[test]
fn green_samples_keep_no_excerpt() {
    for name in [
        "pytest-green.xml",
        "nextest-green.xml",
        "go-test-json-green.jsonl",
        "node-tap-green.tap",
        "perl-tap-green.tap",
    ] {
        assert!(report(name).excerpts.is_empty(), "{name}");
    }
}

#[test]
fn a_report_full_of_long_failures_keeps_excerpts_within_the_bounds() {
    use loopexec::testreport::excerpt::{MAX_EXCERPTS, MAX_EXCERPT_BYTES, MAX_TOTAL_BYTES};
    let body = "x".repeat(3 * 1024);
    let mut xml = String::from("<testsuite name=\"s\">");
    for i in 0..5000 {
        xml.push_str(&format!(
            "<testcase name=\"t{i:05}\"><failure message=\"m\">{body}</failure></testcase>"
        ));
    }
    xml.push_str("</testsuite>");
    let r = parse_report(xml.as_bytes(), "big.xml", None).unwrap();
    assert_eq!(r.failing.len(), 5000);
    assert_eq!(
        r.excerpts.len(),
        (MAX_TOTAL_BYTES / MAX_EXCERPT_BYTES).min(MAX_EXCERPTS)
    );
    assert!(r
        .excerpts
        .values()
        .all(|e| e.cut && e.text.len() <= MAX_EXCERPT_BYTES));
    assert!(r.excerpts.values().map(|e| e.text.len()).sum::<usize>() <= MAX_TOTAL_BYTES);
}

#[test]
fn go_test_json_output_of_many_running_tests_is_gathered_within_each_bound() {
    let mut stream = String::new();
    for i in 0..2000 {
        stream.push_str(&format!(
            "{{\"Action\":\"run\",\"Package\":\"p\",\"Test\":\"T{i}\"}}\n"
        ));
        stream.push_str(&format!(
            "{{\"Action\":\"output\",\"Package\":\"p\",\"Test\":\"T{i}\",\"Output\":\"{}\\n\"}}\n",
            "y".repeat(4000)
        ));
    }
    for i in 0..2000 {
        stream.push_str(&format!(
            "{{\"Action\":\"fail\",\"Package\":\"p\",\"Test\":\"T{i}\"}}\n"
        ));
    }
    stream.push_str("{\"Action\":\"fail\",\"Package\":\"p\"}\n");
    let r = parse_report(stream.as_bytes(), "go.json", None).unwrap();
    assert_eq!(r.failing.len(), 2000);
    assert!(r.excerpts.len() <= loopexec::testreport::excerpt::MAX_EXCERPTS);
    assert!(r
        .excerpts
        .values()
        .all(|e| e.cut && e.text.len() == loopexec::testreport::excerpt::MAX_EXCERPT_BYTES));
}
