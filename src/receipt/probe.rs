//! Probe receipts: the signed record of a `probe-check` or `doctor --check` (docs/receipt.md,
//! "Probe receipts"). Same format and signing as a run's receipt (hash-chained JSONL, a per-probe
//! key endorsed by the operator key, a DSSE envelope over an in-toto Statement), in
//! `.loopexec/probes/<id>/`, with its own events: `probe_start` (what was probed and how: the
//! check, the seed, the dimensions, the target and confidence), one `probe_run` per determinism
//! run (its plan, exit class, exit code and failing-set digest), and `probe_verdict` (the bound
//! reached, the verdict, and doctor's gates with their evidence).
//!
//! This module owns the record only: the events' types (with the two values they name, a run's
//! [`RunClass`] and a perturbation [`Dimension`]), writing and sealing a probe receipt, picking a
//! receipt's probe events out ([`ProbeRecord`]) and its predicate. Whether its verdict follows
//! from its runs is the decision rules' (`probe_replay`); verifying a probe directory offline is
//! the verifier's (`probe`), both layers above this one.

use super::chain::{self, ReceiptLog};
use super::events::{Event, Recorded};
use super::keys::{OperatorKey, RunKey};
use super::seal::{endorse_run_key, sign_statement, RECEIPT_FILE};
use super::statement::{self, STATEMENT_TYPE};
use super::store::{fs_failure, log_failure, StateDir};
use crate::error::Failure;
use crate::halt::HaltReason;
use crate::run_id::RunId;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::fmt;
use std::path::PathBuf;

/// `.loopexec/probes/`: one directory per probe.
pub const PROBES: &str = "probes";
pub const PROBE_PREDICATE_TYPE: &str = "https://loopexec.dev/attestation/probe/v1";

/// The verdict class of one check run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunClass {
    Pass,
    Fail,
    CouldNotRun,
}

/// A dimension along which the check's environment is varied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    Order,
    Seed,
    Clock,
    Concurrency,
    Load,
    Env,
}

impl Dimension {
    pub const ALL: [Dimension; 6] = [
        Dimension::Order,
        Dimension::Seed,
        Dimension::Clock,
        Dimension::Concurrency,
        Dimension::Load,
        Dimension::Env,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Order => "order",
            Dimension::Seed => "seed",
            Dimension::Clock => "clock",
            Dimension::Concurrency => "concurrency",
            Dimension::Load => "load",
            Dimension::Env => "env",
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
        self.halt_reason
            .map(|reason| (reason, self.detail.clone().unwrap_or_default()))
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
    let probes = statedir
        .root()
        .subdir_or_create(PROBES)
        .map_err(fs_failure)?;
    let id = RunId::generate();
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o700);
    nix::sys::stat::mkdirat(
        Some(std::os::fd::AsRawFd::as_raw_fd(&probes.fd())),
        id.as_str(),
        mode,
    )
    .map_err(|e| Failure::io(&probes.path().join(id.as_str()), &std::io::Error::from(e)))?;
    let dir = probes.subdir(id.as_str()).map_err(fs_failure)?;
    let mut log = ReceiptLog::create(&dir, RECEIPT_FILE).map_err(log_failure)?;
    log.append_event(&Event::ProbeStart(start(id.to_string())))
        .map_err(log_failure)?;
    let key = RunKey::mint();
    endorse_run_key(&mut log, id.as_str(), &key, operator).map_err(log_failure)?;
    for run in runs {
        log.append_event(&Event::ProbeRun(run.clone()))
            .map_err(log_failure)?;
    }
    log.append_event(&Event::ProbeVerdict(verdict.clone()))
        .map_err(log_failure)?;
    drop(log);
    let bytes = dir
        .read(RECEIPT_FILE, chain::MAX_RECEIPT_BYTES)
        .map_err(fs_failure)?;
    let verified = chain::verify(&bytes).map_err(|e| {
        Failure::internal(format!(
            "the probe receipt just written does not verify: {e}"
        ))
    })?;
    let records =
        Recorded::decode_all(&verified.events).map_err(|e| Failure::internal(e.to_string()))?;
    let predicate = predicate(&records).map_err(Failure::internal)?;
    let stmt = json!({
        "_type": STATEMENT_TYPE,
        "subject": [statement::subject(RECEIPT_FILE, "sha256", &verified.file_sha256)],
        "predicateType": PROBE_PREDICATE_TYPE,
        "predicate": predicate,
    });
    let sealed = sign_statement(&dir, key, &stmt, verified.file_sha256)
        .map_err(|e| Failure::internal(format!("sealing the probe receipt: {e}")))?;
    probes.sync().map_err(fs_failure)?;
    Ok(WrittenProbe {
        id: id.to_string(),
        dir: dir.path().to_path_buf(),
        envelope_sha256: sealed.envelope_sha256,
    })
}

/// Whether a verified receipt is a probe's (its first event is `probe_start`).
pub fn is_probe_receipt(lines: &[Map<String, Value>]) -> bool {
    lines
        .first()
        .and_then(|l| l.get("type"))
        .and_then(Value::as_str)
        == Some("probe_start")
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
                Event::ProbeVerdict(v) if verdict.is_none() && i + 1 == records.len() => {
                    verdict = Some(v.clone())
                }
                other => {
                    return Err(format!(
                        "receipt line {}: a {} event has no place in a probe receipt",
                        i + 1,
                        other.kind()
                    ))
                }
            }
        }
        Ok(ProbeRecord {
            start: start.ok_or("the receipt does not start with probe_start")?,
            verdict: verdict
                .ok_or("the receipt does not end with probe_verdict: the probe did not finish")?,
            runs,
            run_keys,
        })
    }
}

/// The probe predicate: the bodies of its events exactly as the receipt holds them.
pub fn predicate(records: &[Recorded]) -> Result<Value, String> {
    ProbeRecord::of(records)?;
    let of_kind = |kind: &'static str| {
        records
            .iter()
            .filter(move |r| r.event.kind() == kind)
            .map(|r| Value::Object(statement::body(&r.line)))
    };
    let keys: Vec<Value> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::RunKey(k) => Some(Value::String(k.public_key.clone())),
            _ => None,
        })
        .collect();
    Ok(json!({
        "probe": of_kind("probe_start").next(),
        "run_keys": keys,
        "runs": of_kind("probe_run").collect::<Vec<_>>(),
        "verdict": of_kind("probe_verdict").next(),
    }))
}
