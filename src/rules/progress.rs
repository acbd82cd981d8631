//! The progress stage of an iteration: after its check, the ratchet's acceptance and the
//! no-convergence rules ([`crate::convergence`]) over the trajectory of failing sets the receipt
//! recorded, as one `progress` event. A pure function of the run's [`History`], so the live loop,
//! a resumed run and an offline reader reach the same judgement.
//!
//! Only checks whose reports named their tests (a collected and a failing set) are observed; an
//! iteration without them is not judged (progress cannot be measured from an exit code) and
//! leaves the frontier where it was. The rules and the ratchet start from t0 as the
//! `check_baseline` event measured it; where it did not (no baseline, or its check named no
//! tests), the first judged iteration stands in for t0: the rules start from it, and the ratchet
//! accepts it.
//!
//! With targets ([`Targets`], selected from t0) the tests already failing at t0 that are not
//! targets are removed from every set judged (they neither block nor count), the failing targets
//! are the targets among the failing tests, and a red check failing only on those pre-existing
//! failures, with every target and t0 pass passing, is recorded `targets_met` (success).

use super::targets::Targets;
use super::verdict::{evidence_gaps, evidence_whole, Verdict};
use crate::convergence::ratchet::{self, Decision, Frontier, Rejection};
use crate::convergence::rules::{self, Limits};
use crate::convergence::{signature, Observation, TestSet};
use crate::halt::HaltReason;
use crate::receipt::events::{CheckResult, Direction, ProgressRecord, ProgressScore};
use crate::receipt::history::{History, IterationRecord};
use std::collections::BTreeMap;

/// What the ratchet needs of the score declaration.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
pub struct ScoreRule {
    pub direction: Direction,
    pub band: f64,
}

impl ScoreRule {
    /// `value` oriented so that higher is better.
    pub fn oriented(&self, value: f64) -> f64 {
        match self.direction {
            Direction::Higher => value,
            Direction::Lower => -value,
        }
    }
}

/// At most this many test ids are listed in a `progress` event's lists; each list cut is
/// followed by `<name>_count`, its exact length (the receipt stays bounded).
const LISTED_IDS: usize = 50;

/// `value` (an object) with every list longer than [`LISTED_IDS`] cut, and its count added.
fn bounded(value: serde_json::Value) -> serde_json::Value {
    let serde_json::Value::Object(mut fields) = value else {
        return value;
    };
    let long: Vec<String> = fields
        .iter()
        .filter(|(_, v)| v.as_array().is_some_and(|a| a.len() > LISTED_IDS))
        .map(|(k, _)| k.clone())
        .collect();
    for key in long {
        if let Some(serde_json::Value::Array(items)) = fields.get_mut(&key) {
            let count = items.len();
            items.truncate(LISTED_IDS);
            fields.insert(format!("{key}_count"), count.into());
        }
    }
    serde_json::Value::Object(fields)
}

/// What a check's report showed, when it named its tests: (passing, failing).
fn sets(check: &CheckResult) -> Option<(TestSet, TestSet)> {
    let collected: TestSet = check.collected_set.as_ref()?.iter().cloned().collect();
    let failing: TestSet = check.failing_set.as_ref()?.iter().cloned().collect();
    let skipped: TestSet = check.skipped_set.iter().flatten().cloned().collect();
    let passing = collected
        .difference(&failing)
        .filter(|t| !skipped.contains(*t))
        .cloned()
        .collect();
    Some((passing, failing))
}

/// The observation of `check`'s sets (`accepted` as judged then), the pre-existing failures
/// removed when the run has targets; its signature over the failing tests and the digests of
/// their excerpts the check recorded.
fn observation(
    iteration: u64,
    check: &CheckResult,
    targets: Option<&Targets>,
    accepted: bool,
) -> Option<Observation> {
    let (passing, failing) = sets(check)?;
    let (passing, failing, failing_targets) = match targets {
        Some(t) => (
            t.without_preexisting(&passing),
            t.without_preexisting(&failing),
            t.failing_targets(&failing),
        ),
        None => (passing, failing.clone(), failing),
    };
    let digests: BTreeMap<&str, &str> = check
        .failure_digests
        .iter()
        .flatten()
        .map(|d| (d.test.as_str(), d.sha256.as_str()))
        .collect();
    let signature = signature::of_failures(
        failing
            .iter()
            .map(|t| (t.as_str(), digests.get(t.as_str()).copied())),
    );
    Some(Observation {
        iteration,
        failing_targets,
        passing,
        failing,
        signature,
        accepted,
    })
}

/// The observation of one recorded iteration (`accepted` as judged then).
fn observe(
    record: &IterationRecord,
    targets: Option<&Targets>,
    accepted: bool,
) -> Option<Observation> {
    observation(record.iteration, record.check.as_ref()?, targets, accepted)
}

/// The earlier observations, in order, each with the acceptance its `progress` event recorded.
fn trajectory_before(
    history: &History,
    iteration: u64,
    targets: Option<&Targets>,
) -> Vec<Observation> {
    history
        .iterations
        .iter()
        .filter(|r| r.iteration < iteration)
        // An iteration the operator accepted by hand counts as accepted from then on.
        .filter_map(|r| {
            observe(
                r,
                targets,
                r.progress.as_ref()?.accepted || history.accepted_by_hand(r.iteration),
            )
        })
        .collect()
}

/// t0 as the `check_baseline` event measured it (iteration 0, accepted), when its sets were.
fn t0(history: &History, targets: Option<&Targets>) -> Option<Observation> {
    observation(0, &history.check_baseline.as_ref()?.check, targets, true)
}

/// The frontier the earlier observations left: the last accepted one (none yet: t0, or nothing
/// when t0 was not measured).
fn frontier_of(t0: Option<&Observation>, trajectory: &[Observation]) -> Frontier {
    t0.into_iter()
        .chain(trajectory.iter())
        .rev()
        .find(|o| o.accepted)
        .map(|o| Frontier {
            iteration: o.iteration,
            passing: o.passing.clone(),
            best_score: None,
        })
        .unwrap_or_default()
}

/// Judge iteration `iteration` of `history` (its check recorded) under the run's target
/// `patterns`: `None` when its check named no tests.
pub fn judge(
    history: &History,
    iteration: u64,
    limits: &Limits,
    patterns: &[String],
) -> Option<ProgressRecord> {
    judge_scored(history, iteration, limits, patterns, None)
}

/// [`judge`], with the loop's declared score (`engine::score`, [`ScoreRule`]): see [`scored`].
pub fn judge_scored(
    history: &History,
    iteration: u64,
    limits: &Limits,
    patterns: &[String],
    score: Option<ScoreRule>,
) -> Option<ProgressRecord> {
    let record = history
        .iterations
        .iter()
        .rev()
        .find(|r| r.iteration == iteration)?;
    let check = record.check.as_ref()?;
    let targets = Targets::of_history(history, patterns);
    let met_by_sets = match (&targets, Verdict::of_check(check), sets(check)) {
        (Some(t), Verdict::Fail, Some((passing, failing))) => t.met(&passing, &failing),
        _ => false,
    };
    // The met targets of a red check stand only on whole evidence: the gate a green passes.
    let targets_met = met_by_sets && evidence_whole(check);
    let mut trajectory = trajectory_before(history, iteration, targets.as_ref());
    let candidate = observe(record, targets.as_ref(), false)?;
    let t0 = t0(history, targets.as_ref());
    let mut frontier = frontier_of(t0.as_ref(), &trajectory);
    let (candidate_score, band, progress_score) =
        scored(history, iteration, check, score, &mut frontier);
    // With the ratchet off (`[progress] ratchet = false`) every judged iteration is kept.
    let (accepted, rejection, frontier_at) = match ratchet::judge(
        &frontier,
        iteration,
        &candidate.passing,
        candidate_score,
        band,
    ) {
        _ if !limits.ratchet => (true, None, iteration),
        Decision::Accepted(next) => (true, None, next.iteration),
        Decision::Rejected(why) => (
            false,
            serde_json::to_value(as_declared(why, score))
                .ok()
                .map(bounded),
            frontier.iteration,
        ),
    };
    let failing_targets = candidate.failing_targets.len() as u64;
    trajectory.push(Observation {
        accepted,
        ..candidate
    });
    // The rules judge a red check only: a green one (or one that met the targets) ends the run.
    let finding = match (Verdict::of_check(check), &t0, trajectory.split_first()) {
        _ if met_by_sets => None,
        (Verdict::Fail, Some(t0), _) => rules::evaluate(t0, &trajectory, limits),
        (Verdict::Fail, None, Some((start, rest))) if !rest.is_empty() => {
            rules::evaluate(start, rest, limits)
        }
        _ => None,
    };
    Some(ProgressRecord {
        iteration,
        failing_targets,
        accepted,
        rejection,
        frontier: frontier_at,
        reverted_to_tree: None,
        halt_reason: match met_by_sets && !targets_met {
            true => Some(HaltReason::MetricIntegrityViolation),
            false => finding.as_ref().map(rules::Finding::reason),
        },
        detail: match met_by_sets && !targets_met {
            true => Some(unevidenced_targets(iteration, check)),
            false => finding.as_ref().map(rules::Finding::detail),
        },
        evidence: match met_by_sets && !targets_met {
            true => Some(bounded(
                serde_json::json!({"rule": UNEVIDENCED_TARGETS, "gaps": evidence_gaps(check)}),
            )),
            false => finding
                .as_ref()
                .and_then(|f| serde_json::to_value(f).ok())
                .map(bounded),
        },
        targets_met,
        score: progress_score,
    })
}

/// The `progress` evidence's rule name when a red check's sets met the targets on evidence with
/// gaps (`metric_integrity_violation`).
pub const UNEVIDENCED_TARGETS: &str = "targets_met_on_incomplete_evidence";

/// The halt detail of a red check whose sets meet the targets but whose evidence has gaps: the
/// first gaps and how many more (`crate::rules::verdict::named_gaps`, as a green's disagreement).
fn unevidenced_targets(iteration: u64, check: &CheckResult) -> String {
    format!(
        "the check exited {} at iteration {iteration} and its sets show every target passing, but its evidence is not whole: {}; \
         met targets count only on whole evidence, as a green does",
        check.check_exit.map_or("-".to_string(), |c| c.to_string()),
        super::verdict::named_gaps(check)
    )
}

/// Whether `progress` refused met targets for the gaps in the check's evidence.
pub fn refused_unevidenced_targets(progress: &ProgressRecord) -> bool {
    progress
        .evidence
        .as_ref()
        .and_then(|e| e.get("rule"))
        .and_then(|r| r.as_str())
        == Some(UNEVIDENCED_TARGETS)
}

/// The score part of judging `check` (iteration `iteration`) under the declared `rule`: the
/// candidate's score and the band for the ratchet (both oriented so that higher is better; none
/// when the check reported no score: a red check without one is judged on its tests alone, a
/// green one is the score guard's), the frontier's best set to the best accepted score before
/// it, and the record for the `progress` event.
fn scored(
    history: &History,
    iteration: u64,
    check: &CheckResult,
    rule: Option<ScoreRule>,
    frontier: &mut Frontier,
) -> (Option<f64>, Option<f64>, Option<ProgressScore>) {
    let Some(rule) = rule else {
        return (None, None, None);
    };
    let value = check.score.as_ref().and_then(|s| s.value);
    // A hand acceptance resets the best to the accepted iteration's score (it is the frontier).
    let since = history
        .hand_accepted
        .iter()
        .map(|(a, _)| a.iteration)
        .filter(|n| *n < iteration)
        .max()
        .unwrap_or(0);
    let best = history
        .iterations
        .iter()
        .filter(|r| r.iteration >= since && r.iteration < iteration && history.ratchet_kept(r))
        .filter_map(|r| r.check.as_ref()?.score.as_ref()?.value)
        .map(|v| rule.oriented(v))
        .reduce(f64::max);
    frontier.best_score = best;
    let record = ProgressScore {
        score: value,
        best: best.map(|b| rule.oriented(b)),
        band: rule.band,
        direction: rule.direction,
    };
    (
        value.map(|v| rule.oriented(v)),
        value.map(|_| rule.band),
        Some(record),
    )
}

/// A rejection with its scores as the check reported them (the ratchet saw them oriented).
fn as_declared(why: Rejection, rule: Option<ScoreRule>) -> Rejection {
    match (why, rule) {
        (Rejection::ScoreBelowBest { score, best, band }, Some(rule)) => {
            Rejection::ScoreBelowBest {
                score: rule.oriented(score),
                best: rule.oriented(best),
                band,
            }
        }
        (other, _) => other,
    }
}

/// |F_i|: failing targets at t0 (when measured) and after each iteration the ratchet accepted,
/// in order. Empty when no check named its tests.
pub fn accepted_trajectory(history: &History) -> Vec<(u64, usize)> {
    let judged: Vec<(u64, usize)> = history
        .iterations
        .iter()
        .filter(|r| history.ratchet_kept(r))
        .filter_map(|r| {
            r.progress
                .as_ref()
                .map(|p| (r.iteration, p.failing_targets as usize))
        })
        .collect();
    match t0(
        history,
        Targets::of_history(history, &super::targets::pinned_patterns(history)).as_ref(),
    ) {
        Some(t0) if !judged.is_empty() => std::iter::once((0, t0.failing_targets.len()))
            .chain(judged)
            .collect(),
        _ => judged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::halt::HaltReason;
    use crate::receipt::events::{sample, Event};

    /// An iteration whose report collected {a, b, c, d} with `failing` failing (exit 1 unless
    /// nothing fails).
    fn checked(history: &mut History, iteration: u64, failing: &[&str]) {
        let Event::CheckResult(mut check) =
            sample::check_result(iteration, if failing.is_empty() { 0 } else { 1 })
        else {
            unreachable!()
        };
        check.collected_set = Some(["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect());
        check.failing_set = Some(failing.iter().map(|s| s.to_string()).collect());
        check.skipped_set = None;
        history.iterations.push(IterationRecord {
            iteration,
            check: Some(check),
            ..Default::default()
        });
    }

    fn step(
        history: &mut History,
        iteration: u64,
        failing: &[&str],
        limits: &Limits,
    ) -> ProgressRecord {
        checked(history, iteration, failing);
        let judged = judge(history, iteration, limits, &[]).expect("a report was recorded");
        history.iterations.last_mut().unwrap().progress = Some(judged.clone());
        judged
    }

    #[test]
    fn the_halt_on_met_targets_with_ten_thousand_gaps_names_twenty_and_counts_the_rest() {
        let Event::CheckResult(mut check) = sample::check_result(3, 1) else {
            unreachable!()
        };
        let disagreements = (0..10_000)
            .map(|i| crate::receipt::events::DisagreementRecord {
                kind: "unit_without_result".into(),
                subject: "stdout".into(),
                detail: format!("gap {i}"),
            })
            .collect();
        check.evidence = Some(crate::receipt::events::CheckEvidence {
            verdict: "red".into(),
            reports: vec![],
            sources: vec![],
            disagreements,
        });
        let named: Vec<String> = (0..20).map(|i| format!("gap {i}")).collect();
        assert_eq!(
            unevidenced_targets(3, &check),
            format!(
                "the check exited 1 at iteration 3 and its sets show every target passing, but its evidence is not whole: {} (and 9980 more); \
                 met targets count only on whole evidence, as a green does",
                named.join("; ")
            )
        );
    }

    #[test]
    fn an_iteration_that_breaks_a_passing_test_is_rejected_and_the_frontier_stays() {
        let mut h = History::default();
        let limits = Limits::default();
        assert!(step(&mut h, 1, &["a", "b"], &limits).accepted);
        let broke = step(&mut h, 2, &["b", "c"], &limits);
        assert!(!broke.accepted);
        assert_eq!(broke.frontier, 1);
        assert_eq!(
            broke.rejection,
            Some(serde_json::json!({"kind": "lost_tests", "lost": ["c"]}))
        );
    }

    #[test]
    fn the_same_failing_set_three_times_halts_same_failure_repeated_with_its_iterations() {
        let mut h = History::default();
        let limits = Limits::default();
        step(&mut h, 1, &["a", "b"], &limits);
        step(&mut h, 2, &["a"], &limits);
        step(&mut h, 3, &["a"], &limits);
        let third = step(&mut h, 4, &["a"], &limits);
        assert_eq!(third.halt_reason, Some(HaltReason::SameFailureRepeated));
        assert_eq!(
            third.evidence.unwrap()["iterations"],
            serde_json::json!([2, 3, 4])
        );
    }

    /// Iterations 1..=3 each failing `a` with the excerpt `excerpts[i]` (after `a`, `b` failing at 1).
    fn failing_a_with(excerpts: [&str; 3]) -> Option<HaltReason> {
        let mut h = History::default();
        let limits = Limits::default();
        step(&mut h, 1, &["a", "b"], &limits);
        let mut last = None;
        for (i, excerpt) in excerpts.iter().enumerate() {
            let n = i as u64 + 2;
            checked(&mut h, n, &["a"]);
            let digest = crate::receipt::events::FailureDigest {
                test: "a".into(),
                sha256: signature::excerpt_digest(excerpt),
            };
            h.iterations
                .last_mut()
                .unwrap()
                .check
                .as_mut()
                .unwrap()
                .failure_digests = Some(vec![digest]);
            let judged = judge(&h, n, &limits, &[]).unwrap();
            last = judged.halt_reason;
            h.iterations.last_mut().unwrap().progress = Some(judged);
        }
        last
    }

    #[test]
    fn the_same_test_failing_with_other_assertion_messages_is_not_the_same_failure() {
        assert_eq!(
            failing_a_with([
                "expected 1, got 2",
                "expected 1, got 3",
                "expected 1, got 4"
            ]),
            None
        );
    }

    #[test]
    fn the_same_message_with_other_timings_and_addresses_is_the_same_failure() {
        let halt = failing_a_with([
            "<X at 0x7f01> after 0.1s",
            "<X at 0x7f99> after 2.5s",
            "<X at 0x5501> after 9s",
        ]);
        assert_eq!(halt, Some(HaltReason::SameFailureRepeated));
    }

    /// Iterations failing `a` with the given scores (none: missing), judged under `rule`.
    fn scored_steps(scores: &[Option<f64>], rule: ScoreRule) -> Vec<ProgressRecord> {
        let mut h = History::default();
        let limits = Limits {
            same_failure_n: 0,
            no_progress_k: 0,
            ..Limits::default()
        };
        scores
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let n = i as u64 + 1;
                checked(&mut h, n, &["a"]);
                let record = crate::receipt::events::ScoreRecord {
                    source: "stdout".into(),
                    value: *value,
                    error: None,
                };
                h.iterations
                    .last_mut()
                    .unwrap()
                    .check
                    .as_mut()
                    .unwrap()
                    .score = Some(record);
                let judged = judge_scored(&h, n, &limits, &[], Some(rule)).unwrap();
                h.iterations.last_mut().unwrap().progress = Some(judged.clone());
                judged
            })
            .collect()
    }

    #[test]
    fn a_lower_is_better_score_that_rises_beyond_the_band_is_rejected_with_the_scores_as_reported()
    {
        let rule = ScoreRule {
            direction: Direction::Lower,
            band: 0.5,
        };
        let judged = scored_steps(&[Some(2.0), Some(2.4), Some(3.0)], rule);
        assert!(judged[0].accepted && judged[1].accepted);
        assert_eq!(
            judged[2].rejection,
            Some(
                serde_json::json!({"kind": "score_below_best", "score": 3.0, "best": 2.0, "band": 0.5})
            )
        );
    }

    #[test]
    fn after_a_hand_acceptance_the_best_score_is_the_accepted_iterations() {
        let rule = ScoreRule {
            direction: Direction::Higher,
            band: 0.0,
        };
        let mut h = History::default();
        let limits = Limits {
            same_failure_n: 0,
            no_progress_k: 0,
            ..Limits::default()
        };
        let step = |h: &mut History, n: u64, score: f64| {
            checked(h, n, &["a"]);
            let record = crate::receipt::events::ScoreRecord {
                source: "stdout".into(),
                value: Some(score),
                error: None,
            };
            h.iterations
                .last_mut()
                .unwrap()
                .check
                .as_mut()
                .unwrap()
                .score = Some(record);
            let judged = judge_scored(h, n, &limits, &[], Some(rule)).unwrap();
            h.iterations.last_mut().unwrap().progress = Some(judged.clone());
            judged
        };
        assert!(step(&mut h, 1, 0.9).accepted);
        assert!(!step(&mut h, 2, 0.7).accepted);
        let accept = crate::receipt::events::RatchetAcceptRecord {
            iteration: 2,
            tree_id: "t".into(),
            operator_key: "k".into(),
            signature: "s".into(),
        };
        h.hand_accepted.push((accept, 2));
        let third = step(&mut h, 3, 0.7);
        assert_eq!(
            (third.accepted, third.score.and_then(|s| s.best)),
            (true, Some(0.7))
        );
    }

    #[test]
    fn a_red_check_without_its_score_is_judged_on_its_tests_and_recorded_missing() {
        let rule = ScoreRule {
            direction: Direction::Higher,
            band: 0.0,
        };
        let judged = scored_steps(&[Some(1.0), None], rule);
        assert!(judged[1].accepted);
        let score = judged[1].score.as_ref().unwrap();
        assert_eq!((score.score, score.best), (None, Some(1.0)));
    }

    /// A `check_baseline` of `t0`, run (not read from a cache) in place.
    fn measured_t0(
        t0: crate::receipt::events::CheckResult,
    ) -> crate::receipt::events::CheckBaselineRecord {
        crate::receipt::events::CheckBaselineRecord {
            check: t0,
            tree_id: None,
            cache_key: None,
            cache_hit: false,
            cache_note: None,
            sets_unmeasured: None,
            inactive_guards: None,
        }
    }

    #[test]
    fn a_measured_t0_is_the_start_of_the_frontier_and_of_the_trajectory() {
        let mut h = History::default();
        checked(&mut h, 0, &["a", "b"]);
        let t0 = h.iterations.pop().unwrap().check.unwrap();
        h.check_baseline = Some(measured_t0(t0));
        let limits = Limits::default();
        let broke = step(&mut h, 1, &["a", "c"], &limits);
        assert_eq!((broke.accepted, broke.frontier), (false, 0));
        assert!(step(&mut h, 2, &["a"], &limits).accepted);
        assert_eq!(accepted_trajectory(&h), vec![(0, 2), (2, 1)]);
    }

    /// A history whose t0 failed `a` (the target, by default) and `b` (no pattern: both are
    /// targets unless `patterns` select `a` only), then iteration 1 failing only `b`, with the
    /// red check's evidence holding `gaps` (disagreement kinds).
    fn met_at_1_with(gaps: &[&str]) -> ProgressRecord {
        let mut h = History::default();
        checked(&mut h, 0, &["a", "b"]);
        let t0 = h.iterations.pop().unwrap().check.unwrap();
        h.check_baseline = Some(measured_t0(t0));
        checked(&mut h, 1, &["b"]);
        let check = h.iterations[0].check.as_mut().unwrap();
        check.evidence = Some(crate::receipt::events::CheckEvidence {
            verdict: "red".into(),
            reports: vec![],
            sources: vec![],
            disagreements: gaps
                .iter()
                .map(|k| crate::receipt::events::DisagreementRecord {
                    kind: k.to_string(),
                    subject: "output".into(),
                    detail: format!("{k} here"),
                })
                .collect(),
        });
        judge(&h, 1, &Limits::default(), &["a".into()]).expect("judged")
    }

    #[test]
    fn a_red_check_meeting_the_targets_on_whole_evidence_is_targets_met() {
        let judged = met_at_1_with(&[]);
        assert_eq!((judged.targets_met, judged.halt_reason), (true, None));
    }

    #[test]
    fn a_red_check_meeting_the_targets_on_evidence_with_gaps_halts_metric_integrity_violation() {
        for gaps in [
            &["report_incomplete"][..],
            &["output_truncated"],
            &["report_unusable", "report_contradicts_itself"],
        ] {
            let judged = met_at_1_with(gaps);
            assert_eq!(
                (judged.targets_met, judged.halt_reason),
                (false, Some(HaltReason::MetricIntegrityViolation)),
                "{gaps:?}"
            );
            assert!(refused_unevidenced_targets(&judged));
            let details: Vec<String> = gaps.iter().map(|k| format!("{k} here")).collect();
            assert_eq!(
                judged.detail.as_deref(),
                Some(format!("the check exited 1 at iteration 1 and its sets show every target passing, but its evidence is not whole: {}; met targets count only on whole evidence, as a green does", details.join("; ")).as_str())
            );
            assert_eq!(
                judged.evidence,
                Some(serde_json::json!({"rule": UNEVIDENCED_TARGETS, "gaps": details}))
            );
        }
    }

    #[test]
    fn with_the_ratchet_off_an_iteration_that_breaks_a_passing_test_is_kept_and_the_next_starts_from_it(
    ) {
        let mut h = History::default();
        let limits = Limits {
            ratchet: false,
            ..Limits::default()
        };
        step(&mut h, 1, &["a", "b"], &limits);
        let broke = step(&mut h, 2, &["b", "c"], &limits);
        assert_eq!(
            (broke.accepted, broke.rejection, broke.frontier),
            (true, None, 2)
        );
        assert!(step(&mut h, 3, &["b"], &limits).accepted);
        assert_eq!(accepted_trajectory(&h), vec![(1, 2), (2, 2), (3, 1)]);
    }

    #[test]
    fn long_lists_in_the_record_are_cut_and_counted() {
        let ids: Vec<String> = (0..60).map(|i| format!("t{i}")).collect();
        let cut = bounded(serde_json::json!({"kind": "lost_tests", "lost": ids}));
        assert_eq!(
            (
                cut["lost"].as_array().map(Vec::len),
                cut["lost_count"].as_u64()
            ),
            (Some(LISTED_IDS), Some(60))
        );
    }

    #[test]
    fn a_check_without_a_report_is_not_judged() {
        let mut h = History::default();
        checked(&mut h, 1, &["a"]);
        h.iterations[0].check.as_mut().unwrap().collected_set = None;
        assert_eq!(judge(&h, 1, &Limits::default(), &[]), None);
    }

    #[test]
    fn the_accepted_trajectory_skips_rejected_iterations() {
        let mut h = History::default();
        let limits = Limits {
            same_failure_n: 0,
            ..Limits::default()
        };
        step(&mut h, 1, &["a", "b", "c"], &limits);
        step(&mut h, 2, &["b", "c", "d"], &limits);
        step(&mut h, 3, &["b", "c"], &limits);
        assert_eq!(accepted_trajectory(&h), vec![(1, 3), (3, 2)]);
    }
}
