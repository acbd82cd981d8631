//! One test per runner: run the real tool now on its tiny project (copied from
//! tests/fixtures/reports/projects/ into a temp dir), read what it left the way the engine will
//! (report patterns resolved beneath the directory, the captured output), and check the sets
//! against the committed sample of the same project and the verdict against the exit code.
//!
//! vitest and jest (with jest-junit) come from npm, installed by ci/fetch-js-runners.sh into the
//! test-project cache from the committed lock (tests/fixtures/reports/js-runners/); each JS project
//! links its `node_modules` there.
//!
//! Each project has one test that fails only with SAMPLE_FAIL=1: the red run must exit non-zero
//! and show exactly that failing test; the same evidence under a pretended exit 0 must disagree.
//! A missing tool fails the test under CI (`CI=true`); elsewhere it is reported on stderr and the
//! test returns (the unprivileged re-run of ci/test.sh has no cargo on its PATH).

use loopexec::safefs::SafeDir;
use loopexec::testreport::agreement::{
    agree, output_report, Agreement, CapturedOutput, Disagreement,
};
use loopexec::testreport::paths::{collect, DeclaredReport, ReportPatterns};
use loopexec::testreport::{parse_report, ParsedReport};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reports")
}

/// The first of `names` on PATH; under CI a missing tool is a failure, elsewhere a notice.
fn tool(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in names {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "{} not found on PATH under CI: ci/setup.sh installs it",
            names.join(" / ")
        );
    }
    eprintln!(
        "NOT RUN: {} not found on PATH (CI=true makes this a failure)",
        names.join(" / ")
    );
    None
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn project(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("projects").join(name), tmp.path());
    tmp
}

/// A scrubbed command: PATH, HOME and the toolchain locations only, plus SAMPLE_FAIL.
fn command(program: &Path, dir: &Path, fail: bool) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(dir)
        .env_clear()
        .env("SAMPLE_FAIL", if fail { "1" } else { "0" })
        .env("LANG", "C.UTF-8");
    for key in [
        "PATH",
        "HOME",
        "RUSTUP_HOME",
        "CARGO_HOME",
        "RUSTUP_TOOLCHAIN",
    ] {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd
}

struct Ran {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn run(cmd: &mut Command) -> Ran {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    Ran {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: out.stderr,
    }
}

impl Ran {
    fn output(&self) -> CapturedOutput<'_> {
        CapturedOutput {
            stdout: &self.stdout,
            stderr: &self.stderr,
            truncated: false,
        }
    }

    fn show(&self) -> String {
        format!(
            "exit {:?}\n{}\n{}",
            self.code,
            String::from_utf8_lossy(&self.stdout),
            String::from_utf8_lossy(&self.stderr)
        )
    }
}

fn sample(name: &str) -> ParsedReport {
    parse_report(&std::fs::read(fixtures().join(name)).unwrap(), name, None).unwrap()
}

fn reports_in(dir: &Path, pattern: &str) -> Vec<DeclaredReport> {
    let safe = SafeDir::open(dir).unwrap();
    collect(&safe, &ReportPatterns::new(&[pattern]).unwrap(), None).unwrap()
}

fn parsed(reports: &[DeclaredReport]) -> &ParsedReport {
    assert_eq!(reports.len(), 1, "{reports:?}");
    reports[0].result.as_ref().unwrap_or_else(|e| panic!("{e}"))
}

fn kinds(a: &Agreement) -> Vec<&'static str> {
    assert!(
        matches!(a, Agreement::Disagree { .. }),
        "not a disagreement: {a:?}"
    );
    a.disagreements().iter().map(Disagreement::kind).collect()
}

/// The green run (SAMPLE_FAIL=0) and the red run (SAMPLE_FAIL=1) of one project.
fn green_and_red(
    run_once: impl Fn(bool) -> (Ran, Vec<DeclaredReport>),
) -> [(Ran, Vec<DeclaredReport>); 2] {
    [run_once(false), run_once(true)]
}

fn ids(set: &std::collections::BTreeSet<String>) -> Vec<&str> {
    set.iter().map(String::as_str).collect()
}

/// The checks every runner's pair of runs must pass.
fn assert_green_and_red(
    green: &Ran,
    green_reports: &[DeclaredReport],
    red: &Ran,
    red_reports: &[DeclaredReport],
    red_disagreements: &[&str],
) {
    assert_eq!(green.code, Some(0), "{}", green.show());
    let verdict = agree(green.code, green_reports, &green.output());
    assert!(
        matches!(verdict, Agreement::Green { .. }),
        "{verdict:?}\n{}",
        green.show()
    );
    assert_ne!(red.code, Some(0), "{}", red.show());
    assert_eq!(
        agree(red.code, red_reports, &red.output()),
        Agreement::Red {
            exit_code: red.code,
            gaps: vec![]
        },
        "an honest red run has whole evidence: {}",
        red.show()
    );
    assert_eq!(
        kinds(&agree(Some(0), red_reports, &red.output())),
        red_disagreements,
        "{}",
        red.show()
    );
}

#[test]
fn pytest_junit_report_from_a_real_run() {
    let Some(pytest) = tool(&["pytest-3", "pytest"]) else {
        return;
    };
    let runs = green_and_red(|fail| {
        let dir = project("pytest");
        let ran = run(command(&pytest, dir.path(), fail).args([
            "-p",
            "no:cacheprovider",
            "--junitxml=out/junit.xml",
        ]));
        let reports = reports_in(dir.path(), "out/*.xml");
        (ran, reports)
    });
    let (green, red) = (&runs[0], &runs[1]);
    let expected = sample("pytest-green.xml");
    assert_eq!(parsed(&green.1).collected, expected.collected);
    assert_eq!(parsed(&green.1).skipped, expected.skipped);
    assert_eq!(
        ids(&parsed(&red.1).failing),
        ["tests.test_calc.TestCalc::test_wrong_when_asked"]
    );
    assert_green_and_red(
        &green.0,
        &green.1,
        &red.0,
        &red.1,
        &["report_shows_failures", "summary_shows_failures"],
    );
}

#[test]
fn a_coloured_pytest_run_still_shows_its_final_line() {
    let Some(pytest) = tool(&["pytest-3", "pytest"]) else {
        return;
    };
    let dir = project("pytest");
    let ran =
        run(command(&pytest, dir.path(), true).args(["-p", "no:cacheprovider", "--color=yes"]));
    assert!(ran.stdout.contains(&0x1b), "no colour: {}", ran.show());
    assert_eq!(
        kinds(&agree(Some(0), &[], &ran.output())),
        ["summary_shows_failures"]
    );
}

/// The cargo that runs these tests (`CARGO`), else the one on PATH.
fn cargo() -> Option<PathBuf> {
    match std::env::var_os("CARGO") {
        Some(c) => Some(PathBuf::from(c)),
        None => tool(&["cargo"]),
    }
}

/// Run cargo in the project `dir`, with its target dir inside it.
fn cargo_in(cargo: &Path, dir: &Path, fail: bool, args: &[&str]) -> Ran {
    let mut cmd = command(cargo, dir, fail);
    cmd.env("CARGO_TARGET_DIR", dir.join("target")).args(args);
    run(&mut cmd)
}

#[test]
fn a_pytest_run_that_exits_zero_mid_run_leaves_no_report_and_is_not_green() {
    let Some(pytest) = tool(&["pytest-3", "pytest"]) else {
        return;
    };
    let dir = project("pytest");
    std::fs::write(
        dir.path().join("tests/test_exit.py"),
        "import os\n\n\ndef test_exits():\n    os._exit(0)\n",
    )
    .unwrap();
    let ran = run(command(&pytest, dir.path(), false).args([
        "-p",
        "no:cacheprovider",
        "--junitxml=out/junit.xml",
    ]));
    assert_eq!(
        ran.code,
        Some(0),
        "pytest believes the planted exit: {}",
        ran.show()
    );
    let verdict = agree(
        ran.code,
        &reports_in(dir.path(), "out/junit.xml"),
        &ran.output(),
    );
    assert_eq!(kinds(&verdict), ["report_unusable"]);
    assert!(verdict.disagreements()[0].is_missing_report());
}

#[test]
fn cargo_test_output_and_nextest_junit_from_a_real_run() {
    let Some(cargo) = cargo() else { return };
    if tool(&["cargo-nextest"]).is_none() {
        return;
    }
    let dir = project("rust");
    let cargo_in = |fail: bool, args: &[&str]| cargo_in(&cargo, dir.path(), fail, args);
    let build = cargo_in(false, &["test", "--offline", "--no-run"]);
    assert_eq!(build.code, Some(0), "{}", build.show());
    let green = cargo_in(false, &["test", "--offline", "--no-fail-fast"]);
    let red = cargo_in(true, &["test", "--offline", "--no-fail-fast"]);
    let report = output_report(&green.output()).unwrap().unwrap();
    let sample_stdout = std::fs::read(fixtures().join("cargo-test-green.stdout")).unwrap();
    let sample_stderr = std::fs::read(fixtures().join("cargo-test-green.stderr")).unwrap();
    let sample_output = CapturedOutput {
        stdout: &sample_stdout,
        stderr: &sample_stderr,
        truncated: false,
    };
    assert_eq!(
        report.collected,
        output_report(&sample_output).unwrap().unwrap().collected
    );
    assert_eq!(ids(&report.skipped), ["sample::tests::slow_one"]);
    let red_report = output_report(&red.output()).unwrap().unwrap();
    assert_eq!(
        ids(&red_report.failing),
        ["sample::tests::wrong_when_asked"]
    );
    assert_green_and_red(&green, &[], &red, &[], &["report_shows_failures"]);

    let green = cargo_in(false, &["nextest", "run", "--offline", "--no-fail-fast"]);
    let green_reports = reports_in(dir.path(), "target/nextest/*/junit.xml");
    let red = cargo_in(true, &["nextest", "run", "--offline", "--no-fail-fast"]);
    let red_reports = reports_in(dir.path(), "target/nextest/*/junit.xml");
    assert_eq!(
        parsed(&green_reports).collected,
        sample("nextest-green.xml").collected
    );
    assert_eq!(
        ids(&parsed(&red_reports).failing),
        ["sample::tests::wrong_when_asked"]
    );
    assert_green_and_red(
        &green,
        &green_reports,
        &red,
        &red_reports,
        &["report_shows_failures", "summary_shows_failures"],
    );
}

#[test]
fn a_test_binary_that_exits_zero_mid_run_is_not_green_under_cargo_test() {
    let Some(cargo) = cargo() else { return };
    let dir = project("rust");
    std::fs::write(
        dir.path().join("tests/exits.rs"),
        "#[test]\nfn first() {}\n\n#[test]\nfn second() {\n    std::process::exit(0);\n}\n",
    )
    .unwrap();
    let ran = cargo_in(
        &cargo,
        dir.path(),
        false,
        &[
            "test",
            "--offline",
            "--test",
            "exits",
            "--",
            "--test-threads=1",
        ],
    );
    assert_eq!(
        ran.code,
        Some(0),
        "cargo test believes the planted exit: {}",
        ran.show()
    );
    let verdict = agree(ran.code, &[], &ran.output());
    assert_eq!(kinds(&verdict), ["report_incomplete"]);
    assert_eq!(
        verdict.disagreements()[0].to_string(),
        "report libtest output in stdout: ended abnormally: test/exits: printed `running 2 tests` and no `test result:` line (it exited abnormally)"
    );
}

#[test]
fn go_test_json_from_a_real_run() {
    let Some(go) = tool(&["go"]) else { return };
    let cache = std::env::temp_dir().join(format!(
        "loopexec-testreport-gocache-{}",
        nix::unistd::getuid()
    ));
    let runs = green_and_red(|fail| {
        let dir = project("go");
        let mut cmd = command(&go, dir.path(), fail);
        cmd.args(["test", "-count=1", "-json", "./..."])
            .env("GOPROXY", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("GOCACHE", &cache)
            .env("GOPATH", dir.path().join(".gopath"))
            .env("GOTELEMETRY", "off");
        let ran = run(&mut cmd);
        std::fs::write(dir.path().join("go-test.json"), &ran.stdout).unwrap();
        let reports = reports_in(dir.path(), "go-test.json");
        (ran, reports)
    });
    let (green, red) = (&runs[0], &runs[1]);
    assert_eq!(
        parsed(&green.1).collected,
        sample("go-test-json-green.jsonl").collected
    );
    assert_eq!(
        ids(&parsed(&green.1).skipped),
        ["example.com/sample/calc/TestSkipped"]
    );
    assert_eq!(
        ids(&parsed(&red.1).failing),
        ["example.com/sample/calc/TestWrongWhenAsked"]
    );
    // The stream is the captured stdout too: its `--- FAIL` and `FAIL\tpkg` output lines disagree.
    assert_green_and_red(
        &green.0,
        &green.1,
        &red.0,
        &red.1,
        &[
            "report_shows_failures",
            "summary_shows_failures",
            "summary_shows_failures",
        ],
    );
}

#[test]
fn node_test_tap_from_a_real_run() {
    let Some(node) = tool(&["node", "nodejs"]) else {
        return;
    };
    let runs = green_and_red(|fail| {
        let dir = project("node");
        let ran = run(command(&node, dir.path(), fail).args(["--test", "--test-reporter=tap"]));
        std::fs::write(dir.path().join("node.tap"), &ran.stdout).unwrap();
        let reports = reports_in(dir.path(), "*.tap");
        (ran, reports)
    });
    let (green, red) = (&runs[0], &runs[1]);
    let expected = sample("node-tap-green.tap");
    assert_eq!(parsed(&green.1).collected, expected.collected);
    assert_eq!(parsed(&green.1).declared, Some(parsed(&green.1).counts));
    assert_eq!(ids(&parsed(&red.1).failing), ["math > wrong when asked"]);
    assert_green_and_red(
        &green.0,
        &green.1,
        &red.0,
        &red.1,
        &["report_shows_failures", "summary_shows_failures"],
    );
}

#[test]
fn perl_tap_and_prove_from_a_real_run() {
    let (Some(perl), Some(prove)) = (tool(&["perl"]), tool(&["prove"])) else {
        return;
    };
    let runs = green_and_red(|fail| {
        let dir = project("perl");
        let tap = run(command(&perl, dir.path(), fail).arg("t/basic.t"));
        std::fs::write(dir.path().join("basic.tap"), &tap.stdout).unwrap();
        let ran = run(command(&prove, dir.path(), fail).arg("t/"));
        (ran, reports_in(dir.path(), "basic.tap"))
    });
    let (green, red) = (&runs[0], &runs[1]);
    assert_eq!(
        parsed(&green.1).collected,
        sample("perl-tap-green.tap").collected
    );
    assert_eq!(ids(&parsed(&red.1).failing), ["wrong when asked"]);
    assert_green_and_red(
        &green.0,
        &green.1,
        &red.0,
        &red.1,
        &["report_shows_failures", "summary_shows_failures"],
    );
}

#[test]
fn node_test_junit_and_its_spec_summary_from_a_real_run() {
    let Some(node) = tool(&["node", "nodejs"]) else {
        return;
    };
    let runs = green_and_red(|fail| {
        let dir = project("node");
        // node's own JUnit to a file and its spec reporter (`ℹ tests N` closing lines) on stdout.
        let ran = run(command(&node, dir.path(), fail).args([
            "--test",
            "--test-reporter=junit",
            "--test-reporter-destination=junit.xml",
            "--test-reporter=spec",
            "--test-reporter-destination=stdout",
        ]));
        let reports = reports_in(dir.path(), "*.xml");
        (ran, reports)
    });
    let (green, red) = (&runs[0], &runs[1]);
    let report = parsed(&green.1);
    assert_eq!(
        ids(&report.collected),
        [
            "math > adds",
            "math > skipped one",
            "math > todo one",
            "math > wrong when asked",
            "upper",
            "with subtests > inner a",
            "with subtests > inner b # not a directive"
        ]
    );
    // node's TAP names the same tests the same way (its TAP also lists the parent test itself).
    let tap = sample("node-tap-green.tap");
    let tap_cases: Vec<&str> = ids(&tap.collected)
        .into_iter()
        .filter(|id| *id != "with subtests")
        .collect();
    assert_eq!(ids(&report.collected), tap_cases);
    assert_eq!(
        ids(&report.skipped),
        ["math > skipped one", "math > todo one"]
    );
    assert_eq!(report.declared, Some(report.counts));
    assert_eq!(ids(&parsed(&red.1).failing), ["math > wrong when asked"]);
    assert_eq!(parsed(&red.1).declared, Some(parsed(&red.1).counts));
    assert_green_and_red(
        &green.0,
        &green.1,
        &red.0,
        &red.1,
        &["report_shows_failures", "summary_shows_failures"],
    );
}

/// Writes a node project whose hooks fail: a `before` hook (node cancels the tests under it) and
/// an `after` hook (node 20's JUnit shows no failure for it at all).
fn node_project_with_failing_hooks(dir: &Path, which: &str) {
    std::fs::create_dir_all(dir.join("test")).unwrap();
    let body = format!(
        "const {{ describe, it, {which} }} = require('node:test');\n\
         describe('hooked', () => {{\n  {which}(() => {{ throw new Error('hook failed'); }});\n  it('under hook', () => {{}});\n}});\n\
         describe('plain', () => {{ it('fine', () => {{}}); }});\n"
    );
    std::fs::write(dir.join("test/hooks.test.js"), body).unwrap();
}

#[test]
fn a_failing_before_hook_in_node_junit_fails_the_cancelled_test_and_the_run_is_red() {
    let Some(node) = tool(&["node", "nodejs"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    node_project_with_failing_hooks(dir.path(), "before");
    let ran = run(command(&node, dir.path(), false).args([
        "--test",
        "--test-reporter=junit",
        "--test-reporter-destination=junit.xml",
    ]));
    let reports = reports_in(dir.path(), "junit.xml");
    let report = parsed(&reports);
    assert_eq!(
        ids(&report.collected),
        ["hooked > under hook", "plain > fine"]
    );
    assert_eq!(ids(&report.failing), ["hooked > under hook"]);
    assert_eq!(report.declared, Some(report.counts));
    assert_eq!(
        agree(ran.code, &reports, &ran.output()),
        Agreement::Red {
            exit_code: Some(1),
            gaps: vec![]
        },
        "{}",
        ran.show()
    );
}

#[test]
fn a_failing_after_hook_that_node_junit_does_not_show_still_leaves_the_run_red() {
    let Some(node) = tool(&["node", "nodejs"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    node_project_with_failing_hooks(dir.path(), "after");
    let ran = run(command(&node, dir.path(), false).args([
        "--test",
        "--test-reporter=junit",
        "--test-reporter-destination=junit.xml",
    ]));
    let reports = reports_in(dir.path(), "junit.xml");
    let report = parsed(&reports);
    assert!(
        report.failing.is_empty(),
        "node 20 writes the after hook's failure nowhere in its JUnit: {report:?}"
    );
    assert_eq!(report.declared, Some(report.counts));
    // The exit code is the evidence that counts: red, never green.
    assert_eq!(
        agree(ran.code, &reports, &ran.output()),
        Agreement::Red {
            exit_code: Some(1),
            gaps: vec![]
        },
        "{}",
        ran.show()
    );
}

#[test]
fn cargo_test_names_doctests_by_file_and_item_without_their_line() {
    let Some(cargo) = cargo() else { return };
    let dir = project("rust");
    let ran = cargo_in(&cargo, dir.path(), false, &["test", "--offline", "--doc"]);
    assert_eq!(ran.code, Some(0), "{}", ran.show());
    let report = output_report(&ran.output()).unwrap().unwrap();
    assert_eq!(
        ids(&report.collected),
        [
            "doc/sample::src/lib.rs - add",
            "doc/sample::src/lib.rs - add - compile"
        ]
    );
    // Five lines above the doctests: the same ids.
    let lib = dir.path().join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(
        &lib,
        format!("// one\n// two\n// three\n// four\n// five\n{source}"),
    )
    .unwrap();
    let shifted = cargo_in(&cargo, dir.path(), false, &["test", "--offline", "--doc"]);
    assert!(
        String::from_utf8_lossy(&shifted.stdout).contains("src/lib.rs - add (line 8)"),
        "{}",
        shifted.show()
    );
    assert_eq!(
        output_report(&shifted.output()).unwrap().unwrap().collected,
        report.collected
    );
}

/// The directory ci/fetch-js-runners.sh installed vitest and jest into (run here when absent).
/// `None` (a notice) when it cannot be had outside CI; under CI a failure.
fn js_runners() -> Option<PathBuf> {
    let lock = std::fs::read(fixtures().join("js-runners/package-lock.json")).unwrap();
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&lock));
    let cache = std::env::var_os("LOOPEXEC_TEST_PROJECTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/loopexec-test-projects"));
    let dir = cache.join(format!("js-runners-{sha}"));
    if !dir.join("node_modules").is_dir() {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/fetch-js-runners.sh");
        let status = Command::new("bash").arg(script).status();
        if !status.is_ok_and(|s| s.success()) || !dir.join("node_modules").is_dir() {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!(
                    "{} is missing and ci/fetch-js-runners.sh could not install it",
                    dir.display()
                );
            }
            eprintln!(
                "NOT RUN: {} is missing (run ci/fetch-js-runners.sh; CI=true makes this a failure)",
                dir.display()
            );
            return None;
        }
    }
    Some(dir)
}

/// A JS fixture project in a temp dir, its `node_modules` a link to the cached runners.
fn js_project(name: &str, runners: &Path) -> tempfile::TempDir {
    let dir = project(name);
    std::os::unix::fs::symlink(
        runners.join("node_modules"),
        dir.path().join("node_modules"),
    )
    .unwrap();
    dir
}

#[test]
fn vitest_junit_report_from_a_real_run() {
    let Some(node) = tool(&["node", "nodejs"]) else {
        return;
    };
    let Some(runners) = js_runners() else { return };
    let vitest = runners.join("node_modules/vitest/vitest.mjs");
    let runs = green_and_red(|fail| {
        let dir = js_project("vitest", &runners);
        // --no-cache: vitest would otherwise write its results cache into the shared node_modules.
        let ran = run(command(&node, dir.path(), fail).arg(&vitest).args([
            "run",
            "--no-cache",
            "--reporter=junit",
            "--outputFile=out/junit.xml",
        ]));
        (ran, reports_in(dir.path(), "out/*.xml"))
    });
    let (green, red) = (&runs[0], &runs[1]);
    let report = parsed(&green.1);
    assert_eq!(
        ids(&report.collected),
        [
            "test/math.test.js::math > adds",
            "test/math.test.js::math > inner > deep",
            "test/math.test.js::math > skipped one",
            "test/math.test.js::math > todo one",
            "test/math.test.js::math > wrong when asked",
            "test/math.test.js::top level",
            "test/strs.test.js::upper",
        ]
    );
    assert_eq!(
        ids(&report.skipped),
        [
            "test/math.test.js::math > skipped one",
            "test/math.test.js::math > todo one"
        ]
    );
    assert_eq!(report.declared, Some(report.counts));
    assert_eq!(
        ids(&parsed(&red.1).failing),
        ["test/math.test.js::math > wrong when asked"]
    );
    assert_green_and_red(
        &green.0,
        &green.1,
        &red.0,
        &red.1,
        &["report_shows_failures"],
    );
}

#[test]
fn jest_junit_report_from_a_real_run() {
    let Some(node) = tool(&["node", "nodejs"]) else {
        return;
    };
    let Some(runners) = js_runners() else { return };
    let jest = runners.join("node_modules/jest/bin/jest.js");
    let runs = green_and_red(|fail| {
        let dir = js_project("jest", &runners);
        let cache = tempfile::tempdir().unwrap();
        let mut cmd = command(&node, dir.path(), fail);
        cmd.arg(&jest)
            .args([
                "--ci",
                "--reporters=default",
                "--reporters=jest-junit",
                "--cacheDirectory",
            ])
            .arg(cache.path())
            .env("JEST_JUNIT_OUTPUT_DIR", "out");
        let ran = run(&mut cmd);
        (ran, reports_in(dir.path(), "out/*.xml"))
    });
    let (green, red) = (&runs[0], &runs[1]);
    let report = parsed(&green.1);
    // jest-junit's default: classname and name are both the titles joined with a space.
    assert_eq!(
        ids(&report.collected),
        [
            " top level:: top level",
            " upper:: upper",
            "math adds::math adds",
            "math inner deep::math inner deep",
            "math skipped one::math skipped one",
            "math todo one::math todo one",
            "math wrong when asked::math wrong when asked",
        ]
    );
    // jest-junit writes a todo test as a case with no result element, outside its `tests` counts.
    assert_eq!(ids(&report.skipped), ["math skipped one::math skipped one"]);
    assert_eq!(report.declared, Some(report.counts));
    assert_eq!(
        ids(&parsed(&red.1).failing),
        ["math wrong when asked::math wrong when asked"]
    );
    assert_green_and_red(
        &green.0,
        &green.1,
        &red.0,
        &red.1,
        &["report_shows_failures"],
    );
}

#[test]
fn node_junit_of_a_skipped_describe_and_a_failing_todo_test_is_green_and_agrees_with_its_summary() {
    let Some(node) = tool(&["node", "nodejs"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("test")).unwrap();
    std::fs::write(
        dir.path().join("test/odd.test.js"),
        "const { describe, it, test } = require('node:test');\n\
         describe.skip('skipped suite', () => { it('inside', () => {}); });\n\
         test('todo failing', { todo: 'later' }, () => { throw new Error('nope'); });\n\
         describe('empty', () => {});\n\
         describe('d', () => { it('x', () => {}); });\n",
    )
    .unwrap();
    let ran = run(command(&node, dir.path(), false).args([
        "--test",
        "--test-reporter=junit",
        "--test-reporter-destination=junit.xml",
        "--test-reporter=spec",
        "--test-reporter-destination=stdout",
    ]));
    assert_eq!(ran.code, Some(0), "{}", ran.show());
    let reports = reports_in(dir.path(), "junit.xml");
    let report = parsed(&reports);
    assert_eq!(
        ids(&report.collected),
        ["d > x", "empty", "skipped suite", "todo failing"]
    );
    assert_eq!(ids(&report.skipped), ["skipped suite", "todo failing"]);
    assert!(report.failing.is_empty(), "{report:?}");
    assert_eq!(report.declared, Some(report.counts));
    let verdict = agree(ran.code, &reports, &ran.output());
    assert!(
        matches!(verdict, Agreement::Green { ref sources } if sources.len() == 2),
        "{verdict:?}\n{}",
        ran.show()
    );
}
