//! Verifying a probe receipt offline (`verify` of a `probes/<id>` directory, and the doctor
//! receipt a `doctor = true` run pinned): the chain, the endorsement, the envelope and its
//! signature (as a run's, `super::verify::verify_envelope`), the predicate recomputed from the
//! receipt, the directory named for its probe, then the verdict recomputed from the runs
//! (`crate::rules::probe_replay`), so `verify` reaches the conclusion the probe printed without
//! running anything.

use super::verify::{verify_envelope, Verification};
use crate::inert::inert;
use crate::receipt::chain;
use crate::receipt::events::Recorded;
use crate::receipt::keys;
use crate::receipt::probe::{
    predicate, PreconditionsRecord, ProbeRecord, PROBES, PROBE_PREDICATE_TYPE,
};
use crate::receipt::seal::{ENVELOPE_FILE, ENVELOPE_MAX_BYTES, RECEIPT_FILE};
use crate::rules::probe_replay;
use crate::run_id::RunId;
use crate::safefs::SafeDir;
use ed25519_dalek::VerifyingKey;
use serde::Serialize;

/// Verify a probe's directory offline against the operator's public key: the chain, the
/// endorsement, the envelope and its signature (as a run's), the predicate recomputed from the
/// receipt, then the verdict recomputed from the runs (`verdict_recomputed`).
pub fn verify_probe(dir: &SafeDir, operator: &VerifyingKey) -> Verification {
    let mut v = Verification {
        operator_key: Some(keys::fingerprint(operator)),
        ..Default::default()
    };
    let read = dir
        .read(RECEIPT_FILE, chain::MAX_RECEIPT_BYTES)
        .map_err(|e| e.to_string());
    let verified = read
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|b| chain::verify(b).map_err(|e| e.to_string()));
    let records = verified
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|c| Recorded::decode_all(&c.events).map_err(|e| e.to_string()));
    let record = records
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|r| ProbeRecord::of(r));
    let (Ok(receipt), Ok(verified), Ok(records), Ok(record)) = (&read, &verified, &records, record)
    else {
        let problem = [read.err(), verified.err(), records.err()]
            .into_iter()
            .flatten()
            .next();
        v.fail_step(
            "receipt_chain",
            problem.unwrap_or_else(|| "not a probe receipt".into()),
        );
        return v;
    };
    v.pass_step(
        "receipt_chain",
        format!("{} events, head {}", verified.events.len(), verified.head),
    );
    // The directory is the probe's by name (`probes/<id>`), as a run pins it: another probe's
    // receipt moved or copied into it verifies as that other probe, never as this directory's.
    match directory_name(dir) {
        Some(name) if name == record.start.probe_id => v.pass_step("probe_directory", format!("the directory is named for probe {name}")),
        Some(name) => v.fail_step(
            "probe_directory",
            format!(
                "the directory is named {}, its receipt is probe {}'s (another probe's receipt moved or copied in)",
                inert(&name),
                inert(&record.start.probe_id)
            ),
        ),
        None => v.fail_step("probe_directory", format!("{}: the directory's name cannot be read", dir.path().display())),
    }
    v.run_id = Some(record.start.probe_id.clone());
    v.halt_reason = record.verdict.halt_reason.map(|h| h.as_str().to_string());
    let Some(stmt) = verify_envelope(
        dir,
        operator,
        receipt,
        verified,
        records,
        &record.start.probe_id,
        PROBE_PREDICATE_TYPE,
        &mut v,
    ) else {
        return v;
    };
    match predicate(records) {
        Ok(expected) if Some(&expected) == stmt.get("predicate") => v.pass_step(
            "predicate_matches_log",
            "predicate recomputed from the receipt matches",
        ),
        Ok(_) => v.fail_step(
            "predicate_matches_log",
            "the envelope's predicate differs from the one recomputed from the receipt",
        ),
        Err(e) => v.fail_step("predicate_matches_log", e),
    }
    match probe_replay::recompute(&record) {
        Ok(detail) => v.pass_step("verdict_recomputed", detail),
        Err(problem) => v.fail_step("verdict_recomputed", problem),
    }
    v
}

/// The name of the directory `dir` was opened as (resolved when the path ends in `.` or `..`).
fn directory_name(dir: &SafeDir) -> Option<String> {
    let named = dir
        .path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    named.or_else(|| {
        std::fs::canonicalize(dir.path())
            .ok()?
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
    })
}

/// What `verify RUN` found of the doctor receipt a `doctor = true` run pinned in its
/// `preconditions` event (JSON `verify.pinned_probe`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PinnedProbe {
    pub probe_id: String,
    /// The directory, relative to `.loopexec/` (`probes/<id>`).
    pub probe_receipt: String,
    /// `verified`, `absent` (not beside the run: not checked), or `failed`.
    pub state: &'static str,
}

/// Check the doctor receipt `pin` names, looked up beside the run (`<state>/probes/<id>` for the
/// run directory `<state>/runs/<run>`), opened beneath that state directory without following a
/// link: its envelope's SHA-256 is the pinned one, the receipt verifies as a probe's against
/// `operator` (chain, endorsement, seal, predicate, verdict recomputed, directory named for its
/// id), and its id is the pinned id. `Ok(detail)` when it verifies or is absent (the detail says
/// which), else the first failure.
pub fn verify_pinned(
    pin: &PreconditionsRecord,
    run_dir: &SafeDir,
    operator: &VerifyingKey,
) -> (PinnedProbe, Result<String, String>) {
    let shown = inert(&pin.probe_receipt).into_owned();
    let mut pinned = PinnedProbe {
        probe_id: pin.probe_id.clone(),
        probe_receipt: pin.probe_receipt.clone(),
        state: "failed",
    };
    if RunId::parse(&pin.probe_id).is_err()
        || pin.probe_receipt != format!("{PROBES}/{}", pin.probe_id)
    {
        return (pinned, Err(format!("the preconditions event pins {shown} as probe {}: not a probe directory of the state directory", inert(&pin.probe_id))));
    }
    // Two levels up from the run directory as the kernel resolves them (a relative path such as
    // `runs/<run>` or `.` included).
    let state_dir = run_dir.path().join("../..");
    let opened = SafeDir::open(&state_dir)
        .and_then(|root| root.subdir(&pin.probe_receipt))
        .map_err(|e| {
            if e.is_not_found() {
                String::new()
            } else {
                e.to_string()
            }
        });
    let dir = match opened {
        Ok(dir) => dir,
        Err(absent) if absent.is_empty() => {
            pinned.state = "absent";
            return (pinned, Ok(format!(
                "the doctor receipt {shown} the run pinned is absent beside the run: not checked (its gates' verdicts in the run's receipt are sealed with it; its runs and evidence are not verified)"
            )));
        }
        Err(e) => return (pinned, Err(format!("the doctor receipt {shown}: {e}"))),
    };
    let envelope = match dir.read(ENVELOPE_FILE, ENVELOPE_MAX_BYTES) {
        Ok(bytes) => bytes,
        Err(e) => return (pinned, Err(format!("the doctor receipt {shown}: {e}"))),
    };
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&envelope));
    if digest != pin.envelope_sha256 {
        return (pinned, Err(format!(
            "the doctor receipt {shown}: its envelope's sha256 is {digest}, the run pinned {} (another probe's receipt, or a re-sealed one)",
            inert(&pin.envelope_sha256)
        )));
    }
    let verified = verify_probe(&dir, operator);
    if !verified.ok() {
        let failed: Vec<String> = verified
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| format!("{}: {}", c.name, c.detail))
            .collect();
        return (
            pinned,
            Err(format!(
                "the doctor receipt {shown} does not verify: {}",
                failed.join("; ")
            )),
        );
    }
    if verified.run_id.as_deref() != Some(pin.probe_id.as_str()) {
        return (
            pinned,
            Err(format!(
                "the doctor receipt {shown} is probe {}'s, the run pinned {}",
                verified.run_id.unwrap_or_default(),
                pin.probe_id
            )),
        );
    }
    pinned.state = "verified";
    (pinned, Ok(format!("the doctor receipt {shown} the run pinned verifies: envelope sha256 {digest}, probe {}", pin.probe_id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::keys::{generate_operator_key, OperatorKey};
    use crate::receipt::probe::{
        write, Dimension, ProbeRunRecord, ProbeStart, ProbeVerdictRecord, RunClass, WrittenProbe,
    };
    use crate::receipt::store::StateDir;
    use crate::rules::stats::{clean_runs_bound, Confidence};
    use serde_json::json;

    struct Fixture {
        tmp: tempfile::TempDir,
        operator: OperatorKey,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let generated = generate_operator_key(&tmp.path().join("keys"), false).unwrap();
        let operator = OperatorKey::load(&generated.private_key).unwrap();
        std::fs::create_dir(tmp.path().join("work")).unwrap();
        Fixture { tmp, operator }
    }

    fn start(n: u64) -> impl FnOnce(String) -> ProbeStart {
        move |probe_id| ProbeStart {
            probe_id,
            command: "probe-check".into(),
            check: "true".into(),
            isolation: "none".into(),
            check_policy: None,
            check_timeout_ms: 1000,
            reports: vec![],
            seed: 7,
            dimensions: vec![Dimension::Order],
            jobs: 2,
            target: 0.05,
            confidence: 0.95,
            runs_required: 59,
            runs: n,
            loopexec_version: "test".into(),
            pid: 1,
        }
    }

    fn run(i: u64, class: RunClass) -> ProbeRunRecord {
        let dimension = (i > 0).then_some(Dimension::Order);
        ProbeRunRecord {
            run: i,
            dimension,
            class,
            failing_digest: String::new(),
            failing_count: None,
            exit_code: Some(0),
            duration_ms: 1,
            plan: json!({}),
        }
    }

    /// The verdict 59 agreeing runs give: certified.
    fn certified_verdict() -> ProbeVerdictRecord {
        ProbeVerdictRecord {
            verdict: "certified".into(),
            runs: 59,
            disagreeing: 0,
            modal_class: RunClass::Pass,
            modal_failing_digest: String::new(),
            flake_rate_bound: clean_runs_bound(59, Confidence::new(0.95).unwrap()),
            broken_by: vec![],
            gates: None,
            halt_reason: None,
            exit_code: 0,
        }
    }

    /// A probe receipt of `runs` with the certified verdict, written and sealed.
    fn written(f: &Fixture, runs: &[ProbeRunRecord]) -> WrittenProbe {
        let statedir = StateDir::open_or_create(&f.tmp.path().join("work")).unwrap();
        write(
            &statedir,
            &f.operator,
            start(runs.len() as u64),
            runs,
            &certified_verdict(),
        )
        .unwrap()
    }

    /// 59 agreeing runs, certified.
    fn certified(f: &Fixture) -> WrittenProbe {
        let runs: Vec<ProbeRunRecord> = (0..59).map(|i| run(i, RunClass::Pass)).collect();
        written(f, &runs)
    }

    fn failed(v: &Verification) -> Vec<&'static str> {
        v.checks.iter().filter(|c| !c.ok).map(|c| c.name).collect()
    }

    #[test]
    fn a_written_probe_receipt_verifies_and_its_verdict_is_recomputed() {
        let f = fixture();
        let written = certified(&f);
        let v = verify_probe(
            &SafeDir::open(&written.dir).unwrap(),
            &f.operator.verifying_key(),
        );
        assert!(v.ok(), "{:?}", v.checks);
        let recomputed = v
            .checks
            .iter()
            .find(|c| c.name == "verdict_recomputed")
            .unwrap();
        assert!(
            recomputed
                .detail
                .starts_with("certified: 59 runs, 0 disagreeing"),
            "{}",
            recomputed.detail
        );
        assert_eq!(v.run_id.as_deref(), Some(written.id.as_str()));
    }

    #[test]
    fn a_run_rewritten_in_a_rechained_and_resealed_receipt_fails_the_recomputed_verdict() {
        // Whoever holds the operator key can re-sign anything; the verdict must still follow the runs.
        let f = fixture();
        let mut runs: Vec<ProbeRunRecord> = (0..59).map(|i| run(i, RunClass::Pass)).collect();
        runs[3].class = RunClass::Fail;
        let written = written(&f, &runs);
        let v = verify_probe(
            &SafeDir::open(&written.dir).unwrap(),
            &f.operator.verifying_key(),
        );
        assert_eq!(failed(&v), vec!["verdict_recomputed"]);
        let detail = &v.checks.iter().find(|c| !c.ok).unwrap().detail;
        assert!(
            detail.starts_with("the runs give varies with 1 disagreeing"),
            "{detail}"
        );
    }

    #[test]
    fn an_edited_probe_receipt_fails_the_chain() {
        let f = fixture();
        let written = certified(&f);
        let path = written.dir.join(RECEIPT_FILE);
        let text = std::fs::read_to_string(&path).unwrap().replacen(
            "\"class\":\"pass\"",
            "\"class\":\"fail\"",
            1,
        );
        std::fs::write(&path, text).unwrap();
        assert_eq!(
            failed(&verify_probe(
                &SafeDir::open(&written.dir).unwrap(),
                &f.operator.verifying_key()
            )),
            vec!["receipt_chain"]
        );
    }

    #[test]
    fn a_probe_receipt_of_another_operator_fails_the_endorsement() {
        let (a, b) = (fixture(), fixture());
        let written = certified(&a);
        assert_eq!(
            failed(&verify_probe(
                &SafeDir::open(&written.dir).unwrap(),
                &b.operator.verifying_key()
            )),
            vec!["run_key_endorsement"]
        );
    }
}
