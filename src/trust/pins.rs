//! The oracle-trust settings a loop file carries (`max_flake_rate`, `confidence`, `confirm_runs`,
//! `doctor`), before defaults: `probe-check` and `doctor --check` take their target from them
//! where no flag gives one.

/// loop.toml's trust keys, each unset unless the file sets it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrustPins {
    pub max_flake_rate: Option<f64>,
    pub confidence: Option<f64>,
    pub confirm_runs: Option<u64>,
    pub doctor: Option<bool>,
}
