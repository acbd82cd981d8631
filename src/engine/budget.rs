//! The run's budget in the loop: the caps as given (`--budget-usd`, `--budget-tokens`,
//! `--budget-wall`, `--budget-unknown-money`, `[budget]` in loop.toml), validated into the pins
//! `run_start` records, and their enforcement at the three points of an iteration, decided by
//! `crate::rules::budget` over the run's history (docs/budget.md).

use super::lifecycle::ActiveRun;
use crate::error::Failure;
use crate::halt::HaltReason;
use crate::rules::budget::{self, BudgetPins, PinnedModel, Point, UnknownMoney};
use crate::rules::decide::Step;
use serde::Deserialize;

/// The caps as a flag or loop.toml gives them, before validation.
#[derive(Debug, Clone, Default)]
pub struct BudgetInput {
    pub usd: Option<String>,
    pub tokens: Option<String>,
    pub wall: Option<String>,
    pub unknown_money: Option<UnknownMoney>,
}

impl BudgetInput {
    /// `self` (flags) over `file` (loop.toml), cap by cap.
    pub fn over(self, file: BudgetInput) -> BudgetInput {
        BudgetInput {
            usd: self.usd.or(file.usd),
            tokens: self.tokens.or(file.tokens),
            wall: self.wall.or(file.wall),
            unknown_money: self.unknown_money.or(file.unknown_money),
        }
    }

    /// Validate into the pins. Every cap must be a positive number; a USD cap needs a choice
    /// for unknown money (`ignore` or `halt`): the loop cannot know at start that every usage
    /// record will state money, so without one it refuses to start.
    pub fn resolve(self) -> Result<BudgetPins, Failure> {
        let usd_micros = self
            .usd
            .as_deref()
            .map(|raw| {
                budget::parse_usd_micros(raw)
                    .map_err(|e| Failure::usage(format!("--budget-usd: {e}")))
            })
            .transpose()?;
        let tokens = self
            .tokens
            .as_deref()
            .map(|raw| {
                raw.trim().parse::<u64>().map_err(|_| {
                    Failure::usage(format!(
                        "--budget-tokens: {:?} is not a whole number of tokens",
                        crate::inert::inert(raw)
                    ))
                })
            })
            .transpose()?;
        let wall_ms = self.wall.as_deref().map(parse_wall_ms).transpose()?;
        if usd_micros == Some(0) || tokens == Some(0) || wall_ms == Some(0) {
            return Err(Failure::usage(
                "a budget cap must be greater than 0 (a cap of 0 allows no iteration)",
            ));
        }
        let unknown_money = self.unknown_money.unwrap_or_default();
        if usd_micros.is_some() && unknown_money == UnknownMoney::Refuse {
            return Err(Failure::usage("--budget-usd: a usage record may carry no money (no usd reported, no price for its model), and nothing says how to count it")
                .with_hint("add --budget-unknown-money ignore (count it as 0) or halt (halt budget_exceeded at the first one), or `unknown_money = \"...\"` in [budget]"));
        }
        Ok(BudgetPins {
            usd_micros,
            tokens,
            wall_ms,
            unknown_money,
        })
    }
}

/// `--budget-wall`: seconds (`90`, `1.5`) or one number with a unit (`30s`, `15m`, `2h`, `1d`).
pub fn parse_wall_ms(raw: &str) -> Result<u64, Failure> {
    let t = raw.trim();
    let bad = || {
        Failure::usage(format!(
            "--budget-wall: {:?} is not a duration (seconds, or a number with s, m, h or d)",
            crate::inert::inert(raw)
        ))
    };
    let (number, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c),
        _ => (t, 's'),
    };
    let scale = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86400.0,
        _ => return Err(bad()),
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad());
    }
    let secs: f64 = number.parse().map_err(|_| bad())?;
    let ms = secs * scale * 1000.0;
    if !ms.is_finite() || ms < 0.0 || ms > 1.0e15 {
        return Err(bad());
    }
    Ok(ms.round() as u64)
}

/// `[budget]` of loop.toml. Numbers may be written as integers or floats.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSection {
    usd: Option<toml::Value>,
    tokens: Option<toml::Value>,
    wall_seconds: Option<toml::Value>,
    unknown_money: Option<UnknownMoney>,
}

impl BudgetSection {
    /// The caps as text, validated with the flags' rules.
    pub fn input(self) -> BudgetInput {
        let text = |v: toml::Value| match v {
            toml::Value::String(s) => s,
            other => other.to_string(),
        };
        BudgetInput {
            usd: self.usd.map(text),
            tokens: self.tokens.map(text),
            wall: self.wall_seconds.map(text),
            unknown_money: self.unknown_money,
        }
    }
}

/// The pinned model as the drift rule compares it.
pub fn pinned_model(model: &super::config::ModelPins) -> PinnedModel {
    PinnedModel {
        provider: model.provider.clone(),
        id: model.id.clone(),
        auxiliary: model.auxiliary.clone(),
    }
}

impl ActiveRun<'_> {
    /// The budget rules at `point` of the current iteration (`BeforeAgent`: before one more).
    pub(super) fn budget_step(&self, point: Point) -> Step {
        let records: Vec<&crate::receipt::history::IterationRecord> = self
            .history
            .iterations
            .iter()
            .filter(|r| r.exec.is_some())
            .collect();
        if point != Point::BeforeAgent && self.history.current().is_none_or(|r| r.exec.is_none()) {
            return Step::Continue;
        }
        match budget::decide_at(
            &records,
            point,
            &self.cfg.budget,
            &pinned_model(&self.cfg.model),
        ) {
            Some((reason, detail)) => Step::Halt(reason, detail),
            None => Step::Continue,
        }
    }
}

/// Whether a reason is one the budget rules decide.
pub fn is_budget_reason(reason: HaltReason) -> bool {
    matches!(
        reason,
        HaltReason::BudgetExceeded | HaltReason::CostAnomaly | HaltReason::ModelDriftDetected
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_durations_read_seconds_and_units() {
        assert_eq!(parse_wall_ms("90").unwrap(), 90_000);
        assert_eq!(parse_wall_ms("1.5").unwrap(), 1_500);
        assert_eq!(parse_wall_ms("15m").unwrap(), 900_000);
        assert_eq!(parse_wall_ms("2h").unwrap(), 7_200_000);
        for bad in ["", "-5", "5x", "m", "1e9", "ten"] {
            assert!(parse_wall_ms(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_usd_cap_without_a_choice_for_unknown_money_is_refused() {
        let err = BudgetInput {
            usd: Some("1".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().contains("--budget-usd"), "{err}");
        let pins = BudgetInput {
            usd: Some("1".into()),
            unknown_money: Some(UnknownMoney::Ignore),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(pins.usd_micros, Some(1_000_000));
    }

    #[test]
    fn negative_zero_and_non_numeric_caps_are_refused() {
        for input in [
            BudgetInput {
                tokens: Some("-1".into()),
                ..Default::default()
            },
            BudgetInput {
                tokens: Some("0".into()),
                ..Default::default()
            },
            BudgetInput {
                usd: Some("-0.5".into()),
                unknown_money: Some(UnknownMoney::Halt),
                ..Default::default()
            },
            BudgetInput {
                wall: Some("soon".into()),
                ..Default::default()
            },
        ] {
            assert!(input.clone().resolve().is_err(), "{input:?}");
        }
    }
}
