//! `loopexec doctor [--policy FILE] [--backend B]`: the isolation preflight. Which layers this host
//! offers (user namespaces, probed live; Landlock ABI; seccomp; cgroup version and delegation;
//! overlayfs) and whether the policy can run here; with a container backend, what the engine says
//! it can enforce and whether the policy can run under it. Exit 0, or 30 `isolation_unsatisfiable`
//! naming each missing layer and its fix.

use crate::cli::sandbox::load_policy;
use crate::error::{CmdResult, Failure};
use crate::output::{aligned, Outcome};
use crate::zones::container::engine::Engine;
use crate::zones::container::unexpressible;
use crate::zones::Role;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Policy to check against this host (default: the shipped `agent` policy).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Ask this backend instead of probing the native sandbox's layers (`podman`, `docker`).
    #[arg(long, value_enum)]
    pub backend: Option<crate::zones::Backend>,
}

/// Start the namespace probe (a re-execution of this binary) and report why it failed, if it did.
fn probe_namespaces() -> Result<(), String> {
    let status = std::process::Command::new("/proc/self/exe")
        .env_clear()
        .env(sandbox::init::PROBE_MARKER, "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("could not start the probe: {e}"))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(errno) => Err(format!("creating the zone namespaces failed: {}", std::io::Error::from_raw_os_error(errno))),
        None => Err("the namespace probe was killed".into()),
    }
}

/// The engine's answer and the policy's refusals under it.
fn engine_report(engine: Engine, policy: &sandbox::Policy) -> CmdResult<Outcome> {
    let caps = engine.capabilities().map_err(|e| Failure::isolation(e.to_string()).with_hint(format!("install and start {}, or use the native backend", engine.program())))?;
    let root = nix::unistd::geteuid().is_root();
    let refusals = unexpressible(engine, &caps, Role::Agent, policy, root);
    let yes = |b: bool| if b { "yes".to_string() } else { "NO".to_string() };
    let rows = vec![
        ("engine", engine.program().to_string()),
        ("rootless", yes(caps.rootless)),
        ("cgroup", caps.cgroup_version.clone()),
        ("memory limit", yes(caps.memory_limit)),
        ("pids limit", yes(caps.pids_limit)),
        ("cpu limit", yes(caps.cpu_limit)),
        ("seccomp", yes(caps.seccomp)),
        ("policy sha256", policy.sha256.clone()),
        ("policy can run", yes(refusals.is_empty())),
    ];
    let mut human = aligned(&rows);
    for r in &refusals {
        human.push_str(&format!("refused: {}\n  fix: {}\n", r.cause, r.fix));
    }
    let engine_json = serde_json::json!({
        "engine": engine.program(), "rootless": caps.rootless, "cgroup_version": caps.cgroup_version,
        "memory_limit": caps.memory_limit, "pids_limit": caps.pids_limit, "cpu_limit": caps.cpu_limit, "seccomp": caps.seccomp,
    });
    let mut out = match refusals.first() {
        Some(first) => {
            let mut out = Outcome::failed("doctor", &Failure::isolation(first.cause.clone()).with_hint(first.fix.clone()));
            for r in refusals.iter().skip(1) {
                out.errors.push(Failure::isolation(r.cause.clone()).with_hint(r.fix.clone()).entry());
            }
            out
        }
        None => Outcome::ok("doctor"),
    };
    out = out.field("engine", engine_json).field("policy_sha256", policy.sha256.clone()).field("satisfiable", refusals.is_empty());
    Ok(out.human(human))
}

pub fn run(args: DoctorArgs, _json: bool) -> CmdResult<Outcome> {
    let policy = load_policy(args.policy.as_ref(), Some("agent"))?;
    if let Some(engine) = args.backend.and_then(|b| b.engine()) {
        return engine_report(engine, &policy);
    }
    let host = sandbox::preflight::probe();
    let mut missing = host.missing(&policy);
    if !missing.iter().any(|m| m.layer == sandbox::Layer::UserNamespace) {
        if let Err(cause) = probe_namespaces() {
            let m = if host.apparmor_restrict_unprivileged_userns == Some(true) {
                sandbox::preflight::apparmor_missing()
            } else {
                sandbox::Missing {
                    layer: sandbox::Layer::UserNamespace,
                    cause,
                    fix: "allow unprivileged user namespaces (user.max_user_namespaces > 0, no LSM or container seccomp policy blocking them)".into(),
                }
            };
            missing.insert(0, m);
        }
    }
    let blocking: Vec<&sandbox::Missing> = missing.iter().filter(|m| !policy.may_skip(m.layer)).collect();
    let yes = |b: bool| if b { "yes".to_string() } else { "NO".to_string() };
    let userns_ok = !missing.iter().any(|m| m.layer == sandbox::Layer::UserNamespace);
    let rows = vec![
        ("kernel", host.kernel.clone()),
        ("running as root", yes(host.running_as_root)),
        ("user namespaces", yes(userns_ok)),
        ("landlock ABI", if host.landlock_abi == 0 { "NONE".into() } else { host.landlock_abi.to_string() }),
        ("seccomp", yes(host.seccomp)),
        ("cgroup", format!("v{} delegated: {}", host.cgroup.version.unwrap_or(0), yes(host.cgroup.delegated))),
        ("overlayfs", yes(host.overlayfs)),
        ("policy sha256", policy.sha256.clone()),
        ("policy can run", yes(blocking.is_empty())),
    ];
    let mut human = aligned(&rows);
    for m in &missing {
        let allowed = if policy.may_skip(m.layer) { " (skipped: allowed by policy)" } else { "" };
        human.push_str(&format!("missing {}{allowed}: {}\n  fix: {}\n", m.layer.as_str(), m.cause, m.fix));
    }
    let fields = |out: Outcome| {
        out.field("host", serde_json::to_value(&host).unwrap_or_default())
            .field("missing", serde_json::to_value(&missing).unwrap_or_default())
            .field("policy_sha256", policy.sha256.clone())
            .field("satisfiable", blocking.is_empty())
    };
    if let Some(first) = blocking.first() {
        let mut out = Outcome::failed(
            "doctor",
            &Failure::isolation(format!("isolation layer {} unavailable: {}", first.layer.as_str(), first.cause)).with_hint(first.fix.clone()),
        );
        for m in blocking.iter().skip(1) {
            out.errors.push(
                Failure::isolation(format!("isolation layer {} unavailable: {}", m.layer.as_str(), m.cause)).with_hint(m.fix.clone()).entry(),
            );
        }
        return Ok(fields(out).human(human));
    }
    Ok(fields(Outcome::ok("doctor")).human(human))
}
