//! The zone's attempts to reach beyond its network namespace, counted by the kernel.
//!
//! A zone's network namespace has only loopback and no route. Every attempt to send to an
//! address outside it (a TCP or UDP connect, a datagram, a DNS query to the host's resolver, a
//! ping, through any API of any language) fails with ENETUNREACH and the kernel counts it in that
//! namespace's SNMP counters: `Ip: OutNoRoutes` (/proc/net/snmp) and `Ip6OutNoRoutes`
//! (/proc/net/snmp6). The zone init opens both files first thing (a proc net file stays bound to
//! the namespace it was opened in), reads them again when the command has ended, and reports the
//! difference ([`crate::plan::Msg::OutsideAttempts`]).
//!
//! What it does not count: connections to loopback addresses nobody listens on (a test of a
//! refused connection and a reach for a host service look alike there), and anything that is no
//! IP traffic (the filesystem view and Landlock bound that).

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// The counter files are a few KiB; more than this is not a counter file.
const MAX_COUNTER_BYTES: usize = 64 << 10;

/// Attempts to send to an address with no route from the zone, by IP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OutsideAttempts {
    pub ipv4: u64,
    pub ipv6: u64,
}

impl OutsideAttempts {
    pub fn total(&self) -> u64 {
        self.ipv4.saturating_add(self.ipv6)
    }
}

/// The zone's counter files, opened in its network namespace, and their values then.
pub struct Counters {
    snmp: File,
    snmp6: Option<File>,
    at_open: OutsideAttempts,
}

impl Counters {
    /// Open this thread's namespace's counters. `None` when IPv4's cannot be read; IPv6's are
    /// absent on a kernel without IPv6 (then counted as none).
    pub fn open() -> Option<Counters> {
        let snmp = File::open("/proc/thread-self/net/snmp").ok()?;
        let snmp6 = File::open("/proc/thread-self/net/snmp6").ok();
        let mut counters = Counters {
            snmp,
            snmp6,
            at_open: OutsideAttempts::default(),
        };
        counters.at_open = counters.now()?;
        Some(counters)
    }

    /// The attempts since [`Counters::open`] (`None` when a file cannot be read back).
    pub fn since_open(&self) -> Option<OutsideAttempts> {
        let now = self.now()?;
        Some(OutsideAttempts {
            ipv4: now.ipv4.saturating_sub(self.at_open.ipv4),
            ipv6: now.ipv6.saturating_sub(self.at_open.ipv6),
        })
    }

    fn now(&self) -> Option<OutsideAttempts> {
        let ipv4 = ipv4_no_routes(&read_from_start(&self.snmp)?)?;
        let ipv6 = match &self.snmp6 {
            Some(file) => ipv6_no_routes(&read_from_start(file)?)?,
            None => 0,
        };
        Some(OutsideAttempts { ipv4, ipv6 })
    }
}

/// The file's content from offset 0 (a proc seq file is generated afresh), bounded.
fn read_from_start(file: &File) -> Option<String> {
    let mut bytes = vec![0u8; MAX_COUNTER_BYTES];
    let mut len = 0;
    loop {
        match file.read_at(&mut bytes[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len == bytes.len() {
                    return None;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
    bytes.truncate(len);
    String::from_utf8(bytes).ok()
}

/// `OutNoRoutes` of the `Ip:` lines of /proc/net/snmp: a header line of names, then a line of
/// values in the same order.
fn ipv4_no_routes(text: &str) -> Option<u64> {
    let mut ip = text.lines().filter(|l| l.starts_with("Ip:"));
    let (names, values) = (ip.next()?, ip.next()?);
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "OutNoRoutes")
        .and_then(|(_, value)| value.parse().ok())
}

/// `Ip6OutNoRoutes` of /proc/net/snmp6: one `name value` pair per line.
fn ipv6_no_routes(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next()? == "Ip6OutNoRoutes").then(|| words.next()?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout\n\
                        Ip: 1 64 0 0 0 0 0 0 0 0 0 7 0\n\
                        Icmp: InMsgs InErrors\n\
                        Icmp: 0 0\n";

    #[test]
    fn ipv4_no_routes_is_read_from_the_value_line_by_its_name() {
        assert_eq!(ipv4_no_routes(SNMP), Some(7));
    }

    #[test]
    fn ipv4_no_routes_is_none_without_the_column() {
        assert_eq!(ipv4_no_routes("Ip: Forwarding\nIp: 1\n"), None);
        assert_eq!(ipv4_no_routes("Ip: OutNoRoutes\n"), None);
        assert_eq!(ipv4_no_routes("Ip: OutNoRoutes\nIp: many\n"), None);
    }

    #[test]
    fn ipv6_no_routes_is_read_from_its_line() {
        let text = "Ip6InReceives                   \t0\nIp6OutNoRoutes                  \t3\n";
        assert_eq!(ipv6_no_routes(text), Some(3));
        assert_eq!(ipv6_no_routes("Ip6InReceives 0\n"), None);
    }
}
