//! Oracle trust: whether a check can be looped on. This module owns the statistics behind
//! `probe-check` and the in-loop stability monitor (how many runs certify a flake-rate bound, the
//! exact bound those runs reached, the sequential stability bound). It decides nothing by itself:
//! callers feed it counts of agreeing and disagreeing runs.
pub mod perturb;
pub mod probe;
pub mod stats;
