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
    pub max_connections: usize,
    pub max_bytes: u64,
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
            .field("max_connections", &self.max_connections)
            .field("max_bytes", &self.max_bytes)
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
        max_connections: usize,
        max_bytes: u64,
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
        if max_connections == 0 {
            return Err(EgressError::Limit {
                name: "max_connections",
                value: 0,
            });
        }
        if max_bytes == 0 {
            return Err(EgressError::Limit {
                name: "max_bytes",
                value: 0,
            });
        }
        Ok(EgressConfig {
            rules,
            allow_addresses,
            pins: PinTable::new(pins),
            resolver: Arc::new(SystemResolver),
            upstream,
            max_connections,
            max_bytes,
            head_timeout: DEFAULT_HEAD_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_valid_configuration_assembles() {
        let c = EgressConfig::from_parts(
            &strings(&["api.example.com", "*.example.org:8443"]),
            &strings(&["10.0.0.5", "[fd00::1]"]),
            &strings(&["api.example.com:443:127.0.0.1"]),
            Some(""),
            4,
            1000,
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
            1,
            1,
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
            1,
            1,
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
            1,
            1,
        );
        assert!(c.is_ok(), "{c:?}");
    }

    #[test]
    fn bad_addresses_upstreams_and_zero_limits_are_refused() {
        assert!(matches!(
            EgressConfig::from_parts(&[], &strings(&["10.0.0.0/8"]), &[], None, 1, 1),
            Err(EgressError::Address { .. })
        ));
        assert!(matches!(
            EgressConfig::from_parts(&[], &[], &[], Some("https://p.example"), 1, 1),
            Err(EgressError::Upstream { .. })
        ));
        assert!(matches!(
            EgressConfig::from_parts(&[], &[], &[], None, 0, 1),
            Err(EgressError::Limit { .. })
        ));
        assert!(matches!(
            EgressConfig::from_parts(&[], &[], &[], None, 1, 0),
            Err(EgressError::Limit { .. })
        ));
    }
}
