//! `[metering]` of loop.toml (docs/budget.md, "Metering"): the price table, the check's CPU
//! rate, and which machine-readable output of the agent CLI (and of a judge that is one) to meter. The
//! section as written ([`MeteringSection`]) is validated into the pins `run_start` records
//! ([`MeteringPins`]: integers only, so a resumed run and `verify` read the very table the run
//! priced with), and the pins back into the arithmetic's [`Prices`].

use super::agent_output::Format;
use super::prices::{PriceEntry, Prices};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `[metering]` as loop.toml writes it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeteringSection {
    /// `[metering.prices."<model>"]`: USD per million tokens per token class.
    #[serde(default)]
    pub prices: BTreeMap<String, PriceEntry>,
    /// USD per CPU hour of the check (its cgroup's CPU time).
    pub check_cpu_usd_per_hour: Option<f64>,
    /// The agent CLI's output format to meter (its stdout; aider's analytics log).
    pub agent_output: Option<Format>,
    /// The judge's output format, when the judge is an agent CLI: its stdout is metered and its
    /// answer is the output's final text (`super::agent_output::answer`).
    pub judge_output: Option<Format>,
}

/// One model's pinned prices, nano-USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PricePin {
    pub input: u64,
    pub output: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
}

/// What `run_start` pins of `[metering]`. Empty (and absent from the receipt) without it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MeteringPins {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, PricePin>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_cpu_micros_per_hour: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_output: Option<Format>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_output: Option<Format>,
}

impl MeteringPins {
    pub fn is_unset(&self) -> bool {
        *self == MeteringPins::default()
    }

    /// The arithmetic's table; a call naming no model is priced as `pinned_model`.
    pub fn prices(&self, pinned_model: Option<&str>) -> Prices {
        let models = self
            .prices
            .iter()
            .map(|(m, p)| {
                let price = super::prices::ModelPrice {
                    input: u128::from(p.input),
                    output: u128::from(p.output),
                    cache_read: u128::from(p.cache_read),
                    cache_write: u128::from(p.cache_write),
                };
                (m.clone(), price)
            })
            .collect();
        Prices {
            models,
            check_cpu_micros_per_hour: self.check_cpu_micros_per_hour.map(u128::from),
            unnamed_calls_as: pinned_model.map(str::to_string),
        }
    }
}

/// Why `[metering]` was refused: the key and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub key: String,
    pub why: String,
}

impl MeteringSection {
    /// The pins, checked: every rate finite, >= 0 and within the bound; every model a name as
    /// the receipt keeps it (what [`super::clean_name`] leaves unchanged, not empty); and, when
    /// the run pins a model (`pinned_model`) and the table is not empty, a price for it (a table
    /// that prices only other models is a typo that would leave every call unpriced).
    pub fn resolve(&self, pinned_model: Option<&str>) -> Result<MeteringPins, Refused> {
        for model in self.prices.keys() {
            if model.is_empty() || super::clean_name(model) != *model {
                return Err(Refused {
                    key: format!("metering.prices.{:?}", crate::inert::inert(model)),
                    why: "is not a model name (1 to 128 characters of A-Z a-z 0-9 . _ : / @ + -)"
                        .into(),
                });
            }
        }
        let prices =
            Prices::new(&self.prices, self.check_cpu_usd_per_hour).map_err(|(key, why)| {
                Refused {
                    key,
                    why: why.into(),
                }
            })?;
        if let Some(model) = pinned_model {
            if !prices.models.is_empty() && prices.entry_for(model).is_none() {
                return Err(Refused {
                    key: "metering.prices".into(),
                    why: format!("has no price for the pinned model {:?} (--model-id): add [metering.prices.{:?}]", crate::inert::inert(model), crate::inert::inert(model)),
                });
            }
        }
        if self.judge_output == Some(Format::AiderAnalytics) {
            return Err(Refused { key: "metering.judge_output".into(), why: "cannot be aider-analytics: a judge's answer is its stdout, and aider's usage is in a log".into() });
        }
        let pin = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
        Ok(MeteringPins {
            prices: prices
                .models
                .iter()
                .map(|(m, p)| {
                    (
                        m.clone(),
                        PricePin {
                            input: pin(p.input),
                            output: pin(p.output),
                            cache_read: pin(p.cache_read),
                            cache_write: pin(p.cache_write),
                        },
                    )
                })
                .collect(),
            check_cpu_micros_per_hour: prices.check_cpu_micros_per_hour.map(pin),
            agent_output: self.agent_output,
            judge_output: self.judge_output,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(toml_text: &str) -> MeteringSection {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn a_price_table_is_pinned_as_integers_and_read_back_as_the_same_prices() {
        let s = section("check_cpu_usd_per_hour = 0.36\nagent_output = \"claude-json\"\n[prices.\"claude-sonnet-4-5\"]\ninput_usd_per_mtok = 3\noutput_usd_per_mtok = 15.0\ncache_read_usd_per_mtok = 0.3\n");
        let pins = s.resolve(Some("claude-sonnet-4-5")).unwrap();
        assert_eq!(
            pins.prices["claude-sonnet-4-5"],
            PricePin {
                input: 3_000_000_000,
                output: 15_000_000_000,
                cache_read: 300_000_000,
                cache_write: 0
            }
        );
        assert_eq!(pins.check_cpu_micros_per_hour, Some(360_000));
        assert_eq!(pins.agent_output, Some(Format::ClaudeJson));
        let back: MeteringPins =
            serde_json::from_value(serde_json::to_value(&pins).unwrap()).unwrap();
        assert_eq!(back, pins);
        assert_eq!(
            back.prices(None).models,
            Prices::new(&s.prices, s.check_cpu_usd_per_hour)
                .unwrap()
                .models
        );
    }

    #[test]
    fn a_model_name_with_a_character_the_receipt_would_not_keep_is_refused_naming_it() {
        let s =
            section("[prices.\"bad model\"]\ninput_usd_per_mtok = 1\noutput_usd_per_mtok = 1\n");
        let refused = s.resolve(None).unwrap_err();
        assert_eq!(refused.key, "metering.prices.\"bad model\"");
        assert!(
            refused.why.starts_with("is not a model name"),
            "{}",
            refused.why
        );
    }

    #[test]
    fn a_table_without_the_pinned_model_is_refused_and_a_dated_id_finds_its_family() {
        let s = section("[prices.\"gpt-4o\"]\ninput_usd_per_mtok = 1\noutput_usd_per_mtok = 1\n");
        let refused = s.resolve(Some("claude-opus-4")).unwrap_err();
        assert_eq!(refused.key, "metering.prices");
        assert!(refused.why.contains("\"claude-opus-4\""), "{}", refused.why);
        assert!(s.resolve(Some("gpt-4o-2024-08-06")).is_ok());
        assert!(s.resolve(None).is_ok());
        assert!(MeteringSection::default().resolve(Some("anything")).is_ok());
    }

    #[test]
    fn an_unknown_output_format_or_key_is_a_parse_error() {
        assert!(toml::from_str::<MeteringSection>("agent_output = \"cursor\"").is_err());
        assert!(toml::from_str::<MeteringSection>("price = 1").is_err());
    }

    #[test]
    fn a_judge_cannot_be_metered_from_aiders_log() {
        let refused = section("judge_output = \"aider-analytics\"")
            .resolve(None)
            .unwrap_err();
        assert_eq!(refused.key, "metering.judge_output");
        assert_eq!(
            section("judge_output = \"claude-json\"")
                .resolve(None)
                .unwrap()
                .judge_output,
            Some(Format::ClaudeJson)
        );
    }

    #[test]
    fn a_negative_cpu_rate_is_refused_naming_its_key() {
        let refused = section("check_cpu_usd_per_hour = -1")
            .resolve(None)
            .unwrap_err();
        assert_eq!(
            refused,
            Refused {
                key: "metering.check_cpu_usd_per_hour".into(),
                why: "must be >= 0".into()
            }
        );
    }
}
