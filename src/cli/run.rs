//! `loopexec run` (and `step` = `run --once`): start a run from flags over loop.toml, or continue
//! one with `--resume <id>`, and report how it stopped.

use super::operator::{absolute_workdir, load_operator_key, policy_source};
use super::progress_view::{ProgressView, Style};
use crate::egress::EgressArgs;
use crate::engine::config::{ConfigInput, EgressPins, LoopConfig, ModelPins, SamplingPins};
use crate::engine::detached::WorkspaceMode;
use crate::engine::{self, loopfile, LoopEnd, RunOutcome};
use crate::error::{CmdResult, Failure};
use crate::interrupt;
use crate::output::{aligned, Outcome};
use crate::receipt::store::StateDir;
use crate::run_id::RunId;
use crate::safefs::SafeDir;
use crate::zones::{Backend, Isolation};
use serde_json::json;
use std::path::PathBuf;

const CONFIG_FLAGS: [&str; 53] = [
    "self_test",
    "agent_git",
    "comprehension_every",
    "reviewer_pubkey",
    "stall_timeout",
    "stall_timeout_busy",
    "budget_usd",
    "budget_tokens",
    "budget_wall",
    "budget_unknown_money",
    "holdout_check",
    "holdout_dir",
    "coverage",
    "no_progress_k",
    "reference",
    "targets",
    "no_baseline",
    "judge",
    "judge_policy",
    "judge_allow_host",
    "judge_resolve",
    "judge_timeout",
    "backend",
    "image",
    "cgroup_parent",
    "mint_cmd",
    "revoke_cmd",
    "mint_env",
    "workspace",
    "include_uncommitted",
    "protect",
    "check",
    "exec",
    "isolation",
    "policy",
    "check_policy",
    "allow_host",
    "resolve",
    "egress_proxy",
    "max_iterations",
    "exec_timeout",
    "check_timeout",
    "report",
    "run_id",
    "model_provider",
    "model_id",
    "model_version",
    "model_auxiliary",
    "temperature",
    "seed",
    "max_tokens",
    "context_file",
    "cost_usd",
];

/// `--budget-unknown-money`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum UnknownMoneyArg {
    Ignore,
    Halt,
}

impl UnknownMoneyArg {
    fn pin(self) -> crate::rules::budget::UnknownMoney {
        match self {
            UnknownMoneyArg::Ignore => crate::rules::budget::UnknownMoney::Ignore,
            UnknownMoneyArg::Halt => crate::rules::budget::UnknownMoney::Halt,
        }
    }
}

/// How the zones are provided and confined: shared by `run` and `isolate`.
#[derive(Debug, clap::Args)]
pub struct ZoneArgs {
    /// What provides the zones under native isolation: `native` (default, loopexec's own
    /// sandbox), or `podman` / `docker` (containers from --image; docs/containers.md).
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// The local container image both zones run from (container backends; never pulled).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// The cgroup the engine creates the zones' containers beneath (container backends).
    #[arg(long, value_name = "PATH")]
    pub cgroup_parent: Option<String>,
    /// The agent zone's policy file (default: the builtin `agent` policy).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// The exec zone's policy file, in which the check runs (default: the builtin `exec` policy).
    #[arg(long, value_name = "FILE")]
    pub check_policy: Option<PathBuf>,
    #[command(flatten)]
    pub egress: EgressArgs,
    /// How the commands see the workdir under native isolation: `detached` (default in a git
    /// repository: an overlay over its committed tree, delivered as a branch at the end) or
    /// `in-place` (the workdir itself, read-write; the default outside a git repository).
    #[arg(long, value_enum)]
    pub workspace: Option<WorkspaceMode>,
}

impl ZoneArgs {
    /// These flags as configuration input (the rest of it left unset).
    pub fn input(&self) -> ConfigInput {
        ConfigInput {
            backend: self.backend,
            image: self.image.clone(),
            cgroup_parent: self.cgroup_parent.clone(),
            agent_policy: self.policy.as_deref().map(policy_source),
            check_policy: self.check_policy.as_deref().map(policy_source),
            egress: EgressPins {
                allow_hosts: self.egress.allow_host.clone(),
                resolve: self.egress.resolve.clone(),
                egress_proxy: self.egress.egress_proxy.clone(),
            },
            workspace: self.workspace,
            ..ConfigInput::default()
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub commands: super::loop_args::LoopCommandArgs,
    /// Where commands run: `native` (default) sandboxes the agent and the check; `none` runs them
    /// on the host, unsandboxed.
    #[arg(long, value_enum)]
    pub isolation: Option<Isolation>,
    #[command(flatten)]
    pub zones: ZoneArgs,
    /// Start the detached workspace from the working tree's changes too, not only from HEAD.
    #[arg(long)]
    pub include_uncommitted: bool,
    /// The git repository the agent finds in its workspace: `none` (default) or `t0`, a fresh
    /// repository whose only commit is t0 (no history, remotes or refs of yours; docs/workspace.md).
    #[arg(long, value_enum, value_name = "MODE")]
    pub agent_git: Option<crate::engine::detached::AgentGit>,
    /// Do not run the check on t0 before the first agent call (no iteration-0 halt when it
    /// already passes, no collected/skipped-set guards; docs/guards.md).
    #[arg(long)]
    pub no_baseline: bool,
    /// Before the first agent call, probe each zone (agent and check) with operations it must
    /// not be able to do; any that succeeds halts the run (docs/zones.md, "The zone self-test").
    #[arg(long)]
    pub self_test: bool,
    /// A protected-path glob added to the defaults (repeatable; docs/workspace.md).
    #[arg(long = "protect", value_name = "GLOB")]
    pub protect: Vec<String>,
    /// The operator's private key that endorses this run's key (default: operator.key in
    /// $LOOPEXEC_CONFIG_DIR, $XDG_CONFIG_HOME/loopexec or ~/.config/loopexec; see `keygen`).
    #[arg(long, value_name = "FILE")]
    pub operator_key: Option<PathBuf>,
    /// Iteration cap (default 10; in task_list mode, each task's run's cap).
    #[arg(long, value_name = "N")]
    pub max_iterations: Option<u64>,
    /// What the loop drives towards: `check_fixpoint` (default: until the check passes) or
    /// `task_list` (the SMALL plan in `.small/`, task by task, each with its own acceptance
    /// check; docs/task-list.md).
    #[arg(long, value_enum, value_name = "MODE")]
    pub mode: Option<crate::rules::mode::Mode>,
    /// A task's acceptance check in task_list mode, `ID=COMMAND` (repeatable; over the task's
    /// `[tasks.<id>] check` in loop.toml).
    #[arg(long = "task-check", value_name = "ID=COMMAND", value_parser = parse_task_check)]
    pub task_check: Vec<(String, String)>,
    /// Seconds before the agent's process tree is killed (default 1800).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub exec_timeout: Option<f64>,
    /// Seconds before the check's process tree is killed (default 600).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub check_timeout: Option<f64>,
    /// The stall rule: the agent or the check that writes no output and uses no CPU for SECS
    /// (or writes no output for the busy limit) is killed and the run halts `heartbeat_stale`
    /// (docs/gates.md, "Liveness"). Default: off.
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub stall_timeout: Option<f64>,
    /// The stall rule's busy limit: no output for SECS however busy (default 4 x --stall-timeout).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub stall_timeout_busy: Option<f64>,
    /// Accepted iterations without a new fewest-failing-targets before `no_progress_detected`
    /// (default 3; 0 turns the rule off; docs/progress.md). Over `[progress] no_progress_k`.
    #[arg(long, value_name = "K")]
    pub no_progress_k: Option<usize>,
    /// A commit (or tree) of the workdir's repository, or a patch file (a unified diff applied to
    /// t0; an existing file wins over a revision of that name), known to pass the check: checked
    /// in an exec zone before the first agent call; if it fails the run stops `infeasible_suspected`.
    #[arg(long, value_name = "REV|PATCH")]
    pub reference: Option<String>,
    /// A test to fix: a glob over test ids as the reports name them (repeatable; default: every
    /// test failing at t0). Tests failing at t0 that are not targets neither block success nor
    /// count as regressions (docs/progress.md, "Targets").
    #[arg(long = "target", value_name = "PATTERN")]
    pub targets: Vec<String>,
    /// Run one iteration, then stop (resumable unless it halted).
    #[arg(long)]
    pub once: bool,
    /// Print nothing but errors: no progress on stderr, no summary on stdout (the exit code
    /// says how the run stopped; `report` tells the rest).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Name of the new run (1-64 of A-Za-z0-9._-); generated when absent.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Continue a paused, interrupted or crashed run with its pinned configuration.
    #[arg(long, value_name = "RUN_ID", conflicts_with_all = CONFIG_FLAGS)]
    pub resume: Option<String>,
    /// Directory the commands run in; holds loop.toml and .loopexec/.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
    /// A test report the check writes (relative to the check's working directory; repeatable;
    /// globs allowed; JUnit XML, go test -json or TAP). A zero exit is green only when the
    /// reports agree with it. `--junit` is an alias.
    #[arg(long = "report", visible_alias = "junit", value_name = "PATH")]
    pub report: Vec<String>,
    /// A coverage report the check writes (lcov or Cobertura, relative to the check's working
    /// directory): a zero exit is green only when the check left it readable and its line
    /// coverage is not below t0's (docs/guards.md).
    #[arg(long, value_name = "PATH")]
    pub coverage: Option<String>,
    /// A held-out check, run after a green every guard let through, on the same tree, with
    /// --holdout-dir bound read-only (named in $LOOPEXEC_HOLDOUT_DIR); red halts
    /// objective_unverified (docs/guards.md, "Held-out checks").
    #[arg(long, value_name = "CMD")]
    pub holdout_check: Option<String>,
    /// The held-out tests: a directory outside the workdir that the agent's zone never sees.
    #[arg(long, value_name = "DIR")]
    pub holdout_dir: Option<PathBuf>,
    /// Model provider, recorded in the receipt.
    #[arg(long)]
    pub model_provider: Option<String>,
    /// Model id, recorded in the receipt.
    #[arg(long)]
    pub model_id: Option<String>,
    /// Model version, recorded in the receipt.
    #[arg(long)]
    pub model_version: Option<String>,
    /// Another model the agent may call beside --model-id without drift (repeatable; matched as
    /// --model-id is: dated releases and a provider/ prefix included).
    #[arg(long, value_name = "ID")]
    pub model_auxiliary: Vec<String>,
    /// Sampling temperature, recorded in the receipt.
    #[arg(long, allow_negative_numbers = true)]
    pub temperature: Option<f64>,
    /// Sampling seed, recorded in the receipt.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Token limit, recorded in the receipt.
    #[arg(long)]
    pub max_tokens: Option<u64>,
    /// A file given to the agent, pinned by sha256 (repeatable).
    #[arg(long = "context-file", value_name = "PATH")]
    pub context_file: Vec<String>,
    /// Declared cost in USD of one agent invocation, recorded in the receipt.
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub cost_usd: Option<f64>,
    /// Run-total USD cap, resumes included (docs/budget.md): the loop halts budget_exceeded
    /// before an agent call whose projected cost would cross it. Needs --budget-unknown-money.
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub budget_usd: Option<String>,
    /// Run-total token cap (every token the usage records count), resumes included.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub budget_tokens: Option<String>,
    /// Run-total cap on the time the zones ran: seconds, or a number with s, m, h or d.
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub budget_wall: Option<String>,
    /// How usage of unknown money counts against --budget-usd: `ignore` (as 0) or `halt`.
    #[arg(long, value_name = "HOW")]
    pub budget_unknown_money: Option<UnknownMoneyArg>,
    /// The comprehension gate (docs/gates.md): before each agent step, more than N accepted
    /// diffs of this workspace not yet acked by a pinned reviewer stop the run, resumable, with
    /// comprehension_debt_exceeded (exit 19). Needs a detached workspace and --reviewer-pubkey.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub comprehension_every: Option<String>,
    /// A reviewer whose signed acks clear comprehension debt: the hex public key `loopexec keygen
    /// --reviewer` prints (repeatable).
    #[arg(long = "reviewer-pubkey", value_name = "HEX")]
    pub reviewer_pubkey: Vec<String>,
    /// Host command (run by loopexec, not in a zone) printing a short-lived secret for the agent
    /// on stdout; run before the agent's first iteration of each start or resume. Needs --revoke-cmd.
    #[arg(long, value_name = "CMD")]
    pub mint_cmd: Option<String>,
    /// Host command revoking the minted secret (read from its stdin); run whenever the run stops.
    #[arg(long, value_name = "CMD")]
    pub revoke_cmd: Option<String>,
    /// The agent zone's variable holding the minted secret (default LOOPEXEC_AGENT_TOKEN).
    #[arg(long, value_name = "NAME")]
    pub mint_env: Option<String>,
    /// The advisory judge (at most one): asked only after a green check every guard let through,
    /// with a JSON packet on stdin; answers approve or veto on stdout (docs/guards.md).
    #[arg(long, value_name = "CMD")]
    pub judge: Vec<String>,
    /// The judge zone's policy file (default: the builtin `agent` policy).
    #[arg(long, value_name = "FILE")]
    pub judge_policy: Option<PathBuf>,
    /// A host the judge may reach through the egress proxy (repeatable; its own allowlist, never the agent's).
    #[arg(long = "judge-allow-host", value_name = "HOST[:PORT]")]
    pub judge_allow_host: Vec<String>,
    /// Pin a judge host's address (`host:port:address`, repeatable), as --resolve does for the agent.
    #[arg(long = "judge-resolve", value_name = "HOST:PORT:ADDR")]
    pub judge_resolve: Vec<String>,
    /// Seconds before the judge's process tree is killed (default 300).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub judge_timeout: Option<f64>,
    /// After a sealed halt with one of these reasons (snake_case names, or exit class names such
    /// as `budget`; comma-separated or repeated), escalate on --channel; exit 16 once delivered.
    #[arg(long = "escalate-on", value_name = "REASONS")]
    pub escalate_on: Vec<String>,
    #[command(flatten)]
    pub escalation: super::escalate::ChannelArgs,
}

impl Args {
    fn flag_input(&self) -> ConfigInput {
        self.commands.over(ConfigInput {
            mint_cmd: self.mint_cmd.clone(),
            revoke_cmd: self.revoke_cmd.clone(),
            mint_env: self.mint_env.clone(),
            isolation: self.isolation,
            include_uncommitted: self.include_uncommitted.then_some(true),
            agent_git: self.agent_git,
            baseline: self.no_baseline.then_some(false),
            self_test: self.self_test.then_some(true),
            protected: self.protect.clone(),
            max_iterations: self.max_iterations,
            mode: self.mode,
            tasks: self
                .task_check
                .iter()
                .map(|(id, check)| {
                    (
                        id.clone(),
                        crate::engine::config::TaskOracleInput {
                            check: check.clone(),
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            no_progress_k: self.no_progress_k,
            reference: self.reference.clone(),
            targets: self.targets.clone(),
            exec_timeout_secs: self.exec_timeout,
            stall_timeout_secs: self.stall_timeout,
            stall_busy_timeout_secs: self.stall_timeout_busy,
            check_timeout_secs: self.check_timeout,
            report: self.report.clone(),
            coverage: self.coverage.clone(),
            holdout: crate::engine::holdout::HoldoutInput {
                command: self.holdout_check.clone(),
                dir: self
                    .holdout_dir
                    .as_deref()
                    .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf())),
            },
            model: ModelPins {
                provider: self.model_provider.clone(),
                id: self.model_id.clone(),
                version: self.model_version.clone(),
                auxiliary: self.model_auxiliary.clone(),
            },
            sampling: SamplingPins {
                temperature: self.temperature,
                seed: self.seed,
                max_tokens: self.max_tokens,
            },
            context_files: self.context_file.clone(),
            cost_usd: self.cost_usd,
            judge: crate::engine::judge::JudgeInput {
                commands: self.judge.clone(),
                policy: self.judge_policy.as_deref().map(policy_source),
                allow_hosts: self.judge_allow_host.clone(),
                resolve: self.judge_resolve.clone(),
                timeout_secs: self.judge_timeout,
            },
            budget: crate::engine::budget::BudgetInput {
                usd: self.budget_usd.clone(),
                tokens: self.budget_tokens.clone(),
                wall: self.budget_wall.clone(),
                unknown_money: self.budget_unknown_money.map(UnknownMoneyArg::pin),
            },
            comprehension: crate::engine::comprehension::ComprehensionInput {
                every: self.comprehension_every.clone(),
                reviewers: self.reviewer_pubkey.clone(),
            },
            ..self.zones.input()
        })
    }
}

/// `--task-check ID=COMMAND`: a task id and its acceptance check, both non-empty.
fn parse_task_check(raw: &str) -> Result<(String, String), String> {
    let Some((id, check)) = raw.split_once('=') else {
        return Err(format!("expected ID=COMMAND, got {raw:?}"));
    };
    if id.trim().is_empty() || check.trim().is_empty() {
        return Err(format!(
            "expected ID=COMMAND with both parts non-empty, got {raw:?}"
        ));
    }
    Ok((id.to_string(), check.to_string()))
}

/// `--escalate-on` / `[escalation] on` resolved before the run starts (an unknown reason, a bad
/// channel or a missing secret is exit 20 then, before anything is written): the triggers and
/// the target, or none.
fn auto_escalation(
    args: &Args,
    workdir: &std::path::Path,
    run_id: &str,
) -> CmdResult<
    Option<(
        Vec<crate::escalation::config::Trigger>,
        crate::escalation::config::Target,
    )>,
> {
    use crate::escalation::config;
    let on = (!args.escalate_on.is_empty()).then(|| args.escalate_on.clone());
    let settings = super::escalate::settings_of(workdir, args.escalation.settings(on))?;
    let triggers = config::triggers(settings.on.as_deref().unwrap_or_default())?;
    if triggers.is_empty() {
        return match args.escalation.channel {
            Some(_) => Err(Failure::usage(
                "--channel needs --escalate-on REASONS (or [escalation] on) in `run`",
            )),
            None => Ok(None),
        };
    }
    let default_out = || {
        workdir
            .join(crate::receipt::store::STATE_DIR)
            .join(crate::receipt::store::RUNS)
            .join(run_id)
            .join("escalation.json")
    };
    Ok(Some((triggers, config::resolve(&settings, default_out)?)))
}

/// Escalate the halted run when its reason is one the run escalates on: a delivered escalation
/// makes the exit 16 (`escalation_pending`; the receipt's halt reason stays); a failed one is
/// reported in `errors` and leaves the halt's exit code.
fn escalate_after(
    out: &mut Outcome,
    auto: Option<(
        Vec<crate::escalation::config::Trigger>,
        crate::escalation::config::Target,
    )>,
    reason: Option<crate::halt::HaltReason>,
    workdir: &std::path::Path,
    run_id: &str,
) {
    let (Some((triggers, target)), Some(reason)) = (auto, reason) else {
        return;
    };
    if !crate::escalation::config::triggered(&triggers, reason) {
        return;
    }
    let stdout = matches!(target.channel, crate::escalation::config::Channel::Stdout);
    let done = StateDir::open(workdir)
        .and_then(|sd| sd.open_run(&RunId::parse(run_id)?))
        .and_then(|run| super::escalate::escalate(workdir, &run, &target));
    match done {
        Ok(done) => {
            out.exit = crate::halt::ExitClass::ResumableJudgment;
            out.human.push_str(&format!(
                "escalation  escalation_pending (packet sha256:{}, {})\n",
                done.packet_sha256, done.record.channel
            ));
            if stdout {
                out.human
                    .push_str(&crate::inert::json_text(&done.packet).unwrap_or_default());
                out.human.push('\n');
            }
            out.set("escalation", done.json(stdout));
        }
        Err(failure) => {
            out.set(
                "escalation",
                json!({"state": "not_delivered", "error": failure.message}),
            );
            out.errors.push(failure.entry());
        }
    }
}

pub fn run(args: Args, json: bool) -> CmdResult<Outcome> {
    let workdir = absolute_workdir(&args.workdir)?;
    interrupt::install()
        .map_err(|e| Failure::internal(format!("installing signal handlers: {e}")))?;
    let mut progress = ProgressView::new(Style::detect(json, args.quiet));
    let generated = match (&args.resume, &args.run_id) {
        (Some(raw), _) | (None, Some(raw)) => RunId::parse(raw)?,
        (None, None) => RunId::generate(),
    };
    let auto = auto_escalation(&args, &workdir, generated.as_str())?;
    let outcome = if let Some(raw) = &args.resume {
        let id = RunId::parse(raw)?;
        let statedir = StateDir::open(&workdir)?;
        let operator = load_operator_key(args.operator_key.as_deref())?;
        engine::resume(&statedir, id, &operator, args.once, &mut progress)?
    } else {
        let run_id = generated;
        let wd =
            SafeDir::open(&workdir).map_err(|e| Failure::workspace(format!("workdir: {e}")))?;
        let (input, loop_ref) = match loopfile::load(&wd)? {
            Some((file_input, reference)) => (args.flag_input().over(file_input), Some(reference)),
            None => (args.flag_input(), None),
        };
        if input.mode == Some(crate::rules::mode::Mode::TaskList) {
            if input.trust.doctor == Some(true) || args.once {
                return Err(Failure::usage(
                    "task_list mode takes neither `doctor = true` nor --once: each task is a whole run",
                ));
            }
            let cfg = engine::task_list::TaskListConfig::resolve(input, &workdir, loop_ref)?;
            engine::task_list::check_start(&run_id, &cfg)?;
            let operator = load_operator_key(args.operator_key.as_deref())?;
            let statedir = StateDir::open_or_create(&workdir)?;
            let outcome =
                engine::task_list::start(&statedir, run_id, cfg, &operator, &mut progress)?;
            drop(progress);
            let mut out = render(outcome);
            if args.quiet {
                out.human.clear();
            }
            return Ok(out);
        }
        let doctor_first = input.trust.doctor == Some(true);
        let trust_input = input.clone();
        let cfg = LoopConfig::resolve(input, &workdir, loop_ref)?;
        let operator = load_operator_key(args.operator_key.as_deref())?;
        let statedir = StateDir::open_or_create(&workdir)?;
        // `doctor = true`: the oracle's gates first, recorded in the run's receipt; a failed gate
        // halts the run before any agent call. An isolation refusal starts no run.
        let gates = match doctor_first {
            true => match super::doctor::gate_loop(&cfg, &trust_input, json, &statedir, &operator)?
            {
                super::doctor::LoopGate::Refused(refused) => return Ok(refused),
                super::doctor::LoopGate::Judged(record) => Some(record),
            },
            false => None,
        };
        engine::start_after_gates(
            &statedir,
            run_id,
            cfg,
            &operator,
            args.once,
            &mut progress,
            gates,
        )?
    };
    let reason = match &outcome.end {
        LoopEnd::Halted { reason, .. } | LoopEnd::Gated { reason, .. } => Some(*reason),
        _ => None,
    };
    drop(progress);
    let run_id = outcome.run_id.clone();
    let mut out = render(outcome);
    escalate_after(&mut out, auto, reason, &workdir, &run_id);
    if args.quiet {
        out.human.clear();
    }
    Ok(out)
}

fn render(run: RunOutcome) -> Outcome {
    let receipt = run.receipt.to_string_lossy().into_owned();
    let (mut out, headline, detail) = match &run.end {
        LoopEnd::Halted { reason, detail } => (
            Outcome::halted("run", *reason),
            match run.finished_seal {
                true => format!("halted      {reason} (recorded before its supervisor died; this resume sealed it)"),
                false => format!("halted      {reason}"),
            },
            Some(detail.clone()),
        ),
        LoopEnd::Gated { reason, detail } => (
            {
                let mut out = Outcome::halted("run", *reason);
                out.status = "gated";
                out
            },
            format!("gated       {reason} (not a halt: ack the diffs, then loopexec run --resume {})", run.run_id),
            Some(detail.clone()),
        ),
        LoopEnd::Paused => (
            Outcome::ok("run"),
            format!("paused      after iteration {}; continue with: loopexec run --resume {} --once", run.iteration, run.run_id),
            None,
        ),
        LoopEnd::Interrupted { signal } => (
            Outcome::interrupted("run", interrupt::exit_code(*signal)),
            format!(
                "interrupted by {} during iteration {}; continue with: loopexec run --resume {}",
                interrupt::signal_name(*signal),
                run.iteration,
                run.run_id
            ),
            None,
        ),
    };
    out.set("run_id", run.run_id.clone());
    out.set("iteration", run.iteration);
    out.set("check_exit", json!(run.check_exit));
    out.set("receipt", receipt.clone());
    out.set("state", run.state.as_str());
    out.set(
        "run",
        json!({
            "mode": run.mode,
            "isolation": run.isolation,
            "max_iterations": run.max_iterations,
            "failing_count": run.failing_count,
            "resumed": run.resumed,
            // Every halt returned is sealed; `finished_seal`: by this resume, after the
            // supervisor that recorded the halt died before sealing it.
            "sealed": matches!(run.end, LoopEnd::Halted { .. }),
            "resumable": !matches!(run.end, LoopEnd::Halted { .. }),
            "finished_seal": run.finished_seal,
            "detail": detail,
            "signal": match run.end { LoopEnd::Interrupted { signal } => json!(interrupt::signal_name(signal)), _ => json!(null) },
        }),
    );
    let mut rows = vec![
        ("run_id", run.run_id.clone()),
        (
            "iteration",
            format!("{} of {}", run.iteration, run.max_iterations),
        ),
        (
            "check_exit",
            run.check_exit
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
        ),
        ("isolation", run.isolation.clone()),
        ("receipt", receipt),
    ];
    if let Some(d) = detail {
        rows.insert(0, ("detail", d));
    }
    out.human = format!("{headline}\n{}", aligned(&rows));
    out
}
