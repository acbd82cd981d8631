//! doctor's oracle gates: the preconditions a check must meet before a loop trusts it, each with
//! its own verdict and evidence. The gates run in [`oracle_gates`] order over one shared
//! [`GateContext`] (the check, the probe settings, and the determinism probe, made once):
//! - `determinism`: the determinism probe agreed (else `check_flaky`);
//! - `hermeticity`: the verdict does not change with the network removed, or with another
//!   environment, locale, working-directory path, time zone (else `check_not_hermetic`);
//! - `side_effects`: the check run twice in the same copy without a reset shows what it showed on a
//!   fresh copy both times (else `check_has_side_effects`). Fresh copies agreeing while a reused
//!   one changes is what tells side effects from flakiness; on a flaky check the gate cannot tell
//!   and says so.
//!
//! A further gate (the adequacy canary) is one more [`Gate`] in [`oracle_gates`].

use super::determinism::DeterminismProbe;
use super::perturb::{plan, RunPlan};
use super::runner::{execute, CheckTarget, RunMode};
use super::zone_run::ShownRun;
use crate::error::CmdResult;
use crate::halt::HaltReason;
use crate::receipt::probe::Dimension;
use crate::rules::probe::{Outcome, ProbeVerdict};
use serde::Serialize;
use serde_json::{json, Value};

/// What a gate concluded.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum GateVerdict {
    Passed,
    /// The check may not be looped on: the halt reason a loop would stop with, and why.
    Failed {
        reason: HaltReason,
        detail: String,
    },
    /// The gate could not decide (what it depends on failed first).
    Inconclusive {
        detail: String,
    },
}

/// One gate's result.
#[derive(Debug, Clone, Serialize)]
pub struct GateReport {
    pub gate: &'static str,
    #[serde(flatten)]
    pub verdict: GateVerdict,
    pub evidence: Value,
}

/// What every gate sees.
pub struct GateContext<'a> {
    pub target: &'a CheckTarget,
    pub determinism: &'a DeterminismProbe,
    pub seed: u64,
    pub jobs: usize,
}

impl GateContext<'_> {
    /// The outcome most determinism runs showed: what every other run is compared with.
    fn reference(&self) -> &Outcome {
        &self.determinism.summary.modal
    }

    fn deterministic(&self) -> bool {
        !matches!(self.determinism.summary.verdict, ProbeVerdict::Flaky { .. })
    }
}

/// One precondition of a loop on the check.
pub trait Gate {
    fn name(&self) -> &'static str;
    fn judge(&self, ctx: &GateContext<'_>) -> CmdResult<GateReport>;
}

/// The gates doctor runs, in order (the adequacy gate plugs in here).
pub fn oracle_gates() -> Vec<Box<dyn Gate>> {
    vec![
        Box::new(Determinism),
        Box::new(Hermeticity),
        Box::new(SideEffects),
    ]
}

/// Run every gate.
pub fn judge_all(ctx: &GateContext<'_>) -> CmdResult<Vec<GateReport>> {
    oracle_gates().iter().map(|g| g.judge(ctx)).collect()
}

/// The first gate that failed: the reason a loop on this check would not start.
pub fn first_failure(reports: &[GateReport]) -> Option<(HaltReason, String, &'static str)> {
    reports.iter().find_map(|r| match &r.verdict {
        GateVerdict::Failed { reason, detail } => Some((*reason, detail.clone(), r.gate)),
        _ => None,
    })
}

/// A gate that cannot decide because the check is not deterministic.
fn inconclusive(gate: &'static str, detail: &str) -> GateReport {
    GateReport {
        gate,
        verdict: GateVerdict::Inconclusive {
            detail: detail.into(),
        },
        evidence: Value::Null,
    }
}

fn shown_json(plan: &RunPlan, shown: &ShownRun) -> Value {
    json!({"run": plan.run, "dimension": plan.dimension, "env": plan.env, "cwd_suffix": plan.cwd_suffix,
           "class": shown.class, "failing_digest": shown.failing_digest, "exit_code": shown.exit_code})
}

pub struct Determinism;

impl Gate for Determinism {
    fn name(&self) -> &'static str {
        "determinism"
    }

    fn judge(&self, ctx: &GateContext<'_>) -> CmdResult<GateReport> {
        let s = &ctx.determinism.summary;
        let verdict = match &s.verdict {
            ProbeVerdict::Flaky { broken_by } => {
                let parts: Vec<String> = broken_by.iter().map(|b| b.describe()).collect();
                GateVerdict::Failed {
                    reason: HaltReason::CheckFlaky,
                    detail: format!(
                        "{} of {} runs on copies of the same tree disagreed; broken by {}",
                        s.disagreeing,
                        s.runs,
                        parts.join(", ")
                    ),
                }
            }
            _ => GateVerdict::Passed,
        };
        let evidence = json!({"runs": s.runs, "disagreeing": s.disagreeing, "flake_rate_bound": s.flake_rate_bound,
                              "target": s.target, "confidence": s.confidence, "seed": ctx.determinism.seed,
                              "dimensions": ctx.determinism.dimensions, "certified": matches!(s.verdict, ProbeVerdict::Certified)});
        Ok(GateReport {
            gate: self.name(),
            verdict,
            evidence,
        })
    }
}

pub struct Hermeticity;

impl Gate for Hermeticity {
    fn name(&self) -> &'static str {
        "hermeticity"
    }

    fn judge(&self, ctx: &GateContext<'_>) -> CmdResult<GateReport> {
        if !ctx.deterministic() {
            return Ok(inconclusive(
                self.name(),
                "the check is not deterministic on an unchanged environment",
            ));
        }
        // Run 0: only the network removed; then the environment (locale, HOME, path), the time zone.
        let mut plans = plan(
            3,
            &[Dimension::Env, Dimension::Clock],
            ctx.seed ^ 0x6865_726d,
        );
        // Hermeticity moves the time zone only: a check that reads the monotonic clock is the
        // determinism probe's `clock` finding, not a hermeticity one.
        plans.iter_mut().for_each(|p| p.clock_offset_s = None);
        let reports = execute(
            ctx.target,
            &plans,
            RunMode {
                no_network: true,
                repeat: 1,
            },
            ctx.jobs,
        )?;
        let mut broken = Vec::new();
        let mut runs = Vec::new();
        for (p, r) in plans.iter().zip(&reports) {
            let Some(shown) = r.shown.first() else {
                continue;
            };
            runs.push(shown_json(p, shown));
            if &shown.outcome() != ctx.reference() {
                broken.push(match p.dimension {
                    None => "the network removed".to_string(),
                    Some(d) => format!("the network removed and {}", moved(d)),
                });
            }
        }
        let verdict = if broken.is_empty() {
            GateVerdict::Passed
        } else {
            GateVerdict::Failed {
                reason: HaltReason::CheckNotHermetic,
                detail: format!("the verdict changed with {}", broken.join("; with ")),
            }
        };
        Ok(GateReport {
            gate: self.name(),
            verdict,
            evidence: json!({"reference": ctx.reference(), "runs": runs}),
        })
    }
}

fn moved(d: Dimension) -> &'static str {
    match d {
        Dimension::Env => "another locale, HOME and working-directory path",
        Dimension::Clock => "another time zone",
        Dimension::Order => "another test order",
        Dimension::Seed => "other random seeds",
        Dimension::Concurrency => "one CPU",
        Dimension::Load => "load beside it",
    }
}

pub struct SideEffects;

impl Gate for SideEffects {
    fn name(&self) -> &'static str {
        "side_effects"
    }

    fn judge(&self, ctx: &GateContext<'_>) -> CmdResult<GateReport> {
        if !ctx.deterministic() {
            return Ok(inconclusive(self.name(), "the check is not deterministic on fresh copies, so a change on a reused copy proves nothing"));
        }
        let plans = plan(1, &[], ctx.seed);
        let reports = execute(
            ctx.target,
            &plans,
            RunMode {
                no_network: false,
                repeat: 2,
            },
            1,
        )?;
        let shown = reports
            .into_iter()
            .next()
            .map(|r| r.shown)
            .unwrap_or_default();
        let changed = shown.iter().position(|s| &s.outcome() != ctx.reference());
        let verdict = match changed {
            None => GateVerdict::Passed,
            Some(i) => GateVerdict::Failed {
                reason: HaltReason::CheckHasSideEffects,
                detail: format!(
                    "run {} of the check in the same copy, without a reset, showed {:?} where every fresh copy showed {:?}: the check changes the tree it checks",
                    i + 1,
                    shown[i].class,
                    ctx.reference().class
                ),
            },
        };
        let runs: Vec<Value> = shown.iter().map(|s| json!({"class": s.class, "failing_digest": s.failing_digest, "exit_code": s.exit_code})).collect();
        Ok(GateReport {
            gate: self.name(),
            verdict,
            evidence: json!({"reference": ctx.reference(), "same_copy_runs": runs}),
        })
    }
}

/// The determinism probe of `target` and every gate over it.
pub fn run_gates(
    target: &CheckTarget,
    settings: &super::determinism::ProbeSettings,
) -> CmdResult<(DeterminismProbe, Vec<GateReport>)> {
    let determinism = super::determinism::probe(target, settings)?;
    let ctx = GateContext {
        target,
        determinism: &determinism,
        seed: settings.seed,
        jobs: settings.jobs,
    };
    let reports = judge_all(&ctx)?;
    Ok((determinism, reports))
}
