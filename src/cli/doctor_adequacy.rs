//! `loopexec doctor --check CMD`'s adequacy gate (issue 14 item 5): would this check notice if
//! the code were wrong? Its mutants come from the changes between `--diff-base REV` (default
//! `HEAD`) and the working tree or, when those have none, from every non-test source file of the
//! repository. Each mutant gets its own throwaway copy of the tree with the one file mutated, and
//! the check runs on it in its own exec zone, `--jobs` at a time (the probe's runner,
//! `crate::trust::runner`). A check that no mutant turns red fails the gate `check_inadequate`
//! (exit 15). The mutants and the verdict are `crate::mutation`'s. With `--mutate-cmd` the
//! mutants are the operator's mutator's (`crate::mutation::external`), sampled the same way.

use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::mutation::{
    self, verdict::score, Adequacy, ChangedSource, Mutant, MutantOutcome, MutantResult,
};
use crate::receipt::probe::RunClass;
use crate::trust::gates::{GateReport, GateVerdict};
use crate::trust::runner::{execute_edited, CheckTarget, RunMode};
use std::io::Read;
use std::path::Path;
use std::process::Command;

/// The adequacy gate's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct AdequacyArgs {
    /// The revision the working tree's changes are taken against.
    #[arg(long, value_name = "REV", default_value = "HEAD")]
    pub diff_base: String,
    /// How many mutants to run (1..=1000).
    #[arg(long, value_name = "K", default_value_t = mutation::DEFAULT_MUTANTS as u64)]
    pub mutants: u64,
    /// The seed the mutants are sampled with.
    #[arg(long = "mutant-seed", value_name = "N", default_value_t = 0)]
    pub mutant_seed: u64,
    /// An operator's mutator instead of the built-in operators: run once in an exec zone on a
    /// copy of the tree, it prints a JSON array of `{file, line, description, diff}`
    /// (`cargo mutants --list --json --diff` prints one; docs/oracle-trust.md).
    #[arg(long = "mutate-cmd", value_name = "CMD")]
    pub mutate_cmd: Option<String>,
}

/// The flags' defaults, as clap gives them (for callers that build a `doctor` without a
/// command line, e.g. `run` with `doctor = true`).
impl Default for AdequacyArgs {
    fn default() -> AdequacyArgs {
        AdequacyArgs {
            diff_base: "HEAD".into(),
            mutants: mutation::DEFAULT_MUTANTS as u64,
            mutant_seed: 0,
            mutate_cmd: None,
        }
    }
}

/// Largest source file read for mutation.
const MAX_SOURCE_BYTES: u64 = crate::analysis::syntax::DEFAULT_MAX_PARSE_BYTES as u64;

fn git(repo: &Path, args: &[&str]) -> CmdResult<Vec<u8>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .map_err(|e| Failure::workspace(format!("running git in {}: {e}", repo.display())))?;
    if !out.status.success() {
        let stderr = crate::analysis::syntax::evidence_text(&String::from_utf8_lossy(&out.stderr));
        return Err(Failure::workspace(format!(
            "git {} in {}: {stderr}",
            args.join(" "),
            repo.display()
        )));
    }
    Ok(out.stdout)
}

fn nul_paths(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .filter_map(|p| std::str::from_utf8(p).ok().map(str::to_string))
        .collect()
}

fn read_bounded(path: &Path) -> Option<Vec<u8>> {
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_SOURCE_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

/// (path, version at the diff base, working-tree version) of every file with a grammar that
/// git tracks or would track.
struct Tree {
    sources: Vec<(String, Option<Vec<u8>>, Vec<u8>)>,
}

fn read_tree(repo: &Path, base: &str) -> CmdResult<(Tree, Vec<String>)> {
    git(
        repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{base}^{{commit}}"),
        ],
    )
    .map_err(|_| {
        Failure::usage(format!(
            "--diff-base {base}: not a commit of {}",
            repo.display()
        ))
    })?;
    let files = nul_paths(&git(
        repo,
        &[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    )?);
    let mut changed = nul_paths(&git(repo, &["diff", "-z", "--name-only", base, "--"])?);
    changed.extend(nul_paths(&git(
        repo,
        &["ls-files", "-z", "--others", "--exclude-standard"],
    )?));
    let mut sources = Vec::new();
    for path in files
        .iter()
        .filter(|p| crate::analysis::Language::of_path(p).is_some())
    {
        let Some(end) = read_bounded(&repo.join(path)) else {
            continue;
        };
        let t0 = git(repo, &["show", &format!("{base}:{path}")]).ok();
        sources.push((path.clone(), t0, end));
    }
    Ok((Tree { sources }, changed))
}

/// Write the mutated bytes over the file in a run's copy (never through a link).
fn write_mutant(tree: &Path, path: &str, bytes: &[u8]) -> CmdResult<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let target = tree.join(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&target)
        .map_err(|e| Failure::io(&target, &e))?;
    file.write_all(bytes).map_err(|e| Failure::io(&target, &e))
}

/// The gate: mutants of the change (or of the whole repository), the check on each, the verdict.
/// `Err(why)` inside: the workdir is no git repository, so there is no change to mutate (the
/// caller says so in its output); with `--mutate-cmd` the operator's mutator makes the mutants
/// and no repository is needed.
/// `reference_green`: the check passed on the unmutated tree (the determinism probe's modal
/// outcome); on a red tree a red mutant shows nothing, and the gate says so.
pub fn gate(
    target: &CheckTarget,
    args: &AdequacyArgs,
    jobs: usize,
    reference_green: bool,
) -> CmdResult<Result<GateReport, String>> {
    if args.mutants == 0 || args.mutants > crate::engine::canary::MAX_MUTANTS {
        return Err(Failure::usage(format!(
            "--mutants must be in 1..={}, got {}",
            crate::engine::canary::MAX_MUTANTS,
            args.mutants
        )));
    }
    if args
        .mutate_cmd
        .as_deref()
        .is_some_and(|c| c.trim().is_empty())
    {
        return Err(Failure::usage("--mutate-cmd is empty"));
    }
    if args.mutate_cmd.is_none() && !crate::engine::detached::is_git_repository(&target.workdir) {
        return Ok(Err(format!("not run: {} is not a git repository (the gate mutates the changes against --diff-base)", target.workdir.display())));
    }
    if !reference_green {
        let detail = "the check is not green on the unmutated tree, so a red mutant shows nothing"
            .to_string();
        return Ok(Ok(GateReport {
            gate: "adequacy",
            verdict: GateVerdict::Inconclusive { detail },
            evidence: serde_json::json!({}),
        }));
    }
    let chosen = match &args.mutate_cmd {
        Some(cmd) => match external_mutants(target, cmd, args)? {
            Ok(chosen) => chosen,
            Err(refused) => return Ok(Ok(refused)),
        },
        None => builtin_mutants(target, args)?,
    };
    let Chosen {
        scope,
        generated: generated_count,
        work,
        unapplied,
    } = chosen;
    let plans = crate::trust::perturb::plan(work.len() as u64, &[], args.mutant_seed);
    let edit = |plan: &crate::trust::perturb::RunPlan, copy: &Path| -> CmdResult<()> {
        let (mutant, bytes) = &work[plan.run as usize];
        write_mutant(copy, &mutant.path, bytes)
    };
    let reports = if work.is_empty() {
        Vec::new()
    } else {
        execute_edited(target, &plans, RunMode::default(), jobs, &edit)?
    };
    let mut results: Vec<MutantResult> = work
        .iter()
        .zip(&reports)
        .map(|((mutant, _), report)| match report.shown.first() {
            Some(shown) => {
                let outcome = match shown.class {
                    RunClass::Pass => MutantOutcome::Survived,
                    RunClass::Fail => MutantOutcome::Killed,
                    RunClass::CouldNotRun => MutantOutcome::NotRun,
                };
                MutantResult::of(mutant, outcome, shown.exit_code, shown.duration_ms, None)
            }
            None => MutantResult::of(
                mutant,
                MutantOutcome::NotRun,
                None,
                0,
                Some("the run showed nothing".into()),
            ),
        })
        .collect();
    results.extend(unapplied);
    let s = score(&results);
    let verdict = match s.verdict {
        Adequacy::Inadequate => GateVerdict::Failed {
            reason: HaltReason::CheckInadequate,
            detail: format!(
                "no mutant of the {scope} turned the check red: {} of {} survived",
                s.survived,
                results.len()
            ),
        },
        Adequacy::NotRun => GateVerdict::Inconclusive {
            detail: format!("the check ran on none of the {} mutants", results.len()),
        },
        Adequacy::NoMutants if scope == "mutate_cmd" => GateVerdict::Inconclusive {
            detail: "the mutator (--mutate-cmd) listed no mutant".into(),
        },
        Adequacy::NoMutants => GateVerdict::Inconclusive {
            detail: "no line of the repository can be mutated".into(),
        },
        Adequacy::Adequate => GateVerdict::Passed,
    };
    let evidence = serde_json::json!({
        "scope": scope, "diff_base": args.diff_base, "mutate_cmd": args.mutate_cmd, "seed": args.mutant_seed, "generated": generated_count,
        "sampled": results.len(), "killed": s.killed, "survived": s.survived, "not_run": s.not_run, "score": s.score,
        "mutants": results,
    });
    Ok(Ok(GateReport {
        gate: "adequacy",
        verdict,
        evidence,
    }))
}

/// The mutants a gate runs: each with its file's mutated bytes, and those that could not be
/// materialised (already `not_run`).
struct Chosen {
    scope: &'static str,
    generated: usize,
    work: Vec<(Mutant, Vec<u8>)>,
    unapplied: Vec<MutantResult>,
}

/// The built-in operators' mutants of the changes against `--diff-base` (or of the repository;
/// the caller made sure the workdir is a git repository).
fn builtin_mutants(target: &CheckTarget, args: &AdequacyArgs) -> CmdResult<Chosen> {
    let (tree, changed) = read_tree(&target.workdir, &args.diff_base)?;
    let limits = crate::analysis::Limits::default();
    let sources_of = |only: Option<&[String]>| -> Vec<ChangedSource<'_>> {
        tree.sources
            .iter()
            .filter(|(p, _, _)| only.is_none_or(|c| c.contains(p)))
            .map(|(path, t0, end)| ChangedSource {
                path,
                t0: if only.is_some() { t0.as_deref() } else { None },
                end,
            })
            .collect()
    };
    let analysis =
        |e: crate::analysis::AnalysisError| Failure::internal(format!("generating mutants: {e}"));
    let mut scope = "diff";
    let mut sources = sources_of(Some(&changed));
    let mut generated = mutation::generate(&sources, false, limits).map_err(analysis)?;
    if generated.is_empty() {
        scope = "repository";
        sources = sources_of(None);
        generated = mutation::generate(&sources, true, limits).map_err(analysis)?;
    }
    let generated_count = generated.len();
    let chosen = mutation::sample::sample(generated, args.mutants as usize, args.mutant_seed);
    let work: Vec<(Mutant, Vec<u8>)> = chosen
        .into_iter()
        .filter_map(|m| {
            let original = sources.iter().find(|s| s.path == m.path)?.end;
            let bytes = m.apply(original)?;
            Some((m, bytes))
        })
        .collect();
    Ok(Chosen {
        scope,
        generated: generated_count,
        work,
        unapplied: Vec::new(),
    })
}

/// The operator's mutator's mutants (`--mutate-cmd`), run once in an exec zone on a copy of the
/// tree: sampled like the built-in ones, each diff applied to the working tree's version of its
/// file. `Err(report)` inside: the mutator failed or printed no valid list, so the gate cannot
/// conclude: `execution_failure` (a command the gate needs could not run; it says nothing
/// against the check).
fn external_mutants(
    target: &CheckTarget,
    cmd: &str,
    args: &AdequacyArgs,
) -> CmdResult<Result<Chosen, GateReport>> {
    use mutation::external::{self, MAX_LIST_BYTES, MUTANTS_FILE};
    let mutator = CheckTarget {
        check: external::wrapped(cmd),
        reports: Vec::new(),
        ..target.clone()
    };
    let (report, list) =
        crate::trust::runner::run_once_reading(&mutator, MUTANTS_FILE, MAX_LIST_BYTES)?;
    let exit = report.shown.first().and_then(|s| s.exit_code);
    let exit_text = exit.map_or("none".to_string(), |c| c.to_string());
    let refuse = |why: String| {
        let detail = format!("the mutator (--mutate-cmd) {why}");
        let evidence =
            serde_json::json!({"scope": "mutate_cmd", "mutate_cmd": cmd, "mutator_exit": exit});
        Ok(Err(GateReport {
            gate: "adequacy",
            verdict: GateVerdict::Failed {
                reason: HaltReason::ExecutionFailure,
                detail,
            },
            evidence,
        }))
    };
    match report.shown.first().map(|s| s.class) {
        Some(RunClass::Pass) => {}
        Some(RunClass::CouldNotRun) => {
            return refuse(format!(
                "could not run, was killed or timed out (exit {exit_text})"
            ))
        }
        _ => return refuse(format!("failed (exit {exit_text})")),
    }
    let listed = match external::list_from(list) {
        Ok(listed) => listed,
        Err(why) => return refuse(why),
    };
    let generated = listed.len();
    let workdir =
        crate::safefs::SafeDir::open(&target.workdir).map_err(crate::receipt::store::fs_failure)?;
    let (mut work, mut unapplied) = (Vec::new(), Vec::new());
    for m in mutation::sample::sample(listed, args.mutants as usize, args.mutant_seed) {
        match workdir
            .read(&m.path, MAX_SOURCE_BYTES)
            .ok()
            .and_then(|original| m.apply(&original))
        {
            Some(bytes) => work.push((m, bytes)),
            None => unapplied.push(MutantResult::of(
                &m,
                MutantOutcome::NotRun,
                None,
                0,
                Some("its diff does not apply to the file in the tree".into()),
            )),
        }
    }
    Ok(Ok(Chosen {
        scope: "mutate_cmd",
        generated,
        work,
        unapplied,
    }))
}
