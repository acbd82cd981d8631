//! The agent CLI's own output metered end to end (docs/budget.md, "The agent CLI's own output"):
//! with `[metering] agent_output` naming its format, the agent's stdout (or, for aider, the log it
//! writes to `$LOOPEXEC_AGENT_LOG`) is read by that format's meter while it is captured, and the
//! iteration's `usage` event carries what the CLI reported: its cost over a usage file's, its
//! models for the drift rule, its tokens priced by the table when it states no cost. A USD cap
//! halts before the iteration that would cross it.
mod common;
use common::*;
use serde_json::Value;

fn fixture(name: &str) -> String {
    path_str(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/agent_output")
            .join(name),
    )
}

fn usage(ev: &[Value]) -> Vec<&Value> {
    ev.iter().filter(|e| e["type"] == "usage").collect()
}

fn run_in_place(dir: &std::path::Path, id: &str, exec: &str, extra: &[&str]) -> Ran {
    let mut args = vec![
        "run",
        "--isolation",
        "none",
        "--no-baseline",
        "--json",
        "--run-id",
        id,
        "--exec",
        exec,
        "--check",
        "false",
    ];
    args.extend_from_slice(extra);
    loopexec(dir, &args)
}

#[test]
fn claude_codes_json_result_is_the_iterations_cost_per_model_as_the_cli_reported_it() {
    let dir = workdir();
    write(
        dir.path(),
        "loop.toml",
        "[metering]\nagent_output = \"claude-json\"\n",
    );
    let r = run_in_place(
        dir.path(),
        "c",
        &format!("cat {}", fixture("claude.json")),
        &["--max-iterations", "1"],
    );
    assert_eq!(r.code, 12, "{}", r.stdout);
    let ev = events(dir.path(), "c");
    let u = usage(&ev);
    assert_eq!(u.len(), 1, "{ev:#?}");
    // costUSD 0.00132 + 0.07549785, each rounded up to the micro-USD.
    assert_eq!(u[0]["usd_micros"], 1_320 + 75_498);
    assert_eq!(u[0]["basis"], "reported");
    assert_eq!(u[0]["sources"][0]["name"], "claude_json");
    let models: Vec<&str> = u[0]["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["model"].as_str().unwrap())
        .collect();
    assert_eq!(
        models,
        vec!["claude-3-5-haiku-20241022", "claude-sonnet-4-5-20250929"]
    );
}

#[test]
fn the_clis_own_cost_overrides_what_the_agent_wrote_to_its_usage_file() {
    let dir = workdir();
    write(
        dir.path(),
        "loop.toml",
        "[metering]\nagent_output = \"claude-json\"\n",
    );
    let agent = format!("printf '%s\\n' '{{\"model\":\"x\",\"input_tokens\":1,\"output_tokens\":1,\"usd\":0.000001}}' >> \"$LOOPEXEC_USAGE\"; cat {}", fixture("claude.json"));
    let r = run_in_place(dir.path(), "o", &agent, &["--max-iterations", "1"]);
    assert_eq!(r.code, 12, "{}", r.stdout);
    let ev = events(dir.path(), "o");
    let u = usage(&ev)[0];
    assert_eq!(u["usd_micros"], 76_818);
    let file = u["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "usage_file")
        .unwrap();
    assert_eq!(
        (
            file["records"].as_u64(),
            file["rejected"]["overridden"].as_u64()
        ),
        (Some(0), Some(1))
    );
}

#[test]
fn a_usd_cap_halts_before_the_iteration_whose_projection_would_cross_it() {
    let dir = workdir();
    write(
        dir.path(),
        "loop.toml",
        "[metering]\nagent_output = \"claude-json\"\n",
    );
    // 0.076818 per iteration under a 0.2 cap: after two, 0.153636 + 0.076818 > 0.2.
    let r = run_in_place(
        dir.path(),
        "b",
        &format!("cat {}", fixture("claude.json")),
        &[
            "--max-iterations",
            "10",
            "--budget-usd",
            "0.2",
            "--budget-unknown-money",
            "halt",
        ],
    );
    assert_eq!(r.code, 18, "{}", r.stdout);
    let ev = events(dir.path(), "b");
    assert_eq!(ev.iter().filter(|e| e["type"] == "exec_result").count(), 2);
    let halt = ev.last().unwrap();
    assert_eq!(halt["halt_reason"], "budget_exceeded");
    assert_eq!(halt["detail"], "USD: spent 0.153636 + projected 0.076818 for the next iteration (p90 of this run's iterations) would cross the cap 0.200000");
}

#[test]
fn a_model_the_cli_reports_beside_the_pinned_one_is_drift_unless_the_run_lists_it_as_auxiliary() {
    let dir = workdir();
    write(
        dir.path(),
        "loop.toml",
        "[metering]\nagent_output = \"claude-json\"\n",
    );
    let exec = format!("cat {}", fixture("claude.json"));
    let r = run_in_place(
        dir.path(),
        "d",
        &exec,
        &["--max-iterations", "2", "--model-id", "claude-sonnet-4-5"],
    );
    assert_eq!(r.code, 19, "{}", r.stdout);
    let halt = events(dir.path(), "d").last().unwrap().clone();
    assert_eq!(halt["halt_reason"], "model_drift_detected");
    assert_eq!(halt["detail"], "iteration 1: the agent's usage names model \"claude-3-5-haiku-20241022\", the run pins \"claude-sonnet-4-5\"");
    // Claude Code's small background calls go to a second model: named, it is no drift.
    write(
        dir.path(),
        "loop.toml",
        "[metering]\nagent_output = \"claude-json\"\n[model]\nauxiliary = [\"claude-3-5-haiku\"]\n",
    );
    let r = run_in_place(
        dir.path(),
        "e",
        &exec,
        &["--max-iterations", "1", "--model-id", "claude-sonnet-4-5"],
    );
    assert_eq!(r.code, 12, "{}", r.stdout);
}

#[test]
fn aiders_analytics_log_is_read_from_the_file_the_loop_names_and_its_provider_prefix_is_no_drift() {
    let dir = workdir();
    write(
        dir.path(),
        "loop.toml",
        "[metering]\nagent_output = \"aider-analytics\"\n",
    );
    let agent = format!(
        "test -f \"$LOOPEXEC_AGENT_LOG\" && cat {} >> \"$LOOPEXEC_AGENT_LOG\"",
        fixture("aider_analytics.jsonl")
    );
    let r = run_in_place(
        dir.path(),
        "a",
        &agent,
        &["--max-iterations", "1", "--model-id", "claude-sonnet-4-5"],
    );
    assert_eq!(r.code, 12, "{}", r.stdout);
    let ev = events(dir.path(), "a");
    let u = usage(&ev)[0];
    // Two message_send events: cost 0.01812 + 0.022347.
    assert_eq!(u["usd_micros"], 18_120 + 22_347);
    assert_eq!(u["tokens"]["input"], 5_210 + 6_044);
    assert_eq!(u["sources"][0]["name"], "aider_analytics");
}

#[test]
fn codexs_tokens_are_priced_as_the_pinned_model_because_its_stream_names_none() {
    let dir = workdir();
    write(dir.path(), "loop.toml", "[metering]\nagent_output = \"codex-json\"\n[metering.prices.\"gpt-5-codex\"]\ninput_usd_per_mtok = 1.25\noutput_usd_per_mtok = 10\ncache_read_usd_per_mtok = 0.125\n");
    let r = run_in_place(
        dir.path(),
        "x",
        &format!("cat {}", fixture("codex.jsonl")),
        &["--max-iterations", "1", "--model-id", "gpt-5-codex"],
    );
    assert_eq!(r.code, 12, "{}", r.stdout);
    let u = usage(&events(dir.path(), "x"))[0].clone();
    // The last turn.completed is the thread's total: input 31522 - 28416 cached, output 1873.
    assert_eq!(
        u["tokens"],
        serde_json::json!({"input": 3_106, "output": 1_873, "cache_read": 28_416, "cache_write": 0})
    );
    // 3106 x 1.25 + 1873 x 10 + 28416 x 0.125 = 3882.5 + 18730 + 3552 micro-USD, rounded up once.
    assert_eq!(
        (u["usd_micros"].as_u64(), u["basis"].as_str()),
        (Some(26_165), Some("priced"))
    );
}

#[test]
fn an_agent_that_prints_no_cli_output_has_unknown_money_said_so_never_zero() {
    let dir = workdir();
    write(
        dir.path(),
        "loop.toml",
        "[metering]\nagent_output = \"claude-json\"\n",
    );
    let r = run_in_place(
        dir.path(),
        "n",
        "echo 'not json at all'",
        &["--max-iterations", "1"],
    );
    assert_eq!(r.code, 12, "{}", r.stdout);
    let u = usage(&events(dir.path(), "n"))[0].clone();
    assert_eq!(
        (u["usd_micros"].clone(), u["basis"].as_str()),
        (Value::Null, Some("unknown"))
    );
    assert_eq!(u["sources"][0]["rejected"]["malformed"], 1);
}

#[test]
fn the_native_zones_agent_output_is_metered_as_it_is_captured() {
    let dir = workdir();
    write(dir.path(), "README", "t0\n");
    write(
        dir.path(),
        "loop.toml",
        "[metering]\nagent_output = \"claude-stream-json\"\n",
    );
    commit_t0(dir.path());
    let stream = std::fs::read_to_string(fixture("claude_stream.jsonl")).unwrap();
    let agent = format!("cat <<'EOF'\n{stream}EOF");
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--isolation",
            "native",
            "--no-baseline",
            "--json",
            "--run-id",
            "s",
            "--exec",
            &agent,
            "--check",
            "false",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 12, "{}", r.stdout);
    let u = usage(&events(dir.path(), "s"))[0].clone();
    assert_eq!(u["sources"][0]["name"], "claude_stream_json");
    assert_eq!(u["basis"], "reported");
    assert_eq!(u["usd_micros"], 76_818);
}
