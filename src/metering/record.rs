//! One stage's usage record from the sources consulted for it, and the rule that combines them
//! (docs/budget.md, "Metering"):
//!
//! - Each call's money is what its source reported (`usd` of a usage line, the agent CLI's cost),
//!   else its tokens priced by the price table, else unknown.
//! - A source's strength is the weakest money among its calls: *cli-reported* (the agent CLI's
//!   own cost for every call) > *reported* (a usage file's `usd` on every call) > *priced* (every
//!   call reported or priced) > *unknown*; on a tie the agent CLI's output ranks over the usage
//!   file. A source with no calls has no strength.
//! - The strongest source alone makes the record; every call of the other sources is counted
//!   `overridden` in their `rejected` (they are taken as the same calls: never added twice).
//! - The record's money is the sum of its calls' (saturating) when every one is known, else
//!   `None` with basis `unknown`; a stage where no source gave a call has unknown money too
//!   (never 0). Its basis is the weakest of its calls' (`reported` < `priced` < `rated`).

use super::prices::Prices;
use crate::receipt::usage::{
    ModelUsage, MoneyBasis, RejectedInput, TokenCounts, UsageRecord, UsageSource, UsageStage,
};

/// One model call as a source states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub tokens: TokenCounts,
    /// The money the source stated for it, in micro-USD; `None`: not stated.
    pub usd_micros: Option<u64>,
}

/// The kind of a source, for its rank on a tie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceKind {
    /// The agent CLI's own machine-readable output.
    AgentOutput,
    /// The `LOOPEXEC_USAGE` file.
    UsageFile,
}

/// What one source gave for a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceReading {
    /// Its name in the receipt (`usage_file`, `claude_json`, ...).
    pub name: String,
    pub kind: SourceKind,
    pub calls: Vec<Call>,
    pub rejected: RejectedInput,
}

/// How strong a source's money is (lower is stronger).
fn strength(source: &SourceReading, prices: &Prices) -> Option<(u8, SourceKind)> {
    if source.calls.is_empty() {
        return None;
    }
    let rank = source
        .calls
        .iter()
        .map(|c| match (c.usd_micros, source.kind) {
            (Some(_), SourceKind::AgentOutput) => 0,
            (Some(_), SourceKind::UsageFile) => 1,
            (None, _) if prices.price(c.model.as_deref(), &c.tokens).is_some() => 2,
            (None, _) => 3,
        })
        .max()
        .unwrap_or(3);
    Some((rank, source.kind))
}

/// A call's money and its basis.
fn money(call: &Call, prices: &Prices) -> (Option<u64>, MoneyBasis) {
    match call.usd_micros {
        Some(m) => (Some(m), MoneyBasis::Reported),
        None => match prices.price(call.model.as_deref(), &call.tokens) {
            Some(m) => (Some(m), MoneyBasis::Priced),
            None => (None, MoneyBasis::Unknown),
        },
    }
}

fn add_tokens(a: &mut TokenCounts, b: &TokenCounts) {
    a.input = a.input.saturating_add(b.input);
    a.output = a.output.saturating_add(b.output);
    a.cache_read = a.cache_read.saturating_add(b.cache_read);
    a.cache_write = a.cache_write.saturating_add(b.cache_write);
}

fn add_money(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(a?.saturating_add(b?))
}

/// The usage record of `stage` of iteration `n` from `sources`, combined as the module says.
pub fn combine(
    n: u64,
    stage: UsageStage,
    sources: Vec<SourceReading>,
    prices: &Prices,
) -> UsageRecord {
    let chosen = sources
        .iter()
        .enumerate()
        .filter_map(|(i, s)| strength(s, prices).map(|k| (k, i)))
        .min()
        .map(|(_, i)| i);
    let mut record = UsageRecord {
        iteration: n,
        stage,
        usd_micros: None,
        basis: MoneyBasis::Unknown,
        tokens: TokenCounts::default(),
        models: Vec::new(),
        sources: Vec::new(),
        egress_bytes: None,
        cpu_ms: None,
    };
    let mut total = Some(0u64);
    let mut basis = MoneyBasis::Reported;
    for (i, source) in sources.into_iter().enumerate() {
        let mut rejected = source.rejected;
        let counted = if Some(i) == chosen {
            for call in &source.calls {
                let (m, b) = money(call, prices);
                total = add_money(total, m);
                basis = basis.max(b);
                add_tokens(&mut record.tokens, &call.tokens);
                match record
                    .models
                    .iter_mut()
                    .find(|u| u.provider == call.provider && u.model == call.model)
                {
                    Some(u) => {
                        add_tokens(&mut u.tokens, &call.tokens);
                        u.usd_micros = add_money(u.usd_micros, m);
                    }
                    None => record.models.push(ModelUsage {
                        provider: call.provider.clone(),
                        model: call.model.clone(),
                        tokens: call.tokens,
                        usd_micros: m,
                    }),
                }
            }
            source.calls.len() as u64
        } else {
            rejected.overridden = rejected
                .overridden
                .saturating_add(source.calls.len() as u64);
            0
        };
        record.sources.push(UsageSource {
            name: source.name,
            records: counted,
            rejected,
        });
    }
    if chosen.is_some() {
        record.usd_micros = total;
        record.basis = if total.is_some() {
            basis
        } else {
            MoneyBasis::Unknown
        };
    }
    record
}

/// The check stage's record of iteration `n`: its CPU time (`None`: the backend cannot see it)
/// at the configured rate, money unknown when the time is; `None` without a rate (an unrated check
/// is not metered: its cost is the operator's machine, not a model).
pub fn check_cpu(n: u64, cpu_ms: Option<u64>, prices: &Prices) -> Option<UsageRecord> {
    prices.check_cpu_micros_per_hour?;
    let usd_micros = cpu_ms.and_then(|ms| prices.rate_cpu(ms));
    Some(UsageRecord {
        iteration: n,
        stage: UsageStage::Check,
        usd_micros,
        basis: if usd_micros.is_some() {
            MoneyBasis::Rated
        } else {
            MoneyBasis::Unknown
        },
        tokens: TokenCounts::default(),
        models: Vec::new(),
        sources: vec![UsageSource {
            name: "check_cpu".into(),
            records: u64::from(cpu_ms.is_some()),
            rejected: RejectedInput::default(),
        }],
        egress_bytes: None,
        cpu_ms,
    })
}

/// Add `micros` of money on `basis` (a rated quantity) to a record: unknown stays unknown.
pub fn add_rated(record: &mut UsageRecord, micros: u64) {
    record.usd_micros = record.usd_micros.map(|m| m.saturating_add(micros));
    if record.usd_micros.is_some() {
        record.basis = record.basis.max(MoneyBasis::Rated);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metering::prices::PriceEntry;
    use std::collections::BTreeMap;

    fn call(model: &str, input: u64, output: u64, usd_micros: Option<u64>) -> Call {
        Call {
            provider: None,
            model: Some(model.into()),
            tokens: TokenCounts {
                input,
                output,
                ..Default::default()
            },
            usd_micros,
        }
    }

    fn source(name: &str, kind: SourceKind, calls: Vec<Call>) -> SourceReading {
        SourceReading {
            name: name.into(),
            kind,
            calls,
            rejected: RejectedInput::default(),
        }
    }

    fn priced() -> Prices {
        let entry = PriceEntry {
            input_usd_per_mtok: 1.0,
            output_usd_per_mtok: 2.0,
            ..Default::default()
        };
        Prices::new(&BTreeMap::from([("m".to_string(), entry)]), None).unwrap()
    }

    #[test]
    fn calls_sum_per_model_and_in_all_with_reported_money() {
        let r = combine(
            3,
            UsageStage::Agent,
            vec![source(
                "usage_file",
                SourceKind::UsageFile,
                vec![
                    call("a", 10, 1, Some(5)),
                    call("b", 20, 2, Some(7)),
                    call("a", 1, 1, Some(1)),
                ],
            )],
            &Prices::default(),
        );
        assert_eq!(r.usd_micros, Some(13));
        assert_eq!(r.basis, MoneyBasis::Reported);
        assert_eq!(
            r.tokens,
            TokenCounts {
                input: 31,
                output: 4,
                ..Default::default()
            }
        );
        assert_eq!(r.models.len(), 2);
        assert_eq!(
            (r.models[0].tokens.input, r.models[0].usd_micros),
            (11, Some(6))
        );
        assert_eq!(
            r.sources,
            vec![UsageSource {
                name: "usage_file".into(),
                records: 3,
                rejected: RejectedInput::default()
            }]
        );
    }

    #[test]
    fn tokens_without_usd_are_priced_from_the_table() {
        let r = combine(
            1,
            UsageStage::Agent,
            vec![source(
                "usage_file",
                SourceKind::UsageFile,
                vec![call("m", 1000, 100, None), call("m", 0, 0, Some(9))],
            )],
            &priced(),
        );
        assert_eq!(r.usd_micros, Some(1000 + 200 + 9));
        assert_eq!(r.basis, MoneyBasis::Priced);
    }

    #[test]
    fn a_model_with_tokens_but_no_usd_and_no_price_makes_the_money_unknown_not_zero() {
        let r = combine(
            1,
            UsageStage::Agent,
            vec![source(
                "usage_file",
                SourceKind::UsageFile,
                vec![call("m", 10, 0, Some(3)), call("unpriced", 10, 0, None)],
            )],
            &priced(),
        );
        assert_eq!(r.usd_micros, None);
        assert_eq!(r.basis, MoneyBasis::Unknown);
        assert_eq!(r.models[1].usd_micros, None);
        assert_eq!(r.tokens.input, 20);
    }

    #[test]
    fn no_call_from_any_source_is_unknown_money() {
        let r = combine(
            1,
            UsageStage::Agent,
            vec![source("usage_file", SourceKind::UsageFile, vec![])],
            &priced(),
        );
        assert_eq!((r.usd_micros, r.basis), (None, MoneyBasis::Unknown));
    }

    #[test]
    fn the_agent_clis_cost_wins_over_the_usage_file_whose_calls_are_overridden_not_added() {
        let cli = source(
            "claude_json",
            SourceKind::AgentOutput,
            vec![call("m", 100, 10, Some(500))],
        );
        let file = source(
            "usage_file",
            SourceKind::UsageFile,
            vec![call("m", 100, 10, Some(400)), call("m", 1, 1, Some(1))],
        );
        let r = combine(1, UsageStage::Agent, vec![file, cli], &priced());
        assert_eq!(r.usd_micros, Some(500));
        assert_eq!(r.tokens.input, 100);
        assert_eq!(r.sources[0].records, 0);
        assert_eq!(r.sources[0].rejected.overridden, 2);
        assert_eq!(r.sources[1].records, 1);
    }

    #[test]
    fn a_usage_file_with_usd_wins_over_agent_output_with_tokens_only() {
        let cli = source(
            "codex_json",
            SourceKind::AgentOutput,
            vec![call("m", 100, 10, None)],
        );
        let file = source(
            "usage_file",
            SourceKind::UsageFile,
            vec![call("m", 100, 10, Some(400))],
        );
        let r = combine(1, UsageStage::Agent, vec![cli, file], &priced());
        assert_eq!((r.usd_micros, r.basis), (Some(400), MoneyBasis::Reported));
        assert_eq!(r.sources[0].rejected.overridden, 1);
    }

    #[test]
    fn on_a_tie_the_agent_output_ranks_over_the_usage_file() {
        let cli = source(
            "codex_json",
            SourceKind::AgentOutput,
            vec![call("m", 1000, 0, None)],
        );
        let file = source(
            "usage_file",
            SourceKind::UsageFile,
            vec![call("m", 5, 0, None)],
        );
        let r = combine(1, UsageStage::Agent, vec![file, cli], &priced());
        assert_eq!(r.usd_micros, Some(1000));
        assert_eq!(r.sources[0].rejected.overridden, 1);
    }

    #[test]
    fn rated_money_adds_to_known_money_and_leaves_unknown_unknown() {
        let mut r = combine(1, UsageStage::Check, vec![], &Prices::default());
        add_rated(&mut r, 5);
        assert_eq!(r.usd_micros, None);
        r.usd_micros = Some(1);
        r.basis = MoneyBasis::Reported;
        add_rated(&mut r, 5);
        assert_eq!((r.usd_micros, r.basis), (Some(6), MoneyBasis::Rated));
    }

    #[test]
    fn the_check_is_rated_by_its_cpu_time_and_unknown_when_the_time_is() {
        let prices = Prices::new(&BTreeMap::new(), Some(3.6)).unwrap();
        let r = check_cpu(2, Some(2_500), &prices).unwrap();
        // 3.6 USD/h = 1 micro-USD per ms.
        assert_eq!(
            (r.iteration, r.stage, r.usd_micros, r.basis, r.cpu_ms),
            (
                2,
                UsageStage::Check,
                Some(2_500),
                MoneyBasis::Rated,
                Some(2_500)
            )
        );
        assert_eq!(
            r.sources,
            vec![UsageSource {
                name: "check_cpu".into(),
                records: 1,
                rejected: RejectedInput::default()
            }]
        );
        let blind = check_cpu(2, None, &prices).unwrap();
        assert_eq!(
            (blind.usd_micros, blind.basis, blind.sources[0].records),
            (None, MoneyBasis::Unknown, 0)
        );
        assert_eq!(check_cpu(2, Some(5), &Prices::default()), None);
    }
}
