//! The five channels an escalation goes out on and what each sends: `file` (the packet's bytes,
//! written atomically to `--out`), `stdout` (the packet as the command's one JSON object),
//! `webhook` (the packet's bytes POSTed), `slack` (an incoming-webhook payload, `text` plus
//! `blocks`, [`slack_payload`]) and `github` (an issue or pull-request comment,
//! [`github_body`], POSTed to `{api}/repos/{owner}/{repo}/issues/{n}/comments`). Every HTTP
//! delivery carries `X-Loopexec-Receipt-Sha256` and `X-Loopexec-Packet-Sha256`, and with a key
//! the signature headers of [`super::signature`]. The chat texts carry the run's strings only
//! through [`super::text::slack`] / [`super::text::github`].

use super::config::{Channel, Target};
use super::http::{self, Delivered, DeliveryError};
use super::packet::Packet;
use super::text;
use serde_json::{json, Value};
use std::io::Write;

pub const RECEIPT_HEADER: &str = "X-Loopexec-Receipt-Sha256";
pub const PACKET_HEADER: &str = "X-Loopexec-Packet-Sha256";

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Written (file), printed (stdout) or answered 2xx (HTTP; status and tries).
    Delivered {
        status: Option<u16>,
        attempts: u32,
    },
    Failed(Failure),
}

/// A delivery that did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Http(DeliveryError),
    File(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Http(e) => e.fmt(f),
            Failure::File(e) => f.write_str(e),
        }
    }
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn commands(packet: &Packet) -> Vec<String> {
    packet.value["continue"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The Slack incoming-webhook payload: a `text` (the notification) and `blocks`.
pub fn slack_payload(packet: &Packet, packet_sha256: &str) -> Value {
    let v = &packet.value;
    let headline = text::slack(&packet.headline());
    let mut facts = Vec::new();
    if v["halted"] == true {
        facts.push(format!(
            "*Halt:* {} (exit {}) at iteration {}",
            text::slack(s(v, "/halt/reason")),
            v["halt"]["exit_code"],
            v["halt"]["iteration"]
        ));
        facts.push(format!("*Detail:* {}", text::slack(s(v, "/halt/detail"))));
    } else {
        facts.push(format!("*State:* {}", text::slack(s(v, "/state"))));
    }
    if let Some(verdict) = v
        .pointer("/explanation/verdict/verdict")
        .and_then(Value::as_str)
    {
        facts.push(format!(
            "*Verdict:* {}: {}",
            text::slack(verdict),
            text::slack(s(v, "/explanation/verdict/because"))
        ));
    }
    facts.push(format!("*Decide:* {}", text::slack(s(v, "/decide"))));
    let continue_with = commands(packet)
        .iter()
        .map(|c| text::slack(c))
        .collect::<Vec<_>>()
        .join("\n");
    let receipt = format!(
        "receipt sha256 {} ({}) · packet sha256 {packet_sha256}",
        text::slack(s(v, "/receipt/sha256")),
        if v["receipt"]["sealed"] == true {
            "sealed"
        } else {
            "not sealed"
        }
    );
    json!({
        "text": headline,
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": text::bounded(&headline, 140)}},
            {"type": "section", "text": {"type": "mrkdwn", "text": facts.join("\n")}},
            {"type": "section", "text": {"type": "mrkdwn", "text": format!("*Continue with:*\n```{continue_with}```")}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": receipt}]},
        ],
    })
}

/// The GitHub comment's markdown.
pub fn github_body(packet: &Packet, packet_sha256: &str) -> String {
    let v = &packet.value;
    let mut out = format!("### {}\n\n", text::github(&packet.headline()));
    if v["halted"] == true {
        out.push_str(&format!(
            "**Halt:** {} (exit {}) at iteration {}\n\n**Detail:** {}\n\n",
            text::github(s(v, "/halt/reason")),
            v["halt"]["exit_code"],
            v["halt"]["iteration"],
            text::github(s(v, "/halt/detail"))
        ));
    } else {
        out.push_str(&format!("**State:** {}\n\n", text::github(s(v, "/state"))));
    }
    if let Some(verdict) = v
        .pointer("/explanation/verdict/verdict")
        .and_then(Value::as_str)
    {
        out.push_str(&format!(
            "**Verdict:** {}: {}\n\n",
            text::github(verdict),
            text::github(s(v, "/explanation/verdict/because"))
        ));
    }
    out.push_str(&format!(
        "**Decide:** {}\n\n**Continue with:**\n\n",
        text::github(s(v, "/decide"))
    ));
    for c in commands(packet) {
        out.push_str(&format!("- {}\n", text::github(&c)));
    }
    out.push_str(&format!(
        "\nReceipt sha256 {} ({}), packet sha256 {packet_sha256}\n",
        text::github(s(v, "/receipt/sha256")),
        if v["receipt"]["sealed"] == true {
            "sealed"
        } else {
            "not sealed"
        }
    ));
    out
}

/// The HTTP request a channel sends: URL, body and headers (secrets included: never logged).
struct Request {
    url: String,
    body: Vec<u8>,
    headers: Vec<(String, String)>,
}

fn request(
    target: &Target,
    packet: &Packet,
    receipt_sha256: &str,
    timestamp: u64,
) -> Option<Request> {
    let digest = packet.sha256();
    let (url, body, mut headers) = match &target.channel {
        Channel::File { .. } | Channel::Stdout => return None,
        Channel::Webhook { url } => (url.clone(), packet.bytes().to_vec(), vec![]),
        Channel::Slack { url, .. } => (
            url.expose().to_string(),
            serde_json::to_vec(&slack_payload(packet, &digest)).unwrap_or_default(),
            vec![],
        ),
        Channel::Github {
            api,
            repo,
            issue,
            token,
            ..
        } => (
            format!("{api}/repos/{repo}/issues/{issue}/comments"),
            serde_json::to_vec(&json!({"body": github_body(packet, &digest)})).unwrap_or_default(),
            vec![
                (
                    "Authorization".to_string(),
                    format!("Bearer {}", token.expose()),
                ),
                (
                    "Accept".to_string(),
                    "application/vnd.github+json".to_string(),
                ),
                ("X-GitHub-Api-Version".to_string(), "2022-11-28".to_string()),
            ],
        ),
    };
    headers.push(("Content-Type".into(), "application/json".into()));
    headers.push((
        "User-Agent".into(),
        format!("loopexec/{}", env!("CARGO_PKG_VERSION")),
    ));
    headers.push((RECEIPT_HEADER.into(), receipt_sha256.to_string()));
    headers.push((PACKET_HEADER.into(), digest));
    if let Some((key, _)) = &target.hmac_key {
        if let Some(sig) = super::signature::sign(key.expose().as_bytes(), timestamp, &body) {
            headers.push((
                super::signature::TIMESTAMP_HEADER.into(),
                timestamp.to_string(),
            ));
            headers.push((super::signature::SIGNATURE_HEADER.into(), sig));
        }
    }
    Some(Request { url, body, headers })
}

/// Write `bytes` to `path` atomically: a temporary file beside it, fsynced, renamed over it.
fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<(), String> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let shown = crate::inert::inert(&path.display().to_string()).into_owned();
    let mut tmp = tempfile::NamedTempFile::new_in(parent).map_err(|e| format!("{shown}: {e}"))?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(|e| format!("{shown}: {e}"))?;
    tmp.persist(path)
        .map_err(|e| format!("{shown}: {}", e.error))?;
    Ok(())
}

/// Deliver `packet` to `target` (stdout: nothing to do here, the caller prints it).
pub fn deliver(target: &Target, packet: &Packet, receipt_sha256: &str) -> Outcome {
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match &target.channel {
        Channel::Stdout => Outcome::Delivered {
            status: None,
            attempts: 1,
        },
        Channel::File { out } => {
            let mut bytes = packet.bytes().to_vec();
            bytes.push(b'\n');
            match write_atomic(out, &bytes) {
                Ok(()) => Outcome::Delivered {
                    status: None,
                    attempts: 1,
                },
                Err(e) => Outcome::Failed(Failure::File(e)),
            }
        }
        _ => match request(target, packet, receipt_sha256, timestamp) {
            Some(r) => match http::post(&r.url, &r.headers, &r.body) {
                Ok(Delivered { status, attempts }) => Outcome::Delivered {
                    status: Some(status),
                    attempts,
                },
                Err(e) => Outcome::Failed(Failure::Http(e)),
            },
            None => Outcome::Delivered {
                status: None,
                attempts: 1,
            },
        },
    }
}
