//! Hand acceptances (`loopexec ratchet <run> --accept N --key KEY`): the operator's signed
//! decision to advance the ratchet's frontier to an iteration the ratchet rejected. What is
//! signed, which iteration may be accepted, and how `verify` checks each `ratchet_accept` event
//! of a receipt offline.
//!
//! The operator key signs `"loopexec/ratchet-accept/v1" NUL run_id NUL N NUL tree_id NUL prev`,
//! where `prev` is the sha256 (hex) of the receipt line before the `ratchet_accept` event (the
//! head of the receipt the acceptance extends). Only the last judged iteration of a run that has
//! not halted can be accepted, and only if the ratchet rejected it and its snapshot was taken:
//! every iteration after an earlier one started from another tree, so accepting that one would
//! rewrite the trajectory the rules judged.

use super::chain;
use super::events::{Event, RatchetAcceptRecord, Recorded};
use super::history::History;
use super::keys::{self, OperatorKey};
use ed25519_dalek::VerifyingKey;

/// Domain separation for a hand acceptance.
const CONTEXT: &[u8] = b"loopexec/ratchet-accept/v1";

/// The exact bytes the operator key signs to accept iteration `iteration` (tree `tree_id`) of
/// run `run_id` on top of the receipt line whose hash is `prev`.
pub fn message(run_id: &str, iteration: u64, tree_id: &str, prev: &str) -> Vec<u8> {
    let mut msg = CONTEXT.to_vec();
    for part in [run_id, &iteration.to_string(), tree_id, prev] {
        msg.push(0);
        msg.extend_from_slice(part.as_bytes());
    }
    msg
}

/// The signed record of accepting `iteration` (tree `tree_id`) after the receipt line `prev`.
pub fn sign(
    operator: &OperatorKey,
    run_id: &str,
    iteration: u64,
    tree_id: &str,
    prev: &str,
) -> RatchetAcceptRecord {
    RatchetAcceptRecord {
        iteration,
        tree_id: tree_id.to_string(),
        operator_key: keys::fingerprint(&operator.verifying_key()),
        signature: super::dsse::b64(
            &operator
                .sign(&message(run_id, iteration, tree_id, prev))
                .to_bytes(),
        ),
    }
}

/// The tree id of iteration `n` when the operator may accept it by hand in `history`; else why
/// not, in one sentence.
pub fn acceptable(history: &History, n: u64) -> Result<String, String> {
    if let Some(halt) = &history.halt {
        return Err(format!(
            "the run already halted with {}; a halted run is final",
            halt.halt_reason
        ));
    }
    let judged: Vec<u64> = history
        .iterations
        .iter()
        .filter(|r| r.progress.is_some())
        .map(|r| r.iteration)
        .collect();
    let Some(record) = history
        .iterations
        .iter()
        .rev()
        .find(|r| r.iteration == n && r.progress.is_some())
    else {
        let listed = if judged.is_empty() {
            "none".to_string()
        } else {
            judged
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(format!(
            "iteration {n} is not a judged iteration of this run (judged: {listed})"
        ));
    };
    if history.ratchet_kept(record) {
        return Err(format!("iteration {n} is already accepted; only an iteration the ratchet rejected can be accepted by hand"));
    }
    if let Some(last) = judged.last().filter(|last| **last != n) {
        return Err(format!(
            "iteration {n} is not the last judged iteration ({last}): the iterations after it started from another tree, so only the last judged iteration can be accepted by hand"
        ));
    }
    record
        .snapshot
        .as_ref()
        .map(|s| s.tree_id.clone())
        .ok_or_else(|| {
            format!("iteration {n} has no snapshot: in place nothing of it was kept to resume from")
        })
}

/// Check every `ratchet_accept` event of a receipt (`records`, and its raw `lines`) against the
/// operator key: signed by it over the line before, naming an iteration that could be accepted
/// at that point with its tree. `None` when the receipt has none; else a detail or the first
/// failure.
pub fn verify_all(
    records: &[Recorded],
    lines: &[&[u8]],
    operator: &VerifyingKey,
) -> Option<Result<String, String>> {
    let mut checked = 0;
    for (i, record) in records.iter().enumerate() {
        let Event::RatchetAccept(accept) = &record.event else {
            continue;
        };
        checked += 1;
        let at = format!(
            "receipt line {} (ratchet_accept of iteration {})",
            i + 1,
            accept.iteration
        );
        let before = History::fold(&records[..i]);
        match acceptable(&before, accept.iteration) {
            Ok(tree) if tree == accept.tree_id => {}
            Ok(tree) => {
                return Some(Err(format!(
                    "{at}: names tree {}, the iteration's snapshot is {tree}",
                    accept.tree_id
                )))
            }
            Err(why) => return Some(Err(format!("{at}: {why}"))),
        }
        let prev = match i.checked_sub(1).and_then(|p| lines.get(p)) {
            Some(line) => chain::line_hash(line),
            None => return Some(Err(format!("{at}: no receipt line before it"))),
        };
        if accept.operator_key != keys::fingerprint(operator) {
            return Some(Err(format!(
                "{at}: names operator key {}, not {}",
                accept.operator_key,
                keys::fingerprint(operator)
            )));
        }
        let run_id = before.run_id().unwrap_or("");
        if !keys::verify_b64(
            operator,
            &message(run_id, accept.iteration, &accept.tree_id, &prev),
            &accept.signature,
        ) {
            return Some(Err(format!(
                "{at}: not signed by operator key {}",
                keys::fingerprint(operator)
            )));
        }
    }
    (checked > 0).then(|| {
        Ok(format!(
            "{checked} hand acceptance(s) signed by the operator key"
        ))
    })
}

/// [`verify_all`] over a receipt's raw bytes, its hash chain verified first: what `run --resume`
/// checks before it starts from a pending hand acceptance (the chain needs no key to extend, so
/// the signature is what makes an acceptance the operator's).
pub fn verify_receipt(bytes: &[u8], operator: &VerifyingKey) -> Option<Result<String, String>> {
    let verified = match chain::verify(bytes) {
        Ok(verified) => verified,
        Err(e) => return Some(Err(format!("the receipt does not verify: {e}"))),
    };
    let records = match Recorded::decode_all(&verified.events) {
        Ok(records) => records,
        Err(e) => return Some(Err(e.to_string())),
    };
    let lines: Vec<&[u8]> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    verify_all(&records, &lines, operator)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::{sample, ProgressRecord, SnapshotRecord};
    use crate::receipt::keys::generate_operator_key;

    fn operator(dir: &std::path::Path) -> OperatorKey {
        OperatorKey::load(&generate_operator_key(dir, false).unwrap().private_key).unwrap()
    }

    fn recorded(event: Event) -> Recorded {
        let Ok(serde_json::Value::Object(line)) = serde_json::to_value(&event) else {
            unreachable!()
        };
        Recorded { event, line }
    }

    /// A run whose iteration 1 was accepted and 2 rejected (tree "t2").
    fn rejected_at_2() -> Vec<Recorded> {
        let mut events = vec![recorded(sample::run_start("r"))];
        for (n, accepted) in [(1, true), (2, false)] {
            events.push(recorded(Event::IterationStart { iteration: n }));
            events.push(recorded(Event::Snapshot(SnapshotRecord {
                iteration: n,
                tree_id: format!("t{n}"),
                changed_paths: 1,
                protected_changes: vec![],
                duration_ms: None,
                awareness: vec![],
                left_out: None,
            })));
            events.push(recorded(sample::check_result(n, 1)));
            let progress: ProgressRecord =
                serde_json::from_value(serde_json::json!({"iteration": n, "failing_targets": 1, "accepted": accepted, "frontier": 1})).unwrap();
            events.push(recorded(Event::Progress(progress)));
        }
        events
    }

    fn lines_of(records: &[Recorded]) -> Vec<Vec<u8>> {
        records
            .iter()
            .map(|r| serde_json::to_vec(&r.line).unwrap())
            .collect()
    }

    fn verified(records: &[Recorded], operator: &VerifyingKey) -> Option<Result<String, String>> {
        let lines = lines_of(records);
        let lines: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        verify_all(records, &lines, operator)
    }

    fn accept(records: &mut Vec<Recorded>, key: &OperatorKey, n: u64, tree: &str) {
        let prev = chain::line_hash(&serde_json::to_vec(&records.last().unwrap().line).unwrap());
        records.push(recorded(Event::RatchetAccept(sign(
            key, "r", n, tree, &prev,
        ))));
    }

    #[test]
    fn only_the_last_judged_iteration_the_ratchet_rejected_is_acceptable() {
        let history = History::fold(&rejected_at_2());
        assert_eq!(acceptable(&history, 2), Ok("t2".to_string()));
        assert!(acceptable(&history, 1)
            .unwrap_err()
            .contains("already accepted"));
        assert!(acceptable(&history, 3)
            .unwrap_err()
            .contains("not a judged iteration of this run (judged: 1, 2)"));
    }

    #[test]
    fn an_acceptance_signed_by_the_operator_over_the_line_before_verifies() {
        let tmp = tempfile::tempdir().unwrap();
        let key = operator(tmp.path());
        let mut records = rejected_at_2();
        accept(&mut records, &key, 2, "t2");
        assert_eq!(
            verified(&records, &key.verifying_key()),
            Some(Ok("1 hand acceptance(s) signed by the operator key".into()))
        );
        assert!(History::fold(&records).accepted_by_hand(2));
    }

    #[test]
    fn an_acceptance_naming_another_tree_than_its_iterations_snapshot_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let key = operator(tmp.path());
        let mut records = rejected_at_2();
        accept(&mut records, &key, 2, "t2");
        let Some(Recorded {
            event: Event::RatchetAccept(a),
            ..
        }) = records.last_mut()
        else {
            unreachable!()
        };
        a.tree_id = "t1".into();
        let failure = verified(&records, &key.verifying_key())
            .unwrap()
            .unwrap_err();
        assert_eq!(failure, "receipt line 10 (ratchet_accept of iteration 2): names tree t1, the iteration's snapshot is t2");
    }

    #[test]
    fn an_acceptance_signed_by_another_key_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let (key, other) = (
            operator(&tmp.path().join("a")),
            operator(&tmp.path().join("b")),
        );
        let mut records = rejected_at_2();
        accept(&mut records, &other, 2, "t2");
        // The record claims the operator's key; the signature is another key's.
        let Some(Recorded {
            event: Event::RatchetAccept(a),
            ..
        }) = records.last_mut()
        else {
            unreachable!()
        };
        a.operator_key = keys::fingerprint(&key.verifying_key());
        let failure = verified(&records, &key.verifying_key())
            .unwrap()
            .unwrap_err();
        assert!(
            failure.ends_with(&format!(
                "not signed by operator key {}",
                keys::fingerprint(&key.verifying_key())
            )),
            "{failure}"
        );
    }

    #[test]
    fn an_acceptance_naming_another_operator_key_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let (key, other) = (
            operator(&tmp.path().join("a")),
            operator(&tmp.path().join("b")),
        );
        let mut records = rejected_at_2();
        accept(&mut records, &other, 2, "t2");
        let failure = verified(&records, &key.verifying_key())
            .unwrap()
            .unwrap_err();
        let (named, given) = (
            keys::fingerprint(&other.verifying_key()),
            keys::fingerprint(&key.verifying_key()),
        );
        assert_eq!(failure, format!("receipt line 10 (ratchet_accept of iteration 2): names operator key {named}, not {given}"));
    }

    #[test]
    fn a_receipt_without_acceptances_has_nothing_to_check() {
        let tmp = tempfile::tempdir().unwrap();
        let key = operator(tmp.path());
        assert_eq!(verified(&rejected_at_2(), &key.verifying_key()), None);
    }
}
