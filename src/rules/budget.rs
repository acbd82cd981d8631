//! The budget rules: run-total spend (money, tokens, wall time) folded from the recorded usage,
//! the projection of the next iteration, the caps' halts (`budget_exceeded`), the cost anomaly
//! (`cost_anomaly`) and model drift (`model_drift_detected`). Pure: the live loop evaluates them at
//! three points of an iteration and `verify` replays the same points from the receipt
//! ([`first_halt`]), so a budget halt is re-derived, never trusted (docs/budget.md).
//!
//! The three points, in this order within iteration `n`:
//! - **before the agent** of `n` (the run's iterations `1..n` recorded): spent, or spent plus the
//!   projection of one more iteration, would cross a cap; recorded at iteration `n - 1` (no
//!   iteration `n` is started);
//! - **after the agent** of `n` (its agent-stage usage and its exec's duration only): model drift,
//!   a cap crossed, unknown money under `unknown_money = "halt"`, the cost anomaly;
//! - **at the end** of `n` (every stage's usage), when the iteration decided no other halt: a cap
//!   crossed, the cost anomaly.

use crate::halt::HaltReason;
use crate::receipt::history::IterationRecord;
use crate::receipt::usage::UsageStage;
use serde::{Deserialize, Serialize};

/// How money a record could not state counts against a USD cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownMoney {
    /// No choice made: a USD cap is refused at start (the loop cannot know that every record
    /// will state money).
    #[default]
    Refuse,
    /// Unknown money counts as 0 against the cap (the halt's detail and the feedback say so).
    Ignore,
    /// The first record with unknown money halts `budget_exceeded`.
    Halt,
}

impl UnknownMoney {
    pub fn as_str(self) -> &'static str {
        match self {
            UnknownMoney::Refuse => "refuse",
            UnknownMoney::Ignore => "ignore",
            UnknownMoney::Halt => "halt",
        }
    }
}

/// The run-total caps a run pins in `run_start` (`config.budget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BudgetPins {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_micros: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<u64>,
    #[serde(default)]
    pub unknown_money: UnknownMoney,
}

impl BudgetPins {
    pub fn is_unset(&self) -> bool {
        self.usd_micros.is_none() && self.tokens.is_none() && self.wall_ms.is_none()
    }
}

/// The model a run pins (`--model-provider`, `--model-id`), as the rules compare it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinnedModel {
    pub provider: Option<String>,
    pub id: Option<String>,
    /// Other models the agent may call (`[model] auxiliary`), matched as `id` is.
    pub auxiliary: Vec<String>,
}

impl PinnedModel {
    /// The pins of a `run_start` config (`config.model`; absent keys: nothing pinned).
    pub fn of_config(config: &serde_json::Value) -> PinnedModel {
        let model = config.get("model");
        let pin = |key: &str| {
            model
                .and_then(|m| m.get(key))
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
        };
        let auxiliary = model
            .and_then(|m| m.get("auxiliary"))
            .and_then(serde_json::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(serde_json::Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        PinnedModel {
            provider: pin("provider"),
            id: pin("id"),
            auxiliary,
        }
    }
}

/// What one iteration (or its agent stage) consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cost {
    /// Known money, micro-USD.
    pub usd_micros: u64,
    /// Records whose money was unknown.
    pub unknown_money: u64,
    pub tokens: u64,
    /// The recorded durations of its stages (the agent's exec, the check): the time its zones ran.
    pub wall_ms: u64,
}

impl Cost {
    fn add(self, other: Cost) -> Cost {
        Cost {
            usd_micros: self.usd_micros.saturating_add(other.usd_micros),
            unknown_money: self.unknown_money.saturating_add(other.unknown_money),
            tokens: self.tokens.saturating_add(other.tokens),
            wall_ms: self.wall_ms.saturating_add(other.wall_ms),
        }
    }
}

/// Which of an iteration's stages a cost covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    BeforeAgent,
    AfterAgent,
    End,
}

impl Point {
    pub fn as_str(self) -> &'static str {
        match self {
            Point::BeforeAgent => "before the agent",
            Point::AfterAgent => "after the agent",
            Point::End => "at the end of the iteration",
        }
    }
}

/// The cost of one recorded iteration: its agent stage only (`AfterAgent`) or all of it.
pub fn iteration_cost(record: &IterationRecord, point: Point) -> Cost {
    let agent_only = point == Point::AfterAgent;
    let mut cost = Cost::default();
    for usage in record
        .usage
        .iter()
        .filter(|u| !agent_only || u.stage == UsageStage::Agent)
    {
        match usage.usd_micros {
            Some(usd) => cost.usd_micros = cost.usd_micros.saturating_add(usd),
            None => cost.unknown_money = cost.unknown_money.saturating_add(1),
        }
        cost.tokens = cost.tokens.saturating_add(usage.tokens.total());
    }
    let exec = record.exec.as_ref().map_or(0, |e| e.duration_ms);
    let check = if agent_only {
        0
    } else {
        record.check.as_ref().map_or(0, |c| c.duration_ms)
    };
    cost.wall_ms = exec.saturating_add(check);
    cost
}

/// The run-total spend of whole iterations.
pub fn spent(records: &[&IterationRecord]) -> Cost {
    records.iter().fold(Cost::default(), |total, r| {
        total.add(iteration_cost(r, Point::End))
    })
}

/// A USD amount written in decimal (`2`, `0.25`, `1.000001`) as micro-USD. Refused: a sign, an
/// exponent, more than 6 decimals (finer than a micro-USD), anything not a number, an amount
/// past u64 micro-USD.
pub fn parse_usd_micros(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if t.is_empty() || (whole.is_empty() && frac.is_empty()) || !digits(whole) || !digits(frac) {
        return Err(format!(
            "{:?} is not a non-negative decimal USD amount",
            crate::inert::inert(t)
        ));
    }
    if frac.len() > 6 {
        return Err(format!(
            "{:?} has more than 6 decimals (money is counted in micro-USD)",
            crate::inert::inert(t)
        ));
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole
            .parse()
            .map_err(|_| format!("{:?} is too large", crate::inert::inert(t)))?
    };
    let frac_micros: u64 = format!("{frac:0<6}").parse().unwrap_or(0);
    whole
        .checked_mul(1_000_000)
        .and_then(|w| w.checked_add(frac_micros))
        .ok_or_else(|| format!("{:?} is too large", crate::inert::inert(t)))
}

/// The quantile the projection takes of the run's own iterations: the 90th percentile.
pub const PROJECTION_PERCENT: u64 = 90;

/// The nearest-rank quantile (`PROJECTION_PERCENT`) of `values`; 0 for none.
pub fn nearest_rank(values: &[u64], percent: u64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let n = sorted.len() as u64;
    let rank = (percent.min(100) * n).div_ceil(100).max(1);
    sorted[(rank - 1) as usize]
}

/// The projected cost of one more iteration: the 90th percentile by nearest rank of each
/// dimension over the run's recorded iterations. With no recorded iteration it is 0, and only a
/// crossing halts (the first iteration of a run is never refused by a projection).
pub fn projection(records: &[&IterationRecord]) -> Cost {
    let costs: Vec<Cost> = records
        .iter()
        .map(|r| iteration_cost(r, Point::End))
        .collect();
    projection_of(&costs)
}

/// [`projection`] over iterations' costs.
pub fn projection_of(costs: &[Cost]) -> Cost {
    let of = |f: fn(&Cost) -> u64| {
        nearest_rank(&costs.iter().map(f).collect::<Vec<_>>(), PROJECTION_PERCENT)
    };
    Cost {
        usd_micros: of(|c| c.usd_micros),
        unknown_money: 0,
        tokens: of(|c| c.tokens),
        wall_ms: of(|c| c.wall_ms),
    }
}

/// Micro-USD as USD with 6 decimals.
pub fn usd(micros: u64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

/// One dimension of a cap, for the details.
fn dimensions(spent: &Cost, caps: &BudgetPins) -> Vec<(&'static str, u64, u64, fn(u64) -> String)> {
    let mut out: Vec<(&'static str, u64, u64, fn(u64) -> String)> = Vec::new();
    if let Some(cap) = caps.usd_micros {
        out.push(("USD", spent.usd_micros, cap, usd));
    }
    if let Some(cap) = caps.tokens {
        out.push(("tokens", spent.tokens, cap, |t| t.to_string()));
    }
    if let Some(cap) = caps.wall_ms {
        out.push(("wall seconds", spent.wall_ms, cap, |ms| {
            format!("{}.{:03}", ms / 1000, ms % 1000)
        }));
    }
    out
}

fn unknown_note(spent: &Cost, caps: &BudgetPins) -> String {
    if caps.usd_micros.is_some() && spent.unknown_money > 0 {
        format!(
            " ({} usage record(s) of unknown money counted as 0: unknown_money = \"ignore\")",
            spent.unknown_money
        )
    } else {
        String::new()
    }
}

/// Before the agent: halt when spent, or spent plus the projection of the next iteration, would
/// cross a cap (a cap is crossed when spent exceeds it; reaching it exactly is within it).
pub fn before_agent(
    spent: &Cost,
    caps: &BudgetPins,
    projection: &Cost,
) -> Option<(HaltReason, String)> {
    let projected = |name: &str| match name {
        "USD" => projection.usd_micros,
        "tokens" => projection.tokens,
        _ => projection.wall_ms,
    };
    for (name, spent_v, cap, fmt) in dimensions(spent, caps) {
        let next = projected(name);
        if spent_v.saturating_add(next) > cap || spent_v >= cap {
            return Some((
                HaltReason::BudgetExceeded,
                format!(
                    "{name}: spent {} + projected {} for the next iteration (p{PROJECTION_PERCENT} of this run's iterations) would cross the cap {}{}",
                    fmt(spent_v),
                    fmt(next),
                    fmt(cap),
                    unknown_note(spent, caps)
                ),
            ));
        }
    }
    None
}

/// After an iteration's stage: halt when spent crossed a cap, or, under `unknown_money =
/// "halt"` with a USD cap, when a record's money was unknown.
pub fn crossed(spent: &Cost, caps: &BudgetPins, iteration: u64) -> Option<(HaltReason, String)> {
    if caps.usd_micros.is_some()
        && caps.unknown_money == UnknownMoney::Halt
        && spent.unknown_money > 0
    {
        return Some((
            HaltReason::BudgetExceeded,
            format!("USD: {} usage record(s) of unknown money by iteration {iteration}, and unknown_money = \"halt\" (spent {} known)", spent.unknown_money, usd(spent.usd_micros)),
        ));
    }
    for (name, spent_v, cap, fmt) in dimensions(spent, caps) {
        if spent_v > cap {
            return Some((
                HaltReason::BudgetExceeded,
                format!(
                    "{name}: spent {} crossed the cap {} in iteration {iteration}{}",
                    fmt(spent_v),
                    fmt(cap),
                    unknown_note(spent, caps)
                ),
            ));
        }
    }
    None
}

/// The anomaly rule's multiplier of the spread.
pub const ANOMALY_K: u64 = 6;
/// The iterations of history the anomaly rule needs before it judges.
pub const ANOMALY_MIN_HISTORY: usize = 3;

fn median(sorted: &[u64]) -> u64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        // The mean of the middle two, without overflow.
        sorted[n / 2 - 1] / 2 + sorted[n / 2] / 2 + (sorted[n / 2 - 1] % 2 + sorted[n / 2] % 2) / 2
    }
}

/// The threshold above which a cost is anomalous after `history` (at least
/// [`ANOMALY_MIN_HISTORY`] values): median + K * max(MAD, floor), floor = max(median / 4, 1).
/// The floor makes a flat history (MAD 0) tolerate jitter up to 2.5x its median and no more.
pub fn anomaly_threshold(history: &[u64]) -> Option<u64> {
    if history.len() < ANOMALY_MIN_HISTORY {
        return None;
    }
    let mut sorted = history.to_vec();
    sorted.sort_unstable();
    let med = median(&sorted);
    let mut deviations: Vec<u64> = sorted.iter().map(|v| v.abs_diff(med)).collect();
    deviations.sort_unstable();
    let mad = median(&deviations);
    let spread = mad.max((med / 4).max(1));
    Some(med.saturating_add(ANOMALY_K.saturating_mul(spread)))
}

/// The cost anomaly: `last` (the iteration's cost so far) above the threshold of the run's
/// earlier iterations. Money when every iteration so far stated it, tokens otherwise.
pub fn cost_anomaly(
    earlier: &[&IterationRecord],
    last: &Cost,
    iteration: u64,
) -> Option<(HaltReason, String)> {
    let costs: Vec<Cost> = earlier
        .iter()
        .map(|r| iteration_cost(r, Point::End))
        .collect();
    cost_anomaly_of(&costs, last, iteration)
}

/// [`cost_anomaly`] over the earlier iterations' costs.
pub fn cost_anomaly_of(
    costs: &[Cost],
    last: &Cost,
    iteration: u64,
) -> Option<(HaltReason, String)> {
    let money = last.unknown_money == 0 && costs.iter().all(|c| c.unknown_money == 0);
    let (name, values, value, fmt): (&str, Vec<u64>, u64, fn(u64) -> String) = if money {
        (
            "USD",
            costs.iter().map(|c| c.usd_micros).collect(),
            last.usd_micros,
            usd,
        )
    } else {
        (
            "tokens",
            costs.iter().map(|c| c.tokens).collect(),
            last.tokens,
            |t| t.to_string(),
        )
    };
    let threshold = anomaly_threshold(&values)?;
    (value > threshold).then(|| {
        (
            HaltReason::CostAnomaly,
            format!(
                "iteration {iteration} cost {} {name}, above {} (median + {ANOMALY_K} x max(MAD, median/4) of the run's {} earlier iteration(s))",
                fmt(value),
                fmt(threshold),
                values.len()
            ),
        )
    })
}

pub use crate::metering::model_matches;

/// Model drift: a usage record of the iteration's agent stage names a model (or provider) other
/// than the pinned one. A record naming none does not drift. Providers compare ASCII-case-insensitively.
pub fn model_drift(record: &IterationRecord, pinned: &PinnedModel) -> Option<(HaltReason, String)> {
    for usage in record.usage.iter().filter(|u| u.stage == UsageStage::Agent) {
        for model in &usage.models {
            if let (Some(pin), Some(reported)) = (&pinned.provider, &model.provider) {
                if !pin.eq_ignore_ascii_case(reported) {
                    return Some((
                        HaltReason::ModelDriftDetected,
                        format!("iteration {}: the agent's usage names provider {:?}, the run pins {:?}", record.iteration, crate::inert::inert(reported), crate::inert::inert(pin)),
                    ));
                }
            }
            if let (Some(pin), Some(reported)) = (&pinned.id, &model.model) {
                if !model_matches(pin, reported)
                    && !pinned.auxiliary.iter().any(|a| model_matches(a, reported))
                {
                    return Some((
                        HaltReason::ModelDriftDetected,
                        format!(
                            "iteration {}: the agent's usage names model {:?}, the run pins {:?}",
                            record.iteration,
                            crate::inert::inert(reported),
                            crate::inert::inert(pin)
                        ),
                    ));
                }
            }
        }
    }
    None
}

/// The halt the rules decide at `point` of the last of `records` (`BeforeAgent`: before one more
/// iteration after all of them).
pub fn decide_at(
    records: &[&IterationRecord],
    point: Point,
    caps: &BudgetPins,
    pinned: &PinnedModel,
) -> Option<(HaltReason, String)> {
    match point {
        Point::BeforeAgent => {
            if caps.is_unset() {
                return None;
            }
            before_agent(&spent(records), caps, &projection(records))
        }
        Point::AfterAgent | Point::End => {
            let (last, earlier) = records.split_last()?;
            if point == Point::AfterAgent {
                if let Some(drift) = model_drift(last, pinned) {
                    return Some(drift);
                }
            }
            let now = iteration_cost(last, point);
            let total = spent(earlier).add(now);
            crossed(&total, caps, last.iteration).or_else(|| {
                if caps.is_unset() {
                    None
                } else {
                    cost_anomaly(earlier, &now, last.iteration)
                }
            })
        }
    }
}

/// A budget halt the rules decide over a receipt's iterations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetHalt {
    pub reason: HaltReason,
    /// The iteration the halt is recorded at (before the agent of `n`: `n - 1`).
    pub iteration: u64,
    pub point: Point,
    pub detail: String,
}

/// The first budget halt the rules decide, walking the recorded iterations that ran their agent
/// in order at each point, as the live loop evaluates them. `end_allowed(record)` says whether
/// the end point applies to an iteration (it decided no other halt).
pub fn first_halt(
    iterations: &[IterationRecord],
    caps: &BudgetPins,
    pinned: &PinnedModel,
    end_allowed: impl Fn(&IterationRecord) -> bool,
) -> Option<BudgetHalt> {
    let ran: Vec<&IterationRecord> = iterations.iter().filter(|r| r.exec.is_some()).collect();
    let mut last_started = 0;
    for (i, record) in ran.iter().enumerate() {
        if let Some((reason, detail)) = decide_at(&ran[..i], Point::BeforeAgent, caps, pinned) {
            return Some(BudgetHalt {
                reason,
                iteration: last_started,
                point: Point::BeforeAgent,
                detail,
            });
        }
        for point in [Point::AfterAgent, Point::End] {
            if point == Point::End && (!end_allowed(record) || record.interrupted.is_some()) {
                continue;
            }
            if let Some((reason, detail)) = decide_at(&ran[..=i], point, caps, pinned) {
                return Some(BudgetHalt {
                    reason,
                    iteration: record.iteration,
                    point,
                    detail,
                });
            }
        }
        last_started = record.iteration;
    }
    decide_at(&ran, Point::BeforeAgent, caps, pinned).map(|(reason, detail)| BudgetHalt {
        reason,
        iteration: last_started,
        point: Point::BeforeAgent,
        detail,
    })
}

/// One line of a cost ledger walked by the rules (`loopexec inspect-cost --ledger`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerStep {
    pub iteration: u64,
    pub usd_micros: u64,
    /// The spend after it.
    pub spent_micros: u64,
    /// The projection the loop would have made before it (p90 of the lines before).
    pub projected_micros: u64,
    /// The anomaly threshold of the lines before (`None` before three of them).
    pub anomaly_threshold: Option<u64>,
    pub anomalous: bool,
}

/// A cost ledger (one iteration's USD per line, every money known) walked as the loop walks a
/// run: each line's projection, spend and anomaly, and the first halt the rules decide with
/// `caps` (before a line: spent plus projection would cross; after it: spent crossed, or, with a
/// cap set, the line is anomalous). The steps stop at that halt.
pub fn walk_ledger(values: &[u64], caps: &BudgetPins) -> (Vec<LedgerStep>, Option<BudgetHalt>) {
    let mut steps = Vec::new();
    let mut costs: Vec<Cost> = Vec::new();
    for (i, &value) in values.iter().enumerate() {
        let iteration = i as u64 + 1;
        let spent_before = costs.iter().fold(Cost::default(), |t, c| t.add(*c));
        let projected = projection_of(&costs);
        if !caps.is_unset() {
            if let Some((reason, detail)) = before_agent(&spent_before, caps, &projected) {
                return (
                    steps,
                    Some(BudgetHalt {
                        reason,
                        iteration: i as u64,
                        point: Point::BeforeAgent,
                        detail,
                    }),
                );
            }
        }
        let now = Cost {
            usd_micros: value,
            ..Cost::default()
        };
        let threshold = anomaly_threshold(&costs.iter().map(|c| c.usd_micros).collect::<Vec<_>>());
        let anomaly = cost_anomaly_of(&costs, &now, iteration);
        let spent_after = spent_before.add(now);
        steps.push(LedgerStep {
            iteration,
            usd_micros: value,
            spent_micros: spent_after.usd_micros,
            projected_micros: projected.usd_micros,
            anomaly_threshold: threshold,
            anomalous: anomaly.is_some(),
        });
        let halt = crossed(&spent_after, caps, iteration).or_else(|| {
            if caps.is_unset() {
                None
            } else {
                anomaly
            }
        });
        if let Some((reason, detail)) = halt {
            return (
                steps,
                Some(BudgetHalt {
                    reason,
                    iteration,
                    point: Point::End,
                    detail,
                }),
            );
        }
        costs.push(now);
    }
    (steps, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::usage::{ModelUsage, MoneyBasis, TokenCounts, UsageRecord};

    fn usage(iteration: u64, usd_micros: Option<u64>, tokens: u64) -> UsageRecord {
        UsageRecord {
            iteration,
            stage: UsageStage::Agent,
            usd_micros,
            basis: if usd_micros.is_some() {
                MoneyBasis::Reported
            } else {
                MoneyBasis::Unknown
            },
            tokens: TokenCounts {
                input: tokens,
                ..Default::default()
            },
            models: vec![],
            sources: vec![],
            egress_bytes: None,
            cpu_ms: None,
        }
    }

    fn iteration(n: u64, usd_micros: Option<u64>) -> IterationRecord {
        let crate::receipt::events::Event::ExecResult(mut exec) =
            crate::receipt::events::sample::exec_result(n, 0)
        else {
            unreachable!()
        };
        exec.duration_ms = 1000;
        IterationRecord {
            iteration: n,
            exec: Some(exec),
            usage: vec![usage(n, usd_micros, 100)],
            ..Default::default()
        }
    }

    fn costs(usd: &[u64]) -> Vec<IterationRecord> {
        usd.iter()
            .enumerate()
            .map(|(i, u)| iteration(i as u64 + 1, Some(*u)))
            .collect()
    }

    fn refs(records: &[IterationRecord]) -> Vec<&IterationRecord> {
        records.iter().collect()
    }

    fn usd_cap(micros: u64) -> BudgetPins {
        BudgetPins {
            usd_micros: Some(micros),
            unknown_money: UnknownMoney::Ignore,
            ..Default::default()
        }
    }

    #[test]
    fn the_projection_is_the_90th_percentile_by_nearest_rank() {
        assert_eq!(nearest_rank(&[], 90), 0);
        assert_eq!(nearest_rank(&[7], 90), 7);
        // 10 values: rank ceil(9) = 9th smallest.
        assert_eq!(nearest_rank(&[10, 1, 2, 3, 4, 5, 6, 7, 8, 9], 90), 9);
        // 3 values: rank ceil(2.7) = 3rd.
        assert_eq!(nearest_rank(&[1, 2, 3], 90), 3);
        let records = costs(&[100, 300, 200]);
        assert_eq!(projection(&refs(&records)).usd_micros, 300);
        assert_eq!(projection(&[]).usd_micros, 0);
    }

    #[test]
    fn before_the_agent_a_projected_crossing_halts_and_spending_exactly_the_cap_does_not() {
        let records = costs(&[400_000, 400_000]);
        let spent = spent(&refs(&records));
        let found =
            before_agent(&spent, &usd_cap(1_000_000), &projection(&refs(&records))).unwrap();
        assert_eq!(found.0, HaltReason::BudgetExceeded);
        assert_eq!(found.1, "USD: spent 0.800000 + projected 0.400000 for the next iteration (p90 of this run's iterations) would cross the cap 1.000000");
        assert_eq!(
            before_agent(&spent, &usd_cap(1_200_000), &projection(&refs(&records))),
            None
        );
    }

    #[test]
    fn with_no_recorded_iteration_the_projection_is_zero_and_nothing_halts_before_the_first_agent()
    {
        assert_eq!(
            decide_at(
                &[],
                Point::BeforeAgent,
                &usd_cap(1),
                &PinnedModel::default()
            ),
            None
        );
    }

    #[test]
    fn a_crossed_token_cap_names_spent_and_cap() {
        let records = costs(&[1, 1]);
        let caps = BudgetPins {
            tokens: Some(150),
            ..Default::default()
        };
        let found = decide_at(
            &refs(&records),
            Point::AfterAgent,
            &caps,
            &PinnedModel::default(),
        )
        .unwrap();
        assert_eq!(
            found,
            (
                HaltReason::BudgetExceeded,
                "tokens: spent 200 crossed the cap 150 in iteration 2".into()
            )
        );
    }

    #[test]
    fn unknown_money_counts_as_zero_under_ignore_and_says_so() {
        let records = vec![iteration(1, None), iteration(2, Some(2_000_000))];
        let found = crossed(&spent(&refs(&records)), &usd_cap(1_000_000), 2).unwrap();
        assert_eq!(found.1, "USD: spent 2.000000 crossed the cap 1.000000 in iteration 2 (1 usage record(s) of unknown money counted as 0: unknown_money = \"ignore\")");
        assert_eq!(
            crossed(&spent(&refs(&records[..1])), &usd_cap(1_000_000), 1),
            None
        );
    }

    #[test]
    fn unknown_money_halts_at_the_first_unknown_under_halt() {
        let records = vec![iteration(1, None)];
        let caps = BudgetPins {
            unknown_money: UnknownMoney::Halt,
            ..usd_cap(1_000_000)
        };
        let found = crossed(&spent(&refs(&records)), &caps, 1).unwrap();
        assert_eq!(found.0, HaltReason::BudgetExceeded);
        assert!(
            found
                .1
                .starts_with("USD: 1 usage record(s) of unknown money by iteration 1"),
            "{}",
            found.1
        );
    }

    #[test]
    fn a_tenfold_iteration_after_a_flat_history_is_an_anomaly() {
        let records = costs(&[100_000, 100_000, 100_000, 100_000]);
        let last = Cost {
            usd_micros: 1_000_000,
            ..Default::default()
        };
        let found = cost_anomaly(&refs(&records), &last, 5).unwrap();
        assert_eq!(found.0, HaltReason::CostAnomaly);
        assert_eq!(found.1, "iteration 5 cost 1.000000 USD, above 0.250000 (median + 6 x max(MAD, median/4) of the run's 4 earlier iteration(s))");
    }

    #[test]
    fn jitter_around_the_history_is_no_anomaly() {
        let records = costs(&[100_000, 100_000, 100_000]);
        for jitter in [80_000, 120_000, 200_000, 250_000] {
            assert_eq!(
                cost_anomaly(
                    &refs(&records),
                    &Cost {
                        usd_micros: jitter,
                        ..Default::default()
                    },
                    4
                ),
                None,
                "{jitter}"
            );
        }
        let noisy = costs(&[90_000, 110_000, 95_000, 130_000, 100_000]);
        assert_eq!(
            cost_anomaly(
                &refs(&noisy),
                &Cost {
                    usd_micros: 160_000,
                    ..Default::default()
                },
                6
            ),
            None
        );
    }

    #[test]
    fn the_anomaly_rule_needs_three_earlier_iterations() {
        let records = costs(&[1, 1]);
        assert_eq!(
            cost_anomaly(
                &refs(&records),
                &Cost {
                    usd_micros: 1_000_000,
                    ..Default::default()
                },
                3
            ),
            None
        );
    }

    #[test]
    fn a_free_flat_history_still_has_a_floor_of_one() {
        assert_eq!(anomaly_threshold(&[0, 0, 0]), Some(6));
    }

    #[test]
    fn the_anomaly_falls_back_to_tokens_when_money_is_unknown() {
        let records: Vec<IterationRecord> = (1..=3).map(|n| iteration(n, None)).collect();
        let found = cost_anomaly(
            &refs(&records),
            &Cost {
                tokens: 10_000,
                unknown_money: 1,
                ..Default::default()
            },
            4,
        )
        .unwrap();
        assert!(found.1.contains("10000 tokens"), "{}", found.1);
    }

    #[test]
    fn a_pinned_id_matches_itself_and_its_dated_releases_only() {
        assert!(model_matches("claude-sonnet-4", "claude-sonnet-4"));
        assert!(model_matches("claude-sonnet-4", "claude-sonnet-4-20250514"));
        assert!(model_matches("claude-sonnet-4", "claude-sonnet-4@20250514"));
        assert!(!model_matches("claude-sonnet-4", "claude-sonnet-40"));
        assert!(!model_matches("claude-sonnet-4", "claude-opus-4"));
        assert!(!model_matches(
            "claude-sonnet-4-20250514",
            "claude-sonnet-4"
        ));
    }

    fn with_model(n: u64, provider: Option<&str>, model: Option<&str>) -> IterationRecord {
        let mut record = iteration(n, Some(1));
        record.usage[0].models = vec![ModelUsage {
            provider: provider.map(str::to_string),
            model: model.map(str::to_string),
            tokens: TokenCounts::default(),
            usd_micros: None,
        }];
        record
    }

    #[test]
    fn another_model_than_the_pinned_one_is_drift_naming_both() {
        let pinned = PinnedModel {
            provider: Some("anthropic".into()),
            id: Some("claude-sonnet-4".into()),
            auxiliary: Vec::new(),
        };
        let found = model_drift(
            &with_model(2, Some("anthropic"), Some("claude-opus-4")),
            &pinned,
        )
        .unwrap();
        assert_eq!(found, (HaltReason::ModelDriftDetected, "iteration 2: the agent's usage names model \"claude-opus-4\", the run pins \"claude-sonnet-4\"".into()));
        let found = model_drift(
            &with_model(1, Some("openai"), Some("claude-sonnet-4")),
            &pinned,
        )
        .unwrap();
        assert!(found.1.contains("provider \"openai\""), "{}", found.1);
        assert_eq!(
            model_drift(
                &with_model(1, Some("Anthropic"), Some("claude-sonnet-4-20250514")),
                &pinned
            ),
            None
        );
        assert_eq!(model_drift(&with_model(1, None, None), &pinned), None);
        assert_eq!(
            model_drift(
                &with_model(1, Some("x"), Some("y")),
                &PinnedModel::default()
            ),
            None
        );
    }

    #[test]
    fn the_first_halt_walks_the_points_in_order() {
        // 0.4 USD each, cap 1.0: after two, 0.8 + 0.4 would cross: halt before the third agent,
        // recorded at iteration 2.
        let records = costs(&[400_000, 400_000]);
        let found = first_halt(
            &records,
            &usd_cap(1_000_000),
            &PinnedModel::default(),
            |_| true,
        )
        .unwrap();
        assert_eq!(
            (found.reason, found.iteration, found.point),
            (HaltReason::BudgetExceeded, 2, Point::BeforeAgent)
        );
        // One of 1.5 crosses right after its agent.
        let records = costs(&[1_500_000]);
        let found = first_halt(
            &records,
            &usd_cap(1_000_000),
            &PinnedModel::default(),
            |_| true,
        )
        .unwrap();
        assert_eq!((found.iteration, found.point), (1, Point::AfterAgent));
        assert_eq!(
            first_halt(
                &costs(&[1, 1, 1]),
                &BudgetPins::default(),
                &PinnedModel::default(),
                |_| true
            ),
            None
        );
    }

    #[test]
    fn usd_has_six_decimals() {
        assert_eq!(usd(1_234_567), "1.234567");
        assert_eq!(usd(5), "0.000005");
    }

    #[test]
    fn usd_amounts_parse_to_micros_and_bad_ones_are_refused() {
        assert_eq!(parse_usd_micros("2"), Ok(2_000_000));
        assert_eq!(parse_usd_micros("0.25"), Ok(250_000));
        assert_eq!(parse_usd_micros(".5"), Ok(500_000));
        assert_eq!(parse_usd_micros("1.000001"), Ok(1_000_001));
        for bad in [
            "",
            "-1",
            "+1",
            "1e3",
            "abc",
            "1.2.3",
            ".",
            "1.0000001",
            "99999999999999999999",
        ] {
            assert!(parse_usd_micros(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_ledger_halts_before_the_line_whose_projection_would_cross_the_cap() {
        // 1 + 1 + 1 spent, p90 projection 1: 3 + 1 > 3.5 before line 4.
        let (steps, halt) = walk_ledger(
            &[1_000_000, 1_000_000, 1_000_000, 1_000_000],
            &usd_cap(3_500_000),
        );
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[2].spent_micros, 3_000_000);
        let halt = halt.unwrap();
        assert_eq!(
            (halt.reason, halt.iteration, halt.point),
            (HaltReason::BudgetExceeded, 3, Point::BeforeAgent)
        );
        assert_eq!(halt.detail, "USD: spent 3.000000 + projected 1.000000 for the next iteration (p90 of this run's iterations) would cross the cap 3.500000");
    }

    #[test]
    fn a_ledger_spike_after_a_flat_history_is_an_anomaly_and_jitter_is_not() {
        let (steps, halt) = walk_ledger(&[100, 110, 95, 105, 120, 2_000], &usd_cap(1_000_000_000));
        assert_eq!(
            steps.iter().map(|s| s.anomalous).collect::<Vec<_>>(),
            vec![false, false, false, false, false, true]
        );
        assert_eq!(steps[5].anomaly_threshold, Some(105 + 6 * 26));
        assert_eq!(
            halt.map(|h| (h.reason, h.iteration)),
            Some((HaltReason::CostAnomaly, 6))
        );
        // Without a cap the anomaly is reported, and nothing halts.
        let (steps, halt) = walk_ledger(&[100, 110, 95, 105, 120, 2_000], &BudgetPins::default());
        assert!(steps[5].anomalous);
        assert_eq!(halt, None);
    }

    #[test]
    fn a_routing_prefix_and_an_auxiliary_model_are_no_drift_and_another_model_still_is() {
        assert!(model_matches(
            "claude-sonnet-4-5",
            "anthropic/claude-sonnet-4-5-20250929"
        ));
        assert!(!model_matches(
            "anthropic/claude-sonnet-4-5",
            "openrouter/claude-sonnet-4-5"
        ));
        assert!(!model_matches(
            "claude-sonnet-4-5",
            "anthropic/claude-opus-4"
        ));
        let pinned = PinnedModel {
            provider: None,
            id: Some("claude-sonnet-4-5".into()),
            auxiliary: vec!["claude-3-5-haiku".into()],
        };
        assert_eq!(
            model_drift(
                &with_model(1, None, Some("claude-3-5-haiku-20241022")),
                &pinned
            ),
            None
        );
        assert!(model_drift(&with_model(1, None, Some("claude-opus-4-1")), &pinned).is_some());
    }
}
