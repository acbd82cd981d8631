//! What every sandboxing backend (native, container) takes from a run's pinned configuration:
//! the two zone policies, read again and checked against their digests, and, when the agent
//! policy routes egress through loopexec's proxy, the proxy's setup: the allowlist (the policy's
//! `[network]` table plus the command line's additions), the run's audit log with its running
//! digest, and the cumulative totals the receipt records.

use super::{Role, ZoneError};
use crate::egress::config::{Limits, WildcardShape};
use crate::egress::{AuditDigest, AuditLog, EgressConfig, Proxy, ProxyHandle, ProxyStats};
use crate::engine::config::{EgressPins, LoopConfig};
use crate::safefs::SafeDir;
use sandbox::policy::{NetworkMode, Policy};
use std::path::Path;

/// The port of the proxy listener inside the agent zone's own network namespace.
pub const PROXY_PORT: u16 = 3128;

/// The egress audit log's name in the run directory.
pub const EGRESS_AUDIT_FILE: &str = "egress.jsonl";

/// What the egress proxy of the agent zone needs.
pub struct EgressSetup {
    pub config: EgressConfig,
    /// What the proxy has served over the run so far (recorded in every `exec_result`).
    pub totals: ProxyStats,
    /// The run directory, where the audit log is appended (bound once the run exists).
    pub audit_dir: Option<SafeDir>,
    /// The audit log's running sha256 (seeded from its bytes when the run is bound).
    pub audit_digest: AuditDigest,
}

impl EgressSetup {
    /// Bind the run directory, where the audit log is appended. A resumed run continues the same
    /// log: its bytes so far are hashed once, here.
    pub fn bind(&mut self, run_dir: &Path) -> Result<(), ZoneError> {
        let dir = SafeDir::open(run_dir).map_err(|e| ZoneError::Setup(format!("run directory: {e}")))?;
        self.audit_digest = AuditDigest::of_file(&dir, EGRESS_AUDIT_FILE).map_err(|e| ZoneError::Setup(e.to_string()))?;
        self.audit_dir = Some(dir);
        Ok(())
    }

    /// Continue a resumed run from the totals its receipt recorded last.
    pub fn resume_from(&mut self, recorded: ProxyStats) {
        self.totals = recorded;
    }

    /// Add one command's proxy statistics to the run's totals.
    pub fn record(&mut self, step: &ProxyStats) {
        let t = &mut self.totals;
        t.allowed += step.allowed;
        t.denied += step.denied;
        t.connections += step.connections;
        t.bytes_up += step.bytes_up;
        t.bytes_down += step.bytes_down;
        t.byte_cap_hits += step.byte_cap_hits;
        t.audit_errors += step.audit_errors;
    }

    /// Serve one command's proxy listener against the allowlist, auditing every decision; the
    /// proxy starts from the run's totals so far (the run's byte and connection budgets).
    pub fn serve(&self, listener: std::net::TcpListener, role: Role) -> Result<ProxyHandle, ZoneError> {
        let dir = self.audit_dir.as_ref().ok_or_else(|| ZoneError::Setup("egress audit log: no run directory bound".into()))?;
        let audit = AuditLog::open_tracked(dir, EGRESS_AUDIT_FILE, &self.audit_digest)
            .map_err(|e| ZoneError::Setup(format!("egress audit log: {e}")))?;
        Proxy::start(self.config.clone(), listener, audit, role.as_str(), &self.totals).map_err(|e| ZoneError::Setup(format!("egress proxy: {e}")))
    }
}

/// The egress configuration of a proxied zone: the policy's `[network]` table plus the command
/// line's additions (`--allow-host`, `--resolve`, `--egress-proxy`, which wins over the policy's
/// `upstream_proxy`).
pub fn egress_config(policy: &Policy, extra: &EgressPins) -> Result<EgressConfig, crate::egress::EgressError> {
    let net = &policy.network;
    let allow: Vec<String> = net.allow.iter().chain(extra.allow_hosts.iter()).cloned().collect();
    let upstream = extra.egress_proxy.as_deref().or(Some(net.upstream_proxy.as_str()));
    let limits = Limits {
        max_bytes: net.max_bytes,
        max_bytes_per_step: net.max_bytes_per_step,
        max_connections: u64::from(net.max_connections),
        max_connections_per_step: net.max_connections_per_step.map(u64::from),
        max_open_connections: net.max_open_connections as usize,
        idle_timeout: std::time::Duration::from_secs(net.idle_timeout_seconds),
    };
    let shape = WildcardShape { max_labels: net.wildcard_max_labels as usize, max_label_length: net.wildcard_max_label_length as usize };
    EgressConfig::from_parts(&allow, &net.allow_addresses, &extra.resolve, upstream, limits)?
        .with_sni_ports(&net.sni_check_ports)
        .with_sni_exempt(&net.sni_check_exempt)?
        .with_wildcard_shape(shape)
}

/// A run's pinned policies (read again and checked against their digests) and, when the agent
/// policy routes through the proxy, the egress configuration: the policy's allowlist plus the
/// command line's additions. Shared by every sandboxing backend.
pub fn pinned_policies(cfg: &LoopConfig) -> Result<(Policy, Policy, Option<EgressSetup>), ZoneError> {
    let setup = |f: crate::error::Failure| ZoneError::Setup(f.message);
    let agent_policy = cfg.agent_policy.as_ref().ok_or_else(|| ZoneError::Setup("no agent policy pinned".into()))?.load().map_err(setup)?;
    let check_policy = cfg.check_policy.as_ref().ok_or_else(|| ZoneError::Setup("no check policy pinned".into()))?.load().map_err(setup)?;
    let egress = if agent_policy.network.mode == NetworkMode::Proxy {
        let config = egress_config(&agent_policy, &cfg.egress).map_err(|e| ZoneError::Setup(format!("egress configuration: {e}")))?;
        Some(EgressSetup { config, totals: ProxyStats::default(), audit_dir: None, audit_digest: AuditDigest::default() })
    } else {
        None
    };
    Ok((agent_policy, check_policy, egress))
}


/// How long one command may run: its own timeout (`--exec-timeout` / `--check-timeout`), never
/// longer than its zone policy's `resources.wall_clock_seconds`.
pub fn command_limit(timeout: Option<std::time::Duration>, policy: &Policy) -> std::time::Duration {
    let wall = std::time::Duration::from_secs(policy.resources.wall_clock_seconds);
    timeout.map_or(wall, |t| t.min(wall))
}
