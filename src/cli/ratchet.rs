//! `loopexec ratchet <run>`: the ratchet's frontier from the receipt alone: which iterations were
//! judged, which were accepted (by the ratchet or by the operator's hand), what each rejected one
//! lost and which tree it was reverted to, and the last accepted iteration with its tree
//! (docs/progress.md). Read-only, except with `--accept N --key KEY`: the operator advances the
//! frontier by hand to iteration N, a rejected one, as a signed `ratchet_accept` event appended to
//! the paused run's receipt under its lock (`receipt::acceptance`); `run --resume` starts from it.

use super::receipt_source::{self, ReceiptArgs};
use crate::error::{CmdResult, Failure, FailureCode};
use crate::output::{aligned, Outcome};
use crate::receipt::acceptance;
use crate::receipt::chain;
use crate::receipt::events::{Event, Recorded};
use crate::receipt::history::History;
use crate::receipt::keys::OperatorKey;
use crate::receipt::store::{log_failure, RunDir, StateDir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: ReceiptArgs,
    /// Advance the frontier by hand to iteration N, the last judged iteration, which the ratchet
    /// rejected; takes effect on `run --resume` (docs/progress.md, "Accepting by hand").
    #[arg(long, value_name = "N", requires = "key", conflicts_with = "receipt")]
    pub accept: Option<u64>,
    /// The operator's private key (operator.key) that signs the acceptance: the key that started
    /// the run. Only with --accept.
    #[arg(long, value_name = "FILE", requires = "accept")]
    pub key: Option<PathBuf>,
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    if let (Some(n), Some(key)) = (args.accept, &args.key) {
        return accept(&args.source, n, key);
    }
    let loaded = receipt_source::load(&args.source)?;
    Ok(show(&loaded.history))
}

/// Each iteration the ratchet judged: its `ratchet --json` object (`accepted`,
/// `accepted_by_hand`, `failing_targets`, `lost`, trees) and its line (`accepted, 2 failing`).
pub(crate) fn judged(history: &History) -> Vec<(Value, String)> {
    let mut judged = Vec::new();
    for record in &history.iterations {
        let Some(p) = &record.progress else { continue };
        let tree = record.snapshot.as_ref().map(|s| s.tree_id.clone());
        let lost: Vec<Value> = p
            .rejection
            .as_ref()
            .and_then(|r| r.get("lost"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let by_hand = history.accepted_by_hand(record.iteration);
        let line = match (p.accepted, by_hand) {
            (true, _) => format!("accepted, {} failing", p.failing_targets),
            (false, true) => format!(
                "rejected (lost {}), accepted by hand, {} failing",
                lost.len(),
                p.failing_targets
            ),
            (false, false) => format!(
                "rejected (lost {}), {} failing, frontier stays at {}",
                lost.len(),
                p.failing_targets,
                p.frontier
            ),
        };
        let value = json!({
            "iteration": record.iteration,
            "accepted": p.accepted,
            "accepted_by_hand": by_hand,
            "failing_targets": p.failing_targets,
            "lost": lost,
            "tree_id": tree,
            "reverted_to_tree": p.reverted_to_tree,
        });
        judged.push((value, line));
    }
    judged
}

/// The frontier as the receipt's history holds it.
fn show(history: &History) -> Outcome {
    let run_id = history.run_id().unwrap_or("").to_string();
    let mut rows = vec![("run_id", run_id.clone())];
    let mut judged = Vec::new();
    for (value, line) in self::judged(history) {
        rows.push(("iteration", format!("{}: {line}", value["iteration"])));
        judged.push(value);
    }
    let hand: Vec<Value> = history
        .hand_accepted
        .iter()
        .map(|(a, after)| json!({"iteration": a.iteration, "tree_id": a.tree_id, "operator_key": a.operator_key, "applied": history.last_started > *after}))
        .collect();
    for (a, after) in &history.hand_accepted {
        let when = if history.last_started > *after {
            "applied by the resumed run"
        } else {
            "takes effect on run --resume"
        };
        // Read without a key: the signature is what `verify` and `run --resume` check.
        rows.push((
            "accepted by hand",
            format!(
                "iteration {} (tree {}), naming operator key {} (its signature checked by verify and run --resume); {when}",
                a.iteration,
                crate::inert::inert(&a.tree_id),
                crate::inert::inert(&a.operator_key)
            ),
        ));
    }
    let frontier = history
        .iterations
        .iter()
        .rev()
        .find(|r| r.progress.is_some() && history.ratchet_kept(r));
    let (at, tree) = match frontier {
        Some(r) => (r.iteration, r.snapshot.as_ref().map(|s| s.tree_id.clone())),
        None => (0, history.workspace.as_ref().map(|w| w.tree_id.clone())),
    };
    rows.push((
        "frontier",
        format!(
            "iteration {at}{}",
            tree.as_deref()
                .map(|t| format!(", tree {t}"))
                .unwrap_or_default()
        ),
    ));
    Outcome::ok("ratchet")
        .field("run_id", run_id)
        .field("ratchet", json!({"judged": judged, "hand_accepted": hand, "frontier": {"iteration": at, "tree_id": tree}}))
        .human(aligned(&rows))
}

/// Record the operator's acceptance of iteration `n`, signed with the key at `key`. Refused,
/// with nothing written, unless the run is not being driven, its receipt verifies and was
/// endorsed by that key, it has not halted, `n` is its last judged iteration and the ratchet
/// rejected it, and that iteration's layer is kept.
fn accept(source: &ReceiptArgs, n: u64, key: &Path) -> CmdResult<Outcome> {
    let operator = OperatorKey::load(key).map_err(super::keygen::key_failure)?;
    let statedir = StateDir::open(&super::operator::absolute_workdir(&source.workdir)?)?;
    let run = statedir.resolve(source.run_id.as_deref())?;
    // Held until the event is appended: no loopexec process drives the run meanwhile.
    let _lock = run.lock()?;
    let receipt = run.receipt_path();
    let bytes = run.receipt_bytes()?;
    let not_verified = |why: String| {
        Failure::new(
            FailureCode::NotVerified,
            format!("{}: {why}", receipt.display()),
        )
    };
    let verified = chain::verify(&bytes).map_err(|e| {
        Failure::workspace(format!(
            "{}: receipt does not verify: {e}",
            receipt.display()
        ))
    })?;
    let records = Recorded::decode_all(&verified.events)
        .map_err(|e| Failure::workspace(format!("{}: {e}", receipt.display())))?;
    let lines: Vec<&[u8]> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let history = History::fold(&records);
    let run_id = history.run_id().unwrap_or("").to_string();
    let operator_public = operator.verifying_key();
    crate::audit::verify::endorsements(&records, &lines, &run_id, &operator_public).map_err(
        |failures| {
            not_verified(failures.join("; "))
                .with_hint("--key must be the operator key that started the run")
        },
    )?;
    if let Some(Err(why)) = acceptance::verify_all(&records, &lines, &operator_public) {
        return Err(not_verified(why));
    }
    if let Some(halt) = &history.halt {
        return Err(Failure::new(
            FailureCode::RunAlreadyHalted,
            format!(
                "run {run_id} already halted with {}; a halted run is final",
                halt.halt_reason
            ),
        )
        .with_hint("start a new run; `loopexec explain-halt` says why it stopped"));
    }
    let tree = acceptable(&history, &run, n)?;
    let (mut log, _) = run.open_receipt()?;
    if log.head() != verified.head {
        return Err(Failure::workspace(format!(
            "{}: the receipt changed while it was read",
            receipt.display()
        )));
    }
    let record = acceptance::sign(&operator, &run_id, n, &tree, log.head());
    log.append_event(&Event::RatchetAccept(record.clone()))
        .map_err(log_failure)?;
    if let Ok(mut state) = run.read_state() {
        state.receipt_events = log.len();
        state.receipt_head = log.head().to_string();
        state.updated_at = crate::timestamp::now_rfc3339();
        run.write_state(&state)?;
    }
    let human = aligned(&[
        ("run_id", run_id.clone()),
        ("accepted", format!("iteration {n} (tree {tree}), by hand")),
        ("operator key", record.operator_key.clone()),
        (
            "next",
            format!("loopexec run --resume {run_id} (starts from iteration {n}'s tree)"),
        ),
    ]);
    Ok(Outcome::ok("ratchet")
        .field("run_id", run_id)
        .field("accepted", json!({"iteration": n, "tree_id": tree, "operator_key": record.operator_key, "takes_effect": "run --resume"}))
        .human(human))
}

/// The tree of iteration `n` when the operator may accept it and its layer is kept; else a
/// usage error naming why.
fn acceptable(history: &History, run: &RunDir, n: u64) -> CmdResult<String> {
    let tree = acceptance::acceptable(history, n)
        .map_err(|why| Failure::usage(format!("--accept {n}: {why}")))?;
    if !crate::engine::revert::rejected_kept(&run.path().join("workspace"), n) {
        return Err(Failure::usage(format!(
            "--accept {n}: the layer of iteration {n} was not kept (a run from before hand acceptances, or in place)"
        )));
    }
    Ok(tree)
}
