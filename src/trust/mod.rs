//! Oracle trust: whether a check can be looped on. This module owns the statistics behind
//! `probe-check` and the in-loop stability monitor (how many runs certify a flake-rate bound, the
//! exact bound those runs reached, the sequential stability bound), the perturbation plans, the
//! probe runs on throwaway copies in exec zones, doctor's gates over them, and their results on
//! record (`record`: the signed probe receipt).
pub mod determinism;
pub mod gates;
pub mod perturb;
pub mod pins;
pub mod probe;
pub mod record;
pub mod runner;
pub mod stats;
pub mod zone_run;
