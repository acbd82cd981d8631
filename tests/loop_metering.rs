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
    assert_eq!(u["tokens"], serde_json::json!({"input": 1500, "output": 300, "cache_read": 30, "cache_write": 0}));
    assert_eq!(u["models"][0]["model"], "claude-x");
    assert_eq!(u["sources"][0]["name"], "usage_file");
    assert_eq!(u["sources"][0]["records"], 2);
    assert_eq!(u["sources"][0]["rejected"]["duplicate"], 1);
    assert_eq!(u["sources"][0]["rejected"]["malformed"], 1);
}

#[test]
fn an_agents_usage_lines_become_one_usage_event_with_their_exact_sums() {
    let dir = workdir();
    let r = loopexec(dir.path(), &["run", "--isolation", "none", "--no-baseline", "--json", "--run-id", "m", "--exec", TWO_CALLS, "--check", "true", "--max-iterations", "1"]);
    // In place a passing check is `human_required` (11): no guard judged the step.
    assert_eq!(r.code, 11, "{}", r.stderr);
    assert_two_calls_metered(&events(dir.path(), "m"));
}

#[test]
fn an_agent_that_writes_no_usage_leaves_no_usage_event() {
    let dir = workdir();
    let r = loopexec(dir.path(), &["run", "--isolation", "none", "--no-baseline", "--json", "--run-id", "q", "--exec", "test -f \"$LOOPEXEC_USAGE\"", "--check", "true", "--max-iterations", "1"]);
    assert_eq!(r.code, 11, "{}", r.stderr);
    let ev = events(dir.path(), "q");
    assert_eq!(ev.iter().find(|e| e["type"] == "exec_result").unwrap()["exit_code"], 0);
    assert!(usage_events(&ev).is_empty(), "{ev:#?}");
}

#[test]
fn each_iteration_gets_a_fresh_empty_usage_file() {
    let dir = workdir();
    let agent = format!("test ! -s \"$LOOPEXEC_USAGE\" && {TWO_CALLS}");
    let r = loopexec(dir.path(), &["run", "--isolation", "none", "--no-baseline", "--json", "--run-id", "f", "--exec", &agent, "--check", "false", "--max-iterations", "2"]);
    assert_ne!(r.code, 0);
    let ev = events(dir.path(), "f");
    let usage = usage_events(&ev);
    assert_eq!(usage.iter().map(|u| (u["iteration"].as_u64(), u["usd_micros"].as_u64())).collect::<Vec<_>>(), vec![(Some(1), Some(17_500)), (Some(2), Some(17_500))]);
}

#[test]
fn the_native_zones_agent_writes_its_usage_file_through_the_writable_grant() {
    let dir = workdir();
    write(dir.path(), "README", "t0\n");
    commit_t0(dir.path());
    let r = loopexec(dir.path(), &["run", "--isolation", "native", "--no-baseline", "--json", "--run-id", "n", "--exec", TWO_CALLS, "--check", "true", "--max-iterations", "1"]);
    assert_eq!(r.code, 10, "{}", r.stderr);
    assert_two_calls_metered(&events(dir.path(), "n"));
}

#[test]
fn tokens_the_usage_file_reports_past_a_token_cap_halt_budget_exceeded_after_the_agent() {
    let dir = workdir();
    let r = loopexec(dir.path(), &["run", "--isolation", "none", "--no-baseline", "--json", "--run-id", "b", "--exec", TWO_CALLS, "--check", "true", "--max-iterations", "3", "--budget-tokens", "1000"]);
    assert_eq!(r.code, 18, "{}", r.stdout);
    let ev = events(dir.path(), "b");
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap_or("")).collect();
    assert_eq!(types.iter().filter(|t| **t == "check_result").count(), 0, "{types:?}");
    let halt = ev.last().unwrap();
    assert_eq!(halt["halt_reason"], "budget_exceeded");
    // 1000 + 500 input, 200 + 100 output, 30 cache read: the two believed lines, exactly.
    assert_eq!(halt["detail"], "tokens: spent 1830 crossed the cap 1000 in iteration 1");
}
