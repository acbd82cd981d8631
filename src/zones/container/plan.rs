//! The plan of one container zone: a zone policy (the same `agent.toml` / `exec.toml` the native
//! sandbox reads) expressed as a container engine's `run` arguments. Pure: building the plan runs
//! nothing, so `loopexec isolate` prints exactly what a run would execute.
//!
//! What each policy table becomes:
//! - `[network]` mode `none`: `--network none`. Mode `proxy`: the network namespace loopexec
//!   prepared (loopback plus the egress proxy's listener), joined by path (podman only).
//! - `[resources]`: `--memory` (swap included, so no swap beyond it), `--pids-limit`, `--cpus`,
//!   `--ulimit nofile/fsize/core`; the wall clock is enforced by loopexec itself.
//! - `[identity]`: `--hostname`, and the uid/gid the command runs as (`--user`).
//! - `[filesystem]`: the image is the root, read-only (`--read-only`); `/tmp` a private tmpfs of
//!   `tmp_size_bytes`; the workspace and `read_write` grants bound read-write; hidden paths
//!   covered by an empty read-only tmpfs; protected paths bound read-only over themselves.
//!   `read_only` host binds do not apply: the image replaces the host's system directories.
//! - Always: `--cap-drop ALL`, `--security-opt no-new-privileges`, private IPC and cgroup
//!   namespaces, no pull (`--pull never`), no log copy (`--log-driver none`), `/bin/sh` as the
//!   entrypoint whatever the image says.
//! - `[env]`: only the variables the native zone would get: the policy's fixed values as
//!   `--env K=V`; values from the operator's environment and a minted secret as `--env NAME`
//!   alone, so that they travel in the client's environment, never in argv.

use super::engine::Engine;
use crate::zones::Role;
use sandbox::Policy;
use std::path::{Path, PathBuf};

/// The label every loopexec container carries: `<supervisor pid>:<its start time>`, so that a
/// later start can remove the containers of a supervisor that was killed.
pub const SUPERVISOR_LABEL: &str = "io.loopexec.supervisor";
/// The label naming the zone's role (`agent` or `check`).
pub const ROLE_LABEL: &str = "io.loopexec.role";

/// The zone's network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerNetwork {
    /// No interface but loopback.
    None,
    /// Join this network namespace (loopback and the egress proxy's listener), by path (podman).
    Namespace(PathBuf),
    /// Share the network namespace of this container (docker, which cannot join one by path): a
    /// holder container with no network, in whose namespace loopexec put the proxy's listener.
    Container(String),
}

/// One mount of the zone, beyond the image's root and `/tmp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerMount {
    /// A host path at `target`.
    Bind {
        source: PathBuf,
        target: PathBuf,
        writable: bool,
    },
    /// An empty, read-only tmpfs covering a directory.
    EmptyDir { target: PathBuf },
}

/// What the zone's policy sets, as the engine's limits.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneLimits {
    pub hostname: String,
    pub memory_bytes: u64,
    pub pids_max: u64,
    pub cpu_percent: u32,
    pub open_files_max: u64,
    pub file_size_max_bytes: u64,
    pub core_dump_bytes: u64,
    /// RLIMIT_NPROC ([`own_nproc_limit`]; None: unlimited). Set explicitly because engines
    /// otherwise apply their own default; the process budget itself is `--pids-limit`.
    pub nproc_limit: Option<u64>,
    pub tmp_size_bytes: u64,
}

impl ZoneLimits {
    pub fn of(policy: &Policy) -> ZoneLimits {
        let r = &policy.resources;
        ZoneLimits {
            hostname: policy.identity.hostname.clone(),
            memory_bytes: r.memory_bytes,
            pids_max: r.pids_max,
            cpu_percent: r.cpu_percent,
            open_files_max: r.open_files_max,
            file_size_max_bytes: r.file_size_max_bytes,
            core_dump_bytes: r.core_dump_bytes,
            nproc_limit: own_nproc_limit(),
            tmp_size_bytes: policy.filesystem.tmp_size_bytes,
        }
    }
}

/// Everything one `run` of the engine needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerPlan {
    pub engine: Engine,
    pub role: Role,
    pub parts: ZoneParts,
    pub limits: ZoneLimits,
}

/// Why a plan cannot be expressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{what} {path:?} cannot be passed to {engine} --mount (it contains a comma, quote or newline)")]
    UnsafePath {
        engine: &'static str,
        what: &'static str,
        path: String,
    },
    #[error("image {0:?} is not a valid image reference (letters, digits and ._-/:@ only, not starting with '-')")]
    BadImage(String),
    #[error("cgroup parent {0:?} must be an absolute cgroup path without `..`, commas or spaces")]
    BadCgroupParent(String),
}

/// Validate an image reference: it lands in argv, where `-x` would be read as a flag.
pub fn check_image(image: &str) -> Result<(), PlanError> {
    let ok = !image.is_empty()
        && image.len() <= 512
        && !image.starts_with('-')
        && image
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(PlanError::BadImage(image.to_string()))
    }
}

/// Validate a cgroup parent path.
pub fn check_cgroup_parent(parent: &str) -> Result<(), PlanError> {
    let p = Path::new(parent);
    let ok = p.is_absolute()
        && parent.len() > 1
        && !parent.contains([',', ' ', '\n', '\t', '"'])
        && p.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        });
    if ok {
        Ok(())
    } else {
        Err(PlanError::BadCgroupParent(parent.to_string()))
    }
}

fn mount_value(engine: Engine, what: &'static str, path: &Path) -> Result<String, PlanError> {
    let text = path.to_string_lossy();
    if text.contains([',', '"', '\n', '\r']) || text.contains('=') && what == "target" {
        return Err(PlanError::UnsafePath {
            engine: engine.program(),
            what,
            path: text.into_owned(),
        });
    }
    Ok(text.into_owned())
}

/// The RLIMIT_NPROC to pass on: loopexec's own hard limit, capped at the kernel's `pid_max`
/// (no more processes can exist anyway; engines' defaults above what their runtime may set
/// fail on hosts where it lacks CAP_SYS_RESOURCE). None when both are unknown or unlimited.
pub fn own_nproc_limit() -> Option<u64> {
    let own = match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NPROC) {
        Ok((_, hard)) if hard != nix::sys::resource::RLIM_INFINITY => Some(hard),
        _ => None,
    };
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    match (own, pid_max) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The command-specific parts of a plan; the rest comes from the zone's policy.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneParts {
    pub name: String,
    pub image: String,
    /// `<pid>:<start time>` of the supervising loopexec.
    pub supervisor: String,
    pub user: (u32, u32),
    /// Rootless podman: map the caller's uid to the same uid inside (`--userns keep-id`).
    pub keep_id: bool,
    pub network: ContainerNetwork,
    pub mounts: Vec<ContainerMount>,
    /// Variables set in argv (`--env K=V`): the zone's fixed values only.
    pub env: Vec<(String, String)>,
    /// Variables whose value the engine takes from its client's environment (`--env NAME`): the
    /// operator's values and the minted secret.
    pub env_from_client: Vec<String>,
    pub cwd: PathBuf,
    pub cgroup_parent: Option<String>,
    pub command_line: String,
}

impl ContainerPlan {
    /// The plan of one command of `role` under `policy`.
    pub fn new(engine: Engine, role: Role, policy: &Policy, parts: ZoneParts) -> ContainerPlan {
        ContainerPlan {
            engine,
            role,
            parts,
            limits: ZoneLimits::of(policy),
        }
    }

    /// The engine's arguments (after the program name), e.g. `run --name ... IMAGE /bin/sh -c CMD`.
    pub fn argv(&self) -> Result<Vec<String>, PlanError> {
        let (p, l) = (&self.parts, &self.limits);
        check_image(&p.image)?;
        if let Some(parent) = &p.cgroup_parent {
            check_cgroup_parent(parent)?;
        }
        let mut a: Vec<String> = Vec::new();
        let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
        push(&["run", "--name", &p.name, "--pull", "never"]);
        push(&["--label", &format!("{SUPERVISOR_LABEL}={}", p.supervisor)]);
        push(&["--label", &format!("{ROLE_LABEL}={}", self.role.as_str())]);
        match &p.network {
            ContainerNetwork::None => push(&["--network", "none"]),
            ContainerNetwork::Namespace(path) => {
                push(&["--network", &format!("ns:{}", path.display())])
            }
            ContainerNetwork::Container(name) => push(&["--network", &format!("container:{name}")]),
        }
        // A container sharing another's network namespace shares its UTS name too (docker
        // refuses --hostname there): the holder carries the zone's hostname instead.
        if !matches!(p.network, ContainerNetwork::Container(_)) {
            push(&["--hostname", &l.hostname]);
        }
        push(&["--user", &format!("{}:{}", p.user.0, p.user.1)]);
        if p.keep_id {
            push(&["--userns", "keep-id"]);
        }
        push(&["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]);
        push(&["--read-only"]);
        if self.engine == Engine::Podman {
            // podman's --read-only adds writable tmpfs on /run, /var/tmp and others by default.
            push(&["--read-only-tmpfs=false"]);
        }
        push(&["--ipc", "private", "--cgroupns", "private"]);
        if l.memory_bytes > 0 {
            let m = format!("{}b", l.memory_bytes);
            push(&["--memory", &m, "--memory-swap", &m]);
        }
        if l.pids_max > 0 {
            push(&["--pids-limit", &l.pids_max.to_string()]);
        }
        if l.cpu_percent > 0 {
            push(&[
                "--cpus",
                &format!("{}.{:02}", l.cpu_percent / 100, l.cpu_percent % 100),
            ]);
        }
        push(&["--ulimit", &format!("nofile={0}:{0}", l.open_files_max)]);
        push(&["--ulimit", &format!("fsize={0}:{0}", l.file_size_max_bytes)]);
        push(&["--ulimit", &format!("core={0}:{0}", l.core_dump_bytes)]);
        let nproc = l
            .nproc_limit
            .map(|n| n.to_string())
            .unwrap_or_else(|| "-1".into());
        push(&["--ulimit", &format!("nproc={nproc}:{nproc}")]);
        if let Some(parent) = &p.cgroup_parent {
            push(&["--cgroup-parent", parent]);
        }
        push(&["--log-driver", "none"]);
        let copyup = if self.engine == Engine::Podman {
            ",notmpcopyup"
        } else {
            ""
        };
        push(&[
            "--mount",
            &format!(
                "type=tmpfs,destination=/tmp,tmpfs-size={},tmpfs-mode=1777{copyup}",
                l.tmp_size_bytes
            ),
        ]);
        for mount in &p.mounts {
            let spec = match mount {
                ContainerMount::Bind {
                    source,
                    target,
                    writable,
                } => format!(
                    "type=bind,source={},destination={}{}",
                    mount_value(self.engine, "source", source)?,
                    mount_value(self.engine, "target", target)?,
                    if *writable { "" } else { ",ro=true" }
                ),
                ContainerMount::EmptyDir { target } => format!(
                    "type=tmpfs,destination={},tmpfs-size=4096,tmpfs-mode=0555,ro=true{}",
                    mount_value(self.engine, "target", target)?,
                    // podman copies what the tmpfs covers into it unless told not to: the
                    // hidden contents would land in the zone.
                    if self.engine == Engine::Podman {
                        ",notmpcopyup"
                    } else {
                        ""
                    }
                ),
            };
            a.extend(["--mount".to_string(), spec]);
        }
        for (k, v) in &p.env {
            a.extend(["--env".to_string(), format!("{k}={v}")]);
        }
        for k in &p.env_from_client {
            a.extend(["--env".to_string(), k.clone()]);
        }
        a.extend([
            "--workdir".to_string(),
            p.cwd.to_string_lossy().into_owned(),
        ]);
        a.extend(["--entrypoint".to_string(), "/bin/sh".to_string()]);
        a.extend([p.image.clone(), "-c".to_string(), p.command_line.clone()]);
        Ok(a)
    }

    /// The plan as one shell-quoted line, for people.
    pub fn shell_line(&self) -> Result<String, PlanError> {
        let mut words = vec![shell_quote(self.engine.program())];
        words.extend(self.argv()?.iter().map(|w| shell_quote(w)));
        Ok(words.join(" "))
    }
}

/// The network holder of a proxied docker zone: a container with no network and nothing to do
/// (`/bin/sh -c 'read x'` on a stdin the engine keeps open), under the same identity, no
/// capabilities and a read-only root, whose network namespace the agent's container shares.
pub fn holder_argv(
    name: &str,
    image: &str,
    supervisor: &str,
    user: (u32, u32),
    hostname: &str,
    cgroup_parent: Option<&str>,
) -> Result<Vec<String>, PlanError> {
    check_image(image)?;
    let mut a: Vec<String> = [
        "run",
        "--detach",
        "--interactive",
        "--name",
        name,
        "--pull",
        "never",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend([
        "--label".into(),
        format!("{SUPERVISOR_LABEL}={supervisor}"),
        "--label".into(),
        format!("{ROLE_LABEL}=network"),
    ]);
    a.extend(
        [
            "--network",
            "none",
            "--hostname",
            hostname,
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--read-only",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    a.extend([
        "--pids-limit".into(),
        "4".into(),
        "--log-driver".into(),
        "none".into(),
        "--user".into(),
        format!("{}:{}", user.0, user.1),
    ]);
    if let Some(parent) = cgroup_parent {
        check_cgroup_parent(parent)?;
        a.extend(["--cgroup-parent".into(), parent.to_string()]);
    }
    a.extend(
        ["--entrypoint", "/bin/sh", image, "-c", "read x"]
            .iter()
            .map(|s| s.to_string()),
    );
    Ok(a)
}

/// Quote a word for a POSIX shell (only when it needs it).
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./-_".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The environment of a zone's command, as the native sandbox builds it, split by where the
/// values may travel. `fixed`: the policy's `env.set` and `extra` (the proxy variables), values
/// from reviewed files, which win and may stand in the engine's argv. `passed`: loopexec's own
/// variables and the candidate variables the policy's `env.allow` names, values from the
/// operator's environment, which travel by name only (`--env NAME`, the value in the client's
/// environment), so that no allowed token shows in a process list.
pub struct ZoneEnv {
    pub fixed: Vec<(String, String)>,
    pub passed: Vec<(String, String)>,
}

pub fn zone_env(
    policy: &Policy,
    candidate: &[(String, String)],
    extra: &[(String, String)],
) -> ZoneEnv {
    use std::collections::BTreeMap;
    let mut fixed: BTreeMap<String, String> = policy.env.set.clone().into_iter().collect();
    fixed.extend(extra.iter().cloned());
    let mut passed: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in candidate {
        let allowed = k.starts_with("LOOPEXEC_") || policy.env.allow.iter().any(|a| a == k);
        if allowed && !fixed.contains_key(k) {
            passed.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    ZoneEnv {
        fixed: fixed.into_iter().collect(),
        passed: passed.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(engine: Engine) -> ContainerPlan {
        ContainerPlan {
            engine,
            role: Role::Check,
            parts: ZoneParts {
                name: "loopexec-0123".into(),
                image: "localhost/agent:1".into(),
                supervisor: "42:777".into(),
                user: (60200, 60200),
                keep_id: false,
                network: ContainerNetwork::None,
                mounts: vec![
                    ContainerMount::Bind {
                        source: "/srv/mnt/check".into(),
                        target: "/workspace".into(),
                        writable: true,
                    },
                    ContainerMount::EmptyDir {
                        target: "/workspace/.loopexec".into(),
                    },
                ],
                env: vec![("PATH".into(), "/usr/bin:/bin".into())],
                env_from_client: vec![],
                cwd: "/workspace".into(),
                cgroup_parent: None,
                command_line: "make test".into(),
            },
            limits: ZoneLimits {
                hostname: "loopexec-exec".into(),
                memory_bytes: 1 << 30,
                pids_max: 256,
                cpu_percent: 150,
                open_files_max: 1024,
                file_size_max_bytes: 1 << 32,
                core_dump_bytes: 0,
                nproc_limit: Some(4096),
                tmp_size_bytes: 1 << 28,
            },
        }
    }

    #[test]
    fn a_check_plan_has_no_network_no_capabilities_and_a_read_only_root() {
        let argv = plan(Engine::Docker).argv().unwrap();
        let joined = argv.join(" ");
        for expected in [
            "--network none",
            "--cap-drop ALL",
            "--security-opt no-new-privileges",
            "--read-only",
            "--pull never",
            "--user 60200:60200",
            "--memory 1073741824b --memory-swap 1073741824b",
            "--pids-limit 256",
            "--cpus 1.50",
            "--ulimit nofile=1024:1024",
            "--ulimit core=0:0",
            "--entrypoint /bin/sh localhost/agent:1 -c make test",
        ] {
            assert!(
                joined.contains(expected),
                "missing {expected:?} in {joined}"
            );
        }
        assert!(
            !joined.contains("--read-only-tmpfs"),
            "docker has no --read-only-tmpfs: {joined}"
        );
    }

    #[test]
    fn podman_gets_no_extra_writable_tmpfs_with_its_read_only_root() {
        let argv = plan(Engine::Podman).argv().unwrap();
        assert!(argv.contains(&"--read-only-tmpfs=false".to_string()));
    }

    #[test]
    fn mounts_are_spelled_for_the_mount_flag() {
        let argv = plan(Engine::Podman).argv().unwrap();
        assert!(
            argv.contains(&"type=bind,source=/srv/mnt/check,destination=/workspace".to_string())
        );
        assert!(argv.contains(&"type=tmpfs,destination=/workspace/.loopexec,tmpfs-size=4096,tmpfs-mode=0555,ro=true,notmpcopyup".to_string()));
    }

    #[test]
    fn docker_tmpfs_mounts_carry_no_podman_only_option() {
        let argv = plan(Engine::Docker).argv().unwrap();
        assert!(argv.contains(
            &"type=tmpfs,destination=/workspace/.loopexec,tmpfs-size=4096,tmpfs-mode=0555,ro=true"
                .to_string()
        ));
        assert!(!argv.join(" ").contains("notmpcopyup"));
    }

    #[test]
    fn a_secret_travels_by_name_only() {
        let mut p = plan(Engine::Docker);
        p.parts.env_from_client = vec!["LOOPEXEC_AGENT_TOKEN".into()];
        let argv = p.argv().unwrap();
        let at = argv
            .iter()
            .position(|w| w == "LOOPEXEC_AGENT_TOKEN")
            .unwrap();
        assert_eq!(argv[at - 1], "--env");
    }

    #[test]
    fn a_proxied_zone_joins_the_prepared_namespace() {
        let mut p = plan(Engine::Podman);
        p.parts.network = ContainerNetwork::Namespace("/proc/9/fd/7".into());
        assert!(p
            .argv()
            .unwrap()
            .join(" ")
            .contains("--network ns:/proc/9/fd/7"));
    }

    #[test]
    fn a_proxied_docker_zone_shares_its_holders_network() {
        let mut p = plan(Engine::Docker);
        p.parts.network = ContainerNetwork::Container("loopexec-0123-net".into());
        let argv = p.argv().unwrap().join(" ");
        assert!(
            argv.contains("--network container:loopexec-0123-net"),
            "{argv}"
        );
        assert!(
            !argv.contains("--hostname"),
            "docker refuses a hostname with a shared network: {argv}"
        );
    }

    #[test]
    fn the_network_holder_has_no_network_no_capabilities_and_waits_on_its_stdin() {
        let argv = holder_argv("h", "img:1", "1:2", (60200, 60200), "loopexec-agent", None)
            .unwrap()
            .join(" ");
        for expected in [
            "run --detach --interactive --name h",
            "--network none",
            "--cap-drop ALL",
            "--read-only",
            "--user 60200:60200",
            "--entrypoint /bin/sh img:1 -c read x",
        ] {
            assert!(argv.contains(expected), "missing {expected:?} in {argv}");
        }
    }

    #[test]
    fn an_image_that_looks_like_a_flag_is_refused() {
        let mut p = plan(Engine::Docker);
        p.parts.image = "--privileged".into();
        assert_eq!(
            p.argv().unwrap_err(),
            PlanError::BadImage("--privileged".into())
        );
    }

    #[test]
    fn a_path_with_a_comma_cannot_be_mounted() {
        let mut p = plan(Engine::Docker);
        p.parts.mounts = vec![ContainerMount::Bind {
            source: "/a,readonly=false".into(),
            target: "/w".into(),
            writable: false,
        }];
        assert!(matches!(
            p.argv().unwrap_err(),
            PlanError::UnsafePath { what: "source", .. }
        ));
    }

    #[test]
    fn a_relative_cgroup_parent_is_refused() {
        assert!(check_cgroup_parent("machine.slice").is_err());
        assert!(check_cgroup_parent("/a/../b").is_err());
        assert!(check_cgroup_parent("/process_api/x/loopexec").is_ok());
    }

    #[test]
    fn the_shell_line_quotes_what_needs_quoting() {
        assert_eq!(shell_quote("make test"), "'make test'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("--network"), "--network");
    }

    #[test]
    fn the_zone_environment_keeps_allowed_names_and_fixed_values_win() {
        let policy = Policy::builtin("agent").unwrap();
        let candidate = vec![
            ("LANG".to_string(), "C".to_string()),
            ("AWS_SECRET_ACCESS_KEY".to_string(), "x".to_string()),
            ("LOOPEXEC_ITERATION".to_string(), "3".to_string()),
            ("HOME".to_string(), "/root".to_string()),
        ];
        let env = zone_env(&policy, &candidate, &[]);
        let get = |list: &[(String, String)], k: &str| {
            list.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        assert_eq!(get(&env.passed, "LANG").as_deref(), Some("C"));
        assert_eq!(get(&env.passed, "LOOPEXEC_ITERATION").as_deref(), Some("3"));
        assert_eq!(get(&env.passed, "AWS_SECRET_ACCESS_KEY"), None);
        assert_eq!(get(&env.fixed, "AWS_SECRET_ACCESS_KEY"), None);
        assert_eq!(
            get(&env.fixed, "HOME").as_deref(),
            Some("/tmp"),
            "the policy's value wins"
        );
        assert_eq!(get(&env.passed, "HOME"), None);
    }

    #[test]
    fn operator_values_travel_by_name_only() {
        let mut p = plan(Engine::Podman);
        p.parts.env_from_client = vec!["LANG".into()];
        let argv = p.argv().unwrap();
        assert!(argv.contains(&"LANG".to_string()));
        assert!(!argv.iter().any(|a| a.starts_with("LANG=")));
    }
}
