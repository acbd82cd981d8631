//! `loopexec doctor [--policy FILE] [--backend B]`: the isolation preflight. It performs the steps a
//! launch performs rather than reading static facts: the supervisor's cgroup placement (asking
//! systemd for a delegated scope where the policy's `layers.cgroup_delegation` says so), the
//! host preflight, then a real zone under the policy (the same clone3, cgroup and namespace path)
//! and one with an overlay mounted in its user namespace, both torn down again. Its verdict is
//! the launch's: "policy can run" only when those zones ran. It also shows what the host offers
//! (kernel, AppArmor's userns restriction, Landlock ABI, seccomp, cgroup version). With a container
//! backend, what the engine says it can enforce and whether the policy can run under it. Exit 0,
//! or 30 `isolation_unsatisfiable` naming each missing layer and the fix for this host.
//!
//! With `--check CMD` (and probe-check's flags) doctor is the precondition gate of a loop: after
//! the isolation preflight (native isolation), the oracle gates of `crate::trust::gates` run, each
//! with its verdict and evidence; the first that fails gives the exit (14 `check_flaky`,
//! `check_not_hermetic`, `check_has_side_effects`). Their results are kept in a signed doctor
//! receipt (`trust::record`); under `doctor = true` a run records them and halts on a failed one.

use crate::cli::sandbox::load_policy;
use crate::error::{CmdResult, Failure};
use crate::output::{aligned, Outcome};
use crate::zones::container::engine::Engine;
use crate::zones::container::unexpressible;
use crate::zones::Role;
use sandbox::launch::ZoneExit;
use sandbox::{Layer, Missing, SandboxError};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Policy to check against this host (default: the shipped `agent` policy).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Ask this backend instead of probing the native sandbox's layers (`podman`, `docker`).
    #[arg(long, value_enum)]
    pub backend: Option<crate::zones::Backend>,
    /// The check whose oracle gates to run (determinism, hermeticity, side effects).
    #[command(flatten)]
    pub target: crate::cli::probe_check::CheckTargetArgs,
    #[command(flatten)]
    pub probe: crate::cli::probe_check::ProbeArgs,
    /// The adequacy gate's mutants (`--diff-base`, `--mutants`).
    #[command(flatten)]
    pub adequacy: super::doctor_adequacy::AdequacyArgs,
    /// With `--check`: the operator key that endorses the doctor receipt's key (default:
    /// operator.key in the key dir).
    #[arg(long, value_name = "FILE")]
    pub operator_key: Option<PathBuf>,
}

/// The engine's answer and the policy's refusals under it.
fn engine_report(engine: Engine, policy: &sandbox::Policy) -> CmdResult<Outcome> {
    let caps = engine.capabilities().map_err(|e| {
        Failure::isolation(e.to_string()).with_hint(format!(
            "install and start {}, or use the native backend",
            engine.program()
        ))
    })?;
    let root = nix::unistd::geteuid().is_root();
    let refusals = unexpressible(engine, &caps, Role::Agent, policy, root);
    let yes = |b: bool| {
        if b {
            "yes".to_string()
        } else {
            "NO".to_string()
        }
    };
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
            let mut out = Outcome::failed(
                "doctor",
                &Failure::isolation(first.cause.clone()).with_hint(first.fix.clone()),
            );
            for r in refusals.iter().skip(1) {
                out.errors.push(
                    Failure::isolation(r.cause.clone())
                        .with_hint(r.fix.clone())
                        .entry(),
                );
            }
            out
        }
        None => Outcome::ok("doctor"),
    };
    out = out
        .field("engine", engine_json)
        .field("policy_sha256", policy.sha256.clone())
        .field("satisfiable", refusals.is_empty());
    Ok(out.human(human))
}

pub fn run(args: DoctorArgs, json: bool) -> CmdResult<Outcome> {
    if args.target.check.is_none() {
        return isolation_preflight(&args, json);
    }
    let workdir = crate::cli::operator::absolute_workdir(&args.target.workdir)?;
    let wd = crate::safefs::SafeDir::open(&workdir)
        .map_err(|e| Failure::workspace(format!("workdir: {e}")))?;
    let file = crate::engine::loopfile::load(&wd)?;
    let input = file.as_ref().map(|(input, _)| input);
    let settings = args.probe.resolve(input)?;
    let target = args.target.resolve(input)?;
    // The gates' receipt is signed: without the operator key no check runs.
    let operator = crate::cli::operator::load_operator_key(args.operator_key.as_deref())?;
    let statedir = crate::receipt::store::StateDir::open_or_create(&workdir)?;
    let preflight = match target.isolation {
        crate::zones::Isolation::Native => {
            let out = isolation_preflight(&args, json)?;
            if out.exit_code() != 0 {
                return Ok(out);
            }
            Some(out)
        }
        crate::zones::Isolation::None => None,
    };
    use crate::engine::detached::{is_git_repository, WorkspaceMode};
    let setting = crate::engine::inactive_guards::Setting {
        detached: target.isolation == crate::zones::Isolation::Native
            && input.and_then(|i| i.workspace) != Some(WorkspaceMode::InPlace)
            && is_git_repository(&workdir),
        baseline: input.and_then(|i| i.baseline).unwrap_or(true),
        coverage: input.and_then(|i| i.coverage.clone()),
        check: target.check.clone(),
    };
    gates_run(
        preflight,
        &target,
        &settings,
        Some(&args.adequacy),
        (&statedir, &operator),
        &setting,
    )
    .map(|g| g.out)
}

/// What `doctor = true`'s gates decided about a new run.
pub enum LoopGate {
    /// The isolation preflight refused: no zone can run, so no run is started (doctor's outcome).
    Refused(Outcome),
    /// The oracle gates ran, their doctor receipt written: the run starts and records them; a
    /// failed gate halts it before any agent call.
    Judged(crate::receipt::probe::PreconditionsRecord),
}

/// `doctor = true` in loop.toml: the gates `run` runs before a new run starts, over the resolved
/// configuration (its check, isolation, exec-zone policy, timeout, reports; the target from the
/// loop file), their results kept in a doctor receipt under `statedir`.
pub fn gate_loop(
    cfg: &crate::engine::config::LoopConfig,
    input: &crate::engine::config::ConfigInput,
    json: bool,
    statedir: &crate::receipt::store::StateDir,
    operator: &crate::receipt::keys::OperatorKey,
) -> CmdResult<LoopGate> {
    let target = crate::trust::runner::CheckTarget {
        workdir: std::path::PathBuf::from(&cfg.workdir),
        isolation: cfg.isolation,
        check_policy: cfg.check_policy.as_ref().map(|p| p.source.clone()),
        check: cfg.check.clone(),
        timeout_ms: cfg.check_timeout_ms,
        reports: cfg.report_patterns(),
        zone_owner: crate::engine::probe_run::zone_owner(
            cfg.isolation,
            cfg.check_policy.as_ref().map(|p| p.source.as_str()),
        )?,
    };
    let settings = crate::cli::probe_check::ProbeArgs::default().resolve(Some(input))?;
    let preflight = match cfg.isolation {
        crate::zones::Isolation::Native => {
            let args = DoctorArgs {
                policy: cfg
                    .agent_policy
                    .as_ref()
                    .map(|p| PathBuf::from(&p.source))
                    .filter(|p| p.is_absolute()),
                backend: Some(cfg.backend),
                target: Default::default(),
                probe: Default::default(),
                adequacy: Default::default(),
                operator_key: None,
            };
            let out = isolation_preflight(&args, json)?;
            if out.exit_code() != 0 {
                return Ok(LoopGate::Refused(out));
            }
            Some(out)
        }
        crate::zones::Isolation::None => None,
    };
    // Before a run there is no agent change to mutate: the loop's own canary (`adequacy =
    // "final"`) judges adequacy on its final green iteration.
    let setting = crate::engine::inactive_guards::Setting {
        detached: cfg.workspace == crate::engine::detached::WorkspaceMode::Detached,
        baseline: cfg.baseline,
        coverage: cfg.coverage.report.clone(),
        check: cfg.check.clone(),
    };
    Ok(LoopGate::Judged(
        gates_run(
            preflight,
            &target,
            &settings,
            None,
            (statedir, operator),
            &setting,
        )?
        .preconditions,
    ))
}

/// The oracle gates' outcome after a preflight that passed (`None`: no isolation to check), their
/// signed receipt written under the state dir with the operator key (`record`, `trust::record`),
/// and what a run's receipt records of them.
pub struct GatesRun {
    pub out: Outcome,
    pub preconditions: crate::receipt::probe::PreconditionsRecord,
}

pub fn gates_run(
    preflight: Option<Outcome>,
    target: &crate::trust::runner::CheckTarget,
    settings: &crate::trust::determinism::ProbeSettings,
    adequacy: Option<&super::doctor_adequacy::AdequacyArgs>,
    record: (
        &crate::receipt::store::StateDir,
        &crate::receipt::keys::OperatorKey,
    ),
    setting: &crate::engine::inactive_guards::Setting,
) -> CmdResult<GatesRun> {
    use crate::trust::gates::{first_failure, run_gates, GateVerdict};
    let (determinism, mut reports) = run_gates(target, settings)?;
    let adequacy_skipped = match adequacy
        .map(|a| {
            super::doctor_adequacy::gate(
                target,
                a,
                settings.jobs,
                determinism.summary.modal.class == crate::receipt::probe::RunClass::Pass,
            )
        })
        .transpose()?
    {
        Some(Ok(report)) => {
            reports.push(report);
            None
        }
        Some(Err(why)) => Some(why),
        None => None,
    };
    let failure = first_failure(&reports);
    let mut out = match &failure {
        Some((reason, detail, gate)) => {
            Outcome::halted("doctor", *reason).field("detail", format!("{gate}: {detail}"))
        }
        None => Outcome::ok("doctor"),
    };
    let (statedir, operator) = record;
    use crate::trust::record::{gate_values, isolation_gate, keep, preconditions_of, Conclusion};
    let gates: Vec<serde_json::Value> = std::iter::once(isolation_gate(preflight.is_some()))
        .chain(gate_values(&reports))
        .collect();
    let detail = failure
        .as_ref()
        .map(|(_, detail, gate)| format!("doctor gate {gate}: {detail}"));
    let conclusion = Conclusion {
        command: "doctor",
        gates: Some(gates.clone()),
        halt_reason: failure.as_ref().map(|f| f.0),
        exit_code: out.exit_code(),
        target,
    };
    let kept = keep(statedir, operator, &determinism, conclusion)?;
    let preconditions = preconditions_of(
        &kept,
        &gates,
        &determinism,
        failure.as_ref().map(|f| f.0),
        detail,
    );
    let mut human = preflight
        .as_ref()
        .map(|p| p.human.clone())
        .unwrap_or_default();
    let isolation = match &preflight {
        Some(_) => "passed".to_string(),
        None => "not checked (--isolation none)".to_string(),
    };
    let mut rows = vec![("gate isolation".to_string(), isolation)];
    for r in &reports {
        let shown = match &r.verdict {
            GateVerdict::Passed => "passed".to_string(),
            GateVerdict::Failed { reason, detail } => format!("FAILED {reason}: {detail}"),
            GateVerdict::Inconclusive { detail } => format!("inconclusive: {detail}"),
        };
        rows.push((format!("gate {}", r.gate), shown));
    }
    rows.push((
        "flake rate bound".into(),
        format!(
            "{:.6} after {} runs at confidence {}",
            determinism.summary.flake_rate_bound,
            determinism.summary.runs,
            determinism.summary.confidence
        ),
    ));
    let rows: Vec<(&str, String)> = rows.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    human.push_str(&aligned(&rows));
    if let Some(p) = preflight {
        for (k, v) in p.fields {
            out.set(&k, v);
        }
    }
    // The guards a loop on this check would have blind, from what its first run showed.
    let sight = determinism.runs.first().and_then(|r| r.shown.sight.clone());
    let inactive = crate::engine::inactive_guards::assess(
        setting,
        sight.as_ref(),
        &[],
        crate::analysis::Limits::default().max_parse_bytes,
    );
    for line in crate::engine::inactive_guards::lines(&inactive) {
        human.push_str(&format!(
            "blind            {}\n",
            crate::inert::inert(&line)
        ));
    }
    out.set(
        "inactive_guards",
        serde_json::to_value(&inactive).unwrap_or_default(),
    );
    if let Some(why) = adequacy_skipped {
        human.push_str(&format!("gate adequacy    {why}\n"));
        out.set("adequacy", why);
    }
    out.set("check", target.check.clone());
    out.set("gates", serde_json::to_value(&reports).unwrap_or_default());
    out.set(
        "probe",
        serde_json::to_value(&determinism).unwrap_or_default(),
    );
    human.push_str(&format!(
        "receipt          {}\n",
        crate::inert::inert(&kept.dir.to_string_lossy())
    ));
    out.set("receipt", kept.dir.to_string_lossy().into_owned());
    Ok(GatesRun {
        out: out.human(human),
        preconditions,
    })
}

/// The isolation preflight (doctor without `--check`).
fn isolation_preflight(args: &DoctorArgs, _json: bool) -> CmdResult<Outcome> {
    let policy = load_policy(args.policy.as_ref(), Some("agent"))?;
    if let Some(engine) = args.backend.and_then(|b| b.engine()) {
        return engine_report(engine, &policy);
    }
    // The same steps as a launch, in the same order: the supervisor's placement (a delegated
    // systemd scope when the policy and host call for one), the host preflight, then real zones.
    let placement = crate::delegation::place_supervisor(&[&policy]);
    let host = sandbox::preflight::probe();
    let mut missing = host.missing(&policy);
    if let Err(r) = &placement {
        missing.retain(|m| m.layer != Layer::Cgroup);
        missing.push(Missing {
            layer: Layer::Cgroup,
            cause: r.cause.clone(),
            fix: r.fix.clone(),
        });
    }
    let live = live_probe(&policy);
    for m in live.zone.iter().chain(live.overlay.iter()) {
        if !missing
            .iter()
            .any(|known| known.layer == m.layer && known.cause == m.cause)
        {
            missing.push(m.clone());
        }
    }
    let blocking: Vec<&Missing> = missing
        .iter()
        .filter(|m| !policy.may_skip(m.layer))
        .collect();
    // The verdict is the live launch's: a zone started (and the overlay mounted) or not.
    let satisfiable = live.zone.is_none() && live.overlay.is_none() && placement.is_ok();
    let yes = |b: bool| {
        if b {
            "yes".to_string()
        } else {
            "NO".to_string()
        }
    };
    let userns_ok = !missing.iter().any(|m| m.layer == Layer::UserNamespace);
    let place = match &placement {
        Ok(Some(scope)) => format!(
            "delegated scope {} (systemd {} manager)",
            scope.unit, scope.manager
        ),
        Ok(None) => "the cgroup loopexec was started in".into(),
        Err(_) => "NONE".into(),
    };
    let apparmor = match host.apparmor_restrict_unprivileged_userns {
        Some(true) => "restricts unprivileged user namespaces",
        Some(false) => "no user namespace restriction",
        None => "no restriction sysctl",
    };
    let rows = vec![
        ("kernel", host.kernel.clone()),
        ("running as root", yes(host.running_as_root)),
        ("user namespaces", yes(userns_ok)),
        ("apparmor", apparmor.to_string()),
        (
            "landlock ABI",
            if host.landlock_abi == 0 {
                "NONE".into()
            } else {
                host.landlock_abi.to_string()
            },
        ),
        ("seccomp", yes(host.seccomp)),
        (
            "cgroup",
            format!(
                "v{} can host zones: {}",
                host.cgroup.version.unwrap_or(0),
                yes(host.cgroup.delegated)
            ),
        ),
        (
            "cgroup delegation",
            format!("{} ({})", place, policy.layers.cgroup_delegation.as_str()),
        ),
        (
            "disk cap",
            match (&host.disk_cap, policy.resources.disk_bytes) {
                (None, Some(b)) => format!("{} ({b} bytes)", sandbox::volume::mechanism()),
                (None, None) => format!(
                    "{} (the policy sets no resources.disk_bytes)",
                    sandbox::volume::mechanism()
                ),
                (Some(m), _) => format!("NONE: {}", m.cause),
            },
        ),
        ("zone started", yes(live.zone.is_none())),
        ("overlayfs in a zone", yes(live.overlay.is_none())),
        ("policy sha256", policy.sha256.clone()),
        ("policy can run", yes(satisfiable)),
    ];
    let mut human = aligned(&rows);
    for m in &missing {
        let allowed = if policy.may_skip(m.layer) {
            " (skipped: allowed by policy)"
        } else {
            ""
        };
        human.push_str(&format!(
            "missing {}{allowed}: {}\n  fix: {}\n",
            m.layer.as_str(),
            m.cause,
            m.fix
        ));
    }
    let scope = placement.as_ref().ok().cloned().flatten();
    let fields = |out: Outcome| {
        out.field("host", serde_json::to_value(&host).unwrap_or_default())
            .field(
                "missing",
                serde_json::to_value(&missing).unwrap_or_default(),
            )
            .field(
                "cgroup_scope",
                serde_json::to_value(&scope).unwrap_or_default(),
            )
            .field("zone_started", live.zone.is_none())
            .field("overlayfs", live.overlay.is_none())
            .field("policy_sha256", policy.sha256.clone())
            .field("satisfiable", satisfiable)
    };
    let refusal = |m: &Missing| {
        Failure::isolation(format!(
            "isolation layer {} unavailable: {}",
            m.layer.as_str(),
            m.cause
        ))
        .with_hint(m.fix.clone())
    };
    // A live failure on a layer the policy may skip still stops the launch (the preflight saw
    // the layer, so nothing was skipped): it is a refusal too.
    let live_refusals: Vec<&Missing> = live.zone.iter().chain(live.overlay.iter()).collect();
    let refusals = if blocking.is_empty() {
        live_refusals
    } else {
        blocking
    };
    if let Some(first) = refusals.first().filter(|_| !satisfiable) {
        let mut out = Outcome::failed("doctor", &refusal(first));
        for m in refusals.iter().skip(1) {
            out.errors.push(refusal(m).entry());
        }
        return Ok(fields(out).human(human));
    }
    Ok(fields(Outcome::ok("doctor")).human(human))
}

/// What starting real zones under the policy showed: None where it worked.
struct LiveProbe {
    /// A zone running `true`, as `loopexec sandbox` starts it.
    zone: Option<Missing>,
    /// The same with a writable overlay (as a detached run's workspace), when the zone started.
    overlay: Option<Missing>,
}

/// Start a zone under `policy` (clone3, cgroup, namespaces, Landlock, seccomp: the launch path
/// itself), then one with an overlay mounted in its user namespace; both are torn down again.
fn live_probe(policy: &sandbox::Policy) -> LiveProbe {
    let zone = run_probe_zone(policy, None).err();
    if zone.is_some() {
        return LiveProbe {
            zone,
            overlay: None,
        };
    }
    let scratch = std::env::temp_dir().join(format!("loopexec-doctor-{}", std::process::id()));
    let overlay = overlay_layers(&scratch, policy)
        .map_err(|e| Missing { layer: Layer::MountNamespace, cause: format!("preparing the overlay probe in {}: {e}", scratch.display()), fix: "make the temporary directory writable ($TMPDIR)".into() })
        .and_then(|(o, _volume)| run_probe_zone(policy, Some(o)))
        .err()
        .map(|m| Missing {
            fix: format!("{}; overlayfs must mount inside a user namespace (Linux >= 5.11, the overlay module available: `modprobe overlay`, and `overlay` in /etc/modules-load.d to keep it)", m.fix),
            ..m
        });
    let _ = std::fs::remove_dir_all(&scratch);
    LiveProbe {
        zone: None,
        overlay,
    }
}

/// lower (one file), upper and work directories under `scratch`, owned by the zone's uid; the
/// upper and work directories in a capped volume (`scratch/disk.img`, kept mounted as long as
/// the returned volume) when the policy sets `resources.disk_bytes` and the host can cap.
fn overlay_layers(
    scratch: &std::path::Path,
    policy: &sandbox::Policy,
) -> std::io::Result<(sandbox::OverlayMount, Option<sandbox::Volume>)> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir(scratch)?;
    std::fs::set_permissions(scratch, std::fs::Permissions::from_mode(0o711))?;
    let (lower, upper, work) = (
        scratch.join("lower"),
        scratch.join("upper"),
        scratch.join("work"),
    );
    let root = nix::unistd::geteuid().is_root();
    let owner = (policy.identity.uid_when_root, policy.identity.gid_when_root);
    let volume = match sandbox::volume::cap_of(policy) {
        Ok(Some(bytes)) => {
            let dir = std::fs::File::open(scratch)?;
            use std::os::fd::AsRawFd;
            Some(sandbox::Volume::create(
                dir.as_raw_fd(),
                scratch,
                "disk.img",
                bytes,
                owner,
            )?)
        }
        _ => None,
    };
    let (upper, work) = match &volume {
        Some(v) => (v.path().join("upper"), v.path().join("work")),
        None => (upper, work),
    };
    for d in [&lower, &upper, &work] {
        std::fs::create_dir(d)?;
    }
    std::fs::write(lower.join("probe"), b"loopexec doctor\n")?;
    std::fs::set_permissions(&lower, std::fs::Permissions::from_mode(0o755))?;
    if root {
        for d in [&upper, &work] {
            std::os::unix::fs::chown(d, Some(owner.0), Some(owner.1))?;
        }
    }
    Ok((
        sandbox::OverlayMount {
            target: "/workspace".into(),
            lowers: vec![lower],
            upper: Some(upper),
            work: Some(work),
            volatile: false,
        },
        volume,
    ))
}

/// One zone running `sh -c` over the probe (reading the overlay's file when there is one).
fn run_probe_zone(
    policy: &sandbox::Policy,
    overlay: Option<sandbox::OverlayMount>,
) -> Result<(), Missing> {
    let script = if overlay.is_some() {
        "test -f /workspace/probe && : > /workspace/written"
    } else {
        ":"
    };
    let mut spec = sandbox::ZoneSpec::new(
        policy.clone(),
        vec!["/bin/sh".into(), "-c".into(), script.into()],
    );
    spec.overlays = overlay.into_iter().collect();
    let null = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .ok()
            .map(std::os::fd::OwnedFd::from)
    };
    spec.stdout = null();
    spec.stderr = null();
    let failed = |cause: String| Missing {
        layer: Layer::MountNamespace,
        cause,
        fix: "see the cause; `loopexec sandbox -- /bin/true` shows the same failure".into(),
    };
    let mut zone = match sandbox::launch(spec) {
        Ok(z) => z,
        Err(SandboxError::Unsatisfiable { layer, cause, fix }) => {
            return Err(Missing { layer, cause, fix })
        }
        Err(e) => return Err(failed(format!("starting a zone: {e}"))),
    };
    match zone.wait() {
        Ok(ZoneExit::Exited(0)) => Ok(()),
        Ok(other) => Err(failed(format!(
            "the probe zone's command ended with {other:?}"
        ))),
        Err(e) => Err(failed(format!("waiting for the probe zone: {e}"))),
    }
}
