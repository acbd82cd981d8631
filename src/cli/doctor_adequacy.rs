//! `loopexec doctor --check CMD`'s adequacy gate (issue 14 item 5): would this check notice if
//! the code were wrong? Its mutants come from the changes between `--diff-base REV` (default
//! `HEAD`) and the working tree or, when those have none, from every non-test source file of the
//! repository. Each mutant gets its own throwaway copy of the working tree (the files git tracks
//! or would track) with the one file mutated, and the check runs on it in its own exec zone, as
//! many at a time as there are cores. A check that no mutant turns red halts `check_inadequate`
//! (exit 15). The mutants and the verdict are `crate::mutation`'s.

use crate::engine::check::{run_check, Artifacts, ReportSource};
use crate::engine::commands::{operator_env, RoleCommand};
use crate::engine::config::{ConfigInput, LoopConfig};
use crate::engine::detached::WorkspaceMode;
use crate::engine::verdict::Verdict;
use crate::engine::zone_setup::zone_setup;
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::mutation::{self, verdict::score, Adequacy, ChangedSource, Mutant, MutantOutcome, MutantResult};
use crate::output::Outcome;
use crate::safefs::SafeDir;
use crate::testreport::paths::ReportPatterns;
use crate::zones::{open_zone, Ending, Isolation, Role};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

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
    /// Where the check runs: `native` (an exec zone, default) or `none` (on the host).
    #[arg(long = "check-isolation", value_enum, default_value = "native")]
    pub check_isolation: Isolation,
    /// The repository to examine.
    #[arg(long = "repo", value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// A test report the check writes (as `run --report`).
    #[arg(long = "check-report", value_name = "PATH")]
    pub report: Vec<String>,
}

/// Largest source file read for mutation.
const MAX_SOURCE_BYTES: u64 = crate::analysis::syntax::DEFAULT_MAX_PARSE_BYTES as u64;
/// Longest check run on one mutant.
const CHECK_TIMEOUT_SECS: f64 = 600.0;

fn git(repo: &Path, args: &[&str]) -> CmdResult<Vec<u8>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .map_err(|e| Failure::workspace(format!("running git in {}: {e}", repo.display())))?;
    if !out.status.success() {
        let stderr = crate::analysis::syntax::evidence_text(&String::from_utf8_lossy(&out.stderr));
        return Err(Failure::workspace(format!("git {} in {}: {stderr}", args.join(" "), repo.display())));
    }
    Ok(out.stdout)
}

fn nul_paths(bytes: &[u8]) -> Vec<String> {
    bytes.split(|b| *b == 0).filter(|p| !p.is_empty()).filter_map(|p| std::str::from_utf8(p).ok().map(str::to_string)).collect()
}

fn read_bounded(path: &Path) -> Option<Vec<u8>> {
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_SOURCE_BYTES + 1).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The working tree's files (tracked or not ignored) and their bytes where they are sources.
struct Tree {
    files: Vec<String>,
    /// (path, version at the diff base, working-tree version) of every file with a grammar.
    sources: Vec<(String, Option<Vec<u8>>, Vec<u8>)>,
}

fn read_tree(repo: &Path, base: &str) -> CmdResult<(Tree, Vec<String>)> {
    git(repo, &["rev-parse", "--verify", "--quiet", &format!("{base}^{{commit}}")])
        .map_err(|_| Failure::usage(format!("--diff-base {base}: not a commit of {}", repo.display())))?;
    let files = nul_paths(&git(repo, &["ls-files", "-z", "--cached", "--others", "--exclude-standard"])?);
    let mut changed = nul_paths(&git(repo, &["diff", "-z", "--name-only", base, "--"])?);
    changed.extend(nul_paths(&git(repo, &["ls-files", "-z", "--others", "--exclude-standard"])?));
    let mut sources = Vec::new();
    for path in files.iter().filter(|p| crate::analysis::Language::of_path(p).is_some()) {
        let Some(end) = read_bounded(&repo.join(path)) else { continue };
        let t0 = git(repo, &["show", &format!("{base}:{path}")]).ok();
        sources.push((path.clone(), t0, end));
    }
    Ok((Tree { files, sources }, changed))
}

/// Copy the tree's files into `dst` with `mutated` in place of its file.
fn materialise(repo: &Path, files: &[String], dst: &Path, mutated: (&str, &[u8])) -> std::io::Result<()> {
    std::fs::create_dir(dst)?;
    for path in files {
        let (from, to) = (repo.join(path), dst.join(path));
        let Ok(meta) = std::fs::symlink_metadata(&from) else { continue };
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if path == mutated.0 {
            std::fs::write(&to, mutated.1)?;
        } else if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
        } else if meta.is_file() {
            std::fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

/// Give every entry beneath `root` to the zone's uid (a root caller's exec zone writes there).
fn chown_tree(root: &Path, owner: (u32, u32)) -> std::io::Result<()> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        std::os::unix::fs::lchown(&dir, Some(owner.0), Some(owner.1))?;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                stack.push(entry.path());
            } else {
                std::os::unix::fs::lchown(entry.path(), Some(owner.0), Some(owner.1))?;
            }
        }
    }
    Ok(())
}

/// Run the check on one mutant in a fresh copy of the tree, in its own zone.
fn run_mutant(repo: &Path, tree: &Tree, args: &AdequacyArgs, check: &str, index: usize, mutant: &Mutant, original: &[u8]) -> MutantResult {
    let not_run = |detail: String| MutantResult::of(mutant, MutantOutcome::NotRun, None, 0, Some(detail));
    let Some(bytes) = mutant.apply(original) else { return not_run("the mutant's range is outside its file".into()) };
    let scratch = std::env::temp_dir().join(format!("loopexec-adequacy-{}-{index}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let copy = scratch.join("tree");
    let prepared = std::fs::create_dir(&scratch).and_then(|()| materialise(repo, &tree.files, &copy, (&mutant.path, &bytes)));
    let result = match prepared {
        Err(e) => not_run(format!("copying the tree to {}: {e}", copy.display())),
        Ok(()) => match check_in_copy(&copy, &scratch, args, check) {
            Ok((outcome, exit, ms, detail)) => MutantResult::of(mutant, outcome, exit, ms, detail),
            Err(f) => not_run(f.message),
        },
    };
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

type Answer = (MutantOutcome, Option<i32>, u64, Option<String>);

fn check_in_copy(copy: &Path, scratch: &Path, args: &AdequacyArgs, check: &str) -> CmdResult<Answer> {
    let input = ConfigInput {
        check: Some(check.to_string()),
        exec: Some("true".into()),
        isolation: Some(args.check_isolation),
        workspace: Some(WorkspaceMode::InPlace),
        report: args.report.clone(),
        check_timeout_secs: Some(CHECK_TIMEOUT_SECS),
        ..ConfigInput::default()
    };
    let cfg = LoopConfig::resolve(input, copy, None)?;
    if let (true, Some(pin)) = (nix::unistd::geteuid().is_root(), &cfg.check_policy) {
        let policy = pin.load()?;
        if let Some(owner) = crate::engine::detached::zone_owner(&policy) {
            chown_tree(copy, owner).map_err(|e| Failure::io(copy, &e))?;
        }
    }
    let state_dir = scratch.join("state");
    std::fs::create_dir(&state_dir).map_err(|e| Failure::io(&state_dir, &e))?;
    let artifacts = SafeDir::open_or_create(&scratch.join("artifacts")).map_err(|e| Failure::workspace(e.to_string()))?;
    let mut zone = open_zone(&zone_setup(&cfg, &state_dir)?)?;
    let patterns = ReportPatterns::new(&cfg.report_patterns()).map_err(|e| Failure::invalid_input(e.to_string()))?;
    let writes = SafeDir::open(copy).map_err(|e| Failure::workspace(e.to_string()))?;
    let command = RoleCommand { role: Role::Check, run_id: "doctor", iteration: 0, overlay: None, credential: None };
    let cmd = command.zone_command(&cfg, &operator_env());
    let report = (!patterns.is_empty()).then_some(ReportSource { dir: &writes, patterns: &patterns });
    let outcome = match run_check(zone.as_mut(), &cmd, Artifacts { dir: &artifacts, rel: "", stem: "check".into() }, report)? {
        Ok(outcome) => outcome,
        Err(detail) => return Ok((MutantOutcome::NotRun, None, 0, Some(detail))),
    };
    let (exit, ms) = (outcome.run.ending.exit_code(), outcome.run.duration.as_millis() as u64);
    Ok(match (outcome.verdict(), outcome.ending()) {
        (Verdict::Pass, _) => (MutantOutcome::Survived, exit, ms, None),
        (Verdict::Fail | Verdict::Disagrees, _) | (Verdict::CouldNotRun, Ending::TimedOut { .. }) => (MutantOutcome::Killed, exit, ms, None),
        (Verdict::CouldNotRun, ending) => (MutantOutcome::NotRun, exit, ms, Some(format!("the check could not run: {ending:?}"))),
    })
}

/// The gate: mutants of the change (or of the whole repository), the check on each, the verdict.
pub fn gate(check: &str, args: &AdequacyArgs) -> CmdResult<Outcome> {
    if args.mutants == 0 || args.mutants > crate::engine::canary::MAX_MUTANTS {
        return Err(Failure::usage(format!("--mutants must be in 1..={}, got {}", crate::engine::canary::MAX_MUTANTS, args.mutants)));
    }
    let repo = std::path::absolute(&args.repo).map_err(|e| Failure::io(&args.repo, &e))?;
    let (tree, changed) = read_tree(&repo, &args.diff_base)?;
    let limits = crate::analysis::Limits::default();
    let sources_of = |only: Option<&[String]>| -> Vec<ChangedSource<'_>> {
        tree.sources
            .iter()
            .filter(|(p, _, _)| only.is_none_or(|c| c.contains(p)))
            .map(|(path, t0, end)| ChangedSource { path, t0: if only.is_some() { t0.as_deref() } else { None }, end })
            .collect()
    };
    let analysis = |e: crate::analysis::AnalysisError| Failure::internal(format!("generating mutants: {e}"));
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
    let work: Vec<(Mutant, &[u8])> = chosen.into_iter().filter_map(|m| sources.iter().find(|s| s.path == m.path).map(|s| (m, s.end))).collect();
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<MutantResult>>> = Mutex::new(vec![None; work.len()]);
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, work.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some((mutant, original)) = work.get(i) else { return };
                let result = run_mutant(&repo, &tree, args, check, i, mutant, original);
                if let Ok(mut slots) = slots.lock() {
                    slots[i] = Some(result);
                }
            });
        }
    });
    let results: Vec<MutantResult> = slots.into_inner().unwrap_or_default().into_iter().flatten().collect();
    let s = score(&results);
    let mut human = format!(
        "adequacy      {} ({} mutants of the {scope}, {} sampled with seed {}: {} killed, {} survived, {} not run)\n",
        s.verdict.as_str(),
        generated_count,
        results.len(),
        args.mutant_seed,
        s.killed,
        s.survived,
        s.not_run
    );
    for r in results.iter().filter(|r| r.outcome != MutantOutcome::Killed) {
        human.push_str(&format!("  {} {}:{} {}\n", r.outcome.as_str(), r.path, r.line, r.change));
    }
    let mut out = match s.verdict {
        Adequacy::Inadequate => Outcome::halted("doctor", HaltReason::CheckInadequate),
        Adequacy::NotRun => Outcome::failed("doctor", &Failure::new(crate::error::FailureCode::SpawnFailed, "the check ran on none of the mutants")),
        Adequacy::Adequate | Adequacy::NoMutants => Outcome::ok("doctor"),
    };
    out = out.field(
        "adequacy",
        serde_json::json!({
            "verdict": s.verdict.as_str(), "scope": scope, "diff_base": args.diff_base, "seed": args.mutant_seed,
            "generated": generated_count, "sampled": results.len(), "killed": s.killed, "survived": s.survived,
            "not_run": s.not_run, "score": s.score, "mutants": results,
        }),
    );
    Ok(out.human(human))
}
