//! Hostile and broken reports, read the way the engine reads them (beneath a directory, by the
//! declared patterns): each is a clear error naming the report and what is wrong, never an empty
//! set; and the report patterns resolve without following links.

use loopexec::safefs::SafeDir;
use loopexec::testreport::paths::{collect, resolve, ReportPatterns};
use loopexec::testreport::{read_report, ReportProblem};
use std::fs;

fn dir_with(files: &[(&str, &[u8])]) -> (tempfile::TempDir, SafeDir) {
    let tmp = tempfile::tempdir().unwrap();
    for (name, bytes) in files {
        let path = tmp.path().join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }
    let dir = SafeDir::open(tmp.path()).unwrap();
    (tmp, dir)
}

fn error_of(name: &str, bytes: &[u8]) -> String {
    let (_tmp, dir) = dir_with(&[(name, bytes)]);
    read_report(&dir, name, None).unwrap_err().to_string()
}

#[test]
fn truncated_xml_names_the_report() {
    let xml = br#"<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="2"><testcase classname="a" name="b"/>"#;
    assert_eq!(
        error_of("out/junit.xml", xml),
        format!("report out/junit.xml: malformed junit at byte {}: truncated: the document ends inside <testsuite>", xml.len())
    );
}

#[test]
fn a_wrong_root_names_the_report() {
    assert_eq!(
        error_of("junit.xml", b"<?xml version=\"1.0\"?>\n<coverage line-rate=\"1\"/>"),
        "report junit.xml: malformed junit at byte 22: the root element is <coverage>, not <testsuites> or <testsuite>"
    );
}

#[test]
fn a_ten_megabyte_line_names_the_report_and_line() {
    let mut tap = b"TAP version 13\nok 1 - a\n# ".to_vec();
    tap.extend(std::iter::repeat_n(b'x', 10 * 1024 * 1024));
    tap.extend(b"\n1..1\n");
    assert_eq!(
        error_of("node.tap", &tap),
        "report node.tap: malformed tap at line 3: a line of 10485762 bytes is longer than the 1048576 allowed"
    );
}

#[test]
fn deep_nesting_names_the_report_instead_of_overflowing() {
    let xml = format!("<testsuites>{}", "<testsuite name=\"s\">".repeat(1_000_000));
    let err = error_of("deep.xml", xml.as_bytes());
    assert!(
        err.starts_with("report deep.xml: malformed junit at byte "),
        "{err}"
    );
    assert!(err.ends_with(": elements nested deeper than 256"), "{err}");
}

#[test]
fn a_tap_plan_mismatch_names_the_report() {
    assert_eq!(
        error_of("t.tap", b"TAP version 14\n1..3\nok 1 - a\nok 2 - b\n"),
        "report t.tap: malformed tap at line 2: the plan 1..3 does not match the 2 test points"
    );
}

#[test]
fn a_go_json_stream_with_garbage_names_the_report_and_line() {
    let stream = b"{\"Action\":\"run\",\"Package\":\"p\",\"Test\":\"TestA\"}\n# p\n./a_test.go:3: syntax error\n";
    let err = error_of("go.json", stream);
    assert!(
        err.starts_with("report go.json: malformed go-json at line 2: not a go test -json event ("),
        "{err}"
    );
}

#[test]
fn an_empty_report_is_empty_not_zero_tests() {
    assert_eq!(error_of("r.xml", b"\n  \n"), "report r.xml: empty");
}

#[test]
fn an_unknown_format_shows_its_first_bytes_escaped() {
    assert_eq!(
        error_of("r.txt", b"\x1b[31mall good\n"),
        "report r.txt: not a known report format (JUnit XML, go test -json, TAP, libtest output); it starts with \"\\u{1b}[31mall good\\n\""
    );
}

#[test]
fn a_report_name_with_control_characters_is_shown_escaped() {
    let err = error_of("r\x1b]0;x\x07.xml", b"<html/>");
    assert!(err.starts_with("report r\\u{1b}]0;x\\u{7}.xml: "), "{err}");
}

#[test]
fn an_oversized_report_is_refused_before_parsing() {
    let (tmp, dir) = dir_with(&[]);
    let f = fs::File::create(tmp.path().join("big.xml")).unwrap();
    f.set_len(loopexec::testreport::MAX_REPORT_BYTES + 1)
        .unwrap();
    let err = read_report(&dir, "big.xml", None).unwrap_err();
    assert_eq!(
        err.problem,
        ReportProblem::TooLarge {
            limit: loopexec::testreport::MAX_REPORT_BYTES
        }
    );
}

#[test]
fn globs_match_within_and_across_directories_sorted() {
    let (_tmp, dir) = dir_with(&[
        ("reports/b.xml", b"<testsuite/>"),
        ("reports/a.xml", b"<testsuite/>"),
        ("reports/deep/c.xml", b"<testsuite/>"),
        ("reports/notes.txt", b""),
    ]);
    let patterns =
        ReportPatterns::new(&["reports/*.xml", "reports/**/*.xml", "missing/*.xml"]).unwrap();
    let r = resolve(&dir, &patterns).unwrap();
    let found: Vec<(&str, &str)> = r
        .found
        .iter()
        .map(|f| (f.pattern.as_str(), f.path.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            ("reports/*.xml", "reports/a.xml"),
            ("reports/*.xml", "reports/b.xml"),
            ("reports/**/*.xml", "reports/a.xml"),
            ("reports/**/*.xml", "reports/b.xml"),
            ("reports/**/*.xml", "reports/deep/c.xml"),
        ]
    );
    assert_eq!(r.unmatched, ["missing/*.xml"]);
}

#[test]
fn patterns_resolve_through_the_directory_descriptor_not_its_path() {
    let (tmp, dir) = dir_with(&[("r.xml", b"<testsuite/>"), ("out/a.xml", b"<testsuite/>")]);
    let moved = tmp.path().with_extension("moved");
    fs::rename(tmp.path(), &moved).unwrap();
    fs::create_dir(tmp.path()).unwrap();
    let r = resolve(
        &dir,
        &ReportPatterns::new(&["r.xml", "*.xml", "out/*.xml"]).unwrap(),
    )
    .unwrap();
    fs::remove_dir_all(&moved).unwrap();
    assert_eq!(
        r.found.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
        ["r.xml", "r.xml", "out/a.xml"]
    );
    assert!(r.unmatched.is_empty());
}

#[test]
fn a_symlinked_directory_is_not_entered() {
    let (tmp, dir) = dir_with(&[("elsewhere/r.xml", b"<testsuite/>")]);
    std::os::unix::fs::symlink(tmp.path().join("elsewhere"), tmp.path().join("reports")).unwrap();
    let patterns = ReportPatterns::new(&["reports/*.xml", "**/r.xml"]).unwrap();
    let r = resolve(&dir, &patterns).unwrap();
    assert_eq!(r.unmatched, ["reports/*.xml"]);
    assert_eq!(
        r.found.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
        ["elsewhere/r.xml"]
    );
}

#[test]
fn a_symlinked_report_matches_and_is_refused_when_read() {
    let (tmp, dir) = dir_with(&[(
        "real.xml",
        b"<testsuite name='s'><testcase name='t'/></testsuite>",
    )]);
    std::os::unix::fs::symlink(tmp.path().join("real.xml"), tmp.path().join("junit.xml")).unwrap();
    let patterns = ReportPatterns::new(&["junit.xml"]).unwrap();
    let reports = collect(&dir, &patterns, None).unwrap();
    assert_eq!(reports.len(), 1);
    let err = reports[0].result.as_ref().unwrap_err();
    assert!(
        matches!(err.problem, ReportProblem::Unreadable { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("refusing to follow a symlink"),
        "{err}"
    );
}

#[test]
fn a_pattern_that_matched_nothing_is_a_missing_report() {
    let (_tmp, dir) = dir_with(&[]);
    let reports = collect(
        &dir,
        &ReportPatterns::new(&["target/nextest/default/junit.xml"]).unwrap(),
        None,
    )
    .unwrap();
    assert_eq!(reports[0].path, None);
    assert_eq!(
        reports[0].result.as_ref().unwrap_err().to_string(),
        "report target/nextest/default/junit.xml: missing (the check did not write it)"
    );
}
