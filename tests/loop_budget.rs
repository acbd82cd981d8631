//! Budgets in the loop (docs/budget.md): the run-total caps given by flags or `[budget]`, refused
//! at start when they are not numbers a cap can be, pinned in `run_start` so that a resume keeps
//! them and the spend, and enforced before the agent with the projection of one more iteration.
mod common;
use common::*;
use std::path::Path;

/// Runs `loopexec run --json --isolation none` with `args` (and `loop_toml`, when given), and
/// returns the usage error's message, asserting exit 20, one JSON object and nothing written.
fn refused(loop_toml: Option<&str>, args: &[&str]) -> String {
    let dir = workdir();
    if let Some(text) = loop_toml {
        std::fs::write(dir.path().join("loop.toml"), text).unwrap();
    }
    let mut all = vec![
        "run",
        "--json",
        "--isolation",
        "none",
        "--exec",
        "true",
        "--check",
        "true",
    ];
    all.extend_from_slice(args);
    let r = loopexec(dir.path(), &all);
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(r.stdout.trim().lines().count(), 1, "one JSON object: {r:?}");
    assert!(
        !dir.path().join(".loopexec").exists(),
        "nothing written for a refused budget"
    );
    r.json()["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_negative_usd_budget_is_refused() {
    let message = refused(
        None,
        &["--budget-usd", "-1", "--budget-unknown-money", "ignore"],
    );
    assert_eq!(
        message,
        "--budget-usd: \"-1\" is not a non-negative decimal USD amount"
    );
}

#[test]
fn a_non_numeric_usd_budget_is_refused() {
    let message = refused(
        None,
        &["--budget-usd", "five", "--budget-unknown-money", "halt"],
    );
    assert_eq!(
        message,
        "--budget-usd: \"five\" is not a non-negative decimal USD amount"
    );
}

#[test]
fn a_fractional_or_negative_token_budget_is_refused() {
    assert_eq!(
        refused(None, &["--budget-tokens", "1.5"]),
        "--budget-tokens: \"1.5\" is not a whole number of tokens"
    );
    assert_eq!(
        refused(None, &["--budget-tokens", "-3"]),
        "--budget-tokens: \"-3\" is not a whole number of tokens"
    );
}

#[test]
fn a_wall_budget_that_is_no_duration_is_refused() {
    assert_eq!(
        refused(None, &["--budget-wall", "soon"]),
        "--budget-wall: \"soon\" is not a duration (seconds, or a number with s, m, h or d)"
    );
}

#[test]
fn a_zero_cap_is_refused() {
    assert_eq!(
        refused(None, &["--budget-tokens", "0"]),
        "a budget cap must be greater than 0 (a cap of 0 allows no iteration)"
    );
}

#[test]
fn a_usd_budget_without_a_choice_for_unknown_money_is_refused_at_start() {
    let message = refused(None, &["--budget-usd", "2"]);
    assert!(
        message.starts_with("--budget-usd: a usage record may carry no money"),
        "{message}"
    );
}

#[test]
fn a_negative_usd_budget_in_loop_toml_is_refused() {
    let message = refused(
        Some("[budget]\nusd = -2\nunknown_money = \"ignore\"\n"),
        &[],
    );
    assert_eq!(
        message,
        "--budget-usd: \"-2\" is not a non-negative decimal USD amount"
    );
}

#[test]
fn an_unknown_key_or_unknown_money_mode_in_the_budget_table_is_refused_with_its_line() {
    let message = refused(Some("[budget]\ndollars = 2\n"), &[]);
    assert!(
        message.starts_with("loop.toml line 2:") && message.contains("dollars"),
        "{message}"
    );
    let message = refused(Some("[budget]\nusd = 2\nunknown_money = \"guess\"\n"), &[]);
    assert!(
        message.starts_with("loop.toml line 3:") && message.contains("guess"),
        "{message}"
    );
}

/// A run of an agent that takes at least 2 s against a red check, with `extra` flags.
fn slow_agent(dir: &Path, extra: &[&str]) -> Ran {
    let mut all = vec![
        "run",
        "--json",
        "--run-id",
        "b",
        "--isolation",
        "none",
        "--no-baseline",
        "--exec",
        "sleep 2",
        "--check",
        "exit 1",
        "--max-iterations",
        "10",
    ];
    all.extend_from_slice(extra);
    loopexec(dir, &all)
}

#[test]
fn a_wall_budget_halts_budget_exceeded_naming_spent_and_cap() {
    let dir = workdir();
    let r = slow_agent(dir.path(), &["--budget-wall", "1"]);
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (18, Some("budget_exceeded")),
        "{r:?}"
    );
    let detail = r.json()["run"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        detail.starts_with("wall seconds: spent ") && detail.contains("the cap 1.000"),
        "{detail}"
    );
    // The caps are pinned in run_start.
    let start = &events(dir.path(), "b")[0];
    assert_eq!(start["config"]["budget"]["wall_ms"], 1000, "{start:#}");
}

#[test]
fn a_resumed_run_keeps_the_spend_of_its_earlier_processes() {
    // Iteration 1 (>= 2 s of a 3 s cap: a second left for a loaded machine) pauses; the resume projects one more iteration of
    // the same cost over the spend the receipt holds, and halts before its agent.
    let dir = workdir();
    let first = slow_agent(dir.path(), &["--budget-wall", "3", "--once"]);
    assert_eq!(first.code, 0, "{first:?}");
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "b", "--once"]);
    assert_eq!(
        (
            resumed.code,
            resumed.json()["halt_reason"].as_str(),
            resumed.json()["iteration"].as_u64()
        ),
        (18, Some("budget_exceeded"), Some(1)),
        "{resumed:?}"
    );
    let types = event_types(dir.path(), "b");
    assert_eq!(
        types.iter().filter(|t| *t == "exec_result").count(),
        1,
        "no second agent call: {types:?}"
    );
}

#[test]
fn a_resume_cannot_raise_its_pinned_cap() {
    let dir = workdir();
    let first = slow_agent(dir.path(), &["--budget-wall", "3", "--once"]);
    assert_eq!(first.code, 0, "{first:?}");
    let r = loopexec(
        dir.path(),
        &["run", "--json", "--resume", "b", "--budget-wall", "100"],
    );
    assert_eq!(r.code, 20, "{r:?}");
}
