//! `loop.toml`: the loop described in a file, so that `loopexec run` needs no flags.
//!
//! Unknown keys and wrong types are refused with the line they are on (exit 20). `init` writes a
//! commented template ([`TEMPLATE`]); flags given to `run` override what the file says.

use super::config::{ConfigInput, LoopFileRef, ModelPins, SamplingPins};
use crate::error::Failure;
use crate::safefs::SafeDir;
use crate::zones::Isolation;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::path::Path;

pub const LOOP_FILE: &str = "loop.toml";
const MAX_LOOP_FILE_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelSection {
    provider: Option<String>,
    id: Option<String>,
    version: Option<String>,
    auxiliary: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SamplingSection {
    temperature: Option<f64>,
    seed: Option<u64>,
    max_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoopFile {
    check: Option<String>,
    exec: Option<String>,
    isolation: Option<Isolation>,
    backend: Option<crate::zones::Backend>,
    image: Option<String>,
    cgroup_parent: Option<String>,
    policy: Option<String>,
    check_policy: Option<String>,
    allow_hosts: Option<Vec<String>>,
    resolve: Option<Vec<String>>,
    egress_proxy: Option<String>,
    workspace: Option<crate::engine::detached::WorkspaceMode>,
    include_uncommitted: Option<bool>,
    agent_git: Option<crate::engine::detached::AgentGit>,
    baseline: Option<bool>,
    self_test: Option<bool>,
    protected: Option<Vec<String>>,
    max_iterations: Option<u64>,
    exec_timeout: Option<f64>,
    stall_timeout_seconds: Option<f64>,
    stall_timeout_busy_seconds: Option<f64>,
    check_timeout: Option<f64>,
    report: Option<Vec<String>>,
    coverage: Option<String>,
    coverage_tolerance: Option<f64>,
    /// The single JUnit path of older loop files: one more report pattern.
    junit: Option<String>,
    context_files: Option<Vec<String>>,
    cost_usd: Option<f64>,
    mint_cmd: Option<String>,
    revoke_cmd: Option<String>,
    mint_env: Option<String>,
    model: Option<ModelSection>,
    sampling: Option<SamplingSection>,
    guards: Option<super::config::GuardPins>,
    adequacy: Option<super::canary::AdequacyMode>,
    mutants: Option<u64>,
    mutate_cmd: Option<String>,
    progress: Option<ProgressSection>,
    reference: Option<String>,
    target: Option<Vec<String>>,
    judge: Option<String>,
    judge_policy: Option<String>,
    judge_allow_hosts: Option<Vec<String>>,
    judge_resolve: Option<Vec<String>>,
    judge_timeout: Option<f64>,
    max_flake_rate: Option<f64>,
    confidence: Option<f64>,
    confirm_runs: Option<u64>,
    runner: Option<super::runner_pin::RunnerInput>,
    doctor: Option<bool>,
    allow_test_change: Option<Vec<super::allow_change::AllowTestChange>>,
    holdout_check: Option<String>,
    /// Relative to the workdir (it must lie outside it: `../holdout`).
    holdout_dir: Option<String>,
    feedback: Option<crate::feedback::FeedbackPins>,
    sentinel: Option<super::sentinel::SentinelInput>,
    budget: Option<super::budget::BudgetSection>,
    metering: Option<crate::metering::config::MeteringSection>,
    comprehension: Option<super::comprehension::ComprehensionSection>,
    /// `mode = "task_list"`: work through the SMALL plan (docs/task-list.md).
    mode: Option<crate::rules::mode::Mode>,
    /// `[tasks.<id>]`: each task's acceptance oracle (task_list mode).
    tasks: Option<std::collections::BTreeMap<String, super::config::TaskOracleInput>>,
    /// `[escalation]`: read by `escalate` and `run --escalate-on` themselves; validated here.
    #[allow(dead_code)]
    escalation: Option<crate::escalation::config::Settings>,
}

/// `[progress]`: the rules' parameters (`convergence::rules::Limits`, each defaulted when
/// absent), and the declared score in its own `[progress.score]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProgressSection {
    no_progress_k: Option<usize>,
    same_failure_n: Option<usize>,
    regressed_n: Option<usize>,
    unsatisfiable_cycles: Option<usize>,
    oscillation: Option<bool>,
    ratchet: Option<bool>,
    score: Option<crate::engine::score::ScorePins>,
}

impl ProgressSection {
    /// The rules' parameters (a field added to `Limits` must be read here: the literal is whole).
    fn limits(&self) -> crate::convergence::rules::Limits {
        let d = crate::convergence::rules::Limits::default();
        crate::convergence::rules::Limits {
            no_progress_k: self.no_progress_k.unwrap_or(d.no_progress_k),
            same_failure_n: self.same_failure_n.unwrap_or(d.same_failure_n),
            regressed_n: self.regressed_n.unwrap_or(d.regressed_n),
            unsatisfiable_cycles: self.unsatisfiable_cycles.unwrap_or(d.unsatisfiable_cycles),
            oscillation: self.oscillation.unwrap_or(d.oscillation),
            ratchet: self.ratchet.unwrap_or(d.ratchet),
        }
    }
}

/// Parse loop file text. Errors name the file and the line.
pub fn parse(text: &str, name: &str) -> Result<ConfigInput, Failure> {
    let file: LoopFile = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let msg = e.message().trim().to_string();
        match line {
            Some(line) => Failure::invalid_input(format!("{name} line {line}: {msg}")),
            None => Failure::invalid_input(format!("{name}: {msg}")),
        }
    })?;
    let model = file
        .model
        .map(|m| ModelPins {
            provider: m.provider,
            id: m.id,
            version: m.version,
            auxiliary: m.auxiliary.unwrap_or_default(),
        })
        .unwrap_or_default();
    let sampling = file
        .sampling
        .map(|s| SamplingPins {
            temperature: s.temperature,
            seed: s.seed,
            max_tokens: s.max_tokens,
        })
        .unwrap_or_default();
    Ok(ConfigInput {
        check: file.check,
        exec: file.exec,
        isolation: file.isolation,
        backend: file.backend,
        image: file.image,
        cgroup_parent: file.cgroup_parent,
        agent_policy: file.policy,
        check_policy: file.check_policy,
        egress: crate::engine::config::EgressPins {
            allow_hosts: file.allow_hosts.unwrap_or_default(),
            resolve: file.resolve.unwrap_or_default(),
            egress_proxy: file.egress_proxy,
        },
        workspace: file.workspace,
        include_uncommitted: file.include_uncommitted,
        agent_git: file.agent_git,
        baseline: file.baseline,
        self_test: file.self_test,
        protected: file.protected.unwrap_or_default(),
        max_iterations: file.max_iterations,
        exec_timeout_secs: file.exec_timeout,
        stall_timeout_secs: file.stall_timeout_seconds,
        stall_busy_timeout_secs: file.stall_timeout_busy_seconds,
        check_timeout_secs: file.check_timeout,
        report: file
            .report
            .unwrap_or_default()
            .into_iter()
            .chain(file.junit)
            .collect(),
        coverage: file.coverage,
        coverage_tolerance: file.coverage_tolerance,
        guards: file.guards.unwrap_or_default(),
        adequacy: super::canary::AdequacyInput {
            mode: file.adequacy,
            mutants: file.mutants,
            mutate_cmd: file.mutate_cmd,
        },
        progress: file.progress.as_ref().map(ProgressSection::limits),
        score: file.progress.and_then(|p| p.score),
        no_progress_k: None,
        reference: file.reference,
        targets: file.target.unwrap_or_default(),
        trust: crate::trust::pins::TrustPins {
            max_flake_rate: file.max_flake_rate,
            confidence: file.confidence,
            confirm_runs: file.confirm_runs,
            doctor: file.doctor,
        },
        model,
        sampling,
        context_files: file.context_files.unwrap_or_default(),
        cost_usd: file.cost_usd,
        mint_cmd: file.mint_cmd,
        revoke_cmd: file.revoke_cmd,
        mint_env: file.mint_env,
        judge: super::judge::JudgeInput {
            commands: file.judge.into_iter().collect(),
            policy: file.judge_policy,
            allow_hosts: file.judge_allow_hosts.unwrap_or_default(),
            resolve: file.judge_resolve.unwrap_or_default(),
            timeout_secs: file.judge_timeout,
        },
        runner: file.runner.unwrap_or_default(),
        allow_test_change: file.allow_test_change.unwrap_or_default(),
        holdout: super::holdout::HoldoutInput {
            command: file.holdout_check,
            dir: file.holdout_dir.map(std::path::PathBuf::from),
        },
        feedback: file.feedback,
        sentinel: file.sentinel.unwrap_or_default(),
        budget: file
            .budget
            .map(super::budget::BudgetSection::input)
            .unwrap_or_default(),
        metering: file.metering.unwrap_or_default(),
        comprehension: file
            .comprehension
            .map(super::comprehension::ComprehensionSection::input)
            .unwrap_or_default(),
        mode: file.mode,
        tasks: file.tasks.unwrap_or_default(),
    })
}

/// Read `loop.toml` from the workdir (no symlink followed) if it exists.
pub fn load(workdir: &SafeDir) -> Result<Option<(ConfigInput, LoopFileRef)>, Failure> {
    let bytes = match workdir.read(LOOP_FILE, MAX_LOOP_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(Failure::invalid_input(format!("{LOOP_FILE}: {e}"))),
    };
    let text = String::from_utf8(bytes.clone())
        .map_err(|_| Failure::invalid_input(format!("{LOOP_FILE}: not valid UTF-8")))?;
    let mut input = parse(&text, LOOP_FILE)?;
    // Policy paths in the loop file are relative to the workdir.
    for source in [
        &mut input.agent_policy,
        &mut input.check_policy,
        &mut input.judge.policy,
    ]
    .into_iter()
    .flatten()
    {
        if !source.starts_with("builtin:") && !Path::new(source.as_str()).is_absolute() {
            *source = workdir
                .path()
                .join(source.as_str())
                .to_string_lossy()
                .into_owned();
        }
    }
    // So is the held-out directory.
    if let Some(dir) = input.holdout.dir.as_mut().filter(|d| d.is_relative()) {
        *dir = workdir.path().join(&*dir);
    }
    let reference = LoopFileRef {
        path: workdir
            .path()
            .join(LOOP_FILE)
            .to_string_lossy()
            .into_owned(),
        sha256: hex::encode(Sha256::digest(&bytes)),
    };
    Ok(Some((input, reference)))
}

/// Quote a string as a TOML basic string.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The commented loop file `init` writes. Given values are filled in; others stay commented.
pub fn template(check: Option<&str>, exec: Option<&str>, isolation: Option<Isolation>) -> String {
    let line = |key: &str, value: Option<String>, example: &str| match value {
        Some(v) => format!("{key} = {v}\n"),
        None => format!("# {key} = {example}\n"),
    };
    let mut t = String::new();
    t.push_str(
        "# loop.toml: the loop `loopexec run` runs when given no flags (flags override it).\n",
    );
    t.push_str(
        "# Each iteration runs `exec` (the agent), then `check`; the loop halts when the check\n",
    );
    t.push_str("# exits 0 (success_condition_met), at max_iterations (max_iterations_reached), or when a\n");
    t.push_str(
        "# command cannot run, times out, or the agent exits non-zero (execution_failure).\n\n",
    );
    t.push_str("# The external check: exit 0 means done. Required: no check, no loop.\n");
    t.push_str(&line("check", check.map(toml_string), "\"sh ./check.sh\""));
    t.push_str("# The agent command, run through /bin/sh -c in this directory.\n");
    t.push_str(&line("exec", exec.map(toml_string), "\"sh ./agent.sh\""));
    t.push_str("# Where commands run. \"native\" (the default): the agent in an agent zone and the check in\n");
    t.push_str("# a network-less exec zone (namespaces, Landlock, seccomp, cgroups). \"none\": on the host.\n");
    t.push_str(&line(
        "isolation",
        isolation.map(|i| toml_string(i.as_str())),
        "\"native\"",
    ));
    t.push_str("# What provides the zones: \"native\" (the default, loopexec's own sandbox), or \"podman\" /\n");
    t.push_str("# \"docker\": containers from a local image (never pulled), same policies (docs/containers.md).\n");
    t.push_str("# backend = \"native\"\n# image = \"localhost/agent-tools:1\"\n# cgroup_parent = \"/loopexec\"\n");
    t.push_str("# Zone policies (native isolation): \"builtin:agent\" / \"builtin:exec\" by default, or a path\n");
    t.push_str("# relative to this directory. See docs/policy.md.\n");
    t.push_str("# policy = \"builtin:agent\"\n# check_policy = \"builtin:exec\"\n");
    t.push_str("# Egress of the agent zone, added to its policy's [network] allow list (docs/egress.md).\n");
    t.push_str("# allow_hosts = [\"api.anthropic.com\"]\n# resolve = []\n# egress_proxy = \"http://proxy.internal:3128\"\n");
    t.push_str("# The workspace (native isolation): \"detached\" (default in a git repository: an overlay\n");
    t.push_str(
        "# over the committed tree, delivered as branch loopexec/<run-id>) or \"in_place\".\n",
    );
    t.push_str("# workspace = \"detached\"\n# include_uncommitted = false\n# baseline = true\n");
    t.push_str("# The agent's git repository: \"none\" (default) or \"t0\" (a fresh repository whose only\n");
    t.push_str(
        "# commit is t0, for agents that run `git status`/`git diff`; no history of yours).\n",
    );
    t.push_str("# agent_git = \"none\"\n");
    t.push_str(
        "# Paths the agent may not change (added to the defaults: tests, test config, CI files).\n",
    );
    t.push_str("# protected = [\"fixtures/**\"]\n");
    t.push_str("\n# Limits. Timeouts are seconds; on expiry the whole process tree is killed.\n");
    t.push_str("max_iterations = 10\n");
    t.push_str("exec_timeout = 1800\n");
    t.push_str("check_timeout = 600\n");
    t.push_str("# The stall rule: a command with no output and no CPU progress for this long (or no output\n");
    t.push_str("# for the busy limit, default 4x) is killed and the run halts heartbeat_stale (docs/gates.md).\n");
    t.push_str("# stall_timeout_seconds = 300\n# stall_timeout_busy_seconds = 1200\n\n");
    t.push_str("# Test reports the check writes (relative paths, globs allowed; JUnit XML, go test -json, TAP).\n");
    t.push_str(
        "# A zero exit is green only when they agree with it (libtest output needs no report).\n",
    );
    t.push_str("# report = [\"out/junit.xml\"]\n\n");
    t.push_str("# A coverage report the check writes (lcov or Cobertura): a green check must leave it, and\n");
    t.push_str("# its line coverage must not fall below t0's by more than coverage_tolerance points (default 0).\n");
    t.push_str("# coverage = \"coverage.lcov\"\n# coverage_tolerance = 0.0\n\n");
    t.push_str("# Files given to the agent, pinned by sha256 in the receipt.\n");
    t.push_str("# context_files = [\"PROMPT.md\"]\n\n");
    t.push_str("# Declared cost of one agent invocation, recorded in the receipt.\n");
    t.push_str("# cost_usd = 0.0\n\n");
    t.push_str("# The agent's short-lived credential: host commands (never run in a zone). mint_cmd prints\n");
    t.push_str("# the secret (given to the agent as $LOOPEXEC_AGENT_TOKEN or mint_env); revoke_cmd reads it on stdin.\n");
    t.push_str("# mint_cmd = \"./mint-token\"\n# revoke_cmd = \"./revoke-token\"\n# mint_env = \"LOOPEXEC_AGENT_TOKEN\"\n\n");
    t.push_str("# The advisory judge (docs/guards.md, \"The judge\"): asked after a green check every guard let\n");
    t.push_str("# through, a JSON packet on stdin, approve or veto on stdout; its own zone policy and allowlist.\n");
    t.push_str("# judge = \"/opt/review/judge.sh\"   # runs in t0's tree, the agent's at /candidate\n# judge_policy = \"builtin:agent\"\n# judge_allow_hosts = [\"api.example.com\"]\n# judge_timeout = 300\n\n");
    t.push_str("# A held-out check (docs/guards.md, \"Held-out checks\"): run after a green every guard let through,\n");
    t.push_str("# on the same tree, with holdout_dir (outside this directory, never seen by the agent) bound read-only\n");
    t.push_str("# and named in $LOOPEXEC_HOLDOUT_DIR; red halts objective_unverified (exit 13).\n");
    t.push_str("# holdout_check = \"python3 -m pytest -q \\\"$LOOPEXEC_HOLDOUT_DIR\\\"\"\n# holdout_dir = \"../holdout\"\n\n");
    t.push_str("# What crosses to the agent from the visible check: \"excerpts\" (ids and failure excerpts, the\n");
    t.push_str("# default), \"ids\" (failing test ids only) or \"nothing\" (docs/progress.md, \"The feedback file\").\n");
    t.push_str("# [feedback]\n# include = \"excerpts\"\n\n");
    t.push_str("# The adequacy canary (docs/oracle-trust.md, \"Adequacy\"): on the final green iteration, mutants of\n");
    t.push_str("# the agent's change and of the functions the tests failing at t0 call; if none of either turns\n");
    t.push_str("# the check red the run halts check_inadequate (exit 15). On by default on a detached workspace\n");
    t.push_str("# with 8 mutants; \"final\" alone samples 20; \"off\" switches it off.\n");
    t.push_str("# adequacy = \"final\"\n# mutants = 8\n\n");
    t.push_str("# The sentinel run (docs/guards.md, \"The sentinel run\"): before a green counts, the check runs\n");
    t.push_str("# once more with one test that must fail and one that must pass added to each test surface.\n");
    t.push_str(
        "# On by default (detached workspace); off only with the reason the receipt records:\n",
    );
    t.push_str(
        "# [sentinel]\n# enabled = false\n# reason = \"the check runs named test files only\"\n\n",
    );
    t.push_str(
        "# The syntax-tree guards (docs/guards.md): tampering rules switched off, each with the\n",
    );
    t.push_str("# reason the receipt records, and files added to the test-determining surface.\n[guards]\n");
    t.push_str("# disable = [{ rule = \"test-environment-read\", reason = \"the app reads CI on purpose\" }]\n");
    t.push_str("# surface = [\"tests/fixtures/**\"]\n");
    t.push_str("# Observation APIs production code may use although they can tell a test run from a real one\n");
    t.push_str("# (otherwise a green from such code halts human_required unless the judge answers on it):\n");
    t.push_str("# allow = [{ api = \"traceback.extract_stack\", reason = \"the logger names its caller\" }]\n\n");
    t.push_str("# The no-convergence halts (docs/progress.md), computed from the reports' failing sets.\n[progress]\n");
    t.push_str("# A commit known to pass the check, checked before the first agent call (docs/progress.md):\n");
    t.push_str("# reference = \"solution-branch\"\n");
    t.push_str("# The tests to fix, globs over test ids (default: every test failing at t0):\n# target = [\"tests/test_parse.py::*\"]\n");
    t.push_str("# no_progress_k = 3\n# same_failure_n = 3\n# regressed_n = 2\n# unsatisfiable_cycles = 2\n# oscillation = true\n# ratchet = true\n\n");
    t.push_str("# A numeric score the check reports, kept from falling beyond the band (docs/progress.md, \"The score\"):\n");
    t.push_str("# [progress.score]\n# regex = 'score: ([0-9.]+)'   # or: file = \"out/score.txt\"\n# direction = \"higher\"\n# band = 0.0\n\n");
    t.push_str("# Model identity, recorded in the receipt.\n[model]\n");
    t.push_str(
        "# provider = \"example\"\n# id = \"example-model\"\n# version = \"2026-01-01\"\n\n",
    );
    t.push_str("# Sampling pins, recorded in the receipt.\n[sampling]\n");
    t.push_str("# temperature = 0.0\n# seed = 42\n# max_tokens = 4096\n\n");
    t.push_str("# A legitimate test change (docs/guards.md): a test file (`path`, a glob) or test id (`id`)\n");
    t.push_str(
        "# the agent may change, each with the reason the receipt records with every use.\n",
    );
    t.push_str("# [[allow_test_change]]\n# path = \"tests/test_api.py\"\n# reason = \"the API's error message changes on purpose\"\n");
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_parses_and_carries_given_values() {
        let input = parse(
            &template(
                Some("make test"),
                Some("agent \"go\""),
                Some(Isolation::None),
            ),
            "t",
        )
        .unwrap();
        assert_eq!(input.check.as_deref(), Some("make test"));
        assert_eq!(input.exec.as_deref(), Some("agent \"go\""));
        assert_eq!(input.isolation, Some(Isolation::None));
        assert_eq!(input.max_iterations, Some(10));
    }

    #[test]
    fn an_unknown_key_is_refused_with_its_line() {
        let err = parse("check = \"x\"\n\nmax_iteration = 3\n", "loop.toml").unwrap_err();
        assert!(
            err.message.starts_with("loop.toml line 3:"),
            "{}",
            err.message
        );
        assert_eq!(err.class().code(), 20);
    }

    #[test]
    fn progress_score_is_read_beside_the_rules_parameters() {
        let input = parse("[progress]\nsame_failure_n = 5\n\n[progress.score]\nregex = 'score: (\\d+)'\ndirection = \"lower\"\nband = 0.5\n", "t").unwrap();
        assert_eq!(input.progress.map(|p| p.same_failure_n), Some(5));
        let score = input.score.unwrap();
        assert_eq!(
            (score.regex.as_deref(), score.direction, score.band),
            (
                Some("score: (\\d+)"),
                crate::engine::score::Direction::Lower,
                0.5
            )
        );
    }

    #[test]
    fn unknown_keys_in_progress_and_its_score_are_refused() {
        assert_eq!(
            parse("[progress]\nsame_failure = 5\n", "t")
                .unwrap_err()
                .class()
                .code(),
            20
        );
        let err = parse("[progress.score]\nregexp = '(x)'\n", "t").unwrap_err();
        assert_eq!(err.class().code(), 20);
        assert!(err.message.contains("regexp"), "{}", err.message);
    }

    #[test]
    fn allow_test_change_entries_are_read_and_an_unknown_key_in_one_is_refused_with_its_line() {
        let input = parse("[[allow_test_change]]\npath = \"tests/a.py\"\nreason = \"r\"\n\n[[allow_test_change]]\nid = \"t::x\"\nreason = \"s\"\n", "t").unwrap();
        let read: Vec<(Option<&str>, Option<&str>, &str)> = input
            .allow_test_change
            .iter()
            .map(|a| (a.path.as_deref(), a.id.as_deref(), a.reason.as_str()))
            .collect();
        assert_eq!(
            read,
            vec![(Some("tests/a.py"), None, "r"), (None, Some("t::x"), "s")]
        );
        let err = parse(
            "[[allow_test_change]]\npath = \"tests/a.py\"\nwhy = \"r\"\n",
            "loop.toml",
        )
        .unwrap_err();
        assert!(
            err.message.starts_with("loop.toml line 3:")
                && err.message.contains("unknown field `why`"),
            "{}",
            err.message
        );
        assert_eq!(err.class().code(), 20);
    }

    #[test]
    fn feedback_include_takes_three_values_and_refuses_anything_else_with_its_line() {
        use crate::feedback::Include;
        for (text, include) in [
            ("excerpts", Include::Excerpts),
            ("ids", Include::Ids),
            ("nothing", Include::Nothing),
        ] {
            let input = parse(&format!("[feedback]\ninclude = \"{text}\"\n"), "t").unwrap();
            assert_eq!(input.feedback.map(|f| f.include), Some(include));
        }
        let err = parse(
            "check = \"x\"\n[feedback]\ninclude = \"everything\"\n",
            "loop.toml",
        )
        .unwrap_err();
        assert_eq!(err.class().code(), 20);
        assert!(
            err.message.starts_with("loop.toml line 3:") && err.message.contains("everything"),
            "{}",
            err.message
        );
        let err = parse("[feedback]\nincludes = \"ids\"\n", "loop.toml").unwrap_err();
        assert!(
            err.message.starts_with("loop.toml line 2:") && err.message.contains("includes"),
            "{}",
            err.message
        );
    }

    #[test]
    fn the_held_out_keys_are_read() {
        let input = parse(
            "holdout_check = \"pytest h\"\nholdout_dir = \"../h\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(
            (
                input.holdout.command.as_deref(),
                input.holdout.dir.as_deref()
            ),
            (Some("pytest h"), Some(Path::new("../h")))
        );
    }

    #[test]
    fn a_wrong_type_is_refused_with_its_line() {
        let err = parse("check = \"x\"\nmax_iterations = \"ten\"\n", "loop.toml").unwrap_err();
        assert!(
            err.message.starts_with("loop.toml line 2:"),
            "{}",
            err.message
        );
    }
}
