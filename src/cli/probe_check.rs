//! `loopexec probe-check`: can the check be trusted to say the same thing twice? The check runs
//! many times on throwaway copies of the same tree, in separate exec zones, `--jobs` at a time,
//! some runs perturbed (`--perturb`); exit 0 when every run agreed (certified when the exact
//! bound reached `--max-flake-rate` at `--confidence`, else the bound reached is reported), 14
//! `check_flaky` naming the dimension(s) and runs that broke the agreement. The check, its reports
//! and the trust settings come from loop.toml where no flag gives them.

use crate::engine::config::{ConfigInput, LoopFileRef, DEFAULT_CHECK_TIMEOUT_SECS};
use crate::engine::loopfile;
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::output::{aligned, Outcome};
use crate::rules::probe::ProbeVerdict;
use crate::rules::stats::{Confidence, FlakeRate};
use crate::safefs::SafeDir;
use crate::trust::determinism::{default_jobs, probe_observed, DeterminismProbe, ProbeSettings};
use crate::trust::perturb::parse_dimensions;
use crate::trust::runner::CheckTarget;
use crate::zones::Isolation;
use std::path::PathBuf;

use crate::rules::stats::{DEFAULT_CONFIDENCE, DEFAULT_MAX_FLAKE_RATE};

/// Which check, where: shared by `probe-check` and `doctor --check`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CheckTargetArgs {
    /// The check to probe (default: loop.toml's `check`).
    #[arg(long, value_name = "CMD")]
    pub check: Option<String>,
    /// Directory holding the tree to check and loop.toml.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
    /// Where the check runs: `native` (default: the exec zone) or `none` (on the host).
    #[arg(long, value_enum)]
    pub isolation: Option<Isolation>,
    /// The exec zone's policy file (default: the builtin `exec` policy).
    #[arg(long, value_name = "FILE")]
    pub check_policy: Option<PathBuf>,
    /// Seconds before a run's process tree is killed (default 600).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub check_timeout: Option<f64>,
    /// A test report the check writes (repeatable; as `run --report`).
    #[arg(long = "report", value_name = "PATH")]
    pub report: Vec<String>,
}

/// How hard to probe: shared by `probe-check` and `doctor --check`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProbeArgs {
    /// The flake rate to certify, in (0, 1) (default 0.05).
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    pub max_flake_rate: Option<f64>,
    /// The confidence of the bound, in (0, 1) (default 0.95).
    #[arg(long, value_name = "C", allow_negative_numbers = true)]
    pub confidence: Option<f64>,
    /// Runs to make instead of the number the target needs (the bound reached is reported).
    #[arg(long, value_name = "N")]
    pub runs: Option<u64>,
    /// Dimensions to perturb, comma-separated: order, seed, clock, concurrency, load, env.
    #[arg(long, value_name = "DIMS")]
    pub perturb: Option<String>,
    /// Runs at a time (default: the cores).
    #[arg(long, value_name = "J")]
    pub jobs: Option<usize>,
    /// The seed of the perturbation plan (default: random; recorded).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: CheckTargetArgs,
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// The operator key that endorses the probe receipt's key (default: operator.key in the key dir).
    #[arg(long, value_name = "FILE")]
    pub operator_key: Option<PathBuf>,
}

/// The loop file's settings, if there is one.
fn loop_file(workdir: &std::path::Path) -> CmdResult<Option<(ConfigInput, LoopFileRef)>> {
    let wd = SafeDir::open(workdir).map_err(|e| Failure::workspace(format!("workdir: {e}")))?;
    loopfile::load(&wd)
}

impl CheckTargetArgs {
    /// The check target: flags over loop.toml over defaults.
    pub fn resolve(&self, file: Option<&ConfigInput>) -> CmdResult<CheckTarget> {
        let workdir = super::operator::absolute_workdir(&self.workdir)?;
        let check = self
            .check
            .clone()
            .or_else(|| file.and_then(|f| f.check.clone()))
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| {
                Failure::workspace("no check configured: nothing to probe")
                    .with_hint("give --check '<command>' or set `check = \"...\"` in loop.toml")
            })?;
        let isolation = self
            .isolation
            .or(file.and_then(|f| f.isolation))
            .unwrap_or(Isolation::Native);
        let check_policy = self
            .check_policy
            .as_deref()
            .map(super::operator::policy_source)
            .or_else(|| file.and_then(|f| f.check_policy.clone()));
        if isolation == Isolation::None && check_policy.is_some() {
            return Err(Failure::usage(
                "a policy applies only to native isolation, not to --isolation none",
            ));
        }
        if let Some(source) = &check_policy {
            crate::engine::config::PolicyPin::resolve(source)?;
        }
        let secs = self
            .check_timeout
            .or(file.and_then(|f| f.check_timeout_secs))
            .unwrap_or(DEFAULT_CHECK_TIMEOUT_SECS);
        if !secs.is_finite() || secs <= 0.0 || secs > 30.0 * 86400.0 {
            return Err(Failure::usage(format!(
                "check_timeout must be a number of seconds in (0, 2592000], got {secs}"
            )));
        }
        let reports = if self.report.is_empty() {
            file.map(|f| f.report.clone()).unwrap_or_default()
        } else {
            self.report.clone()
        };
        crate::testreport::paths::ReportPatterns::new(&reports)
            .map_err(|e| Failure::invalid_input(e.to_string()))?;
        let zone_owner = crate::engine::probe_run::zone_owner(isolation, check_policy.as_deref())?;
        Ok(CheckTarget {
            workdir,
            isolation,
            check_policy,
            check,
            timeout_ms: ((secs * 1000.0).round() as u64).max(1),
            reports,
            zone_owner,
        })
    }
}

impl ProbeArgs {
    /// The probe's settings: flags over loop.toml's trust settings over defaults; a value outside
    /// its range is refused naming it (exit 20).
    pub fn resolve(&self, file: Option<&ConfigInput>) -> CmdResult<ProbeSettings> {
        let trust = file.map(|f| f.trust.clone()).unwrap_or_default();
        let usage =
            |e: crate::rules::stats::StatsError| Failure::usage(format!("--{}: {e}", e_flag(&e)));
        let target = FlakeRate::new(
            self.max_flake_rate
                .or(trust.max_flake_rate)
                .unwrap_or(DEFAULT_MAX_FLAKE_RATE),
        )
        .map_err(usage)?;
        let confidence = Confidence::new(
            self.confidence
                .or(trust.confidence)
                .unwrap_or(DEFAULT_CONFIDENCE),
        )
        .map_err(usage)?;
        let dimensions = parse_dimensions(self.perturb.as_deref().unwrap_or(""))
            .map_err(|e| Failure::usage(format!("--perturb: {e}")))?;
        if self.runs == Some(0) {
            return Err(Failure::usage("--runs must be at least 1"));
        }
        if self.jobs == Some(0) {
            return Err(Failure::usage("--jobs must be at least 1"));
        }
        let seed = self
            .seed
            .unwrap_or_else(|| rand_core::RngCore::next_u64(&mut rand_core::OsRng));
        Ok(ProbeSettings {
            target,
            confidence,
            runs: self.runs,
            dimensions,
            seed,
            jobs: self.jobs.unwrap_or_else(default_jobs),
        })
    }
}

fn e_flag(e: &crate::rules::stats::StatsError) -> &'static str {
    match e {
        crate::rules::stats::StatsError::Confidence(_) => "confidence",
        _ => "max-flake-rate",
    }
}

/// The verdict's name as the output and docs spell it.
pub fn verdict_name(verdict: &ProbeVerdict) -> &'static str {
    verdict.name()
}

/// The human lines of a determinism probe.
pub fn human(p: &DeterminismProbe) -> String {
    let s = &p.summary;
    let dims = if p.dimensions.is_empty() {
        "none".to_string()
    } else {
        p.dimensions
            .iter()
            .map(|d| d.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut rows = vec![
        ("verdict", verdict_name(&s.verdict).to_string()),
        (
            "runs",
            format!(
                "{} ({} disagreeing; {} needed for the target)",
                s.runs, s.disagreeing, p.runs_required
            ),
        ),
        (
            "flake rate bound",
            format!(
                "{:.6} at confidence {} (target {})",
                s.flake_rate_bound, s.confidence, s.target
            ),
        ),
        ("perturbed", dims),
        ("seed", p.seed.to_string()),
        ("jobs", p.jobs.to_string()),
    ];
    if let ProbeVerdict::Flaky { broken_by } = &s.verdict {
        for b in broken_by {
            rows.push(("broken by", b.describe()));
        }
    }
    aligned(&rows)
}

/// The sentence naming what broke a flaky probe.
pub fn flaky_detail(p: &DeterminismProbe) -> String {
    let ProbeVerdict::Flaky { broken_by } = &p.summary.verdict else {
        return String::new();
    };
    let parts: Vec<String> = broken_by.iter().map(|b| b.describe()).collect();
    format!(
        "{} of {} runs disagreed with the modal outcome; broken by {}",
        p.summary.disagreeing,
        p.summary.runs,
        parts.join(", ")
    )
}

/// probe-check's progress on stderr while its runs go (issue 23 item 2): on a terminal a bar of
/// finished runs with their count and elapsed time; otherwise (`NO_COLOR`, `TERM=dumb`, not a
/// terminal) a plain line each time another tenth of the runs has finished; nothing under
/// `--json`. Told from the runner's worker threads, so it only counts upward.
struct RunsProgress {
    bar: Option<indicatif::ProgressBar>,
    plain: bool,
    printed_tenth: std::sync::Mutex<usize>,
}

impl RunsProgress {
    fn new(json: bool, runs: u64) -> RunsProgress {
        use super::progress_view::Style;
        let style = Style::detect(json, false);
        let bar = (style == Style::Live).then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(runs),
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(look) = indicatif::ProgressStyle::with_template(
                "probe-check [{bar:30}] {pos}/{len} runs  {elapsed}",
            ) {
                bar.set_style(look.progress_chars("=> "));
            }
            bar
        });
        RunsProgress {
            bar,
            plain: style == Style::Plain,
            printed_tenth: std::sync::Mutex::new(0),
        }
    }

    fn finished(&self, done: usize, total: usize) {
        if let Some(bar) = &self.bar {
            bar.set_position(done as u64);
        } else if self.plain && total > 0 {
            let tenth = done * 10 / total;
            if let Ok(mut printed) = self.printed_tenth.lock() {
                if tenth > *printed {
                    *printed = tenth;
                    eprintln!("loopexec: probe-check {done} of {total} runs finished");
                }
            }
        }
    }

    fn end(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

pub fn run(args: Args, json: bool) -> CmdResult<Outcome> {
    let workdir = super::operator::absolute_workdir(&args.target.workdir)?;
    let file = loop_file(&workdir)?;
    let input = file.as_ref().map(|(input, _)| input);
    let settings = args.probe.resolve(input)?;
    let target = args.target.resolve(input)?;
    // The receipt is signed: without the operator key no check runs.
    let operator = super::operator::load_operator_key(args.operator_key.as_deref())?;
    let statedir = crate::receipt::store::StateDir::open_or_create(&workdir)?;
    let runs = settings.runs.unwrap_or_else(|| {
        crate::rules::stats::runs_to_certify(settings.target, settings.confidence)
    });
    let progress = RunsProgress::new(json, runs);
    let result = probe_observed(&target, &settings, &|done, total| {
        progress.finished(done, total)
    });
    progress.end();
    let result = result?;
    let mut out = match &result.summary.verdict {
        ProbeVerdict::Flaky { .. } => {
            let mut out = Outcome::halted("probe-check", HaltReason::CheckFlaky);
            out.set("detail", flaky_detail(&result));
            out
        }
        _ => Outcome::ok("probe-check"),
    };
    out.set("verdict", verdict_name(&result.summary.verdict));
    out.set("check", target.check.clone());
    out.set("isolation", target.isolation.as_str());
    out.set("probe", serde_json::to_value(&result).unwrap_or_default());
    let conclusion = crate::trust::record::Conclusion {
        command: "probe-check",
        gates: None,
        halt_reason: matches!(result.summary.verdict, ProbeVerdict::Flaky { .. })
            .then_some(HaltReason::CheckFlaky),
        exit_code: out.exit_code(),
        target: &target,
    };
    let kept = crate::trust::record::keep(&statedir, &operator, &result, conclusion)?;
    out.set("receipt", kept.dir.to_string_lossy().into_owned());
    Ok(out.human(format!(
        "{}receipt   {}\n",
        human(&result),
        crate::inert::inert(&kept.dir.to_string_lossy())
    )))
}
