//! The price table: loop.toml's `[metering.prices."<model>"]` (USD per million tokens, per token
//! class) and `[metering] check_cpu_usd_per_hour`, held as integers (nano-USD per million tokens,
//! micro-USD per CPU hour) so that turning a count into money is integer arithmetic: a u128
//! intermediate, rounded up to the next micro-USD once per priced quantity. A rate must be a
//! finite number >= 0 (and at most [`MAX_RATE_USD`]); anything else is refused naming its key.

use crate::receipt::usage::TokenCounts;
use std::collections::BTreeMap;

/// The largest rate accepted (USD per million tokens, or per CPU hour).
pub const MAX_RATE_USD: f64 = 1.0e6;

/// One model's prices, in nano-USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModelPrice {
    pub input: u128,
    pub output: u128,
    pub cache_read: u128,
    pub cache_write: u128,
}

/// A model's prices as loop.toml states them (USD per million tokens).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceEntry {
    pub input_usd_per_mtok: f64,
    pub output_usd_per_mtok: f64,
    #[serde(default)]
    pub cache_read_usd_per_mtok: Option<f64>,
    #[serde(default)]
    pub cache_write_usd_per_mtok: Option<f64>,
}

/// The run's price table and CPU rate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Prices {
    pub models: BTreeMap<String, ModelPrice>,
    /// Micro-USD per CPU hour of the check.
    pub check_cpu_micros_per_hour: Option<u128>,
    /// The model a call that names none is priced as: the run's pinned model (`--model-id`),
    /// when it has one (a Codex stream names no model).
    pub unnamed_calls_as: Option<String>,
}

/// A rate in USD as nano-USD, or the reason it is refused.
fn nanos(value: f64) -> Result<u128, &'static str> {
    if !value.is_finite() {
        return Err("must be a finite number");
    }
    if value < 0.0 {
        return Err("must be >= 0");
    }
    if value > MAX_RATE_USD {
        return Err("is over the largest rate accepted (1e6)");
    }
    Ok((value * 1.0e9).round() as u128)
}

impl Prices {
    /// The table from loop.toml's entries; `Err((key, why))` names the first refused key
    /// (`metering.prices."<model>".<field>`, `metering.check_cpu_usd_per_hour`).
    pub fn new(
        entries: &BTreeMap<String, PriceEntry>,
        check_cpu_usd_per_hour: Option<f64>,
    ) -> Result<Prices, (String, &'static str)> {
        let mut models = BTreeMap::new();
        for (model, e) in entries {
            let key = |field: &str| format!("metering.prices.\"{model}\".{field}");
            let rate = |v: f64, field: &str| nanos(v).map_err(|why| (key(field), why));
            models.insert(
                model.clone(),
                ModelPrice {
                    input: rate(e.input_usd_per_mtok, "input_usd_per_mtok")?,
                    output: rate(e.output_usd_per_mtok, "output_usd_per_mtok")?,
                    cache_read: e
                        .cache_read_usd_per_mtok
                        .map(|v| rate(v, "cache_read_usd_per_mtok"))
                        .transpose()?
                        .unwrap_or(0),
                    cache_write: e
                        .cache_write_usd_per_mtok
                        .map(|v| rate(v, "cache_write_usd_per_mtok"))
                        .transpose()?
                        .unwrap_or(0),
                },
            );
        }
        let cpu = check_cpu_usd_per_hour
            .map(|v| {
                nanos(v)
                    .map(|n| n / 1000)
                    .map_err(|why| ("metering.check_cpu_usd_per_hour".to_string(), why))
            })
            .transpose()?;
        Ok(Prices {
            models,
            check_cpu_micros_per_hour: cpu,
            unnamed_calls_as: None,
        })
    }

    /// Whether nothing is priced or rated.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty() && self.check_cpu_micros_per_hour.is_none()
    }

    /// The entry that prices `model`: its own, else the longest entry `model` is a dated or
    /// versioned release of (the entry followed by `-` or `@`: `claude-sonnet-4-5` prices
    /// `claude-sonnet-4-5-20250929`; the rule model drift uses, `super::model_matches`).
    pub fn entry_for(&self, model: &str) -> Option<&ModelPrice> {
        self.models.get(model).or_else(|| {
            self.models
                .iter()
                .filter(|(key, _)| super::model_matches(key, model))
                .max_by_key(|(key, _)| key.len())
                .map(|(_, p)| p)
        })
    }

    /// Micro-USD of `tokens` of `model`, rounded up; `None` when the table has no entry for it.
    /// tokens x nano-USD/Mtok / 1e15 is USD, so / 1e9 is micro-USD.
    pub fn price(&self, model: Option<&str>, tokens: &TokenCounts) -> Option<u64> {
        let p = self.entry_for(model.or(self.unnamed_calls_as.as_deref())?)?;
        let nanos_x_tok = u128::from(tokens.input) * p.input
            + u128::from(tokens.output) * p.output
            + u128::from(tokens.cache_read) * p.cache_read
            + u128::from(tokens.cache_write) * p.cache_write;
        Some(saturate(nanos_x_tok.div_ceil(1_000_000_000)))
    }

    /// Micro-USD of `cpu_ms` of the check's CPU, rounded up; `None` without a rate.
    pub fn rate_cpu(&self, cpu_ms: u64) -> Option<u64> {
        let rate = self.check_cpu_micros_per_hour?;
        Some(saturate((u128::from(cpu_ms) * rate).div_ceil(3_600_000)))
    }
}

fn saturate(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entry: PriceEntry) -> Result<Prices, (String, &'static str)> {
        Prices::new(&BTreeMap::from([("m".to_string(), entry)]), None)
    }

    #[test]
    fn tokens_are_priced_per_million_and_rounded_up_to_the_micro_usd() {
        let p = table(PriceEntry {
            input_usd_per_mtok: 3.0,
            output_usd_per_mtok: 15.0,
            cache_read_usd_per_mtok: Some(0.3),
            cache_write_usd_per_mtok: None,
        })
        .unwrap();
        // 1000 x 3 + 100 x 15 + 10 x 0.3 = 4503 micro-USD exactly.
        assert_eq!(
            p.price(
                Some("m"),
                &TokenCounts {
                    input: 1000,
                    output: 100,
                    cache_read: 10,
                    cache_write: 7
                }
            ),
            Some(4503)
        );
        // One input token at $3/Mtok is 3 micro-USD; at $0.1/Mtok 0.1 micro-USD rounds up to 1.
        let cheap = table(PriceEntry {
            input_usd_per_mtok: 0.1,
            output_usd_per_mtok: 0.0,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            cheap.price(
                Some("m"),
                &TokenCounts {
                    input: 1,
                    ..Default::default()
                }
            ),
            Some(1)
        );
        assert_eq!(cheap.price(Some("m"), &TokenCounts::default()), Some(0));
    }

    #[test]
    fn a_model_without_an_entry_has_no_price() {
        let p = table(PriceEntry {
            input_usd_per_mtok: 3.0,
            output_usd_per_mtok: 15.0,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            p.price(
                Some("other"),
                &TokenCounts {
                    input: 5,
                    ..Default::default()
                }
            ),
            None
        );
        assert_eq!(
            p.price(
                None,
                &TokenCounts {
                    input: 5,
                    ..Default::default()
                }
            ),
            None
        );
    }

    #[test]
    fn a_call_naming_no_model_is_priced_as_the_pinned_model() {
        let mut p = table(PriceEntry {
            input_usd_per_mtok: 2.0,
            output_usd_per_mtok: 0.0,
            ..Default::default()
        })
        .unwrap();
        p.unnamed_calls_as = Some("m-2025".into());
        assert_eq!(
            p.price(
                None,
                &TokenCounts {
                    input: 5,
                    ..Default::default()
                }
            ),
            Some(10)
        );
        assert_eq!(
            p.price(
                Some("other"),
                &TokenCounts {
                    input: 5,
                    ..Default::default()
                }
            ),
            None
        );
    }

    #[test]
    fn a_dated_release_is_priced_by_the_longest_entry_it_extends() {
        let entry = |v: f64| PriceEntry {
            input_usd_per_mtok: v,
            output_usd_per_mtok: 0.0,
            ..Default::default()
        };
        let p = Prices::new(
            &BTreeMap::from([
                ("claude".to_string(), entry(1.0)),
                ("claude-sonnet-4".to_string(), entry(3.0)),
            ]),
            None,
        )
        .unwrap();
        let one = TokenCounts {
            input: 1_000_000,
            ..Default::default()
        };
        assert_eq!(
            p.price(Some("claude-sonnet-4-20250514"), &one),
            Some(3_000_000)
        );
        assert_eq!(p.price(Some("claude@x"), &one), Some(1_000_000));
        assert_eq!(p.price(Some("claude-sonnet-40"), &one), Some(1_000_000));
        assert_eq!(p.price(Some("claudex"), &one), None);
    }

    #[test]
    fn the_largest_counts_do_not_overflow() {
        let p = table(PriceEntry {
            input_usd_per_mtok: MAX_RATE_USD,
            output_usd_per_mtok: MAX_RATE_USD,
            cache_read_usd_per_mtok: Some(MAX_RATE_USD),
            cache_write_usd_per_mtok: Some(MAX_RATE_USD),
        })
        .unwrap();
        let t = TokenCounts {
            input: u64::MAX,
            output: u64::MAX,
            cache_read: u64::MAX,
            cache_write: u64::MAX,
        };
        assert_eq!(p.price(Some("m"), &t), Some(u64::MAX));
    }

    #[test]
    fn a_negative_or_non_finite_rate_is_refused_naming_its_key() {
        let neg = table(PriceEntry {
            input_usd_per_mtok: 1.0,
            output_usd_per_mtok: -1.0,
            ..Default::default()
        });
        assert_eq!(
            neg,
            Err((
                "metering.prices.\"m\".output_usd_per_mtok".to_string(),
                "must be >= 0"
            ))
        );
        let nan = table(PriceEntry {
            input_usd_per_mtok: f64::NAN,
            output_usd_per_mtok: 1.0,
            ..Default::default()
        });
        assert_eq!(
            nan,
            Err((
                "metering.prices.\"m\".input_usd_per_mtok".to_string(),
                "must be a finite number"
            ))
        );
        let cpu = Prices::new(&BTreeMap::new(), Some(-2.0));
        assert_eq!(
            cpu,
            Err((
                "metering.check_cpu_usd_per_hour".to_string(),
                "must be >= 0"
            ))
        );
    }

    #[test]
    fn check_cpu_is_rated_per_hour_rounded_up() {
        let p = Prices::new(&BTreeMap::new(), Some(0.36)).unwrap();
        // 0.36 USD/h = 360000 micro-USD/h: 1000 s of CPU is 100000 micro-USD.
        assert_eq!(p.rate_cpu(1_000_000), Some(100_000));
        assert_eq!(p.rate_cpu(1), Some(1));
        assert_eq!(Prices::default().rate_cpu(1000), None);
    }
}
