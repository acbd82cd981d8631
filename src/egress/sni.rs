//! The TLS ClientHello at the start of a CONNECT tunnel to port 443: read (bounded in bytes and
//! time), parsed by `tls-parser`, and its server name (SNI) compared with the name the CONNECT
//! asked for. A tunnel to an allowed name whose ClientHello names another host is domain fronting
//! through the allowed name's TLS terminator, and is refused.
//!
//! The ClientHello may span several TLS records; their handshake fragments are joined (at most
//! `MAX_CLIENT_HELLO` bytes) before parsing. Every byte read is kept and relayed unchanged when
//! the check passes.

use super::request::printable;
use super::rule::Host;
use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tls_parser::{
    parse_tls_client_hello_extensions, parse_tls_message_handshake, parse_tls_raw_record, SNIType,
    TlsExtension, TlsMessage, TlsMessageHandshake, TlsRecordType,
};

/// Most bytes read while waiting for a complete ClientHello (records with their headers).
pub const MAX_CLIENT_HELLO: usize = 64 * 1024;

/// Why a tunnel's first bytes do not pass the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SniRefusal {
    /// Not a TLS handshake, or not a ClientHello, or one `tls-parser` cannot read.
    NotClientHello(String),
    /// The ClientHello names no server, though the CONNECT named a host.
    Missing,
    /// The ClientHello names another server than the CONNECT did.
    Mismatch { sni: String },
    /// The client closed, stalled or sent too much before the ClientHello was complete.
    Incomplete(String),
}

impl SniRefusal {
    /// The stable reason code for the audit log.
    pub fn reason(&self) -> &'static str {
        match self {
            SniRefusal::Mismatch { .. } | SniRefusal::Missing => "sni_mismatch",
            SniRefusal::NotClientHello(_) | SniRefusal::Incomplete(_) => "not_tls",
        }
    }

    /// A detail naming the CONNECT host (`authority`).
    pub fn detail(&self, authority: &str) -> String {
        match self {
            SniRefusal::Mismatch { sni } => format!("the tunnel to {authority} opened TLS for `{sni}`; the server name must be the CONNECT host (list the endpoint in sni_check_exempt if it needs otherwise)"),
            SniRefusal::Missing => format!("the tunnel to {authority} opened TLS naming no server; the server name must be the CONNECT host"),
            SniRefusal::NotClientHello(why) => format!("the tunnel to {authority} did not start with a TLS ClientHello ({why})"),
            SniRefusal::Incomplete(why) => format!("the tunnel to {authority}: {why}"),
        }
    }
}

/// The server name a ClientHello carries (the first `host_name` entry), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerName {
    Absent,
    Name(String),
}

/// Read the client's first bytes until they hold a complete ClientHello; returns every byte read
/// (to relay) and the server name it carries.
pub fn read_client_hello(
    client: &TcpStream,
    timeout: Duration,
    early: Vec<u8>,
) -> Result<(Vec<u8>, ServerName), SniRefusal> {
    let deadline = Instant::now() + timeout;
    let mut buf = early;
    let mut chunk = [0u8; 4096];
    loop {
        match client_hello_server_name(&buf) {
            Parsed::Done(name) => {
                let _ = client.set_read_timeout(None);
                return Ok((buf, name));
            }
            Parsed::Refused(refusal) => return Err(refusal),
            Parsed::NeedMore if buf.len() >= MAX_CLIENT_HELLO => {
                return Err(SniRefusal::Incomplete(format!(
                    "no complete ClientHello within {MAX_CLIENT_HELLO} bytes"
                )))
            }
            Parsed::NeedMore => {}
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() || client.set_read_timeout(Some(remaining)).is_err() {
            return Err(SniRefusal::Incomplete(
                "the ClientHello did not arrive in time".into(),
            ));
        }
        match (&*client).read(&mut chunk) {
            Ok(0) => {
                return Err(SniRefusal::Incomplete(
                    "the client closed before a complete ClientHello".into(),
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(SniRefusal::Incomplete(
                    "the ClientHello did not arrive in time".into(),
                ))
            }
            Err(e) => {
                return Err(SniRefusal::Incomplete(format!(
                    "reading the ClientHello: {e}"
                )))
            }
        }
    }
}

/// Check a tunnel's server name against the host its CONNECT named: a name must be the same name
/// (compared in normalised form); an IP literal must come with no server name.
pub fn check(connect_host: &Host, name: &ServerName) -> Result<(), SniRefusal> {
    match (connect_host, name) {
        (Host::Name(_), ServerName::Absent) => Err(SniRefusal::Missing),
        (Host::Ip(_), ServerName::Absent) => Ok(()),
        (host, ServerName::Name(sni)) => match Host::parse(sni) {
            Ok(parsed) if &parsed == host => Ok(()),
            _ => Err(SniRefusal::Mismatch {
                sni: printable(sni),
            }),
        },
    }
}

enum Parsed {
    NeedMore,
    Done(ServerName),
    Refused(SniRefusal),
}

/// Join the handshake fragments of the records in `buf` and parse the ClientHello once complete.
fn client_hello_server_name(buf: &[u8]) -> Parsed {
    let not_hello = |why: &str| Parsed::Refused(SniRefusal::NotClientHello(why.to_string()));
    let mut handshake: Vec<u8> = Vec::new();
    let mut rest = buf;
    loop {
        if handshake.len() >= 4 {
            let wanted = 4
                + (usize::from(handshake[1]) << 16
                    | usize::from(handshake[2]) << 8
                    | usize::from(handshake[3]));
            if handshake.len() >= wanted {
                return parse_hello(&handshake[..wanted]);
            }
        }
        if rest.is_empty() {
            return Parsed::NeedMore;
        }
        match parse_tls_raw_record(rest) {
            Ok((after, record)) => {
                if record.hdr.record_type != TlsRecordType::Handshake {
                    return not_hello("the first record is not a handshake");
                }
                if handshake.is_empty() && record.data.first().is_some_and(|t| *t != 1) {
                    return not_hello("the first handshake message is not a ClientHello");
                }
                handshake.extend_from_slice(record.data);
                rest = after;
            }
            Err(tls_parser::Err::Incomplete(_)) => {
                // A record header must still look like a TLS handshake record.
                if rest.first().is_some_and(|t| *t != 0x16) {
                    return not_hello("the first record is not a handshake");
                }
                return Parsed::NeedMore;
            }
            Err(_) => return not_hello("unreadable TLS record"),
        }
    }
}

fn parse_hello(message: &[u8]) -> Parsed {
    let not_hello = |why: &str| Parsed::Refused(SniRefusal::NotClientHello(why.to_string()));
    let hello = match parse_tls_message_handshake(message) {
        Ok((_, TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello)))) => hello,
        Ok(_) => return not_hello("the first handshake message is not a ClientHello"),
        Err(_) => return not_hello("unreadable ClientHello"),
    };
    let Some(ext) = hello.ext else {
        return Parsed::Done(ServerName::Absent);
    };
    let extensions = match parse_tls_client_hello_extensions(ext) {
        Ok((_, extensions)) => extensions,
        Err(_) => return not_hello("unreadable ClientHello extensions"),
    };
    for extension in extensions {
        if let TlsExtension::SNI(names) = extension {
            for (kind, name) in names {
                if kind == SNIType::HostName {
                    return match std::str::from_utf8(name) {
                        Ok(name) => Parsed::Done(ServerName::Name(name.to_string())),
                        Err(_) => Parsed::Refused(SniRefusal::Mismatch {
                            sni: printable(&String::from_utf8_lossy(name)),
                        }),
                    };
                }
            }
        }
    }
    Parsed::Done(ServerName::Absent)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as rustls writes it for `name`.
    fn client_hello(name: &str) -> Vec<u8> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let roots = rustls::RootCertStore::empty();
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), server).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    fn name_of(bytes: &[u8]) -> ServerName {
        match client_hello_server_name(bytes) {
            Parsed::Done(name) => name,
            Parsed::NeedMore => panic!("needs more"),
            Parsed::Refused(r) => panic!("refused: {r:?}"),
        }
    }

    #[test]
    fn the_server_name_of_a_client_hello_is_read() {
        assert_eq!(
            name_of(&client_hello("api.example.test")),
            ServerName::Name("api.example.test".into())
        );
    }

    #[test]
    fn a_client_hello_split_across_records_is_joined() {
        let hello = client_hello("api.example.test");
        let body = &hello[5..];
        let (a, b) = body.split_at(body.len() / 2);
        let mut split = Vec::new();
        for part in [a, b] {
            split.extend_from_slice(&[0x16, 0x03, 0x01]);
            split.extend_from_slice(&(part.len() as u16).to_be_bytes());
            split.extend_from_slice(part);
        }
        assert_eq!(name_of(&split), ServerName::Name("api.example.test".into()));
        assert!(matches!(
            client_hello_server_name(&split[..split.len() - 1]),
            Parsed::NeedMore
        ));
    }

    #[test]
    fn bytes_that_are_not_a_client_hello_are_refused() {
        assert!(matches!(
            client_hello_server_name(b"GET / HTTP/1.1\r\n\r\n"),
            Parsed::Refused(SniRefusal::NotClientHello(_))
        ));
    }

    #[test]
    fn the_check_compares_normalised_names_and_wants_none_for_an_ip_literal() {
        let host = Host::parse("api.example.test").unwrap();
        assert_eq!(
            check(&host, &ServerName::Name("API.example.test".into())),
            Ok(())
        );
        assert_eq!(
            check(&host, &ServerName::Name("evil.example.test".into())),
            Err(SniRefusal::Mismatch {
                sni: "evil.example.test".into()
            })
        );
        assert_eq!(check(&host, &ServerName::Absent), Err(SniRefusal::Missing));
        let ip = Host::parse("203.0.113.7").unwrap();
        assert_eq!(check(&ip, &ServerName::Absent), Ok(()));
        assert!(check(&ip, &ServerName::Name("evil.example.test".into())).is_err());
    }
}
