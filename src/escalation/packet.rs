//! The escalation packet, schema `loopexec.escalation/v1`: which run, why it stopped (its halt
//! reason, class, detail and explain-halt's verdict with its evidence), what a person must decide
//! (one sentence per halt class, [`decision`]), the exact commands to continue ([`commands`]), and
//! the receipt it rests on (its sha256 and whether it is sealed). Built from what the caller read
//! and computed; every string of the run in it is escaped and bounded ([`super::text`]). Its
//! digest is the sha256 of its exact bytes ([`Packet::bytes`]), the bytes a webhook receives.

use super::text::{packet_string, packet_value};
use crate::halt::{ExitClass, HaltReason};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub const SCHEMA: &str = "loopexec.escalation/v1";

/// The halt a packet is about.
#[derive(Debug, Clone)]
pub struct HaltFacts {
    pub reason: HaltReason,
    pub iteration: u64,
    pub detail: String,
}

/// What the packet is built from.
#[derive(Debug, Clone)]
pub struct PacketInput {
    pub run_id: String,
    pub workdir: String,
    /// The run's phase (`halted`, `paused`, `running`, ...), as `status` shows it.
    pub state: String,
    pub halt: Option<HaltFacts>,
    /// explain-halt's `explanation` object for the run (its verdict and evidence).
    pub explanation: Value,
    pub receipt_path: String,
    pub receipt_sha256: String,
    pub receipt_events: usize,
    pub sealed: bool,
    pub created_at: String,
}

/// A built packet: its JSON and the exact bytes it is sent and digested as.
#[derive(Debug, Clone)]
pub struct Packet {
    pub value: Value,
    bytes: Vec<u8>,
}

impl Packet {
    /// The compact JSON text of the packet (what `file` writes, a webhook receives, the digest covers).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Hex sha256 of [`Packet::bytes`].
    pub fn sha256(&self) -> String {
        hex::encode(Sha256::digest(&self.bytes))
    }

    /// The one-line headline the chat channels lead with (the run id and reason are not run
    /// strings the agent controls, but pass through the channel's neutraliser all the same).
    pub fn headline(&self) -> String {
        let run = self.value["run_id"].as_str().unwrap_or("");
        match self.value["halt"]["reason"].as_str() {
            Some(reason) => format!(
                "loopexec run {run} halted {reason} (exit {}): a person must decide",
                self.value["halt"]["exit_code"]
            ),
            None => format!(
                "loopexec run {run} is {} and has not halted: a person must decide",
                self.value["state"].as_str().unwrap_or("?")
            ),
        }
    }
}

/// What a person must decide, per halt class (docs/gates.md, "Escalation").
pub fn decision(class: Option<ExitClass>) -> &'static str {
    match class {
        None => "the run has not halted (paused, interrupted, or its supervisor is gone): resume it, or leave it and start over",
        Some(ExitClass::Converged) => "the check passed: review the delivered change and merge it or not",
        Some(ExitClass::TerminalBlocked) => "no guard could judge the green step (in place, or its tree observes the test run): review it and accept it or not",
        Some(ExitClass::IterationCap) => "the iteration cap was reached: raise it in a new run (the verdict says whether the run was still improving) or stop",
        Some(ExitClass::Integrity) => "the agent touched what it must not, or the evidence contradicts the check: read the findings; do not retry unchanged",
        Some(ExitClass::OracleUntrusted) => "the check is not a trustworthy oracle (flaky, not deterministic or not hermetic): fix the check before looping again",
        Some(ExitClass::CheckInadequate) => "the check does not catch planted faults: strengthen it before looping again",
        Some(ExitClass::ResumableJudgment) => "the judge did not approve (or vetoed) a green step: read its reason and accept the step or not",
        Some(ExitClass::NoConvergence) => "the agent stopped making progress: change the task, the agent or the targets, or stop",
        Some(ExitClass::Budget) => "the spending cap was reached or an iteration cost far more than the others: raise the budget in a new run, or stop",
        Some(ExitClass::LivenessDrift) => "the agent wedged, the model changed, or unread diffs piled up: look at the evidence; review and ack the diffs to clear comprehension debt",
        Some(ExitClass::Invariant | ExitClass::Workspace | ExitClass::Execution | ExitClass::Internal | ExitClass::Nominal) => {
            "the loop could not run as configured (a command, the workspace or a bug): fix the cause, then start a new run"
        }
    }
}

fn quote(arg: &str) -> String {
    shlex::try_quote(arg)
        .map(|q| q.into_owned())
        .unwrap_or_else(|_| format!("'{}'", arg.replace('\0', "")))
}

/// The exact commands to continue, most useful first. A halted run is final except for the
/// comprehension gate (ack, then resume) and a halt whose seal was not finished (resume seals it);
/// a run that has not halted resumes. `verdict_next` is explain-halt's next command.
pub fn commands(input: &PacketInput, verdict_next: Option<&str>) -> Vec<String> {
    let id = quote(&input.run_id);
    let wd = quote(&input.workdir);
    let mut out = Vec::new();
    match &input.halt {
        None => {
            out.push(format!("loopexec run --resume {id} --workdir {wd}"));
            out.push(format!("loopexec status {id} --workdir {wd}"));
        }
        // The comprehension gate's stop is never sealed (a gated run is resumable).
        Some(h) if h.reason == HaltReason::ComprehensionDebtExceeded => {
            out.push(format!(
                "loopexec ack {id} --workdir {wd} --key REVIEWER_KEY"
            ));
            out.push(format!("loopexec run --resume {id} --workdir {wd}"));
        }
        Some(_) if !input.sealed => out.push(format!("loopexec run --resume {id} --workdir {wd}")),
        Some(h) if h.reason.class() == ExitClass::Budget => {
            out.push(format!("loopexec run --workdir {wd} --budget-usd NEW_CAP"));
        }
        Some(_) => {}
    }
    if let Some(next) = verdict_next {
        out.push(next.to_string());
    }
    out.push(format!("loopexec explain-halt {id} --workdir {wd}"));
    out.push(format!("loopexec verify {id} --workdir {wd}"));
    out.dedup();
    out
}

/// Build the packet.
pub fn build(input: &PacketInput) -> Packet {
    let verdict_next = input
        .explanation
        .pointer("/verdict/next_command")
        .and_then(Value::as_str)
        .map(packet_string);
    let halt = input.halt.as_ref().map(|h| {
        json!({
            "reason": h.reason.as_str(),
            "class": h.reason.class(),
            "exit_code": h.reason.class().code(),
            "iteration": h.iteration,
            "detail": packet_string(&h.detail),
        })
    });
    let value = json!({
        "schema": SCHEMA,
        "run_id": packet_string(&input.run_id),
        "workdir": packet_string(&input.workdir),
        "created_at": input.created_at,
        "state": packet_string(&input.state),
        "halted": input.halt.is_some(),
        "halt": halt,
        "explanation": packet_value(&input.explanation),
        "decide": decision(input.halt.as_ref().map(|h| h.reason.class())),
        "continue": commands(input, verdict_next.as_deref()),
        "receipt": {
            "path": packet_string(&input.receipt_path),
            "sha256": input.receipt_sha256,
            "events": input.receipt_events,
            "sealed": input.sealed,
        },
    });
    let bytes = serde_json::to_vec(&value).unwrap_or_default();
    Packet { value, bytes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(halt: Option<HaltFacts>, sealed: bool) -> PacketInput {
        PacketInput {
            run_id: "r1".into(),
            workdir: "/w".into(),
            state: if halt.is_some() {
                "halted".into()
            } else {
                "paused".into()
            },
            halt,
            explanation: json!({"verdict": {"verdict": "raise_the_limit", "next_command": "loopexec run --max-iterations 9"}, "detail": "x\u{1b}y"}),
            receipt_path: "/w/.loopexec/runs/r1/receipt.jsonl".into(),
            receipt_sha256: "ab".repeat(32),
            receipt_events: 7,
            sealed,
            created_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    fn cap() -> HaltFacts {
        HaltFacts {
            reason: HaltReason::MaxIterationsReached,
            iteration: 3,
            detail: "3 of 3 @channel".into(),
        }
    }

    #[test]
    fn a_halted_packet_names_reason_class_decision_commands_and_receipt() {
        let p = build(&input(Some(cap()), true));
        let v = &p.value;
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(
            v["halt"],
            json!({"reason": "max_iterations_reached", "class": "iteration_cap", "exit_code": 12, "iteration": 3, "detail": "3 of 3 @channel"})
        );
        assert_eq!(v["decide"], decision(Some(ExitClass::IterationCap)));
        assert_eq!(
            v["continue"],
            json!([
                "loopexec run --max-iterations 9",
                "loopexec explain-halt r1 --workdir /w",
                "loopexec verify r1 --workdir /w"
            ])
        );
        assert_eq!(
            v["receipt"],
            json!({"path": "/w/.loopexec/runs/r1/receipt.jsonl", "sha256": "ab".repeat(32), "events": 7, "sealed": true})
        );
        assert_eq!(v["explanation"]["detail"], "x\\x1by");
    }

    #[test]
    fn the_digest_is_the_sha256_of_the_exact_bytes() {
        let p = build(&input(Some(cap()), true));
        assert_eq!(p.sha256(), hex::encode(Sha256::digest(p.bytes())));
        assert_eq!(serde_json::from_slice::<Value>(p.bytes()).unwrap(), p.value);
    }

    #[test]
    fn a_run_that_has_not_halted_is_escalated_with_resume_first() {
        let p = build(&input(None, false));
        assert_eq!(p.value["halted"], false);
        assert_eq!(p.value["halt"], Value::Null);
        assert_eq!(
            p.value["continue"][0],
            "loopexec run --resume r1 --workdir /w"
        );
        assert_eq!(p.value["decide"], decision(None));
    }

    #[test]
    fn comprehension_debt_is_continued_by_an_ack_then_a_resume() {
        let debt = HaltFacts {
            reason: HaltReason::ComprehensionDebtExceeded,
            iteration: 2,
            detail: "d".into(),
        };
        let p = build(&input(Some(debt), false));
        assert_eq!(
            p.value["continue"][0],
            "loopexec ack r1 --workdir /w --key REVIEWER_KEY"
        );
        assert_eq!(
            p.value["continue"][1],
            "loopexec run --resume r1 --workdir /w"
        );
    }

    #[test]
    fn an_unsealed_halt_is_continued_by_the_resume_that_seals_it() {
        let p = build(&input(Some(cap()), false));
        assert_eq!(
            p.value["continue"][0],
            "loopexec run --resume r1 --workdir /w"
        );
    }
}
