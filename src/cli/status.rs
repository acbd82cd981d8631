//! `loopexec status`: the live or last state of a run (default: the latest), and whether a person
//! was told it needs them (`escalation_pending`, from the run's `escalations.jsonl`).

use crate::error::CmdResult;
use crate::output::{aligned, Outcome};
use crate::receipt::history::History;
use crate::receipt::state::RunPhase;
use crate::receipt::store::StateDir;
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (default: the latest run).
    #[arg(value_name = "RUN_ID")]
    pub run_id: Option<String>,
    /// Directory holding .loopexec/.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
    /// Print each event of the run as it lands in its receipt, until it halts or no process
    /// drives it, then its status (`--json`: one JSON object per event, then the status object).
    #[arg(long)]
    pub follow: bool,
}

pub fn run(args: Args, json: bool) -> CmdResult<Outcome> {
    let statedir = StateDir::open(&super::operator::absolute_workdir(&args.workdir)?)?;
    let run = statedir.resolve(args.run_id.as_deref())?;
    if args.follow {
        super::follow::follow(&run, json)?;
    }
    let mut state = run.read_state()?;
    if state.state == RunPhase::Running {
        // While a run is driven, the receipt is the live record of its iteration.
        let history = run
            .receipt_bytes()
            .ok()
            .and_then(|b| crate::receipt::chain::verify(&b).ok())
            .and_then(|chain| History::of_lines(&chain.events).ok());
        if let Some(history) = history.filter(|h| h.last_started > 0) {
            state.iteration = history.last_started;
        }
    }
    // A run whose lock nobody holds is driven by no process (its driver was killed).
    let active = state.state == RunPhase::Running && run.is_driven();
    let resumable = state.state != RunPhase::Halted && !active;
    let shown = match (state.state, active) {
        (RunPhase::Running, false) => "running (stale: its loopexec process is gone)".to_string(),
        (phase, _) => phase.as_str().to_string(),
    };
    let mut rows = vec![
        ("run_id", state.run_id.clone()),
        ("state", shown),
        (
            "iteration",
            format!("{} of {}", state.iteration, state.max_iterations),
        ),
    ];
    if let Some(reason) = &state.halt_reason {
        rows.push(("halt_reason", reason.clone()));
    }
    if state.state == RunPhase::Gated {
        // The comprehension gate's stop: a pinned reviewer's ack first, or the resume stops again.
        rows.push((
            "ack",
            format!(
                "loopexec ack {} --key REVIEWER_KEY (review the diffs it prints)",
                state.run_id
            ),
        ));
    }
    if resumable {
        rows.push(("resume", format!("loopexec run --resume {}", state.run_id)));
    }
    // A delivered escalation (`loopexec escalate`): the run waits on a person.
    let escalations = crate::escalation::log::read(run.dir()).map_err(crate::error::fs_failure)?;
    let escalation = escalations.pending().map(|r| {
        json!({
            "state": "escalation_pending",
            "packet_sha256": r.packet_sha256,
            "channel": r.channel,
            "at": r.time,
            "escalations": escalations.records.len(),
            "chain_intact": escalations.broken_at.is_none(),
        })
    });
    if let Some(r) = escalations.pending() {
        rows.push((
            "escalation",
            format!(
                "escalation_pending (packet sha256:{}, {} at {})",
                r.packet_sha256, r.channel, r.time
            ),
        ));
    }
    if let Some(line) = escalations.broken_at {
        rows.push((
            "escalations",
            format!(
                "{} line {line} breaks its hash chain",
                crate::escalation::log::FILE
            ),
        ));
    }
    let receipt = run.receipt_path().to_string_lossy().into_owned();
    rows.push(("receipt", receipt.clone()));
    Ok(Outcome::ok("status")
        .field("escalation", json!(escalation))
        .field("run_id", state.run_id.clone())
        .field("state", state.state.as_str())
        .field("iteration", state.iteration)
        .field("halt_reason", json!(state.halt_reason))
        .field("receipt", receipt)
        .field(
            "run",
            json!({
                "active": active,
                "resumable": resumable,
                "mode": state.mode,
                "isolation": state.isolation,
                "max_iterations": state.max_iterations,
                "halt_exit_code": state.exit_code,
                "receipt_events": state.receipt_events,
                "receipt_head": state.receipt_head,
                "updated_at": state.updated_at,
                "pid": state.pid,
            }),
        )
        .human(aligned(&rows)))
}
