//! Classifying destination addresses: which ones the proxy may connect to by default.
//!
//! Only globally routable unicast addresses pass by default. Everything that reaches the host
//! itself, the local network, a cloud provider's metadata service, or is not unicast at all is
//! refused unless the operator listed the exact address (`allow_addresses`) or pinned it with
//! `--resolve`. IPv6 forms that embed an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64
//! `64:ff9b::/96`, 6to4 `2002::/16`) are classified by the IPv4 address they carry.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of address a destination is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// Globally routable unicast: allowed by default.
    Public,
    Loopback,
    /// RFC 1918, IPv6 unique-local fc00::/7.
    Private,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// Carrier-grade NAT 100.64/10.
    SharedCgnat,
    /// A cloud provider's instance metadata endpoint.
    CloudMetadata,
    Unspecified,
    Multicast,
    Broadcast,
    /// Reserved, documentation, benchmarking, "this network" and other special-purpose ranges.
    Reserved,
}

impl AddressClass {
    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link-local",
            AddressClass::SharedCgnat => "cgnat",
            AddressClass::CloudMetadata => "cloud-metadata",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Multicast => "multicast",
            AddressClass::Broadcast => "broadcast",
            AddressClass::Reserved => "reserved",
        }
    }

    pub fn is_public(self) -> bool {
        self == AddressClass::Public
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Well-known metadata endpoints (AWS/GCP/Azure/OpenStack 169.254.169.254, AWS IPv6, Alibaba,
/// Oracle's 192.0.0.192, Azure's wire server). The ranges around them are refused anyway; naming
/// them gives the audit log a precise reason.
const METADATA_V4: [Ipv4Addr; 4] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(192, 0, 0, 192),
    Ipv4Addr::new(168, 63, 129, 16),
];
const METADATA_V6: [Ipv6Addr; 1] = [Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)];

/// Classify an address.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

/// Special-purpose IPv4 ranges that are not reachable destinations (besides 240/4).
const RESERVED_V4: [([u8; 4], u32); 7] = [
    ([0, 0, 0, 0], 8),       // "this network"
    ([192, 0, 0, 0], 24),    // IETF protocol assignments
    ([192, 0, 2, 0], 24),    // TEST-NET-1
    ([198, 51, 100, 0], 24), // TEST-NET-2
    ([203, 0, 113, 0], 24),  // TEST-NET-3
    ([198, 18, 0, 0], 15),   // benchmarking
    ([192, 88, 99, 0], 24),  // deprecated 6to4 relay anycast
];

pub fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    if METADATA_V4.contains(&ip) {
        return AddressClass::CloudMetadata;
    }
    let o = ip.octets();
    if ip.is_unspecified() {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_private() {
        AddressClass::Private
    } else if ip.is_link_local() {
        AddressClass::LinkLocal
    } else if in_v4(ip, [100, 64, 0, 0], 10) {
        AddressClass::SharedCgnat
    } else if ip.is_broadcast() {
        AddressClass::Broadcast
    } else if ip.is_multicast() {
        AddressClass::Multicast
    } else if RESERVED_V4
        .iter()
        .any(|(net, prefix)| in_v4(ip, *net, *prefix))
        || o[0] >= 240
    {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

/// The IPv4 address embedded in an IPv6 address, for the forms a host would route to that IPv4
/// destination: IPv4-mapped ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d (deprecated), NAT64
/// 64:ff9b::/96 and 64:ff9b:1::/48, 6to4 2002:AABB:CCDD::/16.
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..6] == [0, 0, 0, 0, 0, 0] && u128::from(ip) > 1 {
        return Some(low); // IPv4-compatible (excluding :: and ::1)
    }
    if in_v6(ip, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96)
        || in_v6(ip, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48)
    {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

/// Special-purpose ranges inside global unicast 2000::/3 (everything outside it is reserved too).
const RESERVED_V6: [(Ipv6Addr, u32); 3] = [
    (Ipv6Addr::new(0x2001, 0x0db8, 0, 0, 0, 0, 0, 0), 32), // documentation
    (Ipv6Addr::new(0x0100, 0, 0, 0, 0, 0, 0, 0), 64),      // discard-only
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23),      // IETF assignments, incl. Teredo
];

pub fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    if METADATA_V6.contains(&ip) {
        return AddressClass::CloudMetadata;
    }
    if ip.is_unspecified() {
        return AddressClass::Unspecified;
    }
    if ip.is_loopback() {
        return AddressClass::Loopback;
    }
    if let Some(v4) = embedded_v4(ip) {
        return match classify_v4(v4) {
            // A 6to4/NAT64 wrapper of a public address is itself routed publicly.
            AddressClass::Public => AddressClass::Public,
            other => other,
        };
    }
    if ip.is_multicast() {
        AddressClass::Multicast
    } else if in_v6(ip, Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7) {
        AddressClass::Private
    } else if in_v6(ip, Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10) {
        AddressClass::LinkLocal
    } else if in_v6(ip, Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10) {
        AddressClass::Private // deprecated site-local
    } else if RESERVED_V6
        .iter()
        .any(|(net, prefix)| in_v6(ip, *net, *prefix))
        || !in_v6(ip, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3)
    {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> AddressClass {
        classify(s.parse().unwrap())
    }

    #[test]
    fn public_unicast_passes() {
        assert_eq!(class("93.184.216.34"), AddressClass::Public);
        assert_eq!(class("1.1.1.1"), AddressClass::Public);
        assert_eq!(class("2606:4700:4700::1111"), AddressClass::Public);
    }

    #[test]
    fn host_local_and_lan_ranges_are_classified() {
        assert_eq!(class("127.0.0.1"), AddressClass::Loopback);
        assert_eq!(class("127.255.3.4"), AddressClass::Loopback);
        assert_eq!(class("::1"), AddressClass::Loopback);
        assert_eq!(class("10.1.2.3"), AddressClass::Private);
        assert_eq!(class("172.16.0.1"), AddressClass::Private);
        assert_eq!(class("172.31.255.255"), AddressClass::Private);
        assert_eq!(class("192.168.1.1"), AddressClass::Private);
        assert_eq!(class("fd12:3456::1"), AddressClass::Private);
        assert_eq!(class("fc00::1"), AddressClass::Private);
        assert_eq!(class("169.254.1.1"), AddressClass::LinkLocal);
        assert_eq!(class("fe80::1"), AddressClass::LinkLocal);
        assert_eq!(class("100.64.0.1"), AddressClass::SharedCgnat);
        assert_eq!(class("100.127.255.254"), AddressClass::SharedCgnat);
        assert_eq!(class("172.32.0.1"), AddressClass::Public);
        assert_eq!(class("100.128.0.1"), AddressClass::Public);
    }

    #[test]
    fn cloud_metadata_endpoints_are_named() {
        assert_eq!(class("169.254.169.254"), AddressClass::CloudMetadata);
        assert_eq!(class("fd00:ec2::254"), AddressClass::CloudMetadata);
        assert_eq!(class("100.100.100.200"), AddressClass::CloudMetadata);
        assert_eq!(class("::ffff:169.254.169.254"), AddressClass::CloudMetadata);
    }

    #[test]
    fn non_unicast_and_reserved_are_refused() {
        assert_eq!(class("0.0.0.0"), AddressClass::Unspecified);
        assert_eq!(class("::"), AddressClass::Unspecified);
        assert_eq!(class("224.0.0.1"), AddressClass::Multicast);
        assert_eq!(class("ff02::1"), AddressClass::Multicast);
        assert_eq!(class("255.255.255.255"), AddressClass::Broadcast);
        assert_eq!(class("0.1.2.3"), AddressClass::Reserved);
        assert_eq!(class("240.0.0.1"), AddressClass::Reserved);
        assert_eq!(class("192.0.2.1"), AddressClass::Reserved);
        assert_eq!(class("2001:db8::1"), AddressClass::Reserved);
    }

    #[test]
    fn ipv4_embedded_in_ipv6_is_classified_by_the_ipv4_address() {
        assert_eq!(class("::ffff:127.0.0.1"), AddressClass::Loopback);
        assert_eq!(class("::ffff:10.0.0.1"), AddressClass::Private);
        assert_eq!(class("::127.0.0.1"), AddressClass::Loopback);
        assert_eq!(class("64:ff9b::a9fe:a9fe"), AddressClass::CloudMetadata);
        assert_eq!(class("64:ff9b::7f00:1"), AddressClass::Loopback);
        assert_eq!(class("2002:c0a8:0101::1"), AddressClass::Private);
        assert_eq!(class("2002:7f00:0001::1"), AddressClass::Loopback);
        assert_eq!(class("::ffff:1.1.1.1"), AddressClass::Public);
    }
}
