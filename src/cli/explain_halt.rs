//! `loopexec explain-halt`: why a run stopped, in one paragraph; for an iteration cap, whether
//! the failing set was still shrinking (raise the limit) or stalled.

use super::receipt_source::{self, ReceiptArgs};
use crate::error::CmdResult;
use crate::output::{aligned, Outcome};
use crate::progress::{trend, Trend};
use crate::receipt::history::LastStop;
use serde_json::{json, Value};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: ReceiptArgs,
}

fn summary(reason: &str, detail: &str, trend: &Trend) -> String {
    match reason {
        "success_condition_met" => format!("converged: {detail}."),
        "max_iterations_reached" => format!("iteration cap: {detail}. Progress: {}.", trend.sentence()),
        "execution_failure" => format!("a command did not complete: {detail}. Fix the command or its timeout, then start a new run."),
        "metric_integrity_violation" => format!(
            "the evidence contradicts the check's result: {detail}. A zero exit counts only when the declared reports and the runners' own output agree with it (docs/guards.md)"
        ),
        "workspace_invalid" => format!("the workspace or state is unusable: {detail}."),
        "reviewer_rejected" => format!("the judge vetoed a green step: {detail}. Nothing of that step was delivered; read its reason, then start a new run."),
        "escalation_pending" => format!("a human decides: {detail}. The judge did not approve; see its `judge` event and output artifacts."),
        other => format!("{other}: {detail}."),
    }
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let loaded = receipt_source::load(&args.source)?;
    let history = &loaded.history;
    let run_id = history.run_id().unwrap_or("").to_string();
    let counts: Vec<Option<usize>> = history.failing_counts().into_iter().map(|c| c.map(|c| c as usize)).collect();
    let trend = trend(&counts);
    let receipt = loaded.path.to_string_lossy().into_owned();
    let last_exit = history.last_exited_check().and_then(|c| c.check_exit);
    let out = Outcome::ok("explain-halt").field("run_id", run_id.clone()).field("receipt", receipt).field("check_exit", json!(last_exit));
    let Some(halt) = &history.halt else {
        let why = match history.last_stop {
            Some(LastStop::Interrupted) => "interrupted by the operator; resumable",
            _ => "paused or still running; resumable",
        };
        return Ok(out
            .field("halt_reason", Value::Null)
            .field("iteration", history.current().map(|d| d.iteration).unwrap_or(0))
            .field("explanation", json!({"halted": false, "summary": format!("not halted: {why}"), "progress": trend}))
            .human(format!("run {run_id} has not halted: {why} (loopexec run --resume {run_id})\n")));
    };
    let reason = halt.halt_reason.as_str().to_string();
    let detail = halt.detail.clone();
    let iteration = halt.iteration;
    let text = summary(&reason, &detail, &trend);
    let mut rows = vec![("run_id", run_id.clone()), ("halt_reason", reason.clone()), ("iteration", iteration.to_string())];
    rows.push(("why", text.clone()));
    // The evidence of the guards that objected in the halting iteration (escaped by `aligned`).
    let guards: Vec<_> = history.iterations.iter().filter(|d| d.iteration == iteration).flat_map(|d| d.guards.iter()).collect();
    for g in &guards {
        rows.push(("guard", format!("{} ({}): {}", g.guard, g.halt_reason, g.detail)));
        for f in &g.findings {
            rows.push(("finding", format!("{}: {}", f.path.as_deref().unwrap_or("-"), f.what)));
        }
    }
    // The judge's answer on the halting iteration (its reason is escaped when recorded and by `aligned`).
    let judge = history.iterations.iter().rev().find(|d| d.iteration == iteration).and_then(|d| d.judge.as_ref());
    if let Some(j) = judge {
        let hacking = if j.reward_hacking { ", reward hacking" } else { "" };
        rows.push(("judge", format!("{}{hacking}: {}", json!(j.outcome).as_str().unwrap_or(""), j.reason)));
    }
    // The evidence of the last check (its disagreements, when it kept a zero exit from passing).
    let evidence = history.last_check().and_then(|(_, c)| c.evidence.clone());
    for d in evidence.iter().flat_map(|e| &e.disagreements) {
        rows.push(("evidence", format!("{}: {}", d.kind, d.detail)));
    }
    // Receipts of earlier versions recorded no evidence: their explanation stays as it was.
    let out = match &evidence {
        Some(evidence) => out.field("evidence", json!(evidence)),
        None => out,
    };
    Ok(out
        .field("halt_reason", reason.clone())
        .field("iteration", iteration)
        .field(
            "explanation",
            {
                let mut explanation = json!({
                    "halted": true,
                    "exit_code": halt.exit_code,
                    "detail": detail,
                    "summary": text,
                    "progress": trend,
                    "failing_counts": counts,
                });
                // The guards' evidence, where any objected (earlier receipts explain as before).
                if let (false, Some(fields)) = (guards.is_empty(), explanation.as_object_mut()) {
                    fields.insert("guards".into(), json!(guards));
                }
                if let (Some(j), Some(fields)) = (judge, explanation.as_object_mut()) {
                    fields.insert("judge".into(), json!({"outcome": j.outcome, "reward_hacking": j.reward_hacking, "reason": j.reason}));
                }
                explanation
            },
        )
        .human(aligned(&rows)))
}
