//! The crash window between a run's `halt` line and its seal. A `run --resume` of a run whose
//! halt is recorded, follows from its observations (`rules::derive`, checked by the caller) and
//! is not sealed finishes the seal, once: the run key of the supervisor that halted died with
//! it, so this process appends a `seal_resumed` event and endorses a run key of its own after
//! the halt (the only events that may follow a halt, `receipt::seal::after_halt`), then seals.
//! Nothing is delivered here: delivery happens before the `halt` line, which records it (done,
//! failed, or nothing to deliver), so a recorded halt's delivery is already what it will be.

use super::{LoopEnd, RunOutcome};
use crate::error::{CmdResult, Failure};
use crate::receipt::chain::ReceiptLog;
use crate::receipt::events::{Event, Recorded, SealResumed};
use crate::receipt::history::History;
use crate::receipt::keys::{OperatorKey, RunKey};
use crate::receipt::seal::{after_halt, endorse_run_key, seal_run, AfterHalt};
use crate::receipt::state::{RunPhase, RunState};
use crate::receipt::store::{log_failure, RunDir, StateDir};
use crate::run_id::RunId;

/// What [`finish_seal`] is given: the resumed run, its receipt opened for appending (under the
/// run's lock, which the caller holds) and read back into `records` and `history`.
pub(super) struct Unsealed<'a> {
    pub statedir: &'a StateDir,
    pub run_id: &'a RunId,
    pub run: &'a RunDir,
    pub log: ReceiptLog,
    pub records: &'a [Recorded],
    pub history: &'a History,
    pub max_iterations: u64,
    /// The state.json phase the run was left in.
    pub previous_state: Option<String>,
}

/// Seal the halted, unsealed run `u` with a fresh run key endorsed by `operator`, and record it
/// halted in its state file. A receipt holding anything else after its halt is refused
/// (`workspace_invalid`) and nothing is appended.
pub(super) fn finish_seal(u: Unsealed<'_>, operator: &OperatorKey) -> CmdResult<RunOutcome> {
    let Unsealed {
        statedir,
        run_id,
        run,
        mut log,
        records,
        history,
        max_iterations,
        previous_state,
    } = u;
    let receipt = run.receipt_path();
    let halt = history
        .halt
        .as_ref()
        .ok_or_else(|| Failure::internal("finishing the seal of a run that has not halted"))?;
    match after_halt(records) {
        Ok(AfterHalt::Nothing | AfterHalt::Completions { .. }) => {}
        Ok(AfterHalt::NotHalted) => return Err(Failure::internal("finishing the seal of a run that has not halted")),
        Err(why) => {
            return Err(Failure::workspace(format!("{}: the receipt holds events after its halt that are not the seal's completion: {why}", receipt.display()))
                .with_hint("the receipt was tampered with or written by a faulty supervisor; `loopexec verify` names the failing check"))
        }
    }
    log.append_event(&Event::SealResumed(SealResumed {
        run_id: run_id.to_string(),
        previous_state,
        halt_reason: halt.halt_reason,
        pid: std::process::id(),
    }))
    .map_err(log_failure)?;
    let run_key = RunKey::mint();
    endorse_run_key(&mut log, run_id.as_str(), &run_key, operator).map_err(log_failure)?;
    // The end state is the tree the halt recorded as delivered (none when nothing was).
    let end_state: Vec<serde_json::Value> = halt
        .delivery
        .as_ref()
        .and_then(|d| d.tree.as_deref())
        .map(|tree| crate::receipt::statement::subject("end-state", "gitTree", tree))
        .into_iter()
        .collect();
    seal_run(run.dir(), run_key, end_state)
        .map_err(|e| Failure::internal(format!("sealing the receipt: {e}")))?;
    let reason = halt.halt_reason;
    let isolation = history
        .start
        .as_ref()
        .map(|s| s.isolation.clone())
        .unwrap_or_default();
    write_halted_state(statedir, run_id, run, &log, history, max_iterations)?;
    let last_check = history.last_exited_check();
    let mode = match history.start.as_ref().map(|s| s.mode.as_str()) {
        Some(crate::rules::task_list::MODE_TASK_LIST) => crate::rules::task_list::MODE_TASK_LIST,
        _ => super::config::MODE_CHECK_FIXPOINT,
    };
    Ok(RunOutcome {
        run_id: run_id.to_string(),
        mode,
        end: LoopEnd::Halted {
            reason,
            detail: halt.detail.clone(),
        },
        iteration: history.last_started,
        max_iterations,
        check_exit: last_check.and_then(|c| c.check_exit),
        failing_count: last_check.and_then(|c| c.failing_count).map(|c| c as usize),
        receipt,
        state: RunPhase::Halted,
        isolation,
        resumed: true,
        finished_seal: true,
    })
}

/// The state files of a run whose receipt records its `halt`: `halted`, with that reason, the
/// receipt's length and head (what a supervisor killed after its seal left undone, too).
pub(super) fn write_halted_state(
    statedir: &StateDir,
    run_id: &RunId,
    run: &RunDir,
    log: &ReceiptLog,
    history: &History,
    max_iterations: u64,
) -> Result<(), Failure> {
    let Some(halt) = &history.halt else {
        return Ok(());
    };
    let reason = halt.halt_reason;
    let isolation = history
        .start
        .as_ref()
        .map(|s| s.isolation.clone())
        .unwrap_or_default();
    let state = RunState {
        run_id: run_id.to_string(),
        state: RunPhase::Halted,
        mode: history.start.as_ref().map_or_else(
            || super::config::MODE_CHECK_FIXPOINT.to_string(),
            |s| s.mode.clone(),
        ),
        isolation,
        iteration: history.last_started,
        max_iterations,
        halt_reason: Some(reason.as_str().into()),
        exit_code: Some(reason.class().code()),
        receipt: run.receipt_rel(),
        receipt_events: log.len(),
        receipt_head: log.head().to_string(),
        pid: std::process::id(),
        updated_at: crate::timestamp::now_rfc3339(),
    };
    run.write_state(&state)?;
    statedir.publish_latest(&state)?;
    Ok(())
}
