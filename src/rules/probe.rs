//! The verdict of a probe: the same check run many times on the same tree (some runs perturbed).
//! A run's *outcome* is its verdict class (pass, fail, could not run) and the digest of its
//! failing set; the probe *varies* when two runs' outcomes differ. Disagreeing runs are counted
//! against the modal outcome, the exact Clopper-Pearson bound is computed over all runs, and each
//! dimension whose runs disagreed is named, so the operator knows which way the check broke.

use super::stats::{flake_upper_bound, Confidence, FlakeRate, StatsError};
use crate::receipt::probe::{Dimension, RunClass};
use serde::Serialize;
use std::collections::BTreeMap;

/// What one run of the probe showed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Outcome {
    pub class: RunClass,
    /// Digest of the failing set (empty when the run had no report).
    pub failing_digest: String,
}

/// One run: which dimension it varied and what it showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeRun {
    pub run: u64,
    pub dimension: Option<Dimension>,
    pub outcome: Outcome,
}

/// Disagreements by what the run varied (`None`: an unperturbed run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Breakage {
    pub dimension: Option<Dimension>,
    pub runs: Vec<u64>,
}

impl Breakage {
    /// `order (runs 1,3)`: what broke the agreement, and in which runs.
    pub fn describe(&self) -> String {
        let runs = self
            .runs
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(",");
        format!(
            "{} (runs {runs})",
            self.dimension
                .map(|d| d.as_str())
                .unwrap_or("unperturbed runs")
        )
    }
}

/// The probe's conclusion.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum ProbeVerdict {
    /// Every run agreed and the bound reached the target.
    Certified,
    /// Every run agreed but too few ran for the target (`--runs` below what the target needs).
    NotCertified,
    /// Runs disagreed: `check_flaky`, with what broke it.
    Flaky { broken_by: Vec<Breakage> },
}

impl ProbeVerdict {
    /// The verdict's name as probe-check prints it and the probe receipt records it.
    pub fn name(&self) -> &'static str {
        match self {
            ProbeVerdict::Certified => "certified",
            ProbeVerdict::NotCertified => "not_certified",
            ProbeVerdict::Flaky { .. } => "varies",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeSummary {
    pub runs: u64,
    pub disagreeing: u64,
    /// The outcome most runs showed (ties: the first run's).
    pub modal: Outcome,
    pub flake_rate_bound: f64,
    pub target: f64,
    pub confidence: f64,
    #[serde(flatten)]
    pub verdict: ProbeVerdict,
}

/// Summarise the runs of a probe; `None` when no run was made.
pub fn summarise(
    runs: &[ProbeRun],
    target: FlakeRate,
    confidence: Confidence,
) -> Result<Option<ProbeSummary>, StatsError> {
    let Some(first) = runs.first() else {
        return Ok(None);
    };
    let mut counts: BTreeMap<&Outcome, u64> = BTreeMap::new();
    for r in runs {
        *counts.entry(&r.outcome).or_default() += 1;
    }
    let first_count = counts.get(&first.outcome).copied().unwrap_or(0);
    let modal = counts
        .iter()
        .filter(|(_, &c)| c > first_count)
        .max_by_key(|(_, &c)| c)
        .map(|(o, _)| (*o).clone())
        .unwrap_or_else(|| first.outcome.clone());
    let mut broken: BTreeMap<Option<Dimension>, Vec<u64>> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.outcome != modal) {
        broken.entry(r.dimension).or_default().push(r.run);
    }
    let disagreeing: u64 = broken.values().map(|v| v.len() as u64).sum();
    let bound = flake_upper_bound(disagreeing, runs.len() as u64, confidence)?;
    let verdict = if disagreeing > 0 {
        ProbeVerdict::Flaky {
            broken_by: broken
                .into_iter()
                .map(|(dimension, runs)| Breakage { dimension, runs })
                .collect(),
        }
    } else if bound <= target.get() {
        ProbeVerdict::Certified
    } else {
        ProbeVerdict::NotCertified
    };
    Ok(Some(ProbeSummary {
        runs: runs.len() as u64,
        disagreeing,
        modal,
        flake_rate_bound: bound,
        target: target.get(),
        confidence: confidence.get(),
        verdict,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(class: RunClass, digest: &str) -> Outcome {
        Outcome {
            class,
            failing_digest: digest.into(),
        }
    }

    fn runs(spec: &[(Option<Dimension>, RunClass, &str)]) -> Vec<ProbeRun> {
        spec.iter()
            .enumerate()
            .map(|(i, (dimension, class, digest))| ProbeRun {
                run: i as u64,
                dimension: *dimension,
                outcome: outcome(*class, digest),
            })
            .collect()
    }

    fn target() -> (FlakeRate, Confidence) {
        (
            FlakeRate::new(0.05).unwrap(),
            Confidence::new(0.95).unwrap(),
        )
    }

    #[test]
    fn fifty_nine_agreeing_runs_certify_five_percent() {
        let (t, c) = target();
        let r = runs(&vec![(None, RunClass::Pass, ""); 59]);
        let s = summarise(&r, t, c).unwrap().unwrap();
        assert_eq!(s.verdict, ProbeVerdict::Certified);
        assert!(s.flake_rate_bound <= 0.05);
    }

    #[test]
    fn too_few_agreeing_runs_are_not_certified_and_say_the_bound() {
        let (t, c) = target();
        let s = summarise(&runs(&vec![(None, RunClass::Pass, ""); 10]), t, c)
            .unwrap()
            .unwrap();
        assert_eq!(s.verdict, ProbeVerdict::NotCertified);
        assert!((s.flake_rate_bound - (1.0 - 0.05f64.powf(0.1))).abs() < 1e-12);
    }

    #[test]
    fn a_run_broken_by_one_dimension_names_it() {
        let (t, c) = target();
        let r = runs(&[
            (None, RunClass::Pass, ""),
            (Some(Dimension::Order), RunClass::Fail, "f1"),
            (Some(Dimension::Clock), RunClass::Pass, ""),
            (Some(Dimension::Order), RunClass::Pass, ""),
            (Some(Dimension::Clock), RunClass::Pass, ""),
        ]);
        let s = summarise(&r, t, c).unwrap().unwrap();
        assert_eq!(s.disagreeing, 1);
        assert_eq!(
            s.verdict,
            ProbeVerdict::Flaky {
                broken_by: vec![Breakage {
                    dimension: Some(Dimension::Order),
                    runs: vec![1]
                }]
            }
        );
    }

    #[test]
    fn a_different_failing_set_with_the_same_exit_class_is_a_disagreement() {
        let (t, c) = target();
        let r = runs(&[
            (None, RunClass::Fail, "a"),
            (None, RunClass::Fail, "a"),
            (None, RunClass::Fail, "b"),
        ]);
        let s = summarise(&r, t, c).unwrap().unwrap();
        assert_eq!(
            s.verdict,
            ProbeVerdict::Flaky {
                broken_by: vec![Breakage {
                    dimension: None,
                    runs: vec![2]
                }]
            }
        );
    }

    #[test]
    fn the_modal_outcome_wins_over_the_first_run() {
        let (t, c) = target();
        let r = runs(&[
            (None, RunClass::Fail, "x"),
            (None, RunClass::Pass, ""),
            (None, RunClass::Pass, ""),
        ]);
        let s = summarise(&r, t, c).unwrap().unwrap();
        assert_eq!(s.modal, outcome(RunClass::Pass, ""));
        assert_eq!(s.disagreeing, 1);
    }

    #[test]
    fn no_runs_no_summary() {
        let (t, c) = target();
        assert_eq!(summarise(&[], t, c).unwrap(), None);
    }
}
