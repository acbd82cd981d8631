//! A probe's results on record: a `probe-check` or `doctor --check` turned into the events of its
//! signed receipt (`receipt::probe`) and written under the workdir's `.loopexec/probes/<id>/`.
//! The operator key is loaded before any check runs, so a probe that cannot be signed makes no run.

use super::determinism::DeterminismProbe;
use super::gates::GateReport;
use super::runner::CheckTarget;
use crate::error::CmdResult;
use crate::halt::HaltReason;
use crate::receipt::keys::OperatorKey;
use crate::receipt::probe::{
    self, BreakageRecord, ProbeRunRecord, ProbeStart, ProbeVerdictRecord, WrittenProbe,
};
use crate::receipt::store::StateDir;
use crate::rules::probe::ProbeVerdict;
use serde_json::Value;

/// What the probe's receipt says besides its determinism runs.
pub struct Conclusion<'a> {
    /// `probe-check` or `doctor`.
    pub command: &'static str,
    /// doctor's gates in order, the isolation preflight's first (`None`: probe-check).
    pub gates: Option<Vec<Value>>,
    pub halt_reason: Option<HaltReason>,
    pub exit_code: i32,
    pub target: &'a CheckTarget,
}

/// The isolation preflight as the first of doctor's gates (not recomputable offline: it is what
/// this host did).
pub fn isolation_gate(checked: bool) -> Value {
    let detail = if checked {
        "the isolation preflight passed"
    } else {
        "not checked (--isolation none)"
    };
    serde_json::json!({"gate": "isolation", "verdict": if checked { "passed" } else { "inconclusive" }, "detail": detail, "evidence": Value::Null})
}

/// The gates' reports as the receipt holds them.
pub fn gate_values(reports: &[GateReport]) -> Vec<Value> {
    reports
        .iter()
        .map(|r| serde_json::to_value(r).unwrap_or_default())
        .collect()
}

/// Write and seal the receipt of `probe`: returns where it is.
pub fn keep(
    statedir: &StateDir,
    operator: &OperatorKey,
    probe: &DeterminismProbe,
    conclusion: Conclusion<'_>,
) -> CmdResult<WrittenProbe> {
    let s = &probe.summary;
    let target = conclusion.target;
    let start = |probe_id: String| ProbeStart {
        probe_id,
        command: conclusion.command.to_string(),
        check: target.check.clone(),
        isolation: target.isolation.as_str().to_string(),
        check_policy: target.check_policy.clone(),
        check_timeout_ms: target.timeout_ms,
        reports: target.reports.clone(),
        seed: probe.seed,
        dimensions: probe.dimensions.clone(),
        jobs: probe.jobs,
        target: s.target,
        confidence: s.confidence,
        runs_required: probe.runs_required,
        runs: s.runs,
        loopexec_version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
    };
    let runs: Vec<ProbeRunRecord> = probe
        .runs
        .iter()
        .map(|r| ProbeRunRecord {
            run: r.plan.run,
            dimension: r.plan.dimension,
            class: r.shown.class,
            failing_digest: r.shown.failing_digest.clone(),
            failing_count: r.shown.failing_count,
            exit_code: r.shown.exit_code,
            duration_ms: r.shown.duration_ms,
            plan: serde_json::to_value(&r.plan).unwrap_or_default(),
        })
        .collect();
    let broken_by = match &s.verdict {
        ProbeVerdict::Flaky { broken_by } => broken_by
            .iter()
            .map(|b| BreakageRecord {
                dimension: b.dimension,
                runs: b.runs.clone(),
            })
            .collect(),
        _ => Vec::new(),
    };
    let verdict = ProbeVerdictRecord {
        verdict: s.verdict.name().to_string(),
        runs: s.runs,
        disagreeing: s.disagreeing,
        modal_class: s.modal.class,
        modal_failing_digest: s.modal.failing_digest.clone(),
        flake_rate_bound: s.flake_rate_bound,
        broken_by,
        gates: conclusion.gates,
        halt_reason: conclusion.halt_reason,
        exit_code: conclusion.exit_code,
    };
    probe::write(statedir, operator, start, &runs, &verdict)
}

/// What a `doctor = true` run's receipt records of the gates kept in `kept`: each gate's verdict
/// without its evidence (that stays in the doctor receipt), and the halt a failed gate decided.
pub fn preconditions_of(
    kept: &WrittenProbe,
    gates: &[Value],
    probe: &DeterminismProbe,
    halt_reason: Option<HaltReason>,
    detail: Option<String>,
) -> probe::PreconditionsRecord {
    let verdicts = gates
        .iter()
        .map(|g| {
            let mut v = g.as_object().cloned().unwrap_or_default();
            v.remove("evidence");
            Value::Object(v)
        })
        .collect();
    probe::PreconditionsRecord {
        probe_receipt: format!("{}/{}", probe::PROBES, kept.id),
        probe_id: kept.id.clone(),
        envelope_sha256: kept.envelope_sha256.clone(),
        gates: verdicts,
        runs: probe.summary.runs,
        flake_rate_bound: probe.summary.flake_rate_bound,
        halt_reason,
        detail,
    }
}
