//! Metering end to end (issue 21 item 1, docs/budget.md "Metering"): an agent that appends lines
//! to `$LOOPEXEC_USAGE` gets one `usage` event (stage agent) right after its `exec_result`,
//! carrying the exact sums of its lines; malformed and duplicate lines are counted, not believed;
//! an agent that writes nothing leaves a receipt without `usage` events.
mod common;
use common::*;
use serde_json::Value;

const TWO_CALLS: &str = r#"printf '%s\n' '{"provider":"anthropic","model":"claude-x","input_tokens":1000,"output_tokens":200,"cache_read_tokens":30,"usd":0.0125,"id":"a"}' '{"provider":"anthropic","model":"claude-x","input_tokens":500,"output_tokens":100,"usd":0.005,"id":"b"}' '{"id":"a","model":"claude-x","input_tokens":9,"output_tokens":9,"usd":9}' 'not json' >> "$LOOPEXEC_USAGE""#;

fn usage_events(ev: &[Value]) -> Vec<&Value> {
    ev.iter().filter(|e| e["type"] == "usage").collect()
}

fn assert_two_calls_metered(ev: &[Value]) {
    let usage = usage_events(ev);
    assert_eq!(usage.len(), 1, "{ev:#?}");
    let u = usage[0];
    let at = ev.iter().position(|e| e["type"] == "usage").unwrap();
    assert_eq!(ev[at - 1]["type"], "exec_result");
    assert_eq!(u["iteration"], 1);
    assert_eq!(u["stage"], "agent");
    assert_eq!(u["usd_micros"], 17_500);
    assert_eq!(u["basis"], "reported");
    assert_eq!(
        u["tokens"],
        serde_json::json!({"input": 1500, "output": 300, "cache_read": 30, "cache_write": 0})
    );
    assert_eq!(u["models"][0]["model"], "claude-x");
    assert_eq!(u["sources"][0]["name"], "usage_file");
    assert_eq!(u["sources"][0]["records"], 2);
    assert_eq!(u["sources"][0]["rejected"]["duplicate"], 1);
    assert_eq!(u["sources"][0]["rejected"]["malformed"], 1);
}

#[test]
fn an_agents_usage_lines_become_one_usage_event_with_their_exact_sums() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "m",
            "--exec",
            TWO_CALLS,
            "--check",
            "true",
            "--max-iterations",
            "1",
        ],
    );
    // In place a passing check is `human_required` (11): no guard judged the step.
    assert_eq!(r.code, 11, "{}", r.stderr);
    assert_two_calls_metered(&events(dir.path(), "m"));
}

#[test]
fn an_agent_that_writes_no_usage_leaves_no_usage_event() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "q",
            "--exec",
            "test -f \"$LOOPEXEC_USAGE\"",
            "--check",
            "true",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 11, "{}", r.stderr);
    let ev = events(dir.path(), "q");
    assert_eq!(
        ev.iter().find(|e| e["type"] == "exec_result").unwrap()["exit_code"],
        0
    );
    assert!(usage_events(&ev).is_empty(), "{ev:#?}");
}

#[test]
fn each_iteration_gets_a_fresh_empty_usage_file() {
    let dir = workdir();
    let agent = format!("test ! -s \"$LOOPEXEC_USAGE\" && {TWO_CALLS}");
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "f",
            "--exec",
            &agent,
            "--check",
            "false",
            "--max-iterations",
            "2",
        ],
    );
    assert_ne!(r.code, 0);
    let ev = events(dir.path(), "f");
    let usage = usage_events(&ev);
    assert_eq!(
        usage
            .iter()
            .map(|u| (u["iteration"].as_u64(), u["usd_micros"].as_u64()))
            .collect::<Vec<_>>(),
        vec![(Some(1), Some(17_500)), (Some(2), Some(17_500))]
    );
}

#[test]
fn the_native_zones_agent_writes_its_usage_file_through_the_writable_grant() {
    let dir = workdir();
    write(dir.path(), "README", "t0\n");
    commit_t0(dir.path());
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "native",
            "--no-baseline",
            "--json",
            "--run-id",
            "n",
            "--exec",
            TWO_CALLS,
            "--check",
            "true",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 10, "{}", r.stderr);
    assert_two_calls_metered(&events(dir.path(), "n"));
}

#[test]
fn tokens_the_usage_file_reports_past_a_token_cap_halt_budget_exceeded_after_the_agent() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "b",
            "--exec",
            TWO_CALLS,
            "--check",
            "true",
            "--max-iterations",
            "3",
            "--budget-tokens",
            "1000",
        ],
    );
    assert_eq!(r.code, 18, "{}", r.stdout);
    let ev = events(dir.path(), "b");
    let types: Vec<&str> = ev
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        types.iter().filter(|t| **t == "check_result").count(),
        0,
        "{types:?}"
    );
    let halt = ev.last().unwrap();
    assert_eq!(halt["halt_reason"], "budget_exceeded");
    // 1000 + 500 input, 200 + 100 output, 30 cache read: the two believed lines, exactly.
    assert_eq!(
        halt["detail"],
        "tokens: spent 1830 crossed the cap 1000 in iteration 1"
    );
}

/// Two calls of `claude-x` reporting tokens only (no `usd`).
const TOKENS_ONLY: &str = r#"printf '%s\n' '{"model":"claude-x-20250101","input_tokens":1000,"output_tokens":200}' '{"model":"claude-x-20250101","input_tokens":500,"output_tokens":100,"cache_read_tokens":1000}' >> "$LOOPEXEC_USAGE""#;

const PRICE_TABLE: &str = "[metering.prices.\"claude-x\"]\ninput_usd_per_mtok = 3\noutput_usd_per_mtok = 15\ncache_read_usd_per_mtok = 0.3\n";

#[test]
fn tokens_without_money_are_priced_by_the_loop_toml_table_with_a_dated_id_finding_its_entry() {
    let dir = workdir();
    write(dir.path(), "loop.toml", PRICE_TABLE);
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "p",
            "--exec",
            TOKENS_ONLY,
            "--check",
            "true",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 11, "{}", r.stderr);
    let ev = events(dir.path(), "p");
    let u = usage_events(&ev)[0];
    // 1500 x 3 + 300 x 15 + 1000 x 0.3 micro-USD = 4500 + 4500 + 300, per call rounded up.
    assert_eq!(u["usd_micros"], 9_300);
    assert_eq!(u["basis"], "priced");
    let start = ev.iter().find(|e| e["type"] == "run_start").unwrap();
    assert_eq!(
        start["config"]["metering"]["prices"]["claude-x"],
        serde_json::json!({"input": 3_000_000_000u64, "output": 15_000_000_000u64, "cache_read": 300_000_000u64, "cache_write": 0})
    );
}

#[test]
fn a_call_without_a_model_is_priced_as_the_pinned_model() {
    let dir = workdir();
    write(dir.path(), "loop.toml", PRICE_TABLE);
    let agent =
        r#"printf '%s\n' '{"input_tokens":1000000,"output_tokens":0}' >> "$LOOPEXEC_USAGE""#;
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "u",
            "--exec",
            agent,
            "--check",
            "true",
            "--max-iterations",
            "1",
            "--model-id",
            "claude-x",
        ],
    );
    assert_eq!(r.code, 11, "{}", r.stderr);
    let u = usage_events(&events(dir.path(), "u"))[0].clone();
    assert_eq!(
        (u["usd_micros"].as_u64(), u["basis"].as_str()),
        (Some(3_000_000), Some("priced"))
    );
}

#[test]
fn a_price_table_without_the_pinned_model_is_refused_before_anything_is_written() {
    let dir = workdir();
    write(dir.path(), "loop.toml", PRICE_TABLE);
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "x",
            "--exec",
            "true",
            "--check",
            "true",
            "--model-id",
            "gpt-4o",
        ],
    );
    assert_eq!(r.code, 20, "{}", r.stdout);
    let out = r.json();
    assert_eq!(out["errors"][0]["message"], "loop.toml: metering.prices has no price for the pinned model \"gpt-4o\" (--model-id): add [metering.prices.\"gpt-4o\"]");
    assert!(!dir.path().join(".loopexec").exists(), "nothing written");
}

#[test]
fn a_negative_price_and_an_unknown_output_format_are_refused_naming_the_key() {
    let dir = workdir();
    write(
        dir.path(),
        "loop.toml",
        "[metering.prices.\"m\"]\ninput_usd_per_mtok = -1\noutput_usd_per_mtok = 1\n",
    );
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "n",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 20, "{}", r.stdout);
    let out = r.json();
    assert_eq!(
        out["errors"][0]["message"],
        "loop.toml: metering.prices.\"m\".input_usd_per_mtok must be >= 0"
    );
    write(
        dir.path(),
        "loop.toml",
        "[metering]\nagent_output = \"cursor-json\"\n",
    );
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "n",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 20, "{}", r.stdout);
    let out = r.json();
    assert!(
        out["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("cursor-json"),
        "{out}"
    );
    assert!(!dir.path().join(".loopexec").exists(), "nothing written");
}

#[test]
fn the_check_is_rated_by_its_measured_cpu_time() {
    let dir = workdir();
    // 3600 USD per CPU hour is 1000 micro-USD per CPU millisecond: the money is cpu_ms x 1000.
    write(
        dir.path(),
        "loop.toml",
        "[metering]\ncheck_cpu_usd_per_hour = 3600\n",
    );
    let check = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done";
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "c",
            "--exec",
            "true",
            "--check",
            check,
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 11, "{}", r.stderr);
    let ev = events(dir.path(), "c");
    let usage = usage_events(&ev);
    assert_eq!(usage.len(), 1, "{ev:#?}");
    let u = usage[0];
    assert_eq!(
        (
            u["stage"].as_str(),
            u["basis"].as_str(),
            u["sources"][0]["name"].as_str()
        ),
        (Some("check"), Some("rated"), Some("check_cpu"))
    );
    let cpu_ms = u["cpu_ms"].as_u64().unwrap();
    assert!(cpu_ms > 0, "{u}");
    assert_eq!(u["usd_micros"].as_u64(), Some(cpu_ms * 1000));
    let at = ev.iter().position(|e| e["type"] == "usage").unwrap();
    assert_eq!(ev[at - 1]["type"], "check_result");
}

#[test]
fn report_shows_each_iterations_cost_and_the_run_total_against_its_cap() {
    let dir = workdir();
    write(dir.path(), "loop.toml", PRICE_TABLE);
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "r",
            "--exec",
            TOKENS_ONLY,
            "--check",
            "false",
            "--max-iterations",
            "2",
            "--budget-usd",
            "5",
            "--budget-unknown-money",
            "halt",
        ],
    );
    assert_eq!(r.code, 12, "{}", r.stdout);
    let rep = loopexec(dir.path(), &["report", "r"]);
    assert_eq!(rep.code, 0, "{}", rep.stderr);
    assert!(
        rep.stdout.contains("cost $0.009300 2800 tok"),
        "{}",
        rep.stdout
    );
    assert!(
        rep.stdout
            .contains("cost   0.018600 USD, 5600 tokens; caps 5.000000 USD (unknown money: halt)"),
        "{}",
        rep.stdout
    );
    let rep = loopexec(dir.path(), &["report", "r", "--json"]);
    let out: Value = serde_json::from_str(rep.stdout.trim()).unwrap();
    assert_eq!(out["report"]["cost"]["usd_micros"], 18_600);
    assert_eq!(out["report"]["iterations"][1]["cost"]["usd_micros"], 9_300);
}

#[test]
fn report_says_unknown_money_is_unknown_and_not_zero() {
    let dir = workdir();
    let agent = r#"printf '%s\n' '{"model":"unpriced","input_tokens":10,"output_tokens":1}' >> "$LOOPEXEC_USAGE""#;
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "k",
            "--exec",
            agent,
            "--check",
            "true",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 11, "{}", r.stderr);
    let rep = loopexec(dir.path(), &["report", "k"]);
    assert!(
        rep.stdout.contains("cost $unknown 11 tok"),
        "{}",
        rep.stdout
    );
    assert!(
        rep.stdout
            .contains("cost   0.000000 USD known + 1 usage record(s) of unknown money, 11 tokens"),
        "{}",
        rep.stdout
    );
    let out: Value = serde_json::from_str(
        loopexec(dir.path(), &["report", "k", "--json"])
            .stdout
            .trim(),
    )
    .unwrap();
    assert_eq!(out["report"]["cost"]["usd_micros"], Value::Null);
    assert_eq!(out["report"]["cost"]["unknown_money_records"], 1);
}

#[test]
fn the_feedback_file_tells_the_agent_what_is_left_of_each_cap() {
    let dir = workdir();
    write(dir.path(), "loop.toml", PRICE_TABLE);
    // The agent prints its feedback file, then reports its usage: iteration 2 sees iteration 1's spend.
    let agent = format!("cat \"$LOOPEXEC_FEEDBACK\"; {TOKENS_ONLY}");
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "b",
            "--exec",
            &agent,
            "--check",
            "false",
            "--max-iterations",
            "2",
            "--budget-usd",
            "1",
            "--budget-unknown-money",
            "ignore",
            "--budget-tokens",
            "100000",
        ],
    );
    assert_eq!(r.code, 12, "{}", r.stdout);
    let ev = events(dir.path(), "b");
    let second = ev
        .iter()
        .filter(|e| e["type"] == "exec_result")
        .nth(1)
        .unwrap();
    let artifact = run_dir(dir.path(), "b").join(second["stdout"]["artifact"].as_str().unwrap());
    let feedback: Value =
        serde_json::from_str(&std::fs::read_to_string(artifact).unwrap()).unwrap();
    assert_eq!(
        feedback["budget_left"],
        serde_json::json!([
            ["usd_micros", 1_000_000 - 9_300],
            ["tokens", 100_000 - 2_800]
        ])
    );
}

#[test]
fn inspect_cost_replays_a_runs_recorded_cost_under_a_tighter_cap() {
    let dir = workdir();
    write(dir.path(), "loop.toml", PRICE_TABLE);
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "none",
            "--no-baseline",
            "--json",
            "--run-id",
            "i",
            "--exec",
            TOKENS_ONLY,
            "--check",
            "false",
            "--max-iterations",
            "3",
        ],
    );
    assert_eq!(r.code, 12, "{}", r.stdout);
    let out = loopexec(
        dir.path(),
        &[
            "inspect-cost",
            "i",
            "--json",
            "--budget-usd",
            "0.02",
            "--budget-unknown-money",
            "halt",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["total"]["usd_micros_known"], 27_900);
    // Before iteration 3: 0.0186 spent + 0.0093 projected > 0.02.
    assert_eq!(v["halt"]["halt_reason"], "budget_exceeded");
    assert_eq!(v["halt"]["iteration"], 2);
    assert_eq!(v["halt"]["point"], "before_agent");
    let human = loopexec(
        dir.path(),
        &[
            "inspect-cost",
            "i",
            "--budget-usd",
            "0.02",
            "--budget-unknown-money",
            "halt",
        ],
    );
    assert!(
        human
            .stdout
            .contains("halt   budget_exceeded before iteration 3"),
        "{}",
        human.stdout
    );
}

#[test]
fn inspect_cost_walks_a_ledger_and_catches_the_spike_after_a_flat_history() {
    let dir = workdir();
    write(
        dir.path(),
        "costs.txt",
        "# one iteration per line\n0.10\n0.11\n\n0.095\n0.105\n2.5\n0.1\n",
    );
    let out = loopexec(
        dir.path(),
        &[
            "inspect-cost",
            "--ledger",
            &path_str(&dir.path().join("costs.txt")),
            "--budget-usd",
            "100",
            "--json",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(
        v["iterations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["anomalous"].as_bool().unwrap())
            .collect::<Vec<_>>(),
        vec![false, false, false, false, true]
    );
    assert_eq!(v["halt"]["halt_reason"], "cost_anomaly");
    assert_eq!(v["halt"]["iteration"], 5);
}

#[test]
fn a_ledger_line_that_is_no_amount_is_refused_naming_its_line() {
    let dir = workdir();
    write(dir.path(), "costs.txt", "0.1\n-0.2\n");
    let out = loopexec(
        dir.path(),
        &[
            "inspect-cost",
            "--ledger",
            &path_str(&dir.path().join("costs.txt")),
            "--json",
        ],
    );
    assert_eq!(out.code, 20, "{}", out.stdout);
    let v = out.json();
    let message = v["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.ends_with("line 2: \"-0.2\" is not a non-negative decimal USD amount"),
        "{message}"
    );
    let bad_cap = loopexec(
        dir.path(),
        &[
            "inspect-cost",
            "--ledger",
            &path_str(&dir.path().join("costs.txt")),
            "--budget-usd",
            "abc",
            "--json",
        ],
    );
    assert_eq!(bad_cap.code, 20);
}
