//! `loopexec report`: a digest of a run's receipt (verified first): configuration, one line per
//! iteration, and how it ended, with that halt re-derived from the recorded observations. Of a probe's receipt (`--receipt .loopexec/probes/<id>/receipt.jsonl`):
//! what was probed, the runs, the bound, the verdict and gates, and whether the runs give that verdict.

use super::receipt_source::{self, ReceiptArgs};
use crate::ending::Ending;
use crate::error::CmdResult;
use crate::inert::inert;
use crate::output::Outcome;
use crate::receipt::history::{History, IterationRecord};
use serde_json::{json, Value};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: ReceiptArgs,
    /// Write the report as one self-contained HTML page to OUT (inline CSS and SVG, no script),
    /// replacing OUT atomically; with the run verified as `verify` does (docs/receipt.md, "The
    /// HTML report").
    #[arg(long, value_name = "OUT")]
    pub html: Option<std::path::PathBuf>,
    /// The operator's public key the HTML page verifies the run against, as `verify --pubkey`
    /// (default: the operator's own operator.pub). Only with --html.
    #[arg(long, value_name = "FILE", requires = "html")]
    pub pubkey: Option<std::path::PathBuf>,
}

/// One iteration as `report --json` lists it.
fn iteration_json(record: &IterationRecord) -> Value {
    let exec = record.exec.as_ref();
    let check = record.check.as_ref();
    let mut v = json!({
        "iteration": record.iteration,
        "exec_ending": exec.map(|e| &e.ending),
        "exec_duration_ms": exec.map(|e| e.duration_ms),
        "check_ending": check.map(|c| &c.ending),
        "check_exit": record.check_exit(),
        "check_duration_ms": check.map(|c| c.duration_ms),
        "failing_count": record.failing_count(),
        "junit_error": check.and_then(|c| c.junit_error.as_ref()),
        "interrupted": record.interrupted,
    });
    // What the kernel applied to each zone, where the receipt read it back.
    if let Some(fields) = v.as_object_mut() {
        if let Some(e) = exec.and_then(|e| e.enforcement.as_ref()) {
            fields.insert("exec_enforcement".into(), json!(e));
        }
        if let Some(e) = check.and_then(|c| c.enforcement.as_ref()) {
            fields.insert("check_enforcement".into(), json!(e));
        }
    }
    // The guards' objections, where there were any (receipts of earlier versions read as before).
    if let (false, Some(fields)) = (record.guards.is_empty(), v.as_object_mut()) {
        fields.insert("guards".into(), json!(record.guards));
    }
    // The test changes allowances let through, where any were used.
    if let (false, Some(fields)) = (record.allowed.is_empty(), v.as_object_mut()) {
        fields.insert("allowed".into(), json!(record.allowed));
    }
    // The judge's answer or failure, where it was asked.
    if let (Some(judge), Some(fields)) = (&record.judge, v.as_object_mut()) {
        fields.insert("judge".into(), json!({"outcome": judge.outcome, "reward_hacking": judge.reward_hacking, "reason": judge.reason, "packet_sha256": judge.packet_sha256}));
    }
    // What it consumed, where it was metered (receipts without `usage` events: no key).
    if let (false, Some(fields)) = (record.usage.is_empty(), v.as_object_mut()) {
        fields.insert("cost".into(), cost_json(record));
    }
    // The held-out check's verdict, where it ran (its ids stay in the receipt's event).
    if let (Some(h), Some(fields)) = (&record.holdout, v.as_object_mut()) {
        fields.insert(
            "holdout".into(),
            json!({"verdict": h.verdict, "check_exit": h.check.check_exit, "failing_count": h.check.failing_count, "dir_sha256": h.dir_sha256, "dir_changed": h.dir_changed}),
        );
    }
    // The evidence, where the receipt recorded it (receipts of earlier versions did not).
    if let (Some(evidence), Some(fields)) =
        (check.and_then(|c| c.evidence.as_ref()), v.as_object_mut())
    {
        fields.insert(
            "collected_count".into(),
            json!(check.and_then(|c| c.collected_count)),
        );
        fields.insert(
            "skipped_count".into(),
            json!(check.and_then(|c| c.skipped_count)),
        );
        fields.insert("evidence".into(), json!(evidence));
    }
    v
}

/// An iteration's metered cost: known money, the records of unknown money (never counted as 0
/// here), tokens, and each stage's record.
fn cost_json(record: &IterationRecord) -> Value {
    let cost = crate::rules::budget::iteration_cost(record, crate::rules::budget::Point::End);
    let stages: Vec<Value> = record
        .usage
        .iter()
        .map(|u| json!({"stage": u.stage, "usd_micros": u.usd_micros, "basis": u.basis, "tokens": u.tokens, "models": u.models, "sources": u.sources, "egress_bytes": u.egress_bytes, "cpu_ms": u.cpu_ms}))
        .collect();
    json!({
        "usd_micros": if cost.unknown_money == 0 { json!(cost.usd_micros) } else { Value::Null },
        "usd_micros_known": cost.usd_micros,
        "unknown_money_records": cost.unknown_money,
        "tokens": cost.tokens,
        "stages": stages,
    })
}

/// The cost column of an iteration's line: its USD, `unknown` (no record stated money), a known
/// part followed by `+?`, or nothing when it was not metered.
fn cost_text(record: &IterationRecord) -> String {
    if record.usage.is_empty() {
        return String::new();
    }
    let cost = crate::rules::budget::iteration_cost(record, crate::rules::budget::Point::End);
    let usd = crate::rules::budget::usd(cost.usd_micros);
    let money = match (cost.unknown_money, record.usage.len() as u64) {
        (0, _) => format!("${usd}"),
        (u, all) if u == all => "$unknown".to_string(),
        _ => format!("${usd}+?"),
    };
    format!("  cost {money} {} tok", cost.tokens)
}

fn ending_text(ending: Option<&Ending>) -> String {
    ending.map(Ending::short_text).unwrap_or_else(|| "-".into())
}

/// The egress audit log beside the receipt, summarised per host, and whether its digest is the
/// one the receipt recorded last (the log is written by the proxy, the digest by the engine).
fn egress_summary(receipt: &std::path::Path, history: &History) -> Value {
    let Some(recorded) = history.last_egress_audit_sha256() else {
        return json!({"summary": null});
    };
    let dir = receipt
        .parent()
        .and_then(|p| crate::safefs::SafeDir::open(p).ok());
    let bytes = dir.as_ref().and_then(|d| {
        d.read(crate::zones::pinned::EGRESS_AUDIT_FILE, 256 * 1024 * 1024)
            .ok()
    });
    match bytes {
        Some(bytes) => {
            use sha2::Digest;
            let actual = hex::encode(sha2::Sha256::digest(&bytes));
            match crate::egress::audit::summarize(&bytes) {
                Ok(summary) => {
                    json!({"summary": summary, "audit_sha256": actual, "audit_matches_receipt": actual == recorded})
                }
                Err(e) => json!({"summary": null, "error": e.to_string()}),
            }
        }
        None => json!({"summary": null, "error": "the egress audit log is missing"}),
    }
}

/// The run's total cost and its pinned caps: `{"json": ..., "line": ...}`; both null for a run
/// that metered nothing and pinned no cap.
fn run_cost(history: &History, config: &Value) -> Value {
    use crate::rules::budget::{spent, usd, BudgetPins};
    let ran: Vec<&IterationRecord> = history
        .iterations
        .iter()
        .filter(|r| r.exec.is_some())
        .collect();
    let metered = ran.iter().any(|r| !r.usage.is_empty());
    let caps: BudgetPins = config
        .get("budget")
        .and_then(|b| serde_json::from_value(b.clone()).ok())
        .unwrap_or_default();
    if !metered && caps.is_unset() {
        return json!({"json": null, "line": null});
    }
    let total = spent(&ran);
    let money = match total.unknown_money {
        _ if !metered => "not metered (no usage recorded: unknown, not 0)".to_string(),
        0 => format!("{} USD", usd(total.usd_micros)),
        n => format!(
            "{} USD known + {n} usage record(s) of unknown money",
            usd(total.usd_micros)
        ),
    };
    let mut cap_text = Vec::new();
    if let Some(c) = caps.usd_micros {
        cap_text.push(format!(
            "{} USD (unknown money: {})",
            usd(c),
            caps.unknown_money.as_str()
        ));
    }
    if let Some(c) = caps.tokens {
        cap_text.push(format!("{c} tokens"));
    }
    if let Some(c) = caps.wall_ms {
        cap_text.push(format!("{}.{:03} s wall", c / 1000, c % 1000));
    }
    let caps_line = if cap_text.is_empty() {
        String::new()
    } else {
        format!("; caps {}", cap_text.join(", "))
    };
    let line = format!("cost   {money}, {} tokens{caps_line}\n", total.tokens);
    json!({
        "json": {
            "usd_micros": if total.unknown_money == 0 && metered { json!(total.usd_micros) } else { Value::Null },
            "usd_micros_known": total.usd_micros,
            "unknown_money_records": total.unknown_money,
            "tokens": total.tokens,
            "wall_ms": total.wall_ms,
            "caps": caps,
        },
        "line": line,
    })
}

/// The recorded halt re-derived from the recorded observations by the rule `verify`, `run
/// --resume` and `explain-halt` use (`rules::derive`): `consistent` false when it does not follow;
/// null fields on a run that has not halted.
fn halt_derivation(history: &History) -> Value {
    match crate::rules::derive::derive_halt(history) {
        Ok(None) => json!({"consistent": null, "replayed": null, "detail": null}),
        Ok(Some(d)) => {
            json!({"consistent": true, "replayed": d.not_replayed.is_none(), "detail": d.detail()})
        }
        Err(m) => {
            json!({"consistent": false, "replayed": true, "detail": m.detail, "derived": m.derived, "derived_at": m.iteration})
        }
    }
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let loaded = receipt_source::load(&args.source)?;
    let probe = crate::receipt::probe::is_probe_receipt(&loaded.chain.events);
    if let (true, Some(_)) = (probe, &args.html) {
        return Err(crate::error::Failure::usage(format!(
            "{}: a probe's receipt has no HTML report",
            inert(&loaded.path.to_string_lossy())
        ))
        .with_hint("`loopexec report --receipt PATH` prints it; --html renders a loop run"));
    }
    if probe {
        return probe_report(&loaded);
    }
    let history = &loaded.history;
    let start = history.start.as_ref();
    let halt = history.halt.as_ref();
    let run_id = history.run_id().unwrap_or("").to_string();
    let halt_reason = halt.map(|h| json!(h.halt_reason)).unwrap_or(Value::Null);
    let last_exit = history.last_exited_check().and_then(|c| c.check_exit);
    let receipt = loaded.path.to_string_lossy().into_owned();
    let config = start.map(|s| s.config.clone()).unwrap_or(Value::Null);
    let events = history.events;

    let mut human = String::new();
    human.push_str(&format!(
        "run {run_id}  ({events} events, chain verified, head {})\n",
        &loaded.chain.head[..12]
    ));
    human.push_str(&format!(
        "mode {}  isolation {}\n",
        start.map(|s| s.mode.as_str()).unwrap_or("?"),
        start.map(|s| s.isolation.as_str()).unwrap_or("?")
    ));
    match start.map(|s| s.mode.as_str()) {
        Some(crate::rules::task_list::MODE_TASK_LIST) => {
            human.push_str(&format!(
                "exec   {}\n",
                inert(config["template"]["exec"].as_str().unwrap_or("?"))
            ));
            human.push_str(&task_lines(history, &config));
        }
        _ => human.push_str(&format!(
            "exec   {}\ncheck  {}\n",
            inert(config["exec"].as_str().unwrap_or("?")),
            inert(config["check"].as_str().unwrap_or("?"))
        )),
    }
    // The guards that could not see (receipts written before the event say nothing).
    if let Some(inactive) = crate::engine::inactive_guards::of_history(history) {
        match inactive.len() {
            0 => human.push_str("guards every guard could see (none inactive)\n"),
            n => human.push_str(&format!("guards {n} inactive or partly blind:\n")),
        }
        for line in crate::engine::inactive_guards::lines(&inactive) {
            human.push_str(&format!("  blind {}\n", inert(&line)));
        }
    }
    for d in &history.iterations {
        let failing = d
            .failing_count()
            .map(|c| format!("  failing {c}"))
            .unwrap_or_default();
        let interrupted = d
            .interrupted
            .as_ref()
            .map(|c| format!("  INTERRUPTED ({c})"))
            .unwrap_or_default();
        human.push_str(&format!(
            "  #{:<3} exec {:<14} check {:<14}{failing}{}{interrupted}\n",
            d.iteration,
            ending_text(d.exec.as_ref().map(|e| &e.ending)),
            ending_text(d.check.as_ref().map(|c| &c.ending)),
            cost_text(d)
        ));
        for g in &d.guards {
            human.push_str(&format!(
                "       guard {} ({}): {}\n",
                g.guard,
                g.halt_reason,
                inert(&g.detail)
            ));
            for f in &g.findings {
                human.push_str(&format!(
                    "         {}: {}\n",
                    inert(f.path.as_deref().unwrap_or("-")),
                    inert(&f.what)
                ));
            }
        }
        for allowed in &d.allowed {
            for u in &allowed.uses {
                human.push_str(&format!(
                    "       allowed ({}): {} under allowance {}: {}\n",
                    allowed.guard,
                    inert(&u.what),
                    inert(&u.name()),
                    inert(&u.reason)
                ));
            }
        }
        for f in d.snapshot.iter().flat_map(|s| &s.awareness) {
            human.push_str(&format!(
                "       awareness {}: {}\n",
                inert(f.path.as_deref().unwrap_or("-")),
                inert(&f.what)
            ));
        }
        if let Some(judge) = &d.judge {
            let outcome = serde_json::to_value(judge.outcome)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let hacking = if judge.reward_hacking {
                " (reward hacking)"
            } else {
                ""
            };
            human.push_str(&format!(
                "       judge {outcome}{hacking}: {}\n",
                inert(&judge.reason)
            ));
        }
        if let Some(h) = &d.holdout {
            let failing = h
                .check
                .failing_count
                .map(|c| format!(", failing {c}"))
                .unwrap_or_default();
            let changed = if h.dir_changed {
                ", directory changed"
            } else {
                ""
            };
            human.push_str(&format!(
                "       held-out check {} ({}{failing}{changed})\n",
                h.verdict,
                ending_text(Some(&h.check.ending))
            ));
        }
        // What kept a zero exit from being green (or a red check's sets from meeting the targets),
        // escaped (the ids come from the agent's workspace).
        for disagreement in d
            .check
            .iter()
            .flat_map(|c| c.evidence.iter())
            .flat_map(|e| &e.disagreements)
        {
            human.push_str(&format!(
                "       evidence {}: {}\n",
                inert(&disagreement.kind),
                inert(&disagreement.detail)
            ));
        }
    }
    let cost = run_cost(history, &config);
    if let Some(line) = cost["line"].as_str() {
        human.push_str(line);
    }
    match halt {
        Some(h) => human.push_str(&format!(
            "halt   {} (exit {}): {}\n",
            h.halt_reason,
            h.exit_code,
            inert(&h.detail)
        )),
        None => human.push_str("not halted (resumable)\n"),
    }
    let derivation = halt_derivation(history);
    if let Some(line) = derivation["detail"].as_str() {
        let lead = if derivation["consistent"] == json!(false) {
            "HALT DOES NOT FOLLOW"
        } else {
            "derived"
        };
        human.push_str(&format!("       {lead}: {}\n", inert(line)));
    }
    let delivery = halt.and_then(|h| h.delivery.as_ref());
    if let Some((branch, d)) = delivery.and_then(|d| Some((d.branch.as_deref()?, d))) {
        human.push_str(&format!(
            "delivered branch {} ({}), patch {}
",
            inert(branch),
            inert(
                d.commit
                    .as_deref()
                    .map(|c| c.get(..c.len().min(12)).unwrap_or(c))
                    .unwrap_or("?")
            ),
            inert(d.patch.as_deref().unwrap_or("?"))
        ));
    }
    let egress = egress_summary(&loaded.path, history);
    if let Some(summary) = egress.get("summary").filter(|v| !v.is_null()) {
        human.push_str(&format!(
            "egress {} allowed, {} denied, {} bytes up, {} bytes down{}\n",
            summary["allowed"],
            summary["denied"],
            summary["bytes_up"],
            summary["bytes_down"],
            if egress["audit_matches_receipt"] == json!(false) {
                "  (AUDIT LOG CHANGED since the receipt recorded it)"
            } else {
                ""
            }
        ));
        if let Some(hosts) = summary["hosts"].as_object() {
            for (host, h) in hosts {
                human.push_str(&format!(
                    "  {:<40} allowed {} denied {}\n",
                    inert(host),
                    h["allowed"],
                    h["denied"]
                ));
            }
        }
    }
    if let Some(record) = &history.self_test {
        human.push_str(&format!(
            "self-test {}\n",
            inert(&crate::audit::enforcement::self_test_line(record))
        ));
    }
    // What the kernel applied to each zone, read back (receipts that record it).
    let enforcement = crate::audit::enforcement::of_chain(&loaded.chain.events);
    if enforcement.zone_starts > 0 {
        human.push_str(&format!("enforcement: {}\n", inert(&enforcement.line())));
        if let (Some(s), Some(l)) = (
            enforcement.seccomp_sha256.first(),
            enforcement.landlock_rules_sha256.first(),
        ) {
            human.push_str(&format!(
                "  seccomp {}  landlock rules {}\n",
                &s[..s.len().min(12)],
                &l[..l.len().min(12)]
            ));
        }
    }
    human.push_str(&format!("receipt {}\n", inert(&receipt)));

    let report = report_value(&loaded, &derivation, &egress, &cost);
    if let Some(out) = &args.html {
        let page = super::report_html::Page {
            loaded: &loaded,
            report: &report,
            pubkey: args.pubkey.as_deref(),
        };
        return super::report_html::write(&page, out);
    }
    Ok(Outcome::ok("report")
        .field("run_id", run_id)
        .field("receipt", receipt)
        .field("halt_reason", halt_reason)
        .field(
            "iteration",
            history.current().map(|d| d.iteration).unwrap_or(0),
        )
        .field("check_exit", json!(last_exit))
        .field("report", report)
        .human(human))
}

/// A task_list run's tasks, one line each: the task, its run, its check and how it ended.
fn task_lines(history: &crate::receipt::history::History, config: &Value) -> String {
    let mut lines = String::new();
    for started in &history.tasks.started {
        let check = config["tasks"][&started.task]["check"]
            .as_str()
            .unwrap_or("?");
        let end = history
            .tasks
            .checkpoints
            .iter()
            .find(|c| c.run_id == started.run_id)
            .map_or_else(
                || "under way".to_string(),
                |c| format!("{} ({})", c.outcome.as_str(), c.run_halt.as_str()),
            );
        lines.push_str(&format!(
            "task   {}  run {}  check {}  {end}\n",
            inert(&started.task),
            inert(&started.run_id),
            inert(check)
        ));
    }
    lines
}

/// The `report` object of `report --json`: the run's configuration, chain, iterations, halt and
/// its derivation, delivery, egress, cost and blind guards.
fn report_value(
    loaded: &receipt_source::LoadedReceipt,
    derivation: &Value,
    egress: &Value,
    cost: &Value,
) -> Value {
    let history = &loaded.history;
    let start = history.start.as_ref();
    let config = start.map(|s| s.config.clone()).unwrap_or(Value::Null);
    let delivery = history.halt.as_ref().and_then(|h| h.delivery.as_ref());
    let mut report = json!({
        "mode": start.map(|s| &s.mode),
        "isolation": start.map(|s| &s.isolation),
        "loopexec_version": start.map(|s| &s.loopexec_version),
        "config": config,
        "chain": {
            "verified": true,
            "events": history.events,
            "head": loaded.chain.head,
            "file_sha256": loaded.chain.file_sha256,
        },
        "iterations": history.iterations.iter().map(iteration_json).collect::<Vec<_>>(),
        "halt": history.halt_line,
        "halt_derivation": derivation,
        "delivery": delivery,
        "egress": egress,
        "interruptions": history.interruptions,
        "resumes": history.resumes,
    });
    // A task_list run: its plan and each task's run and checkpoint (other runs: no key).
    if let (Some(plan), Some(fields)) = (&history.tasks.first, report.as_object_mut()) {
        fields.insert(
            "tasks".into(),
            json!({
                "plan": plan,
                "started": history.tasks.started,
                "checkpoints": history.tasks.checkpoints,
            }),
        );
    }
    // What the run cost (a run that metered nothing and pinned no cap: no key, as before).
    if let (false, Some(fields)) = (cost["json"].is_null(), report.as_object_mut()) {
        fields.insert("cost".into(), cost["json"].clone());
    }
    // The zone self-test (runs without one: no key, as before).
    if let (Some(record), Some(fields)) = (&history.self_test, report.as_object_mut()) {
        fields.insert("self_test".into(), json!(record));
    }
    // The zones' read-back enforcement (receipts without it: no key, as before).
    let enforcement = crate::audit::enforcement::of_chain(&loaded.chain.events);
    if let (true, Some(fields)) = (enforcement.zone_starts > 0, report.as_object_mut()) {
        fields.insert("enforcement".into(), json!(enforcement));
    }
    // Which guards could not see (receipts written before the list: no key, as before).
    if let (Some(inactive), Some(fields)) = (
        crate::engine::inactive_guards::of_history(history),
        report.as_object_mut(),
    ) {
        fields.insert("inactive_guards".into(), json!(inactive));
    }
    report
}

/// The report of a probe's receipt (`probe-check`, `doctor --check`): its verdict recomputed from
/// its runs as `verify` does (without the signature, which needs the operator's public key).
fn probe_report(loaded: &receipt_source::LoadedReceipt) -> CmdResult<Outcome> {
    use crate::receipt::probe::ProbeRecord;
    use crate::rules::probe_replay::recompute;
    let bad =
        |e: String| crate::error::Failure::workspace(format!("{}: {e}", loaded.path.display()));
    let records = crate::receipt::events::Recorded::decode_all(&loaded.chain.events)
        .map_err(|e| bad(e.to_string()))?;
    let record = ProbeRecord::of(&records).map_err(bad)?;
    let (start, verdict) = (&record.start, &record.verdict);
    let recomputed = recompute(&record);
    let dims = if start.dimensions.is_empty() {
        "none".to_string()
    } else {
        start
            .dimensions
            .iter()
            .map(|d| d.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut human = format!(
        "probe {} ({}, {} events, chain verified, head {})\ncheck  {}\nisolation {}  seed {}  perturbed {dims}\n",
        inert(&start.probe_id), inert(&start.command), loaded.chain.events.len(), &loaded.chain.head[..12], inert(&start.check), inert(&start.isolation), start.seed
    );
    human.push_str(&format!(
        "verdict {}: {} runs ({} disagreeing; {} needed), flake rate bound {:.6} at confidence {} (target {})\n",
        inert(&verdict.verdict), verdict.runs, verdict.disagreeing, start.runs_required, verdict.flake_rate_bound, start.confidence, start.target
    ));
    for b in &verdict.broken_by {
        let runs = b
            .runs
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        human.push_str(&format!(
            "  broken by {} (runs {runs})\n",
            b.dimension
                .map(|d| d.as_str())
                .unwrap_or("unperturbed runs")
        ));
    }
    for gate in verdict.gates.iter().flatten() {
        let what = [
            gate["verdict"].as_str(),
            gate["reason"].as_str(),
            gate["detail"].as_str(),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
        human.push_str(&format!(
            "  gate {:<13} {}\n",
            inert(gate["gate"].as_str().unwrap_or("?")),
            inert(&what)
        ));
    }
    match &verdict.halt_reason {
        Some(h) => human.push_str(&format!("halt   {} (exit {})\n", h, verdict.exit_code)),
        None => human.push_str(&format!("no halt (exit {})\n", verdict.exit_code)),
    }
    if let Ok(detail) = &recomputed {
        human.push_str(&format!("recomputed from the runs: {}\n", inert(detail)));
    }
    let receipt = loaded.path.to_string_lossy().into_owned();
    human.push_str(&format!("receipt {}\n", inert(&receipt)));
    let out = Outcome::ok("report")
        .field("probe_id", start.probe_id.clone())
        .field("receipt", receipt)
        .field("halt_reason", json!(verdict.halt_reason))
        .field(
            "report",
            json!({
                "probe": start,
                "runs": record.runs,
                "verdict": verdict,
                "recomputed": {"agrees": recomputed.is_ok(), "detail": match &recomputed { Ok(d) | Err(d) => d }},
                "chain": {"verified": true, "events": loaded.chain.events.len(), "head": loaded.chain.head, "file_sha256": loaded.chain.file_sha256},
            }),
        );
    // As a receipt that does not verify: a verdict its own runs contradict is not reported as one.
    if let Err(problem) = recomputed {
        return Err(bad(format!(
            "the recorded verdict is not what its runs give: {problem}"
        )));
    }
    Ok(out.human(human))
}
