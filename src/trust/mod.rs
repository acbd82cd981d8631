//! Oracle trust: whether a check can be looped on. This module owns the perturbation plans, the
//! probe runs on throwaway copies in exec zones, doctor's gates over them, and their results on
//! record (`record`: the signed probe receipt). The pure parts it decides with sit below it: the
//! statistics and the probe's verdict are `crate::rules::stats` and `crate::rules::probe`, the
//! receipt's types `crate::receipt::probe`.
//!
//! Nothing here reaches the engine: a probe run's process runs its check with the engine's check
//! runner (the engine's `probe_run`, started as `loopexec __probe-run`), and what the exec zone
//! needs of the engine's policies is handed in by the caller ([`runner::CheckTarget`]).
pub mod determinism;
pub mod gates;
pub mod perturb;
pub mod pins;
pub mod record;
pub mod runner;
pub mod zone_run;
