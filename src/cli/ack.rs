//! `loopexec ack <run> --key REVIEWER_KEY`: a reviewer acknowledges the accepted diffs of the
//! workspace that are unread for the run (its pinned reviewers and limit, from its `run_start`),
//! as one signed, hash-chained line appended to `.loopexec/comprehension/acks.jsonl`
//! (`receipt::comprehension`); prints the `git diff` of each diff it acknowledged. The run's
//! next `run --resume` judges the line (`rules::comprehension`) and records what it cleared.
//! An ack proves that review was demanded and a reviewer key signed, not that review happened.

use crate::error::{CmdResult, Failure};
use crate::output::{aligned, Outcome};
use crate::receipt::comprehension::{self, Files};
use crate::receipt::history::History;
use crate::receipt::keys::OperatorKey;
use crate::receipt::store::StateDir;
use crate::run_id::RunId;
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run stopped by the comprehension gate (its pinned reviewers decide which keys count).
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
    /// Directory holding .loopexec/.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
    /// The reviewer's private key (reviewer.key from `loopexec keygen --reviewer`).
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let key = OperatorKey::load(&args.key).map_err(super::keygen::key_failure)?;
    let workdir = super::operator::absolute_workdir(&args.workdir)?;
    let statedir = StateDir::open(&workdir)?;
    let run = statedir.open_run(&RunId::parse(&args.run_id)?)?;
    let receipt = run.receipt_path();
    let bytes = run.receipt_bytes()?;
    let chain = crate::receipt::chain::verify(&bytes).map_err(|e| {
        Failure::workspace(format!(
            "{}: receipt does not verify: {e}",
            receipt.display()
        ))
    })?;
    let history = History::of_lines(&chain.events)
        .map_err(|e| Failure::workspace(format!("{}: {e}", receipt.display())))?;
    let cfg = crate::engine::pinned_config(&run, &history)?;
    let run_id = run.id().to_string();
    let pins = cfg.comprehension.ok_or_else(|| {
        Failure::usage(format!(
            "run {run_id} has no comprehension gate (it was started without --comprehension-every)"
        ))
    })?;
    let files = Files::open(statedir.root())?.ok_or_else(|| {
        Failure::usage("this workspace has no comprehension ledger yet: nothing to acknowledge")
    })?;
    let ledger = files.ledger()?.ok_or_else(|| {
        Failure::usage("this workspace has no comprehension ledger yet: nothing to acknowledge")
    })?;
    let lock = files.lock_acks()?;
    let log = files.acks()?;
    let judged = crate::rules::comprehension::judge_log(&log, &ledger.ledger_id);
    let view = crate::rules::comprehension::evaluate(
        &ledger.entries,
        &judged,
        &pins.reviewers,
        pins.every,
    );
    if view.unread.is_empty() {
        return Err(Failure::usage(format!("nothing to acknowledge: every accepted diff of this workspace is acked for run {run_id}")));
    }
    let lines = comprehension::lines_of(&log);
    let prev = lines
        .last()
        .map_or(comprehension::GENESIS.to_string(), |l| {
            comprehension::line_hash(l)
        });
    let ack = comprehension::sign_ack(
        &key,
        &ledger.ledger_id,
        lines.len(),
        &prev,
        &run_id,
        view.unread.clone(),
    );
    let line = files.append_ack(&lock, &ack)?;
    let reviewer = ack.reviewer.clone();
    let pinned = pins.reviewers.contains(&reviewer);
    let diffs: Vec<serde_json::Value> = ledger
        .entries
        .iter()
        .filter(|e| view.unread.contains(&e.digest))
        .map(|e| {
            json!({
                "digest": e.digest,
                "run_id": e.run_id,
                "iteration": e.iteration,
                "from_tree": e.from_tree,
                "to_tree": e.to_tree,
                "command": format!("git diff {} {}", e.from_tree, e.to_tree),
            })
        })
        .collect();
    let mut rows = vec![
        ("run_id", run_id.clone()),
        (
            "acked",
            format!(
                "{} diff(s), ack line {} of {}",
                view.unread.len(),
                ack.seq,
                files.path().join(comprehension::ACKS_FILE).display()
            ),
        ),
        ("reviewer", reviewer.clone()),
    ];
    if !pinned {
        rows.push(("warning", format!("this key is not one of run {run_id}'s pinned reviewers: the ack clears nothing for it")));
    }
    let mut human = aligned(&rows);
    human.push_str("review each diff with:\n");
    for d in &diffs {
        human.push_str(&format!(
            "  {}\n",
            d["command"].as_str().unwrap_or_default()
        ));
    }
    Ok(Outcome::ok("ack")
        .field(
            "ack",
            json!({
                "run_id": run_id,
                "seq": ack.seq,
                "line_sha256": comprehension::line_hash(&line),
                "reviewer": reviewer,
                "pinned_reviewer": pinned,
                "digests": view.unread,
                "diffs": diffs,
            }),
        )
        .human(human))
}
