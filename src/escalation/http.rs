//! One HTTP POST of an escalation, bounded: a 10 s timeout per try, no redirect followed (an
//! `Authorization` header never goes to another host), at most [`TRIES`] tries with exponential
//! backoff ([`BACKOFF_MS`], doubled each time) on connection errors, 5xx and 429, never on another
//! 4xx. A failure carries the last status and an escaped, bounded excerpt of the answer's body;
//! never the URL (a Slack webhook URL is a secret) nor the request's headers.

use std::io::Read;
use std::time::Duration;

pub const TRIES: u32 = 3;
pub const BACKOFF_MS: u64 = 200;
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an answer's body read (for the excerpt of a failure).
const MAX_ANSWER_BYTES: u64 = 4096;
/// The longest excerpt of an answer's body a failure shows.
const MAX_EXCERPT_CHARS: usize = 300;

/// A delivery that was answered with a 2xx.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub status: u16,
    pub attempts: u32,
}

/// A delivery that failed after its tries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryError {
    /// The last HTTP status, if any answer came.
    pub status: Option<u16>,
    pub attempts: u32,
    /// What went wrong, in words (a transport error's kind, or "HTTP 500").
    pub what: String,
    /// The answer's body, escaped and bounded (empty without an answer).
    pub excerpt: String,
}

impl std::fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} after {} tr{}",
            self.what,
            self.attempts,
            if self.attempts == 1 { "y" } else { "ies" }
        )?;
        if !self.excerpt.is_empty() {
            write!(f, "; the answer began: {}", self.excerpt)?;
        }
        Ok(())
    }
}

/// Whether `url` is an http or https URL with a host (anything else is refused before sending).
pub fn is_http_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    rest.is_some_and(|r| {
        !r.is_empty()
            && !r.starts_with('/')
            && !r.chars().any(|c| c.is_whitespace() || c.is_control())
    })
}

fn excerpt(resp: ureq::Response) -> String {
    let mut buf = Vec::new();
    let _ = resp
        .into_reader()
        .take(MAX_ANSWER_BYTES)
        .read_to_end(&mut buf);
    super::text::bounded(&crate::inert::inert_bytes(&buf), MAX_EXCERPT_CHARS)
}

/// POST `body` to `url` with `headers`, retried as the module says.
pub fn post(
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Delivered, DeliveryError> {
    let agent = ureq::AgentBuilder::new()
        .timeout(TIMEOUT)
        .redirects(0)
        .build();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut request = agent.post(url);
        for (name, value) in headers {
            request = request.set(name, value);
        }
        let (retry, error) = match request.send_bytes(body) {
            Ok(resp) if (200..300).contains(&resp.status()) => {
                return Ok(Delivered {
                    status: resp.status(),
                    attempts,
                })
            }
            Ok(resp) => {
                let status = resp.status();
                (
                    false,
                    DeliveryError {
                        status: Some(status),
                        attempts,
                        what: format!("HTTP {status}"),
                        excerpt: excerpt(resp),
                    },
                )
            }
            Err(ureq::Error::Status(status, resp)) => {
                let retry = status >= 500 || status == 429;
                (
                    retry,
                    DeliveryError {
                        status: Some(status),
                        attempts,
                        what: format!("HTTP {status}"),
                        excerpt: excerpt(resp),
                    },
                )
            }
            Err(ureq::Error::Transport(t)) => {
                use ureq::ErrorKind::*;
                let retry = matches!(t.kind(), ConnectionFailed | Dns | Io);
                // The kind only: a transport error's text names the URL.
                (
                    retry,
                    DeliveryError {
                        status: None,
                        attempts,
                        what: format!("transport error: {}", t.kind()),
                        excerpt: String::new(),
                    },
                )
            }
        };
        if !retry || attempts >= TRIES {
            return Err(error);
        }
        std::thread::sleep(Duration::from_millis(BACKOFF_MS << (attempts - 1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https_urls_with_a_host_are_accepted() {
        assert!(is_http_url("http://127.0.0.1:9/x"));
        assert!(is_http_url("HTTPS://hooks.example/a"));
        for bad in [
            "ftp://x/",
            "file:///etc/passwd",
            "https://",
            "http:///x",
            "javascript:alert(1)",
            "http://a b/",
        ] {
            assert!(!is_http_url(bad), "{bad}");
        }
    }
}
