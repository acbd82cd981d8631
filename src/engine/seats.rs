//! The typed seats of the loop: where the features that are still to come plug into the
//! pipeline, so that none of them has to reach into the loop itself.
//!
//! - [`Mode`]: what the loop drives towards. `decide` routes through it; today the only mode is
//!   `check_fixpoint` (iterate until the check passes). `task_list` (work through a list of
//!   tasks, one per iteration, halting `no_actionable_tasks`) will be a second variant with its
//!   own decision.
//! - [`Seat`]: which kind of guard sits behind the [`Guard`](super::guards::Guard) trait. Every
//!   guard judges at the trait's hooks (after the agent, after the check) and its objection is
//!   recorded in the receipt before the halt it causes. Today one guard exists (protected paths);
//!   the others are the seats the coming work fills: syntax-tree guards (`src/analysis/`) after
//!   the agent, the progress ratchet (failing/collected sets over the history) after the check,
//!   budgets (egress bytes, CPU time of each command's usage) after each command, and the judge
//!   (a third zone role reviewing the agent's step) after the check.

use serde::Serialize;

pub use crate::rules::mode::Mode;

/// The kind of a guard, as the receipt names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Seat {
    /// The agent changed a path the run protects (`blocked_path_modified`).
    ProtectedPaths,
    /// The agent's change weakened what the check measures: assertions, test items, the
    /// test-determining surface, module shadowing (`metric_integrity_violation`).
    MetricIntegrity,
    /// The agent's change added a tampering pattern (`reward_hacking_detected`).
    Tampering,
    /// A check that passed in place, where no guard could judge the change (`human_required`).
    InPlace,
    /// Production code the agent changed observes what can tell a test run from a real one: a
    /// green from it needs a review (`human_required`, or the judge's answer on each finding).
    Awareness,
}

impl Seat {
    pub fn as_str(self) -> &'static str {
        match self {
            Seat::ProtectedPaths => "protected_paths",
            Seat::MetricIntegrity => "metric_integrity",
            Seat::Tampering => "tampering",
            Seat::InPlace => "in_place",
            Seat::Awareness => "awareness",
        }
    }
}
