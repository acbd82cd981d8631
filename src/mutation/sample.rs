//! Choosing K of the generated mutants, deterministically from the run's seed: a partial
//! Fisher-Yates shuffle driven by ChaCha8 (whose stream is fixed by its specification, so the same
//! seed picks the same mutants on every host and loopexec version). The chosen mutants keep the
//! generator's order (file, then position), so a report reads top to bottom.

use rand_chacha::rand_core::{RngCore, SeedableRng};

use super::operators::Mutant;

/// A uniform index in `0..n` (`n > 0`), by rejection (no modulo bias).
fn below(rng: &mut rand_chacha::ChaCha8Rng, n: u64) -> u64 {
    let zone = u64::MAX - (u64::MAX % n);
    loop {
        let v = rng.next_u64();
        if v < zone {
            return v % n;
        }
    }
}

/// At most `k` of `mutants`, the same ones for the same seed and input.
pub fn sample(mutants: Vec<Mutant>, k: usize, seed: u64) -> Vec<Mutant> {
    if mutants.len() <= k {
        return mutants;
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..mutants.len()).collect();
    for i in 0..k {
        let j = i + below(&mut rng, (order.len() - i) as u64) as usize;
        order.swap(i, j);
    }
    let mut chosen: Vec<usize> = order[..k].to_vec();
    chosen.sort_unstable();
    let mut slots: Vec<Option<Mutant>> = mutants.into_iter().map(Some).collect();
    chosen.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// At most `k` mutants drawn from two strata: the agent's change and the code the tests failing
/// at t0 call. Half the sample (at least one) goes to the `t0_failure` stratum when it has
/// mutants, the rest to the change; a stratum with fewer mutants than its share leaves the rest
/// to the other. A mutant in both (the same edit) counts in `t0_failure` only.
pub fn stratified(
    change: Vec<Mutant>,
    t0_failure: Vec<Mutant>,
    k: usize,
    seed: u64,
) -> Vec<(Mutant, super::Stratum)> {
    let same = |a: &Mutant, b: &Mutant| {
        a.path == b.path && a.start == b.start && a.end == b.end && a.replacement == b.replacement
    };
    let change: Vec<Mutant> = change
        .into_iter()
        .filter(|m| !t0_failure.iter().any(|t| same(m, t)))
        .collect();
    let want_t0 = if t0_failure.is_empty() {
        0
    } else {
        (k / 2).max(1)
    };
    let k_change = change
        .len()
        .min(k.saturating_sub(want_t0.min(t0_failure.len())));
    let k_t0 = t0_failure.len().min(k - k_change);
    let mut out: Vec<(Mutant, super::Stratum)> = sample(change, k_change, seed)
        .into_iter()
        .map(|m| (m, super::Stratum::Change))
        .collect();
    out.extend(
        sample(t0_failure, k_t0, seed ^ 0x7430_6661_696c)
            .into_iter()
            .map(|m| (m, super::Stratum::T0Failure)),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutation::Operator;

    fn numbered(n: usize) -> Vec<Mutant> {
        (0..n)
            .map(|i| Mutant {
                path: "a.py".into(),
                line: i as u32 + 1,
                operator: Operator::BooleanLiteral,
                start: i,
                end: i + 1,
                original: "x".into(),
                replacement: "y".into(),
            })
            .collect()
    }

    #[test]
    fn a_stratified_sample_gives_half_to_the_code_t0_failed_on() {
        let mut t0 = numbered(10);
        for m in &mut t0 {
            m.path = "b.py".into();
        }
        let chosen = stratified(numbered(10), t0, 8, 3);
        let count = |s: crate::mutation::Stratum| chosen.iter().filter(|(_, x)| *x == s).count();
        assert_eq!(
            (
                count(crate::mutation::Stratum::Change),
                count(crate::mutation::Stratum::T0Failure)
            ),
            (4, 4)
        );
    }

    #[test]
    fn a_short_stratum_leaves_its_share_to_the_other() {
        let mut t0 = numbered(1);
        t0[0].path = "b.py".into();
        let chosen = stratified(numbered(10), t0, 8, 3);
        assert_eq!(
            chosen
                .iter()
                .filter(|(_, s)| *s == crate::mutation::Stratum::T0Failure)
                .count(),
            1
        );
        assert_eq!(chosen.len(), 8);
        assert_eq!(stratified(Vec::new(), numbered(10), 8, 3).len(), 8);
    }

    #[test]
    fn an_edit_in_both_strata_is_counted_once_in_t0_failure() {
        let chosen = stratified(numbered(1), numbered(1), 8, 3);
        assert_eq!(
            chosen.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
            vec![crate::mutation::Stratum::T0Failure]
        );
    }

    fn lines(m: &[Mutant]) -> Vec<u32> {
        m.iter().map(|m| m.line).collect()
    }

    #[test]
    fn the_same_seed_picks_the_same_mutants() {
        assert_eq!(
            lines(&sample(numbered(50), 5, 7)),
            lines(&sample(numbered(50), 5, 7))
        );
    }

    #[test]
    fn another_seed_picks_other_mutants() {
        assert_ne!(
            lines(&sample(numbered(50), 5, 7)),
            lines(&sample(numbered(50), 5, 8))
        );
    }

    #[test]
    fn k_distinct_mutants_are_picked_in_file_order() {
        let picked = lines(&sample(numbered(50), 10, 1));
        assert_eq!(picked.len(), 10);
        assert!(picked.windows(2).all(|w| w[0] < w[1]), "{picked:?}");
    }

    #[test]
    fn fewer_mutants_than_k_are_all_kept() {
        assert_eq!(lines(&sample(numbered(3), 10, 1)), vec![1, 2, 3]);
    }
}
