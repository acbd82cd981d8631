//! What `verify` checks of a run's `judge` events from the run directory alone: each judge was
//! asked on a green iteration no guard objected to, its packet artifact is the one the receipt
//! pins, its answer read again from its stdout artifact (`crate::rules::judge::read_answer`)
//! comes to the recorded outcome and reason, and a judged iteration's halt is the one its record
//! decides.

use crate::receipt::history::History;
use crate::rules::decide::Step;
use crate::rules::judge::{decide_on, output_bound, read_output, required_reviews};
use crate::rules::verdict::Verdict;
use crate::safefs::SafeDir;
use serde_json::Value;

/// The `judge` events of `history` checked against `run_dir` (the module's checks, in order): the
/// first failure, or how many answers were read again. `None`: the run has no judge event.
pub fn verify_records(history: &History, run_dir: &SafeDir) -> Option<Result<String, String>> {
    use sha2::Digest;
    let judged: Vec<_> = history
        .iterations
        .iter()
        .filter_map(|r| Some((r, r.judge.as_ref()?)))
        .collect();
    if judged.is_empty() {
        return None;
    }
    let sha = |bytes: &[u8]| hex::encode(sha2::Sha256::digest(bytes));
    // A judge that is an agent CLI answered in its output's final text (`[metering] judge_output`).
    let format: Option<crate::metering::agent_output::Format> = history
        .start
        .as_ref()
        .and_then(|s| s.config.get("metering"))
        .and_then(|m| m.get("judge_output"))
        .and_then(|f| serde_json::from_value(f.clone()).ok());
    for (record, judge) in &judged {
        let n = judge.iteration;
        let green = record
            .check
            .as_ref()
            .is_some_and(|c| Verdict::of_check(c) == Verdict::Pass);
        if !green || !record.guards.is_empty() {
            return Some(Err(format!("iteration {n}: a judge event on a check that was not green or a step a guard objected to")));
        }
        let required = match run_dir.read(&judge.packet, judge.packet_bytes) {
            Ok(packet) if sha(&packet) == judge.packet_sha256 => {
                serde_json::from_slice::<Value>(&packet)
                    .map(|p| required_reviews(&p))
                    .unwrap_or_default()
            }
            Ok(_) => {
                return Some(Err(format!(
                    "iteration {n}: the judge's packet {} is not the one the receipt pins",
                    judge.packet
                )))
            }
            Err(e) => return Some(Err(format!("iteration {n}: the judge's packet: {e}"))),
        };
        let answer = judge.stdout.artifact_within(run_dir, output_bound(format));
        if answer
            .as_deref()
            .is_some_and(|bytes| sha(bytes) != judge.stdout.sha256)
        {
            return Some(Err(format!(
                "iteration {n}: the judge's stdout artifact is not the output the receipt pins"
            )));
        }
        let again = read_output(
            &judge.ending,
            &judge.stdout,
            answer.as_deref(),
            format,
            &required,
        );
        if (again.outcome, again.reward_hacking, again.reason.as_str())
            != (judge.outcome, judge.reward_hacking, judge.reason.as_str())
        {
            return Some(Err(format!("iteration {n}: the judge's output, read again, does not come to the recorded answer")));
        }
        if let Some(halt) = history.halt.as_ref().filter(|h| h.iteration == n) {
            if let Step::Halt(reason, _) = decide_on(judge, String::new()) {
                if reason != halt.halt_reason {
                    return Some(Err(format!(
                        "iteration {n}: the judge's record decides {reason}, the run halted {}",
                        halt.halt_reason
                    )));
                }
            }
        }
    }
    Some(Ok(format!(
        "{} judge answer(s) read again from their artifacts",
        judged.len()
    )))
}
