//! Offline verification of a sealed run: needs only the run directory and the operator's public
//! key. No agent, no check, no network.
//!
//! Checks, in order: the receipt's hash chain; after the halt, nothing but the seal's completion
//! by a resume (`seal_completion`, said when anything follows it); a halted run is sealed
//! (`sealed`, said when it is not); every `run_key` event is endorsed by the operator key
//! over the line before it; the envelope is a DSSE envelope of an in-toto Statement; it carries a
//! valid signature by the last endorsed run key; the receipt subject's digest is the receipt's;
//! the predicate equals the one recomputed from the receipt; every other signature is a valid
//! operator attestation by the given key (a signature by any other key fails verification); with
//! a judge, its records read again from the run's artifacts (`super::judge`).
//! With a repository holding the run's trees (`verify --repo`), last, the tree guards re-run on
//! them ([`super::tree_guards`]).

use crate::receipt::chain;
use crate::receipt::dsse::{Envelope, IN_TOTO_PAYLOAD_TYPE};
use crate::receipt::events::{Event, Recorded};
use crate::receipt::history::History;
use crate::receipt::keys;
use crate::receipt::seal::{
    operator_keyid, run_keyid, AfterHalt, ENVELOPE_FILE, ENVELOPE_MAX_BYTES, RECEIPT_FILE,
};
use crate::receipt::statement::{self, PREDICATE_TYPE, STATEMENT_TYPE};
use crate::safefs::SafeDir;
use ed25519_dalek::VerifyingKey;
use serde::Serialize;
use serde_json::Value;

/// One named verification step and its result.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// The result of verifying a run.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Verification {
    pub checks: Vec<Check>,
    pub run_id: Option<String>,
    pub halt_reason: Option<String>,
    pub operator_key: Option<String>,
    pub attested: bool,
    /// A `doctor = true` run's pinned doctor receipt, as found (`super::probe::verify_pinned`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned_probe: Option<super::probe::PinnedProbe>,
}

impl Verification {
    pub fn ok(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.ok)
    }

    fn pass(&mut self, name: &'static str, detail: impl Into<String>) {
        self.checks.push(Check {
            name,
            ok: true,
            detail: detail.into(),
        });
    }

    fn fail(&mut self, name: &'static str, detail: impl Into<String>) -> &mut Self {
        self.checks.push(Check {
            name,
            ok: false,
            detail: detail.into(),
        });
        self
    }

    /// A passed step, for the other sealed receipts' verifiers (`super::probe`).
    pub(crate) fn pass_step(&mut self, name: &'static str, detail: impl Into<String>) {
        self.pass(name, detail);
    }

    pub(crate) fn fail_step(&mut self, name: &'static str, detail: impl Into<String>) {
        self.fail(name, detail);
    }
}

/// Check that every `run_key` event of a receipt (`records`, its raw `lines`) is endorsed by
/// `operator` over the line before it: the number of endorsements and the last run key, or each
/// failure (one per line; "no run_key event" when there is none).
pub fn endorsements(
    records: &[Recorded],
    lines: &[&[u8]],
    run_id: &str,
    operator: &VerifyingKey,
) -> Result<(usize, VerifyingKey), Vec<String>> {
    let mut failures = Vec::new();
    let mut last_run_key = None;
    let mut count = 0;
    for (i, record) in records.iter().enumerate() {
        let Event::RunKey(endorsed) = &record.event else {
            continue;
        };
        count += 1;
        let prev = match i.checked_sub(1).and_then(|p| lines.get(p)) {
            Some(line) => chain::line_hash(line),
            None => chain::GENESIS.to_string(),
        };
        match keys::public_key_from_hex(&endorsed.public_key) {
            Some(key)
                if keys::verify_b64(
                    operator,
                    &keys::endorsement_message(run_id, &key, &prev),
                    &endorsed.endorsement,
                ) =>
            {
                last_run_key = Some(key);
            }
            Some(_) => failures.push(format!(
                "receipt line {}: run key not endorsed by operator key {}",
                i + 1,
                keys::fingerprint(operator)
            )),
            None => failures.push(format!("receipt line {}: malformed run public key", i + 1)),
        }
    }
    match last_run_key {
        _ if count == 0 => Err(vec!["receipt has no run_key event".to_string()]),
        Some(key) if failures.is_empty() => Ok((count, key)),
        _ => Err(failures),
    }
}

/// Verify the sealed run in `run_dir` against the operator's public key.
pub fn verify_run(run_dir: &SafeDir, operator: &VerifyingKey) -> Verification {
    verify_checks(run_dir, operator).0
}

/// [`verify_run`], with the receipt's history when its chain verified (for a caller that reports
/// what the run recorded, such as its metered cost, without reading the receipt again).
pub fn verify_run_with_history(
    run_dir: &SafeDir,
    operator: &VerifyingKey,
) -> (Verification, Option<History>) {
    let (v, _, history) = verify_checks(run_dir, operator);
    (v, history)
}

/// [`verify_run`], then, when every check before could run, the tree guards re-run on the trees
/// `repo` holds (`tree_guards`). `Err` only when the repository cannot be used.
pub fn verify_run_with_repo(
    run_dir: &SafeDir,
    operator: &VerifyingKey,
    repo: &super::tree_guards::Repo,
) -> Result<Verification, super::tree_guards::RepoError> {
    let (mut v, events, _) = verify_checks(run_dir, operator);
    if let Some(events) = events {
        super::tree_guards::check(&events, repo, &mut v)?;
    }
    Ok(v)
}

/// The checks, the receipt's events when every check could run to the end, and its history
/// when its chain verified.
fn verify_checks(
    run_dir: &SafeDir,
    operator: &VerifyingKey,
) -> (Verification, Option<Vec<Event>>, Option<History>) {
    let mut v = Verification {
        operator_key: Some(keys::fingerprint(operator)),
        ..Default::default()
    };

    // 1. The hash chain.
    let receipt = match run_dir.read(RECEIPT_FILE, chain::MAX_RECEIPT_BYTES) {
        Ok(bytes) => bytes,
        Err(e) => {
            v.fail("receipt_chain", e.to_string());
            return (v, None, None);
        }
    };
    let verified = match chain::verify(&receipt) {
        Ok(c) => c,
        Err(e) => {
            v.fail("receipt_chain", e.to_string());
            return (v, None, None);
        }
    };
    let records = match Recorded::decode_all(&verified.events) {
        Ok(records) => records,
        Err(e) => {
            v.fail("receipt_chain", e.to_string());
            return (v, None, None);
        }
    };
    let history = History::fold(&records);
    v.pass(
        "receipt_chain",
        format!("{} events, head {}", verified.events.len(), verified.head),
    );
    v.run_id = history.run_id().map(str::to_string);
    v.halt_reason = history
        .halt
        .as_ref()
        .map(|h| h.halt_reason.as_str().to_string());

    // Each `externalised` event is the bound's own record of the event it follows: the
    // artifact present restores an event whose bound gives back exactly the recorded line
    // (`bounded::resolve`); an absent one is said, not failed. Checked before the envelope, so
    // it is said whether or not the seal holds.
    // The restored events are what the tree guards are compared with.
    let mut restored = records.clone();
    if records
        .iter()
        .any(|r| matches!(r.event, Event::Externalised(_)))
    {
        let found = crate::receipt::bounded::resolve(&mut restored, run_dir);
        if found.forged.is_empty() {
            let mut detail =
                "every externalised event is the bound's record of the event it follows"
                    .to_string();
            if !found.unrestorable.is_empty() {
                detail.push_str(&format!(
                    "; {} trimmed event(s) not checked against an absent artifact",
                    found.unrestorable.len()
                ));
            }
            v.pass("externalised_events", detail);
        } else {
            v.fail("externalised_events", found.forged.join("; "));
        }
    }
    // What follows the halt: nothing, or only the seal's completion by the resume that finished
    // it after its supervisor died (`seal_resumed`, then its run key; `receipt::seal::after_halt`).
    // Said only when something follows the halt.
    match crate::receipt::seal::after_halt(&records) {
        Ok(AfterHalt::NotHalted | AfterHalt::Nothing) => {}
        Ok(AfterHalt::Completions { resumes, keyed: true }) => v.pass(
            "seal_completion",
            format!("the halt is followed only by the seal's completion ({resumes} seal_resumed, each run key minted and endorsed after the halt by the resume that finished the seal)"),
        ),
        Ok(AfterHalt::Completions { keyed: false, .. }) => {
            v.fail("seal_completion", "the last seal_resumed after the halt has no run_key after it");
        }
        Err(why) => {
            v.fail("seal_completion", why);
        }
    }
    // A halt recorded but never sealed: its supervisor died between the halt line and the seal.
    if let (Some(halt), false) = (&history.halt, run_dir.exists(ENVELOPE_FILE)) {
        v.fail(
            "sealed",
            format!(
                "the run halted ({}) but was never sealed: there is no {ENVELOPE_FILE} (the supervisor died between the halt and the seal); `loopexec run --resume {}` finishes the seal",
                halt.halt_reason,
                crate::inert::inert(v.run_id.as_deref().unwrap_or("RUN"))
            ),
        );
        return (v, None, Some(history));
    }
    let run_id = v.run_id.clone().unwrap_or_default();
    let Some(stmt) = verify_envelope(
        run_dir,
        operator,
        &receipt,
        &verified,
        &records,
        &run_id,
        PREDICATE_TYPE,
        &mut v,
    ) else {
        return (v, None, Some(history));
    };
    match statement::predicate(&history) {
        Ok(expected) if Some(&expected) == stmt.get("predicate") => v.pass(
            "predicate_matches_log",
            "predicate recomputed from the receipt matches",
        ),
        Ok(_) => {
            v.fail(
                "predicate_matches_log",
                "the envelope's predicate differs from the one recomputed from the receipt",
            );
        }
        Err(e) => {
            v.fail("predicate_matches_log", e.to_string());
        }
    }
    // The halt replayed: it must follow from the observations the receipt recorded
    // (`rules::derive`), with the lists the receipt moved to artifacts read back whole where
    // they match their digests; what the rule cannot replay is said by name, never passed silently.
    let history = History::fold(&restored);
    match crate::rules::derive::derive_halt(&history) {
        Ok(Some(derivation)) => v.pass("halt_derivation", derivation.detail()),
        Ok(None) => {
            v.fail("halt_derivation", "the receipt records no halt");
        }
        Err(mismatch) => {
            v.fail("halt_derivation", mismatch.detail);
        }
    }
    // A task_list run: its task runs verify and are the ones its checkpoints name.
    super::task_runs::check(run_dir, &history, operator, &mut v);
    // The zones' enforcement evidence, read back from inside each zone at its start: every one
    // must show the protections a native zone has (receipts that record any).
    let enforcement = super::enforcement::summarise(records.iter().map(|r| &r.event));
    match (enforcement.zone_starts, enforcement.all_hold) {
        (0, _) => {}
        (_, true) => v.pass("enforcement", enforcement.line()),
        (_, false) => {
            v.fail("enforcement", enforcement.line());
        }
    }
    // The zone self-test (runs with `self_test = true`): its verdict follows from its operations.
    if let Some(record) = &history.self_test {
        let halt = history.halt.as_ref().map(|h| h.halt_reason);
        match super::enforcement::self_test_consistent(record, halt) {
            Ok(detail) => v.pass("self_test", detail),
            Err(detail) => {
                v.fail("self_test", detail);
            }
        }
    }
    // 5. The judge's records, read again from the run's artifacts (runs with a judge only).
    match super::judge::verify_records(&history, run_dir) {
        Some(Ok(detail)) => v.pass("judge_records", detail),
        Some(Err(detail)) => {
            v.fail("judge_records", detail);
        }
        None => {}
    }

    // 5b. The run's escalations (`escalations.jsonl`, beside the receipt, never in it): the
    // log's hash chain and that each line names this run (runs escalated only).
    match crate::escalation::log::read(run_dir) {
        Ok(log) if log.records.is_empty() && log.broken_at.is_none() => {}
        Ok(log) => {
            match (
                log.broken_at,
                log.records.iter().find(|r| r.run_id != run_id),
            ) {
                (Some(line), _) => {
                    v.fail(
                        "escalations",
                        format!(
                            "{}: line {line} breaks its hash chain (edited, removed or reordered)",
                            crate::escalation::log::FILE
                        ),
                    );
                }
                (None, Some(other)) => {
                    v.fail(
                        "escalations",
                        format!(
                            "{}: line {} names another run ({})",
                            crate::escalation::log::FILE,
                            other.seq,
                            crate::inert::inert(&other.run_id)
                        ),
                    );
                }
                (None, None) => {
                    let delivered = log.records.iter().filter(|r| r.delivered).count();
                    v.pass("escalations", format!("{} escalation(s) of this run ({delivered} delivered), hash chain intact", log.records.len()));
                }
            }
        }
        Err(e) => {
            v.fail(
                "escalations",
                format!("{}: {e}", crate::escalation::log::FILE),
            );
        }
    }

    // 6. A `doctor = true` run's doctor receipt, pinned by its envelope's digest: verified in
    // full when it is beside the run; an absent one is said, not failed (like an artifact).
    if let Some(pin) = &history.preconditions {
        let (pinned, found) = super::probe::verify_pinned(pin, run_dir, operator);
        v.pinned_probe = Some(pinned);
        match found {
            Ok(detail) => v.pass("probe_receipt", detail),
            Err(detail) => {
                v.fail("probe_receipt", detail);
            }
        }
    }

    // 7. The artifacts the receipt names by digest (lists over its bound): each one present must
    // match; an absent one is said, not failed (the receipt's counts, digests and samples are
    // covered by the chain and the seal above).
    let events: Vec<Event> = records.into_iter().map(|r| r.event).collect();
    if !crate::receipt::bounded::artifacts_named(&events).is_empty() {
        let found = crate::receipt::bounded::check_artifacts(&events, run_dir);
        if found.mismatched.is_empty() {
            let mut detail = format!("{} artifact(s) match their digests", found.matched);
            if !found.absent.is_empty() {
                detail.push_str(&format!(
                    "; {} absent, their full lists not checked (counts, digests and samples are): {}",
                    found.absent.len(),
                    found.absent.join(", ")
                ));
            }
            v.pass("artifacts", detail);
        } else {
            v.fail("artifacts", found.mismatched.join("; "));
        }
    }
    (
        v,
        Some(restored.into_iter().map(|r| r.event).collect()),
        Some(history),
    )
}

/// The steps every sealed receipt shares (a run's, a probe's): every `run_key` event endorsed by
/// the operator key over the line before it (`id` is the run or probe id the endorsement binds),
/// the envelope a DSSE envelope of an in-toto Statement of `predicate_type`, signed by the last
/// endorsed run key (and otherwise only by the operator), its receipt subject the receipt's
/// digest. Each step is recorded in `v`; the Statement when all passed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn verify_envelope(
    run_dir: &SafeDir,
    operator: &VerifyingKey,
    receipt: &[u8],
    verified: &chain::VerifiedChain,
    records: &[Recorded],
    run_id: &str,
    predicate_type: &str,
    v: &mut Verification,
) -> Option<Value> {
    // 2. Endorsements of every run key. The endorsed message binds the line before the event.
    let lines: Vec<&[u8]> = receipt
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let run_key = match endorsements(records, &lines, run_id, operator) {
        Ok((count, key)) => {
            v.pass(
                "run_key_endorsement",
                format!("{count} run key(s) endorsed by operator key"),
            );
            key
        }
        Err(failures) => {
            for failure in failures {
                v.fail("run_key_endorsement", failure);
            }
            return None;
        }
    };
    // The operator's hand acceptances of rejected iterations (`ratchet --accept`), when any.
    match crate::receipt::acceptance::verify_all(records, &lines, operator) {
        Some(Ok(detail)) => v.pass("hand_acceptances", detail),
        Some(Err(detail)) => {
            v.fail("hand_acceptances", detail);
        }
        None => {}
    }

    // 3. The envelope.
    let envelope: Envelope = match run_dir
        .read(ENVELOPE_FILE, ENVELOPE_MAX_BYTES)
        .map_err(|e| e.to_string())
        .and_then(|b| {
            serde_json::from_slice(&b)
                .map_err(|e| format!("{ENVELOPE_FILE}: not a DSSE envelope: {e}"))
        }) {
        Ok(env) => env,
        Err(e) => {
            v.fail("envelope_format", e);
            return None;
        }
    };
    if envelope.payload_type != IN_TOTO_PAYLOAD_TYPE {
        v.fail(
            "envelope_format",
            format!(
                "payloadType is {:?}, expected {IN_TOTO_PAYLOAD_TYPE}",
                envelope.payload_type
            ),
        );
        return None;
    }
    let (Some(payload), Some(signed)) = (envelope.payload_bytes(), envelope.signed_bytes()) else {
        v.fail("envelope_format", "payload is not valid base64");
        return None;
    };
    let stmt: Value = match serde_json::from_slice(&payload) {
        Ok(s) => s,
        Err(e) => {
            v.fail("envelope_format", format!("payload is not JSON: {e}"));
            return None;
        }
    };
    if stmt.get("_type").and_then(Value::as_str) != Some(STATEMENT_TYPE)
        || stmt.get("predicateType").and_then(Value::as_str) != Some(predicate_type)
    {
        v.fail(
            "envelope_format",
            format!("payload is not an in-toto Statement v1 with predicate type {predicate_type}"),
        );
        return None;
    }
    v.pass(
        "envelope_format",
        "DSSE envelope of an in-toto Statement v1",
    );

    // 4. Signatures: the run key's, and any operator attestations.
    let run_id_key = run_keyid(&run_key);
    let op_id = operator_keyid(operator);
    let mut run_signed = false;
    for sig in &envelope.signatures {
        if sig.keyid == run_id_key {
            if keys::verify_b64(&run_key, &signed, &sig.sig) {
                run_signed = true;
            } else {
                v.fail("envelope_signature", "run key signature does not verify");
                return None;
            }
        } else if sig.keyid == op_id {
            if keys::verify_b64(operator, &signed, &sig.sig) {
                v.attested = true;
            } else {
                v.fail("operator_attestation", "operator signature does not verify");
                return None;
            }
        } else {
            v.fail(
                "envelope_signature",
                format!("signature by an unknown key {:?}", sig.keyid),
            );
            return None;
        }
    }
    if !run_signed {
        v.fail(
            "envelope_signature",
            "no signature by the receipt's last endorsed run key (swapped envelope?)",
        );
        return None;
    }
    v.pass(
        "envelope_signature",
        format!("signed by run key {}", hex::encode(run_key.as_bytes())),
    );

    // 5. Subjects and predicate against the log.
    let receipt_subject = stmt
        .get("subject")
        .and_then(Value::as_array)
        .and_then(|subjects| {
            subjects
                .iter()
                .find(|s| s.get("name").and_then(Value::as_str) == Some(RECEIPT_FILE))
        });
    let digest = receipt_subject
        .and_then(|s| s.pointer("/digest/sha256"))
        .and_then(Value::as_str);
    if digest != Some(verified.file_sha256.as_str()) {
        v.fail(
            "subject_digest",
            format!(
                "receipt subject digest {:?} is not the receipt's sha256 {}",
                digest, verified.file_sha256
            ),
        );
        return None;
    }
    v.pass(
        "subject_digest",
        format!("receipt sha256 {}", verified.file_sha256),
    );
    Some(stmt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::attest::attest_run;
    use crate::receipt::chain::ReceiptLog;
    use crate::receipt::events::sample;
    use crate::receipt::keys::{generate_operator_key, OperatorKey, RunKey};
    use crate::receipt::seal::{endorse_run_key, seal_run};

    struct Fixture {
        _tmp: tempfile::TempDir,
        run_dir: SafeDir,
        operator: OperatorKey,
    }

    /// A finished, sealed run of two iterations.
    fn sealed_run(name: &str) -> Fixture {
        sealed_with_second_check(name, 0)
    }

    /// A receipt being written in a fresh directory: `run_start`, the run key `run_key` endorsed
    /// by a fresh operator key, two iterations whose second check exited `second`, then a `halt`
    /// claiming success.
    fn halted_success(
        name: &str,
        second: i32,
        run_key: &RunKey,
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        SafeDir,
        OperatorKey,
        ReceiptLog,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let generated = generate_operator_key(&tmp.path().join("keys"), false).unwrap();
        let operator = OperatorKey::load(&generated.private_key).unwrap();
        let run_path = tmp.path().join(name);
        std::fs::create_dir(&run_path).unwrap();
        let run_dir = SafeDir::open(&run_path).unwrap();
        let mut log = ReceiptLog::create(&run_dir, RECEIPT_FILE).unwrap();
        log.append_event(&sample::run_start(name)).unwrap();
        endorse_run_key(&mut log, name, run_key, &operator).unwrap();
        for i in 1..=2 {
            log.append_event(&Event::IterationStart { iteration: i })
                .unwrap();
            log.append_event(&sample::exec_result(i, 0)).unwrap();
            log.append_event(&sample::check_result(i, if i == 2 { second } else { 1 }))
                .unwrap();
        }
        log.append_event(&sample::halt(
            crate::halt::HaltReason::SuccessConditionMet,
            2,
        ))
        .unwrap();
        (tmp, run_path, run_dir, operator, log)
    }

    /// A run of two iterations whose second check exited `second`, then a `halt` claiming
    /// success, sealed with a valid endorsed run key.
    fn sealed_with_second_check(name: &str, second: i32) -> Fixture {
        let run_key = RunKey::mint();
        let (tmp, _, run_dir, operator, log) = halted_success(name, second, &run_key);
        drop(log);
        seal_run(&run_dir, run_key, vec![]).unwrap();
        Fixture {
            _tmp: tmp,
            run_dir,
            operator,
        }
    }

    /// A run of two iterations halted success_condition_met whose supervisor died before
    /// sealing, then `after` appended after the halt (with the run key `sealing` endorsed where
    /// `after` holds a `run_key`), then the statement signed by `sealing` whatever the layout.
    fn sealed_after_halt(name: &str, after: &[&str]) -> Fixture {
        let (tmp, run_path, run_dir, operator, mut log) = halted_success(name, 0, &RunKey::mint());
        let sealing = RunKey::mint();
        for kind in after {
            match *kind {
                "seal_resumed" => {
                    let resumed = crate::receipt::events::SealResumed {
                        run_id: name.into(),
                        previous_state: Some("running".into()),
                        halt_reason: crate::halt::HaltReason::SuccessConditionMet,
                        pid: 2,
                    };
                    log.append_event(&Event::SealResumed(resumed)).unwrap();
                }
                "run_key" => {
                    endorse_run_key(&mut log, name, &sealing, &operator).unwrap();
                }
                other => {
                    log.append_event(&Event::IterationStart {
                        iteration: other.parse().unwrap(),
                    })
                    .unwrap();
                }
            }
        }
        let receipt = std::fs::read(run_path.join(RECEIPT_FILE)).unwrap();
        let verified = chain::verify(&receipt).unwrap();
        let history = History::of_lines(&verified.events).unwrap();
        let subjects = vec![statement::subject(
            RECEIPT_FILE,
            "sha256",
            &verified.file_sha256,
        )];
        let stmt = statement::statement(subjects, statement::predicate(&history).unwrap());
        crate::receipt::seal::sign_statement(&run_dir, sealing, &stmt, verified.file_sha256)
            .unwrap();
        Fixture {
            _tmp: tmp,
            run_dir,
            operator,
        }
    }

    #[test]
    fn a_run_sealed_by_the_resume_that_finished_its_seal_verifies() {
        let f = sealed_after_halt("resealed", &["seal_resumed", "run_key"]);
        let v = verify_run(&f.run_dir, &f.operator.verifying_key());
        assert!(v.ok(), "{:?}", v.checks);
        let check = v
            .checks
            .iter()
            .find(|c| c.name == "seal_completion")
            .unwrap();
        assert_eq!(
            check.detail,
            "the halt is followed only by the seal's completion (1 seal_resumed, each run key minted and endorsed after the halt by the resume that finished the seal)"
        );
    }

    #[test]
    fn an_iteration_chained_after_the_halt_fails_seal_completion_even_under_a_valid_seal() {
        let f = sealed_after_halt("extended", &["seal_resumed", "3", "run_key"]);
        let v = verify_run(&f.run_dir, &f.operator.verifying_key());
        assert_eq!(failed(&v), vec!["seal_completion"]);
    }

    #[test]
    fn a_run_key_endorsed_after_the_halt_without_a_seal_resumed_fails_seal_completion() {
        let f = sealed_after_halt("rekeyed", &["run_key"]);
        let v = verify_run(&f.run_dir, &f.operator.verifying_key());
        assert_eq!(failed(&v), vec!["seal_completion"]);
    }

    #[test]
    fn sealing_refuses_a_receipt_with_an_iteration_after_its_halt() {
        let f = sealed_after_halt("refused", &["seal_resumed", "run_key"]);
        let (mut log, _) = ReceiptLog::open(&f.run_dir, RECEIPT_FILE).unwrap();
        let key = RunKey::mint();
        log.append_event(&Event::IterationStart { iteration: 3 })
            .unwrap();
        log.append_event(&Event::SealResumed(crate::receipt::events::SealResumed {
            run_id: "refused".into(),
            previous_state: None,
            halt_reason: crate::halt::HaltReason::SuccessConditionMet,
            pid: 3,
        }))
        .unwrap();
        endorse_run_key(&mut log, "refused", &key, &f.operator).unwrap();
        let refused = seal_run(&f.run_dir, key, vec![]).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "receipt line 12: event iteration_start after the halt (line 9); only a seal_resumed and its run_key may follow a halt"
        );
    }

    fn failed(v: &Verification) -> Vec<&'static str> {
        v.checks.iter().filter(|c| !c.ok).map(|c| c.name).collect()
    }

    #[test]
    fn a_forged_success_after_a_red_check_sealed_with_the_run_key_fails_halt_derivation_naming_the_iteration(
    ) {
        let f = sealed_with_second_check("forged", 1);
        let v = verify_run(&f.run_dir, &f.operator.verifying_key());
        assert_eq!(failed(&v), vec!["halt_derivation"]);
        let check = v
            .checks
            .iter()
            .find(|c| c.name == "halt_derivation")
            .unwrap();
        assert_eq!(
            check.detail,
            "the halt records success_condition_met at iteration 2, but that iteration's recorded stages decide continue (no halt)"
        );
    }

    #[test]
    fn an_honest_success_passes_halt_derivation() {
        let f = sealed_run("honest");
        let v = verify_run(&f.run_dir, &f.operator.verifying_key());
        let check = v
            .checks
            .iter()
            .find(|c| c.name == "halt_derivation")
            .unwrap();
        assert!(check.ok, "{}", check.detail);
        assert_eq!(check.detail, "success_condition_met follows from the recorded observations (2 iteration decision(s) re-derived)");
    }

    #[test]
    fn an_untouched_sealed_run_verifies() {
        let f = sealed_run("r1");
        let v = verify_run(&f.run_dir, &f.operator.verifying_key());
        assert!(v.ok(), "{:?}", v.checks);
        assert_eq!(v.halt_reason.as_deref(), Some("success_condition_met"));
        assert!(!v.attested);
    }

    #[test]
    fn a_tampered_receipt_line_fails_the_chain() {
        let f = sealed_run("r1");
        let path = f.run_dir.path().join(RECEIPT_FILE);
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("\"check_exit\":1", "\"check_exit\":0");
        std::fs::write(&path, text).unwrap();
        assert_eq!(
            failed(&verify_run(&f.run_dir, &f.operator.verifying_key())),
            vec!["receipt_chain"]
        );
    }

    #[test]
    fn a_rewritten_and_rechained_receipt_fails_on_the_subject_digest() {
        let f = sealed_run("r1");
        let path = f.run_dir.path().join(RECEIPT_FILE);
        // Rebuild a consistent chain with an appended event: the chain verifies, the seal does not.
        let text = std::fs::read(&path).unwrap();
        let dir = SafeDir::open(f.run_dir.path()).unwrap();
        let (mut log, _) = ReceiptLog::open(&dir, RECEIPT_FILE).unwrap();
        log.append("note", serde_json::Map::new()).unwrap();
        assert_ne!(std::fs::read(&path).unwrap(), text);
        // The appended event follows the halt, which only the seal's completion may.
        assert_eq!(
            failed(&verify_run(&f.run_dir, &f.operator.verifying_key())),
            vec!["seal_completion", "subject_digest"]
        );
    }

    #[test]
    fn an_envelope_from_another_run_is_refused() {
        let a = sealed_run("a");
        let b = sealed_run("b");
        std::fs::copy(
            b.run_dir.path().join(ENVELOPE_FILE),
            a.run_dir.path().join(ENVELOPE_FILE),
        )
        .unwrap();
        assert_eq!(
            failed(&verify_run(&a.run_dir, &a.operator.verifying_key())),
            vec!["envelope_signature"]
        );
    }

    #[test]
    fn a_run_endorsed_by_another_operator_fails() {
        let a = sealed_run("a");
        let b = sealed_run("b");
        assert_eq!(
            failed(&verify_run(&a.run_dir, &b.operator.verifying_key())),
            vec!["run_key_endorsement"]
        );
    }

    #[test]
    fn attest_adds_a_verifying_operator_signature() {
        let f = sealed_run("r1");
        let v = attest_run(&f.run_dir, &f.operator).unwrap();
        assert!(v.ok() && v.attested, "{:?}", v.checks);
    }

    #[test]
    fn attest_refuses_a_run_of_another_operator() {
        let a = sealed_run("a");
        let b = sealed_run("b");
        assert!(attest_run(&a.run_dir, &b.operator).is_err());
    }

    #[test]
    fn a_malformed_envelope_is_named() {
        let f = sealed_run("r1");
        std::fs::write(f.run_dir.path().join(ENVELOPE_FILE), b"{not json").unwrap();
        let v = verify_run(&f.run_dir, &f.operator.verifying_key());
        assert_eq!(failed(&v), vec!["envelope_format"]);
    }
}
