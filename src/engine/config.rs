//! The pinned configuration of a run: everything that decides what the loop does, resolved from
//! flags over `loop.toml` over defaults, validated once, and recorded whole in `run_start`.
//! `run --resume` reads it back from the receipt, so a resumed run cannot drift from its start.

use crate::error::Failure;
use crate::zones::Isolation;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

pub const DEFAULT_MAX_ITERATIONS: u64 = 10;
pub const DEFAULT_EXEC_TIMEOUT_SECS: f64 = 1800.0;
pub const DEFAULT_CHECK_TIMEOUT_SECS: f64 = 600.0;
/// Largest context file pinned by sha256.
pub const MAX_CONTEXT_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// The loop mode recorded in every receipt.
pub const MODE_CHECK_FIXPOINT: &str = "check_fixpoint";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelPins {
    pub provider: Option<String>,
    pub id: Option<String>,
    pub version: Option<String>,
    /// Other models the agent may call beside the pinned one (`[model] auxiliary`: Claude Code's
    /// small background calls go to a second model), matched as the pinned id is; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub auxiliary: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingPins {
    pub temperature: Option<f64>,
    pub seed: Option<u64>,
    pub max_tokens: Option<u64>,
}

/// A context file the agent is given, pinned by content hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextFile {
    pub path: String,
    pub sha256: String,
    pub bytes: u64,
}

/// The loop file a run was configured from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopFileRef {
    pub path: String,
    pub sha256: String,
}

/// A zone policy a run uses: where it came from and the sha256 of its bytes. On resume the policy
/// is read again and must still have this digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyPin {
    /// `builtin:<name>` or an absolute path.
    pub source: String,
    pub sha256: String,
}

impl PolicyPin {
    /// Load and validate the policy `source` names, pinning its digest.
    pub fn resolve(source: &str) -> Result<(PolicyPin, sandbox::Policy), Failure> {
        let policy = match source.strip_prefix("builtin:") {
            Some(name) => sandbox::Policy::builtin(name).ok_or_else(|| {
                Failure::usage(format!("no builtin policy {name:?}"))
                    .with_hint("builtin policies: agent, exec, offline")
            })?,
            None => sandbox::Policy::load(Path::new(source))
                .map_err(|e| Failure::invalid_input(e.to_string()))?,
        };
        Ok((
            PolicyPin {
                source: source.to_string(),
                sha256: policy.sha256.clone(),
            },
            policy,
        ))
    }

    /// Load the pinned policy again, refusing one whose bytes changed since the run started.
    pub fn load(&self) -> Result<sandbox::Policy, Failure> {
        let (again, policy) = PolicyPin::resolve(&self.source)?;
        if again.sha256 != self.sha256 {
            return Err(Failure::workspace(format!(
                "policy {} changed since the run started (sha256 {} now, {} pinned)",
                self.source, again.sha256, self.sha256
            )));
        }
        Ok(policy)
    }
}

/// Egress settings given on the command line (added to the agent policy's `[network]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EgressPins {
    pub allow_hosts: Vec<String>,
    pub resolve: Vec<String>,
    pub egress_proxy: Option<String>,
}

/// A tampering rule switched off by the loop, with the reason the receipt records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisabledRulePin {
    pub rule: String,
    #[serde(default)]
    pub reason: String,
}

/// An observation API the awareness rule may let through, with the reason the receipt records
/// (docs/guards.md, "The code under test must not know it is tested").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedApiPin {
    pub api: String,
    #[serde(default)]
    pub reason: String,
}

/// The syntax-tree guards' settings (`[guards]` in loop.toml; docs/guards.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardPins {
    /// Tampering rules switched off, each with a reason.
    #[serde(default)]
    pub disable: Vec<DisabledRulePin>,
    /// Globs of files added to the test-determining surface (whole files).
    #[serde(default)]
    pub surface: Vec<String>,
    /// Observation APIs the awareness rule lets through, each with a reason (absent in receipts
    /// pinned before it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<AllowedApiPin>,
}

impl GuardPins {
    /// The rule set these pins leave on. Fails on an unknown rule or a rule without a reason.
    pub fn rule_set(&self) -> Result<crate::analysis::RuleSet, Failure> {
        let mut rules = crate::analysis::RuleSet::all();
        for pin in &self.disable {
            let rule: crate::analysis::RuleId =
                pin.rule
                    .parse()
                    .map_err(|e: crate::analysis::AnalysisError| {
                        Failure::usage(format!("[guards] disable: {e}"))
                    })?;
            rules.disable(rule, &pin.reason).map_err(|e| {
                Failure::usage(format!("[guards] disable: {e}"))
                    .with_hint("give each disabled rule a `reason = \"...\"` the receipt records")
            })?;
        }
        Ok(rules)
    }

    /// The awareness rule's allowances. Fails on an API the rule does not report or a missing reason.
    pub fn allowances(&self) -> Result<crate::analysis::awareness::Allowances, Failure> {
        let mut allowances = crate::analysis::awareness::Allowances::default();
        for pin in &self.allow {
            allowances.allow(&pin.api, &pin.reason).map_err(|e| {
                Failure::usage(e.to_string()).with_hint("name an API as a finding of the awareness rule names it, with a `reason = \"...\"` the receipt records")
            })?;
        }
        Ok(allowances)
    }

    /// The test-determining surface these pins describe.
    pub fn surface_spec(&self) -> Result<crate::analysis::surface::SurfaceSpec, Failure> {
        crate::analysis::surface::SurfaceSpec::new(&self.surface)
            .map_err(|e| Failure::usage(format!("[guards] surface: {e}")))
    }
}

pub const DEFAULT_AGENT_POLICY: &str = "builtin:agent";
pub const DEFAULT_CHECK_POLICY: &str = "builtin:exec";

/// Everything that decides what a run does. Serialised as `config` in `run_start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopConfig {
    pub check: String,
    pub exec: String,
    /// Absolute working directory of both commands.
    pub workdir: String,
    pub isolation: Isolation,
    /// What provides the zones under native isolation: the native sandbox or a container engine.
    #[serde(default)]
    pub backend: crate::zones::Backend,
    /// The container image both zones run from (container backends only; never pulled).
    #[serde(default)]
    pub image: Option<String>,
    /// The cgroup the engine puts the zones' containers beneath (container backends only).
    #[serde(default)]
    pub cgroup_parent: Option<String>,
    /// The agent zone's policy (native isolation).
    pub agent_policy: Option<PolicyPin>,
    /// The exec zone's policy, in which the check runs (native isolation).
    pub check_policy: Option<PolicyPin>,
    pub egress: EgressPins,
    /// Detached workspace (a git repository under native isolation) or the workdir in place.
    pub workspace: crate::engine::detached::WorkspaceMode,
    /// With a detached workspace: start from the working tree's changes too, not only HEAD.
    pub include_uncommitted: bool,
    /// The git repository the agent finds in its workspace (`none`, absent in receipts pinned
    /// before it, or `t0`; docs/workspace.md).
    #[serde(
        default,
        skip_serializing_if = "crate::engine::detached::AgentGit::is_none"
    )]
    pub agent_git: crate::engine::detached::AgentGit,
    /// Run the check once on t0 before the first agent call (`--no-baseline`, `baseline = false`
    /// switch it off; absent in receipts pinned before it: on).
    #[serde(default = "baseline_on")]
    pub baseline: bool,
    /// The zone self-test at run start (`run --self-test`, `self_test = true`; docs/zones.md,
    /// "The zone self-test"); absent when off, and in receipts pinned before it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub self_test: bool,
    /// Protected-path patterns added to the defaults (docs/workspace.md).
    pub protected: Vec<String>,
    pub max_iterations: u64,
    pub exec_timeout_ms: u64,
    pub check_timeout_ms: u64,
    /// The stall rule's idle limit for the agent and the check (`--stall-timeout`,
    /// `stall_timeout_seconds`; docs/gates.md, "Liveness"). Absent: no stall rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_timeout_ms: Option<u64>,
    /// Its busy limit (`--stall-timeout-busy`, `stall_timeout_busy_seconds`); absent with a
    /// stall rule: `4 x` the idle limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_busy_timeout_ms: Option<u64>,
    /// Report patterns the check writes (`--report`, `report = [...]`; `--junit` is an alias),
    /// relative to the check's working directory, globs allowed (docs/guards.md).
    #[serde(default)]
    pub report: Vec<String>,
    /// The declared coverage report and the coverage guard's tolerance (`--coverage`,
    /// `coverage`, `coverage_tolerance`; docs/guards.md). Absent in receipts pinned before it.
    #[serde(
        default,
        skip_serializing_if = "crate::engine::coverage_guard::CoveragePins::is_unset"
    )]
    pub coverage: crate::engine::coverage_guard::CoveragePins,
    /// The one JUnit path of receipts pinned before `report` existed (read, never written).
    #[serde(default, skip_serializing)]
    pub junit: Option<String>,
    /// The syntax-tree guards' settings (rules disabled with reasons, extra surface globs).
    #[serde(default)]
    pub guards: GuardPins,
    /// The adequacy canary's settings (`adequacy`, `mutants`, `mutate_cmd` in loop.toml).
    #[serde(default)]
    pub adequacy: crate::engine::canary::AdequacyPins,
    /// The progress rules' parameters (`[progress]` in loop.toml, `--no-progress-k`;
    /// docs/progress.md). Receipts pinned before them read as the defaults.
    #[serde(default)]
    pub progress: crate::convergence::rules::Limits,
    /// The numeric score the ratchet keeps from falling (`[progress.score]` in loop.toml;
    /// docs/progress.md, "The score"). Absent without one, and in receipts pinned before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<crate::engine::score::ScorePins>,
    /// A known-feasible reference revision (`--reference`, `reference` in loop.toml), checked at
    /// the start (docs/progress.md).
    #[serde(default)]
    pub reference: Option<String>,
    /// The loop's target patterns (`--target`, `target` in loop.toml): globs over test ids; none
    /// means every test failing at t0 (docs/progress.md, "Targets").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    pub model: ModelPins,
    pub sampling: SamplingPins,
    pub context_files: Vec<ContextFile>,
    pub cost_usd: Option<f64>,
    pub loop_file: Option<LoopFileRef>,
    /// The agent's credential hooks (`--mint-cmd`, `--revoke-cmd`, `--mint-env`); never a secret.
    #[serde(default)]
    pub credentials: Option<crate::engine::credentials::CredentialHooks>,
    /// The advisory reviewer (`--judge`), asked after a green check (docs/guards.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<crate::engine::judge::JudgePins>,
    /// Reruns of a green check on the same tree before `success_condition_met` (runs pinned
    /// before confirmations existed: none).
    #[serde(default)]
    pub confirm_runs: u64,
    /// The in-loop monitor's flake-rate target and confidence (docs/oracle-trust.md).
    #[serde(default = "default_max_flake_rate")]
    pub max_flake_rate: f64,
    #[serde(default = "default_confidence")]
    pub confidence: f64,
    /// The toolchain and runner plugins the check runs with (`[runner]`; docs/guards.md).
    #[serde(default)]
    pub runner: crate::engine::runner_pin::RunnerPins,
    /// The test files and ids the operator allows the agent to change, each with its reason
    /// (`[[allow_test_change]]`; docs/guards.md). Absent without any, and in older receipts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_test_change: Vec<crate::engine::allow_change::AllowTestChange>,
    /// The held-out check (`--holdout-check`, `--holdout-dir`; docs/guards.md, "Held-out
    /// checks"): its command, directory and the directory's digest at the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holdout: Option<crate::engine::holdout::HoldoutPins>,
    /// What crosses to the agent from the visible check (`[feedback]`; docs/progress.md, "The
    /// feedback file"). Receipts pinned before it read as the default (`excerpts`).
    #[serde(default)]
    pub feedback: crate::feedback::FeedbackPins,
    /// The sentinel run before a green counts (`[sentinel]`; docs/guards.md, "The sentinel
    /// run"). Receipts pinned before it read as off.
    #[serde(default)]
    pub sentinel: crate::engine::sentinel::SentinelPins,
    /// The run-total caps (`--budget-*`, `[budget]`; docs/budget.md). Absent without any, and in
    /// receipts pinned before them; a resume uses them as pinned.
    #[serde(
        default,
        skip_serializing_if = "crate::rules::budget::BudgetPins::is_unset"
    )]
    pub budget: crate::rules::budget::BudgetPins,
    /// What is metered and how it is priced (`[metering]`; docs/budget.md, "Metering"). Absent
    /// without it, and in receipts pinned before it.
    #[serde(
        default,
        skip_serializing_if = "crate::metering::config::MeteringPins::is_unset"
    )]
    pub metering: crate::metering::config::MeteringPins,
    /// The comprehension gate (`--comprehension-every`, `--reviewer-pubkey`, `[comprehension]`;
    /// docs/gates.md). Absent without it, and in receipts pinned before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comprehension: Option<crate::engine::comprehension::ComprehensionPins>,
    /// The task of a task_list run this run works on (docs/task-list.md); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskAssignment>,
    /// With a detached workspace: the commit t0 is taken from instead of HEAD (a task run
    /// starts from the tree the task_list run reached); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_commit: Option<String>,
}

pub const DEFAULT_CONFIRM_RUNS: u64 = 1;

fn default_max_flake_rate() -> f64 {
    crate::rules::stats::DEFAULT_MAX_FLAKE_RATE
}

fn default_confidence() -> f64 {
    crate::rules::stats::DEFAULT_CONFIDENCE
}

/// One setting as given by a flag or the loop file, before defaults.
#[derive(Debug, Clone, Default)]
pub struct ConfigInput {
    pub check: Option<String>,
    pub exec: Option<String>,
    pub isolation: Option<Isolation>,
    pub backend: Option<crate::zones::Backend>,
    pub image: Option<String>,
    pub cgroup_parent: Option<String>,
    /// Policy sources (`builtin:<name>` or an absolute path).
    pub agent_policy: Option<String>,
    pub check_policy: Option<String>,
    pub egress: EgressPins,
    /// The credential hooks (`--mint-cmd`, `--revoke-cmd`, `--mint-env`), validated together
    /// once flags and loop.toml are merged.
    pub mint_cmd: Option<String>,
    pub revoke_cmd: Option<String>,
    pub mint_env: Option<String>,
    pub workspace: Option<crate::engine::detached::WorkspaceMode>,
    pub include_uncommitted: Option<bool>,
    pub agent_git: Option<crate::engine::detached::AgentGit>,
    pub baseline: Option<bool>,
    pub self_test: Option<bool>,
    pub protected: Vec<String>,
    pub max_iterations: Option<u64>,
    pub exec_timeout_secs: Option<f64>,
    pub stall_timeout_secs: Option<f64>,
    pub stall_busy_timeout_secs: Option<f64>,
    pub check_timeout_secs: Option<f64>,
    pub report: Vec<String>,
    /// `--coverage` / `coverage`: the coverage report the check writes.
    pub coverage: Option<String>,
    /// `coverage_tolerance`: percentage points the line coverage may fall below t0's.
    pub coverage_tolerance: Option<f64>,
    pub guards: GuardPins,
    pub adequacy: crate::engine::canary::AdequacyInput,
    /// `[progress]` of loop.toml.
    pub progress: Option<crate::convergence::rules::Limits>,
    /// `--no-progress-k`, over `[progress] no_progress_k`.
    pub no_progress_k: Option<usize>,
    /// `[progress.score]` of loop.toml.
    pub score: Option<crate::engine::score::ScorePins>,
    /// `--reference`, `reference`.
    pub reference: Option<String>,
    /// `--target` (repeatable), `target = [...]`.
    pub targets: Vec<String>,
    /// Oracle-trust settings (loop.toml only): probe target, confirmation reruns, doctor first.
    pub trust: crate::trust::pins::TrustPins,
    pub model: ModelPins,
    pub sampling: SamplingPins,
    pub context_files: Vec<String>,
    pub cost_usd: Option<f64>,
    /// The judge's settings (`--judge` and its flags, `judge` keys in loop.toml).
    pub judge: crate::engine::judge::JudgeInput,
    /// `[runner]` of loop.toml: the toolchain and runner plugins the check is pinned to.
    pub runner: crate::engine::runner_pin::RunnerInput,
    /// `[[allow_test_change]]` of loop.toml.
    pub allow_test_change: Vec<crate::engine::allow_change::AllowTestChange>,
    /// `--holdout-check` / `--holdout-dir`, `holdout_check` / `holdout_dir`.
    pub holdout: crate::engine::holdout::HoldoutInput,
    /// `[feedback]` of loop.toml.
    pub feedback: Option<crate::feedback::FeedbackPins>,
    /// `[sentinel]` of loop.toml: the sentinel run turned off, with a reason.
    pub sentinel: crate::engine::sentinel::SentinelInput,
    /// `--budget-*` and `[budget]`.
    pub budget: crate::engine::budget::BudgetInput,
    /// `[metering]` of loop.toml.
    pub metering: crate::metering::config::MeteringSection,
    /// `--comprehension-every`, `--reviewer-pubkey` and `[comprehension]`.
    pub comprehension: crate::engine::comprehension::ComprehensionInput,
    /// `--mode`, `mode` (absent: `check_fixpoint`).
    pub mode: Option<crate::rules::mode::Mode>,
    /// `--task-check ID=CMD` (repeatable) and `[tasks.<id>]`: each task's acceptance oracle
    /// (task_list mode; docs/task-list.md).
    pub tasks: std::collections::BTreeMap<String, TaskOracleInput>,
}

/// A task's acceptance oracle as given (`[tasks.<id>]` in loop.toml, `--task-check ID=CMD`):
/// the check of its own `check_fixpoint` run, and the settings of that run it overrides.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskOracleInput {
    pub check: String,
    #[serde(default)]
    pub report: Option<Vec<String>>,
    #[serde(default)]
    pub target: Option<Vec<String>>,
    #[serde(default)]
    pub max_iterations: Option<u64>,
    #[serde(default)]
    pub check_timeout: Option<f64>,
    #[serde(default)]
    pub exec_timeout: Option<f64>,
}

impl TaskOracleInput {
    /// The run-level input with this task's oracle in it: its check, and whatever it overrides.
    pub fn applied_to(&self, run: &ConfigInput) -> ConfigInput {
        let mut input = run.clone();
        input.mode = None;
        input.tasks = Default::default();
        input.check = Some(self.check.clone());
        if let Some(report) = &self.report {
            input.report = report.clone();
        }
        if let Some(target) = &self.target {
            input.targets = target.clone();
        }
        input.max_iterations = self.max_iterations.or(run.max_iterations);
        input.check_timeout_secs = self.check_timeout.or(run.check_timeout_secs);
        input.exec_timeout_secs = self.exec_timeout.or(run.exec_timeout_secs);
        input
    }
}

/// The task a task_list run gave a `check_fixpoint` run to do (`config.task` of that run's
/// `run_start`): it reaches the agent in its feedback file and as `LOOPEXEC_TASK_ID`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskAssignment {
    /// The task_list run this run works for.
    pub parent_run: String,
    pub id: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<String>,
}

impl ConfigInput {
    /// `self` (flags) over `file` (loop.toml): a flag that is given wins.
    pub fn over(self, file: ConfigInput) -> ConfigInput {
        ConfigInput {
            check: self.check.or(file.check),
            exec: self.exec.or(file.exec),
            isolation: self.isolation.or(file.isolation),
            backend: self.backend.or(file.backend),
            image: self.image.or(file.image),
            cgroup_parent: self.cgroup_parent.or(file.cgroup_parent),
            agent_policy: self.agent_policy.or(file.agent_policy),
            check_policy: self.check_policy.or(file.check_policy),
            egress: EgressPins {
                allow_hosts: if self.egress.allow_hosts.is_empty() {
                    file.egress.allow_hosts
                } else {
                    self.egress.allow_hosts
                },
                resolve: if self.egress.resolve.is_empty() {
                    file.egress.resolve
                } else {
                    self.egress.resolve
                },
                egress_proxy: self.egress.egress_proxy.or(file.egress.egress_proxy),
            },
            workspace: self.workspace.or(file.workspace),
            include_uncommitted: self.include_uncommitted.or(file.include_uncommitted),
            agent_git: self.agent_git.or(file.agent_git),
            baseline: self.baseline.or(file.baseline),
            self_test: self.self_test.or(file.self_test),
            protected: if self.protected.is_empty() {
                file.protected
            } else {
                self.protected
            },
            max_iterations: self.max_iterations.or(file.max_iterations),
            exec_timeout_secs: self.exec_timeout_secs.or(file.exec_timeout_secs),
            stall_timeout_secs: self.stall_timeout_secs.or(file.stall_timeout_secs),
            stall_busy_timeout_secs: self
                .stall_busy_timeout_secs
                .or(file.stall_busy_timeout_secs),
            check_timeout_secs: self.check_timeout_secs.or(file.check_timeout_secs),
            report: if self.report.is_empty() {
                file.report
            } else {
                self.report
            },
            coverage: self.coverage.or(file.coverage),
            coverage_tolerance: self.coverage_tolerance.or(file.coverage_tolerance),
            guards: file.guards,
            adequacy: file.adequacy,
            progress: self.progress.or(file.progress),
            no_progress_k: self.no_progress_k.or(file.no_progress_k),
            score: self.score.or(file.score),
            reference: self.reference.or(file.reference),
            targets: if self.targets.is_empty() {
                file.targets
            } else {
                self.targets
            },
            trust: file.trust,
            model: ModelPins {
                provider: self.model.provider.or(file.model.provider),
                id: self.model.id.or(file.model.id),
                version: self.model.version.or(file.model.version),
                auxiliary: if self.model.auxiliary.is_empty() {
                    file.model.auxiliary
                } else {
                    self.model.auxiliary
                },
            },
            sampling: SamplingPins {
                temperature: self.sampling.temperature.or(file.sampling.temperature),
                seed: self.sampling.seed.or(file.sampling.seed),
                max_tokens: self.sampling.max_tokens.or(file.sampling.max_tokens),
            },
            context_files: if self.context_files.is_empty() {
                file.context_files
            } else {
                self.context_files
            },
            cost_usd: self.cost_usd.or(file.cost_usd),
            mint_cmd: self.mint_cmd.or(file.mint_cmd),
            revoke_cmd: self.revoke_cmd.or(file.revoke_cmd),
            mint_env: self.mint_env.or(file.mint_env),
            judge: self.judge.over(file.judge),
            runner: file.runner,
            allow_test_change: file.allow_test_change,
            holdout: self.holdout.over(file.holdout),
            feedback: self.feedback.or(file.feedback),
            sentinel: file.sentinel,
            budget: self.budget.over(file.budget),
            metering: file.metering,
            comprehension: self.comprehension.over(file.comprehension),
            mode: self.mode.or(file.mode),
            tasks: {
                // A task given by flag replaces that task's table; the others stay.
                let mut tasks = file.tasks;
                tasks.extend(self.tasks);
                tasks
            },
        }
    }
}

fn baseline_on() -> bool {
    true
}

pub(super) fn timeout_ms(name: &str, secs: Option<f64>, default: f64) -> Result<u64, Failure> {
    let secs = secs.unwrap_or(default);
    if !secs.is_finite() || secs <= 0.0 || secs > 30.0 * 86400.0 {
        return Err(Failure::usage(format!(
            "{name} must be a number of seconds in (0, 2592000], got {secs}"
        )));
    }
    Ok(((secs * 1000.0).round() as u64).max(1))
}

/// The stall rule's limits in ms: the busy limit needs the idle one and may not be below it.
fn stall_limits(
    idle: Option<f64>,
    busy: Option<f64>,
) -> Result<(Option<u64>, Option<u64>), Failure> {
    let idle_ms = idle
        .map(|s| timeout_ms("stall_timeout", Some(s), 0.0))
        .transpose()?;
    let busy_ms = busy
        .map(|s| timeout_ms("stall_timeout_busy", Some(s), 0.0))
        .transpose()?;
    match (idle_ms, busy_ms) {
        (None, Some(_)) => Err(Failure::usage("stall_timeout_busy needs stall_timeout (the idle limit) as well")),
        (Some(i), Some(b)) if b < i => Err(Failure::usage(format!(
            "stall_timeout_busy ({} s) must not be below stall_timeout ({} s): a busy command is given at least the idle limit",
            b as f64 / 1000.0,
            i as f64 / 1000.0
        ))),
        limits => Ok(limits),
    }
}

/// sha256 and size of a context file (read through `O_NOFOLLOW` on the last component).
fn pin_context_file(workdir: &Path, raw: &str) -> Result<ContextFile, Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = workdir.join(raw);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| Failure::invalid_input(format!("--context-file {raw}: {e}")))?;
    let mut hasher = Sha256::new();
    let mut reader = file.take(MAX_CONTEXT_FILE_BYTES + 1);
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = reader
            .read(&mut buf)
            .map_err(|e| Failure::invalid_input(format!("--context-file {raw}: {e}")))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        hasher.update(&buf[..n]);
    }
    if total > MAX_CONTEXT_FILE_BYTES {
        return Err(Failure::invalid_input(format!(
            "--context-file {raw}: larger than {MAX_CONTEXT_FILE_BYTES} bytes"
        )));
    }
    Ok(ContextFile {
        path: raw.to_string(),
        sha256: hex::encode(hasher.finalize()),
        bytes: total,
    })
}

/// The backend and its container settings: a container backend needs native isolation and an
/// image; an image or a cgroup parent means nothing to the native sandbox.
fn resolve_backend(
    isolation: Isolation,
    backend: Option<crate::zones::Backend>,
    image: Option<String>,
    cgroup_parent: Option<String>,
) -> Result<(crate::zones::Backend, Option<String>, Option<String>), Failure> {
    use crate::zones::container::plan::{check_cgroup_parent, check_image};
    use crate::zones::Backend;
    let backend = backend.unwrap_or_default();
    match (isolation, backend) {
        (Isolation::None, Backend::Native) => {}
        (Isolation::None, other) => {
            return Err(Failure::usage(format!(
                "--backend {} provides sandboxed zones; it does not combine with --isolation none",
                other.as_str()
            )))
        }
        (Isolation::Native, _) => {}
    }
    if backend == Backend::Native {
        if image.is_some() || cgroup_parent.is_some() {
            return Err(Failure::usage("--image and --cgroup-parent apply to a container backend (--backend podman|docker) only"));
        }
        return Ok((backend, None, None));
    }
    let image = image.ok_or_else(|| {
        Failure::usage(format!(
            "--backend {} needs an image: --image NAME (present locally; loopexec never pulls)",
            backend.as_str()
        ))
    })?;
    check_image(&image).map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(parent) = &cgroup_parent {
        check_cgroup_parent(parent).map_err(|e| Failure::usage(e.to_string()))?;
    }
    Ok((backend, Some(image), cgroup_parent))
}

impl LoopConfig {
    /// The commands that run on the agent's tree but are the operator's code (the check, the
    /// operator's mutator, the held-out check): the t0 files they run are protected
    /// (`crate::workspace::command_files`). The judge is not among them: it runs in t0's tree.
    pub fn operator_commands(&self) -> Vec<(&str, crate::workspace::command_files::Follow)> {
        use crate::workspace::command_files::Follow;
        let checks = std::iter::once(self.check.as_str())
            .chain(self.holdout.as_ref().map(|h| h.command.as_str()))
            .map(|c| (c, Follow::Sourced));
        checks
            .chain(
                self.adequacy
                    .mutate_cmd
                    .as_deref()
                    .map(|c| (c, Follow::Everything)),
            )
            .collect()
    }

    /// The report patterns the check writes (with a legacy pinned `junit` path).
    pub fn report_patterns(&self) -> Vec<String> {
        self.report
            .iter()
            .cloned()
            .chain(self.junit.clone())
            .collect()
    }

    /// Resolve and validate. `workdir` must be absolute.
    pub fn resolve(
        input: ConfigInput,
        workdir: &Path,
        loop_file: Option<LoopFileRef>,
    ) -> Result<LoopConfig, Failure> {
        let check = input
            .check
            .clone()
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| {
                Failure::workspace("no check configured: no check, no loop")
                    .with_hint("give --check '<command>' or set `check = \"...\"` in loop.toml")
            })?;
        LoopConfig::resolve_with_check(check, input, workdir, loop_file)
    }

    /// The configuration every task of a task_list run shares (docs/task-list.md): resolved and
    /// validated as a run's, with no check of its own (`check` is empty: each task brings its
    /// acceptance check, and this template never runs).
    pub fn resolve_task_template(
        input: ConfigInput,
        workdir: &Path,
        loop_file: Option<LoopFileRef>,
    ) -> Result<LoopConfig, Failure> {
        LoopConfig::resolve_with_check(String::new(), input, workdir, loop_file)
    }

    fn resolve_with_check(
        check: String,
        input: ConfigInput,
        workdir: &Path,
        loop_file: Option<LoopFileRef>,
    ) -> Result<LoopConfig, Failure> {
        if input.mode == Some(crate::rules::mode::Mode::TaskList) {
            return Err(Failure::usage(
                "mode = \"task_list\" works through a SMALL plan with `loopexec run`; this loop has one check",
            )
            .with_hint("task_list mode: `loopexec run --mode task_list`; docs/task-list.md"));
        }
        if !input.tasks.is_empty() {
            return Err(Failure::usage(format!(
                "[tasks] and --task-check apply to task_list mode only (given for {})",
                input
                    .tasks
                    .keys()
                    .map(|k| crate::inert::inert(k).into_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .with_hint("set `mode = \"task_list\"` in loop.toml or give --mode task_list"));
        }
        let exec = input.exec.filter(|c| !c.trim().is_empty()).ok_or_else(|| {
            Failure::usage("no agent command configured")
                .with_hint("give --exec '<command>' or set `exec = \"...\"` in loop.toml")
        })?;
        let isolation = input.isolation.unwrap_or(Isolation::Native);
        let (agent_policy, check_policy) = match isolation {
            Isolation::None => {
                if input.agent_policy.is_some() || input.check_policy.is_some() {
                    return Err(Failure::usage(
                        "a policy applies only to native isolation, not to --isolation none",
                    ));
                }
                if input.egress != EgressPins::default() {
                    return Err(Failure::usage(
                        "egress settings (--allow-host, --resolve, --egress-proxy) apply only to native isolation",
                    ));
                }
                (None, None)
            }
            Isolation::Native => (
                Some(PolicyPin::resolve(
                    input
                        .agent_policy
                        .as_deref()
                        .unwrap_or(DEFAULT_AGENT_POLICY),
                )?),
                Some(PolicyPin::resolve(
                    input
                        .check_policy
                        .as_deref()
                        .unwrap_or(DEFAULT_CHECK_POLICY),
                )?),
            ),
        };
        let agent_grants = agent_policy
            .as_ref()
            .map(|(_, policy)| policy.filesystem.clone());
        let agent_policy = agent_policy.map(|(pin, _)| pin);
        let operator_env = crate::engine::commands::operator_env();
        let operator_path = operator_env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or("", |(_, v)| v.as_str());
        let check_path = match &check_policy {
            None => operator_path.to_string(),
            Some((_, policy)) => match policy.env.set.get("PATH") {
                Some(path) => path.clone(),
                None if policy.env.allow.iter().any(|a| a == "PATH") => operator_path.to_string(),
                None => String::new(),
            },
        };
        let check_policy = check_policy.map(|(pin, _)| pin);
        let (backend, image, cgroup_parent) =
            resolve_backend(isolation, input.backend, input.image, input.cgroup_parent)?;
        use crate::engine::detached::{is_git_repository, WorkspaceMode};
        let workspace = match (isolation, input.workspace) {
            (Isolation::None, Some(WorkspaceMode::Detached)) => {
                return Err(Failure::usage("a detached workspace needs native isolation (it is an overlay mounted in the zones)"))
            }
            (Isolation::None, _) => WorkspaceMode::InPlace,
            (Isolation::Native, Some(WorkspaceMode::Detached)) if !is_git_repository(workdir) => {
                return Err(Failure::workspace(format!("{}: not a git repository, so there is no committed tree to detach", workdir.display()))
                    .with_hint("run `git init && git add -A && git commit -m t0` first, or pass --workspace in-place"))
            }
            (Isolation::Native, Some(mode)) => mode,
            (Isolation::Native, None) if is_git_repository(workdir) => WorkspaceMode::Detached,
            (Isolation::Native, None) => WorkspaceMode::InPlace,
        };
        let include_uncommitted = input.include_uncommitted.unwrap_or(false);
        if include_uncommitted && workspace != WorkspaceMode::Detached {
            return Err(Failure::usage(
                "--include-uncommitted applies to a detached workspace only",
            ));
        }
        let agent_git = input.agent_git.unwrap_or_default();
        if !agent_git.is_none() && workspace != WorkspaceMode::Detached {
            return Err(Failure::usage(
                "agent_git = \"t0\" (--agent-git t0) applies to a detached workspace only",
            )
            .with_hint("run in a git repository under native isolation, or leave agent_git out"));
        }
        if !input.protected.is_empty() && workspace != WorkspaceMode::Detached {
            return Err(Failure::usage(
                "protected paths apply to a detached workspace only",
            ));
        }
        // Validated here, before anything is written, so that a bad pattern leaves no run behind.
        crate::workspace::ProtectedPaths::new(true, &input.protected).map_err(Failure::from)?;
        let max_iterations = input.max_iterations.unwrap_or(DEFAULT_MAX_ITERATIONS);
        if max_iterations == 0 {
            return Err(Failure::usage("max_iterations must be at least 1"));
        }
        if let Some(t) = input.sampling.temperature {
            if !t.is_finite() || t < 0.0 {
                return Err(Failure::usage(format!(
                    "temperature must be a finite number >= 0, got {t}"
                )));
            }
        }
        if let Some(c) = input.cost_usd {
            if !c.is_finite() || c < 0.0 {
                return Err(Failure::usage(format!(
                    "cost_usd must be a finite number >= 0, got {c}"
                )));
            }
        }
        // Malformed patterns are bad input, refused before anything is written.
        crate::testreport::paths::ReportPatterns::new(&input.report)
            .map_err(|e| Failure::invalid_input(e.to_string()))?;
        // Validated here too, so that a rule disabled without a reason leaves no run behind.
        input.guards.rule_set()?;
        input.guards.surface_spec()?;
        input.guards.allowances()?;
        let adequacy = input
            .adequacy
            .resolve(workspace == WorkspaceMode::Detached)?;
        let coverage = crate::engine::coverage_guard::CoveragePins::resolve(
            input.coverage,
            input.coverage_tolerance,
        )?;
        let progress = input.progress.unwrap_or_default();
        let score = input
            .score
            .map(crate::engine::score::ScorePins::validated)
            .transpose()?;
        if score.as_ref().is_some_and(|s| s.file.is_some()) && workspace != WorkspaceMode::Detached
        {
            // In place nothing hides the file before the check: an old one, or the agent's, would count.
            return Err(Failure::usage("[progress.score] file needs a detached workspace (in place, use regex over the check's output)"));
        }
        // A reference that does not resolve (or a patch that does not apply) is refused before
        // anything is written; a patch is pinned by its absolute path.
        let reference = match &input.reference {
            Some(_) if workspace != WorkspaceMode::Detached => {
                return Err(Failure::usage("--reference needs a detached workspace (a git repository under native isolation)"));
            }
            Some(value) => Some(crate::engine::reference::resolve(
                workdir,
                value,
                include_uncommitted,
            )?),
            None => None,
        };
        let judge = crate::engine::judge::resolve_pins(input.judge, isolation, backend)?;
        let holdout = {
            // The held-out directory must be nothing the agent's zone or the judge's binds.
            let judge_policy = judge
                .as_ref()
                .and_then(|j| j.policy.as_ref())
                .map(|pin| PolicyPin::resolve(&pin.source))
                .transpose()?;
            let filesystems = agent_grants
                .iter()
                .chain(judge_policy.as_ref().map(|(_, p)| &p.filesystem));
            let grants: Vec<std::path::PathBuf> = filesystems
                .flat_map(|fs| fs.read_only.iter().chain(&fs.read_write).cloned())
                .collect();
            crate::engine::holdout::resolve(
                input.holdout,
                workdir,
                workspace == WorkspaceMode::Detached,
                &grants,
            )?
        };
        let runner = crate::engine::runner_pin::resolve(input.runner, &check_path, &operator_env)?;
        let allow_test_change = crate::engine::allow_change::validated(
            input.allow_test_change,
            workspace == WorkspaceMode::Detached,
            input.baseline.unwrap_or(true),
        )?;
        let sentinel = crate::engine::sentinel::SentinelPins::resolve(
            input.sentinel,
            workspace == WorkspaceMode::Detached,
        )?;
        let budget = input.budget.resolve()?;
        let metering = input
            .metering
            .resolve(input.model.id.as_deref())
            .map_err(|r| Failure::usage(format!("loop.toml: {} {}", r.key, r.why)))?;
        let comprehension = input
            .comprehension
            .resolve(workspace == WorkspaceMode::Detached)?;
        let context_files = input
            .context_files
            .iter()
            .map(|raw| pin_context_file(workdir, raw))
            .collect::<Result<Vec<_>, _>>()?;
        let (stall_ms, stall_busy_ms) =
            stall_limits(input.stall_timeout_secs, input.stall_busy_timeout_secs)?;
        Ok(LoopConfig {
            check,
            exec,
            workdir: workdir.to_string_lossy().into_owned(),
            isolation,
            backend,
            image,
            cgroup_parent,
            agent_policy,
            check_policy,
            egress: input.egress,
            workspace,
            include_uncommitted,
            agent_git,
            baseline: input.baseline.unwrap_or(true),
            self_test: input.self_test.unwrap_or(false),
            protected: input.protected,
            max_iterations,
            exec_timeout_ms: timeout_ms(
                "exec_timeout",
                input.exec_timeout_secs,
                DEFAULT_EXEC_TIMEOUT_SECS,
            )?,
            check_timeout_ms: timeout_ms(
                "check_timeout",
                input.check_timeout_secs,
                DEFAULT_CHECK_TIMEOUT_SECS,
            )?,
            stall_timeout_ms: stall_ms,
            stall_busy_timeout_ms: stall_busy_ms,
            report: input.report,
            coverage,
            junit: None,
            guards: input.guards,
            adequacy,
            reference,
            targets: crate::engine::targets::validated_patterns(
                input.targets,
                input.baseline.unwrap_or(true),
            )?,
            progress: crate::convergence::rules::Limits {
                no_progress_k: input.no_progress_k.unwrap_or(progress.no_progress_k),
                ..progress
            },
            score,
            model: input.model,
            sampling: input.sampling,
            context_files,
            cost_usd: input.cost_usd,
            loop_file,
            credentials: crate::engine::credentials::hooks_from_flags(
                input.mint_cmd,
                input.revoke_cmd,
                input.mint_env,
            )?,
            confirm_runs: input.trust.confirm_runs.unwrap_or(DEFAULT_CONFIRM_RUNS),
            max_flake_rate: crate::rules::stats::FlakeRate::new(
                input
                    .trust
                    .max_flake_rate
                    .unwrap_or_else(default_max_flake_rate),
            )
            .map_err(|e| Failure::usage(format!("max_flake_rate: {e}")))?
            .get(),
            confidence: crate::rules::stats::Confidence::new(
                input.trust.confidence.unwrap_or_else(default_confidence),
            )
            .map_err(|e| Failure::usage(format!("confidence: {e}")))?
            .get(),
            judge,
            runner,
            allow_test_change,
            holdout,
            feedback: input.feedback.unwrap_or_default(),
            sentinel,
            budget,
            metering,
            comprehension,
            task: None,
            base_commit: None,
        })
    }
}
