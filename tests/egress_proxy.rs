//! The egress proxy end to end, against servers started on loopback by each test: a plain HTTP
//! server, a TLS server with a certificate generated here, and a fixed resolver table. Loopback
//! destinations are reached the way an operator would reach them: with `--resolve` pins or
//! `allow_addresses`; everything else about the decision is the production path.

use loopexec::egress::{
    AuditDigest, AuditLog, AuditRecord, Decision, EgressConfig, FixedResolver, Limits, Proxy,
    ProxyHandle, ProxyStats,
};
use loopexec::safefs::SafeDir;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

const HOST: &str = "api.example.test";

// ---------------------------------------------------------------- harness

struct Harness {
    proxy: ProxyHandle,
    addr: SocketAddr,
    dir: tempfile::TempDir,
    /// The audit log's running sha256, as the engine reads it for the receipt.
    digest: AuditDigest,
}

impl Harness {
    fn stop(self) -> (ProxyStats, Vec<AuditRecord>) {
        let (stats, records, _) = self.stop_keeping_dir();
        (stats, records)
    }

    /// Stop, and keep the audit directory for the run's next step.
    fn stop_keeping_dir(self) -> (ProxyStats, Vec<AuditRecord>, tempfile::TempDir) {
        let stats = self.proxy.stop();
        let bytes = std::fs::read(self.dir.path().join("egress.jsonl")).unwrap();
        let records = bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        (stats, records, self.dir)
    }
}

struct Setup<'a> {
    allow: &'a [String],
    addresses: &'a [&'a str],
    pins: &'a [String],
    upstream: Option<&'a str>,
    limits: Limits,
    /// Ports whose tunnels get the SNI check (none unless a test asks: servers listen on
    /// ephemeral ports, and the check has tests of its own).
    sni_ports: &'a [u16],
    denied_lines: u64,
    /// What the run used before this proxy's step.
    spent: ProxyStats,
    /// An existing audit directory (a later step of the same run), or None for a new one.
    dir: Option<tempfile::TempDir>,
    table: FixedResolver,
    head_timeout: Duration,
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Setup {
            allow: &[],
            addresses: &[],
            pins: &[],
            upstream: None,
            limits: Limits {
                max_open_connections: 16,
                max_bytes: 1 << 30,
                ..Limits::default()
            },
            sni_ports: &[],
            denied_lines: 256,
            spent: ProxyStats::default(),
            dir: None,
            table: FixedResolver::new(),
            head_timeout: Duration::from_secs(5),
        }
    }
}

fn start(setup: Setup<'_>) -> Harness {
    let addresses: Vec<String> = setup.addresses.iter().map(|s| s.to_string()).collect();
    let config = EgressConfig::from_parts(
        setup.allow,
        &addresses,
        setup.pins,
        setup.upstream,
        setup.limits,
    )
    .unwrap()
    .with_sni_ports(setup.sni_ports)
    .with_denied_lines(setup.denied_lines)
    .with_resolver(Arc::new(setup.table))
    .with_head_timeout(setup.head_timeout);
    let dir = setup.dir.unwrap_or_else(|| tempfile::tempdir().unwrap());
    let safe = SafeDir::open(dir.path()).unwrap();
    let digest = AuditDigest::of_file(&safe, "egress.jsonl").unwrap();
    let audit = AuditLog::open_tracked(&safe, "egress.jsonl", &digest).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = Proxy::start(config, listener, audit, "agent", &setup.spent).unwrap();
    let addr = proxy.local_addr();
    Harness {
        proxy,
        addr,
        dir,
        digest,
    }
}

/// A proxy allowing `HOST:port` with that name pinned to 127.0.0.1 (where the test's server
/// listens); the rest of `setup` as given.
fn start_pinned(port: u16, setup: Setup<'_>) -> Harness {
    let allow = [format!("{HOST}:{port}")];
    let pins = [format!("{HOST}:{port}:127.0.0.1")];
    start(Setup {
        allow: &allow,
        pins: &pins,
        ..setup
    })
}

/// A CONNECT tunnel to `authority` through the proxy, once it answered 200.
fn open_tunnel(h: &Harness, authority: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(h.addr).unwrap();
    tcp.write_all(connect_request(authority).as_bytes())
        .unwrap();
    assert_eq!(
        read_response(&mut tcp, false).status,
        200,
        "CONNECT {authority}"
    );
    tcp
}

/// The next line the destination sent down a tunnel.
fn next_line(tcp: &TcpStream) -> String {
    let mut line = String::new();
    BufReader::new(tcp).read_line(&mut line).unwrap();
    line
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// A response as the client saw it.
struct Response {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// Read a response head (and, if `to_eof`, the rest of the stream as body).
fn read_response(stream: &mut TcpStream, to_eof: bool) -> Response {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => buf.push(byte[0]),
            Err(e) => panic!("reading response head: {e}"),
        }
    }
    let text = String::from_utf8_lossy(&buf).to_string();
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    let mut body = Vec::new();
    if to_eof {
        let _ = stream.read_to_end(&mut body);
    }
    Response {
        status,
        headers,
        body,
    }
}

/// Send a raw request to the proxy and read the whole answer.
fn ask(proxy: SocketAddr, request: &str) -> Response {
    let mut stream = TcpStream::connect(proxy).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    read_response(&mut stream, true)
}

fn connect_request(authority: &str) -> String {
    format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n")
}

fn denied(response: &Response) -> &str {
    response
        .headers
        .get("x-loopexec-denied")
        .map(String::as_str)
        .unwrap_or("")
}

// ---------------------------------------------------------------- servers

/// An HTTP/1.1 origin: records each request (head + body, framed by Content-Length or chunked)
/// and answers `reply` bytes with Content-Length and Connection: close.
fn http_server(reply: Vec<u8>) -> (u16, Receiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let tx = tx.clone();
            let reply = reply.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request = Vec::new();
                let mut content_length = 0usize;
                let mut chunked = false;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        content_length = v.trim().parse().unwrap();
                    }
                    if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                        chunked = true;
                    }
                    request.extend_from_slice(line.as_bytes());
                    if line == "\r\n" {
                        break;
                    }
                }
                if chunked {
                    while !request.ends_with(b"\r\n0\r\n\r\n") {
                        let mut b = [0u8; 1];
                        if reader.read(&mut b).unwrap_or(0) == 0 {
                            break;
                        }
                        request.push(b[0]);
                    }
                } else {
                    let mut body = vec![0u8; content_length];
                    let _ = reader.read_exact(&mut body);
                    request.extend_from_slice(&body);
                }
                let _ = tx.send(request);
                let mut out = stream;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    reply.len()
                );
                let _ = out.write_all(head.as_bytes());
                let _ = out.write_all(&reply);
            });
        }
    });
    (port, rx)
}

/// A line echo server: answers every line with `echo: <line>`.
fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 {
                    if out.write_all(format!("echo: {line}").as_bytes()).is_err() {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    port
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS server for `HOST` with a certificate generated now; answers `ping\n` with `pong\n`.
/// Returns its port and the certificate for the client's trust store.
fn tls_server() -> (u16, rustls::pki_types::CertificateDer<'static>) {
    let certified = rcgen::generate_simple_self_signed(vec![HOST.to_string()]).unwrap();
    let cert = certified.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.key_pair.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let config = Arc::clone(&config);
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, stream);
                let mut line = [0u8; 5];
                if tls.read_exact(&mut line).is_ok() && &line == b"ping\n" {
                    let _ = tls.write_all(b"pong\n");
                    let _ = tls.flush();
                }
            });
        }
    });
    (port, cert)
}

// ---------------------------------------------------------------- allowed traffic

#[test]
fn an_absolute_uri_request_to_an_allowed_host_is_forwarded_in_origin_form() {
    let (port, requests) = http_server(b"hello from origin".to_vec());
    let h = start_pinned(port, Setup::default());
    let r = ask(
        h.addr,
        &format!(
            "GET http://{HOST}:{port}/v1/models?x=1 HTTP/1.1\r\nHost: {HOST}:{port}\r\n\
             Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n"
        ),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello from origin");
    let seen = String::from_utf8(requests.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap();
    assert_eq!(
        seen,
        format!("GET /v1/models?x=1 HTTP/1.1\r\nHost: {HOST}:{port}\r\nAccept: */*\r\nConnection: close\r\n\r\n")
    );
    let (stats, records) = h.stop();
    assert_eq!((stats.allowed, stats.denied), (1, 0));
    assert_eq!(
        records[0].address.as_deref(),
        Some(format!("127.0.0.1:{port}").as_str())
    );
}

#[test]
fn request_bodies_with_content_length_and_chunked_framing_arrive_intact() {
    let (port, requests) = http_server(b"ok".to_vec());
    let h = start_pinned(port, Setup::default());

    let r = ask(
        h.addr,
        &format!("POST http://{HOST}:{port}/a HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world"),
    );
    assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
    let seen = requests.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        seen.ends_with(b"Content-Length: 11\r\nConnection: close\r\n\r\nhello world"),
        "{}",
        String::from_utf8_lossy(&seen)
    );

    let chunked = "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let r = ask(
        h.addr,
        &format!(
            "POST http://{HOST}:{port}/b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}"
        ),
    );
    assert_eq!(r.status, 200);
    let seen = String::from_utf8(requests.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap();
    assert!(
        seen.ends_with(&format!(
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{chunked}"
        )),
        "{seen}"
    );
}

#[test]
fn connect_to_an_allowed_host_completes_a_tls_handshake() {
    let (port, cert) = tls_server();
    // The tunnel's port gets the SNI check: a ClientHello naming the CONNECT host passes it.
    let h = start_pinned(
        port,
        Setup {
            sni_ports: &[port],
            ..Setup::default()
        },
    );

    let tcp = open_tunnel(&h, &format!("{HOST}:{port}"));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(HOST).unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"ping\n").unwrap();
    let mut answer = [0u8; 5];
    tls.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"pong\n");
    assert!(tls.conn.negotiated_cipher_suite().is_some());
    drop(tls);

    let (stats, records) = h.stop();
    assert_eq!(stats.allowed, 1);
    assert_eq!(records[0].method.as_deref(), Some("CONNECT"));
    assert_eq!(records[0].status, Some(200));
    assert!(records[0].bytes_up > 0 && records[0].bytes_down > 0);
}

#[test]
fn mixed_case_and_a_trailing_dot_are_normalised_and_allowed() {
    let port = echo_server();
    let h = start_pinned(port, Setup::default());
    let mut tcp = open_tunnel(&h, &format!("API.Example.TEST.:{port}"));
    tcp.write_all(b"hi\n").unwrap();
    assert_eq!(next_line(&tcp), "echo: hi\n");
    drop(tcp);
    let (_, records) = h.stop();
    assert_eq!(records[0].host.as_deref(), Some(HOST));
}

#[test]
fn bytes_sent_together_with_the_connect_head_reach_the_destination_first() {
    let port = echo_server();
    let h = start_pinned(port, Setup::default());
    let mut tcp = TcpStream::connect(h.addr).unwrap();
    let mut request = connect_request(&format!("{HOST}:{port}"));
    request.push_str("early\n");
    tcp.write_all(request.as_bytes()).unwrap();
    assert_eq!(read_response(&mut tcp, false).status, 200);
    assert_eq!(next_line(&tcp), "echo: early\n");
}

#[test]
fn a_subdomain_of_a_wildcard_entry_is_allowed() {
    let port = echo_server();
    let allow = [format!("*.example.test:{port}")];
    let pins = [format!("eu.api.example.test:{port}:127.0.0.1")];
    let h = start(Setup {
        allow: &allow,
        pins: &pins,
        ..Setup::default()
    });
    open_tunnel(&h, &format!("eu.api.example.test:{port}"));
}

// ---------------------------------------------------------------- refusals by the allowlist

#[test]
fn a_host_no_entry_allows_is_refused_with_403_naming_the_reason() {
    let allow = [format!("{HOST}:443")];
    let h = start(Setup {
        allow: &allow,
        ..Setup::default()
    });
    let r = ask(h.addr, &connect_request("other.example.test:443"));
    assert_eq!(r.status, 403);
    assert_eq!(
        denied(&r),
        "no_matching_rule: no allow entry matches other.example.test:443"
    );
    let r = ask(h.addr, "GET http://other.example.test/ HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 403);
    assert!(denied(&r).starts_with("no_matching_rule"));
}

#[test]
fn a_refusal_carries_a_json_body_naming_the_reason_the_host_the_allowlist_and_that_retrying_is_futile(
) {
    let allow = [format!("{HOST}:443")];
    let h = start(Setup {
        allow: &allow,
        ..Setup::default()
    });
    for (request, asked) in [
        (
            connect_request("other.example.test:443"),
            "other.example.test:443",
        ),
        (
            "GET http://other.example.test/ HTTP/1.1\r\n\r\n".to_string(),
            "other.example.test:80",
        ),
    ] {
        let r = ask(h.addr, &request);
        assert_eq!(r.status, 403);
        assert_eq!(
            r.headers.get("content-type").map(String::as_str),
            Some("application/json")
        );
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "loopexec_egress": "denied",
                "reason": "no_matching_rule",
                "detail": format!("no allow entry matches {asked}"),
                "host": asked,
                "allowed": [format!("{HOST}:443")],
                "allowed_not_listed": 0,
                "retry": loopexec::egress::refusal::RETRY_FUTILE,
            })
        );
    }
}

#[test]
fn an_allowed_host_on_another_port_is_refused() {
    let allow = [HOST.to_string()];
    let h = start(Setup {
        allow: &allow,
        ..Setup::default()
    });
    let r = ask(h.addr, &connect_request(&format!("{HOST}:8443")));
    assert_eq!(r.status, 403);
    assert_eq!(
        denied(&r),
        format!("port_not_allowed: {HOST} is allowed only on port 443")
    );
    let r = ask(h.addr, &format!("GET http://{HOST}/ HTTP/1.1\r\n\r\n"));
    assert!(
        denied(&r).starts_with("port_not_allowed"),
        "port 80 by default"
    );
}

#[test]
fn an_ip_literal_is_refused_unless_listed_and_its_address_allowed() {
    let port = echo_server();
    let h = start(Setup {
        allow: &[HOST.to_string()],
        ..Setup::default()
    });
    let r = ask(h.addr, &connect_request(&format!("127.0.0.1:{port}")));
    assert_eq!(r.status, 403);
    assert!(
        denied(&r).starts_with("ip_literal_not_listed"),
        "{}",
        denied(&r)
    );
    let r = ask(h.addr, &connect_request(&format!("[::1]:{port}")));
    assert!(denied(&r).starts_with("ip_literal_not_listed"));
    h.stop();

    // Listed but loopback: the address check still refuses ...
    let allow = [format!("127.0.0.1:{port}")];
    let h = start(Setup {
        allow: &allow,
        ..Setup::default()
    });
    let r = ask(h.addr, &connect_request(&format!("127.0.0.1:{port}")));
    assert!(denied(&r).starts_with("address_refused"), "{}", denied(&r));
    h.stop();

    // ... until the operator also allows the address.
    let h = start(Setup {
        allow: &allow,
        addresses: &["127.0.0.1"],
        ..Setup::default()
    });
    open_tunnel(&h, &format!("127.0.0.1:{port}"));
}

#[test]
fn a_wildcard_look_alike_is_refused() {
    let h = start(Setup {
        allow: &["*.example.com".to_string()],
        ..Setup::default()
    });
    let r = ask(h.addr, &connect_request("evil-example.com:443"));
    assert_eq!(
        (r.status, denied(&r)),
        (
            403,
            "no_matching_rule: no allow entry matches evil-example.com:443"
        )
    );
    let r = ask(h.addr, &connect_request("example.com.evil.net:443"));
    assert_eq!(r.status, 403);
}

#[test]
fn the_bare_domain_is_not_covered_by_its_wildcard() {
    let h = start(Setup {
        allow: &["*.example.com".to_string()],
        ..Setup::default()
    });
    let r = ask(h.addr, &connect_request("example.com:443"));
    assert_eq!(
        (r.status, denied(&r)),
        (
            403,
            "no_matching_rule: no allow entry matches example.com:443"
        )
    );
}

#[test]
fn a_punycode_homograph_of_an_allowed_name_is_refused() {
    let table = FixedResolver::new().with("xn--xample-2of.com", &[ip("93.184.216.34")]);
    let h = start(Setup {
        allow: &["example.com".to_string()],
        table,
        ..Setup::default()
    });
    // Cyrillic "е" (U+0435) in place of the Latin "e", sent raw and as its A-label.
    let r = ask(h.addr, &connect_request("\u{0435}xample.com:443"));
    assert_eq!(
        (r.status, denied(&r)),
        (
            403,
            "no_matching_rule: no allow entry matches xn--xample-2of.com:443"
        )
    );
    let r = ask(h.addr, &connect_request("xn--xample-2of.com:443"));
    assert_eq!(r.status, 403);
    let (_, records) = h.stop();
    assert!(records
        .iter()
        .all(|r| r.host.as_deref() == Some("xn--xample-2of.com")));
}

// ---------------------------------------------------------------- refusals by the address check

#[test]
fn an_allowed_name_resolving_to_private_loopback_or_metadata_is_refused_without_a_pin() {
    for (answer, class) in [
        ("10.1.2.3", "private"),
        ("192.168.0.10", "private"),
        ("127.0.0.1", "loopback"),
        ("169.254.169.254", "cloud-metadata"),
        ("100.64.1.1", "cgnat"),
        ("fd00:ec2::254", "cloud-metadata"),
        ("::ffff:127.0.0.1", "loopback"),
    ] {
        let table = FixedResolver::new().with(HOST, &[ip(answer)]);
        let h = start(Setup {
            allow: &[HOST.to_string()],
            table,
            ..Setup::default()
        });
        let r = ask(h.addr, &connect_request(&format!("{HOST}:443")));
        assert_eq!(r.status, 403, "{answer}");
        let header = denied(&r);
        assert!(header.starts_with("address_refused"), "{answer}: {header}");
        assert!(
            header.contains(&format!("a {class} address")),
            "{answer}: {header}"
        );
        let (stats, records) = h.stop();
        assert_eq!(stats.denied, 1);
        assert_eq!(
            records[0].address.as_deref(),
            Some(SocketAddr::new(ip(answer), 443).to_string().as_str())
        );
    }
}

#[test]
fn the_same_name_pinned_with_resolve_is_allowed() {
    let port = echo_server();
    // The resolver would say "metadata"; the operator's pin wins and is not re-resolved.
    let table = FixedResolver::new().with(HOST, &[ip("169.254.169.254")]);
    let h = start_pinned(
        port,
        Setup {
            table,
            ..Setup::default()
        },
    );
    open_tunnel(&h, &format!("{HOST}:{port}"));
}

#[test]
fn ipv4_mapped_ipv6_loopback_is_refused_as_a_literal_and_as_an_answer() {
    let allow = ["[::ffff:127.0.0.1]:443".to_string(), HOST.to_string()];
    let table = FixedResolver::new().with(HOST, &[ip("::ffff:7f00:1")]);
    let h = start(Setup {
        allow: &allow,
        table,
        ..Setup::default()
    });
    let r = ask(h.addr, &connect_request("[::ffff:127.0.0.1]:443"));
    assert!(denied(&r).contains("a loopback address"), "{}", denied(&r));
    let r = ask(h.addr, &connect_request(&format!("{HOST}:443")));
    assert!(denied(&r).contains("a loopback address"), "{}", denied(&r));
}

// ---------------------------------------------------------------- caps and malformed input

#[test]
fn connections_over_the_cap_get_503() {
    let port = echo_server();
    let h = start_pinned(
        port,
        Setup {
            limits: Limits {
                max_open_connections: 1,
                ..Limits::default()
            },
            ..Setup::default()
        },
    );
    let first = open_tunnel(&h, &format!("{HOST}:{port}"));

    let r = ask(h.addr, &connect_request(&format!("{HOST}:{port}")));
    assert_eq!(r.status, 503);
    assert_eq!(
        denied(&r),
        "connection_cap: 1 connections open, the zone's cap is 1"
    );
    drop(first);
    let (stats, records) = h.stop();
    assert_eq!((stats.allowed, stats.denied), (1, 1));
    assert_eq!(
        records
            .iter()
            .filter(|r| r.reason.as_deref() == Some("connection_cap"))
            .count(),
        1
    );
}

#[test]
fn the_byte_cap_cuts_the_connection_and_is_recorded() {
    let (port, _requests) = http_server(vec![b'x'; 256 * 1024]);
    let h = start_pinned(
        port,
        Setup {
            limits: Limits {
                max_bytes: 8192,
                ..Limits::default()
            },
            ..Setup::default()
        },
    );
    let r = ask(
        h.addr,
        &format!("GET http://{HOST}:{port}/big HTTP/1.1\r\n\r\n"),
    );
    assert_eq!(r.status, 200);
    assert!(
        !r.body.is_empty() && r.body.len() < 8192,
        "received {} bytes",
        r.body.len()
    );
    // The budget is spent: the next connection is refused at once.
    let r = ask(
        h.addr,
        &format!("GET http://{HOST}:{port}/big HTTP/1.1\r\n\r\n"),
    );
    assert_eq!(r.status, 503);
    assert!(denied(&r).starts_with("byte_cap"));
    let (stats, records) = h.stop();
    assert_eq!(stats.byte_cap_hits, 1);
    assert_eq!(stats.bytes_up + stats.bytes_down, 8192);
    let cut = records
        .iter()
        .find(|r| r.decision == Decision::Allowed)
        .unwrap();
    assert_eq!(cut.end.as_deref(), Some("byte_cap"));
    assert_eq!(cut.bytes_up + cut.bytes_down, 8192);
}

#[test]
fn malformed_oversized_and_slow_request_heads_are_refused() {
    let h = start(Setup {
        allow: &[HOST.to_string()],
        head_timeout: Duration::from_millis(300),
        ..Setup::default()
    });
    assert_eq!(ask(h.addr, "NONSENSE\r\n\r\n").status, 400);
    assert_eq!(
        ask(h.addr, &format!("CONNECT {HOST} HTTP/1.1\r\n\r\n")).status,
        400
    );
    assert_eq!(
        ask(h.addr, "GET /relative HTTP/1.1\r\nHost: x\r\n\r\n").status,
        400
    );
    let huge = format!(
        "CONNECT {HOST}:443 HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let mut tcp = TcpStream::connect(h.addr).unwrap();
    let _ = tcp.write_all(huge.as_bytes());
    assert_eq!(read_response(&mut tcp, false).status, 431);

    let mut slow = TcpStream::connect(h.addr).unwrap();
    slow.write_all(b"CONNECT api.exa").unwrap();
    let r = read_response(&mut slow, true);
    assert_eq!(
        (r.status, denied(&r)),
        (408, "head_timeout: the request head did not arrive in time")
    );
    let (stats, records) = h.stop();
    assert_eq!(stats.denied, 5);
    let reasons: Vec<_> = records.iter().filter_map(|r| r.reason.clone()).collect();
    assert_eq!(reasons.iter().filter(|r| *r == "malformed").count(), 2);
    assert_eq!(reasons.iter().filter(|r| *r == "unsupported").count(), 1);
    assert!(
        reasons.contains(&"head_too_large".to_string())
            && reasons.contains(&"head_timeout".to_string())
    );
}

// ---------------------------------------------------------------- the audit log

#[test]
fn the_audit_log_has_exactly_one_line_per_decision_with_its_fields() {
    let port = echo_server();
    let h = start_pinned(port, Setup::default());

    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    tcp.write_all(b"abc\n").unwrap();
    assert_eq!(next_line(&tcp), "echo: abc\n");
    drop(tcp);
    assert_eq!(
        ask(h.addr, &connect_request("nope.example.test:443")).status,
        403
    );
    assert_eq!(ask(h.addr, "garbage\r\n\r\n").status, 400);
    // Wait for the allowed connection to close and be recorded.
    for _ in 0..100 {
        if h.proxy.stats().allowed == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (stats, mut records) = h.stop();
    assert_eq!(records.len(), 3);
    assert_eq!((stats.allowed, stats.denied), (1, 2));
    records.sort_by_key(|r| r.reason.clone());

    let allowed = records
        .iter()
        .find(|r| r.decision == Decision::Allowed)
        .unwrap();
    assert_eq!(allowed.zone, "agent");
    assert_eq!(allowed.method.as_deref(), Some("CONNECT"));
    assert_eq!(
        (allowed.host.as_deref(), allowed.port),
        (Some(HOST), Some(port))
    );
    assert_eq!(
        allowed.address.as_deref(),
        Some(format!("127.0.0.1:{port}").as_str())
    );
    assert_eq!(
        allowed.rule.as_deref(),
        Some(format!("{HOST}:{port}").as_str())
    );
    assert_eq!((allowed.bytes_up, allowed.bytes_down), (4, 10));
    assert_eq!(allowed.end.as_deref(), Some("closed"));
    assert!(
        allowed.ts.ends_with('Z') && allowed.ts.len() == 24,
        "{}",
        allowed.ts
    );

    let no_rule = records
        .iter()
        .find(|r| r.reason.as_deref() == Some("no_matching_rule"))
        .unwrap();
    assert_eq!(
        (no_rule.decision, no_rule.status, no_rule.host.as_deref()),
        (Decision::Denied, Some(403), Some("nope.example.test"))
    );
    assert_eq!(no_rule.rule, None);
    let malformed = records
        .iter()
        .find(|r| r.reason.as_deref() == Some("malformed"))
        .unwrap();
    assert_eq!(
        (malformed.status, malformed.host.as_deref()),
        (Some(400), None)
    );
}

// ---------------------------------------------------------------- chaining and stopping

#[test]
fn allowed_connections_are_chained_through_the_upstream_proxy_after_the_allowlist() {
    let port = echo_server();
    let allow = [format!("{HOST}:{port}")];
    let pins = [format!("{HOST}:{port}:127.0.0.1")];
    // The operator's proxy: another instance with its own allowlist and audit log.
    let upstream = start(Setup {
        allow: &allow,
        pins: &pins,
        ..Setup::default()
    });
    let url = format!("http://{}", upstream.addr);
    let h = start(Setup {
        allow: &[allow[0].clone(), "other.example.test".to_string()],
        addresses: &["127.0.0.1"],
        upstream: Some(&url),
        ..Setup::default()
    });

    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    tcp.write_all(b"via\n").unwrap();
    assert_eq!(next_line(&tcp), "echo: via\n");
    drop(tcp);

    // Not allowed here: refused without asking the upstream.
    let r = ask(h.addr, &connect_request("evil.example.test:443"));
    assert!(denied(&r).starts_with("no_matching_rule"));
    // Allowed here but not by the upstream: its refusal comes back as a 502.
    let r = ask(h.addr, &connect_request("other.example.test:443"));
    assert_eq!(r.status, 502);
    assert!(
        r.headers["x-loopexec-error"].contains("answered 403"),
        "{:?}",
        r.headers
    );

    let (_, records) = h.stop();
    let chained = records
        .iter()
        .find(|r| r.host.as_deref() == Some(HOST))
        .unwrap();
    assert_eq!(chained.via.as_deref(), Some(url.as_str()));
    assert_eq!(
        chained.address.as_deref(),
        Some(upstream.addr.to_string().as_str())
    );
    let (_, upstream_records) = upstream.stop();
    let hosts: Vec<_> = upstream_records
        .iter()
        .filter_map(|r| r.host.clone())
        .collect();
    assert_eq!(hosts.len(), 2);
    assert!(!hosts.contains(&"evil.example.test".to_string()));
}

#[test]
fn a_plain_http_request_is_sent_in_origin_form_inside_the_upstream_tunnel() {
    let (port, requests) = http_server(b"chained".to_vec());
    let allow = [format!("{HOST}:{port}")];
    let pins = [format!("{HOST}:{port}:127.0.0.1")];
    let upstream = start(Setup {
        allow: &allow,
        pins: &pins,
        ..Setup::default()
    });
    let url = format!("http://{}", upstream.addr);
    let h = start(Setup {
        allow: &allow,
        addresses: &["127.0.0.1"],
        upstream: Some(&url),
        ..Setup::default()
    });
    let r = ask(
        h.addr,
        &format!("GET http://{HOST}:{port}/x HTTP/1.1\r\nAccept: */*\r\n\r\n"),
    );
    assert_eq!((r.status, r.body.as_slice()), (200, &b"chained"[..]));
    let seen = String::from_utf8(requests.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap();
    assert_eq!(
        seen,
        format!(
            "GET /x HTTP/1.1\r\nHost: {HOST}:{port}\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        )
    );
    let (_, upstream_records) = upstream.stop();
    assert_eq!(upstream_records[0].method.as_deref(), Some("CONNECT"));
}

#[test]
fn an_upstream_proxy_on_a_loopback_address_must_be_allowed_explicitly() {
    let h = start(Setup {
        allow: &[HOST.to_string()],
        upstream: Some("http://127.0.0.1:9"),
        ..Setup::default()
    });
    let r = ask(h.addr, &connect_request(&format!("{HOST}:443")));
    assert_eq!(r.status, 403);
    assert!(
        denied(&r)
            .contains("the upstream proxy 127.0.0.1 resolves to 127.0.0.1:9, a loopback address"),
        "{}",
        denied(&r)
    );
}

#[test]
fn stop_cuts_open_tunnels_and_returns_the_totals() {
    let port = echo_server();
    let h = start_pinned(port, Setup::default());
    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    let (stats, records) = h.stop();
    assert_eq!(stats.allowed, 1);
    assert_eq!(records[0].end.as_deref(), Some("stopped"));
    let mut rest = Vec::new();
    assert_eq!(
        tcp.read_to_end(&mut rest).unwrap_or(0),
        0,
        "the client sees the tunnel closed"
    );
}

#[test]
fn the_summary_and_digest_cover_the_written_log() {
    let h = start(Setup {
        allow: &[HOST.to_string()],
        ..Setup::default()
    });
    ask(h.addr, &connect_request("a.example.test:443"));
    ask(h.addr, &connect_request("a.example.test:443"));
    ask(h.addr, &connect_request(&format!("{HOST}:80")));
    let stats = h.proxy.stop();
    let bytes = std::fs::read(h.dir.path().join("egress.jsonl")).unwrap();
    let summary = loopexec::egress::audit::summarize(&bytes).unwrap();
    assert_eq!((summary.allowed, summary.denied), (0, 3));
    assert_eq!(summary.denied, stats.denied);
    assert_eq!(summary.hosts["a.example.test:443"].denied, 2);
    assert_eq!(summary.hosts[&format!("{HOST}:80")].denied, 1);
    use sha2::Digest;
    assert_eq!(
        h.digest.sha256_hex(),
        Some(hex::encode(sha2::Sha256::digest(&bytes))),
        "the running digest is not the file's sha256"
    );
}

// ---------------------------------------------------------------- limits per run and per protocol

/// Send `line` down a tunnel and read the echo; returns the bytes relayed both ways.
fn echo_exchange(tcp: &mut TcpStream, line: &str) -> String {
    tcp.write_all(line.as_bytes()).unwrap();
    next_line(tcp)
}

/// One step of a run: a proxy started from what the run used before (`spent`), on the run's
/// audit directory.
fn step(port: u16, limits: Limits, spent: &ProxyStats, dir: Option<tempfile::TempDir>) -> Harness {
    start_pinned(
        port,
        Setup {
            limits,
            spent: spent.clone(),
            dir,
            ..Setup::default()
        },
    )
}

/// The reason a CONNECT to the test's host is refused with 503 (a spent budget).
fn refused_at_once(h: &Harness, port: u16) -> String {
    let r = ask(h.addr, &connect_request(&format!("{HOST}:{port}")));
    assert_eq!(r.status, 503);
    denied(&r).to_string()
}

/// Wait until the proxy has recorded `n` allowed connections (their lines are written when they close).
fn wait_allowed(h: &Harness, n: u64) {
    while h.proxy.stats().allowed < n {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_byte_budget_bounds_the_run_across_three_steps_and_a_resume() {
    let port = echo_server();
    let limits = Limits {
        max_bytes: 500,
        ..Limits::default()
    };
    let line = format!("{}\n", "a".repeat(98)); // 99 bytes up, 105 echoed down: 204 a step
    let mut total = ProxyStats::default();
    let mut dir = None;
    for _ in 0..2 {
        let h = step(port, limits.clone(), &total, dir.take());
        let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
        assert_eq!(echo_exchange(&mut tcp, &line), format!("echo: {line}"));
        drop(tcp);
        wait_allowed(&h, 1);
        let (stats, _, kept) = h.stop_keeping_dir();
        assert_eq!(stats.bytes_up + stats.bytes_down, 204);
        total.add(&stats);
        dir = Some(kept);
    }
    // Step 3 has 92 bytes left of the run's 500: its upload is cut there.
    let h = step(port, limits.clone(), &total, dir.take());
    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    tcp.write_all(line.as_bytes()).unwrap();
    let mut rest = Vec::new();
    let _ = tcp.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "nothing came back: the line never reached the echo server whole"
    );
    let (stats, records, kept) = h.stop_keeping_dir();
    assert_eq!(
        (stats.bytes_up, stats.bytes_down, stats.byte_cap_hits),
        (92, 0, 1)
    );
    assert_eq!(records.last().unwrap().end.as_deref(), Some("byte_cap"));
    total.add(&stats);
    assert_eq!(total.bytes_up + total.bytes_down, 500);

    // A resumed run (a new process) starts from the totals its receipt recorded.
    let recorded: ProxyStats =
        serde_json::from_value(serde_json::to_value(&total).unwrap()).unwrap();
    let h = step(port, limits, &recorded, Some(kept));
    assert_eq!(
        refused_at_once(&h, port),
        "byte_cap: the run's 500 byte budget (500 used before this step) is spent"
    );
    let (stats, _) = h.stop();
    assert_eq!(
        (stats.bytes_up, stats.bytes_down, stats.connections),
        (0, 0, 0)
    );
}

#[test]
fn a_per_step_byte_limit_holds_each_step_within_the_run_budget() {
    let port = echo_server();
    let limits = Limits {
        max_bytes: 10_000,
        max_bytes_per_step: Some(150),
        ..Limits::default()
    };
    let line = format!("{}\n", "a".repeat(98));
    let mut total = ProxyStats::default();
    for _ in 0..2 {
        let h = step(port, limits.clone(), &total, None);
        let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
        tcp.write_all(line.as_bytes()).unwrap();
        let mut rest = Vec::new();
        let _ = tcp.read_to_end(&mut rest);
        let r = ask(h.addr, &connect_request(&format!("{HOST}:{port}")));
        assert_eq!(denied(&r), "byte_cap: this step's 150 byte budget is spent");
        let (stats, _) = h.stop();
        assert_eq!(
            stats.bytes_up + stats.bytes_down,
            150,
            "each step gets its own 150 bytes"
        );
        total.add(&stats);
    }
    assert_eq!(total.bytes_up + total.bytes_down, 300);
}

#[test]
fn the_connection_budget_counts_connections_over_the_run() {
    let port = echo_server();
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let h = step(port, limits.clone(), &ProxyStats::default(), None);
    drop(open_tunnel(&h, &format!("{HOST}:{port}")));
    let (first, _) = h.stop();
    assert_eq!(first.connections, 1);
    let h = step(port, limits, &first, None);
    drop(open_tunnel(&h, &format!("{HOST}:{port}")));
    wait_allowed(&h, 1);
    assert_eq!(
        refused_at_once(&h, port),
        "connection_budget: the run's 2 connection budget (1 used before this step) is spent"
    );
    let (second, _) = h.stop();
    assert_eq!(
        (second.connections, second.allowed, second.denied),
        (1, 1, 1)
    );
}

#[test]
fn an_idle_tunnel_is_cut_after_the_idle_timeout() {
    let port = echo_server();
    let h = start_pinned(
        port,
        Setup {
            limits: Limits {
                idle_timeout: Duration::from_millis(300),
                ..Limits::default()
            },
            ..Setup::default()
        },
    );
    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    assert_eq!(echo_exchange(&mut tcp, "hi\n"), "echo: hi\n");
    // Then silence both ways: the proxy closes the tunnel (the client sees end-of-stream).
    tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut rest = Vec::new();
    tcp.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    wait_allowed(&h, 1);
    let (_, records) = h.stop();
    assert_eq!(records[0].end.as_deref(), Some("idle_timeout"));
    assert_eq!((records[0].bytes_up, records[0].bytes_down), (3, 9));
}

/// An origin that (against `Connection: close`) keeps reading requests on a connection, records
/// each request head, answers each with `ok`, and reports `None` when the proxy closes the
/// connection: what a lenient or virtual-hosting origin does with pipelined requests.
fn keep_alive_server() -> (u16, Receiver<Option<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        let _ = tx.send(None);
                        return;
                    }
                    head.push_str(&line);
                    if line == "\r\n" {
                        let _ = tx.send(Some(std::mem::take(&mut head)));
                        let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                    }
                }
            });
        }
    });
    (port, rx)
}

#[test]
fn a_pipelined_second_request_never_reaches_the_origin() {
    let (port, heads) = keep_alive_server();
    let h = start_pinned(port, Setup::default());
    let mut tcp = TcpStream::connect(h.addr).unwrap();
    let smuggled = "GET http://evil.example.test/steal HTTP/1.1\r\nHost: evil.example.test\r\n\r\n";
    tcp.write_all(format!("GET http://{HOST}:{port}/one HTTP/1.1\r\n\r\n{smuggled}").as_bytes())
        .unwrap();
    let response = read_response(&mut tcp, false);
    assert_eq!(response.status, 200);
    drop(tcp);
    let mut seen = Vec::new();
    while let Some(head) = heads.recv_timeout(Duration::from_secs(30)).unwrap() {
        seen.push(head);
    }
    assert_eq!(
        seen,
        vec![format!(
            "GET /one HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n"
        )]
    );
    let (_, records) = h.stop();
    assert_eq!(
        records[0].detail.as_deref(),
        Some(format!("{} bytes the client sent after the request were not forwarded (one request per connection)", smuggled.len()).as_str())
    );
}

#[test]
fn bytes_after_a_request_body_are_not_forwarded() {
    let (port, heads) = keep_alive_server();
    let h = start_pinned(port, Setup::default());
    let mut tcp = TcpStream::connect(h.addr).unwrap();
    // A body of 4 bytes, then a request disguised as more body.
    let request = format!("POST http://{HOST}:{port}/a HTTP/1.1\r\nContent-Length: 4\r\n\r\nbodyGET /evil HTTP/1.1\r\nHost: evil.example.test\r\n\r\n");
    tcp.write_all(request.as_bytes()).unwrap();
    assert_eq!(read_response(&mut tcp, false).status, 200);
    drop(tcp);
    let mut seen = Vec::new();
    while let Some(head) = heads.recv_timeout(Duration::from_secs(30)).unwrap() {
        seen.push(head);
    }
    // The origin saw the head, then `body` as the start of a line that never ended.
    assert_eq!(seen, vec![format!("POST /a HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Length: 4\r\nConnection: close\r\n\r\n")]);
}

/// A TCP server that reports how many bytes each connection carried to it, when it closes.
fn byte_counting_server() -> (u16, Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut all = Vec::new();
                let _ = stream.read_to_end(&mut all);
                let _ = tx.send(all.len());
            });
        }
    });
    (port, rx)
}

/// A TLS client that opens TLS for `name` over `tcp`, trusting nothing (the handshake cannot
/// complete; only its ClientHello matters).
fn client_hello_for(name: &str, tcp: &mut TcpStream) {
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
    while conn.wants_write() {
        conn.write_tls(tcp).unwrap();
    }
}

#[test]
fn a_tunnel_whose_client_hello_names_another_host_is_closed_before_any_byte_reaches_it() {
    let (port, received) = byte_counting_server();
    let h = start_pinned(
        port,
        Setup {
            sni_ports: &[port],
            ..Setup::default()
        },
    );
    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    client_hello_for("evil.example.test", &mut tcp);
    let mut rest = Vec::new();
    let _ = tcp.read_to_end(&mut rest);
    assert!(rest.is_empty(), "the tunnel was closed");
    assert_eq!(
        received.recv_timeout(Duration::from_secs(30)).unwrap(),
        0,
        "the destination got no byte"
    );
    let (stats, records) = h.stop();
    assert_eq!((stats.allowed, stats.denied), (0, 1));
    assert_eq!(
        (records[0].decision, records[0].reason.as_deref()),
        (Decision::Denied, Some("sni_mismatch"))
    );
    assert_eq!(
        records[0].detail.as_deref(),
        Some(format!("the tunnel to {HOST}:{port} opened TLS for `evil.example.test`; the server name must be the CONNECT host (list the endpoint in sni_check_exempt if it needs otherwise)").as_str())
    );
}

#[test]
fn a_checked_tunnel_that_does_not_open_with_tls_is_closed() {
    let (port, received) = byte_counting_server();
    let h = start_pinned(
        port,
        Setup {
            sni_ports: &[port],
            ..Setup::default()
        },
    );
    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n")
        .unwrap();
    let mut rest = Vec::new();
    let _ = tcp.read_to_end(&mut rest);
    assert_eq!(received.recv_timeout(Duration::from_secs(30)).unwrap(), 0);
    let (_, records) = h.stop();
    assert_eq!(records[0].reason.as_deref(), Some("not_tls"));
}

#[test]
fn an_exempt_endpoint_skips_the_sni_check() {
    let (port, received) = byte_counting_server();
    let allow = [format!("{HOST}:{port}")];
    let pins = [format!("{HOST}:{port}:127.0.0.1")];
    let config = EgressConfig::from_parts(&allow, &[], &pins, None, Limits::default())
        .unwrap()
        .with_sni_ports(&[port])
        .with_sni_exempt(&allow)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&SafeDir::open(dir.path()).unwrap(), "egress.jsonl").unwrap();
    let proxy = Proxy::start(
        config,
        TcpListener::bind("127.0.0.1:0").unwrap(),
        audit,
        "agent",
        &ProxyStats::default(),
    )
    .unwrap();
    let mut tcp = TcpStream::connect(proxy.local_addr()).unwrap();
    tcp.write_all(connect_request(&format!("{HOST}:{port}")).as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut tcp, false).status, 200);
    client_hello_for("other.example.test", &mut tcp);
    tcp.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(
        received.recv_timeout(Duration::from_secs(30)).unwrap() > 0,
        "the ClientHello was relayed"
    );
    assert_eq!(proxy.stop().allowed, 1);
}

/// A resolver that records every name it is asked for and answers 127.0.0.1.
#[derive(Default)]
struct RecordingResolver(std::sync::Mutex<Vec<String>>);

impl loopexec::egress::Resolver for RecordingResolver {
    fn resolve(&self, host: &str, _port: u16) -> Result<Vec<IpAddr>, String> {
        self.0.lock().unwrap().push(host.to_string());
        Ok(vec![ip("127.0.0.1")])
    }
}

#[test]
fn a_wildcard_name_whose_labels_carry_data_is_refused_before_any_resolver_sees_it() {
    let port = echo_server();
    let allow = [format!("*.example.test:{port}")];
    let config = EgressConfig::from_parts(
        &allow,
        &["127.0.0.1".to_string()],
        &[],
        None,
        Limits::default(),
    )
    .unwrap();
    let resolver = Arc::new(RecordingResolver::default());
    let config = config.with_resolver(resolver.clone());
    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&SafeDir::open(dir.path()).unwrap(), "egress.jsonl").unwrap();
    let proxy = Proxy::start(
        config,
        TcpListener::bind("127.0.0.1:0").unwrap(),
        audit,
        "agent",
        &ProxyStats::default(),
    )
    .unwrap();
    let exfiltrating = [
        "c2vjcmv0lwtles0xmjm0nty3odkwywjjzgvm.example.test", // one 36-byte label
        "part1.part2.part3.example.test",                    // three labels
        "key_0123.example.test",                             // `_`: no host name has one
    ];
    for name in exfiltrating {
        let r = ask(
            proxy.local_addr(),
            &connect_request(&format!("{name}:{port}")),
        );
        assert_eq!(r.status, 403, "{name}");
        assert!(
            denied(&r).starts_with(&format!(
                "wildcard_name_refused: {name} matches *.example.test:{port}, but "
            )),
            "{}",
            denied(&r)
        );
    }
    assert!(
        resolver.0.lock().unwrap().is_empty(),
        "no refused name reached the resolver"
    );
    let mut tcp = TcpStream::connect(proxy.local_addr()).unwrap();
    tcp.write_all(connect_request(&format!("eu-west.api.example.test:{port}")).as_bytes())
        .unwrap();
    assert_eq!(
        read_response(&mut tcp, false).status,
        200,
        "a host-shaped name is resolved and allowed"
    );
    assert_eq!(
        *resolver.0.lock().unwrap(),
        vec!["eu-west.api.example.test".to_string()]
    );
}

#[test]
fn a_flood_of_refused_requests_leaves_a_bounded_log_with_exact_counts() {
    let h = start(Setup {
        allow: &[HOST.to_string()],
        denied_lines: 8,
        ..Setup::default()
    });
    for i in 0..1000 {
        let request = if i % 2 == 0 {
            connect_request(&format!("flood{i}.example.test:443"))
        } else {
            "garbage\r\n\r\n".to_string()
        };
        assert!(matches!(ask(h.addr, &request).status, 403 | 400));
    }
    let stats = h.proxy.stop();
    assert_eq!(stats.denied, 1000);
    let bytes = std::fs::read(h.dir.path().join("egress.jsonl")).unwrap();
    let records: Vec<AuditRecord> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    // 8 lines of their own, aggregates when the step's refusals reach 16, 32, ..., 512, and the
    // rest when the step ends.
    assert_eq!(records.len(), 8 + 6 + 1);
    assert!(records[..8].iter().all(|r| r.aggregated.is_none()));
    let counts: Vec<u64> = records[8..]
        .iter()
        .map(|r| r.aggregated.as_ref().unwrap().values().sum())
        .collect();
    assert_eq!(counts, vec![8, 16, 32, 64, 128, 256, 488]);
    let last = records.last().unwrap().aggregated.clone().unwrap();
    assert_eq!((last["no_matching_rule"], last["malformed"]), (244, 244));
    let summary = loopexec::egress::audit::summarize(&bytes).unwrap();
    assert_eq!(summary.denied, 1000, "the counts add up exactly");
    use sha2::Digest;
    assert_eq!(
        h.digest.sha256_hex(),
        Some(hex::encode(sha2::Sha256::digest(&bytes))),
        "the aggregate lines are in the digest"
    );
}

// ---------------------------------------------------------------- relay edges: caps, half-close, resets

/// Close `stream` with a reset (RST) instead of an orderly end-of-stream (FIN).
fn reset(stream: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    nix::sys::socket::setsockopt(&stream, nix::sys::socket::sockopt::Linger, &linger).unwrap();
    drop(stream);
}

/// `n` bytes of a pattern that does not repeat at any power-of-two stride, so a lost, doubled or
/// reordered chunk shows.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// A server that sends `pattern(bytes)` as soon as a connection opens, then closes it, or resets
/// it if `reset_after` (without ever sending end-of-stream).
fn sending_server(bytes: usize, reset_after: bool) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = stream.write_all(&pattern(bytes));
                if reset_after {
                    // Wait until the proxy has read everything, so the reset is what ends it.
                    std::thread::sleep(Duration::from_millis(200));
                    reset(stream);
                }
            });
        }
    });
    port
}

/// A server that reads a connection to its end-of-stream, then answers how many bytes it read
/// (8 bytes, little-endian) and closes.
fn counting_then_answering_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut all = Vec::new();
                if stream.read_to_end(&mut all).is_ok() {
                    let _ = stream.write_all(&(all.len() as u64).to_le_bytes());
                }
            });
        }
    });
    port
}

/// The one allowed connection's audit line, once the proxy has stopped.
fn allowed_line(records: &[AuditRecord]) -> &AuditRecord {
    let allowed: Vec<_> = records
        .iter()
        .filter(|r| r.decision == Decision::Allowed)
        .collect();
    assert_eq!(allowed.len(), 1, "{records:?}");
    allowed[0]
}

#[test]
fn a_byte_cap_reached_mid_splice_in_a_tunnel_delivers_exactly_the_cap_downwards() {
    let cap = 3_000_001; // not a multiple of any pipe, page or buffer size
    let port = sending_server(8 << 20, false);
    let h = start_pinned(
        port,
        Setup {
            limits: Limits {
                max_bytes: cap,
                ..Limits::default()
            },
            ..Setup::default()
        },
    );
    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    let mut got = Vec::new();
    tcp.read_to_end(&mut got).unwrap();
    assert_eq!(got, pattern(cap as usize));
    wait_allowed(&h, 1);
    let (stats, records) = h.stop();
    let line = allowed_line(&records);
    assert_eq!(line.end.as_deref(), Some("byte_cap"));
    assert_eq!((line.bytes_up, line.bytes_down), (0, cap));
    assert_eq!((stats.bytes_down, stats.byte_cap_hits), (cap, 1));
}

#[test]
fn a_byte_cap_reached_mid_splice_in_a_tunnel_delivers_exactly_the_cap_upwards() {
    let cap = 3_000_001;
    let (port, received) = byte_counting_server();
    let h = start_pinned(
        port,
        Setup {
            limits: Limits {
                max_bytes: cap,
                ..Limits::default()
            },
            ..Setup::default()
        },
    );
    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    // The proxy cuts the tunnel at the cap, so writing the rest fails part-way.
    let _ = tcp.write_all(&pattern(8 << 20));
    assert_eq!(
        received.recv_timeout(Duration::from_secs(30)).unwrap(),
        cap as usize
    );
    wait_allowed(&h, 1);
    let (stats, records) = h.stop();
    let line = allowed_line(&records);
    assert_eq!(line.end.as_deref(), Some("byte_cap"));
    assert_eq!((line.bytes_up, line.bytes_down), (cap, 0));
    assert_eq!((stats.bytes_up, stats.byte_cap_hits), (cap, 1));
}

#[test]
fn a_clients_half_close_reaches_the_server_and_its_answer_still_comes_back() {
    let port = counting_then_answering_server();
    let h = start_pinned(port, Setup::default());
    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    tcp.write_all(&pattern(300_000)).unwrap();
    tcp.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).unwrap();
    assert_eq!(answer, 300_000u64.to_le_bytes());
    wait_allowed(&h, 1);
    let (_, records) = h.stop();
    let line = allowed_line(&records);
    assert_eq!(
        (line.end.as_deref(), line.bytes_up, line.bytes_down),
        (Some("closed"), 300_000, 8)
    );
}

#[test]
fn a_servers_half_close_reaches_the_client_which_can_still_send() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, received) = channel();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let _ = stream.write_all(b"bye\n");
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut all = Vec::new();
        let _ = stream.read_to_end(&mut all);
        let _ = tx.send(all);
    });
    let h = start_pinned(port, Setup::default());
    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    let mut down = Vec::new();
    tcp.read_to_end(&mut down).unwrap();
    assert_eq!(down, b"bye\n");
    tcp.write_all(&pattern(200_000)).unwrap();
    tcp.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(
        received.recv_timeout(Duration::from_secs(30)).unwrap(),
        pattern(200_000)
    );
    wait_allowed(&h, 1);
    let (_, records) = h.stop();
    let line = allowed_line(&records);
    assert_eq!(
        (line.end.as_deref(), line.bytes_up, line.bytes_down),
        (Some("closed"), 200_000, 4)
    );
}

#[test]
fn a_server_reset_mid_download_closes_the_tunnel_and_is_audited_with_the_bytes_delivered() {
    let port = sending_server(1 << 20, true);
    let h = start_pinned(port, Setup::default());
    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    let mut got = Vec::new();
    tcp.read_to_end(&mut got).unwrap();
    assert_eq!(got, pattern(1 << 20));
    wait_allowed(&h, 1);
    let (stats, records) = h.stop();
    let line = allowed_line(&records);
    assert_eq!(
        (line.end.as_deref(), line.bytes_up, line.bytes_down),
        (
            Some("error: Connection reset by peer (os error 104)"),
            0,
            1 << 20
        )
    );
    assert_eq!(stats.bytes_down, 1 << 20);
}

#[test]
fn a_client_reset_mid_upload_closes_the_connection_and_is_audited_with_the_bytes_delivered() {
    let (port, received) = byte_counting_server();
    let h = start_pinned(port, Setup::default());
    let mut tcp = open_tunnel(&h, &format!("{HOST}:{port}"));
    tcp.write_all(&pattern(1 << 20)).unwrap();
    // Let the proxy relay what was sent, then reset instead of closing.
    std::thread::sleep(Duration::from_millis(200));
    reset(tcp);
    let delivered = received.recv_timeout(Duration::from_secs(30)).unwrap();
    wait_allowed(&h, 1);
    let (stats, records) = h.stop();
    let line = allowed_line(&records);
    assert_eq!(
        (line.end.as_deref(), line.bytes_up, line.bytes_down),
        (
            Some("error: Connection reset by peer (os error 104)"),
            delivered as u64,
            0
        )
    );
    assert_eq!((delivered, stats.bytes_up), (1 << 20, 1 << 20));
}
