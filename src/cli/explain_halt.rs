//! `loopexec explain-halt`: why a run stopped, in one paragraph, with the operator's verdict
//! (`done`, `raise_the_limit`, `do_not_retry`, `fix_the_check`, `human_needed`;
//! [`crate::convergence::verdict`]), its evidence (the |F_i| trajectory of failing targets over the
//! accepted iterations, the decisive iterations) and the exact next command. Everything comes from
//! the receipt alone, so `verify` reaches the same verdict offline ([`verdict_of`]). A halt that
//! does not follow from its observations, or that was never sealed, gets no verdict: it is said.

use super::receipt_source::{self, ReceiptArgs};
use crate::convergence::verdict::{explain, Explanation, Verdict};
use crate::engine::config::LoopConfig;
use crate::engine::detached::WorkspaceMode;
use crate::error::CmdResult;
use crate::output::{aligned, Outcome};
use crate::receipt::history::{History, LastStop};
use serde::Serialize;
use serde_json::{json, Value};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: ReceiptArgs,
}

/// The verdict on a halted run with the command to run next.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HaltVerdict {
    #[serde(flatten)]
    pub explanation: Explanation,
    /// The iterations the verdict rests on: the halting one, and for a no-convergence halt the
    /// ones its rule named.
    pub decisive_iterations: Vec<u64>,
    /// A shell command line (arguments quoted) to run next.
    pub next_command: String,
}

/// |F_i| of the run: failing targets after each accepted iteration (the `progress` events); a
/// receipt written before them falls back to each check's failing-set size.
fn trajectory(history: &History) -> Vec<(u64, usize)> {
    let judged = crate::rules::progress::accepted_trajectory(history);
    if !judged.is_empty() || history.iterations.iter().any(|r| r.progress.is_some()) {
        return judged;
    }
    history
        .iterations
        .iter()
        .filter_map(|r| Some((r.iteration, r.failing_count()? as usize)))
        .collect()
}

/// The iterations a rule's evidence names (every number under an `iteration`-like key).
fn evidence_iterations(evidence: &Value, into: &mut Vec<u64>) {
    let Some(fields) = evidence.as_object() else {
        return;
    };
    for (key, value) in fields {
        match value {
            Value::Number(n) if key != "best" => into.extend(n.as_u64()),
            Value::Array(items) if key != "failing" => {
                for item in items {
                    match item {
                        Value::Number(n) => into.extend(n.as_u64()),
                        Value::Array(pair) => into.extend(pair.first().and_then(Value::as_u64)),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
}

fn quote(arg: &str) -> String {
    shlex::try_quote(arg)
        .map(|q| q.into_owned())
        .unwrap_or_else(|_| format!("'{}'", arg.replace('\0', "")))
}

/// `loopexec run` again with the run's pinned commands, isolation, reports, protected paths,
/// timeouts, policies, progress parameters, targets and reference, and a cap of `cap`.
fn rerun_command(cfg: &LoopConfig, cap: u64) -> String {
    let mut args: Vec<String> = vec![
        "loopexec".into(),
        "run".into(),
        "--workdir".into(),
        cfg.workdir.clone(),
    ];
    args.extend(["--isolation".into(), cfg.isolation.as_str().into()]);
    if cfg.isolation == crate::zones::Isolation::Native {
        let mode = match cfg.workspace {
            WorkspaceMode::Detached => "detached",
            WorkspaceMode::InPlace => "in-place",
        };
        args.extend(["--workspace".into(), mode.into()]);
    }
    if cfg.include_uncommitted {
        args.push("--include-uncommitted".into());
    }
    for (flag, pin) in [
        ("--policy", &cfg.agent_policy),
        ("--check-policy", &cfg.check_policy),
    ] {
        if let Some(pin) = pin {
            args.extend([flag.into(), pin.source.clone()]);
        }
    }
    args.extend([
        "--check".into(),
        cfg.check.clone(),
        "--exec".into(),
        cfg.exec.clone(),
    ]);
    for report in cfg.report_patterns() {
        args.extend(["--report".into(), report]);
    }
    for protect in &cfg.protected {
        args.extend(["--protect".into(), protect.clone()]);
    }
    let secs = |ms: u64| format!("{}", ms as f64 / 1000.0);
    args.extend([
        "--exec-timeout".into(),
        secs(cfg.exec_timeout_ms),
        "--check-timeout".into(),
        secs(cfg.check_timeout_ms),
    ]);
    args.extend([
        "--no-progress-k".into(),
        cfg.progress.no_progress_k.to_string(),
    ]);
    for target in &cfg.targets {
        args.extend(["--target".into(), target.clone()]);
    }
    if let Some(reference) = &cfg.reference {
        args.extend(["--reference".into(), reference.clone()]);
    }
    args.extend(["--max-iterations".into(), cap.to_string()]);
    args.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}

/// The verdict on `history`'s halt, or `None` when the run has not halted.
pub fn verdict_of(history: &History) -> Option<HaltVerdict> {
    let halt = history.halt.as_ref()?;
    let explanation = explain(halt.halt_reason, &trajectory(history));
    let mut decisive = vec![halt.iteration];
    let fired = history.iterations.iter().rev().find_map(|r| {
        r.progress
            .as_ref()
            .filter(|p| p.halt_reason == Some(halt.halt_reason))
    });
    if let Some(evidence) = fired.and_then(|p| p.evidence.as_ref()) {
        evidence_iterations(evidence, &mut decisive);
    }
    decisive.sort_unstable();
    decisive.dedup();
    let run_id = history.run_id().unwrap_or_default();
    let cfg: Option<LoopConfig> = history
        .start
        .as_ref()
        .and_then(|s| serde_json::from_value(s.config.clone()).ok());
    let workdir = cfg
        .as_ref()
        .map(|c| c.workdir.clone())
        .unwrap_or_else(|| ".".into());
    let report = format!(
        "loopexec report {} --workdir {}",
        quote(run_id),
        quote(&workdir)
    );
    let next_command = match (explanation.verdict, &cfg, explanation.more_iterations) {
        (Verdict::RaiseTheLimit, Some(cfg), Some(more)) => {
            rerun_command(cfg, halt.iteration + more)
        }
        (Verdict::Done, _, _) => match halt.delivery.as_ref().and_then(|d| d.branch.as_deref()) {
            Some(branch) => format!(
                "git -C {} diff --stat HEAD {}",
                quote(&workdir),
                quote(branch)
            ),
            None => report,
        },
        _ => report,
    };
    Some(HaltVerdict {
        explanation,
        decisive_iterations: decisive,
        next_command,
    })
}

/// The existence proof: the `reference` event, or that none was given; and one sentence.
fn existence_proof(history: &History) -> (Value, String) {
    match &history.reference {
        Some(reference) => (json!(reference), reference.detail.clone()),
        None => (
            json!({"given": false}),
            "no existence proof was given (no --reference)".to_string(),
        ),
    }
}

/// The one-paragraph `why` of a halt with a verdict.
pub(crate) fn summary(reason: &str, detail: &str, verdict: &HaltVerdict) -> String {
    let advice = &verdict.explanation.because;
    match reason {
        "success_condition_met" => format!("converged: {detail}."),
        "max_iterations_reached" => match verdict.explanation.verdict {
            Verdict::RaiseTheLimit => format!("iteration cap: {detail}. Progress: {advice} - raise the limit."),
            _ => format!("iteration cap: {detail}. Progress: {advice} - raising the limit is unlikely to help."),
        },
        "execution_failure" => format!("a command did not complete: {detail}. Fix the command or its timeout, then start a new run."),
        "metric_integrity_violation" => format!(
            "the evidence contradicts the check's result: {detail}. A zero exit counts only when the declared reports and the runners' own output agree with it (docs/guards.md)"
        ),
        "workspace_invalid" => format!("the workspace or state is unusable: {detail}."),
        "reviewer_rejected" => format!("the judge vetoed a green step: {detail}. Nothing of that step was delivered; read its reason, then start a new run."),
        "escalation_pending" => format!("a human decides: {detail}. The judge did not approve; see its `judge` event and output artifacts."),
        other => format!("{other}: {detail}. {advice}."),
    }
}

/// Whether the run's envelope is beside its receipt (`receipt`'s directory holds
/// `envelope.dsse.json`, not followed if a symlink).
fn envelope_beside(receipt: &std::path::Path) -> bool {
    let dir = receipt.parent().unwrap_or(std::path::Path::new(""));
    std::fs::symlink_metadata(dir.join(crate::receipt::seal::ENVELOPE_FILE)).is_ok()
}

fn list(items: impl IntoIterator<Item = String>) -> String {
    items.into_iter().collect::<Vec<_>>().join(", ")
}

/// Why a halted run gets no verdict: its halt does not follow from the recorded observations, or
/// it was recorded but never sealed (its supervisor died between the two).
#[derive(Debug, Clone)]
pub(crate) enum Withheld {
    DoesNotFollow(crate::rules::derive::Mismatch),
    NotSealed,
}

impl Withheld {
    /// The sentence `explain-halt` says instead of a verdict.
    pub(crate) fn summary(&self, history: &History) -> String {
        match self {
            Withheld::DoesNotFollow(mismatch) => format!(
                "the recorded halt does not follow from the receipt's observations: {}",
                mismatch.detail
            ),
            Withheld::NotSealed => {
                let (reason, iteration) = history
                    .halt
                    .as_ref()
                    .map(|h| (h.halt_reason.as_str(), h.iteration))
                    .unwrap_or_default();
                format!(
                    "halted {reason} at iteration {iteration}, but the run is not sealed (its supervisor died between the halt and the seal); `{}` finishes the seal",
                    resume_command(history)
                )
            }
        }
    }
}

/// Whether the verdict on `history`'s halt (its receipt at `receipt`) is withheld, and why; `None`
/// also for a run that has not halted.
pub(crate) fn withheld(history: &History, receipt: &std::path::Path) -> Option<Withheld> {
    history.halt.as_ref()?;
    if let Err(mismatch) = crate::rules::derive::derive_halt(history) {
        return Some(Withheld::DoesNotFollow(mismatch));
    }
    (!envelope_beside(receipt)).then_some(Withheld::NotSealed)
}

fn resume_command(history: &History) -> String {
    format!(
        "loopexec run --resume {}",
        quote(history.run_id().unwrap_or(""))
    )
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let loaded = receipt_source::load(&args.source)?;
    if crate::receipt::probe::is_probe_receipt(&loaded.chain.events) {
        return probe_explanation(&loaded);
    }
    let history = &loaded.history;
    let run_id = history.run_id().unwrap_or("").to_string();
    let counts: Vec<Option<u64>> = history.failing_counts();
    let receipt = loaded.path.to_string_lossy().into_owned();
    let last_exit = history.last_exited_check().and_then(|c| c.check_exit);
    let out = Outcome::ok("explain-halt")
        .field("run_id", run_id.clone())
        .field("receipt", receipt)
        .field("check_exit", json!(last_exit));
    if let Some(withheld) = withheld(history, &loaded.path) {
        let summary = withheld.summary(history);
        let (reason, iteration) = history
            .halt
            .as_ref()
            .map(|h| (h.halt_reason.as_str(), h.iteration))
            .unwrap_or_default();
        let (explanation, after) = match &withheld {
            Withheld::DoesNotFollow(mismatch) => (
                json!({"halted": true, "consistent": false, "summary": summary, "derived": mismatch.derived, "derived_at": mismatch.iteration, "verdict": Value::Null}),
                "no verdict is given on it (loopexec verify names the check that fails)",
            ),
            Withheld::NotSealed => (
                json!({"halted": true, "sealed": false, "consistent": true, "summary": summary, "next_command": resume_command(history), "verdict": Value::Null}),
                "no verdict is given on it before it is sealed",
            ),
        };
        return Ok(out
            .field("halt_reason", reason)
            .field("iteration", iteration)
            .field("explanation", explanation)
            .human(format!("run {run_id}: {summary}; {after}\n")));
    }
    let (Some(halt), Some(verdict)) = (&history.halt, verdict_of(history)) else {
        let why = match history.last_stop {
            _ if history.comprehension_stopped => "stopped by the comprehension gate (comprehension_debt_exceeded): a pinned reviewer's `loopexec ack`, then resumable",
            Some(LastStop::Interrupted) => "interrupted by the operator; resumable",
            _ => "paused or still running; resumable",
        };
        let resume = format!("loopexec run --resume {}", quote(&run_id));
        return Ok(out
            .field("halt_reason", Value::Null)
            .field("iteration", history.current().map(|d| d.iteration).unwrap_or(0))
            .field("explanation", json!({"halted": false, "summary": format!("not halted: {why}"), "next_command": resume}))
            .human(format!("run {run_id} has not halted: {why} ({resume})\n")));
    };
    let reason = halt.halt_reason.as_str().to_string();
    let detail = halt.detail.clone();
    let iteration = halt.iteration;
    let text = summary(&reason, &detail, &verdict);
    let mut rows = vec![
        ("run_id", run_id.clone()),
        ("halt_reason", reason.clone()),
        ("iteration", iteration.to_string()),
    ];
    rows.push(("why", text.clone()));
    rows.push(("verdict", verdict.explanation.verdict.as_str().to_string()));
    if !verdict.explanation.trajectory.is_empty() {
        rows.push((
            "failing_targets",
            list(
                verdict
                    .explanation
                    .trajectory
                    .iter()
                    .map(|(i, n)| format!("{n} at {i}")),
            ),
        ));
    }
    rows.push((
        "decisive",
        list(verdict.decisive_iterations.iter().map(u64::to_string)),
    ));
    // The evidence of the guards that objected in the halting iteration (escaped by `aligned`).
    let guards: Vec<_> = history
        .iterations
        .iter()
        .filter(|d| d.iteration == iteration)
        .flat_map(|d| d.guards.iter())
        .collect();
    for g in &guards {
        rows.push((
            "guard",
            format!("{} ({}): {}", g.guard, g.halt_reason, g.detail),
        ));
        for f in &g.findings {
            rows.push((
                "finding",
                format!("{}: {}", f.path.as_deref().unwrap_or("-"), f.what),
            ));
        }
    }
    // The test changes allowances let through, in any iteration (a reviewer reads each).
    let allowed: Vec<(u64, &crate::receipt::events::TestChangeAllowedRecord)> = history
        .iterations
        .iter()
        .flat_map(|d| d.allowed.iter().map(move |a| (d.iteration, a)))
        .collect();
    for (n, a) in &allowed {
        for u in &a.uses {
            rows.push((
                "allowed",
                format!(
                    "iteration {n}: {} under allowance {}: {}",
                    u.what,
                    u.name(),
                    u.reason
                ),
            ));
        }
    }
    // The guards that could not see (their evidence and the switch that enables each).
    let inactive = crate::engine::inactive_guards::of_history(history);
    for line in crate::engine::inactive_guards::lines(inactive.as_deref().unwrap_or_default()) {
        rows.push(("blind", line));
    }
    // What the halting iteration's tree observes that can tell a test run from a real one.
    let observed = history
        .iterations
        .iter()
        .rev()
        .find(|d| d.iteration == iteration)
        .and_then(|d| d.snapshot.as_ref())
        .map(|s| s.awareness.as_slice())
        .unwrap_or_default();
    for f in observed {
        rows.push((
            "awareness",
            format!("{}: {}", f.path.as_deref().unwrap_or("-"), f.what),
        ));
    }
    // The judge's answer on the halting iteration (its reason is escaped when recorded and by `aligned`).
    let judge = history
        .iterations
        .iter()
        .rev()
        .find(|d| d.iteration == iteration)
        .and_then(|d| d.judge.as_ref());
    if let Some(j) = judge {
        let hacking = if j.reward_hacking {
            ", reward hacking"
        } else {
            ""
        };
        rows.push((
            "judge",
            format!(
                "{}{hacking}: {}",
                json!(j.outcome).as_str().unwrap_or(""),
                j.reason
            ),
        ));
    }
    // The evidence of the last check (its disagreements, when it kept a zero exit from passing, or
    // a red check's gaps, which keep its sets from meeting the targets).
    let evidence = history.last_check().and_then(|(_, c)| c.evidence.clone());
    for d in evidence.iter().flat_map(|e| &e.disagreements) {
        rows.push(("evidence", format!("{}: {}", d.kind, d.detail)));
    }
    let proof = existence_proof(history);
    rows.push(("reference", proof.1.clone()));
    rows.push(("next", verdict.next_command.clone()));
    // Receipts of earlier versions recorded no evidence: their explanation stays as it was.
    let out = match &evidence {
        Some(evidence) => out.field("evidence", json!(evidence)),
        None => out,
    };
    let mut explanation = json!({
        "halted": true,
        "exit_code": halt.exit_code,
        "detail": detail,
        "summary": text,
        "verdict": verdict,
        "failing_counts": counts,
        "reference": proof.0,
    });
    // The guards' evidence, where any objected (earlier receipts explain as before).
    if let (false, Some(fields)) = (guards.is_empty(), explanation.as_object_mut()) {
        fields.insert("guards".into(), json!(guards));
    }
    if let (Some(inactive), Some(fields)) = (&inactive, explanation.as_object_mut()) {
        fields.insert("inactive_guards".into(), json!(inactive));
    }
    if let (false, Some(fields)) = (allowed.is_empty(), explanation.as_object_mut()) {
        fields.insert(
            "allowed".into(),
            json!(allowed.iter().map(|(_, a)| a).collect::<Vec<_>>()),
        );
    }
    if let (Some(j), Some(fields)) = (judge, explanation.as_object_mut()) {
        fields.insert(
            "judge".into(),
            json!({"outcome": j.outcome, "reward_hacking": j.reward_hacking, "reason": j.reason}),
        );
    }
    Ok(out
        .field("halt_reason", reason.clone())
        .field("iteration", iteration)
        .field("explanation", explanation)
        .human(aligned(&rows)))
}

/// Why a probe (`probe-check`, `doctor --check`) stopped a loop or not, from its receipt alone:
/// its halt recomputed from its runs (as `verify` does), the operator's verdict on it, and the
/// next command. A receipt whose runs do not give its recorded verdict is refused (exit 30).
fn probe_explanation(loaded: &receipt_source::LoadedReceipt) -> CmdResult<Outcome> {
    use crate::receipt::probe::ProbeRecord;
    use crate::rules::probe_replay::recompute;
    let bad =
        |e: String| crate::error::Failure::workspace(format!("{}: {e}", loaded.path.display()));
    let records = crate::receipt::events::Recorded::decode_all(&loaded.chain.events)
        .map_err(|e| bad(e.to_string()))?;
    let record = ProbeRecord::of(&records).map_err(bad)?;
    let recomputed = recompute(&record).map_err(|e| {
        bad(format!(
            "the recorded verdict is not what its runs give: {e}"
        ))
    })?;
    let (start, verdict) = (&record.start, &record.verdict);
    let receipt = loaded.path.to_string_lossy().into_owned();
    let out = Outcome::ok("explain-halt")
        .field("probe_id", start.probe_id.clone())
        .field("receipt", receipt);
    let Some(reason) = verdict.halt_reason else {
        let (summary, next) = match verdict.verdict.as_str() {
            "certified" => (
                format!("the check can be looped on: {recomputed}"),
                "loopexec run".to_string(),
            ),
            _ => (
                format!("every run agreed, but too few ran to certify the target: {recomputed}"),
                format!(
                    "loopexec {} --check {} --runs {}",
                    start.command,
                    quote(&start.check),
                    start.runs_required
                ),
            ),
        };
        return Ok(out
            .field("halt_reason", Value::Null)
            .field(
                "explanation",
                json!({"halted": false, "summary": summary, "next_command": next}),
            )
            .human(aligned(&[
                ("probe", start.probe_id.clone()),
                ("why", summary),
                ("next", next),
            ])));
    };
    let explanation = explain(reason, &[]);
    let gate = verdict
        .gates
        .iter()
        .flatten()
        .find(|g| g["verdict"] == "failed")
        .and_then(|g| g["gate"].as_str())
        .unwrap_or("determinism");
    let summary = format!("{reason} ({gate}): {recomputed}. {}.", explanation.because);
    Ok(out
        .field("halt_reason", reason.as_str())
        .field("explanation", json!({"halted": true, "exit_code": verdict.exit_code, "summary": summary, "verdict": {"verdict": explanation.verdict.as_str(), "because": explanation.because}}))
        .human(aligned(&[
            ("probe", start.probe_id.clone()),
            ("halt_reason", reason.as_str().to_string()),
            ("why", summary),
            ("verdict", explanation.verdict.as_str().to_string()),
        ])))
}
