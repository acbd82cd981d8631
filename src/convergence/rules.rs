//! The no-convergence halts, computed from the trajectory of observations (the baseline t0, then
//! every iteration in order, accepted or not). Each rule returns its evidence when it fires.
//!
//! Every observation starts from a state: the baseline for the first, then the last accepted
//! observation (a rejected iteration is reverted, so the next one starts from the frontier again).
//! A test *regresses* when it passed in the start state and fails in the observation; it is
//! *fixed* when it failed in the start state and passes.
//!
//! When several rules fire on the same observation, the most specific wins, in this order:
//! `unsatisfiable_constraints`, `oscillation_detected`, `same_test_regressed`,
//! `same_failure_repeated`, `no_progress_detected`.

use super::{Observation, TestSet};
use crate::halt::HaltReason;
use serde::Serialize;
use std::collections::BTreeMap;

/// The parameters of the rules (loop.toml `[progress]`, documented in docs/progress.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// `no_progress_detected`: accepted iterations in a row without a new best (fewest failing
    /// targets so far, the baseline included).
    pub no_progress_k: usize,
    /// `same_failure_repeated`: observations in a row with the same failure signature.
    pub same_failure_n: usize,
    /// `same_test_regressed`: regressions of one test.
    pub regressed_n: usize,
    /// `unsatisfiable_constraints`: cycles of "fixing A breaks B, fixing B breaks A".
    pub unsatisfiable_cycles: usize,
    /// `oscillation_detected` on or off.
    pub oscillation: bool,
    /// The no-regression ratchet on or off. Off: every judged iteration is accepted (nothing is
    /// reverted), so each starts from the one before and the rules see the whole trajectory
    /// (the only way `unsatisfiable_constraints` can be observed; docs/progress.md).
    pub ratchet: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            no_progress_k: 3,
            same_failure_n: 3,
            regressed_n: 2,
            unsatisfiable_cycles: 2,
            oscillation: true,
            ratchet: true,
        }
    }
}

/// Why a rule fired: the evidence recorded in the receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Finding {
    UnsatisfiableConstraints {
        a: String,
        b: String,
        a_fixed_broke_b: Vec<u64>,
        b_fixed_broke_a: Vec<u64>,
    },
    OscillationDetected {
        iteration: u64,
        same_as: u64,
        failing: Vec<String>,
    },
    SameTestRegressed {
        test: String,
        regressed_at: Vec<u64>,
    },
    SameFailureRepeated {
        signature: String,
        iterations: Vec<u64>,
    },
    NoProgressDetected {
        best: usize,
        best_at: u64,
        since: Vec<(u64, usize)>,
    },
}

impl Finding {
    pub fn reason(&self) -> HaltReason {
        match self {
            Finding::UnsatisfiableConstraints { .. } => HaltReason::UnsatisfiableConstraints,
            Finding::OscillationDetected { .. } => HaltReason::OscillationDetected,
            Finding::SameTestRegressed { .. } => HaltReason::SameTestRegressed,
            Finding::SameFailureRepeated { .. } => HaltReason::SameFailureRepeated,
            Finding::NoProgressDetected { .. } => HaltReason::NoProgressDetected,
        }
    }

    /// One sentence for the halt's detail (test ids are data: the renderer escapes them).
    pub fn detail(&self) -> String {
        match self {
            Finding::UnsatisfiableConstraints { a, b, a_fixed_broke_b, b_fixed_broke_a } => format!(
                "fixing {a} broke {b} (iterations {}) and fixing {b} broke {a} (iterations {}): the constraints look contradictory",
                list(a_fixed_broke_b),
                list(b_fixed_broke_a)
            ),
            Finding::OscillationDetected { iteration, same_as, failing } => format!(
                "iteration {iteration} failed exactly as iteration {same_as} did ({} failing): the loop is going in circles",
                failing.len()
            ),
            Finding::SameTestRegressed { test, regressed_at } => {
                format!("{test} passed and then failed again {} times (iterations {})", regressed_at.len(), list(regressed_at))
            }
            Finding::SameFailureRepeated { iterations, .. } => {
                format!("the same failure repeated in {} iterations in a row ({})", iterations.len(), list(iterations))
            }
            Finding::NoProgressDetected { best, best_at, since } => format!(
                "no new best in {} accepted iterations: fewest failing targets is still {best} (iteration {best_at})",
                since.len()
            ),
        }
    }
}

fn list(iterations: &[u64]) -> String {
    iterations
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Evaluate every rule on the trajectory ending with its last observation.
pub fn evaluate(
    baseline: &Observation,
    trajectory: &[Observation],
    limits: &Limits,
) -> Option<Finding> {
    let transitions = transitions(baseline, trajectory);
    unsatisfiable(&transitions, limits)
        .or_else(|| oscillation(baseline, trajectory, limits))
        .or_else(|| regressed(&transitions, limits))
        .or_else(|| same_failure(trajectory, limits))
        .or_else(|| no_progress(baseline, trajectory, limits))
}

/// What one observation changed relative to the state it started from.
struct Transition {
    iteration: u64,
    fixed: TestSet,
    regressed: TestSet,
}

fn transitions(baseline: &Observation, trajectory: &[Observation]) -> Vec<Transition> {
    let mut start = baseline;
    let mut out = Vec::with_capacity(trajectory.len());
    for obs in trajectory {
        out.push(Transition {
            iteration: obs.iteration,
            fixed: start.failing.intersection(&obs.passing).cloned().collect(),
            regressed: start.passing.intersection(&obs.failing).cloned().collect(),
        });
        if obs.accepted {
            start = obs;
        }
    }
    out
}

/// The first pair `(a, b)`, `a < b`, where fixing `a` broke `b` and fixing `b` broke `a` in at
/// least `unsatisfiable_cycles` transitions each. Tests are grouped by their signature (the
/// transitions that fixed them, those that broke them): two tests' counts depend on their
/// signatures only, so the pairs of signatures are judged, each by its smallest tests, instead
/// of every pair of tests (a failing set of thousands swapped back and forth would pair
/// millions).
fn unsatisfiable(transitions: &[Transition], limits: &Limits) -> Option<Finding> {
    if limits.unsatisfiable_cycles == 0 {
        return None;
    }
    // test -> (indices of the transitions that fixed it, of those that broke it), in order.
    let mut signatures: BTreeMap<&str, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
    for (i, t) in transitions.iter().enumerate() {
        for fixed in &t.fixed {
            signatures.entry(fixed.as_str()).or_default().0.push(i);
        }
        for broken in &t.regressed {
            signatures.entry(broken.as_str()).or_default().1.push(i);
        }
    }
    // signature -> its smallest test (the map is walked in test order, so the first one seen).
    let mut classes: BTreeMap<&(Vec<usize>, Vec<usize>), &str> = BTreeMap::new();
    for (test, signature) in &signatures {
        if !signature.0.is_empty() && !signature.1.is_empty() {
            classes.entry(signature).or_insert(test);
        }
    }
    let both = |fixed: &[usize], broke: &[usize]| -> Vec<u64> {
        fixed
            .iter()
            .filter(|i| broke.contains(i))
            .map(|&i| transitions[i].iteration)
            .collect()
    };
    let classes: Vec<(&(Vec<usize>, Vec<usize>), &str)> = classes.into_iter().collect();
    let mut found: Option<Finding> = None;
    for (i, (one, x)) in classes.iter().enumerate() {
        for (other, y) in &classes[i + 1..] {
            let (a, b, sa, sb) = if x < y {
                (*x, *y, one, other)
            } else {
                (*y, *x, other, one)
            };
            if let Some(Finding::UnsatisfiableConstraints { a: fa, b: fb, .. }) = &found {
                if (fa.as_str(), fb.as_str()) <= (a, b) {
                    continue;
                }
            }
            let a_broke_b = both(&sa.0, &sb.1);
            let b_broke_a = both(&sb.0, &sa.1);
            if a_broke_b.len().min(b_broke_a.len()) >= limits.unsatisfiable_cycles {
                found = Some(Finding::UnsatisfiableConstraints {
                    a: a.to_string(),
                    b: b.to_string(),
                    a_fixed_broke_b: a_broke_b,
                    b_fixed_broke_a: b_broke_a,
                });
            }
        }
    }
    found
}

fn oscillation(
    baseline: &Observation,
    trajectory: &[Observation],
    limits: &Limits,
) -> Option<Finding> {
    let (last, earlier) = trajectory.split_last()?;
    if !limits.oscillation || last.failing.is_empty() {
        return None;
    }
    // The most recent earlier observation (or t0) that failed exactly as the last one, with a
    // different failing set somewhere in between.
    let states: Vec<&Observation> = std::iter::once(baseline).chain(earlier.iter()).collect();
    let mut differed = false;
    for obs in states.iter().rev() {
        if obs.failing == last.failing {
            if differed {
                return Some(Finding::OscillationDetected {
                    iteration: last.iteration,
                    same_as: obs.iteration,
                    failing: last.failing.iter().cloned().collect(),
                });
            }
        } else {
            differed = true;
        }
    }
    None
}

fn regressed(transitions: &[Transition], limits: &Limits) -> Option<Finding> {
    if limits.regressed_n == 0 {
        return None;
    }
    let mut by_test: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for t in transitions {
        for test in &t.regressed {
            by_test.entry(test.as_str()).or_default().push(t.iteration);
        }
    }
    let last = transitions.last()?;
    // Fire on the observation that reached the limit, for a test it regressed.
    last.regressed.iter().find_map(|test| {
        let at = by_test.get(test.as_str())?;
        (at.len() >= limits.regressed_n).then(|| Finding::SameTestRegressed {
            test: test.clone(),
            regressed_at: at.clone(),
        })
    })
}

fn same_failure(trajectory: &[Observation], limits: &Limits) -> Option<Finding> {
    let n = limits.same_failure_n;
    if n < 2 || trajectory.len() < n {
        return None;
    }
    let tail = &trajectory[trajectory.len() - n..];
    let first = &tail[0];
    let repeated = !first.failing.is_empty()
        && tail
            .iter()
            .all(|o| o.signature == first.signature && !o.failing.is_empty());
    repeated.then(|| Finding::SameFailureRepeated {
        signature: first.signature.clone(),
        iterations: tail.iter().map(|o| o.iteration).collect(),
    })
}

fn no_progress(
    baseline: &Observation,
    trajectory: &[Observation],
    limits: &Limits,
) -> Option<Finding> {
    if limits.no_progress_k == 0 {
        return None;
    }
    let mut best = (baseline.failing_targets.len(), baseline.iteration);
    let mut since: Vec<(u64, usize)> = Vec::new();
    for obs in trajectory.iter().filter(|o| o.accepted) {
        let count = obs.failing_targets.len();
        if count < best.0 {
            best = (count, obs.iteration);
            since.clear();
        } else {
            since.push((obs.iteration, count));
        }
    }
    let last_is_accepted = trajectory.last().is_some_and(|o| o.accepted);
    (last_is_accepted && best.0 > 0 && since.len() >= limits.no_progress_k).then_some(
        Finding::NoProgressDetected {
            best: best.0,
            best_at: best.1,
            since,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[&str]) -> TestSet {
        ids.iter().map(|s| s.to_string()).collect()
    }

    /// An observation over the universe {a, b, c, d}: `failing` fail, the rest pass; every
    /// failing test is a target; the signature is the failing set itself.
    fn obs(iteration: u64, failing: &[&str], accepted: bool) -> Observation {
        let universe = set(&["a", "b", "c", "d"]);
        let failing = set(failing);
        Observation {
            iteration,
            failing_targets: failing.clone(),
            passing: universe.difference(&failing).cloned().collect(),
            signature: failing.iter().cloned().collect::<Vec<_>>().join(","),
            failing,
            accepted,
        }
    }

    fn rule(trajectory: &[Observation], baseline: &Observation) -> Option<HaltReason> {
        evaluate(baseline, trajectory, &Limits::default()).map(|f| f.reason())
    }

    #[test]
    fn a_shrinking_failing_set_fires_nothing() {
        let t0 = obs(0, &["a", "b", "c"], true);
        let t = [obs(1, &["a", "b"], true), obs(2, &["a"], true)];
        assert_eq!(rule(&t, &t0), None);
    }

    #[test]
    fn three_accepted_iterations_without_a_new_best_is_no_progress() {
        let t0 = obs(0, &["a", "b"], true);
        let t = [
            obs(1, &["a"], true),
            obs(2, &["a"], true),
            obs(3, &["b"], true),
            obs(4, &["a"], true),
        ];
        let finding = evaluate(
            &t0,
            &t,
            &Limits {
                same_failure_n: 0,
                oscillation: false,
                ..Limits::default()
            },
        );
        assert_eq!(
            finding,
            Some(Finding::NoProgressDetected {
                best: 1,
                best_at: 1,
                since: vec![(2, 1), (3, 1), (4, 1)]
            })
        );
    }

    #[test]
    fn no_progress_counts_only_accepted_iterations() {
        let t0 = obs(0, &["a", "b"], true);
        let t = [
            obs(1, &["a"], true),
            obs(2, &["c"], false),
            obs(3, &["a"], true),
        ];
        let limits = Limits {
            same_failure_n: 0,
            oscillation: false,
            regressed_n: 0,
            ..Limits::default()
        };
        assert_eq!(evaluate(&t0, &t, &limits), None);
    }

    #[test]
    fn the_same_signature_three_times_in_a_row_is_same_failure_repeated() {
        let t0 = obs(0, &["a", "b"], true);
        let t = [
            obs(1, &["a"], true),
            obs(2, &["a"], true),
            obs(3, &["a"], true),
        ];
        assert_eq!(
            evaluate(&t0, &t, &Limits::default()),
            Some(Finding::SameFailureRepeated {
                signature: "a".into(),
                iterations: vec![1, 2, 3]
            })
        );
    }

    #[test]
    fn a_failing_set_that_comes_back_is_oscillation() {
        let t0 = obs(0, &["a"], true);
        let t = [obs(1, &["b"], true), obs(2, &["a"], true)];
        assert_eq!(
            evaluate(&t0, &t, &Limits::default()),
            Some(Finding::OscillationDetected {
                iteration: 2,
                same_as: 0,
                failing: vec!["a".into()]
            })
        );
    }

    #[test]
    fn an_unchanged_failing_set_is_not_oscillation() {
        let t0 = obs(0, &["a", "b"], true);
        let t = [obs(1, &["a"], true), obs(2, &["a"], true)];
        assert_eq!(rule(&t, &t0), None);
    }

    #[test]
    fn a_test_that_regresses_twice_is_same_test_regressed() {
        // c passes at t0; iterations 1 and 3 break it (rejected, reverted), 2 does something else.
        let t0 = obs(0, &["a", "b"], true);
        let t = [
            obs(1, &["b", "c"], false),
            obs(2, &["b"], true),
            obs(3, &["c"], false),
        ];
        let limits = Limits {
            unsatisfiable_cycles: 0,
            oscillation: false,
            ..Limits::default()
        };
        assert_eq!(
            evaluate(&t0, &t, &limits),
            Some(Finding::SameTestRegressed {
                test: "c".into(),
                regressed_at: vec![1, 3]
            })
        );
    }

    #[test]
    fn fixing_a_breaks_b_and_fixing_b_breaks_a_twice_is_unsatisfiable() {
        // From t0 {a, b failing}: fix a (accepted), then fixing b breaks a (rejected, reverted to
        // {b failing}), ... and from {a failing} states fixing a breaks b.
        let t0 = obs(0, &["a", "b"], true);
        let t = [
            obs(1, &["b"], true),      // a fixed
            obs(2, &["a"], false),     // b fixed, a broken (start {b})
            obs(3, &["a"], false),     // again
            obs(4, &["a", "b"], true), // back to both failing (accepted: lost nothing)
            obs(5, &["b"], true),      // a fixed
        ];
        // Only one direction so far: not unsatisfiable.
        let limits = Limits {
            oscillation: false,
            regressed_n: 0,
            same_failure_n: 0,
            no_progress_k: 0,
            ..Limits::default()
        };
        assert_eq!(evaluate(&t0, &t, &limits), None);
        let mut t = t.to_vec();
        // From {b failing}: fixing b breaks a is seen twice; now from {a failing} fixing a breaks b.
        t.push(obs(6, &["a"], false));
        t.push(obs(7, &["a", "b"], true));
        t.push(obs(8, &["a"], true));
        t.push(obs(9, &["b"], false)); // a fixed, b broken (start {a})
        t.push(obs(10, &["b"], false)); // again
        assert_eq!(
            evaluate(&t0, &t, &limits),
            Some(Finding::UnsatisfiableConstraints {
                a: "a".into(),
                b: "b".into(),
                a_fixed_broke_b: vec![9, 10],
                b_fixed_broke_a: vec![2, 3, 6],
            })
        );
    }

    #[test]
    fn a_passing_iteration_fires_nothing() {
        let t0 = obs(0, &["a"], true);
        let t = [
            obs(1, &["a"], true),
            obs(2, &["a"], true),
            obs(3, &[], true),
        ];
        assert_eq!(rule(&t, &t0), None);
    }

    /// The definition `unsatisfiable` implements: every pair of tests, counted.
    fn unsatisfiable_pairwise(transitions: &[Transition], cycles: usize) -> Option<Finding> {
        let mut broke: BTreeMap<(&str, &str), Vec<u64>> = BTreeMap::new();
        for t in transitions {
            for fixed in &t.fixed {
                for broken in &t.regressed {
                    broke
                        .entry((fixed.as_str(), broken.as_str()))
                        .or_default()
                        .push(t.iteration);
                }
            }
        }
        broke.iter().find_map(|(&(a, b), a_broke_b)| {
            let b_broke_a = broke.get(&(b, a))?;
            (a < b && a_broke_b.len().min(b_broke_a.len()) >= cycles).then(|| {
                Finding::UnsatisfiableConstraints {
                    a: a.to_string(),
                    b: b.to_string(),
                    a_fixed_broke_b: a_broke_b.clone(),
                    b_fixed_broke_a: b_broke_a.clone(),
                }
            })
        })
    }

    #[test]
    fn unsatisfiable_by_signatures_finds_what_every_pair_counted_finds() {
        // Deterministic pseudo-random trajectories over 8 tests: failing sets, acceptance.
        let names: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
        let mut seed = 0x9e37_79b9_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut found = 0;
        for _ in 0..400 {
            let observation = |iteration: u64, bits: u64, accepted: bool| {
                let failing: TestSet = names
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| bits & (1 << i) != 0)
                    .map(|(_, n)| n.clone())
                    .collect();
                Observation {
                    iteration,
                    failing_targets: failing.clone(),
                    passing: names
                        .iter()
                        .filter(|n| !failing.contains(*n))
                        .cloned()
                        .collect(),
                    signature: String::new(),
                    failing,
                    accepted,
                }
            };
            let t0 = observation(0, next() % 256, true);
            let trajectory: Vec<Observation> = (1..=(2 + next() % 7))
                .map(|n| observation(n, next() % 256, next() % 2 == 0))
                .collect();
            let transitions = transitions(&t0, &trajectory);
            for cycles in 1..=3 {
                let limits = Limits {
                    unsatisfiable_cycles: cycles,
                    ..Limits::default()
                };
                let expected = unsatisfiable_pairwise(&transitions, cycles);
                found += usize::from(expected.is_some());
                assert_eq!(unsatisfiable(&transitions, &limits), expected);
            }
        }
        assert!(
            found > 50,
            "the trajectories exercise the rule ({found} findings)"
        );
    }
}
