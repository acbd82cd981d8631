//! The statistics of oracle trust, each an exact, documented formula (docs/oracle-trust.md):
//! - the number of clean runs that certify a flake-rate bound at a confidence,
//! - the one-sided Clopper-Pearson upper bound on the flake rate after `failures` of `runs`,
//! - the one-sided Wilson lower bound on stability (agreeing samples of all samples).
//!
//! Inputs are validated once, into [`Confidence`] and [`FlakeRate`], so a bad flag is refused at the
//! command line with the offending value named, never turned into a NaN downstream.

use statrs::distribution::{Beta, ContinuousCDF, Normal};

/// The default flake-rate target and confidence (5% at 95%: 59 clean runs).
pub const DEFAULT_MAX_FLAKE_RATE: f64 = 0.05;
pub const DEFAULT_CONFIDENCE: f64 = 0.95;

/// A value outside the range a parameter admits.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    #[error("confidence {0} is outside (0, 1): give e.g. 0.95")]
    Confidence(f64),
    #[error(
        "flake rate {0} is outside (0, 1): give e.g. 0.05 (a rate of 0 needs infinitely many runs)"
    )]
    FlakeRate(f64),
    #[error("{failures} failures in {runs} runs: failures cannot exceed runs")]
    Counts { failures: u64, runs: u64 },
}

/// A probability strictly between 0 and 1, validated once; `refuse` names which parameter it is.
macro_rules! open_unit_interval {
    ($(#[$doc:meta])* $name:ident, $refuse:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub struct $name(f64);

        impl $name {
            pub fn new(value: f64) -> Result<Self, StatsError> {
                if value.is_finite() && value > 0.0 && value < 1.0 {
                    Ok($name(value))
                } else {
                    Err($refuse(value))
                }
            }

            pub fn get(self) -> f64 {
                self.0
            }
        }
    };
}

open_unit_interval!(
    /// A confidence level strictly between 0 and 1.
    Confidence,
    StatsError::Confidence
);
open_unit_interval!(
    /// A flake-rate target strictly between 0 and 1.
    FlakeRate,
    StatsError::FlakeRate
);

/// The one-sided upper bound on the flake rate after zero failures in `runs` runs:
/// `1 - (1 - C)^(1/n)` (the Clopper-Pearson bound at k = 0). `runs = 0` bounds nothing (1).
pub fn clean_runs_bound(runs: u64, confidence: Confidence) -> f64 {
    if runs == 0 {
        return 1.0;
    }
    1.0 - (1.0 - confidence.get()).powf(1.0 / runs as f64)
}

/// The fewest clean runs whose bound is at most `target` at `confidence`: the smallest n with
/// `1 - (1 - C)^(1/n) <= R`, i.e. `n = ceil(ln(1 - C) / ln(1 - R))` (59 runs for 5% at 95%).
pub fn runs_to_certify(target: FlakeRate, confidence: Confidence) -> u64 {
    let estimate = ((1.0 - confidence.get()).ln() / (1.0 - target.get()).ln()).ceil();
    let mut runs = if estimate.is_finite() && estimate >= 1.0 {
        estimate as u64
    } else {
        1
    };
    // The closed form is exact in real arithmetic; step over the floating-point edge either way.
    while runs > 1 && clean_runs_bound(runs - 1, confidence) <= target.get() {
        runs -= 1;
    }
    while clean_runs_bound(runs, confidence) > target.get() {
        runs += 1;
    }
    runs
}

/// The exact one-sided (Clopper-Pearson) upper bound on the flake rate after `failures` disagreeing
/// runs of `runs`: the `C` quantile of Beta(k + 1, n - k); 1 when every run failed or none ran.
pub fn flake_upper_bound(
    failures: u64,
    runs: u64,
    confidence: Confidence,
) -> Result<f64, StatsError> {
    if failures > runs {
        return Err(StatsError::Counts { failures, runs });
    }
    if runs == 0 || failures == runs {
        return Ok(1.0);
    }
    if failures == 0 {
        return Ok(clean_runs_bound(runs, confidence));
    }
    let beta = Beta::new((failures + 1) as f64, (runs - failures) as f64)
        .map_err(|_| StatsError::Counts { failures, runs })?;
    Ok(beta.inverse_cdf(confidence.get()))
}

/// The one-sided Wilson score lower bound on stability after `stable` agreeing samples of
/// `samples`, at `confidence` (z is the standard normal's `C` quantile). No samples: 0.
pub fn stability_lower_bound(
    stable: u64,
    samples: u64,
    confidence: Confidence,
) -> Result<f64, StatsError> {
    if stable > samples {
        return Err(StatsError::Counts {
            failures: stable,
            runs: samples,
        });
    }
    if samples == 0 {
        return Ok(0.0);
    }
    let z = standard_normal_quantile(confidence);
    let n = samples as f64;
    let p = stable as f64 / n;
    let z2 = z * z;
    let centre = p + z2 / (2.0 * n);
    let margin = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Ok(((centre - margin) / (1.0 + z2 / n)).max(0.0))
}

fn standard_normal_quantile(confidence: Confidence) -> f64 {
    match Normal::new(0.0, 1.0) {
        Ok(normal) => normal.inverse_cdf(confidence.get()),
        // Normal::new(0, 1) cannot fail; a bound of infinity would make every bound trivial.
        Err(_) => f64::INFINITY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(value: f64) -> Confidence {
        Confidence::new(value).unwrap()
    }
    fn r(value: f64) -> FlakeRate {
        FlakeRate::new(value).unwrap()
    }

    #[test]
    fn fifty_nine_clean_runs_certify_five_percent_at_ninety_five() {
        assert_eq!(runs_to_certify(r(0.05), c(0.95)), 59);
        assert!(clean_runs_bound(59, c(0.95)) <= 0.05);
        assert!(clean_runs_bound(58, c(0.95)) > 0.05);
    }

    #[test]
    fn two_hundred_ninety_nine_clean_runs_certify_one_percent_at_ninety_five() {
        assert_eq!(runs_to_certify(r(0.01), c(0.95)), 299);
    }

    #[test]
    fn clean_runs_bound_of_fifty_nine_runs_is_the_closed_form() {
        // 1 - 0.05^(1/59), computed independently (scipy.stats.beta.ppf(0.95, 1, 59)).
        assert!((clean_runs_bound(59, c(0.95)) - 0.049507609888227).abs() < 1e-12);
    }

    #[test]
    fn clopper_pearson_bound_of_two_failures_in_a_hundred_runs() {
        // scipy.stats.beta.ppf(0.95, 3, 98) = 0.06161920039604069
        let bound = flake_upper_bound(2, 100, c(0.95)).unwrap();
        assert!((bound - 0.06161920039604069).abs() < 1e-9, "{bound}");
    }

    #[test]
    fn clopper_pearson_at_zero_failures_equals_the_clean_runs_bound() {
        assert_eq!(
            flake_upper_bound(0, 59, c(0.95)).unwrap(),
            clean_runs_bound(59, c(0.95))
        );
    }

    #[test]
    fn every_run_failing_bounds_nothing() {
        assert_eq!(flake_upper_bound(7, 7, c(0.95)).unwrap(), 1.0);
        assert_eq!(flake_upper_bound(0, 0, c(0.95)).unwrap(), 1.0);
    }

    #[test]
    fn more_failures_than_runs_is_refused() {
        assert_eq!(
            flake_upper_bound(3, 2, c(0.95)),
            Err(StatsError::Counts {
                failures: 3,
                runs: 2
            })
        );
    }

    #[test]
    fn wilson_lower_bound_of_twenty_clean_samples_at_ninety_five() {
        // statsmodels proportion_confint(20, 20, alpha=0.10, method="wilson")[0]
        let bound = stability_lower_bound(20, 20, c(0.95)).unwrap();
        assert!((bound - 0.8808421626390355).abs() < 1e-9, "{bound}");
    }

    #[test]
    fn wilson_lower_bound_of_nine_of_ten_at_ninety_five() {
        // statsmodels proportion_confint(9, 10, alpha=0.10, method="wilson")[0] = 0.6522813326641415
        let bound = stability_lower_bound(9, 10, c(0.95)).unwrap();
        assert!((bound - 0.6522813326641415).abs() < 1e-9, "{bound}");
    }

    #[test]
    fn confidence_outside_the_open_unit_interval_is_refused() {
        for bad in [0.0, 1.0, -0.1, 1.5, f64::NAN] {
            assert!(
                matches!(Confidence::new(bad), Err(StatsError::Confidence(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn flake_rate_of_zero_or_one_is_refused() {
        for bad in [0.0, 1.0, 2.0, f64::INFINITY] {
            assert!(
                matches!(FlakeRate::new(bad), Err(StatsError::FlakeRate(_))),
                "{bad}"
            );
        }
    }
}
