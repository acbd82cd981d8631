//! The proxy's decision for one destination, in a fixed order: allowlist (host and port), then
//! resolution (pins first, then the resolver; or the upstream proxy's address when chaining),
//! then the address check on every answer. The result names the exact socket addresses to connect
//! to, so the connection uses what was checked and nothing is resolved again.

use super::addr::classify;
use super::config::{EgressConfig, WildcardShape};
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
        RuleMatch::Allowed(rule) => {
            if let Some(labels) = match host {
                Host::Name(name) => rule.wildcard_labels(name),
                Host::Ip(_) => None,
            } {
                if let Err(why) = check_wildcard_shape(labels, &config.wildcard) {
                    return Err(Denial::new(
                        403,
                        "wildcard_name_refused",
                        format!(
                            "{host} matches {rule}, but {why}; a name under a wildcard is resolved only when `*` stands for at most {} labels of at most {} letters, digits or inner hyphens",
                            config.wildcard.max_labels, config.wildcard.max_label_length
                        ),
                    ));
                }
            }
            rule.to_string()
        }
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

/// Whether the labels a wildcard stands for look like a host name: few, short, letters, digits and
/// inner hyphens (no `_`, which host names never carry). Anything else would reach the resolver as
/// agent-chosen data.
fn check_wildcard_shape(labels: &str, shape: &WildcardShape) -> Result<(), String> {
    let count = labels.split('.').count();
    if count > shape.max_labels {
        return Err(format!("`*` stands for {count} labels"));
    }
    for label in labels.split('.') {
        if label.len() > shape.max_label_length {
            return Err(format!("the label `{label}` is {} bytes long", label.len()));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(format!(
                "the label `{label}` has characters host names do not use"
            ));
        }
    }
    Ok(())
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
        EgressConfig::from_parts(
            &s(allow),
            &s(addrs),
            &s(pins),
            None,
            crate::egress::config::Limits::default(),
        )
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

    /// A resolver that remembers every name it was asked for.
    #[derive(Default)]
    struct Recording(std::sync::Mutex<Vec<String>>);

    impl crate::egress::Resolver for Recording {
        fn resolve(&self, host: &str, _port: u16) -> Result<Vec<IpAddr>, String> {
            self.0.lock().unwrap().push(host.to_string());
            Ok(vec![ip("93.184.216.34")])
        }
    }

    #[test]
    fn a_wildcard_name_that_does_not_look_like_a_host_name_never_reaches_the_resolver() {
        let recording = Arc::new(Recording::default());
        let c = config(&["*.example.com"], &[], &[], FixedResolver::new())
            .with_resolver(recording.clone());
        let refused = |name: &str| decide(&c, &Host::parse(name).unwrap(), 443).unwrap_err();
        let d = refused("a.b.c.example.com");
        assert_eq!((d.status, d.reason), (403, "wildcard_name_refused"));
        assert_eq!(
            d.detail,
            "a.b.c.example.com matches *.example.com:443, but `*` stands for 3 labels; a name under a wildcard is resolved only when `*` stands for at most 2 labels of at most 32 letters, digits or inner hyphens"
        );
        let long = format!("{}.example.com", "q".repeat(33));
        assert_eq!(
            refused(&long).detail.split("; ").next().unwrap(),
            format!(
                "{long} matches *.example.com:443, but the label `{}` is 33 bytes long",
                "q".repeat(33)
            )
        );
        assert_eq!(
            refused("c2VjcmV0_key.example.com").reason,
            "wildcard_name_refused"
        );
        assert!(
            recording.0.lock().unwrap().is_empty(),
            "no refused name was resolved"
        );
        assert!(decide(&c, &Host::parse("api.eu.example.com").unwrap(), 443).is_ok());
        assert_eq!(
            *recording.0.lock().unwrap(),
            vec!["api.eu.example.com".to_string()]
        );
    }

    #[test]
    fn an_exact_entry_is_not_subject_to_the_wildcard_shape() {
        let name = format!("{}.example.com", "q".repeat(40));
        let c = config(
            &[&name],
            &[],
            &[],
            FixedResolver::new().with(&name, &[ip("93.184.216.34")]),
        );
        assert!(decide(&c, &Host::parse(&name).unwrap(), 443).is_ok());
    }

    #[test]
    fn an_unresolvable_name_is_a_502() {
        let c = config(&["api.example.com"], &[], &[], FixedResolver::new());
        let d = decide(&c, &Host::parse("api.example.com").unwrap(), 443).unwrap_err();
        assert_eq!((d.status, d.reason), (502, "resolve_failed"));
    }
}
