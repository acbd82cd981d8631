//! What protections a zone actually got ([`AppliedReport`]): one row per layer, applied or
//! skipped with the policy's permission, and what the zone was given (cgroup, ids, listener,
//! placeholders).

use crate::error::Layer;
use crate::policy::NetworkMode;
use crate::preflight::{self, Missing};
use serde::Serialize;
use std::path::PathBuf;

/// One layer and whether it was applied.
#[derive(Debug, Clone, Serialize)]
pub struct LayerStatus {
    pub layer: Layer,
    pub applied: bool,
    pub detail: String,
}

/// What protections the zone actually got.
#[derive(Debug, Clone, Serialize)]
pub struct AppliedReport {
    pub policy_sha256: String,
    pub layers: Vec<LayerStatus>,
    /// Layers skipped with the policy's permission (`layers.may_skip`).
    pub skipped: Vec<Missing>,
    pub landlock_abi: u32,
    pub cgroup: Vec<PathBuf>,
    pub zone_uid: u32,
    pub zone_gid: u32,
    pub network_mode: &'static str,
    pub listener_port: Option<u16>,
    /// Placeholders created for protected paths that did not exist (removed at teardown).
    pub placeholders: Vec<PathBuf>,
    /// What the kernel applied, read back from inside the zone (`evidence.rs`); None until the
    /// zone reported `Ready`, or when its command sent none.
    pub enforcement: Option<crate::evidence::Enforcement>,
    /// A self-test zone's probe outcomes (`self_test.rs`).
    pub self_test: Option<Vec<crate::self_test::ProbeOutcome>>,
}

pub(crate) fn layer_table(
    host: &preflight::HostReport,
    skipped: &[Missing],
    mode: NetworkMode,
    disk_bytes: Option<u64>,
) -> Vec<LayerStatus> {
    let skip = |l: Layer| skipped.iter().any(|m| m.layer == l);
    let s = |layer, detail: String| LayerStatus {
        layer,
        applied: !skip(layer),
        detail: if skip(layer) {
            "skipped (policy layers.may_skip)".into()
        } else {
            detail
        },
    };
    let mut rows = vec![
        s(
            Layer::UserNamespace,
            "own uid/gid mapped, setgroups denied".into(),
        ),
        s(
            Layer::MountNamespace,
            "fresh root, pivot_root, old root detached".into(),
        ),
        s(Layer::PidNamespace, "own pid 1 reaper".into()),
        s(
            Layer::NetNamespace,
            format!("loopback only (mode {})", mode.as_str()),
        ),
        s(Layer::IpcUtsNamespaces, "own ipc and uts".into()),
        s(Layer::Landlock, format!("ABI {}", host.landlock_abi)),
        s(Layer::Seccomp, "deny list, foreign ABIs killed".into()),
        s(Layer::NoNewPrivs, "set".into()),
        s(Layer::Capabilities, "all sets empty".into()),
        s(
            Layer::Cgroup,
            format!("cgroup v{}", host.cgroup.version.unwrap_or(0)),
        ),
        s(Layer::Rlimits, "nofile, fsize, core".into()),
    ];
    // Only for a policy that sets the cap: a zone without one reports what it always did.
    if let Some(bytes) = disk_bytes {
        rows.push(s(
            Layer::Disk,
            format!(
                "writable overlay layers capped at {bytes} bytes ({})",
                crate::volume::mechanism()
            ),
        ));
    }
    rows
}
