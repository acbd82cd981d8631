//! `loopexec ratchet <run>`: the ratchet's frontier from the receipt alone: which iterations were
//! judged, which were accepted, what each rejected one lost and which tree it was reverted to,
//! and the last accepted iteration with its tree (docs/progress.md). Read-only; advancing the
//! frontier by hand (`--accept N --key KEY`) is not built yet.

use super::receipt_source::{self, ReceiptArgs};
use crate::error::CmdResult;
use crate::output::{aligned, Outcome};
use serde_json::{json, Value};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: ReceiptArgs,
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let loaded = receipt_source::load(&args.source)?;
    let history = &loaded.history;
    let run_id = history.run_id().unwrap_or("").to_string();
    let mut rows = vec![("run_id", run_id.clone())];
    let mut judged = Vec::new();
    for record in &history.iterations {
        let Some(p) = &record.progress else { continue };
        let tree = record.snapshot.as_ref().map(|s| s.tree_id.clone());
        let lost: Vec<Value> = p.rejection.as_ref().and_then(|r| r.get("lost")).and_then(Value::as_array).cloned().unwrap_or_default();
        let line = match p.accepted {
            true => format!("accepted, {} failing", p.failing_targets),
            false => format!("rejected (lost {}), {} failing, frontier stays at {}", lost.len(), p.failing_targets, p.frontier),
        };
        rows.push(("iteration", format!("{}: {line}", record.iteration)));
        judged.push(json!({
            "iteration": record.iteration,
            "accepted": p.accepted,
            "failing_targets": p.failing_targets,
            "lost": lost,
            "tree_id": tree,
            "reverted_to_tree": p.reverted_to_tree,
        }));
    }
    let frontier = history.iterations.iter().rev().find(|r| r.progress.as_ref().is_some_and(|p| p.accepted));
    let (at, tree) = match frontier {
        Some(r) => (r.iteration, r.snapshot.as_ref().map(|s| s.tree_id.clone())),
        None => (0, history.workspace.as_ref().map(|w| w.tree_id.clone())),
    };
    rows.push(("frontier", format!("iteration {at}{}", tree.as_deref().map(|t| format!(", tree {t}")).unwrap_or_default())));
    Ok(Outcome::ok("ratchet")
        .field("run_id", run_id)
        .field("ratchet", json!({"judged": judged, "frontier": {"iteration": at, "tree_id": tree}}))
        .human(aligned(&rows)))
}
