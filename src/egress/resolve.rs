//! Name resolution for the proxy: the `Resolver` trait, the system resolver, a fixed table (for
//! tests and air-gapped setups), and the operator's pinned entries from `--resolve HOST:PORT:ADDR`.
//!
//! The proxy resolves every name itself, checks the answers, and then connects to exactly the
//! addresses it checked; it never hands a name to the OS a second time.

use super::rule::{normalise_name, parse_port};
use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};

/// A source of addresses for a (normalised, A-label) host name.
pub trait Resolver: Send + Sync {
    fn resolve(&self, host: &str, port: u16) -> Result<Vec<IpAddr>, String>;
}

/// The host's resolver (getaddrinfo through `std::net::ToSocketAddrs`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> Result<Vec<IpAddr>, String> {
        let addrs = (host, port).to_socket_addrs().map_err(|e| e.to_string())?;
        let mut ips: Vec<IpAddr> = Vec::new();
        for a in addrs {
            if !ips.contains(&a.ip()) {
                ips.push(a.ip());
            }
        }
        if ips.is_empty() {
            return Err("no addresses".into());
        }
        Ok(ips)
    }
}

/// A fixed name -> addresses table; names not in it do not resolve.
#[derive(Debug, Default, Clone)]
pub struct FixedResolver {
    table: HashMap<String, Vec<IpAddr>>,
}

impl FixedResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add (or replace) an entry; the name is normalised like any other host name.
    pub fn with(mut self, host: &str, addrs: &[IpAddr]) -> Self {
        let key = normalise_name(host).unwrap_or_else(|_| host.to_ascii_lowercase());
        self.table.insert(key, addrs.to_vec());
        self
    }
}

impl Resolver for FixedResolver {
    fn resolve(&self, host: &str, _port: u16) -> Result<Vec<IpAddr>, String> {
        self.table
            .get(host)
            .cloned()
            .ok_or_else(|| "name not found in the fixed table".to_string())
    }
}

/// One `--resolve HOST:PORT:ADDR[,ADDR...]` entry (curl syntax).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvePin {
    pub host: String,
    pub port: u16,
    pub addrs: Vec<IpAddr>,
    pub source: String,
}

/// Why a `--resolve` entry was refused; names the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--resolve `{entry}`: {problem}")]
pub struct PinError {
    pub entry: String,
    pub problem: String,
}

impl ResolvePin {
    /// Parse `HOST:PORT:ADDR[,ADDR...]`; IPv6 addresses may be bracketed (`[::1]`) or bare.
    pub fn parse(entry: &str) -> Result<ResolvePin, PinError> {
        let fail = |problem: String| PinError {
            entry: entry.to_string(),
            problem,
        };
        let mut parts = entry.splitn(3, ':');
        let (host, port, addrs) = match (parts.next(), parts.next(), parts.next()) {
            (Some(h), Some(p), Some(a)) if !h.is_empty() && !a.is_empty() => (h, p, a),
            _ => return Err(fail("expected HOST:PORT:ADDR".into())),
        };
        if host.starts_with('[') || host.parse::<IpAddr>().is_ok() {
            return Err(fail(
                "HOST must be a name; IP literals need no resolution".into(),
            ));
        }
        let host = normalise_name(host).map_err(fail)?;
        let port = parse_port(port).map_err(fail)?;
        let mut list = Vec::new();
        for raw in addrs.split(',') {
            let bare = raw
                .strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .unwrap_or(raw);
            let ip: IpAddr = bare
                .parse()
                .map_err(|_| fail(format!("`{raw}` is not an IP address")))?;
            list.push(ip);
        }
        Ok(ResolvePin {
            host,
            port,
            addrs: list,
            source: entry.to_string(),
        })
    }
}

/// The operator's pins, looked up before any resolver.
#[derive(Debug, Default, Clone)]
pub struct PinTable {
    pins: Vec<ResolvePin>,
}

impl PinTable {
    pub fn new(pins: Vec<ResolvePin>) -> Self {
        PinTable { pins }
    }

    pub fn lookup(&self, host: &str, port: u16) -> Option<&ResolvePin> {
        self.pins.iter().find(|p| p.host == host && p.port == port)
    }

    pub fn pins(&self) -> &[ResolvePin] {
        &self.pins
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_parses_curl_syntax_and_normalises_the_host() {
        let pin = ResolvePin::parse("API.Example.com.:443:127.0.0.1").unwrap();
        assert_eq!(pin.host, "api.example.com");
        assert_eq!(pin.port, 443);
        assert_eq!(pin.addrs, vec!["127.0.0.1".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn a_pin_accepts_several_addresses_and_ipv6_forms() {
        let pin = ResolvePin::parse("h.example:8443:[::1],10.0.0.2,2001:db8::5").unwrap();
        assert_eq!(
            pin.addrs,
            vec![
                "::1".parse::<IpAddr>().unwrap(),
                "10.0.0.2".parse().unwrap(),
                "2001:db8::5".parse().unwrap()
            ]
        );
    }

    #[test]
    fn malformed_pins_name_the_entry() {
        for (entry, fragment) in [
            ("api.example.com:443", "HOST:PORT:ADDR"),
            ("api.example.com:x:1.2.3.4", "not a number"),
            ("api.example.com:443:nope", "not an IP address"),
            ("1.2.3.4:443:5.6.7.8", "must be a name"),
        ] {
            let err = ResolvePin::parse(entry).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(entry) && text.contains(fragment), "{text}");
        }
    }

    #[test]
    fn the_fixed_table_answers_only_its_names() {
        let r = FixedResolver::new().with("A.example", &["192.0.2.1".parse().unwrap()]);
        assert_eq!(
            r.resolve("a.example", 443).unwrap(),
            vec!["192.0.2.1".parse::<IpAddr>().unwrap()]
        );
        assert!(r.resolve("b.example", 443).is_err());
    }
}
