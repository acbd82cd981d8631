//! The decision rules: pure functions of recorded data (no I/O, no zones, no clock). The engine
//! decides with them live; `verify`, `run --resume`, `explain-halt` and `report` decide with the
//! same functions from the receipt, so a halt is replayed, never trusted.
//!
//! This layer depends on the record (`crate::receipt`'s event types and history) and the pure
//! modules below it, never on the engine, the zones or the verifier above it.
//!
//! - [`mode`]: what the loop drives towards.
//! - [`verdict`]: pass / fail / disagrees / could-not-run of a recorded check (the 126/127 rule).
//! - [`decide`]: the halt decision over an iteration's record.
//! - [`budget`]: run-total spend, the projection, the caps, the cost anomaly and model drift over the recorded usage.
//! - [`judgements`]: the recorded judgements (progress, set guard, evidence, confirmations, t0, the canary) recomputed.
//! - [`derive`]: whether a recorded halt follows from the recorded observations (verdicts replayed, not trusted).
//! - [`judge`]: the halt a judged green comes to, from the recorded answer.
//! - [`hermeticity`]: a check of the agent's work that tried to reach beyond its zone, unlike t0's, halts.
//! - [`holdout`]: a success the held-out check did not find green does not stand.
//! - [`canary`]: the guard the adequacy canary's recorded outcome gives (uncovered lines, the mutants' verdict).
//! - [`task_list`]: the task_list mode's next task, its halts, and what a task run's halt means for the plan.
//! - [`targets`]: the tests a run must fix, selected from t0, and the success rule of a red check.
//! - [`progress`]: the ratchet's acceptance and the no-convergence rules over the failing sets.
//! - [`set_guards`]: the set guard, a green check's collected and skipped sets against t0's.
//! - [`baseline`]: a success on t0 and the confirmations it stands on.
//! - [`stats`]: the exact bounds of oracle trust (runs to certify, Clopper-Pearson, Wilson).
//! - [`probe`]: the verdict of a probe's runs (certified, not certified, varies, and what broke it).
//! - [`probe_replay`]: whether a probe receipt's verdict and gates follow from its runs and evidence.

pub mod baseline;
pub mod budget;
pub mod canary;
pub mod comprehension;
pub mod decide;
pub mod derive;
pub mod hermeticity;
pub mod holdout;
pub mod judge;
pub mod judgements;
pub mod mode;
pub mod probe;
pub mod probe_replay;
pub mod progress;
pub mod set_guards;
pub mod stats;
pub mod targets;
pub mod task_list;
pub mod verdict;
