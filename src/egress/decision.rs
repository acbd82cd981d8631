//! The proxy's decision for one destination, in a fixed order: allowlist (host and port), then
//! resolution (pins first, then the resolver; or the upstream proxy's address when chaining),
//! then the address check on every answer. The result names the exact socket addresses to connect
//! to, so the connection uses what was checked and nothing is resolved again.

use super::addr::classify;
use super::config::EgressConfig;
use super::rule::{match_rules, Host, RuleMatch};
use std::net::{IpAddr, SocketAddr};

/// Allowed: which entry allowed it and where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permit {
    /// The allowing entry, normalised (`host:port`).
    pub rule: String,
    /// Checked addresses to try in order (the destination's, or the upstream proxy's).
    pub addrs: Vec<SocketAddr>,
    /// The upstream proxy the tunnel goes through, if chaining.
    pub via: Option<String>,
}

/// Refused: the HTTP status to answer, a stable reason code and a human detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub status: u16,
    pub reason: &'static str,
    pub detail: String,
    /// The refused address, when the address check refused.
    pub address: Option<String>,
}

impl Denial {
    pub fn new(status: u16, reason: &'static str, detail: impl Into<String>) -> Self {
        Denial {
            status,
            reason,
            detail: detail.into(),
            address: None,
        }
    }
}

/// Decide whether `host:port` may be reached.
pub fn decide(config: &EgressConfig, host: &Host, port: u16) -> Result<Permit, Denial> {
    let rule = match match_rules(&config.rules, host, port) {
        RuleMatch::Allowed(rule) => rule.to_string(),
        RuleMatch::WrongPort(ports) => {
            let list: Vec<String> = ports.iter().map(u16::to_string).collect();
            return Err(Denial::new(
                403,
                "port_not_allowed",
                format!("{} is allowed only on port {}", host, list.join(", ")),
            ));
        }
        RuleMatch::NoRule => {
            return Err(match host {
                Host::Ip(_) => Denial::new(
                    403,
                    "ip_literal_not_listed",
                    format!("{} is an IP literal no entry lists", host.authority(port)),
                ),
                Host::Name(_) => Denial::new(
                    403,
                    "no_matching_rule",
                    format!("no allow entry matches {}", host.authority(port)),
                ),
            })
        }
    };
    let (target_host, target_port, via) = match &config.upstream {
        Some(up) => (&up.host, up.port, Some(up.display.clone())),
        None => (host, port, None),
    };
    let (ips, pinned) = resolve(config, target_host, target_port)?;
    for ip in &ips {
        let explicitly_allowed = pinned || config.allow_addresses.contains(ip);
        let class = classify(*ip);
        if !explicitly_allowed && !class.is_public() {
            let what = if via.is_some() {
                "the upstream proxy"
            } else {
                "the destination"
            };
            let address = SocketAddr::new(*ip, target_port).to_string();
            return Err(Denial {
                status: 403,
                reason: "address_refused",
                detail: format!(
                    "{what} {} resolves to {address}, a {class} address; list it in allow_addresses or pin it with --resolve",
                    target_host
                ),
                address: Some(address),
            });
        }
    }
    Ok(Permit {
        rule,
        addrs: ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, target_port))
            .collect(),
        via,
    })
}

/// Addresses for a host, and whether they came from an operator's pin.
fn resolve(config: &EgressConfig, host: &Host, port: u16) -> Result<(Vec<IpAddr>, bool), Denial> {
    match host {
        Host::Ip(ip) => Ok((vec![*ip], false)),
        Host::Name(name) => {
            if let Some(pin) = config.pins.lookup(name, port) {
                return Ok((pin.addrs.clone(), true));
            }
            match config.resolver.resolve(name, port) {
                Ok(ips) if !ips.is_empty() => Ok((ips, false)),
                Ok(_) => Err(Denial::new(
                    502,
                    "resolve_failed",
                    format!("{name}: no addresses"),
                )),
                Err(e) => Err(Denial::new(502, "resolve_failed", format!("{name}: {e}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::resolve::FixedResolver;
    use std::sync::Arc;

    fn config(allow: &[&str], addrs: &[&str], pins: &[&str], table: FixedResolver) -> EgressConfig {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        EgressConfig::from_parts(&s(allow), &s(addrs), &s(pins), None, 4, 1 << 20)
            .unwrap()
            .with_resolver(Arc::new(table))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_allowed_name_with_a_public_address_is_permitted_on_that_address() {
        let c = config(
            &["api.example.com"],
            &[],
            &[],
            FixedResolver::new().with("api.example.com", &[ip("93.184.216.34")]),
        );
        let p = decide(&c, &Host::parse("api.example.com").unwrap(), 443).unwrap();
        assert_eq!(p.rule, "api.example.com:443");
        assert_eq!(p.addrs, vec!["93.184.216.34:443".parse().unwrap()]);
    }

    #[test]
    fn a_private_answer_is_refused_even_when_mixed_with_a_public_one() {
        let c = config(
            &["api.example.com"],
            &[],
            &[],
            FixedResolver::new().with("api.example.com", &[ip("93.184.216.34"), ip("10.0.0.1")]),
        );
        let d = decide(&c, &Host::parse("api.example.com").unwrap(), 443).unwrap_err();
        assert_eq!(
            (d.status, d.reason, d.address.as_deref()),
            (403, "address_refused", Some("10.0.0.1:443"))
        );
    }

    #[test]
    fn allow_addresses_admits_exactly_the_listed_address() {
        let table = FixedResolver::new().with("db.example.com", &[ip("10.0.0.7")]);
        let c = config(&["db.example.com:5432"], &["10.0.0.7"], &[], table.clone());
        assert!(decide(&c, &Host::parse("db.example.com").unwrap(), 5432).is_ok());
        let c = config(&["db.example.com:5432"], &["10.0.0.8"], &[], table);
        assert!(decide(&c, &Host::parse("db.example.com").unwrap(), 5432).is_err());
    }

    #[test]
    fn a_pin_replaces_resolution_and_is_trusted() {
        let c = config(
            &["api.example.com"],
            &[],
            &["api.example.com:443:127.0.0.1"],
            FixedResolver::new(),
        );
        let p = decide(&c, &Host::parse("api.example.com").unwrap(), 443).unwrap();
        assert_eq!(p.addrs, vec!["127.0.0.1:443".parse().unwrap()]);
    }

    #[test]
    fn an_unresolvable_name_is_a_502() {
        let c = config(&["api.example.com"], &[], &[], FixedResolver::new());
        let d = decide(&c, &Host::parse("api.example.com").unwrap(), 443).unwrap_err();
        assert_eq!((d.status, d.reason), (502, "resolve_failed"));
    }
}
