//! Whether a probe receipt's conclusion follows from what it holds: its verdict, modal outcome,
//! bound and breakage recomputed from its runs (`super::probe::summarise`, `super::stats`), each
//! of doctor's gates from its recorded evidence, and the halt from the gates. `verify`, `report`
//! and `explain-halt` reach the conclusion the probe printed this way, without running anything;
//! a verdict or gate the runs do not give is named, never trusted.

use super::probe::{summarise, Outcome, ProbeRun, ProbeVerdict};
use super::stats::{Confidence, FlakeRate};
use crate::halt::HaltReason;
use crate::mutation::verdict::{score, Adequacy, MutantResult};
use crate::receipt::probe::{BreakageRecord, ProbeRecord, RunClass};
use serde_json::Value;

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
        return Err(format!(
            "probe_start says {} runs, the receipt holds {}, the verdict counts {}",
            start.runs,
            record.runs.len(),
            verdict.runs
        ));
    }
    let runs: Vec<ProbeRun> = record
        .runs
        .iter()
        .map(|r| ProbeRun {
            run: r.run,
            dimension: r.dimension,
            outcome: Outcome {
                class: r.class,
                failing_digest: r.failing_digest.clone(),
            },
        })
        .collect();
    let summary = summarise(&runs, target, confidence)
        .map_err(|e| e.to_string())?
        .ok_or("the probe holds no run")?;
    let broken: Vec<BreakageRecord> = match &summary.verdict {
        ProbeVerdict::Flaky { broken_by } => broken_by
            .iter()
            .map(|b| BreakageRecord {
                dimension: b.dimension,
                runs: b.runs.clone(),
            })
            .collect(),
        _ => Vec::new(),
    };
    let name = summary.verdict.name();
    if verdict.verdict != name
        || verdict.disagreeing != summary.disagreeing
        || verdict.broken_by != broken
    {
        return Err(format!(
            "the runs give {name} with {} disagreeing (broken by {:?}); the receipt says {} with {} (broken by {:?})",
            summary.disagreeing, broken, verdict.verdict, verdict.disagreeing, verdict.broken_by
        ));
    }
    if (verdict.modal_class, verdict.modal_failing_digest.as_str())
        != (summary.modal.class, summary.modal.failing_digest.as_str())
    {
        return Err("the recorded modal outcome is not the one most runs showed".into());
    }
    if !close(verdict.flake_rate_bound, summary.flake_rate_bound) {
        return Err(format!(
            "the runs bound the flake rate at {}, the receipt says {}",
            summary.flake_rate_bound, verdict.flake_rate_bound
        ));
    }
    let flaky = matches!(summary.verdict, ProbeVerdict::Flaky { .. });
    let mut detail = format!(
        "{name}: {} runs, {} disagreeing, bound {:.6} at confidence {}",
        summary.runs, summary.disagreeing, summary.flake_rate_bound, start.confidence
    );
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
            detail.push_str(&format!(
                "; {} gate(s) recomputed from their evidence",
                gates.len() - unchecked.len()
            ));
            if !unchecked.is_empty() {
                detail.push_str(&format!(
                    " ({} as recorded: not recomputable offline)",
                    unchecked.join(", ")
                ));
            }
            first_failed
        }
    };
    if halt != verdict.halt_reason {
        return Err(format!(
            "the runs give the halt {:?}, the receipt says {:?}",
            halt.map(HaltReason::as_str),
            verdict.halt_reason.map(HaltReason::as_str)
        ));
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
        Some("failed") => serde_json::from_value(gate["reason"].clone())
            .map(GateShown::Failed)
            .map_err(|_| format!("gate {name}: a failed verdict without a known reason")),
        _ => Err(format!("gate {name}: no verdict")),
    }
}

/// Whether a recorded run outcome (`{class, failing_digest}`) differs from the modal one.
fn differs(run: &Value, modal: &Outcome) -> Result<bool, String> {
    let class: RunClass = serde_json::from_value(run["class"].clone())
        .map_err(|_| format!("a gate run without a class: {run}"))?;
    Ok(class != modal.class
        || run["failing_digest"].as_str() != Some(modal.failing_digest.as_str()))
}

/// What a gate's evidence gives (None: the gate is not recomputable offline, e.g. `isolation`).
fn expected_gate(
    name: &str,
    gate: &Value,
    flaky: bool,
    modal: &Outcome,
) -> Result<Option<GateShown>, String> {
    let evidence = &gate["evidence"];
    let runs_differ = |key: &str, reason: HaltReason| -> Result<Option<GateShown>, String> {
        if flaky {
            return Ok(Some(GateShown::Inconclusive));
        }
        if differs(&evidence["reference"], modal)? {
            return Err(format!(
                "gate {name}: its reference is not the determinism runs' modal outcome"
            ));
        }
        let runs = evidence[key]
            .as_array()
            .ok_or_else(|| format!("gate {name}: no {key} in its evidence"))?;
        let mut changed = false;
        for run in runs {
            changed |= differs(run, modal)?;
        }
        Ok(Some(if changed {
            GateShown::Failed(reason)
        } else {
            GateShown::Passed
        }))
    };
    match name {
        "determinism" => Ok(Some(if flaky {
            GateShown::Failed(HaltReason::CheckFlaky)
        } else {
            GateShown::Passed
        })),
        "hermeticity" => runs_differ("runs", HaltReason::CheckNotHermetic),
        "side_effects" => runs_differ("same_copy_runs", HaltReason::CheckHasSideEffects),
        "adequacy" => {
            let Some(mutants) = evidence.get("mutants") else {
                return Ok(Some(GateShown::Inconclusive));
            };
            let results: Vec<MutantResult> = serde_json::from_value(mutants.clone())
                .map_err(|e| format!("gate adequacy: its mutants do not read: {e}"))?;
            Ok(Some(match score(&results).verdict {
                Adequacy::Adequate => GateShown::Passed,
                Adequacy::Inadequate => GateShown::Failed(HaltReason::CheckInadequate),
                _ => GateShown::Inconclusive,
            }))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_gate_verdict_its_evidence_contradicts_is_named() {
        let modal = Outcome {
            class: RunClass::Pass,
            failing_digest: String::new(),
        };
        let gate = json!({"gate": "hermeticity", "verdict": "passed", "evidence": {
            "reference": {"class": "pass", "failing_digest": ""},
            "runs": [{"class": "pass", "failing_digest": ""}, {"class": "fail", "failing_digest": "x"}]}});
        assert_eq!(
            expected_gate("hermeticity", &gate, false, &modal).unwrap(),
            Some(GateShown::Failed(HaltReason::CheckNotHermetic))
        );
        assert_eq!(recorded_gate(&gate).unwrap(), GateShown::Passed);
    }
}
