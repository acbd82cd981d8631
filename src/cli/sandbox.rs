//! `loopexec sandbox [--policy FILE] [--rw PATH]... [--ro PATH]... [--overlay SPEC]... -- CMD ARGS`: run one command in
//! a zone, like bwrap, and exit with the command's exit code (128+N when killed by signal N). Under
//! `--json` the command's output still goes to the terminal and the zone report is the one JSON
//! object on stdout after it ends.

use crate::egress::{AuditLog, EgressArgs, Proxy};
use crate::engine::config::EgressPins;
use crate::error::{CmdResult, Failure};
use crate::output::Outcome;
use crate::safefs::SafeDir;
use crate::zones::pinned::{egress_config, PROXY_PORT};
use sandbox::{Policy, ZoneExit, ZoneSpec};
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
    /// Mount an overlay inside the zone (repeatable):
    /// `target=DIR,lower=DIR[,lower=DIR...][,upper=DIR,work=DIR]`, the first lower on top.
    #[arg(long, value_name = "SPEC", value_parser = parse_overlay)]
    pub overlay: Vec<sandbox::OverlayMount>,
    /// Working directory inside the zone (default: the current directory if granted, else /).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    #[command(flatten)]
    pub egress: EgressArgs,
    /// Where the egress proxy appends its audit log (policies with network mode "proxy"); default:
    /// a new file in $TMPDIR, named in the output.
    #[arg(long, value_name = "FILE")]
    pub egress_log: Option<PathBuf>,
    /// Run the command in its own time namespace with its monotonic and boot clocks (and
    /// /proc/uptime) this many seconds ahead of the host's (negative: behind). The wall clock
    /// cannot be moved. Needs Linux >= 5.6.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub clock_offset: Option<i64>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Parse `target=DIR,lower=DIR[,lower=DIR...][,upper=DIR,work=DIR]` (paths cannot contain `,`).
fn parse_overlay(text: &str) -> Result<sandbox::OverlayMount, String> {
    let mut o = sandbox::OverlayMount {
        target: PathBuf::new(),
        lowers: Vec::new(),
        upper: None,
        work: None,
        volatile: false,
    };
    for part in text.split(',') {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("`{part}`: expected KEY=DIR"))?;
        let path = std::path::absolute(value).map_err(|e| format!("{value}: {e}"))?;
        match key {
            "target" => o.target = path,
            "lower" => o.lowers.push(path),
            "upper" => o.upper = Some(path),
            "work" => o.work = Some(path),
            other => {
                return Err(format!(
                    "unknown overlay key `{other}` (target, lower, upper, work)"
                ))
            }
        }
    }
    if o.target.as_os_str().is_empty() || o.lowers.is_empty() {
        return Err("an overlay needs target= and at least one lower=".into());
    }
    Ok(o)
}

/// Move this supervisor where its zone's cgroup can be created (a delegated systemd scope when
/// the policy's `layers.cgroup_delegation` calls for one); a refusal is an isolation failure,
/// `Ok(Err(signal))` an interrupt while it waited for systemd.
pub fn place_supervisor(
    policy: &Policy,
) -> CmdResult<Result<Option<crate::delegation::Scope>, i32>> {
    match crate::delegation::place_supervisor(&[policy]) {
        Ok(scope) => Ok(Ok(scope)),
        Err(r) => match r.interrupted {
            Some(signal) => Ok(Err(signal)),
            None => Err(Failure::isolation(format!(
                "isolation layer cgroup unavailable: {}",
                r.cause
            ))
            .with_hint(r.fix)),
        },
    }
}

/// Load `--policy FILE` or `--builtin NAME` (default: builtin exec).
pub fn load_policy(file: Option<&PathBuf>, builtin: Option<&str>) -> CmdResult<Policy> {
    match (file, builtin) {
        (Some(f), _) => Ok(Policy::load(f)?),
        (None, name) => {
            let name = name.unwrap_or("exec");
            Policy::builtin(name).ok_or_else(|| {
                Failure::usage(format!(
                    "no shipped policy named {name:?} (agent, exec, offline)"
                ))
            })
        }
    }
}

/// Open the egress audit log: `--egress-log FILE`, or a new file in the temporary directory.
fn open_egress_log(explicit: Option<&PathBuf>) -> CmdResult<(AuditLog, PathBuf)> {
    let path = match explicit {
        Some(p) => std::path::absolute(p).map_err(|e| Failure::io(p, &e))?,
        None => std::env::temp_dir().join(format!("loopexec-egress-{}.jsonl", std::process::id())),
    };
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) => (d.to_path_buf(), n.to_string_lossy().into_owned()),
        _ => {
            return Err(Failure::usage(format!(
                "--egress-log {}: not a file path",
                path.display()
            )))
        }
    };
    let dir = SafeDir::open(&dir).map_err(|e| Failure::workspace(e.to_string()))?;
    let log = AuditLog::open(&dir, &name)
        .map_err(|e| Failure::workspace(format!("egress audit log: {e}")))?;
    Ok((log, path))
}

pub fn run(args: SandboxArgs, json: bool) -> CmdResult<Outcome> {
    crate::interrupt::install()
        .map_err(|e| Failure::internal(format!("installing signal handlers: {e}")))?;
    let mut policy = load_policy(args.policy.as_ref(), args.builtin.as_deref())?;
    let pins = EgressPins {
        allow_hosts: args.egress.allow_host.clone(),
        resolve: args.egress.resolve.clone(),
        egress_proxy: args.egress.egress_proxy.clone(),
    };
    let proxied = policy.network.mode == sandbox::policy::NetworkMode::Proxy;
    if !proxied && (pins != EgressPins::default() || args.egress_log.is_some()) {
        return Err(Failure::usage(
            "egress flags need a policy whose network mode is \"proxy\" (e.g. --builtin agent)",
        ));
    }
    let egress = if proxied {
        let config = egress_config(
            &policy,
            &pins.allow_hosts,
            &pins.resolve,
            pins.egress_proxy.as_deref(),
        )
        .map_err(|e| Failure::usage(format!("egress configuration: {e}")))?;
        for (k, v) in crate::egress::proxy_env(PROXY_PORT) {
            policy.env.set.insert(k, v);
        }
        Some((config, open_egress_log(args.egress_log.as_ref())?))
    } else {
        None
    };
    let wall = Duration::from_secs(policy.resources.wall_clock_seconds);
    let abs = |p: &PathBuf| std::path::absolute(p).map_err(|e| Failure::io(p, &e));
    let extra_rw = args.rw.iter().map(abs).collect::<CmdResult<Vec<_>>>()?;
    let extra_ro = args.ro.iter().map(abs).collect::<CmdResult<Vec<_>>>()?;
    let cwd = match &args.cwd {
        None if !args.overlay.is_empty() => args.overlay[0].target.clone(),
        Some(c) => abs(c)?,
        None => {
            let here = std::env::current_dir()
                .ok()
                .and_then(|d| std::fs::canonicalize(d).ok());
            let granted = |d: &PathBuf| {
                policy
                    .filesystem
                    .read_only
                    .iter()
                    .chain(&policy.filesystem.read_write)
                    .chain(&extra_rw)
                    .chain(&extra_ro)
                    .any(|g| d.starts_with(g))
            };
            here.filter(granted).unwrap_or_else(|| PathBuf::from("/"))
        }
    };
    let mut spec = ZoneSpec::new(policy, args.command.clone());
    spec.cwd = cwd;
    spec.env = std::env::vars_os().collect();
    spec.extra_rw = extra_rw;
    spec.extra_ro = extra_ro;
    spec.overlays = args.overlay;
    spec.clock_offset_s = args.clock_offset;
    // The zone never holds the operator's terminal or files (see zone_stream). Under --json stdout
    // carries the one JSON object, so the command's stdout goes to our stderr.
    let stdout_sink = if json { Sink::Stderr } else { Sink::Stdout };
    let (out_fd, out_read) = zone_stream(stdout_sink)?;
    let (err_fd, err_read) = zone_stream(Sink::Stderr)?;
    spec.stdout = Some(out_fd);
    spec.stderr = Some(err_fd);
    if egress.is_some() {
        spec.loopback_listener = Some(PROXY_PORT);
    }
    let scope = match place_supervisor(&spec.policy)? {
        Ok(scope) => scope,
        Err(sig) => {
            return Ok(Outcome::interrupted(
                "sandbox",
                crate::interrupt::exit_code(sig),
            ))
        }
    };
    let mut zone = sandbox::launch(spec)?;
    let mut relays = Vec::new();
    for (read, sink) in [(out_read, stdout_sink), (err_read, Sink::Stderr)] {
        relays.push(relay(read, sink)?);
    }
    let proxy = match (egress, zone.take_listener()) {
        (Some((config, (log, path))), Some(listener)) => {
            let handle = Proxy::start(
                config,
                listener,
                log,
                "sandbox",
                &crate::egress::ProxyStats::default(),
            )
            .map_err(|e| Failure::internal(format!("egress proxy: {e}")))?;
            Some((handle, path))
        }
        _ => None,
    };
    // Wait for the command, the wall clock, or SIGINT/SIGTERM to loopexec (then the zone is torn
    // down before we exit: no cgroup, placeholder or process is left behind).
    let deadline = std::time::Instant::now() + wall;
    let (exit, timed_out, interrupted) = loop {
        if let Some(sig) = crate::interrupt::pending() {
            zone.kill()?;
            break (ZoneExit::Signaled(libc::SIGKILL), false, Some(sig));
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            zone.kill()?;
            break (ZoneExit::Signaled(libc::SIGKILL), true, None);
        }
        if let Some(e) = zone.wait_timeout(left.min(Duration::from_millis(100)))? {
            break (e, false, None);
        }
    };
    let report = serde_json::to_value(zone.report()).unwrap_or_default();
    drop(zone);
    if !timed_out && interrupted.is_none() {
        // Deliver all the output. (A killed zone's output is not waited for: our own reader may
        // be the reason it stalled.)
        for relay in relays {
            let _ = relay.join();
        }
    }
    if let Some(sig) = interrupted {
        return Ok(
            Outcome::interrupted("sandbox", crate::interrupt::exit_code(sig)).field("zone", report),
        );
    }
    let egress_report =
        proxy.map(|(handle, path)| serde_json::json!({"audit_log": path, "totals": handle.stop()}));
    let code = exit.code();
    let mut out = Outcome::ok("sandbox")
        .field("exit", serde_json::to_value(exit).unwrap_or_default())
        .field("timed_out", timed_out)
        .field(
            "cgroup_scope",
            serde_json::to_value(&scope).unwrap_or_default(),
        )
        .field("zone", report);
    if timed_out {
        out = Outcome::failed(
            "sandbox",
            &Failure::new(
                crate::error::FailureCode::WallClockExceeded,
                format!(
                    "the command ran longer than {}s and was killed",
                    wall.as_secs()
                ),
            ),
        )
        .field("exit", serde_json::to_value(exit).unwrap_or_default())
        .field("timed_out", true);
    }
    out.set("command_exit_code", code);
    if let Some(e) = egress_report {
        out.set("egress", e);
    }
    if !timed_out {
        out.exit_code_override = Some(code);
    }
    Ok(out)
}

/// Where a relayed stream goes.
#[derive(Clone, Copy)]
enum Sink {
    Stdout,
    Stderr,
}

/// The zone's end of one output stream, and the supervisor's end to relay from once the zone
/// runs (no thread is started before the zone is cloned). The zone never holds the operator's
/// terminal or files: a file or pipe is relayed through a pipe (a zone could otherwise truncate
/// it or change its mode), a terminal through a fresh pseudo-terminal of our own (the zone keeps
/// a real tty for its output, but cannot read what the operator types, change the operator's
/// terminal settings or its device mode).
fn zone_stream(sink: Sink) -> CmdResult<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::io::IsTerminal;
    let terminal = match sink {
        Sink::Stdout => std::io::stdout().is_terminal(),
        Sink::Stderr => std::io::stderr().is_terminal(),
    };
    if terminal {
        let pty = nix::pty::openpty(None, None)
            .map_err(|e| Failure::internal(format!("openpty: {e}")))?;
        nix::fcntl::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&pty.master),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .map_err(|e| Failure::internal(format!("pty: {e}")))?;
        // Output passes through unchanged: the operator's own terminal does its output processing.
        if let Ok(mut t) = nix::sys::termios::tcgetattr(&pty.slave) {
            t.output_flags.remove(nix::sys::termios::OutputFlags::OPOST);
            let _ =
                nix::sys::termios::tcsetattr(&pty.slave, nix::sys::termios::SetArg::TCSANOW, &t);
        }
        return Ok((pty.slave, pty.master));
    }
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| Failure::internal(format!("pipe: {e}")))?;
    Ok((w, r))
}

/// Copy `from` (a relay pipe's read end, or a pseudo-terminal's master) to `sink` until every
/// writer is gone (the zone and all its processes ended: end of file, or EIO on a pty master).
fn relay(from: std::os::fd::OwnedFd, sink: Sink) -> CmdResult<std::thread::JoinHandle<()>> {
    use std::io::{Read, Write};
    let target = match sink {
        Sink::Stdout => std::os::fd::AsFd::as_fd(&std::io::stdout()).try_clone_to_owned(),
        Sink::Stderr => std::os::fd::AsFd::as_fd(&std::io::stderr()).try_clone_to_owned(),
    };
    let mut to = std::fs::File::from(target.map_err(|e| Failure::internal(format!("dup: {e}")))?);
    let handle = std::thread::Builder::new()
        .name("sandbox-relay".into())
        .spawn(move || {
            let mut from = std::fs::File::from(from);
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        // A plain write on a duplicate of our fd: never Rust's stdout lock, which the
                        // main thread needs to print the outcome even when this write stalls.
                        if to.write_all(&buf[..n]).is_err() {
                            // Our own output is gone (closed pipe): keep draining so the zone never blocks.
                            continue;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        })
        .map_err(|e| Failure::internal(format!("relay thread: {e}")))?;
    Ok(handle)
}
