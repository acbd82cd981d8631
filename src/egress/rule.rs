//! Egress allowlist entries: parsing and normalising `host[:port]` / `*.domain[:port]` / IP-literal
//! entries, normalising the host names that requests name, and matching one against the other.
//!
//! Normalisation (applied identically to rules and requests): one trailing dot stripped, then the
//! name is mapped and converted to its ASCII (A-label, punycode) form by the `idna` crate (UTS #46),
//! which also lowercases it. Names are compared only in that form, so `BÜCHER.example.` and
//! `xn--bcher-kva.example` are the same name while a Cyrillic homograph of `example.com` is not.

use std::fmt;
use std::net::IpAddr;

/// The port an entry allows when it names none.
pub const DEFAULT_PORT: u16 = 443;

const MAX_NAME_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;

/// A destination host after normalisation: a DNS name in A-label form, or an IP address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// Normalise a host as a request names it. `[v6]` brackets are accepted; a bare string that
    /// parses as an IP address is an IP literal.
    pub fn parse(raw: &str) -> Result<Host, String> {
        if let Some(inner) = raw.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            return inner
                .parse::<std::net::Ipv6Addr>()
                .map(|a| Host::Ip(IpAddr::V6(a)))
                .map_err(|_| format!("`{raw}` is not a valid bracketed IPv6 address"));
        }
        if let Ok(ip) = raw.parse::<IpAddr>() {
            return Ok(Host::Ip(ip));
        }
        normalise_name(raw).map(Host::Name)
    }

    /// The form used in a `host:port` authority (IPv6 bracketed).
    pub fn authority(&self, port: u16) -> String {
        match self {
            Host::Name(n) => format!("{n}:{port}"),
            Host::Ip(IpAddr::V4(a)) => format!("{a}:{port}"),
            Host::Ip(IpAddr::V6(a)) => format!("[{a}]:{port}"),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Normalise a DNS name: strip one trailing dot, IDNA-map to A-labels (lowercase), then check the
/// result is a plausible host name (labels of `a-z 0-9 - _`, lengths within DNS limits, not a
/// numeric IPv4 spelling such as `0x7f.1`).
pub fn normalise_name(raw: &str) -> Result<String, String> {
    let trimmed = raw.strip_suffix('.').unwrap_or(raw);
    if trimmed.is_empty() {
        return Err("empty host name".into());
    }
    let ascii = idna::domain_to_ascii(trimmed)
        .map_err(|_| format!("`{raw}` is not a valid internationalised domain name"))?;
    if ascii.is_empty() || ascii.len() > MAX_NAME_LEN {
        return Err(format!("`{raw}` is not a valid host name (length)"));
    }
    let labels: Vec<&str> = ascii.split('.').collect();
    for label in &labels {
        if label.is_empty() {
            return Err(format!("`{raw}` has an empty label"));
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(format!(
                "`{raw}` has a label longer than {MAX_LABEL_LEN} characters"
            ));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "`{raw}` contains characters not allowed in a host name"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("`{raw}` has a label starting or ending with `-`"));
        }
    }
    if let Some(last) = labels.last() {
        if looks_numeric(last) {
            return Err(format!(
                "`{raw}` looks like a numeric IPv4 spelling; write IP addresses in standard form"
            ));
        }
    }
    Ok(ascii)
}

/// Whether a label would make a URL parser treat the whole name as an IPv4 number (WHATWG rule).
fn looks_numeric(label: &str) -> bool {
    let hex = label
        .strip_prefix("0x")
        .or_else(|| label.strip_prefix("0X"));
    match hex {
        Some(h) => h.bytes().all(|b| b.is_ascii_hexdigit()),
        None => label.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// What hosts an entry matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this name.
    Exact(String),
    /// Any name with one or more labels below this domain (not the domain itself).
    Subdomains(String),
    /// Exactly this address, given as an IP literal.
    Address(IpAddr),
}

/// One allowlist entry, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    pub pattern: HostPattern,
    pub port: u16,
    /// The entry as the operator wrote it, for messages and the audit log.
    pub source: String,
}

/// Why an entry was refused; always names the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress allow entry `{entry}`: {problem}")]
pub struct RuleError {
    pub entry: String,
    pub problem: String,
}

impl AllowRule {
    /// Parse `host[:port]`, `*.domain[:port]`, `IPv4[:port]`, `[IPv6][:port]` or a bare IPv6 address.
    pub fn parse(entry: &str) -> Result<AllowRule, RuleError> {
        let fail = |problem: String| RuleError {
            entry: entry.to_string(),
            problem,
        };
        let text = entry.trim();
        if text.is_empty() {
            return Err(fail("empty entry".into()));
        }
        if text.contains("://") || text.contains('/') || text.contains('@') {
            return Err(fail(
                "write a host name with an optional port, not a URL".into(),
            ));
        }
        // A bare IPv6 address (no brackets, so no port).
        if let Ok(ip) = text.parse::<std::net::Ipv6Addr>() {
            return Ok(AllowRule {
                pattern: HostPattern::Address(IpAddr::V6(ip)),
                port: DEFAULT_PORT,
                source: entry.to_string(),
            });
        }
        let (host_part, port) = split_host_port(text).map_err(fail)?;
        if let Some(inner) = host_part.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| fail("unclosed `[`".into()))?;
            let ip: std::net::Ipv6Addr = inner
                .parse()
                .map_err(|_| fail(format!("`{inner}` is not an IPv6 address")))?;
            return Ok(AllowRule {
                pattern: HostPattern::Address(IpAddr::V6(ip)),
                port,
                source: entry.to_string(),
            });
        }
        if let Ok(ip) = host_part.parse::<std::net::Ipv4Addr>() {
            return Ok(AllowRule {
                pattern: HostPattern::Address(IpAddr::V4(ip)),
                port,
                source: entry.to_string(),
            });
        }
        let pattern = if let Some(domain) = host_part.strip_prefix("*.") {
            if domain.contains('*') {
                return Err(fail(
                    "`*` is allowed only as the whole leftmost label".into(),
                ));
            }
            if domain.parse::<IpAddr>().is_ok() {
                return Err(fail(
                    "a wildcard cannot cover IP addresses; list each address".into(),
                ));
            }
            let domain = normalise_name(domain).map_err(fail)?;
            if !domain.contains('.') {
                return Err(fail(format!(
                    "`*.{domain}` would allow a whole top-level domain; name a registrable domain"
                )));
            }
            HostPattern::Subdomains(domain)
        } else {
            if host_part.contains('*') {
                return Err(fail(
                    "`*` is allowed only as the whole leftmost label, as in `*.example.com`".into(),
                ));
            }
            HostPattern::Exact(normalise_name(host_part).map_err(fail)?)
        };
        Ok(AllowRule {
            pattern,
            port,
            source: entry.to_string(),
        })
    }

    /// Whether this entry's host part covers `host` (ignoring the port).
    pub fn matches_host(&self, host: &Host) -> bool {
        match (&self.pattern, host) {
            (HostPattern::Exact(rule), Host::Name(name)) => rule == name,
            (HostPattern::Subdomains(_), Host::Name(name)) => self.wildcard_labels(name).is_some(),
            (HostPattern::Address(rule), Host::Ip(ip)) => rule == ip,
            _ => false,
        }
    }

    /// For a wildcard entry (`*.domain`), the labels the `*` stands for in `name` (`a.b` of
    /// `a.b.domain`); None for every other entry or a name it does not cover.
    pub fn wildcard_labels<'a>(&self, name: &'a str) -> Option<&'a str> {
        match &self.pattern {
            HostPattern::Subdomains(domain) => name
                .strip_suffix(domain.as_str())
                .and_then(|prefix| prefix.strip_suffix('.'))
                .filter(|labels| !labels.is_empty()),
            _ => None,
        }
    }

    /// Whether this entry allows `host` on `port`.
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        self.port == port && self.matches_host(host)
    }
}

impl fmt::Display for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            HostPattern::Exact(n) => write!(f, "{n}:{}", self.port),
            HostPattern::Subdomains(d) => write!(f, "*.{d}:{}", self.port),
            HostPattern::Address(ip) => write!(f, "{}", Host::Ip(*ip).authority(self.port)),
        }
    }
}

/// Split `host[:port]` (host possibly `[v6]`), defaulting the port to 443.
fn split_host_port(text: &str) -> Result<(&str, u16), String> {
    let (host, port) = if text.starts_with('[') {
        match text.find(']') {
            Some(end) => match &text[end + 1..] {
                "" => (&text[..=end], None),
                rest => match rest.strip_prefix(':') {
                    Some(p) => (&text[..=end], Some(p)),
                    None => return Err("unexpected text after `]`".into()),
                },
            },
            None => return Err("unclosed `[`".into()),
        }
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err("missing host".into());
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => parse_port(p)?,
    };
    Ok((host, port))
}

/// Parse a decimal TCP port 1..=65535.
pub fn parse_port(text: &str) -> Result<u16, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("port `{text}` is not a number"));
    }
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("port `{text}` is out of range 1-65535")),
        Ok(p) => Ok(p),
    }
}

/// The outcome of matching a destination against the whole allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleMatch<'a> {
    Allowed(&'a AllowRule),
    /// Some entry names the host, but none on this port; carries the ports that are allowed.
    WrongPort(Vec<u16>),
    NoRule,
}

/// Match `host:port` against `rules`, first allowing entry wins.
pub fn match_rules<'a>(rules: &'a [AllowRule], host: &Host, port: u16) -> RuleMatch<'a> {
    if let Some(rule) = rules.iter().find(|r| r.matches(host, port)) {
        return RuleMatch::Allowed(rule);
    }
    let mut ports: Vec<u16> = rules
        .iter()
        .filter(|r| r.matches_host(host))
        .map(|r| r.port)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    if ports.is_empty() {
        RuleMatch::NoRule
    } else {
        RuleMatch::WrongPort(ports)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    #[test]
    fn an_entry_without_port_allows_443_only() {
        let rule = AllowRule::parse("api.example.com").unwrap();
        assert_eq!(rule.pattern, HostPattern::Exact("api.example.com".into()));
        assert_eq!(rule.port, 443);
        assert!(rule.matches(&name("api.example.com"), 443));
        assert!(!rule.matches(&name("api.example.com"), 80));
    }

    #[test]
    fn an_entry_is_lowercased_and_loses_one_trailing_dot() {
        let rule = AllowRule::parse("API.Example.COM.:8443").unwrap();
        assert_eq!(rule.pattern, HostPattern::Exact("api.example.com".into()));
        assert_eq!(rule.port, 8443);
    }

    #[test]
    fn an_unicode_entry_is_stored_as_punycode_and_matches_its_a_label_form() {
        let rule = AllowRule::parse("bücher.example").unwrap();
        assert_eq!(
            rule.pattern,
            HostPattern::Exact("xn--bcher-kva.example".into())
        );
        assert!(rule.matches(&name("xn--bcher-kva.example"), 443));
        assert!(rule.matches(&name("BÜCHER.example."), 443));
    }

    #[test]
    fn a_cyrillic_homograph_does_not_match_the_latin_name() {
        let rule = AllowRule::parse("example.com").unwrap();
        let homograph = name("\u{0435}xample.com"); // Cyrillic small ie
        assert_eq!(homograph, Host::Name("xn--xample-2of.com".into()));
        assert!(!rule.matches(&homograph, 443));
    }

    #[test]
    fn a_wildcard_matches_one_or_more_labels_below_the_domain() {
        let rule = AllowRule::parse("*.example.com").unwrap();
        assert!(rule.matches(&name("a.example.com"), 443));
        assert!(rule.matches(&name("a.b.example.com"), 443));
    }

    #[test]
    fn a_wildcard_does_not_match_the_bare_domain_nor_a_look_alike() {
        let rule = AllowRule::parse("*.example.com").unwrap();
        assert!(!rule.matches(&name("example.com"), 443));
        assert!(!rule.matches(&name("evil-example.com"), 443));
        assert!(!rule.matches(&name("example.com.evil.net"), 443));
        assert!(!rule.matches(&name("aexample.com"), 443));
    }

    #[test]
    fn star_is_refused_anywhere_but_as_the_whole_leftmost_label() {
        for entry in [
            "a*.example.com",
            "*.*.example.com",
            "api.*.com",
            "*",
            "*example.com",
            "*.com",
        ] {
            let err = AllowRule::parse(entry).unwrap_err();
            assert_eq!(err.entry, entry);
        }
    }

    #[test]
    fn ip_literal_entries_match_only_that_exact_address() {
        let rule = AllowRule::parse("203.0.113.7:8080").unwrap();
        assert_eq!(
            rule.pattern,
            HostPattern::Address("203.0.113.7".parse().unwrap())
        );
        assert!(rule.matches(&name("203.0.113.7"), 8080));
        assert!(!rule.matches(&name("[::ffff:203.0.113.7]"), 8080));
        let v6 = AllowRule::parse("[2001:db8::1]:443").unwrap();
        assert!(v6.matches(&name("[2001:db8::1]"), 443));
        let bare = AllowRule::parse("2001:db8::2").unwrap();
        assert_eq!(bare.port, 443);
    }

    #[test]
    fn a_name_never_matches_an_address_rule_and_vice_versa() {
        let rule = AllowRule::parse("127.0.0.1").unwrap();
        assert!(!rule.matches(&name("localhost"), 443));
        let rule = AllowRule::parse("localhost").unwrap();
        assert!(!rule.matches(&name("127.0.0.1"), 443));
    }

    #[test]
    fn parse_errors_name_the_entry() {
        let cases = [
            ("https://api.example.com", "not a URL"),
            ("api.example.com:0", "out of range"),
            ("api.example.com:99999", "out of range"),
            ("api.example.com:https", "not a number"),
            ("a..b", "empty label"),
            ("bad_host!.com", "not allowed"),
            ("0x7f.1", "numeric IPv4"),
            ("", "empty"),
        ];
        for (entry, fragment) in cases {
            let err = AllowRule::parse(entry).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(&format!("`{entry}`")), "{text}");
            assert!(text.contains(fragment), "{entry}: {text}");
        }
    }

    #[test]
    fn matching_reports_a_wrong_port_separately_from_no_rule() {
        let rules = vec![
            AllowRule::parse("api.example.com").unwrap(),
            AllowRule::parse("api.example.com:8443").unwrap(),
        ];
        assert_eq!(
            match_rules(&rules, &name("api.example.com"), 80),
            RuleMatch::WrongPort(vec![443, 8443])
        );
        assert_eq!(
            match_rules(&rules, &name("other.example.com"), 443),
            RuleMatch::NoRule
        );
        assert!(
            matches!(match_rules(&rules, &name("api.example.com"), 8443), RuleMatch::Allowed(r) if r.port == 8443)
        );
    }
}
