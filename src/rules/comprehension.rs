//! The comprehension gate's rule (docs/gates.md, "The comprehension gate"), pure: what each line
//! of the ack log proves, which ledger entries it clears for a run with these pinned reviewers,
//! and whether the unread ones are past the run's `every`.
//!
//! An ack line clears the digests it lists only when it is an `loopexec.ack/v1` line of this
//! workspace's ledger, not a copy of an earlier line, in its place in the hash chain (its `seq`
//! is its line number, its `prev` the sha256 of the line before), signed over exactly that by
//! the key it names, and that key is one of the run's pinned reviewers. Anything else clears
//! nothing, with the reason.

use crate::receipt::comprehension::{
    ack_message, line_hash, lines_of, AckLine, LedgerEntry, ACK_SCHEMA, GENESIS,
};
pub use crate::receipt::comprehension::{AckOutcome, LISTED};
use crate::receipt::keys;
use std::collections::{BTreeSet, HashMap};

/// One ack log line as judged on its own (signature and chain), before the run's reviewers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgedLine {
    /// 1-based line number in the ack log.
    pub line: u64,
    pub line_sha256: String,
    /// The parsed ack, when it parses.
    pub ack: Option<AckLine>,
    /// `Err(why)` when it proves nothing.
    pub valid: Result<(), String>,
}

/// Judge every line of an ack log (`bytes`) against this workspace's ledger id.
pub fn judge_log(bytes: &[u8], ledger_id: &str) -> Vec<JudgedLine> {
    let lines = lines_of(bytes);
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut out = Vec::with_capacity(lines.len());
    for (i, raw) in lines.iter().enumerate() {
        let line = i as u64 + 1;
        let prev = if i == 0 {
            GENESIS.to_string()
        } else {
            line_hash(lines[i - 1])
        };
        let ack: Option<AckLine> = serde_json::from_slice(raw).ok();
        let valid = match &ack {
            None => Err("not an ack line (no loopexec.ack/v1 object)".to_string()),
            Some(ack) => judge_one(ack, line, &prev, ledger_id, &mut seen),
        };
        out.push(JudgedLine {
            line,
            line_sha256: line_hash(raw),
            ack,
            valid,
        });
    }
    out
}

fn judge_one(
    ack: &AckLine,
    line: u64,
    prev: &str,
    ledger_id: &str,
    seen: &mut HashMap<String, u64>,
) -> Result<(), String> {
    if ack.schema != ACK_SCHEMA {
        return Err(format!(
            "schema {:?} is not {ACK_SCHEMA}",
            crate::inert::inert(&ack.schema)
        ));
    }
    if ack.ledger_id != ledger_id {
        return Err(format!(
            "replayed: made for another workspace's ledger ({}), not this one ({ledger_id})",
            crate::inert::inert(&ack.ledger_id)
        ));
    }
    let Some(signature) = ack.signature.as_deref().filter(|s| !s.is_empty()) else {
        return Err("unsigned".into());
    };
    if let Some(first) = seen.get(signature) {
        return Err(format!("replayed: a copy of ack line {first}"));
    }
    seen.insert(signature.to_string(), line);
    if ack.seq != line || ack.prev != prev {
        return Err(format!(
            "chain broken: seq {} and prev {} do not follow line {}",
            ack.seq,
            crate::inert::inert(&ack.prev),
            line - 1
        ));
    }
    let Some(key) = keys::public_key_from_hex(&ack.reviewer) else {
        return Err(format!(
            "names no Ed25519 public key ({:?})",
            crate::inert::inert(&ack.reviewer)
        ));
    };
    if !keys::verify_b64(
        &key,
        &ack_message(
            &ack.ledger_id,
            ack.seq,
            &ack.prev,
            &ack.run_id,
            &ack.digests,
        ),
        signature,
    ) {
        return Err(format!(
            "bad signature: not signed by reviewer key {}",
            ack.reviewer
        ));
    }
    Ok(())
}

/// The gate's view of the workspace for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateView {
    /// The digests not cleared by a valid ack, in ledger order.
    pub unread: Vec<String>,
    pub acks: Vec<AckOutcome>,
    /// Whether the unread count exceeds `every`.
    pub over: bool,
}

/// The unread entries of `entries` after the judged ack lines, for a run whose pinned reviewers
/// are `reviewers` (hex public keys) and whose limit is `every`.
pub fn evaluate(
    entries: &[LedgerEntry],
    judged: &[JudgedLine],
    reviewers: &[String],
    every: u64,
) -> GateView {
    let known: BTreeSet<String> = entries.iter().map(|e| e.digest.clone()).collect();
    let pinned: BTreeSet<String> = reviewers.iter().map(|r| r.to_ascii_lowercase()).collect();
    let mut cleared: BTreeSet<String> = BTreeSet::new();
    let mut acks = Vec::with_capacity(judged.len());
    for j in judged {
        let reviewer = j.ack.as_ref().map(|a| a.reviewer.clone());
        let rejected = match (&j.valid, &j.ack) {
            (Err(why), _) => Some(why.clone()),
            (Ok(()), Some(ack)) if !pinned.contains(&ack.reviewer.to_ascii_lowercase()) => {
                Some(format!(
                    "unknown key: reviewer {} is not one of the run's pinned reviewers",
                    ack.reviewer
                ))
            }
            _ => None,
        };
        let mut now = Vec::new();
        if let (None, Some(ack)) = (&rejected, &j.ack) {
            for d in &ack.digests {
                if known.contains(d) && cleared.insert(d.clone()) {
                    now.push(d.clone());
                }
            }
        }
        acks.push(AckOutcome {
            line: j.line,
            line_sha256: j.line_sha256.clone(),
            reviewer,
            cleared: now,
            rejected,
        });
    }
    let mut listed = BTreeSet::new();
    let unread: Vec<String> = entries
        .iter()
        .filter(|e| !cleared.contains(&e.digest) && listed.insert(e.digest.clone()))
        .map(|e| e.digest.clone())
        .collect();
    let over = unread.len() as u64 > every;
    GateView { unread, acks, over }
}

/// `verify --acks`: the ack log holds as written (every line an ack of this ledger in its place
/// in the chain, signed by the key it names, no copy of an earlier one) and every ack a
/// `comprehension` event of the receipt says cleared debt is in it, byte-identical by hash.
/// `events` are (receipt line number, record). `Ok`: what was checked; `Err`: every failure.
pub fn audit(
    events: &[(usize, &crate::receipt::events::ComprehensionRecord)],
    bytes: &[u8],
    ledger_id: &str,
) -> Result<String, Vec<String>> {
    let judged = judge_log(bytes, ledger_id);
    let mut failures: Vec<String> = judged
        .iter()
        .filter_map(|j| {
            j.valid
                .as_ref()
                .err()
                .map(|why| format!("ack line {}: {why}", j.line))
        })
        .collect();
    let mut cited = 0;
    for (at, record) in events {
        if record.ledger_id != ledger_id {
            failures.push(format!(
                "receipt line {at}: names ledger {}, this workspace's is {ledger_id}",
                crate::inert::inert(&record.ledger_id)
            ));
        }
        for ack in record.acks.iter().filter(|a| !a.cleared.is_empty()) {
            cited += 1;
            let held = judged
                .iter()
                .any(|j| j.line == ack.line && j.line_sha256 == ack.line_sha256 && j.valid.is_ok());
            if !held {
                failures.push(format!("receipt line {at}: ack line {} (sha256 {}) cleared debt, and the log does not hold it as recorded", ack.line, crate::inert::inert(&ack.line_sha256)));
            }
        }
    }
    match failures.is_empty() {
        true => Ok(format!("{} ack line(s) chained and signed; {cited} ack(s) the receipt says cleared debt are in the log", judged.len())),
        false => Err(failures),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::comprehension::{diff_digest, sign_ack};
    use crate::receipt::keys::{generate_operator_key, OperatorKey};

    fn key(dir: &std::path::Path) -> OperatorKey {
        OperatorKey::load(&generate_operator_key(dir, false).unwrap().private_key).unwrap()
    }

    fn hex_of(key: &OperatorKey) -> String {
        hex::encode(key.verifying_key().as_bytes())
    }

    fn entries(n: u64) -> Vec<LedgerEntry> {
        (1..=n)
            .map(|i| {
                let (from, to) = (format!("t{}", i - 1), format!("t{i}"));
                LedgerEntry {
                    run_id: "r".into(),
                    iteration: i,
                    digest: diff_digest(&from, &to),
                    from_tree: from,
                    to_tree: to,
                }
            })
            .collect()
    }

    /// An ack log of `acks` signed in turn by `key`, each over the digests given.
    fn log(key: &OperatorKey, ledger: &str, acks: &[Vec<String>]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (i, digests) in acks.iter().enumerate() {
            let prev = lines_of(&bytes)
                .last()
                .map_or(GENESIS.to_string(), |l| line_hash(l));
            let line = sign_ack(key, ledger, i, &prev, "r", digests.clone());
            bytes.extend(serde_json::to_vec(&line).unwrap());
            bytes.push(b'\n');
        }
        bytes
    }

    fn record(ledger: &str, acks: Vec<AckOutcome>) -> crate::receipt::events::ComprehensionRecord {
        crate::receipt::events::ComprehensionRecord {
            outcome: "cleared".into(),
            iteration: 3,
            every: 1,
            ledger_id: ledger.into(),
            unread_count: 0,
            unread: vec![],
            acks,
            acks_sha256: String::new(),
        }
    }

    #[test]
    fn an_honest_log_holding_the_acks_the_receipt_cites_audits() {
        let tmp = tempfile::tempdir().unwrap();
        let k = key(tmp.path());
        let e = entries(1);
        let bytes = log(&k, "L", &[vec![e[0].digest.clone()]]);
        let view = evaluate(&e, &judge_log(&bytes, "L"), &[hex_of(&k)], 0);
        let r = record("L", view.acks);
        assert_eq!(audit(&[(9, &r)], &bytes, "L"), Ok("1 ack line(s) chained and signed; 1 ack(s) the receipt says cleared debt are in the log".into()));
    }

    #[test]
    fn a_log_whose_cited_ack_was_rewritten_fails_the_audit() {
        let tmp = tempfile::tempdir().unwrap();
        let k = key(tmp.path());
        let e = entries(1);
        let bytes = log(&k, "L", &[vec![e[0].digest.clone()]]);
        let view = evaluate(&e, &judge_log(&bytes, "L"), &[hex_of(&k)], 0);
        let r = record("L", view.acks.clone());
        // `signed_at` is not signed: the rewritten line still verifies, and is not the line that cleared.
        let mut line: AckLine = serde_json::from_slice(lines_of(&bytes)[0]).unwrap();
        line.signed_at = "2000-01-01T00:00:00Z".into();
        let other = serde_json::to_vec(&line).unwrap();
        let failures = audit(&[(9, &r)], &other, "L").unwrap_err();
        assert_eq!(failures, vec![format!("receipt line 9: ack line 1 (sha256 {}) cleared debt, and the log does not hold it as recorded", view.acks[0].line_sha256)]);
    }

    #[test]
    fn the_gate_is_over_only_when_unread_exceeds_every() {
        let view = evaluate(&entries(2), &[], &[], 2);
        assert_eq!((view.unread.len(), view.over), (2, false));
        let view = evaluate(&entries(3), &[], &[], 2);
        assert_eq!((view.unread.len(), view.over), (3, true));
    }

    #[test]
    fn a_valid_ack_by_a_pinned_reviewer_clears_what_it_lists() {
        let tmp = tempfile::tempdir().unwrap();
        let k = key(tmp.path());
        let e = entries(3);
        let bytes = log(&k, "L", &[vec![e[0].digest.clone(), e[1].digest.clone()]]);
        let view = evaluate(&e, &judge_log(&bytes, "L"), &[hex_of(&k)], 0);
        assert_eq!(view.unread, vec![e[2].digest.clone()]);
        assert_eq!(
            view.acks[0].cleared,
            vec![e[0].digest.clone(), e[1].digest.clone()]
        );
        assert_eq!(view.acks[0].rejected, None);
    }

    #[test]
    fn an_ack_by_a_key_that_is_not_pinned_clears_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let (k, other) = (key(&tmp.path().join("a")), key(&tmp.path().join("b")));
        let e = entries(1);
        let bytes = log(&k, "L", &[vec![e[0].digest.clone()]]);
        let view = evaluate(&e, &judge_log(&bytes, "L"), &[hex_of(&other)], 0);
        assert_eq!(view.unread.len(), 1);
        assert_eq!(
            view.acks[0].rejected,
            Some(format!(
                "unknown key: reviewer {} is not one of the run's pinned reviewers",
                hex_of(&k)
            ))
        );
    }

    #[test]
    fn an_ack_whose_digests_were_changed_after_signing_has_a_bad_signature() {
        let tmp = tempfile::tempdir().unwrap();
        let k = key(tmp.path());
        let e = entries(2);
        let bytes = log(&k, "L", &[vec![e[0].digest.clone()]]);
        let text = String::from_utf8(bytes)
            .unwrap()
            .replace(&e[0].digest, &e[1].digest);
        let judged = judge_log(text.as_bytes(), "L");
        assert_eq!(
            judged[0].valid,
            Err(format!(
                "bad signature: not signed by reviewer key {}",
                hex_of(&k)
            ))
        );
    }

    #[test]
    fn an_unsigned_ack_clears_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let k = key(tmp.path());
        let mut line = sign_ack(&k, "L", 0, GENESIS, "r", vec!["d".into()]);
        line.signature = None;
        let judged = judge_log(&serde_json::to_vec(&line).unwrap(), "L");
        assert_eq!(judged[0].valid, Err("unsigned".into()));
    }

    #[test]
    fn a_copied_line_is_a_replay_of_the_first() {
        let tmp = tempfile::tempdir().unwrap();
        let k = key(tmp.path());
        let mut bytes = log(&k, "L", &[vec!["d".into()]]);
        let copy = bytes.clone();
        bytes.extend(copy);
        let judged = judge_log(&bytes, "L");
        assert_eq!(
            (judged[0].valid.clone(), judged[1].valid.clone()),
            (Ok(()), Err("replayed: a copy of ack line 1".into()))
        );
    }

    #[test]
    fn an_ack_from_another_workspaces_ledger_is_a_replay() {
        let tmp = tempfile::tempdir().unwrap();
        let k = key(tmp.path());
        let judged = judge_log(&log(&k, "OTHER", &[vec!["d".into()]]), "L");
        assert_eq!(
            judged[0].valid,
            Err("replayed: made for another workspace's ledger (OTHER), not this one (L)".into())
        );
    }

    #[test]
    fn a_signed_line_out_of_its_place_in_the_chain_is_chain_broken() {
        let tmp = tempfile::tempdir().unwrap();
        let k = key(tmp.path());
        let mut bytes = b"{}\n".to_vec();
        bytes.extend(log(&k, "L", &[vec!["d".into()]]));
        let judged = judge_log(&bytes, "L");
        assert_eq!(
            judged[0].valid,
            Err("not an ack line (no loopexec.ack/v1 object)".into())
        );
        assert_eq!(
            judged[1].valid,
            Err(format!(
                "chain broken: seq 1 and prev {GENESIS} do not follow line 1"
            ))
        );
    }
}
