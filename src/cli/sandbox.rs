//! `loopexec sandbox [--policy FILE] [--rw PATH]... [--ro PATH]... -- CMD ARGS`: run one command in
//! a zone, like bwrap, and exit with the command's exit code (128+N when killed by signal N). Under
//! `--json` the command's output still goes to the terminal and the zone report is the one JSON
//! object on stdout after it ends.

use crate::error::{CmdResult, Failure};
use crate::halt::ExitClass;
use crate::output::Outcome;
use sandbox::{Policy, SandboxError, ZoneExit, ZoneSpec};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    /// Policy file (default: the shipped `exec` policy: no network, system read-only).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Shipped policy by name (agent, exec, offline) instead of a file.
    #[arg(long, value_name = "NAME", conflicts_with = "policy")]
    pub builtin: Option<String>,
    /// Grant a host path read-write (repeatable).
    #[arg(long, value_name = "PATH")]
    pub rw: Vec<PathBuf>,
    /// Grant a host path read-only (repeatable).
    #[arg(long, value_name = "PATH")]
    pub ro: Vec<PathBuf>,
    /// Working directory inside the zone (default: the current directory if granted, else /).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Map a sandbox error to the command's failure class.
pub fn failure(e: SandboxError) -> Failure {
    match e {
        SandboxError::Unsatisfiable { layer, cause, fix } => {
            Failure::isolation(format!("isolation layer {} unavailable: {cause}", layer.as_str())).with_hint(fix)
        }
        SandboxError::Policy(p) => Failure::invalid_input(p.to_string()),
        SandboxError::Spec(m) => Failure::usage(m),
        SandboxError::Spawn(m) => Failure::new(ExitClass::Execution, "spawn_failed", m),
        e @ SandboxError::Io { .. } => Failure::new(ExitClass::Execution, "io", e.to_string()),
    }
}

/// Load `--policy FILE` or `--builtin NAME` (default: builtin exec).
pub fn load_policy(file: Option<&PathBuf>, builtin: Option<&str>) -> CmdResult<Policy> {
    match (file, builtin) {
        (Some(f), _) => Policy::load(f).map_err(|e| Failure::invalid_input(e.to_string())),
        (None, name) => {
            let name = name.unwrap_or("exec");
            Policy::builtin(name).ok_or_else(|| Failure::usage(format!("no shipped policy named {name:?} (agent, exec, offline)")))
        }
    }
}

pub fn run(args: SandboxArgs, json: bool) -> CmdResult<Outcome> {
    let policy = load_policy(args.policy.as_ref(), args.builtin.as_deref())?;
    let wall = Duration::from_secs(policy.resources.wall_clock_seconds);
    let abs = |p: &PathBuf| std::path::absolute(p).map_err(|e| Failure::io(p, &e));
    let extra_rw = args.rw.iter().map(abs).collect::<CmdResult<Vec<_>>>()?;
    let extra_ro = args.ro.iter().map(abs).collect::<CmdResult<Vec<_>>>()?;
    let cwd = match &args.cwd {
        Some(c) => abs(c)?,
        None => {
            let here = std::env::current_dir().ok().and_then(|d| std::fs::canonicalize(d).ok());
            let granted = |d: &PathBuf| {
                policy.filesystem.read_only.iter().chain(&policy.filesystem.read_write).chain(&extra_rw).chain(&extra_ro).any(|g| d.starts_with(g))
            };
            here.filter(granted).unwrap_or_else(|| PathBuf::from("/"))
        }
    };
    let mut spec = ZoneSpec::new(policy, args.command.clone());
    spec.cwd = cwd;
    spec.env = std::env::vars_os().collect();
    spec.extra_rw = extra_rw;
    spec.extra_ro = extra_ro;
    if json {
        // stdout carries the one JSON object: the command's stdout goes to our stderr.
        spec.stdout = std::io::stderr().as_fd_owned();
    }
    let mut zone = sandbox::launch(spec).map_err(failure)?;
    let ended = zone.wait_timeout(wall).map_err(failure)?;
    let (exit, timed_out) = match ended {
        Some(e) => (e, false),
        None => {
            zone.kill().map_err(failure)?;
            (ZoneExit::Signaled(libc::SIGKILL), true)
        }
    };
    let report = serde_json::to_value(zone.report()).unwrap_or_default();
    drop(zone);
    let code = exit.code();
    let mut out = Outcome::ok("sandbox")
        .field("exit", serde_json::to_value(exit).unwrap_or_default())
        .field("timed_out", timed_out)
        .field("zone", report);
    if timed_out {
        out = Outcome::failed(
            "sandbox",
            &Failure::new(ExitClass::Budget, "wall_clock_exceeded", format!("the command ran longer than {}s and was killed", wall.as_secs())),
        )
        .field("exit", serde_json::to_value(exit).unwrap_or_default())
        .field("timed_out", true);
    }
    out.set("command_exit_code", code);
    if !timed_out {
        out.process_exit = Some(code);
    }
    Ok(out)
}

trait AsFdOwned {
    fn as_fd_owned(&self) -> Option<std::os::fd::OwnedFd>;
}
impl AsFdOwned for std::io::Stderr {
    fn as_fd_owned(&self) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        self.as_fd().try_clone_to_owned().ok()
    }
}
