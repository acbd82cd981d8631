//! Convergence: is the loop arriving? This module owns the progress rules of a `check_fixpoint`
//! run, computed only from the trajectory of observed test sets, never from the agent's words:
//! - [`ratchet`]: whether an iteration is accepted (its passing set keeps every test the last
//!   accepted iteration passed, and its score is not below the best beyond a band);
//! - [`rules`]: the no-convergence halts (`no_progress_detected`, `same_failure_repeated`,
//!   `oscillation_detected`, `same_test_regressed`, `unsatisfiable_constraints`), each with its
//!   evidence;
//! - [`signature`]: the failure signature, normalised so timings, addresses and temp paths do not
//!   make two identical failures look different.
//!
//! Everything here is a pure function of its inputs, so a live run, a resumed run and an offline
//! `explain-halt` over the receipt reach the same conclusion.
pub mod ratchet;
pub mod rules;
pub mod signature;
pub mod verdict;

use std::collections::BTreeSet;

/// A set of test ids, as the report parsers name them.
pub type TestSet = BTreeSet<String>;

/// What one iteration's check showed about the loop's targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub iteration: u64,
    /// Targets (tests the loop must fix) failing after this iteration.
    pub failing_targets: TestSet,
    /// Every test that passed.
    pub passing: TestSet,
    /// Every test that failed (targets or not).
    pub failing: TestSet,
    /// The normalised failure signature of this iteration (see [`signature::of_failures`]).
    pub signature: String,
    /// Whether the ratchet accepted this iteration.
    pub accepted: bool,
}
