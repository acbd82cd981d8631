//! `loopexec isolate`: print how the zones of a loop would be isolated, without running anything.
//! It resolves the loop exactly as `run` does (flags over `loop.toml`) and, per zone, prints
//! either the native sandbox's plan (namespaces, mounts, network, Landlock, seccomp, limits) or,
//! for a container backend, the engine command line `run` would execute. Values only known at
//! run time (the container name, the mounted overlay, the proxy's network namespace) are shown
//! as `<...>` and listed under `prepared_at_run_time`. The engine is not contacted: what it can
//! enforce on this host is checked when the run starts.

use super::loop_args::LoopCommandArgs;
use super::operator::absolute_workdir;
use super::run::ZoneArgs;
use crate::engine::config::LoopConfig;
use crate::engine::detached::WORKSPACE_TARGET;
use crate::engine::loopfile;
use crate::error::{CmdResult, Failure};
use crate::output::Outcome;
use crate::receipt::store::STATE_DIR;
use crate::safefs::SafeDir;
use crate::zones::container::engine::Engine;
use crate::zones::container::plan::{
    zone_env, ContainerMount, ContainerNetwork, ContainerPlan, ZoneParts,
};
use crate::zones::container::{
    detached_refusal, hidden_mount, in_place_mounts, unexpressible, zone_user, EngineCapabilities,
    Refusal,
};
use crate::zones::pinned::PROXY_PORT;
use crate::zones::{Isolation, Role};
use sandbox::policy::NetworkMode;
use sandbox::Policy;
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The loop's commands (default: loop.toml's).
    #[command(flatten)]
    pub commands: LoopCommandArgs,
    #[command(flatten)]
    pub zones: ZoneArgs,
    /// The loop's directory.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let workdir = absolute_workdir(&args.workdir)?;
    let wd = SafeDir::open(&workdir).map_err(|e| Failure::workspace(format!("workdir: {e}")))?;
    let flags = args.commands.over(args.zones.input());
    let (input, loop_ref) = match loopfile::load(&wd)? {
        Some((file, reference)) => (flags.over(file), Some(reference)),
        None => (flags, None),
    };
    if input.isolation == Some(Isolation::None) {
        return Err(Failure::usage(
            "loop.toml says isolation = \"none\": there are no zones to plan",
        ));
    }
    let cfg = LoopConfig::resolve(input, &workdir, loop_ref)?;
    let zones_setup = crate::engine::zone_setup::zone_setup(&cfg, &workdir.join(STATE_DIR))?;
    let detached = zones_setup.detached;
    let root = nix::unistd::geteuid().is_root();
    let mut zones = Vec::new();
    let mut refusals: Vec<Refusal> = Vec::new();
    for (role, pinned) in zones_setup.policies() {
        let (source, policy) = (&pinned.source, &pinned.policy);
        let command_line = if role.writes_workspace() {
            &cfg.exec
        } else {
            &cfg.check
        };
        let zone = match cfg.backend.engine() {
            None => native_zone(policy, &cfg, detached),
            Some(engine) => {
                // Only what the policy itself makes impossible; the engine's own abilities are
                // checked when a run starts.
                let everything = EngineCapabilities::everything();
                refusals.extend(unexpressible(engine, &everything, role, policy, root));
                if detached && !root && role.writes_workspace() {
                    refusals.push(detached_refusal(engine));
                }
                container_zone(engine, role, policy, &cfg, detached, root, command_line)?
            }
        };
        zones.push(json!({"role": role.as_str(), "policy": source, "plan": zone}));
    }
    let body = json!({
        "backend": cfg.backend.as_str(),
        "image": cfg.image,
        "workspace": cfg.workspace.as_str(),
        "zones": zones,
        "refusals": refusals.iter().map(|r| json!({"cause": r.cause, "fix": r.fix})).collect::<Vec<_>>(),
    });
    let human = render(&body);
    if let Some(first) = refusals.first() {
        let failure = Failure::isolation(first.cause.clone()).with_hint(first.fix.clone());
        return Err(failure);
    }
    Ok(Outcome::ok("isolate").field("isolate", body).human(human))
}

fn native_zone(policy: &Policy, cfg: &LoopConfig, detached: bool) -> Value {
    let host = sandbox::preflight::probe();
    let fs = &policy.filesystem;
    let proxied = policy.network.mode == NetworkMode::Proxy;
    let writable: Vec<String> = if detached {
        vec![format!("{WORKSPACE_TARGET} (overlay over the baseline t0)")]
    } else {
        std::iter::once(cfg.workdir.clone())
            .chain(fs.read_write.iter().map(|p| p.display().to_string()))
            .collect()
    };
    json!({
        "namespaces": namespace_names(),
        "identity": {"uid_when_root": policy.identity.uid_when_root, "gid_when_root": policy.identity.gid_when_root, "hostname": policy.identity.hostname},
        "filesystem": {
            "read_only": fs.read_only,
            "read_write": writable,
            "protected": fs.protected,
            "hidden": fs.hidden.iter().map(|p| p.display().to_string()).chain(std::iter::once(format!("{}/{STATE_DIR}", cfg.workdir))).collect::<Vec<_>>(),
            "tmp_size_bytes": fs.tmp_size_bytes,
        },
        "network": {
            "mode": match policy.network.mode { NetworkMode::None => "none", NetworkMode::Proxy => "proxy" },
            "proxy_listener": proxied.then_some(format!("127.0.0.1:{PROXY_PORT}")),
        },
        "landlock_abi": host.landlock_abi,
        "seccomp": {"builtin_deny_list": true, "extra_deny": policy.syscalls.deny},
        "resources": policy.resources,
        "env": {"allow": policy.env.allow, "set": policy.env.set.keys().collect::<Vec<_>>()},
    })
}

/// The namespaces every native zone is cloned into, by name.
fn namespace_names() -> Vec<&'static str> {
    use nix::sched::CloneFlags as F;
    [
        (F::CLONE_NEWUSER, "user"),
        (F::CLONE_NEWNS, "mount"),
        (F::CLONE_NEWPID, "pid"),
        (F::CLONE_NEWNET, "network"),
        (F::CLONE_NEWIPC, "ipc"),
        (F::CLONE_NEWUTS, "uts"),
        (F::CLONE_NEWCGROUP, "cgroup"),
    ]
    .into_iter()
    .filter(|(flag, _)| sandbox::NAMESPACES.contains(*flag))
    .map(|(_, name)| name)
    .collect()
}

fn container_zone(
    engine: Engine,
    role: Role,
    policy: &Policy,
    cfg: &LoopConfig,
    detached: bool,
    root: bool,
    command_line: &str,
) -> CmdResult<Value> {
    let name = "loopexec-<run-time id>".to_string();
    let workdir = PathBuf::from(&cfg.workdir);
    let state_dir = workdir.join(STATE_DIR);
    let mut prepared = Vec::new();
    let mut mounts: Vec<ContainerMount> = policy
        .filesystem
        .hidden
        .iter()
        .map(|h| hidden_mount(h))
        .collect();
    let cwd = if detached {
        mounts.push(ContainerMount::Bind {
            source: state_dir
                .join("container-mounts")
                .join(format!("<pid>_<start time>-{name}-0")),
            target: PathBuf::from(WORKSPACE_TARGET),
            writable: true,
        });
        prepared.push(format!(
            "{}: the {} overlay, mounted by loopexec before the container starts",
            state_dir.join("container-mounts").display(),
            if role.writes_workspace() {
                "workspace"
            } else {
                "check's throwaway"
            }
        ));
        PathBuf::from(WORKSPACE_TARGET)
    } else {
        let mut rw = vec![workdir.clone()];
        rw.extend(policy.filesystem.read_write.iter().cloned());
        let pairs: Vec<(PathBuf, PathBuf)> = rw
            .iter()
            .flat_map(|r| {
                policy
                    .filesystem
                    .protected
                    .iter()
                    .map(move |p| (r.clone(), p.clone()))
            })
            .collect();
        mounts.extend(in_place_mounts(&rw, &state_dir, &pairs));
        prepared.push(
            "empty read-only placeholder directories for protected paths that do not exist".into(),
        );
        workdir.clone()
    };
    let user = zone_user(policy, detached, root, &workdir)
        .map_err(|r| Failure::isolation(r.cause).with_hint(r.fix))?;
    let proxied = policy.network.mode == NetworkMode::Proxy;
    let network = match (proxied, engine) {
        (false, _) => ContainerNetwork::None,
        (true, Engine::Podman) => {
            prepared.push(format!("a network namespace with loopback and the egress proxy's listener on 127.0.0.1:{PROXY_PORT}"));
            ContainerNetwork::Namespace(PathBuf::from("<proxy network namespace>"))
        }
        (true, Engine::Docker) => {
            prepared.push(format!(
                "the egress network holder: a container with no network (`{} run --detach --interactive ... /bin/sh -c 'read x'`) whose namespace gets the egress proxy's listener on 127.0.0.1:{PROXY_PORT}",
                engine.program()
            ));
            ContainerNetwork::Container("<egress network holder>".into())
        }
    };
    let extra = if proxied {
        crate::egress::proxy_env(PROXY_PORT)
    } else {
        Vec::new()
    };
    // Only the agent gets loopexec's variables; the check gets none (commands.rs).
    let candidate: Vec<(String, String)> = match role {
        Role::Agent => vec![
            ("LOOPEXEC_RUN_ID".to_string(), "<run id>".to_string()),
            ("LOOPEXEC_ITERATION".to_string(), "<iteration>".to_string()),
            ("LOOPEXEC_ROLE".to_string(), role.as_str().to_string()),
        ],
        _ => Vec::new(),
    };
    let env_from_client = match (&cfg.credentials, role) {
        (Some(hooks), Role::Agent) => vec![hooks.env.clone()],
        _ => Vec::new(),
    };
    let image = cfg
        .image
        .clone()
        .ok_or_else(|| Failure::usage("a container backend needs --image"))?;
    let env = zone_env(policy, &candidate, &extra);
    let plan = ContainerPlan::new(
        engine,
        role,
        policy,
        ZoneParts {
            name,
            image,
            supervisor: "<pid>:<start time>".into(),
            user,
            keep_id: false,
            network,
            mounts,
            env: env.fixed,
            env_from_client: env
                .passed
                .into_iter()
                .map(|(k, _)| k)
                .chain(env_from_client)
                .collect(),
            cwd,
            cgroup_parent: cfg.cgroup_parent.clone(),
            command_line: command_line.to_string(),
        },
    );
    let argv = plan.argv().map_err(|e| Failure::isolation(e.to_string()))?;
    let line = plan
        .shell_line()
        .map_err(|e| Failure::isolation(e.to_string()))?;
    Ok(json!({
        "engine": engine.program(),
        "argv": std::iter::once(engine.program().to_string()).chain(argv).collect::<Vec<_>>(),
        "command": line,
        "prepared_at_run_time": prepared,
        "not_expressed": [
            "Landlock: the container sees only the image and its mounts instead",
            "loopexec's seccomp deny list: the engine's default seccomp profile applies instead",
        ],
    }))
}

fn render(body: &Value) -> String {
    let mut out = format!(
        "backend     {}\nworkspace   {}\n",
        body["backend"].as_str().unwrap_or("?"),
        body["workspace"].as_str().unwrap_or("?")
    );
    for zone in body["zones"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n{} zone ({})\n",
            zone["role"].as_str().unwrap_or("?"),
            zone["policy"].as_str().unwrap_or("?")
        ));
        let plan = &zone["plan"];
        if let Some(cmd) = plan["command"].as_str() {
            out.push_str(&format!("  {cmd}\n"));
            for p in plan["prepared_at_run_time"]
                .as_array()
                .into_iter()
                .flatten()
            {
                out.push_str(&format!(
                    "  prepared at run time: {}\n",
                    p.as_str().unwrap_or("")
                ));
            }
        } else {
            out.push_str(&serde_json::to_string_pretty(plan).unwrap_or_default());
            out.push('\n');
        }
    }
    for r in body["refusals"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\nrefused: {}\n  fix: {}\n",
            r["cause"].as_str().unwrap_or(""),
            r["fix"].as_str().unwrap_or("")
        ));
    }
    out
}
