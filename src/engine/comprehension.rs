//! The comprehension gate in the loop (docs/gates.md, "The comprehension gate"): its settings as
//! given (`--comprehension-every`, `--reviewer-pubkey`, `[comprehension]` in loop.toml),
//! validated into the pins `run_start` records; the ledger entry of each accepted iteration; and
//! the gate before each agent step, decided by `crate::rules::comprehension` over the
//! workspace's ledger and ack log (`crate::receipt::comprehension`).

use super::lifecycle::ActiveRun;
use super::sink::LoopEvent;
use super::{LoopEnd, RunOutcome};
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::receipt::comprehension::{diff_digest, is_public_key, Files, LedgerEntry};
use crate::receipt::events::{ComprehensionRecord, Event};
use crate::receipt::state::RunPhase;
use crate::rules::comprehension::{evaluate, judge_log, LISTED};
use serde::{Deserialize, Serialize};

/// The gate as pinned in `run_start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComprehensionPins {
    /// The run stops when more than `every` accepted diffs are unread.
    pub every: u64,
    /// The reviewers whose acks clear debt: raw Ed25519 public keys, hex.
    pub reviewers: Vec<String>,
}

/// The gate as a flag or loop.toml gives it, before validation.
#[derive(Debug, Clone, Default)]
pub struct ComprehensionInput {
    pub every: Option<String>,
    pub reviewers: Vec<String>,
}

impl ComprehensionInput {
    /// `self` (flags) over `file` (loop.toml): `every` if given, the flags' reviewers if any.
    pub fn over(self, file: ComprehensionInput) -> ComprehensionInput {
        ComprehensionInput {
            every: self.every.or(file.every),
            reviewers: if self.reviewers.is_empty() {
                file.reviewers
            } else {
                self.reviewers
            },
        }
    }

    /// Validate into the pins: `every` a whole number of at least 1, every reviewer a hex
    /// Ed25519 public key, at least one of them, and a detached workspace (the ledger records
    /// accepted trees; in place there are none).
    pub fn resolve(self, detached: bool) -> Result<Option<ComprehensionPins>, Failure> {
        let Some(raw) = self.every else {
            if !self.reviewers.is_empty() {
                return Err(Failure::usage("--reviewer-pubkey needs --comprehension-every N (or `every` in [comprehension])"));
            }
            return Ok(None);
        };
        let every = raw.trim().parse::<u64>().map_err(|_| {
            Failure::usage(format!(
                "--comprehension-every: {:?} is not a whole number of diffs",
                crate::inert::inert(&raw)
            ))
        })?;
        if every == 0 {
            return Err(Failure::usage("--comprehension-every must be at least 1 (0 would stop before every agent step after the first accepted one)"));
        }
        let mut reviewers = Vec::new();
        for r in self.reviewers {
            if !is_public_key(&r) {
                return Err(Failure::usage(format!("--reviewer-pubkey: {:?} is not an Ed25519 public key (64 hex digits, as `loopexec keygen --reviewer` prints)", crate::inert::inert(&r))));
            }
            reviewers.push(r.to_ascii_lowercase());
        }
        if reviewers.is_empty() {
            return Err(Failure::usage("--comprehension-every needs a reviewer whose acks clear the debt")
                .with_hint("add --reviewer-pubkey HEX (from `loopexec keygen --reviewer`) or `reviewers = [...]` in [comprehension]"));
        }
        if !detached {
            return Err(Failure::usage("--comprehension-every needs a detached workspace (the ledger records accepted trees; in place there are none)"));
        }
        Ok(Some(ComprehensionPins { every, reviewers }))
    }
}

/// `[comprehension]` of loop.toml.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComprehensionSection {
    every: Option<toml::Value>,
    #[serde(default)]
    reviewers: Vec<String>,
}

impl ComprehensionSection {
    pub fn input(self) -> ComprehensionInput {
        let every = self.every.map(|v| match v {
            toml::Value::String(s) => s,
            other => other.to_string(),
        });
        ComprehensionInput {
            every,
            reviewers: self.reviewers,
        }
    }
}

/// Read the workspace's ledger and ack log, if any, before a gated run starts or resumes: bad
/// state there is refused before anything of the run is written.
pub(super) fn check_state(
    statedir: &crate::receipt::store::StateDir,
    pins: Option<&ComprehensionPins>,
) -> CmdResult<()> {
    if pins.is_none() {
        return Ok(());
    }
    if let Some(files) = Files::open(statedir.root())? {
        files.ledger()?;
        files.acks()?;
    }
    Ok(())
}

impl ActiveRun<'_> {
    fn comprehension_files(&self) -> CmdResult<Files> {
        Files::open_or_create(self.statedir.root())
    }

    /// Add iteration `n`'s accepted tree to the workspace's ledger (runs with the gate only):
    /// from the tree this run's previous entry reached (t0 before any) to `to_tree`.
    pub(super) fn record_accepted(&mut self, n: u64, to_tree: &str) -> CmdResult<()> {
        if self.cfg.comprehension.is_none() {
            return Ok(());
        }
        // The ledger names an accepted step only once the receipt holds what accepted it.
        self.commit()?;
        let Some(ws) = &self.workspace else {
            return Ok(());
        };
        let t0 = ws.t0_tree();
        let files = self.comprehension_files()?;
        let ledger = files.ledger_or_create()?;
        let run_id = self.state.run_id.clone();
        if ledger
            .entries
            .iter()
            .any(|e| e.run_id == run_id && e.iteration == n)
        {
            return Ok(());
        }
        let from = ledger
            .entries
            .iter()
            .rev()
            .find(|e| e.run_id == run_id)
            .map_or(t0, |e| e.to_tree.clone());
        if from == to_tree {
            // An accepted step that changed nothing is no diff to read.
            return Ok(());
        }
        // The tree goes to the repository's object store first, so that the entry's `git diff` works.
        ws.store_accepted(&self.run).map_err(|e| {
            Failure::workspace(format!(
                "storing the accepted tree of iteration {n} for review: {e}"
            ))
        })?;
        files.append_entry(&LedgerEntry {
            run_id,
            iteration: n,
            digest: diff_digest(&from, to_tree),
            from_tree: from,
            to_tree: to_tree.to_string(),
        })
    }

    /// The gate before the agent step of iteration `n`: past the limit, record the stop and end
    /// this call resumable (`Some`); else, after an earlier stop, record what cleared it.
    pub(super) fn comprehension_gate(&mut self, n: u64) -> CmdResult<Option<RunOutcome>> {
        let Some(pins) = self.cfg.comprehension.clone() else {
            return Ok(None);
        };
        self.commit()?;
        let files = self.comprehension_files()?;
        let ledger = files.ledger_or_create()?;
        let bytes = files.acks()?;
        let judged = judge_log(&bytes, &ledger.ledger_id);
        let view = evaluate(&ledger.entries, &judged, &pins.reviewers, pins.every);
        if !view.over && !self.history.comprehension_stopped {
            return Ok(None);
        }
        let outcome = if view.over { "stopped" } else { "cleared" };
        let skip = view.acks.len().saturating_sub(LISTED);
        let record = ComprehensionRecord {
            outcome: outcome.into(),
            iteration: n,
            every: pins.every,
            ledger_id: ledger.ledger_id.clone(),
            unread_count: view.unread.len() as u64,
            unread: view.unread.iter().take(LISTED).cloned().collect(),
            acks: view.acks.iter().skip(skip).cloned().collect(),
            acks_sha256: crate::receipt::comprehension::line_hash(&bytes),
        };
        self.append(Event::Comprehension(record))?;
        if !view.over {
            return Ok(None);
        }
        let rejected: Vec<String> = view
            .acks
            .iter()
            .filter_map(|a| {
                a.rejected
                    .as_ref()
                    .map(|why| format!("ack line {}: {why}", a.line))
            })
            .collect();
        let mut detail = format!(
            "{} accepted diffs unread, more than --comprehension-every {}: review them and `loopexec ack {} --key REVIEWER_KEY`, then resume",
            view.unread.len(),
            pins.every,
            self.state.run_id
        );
        if !rejected.is_empty() {
            detail.push_str(&format!(" (cleared nothing: {})", rejected.join("; ")));
        }
        self.sink
            .event(&LoopEvent::HaltingBeforeIterations { detail: &detail });
        self.revoke_held("comprehension")?;
        let reason = HaltReason::ComprehensionDebtExceeded;
        self.state.state = RunPhase::Gated;
        self.state.halt_reason = Some(reason.as_str().into());
        self.state.exit_code = Some(reason.class().code());
        self.save_state(true)?;
        Ok(Some(self.outcome(LoopEnd::Gated { reason, detail })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

    fn input(every: &str, reviewers: &[&str]) -> ComprehensionInput {
        ComprehensionInput {
            every: Some(every.into()),
            reviewers: reviewers.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_whole_positive_limit_with_a_reviewer_in_a_detached_workspace_is_pinned() {
        assert_eq!(
            input("2", &[KEY]).resolve(true).unwrap(),
            Some(ComprehensionPins {
                every: 2,
                reviewers: vec![KEY.into()]
            })
        );
    }

    #[test]
    fn zero_negative_and_non_numeric_limits_are_refused() {
        for bad in ["0", "-1", "two", "1.5"] {
            assert_eq!(
                input(bad, &[KEY]).resolve(true).unwrap_err().code,
                crate::error::FailureCode::Usage,
                "{bad}"
            );
        }
    }

    #[test]
    fn a_malformed_reviewer_key_is_refused() {
        let err = input("1", &["abc"]).resolve(true).unwrap_err();
        assert!(
            err.message
                .starts_with("--reviewer-pubkey: \"abc\" is not an Ed25519 public key"),
            "{}",
            err.message
        );
    }

    #[test]
    fn the_gate_in_place_is_refused() {
        let err = input("1", &[KEY]).resolve(false).unwrap_err();
        assert!(
            err.message
                .starts_with("--comprehension-every needs a detached workspace"),
            "{}",
            err.message
        );
    }
}
