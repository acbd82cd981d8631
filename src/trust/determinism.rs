//! The determinism probe behind `probe-check` and doctor's determinism gate: plan the runs (as
//! many as certify the target, or `--runs`), run them on copies of the same tree, and summarise
//! whether they agreed, with the exact bound they reached and, when they did not, the
//! dimension(s) and runs that broke the agreement. Everything needed to reproduce the probe (its
//! seed, dimensions, each run's plan and outcome) is in the [`DeterminismProbe`] it returns.

use super::perturb::{plan, RunPlan};
use super::runner::{CheckTarget, RunMode};
use super::zone_run::ShownRun;
use crate::error::{CmdResult, Failure};
use crate::receipt::probe::Dimension;
use crate::rules::probe::{summarise, ProbeRun, ProbeSummary};
use crate::rules::stats::{runs_to_certify, Confidence, FlakeRate};
use serde::Serialize;

/// What the operator asked of a probe (flags over loop.toml over defaults).
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    pub target: FlakeRate,
    pub confidence: Confidence,
    /// `--runs`: overrides the number the target needs.
    pub runs: Option<u64>,
    pub dimensions: Vec<Dimension>,
    pub seed: u64,
    pub jobs: usize,
}

/// One run as the probe records it: its plan and what it showed.
#[derive(Debug, Clone, Serialize)]
pub struct RecordedRun {
    #[serde(flatten)]
    pub plan: RunPlan,
    #[serde(flatten)]
    pub shown: ShownRun,
    /// What the run's clock offset moved: CLOCK_MONOTONIC and CLOCK_BOOTTIME (and /proc/uptime)
    /// by this many seconds, in the check's own time namespace. Absent when nothing moved them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_offset_applied_s: Option<i64>,
}

/// A probe's record: settings, runs, summary.
#[derive(Debug, Clone, Serialize)]
pub struct DeterminismProbe {
    pub seed: u64,
    pub dimensions: Vec<Dimension>,
    pub jobs: usize,
    /// The clean runs the target needs at the confidence.
    pub runs_required: u64,
    pub summary: ProbeSummary,
    pub runs: Vec<RecordedRun>,
}

/// The default parallelism: the cores this process may use.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Run the determinism probe of `target`.
pub fn probe(target: &CheckTarget, settings: &ProbeSettings) -> CmdResult<DeterminismProbe> {
    probe_observed(target, settings, &|_, _| {})
}

/// [`probe`], telling `finished` as each run ends.
pub fn probe_observed(
    target: &CheckTarget,
    settings: &ProbeSettings,
    finished: super::runner::RunsFinished<'_>,
) -> CmdResult<DeterminismProbe> {
    let runs_required = runs_to_certify(settings.target, settings.confidence);
    let runs = settings.runs.unwrap_or(runs_required);
    if runs == 0 {
        return Err(Failure::usage("--runs must be at least 1"));
    }
    let plans = plan(runs, &settings.dimensions, settings.seed);
    let reports = super::runner::execute_observed(
        target,
        &plans,
        RunMode {
            no_network: false,
            repeat: 1,
        },
        settings.jobs,
        finished,
    )?;
    let mut recorded = Vec::with_capacity(reports.len());
    for (plan, report) in plans.into_iter().zip(reports) {
        let clock_offset_applied_s = report.clock_offset_applied_s;
        let shown = report
            .shown
            .into_iter()
            .next()
            .ok_or_else(|| Failure::internal("a probe run reported no check run"))?;
        recorded.push(RecordedRun {
            plan,
            shown,
            clock_offset_applied_s,
        });
    }
    let probe_runs: Vec<ProbeRun> = recorded
        .iter()
        .map(|r| ProbeRun {
            run: r.plan.run,
            dimension: r.plan.dimension,
            outcome: r.shown.outcome(),
        })
        .collect();
    let summary = summarise(&probe_runs, settings.target, settings.confidence)
        .map_err(|e| Failure::internal(e.to_string()))?
        .ok_or_else(|| Failure::internal("a probe made no run"))?;
    Ok(DeterminismProbe {
        seed: settings.seed,
        dimensions: settings.dimensions.clone(),
        jobs: settings.jobs,
        runs_required,
        summary,
        runs: recorded,
    })
}
