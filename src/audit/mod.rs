//! The verifier: what `verify` checks of a sealed run, offline, from the run directory and the
//! operator's public key alone. It sits above the record (`crate::receipt`) and the decision
//! rules (`crate::rules`): it reads the one and replays the verdicts with the other; nothing below
//! it reaches up to it.
//!
//! - [`verify`]: the named checks of a run, in order.
//! - [`enforcement`]: what the zones' read-back enforcement evidence shows.
//! - [`attest`]: the operator's signature added to a run that verifies.
//! - [`tree_guards`]: `verify --repo`, the syntax-tree guards re-run on the recorded trees.
//! - [`judge`]: the judge's records read again from the run's artifacts.
//! - [`task_runs`]: a task_list run's task runs, each verified and matched to its checkpoint.
//! - [`probe`]: the checks of a probe receipt, and of the doctor receipt a run pinned.

pub mod attest;
pub mod enforcement;
pub mod judge;
pub mod probe;
pub mod task_runs;
pub mod tree_guards;
pub mod verify;
