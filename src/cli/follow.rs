//! `loopexec status --follow`: a running loop tailed from another terminal, from its receipt alone
//! (no socket into the supervisor): the receipt is read again about once a second, its complete
//! lines verified as a chain (a torn last line waits for the next read), and each new event
//! printed as it lands, one line each (its agent-controlled strings escaped), or with `--json`
//! as one JSON object per line (JSON Lines: `{"follow": {"run_id", "seq", "event"}}`), then the
//! command's own object. It ends at the run's halt, or when no process drives the run any more
//! (paused, interrupted, gated, or its supervisor gone).

use crate::error::{CmdResult, Failure};
use crate::inert::inert;
use crate::receipt::state::RunPhase;
use crate::receipt::store::RunDir;
use serde_json::{json, Map, Value};
use std::io::Write;
use std::time::Duration;

/// How long between reads of the receipt.
pub const POLL: Duration = Duration::from_millis(1000);

/// The receipt's complete lines (up to its last newline), verified as a chain; `None` while it
/// has none.
fn complete_events(run: &RunDir) -> CmdResult<Option<Vec<Map<String, Value>>>> {
    let bytes = run.receipt_bytes()?;
    let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else {
        return Ok(None);
    };
    crate::receipt::chain::verify(&bytes[..=end])
        .map(|chain| Some(chain.events))
        .map_err(|e| {
            Failure::workspace(format!(
                "run {}: the receipt does not verify: {e}",
                run.id()
            ))
        })
}

fn num(event: &Map<String, Value>, key: &str) -> String {
    event.get(key).map_or_else(
        || "?".into(),
        |v| match v {
            Value::Null => "-".into(),
            other => other.to_string(),
        },
    )
}

fn text(event: &Map<String, Value>, key: &str) -> String {
    inert(event.get(key).and_then(Value::as_str).unwrap_or("")).into_owned()
}

fn seconds(event: &Map<String, Value>) -> String {
    event
        .get("duration_ms")
        .and_then(Value::as_u64)
        .map_or_else(String::new, |ms| format!("  {:.1} s", ms as f64 / 1000.0))
}

/// One event as a line (every string from the run escaped); `None` for the receipt's own
/// bookkeeping (keys, endorsements, baselines' details) that a person following the loop skips.
pub fn line(event: &Map<String, Value>) -> Option<String> {
    let n = num(event, "iteration");
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("?");
    Some(match kind {
        "run_start" => format!(
            "run started: mode {}, isolation {}",
            text(event, "mode"),
            text(event, "isolation")
        ),
        "run_resumed" => "run resumed".into(),
        "exec_result" => format!(
            "#{n:<3} agent    exit {}{}",
            num(event, "exit_code"),
            seconds(event)
        ),
        "check_result" => format!(
            "#{n:<3} check    exit {}  failing {}{}",
            num(event, "check_exit"),
            num(event, "failing_count"),
            seconds(event)
        ),
        "check_baseline" => "t0   baseline check recorded".into(),
        "usage" => {
            let money = event
                .get("usd_micros")
                .and_then(Value::as_u64)
                .map_or("unknown".into(), crate::rules::budget::usd);
            format!(
                "#{n:<3} cost     {} ${money} ({})",
                text(event, "stage"),
                text(event, "basis")
            )
        }
        "guard" => format!(
            "#{n:<3} guard    {} ({}): {}",
            text(event, "guard"),
            text(event, "halt_reason"),
            text(event, "detail")
        ),
        "judge" => format!(
            "#{n:<3} judge    {}: {}",
            text(event, "outcome"),
            text(event, "reason")
        ),
        "progress" => format!(
            "#{n:<3} progress {}",
            if event.get("accepted").and_then(Value::as_bool) == Some(true) {
                "accepted"
            } else {
                "rejected"
            }
        ),
        "comprehension" => format!(
            "gate     {}: {} unread (limit {})",
            text(event, "outcome"),
            num(event, "unread_count"),
            num(event, "every")
        ),
        "iteration_interrupted" => format!("#{n:<3} interrupted"),
        "run_interrupted" => format!("interrupted by {}", text(event, "signal")),
        "halt" => format!(
            "halt     {} (exit {}): {}",
            text(event, "halt_reason"),
            num(event, "exit_code"),
            text(event, "detail")
        ),
        _ => return None,
    })
}

/// Whether the run is over for a follower: halted, or driven by no process.
fn ended(run: &RunDir) -> CmdResult<Option<RunPhase>> {
    let state = run.read_state()?;
    Ok(match state.state {
        RunPhase::Running if run.is_driven() => None,
        phase => Some(phase),
    })
}

/// Follow `run` until it ends; `json`: JSON Lines on stdout.
pub fn follow(run: &RunDir, json: bool) -> CmdResult<(RunPhase, usize)> {
    let stdout = std::io::stdout();
    let mut seen = 0usize;
    loop {
        // Whether it had ended is read before the receipt, so the last events are never missed.
        let over = ended(run)?;
        let events = complete_events(run)?.unwrap_or_default();
        let mut out = stdout.lock();
        for event in events.iter().skip(seen) {
            if json {
                let object = json!({"follow": {"run_id": run.id().as_str(), "seq": event.get("seq"), "event": event}});
                let _ = writeln!(
                    out,
                    "{}",
                    crate::inert::json_text(&object).unwrap_or_default()
                );
            } else if let Some(line) = line(event) {
                let _ = writeln!(out, "{line}");
            }
        }
        let _ = out.flush();
        seen = seen.max(events.len());
        let halted = events
            .iter()
            .any(|e| e.get("type").and_then(Value::as_str) == Some("halt"));
        if let Some(phase) = over {
            if halted || phase != RunPhase::Halted {
                return Ok((phase, seen));
            }
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn each_event_a_person_follows_is_one_escaped_line() {
        assert_eq!(
            line(&event(
                json!({"type": "exec_result", "iteration": 2, "exit_code": 0, "duration_ms": 1500})
            )),
            Some("#2   agent    exit 0  1.5 s".into())
        );
        assert_eq!(
            line(&event(
                json!({"type": "check_result", "iteration": 2, "check_exit": 1, "failing_count": 3})
            )),
            Some("#2   check    exit 1  failing 3".into())
        );
        assert_eq!(
            line(&event(
                json!({"type": "halt", "halt_reason": "max_iterations_reached", "exit_code": 12, "detail": "x\u{1b}[2Jy\nforged"})
            )),
            Some("halt     max_iterations_reached (exit 12): x\\x1b[2Jy\\nforged".into())
        );
        assert_eq!(
            line(&event(
                json!({"type": "usage", "iteration": 1, "stage": "agent", "usd_micros": null, "basis": "unknown"})
            )),
            Some("#1   cost     agent $unknown (unknown)".into())
        );
        assert_eq!(line(&event(json!({"type": "run_key"}))), None);
    }
}
