//! Chaining through the operator's own proxy (`--egress-proxy URL`): the URL's rules, and opening a
//! CONNECT tunnel through it for a connection the allowlist already allowed.
//!
//! Only `http://host[:port]` is accepted. Credentials in the URL are refused: they would sit on the
//! command line and in the policy file. The upstream proxy's address goes through the same address
//! check as any destination, so a proxy on a private or loopback address must be listed in
//! `allow_addresses` (or its name pinned with `--resolve`).

use super::rule::{parse_port, Host};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Largest response head accepted from the upstream proxy.
const MAX_RESPONSE_HEAD: usize = 16 * 1024;

/// The operator's proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamProxy {
    pub host: Host,
    pub port: u16,
    /// `http://host:port`, for the audit log.
    pub display: String,
}

impl UpstreamProxy {
    /// Parse `http://host[:port][/]` (port 80 by default).
    pub fn parse(url: &str) -> Result<UpstreamProxy, String> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err("expected http://host:port".into());
        };
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(format!(
                "scheme `{scheme}` is not supported; only http:// proxies can be chained"
            ));
        }
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains('@') {
            return Err("credentials in the proxy URL are refused (they would be visible in argv and files)".into());
        }
        if authority.is_empty() || authority.contains(['/', '?', '#']) {
            return Err("expected http://host:port with no path".into());
        }
        let (host, port) = if authority.starts_with('[') {
            let end = authority.find(']').ok_or("unclosed `[`")?;
            match &authority[end + 1..] {
                "" => (&authority[..=end], 80),
                rest => (
                    &authority[..=end],
                    parse_port(rest.strip_prefix(':').ok_or("text after `]`")?)?,
                ),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, parse_port(p)?),
                None => (authority, 80),
            }
        };
        let host = Host::parse(host)?;
        let display = format!("http://{}", host.authority(port));
        Ok(UpstreamProxy {
            host,
            port,
            display,
        })
    }
}

/// Ask the upstream proxy (already connected on `stream`) for a tunnel to `authority`; on `200`
/// return any bytes it sent after its response head (they belong to the client).
pub fn open_tunnel(
    stream: &TcpStream,
    authority: &str,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    (&*stream)
        .write_all(request.as_bytes())
        .map_err(|e| format!("writing to the upstream proxy: {e}"))?;
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 2048];
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err("the upstream proxy did not answer in time".into());
        }
        stream
            .set_read_timeout(Some(remaining))
            .map_err(|e| e.to_string())?;
        let n = match (&*stream).read(&mut chunk) {
            Ok(0) => return Err("the upstream proxy closed the connection".into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err("the upstream proxy did not answer in time".into())
            }
            Err(e) => return Err(format!("reading from the upstream proxy: {e}")),
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                stream.set_read_timeout(None).map_err(|e| e.to_string())?;
                return match response.code {
                    Some(200) => Ok(buf[len..].to_vec()),
                    Some(code) => Err(format!(
                        "the upstream proxy answered {code} to CONNECT {authority}"
                    )),
                    None => Err("the upstream proxy sent no status".into()),
                };
            }
            Ok(httparse::Status::Partial) if buf.len() <= MAX_RESPONSE_HEAD => continue,
            Ok(httparse::Status::Partial) => {
                return Err("the upstream proxy's answer is too large".into())
            }
            Err(e) => return Err(format!("the upstream proxy's answer is malformed ({e})")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_url_parses_with_its_port_or_80() {
        let p = UpstreamProxy::parse("http://Proxy.Corp.example:3128/").unwrap();
        assert_eq!(
            (p.host, p.port, p.display.as_str()),
            (
                Host::Name("proxy.corp.example".into()),
                3128,
                "http://proxy.corp.example:3128"
            )
        );
        assert_eq!(UpstreamProxy::parse("http://[::1]").unwrap().port, 80);
    }

    #[test]
    fn credentials_other_schemes_and_paths_are_refused() {
        assert!(UpstreamProxy::parse("http://user:pw@proxy.example:3128")
            .unwrap_err()
            .contains("credentials"));
        assert!(UpstreamProxy::parse("https://proxy.example:3128")
            .unwrap_err()
            .contains("not supported"));
        assert!(UpstreamProxy::parse("socks5://proxy.example:1080").is_err());
        assert!(UpstreamProxy::parse("http://proxy.example:3128/path").is_err());
        assert!(UpstreamProxy::parse("proxy.example:3128").is_err());
    }
}
