//! The proxy's configuration, built and validated from the policy's `[network]` table and the
//! command line (`--allow-host`, `--resolve`, `--egress-proxy`). Every bad entry is an error that
//! names it; nothing is silently dropped.

use super::resolve::{PinError, PinTable, ResolvePin, Resolver, SystemResolver};
use super::rule::{match_rules, AllowRule, Host, RuleError, RuleMatch};
use super::upstream::UpstreamProxy;
use crate::error::Failure;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long a client may take to send its request head.
pub const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection to a destination (or the upstream proxy) may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The port whose CONNECT tunnels are checked for SNI unless the policy names others.
pub const DEFAULT_SNI_PORT: u16 = 443;
/// Refusals of one step written as lines of their own before the rest are only counted.
pub const DEFAULT_DENIED_LINES: u64 = 256;

/// What the proxy lets a zone use: run totals (over every step of a run, resumed or not), optional
/// per-step limits, the concurrent-connection cap and the idle timeout of a relayed connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Bytes relayed (both directions, all connections) over the whole run.
    pub max_bytes: u64,
    /// Bytes relayed during one step (one command's proxy), if limited separately.
    pub max_bytes_per_step: Option<u64>,
    /// Connections made to destinations over the whole run.
    pub max_connections: u64,
    /// Connections made to destinations during one step, if limited separately.
    pub max_connections_per_step: Option<u64>,
    /// Client connections open at once.
    pub max_open_connections: usize,
    /// A relayed connection with no byte in either direction for this long is cut.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 10 << 30,
            max_bytes_per_step: None,
            max_connections: 10_000,
            max_connections_per_step: None,
            max_open_connections: 32,
            idle_timeout: Duration::from_secs(600),
        }
    }
}

/// Which names a wildcard entry (`*.domain`) lets the proxy resolve: the labels the `*` stands
/// for must look like a host name (letters, digits, inner hyphens), at most `max_labels` of them,
/// each at most `max_label_length` bytes. A name outside this shape is refused before it reaches
/// any resolver, so the operator's DNS does not carry arbitrary agent-chosen labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WildcardShape {
    pub max_labels: usize,
    pub max_label_length: usize,
}

impl Default for WildcardShape {
    fn default() -> Self {
        WildcardShape {
            max_labels: 2,
            max_label_length: 32,
        }
    }
}

/// Why the egress configuration is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    #[error(transparent)]
    Rule(#[from] RuleError),
    #[error(transparent)]
    Pin(#[from] PinError),
    #[error("allow_addresses entry `{entry}`: not an IP address (write one exact address, no port or range)")]
    Address { entry: String },
    #[error("--resolve `{entry}`: {host}:{port} is not allowed by any allow entry; add --allow-host {host}:{port}")]
    PinNotAllowed {
        entry: String,
        host: String,
        port: u16,
    },
    #[error("egress proxy `{url}`: {problem}")]
    Upstream { url: String, problem: String },
    #[error("egress limit {name} = {value}: must be at least 1")]
    Limit { name: &'static str, value: u64 },
    #[error("sni_check_exempt entry `{entry}`: no allow entry allows {entry}; list only allowed endpoints")]
    SniExemptNotAllowed { entry: String },
}

impl From<EgressError> for Failure {
    fn from(e: EgressError) -> Failure {
        Failure::usage(e.to_string()).with_hint("see docs/egress.md for the allowlist syntax")
    }
}

/// Everything the proxy decides with.
#[derive(Clone)]
pub struct EgressConfig {
    pub rules: Vec<AllowRule>,
    pub allow_addresses: Vec<IpAddr>,
    pub pins: PinTable,
    pub resolver: Arc<dyn Resolver>,
    pub upstream: Option<UpstreamProxy>,
    pub limits: Limits,
    /// Ports whose CONNECT tunnels must open with a TLS ClientHello naming the CONNECT host.
    pub sni_ports: Vec<u16>,
    /// Allow entries whose tunnels are exempt from that check.
    pub sni_exempt: Vec<AllowRule>,
    pub wildcard: WildcardShape,
    /// Refusals per step written as lines of their own; later ones are aggregated with counts.
    pub denied_lines: u64,
    pub head_timeout: Duration,
    pub connect_timeout: Duration,
}

impl std::fmt::Debug for EgressConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressConfig")
            .field("rules", &self.rules)
            .field("allow_addresses", &self.allow_addresses)
            .field("pins", &self.pins)
            .field("upstream", &self.upstream)
            .field("limits", &self.limits)
            .field("sni_exempt", &self.sni_exempt)
            .field("wildcard", &self.wildcard)
            .finish_non_exhaustive()
    }
}

impl EgressConfig {
    /// Validate and assemble a configuration. `allow` holds policy and `--allow-host` entries,
    /// `resolve_pins` the `--resolve HOST:PORT:ADDR` entries, `upstream` the `--egress-proxy` URL
    /// (an empty string counts as none, as in the policy's default). The system resolver is used.
    pub fn from_parts(
        allow: &[String],
        allow_addresses: &[String],
        resolve_pins: &[String],
        upstream: Option<&str>,
        limits: Limits,
    ) -> Result<EgressConfig, EgressError> {
        let rules = allow
            .iter()
            .map(|e| AllowRule::parse(e))
            .collect::<Result<Vec<_>, _>>()?;
        let allow_addresses = allow_addresses
            .iter()
            .map(|e| {
                let bare = e.trim().trim_start_matches('[').trim_end_matches(']');
                bare.parse::<IpAddr>()
                    .map_err(|_| EgressError::Address { entry: e.clone() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let upstream = match upstream.map(str::trim).filter(|u| !u.is_empty()) {
            Some(url) => {
                Some(
                    UpstreamProxy::parse(url).map_err(|problem| EgressError::Upstream {
                        url: url.to_string(),
                        problem,
                    })?,
                )
            }
            None => None,
        };
        let pins = resolve_pins
            .iter()
            .map(|e| ResolvePin::parse(e))
            .collect::<Result<Vec<_>, _>>()?;
        for pin in &pins {
            let is_upstream = upstream
                .as_ref()
                .is_some_and(|u| u.host == Host::Name(pin.host.clone()) && u.port == pin.port);
            let allowed = matches!(
                match_rules(&rules, &Host::Name(pin.host.clone()), pin.port),
                RuleMatch::Allowed(_)
            );
            if !allowed && !is_upstream {
                return Err(EgressError::PinNotAllowed {
                    entry: pin.source.clone(),
                    host: pin.host.clone(),
                    port: pin.port,
                });
            }
        }
        for (name, value) in [
            ("max_bytes", Some(limits.max_bytes)),
            ("max_bytes_per_step", limits.max_bytes_per_step),
            ("max_connections", Some(limits.max_connections)),
            ("max_connections_per_step", limits.max_connections_per_step),
            (
                "max_open_connections",
                Some(limits.max_open_connections as u64),
            ),
            // Only zero matters here: any other duration is a usable timeout.
            (
                "idle_timeout_seconds",
                Some(u64::from(!limits.idle_timeout.is_zero())),
            ),
        ] {
            if value == Some(0) {
                return Err(EgressError::Limit { name, value: 0 });
            }
        }
        Ok(EgressConfig {
            rules,
            allow_addresses,
            pins: PinTable::new(pins),
            resolver: Arc::new(SystemResolver),
            upstream,
            limits,
            sni_ports: vec![DEFAULT_SNI_PORT],
            sni_exempt: Vec::new(),
            wildcard: WildcardShape::default(),
            denied_lines: DEFAULT_DENIED_LINES,
            head_timeout: DEFAULT_HEAD_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        })
    }

    /// Exempt these endpoints (`host[:port]`, each one an allow entry allows) from the SNI check
    /// of CONNECT tunnels to port 443.
    pub fn with_sni_exempt(mut self, entries: &[String]) -> Result<Self, EgressError> {
        for entry in entries {
            let rule = AllowRule::parse(entry)?;
            let covered = self
                .rules
                .iter()
                .any(|allow| allow.port == rule.port && covers(allow, &rule));
            if !covered {
                return Err(EgressError::SniExemptNotAllowed {
                    entry: entry.clone(),
                });
            }
            self.sni_exempt.push(rule);
        }
        Ok(self)
    }

    /// Check the SNI of CONNECT tunnels to these ports (the policy's `sni_check_ports`).
    pub fn with_sni_ports(mut self, ports: &[u16]) -> Self {
        self.sni_ports = ports.to_vec();
        self
    }

    /// Whether a CONNECT tunnel to `host:port` must open with a ClientHello naming `host`.
    pub fn checks_sni(&self, host: &Host, port: u16) -> bool {
        self.sni_ports.contains(&port) && !self.sni_exempt.iter().any(|r| r.matches(host, port))
    }

    /// Use another wildcard name shape (the policy's `wildcard_max_labels`, `wildcard_max_label_length`).
    pub fn with_wildcard_shape(mut self, shape: WildcardShape) -> Result<Self, EgressError> {
        for (name, value) in [
            ("wildcard_max_labels", shape.max_labels),
            ("wildcard_max_label_length", shape.max_label_length),
        ] {
            if value == 0 {
                return Err(EgressError::Limit { name, value: 0 });
            }
        }
        self.wildcard = shape;
        Ok(self)
    }

    /// Write at most `lines` refusals of a step as lines of their own (then aggregate).
    pub fn with_denied_lines(mut self, lines: u64) -> Self {
        self.denied_lines = lines.max(1);
        self
    }

    /// Use another resolver (a fixed table in tests or air-gapped setups).
    pub fn with_resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = resolver;
        self
    }

    pub fn with_head_timeout(mut self, timeout: Duration) -> Self {
        self.head_timeout = timeout;
        self
    }

    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
}

/// Whether the allow entry `allow` covers everything the entry `other` names.
fn covers(allow: &AllowRule, other: &AllowRule) -> bool {
    use super::rule::HostPattern;
    match &other.pattern {
        HostPattern::Exact(name) => allow.matches_host(&Host::Name(name.clone())),
        HostPattern::Address(ip) => allow.matches_host(&Host::Ip(*ip)),
        HostPattern::Subdomains(domain) => allow.pattern == HostPattern::Subdomains(domain.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn limits(open: usize, bytes: u64) -> Limits {
        Limits {
            max_open_connections: open,
            max_bytes: bytes,
            ..Limits::default()
        }
    }

    #[test]
    fn a_valid_configuration_assembles() {
        let c = EgressConfig::from_parts(
            &strings(&["api.example.com", "*.example.org:8443"]),
            &strings(&["10.0.0.5", "[fd00::1]"]),
            &strings(&["api.example.com:443:127.0.0.1"]),
            Some(""),
            limits(4, 1000),
        )
        .unwrap();
        assert_eq!(c.rules.len(), 2);
        assert_eq!(c.allow_addresses.len(), 2);
        assert!(c.upstream.is_none());
    }

    #[test]
    fn a_bad_allow_entry_is_named() {
        let err = EgressConfig::from_parts(
            &strings(&["ok.example", "bad*.example"]),
            &[],
            &[],
            None,
            limits(1, 1),
        )
        .unwrap_err();
        assert!(err.to_string().contains("`bad*.example`"), "{err}");
    }

    #[test]
    fn a_pin_for_a_host_no_entry_allows_is_refused() {
        let err = EgressConfig::from_parts(
            &strings(&["a.example"]),
            &[],
            &strings(&["b.example:443:1.2.3.4"]),
            None,
            limits(1, 1),
        )
        .unwrap_err();
        assert!(
            matches!(err, EgressError::PinNotAllowed { ref host, port: 443, .. } if host == "b.example"),
            "{err}"
        );
    }

    #[test]
    fn a_pin_for_the_upstream_proxy_name_is_accepted() {
        let c = EgressConfig::from_parts(
            &strings(&["a.example"]),
            &[],
            &strings(&["proxy.corp:3128:10.1.1.1"]),
            Some("http://proxy.corp:3128"),
            limits(1, 1),
        );
        assert!(c.is_ok(), "{c:?}");
    }

    #[test]
    fn bad_addresses_upstreams_and_zero_limits_are_refused() {
        assert!(matches!(
            EgressConfig::from_parts(&[], &strings(&["10.0.0.0/8"]), &[], None, limits(1, 1)),
            Err(EgressError::Address { .. })
        ));
        assert!(matches!(
            EgressConfig::from_parts(&[], &[], &[], Some("https://p.example"), limits(1, 1)),
            Err(EgressError::Upstream { .. })
        ));
        assert!(matches!(
            EgressConfig::from_parts(&[], &[], &[], None, limits(0, 1)),
            Err(EgressError::Limit { .. })
        ));
        assert!(matches!(
            EgressConfig::from_parts(&[], &[], &[], None, limits(1, 0)),
            Err(EgressError::Limit { .. })
        ));
        let per_step = Limits {
            max_bytes_per_step: Some(0),
            ..Limits::default()
        };
        assert!(matches!(
            EgressConfig::from_parts(&[], &[], &[], None, per_step),
            Err(EgressError::Limit {
                name: "max_bytes_per_step",
                ..
            })
        ));
    }

    #[test]
    fn an_sni_exemption_must_name_an_allowed_endpoint() {
        let base = || {
            EgressConfig::from_parts(
                &strings(&["*.example.com", "api.example.org"]),
                &[],
                &[],
                None,
                Limits::default(),
            )
            .unwrap()
        };
        let c = base()
            .with_sni_exempt(&strings(&["legacy.example.com", "api.example.org:443"]))
            .unwrap();
        assert!(!c.checks_sni(&Host::Name("legacy.example.com".into()), 443));
        assert!(c.checks_sni(&Host::Name("other.example.com".into()), 443));
        assert!(
            !c.checks_sni(&Host::Name("other.example.com".into()), 8443),
            "only the listed ports"
        );
        let err = base()
            .with_sni_exempt(&strings(&["api.example.net"]))
            .unwrap_err();
        assert_eq!(err.to_string(), "sni_check_exempt entry `api.example.net`: no allow entry allows api.example.net; list only allowed endpoints");
    }
}
