//! Minimal command dispatcher (sandbox, policy, doctor). The integrator merges this with the
//! main CLI; each command's logic lives in its own file.

pub mod doctor;
pub mod policy;
pub mod sandbox;

use crate::error::Failure;
use crate::output::Outcome;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "loopexec", version, about = "A deterministic, sandbox-first runtime for loop engineering")]
pub struct Cli {
    /// Print exactly one JSON object on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one command in a zone (namespaces, Landlock, seccomp, cgroup) and exit with its code.
    Sandbox(sandbox::SandboxArgs),
    /// Validate, show and compare zone policies.
    Policy(policy::PolicyArgs),
    /// Check which isolation layers this host offers and whether a policy can run.
    Doctor(doctor::DoctorArgs),
}

/// Parse argv, run the command, print its outcome; returns the process exit code.
pub fn main_with_args(args: Vec<std::ffi::OsString>) -> i32 {
    let json = args.iter().any(|a| a == "--json");
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) && !json {
                let _ = e.print();
                return 0;
            }
            let text = e.to_string();
            let body = text.split("\n\nUsage:").next().unwrap_or("bad usage");
            let first = body.split_whitespace().collect::<Vec<_>>().join(" ").trim_start_matches("error: ").to_string();
            if !json {
                let _ = e.print();
                return Failure::usage(first).class.code();
            }
            return Outcome::failed("", &Failure::usage(first)).emit(true);
        }
    };
    let json = cli.json;
    let (name, result) = match cli.command {
        Command::Sandbox(a) => ("sandbox", sandbox::run(a, json)),
        Command::Policy(a) => ("policy", policy::run(a, json)),
        Command::Doctor(a) => ("doctor", doctor::run(a, json)),
    };
    match result {
        Ok(out) => out.emit(json),
        Err(f) => Outcome::failed(name, &f).emit(json),
    }
}
