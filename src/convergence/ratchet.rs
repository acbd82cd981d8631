//! The no-regression ratchet: an iteration is accepted only if it keeps every test the last
//! accepted iteration passed, and (when the loop names a score) its score is not below the best
//! accepted score by more than the configured band. A rejected iteration is reverted by the
//! caller to the last accepted snapshot; this module only decides, and says why.

use super::TestSet;
use serde::Serialize;

/// The accepted frontier so far: what the last accepted iteration passed and the best score.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Frontier {
    /// The iteration accepted last (0: the baseline t0).
    pub iteration: u64,
    pub passing: TestSet,
    pub best_score: Option<f64>,
}

/// Why an iteration was not accepted.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Rejection {
    /// Tests the frontier passed that this iteration does not pass.
    LostTests { lost: Vec<String> },
    /// The score fell below the best accepted score by more than the band.
    ScoreBelowBest { score: f64, best: f64, band: f64 },
    /// The loop names a score but this iteration's check did not produce one.
    ScoreMissing,
}

/// The ratchet's decision on one candidate iteration.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Accepted(Frontier),
    Rejected(Rejection),
}

/// Decide on `candidate_passing` (and `candidate_score`, when the loop names a score, with the
/// tolerated `band` below the best).
pub fn judge(
    frontier: &Frontier,
    iteration: u64,
    candidate_passing: &TestSet,
    candidate_score: Option<f64>,
    score_band: Option<f64>,
) -> Decision {
    let lost: Vec<String> = frontier
        .passing
        .difference(candidate_passing)
        .cloned()
        .collect();
    if !lost.is_empty() {
        return Decision::Rejected(Rejection::LostTests { lost });
    }
    let mut best_score = frontier.best_score;
    if let Some(band) = score_band {
        let Some(score) = candidate_score.filter(|s| s.is_finite()) else {
            return Decision::Rejected(Rejection::ScoreMissing);
        };
        if let Some(best) = frontier.best_score {
            if score < best - band {
                return Decision::Rejected(Rejection::ScoreBelowBest { score, best, band });
            }
        }
        best_score = Some(best_score.map_or(score, |b| b.max(score)));
    }
    Decision::Accepted(Frontier {
        iteration,
        passing: candidate_passing.clone(),
        best_score,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[&str]) -> TestSet {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn frontier(passing: &[&str], best: Option<f64>) -> Frontier {
        Frontier {
            iteration: 1,
            passing: set(passing),
            best_score: best,
        }
    }

    #[test]
    fn a_superset_of_the_frontier_is_accepted() {
        let d = judge(&frontier(&["a"], None), 2, &set(&["a", "b"]), None, None);
        assert_eq!(
            d,
            Decision::Accepted(Frontier {
                iteration: 2,
                passing: set(&["a", "b"]),
                best_score: None
            })
        );
    }

    #[test]
    fn a_fix_that_breaks_a_passing_test_is_rejected_naming_it() {
        let d = judge(
            &frontier(&["a", "b"], None),
            2,
            &set(&["b", "c"]),
            None,
            None,
        );
        assert_eq!(
            d,
            Decision::Rejected(Rejection::LostTests {
                lost: vec!["a".into()]
            })
        );
    }

    #[test]
    fn a_score_within_the_band_below_the_best_is_accepted_and_the_best_kept() {
        let d = judge(
            &frontier(&[], Some(0.90)),
            2,
            &set(&[]),
            Some(0.88),
            Some(0.05),
        );
        assert_eq!(
            d,
            Decision::Accepted(Frontier {
                iteration: 2,
                passing: set(&[]),
                best_score: Some(0.90)
            })
        );
    }

    #[test]
    fn a_score_below_the_band_is_rejected() {
        let d = judge(
            &frontier(&[], Some(0.90)),
            2,
            &set(&[]),
            Some(0.80),
            Some(0.05),
        );
        assert_eq!(
            d,
            Decision::Rejected(Rejection::ScoreBelowBest {
                score: 0.80,
                best: 0.90,
                band: 0.05
            })
        );
    }

    #[test]
    fn a_missing_or_non_finite_score_is_rejected_when_the_loop_names_one() {
        assert_eq!(
            judge(&frontier(&[], None), 2, &set(&[]), None, Some(0.0)),
            Decision::Rejected(Rejection::ScoreMissing)
        );
        assert_eq!(
            judge(
                &frontier(&[], None),
                2,
                &set(&[]),
                Some(f64::NAN),
                Some(0.0)
            ),
            Decision::Rejected(Rejection::ScoreMissing)
        );
    }
}
