//! The command line: clap definitions, the global `--json` flag, and dispatch to one module per
//! command. Every command returns a `CmdResult<Outcome>`; this module renders exactly one outcome
//! (one JSON object under `--json`), including for usage errors (exit 20) and panics (exit 50).
//!
//! Adding a command: a module exposing `Args` and `pub fn run(args, json) -> CmdResult<Outcome>`,
//! a variant of [`Command`] (its kebab-case name is the command name), and one arm in
//! [`Command::dispatch`].

pub mod ack;
pub mod attest;
pub mod check;
pub mod doctor;
pub mod doctor_adequacy;
pub mod escalate;
pub mod examples;
pub mod explain_halt;
pub mod fleet;
pub mod follow;
pub mod init;
pub mod inspect_cost;
pub mod isolate;
pub mod keygen;
pub mod loop_args;
pub mod operator;
pub mod policy;
pub mod probe_check;
pub mod progress_view;
pub mod ratchet;
pub mod receipt_source;
pub mod reexecute;
pub mod replay;
pub mod report;
pub mod report_html;
pub mod run;
pub mod sandbox;
pub mod sealed_run;
pub mod shell_docs;
pub mod status;
pub mod verify;
pub mod verify_all;
pub mod watch;

use crate::error::{CmdResult, Failure};
use crate::output::Outcome;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;

const EXAMPLES: &str = "\
Examples:
  loopexec keygen                               # once: the operator key that endorses every run
  loopexec init --check 'cargo test' --exec './agent'
  loopexec run                                  # run what loop.toml says, sandboxed
  loopexec run --check 'cargo test' --exec './agent' --allow-host api.example.com
  loopexec run --once --json                    # one iteration, then pause
  loopexec run --resume <RUN_ID>                # continue a paused, interrupted or crashed run
  loopexec status --json
  loopexec explain-halt
  loopexec escalate <RUN_ID> --channel webhook --webhook https://hooks.example/loop   # exit 16
  loopexec report <RUN_ID>
  loopexec verify <RUN_ID>                      # offline, your own key (others: --pubkey)
  loopexec sandbox --rw . -- make test          # one command in a zone
  loopexec doctor                               # which isolation layers this host offers
  loopexec probe-check --perturb order,seed,env # is the check deterministic?
  loopexec doctor --check 'cargo test'          # the oracle's gates before a loop
  loopexec isolate --backend podman --image localhost/agent:1   # the zones' plan, nothing run

Exit codes: 0 ok, 10 converged, 12 iteration cap, 13 integrity (blocked path, verify failed,
attest refused), 14 oracle untrusted (check_flaky, check_not_hermetic, ...), 16 escalation pending (escalate), 18 budget (sandbox wall clock), 20 bad usage, 30 workspace or isolation,
40 execution failure (escalate: delivery_failed), 50 internal; 130/143 interrupted by SIGINT/SIGTERM (resumable); sandbox
exits with its command's code. See SPEC.md §2.";

/// loopexec: run an agent against an external check until a computed halt, with a receipt.
#[derive(Debug, Parser)]
#[command(name = "loopexec", version, about, after_help = EXAMPLES, propagate_version = true)]
pub struct Cli {
    /// Print exactly one JSON object on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create .loopexec/ and a commented loop.toml in the workdir.
    #[command(after_help = examples::INIT)]
    Init(init::Args),
    /// Run the check_fixpoint loop (exec, then check, until a computed halt).
    #[command(after_help = examples::RUN)]
    Run(run::Args),
    /// Run one iteration (alias of `run --once`).
    #[command(after_help = examples::STEP)]
    Step(run::Args),
    /// Show the live or last state of a run.
    #[command(after_help = examples::STATUS)]
    Status(status::Args),
    /// Is a run alive, stale or halted (its heartbeat)? `--kill` ends a stale run's processes
    /// and seals its `heartbeat_stale` halt.
    #[command(after_help = examples::WATCH)]
    Watch(watch::Args),
    /// Validate the state directory and receipt chains, and a SMALL workspace (.small/) strictly (state hygiene, not the oracle).
    #[command(after_help = examples::CHECK)]
    Check(check::Args),
    /// A digest of a run's receipt.
    #[command(after_help = examples::REPORT)]
    Report(report::Args),
    /// Why a run stopped; for an iteration cap, whether it was still improving.
    #[command(after_help = examples::EXPLAIN_HALT)]
    ExplainHalt(explain_halt::Args),
    /// The budget rules offline: a run's recorded cost, or a ledger of costs, under a cap.
    #[command(after_help = examples::INSPECT_COST)]
    InspectCost(inspect_cost::Args),
    /// Tell a person a run needs them: a packet to a file, stdout, a webhook, Slack or GitHub (exit 16).
    #[command(after_help = examples::ESCALATE)]
    Escalate(escalate::Args),
    /// The ratchet's frontier: accepted and rejected iterations, and the last accepted tree.
    #[command(after_help = examples::RATCHET)]
    Ratchet(ratchet::Args),
    /// Run one command in a zone (namespaces, Landlock, seccomp, cgroup) and exit with its code.
    #[command(after_help = examples::SANDBOX)]
    Sandbox(sandbox::SandboxArgs),
    /// Validate, show and compare zone policies.
    #[command(after_help = examples::POLICY)]
    Policy(policy::PolicyArgs),
    /// Check which isolation layers this host offers and whether a policy can run.
    #[command(after_help = examples::DOCTOR)]
    Doctor(doctor::DoctorArgs),
    /// Print how a loop's zones would be isolated (native plan or engine command), running nothing.
    #[command(after_help = examples::ISOLATE)]
    Isolate(isolate::Args),
    /// Create the operator's Ed25519 key pair (signs each run's key), or a reviewer's (--reviewer).
    #[command(after_help = examples::KEYGEN)]
    Keygen(keygen::Args),
    /// Acknowledge a run's unread accepted diffs with a reviewer key (clears comprehension debt).
    #[command(after_help = examples::ACK)]
    Ack(ack::Args),
    /// Verify a sealed run offline: hash chain, key endorsement, envelope, predicate.
    #[command(after_help = examples::VERIFY)]
    Verify(verify::Args),
    /// Fleets of runs: gather the sealed runs of workdirs into a collection (`fleet collect`).
    #[command(after_help = examples::FLEET)]
    Fleet(fleet::FleetArgs),
    /// Add the operator's signature to a sealed run that verifies against that key.
    #[command(after_help = examples::ATTEST)]
    Attest(attest::Args),
    /// Re-run a halted run's check on its recorded end-state tree and compare the fingerprint.
    #[command(after_help = examples::REPLAY)]
    Replay(replay::Args),
    /// Re-run a halted run's loop N times in fresh runs and report the halt-reason distribution.
    #[command(after_help = examples::REEXECUTE)]
    Reexecute(reexecute::Args),
    /// Run the check many times on copies of the same tree (some perturbed): is it deterministic?
    #[command(after_help = examples::PROBE_CHECK)]
    ProbeCheck(probe_check::Args),
    /// Print the shell completion script (bash, zsh or fish), generated from this binary.
    #[command(after_help = examples::COMPLETIONS)]
    Completions(shell_docs::CompletionsArgs),
    /// Print the manual page, or write one per command with --out DIR.
    #[command(after_help = examples::MAN)]
    Man(shell_docs::ManArgs),
    /// One run of a probe in its own process (started by probe-check and doctor; not for operators).
    #[command(name = "__probe-run", hide = true)]
    ProbeRun(ProbeRunArgs),
}

#[derive(Debug, clap::Args)]
pub struct ProbeRunArgs {
    /// The run's spec, written by the probe.
    #[arg(long, value_name = "FILE")]
    pub spec: std::path::PathBuf,
}

impl Command {
    /// Run the parsed command. Adding a command = a variant above + one arm here.
    pub fn dispatch(self, json: bool) -> CmdResult<Outcome> {
        match self {
            Command::Init(args) => init::run(args, json),
            Command::Run(args) => run::run(args, json),
            Command::Step(mut args) => {
                args.once = true;
                run::run(args, json)
            }
            Command::Status(args) => status::run(args, json),
            Command::Watch(args) => watch::run(args, json),
            Command::Check(args) => check::run(args, json),
            Command::Report(args) => report::run(args, json),
            Command::ExplainHalt(args) => explain_halt::run(args, json),
            Command::InspectCost(args) => inspect_cost::run(args, json),
            Command::Escalate(args) => escalate::run(args, json),
            Command::Ratchet(args) => ratchet::run(args, json),
            Command::Sandbox(args) => sandbox::run(args, json),
            Command::Policy(args) => policy::run(args, json),
            Command::Doctor(args) => doctor::run(args, json),
            Command::Isolate(args) => isolate::run(args, json),
            Command::Keygen(args) => keygen::run(args, json),
            Command::Ack(args) => ack::run(args, json),
            Command::Verify(args) if args.all.is_some() => verify_all::run(args, json),
            Command::Verify(args) => verify::run(args, json),
            Command::Fleet(args) => fleet::run(args, json),
            Command::Attest(args) => attest::run(args, json),
            Command::Replay(args) => replay::run(args, json),
            Command::Reexecute(args) => reexecute::run(args, json),
            Command::ProbeCheck(args) => probe_check::run(args, json),
            Command::Completions(args) => shell_docs::completions(args, json),
            Command::Man(args) => shell_docs::man(args, json),
            Command::ProbeRun(args) => crate::engine::probe_run::command(&args.spec),
        }
    }
}

/// Whether `--json` appears on the command line (before any `--`), decided before parsing so that
/// even a usage error is rendered as JSON.
fn wants_json(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| a.as_os_str() != "--")
        .any(|a| a.as_os_str() == "--json")
}

/// The subcommand the user typed, for the `command` field of a usage error.
fn typed_command(args: &[OsString]) -> String {
    args.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| !a.starts_with('-'))
        .unwrap_or("loopexec")
        .to_string()
}

fn usage_error(err: clap::Error, json: bool, args: &[OsString]) -> i32 {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = err.print();
        return 0;
    }
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) && !json
    {
        let _ = err.print();
        return Failure::usage("").class().code();
    }
    let rendered = err.render().to_string();
    // The error is every line before clap's "Usage:" block (e.g. the names of missing arguments).
    let message = rendered
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let message = message
        .strip_prefix("error: ")
        .unwrap_or(&message)
        .to_string();
    let message = if message.is_empty() {
        "invalid usage".to_string()
    } else {
        message
    };
    let failure = Failure::usage(message).with_hint("see `loopexec --help`");
    if json {
        Outcome::failed(&typed_command(args), &failure).emit(true)
    } else {
        let _ = err.print();
        failure.class().code()
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOOPEXEC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Parse the command line, run the command, print its one outcome; returns the exit code.
pub fn main_entry() -> i32 {
    let args: Vec<OsString> = std::env::args_os().collect();
    let json = wants_json(&args);
    let parsed = Cli::command()
        .try_get_matches_from(&args)
        .and_then(|m| Ok((Cli::from_arg_matches(&m)?, m)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(err) => return usage_error(err, json, &args),
    };
    init_tracing();
    let name = matches.subcommand_name().unwrap_or("loopexec").to_string();
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cli.command.dispatch(json)));
    let mut outcome = match result {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(failure)) => Outcome::failed(&name, &failure),
        Err(payload) => Outcome::failed(
            &name,
            &Failure::internal(format!(
                "internal error: {}",
                panic_message(payload.as_ref())
            )),
        ),
    };
    outcome.command = name;
    outcome.emit(json)
}
