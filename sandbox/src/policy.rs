//! The zone policy: its TOML model, validation with line numbers, the sha256 of the file bytes,
//! the reviewer's view (table and JSON) and the difference between two policies.
//!
//! A policy is data written by the operator and read by security reviewers. Every table refuses
//! unknown keys (`deny_unknown_fields`), every host path must be absolute and free of `..`, and
//! every error names the line and column of the offending value.

use crate::error::Layer;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use toml::Spanned;

/// The layers a policy may allow to be skipped on a weaker host.
pub const SKIPPABLE_LAYERS: &[Layer] = &[Layer::Landlock, Layer::Cgroup, Layer::Disk];

/// A policy file as written, with the spans of the values validation may refuse.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    filesystem: RawFilesystem,
    #[serde(default)]
    network: Network,
    #[serde(default)]
    resources: Resources,
    #[serde(default)]
    syscalls: RawSyscalls,
    #[serde(default)]
    env: RawEnv,
    #[serde(default)]
    identity: Identity,
    #[serde(default)]
    layers: RawLayers,
    #[serde(default)]
    workspace: WorkspaceLimits,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilesystem {
    #[serde(default)]
    read_only: Vec<Spanned<String>>,
    #[serde(default)]
    read_write: Vec<Spanned<String>>,
    #[serde(default)]
    hidden: Vec<Spanned<String>>,
    #[serde(default)]
    protected: Vec<Spanned<String>>,
    #[serde(default = "default_tmp_size")]
    tmp_size_bytes: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSyscalls {
    #[serde(default)]
    deny: Vec<Spanned<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLayers {
    #[serde(default)]
    may_skip: Vec<Spanned<String>>,
    #[serde(default)]
    cgroup_delegation: CgroupDelegation,
}

/// The validated policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub filesystem: Filesystem,
    pub network: Network,
    pub resources: Resources,
    pub syscalls: Syscalls,
    pub env: Env,
    pub identity: Identity,
    pub layers: Layers,
    /// What an agent step may leave in a detached workspace, and how long the supervisor may
    /// spend reading it (read by the supervisor, never by the zone).
    #[serde(default)]
    pub workspace: WorkspaceLimits,
    /// sha256 (hex) of the policy file's bytes.
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filesystem {
    /// Host paths bound read-only at the same place in the zone (absent ones are skipped).
    pub read_only: Vec<PathBuf>,
    /// Host paths bound read-write at the same place in the zone (must exist).
    pub read_write: Vec<PathBuf>,
    /// Zone paths covered by an empty read-only directory or /dev/null.
    pub hidden: Vec<PathBuf>,
    /// Sub-paths (relative) of every writable root that stay read-only, existing or not.
    pub protected: Vec<PathBuf>,
    /// Size of the zone's private /tmp.
    pub tmp_size_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    #[serde(default)]
    pub mode: NetworkMode,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub allow_addresses: Vec<String>,
    /// Connections the proxy makes to destinations over the whole run (every step, resumes too).
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Connections the proxy makes to destinations during one step, if limited separately.
    #[serde(default)]
    pub max_connections_per_step: Option<u32>,
    /// Client connections open at once.
    #[serde(default = "default_max_open_connections")]
    pub max_open_connections: u32,
    /// Bytes relayed (both directions) over the whole run.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// Bytes relayed during one step, if limited separately.
    #[serde(default)]
    pub max_bytes_per_step: Option<u64>,
    /// A relayed connection with no byte in either direction for this long is cut.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_seconds: u64,
    /// Ports whose CONNECT tunnels must open with a TLS ClientHello naming the CONNECT host.
    #[serde(default = "default_sni_check_ports")]
    pub sni_check_ports: Vec<u16>,
    /// Allowed endpoints exempt from that check.
    #[serde(default)]
    pub sni_check_exempt: Vec<String>,
    /// Labels the `*` of a wildcard entry may stand for.
    #[serde(default = "default_wildcard_max_labels")]
    pub wildcard_max_labels: u32,
    /// Longest label the `*` of a wildcard entry may stand for.
    #[serde(default = "default_wildcard_max_label_length")]
    pub wildcard_max_label_length: u32,
    #[serde(default)]
    pub upstream_proxy: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// Loopback only, nothing else.
    #[default]
    None,
    /// Loopback only, plus the egress proxy's listener.
    Proxy,
}

impl NetworkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Proxy => "proxy",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    #[serde(default = "default_memory")]
    pub memory_bytes: u64,
    #[serde(default = "default_pids")]
    pub pids_max: u64,
    #[serde(default = "default_cpu")]
    pub cpu_percent: u32,
    #[serde(default = "default_wall")]
    pub wall_clock_seconds: u64,
    #[serde(default = "default_nofile")]
    pub open_files_max: u64,
    #[serde(default = "default_fsize")]
    pub file_size_max_bytes: u64,
    #[serde(default)]
    pub core_dump_bytes: u64,
    /// The cap on the zone's writable layers (the agent's workspace, the check's scratch layer):
    /// each lives on a volume of this size (`volume.rs`). None: uncapped.
    #[serde(
        default,
        deserialize_with = "disk_bytes",
        skip_serializing_if = "Option::is_none"
    )]
    pub disk_bytes: Option<u64>,
}

/// `resources.disk_bytes`: a whole number of bytes, at least [`crate::volume::MIN_DISK_BYTES`]
/// (refused during parsing, so the error names the value's line).
fn disk_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let bytes = u64::deserialize(d)?;
    if bytes < crate::volume::MIN_DISK_BYTES {
        return Err(serde::de::Error::custom(format!(
            "resources.disk_bytes: must be at least {} (16 MiB), got {bytes}",
            crate::volume::MIN_DISK_BYTES
        )));
    }
    Ok(Some(bytes))
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Syscalls {
    pub deny: Vec<String>,
}

/// `[env]` as written, with the place of every name and value (for errors naming the line).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnv {
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    set: BTreeMap<Spanned<String>, Spanned<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Env {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    #[serde(default = "default_zone_id")]
    pub uid_when_root: u32,
    #[serde(default = "default_zone_id")]
    pub gid_when_root: u32,
    #[serde(default = "default_hostname")]
    pub hostname: String,
}

/// The `[workspace]` table: limits on what the agent's upper layer may hold, checked while the
/// supervisor reads it after each agent step, and the time bounds of the post-agent phases. A
/// workspace over a limit halts the run `workspace_invalid`, naming the limit and the path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceLimits {
    /// Deepest path, in components (`a/b/c` is 3).
    #[serde(default = "default_ws_depth")]
    pub max_depth: u32,
    /// Longest path, in bytes.
    #[serde(default = "default_ws_path_bytes")]
    pub max_path_bytes: u32,
    /// Entries (files, directories, symlinks, anything else) the agent may create or change.
    #[serde(default = "default_ws_entries")]
    pub max_entries: u64,
    /// Sum of the sizes (apparent sizes: a sparse file counts what git would store) of the
    /// agent's files.
    #[serde(default = "default_ws_total_bytes")]
    pub max_total_bytes: u64,
    /// Largest single file.
    #[serde(default = "default_ws_file_bytes")]
    pub max_file_bytes: u64,
    /// Time bound of one snapshot (reading and hashing the upper layer).
    #[serde(default = "default_ws_phase_seconds")]
    pub snapshot_timeout_seconds: u64,
    /// Time bound of the delivery (objects, tree, commit, patch, branch).
    #[serde(default = "default_ws_phase_seconds")]
    pub delivery_timeout_seconds: u64,
}

impl Default for WorkspaceLimits {
    fn default() -> Self {
        WorkspaceLimits {
            max_depth: default_ws_depth(),
            max_path_bytes: default_ws_path_bytes(),
            max_entries: default_ws_entries(),
            max_total_bytes: default_ws_total_bytes(),
            max_file_bytes: default_ws_file_bytes(),
            snapshot_timeout_seconds: default_ws_phase_seconds(),
            delivery_timeout_seconds: default_ws_phase_seconds(),
        }
    }
}

fn default_ws_depth() -> u32 {
    256
}
fn default_ws_path_bytes() -> u32 {
    4096
}
fn default_ws_entries() -> u64 {
    1_000_000
}
fn default_ws_total_bytes() -> u64 {
    8 << 30
}
fn default_ws_file_bytes() -> u64 {
    2 << 30
}
fn default_ws_phase_seconds() -> u64 {
    900
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Layers {
    pub may_skip: Vec<Layer>,
    /// Where the supervisor's zone cgroups live (see [`CgroupDelegation`]).
    #[serde(default)]
    pub cgroup_delegation: CgroupDelegation,
}

/// `[layers] cgroup_delegation`: whether the supervisor asks systemd for a delegated transient
/// scope to hold its zone cgroups (cgroup v2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupDelegation {
    /// A scope only when the current cgroup cannot host zones (not delegated, controllers
    /// missing, other processes in it) and systemd is reachable.
    #[default]
    Auto,
    /// Always a scope of its own; refuse when systemd cannot give one.
    Systemd,
    /// Never ask: zones go beneath the cgroup loopexec was started in, or the launch refuses.
    Inherit,
}

impl CgroupDelegation {
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDelegation::Auto => "auto",
            CgroupDelegation::Systemd => "systemd",
            CgroupDelegation::Inherit => "inherit",
        }
    }
}

fn default_tmp_size() -> u64 {
    256 << 20
}
fn default_max_connections() -> u32 {
    10_000
}
fn default_max_open_connections() -> u32 {
    32
}
fn default_sni_check_ports() -> Vec<u16> {
    vec![443]
}
fn default_idle_timeout() -> u64 {
    600
}
fn default_wildcard_max_labels() -> u32 {
    2
}
fn default_wildcard_max_label_length() -> u32 {
    32
}
fn default_max_bytes() -> u64 {
    10 << 30
}
fn default_memory() -> u64 {
    2 << 30
}
fn default_pids() -> u64 {
    512
}
fn default_cpu() -> u32 {
    100
}
fn default_wall() -> u64 {
    3600
}
fn default_nofile() -> u64 {
    1024
}
fn default_fsize() -> u64 {
    4 << 30
}
fn default_zone_id() -> u32 {
    60200
}
fn default_hostname() -> String {
    "loopexec".into()
}

impl Default for Network {
    fn default() -> Self {
        Network {
            mode: NetworkMode::None,
            allow: Vec::new(),
            allow_addresses: Vec::new(),
            max_connections: default_max_connections(),
            max_connections_per_step: None,
            max_open_connections: default_max_open_connections(),
            max_bytes: default_max_bytes(),
            max_bytes_per_step: None,
            idle_timeout_seconds: default_idle_timeout(),
            sni_check_ports: default_sni_check_ports(),
            sni_check_exempt: Vec::new(),
            wildcard_max_labels: default_wildcard_max_labels(),
            wildcard_max_label_length: default_wildcard_max_label_length(),
            upstream_proxy: String::new(),
        }
    }
}
impl Default for Resources {
    fn default() -> Self {
        Resources {
            memory_bytes: default_memory(),
            pids_max: default_pids(),
            cpu_percent: default_cpu(),
            wall_clock_seconds: default_wall(),
            open_files_max: default_nofile(),
            file_size_max_bytes: default_fsize(),
            core_dump_bytes: 0,
            disk_bytes: None,
        }
    }
}
impl Default for Identity {
    fn default() -> Self {
        Identity {
            uid_when_root: default_zone_id(),
            gid_when_root: default_zone_id(),
            hostname: default_hostname(),
        }
    }
}

/// A refused policy: what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct PolicyError {
    /// File name (or `<builtin:NAME>`) the policy came from.
    pub source_name: String,
    /// 1-based line of the offending value (0 when the error concerns the whole file).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    pub message: String,
}

impl PolicyError {
    /// `file:line:column: message`, or `file: message` when the error has no position.
    fn render(&self) -> String {
        if self.line == 0 {
            format!("{}: {}", self.source_name, self.message)
        } else {
            format!(
                "{}:{}:{}: {}",
                self.source_name, self.line, self.column, self.message
            )
        }
    }
}

/// The policies shipped with loopexec, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("agent", include_str!("../../policies/agent.toml")),
    ("exec", include_str!("../../policies/exec.toml")),
    ("offline", include_str!("../../policies/offline.toml")),
];

impl Policy {
    /// One of the shipped policies (`agent`, `exec`, `offline`).
    pub fn builtin(name: &str) -> Option<Policy> {
        let (_, text) = BUILTIN.iter().find(|(n, _)| *n == name)?;
        Policy::parse(text.as_bytes(), &format!("<builtin:{name}>")).ok()
    }

    /// Read and validate a policy file.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let bytes = std::fs::read(path).map_err(|e| PolicyError {
            source_name: path.display().to_string(),
            line: 0,
            column: 0,
            message: format!("cannot read policy: {e}"),
        })?;
        Policy::parse(&bytes, &path.display().to_string())
    }

    /// Validate policy bytes; `source_name` appears in errors.
    pub fn parse(bytes: &[u8], source_name: &str) -> Result<Policy, PolicyError> {
        let at = |span: Option<std::ops::Range<usize>>, message: String| {
            let (line, column) = match span {
                Some(s) => line_col(bytes, s.start),
                None => (0, 0),
            };
            PolicyError {
                source_name: source_name.to_string(),
                line,
                column,
                message,
            }
        };
        let text = std::str::from_utf8(bytes).map_err(|e| {
            let (line, column) = line_col(bytes, e.valid_up_to());
            PolicyError {
                source_name: source_name.to_string(),
                line,
                column,
                message: "policy is not valid UTF-8".into(),
            }
        })?;
        let raw: RawPolicy =
            toml::from_str(text).map_err(|e| at(e.span(), e.message().trim().to_string()))?;

        let abs = |list: &[Spanned<String>], what: &str| -> Result<Vec<PathBuf>, PolicyError> {
            let mut out = Vec::new();
            for item in list {
                let p = Path::new(item.get_ref());
                check_absolute(p).map_err(|m| at(Some(item.span()), format!("{what}: {m}")))?;
                out.push(p.to_path_buf());
            }
            Ok(out)
        };
        let read_only = abs(&raw.filesystem.read_only, "filesystem.read_only")?;
        let read_write = abs(&raw.filesystem.read_write, "filesystem.read_write")?;
        let hidden = abs(&raw.filesystem.hidden, "filesystem.hidden")?;
        let mut protected = Vec::new();
        for item in &raw.filesystem.protected {
            let p = Path::new(item.get_ref());
            check_relative(p)
                .map_err(|m| at(Some(item.span()), format!("filesystem.protected: {m}")))?;
            protected.push(p.to_path_buf());
        }
        let mut deny = Vec::new();
        for item in &raw.syscalls.deny {
            if crate::seccomp_filter::syscall_number(item.get_ref()).is_none() {
                return Err(at(
                    Some(item.span()),
                    format!("syscalls.deny: unknown syscall name {:?}", item.get_ref()),
                ));
            }
            deny.push(item.get_ref().clone());
        }
        let mut may_skip = Vec::new();
        for item in &raw.layers.may_skip {
            let skippable = || {
                SKIPPABLE_LAYERS
                    .iter()
                    .map(|l| l.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let Some(layer) = Layer::from_name(item.get_ref()) else {
                return Err(at(
                    Some(item.span()),
                    format!(
                        "layers.may_skip: {:?} is not a layer (skippable: {})",
                        item.get_ref(),
                        skippable()
                    ),
                ));
            };
            if !SKIPPABLE_LAYERS.contains(&layer) {
                return Err(at(
                    Some(item.span()),
                    format!(
                        "layers.may_skip: {:?} cannot be skipped (skippable: {})",
                        item.get_ref(),
                        skippable()
                    ),
                ));
            }
            may_skip.push(layer);
        }
        for name in raw.env.allow.iter().chain(raw.env.set.keys()) {
            let text = name.get_ref();
            if text.is_empty() || text.contains('=') || text.contains('\0') {
                return Err(at(
                    Some(name.span()),
                    format!("env: invalid variable name {text:?}"),
                ));
            }
        }
        // A NUL cannot cross execve: the variable would arrive cut (or empty) in the zone.
        for (name, value) in &raw.env.set {
            if value.get_ref().contains('\0') {
                return Err(at(
                    Some(value.span()),
                    format!("env.set.{}: the value holds a NUL byte, which no environment variable can carry", name.get_ref()),
                ));
            }
        }
        let env = Env {
            allow: raw.env.allow.iter().map(|n| n.get_ref().clone()).collect(),
            set: raw
                .env
                .set
                .iter()
                .map(|(k, v)| (k.get_ref().clone(), v.get_ref().clone()))
                .collect(),
        };
        let r = &raw.resources;
        if r.memory_bytes < (16 << 20) {
            return Err(at(
                None,
                "resources.memory_bytes: must be at least 16 MiB".into(),
            ));
        }
        if r.pids_max < 4 {
            return Err(at(None, "resources.pids_max: must be at least 4".into()));
        }
        if r.cpu_percent == 0 {
            return Err(at(None, "resources.cpu_percent: must be at least 1".into()));
        }
        if r.wall_clock_seconds == 0 {
            return Err(at(
                None,
                "resources.wall_clock_seconds: must be at least 1".into(),
            ));
        }
        if raw.identity.uid_when_root == 0 || raw.identity.gid_when_root == 0 {
            return Err(at(
                None,
                "identity: the zone uid/gid when run as root must not be 0".into(),
            ));
        }
        let h = &raw.identity.hostname;
        if h.is_empty()
            || h.len() > 64
            || !h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(at(
                None,
                "identity.hostname: 1-64 characters of [A-Za-z0-9-]".into(),
            ));
        }
        let w = &raw.workspace;
        if w.max_depth == 0 || w.max_path_bytes == 0 || w.max_entries == 0 {
            return Err(at(
                None,
                "workspace: max_depth, max_path_bytes and max_entries must be at least 1".into(),
            ));
        }
        if w.snapshot_timeout_seconds == 0 || w.delivery_timeout_seconds == 0 {
            return Err(at(None, "workspace: snapshot_timeout_seconds and delivery_timeout_seconds must be at least 1".into()));
        }
        Ok(Policy {
            filesystem: Filesystem {
                read_only,
                read_write,
                hidden,
                protected,
                tmp_size_bytes: raw.filesystem.tmp_size_bytes,
            },
            network: raw.network,
            resources: raw.resources,
            syscalls: Syscalls { deny },
            env,
            identity: raw.identity,
            layers: Layers {
                may_skip,
                cgroup_delegation: raw.layers.cgroup_delegation,
            },
            workspace: raw.workspace,
            sha256: hex::encode(Sha256::digest(bytes)),
        })
    }

    /// Whether the policy allows the named layer to be skipped on a weaker host.
    pub fn may_skip(&self, layer: Layer) -> bool {
        self.layers.may_skip.contains(&layer)
    }

    /// The reviewer's rows: (key, effective value), in file order.
    pub fn rows(&self) -> Vec<(String, String)> {
        let paths = |v: &[PathBuf]| {
            if v.is_empty() {
                "(none)".to_string()
            } else {
                v.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let list = |v: &[String]| {
            if v.is_empty() {
                "(none)".to_string()
            } else {
                v.join(", ")
            }
        };
        let f = &self.filesystem;
        let n = &self.network;
        let r = &self.resources;
        vec![
            ("sha256".into(), self.sha256.clone()),
            ("filesystem.read_only".into(), paths(&f.read_only)),
            ("filesystem.read_write".into(), paths(&f.read_write)),
            ("filesystem.hidden".into(), paths(&f.hidden)),
            ("filesystem.protected".into(), paths(&f.protected)),
            (
                "filesystem.tmp_size_bytes".into(),
                f.tmp_size_bytes.to_string(),
            ),
            ("network.mode".into(), n.mode.as_str().into()),
            ("network.allow".into(), list(&n.allow)),
            ("network.allow_addresses".into(), list(&n.allow_addresses)),
            (
                "network.max_connections".into(),
                n.max_connections.to_string(),
            ),
            (
                "network.max_connections_per_step".into(),
                n.max_connections_per_step
                    .map_or("(none)".into(), |v| v.to_string()),
            ),
            (
                "network.max_open_connections".into(),
                n.max_open_connections.to_string(),
            ),
            ("network.max_bytes".into(), n.max_bytes.to_string()),
            (
                "network.max_bytes_per_step".into(),
                n.max_bytes_per_step
                    .map_or("(none)".into(), |v| v.to_string()),
            ),
            (
                "network.idle_timeout_seconds".into(),
                n.idle_timeout_seconds.to_string(),
            ),
            (
                "network.sni_check_ports".into(),
                n.sni_check_ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            ("network.sni_check_exempt".into(), list(&n.sni_check_exempt)),
            (
                "network.wildcard_max_labels".into(),
                n.wildcard_max_labels.to_string(),
            ),
            (
                "network.wildcard_max_label_length".into(),
                n.wildcard_max_label_length.to_string(),
            ),
            (
                "network.upstream_proxy".into(),
                if n.upstream_proxy.is_empty() {
                    "(none)".into()
                } else {
                    n.upstream_proxy.clone()
                },
            ),
            ("resources.memory_bytes".into(), r.memory_bytes.to_string()),
            ("resources.pids_max".into(), r.pids_max.to_string()),
            ("resources.cpu_percent".into(), r.cpu_percent.to_string()),
            (
                "resources.wall_clock_seconds".into(),
                r.wall_clock_seconds.to_string(),
            ),
            (
                "resources.open_files_max".into(),
                r.open_files_max.to_string(),
            ),
            (
                "resources.file_size_max_bytes".into(),
                r.file_size_max_bytes.to_string(),
            ),
            (
                "resources.core_dump_bytes".into(),
                r.core_dump_bytes.to_string(),
            ),
            (
                "resources.disk_bytes".into(),
                match r.disk_bytes {
                    None => "(none: writable layers uncapped)".into(),
                    Some(b) => format!("{b} ({})", crate::volume::mechanism()),
                },
            ),
            ("syscalls.deny (extra)".into(), list(&self.syscalls.deny)),
            ("env.allow".into(), list(&self.env.allow)),
            (
                "env.set".into(),
                if self.env.set.is_empty() {
                    "(none)".into()
                } else {
                    self.env
                        .set
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            ),
            (
                "identity.uid_when_root".into(),
                self.identity.uid_when_root.to_string(),
            ),
            (
                "identity.gid_when_root".into(),
                self.identity.gid_when_root.to_string(),
            ),
            ("identity.hostname".into(), self.identity.hostname.clone()),
            (
                "layers.may_skip".into(),
                list(
                    &self
                        .layers
                        .may_skip
                        .iter()
                        .map(|l| l.as_str().to_string())
                        .collect::<Vec<_>>(),
                ),
            ),
            (
                "layers.cgroup_delegation".into(),
                self.layers.cgroup_delegation.as_str().to_string(),
            ),
            (
                "workspace.max_depth".into(),
                self.workspace.max_depth.to_string(),
            ),
            (
                "workspace.max_path_bytes".into(),
                self.workspace.max_path_bytes.to_string(),
            ),
            (
                "workspace.max_entries".into(),
                self.workspace.max_entries.to_string(),
            ),
            (
                "workspace.max_total_bytes".into(),
                self.workspace.max_total_bytes.to_string(),
            ),
            (
                "workspace.max_file_bytes".into(),
                self.workspace.max_file_bytes.to_string(),
            ),
            (
                "workspace.snapshot_timeout_seconds".into(),
                self.workspace.snapshot_timeout_seconds.to_string(),
            ),
            (
                "workspace.delivery_timeout_seconds".into(),
                self.workspace.delivery_timeout_seconds.to_string(),
            ),
        ]
    }

    /// The effective policy as JSON (every key with its effective value, plus sha256).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Keys whose effective values differ: (key, value in self, value in other).
    pub fn diff(&self, other: &Policy) -> Vec<(String, String, String)> {
        let theirs: BTreeMap<String, String> = other.rows().into_iter().collect();
        self.rows()
            .into_iter()
            .filter(|(k, _)| k != "sha256")
            .filter_map(|(k, v)| {
                let o = theirs.get(&k).cloned().unwrap_or_default();
                (o != v).then_some((k, v, o))
            })
            .collect()
    }
}

/// 1-based line and column of a byte offset.
fn line_col(bytes: &[u8], offset: usize) -> (usize, usize) {
    let upto = &bytes[..offset.min(bytes.len())];
    let line = upto.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = upto.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, column)
}

/// A host path: absolute, normal components only (no `.`/`..`), no NUL.
pub fn check_absolute(p: &Path) -> Result<(), String> {
    let s = p.as_os_str().as_encoded_bytes();
    if s.contains(&0) {
        return Err(format!("{} contains a NUL byte", p.display()));
    }
    if !p.is_absolute() {
        return Err(format!("{} is not an absolute path", p.display()));
    }
    if s.split(|&b| b == b'/').any(|c| c == b".." || c == b".") {
        return Err(format!("{} contains `.` or `..`", p.display()));
    }
    Ok(())
}

/// A protected sub-path: relative, normal components only.
pub fn check_relative(p: &Path) -> Result<(), String> {
    let s = p.as_os_str().as_encoded_bytes();
    if s.is_empty() || s.contains(&0) {
        return Err("empty path or NUL byte".into());
    }
    if p.is_absolute() {
        return Err(format!(
            "{} must be relative to the writable root",
            p.display()
        ));
    }
    if s.split(|&b| b == b'/').any(|c| c == b".." || c == b".")
        || !p.components().all(|c| matches!(c, Component::Normal(_)))
    {
        return Err(format!("{} contains `.` or `..`", p.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> PolicyError {
        Policy::parse(text.as_bytes(), "t.toml").unwrap_err()
    }

    #[test]
    fn a_nul_byte_in_an_env_set_value_is_refused_at_its_line() {
        let e = err(
            "[env]\nallow = [\"PATH\"]\n\n[env.set]\nLANG = \"C\"\nTOKEN = \"abc\\u0000def\"\n",
        );
        assert_eq!((e.line, e.column), (6, 9), "{e}");
        assert_eq!(
            e.message,
            "env.set.TOKEN: the value holds a NUL byte, which no environment variable can carry"
        );
    }

    #[test]
    fn an_invalid_env_name_is_refused_at_its_line() {
        let e = err("[env]\nallow = [\"PATH\", \"A=B\"]\n");
        assert_eq!(
            (e.line, e.message.as_str()),
            (2, "env: invalid variable name \"A=B\""),
            "{e}"
        );
        let e = err("[env.set]\n\"\" = \"x\"\n");
        assert_eq!(
            (e.line, e.message.as_str()),
            (2, "env: invalid variable name \"\""),
            "{e}"
        );
    }

    #[test]
    fn env_set_values_without_nul_arrive_as_written() {
        let p = Policy::parse(b"[env.set]\nA = \"x y\"\nB = \"\"\n", "t").unwrap();
        assert_eq!(p.env.set.get("A").map(String::as_str), Some("x y"));
        assert_eq!(p.env.set.get("B").map(String::as_str), Some(""));
    }

    #[test]
    fn every_builtin_policy_validates() {
        for (name, _) in BUILTIN {
            assert!(Policy::builtin(name).is_some(), "{name}");
        }
    }

    #[test]
    fn empty_policy_gets_closed_defaults() {
        let p = Policy::parse(b"", "t").unwrap();
        assert_eq!(p.network.mode, NetworkMode::None);
        assert!(p.layers.may_skip.is_empty());
        assert!(p.filesystem.read_write.is_empty());
    }

    #[test]
    fn the_workspace_table_sets_limits_over_the_defaults_and_refuses_zero_and_unknown_keys() {
        let p =
            Policy::parse(b"[workspace]\nmax_depth = 40\nmax_file_bytes = 1024\n", "t").unwrap();
        assert_eq!(
            (p.workspace.max_depth, p.workspace.max_file_bytes),
            (40, 1024)
        );
        assert_eq!(
            p.workspace.max_entries,
            WorkspaceLimits::default().max_entries
        );
        assert!(err("[workspace]\nmax_depth = 0\n")
            .message
            .contains("max_depth"));
        assert!(err("[workspace]\nsnapshot_timeout_seconds = 0\n")
            .message
            .contains("snapshot_timeout_seconds"));
        assert_eq!(err("[workspace]\nmax_dept = 3\n").line, 2);
    }

    #[test]
    fn unknown_key_is_refused_with_its_line() {
        let e = err("[network]\nmode = \"none\"\nmodee = 1\n");
        assert_eq!(e.line, 3);
        assert!(e.message.contains("modee"), "{}", e.message);
    }

    #[test]
    fn relative_path_is_refused_with_its_line() {
        let e = err("[filesystem]\nread_only = [\n  \"/usr\",\n  \"etc\",\n]\n");
        assert_eq!((e.line, e.column), (4, 3));
        assert!(e.message.contains("not an absolute path"));
    }

    #[test]
    fn dotdot_is_refused() {
        let e = err("[filesystem]\nread_write = [\"/work/../etc\"]\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains(".."));
    }

    #[test]
    fn protected_must_be_relative() {
        let e = err("[filesystem]\nprotected = [\"/abs\"]\n");
        assert!(e.message.contains("relative"));
    }

    #[test]
    fn bad_type_is_refused_with_its_line() {
        let e = err("\n[resources]\npids_max = \"many\"\n");
        assert_eq!(e.line, 3);
    }

    #[test]
    fn unknown_syscall_and_unskippable_layer_are_refused() {
        assert!(err("[syscalls]\ndeny = [\"no_such_call\"]\n")
            .message
            .contains("unknown syscall"));
        assert!(err("[layers]\nmay_skip = [\"seccomp\"]\n")
            .message
            .contains("cannot be skipped"));
    }

    #[test]
    fn cgroup_delegation_defaults_to_auto_and_takes_systemd_or_inherit() {
        assert_eq!(
            Policy::parse(b"", "t").unwrap().layers.cgroup_delegation,
            CgroupDelegation::Auto
        );
        let systemd = Policy::parse(b"[layers]\ncgroup_delegation = \"systemd\"\n", "t").unwrap();
        assert_eq!(systemd.layers.cgroup_delegation, CgroupDelegation::Systemd);
        let inherit = Policy::parse(b"[layers]\ncgroup_delegation = \"inherit\"\n", "t").unwrap();
        assert_eq!(inherit.layers.cgroup_delegation, CgroupDelegation::Inherit);
    }

    #[test]
    fn an_unknown_cgroup_delegation_is_refused_with_its_line() {
        let e = err("[layers]\ncgroup_delegation = \"always\"\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("always"), "{}", e.message);
    }

    #[test]
    fn an_unknown_may_skip_layer_is_refused_with_its_line() {
        let e = err("\n[layers]\nmay_skip = [\"cgroup\", \"firewall\"]\n");
        assert_eq!(e.line, 3);
        assert!(
            e.message
                .contains("\"firewall\" is not a layer (skippable: landlock, cgroup, disk)"),
            "{}",
            e.message
        );
    }

    #[test]
    fn may_skip_holds_the_named_layers() {
        let p = Policy::parse(b"[layers]\nmay_skip = [\"landlock\", \"cgroup\"]\n", "t").unwrap();
        assert_eq!(p.layers.may_skip, vec![Layer::Landlock, Layer::Cgroup]);
        assert!(p.may_skip(Layer::Cgroup));
        assert!(!p.may_skip(Layer::Seccomp));
    }

    #[test]
    fn diff_names_changed_keys() {
        let a = Policy::parse(b"[network]\nmode = \"none\"\n", "a").unwrap();
        let b = Policy::parse(b"[network]\nmode = \"proxy\"\n", "b").unwrap();
        let d = a.diff(&b);
        assert_eq!(
            d,
            vec![(
                "network.mode".to_string(),
                "none".to_string(),
                "proxy".to_string()
            )]
        );
    }

    #[test]
    fn sha256_is_of_the_file_bytes() {
        let p = Policy::parse(b"", "t").unwrap();
        assert_eq!(p.sha256, hex::encode(Sha256::digest(b"")));
    }
}
