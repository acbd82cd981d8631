//! Oracle trust: whether a check can be looped on. This module owns the perturbation plans, the
//! probe runs on throwaway copies in exec zones, doctor's gates over them, and their results on
//! record (`record`: the signed probe receipt). The pure parts it decides with sit below it: the
//! statistics and the probe's verdict are `crate::rules::stats` and `crate::rules::probe`, the
//! receipt's types `crate::receipt::probe`.
pub mod determinism;
pub mod gates;
pub mod perturb;
pub mod pins;
pub mod record;
pub mod runner;
pub mod zone_run;
