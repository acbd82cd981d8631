//! `loopexec reexecute`: re-run a halted run's whole loop N times from its pinned configuration,
//! each as a fresh run with its own workspace and signed receipt (`<run>-re1`, `<run>-re2`, ...),
//! and report the distribution of halt reasons. A statistical witness: agents are not
//! deterministic, so the claim is "how often does this configuration end this way", never byte
//! identity. Refused without `--confirm`, saying what it would run (it runs the agent N times).

use crate::engine::replay::pinned_run;
use crate::engine::{self, detached::WorkspaceMode, LoopEnd};
use crate::error::{CmdResult, Failure};
use crate::interrupt;
use crate::output::{aligned, Outcome};
use crate::receipt::history::History;
use crate::receipt::store::StateDir;
use crate::run_id::RunId;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Most samples one invocation runs.
pub const MAX_SAMPLES: u32 = 1000;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The halted run whose pinned configuration is re-executed.
    #[arg(value_name = "RUN")]
    pub run: String,
    /// How many fresh runs to start (1-1000).
    #[arg(long, value_name = "N")]
    pub samples: u32,
    /// Really run them (each runs the agent and the check up to max_iterations times).
    #[arg(long)]
    pub confirm: bool,
    /// The operator's private key that endorses each new run's key (as for `run`).
    #[arg(long, value_name = "FILE")]
    pub operator_key: Option<PathBuf>,
    /// Directory holding .loopexec/.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
}

/// The next `count` unused run ids `<run>-re<k>`, k counting from 1.
fn sample_ids(statedir: &StateDir, run: &str, count: u32) -> CmdResult<Vec<RunId>> {
    let runs = statedir.runs()?;
    let mut ids = Vec::new();
    let mut k = 1u64;
    while ids.len() < count as usize {
        let id = RunId::parse(&format!("{run}-re{k}"))?;
        if !runs.exists(id.as_str()) {
            ids.push(id);
        }
        k += 1;
    }
    Ok(ids)
}

fn not_reexecutable(message: String) -> Failure {
    Failure::new(crate::error::FailureCode::NotReexecutable, message)
}

/// A detached run re-executed from another committed t0 would not be the same experiment.
fn check_same_t0(history: &History, id: &str) -> CmdResult<()> {
    let Some(ws) = &history.workspace else {
        return Ok(());
    };
    if ws.include_uncommitted {
        return Ok(()); // compared per sample (`same_t0`): the working state is hashed at start
    }
    let head = crate::workspace::git::Git::new(std::path::Path::new(&ws.repo))
        .resolve("HEAD^{tree}")
        .map_err(Failure::from)?;
    let recorded = ws.tree_id.clone();
    match head {
        Some(tree) if tree.to_hex() == recorded => Ok(()),
        other => Err(not_reexecutable(format!(
            "run {id} started from tree {recorded}, but the repository's HEAD now holds {}: the samples would start elsewhere",
            other.map(|t| t.to_hex()).unwrap_or_else(|| "no commit".into())
        ))
        .with_hint(format!("check out the run's commit ({}) first", ws.head_commit))),
    }
}

pub fn run(args: Args, json: bool) -> CmdResult<Outcome> {
    if args.samples == 0 || args.samples > MAX_SAMPLES {
        return Err(Failure::usage(format!(
            "--samples must be between 1 and {MAX_SAMPLES}, got {}",
            args.samples
        )));
    }
    let workdir = super::operator::absolute_workdir(&args.workdir)?;
    let statedir = StateDir::open(&workdir)?;
    let original = statedir.resolve(Some(&args.run))?;
    let id = original.id().to_string();
    // Its hand acceptances decide the end state: verified against the operator key's public half.
    let operator_pub = super::operator::load_operator_key(args.operator_key.as_deref())
        .ok()
        .map(|k| k.verifying_key());
    let (cfg, history) = pinned_run(&original, operator_pub.as_ref())?;
    let original_reason = history
        .halt
        .as_ref()
        .map(|h| h.halt_reason.as_str().to_string())
        .ok_or_else(|| {
            not_reexecutable(format!(
                "run {id} has not halted: there is no halt reason to compare with"
            ))
        })?;
    let ids = sample_ids(&statedir, &id, args.samples)?;
    let plan = json!({
        "runs": ids.iter().map(|i| i.as_str()).collect::<Vec<_>>(),
        "exec": cfg.exec,
        "check": cfg.check,
        "isolation": cfg.isolation.as_str(),
        "workspace": cfg.workspace.as_str(),
        "max_iterations": cfg.max_iterations,
    });
    if !args.confirm {
        let failure = Failure::usage(format!(
            "reexecute would start {} new run(s) ({}) from run {id}'s pinned configuration, each running `{}` and `{}` up to {} times ({} isolation)",
            ids.len(),
            ids.iter().map(|i| i.as_str()).collect::<Vec<_>>().join(", "),
            cfg.exec,
            cfg.check,
            cfg.max_iterations,
            cfg.isolation.as_str()
        ))
        .with_hint("add --confirm to run them");
        let mut out = Outcome::failed("reexecute", &failure);
        out.set("run_id", id);
        out.set("reexecute", json!({"confirmed": false, "would_run": plan}));
        return Ok(out);
    }
    if cfg.workspace == WorkspaceMode::Detached {
        check_same_t0(&history, &id)?;
    }
    let recorded_t0 = history.workspace.as_ref().map(|w| w.tree_id.clone());
    let operator = super::operator::load_operator_key(args.operator_key.as_deref())?;
    interrupt::install()
        .map_err(|e| Failure::internal(format!("installing signal handlers: {e}")))?;
    let mut progress = super::run::ProgressPrinter { json };
    let mut samples = Vec::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut interrupted = None;
    for sample in ids {
        let outcome = engine::start(
            &statedir,
            sample.clone(),
            cfg.clone(),
            &operator,
            false,
            &mut progress,
        )?;
        let (_, sample_history) = pinned_run(&statedir.open_run(&sample)?, operator_pub.as_ref())?;
        let t0 = sample_history.workspace.as_ref().map(|w| w.tree_id.clone());
        let reason = match &outcome.end {
            LoopEnd::Halted { reason, .. } => Some(reason.as_str().to_string()),
            _ => None,
        };
        if let Some(r) = &reason {
            *counts.entry(r.clone()).or_default() += 1;
        }
        samples.push(json!({
            "run_id": sample.as_str(),
            "halt_reason": reason,
            "iterations": outcome.iteration,
            "t0_tree": t0,
            "same_t0": t0 == recorded_t0,
        }));
        if let LoopEnd::Interrupted { signal } = outcome.end {
            interrupted = Some(signal);
            break;
        }
    }
    let top = counts.values().copied().max().unwrap_or(0);
    let mode: Vec<&String> = counts
        .iter()
        .filter(|(_, c)| **c == top && top > 0)
        .map(|(r, _)| r)
        .collect();
    let original_is_mode = mode.iter().any(|r| **r == original_reason);
    let mut rows = vec![("original", format!("{id}: {original_reason}"))];
    for (reason, count) in &counts {
        rows.push(("halted", format!("{count} x {reason}")));
    }
    rows.push((
        "mode",
        mode.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    ));
    rows.push((
        "original is the mode",
        if original_is_mode {
            "yes".into()
        } else {
            "no".into()
        },
    ));
    let report = json!({
        "confirmed": true,
        "original": {"run_id": id, "halt_reason": original_reason},
        "samples": samples.len(),
        "runs": samples,
        "distribution": counts,
        "mode": mode,
        "original_is_mode": original_is_mode,
    });
    let mut out = match interrupted {
        Some(signal) => Outcome::interrupted("reexecute", interrupt::exit_code(signal)),
        None => Outcome::ok("reexecute"),
    }
    .human(aligned(&rows));
    out.set("run_id", id);
    out.set("reexecute", report);
    Ok(out)
}
