//! What every sandboxing backend (native, container) shares about egress and limits: when a
//! policy routes egress through loopexec's proxy, the proxy's setup (the allowlist, the run's
//! audit log with its running digest, the cumulative totals the receipt records), and how long a
//! command may run under its policy.

use super::{EgressUsage, Role, ZoneError};
use crate::egress::config::{Limits, WildcardShape};
use crate::egress::{AuditDigest, AuditLog, EgressConfig, Proxy, ProxyHandle, ProxyStats};
use crate::safefs::SafeDir;
use sandbox::policy::Policy;
use std::path::Path;

/// The port of the proxy listener inside the agent zone's own network namespace.
pub const PROXY_PORT: u16 = 3128;

/// The egress audit log's name in the run directory.
pub const EGRESS_AUDIT_FILE: &str = "egress.jsonl";

/// What the egress proxy of the agent zone needs.
pub struct EgressSetup {
    pub config: EgressConfig,
    /// Roles served with a configuration of their own instead of `config` (the judge).
    pub role_configs: std::collections::BTreeMap<Role, EgressConfig>,
    /// What the proxy has served over the run so far (recorded in every `exec_result`).
    pub totals: ProxyStats,
    /// The run directory, where the audit log is appended (bound once the run exists).
    pub audit_dir: Option<SafeDir>,
    /// The audit log's running sha256 (seeded from its bytes when the run is bound).
    pub audit_digest: AuditDigest,
}

impl EgressSetup {
    /// The proxy of a run, before its run directory is bound, continuing from the run's totals so
    /// far (zero for a new run; what the receipt recorded last for a resumed one, so the run's
    /// byte and connection budgets carry over).
    pub fn new(config: EgressConfig, totals: ProxyStats) -> EgressSetup {
        EgressSetup {
            config,
            role_configs: Default::default(),
            totals,
            audit_dir: None,
            audit_digest: AuditDigest::default(),
        }
    }

    /// Serve these roles with their own configuration.
    pub fn with_role_configs(
        mut self,
        role_configs: std::collections::BTreeMap<Role, EgressConfig>,
    ) -> EgressSetup {
        self.role_configs = role_configs;
        self
    }

    /// Bind the run directory, where the audit log is appended. A resumed run continues the same
    /// log: its bytes so far are hashed once, here.
    pub fn bind(&mut self, run_dir: &Path) -> Result<(), ZoneError> {
        let dir = SafeDir::open(run_dir)
            .map_err(|e| ZoneError::io("run directory", std::io::Error::other(e)))?;
        self.audit_digest = AuditDigest::of_file(&dir, EGRESS_AUDIT_FILE)
            .map_err(|e| ZoneError::io("egress audit log", std::io::Error::other(e)))?;
        self.audit_dir = Some(dir);
        Ok(())
    }

    /// Add one command's proxy statistics to the run's totals; the command's egress usage.
    pub fn record(&mut self, step: ProxyStats) -> EgressUsage {
        self.totals.add(&step);
        EgressUsage {
            command: step,
            run_totals: self.totals.clone(),
            audit_sha256: self.audit_digest.sha256_hex(),
        }
    }

    /// The egress account of one command of a proxied zone: what its proxy served (nothing when
    /// the command never started, so no proxy ran).
    pub fn account(&mut self, proxy: Option<ProxyHandle>) -> EgressUsage {
        self.record(proxy.map(ProxyHandle::stop).unwrap_or_default())
    }

    /// Serve one command's proxy listener against the allowlist, auditing every decision; the
    /// proxy starts from the run's totals so far (the run's byte and connection budgets).
    pub fn serve(
        &self,
        listener: std::net::TcpListener,
        role: Role,
    ) -> Result<ProxyHandle, ZoneError> {
        let dir = self
            .audit_dir
            .as_ref()
            .ok_or_else(|| ZoneError::Spec("egress audit log: no run directory bound".into()))?;
        let audit = AuditLog::open_tracked(dir, EGRESS_AUDIT_FILE, &self.audit_digest)
            .map_err(|e| ZoneError::io("egress audit log", std::io::Error::other(e)))?;
        let config = self.role_configs.get(&role).unwrap_or(&self.config);
        Proxy::start(config.clone(), listener, audit, role.as_str(), &self.totals)
            .map_err(|e| ZoneError::io("egress proxy", e))
    }
}

/// The egress account of one command whose zone has `policy`: `Some` when the policy routes
/// through the run's proxy (what `proxy` served; nothing when the command never started).
pub fn egress_usage(
    egress: &mut Option<EgressSetup>,
    policy: Option<&Policy>,
    proxy: Option<ProxyHandle>,
) -> Option<EgressUsage> {
    let proxied = policy.is_some_and(|p| p.network.mode == sandbox::policy::NetworkMode::Proxy);
    egress
        .as_mut()
        .filter(|_| proxied)
        .map(|egress| egress.account(proxy))
}

/// The egress configuration of a proxied zone: the policy's `[network]` table plus the command
/// line's additions (`--allow-host`, `--resolve`, `--egress-proxy`, which wins over the policy's
/// `upstream_proxy`).
pub fn egress_config(
    policy: &Policy,
    allow_hosts: &[String],
    resolve: &[String],
    egress_proxy: Option<&str>,
) -> Result<EgressConfig, crate::egress::EgressError> {
    let net = &policy.network;
    let allow: Vec<String> = net
        .allow
        .iter()
        .chain(allow_hosts.iter())
        .cloned()
        .collect();
    let upstream = egress_proxy.or(Some(net.upstream_proxy.as_str()));
    let limits = Limits {
        max_bytes: net.max_bytes,
        max_bytes_per_step: net.max_bytes_per_step,
        max_connections: u64::from(net.max_connections),
        max_connections_per_step: net.max_connections_per_step.map(u64::from),
        max_open_connections: net.max_open_connections as usize,
        idle_timeout: std::time::Duration::from_secs(net.idle_timeout_seconds),
    };
    let shape = WildcardShape {
        max_labels: net.wildcard_max_labels as usize,
        max_label_length: net.wildcard_max_label_length as usize,
    };
    EgressConfig::from_parts(&allow, &net.allow_addresses, resolve, upstream, limits)?
        .with_sni_ports(&net.sni_check_ports)
        .with_sni_exempt(&net.sni_check_exempt)?
        .with_wildcard_shape(shape)
}

/// How long one command may run: its own timeout (`--exec-timeout` / `--check-timeout`), never
/// longer than its zone policy's `resources.wall_clock_seconds`.
pub fn command_limit(timeout: Option<std::time::Duration>, policy: &Policy) -> std::time::Duration {
    let wall = std::time::Duration::from_secs(policy.resources.wall_clock_seconds);
    timeout.map_or(wall, |t| t.min(wall))
}
