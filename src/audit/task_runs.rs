//! A task_list run's task runs, verified with it (`task_runs`): each checkpoint names its task's
//! `check_fixpoint` run and the sha256 of that run's sealed receipt. The run directory of each
//! lies beside the task_list run's (`.loopexec/runs/<run-id>.t<k>`); each must be there, its
//! receipt must be the one the checkpoint digested, it must verify by the same operator key, and
//! its halt must be the one the checkpoint recorded. A checkpoint can then not claim a task run
//! converged that did not.

use super::verify::{verify_run, Verification};
use crate::receipt::history::History;
use crate::safefs::SafeDir;
use ed25519_dalek::VerifyingKey;
use sha2::{Digest, Sha256};

pub const CHECK: &str = "task_runs";

/// Add the `task_runs` check to `v` when `history` is a task_list run's.
pub fn check(run_dir: &SafeDir, history: &History, operator: &VerifyingKey, v: &mut Verification) {
    if !history
        .start
        .as_ref()
        .is_some_and(|s| s.mode == crate::rules::task_list::MODE_TASK_LIST)
    {
        return;
    }
    match verify_all(run_dir, history, operator) {
        Ok(n) => v.pass_step(
            CHECK,
            format!("{n} task run(s) verify, each the one its checkpoint digested"),
        ),
        Err(why) => v.fail_step(CHECK, why),
    }
}

fn verify_all(
    run_dir: &SafeDir,
    history: &History,
    operator: &VerifyingKey,
) -> Result<usize, String> {
    let runs = run_dir
        .path()
        .parent()
        .ok_or_else(|| "the run directory has no parent holding its task runs".to_string())
        .and_then(|p| SafeDir::open(p).map_err(|e| e.to_string()))?;
    for c in &history.tasks.checkpoints {
        let shown = crate::inert::inert(&c.run_id);
        let dir = runs
            .subdir(&c.run_id)
            .map_err(|e| format!("task run {shown}: {e}"))?;
        let receipt = dir
            .read(
                crate::receipt::seal::RECEIPT_FILE,
                crate::receipt::chain::MAX_RECEIPT_BYTES,
            )
            .map_err(|e| format!("task run {shown}: {e}"))?;
        if hex::encode(Sha256::digest(&receipt)) != c.run_receipt_sha256 {
            return Err(format!(
                "task run {shown}'s receipt is not the one the checkpoint of task {} digested",
                crate::inert::inert(&c.task)
            ));
        }
        let inner = verify_run(&dir, operator);
        if !inner.ok() {
            let failed: Vec<&str> = inner
                .checks
                .iter()
                .filter(|x| !x.ok)
                .map(|x| x.name)
                .collect();
            return Err(format!(
                "task run {shown} does not verify ({})",
                failed.join(", ")
            ));
        }
        if inner.halt_reason.as_deref() != Some(c.run_halt.as_str()) {
            return Err(format!(
                "task run {shown} halted {}, its checkpoint says {}",
                inner.halt_reason.as_deref().unwrap_or("(none)"),
                c.run_halt.as_str()
            ));
        }
    }
    Ok(history.tasks.checkpoints.len())
}
