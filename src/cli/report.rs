//! `loopexec report`: a digest of a run's receipt (verified first): configuration, one line per
//! iteration, and how it ended.

use super::receipt_source::{self, ReceiptArgs};
use crate::error::CmdResult;
use crate::inert::inert;
use crate::output::Outcome;
use crate::receipt::events::{self, iteration_of, type_of};
use serde_json::{json, Map, Value};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: ReceiptArgs,
}

/// One iteration as told by the receipt.
#[derive(Debug, Clone, Default)]
pub struct IterationDigest {
    pub iteration: u64,
    pub exec: Option<Map<String, Value>>,
    pub check: Option<Map<String, Value>>,
    pub interrupted: Option<String>,
}

impl IterationDigest {
    pub fn failing_count(&self) -> Option<usize> {
        self.check.as_ref()?.get("failing_count")?.as_u64().map(|c| c as usize)
    }

    pub fn check_exit(&self) -> Option<i64> {
        self.check.as_ref()?.get("check_exit")?.as_i64()
    }

    fn to_json(&self) -> Value {
        let ending = |e: &Option<Map<String, Value>>| e.as_ref().and_then(|m| m.get("ending").cloned());
        let ms = |e: &Option<Map<String, Value>>| e.as_ref().and_then(|m| m.get("duration_ms").cloned());
        json!({
            "iteration": self.iteration,
            "exec_ending": ending(&self.exec),
            "exec_duration_ms": ms(&self.exec),
            "check_ending": ending(&self.check),
            "check_exit": self.check_exit(),
            "check_duration_ms": ms(&self.check),
            "failing_count": self.failing_count(),
            "junit_error": self.check.as_ref().and_then(|m| m.get("junit_error").cloned()),
            "interrupted": self.interrupted,
        })
    }
}

/// Group a receipt's events by iteration.
pub fn iterations(events: &[Map<String, Value>]) -> Vec<IterationDigest> {
    let mut out: Vec<IterationDigest> = Vec::new();
    for event in events {
        let Some(n) = iteration_of(event) else { continue };
        let kind = type_of(event);
        if kind == events::ITERATION_START {
            out.push(IterationDigest { iteration: n, ..Default::default() });
            continue;
        }
        let Some(slot) = out.iter_mut().rev().find(|d| d.iteration == n) else { continue };
        match kind {
            events::EXEC_RESULT => slot.exec = Some(event.clone()),
            events::CHECK_RESULT => slot.check = Some(event.clone()),
            events::ITERATION_INTERRUPTED => {
                slot.interrupted = Some(event.get("cause").and_then(Value::as_str).unwrap_or("?").to_string())
            }
            _ => {}
        }
    }
    out
}

fn ending_text(e: Option<&Map<String, Value>>) -> String {
    let Some(ending) = e.and_then(|m| m.get("ending")) else { return "-".into() };
    match ending.get("kind").and_then(Value::as_str) {
        Some("exited") => format!("exit {}", ending.get("code").and_then(Value::as_i64).unwrap_or(-1)),
        Some("timed_out") => "timed out".into(),
        Some("signaled") => format!("signal {}", ending.get("signal").and_then(Value::as_i64).unwrap_or(0)),
        Some("failed_to_start") => "could not start".into(),
        Some("interrupted") => "interrupted".into(),
        _ => "?".into(),
    }
}

/// The egress audit log beside the receipt, summarised per host, and whether its digest is the
/// one the receipt recorded last (the log is written by the proxy, the digest by the engine).
fn egress_summary(receipt: &std::path::Path, events: &[Map<String, Value>]) -> Value {
    let recorded = events
        .iter()
        .rev()
        .find_map(|e| e.get("egress").and_then(|g| g.get("audit_sha256")).and_then(Value::as_str).map(str::to_string));
    let Some(recorded) = recorded else {
        return json!({"summary": null});
    };
    let dir = receipt.parent().and_then(|p| crate::safefs::SafeDir::open(p).ok());
    let bytes = dir.as_ref().and_then(|d| d.read(crate::zones::pinned::EGRESS_AUDIT_FILE, 256 * 1024 * 1024).ok());
    match bytes {
        Some(bytes) => {
            use sha2::Digest;
            let actual = hex::encode(sha2::Sha256::digest(&bytes));
            match crate::egress::audit::summarize(&bytes) {
                Ok(summary) => json!({"summary": summary, "audit_sha256": actual, "audit_matches_receipt": actual == recorded}),
                Err(e) => json!({"summary": null, "error": e.to_string()}),
            }
        }
        None => json!({"summary": null, "error": "the egress audit log is missing"}),
    }
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let loaded = receipt_source::load(&args.source)?;
    let events = &loaded.chain.events;
    let start = events.iter().find(|e| type_of(e) == events::RUN_START).cloned().unwrap_or_default();
    let halt = events.iter().find(|e| type_of(e) == events::HALT).cloned();
    let count = |t: &str| events.iter().filter(|e| type_of(e) == t).count();
    let digests = iterations(events);
    let run_id = start.get("run_id").and_then(Value::as_str).unwrap_or("").to_string();
    let halt_reason = halt.as_ref().and_then(|h| h.get("halt_reason").cloned()).unwrap_or(Value::Null);
    let last_exit = digests.iter().rev().find_map(|d| d.check_exit());
    let receipt = loaded.path.to_string_lossy().into_owned();
    let config = start.get("config").cloned().unwrap_or(Value::Null);

    let mut human = String::new();
    human.push_str(&format!("run {run_id}  ({} events, chain verified, head {})\n", events.len(), &loaded.chain.head[..12]));
    human.push_str(&format!(
        "mode {}  isolation {}\n",
        start.get("mode").and_then(Value::as_str).unwrap_or("?"),
        start.get("isolation").and_then(Value::as_str).unwrap_or("?")
    ));
    human.push_str(&format!("exec   {}\ncheck  {}\n", inert(config["exec"].as_str().unwrap_or("?")), inert(config["check"].as_str().unwrap_or("?"))));
    for d in &digests {
        let failing = d.failing_count().map(|c| format!("  failing {c}")).unwrap_or_default();
        let interrupted = d.interrupted.as_ref().map(|c| format!("  INTERRUPTED ({c})")).unwrap_or_default();
        human.push_str(&format!(
            "  #{:<3} exec {:<14} check {:<14}{failing}{interrupted}\n",
            d.iteration,
            ending_text(d.exec.as_ref()),
            ending_text(d.check.as_ref())
        ));
    }
    match &halt {
        Some(h) => human.push_str(&format!(
            "halt   {} (exit {}): {}\n",
            h.get("halt_reason").and_then(Value::as_str).unwrap_or("?"),
            h.get("exit_code").and_then(Value::as_i64).unwrap_or(0),
            inert(h.get("detail").and_then(Value::as_str).unwrap_or(""))
        )),
        None => human.push_str("not halted (resumable)\n"),
    }
    let delivery = halt.as_ref().and_then(|h| h.get("delivery")).cloned().unwrap_or(Value::Null);
    if let Some(branch) = delivery.get("branch").and_then(Value::as_str) {
        human.push_str(&format!(
            "delivered branch {} ({}), patch {}\n",
            inert(branch),
            inert(delivery.get("commit").and_then(Value::as_str).map(|c| c.get(..c.len().min(12)).unwrap_or(c)).unwrap_or("?")),
            inert(delivery.get("patch").and_then(Value::as_str).unwrap_or("?"))
        ));
    }
    let egress = egress_summary(&loaded.path, events);
    if let Some(summary) = egress.get("summary").filter(|v| !v.is_null()) {
        human.push_str(&format!(
            "egress {} allowed, {} denied, {} bytes up, {} bytes down{}\n",
            summary["allowed"], summary["denied"], summary["bytes_up"], summary["bytes_down"],
            if egress["audit_matches_receipt"] == json!(false) { "  (AUDIT LOG CHANGED since the receipt recorded it)" } else { "" }
        ));
        if let Some(hosts) = summary["hosts"].as_object() {
            for (host, h) in hosts {
                human.push_str(&format!("  {:<40} allowed {} denied {}\n", inert(host), h["allowed"], h["denied"]));
            }
        }
    }
    human.push_str(&format!("receipt {}\n", inert(&receipt)));

    Ok(Outcome::ok("report")
        .field("run_id", run_id)
        .field("receipt", receipt)
        .field("halt_reason", halt_reason)
        .field("iteration", digests.last().map(|d| d.iteration).unwrap_or(0))
        .field("check_exit", json!(last_exit))
        .field(
            "report",
            json!({
                "mode": start.get("mode"),
                "isolation": start.get("isolation"),
                "loopexec_version": start.get("loopexec_version"),
                "config": config,
                "chain": {
                    "verified": true,
                    "events": events.len(),
                    "head": loaded.chain.head,
                    "file_sha256": loaded.chain.file_sha256,
                },
                "iterations": digests.iter().map(IterationDigest::to_json).collect::<Vec<_>>(),
                "halt": halt,
                "delivery": delivery,
                "egress": egress,
                "interruptions": count(events::RUN_INTERRUPTED),
                "resumes": count(events::RUN_RESUMED),
            }),
        )
        .human(human))
}
