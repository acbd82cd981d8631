//! `loopexec inspect-cost`: the budget rules (`crate::rules::budget`) applied offline, to a run's
//! recorded usage (its receipt, verified first) or to a cost ledger (one iteration's USD per line),
//! under the run's pinned caps or the ones given here: each iteration's cost, the spend after it,
//! the projection the loop made before it, the anomaly threshold, and the first budget halt the
//! rules decide (docs/budget.md, "inspect-cost").

use super::receipt_source::{self, ReceiptArgs};
use crate::error::{CmdResult, Failure};
use crate::inert::inert;
use crate::output::Outcome;
use crate::rules::budget::{self, BudgetHalt, BudgetPins, PinnedModel, Point, UnknownMoney};
use serde_json::{json, Value};
use std::io::Read;
use std::path::PathBuf;

/// The largest ledger read.
pub const MAX_LEDGER_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: ReceiptArgs,
    /// A cost ledger instead of a run: one iteration's cost in USD per line (decimal, at most 6
    /// decimals); blank lines and lines starting with `#` are skipped.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["run_id", "receipt"])]
    pub ledger: Option<PathBuf>,
    /// The USD cap to apply (default: the run's pinned one; a ledger has none).
    #[arg(long, value_name = "USD")]
    pub budget_usd: Option<String>,
    /// The token cap to apply to a run (default: its pinned one).
    #[arg(long, value_name = "N", conflicts_with = "ledger")]
    pub budget_tokens: Option<String>,
    /// How a run's usage of unknown money counts against the USD cap (default: the run's pinned
    /// choice; required with --budget-usd on a run that pinned none).
    #[arg(long, value_name = "HOW", value_enum, conflicts_with = "ledger")]
    pub budget_unknown_money: Option<UnknownMoneyArg>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum UnknownMoneyArg {
    Ignore,
    Halt,
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let usd = args
        .budget_usd
        .as_deref()
        .map(|raw| {
            budget::parse_usd_micros(raw).map_err(|e| Failure::usage(format!("--budget-usd: {e}")))
        })
        .transpose()?;
    let tokens = args
        .budget_tokens
        .as_deref()
        .map(|raw| {
            raw.trim().parse::<u64>().map_err(|_| {
                Failure::usage(format!(
                    "--budget-tokens: {:?} is not a whole number of tokens",
                    inert(raw)
                ))
            })
        })
        .transpose()?;
    if usd == Some(0) || tokens == Some(0) {
        return Err(Failure::usage("a budget cap must be greater than 0"));
    }
    match &args.ledger {
        Some(path) => ledger(path, usd),
        None => recorded_run(&args, usd, tokens),
    }
}

/// Read a ledger: bounded, no link followed, every line a USD amount.
fn read_ledger(path: &PathBuf) -> CmdResult<Vec<u64>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            Failure::invalid_input(format!("--ledger {}: {e}", inert(&path.to_string_lossy())))
        })?;
    let mut bytes = Vec::new();
    file.take(MAX_LEDGER_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            Failure::invalid_input(format!("--ledger {}: {e}", inert(&path.to_string_lossy())))
        })?;
    if bytes.len() as u64 > MAX_LEDGER_BYTES {
        return Err(Failure::invalid_input(format!(
            "--ledger {}: larger than {MAX_LEDGER_BYTES} bytes",
            inert(&path.to_string_lossy())
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        Failure::invalid_input(format!(
            "--ledger {}: not UTF-8",
            inert(&path.to_string_lossy())
        ))
    })?;
    let mut values = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let micros = budget::parse_usd_micros(t).map_err(|e| {
            Failure::invalid_input(format!(
                "--ledger {} line {}: {e}",
                inert(&path.to_string_lossy()),
                i + 1
            ))
        })?;
        values.push(micros);
    }
    Ok(values)
}

fn halt_json(halt: &Option<BudgetHalt>) -> Value {
    match halt {
        Some(h) => {
            json!({"halt_reason": h.reason, "iteration": h.iteration, "point": point_name(h.point), "detail": h.detail})
        }
        None => Value::Null,
    }
}

fn point_name(point: Point) -> &'static str {
    match point {
        Point::BeforeAgent => "before_agent",
        Point::AfterAgent => "after_agent",
        Point::End => "end",
    }
}

fn halt_line(halt: &Option<BudgetHalt>, caps: &BudgetPins) -> String {
    match halt {
        Some(h) if h.point == Point::BeforeAgent => format!(
            "halt   {} before iteration {}: {}\n",
            h.reason,
            h.iteration + 1,
            inert(&h.detail)
        ),
        Some(h) => format!(
            "halt   {} at iteration {} ({}): {}\n",
            h.reason,
            h.iteration,
            h.point.as_str(),
            inert(&h.detail)
        ),
        None if caps.is_unset() => {
            "no cap applied: no budget halt can be decided (give --budget-usd)\n".into()
        }
        None => "no budget halt\n".into(),
    }
}

fn opt_usd(v: Option<u64>) -> String {
    v.map_or("-".into(), budget::usd)
}

fn ledger(path: &PathBuf, usd: Option<u64>) -> CmdResult<Outcome> {
    let values = read_ledger(path)?;
    // Every ledger line states its money: nothing is unknown.
    let caps = BudgetPins {
        usd_micros: usd,
        unknown_money: UnknownMoney::Ignore,
        ..Default::default()
    };
    let (steps, halt) = budget::walk_ledger(&values, &caps);
    let mut human = format!(
        "ledger {} ({} iteration(s))\n",
        inert(&path.to_string_lossy()),
        values.len()
    );
    human.push_str(&format!(
        "  {:<5} {:>16} {:>16} {:>16} {:>16}\n",
        "#", "cost USD", "spent USD", "projected USD", "anomaly above"
    ));
    for s in &steps {
        human.push_str(&format!(
            "  {:<5} {:>16} {:>16} {:>16} {:>16}{}\n",
            s.iteration,
            budget::usd(s.usd_micros),
            budget::usd(s.spent_micros),
            budget::usd(s.projected_micros),
            opt_usd(s.anomaly_threshold),
            if s.anomalous { "  ANOMALY" } else { "" }
        ));
    }
    human.push_str(&halt_line(&halt, &caps));
    let iterations: Vec<Value> = steps
        .iter()
        .map(|s| json!({"iteration": s.iteration, "usd_micros": s.usd_micros, "spent_micros": s.spent_micros, "projected_micros": s.projected_micros, "anomaly_threshold_micros": s.anomaly_threshold, "anomalous": s.anomalous}))
        .collect();
    Ok(Outcome::ok("inspect-cost")
        .field("source", json!({"ledger": path.to_string_lossy()}))
        .field("caps", json!(caps))
        .field("lines", values.len())
        .field("iterations", iterations)
        .field("halt", halt_json(&halt))
        .human(human))
}

fn recorded_run(args: &Args, usd: Option<u64>, tokens: Option<u64>) -> CmdResult<Outcome> {
    let loaded = receipt_source::load(&args.source)?;
    let history = &loaded.history;
    let start = history.start.as_ref().ok_or_else(|| {
        Failure::workspace(format!(
            "{}: no run_start: not a run's receipt",
            inert(&loaded.path.to_string_lossy())
        ))
    })?;
    let pinned: BudgetPins = start
        .config
        .get("budget")
        .and_then(|b| serde_json::from_value(b.clone()).ok())
        .unwrap_or_default();
    let unknown_money = match args.budget_unknown_money {
        Some(UnknownMoneyArg::Ignore) => UnknownMoney::Ignore,
        Some(UnknownMoneyArg::Halt) => UnknownMoney::Halt,
        None => pinned.unknown_money,
    };
    let caps = BudgetPins {
        usd_micros: usd.or(pinned.usd_micros),
        tokens: tokens.or(pinned.tokens),
        wall_ms: pinned.wall_ms,
        unknown_money,
    };
    if caps.usd_micros.is_some() && caps.unknown_money == UnknownMoney::Refuse {
        return Err(Failure::usage(
            "--budget-usd: the run pinned no choice for usage of unknown money",
        )
        .with_hint("add --budget-unknown-money ignore or halt"));
    }
    let pinned_model = PinnedModel::of_config(&start.config);
    let ran: Vec<&crate::receipt::history::IterationRecord> = history
        .iterations
        .iter()
        .filter(|r| r.exec.is_some())
        .collect();
    let halt = budget::first_halt(&history.iterations, &caps, &pinned_model, |r| {
        r.check.is_some()
    });
    let run_id = history.run_id().unwrap_or("").to_string();
    let mut human = format!(
        "run {} ({} iteration(s) with an agent step)\n",
        inert(&run_id),
        ran.len()
    );
    human.push_str(&format!(
        "  {:<5} {:>16} {:>8} {:>12} {:>16} {:>16}\n",
        "#", "cost USD", "unknown", "tokens", "spent USD", "projected USD"
    ));
    let mut iterations = Vec::new();
    let mut spent = budget::Cost::default();
    for (i, record) in ran.iter().enumerate() {
        let cost = budget::iteration_cost(record, Point::End);
        let projected = budget::projection(&ran[..i]);
        spent = budget::spent(&ran[..=i]);
        let money = if record.usage.is_empty() {
            None
        } else {
            Some(cost.usd_micros)
        };
        human.push_str(&format!(
            "  {:<5} {:>16} {:>8} {:>12} {:>16} {:>16}\n",
            record.iteration,
            match (money, cost.unknown_money) {
                (None, _) => "not metered".to_string(),
                (Some(m), 0) => budget::usd(m),
                (Some(m), _) => format!("{}+?", budget::usd(m)),
            },
            cost.unknown_money,
            cost.tokens,
            budget::usd(spent.usd_micros),
            budget::usd(projected.usd_micros)
        ));
        let stages: Vec<Value> = record.usage.iter().map(|u| json!({"stage": u.stage, "usd_micros": u.usd_micros, "basis": u.basis, "tokens": u.tokens, "models": u.models})).collect();
        iterations.push(json!({
            "iteration": record.iteration,
            "metered": !record.usage.is_empty(),
            "usd_micros_known": cost.usd_micros,
            "unknown_money_records": cost.unknown_money,
            "tokens": cost.tokens,
            "wall_ms": cost.wall_ms,
            "spent_micros": spent.usd_micros,
            "projected_micros": projected.usd_micros,
            "stages": stages,
        }));
    }
    if spent.unknown_money > 0 {
        human.push_str(&format!(
            "  {} usage record(s) of unknown money: the USD above is a lower bound\n",
            spent.unknown_money
        ));
    }
    human.push_str(&halt_line(&halt, &caps));
    Ok(Outcome::ok("inspect-cost")
        .field("source", json!({"run_id": run_id, "receipt": loaded.path.to_string_lossy()}))
        .field("caps", json!(caps))
        .field("total", json!({"usd_micros_known": spent.usd_micros, "unknown_money_records": spent.unknown_money, "tokens": spent.tokens, "wall_ms": spent.wall_ms}))
        .field("iterations", iterations)
        .field("halt", halt_json(&halt))
        .human(human))
}
