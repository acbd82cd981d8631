//! Category 9, direct egress: TCP to IP literals of listeners the test starts on the host
//! (loopback, a non-loopback host address, IPv6 loopback), raw/ICMP, packet, netlink, vsock and
//! MPTCP sockets, io_uring (sockets without socket(2)), the host's abstract and path unix sockets
//! (docker.sock / ssh-agent stand-ins), and DNS to a resolver the test runs at 127.0.0.53. Every
//! host listener must have received nothing. Host controls prove the probes connect when
//! unsandboxed.

use crate::common::{host_control, run_concurrent_zone, Scene, Zone};
use std::io::ErrorKind;
use std::net::{IpAddr, TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

/// The refusals a zone with only its own loopback may give for a host address.
const UNREACHABLE: &[&str] = &[
    "ECONNREFUSED",
    "ENETUNREACH",
    "EHOSTUNREACH",
    "EACCES",
    "EPERM",
    "ETIMEDOUT",
];

fn assert_no_connection(l: &TcpListener) {
    l.set_nonblocking(true).expect("nonblocking");
    match l.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Ok((_, peer)) => panic!("ESCAPE: the host listener accepted a connection from {peer}"),
        Err(e) => panic!("accept: {e}"),
    }
}

fn zone_tcp(ip: &str, port: u16) {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("network", &["tcp", ip, &port.to_string()])
        .assert_blocked("tcp", UNREACHABLE);
}

/// A non-loopback IPv4 address of this host, if it has one.
fn host_ipv4() -> Option<IpAddr> {
    let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below; we only read AF_INET entries.
    if unsafe { libc::getifaddrs(&mut addrs) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = addrs;
    while !cur.is_null() {
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() && unsafe { (*ifa.ifa_addr).sa_family } as i32 == libc::AF_INET {
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            if !ip.is_loopback() {
                found = Some(IpAddr::V4(ip));
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    unsafe { libc::freeifaddrs(addrs) };
    found
}

#[test]
fn tcp_to_a_host_loopback_listener_is_refused() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind host listener");
    zone_tcp("127.0.0.1", l.local_addr().expect("addr").port());
    assert_no_connection(&l);
}

#[test]
fn tcp_to_a_host_ip_literal_is_refused() {
    let Some(ip) = host_ipv4() else {
        // No non-loopback address: the zone must still not reach a public literal.
        return zone_tcp("192.0.2.1", 80);
    };
    let l = TcpListener::bind((ip, 0)).expect("bind host ip listener");
    zone_tcp(&ip.to_string(), l.local_addr().expect("addr").port());
    assert_no_connection(&l);
}

#[test]
fn tcp_to_a_host_ipv6_loopback_listener_is_refused() {
    match TcpListener::bind("[::1]:0") {
        Ok(l) => {
            zone_tcp("::1", l.local_addr().expect("addr").port());
            assert_no_connection(&l);
        }
        Err(_) => zone_tcp("::1", 22), // host without IPv6: the zone must not have it either
    }
}

#[test]
fn host_control_tcp_to_loopback_listener_is_detected() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let scene = Scene::new();
    let port = l.local_addr().expect("addr").port().to_string();
    host_control(&scene, "network", &["tcp", "127.0.0.1", &port]).assert_escaped("tcp");
}

refused!(raw_icmp_socket_is_refused: "network" "raw_icmp" [] => ["EPERM"]);
refused!(raw_icmpv6_socket_is_refused: "network" "raw_icmpv6" [] => ["EPERM"]);
refused!(packet_socket_is_refused: "network" "packet" [] => ["EPERM", "EAFNOSUPPORT"]);
refused!(netlink_socket_is_refused: "network" "netlink" [] => ["EPERM", "EAFNOSUPPORT"]);
refused!(vsock_socket_is_refused: "network" "vsock" [] => ["EPERM", "EAFNOSUPPORT"]);
refused!(mptcp_socket_is_refused: "network" "mptcp" [] => ["EPERM"]);
refused!(mptcp_ipv6_socket_is_refused: "network" "mptcp6" [] => ["EPERM"]);
refused!(io_uring_is_refused: "network" "io_uring" [] => ["EPERM"]);

#[test]
fn icmp_echo_to_the_host_address_gets_no_reply() {
    let ip = host_ipv4()
        .map(|i| i.to_string())
        .unwrap_or_else(|| "127.0.0.1".into());
    let scene = Scene::new();
    Zone::new(&scene)
        .run("network", &["ping_to", &ip])
        .assert_blocked(
            "ping_to",
            &[
                "socket_EACCES",
                "socket_EPERM",
                "sendto_ENETUNREACH",
                "sendto_EPERM",
                "no_reply",
            ],
        );
}

#[test]
fn host_abstract_unix_socket_is_unreachable() {
    let name = format!("loopexec-escape-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract addr");
    let l = UnixListener::bind_addr(&addr).expect("bind abstract");
    let scene = Scene::new();
    Zone::new(&scene)
        .run("network", &["abstract_unix", &name])
        .assert_blocked("abstract_unix", &["ECONNREFUSED", "EPERM"]);
    l.set_nonblocking(true).expect("nonblocking");
    assert!(
        matches!(l.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock),
        "ESCAPE: abstract socket got a connection"
    );
}

#[test]
fn host_control_abstract_unix_socket_is_detected() {
    let name = format!("loopexec-escape-ctl-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract addr");
    let _l = UnixListener::bind_addr(&addr).expect("bind abstract");
    let scene = Scene::new();
    host_control(&scene, "network", &["abstract_unix", &name]).assert_escaped("abstract_unix");
}

#[test]
fn host_path_unix_socket_is_unreachable() {
    // Stands for docker.sock, an ssh-agent or a D-Bus socket outside the grant.
    let scene = Scene::new();
    let path = scene.outside.join("agent.sock");
    let l = UnixListener::bind(&path).expect("bind path socket");
    let p = Scene::s(&path);
    Zone::new(&scene)
        .run("network", &["path_unix", &p])
        .assert_blocked("path_unix", &["ENOENT", "EACCES", "ECONNREFUSED"]);
    l.set_nonblocking(true).expect("nonblocking");
    assert!(
        matches!(l.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock),
        "ESCAPE: path socket got a connection"
    );
}

fn start_fake_resolver() -> (UdpSocket, u16) {
    let sock = UdpSocket::bind("127.0.0.53:0").expect("bind fake resolver on 127.0.0.53");
    let port = sock.local_addr().expect("addr").port();
    let server = sock.try_clone().expect("clone");
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, peer)) = server.recv_from(&mut buf) {
            let _ = server.send_to(&buf[..n], peer);
        }
    });
    (sock, port)
}

#[test]
fn dns_to_a_host_resolver_gets_no_answer() {
    let (_resolver, port) = start_fake_resolver();
    let scene = Scene::new();
    Zone::new(&scene)
        .run("network", &["udp_dns", "127.0.0.53", &port.to_string()])
        .assert_blocked("udp_dns", &["no_answer", "sendto_", "recv_ECONNREFUSED"]);
}

#[test]
fn dns_to_the_standard_stub_resolver_port_gets_no_answer() {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("network", &["udp_dns", "127.0.0.53", "53"])
        .assert_blocked("udp_dns", &["no_answer", "sendto_", "recv_ECONNREFUSED"]);
}

#[test]
fn host_control_dns_to_fake_resolver_is_detected() {
    let (_resolver, port) = start_fake_resolver();
    let scene = Scene::new();
    host_control(
        &scene,
        "network",
        &["udp_dns", "127.0.0.53", &port.to_string()],
    )
    .assert_escaped("udp_dns");
}

#[test]
fn a_zone_cannot_reach_another_zones_abstract_socket() {
    // Zone A listens on an abstract socket for 5 s; zone B, started meanwhile, tries to connect.
    let a = Scene::new();
    let name = format!("loopexec-escape-zone-a-{}", std::process::id());
    let marker = a.rw.join("listening");
    let marker_in = marker.clone();
    let name_in = name.clone();
    let b_run = std::cell::RefCell::new(None);
    let run_a = Zone::new(&a)
        .during(|_, _| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !marker_in.exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let b = Scene::new();
            *b_run.borrow_mut() = Some(run_concurrent_zone(
                &b,
                "network",
                &["abstract_unix", &name_in],
            ));
        })
        .run(
            "network",
            &["abstract_listen", &name, &Scene::s(&marker), "5000"],
        );
    run_a.assert_blocked("abstract_listen", &["no_connection"]);
    let b = b_run.into_inner().expect("zone B ran");
    b.assert_blocked("abstract_unix", &["ECONNREFUSED", "EPERM"]);
}

fn agent_policy() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/agent.toml")
}

#[test]
fn the_zone_has_its_own_working_loopback() {
    let scene = Scene::new();
    Zone::new(&scene)
        .run("network", &["loopback_works"])
        .assert_ok("loopback_works");
}

#[test]
fn agent_policy_tcp_to_a_host_loopback_listener_is_refused_by_landlock() {
    // Proxy mode: Landlock allows TCP connect to the proxy port only.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind host listener");
    let port = l.local_addr().expect("addr").port().to_string();
    let scene = Scene::new();
    Zone::new(&scene)
        .policy(&agent_policy())
        .run("network", &["tcp", "127.0.0.1", &port])
        .assert_blocked("tcp", &["EACCES"]);
    assert_no_connection(&l);
}

#[test]
fn agent_policy_tcp_to_a_non_proxy_port_inside_the_zone_is_refused_by_landlock() {
    let scene = Scene::new();
    Zone::new(&scene)
        .policy(&agent_policy())
        .run("network", &["loopback_works"])
        .assert_blocked("loopback_works", &["EACCES"]);
}
