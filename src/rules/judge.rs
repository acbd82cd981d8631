//! The judge's rules: what the judge's answer (its bytes on stdout, how its command ended) comes
//! to, and the halt (or not) a judged green comes to from the recorded answer. The engine reads
//! the live answer with [`read_answer`]; `verify` reads the recorded one again with it.

use super::decide::Step;
use crate::capture::StreamRecord;
use crate::ending::Ending;
use crate::halt::HaltReason;
use crate::inert::inert;
use crate::receipt::events::{JudgeOutcome, JudgeRecord};
use serde::Deserialize;
use serde_json::Value;

/// The answer's `schema` (optional in an answer; when given it must be this).
pub const ANSWER_SCHEMA: &str = "loopexec.judge.answer/1";
/// Largest answer read: a judge that writes more has not answered.
pub const MAX_ANSWER_BYTES: u64 = 16 * 1024;
/// Characters of the judge's reason kept (longer ones are cut, marked `...[truncated]`).
pub const MAX_REASON_CHARS: usize = 2000;

/// The halt (or not) a judged green iteration comes to; `detail` is the green check's sentence.
pub fn decide_on(judge: &JudgeRecord, detail: String) -> Step {
    let n = judge.iteration;
    match judge.outcome {
        JudgeOutcome::Approve => Step::Halt(HaltReason::SuccessConditionMet, format!("{detail}; the judge approved")),
        JudgeOutcome::Veto if judge.reward_hacking => {
            Step::Halt(HaltReason::RewardHackingDetected, format!("the judge vetoed iteration {n} as reward hacking: {}", judge.reason))
        }
        JudgeOutcome::Veto => Step::Halt(HaltReason::ReviewerRejected, format!("the judge vetoed iteration {n}: {}", judge.reason)),
        JudgeOutcome::Failed => Step::Halt(
            HaltReason::EscalationPending,
            format!("the check passed at iteration {n} but the judge gave no answer ({}); a human decides", judge.reason),
        ),
    }
}

/// The ids of the awareness findings a packet asks the judge to answer on.
pub fn required_reviews(packet: &Value) -> Vec<String> {
    packet["awareness"]["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["id"].as_str().map(str::to_string))
        .collect()
}

/// The judge's answer on stdout (docs/guards.md has its schema).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    #[serde(default)]
    schema: Option<String>,
    verdict: AnswerVerdict,
    reason: String,
    #[serde(default)]
    reward_hacking: bool,
    /// The ids of the packet's awareness findings the judge answered on.
    #[serde(default)]
    reviewed: Vec<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum AnswerVerdict {
    Approve,
    Veto,
}

/// What the judge's answer came to: the outcome, whether it said reward hacking, the reason
/// (escaped, bounded) or the failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    pub outcome: JudgeOutcome,
    pub reward_hacking: bool,
    pub reason: String,
}

impl Reading {
    fn failed(reason: String) -> Reading {
        Reading {
            outcome: JudgeOutcome::Failed,
            reward_hacking: false,
            reason,
        }
    }
}

/// The reason as the receipt and the terminal get it: one escaped line of bounded length.
fn bounded_reason(reason: &str) -> String {
    let line = inert(reason.trim());
    match line.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}...[truncated]", &line[..cut]),
        None => line.into_owned(),
    }
}

/// The most bytes of a metered judge's stdout (`[metering] judge_output`) its answer is looked for
/// in: what output capture keeps whole (`crate::capture::HEAD_BYTES + TAIL_BYTES`); the answer
/// found in it is bound by [`MAX_ANSWER_BYTES`] as any answer is.
pub const MAX_METERED_OUTPUT_BYTES: u64 = 128 * 1024;

/// How many bytes of the judge's stdout artifact its answer is read from.
pub fn output_bound(format: Option<crate::metering::agent_output::Format>) -> u64 {
    if format.is_some() {
        MAX_METERED_OUTPUT_BYTES
    } else {
        MAX_ANSWER_BYTES
    }
}

/// The judge's answer from its stdout as recorded (`artifact`: the artifact's bytes, read within
/// [`output_bound`]): the output itself, or, for a judge that is an agent CLI (`format`), the
/// final text of its output (`crate::metering::agent_output::answer`), which must then be whole
/// in the artifact. The live loop and `verify` read it the same way.
pub fn read_output(
    ending: &Ending,
    stdout: &StreamRecord,
    artifact: Option<&[u8]>,
    format: Option<crate::metering::agent_output::Format>,
    required: &[String],
) -> Reading {
    let Some(format) = format else {
        return read_answer(ending, stdout, artifact, required);
    };
    if ending.exit_code() != Some(0) {
        return read_answer(ending, stdout, None, required);
    }
    if stdout.truncated || stdout.bytes > MAX_METERED_OUTPUT_BYTES {
        return Reading::failed(format!("the judge wrote {} bytes on stdout, more than a metered judge's output bound of {MAX_METERED_OUTPUT_BYTES}", stdout.bytes));
    }
    match crate::metering::agent_output::answer::final_text(format, artifact.unwrap_or_default()) {
        Ok(text) => {
            let answer = StreamRecord {
                bytes: text.len() as u64,
                sha256: String::new(),
                artifact: None,
                truncated: false,
            };
            read_answer(ending, &answer, Some(text.as_bytes()), required)
        }
        Err(why) => Reading::failed(format!(
            "the judge's {} output has no answer: {why}",
            format.source_name()
        )),
    }
}

/// Read the judge's answer from how its command ended and what it wrote (`stdout`: the stdout
/// artifact's bytes, `None` when it wrote nothing or the artifact cannot be read). `required`:
/// the awareness findings the packet listed; an approval that does not name each in `reviewed`
/// has not answered on them and is no approval.
pub fn read_answer(
    ending: &Ending,
    stdout: &StreamRecord,
    bytes: Option<&[u8]>,
    required: &[String],
) -> Reading {
    match ending {
        Ending::Exited { code: 0 } => {}
        Ending::Exited { code } => return Reading::failed(format!("the judge exited {code}")),
        Ending::Signaled { signal } => {
            return Reading::failed(format!("the judge was killed by signal {signal}"))
        }
        Ending::TimedOut { after_ms } => {
            return Reading::failed(format!("the judge timed out after {after_ms} ms"))
        }
        Ending::FailedToStart { reason } => {
            return Reading::failed(format!("the judge could not start: {}", inert(reason)))
        }
        Ending::Interrupted { signal } => {
            return Reading::failed(format!("the judge was interrupted by signal {signal}"))
        }
        stalled @ Ending::Stalled { .. } => {
            return Reading::failed(format!(
                "the judge stalled: {}",
                stalled.stall_words().unwrap_or_default()
            ))
        }
    }
    if stdout.bytes > MAX_ANSWER_BYTES {
        return Reading::failed(format!(
            "the judge wrote {} bytes on stdout, more than the answer bound of {MAX_ANSWER_BYTES}",
            stdout.bytes
        ));
    }
    let Some(bytes) = bytes.filter(|b| !b.is_empty()) else {
        return Reading::failed("the judge wrote no answer on stdout".into());
    };
    let answer: Answer = match serde_json::from_slice(bytes) {
        Ok(answer) => answer,
        Err(e) => {
            return Reading::failed(format!(
                "the judge's stdout is not an answer: {}",
                inert(&e.to_string())
            ))
        }
    };
    if let Some(schema) = answer.schema.as_deref().filter(|s| *s != ANSWER_SCHEMA) {
        return Reading::failed(format!(
            "the judge's answer has schema {:?}, not {ANSWER_SCHEMA:?}",
            inert(schema)
        ));
    }
    if answer.reason.trim().is_empty() {
        return Reading::failed("the judge's answer has an empty reason".into());
    }
    let outcome = match answer.verdict {
        AnswerVerdict::Approve => JudgeOutcome::Approve,
        AnswerVerdict::Veto => JudgeOutcome::Veto,
    };
    let unanswered: Vec<&str> = required
        .iter()
        .filter(|id| !answer.reviewed.contains(id))
        .map(String::as_str)
        .collect();
    if outcome == JudgeOutcome::Approve && !unanswered.is_empty() {
        return Reading::failed(format!(
            "the judge approved without answering on the awareness findings {} (an approval must name each in `reviewed`)",
            unanswered.join(", ")
        ));
    }
    Reading {
        outcome,
        reward_hacking: answer.reward_hacking && outcome == JudgeOutcome::Veto,
        reason: bounded_reason(&answer.reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(bytes: u64) -> StreamRecord {
        StreamRecord {
            bytes,
            sha256: String::new(),
            artifact: None,
            truncated: false,
        }
    }

    fn read(text: &str) -> Reading {
        read_answer(
            &Ending::Exited { code: 0 },
            &stream(text.len() as u64),
            Some(text.as_bytes()),
            &[],
        )
    }

    #[test]
    fn an_approval_is_read_with_its_reason() {
        let r = read(
            r#"{"schema":"loopexec.judge.answer/1","verdict":"approve","reason":"the fix is real"}"#,
        );
        assert_eq!(
            r,
            Reading {
                outcome: JudgeOutcome::Approve,
                reward_hacking: false,
                reason: "the fix is real".into()
            }
        );
    }

    fn read_with_findings(text: &str) -> Reading {
        let required = ["A1".to_string(), "A2".to_string()];
        read_answer(
            &Ending::Exited { code: 0 },
            &stream(text.len() as u64),
            Some(text.as_bytes()),
            &required,
        )
    }

    #[test]
    fn an_approval_that_does_not_answer_on_every_awareness_finding_is_no_approval() {
        let r =
            read_with_findings(r#"{"verdict":"approve","reason":"looks fine","reviewed":["A1"]}"#);
        assert_eq!(r.outcome, JudgeOutcome::Failed);
        assert_eq!(r.reason, "the judge approved without answering on the awareness findings A2 (an approval must name each in `reviewed`)");
        let r = read_with_findings(
            r#"{"verdict":"approve","reason":"the stack is only logged","reviewed":["A2","A1"]}"#,
        );
        assert_eq!(r.outcome, JudgeOutcome::Approve);
    }

    #[test]
    fn a_veto_needs_no_review_list() {
        let r = read_with_findings(r#"{"verdict":"veto","reason":"reads the caller"}"#);
        assert_eq!(r.outcome, JudgeOutcome::Veto);
    }

    #[test]
    fn reward_hacking_counts_only_on_a_veto() {
        let r = read(r#"{"verdict":"approve","reason":"ok","reward_hacking":true}"#);
        assert!(!r.reward_hacking);
        let r = read(
            r#"{"verdict":"veto","reason":"special-cases the test input","reward_hacking":true}"#,
        );
        assert_eq!((r.outcome, r.reward_hacking), (JudgeOutcome::Veto, true));
    }

    #[test]
    fn a_reason_is_escaped_and_bounded() {
        let r = read(&format!(
            r#"{{"verdict":"veto","reason":"bad\u001b[2J{}"}}"#,
            "x".repeat(3000)
        ));
        assert!(r.reason.starts_with("bad\\x1b[2J"), "{}", r.reason);
        assert!(r.reason.ends_with("...[truncated]"));
        assert_eq!(
            r.reason.chars().count(),
            MAX_REASON_CHARS + "...[truncated]".len()
        );
    }

    #[test]
    fn anything_but_an_answer_is_a_failure_naming_what_was_wrong() {
        for (text, why) in [
            ("LGTM", "is not an answer"),
            (r#"{"verdict":"maybe","reason":"x"}"#, "is not an answer"),
            (r#"{"verdict":"approve"}"#, "is not an answer"),
            (
                r#"{"verdict":"approve","reason":"ok","extra":1}"#,
                "is not an answer",
            ),
            (r#"{"verdict":"approve","reason":"  "}"#, "empty reason"),
            (
                r#"{"schema":"other/2","verdict":"approve","reason":"ok"}"#,
                "has schema",
            ),
            ("", "no answer"),
        ] {
            let r = read(text);
            assert_eq!(r.outcome, JudgeOutcome::Failed, "{text}");
            assert!(r.reason.contains(why), "{text}: {}", r.reason);
        }
    }

    #[test]
    fn an_answer_over_the_bound_is_not_read() {
        let r = read_answer(
            &Ending::Exited { code: 0 },
            &stream(MAX_ANSWER_BYTES + 1),
            None,
            &[],
        );
        assert_eq!(r.outcome, JudgeOutcome::Failed);
        assert!(
            r.reason.contains("more than the answer bound"),
            "{}",
            r.reason
        );
    }

    #[test]
    fn a_judge_that_did_not_exit_zero_has_not_answered() {
        let ok = br#"{"verdict":"approve","reason":"ok"}"#;
        for (ending, why) in [
            (Ending::Exited { code: 2 }, "exited 2"),
            (Ending::Signaled { signal: 9 }, "signal 9"),
            (Ending::TimedOut { after_ms: 50 }, "timed out after 50 ms"),
        ] {
            let r = read_answer(&ending, &stream(ok.len() as u64), Some(ok), &[]);
            assert_eq!(
                (r.outcome, r.reason.contains(why)),
                (JudgeOutcome::Failed, true),
                "{}",
                r.reason
            );
        }
    }

    fn judged(
        outcome: JudgeOutcome,
        reward_hacking: bool,
        check_exit: i32,
    ) -> crate::receipt::history::IterationRecord {
        use crate::receipt::events::{sample, Event};
        let Event::ExecResult(exec) = sample::exec_result(1, 0) else {
            unreachable!()
        };
        let Event::CheckResult(check) = sample::check_result(1, check_exit) else {
            unreachable!()
        };
        let judge = sample::judge(outcome, reward_hacking);
        crate::receipt::history::IterationRecord {
            iteration: 1,
            exec: Some(exec),
            check: Some(check),
            judge: Some(judge),
            ..Default::default()
        }
    }

    fn decided(record: &crate::receipt::history::IterationRecord) -> Option<HaltReason> {
        match crate::rules::decide::decide(crate::rules::mode::Mode::CheckFixpoint, record, None, 3)
        {
            Step::Halt(reason, _) => Some(reason),
            _ => None,
        }
    }

    #[test]
    fn a_judges_approval_recorded_on_a_red_check_decides_nothing() {
        assert_eq!(decided(&judged(JudgeOutcome::Approve, false, 1)), None);
    }

    #[test]
    fn a_judged_green_check_halts_as_the_judge_decided() {
        assert_eq!(
            decided(&judged(JudgeOutcome::Approve, false, 0)),
            Some(HaltReason::SuccessConditionMet)
        );
        assert_eq!(
            decided(&judged(JudgeOutcome::Veto, false, 0)),
            Some(HaltReason::ReviewerRejected)
        );
        assert_eq!(
            decided(&judged(JudgeOutcome::Veto, true, 0)),
            Some(HaltReason::RewardHackingDetected)
        );
        assert_eq!(
            decided(&judged(JudgeOutcome::Failed, false, 0)),
            Some(HaltReason::EscalationPending)
        );
    }
}
