//! The score with a band (docs/progress.md, "The score"): loop.toml `[progress.score]` names a
//! number the check reports; the ratchet rejects (and reverts) an iteration whose score is worse
//! than the best accepted one by more than the band, accepts one within it, records both in the
//! `progress` event, and a green check without its declared score is a
//! `metric_integrity_violation`. A malformed declaration is refused before anything is written.
//!
//! The project is the four-function pytest package of the progress tests; the scripted agent
//! writes the package and a `score` file in a planned sequence, and the check prints that file
//! (`score: N`) after pytest, or writes it to `out/score.txt`.
mod common;
use common::calc::{calc_project, write_package, PYTEST};
use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// The check: pytest, then the tree's score on stdout, with pytest's exit code.
fn printing_check() -> String {
    format!("{PYTEST}; rc=$?; echo \"score: $(cat score 2>/dev/null)\"; exit $rc")
}

/// The agent: at iteration i (1-based), the package with `plan[i-1].0` right and `plan[i-1].1`
/// as its score (none: no score file); past the plan it changes nothing.
fn agent(plan: &[(&[&str], Option<&str>)]) -> String {
    let arms: String = plan
        .iter()
        .enumerate()
        .map(|(i, (right, score))| {
            let score = match score {
                Some(s) => format!("echo {s} > score"),
                None => "rm -f score".to_string(),
            };
            format!("{}) {} && {score} ;; ", i + 1, write_package(right))
        })
        .collect();
    format!("case $LOOPEXEC_ITERATION in {arms}*) true ;; esac")
}

fn run(dir: &Path, exec: &str, check: &str, loop_toml: &str, max: &str) -> Ran {
    std::fs::write(dir.join("loop.toml"), loop_toml).unwrap();
    loopexec(
        dir,
        &[
            "run",
            "--json",
            "--run-id",
            "r",
            "--exec",
            exec,
            "--check",
            check,
            "--report",
            "out/junit.xml",
            "--max-iterations",
            max,
        ],
    )
}

fn progress(dir: &Path, iteration: u64) -> Value {
    events(dir, "r")
        .into_iter()
        .find(|e| e["type"] == "progress" && e["iteration"] == iteration)
        .expect("a progress event")
}

fn check_result(dir: &Path, iteration: u64) -> Value {
    events(dir, "r")
        .into_iter()
        .find(|e| e["type"] == "check_result" && e["iteration"] == iteration)
        .expect("a check_result")
}

fn snapshot_tree(dir: &Path, iteration: u64) -> Value {
    events(dir, "r")
        .into_iter()
        .find(|e| e["type"] == "snapshot" && e["iteration"] == iteration)
        .expect("a snapshot")["tree_id"]
        .clone()
}

const BAND_1: &str =
    "[progress.score]\nregex = 'score: ([0-9.]+)'\ndirection = \"higher\"\nband = 1.0\n";

#[test]
fn a_score_worse_than_the_best_beyond_the_band_is_rejected_and_reverted() {
    let repo = calc_project();
    let exec = agent(&[(&["add"], Some("5")), (&["add", "sub"], Some("3"))]);
    let r = run(repo.path(), &exec, &printing_check(), BAND_1, "2");
    assert_eq!(r.json()["halt_reason"], "max_iterations_reached", "{r:?}");
    assert_eq!(
        progress(repo.path(), 1)["score"],
        json!({"score": 5.0, "best": null, "band": 1.0, "direction": "higher"})
    );
    let second = progress(repo.path(), 2);
    assert_eq!(second["accepted"], false);
    assert_eq!(
        second["rejection"],
        json!({"kind": "score_below_best", "score": 3.0, "best": 5.0, "band": 1.0})
    );
    assert_eq!(
        second["score"],
        json!({"score": 3.0, "best": 5.0, "band": 1.0, "direction": "higher"})
    );
    assert_eq!(
        (second["frontier"].as_u64(), &second["reverted_to_tree"]),
        (Some(1), &snapshot_tree(repo.path(), 1))
    );
}

#[test]
fn a_score_within_the_band_below_the_best_is_accepted() {
    let repo = calc_project();
    let exec = agent(&[(&["add"], Some("5")), (&["add", "sub"], Some("4.5"))]);
    let r = run(repo.path(), &exec, &printing_check(), BAND_1, "2");
    assert_eq!(r.json()["halt_reason"], "max_iterations_reached", "{r:?}");
    let second = progress(repo.path(), 2);
    assert_eq!(
        (second["accepted"].as_bool(), second["frontier"].as_u64()),
        (Some(true), Some(2))
    );
    assert_eq!(
        second["score"],
        json!({"score": 4.5, "best": 5.0, "band": 1.0, "direction": "higher"})
    );
}

#[test]
fn a_green_check_without_its_declared_score_is_a_metric_integrity_violation() {
    let repo = calc_project();
    let exec = agent(&[(&["add", "sub", "mul", "div"], None)]);
    let r = run(repo.path(), &exec, &printing_check(), BAND_1, "2");
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    assert_eq!(
        check_result(repo.path(), 1)["score"],
        json!({"source": "stdout", "error": "the regex score: ([0-9.]+) matched nothing in the check's stdout"})
    );
}

#[test]
fn a_score_file_the_agent_planted_is_hidden_from_the_check_so_only_the_checks_own_write_counts() {
    let repo = calc_project();
    // The agent fixes everything and plants out/score.txt; the check writes no score file.
    let exec = format!(
        "{} && mkdir -p out && echo 99 > out/score.txt",
        write_package(&["add", "sub", "mul", "div"])
    );
    let toml = "[progress.score]\nfile = \"out/score.txt\"\n";
    let r = run(repo.path(), &exec, PYTEST, toml, "1");
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    assert_eq!(
        check_result(repo.path(), 1)["score"],
        json!({"source": "out/score.txt", "error": "the check did not write out/score.txt"})
    );
}

#[test]
fn a_score_file_the_check_writes_is_read() {
    let repo = calc_project();
    let exec = agent(&[(&["add"], Some("7"))]);
    let check = format!("{PYTEST}; rc=$?; cp score out/score.txt; exit $rc");
    let r = run(
        repo.path(),
        &exec,
        &check,
        "[progress.score]\nfile = \"out/score.txt\"\ndirection = \"lower\"\n",
        "1",
    );
    assert_eq!(r.json()["halt_reason"], "max_iterations_reached", "{r:?}");
    assert_eq!(
        progress(repo.path(), 1)["score"],
        json!({"score": 7.0, "best": null, "band": 0.0, "direction": "lower"})
    );
}

#[test]
fn a_malformed_score_declaration_is_refused_before_anything_is_written() {
    for (toml, says) in [
        (
            "[progress.score]\nregex = 'score (\\d+) of (\\d+)'\n",
            "has 2 capture groups",
        ),
        (
            "[progress.score]\nband = 0.5\n",
            "names neither `regex` nor `file`",
        ),
        (
            "[progress.score]\nfile = \"/etc/score\"\n",
            "file /etc/score",
        ),
        (
            "[progress.score]\nregex = '(x)'\ndirection = \"up\"\n",
            "loop.toml line 3: unknown variant `up`",
        ),
        (
            "[progress.score]\nregex = '(x)'\nband = -1.0\n",
            "band must be a finite number >= 0",
        ),
        (
            "[progress.score]\nfile = \"out/score.txt\"\n",
            "file needs a detached workspace",
        ),
    ] {
        let dir = workdir();
        std::fs::write(dir.path().join("loop.toml"), toml).unwrap();
        let r = loopexec(
            dir.path(),
            &[
                "run",
                "--json",
                "--isolation",
                "none",
                "--exec",
                "true",
                "--check",
                "true",
            ],
        );
        assert_eq!(r.code, 20, "{toml}: {r:?}");
        let message = r.json()["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(message.contains(says), "{toml}: {message}");
        assert!(!dir.path().join(".loopexec/runs").exists(), "{toml}");
    }
}
