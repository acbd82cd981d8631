//! Agent-controlled strings are inert on the operator's terminal: a file name the agent chose,
//! carrying escape sequences that set the window title and clear the screen and a newline that
//! forges an output line, reaches every human renderer escaped (`\x1b`, `\x07`, `\n`), exactly.
mod common;
use common::*;

/// The agent's file name: set the window title, clear the screen, forge a line, then reverse the
/// display order of what follows (a bidi override).
const HOSTILE: &str =
    "\x1b]0;pwned\x07\x1b[2J\nloopexec: halted      success_condition_met\u{202e}";
/// How every renderer shows it.
const SHOWN: &str =
    "\\x1b]0;pwned\\x07\\x1b[2J\\nloopexec: halted      success_condition_met\\u{202e}";

/// A repository in a directory named with an escape sequence (a checkout's name is not always
/// the operator's choice), whose agent adds `tests/<HOSTILE>` (a protected path): the run halts
/// `blocked_path_modified` naming it. Returns the temporary parent and the repository's path.
fn hostile_run() -> (tempfile::TempDir, std::path::PathBuf, Ran) {
    let parent = workdir();
    let repo = parent.path().join("repo\x1b]0;dir\x07");
    std::fs::create_dir_all(repo.join("tests")).unwrap();
    std::fs::write(repo.join("tests/test_answer.sh"), "true\n").unwrap();
    std::fs::write(repo.join("name"), HOSTILE).unwrap();
    commit_t0(&repo);
    zone_traversable(parent.path());
    let r = loopexec(
        &repo,
        &[
            "run",
            "--no-baseline",
            "--run-id",
            "h",
            "--exec",
            "touch \"tests/$(cat name)\"",
            "--check",
            "sh tests/test_answer.sh",
        ],
    );
    assert_eq!(r.code, 13, "{r:?}");
    (parent, repo, r)
}

/// No control character but newline, and no bidi override, in `text`.
fn assert_no_controls(text: &str) {
    assert!(
        !text
            .chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "a control character reached the terminal: {text:?}"
    );
}

/// The receipt's path as every renderer shows it.
fn shown_receipt(repo: &std::path::Path) -> String {
    format!(
        "{}/.loopexec/runs/h/receipt.jsonl",
        path_str(repo)
            .replace("\x1b", "\\x1b")
            .replace("\x07", "\\x07")
    )
}

const DETAIL: &str = "the agent changed protected paths: tests/";

/// The guard `--no-baseline` leaves blind, as `report` and `explain-halt` name it.
const BLIND: &str = "test_set inactive: the t0 baseline is off: there is no C0 or S0, so no lost or newly skipped test is seen; enable: drop `--no-baseline` (`baseline = true` in loop.toml)";

/// `text`'s lines; panics if any control but newline reached the terminal.
fn lines(text: &str) -> Vec<&str> {
    assert_no_controls(text);
    text.lines().collect()
}

#[test]
fn run_shows_a_hostile_file_name_escaped_in_its_result_and_progress() {
    let (_parent, repo, run) = hostile_run();
    assert_eq!(
        lines(&run.stdout),
        vec![
            "halted      blocked_path_modified".to_string(),
            format!("detail      {DETAIL}{SHOWN}"),
            "run_id      h".into(),
            "iteration   1 of 10".into(),
            "check_exit  -".into(),
            "isolation   native".into(),
            format!("receipt     {}", shown_receipt(&repo)),
        ]
    );
    assert_eq!(
        lines(&run.stderr),
        vec![
            "loopexec: #1   agent    started".to_string(),
            "loopexec: #1   snapshot started".into(),
            format!("loopexec: iteration 1: {DETAIL}{SHOWN}"),
            "loopexec: #1   sealing  started".into(),
        ]
    );
}

#[test]
fn report_shows_a_hostile_file_name_escaped() {
    let (_parent, repo, _) = hostile_run();
    let r = loopexec(&repo, &["report", "h"]);
    assert_eq!(r.code, 0, "{r:?}");
    let out = lines(&r.stdout);
    assert_eq!(
        out[4..6],
        [
            "guards 1 inactive or partly blind:".to_string(),
            format!("  blind {BLIND}")
        ]
    );
    assert_eq!(
        out[7],
        format!("halt   blocked_path_modified (exit 13): {DETAIL}{SHOWN}")
    );
    assert_eq!(out[8], "       derived: blocked_path_modified follows from the recorded observations (1 iteration decision(s) re-derived)");
    assert_eq!(
        out.last().unwrap().to_string(),
        format!("receipt {}", shown_receipt(&repo))
    );
    // The lines between: egress, the enforcement summary and its digests.
    assert!(out[10].starts_with("enforcement: "), "{out:#?}");
    assert_eq!(out.len(), 13, "no forged line: {out:#?}");
}

#[test]
fn explain_halt_shows_a_hostile_file_name_escaped() {
    let (_parent, repo, _) = hostile_run();
    let r = loopexec(&repo, &["explain-halt", "h"]);
    assert_eq!(
        lines(&r.stdout),
        vec![
            "run_id       h".to_string(),
            "halt_reason  blocked_path_modified".into(),
            "iteration    1".into(),
            format!("why          blocked_path_modified: {DETAIL}{SHOWN}. the run stopped on something only a person can resolve."),
            "verdict      human_needed".into(),
            "decisive     1".into(),
            format!("blind        {BLIND}"),
            "reference    no existence proof was given (no --reference)".into(),
            format!("next         loopexec report h --workdir '{}'", shown_receipt(&repo).split("/.loopexec").next().unwrap_or_default()),
        ]
    );
}

#[test]
fn status_shows_a_hostile_directory_name_escaped() {
    let (_parent, repo, _) = hostile_run();
    let r = loopexec(&repo, &["status", "h"]);
    assert_eq!(
        lines(&r.stdout),
        vec![
            "run_id       h".to_string(),
            "state        halted".into(),
            "iteration    1 of 10".into(),
            "halt_reason  blocked_path_modified".into(),
            format!("receipt      {}", shown_receipt(&repo)),
        ]
    );
}

#[test]
fn verify_and_replay_of_a_hostile_run_print_no_control_character() {
    let (_parent, repo, _) = hostile_run();
    let r = loopexec(
        &repo,
        &[
            "verify",
            "h",
            "--pubkey",
            &path_str(&key_dir().join("operator.pub")),
        ],
    );
    assert_eq!(
        (r.code, lines(&r.stdout).last().copied()),
        (0, Some("verified"))
    );
    let r = loopexec(&repo, &["replay", "h"]);
    assert_eq!(
        lines(&r.stderr),
        vec!["loopexec: error: run h recorded no check result: there is nothing to compare with"]
    );
}

#[test]
fn an_error_carrying_a_hostile_path_is_one_escaped_line() {
    let (_parent, repo, _) = hostile_run();
    let r = loopexec(&repo, &["report", "nosuch"]);
    assert_eq!(r.code, 30);
    let runs = shown_receipt(&repo).replace("/h/receipt.jsonl", "");
    assert_eq!(
        lines(&r.stderr),
        vec![
            format!("loopexec: error: no run nosuch in {runs}"),
            "  hint: `loopexec status` names the latest run; `ls .loopexec/runs` lists them"
                .to_string(),
        ]
    );
}

#[test]
fn json_output_carries_the_exact_name_with_no_raw_control_or_bidi_character() {
    let (_parent, repo, _) = hostile_run();
    let r = loopexec(&repo, &["explain-halt", "--json", "h"]);
    assert_no_controls(r.stdout.trim_end());
    assert_eq!(
        r.json()["explanation"]["detail"],
        format!("{DETAIL}{HOSTILE}")
    );
}
