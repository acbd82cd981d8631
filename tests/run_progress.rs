//! `run`'s progress on stderr (issue 23 item 2): one plain line per phase change and result when
//! stderr is not a terminal, a live view on a terminal, nothing under `--json` or `--quiet`.
mod common;
use common::*;
use std::process::Command;

/// A repository whose check (a TAP report of three tests, test `i` passing once the counter
/// reached `i`) fails three tests at t0, and an agent that adds one to the counter each call.
fn counting_repo() -> tempfile::TempDir {
    let dir = workdir();
    write(dir.path(), "n", "0\n");
    write(
        dir.path(),
        "check.sh",
        "n=$(cat n)\nprintf '1..3\\n' > report.tap\nfor i in 1 2 3; do\n  if [ \"$n\" -ge \"$i\" ]; then printf 'ok %s - t%s\\n' $i $i; else printf 'not ok %s - t%s\\n' $i $i; fi >> report.tap\ndone\n[ \"$n\" -ge 3 ]\n",
    );
    commit_t0(dir.path());
    dir
}

const AGENT: &str = "echo $(( $(cat n) + 1 )) > n";

fn run_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "--run-id",
        "p",
        "--exec",
        AGENT,
        "--check",
        "sh check.sh",
        "--report",
        "report.tap",
        "--max-iterations",
        "5",
    ];
    args.extend_from_slice(extra);
    args
}

/// The progress lines of `stderr` with each check's duration (`  1.2 s`) cut off.
fn progress_lines(stderr: &str) -> Vec<String> {
    let duration = regex::Regex::new(r"  \d+\.\d s$").unwrap();
    stderr
        .lines()
        .map(|l| duration.replace(l, "").into_owned())
        .collect()
}

#[test]
fn piped_stderr_shows_each_phase_and_check_as_one_plain_line_in_order() {
    let repo = counting_repo();
    let r = loopexec(repo.path(), &run_args(&[]));
    assert_eq!(r.code, 10, "{r:?}");
    let mut expected = vec![
        "loopexec: t0   baseline started".to_string(),
        "loopexec: t0   baseline exit 1  failing 3".into(),
    ];
    for (n, failing, trend, exit) in [
        (1, 2, "3 → 2 ↓", 1),
        (2, 1, "2 → 1 ↓", 1),
        (3, 0, "1 → 0 ↓", 0),
    ] {
        for phase in ["agent   ", "snapshot", "check   ", "guards  "] {
            expected.push(format!("loopexec: #{n}   {phase} started"));
        }
        expected.push(format!(
            "loopexec: #{n}   check    exit {exit}  failing {failing}  ({trend})"
        ));
    }
    expected.extend(
        [
            "#3   confirmation started",
            "#3   confirmation 1/1 done",
            "#3   canary   started",
            "#3   sealing  started",
        ]
        .map(|l| format!("loopexec: {l}")),
    );
    assert_eq!(progress_lines(&r.stderr), expected, "{}", r.stderr);
}

#[test]
fn piped_progress_carries_no_escape_byte() {
    let repo = counting_repo();
    let r = loopexec(repo.path(), &run_args(&[]));
    assert_eq!(r.code, 10, "{r:?}");
    assert!(
        r.stderr.contains("loopexec: #1   agent    started"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains('\x1b') && !r.stderr.contains('\r'),
        "{:?}",
        r.stderr
    );
}

#[test]
fn json_prints_one_object_on_stdout_and_no_progress_on_stderr() {
    let repo = counting_repo();
    let r = loopexec(repo.path(), &run_args(&["--json"]));
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "success_condition_met");
    assert_eq!(r.stderr, "");
}

#[test]
fn quiet_prints_nothing_on_a_success() {
    let repo = counting_repo();
    let r = loopexec(repo.path(), &run_args(&["--quiet"]));
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (10, "", ""),
        "{r:?}"
    );
}

#[test]
fn quiet_still_prints_an_error() {
    let repo = counting_repo();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--quiet",
            "--exec",
            AGENT,
            "--check",
            "sh check.sh",
            "--exec-timeout",
            "-5",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(r.stdout, "");
    assert!(r.stderr.starts_with("loopexec: error: "), "{r:?}");
}

/// `run` under a pseudo-terminal (util-linux's `script`, in Debian's essential bsdutils): what the
/// terminal received, stdout and stderr together.
fn on_a_terminal(repo: &std::path::Path, env: &[(&str, &str)]) -> (i32, String) {
    let mut line = vec![bin()];
    line.extend(run_args(&[]).into_iter().map(str::to_string));
    let quoted = shlex::try_join(line.iter().map(String::as_str)).expect("quotable command line");
    let mut c = Command::new("script");
    c.current_dir(repo)
        .args(["-qec", &quoted, "/dev/null"])
        .env("LOOPEXEC_CONFIG_DIR", key_dir())
        .env("TERM", "xterm")
        .env_remove("NO_COLOR");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap_or_else(|e| panic!("`script` (util-linux, Debian's bsdutils) is needed to run loopexec on a pseudo-terminal: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The text a terminal shows of `raw`: escape sequences and carriage returns removed.
fn stripped(raw: &str) -> String {
    let sequences = regex::Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]").unwrap();
    sequences.replace_all(raw, "").replace('\r', "\n")
}

#[test]
fn a_terminal_gets_the_live_view_with_each_phase() {
    let repo = counting_repo();
    let (code, raw) = on_a_terminal(repo.path(), &[]);
    assert_eq!(code, 10, "{raw}");
    assert!(
        raw.contains('\x1b'),
        "the live view redraws its line: {raw:?}"
    );
    let text = stripped(&raw);
    for shown in [
        "t0 baseline",
        "#1 agent",
        "#1 snapshot",
        "#1 guards",
        "#3 confirmation",
        "#3 canary",
        "loopexec: #2   check    exit 1  failing 1  (2 → 1 ↓)",
        "halted      success_condition_met",
    ] {
        assert!(text.contains(shown), "{shown:?} not shown: {text}");
    }
}

/// Asserts that `run` on a terminal under `env` printed the plain lines: no escape byte, and
/// the lines as a piped stderr gets them (the terminal ends each with `\r\n`).
fn assert_plain_on_a_terminal(env: &[(&str, &str)]) {
    let repo = counting_repo();
    let (code, raw) = on_a_terminal(repo.path(), env);
    assert_eq!(code, 10, "{raw}");
    assert!(!raw.contains('\x1b'), "{raw:?}");
    for line in [
        "loopexec: t0   baseline exit 1  failing 3\r\n",
        "loopexec: #1   agent    started\r\n",
    ] {
        assert!(raw.contains(line), "{line:?} not in {raw:?}");
    }
}

#[test]
fn no_color_on_a_terminal_gives_the_plain_lines() {
    assert_plain_on_a_terminal(&[("NO_COLOR", "1")]);
}

#[test]
fn a_dumb_terminal_gives_the_plain_lines() {
    assert_plain_on_a_terminal(&[("TERM", "dumb")]);
}
