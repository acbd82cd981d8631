//! Probe receipts: the signed record of a `probe-check` or `doctor --check` (docs/receipt.md,
//! "Probe receipts"). Same format and signing as a run's receipt (hash-chained JSONL, a per-probe
//! key endorsed by the operator key, a DSSE envelope over an in-toto Statement), in
//! `.loopexec/probes/<id>/`, with its own events: `probe_start` (what was probed and how: the
//! check, the seed, the dimensions, the target and confidence), one `probe_run` per determinism
//! run (its plan, exit class, exit code and failing-set digest), and `probe_verdict` (the bound
//! reached, the verdict, and doctor's gates with their evidence).
//!
//! [`verify_probe`] checks one offline and recomputes its verdict from the runs it holds: the
//! Clopper-Pearson bound and the varies decision (`trust::probe::summarise`), and each gate's
//! verdict from its recorded evidence, so `verify` and `report` reach the conclusion the probe
//! printed without running anything.

use super::chain::{self, ReceiptLog};
use super::events::{Event, Recorded};
use super::keys::{OperatorKey, RunKey};
use super::seal::{endorse_run_key, sign_statement, RECEIPT_FILE};
use super::statement::{self, STATEMENT_TYPE};
use super::store::{fs_failure, log_failure, StateDir};
use crate::audit::verify::{verify_envelope, Verification};
use crate::error::Failure;
use crate::halt::HaltReason;
use crate::run_id::RunId;
use crate::safefs::SafeDir;
use crate::trust::perturb::Dimension;
use crate::trust::probe::{summarise, ProbeRun, ProbeVerdict, RunClass};
use crate::trust::stats::{Confidence, FlakeRate};
use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::path::PathBuf;

/// `.loopexec/probes/`: one directory per probe.
pub const PROBES: &str = "probes";
pub const PROBE_PREDICATE_TYPE: &str = "https://loopexec.dev/attestation/probe/v1";

/// The first event of a probe receipt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeStart {
    pub probe_id: String,
    /// `probe-check` or `doctor`.
    pub command: String,
    pub check: String,
    pub isolation: String,
    #[serde(default)]
    pub check_policy: Option<String>,
    pub check_timeout_ms: u64,
    #[serde(default)]
    pub reports: Vec<String>,
    /// The seed every run's perturbation plan derives from.
    pub seed: u64,
    pub dimensions: Vec<Dimension>,
    pub jobs: usize,
    /// The flake rate to certify, and the confidence of the bound.
    pub target: f64,
    pub confidence: f64,
    /// The clean runs the target needs at the confidence, and the runs made.
    pub runs_required: u64,
    pub runs: u64,
    pub loopexec_version: String,
    pub pid: u32,
}

/// One determinism run of a probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRunRecord {
    pub run: u64,
    /// The dimension the run varied (null: unperturbed).
    pub dimension: Option<Dimension>,
    pub class: RunClass,
    /// SHA-256 of the failing set (empty without a report).
    pub failing_digest: String,
    #[serde(default)]
    pub failing_count: Option<u64>,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    /// The run's whole perturbation plan (environment, order seed, clock offset, CPUs, load).
    pub plan: Value,
}

/// What disagreeing runs varied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakageRecord {
    pub dimension: Option<Dimension>,
    pub runs: Vec<u64>,
}

/// The probe's conclusion: the last event before the seal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeVerdictRecord {
    /// `certified`, `not_certified` or `varies`.
    pub verdict: String,
    pub runs: u64,
    pub disagreeing: u64,
    /// The outcome most runs showed.
    pub modal_class: RunClass,
    pub modal_failing_digest: String,
    /// The exact one-sided upper bound on the flake rate the runs reached.
    pub flake_rate_bound: f64,
    #[serde(default)]
    pub broken_by: Vec<BreakageRecord>,
    /// doctor's gates in order (`{gate, verdict, reason?, detail?, evidence}`), with `isolation`
    /// first; null for probe-check.
    #[serde(default)]
    pub gates: Option<Vec<Value>>,
    /// The halt a loop on this check would stop with (null: none).
    pub halt_reason: Option<HaltReason>,
    pub exit_code: i32,
}

/// `doctor = true`: the gates a run ran before its first agent call, as its own receipt records
/// them (a `preconditions` event); the runs and evidence are in the doctor receipt it names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreconditionsRecord {
    /// The doctor receipt, relative to `.loopexec/` (`probes/<id>`), and its envelope's SHA-256.
    pub probe_receipt: String,
    pub probe_id: String,
    pub envelope_sha256: String,
    /// Each gate's `{gate, verdict, reason?, detail?}` (the evidence stays in the doctor receipt).
    pub gates: Vec<Value>,
    pub runs: u64,
    pub flake_rate_bound: f64,
    /// The first failed gate's reason: the run halts with it before any agent call.
    pub halt_reason: Option<HaltReason>,
    #[serde(default)]
    pub detail: Option<String>,
}

impl PreconditionsRecord {
    /// The halt the gates decided, if one failed.
    pub fn refusal(&self) -> Option<(HaltReason, String)> {
        self.halt_reason.map(|reason| (reason, self.detail.clone().unwrap_or_default()))
    }
}

/// A probe receipt written and sealed.
#[derive(Debug, Clone)]
pub struct WrittenProbe {
    pub id: String,
    /// The probe's directory (`.loopexec/probes/<id>`).
    pub dir: PathBuf,
    pub envelope_sha256: String,
}

/// Write the probe's receipt under the workdir's state dir and seal it with a fresh key the
/// operator key endorses. The receipt is complete before the envelope is written.
pub fn write(
    statedir: &StateDir,
    operator: &OperatorKey,
    start: impl FnOnce(String) -> ProbeStart,
    runs: &[ProbeRunRecord],
    verdict: &ProbeVerdictRecord,
) -> Result<WrittenProbe, Failure> {
    let probes = statedir.root().subdir_or_create(PROBES).map_err(fs_failure)?;
    let id = RunId::generate();
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o700);
    nix::sys::stat::mkdirat(Some(std::os::fd::AsRawFd::as_raw_fd(&probes.fd())), id.as_str(), mode)
        .map_err(|e| Failure::io(&probes.path().join(id.as_str()), &std::io::Error::from(e)))?;
    let dir = probes.subdir(id.as_str()).map_err(fs_failure)?;
    let mut log = ReceiptLog::create(&dir, RECEIPT_FILE).map_err(log_failure)?;
    log.append_event(&Event::ProbeStart(start(id.to_string()))).map_err(log_failure)?;
    let key = RunKey::mint();
    endorse_run_key(&mut log, id.as_str(), &key, operator).map_err(log_failure)?;
    for run in runs {
        log.append_event(&Event::ProbeRun(run.clone())).map_err(log_failure)?;
    }
    log.append_event(&Event::ProbeVerdict(verdict.clone())).map_err(log_failure)?;
    drop(log);
    let bytes = dir.read(RECEIPT_FILE, chain::MAX_RECEIPT_BYTES).map_err(fs_failure)?;
    let verified = chain::verify(&bytes).map_err(|e| Failure::internal(format!("the probe receipt just written does not verify: {e}")))?;
    let records = Recorded::decode_all(&verified.events).map_err(|e| Failure::internal(e.to_string()))?;
    let predicate = predicate(&records).map_err(Failure::internal)?;
    let stmt = json!({
        "_type": STATEMENT_TYPE,
        "subject": [statement::subject(RECEIPT_FILE, "sha256", &verified.file_sha256)],
        "predicateType": PROBE_PREDICATE_TYPE,
        "predicate": predicate,
    });
    let sealed = sign_statement(&dir, key, &stmt, verified.file_sha256).map_err(|e| Failure::internal(format!("sealing the probe receipt: {e}")))?;
    probes.sync().map_err(fs_failure)?;
    Ok(WrittenProbe { id: id.to_string(), dir: dir.path().to_path_buf(), envelope_sha256: sealed.envelope_sha256 })
}

/// Whether a verified receipt is a probe's (its first event is `probe_start`).
pub fn is_probe_receipt(lines: &[Map<String, Value>]) -> bool {
    lines.first().and_then(|l| l.get("type")).and_then(Value::as_str) == Some("probe_start")
}

/// A probe receipt's events, picked out of its records.
pub struct ProbeRecord {
    pub start: ProbeStart,
    pub runs: Vec<ProbeRunRecord>,
    pub verdict: ProbeVerdictRecord,
    pub run_keys: Vec<String>,
}

impl ProbeRecord {
    /// The probe's events; an error names what is missing or out of place.
    pub fn of(records: &[Recorded]) -> Result<ProbeRecord, String> {
        let mut start = None;
        let mut runs = Vec::new();
        let mut verdict = None;
        let mut run_keys = Vec::new();
        for (i, r) in records.iter().enumerate() {
            match &r.event {
                Event::ProbeStart(s) if i == 0 => start = Some(s.clone()),
                Event::RunKey(k) => run_keys.push(k.public_key.clone()),
                Event::ProbeRun(run) if verdict.is_none() => runs.push(run.clone()),
                Event::ProbeVerdict(v) if verdict.is_none() && i + 1 == records.len() => verdict = Some(v.clone()),
                other => return Err(format!("receipt line {}: a {} event has no place in a probe receipt", i + 1, other.kind())),
            }
        }
        Ok(ProbeRecord {
            start: start.ok_or("the receipt does not start with probe_start")?,
            verdict: verdict.ok_or("the receipt does not end with probe_verdict: the probe did not finish")?,
            runs,
            run_keys,
        })
    }
}

/// The probe predicate: the bodies of its events exactly as the receipt holds them.
pub fn predicate(records: &[Recorded]) -> Result<Value, String> {
    ProbeRecord::of(records)?;
    let of_kind = |kind: &'static str| records.iter().filter(move |r| r.event.kind() == kind).map(|r| Value::Object(statement::body(&r.line)));
    let keys: Vec<Value> = records.iter().filter_map(|r| match &r.event {
        Event::RunKey(k) => Some(Value::String(k.public_key.clone())),
        _ => None,
    }).collect();
    Ok(json!({
        "probe": of_kind("probe_start").next(),
        "run_keys": keys,
        "runs": of_kind("probe_run").collect::<Vec<_>>(),
        "verdict": of_kind("probe_verdict").next(),
    }))
}

/// The verdict's name as probe-check prints it.
pub fn verdict_name(verdict: &ProbeVerdict) -> &'static str {
    match verdict {
        ProbeVerdict::Certified => "certified",
        ProbeVerdict::NotCertified => "not_certified",
        ProbeVerdict::Flaky { .. } => "varies",
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

/// Recompute the probe's verdict from its runs and each gate's from its evidence; `Ok(detail)`
/// when everything recorded is what the runs give, else the first difference.
pub fn recompute(record: &ProbeRecord) -> Result<String, String> {
    let (start, verdict) = (&record.start, &record.verdict);
    let target = FlakeRate::new(start.target).map_err(|e| format!("probe_start: {e}"))?;
    let confidence = Confidence::new(start.confidence).map_err(|e| format!("probe_start: {e}"))?;
    if record.runs.len() as u64 != start.runs || verdict.runs != start.runs {
        return Err(format!("probe_start says {} runs, the receipt holds {}, the verdict counts {}", start.runs, record.runs.len(), verdict.runs));
    }
    let runs: Vec<ProbeRun> = record
        .runs
        .iter()
        .map(|r| ProbeRun { run: r.run, dimension: r.dimension, outcome: crate::trust::probe::Outcome { class: r.class, failing_digest: r.failing_digest.clone() } })
        .collect();
    let summary = summarise(&runs, target, confidence).map_err(|e| e.to_string())?.ok_or("the probe holds no run")?;
    let broken: Vec<BreakageRecord> = match &summary.verdict {
        ProbeVerdict::Flaky { broken_by } => broken_by.iter().map(|b| BreakageRecord { dimension: b.dimension, runs: b.runs.clone() }).collect(),
        _ => Vec::new(),
    };
    let name = verdict_name(&summary.verdict);
    if verdict.verdict != name || verdict.disagreeing != summary.disagreeing || verdict.broken_by != broken {
        return Err(format!(
            "the runs give {name} with {} disagreeing (broken by {:?}); the receipt says {} with {} (broken by {:?})",
            summary.disagreeing, broken, verdict.verdict, verdict.disagreeing, verdict.broken_by
        ));
    }
    if (verdict.modal_class, verdict.modal_failing_digest.as_str()) != (summary.modal.class, summary.modal.failing_digest.as_str()) {
        return Err("the recorded modal outcome is not the one most runs showed".into());
    }
    if !close(verdict.flake_rate_bound, summary.flake_rate_bound) {
        return Err(format!("the runs bound the flake rate at {}, the receipt says {}", summary.flake_rate_bound, verdict.flake_rate_bound));
    }
    let flaky = matches!(summary.verdict, ProbeVerdict::Flaky { .. });
    let mut detail = format!("{name}: {} runs, {} disagreeing, bound {:.6} at confidence {}", summary.runs, summary.disagreeing, summary.flake_rate_bound, start.confidence);
    let halt = match &verdict.gates {
        None => flaky.then_some(HaltReason::CheckFlaky),
        Some(gates) => {
            let mut first_failed = None;
            let mut unchecked = Vec::new();
            for gate in gates {
                let name = gate["gate"].as_str().unwrap_or("?");
                let recorded = recorded_gate(gate)?;
                match expected_gate(name, gate, flaky, &summary.modal)? {
                    Some(expected) if expected != recorded => {
                        return Err(format!("gate {name}: its evidence gives {expected:?}, the receipt says {recorded:?}"));
                    }
                    Some(_) => {}
                    None => unchecked.push(name.to_string()),
                }
                if let (None, GateShown::Failed(reason)) = (first_failed, recorded) {
                    first_failed = Some(reason);
                }
            }
            detail.push_str(&format!("; {} gate(s) recomputed from their evidence", gates.len() - unchecked.len()));
            if !unchecked.is_empty() {
                detail.push_str(&format!(" ({} as recorded: not recomputable offline)", unchecked.join(", ")));
            }
            first_failed
        }
    };
    if halt != verdict.halt_reason {
        return Err(format!("the runs give the halt {:?}, the receipt says {:?}", halt.map(HaltReason::as_str), verdict.halt_reason.map(HaltReason::as_str)));
    }
    Ok(detail)
}

/// A gate's verdict without its sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GateShown {
    Passed,
    Failed(HaltReason),
    Inconclusive,
}

fn recorded_gate(gate: &Value) -> Result<GateShown, String> {
    let name = gate["gate"].as_str().unwrap_or("?");
    match gate["verdict"].as_str() {
        Some("passed") => Ok(GateShown::Passed),
        Some("inconclusive") => Ok(GateShown::Inconclusive),
        Some("failed") => serde_json::from_value(gate["reason"].clone()).map(GateShown::Failed).map_err(|_| format!("gate {name}: a failed verdict without a known reason")),
        _ => Err(format!("gate {name}: no verdict")),
    }
}

/// Whether a recorded run outcome (`{class, failing_digest}`) differs from the modal one.
fn differs(run: &Value, modal: &crate::trust::probe::Outcome) -> Result<bool, String> {
    let class: RunClass = serde_json::from_value(run["class"].clone()).map_err(|_| format!("a gate run without a class: {run}"))?;
    Ok(class != modal.class || run["failing_digest"].as_str() != Some(modal.failing_digest.as_str()))
}

/// What a gate's evidence gives (None: the gate is not recomputable offline, e.g. `isolation`).
fn expected_gate(name: &str, gate: &Value, flaky: bool, modal: &crate::trust::probe::Outcome) -> Result<Option<GateShown>, String> {
    let evidence = &gate["evidence"];
    let runs_differ = |key: &str, reason: HaltReason| -> Result<Option<GateShown>, String> {
        if flaky {
            return Ok(Some(GateShown::Inconclusive));
        }
        if differs(&evidence["reference"], modal)? {
            return Err(format!("gate {name}: its reference is not the determinism runs' modal outcome"));
        }
        let runs = evidence[key].as_array().ok_or_else(|| format!("gate {name}: no {key} in its evidence"))?;
        let mut changed = false;
        for run in runs {
            changed |= differs(run, modal)?;
        }
        Ok(Some(if changed { GateShown::Failed(reason) } else { GateShown::Passed }))
    };
    match name {
        "determinism" => Ok(Some(if flaky { GateShown::Failed(HaltReason::CheckFlaky) } else { GateShown::Passed })),
        "hermeticity" => runs_differ("runs", HaltReason::CheckNotHermetic),
        "side_effects" => runs_differ("same_copy_runs", HaltReason::CheckHasSideEffects),
        "adequacy" => {
            let Some(mutants) = evidence.get("mutants") else { return Ok(Some(GateShown::Inconclusive)) };
            let results: Vec<crate::mutation::verdict::MutantResult> =
                serde_json::from_value(mutants.clone()).map_err(|e| format!("gate adequacy: its mutants do not read: {e}"))?;
            Ok(Some(match crate::mutation::verdict::score(&results).verdict {
                crate::mutation::verdict::Adequacy::Adequate => GateShown::Passed,
                crate::mutation::verdict::Adequacy::Inadequate => GateShown::Failed(HaltReason::CheckInadequate),
                _ => GateShown::Inconclusive,
            }))
        }
        _ => Ok(None),
    }
}

/// Verify a probe's directory offline against the operator's public key: the chain, the
/// endorsement, the envelope and its signature (as a run's), the predicate recomputed from the
/// receipt, then the verdict recomputed from the runs (`verdict_recomputed`).
pub fn verify_probe(dir: &SafeDir, operator: &VerifyingKey) -> Verification {
    let mut v = Verification { operator_key: Some(super::keys::fingerprint(operator)), ..Default::default() };
    let read = dir.read(RECEIPT_FILE, chain::MAX_RECEIPT_BYTES).map_err(|e| e.to_string());
    let verified = read.as_ref().map_err(Clone::clone).and_then(|b| chain::verify(b).map_err(|e| e.to_string()));
    let records = verified.as_ref().map_err(Clone::clone).and_then(|c| Recorded::decode_all(&c.events).map_err(|e| e.to_string()));
    let record = records.as_ref().map_err(Clone::clone).and_then(|r| ProbeRecord::of(r));
    let (Ok(receipt), Ok(verified), Ok(records), Ok(record)) = (&read, &verified, &records, record) else {
        let problem = [read.err(), verified.err(), records.err()].into_iter().flatten().next();
        v.fail_step("receipt_chain", problem.unwrap_or_else(|| "not a probe receipt".into()));
        return v;
    };
    v.pass_step("receipt_chain", format!("{} events, head {}", verified.events.len(), verified.head));
    // The directory is the probe's by name (`probes/<id>`), as a run pins it: another probe's
    // receipt moved or copied into it verifies as that other probe, never as this directory's.
    match directory_name(dir) {
        Some(name) if name == record.start.probe_id => v.pass_step("probe_directory", format!("the directory is named for probe {name}")),
        Some(name) => v.fail_step(
            "probe_directory",
            format!(
                "the directory is named {}, its receipt is probe {}'s (another probe's receipt moved or copied in)",
                crate::inert::inert(&name),
                crate::inert::inert(&record.start.probe_id)
            ),
        ),
        None => v.fail_step("probe_directory", format!("{}: the directory's name cannot be read", dir.path().display())),
    }
    v.run_id = Some(record.start.probe_id.clone());
    v.halt_reason = record.verdict.halt_reason.map(|h| h.as_str().to_string());
    let Some(stmt) = verify_envelope(dir, operator, receipt, verified, records, &record.start.probe_id, PROBE_PREDICATE_TYPE, &mut v) else {
        return v;
    };
    match predicate(records) {
        Ok(expected) if Some(&expected) == stmt.get("predicate") => v.pass_step("predicate_matches_log", "predicate recomputed from the receipt matches"),
        Ok(_) => v.fail_step("predicate_matches_log", "the envelope's predicate differs from the one recomputed from the receipt"),
        Err(e) => v.fail_step("predicate_matches_log", e),
    }
    match recompute(&record) {
        Ok(detail) => v.pass_step("verdict_recomputed", detail),
        Err(problem) => v.fail_step("verdict_recomputed", problem),
    }
    v
}

/// The name of the directory `dir` was opened as (resolved when the path ends in `.` or `..`).
fn directory_name(dir: &SafeDir) -> Option<String> {
    let named = dir.path().file_name().map(|n| n.to_string_lossy().into_owned());
    named.or_else(|| std::fs::canonicalize(dir.path()).ok()?.file_name().map(|n| n.to_string_lossy().into_owned()))
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
pub fn verify_pinned(pin: &PreconditionsRecord, run_dir: &SafeDir, operator: &VerifyingKey) -> (PinnedProbe, Result<String, String>) {
    let shown = crate::inert::inert(&pin.probe_receipt).into_owned();
    let mut pinned = PinnedProbe { probe_id: pin.probe_id.clone(), probe_receipt: pin.probe_receipt.clone(), state: "failed" };
    if RunId::parse(&pin.probe_id).is_err() || pin.probe_receipt != format!("{PROBES}/{}", pin.probe_id) {
        return (pinned, Err(format!("the preconditions event pins {shown} as probe {}: not a probe directory of the state directory", crate::inert::inert(&pin.probe_id))));
    }
    // Two levels up from the run directory as the kernel resolves them (a relative path such as
    // `runs/<run>` or `.` included).
    let state_dir = run_dir.path().join("../..");
    let opened = SafeDir::open(&state_dir)
        .and_then(|root| root.subdir(&pin.probe_receipt))
        .map_err(|e| if e.is_not_found() { String::new() } else { e.to_string() });
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
    let envelope = match dir.read(super::seal::ENVELOPE_FILE, super::seal::ENVELOPE_MAX_BYTES) {
        Ok(bytes) => bytes,
        Err(e) => return (pinned, Err(format!("the doctor receipt {shown}: {e}"))),
    };
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&envelope));
    if digest != pin.envelope_sha256 {
        return (pinned, Err(format!(
            "the doctor receipt {shown}: its envelope's sha256 is {digest}, the run pinned {} (another probe's receipt, or a re-sealed one)",
            crate::inert::inert(&pin.envelope_sha256)
        )));
    }
    let verified = verify_probe(&dir, operator);
    if !verified.ok() {
        let failed: Vec<String> = verified.checks.iter().filter(|c| !c.ok).map(|c| format!("{}: {}", c.name, c.detail)).collect();
        return (pinned, Err(format!("the doctor receipt {shown} does not verify: {}", failed.join("; "))));
    }
    if verified.run_id.as_deref() != Some(pin.probe_id.as_str()) {
        return (pinned, Err(format!("the doctor receipt {shown} is probe {}'s, the run pinned {}", verified.run_id.unwrap_or_default(), pin.probe_id)));
    }
    pinned.state = "verified";
    (pinned, Ok(format!("the doctor receipt {shown} the run pinned verifies: envelope sha256 {digest}, probe {}", pin.probe_id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::keys::generate_operator_key;

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
        ProbeRunRecord { run: i, dimension, class, failing_digest: String::new(), failing_count: None, exit_code: Some(0), duration_ms: 1, plan: json!({}) }
    }

    /// The verdict 59 agreeing runs give: certified.
    fn certified_verdict() -> ProbeVerdictRecord {
        ProbeVerdictRecord {
            verdict: "certified".into(),
            runs: 59,
            disagreeing: 0,
            modal_class: RunClass::Pass,
            modal_failing_digest: String::new(),
            flake_rate_bound: crate::trust::stats::clean_runs_bound(59, Confidence::new(0.95).unwrap()),
            broken_by: vec![],
            gates: None,
            halt_reason: None,
            exit_code: 0,
        }
    }

    /// A probe receipt of `runs` with the certified verdict, written and sealed.
    fn written(f: &Fixture, runs: &[ProbeRunRecord]) -> WrittenProbe {
        let statedir = StateDir::open_or_create(&f.tmp.path().join("work")).unwrap();
        write(&statedir, &f.operator, start(runs.len() as u64), runs, &certified_verdict()).unwrap()
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
        let v = verify_probe(&SafeDir::open(&written.dir).unwrap(), &f.operator.verifying_key());
        assert!(v.ok(), "{:?}", v.checks);
        let recomputed = v.checks.iter().find(|c| c.name == "verdict_recomputed").unwrap();
        assert!(recomputed.detail.starts_with("certified: 59 runs, 0 disagreeing"), "{}", recomputed.detail);
        assert_eq!(v.run_id.as_deref(), Some(written.id.as_str()));
    }

    #[test]
    fn a_run_rewritten_in_a_rechained_and_resealed_receipt_fails_the_recomputed_verdict() {
        // Whoever holds the operator key can re-sign anything; the verdict must still follow the runs.
        let f = fixture();
        let mut runs: Vec<ProbeRunRecord> = (0..59).map(|i| run(i, RunClass::Pass)).collect();
        runs[3].class = RunClass::Fail;
        let written = written(&f, &runs);
        let v = verify_probe(&SafeDir::open(&written.dir).unwrap(), &f.operator.verifying_key());
        assert_eq!(failed(&v), vec!["verdict_recomputed"]);
        let detail = &v.checks.iter().find(|c| !c.ok).unwrap().detail;
        assert!(detail.starts_with("the runs give varies with 1 disagreeing"), "{detail}");
    }

    #[test]
    fn an_edited_probe_receipt_fails_the_chain() {
        let f = fixture();
        let written = certified(&f);
        let path = written.dir.join(RECEIPT_FILE);
        let text = std::fs::read_to_string(&path).unwrap().replacen("\"class\":\"pass\"", "\"class\":\"fail\"", 1);
        std::fs::write(&path, text).unwrap();
        assert_eq!(failed(&verify_probe(&SafeDir::open(&written.dir).unwrap(), &f.operator.verifying_key())), vec!["receipt_chain"]);
    }

    #[test]
    fn a_probe_receipt_of_another_operator_fails_the_endorsement() {
        let (a, b) = (fixture(), fixture());
        let written = certified(&a);
        assert_eq!(failed(&verify_probe(&SafeDir::open(&written.dir).unwrap(), &b.operator.verifying_key())), vec!["run_key_endorsement"]);
    }

    #[test]
    fn a_gate_verdict_its_evidence_contradicts_is_named() {
        let modal = crate::trust::probe::Outcome { class: RunClass::Pass, failing_digest: String::new() };
        let gate = json!({"gate": "hermeticity", "verdict": "passed", "evidence": {
            "reference": {"class": "pass", "failing_digest": ""},
            "runs": [{"class": "pass", "failing_digest": ""}, {"class": "fail", "failing_digest": "x"}]}});
        assert_eq!(expected_gate("hermeticity", &gate, false, &modal).unwrap(), Some(GateShown::Failed(HaltReason::CheckNotHermetic)));
        assert_eq!(recorded_gate(&gate).unwrap(), GateShown::Passed);
    }
}
