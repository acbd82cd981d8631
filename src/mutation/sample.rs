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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutation::Operator;

    fn numbered(n: usize) -> Vec<Mutant> {
        (0..n)
            .map(|i| Mutant { path: "a.py".into(), line: i as u32 + 1, operator: Operator::BooleanLiteral, start: i, end: i + 1, original: "x".into(), replacement: "y".into() })
            .collect()
    }

    fn lines(m: &[Mutant]) -> Vec<u32> {
        m.iter().map(|m| m.line).collect()
    }

    #[test]
    fn the_same_seed_picks_the_same_mutants() {
        assert_eq!(lines(&sample(numbered(50), 5, 7)), lines(&sample(numbered(50), 5, 7)));
    }

    #[test]
    fn another_seed_picks_other_mutants() {
        assert_ne!(lines(&sample(numbered(50), 5, 7)), lines(&sample(numbered(50), 5, 8)));
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
