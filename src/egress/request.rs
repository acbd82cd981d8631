//! Reading and understanding a proxy request head: bounded in size, header count and time, parsed
//! by `httparse`, and turned into a destination plus what to send upstream.
//!
//! Two forms are accepted: `CONNECT host:port` (a tunnel) and an absolute URI `METHOD http://...`
//! (plain HTTP/1.1). A forwarded plain-HTTP request is rewritten to origin-form, loses its
//! hop-by-hop headers, gets `Host` from the URI and `Connection: close`: one request per
//! connection; its body (framed by Content-Length or chunked, see `body`) is relayed unchanged
//! after the head, and nothing the client sends after the body reaches the origin.

use super::body::Framing;
use super::rule::{parse_port, Host};
use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Largest request head accepted (request line + headers).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header fields accepted.
pub const MAX_HEADERS: usize = 64;

/// Why no usable request came in.
#[derive(Debug)]
pub enum HeadError {
    /// The client closed before finishing a head.
    Closed,
    Timeout,
    TooLarge(String),
    Malformed(String),
    Unsupported(String),
    Io(std::io::Error),
}

/// What the client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestKind {
    /// A tunnel: answer 200 and relay bytes.
    Connect,
    /// Plain HTTP: send `head` (already rewritten) to the origin, then the body `framing` says.
    Forward { head: Vec<u8>, framing: Framing },
}

/// A parsed proxy request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRequest {
    pub method: String,
    pub host: Host,
    pub port: u16,
    pub kind: RequestKind,
}

/// Read bytes until the blank line ending a head, within `MAX_HEAD_BYTES` and `timeout` in total.
/// Returns the head (including the blank line) and whatever the client sent after it.
pub fn read_head(stream: &TcpStream, timeout: Duration) -> Result<(Vec<u8>, Vec<u8>), HeadError> {
    let deadline = Instant::now() + timeout;
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut reader = stream;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(HeadError::Timeout);
        }
        stream
            .set_read_timeout(Some(remaining))
            .map_err(HeadError::Io)?;
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Err(HeadError::Closed),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HeadError::Timeout)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(HeadError::Io(e)),
        };
        let search_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(pos) = find_blank_line(&buf[search_from..]) {
            let end = search_from + pos + 4;
            if end > MAX_HEAD_BYTES {
                return Err(HeadError::TooLarge(format!(
                    "request head over {MAX_HEAD_BYTES} bytes"
                )));
            }
            let rest = buf.split_off(end);
            stream.set_read_timeout(None).map_err(HeadError::Io)?;
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(HeadError::TooLarge(format!(
                "request head over {MAX_HEAD_BYTES} bytes"
            )));
        }
    }
}

fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n")
}

/// Headers a proxy must not forward (RFC 9110 §7.6.1), plus proxy credentials.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// Parse a complete head.
pub fn parse_head(head: &[u8]) -> Result<ProxyRequest, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => {
            return Err(HeadError::Malformed("incomplete request head".into()))
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HeadError::TooLarge(format!(
                "more than {MAX_HEADERS} header fields"
            )))
        }
        Err(e) => {
            return Err(HeadError::Malformed(format!(
                "unparseable request head ({e})"
            )))
        }
    }
    let method = req.method.unwrap_or_default().to_string();
    let target = req.path.unwrap_or_default();
    if req.version != Some(1) && req.version != Some(0) {
        return Err(HeadError::Unsupported("only HTTP/1.x is spoken".into()));
    }
    if method == "CONNECT" {
        let (host, port) = parse_authority(target, None)?;
        return Ok(ProxyRequest {
            method,
            host,
            port,
            kind: RequestKind::Connect,
        });
    }
    let (host, port, authority, origin) = parse_absolute_uri(target)?;
    let (head, framing) = rewrite_head(&method, &origin, &authority, req.headers)?;
    Ok(ProxyRequest {
        method,
        host,
        port,
        kind: RequestKind::Forward { head, framing },
    })
}

/// Parse `host:port` (CONNECT) or `host[:port]` (URI authority, with `default_port`).
fn parse_authority(text: &str, default_port: Option<u16>) -> Result<(Host, u16), HeadError> {
    let bad =
        |why: &str| HeadError::Malformed(format!("bad authority `{}`: {why}", printable(text)));
    if text.is_empty()
        || text
            .bytes()
            .any(|b| b <= b' ' || b == 0x7f || b"/?#@\\%".contains(&b))
    {
        return Err(bad("empty or contains characters not allowed in host:port"));
    }
    let (host, port) = if text.starts_with('[') {
        let end = text.find(']').ok_or_else(|| bad("unclosed `[`"))?;
        let rest = &text[end + 1..];
        let port = match rest.strip_prefix(':') {
            Some(p) => Some(p),
            None if rest.is_empty() => None,
            None => return Err(bad("text after `]`")),
        };
        (&text[..=end], port)
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    let port = match (port, default_port) {
        (Some(p), _) => parse_port(p).map_err(|e| bad(&e))?,
        (None, Some(d)) => d,
        (None, None) => return Err(bad("CONNECT needs host:port")),
    };
    let host = Host::parse(host).map_err(|e| bad(&e))?;
    Ok((host, port))
}

/// Split `http://authority/path?query` into host, port, the authority to send as `Host`, and the
/// origin-form target (fragment dropped, path bytes kept as sent).
fn parse_absolute_uri(target: &str) -> Result<(Host, u16, String, String), HeadError> {
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err(HeadError::Unsupported(
            "a proxy request needs an absolute URI (http://host/...) or CONNECT".into(),
        ));
    };
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(HeadError::Unsupported(format!(
            "scheme `{}` is not forwarded; use CONNECT for TLS",
            printable(scheme)
        )));
    }
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..auth_end];
    let (host, port) = parse_authority(authority, Some(80))?;
    let mut origin = rest[auth_end..].split('#').next().unwrap_or("").to_string();
    if origin.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'\\') {
        return Err(HeadError::Malformed(
            "request target contains spaces, controls or `\\`".into(),
        ));
    }
    if !origin.starts_with('/') {
        origin.insert(0, '/');
    }
    let host_header = if port == 80 {
        authority_host(&host)
    } else {
        host.authority(port)
    };
    Ok((host, port, host_header, origin))
}

fn authority_host(host: &Host) -> String {
    match host {
        Host::Ip(std::net::IpAddr::V6(a)) => format!("[{a}]"),
        other => other.to_string(),
    }
}

/// Build the origin-form head (request line, `Host`, end-to-end headers, `Connection: close`) and
/// say how the body that follows is framed.
fn rewrite_head(
    method: &str,
    origin: &str,
    authority: &str,
    headers: &[httparse::Header<'_>],
) -> Result<(Vec<u8>, Framing), HeadError> {
    let mut drop_also: Vec<String> = Vec::new();
    let mut content_length: Option<&[u8]> = None;
    let mut transfer_encoding = false;
    for h in headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if name == "connection" {
            for token in String::from_utf8_lossy(h.value).split(',') {
                drop_also.push(token.trim().to_ascii_lowercase());
            }
        } else if name == "content-length" {
            if content_length.is_some_and(|v| v != h.value) {
                return Err(HeadError::Malformed(
                    "conflicting Content-Length headers".into(),
                ));
            }
            if h.value.is_empty() || !h.value.iter().all(u8::is_ascii_digit) {
                return Err(HeadError::Malformed(
                    "Content-Length is not a number".into(),
                ));
            }
            content_length = Some(h.value);
        } else if name == "transfer-encoding" {
            let value = String::from_utf8_lossy(h.value).to_ascii_lowercase();
            if value.rsplit(',').next().map(str::trim) != Some("chunked") {
                return Err(HeadError::Malformed(
                    "a request Transfer-Encoding must end in chunked".into(),
                ));
            }
            transfer_encoding = true;
        }
    }
    if content_length.is_some() && transfer_encoding {
        return Err(HeadError::Malformed(
            "both Content-Length and Transfer-Encoding".into(),
        ));
    }
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(
        format!("{method} {origin} HTTP/1.1\r\nHost: {authority}\r\n").as_bytes(),
    );
    for h in headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if name == "host" || HOP_BY_HOP.contains(&name.as_str()) || drop_also.contains(&name) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    let framing = match content_length {
        _ if transfer_encoding => Framing::Chunked,
        Some(digits) => Framing::Length(
            std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse().ok())
                .ok_or_else(|| HeadError::Malformed("Content-Length is out of range".into()))?,
        ),
        None => Framing::Empty,
    };
    Ok((out, framing))
}

/// Text safe to put in a header or log line: printable ASCII only, bounded length.
pub fn printable(text: &str) -> String {
    text.chars()
        .take(200)
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ProxyRequest, HeadError> {
        parse_head(text.as_bytes())
    }

    #[test]
    fn connect_names_host_and_port() {
        let req = parse("CONNECT API.Example.com.:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(
            (req.host, req.port, req.kind),
            (
                Host::Name("api.example.com".into()),
                443,
                RequestKind::Connect
            )
        );
    }

    #[test]
    fn connect_without_a_port_is_malformed() {
        assert!(matches!(
            parse("CONNECT api.example.com HTTP/1.1\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
    }

    #[test]
    fn connect_to_a_bracketed_ipv6_literal_parses_as_an_address() {
        let req = parse("CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(req.host, Host::Ip("::ffff:127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn an_absolute_uri_is_rewritten_to_origin_form_without_hop_by_hop_headers() {
        let req = parse(
            "POST http://api.example.com:8080/v1/x?y=1#frag HTTP/1.1\r\nHost: spoofed\r\nProxy-Authorization: Basic xx\r\n\
             Connection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nContent-Length: 3\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            (req.host.clone(), req.port),
            (Host::Name("api.example.com".into()), 8080)
        );
        let RequestKind::Forward { head, framing } = req.kind else {
            panic!("not forward")
        };
        assert_eq!(framing, Framing::Length(3));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "POST /v1/x?y=1 HTTP/1.1\r\nHost: api.example.com:8080\r\nContent-Length: 3\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn an_absolute_uri_defaults_to_port_80_and_path_slash() {
        let req = parse("GET http://example.com HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(req.port, 80);
        let RequestKind::Forward { head, framing } = req.kind else {
            panic!("not forward")
        };
        assert_eq!(framing, Framing::Empty);
        assert!(head.starts_with(b"GET / HTTP/1.1\r\nHost: example.com\r\n"));
    }

    #[test]
    fn origin_form_and_https_uris_are_unsupported() {
        assert!(matches!(
            parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            Err(HeadError::Unsupported(_))
        ));
        assert!(matches!(
            parse("GET https://a.example/ HTTP/1.1\r\n\r\n"),
            Err(HeadError::Unsupported(_))
        ));
    }

    #[test]
    fn userinfo_and_smuggling_shapes_are_malformed() {
        for head in [
            "GET http://user@a.example/ HTTP/1.1\r\n\r\n",
            "GET http://a.example\\@b.example/ HTTP/1.1\r\n\r\n",
            "POST http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "GET http://0x7f.1/ HTTP/1.1\r\n\r\n",
        ] {
            assert!(matches!(parse(head), Err(HeadError::Malformed(_))), "{head}");
        }
    }

    #[test]
    fn too_many_headers_is_too_large() {
        let mut head = String::from("CONNECT a.example:443 HTTP/1.1\r\n");
        for i in 0..=MAX_HEADERS {
            head.push_str(&format!("X-{i}: v\r\n"));
        }
        head.push_str("\r\n");
        assert!(matches!(parse(&head), Err(HeadError::TooLarge(_))));
    }
}
