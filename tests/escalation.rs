//! `loopexec escalate` and `run --escalate-on` end to end (issue 21, item 5): each channel's
//! delivery received by a server on loopback and asserted (the webhook's packet, Slack's `text`
//! and `blocks`, GitHub's path and headers under an Enterprise API base), the HMAC verified with
//! the documented construction, retries on 5xx and none on 4xx, refusals before anything is sent
//! or written, secrets kept out of every output, `status` showing `escalation_pending`, and
//! hostile halt details neutralised in the chat texts.
mod common;
use common::*;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::mpsc;

/// One request a test server received.
#[derive(Debug)]
struct Received {
    line: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no header {name} in {:?}", self.headers))
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("json body")
    }
}

/// A server on 127.0.0.1 answering each request with the next of `answers` (status, body), then
/// closing; returns its port and the requests it received.
fn server(answers: &[(u16, &str)]) -> (u16, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let answers: Vec<(u16, String)> = answers.iter().map(|(s, b)| (*s, b.to_string())).collect();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for (status, answer) in answers {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut headers = HashMap::new();
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                let (k, v) = h.split_once(':').unwrap();
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
            let len: usize = headers
                .get("content-length")
                .map(|l| l.parse().unwrap())
                .unwrap_or(0);
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let _ = stream.flush();
            let _ = tx.send(Received {
                line: line.trim_end().to_string(),
                headers,
                body,
            });
        }
    });
    (port, rx)
}

fn all(rx: &mpsc::Receiver<Received>) -> Vec<Received> {
    rx.try_iter().collect()
}

/// A run halted `max_iterations_reached` on the host (no sandbox): the check fails once.
fn halted_run(run_id: &str) -> tempfile::TempDir {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--isolation",
            "none",
            "--run-id",
            run_id,
            "--check",
            "false",
            "--exec",
            "true",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (12, Some("max_iterations_reached")),
        "{r:?}"
    );
    dir
}

fn escalate(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let mut c = command();
    c.current_dir(dir).arg("escalate").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    from_output(c.output().expect("spawn loopexec"))
}

fn run_path(dir: &Path, run_id: &str, file: &str) -> std::path::PathBuf {
    dir.join(".loopexec/runs").join(run_id).join(file)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn escalations(dir: &Path, run_id: &str) -> Vec<Value> {
    let text =
        std::fs::read_to_string(run_path(dir, run_id, "escalations.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every byte the run left and the command printed, for asserting a secret is in none of them.
fn everything(dir: &Path, run_id: &str, r: &Ran) -> String {
    let mut text = format!("{}{}", r.stdout, r.stderr);
    for entry in std::fs::read_dir(dir.join(".loopexec/runs").join(run_id)).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            text.push_str(&String::from_utf8_lossy(&std::fs::read(path).unwrap()));
        }
    }
    text
}

#[test]
fn a_webhook_receives_the_packet_with_the_receipt_digest_and_a_verifiable_hmac() {
    let dir = halted_run("w1");
    let (port, rx) = server(&[(200, "ok")]);
    let url = format!("http://127.0.0.1:{port}/hook");
    let key = "hmac-key-0123456789";
    let r = escalate(
        dir.path(),
        &[
            "w1",
            "--json",
            "--channel",
            "webhook",
            "--webhook",
            &url,
            "--hmac-key-env",
            "LOOPEXEC_TEST_HMAC",
        ],
        &[("LOOPEXEC_TEST_HMAC", key)],
    );
    assert_eq!(r.code, 16, "{r:?}");
    let v = r.json();
    assert_eq!(v["status"], "escalation_pending");
    let got = all(&rx);
    assert_eq!(got.len(), 1);
    let req = &got[0];
    assert_eq!(req.line, "POST /hook HTTP/1.1");
    assert_eq!(req.header("content-type"), "application/json");
    let receipt = std::fs::read(run_path(dir.path(), "w1", "receipt.jsonl")).unwrap();
    assert_eq!(
        req.header("x-loopexec-receipt-sha256"),
        sha256_hex(&receipt)
    );
    assert_eq!(
        req.header("x-loopexec-packet-sha256"),
        sha256_hex(&req.body)
    );
    assert_eq!(v["escalation"]["packet_sha256"], sha256_hex(&req.body));
    // The documented construction: HMAC-SHA256(key, "<timestamp>.<body>"), hex, "sha256=" prefix.
    let timestamp = req.header("x-loopexec-timestamp");
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(&req.body);
    assert_eq!(
        req.header("x-loopexec-signature"),
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    );
    let packet = req.json();
    assert_eq!(packet["schema"], "loopexec.escalation/v1");
    assert_eq!(packet["run_id"], "w1");
    assert_eq!(packet["halt"]["reason"], "max_iterations_reached");
    assert_eq!(packet["halt"]["class"], "iteration_cap");
    assert_eq!(packet["halt"]["exit_code"], 12);
    assert_eq!(packet["receipt"]["sha256"], sha256_hex(&receipt));
    assert_eq!(packet["receipt"]["sealed"], true);
    assert_eq!(
        packet["explanation"]["verdict"]["verdict"]
            .as_str()
            .is_some(),
        true,
        "{packet}"
    );
    let wd = dir.path().canonicalize().unwrap();
    let continue_with: Vec<&str> = packet["continue"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        continue_with.last().copied(),
        Some(format!("loopexec verify w1 --workdir {}", wd.display()).as_str())
    );
    // The receipt is not appended to; the delivery is in escalations.jsonl; the key is nowhere.
    assert_eq!(
        std::fs::read(run_path(dir.path(), "w1", "receipt.jsonl")).unwrap(),
        receipt
    );
    let log = escalations(dir.path(), "w1");
    assert_eq!(log.len(), 1);
    assert_eq!(
        (
            log[0]["channel"].as_str(),
            log[0]["delivered"].as_bool(),
            log[0]["status"].as_u64()
        ),
        (Some("webhook"), Some(true), Some(200))
    );
    assert_eq!(log[0]["packet_sha256"], sha256_hex(&req.body));
    assert!(
        !everything(dir.path(), "w1", &r).contains(key),
        "the HMAC key leaked"
    );
}

#[test]
fn slack_gets_text_and_blocks_from_the_url_in_the_variable_loop_toml_names() {
    let dir = halted_run("s1");
    let (port, rx) = server(&[(200, "ok")]);
    let secret_url = format!("http://127.0.0.1:{port}/services/T000/B000/secretpart");
    std::fs::write(
        dir.path().join("loop.toml"),
        "[escalation]\nchannel = \"slack\"\nslack_webhook_env = \"LOOPEXEC_TEST_SLACK\"\n",
    )
    .unwrap();
    let r = escalate(
        dir.path(),
        &["s1", "--json"],
        &[("LOOPEXEC_TEST_SLACK", &secret_url)],
    );
    assert_eq!(r.code, 16, "{r:?}");
    let got = all(&rx);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].line, "POST /services/T000/B000/secretpart HTTP/1.1");
    let payload = got[0].json();
    assert_eq!(
        payload["text"],
        "loopexec run s1 halted maxˍiterationsˍreached (exit 12)\u{2236} a person must decide"
    );
    let types: Vec<&str> = payload["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["header", "section", "section", "context"]);
    assert_eq!(payload["blocks"][0]["text"]["type"], "plain_text");
    let facts = payload["blocks"][1]["text"]["text"].as_str().unwrap();
    assert!(
        facts.starts_with("*Halt:* maxˍiterationsˍreached (exit 12) at iteration 1\n*Detail:* "),
        "{facts}"
    );
    let packet_sha = r.json()["escalation"]["packet_sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let receipt = std::fs::read(run_path(dir.path(), "s1", "receipt.jsonl")).unwrap();
    assert_eq!(
        payload["blocks"][3]["elements"][0]["text"],
        format!(
            "receipt sha256 {} (sealed) · packet sha256 {packet_sha}",
            sha256_hex(&receipt)
        )
    );
    assert!(payload["blocks"][2]["text"]["text"]
        .as_str()
        .unwrap()
        .starts_with("*Continue with:*\n```"));
    assert_eq!(
        got[0].header("x-loopexec-receipt-sha256"),
        sha256_hex(&receipt)
    );
    assert!(
        got[0].headers.get("x-loopexec-signature").is_none(),
        "no key, no signature"
    );
    assert_eq!(
        escalations(dir.path(), "s1")[0]["target"],
        "$LOOPEXEC_TEST_SLACK"
    );
    assert!(
        !everything(dir.path(), "s1", &r).contains("secretpart"),
        "the Slack URL leaked"
    );
}

#[test]
fn github_comments_through_an_enterprise_api_base_with_the_token_as_bearer() {
    let dir = halted_run("g1");
    let (port, rx) = server(&[(201, "{}")]);
    std::fs::write(dir.path().join("loop.toml"), format!("[escalation]\ngithub_api = \"http://127.0.0.1:{port}/api/v3\"\ngithub_token_env = \"LOOPEXEC_TEST_GH\"\n")).unwrap();
    let r = escalate(
        dir.path(),
        &[
            "g1",
            "--json",
            "--channel",
            "github",
            "--github-repo",
            "octo/loop",
            "--github-issue",
            "7",
        ],
        &[("LOOPEXEC_TEST_GH", "ghp_testtoken123")],
    );
    assert_eq!(r.code, 16, "{r:?}");
    let got = all(&rx);
    assert_eq!(got.len(), 1);
    let req = &got[0];
    assert_eq!(
        req.line,
        "POST /api/v3/repos/octo/loop/issues/7/comments HTTP/1.1"
    );
    assert_eq!(req.header("authorization"), "Bearer ghp_testtoken123");
    assert_eq!(req.header("accept"), "application/vnd.github+json");
    assert_eq!(req.header("x-github-api-version"), "2022-11-28");
    let body = req.json()["body"].as_str().unwrap().to_string();
    assert!(body.starts_with("### loopexec run g1 halted max\\_iterations\\_reached \\(exit 12\\)\u{2236} a person must decide\n\n**Halt:** max\\_iterations\\_reached (exit 12) at iteration 1\n"), "{body}");
    assert_eq!(
        escalations(dir.path(), "g1")[0]["target"],
        format!("http://127.0.0.1:{port}/api/v3 octo/loop#7")
    );
    assert!(
        !everything(dir.path(), "g1", &r).contains("ghp_testtoken123"),
        "the token leaked"
    );
}

#[test]
fn a_500_is_retried_then_reported_with_its_status_and_body_and_recorded_as_undelivered() {
    let dir = halted_run("f1");
    let (port, rx) = server(&[
        (500, "boom\u{1b}[2J"),
        (500, "boom\u{1b}[2J"),
        (500, "boom\u{1b}[2J"),
    ]);
    let url = format!("http://127.0.0.1:{port}/hook");
    let r = escalate(
        dir.path(),
        &["f1", "--json", "--channel", "webhook", "--webhook", &url],
        &[],
    );
    assert_eq!(r.code, 40, "{r:?}");
    let v = r.json();
    assert_eq!(v["errors"][0]["code"], "delivery_failed");
    assert_eq!(v["errors"][0]["message"], "escalation over webhook not delivered: HTTP 500 after 3 tries; the answer began: boom\\x1b[2J");
    assert_eq!(all(&rx).len(), 3);
    let log = escalations(dir.path(), "f1");
    assert_eq!(
        (
            log.len(),
            log[0]["delivered"].as_bool(),
            log[0]["status"].as_u64(),
            log[0]["attempts"].as_u64()
        ),
        (1, Some(false), Some(500), Some(3))
    );
    let status = loopexec(dir.path(), &["status", "f1", "--json"]).json();
    assert_eq!(
        status["escalation"],
        Value::Null,
        "an undelivered escalation is not pending"
    );
}

#[test]
fn a_4xx_is_not_retried() {
    let dir = halted_run("f2");
    let (port, rx) = server(&[(404, "no such hook"), (200, "ok")]);
    let r = escalate(
        dir.path(),
        &[
            "f2",
            "--json",
            "--channel",
            "webhook",
            "--webhook",
            &format!("http://127.0.0.1:{port}/x"),
        ],
        &[],
    );
    assert_eq!(r.code, 40, "{r:?}");
    assert_eq!(r.json()["errors"][0]["message"], "escalation over webhook not delivered: HTTP 404 after 1 try; the answer began: no such hook");
    assert_eq!(all(&rx).len(), 1);
}

#[test]
fn a_non_http_webhook_is_exit_20_with_one_object_and_nothing_written() {
    let dir = halted_run("u1");
    for url in [
        "ftp://127.0.0.1/x",
        "file:///etc/passwd",
        "javascript:alert(1)",
    ] {
        let r = escalate(
            dir.path(),
            &["u1", "--json", "--channel", "webhook", "--webhook", url],
            &[],
        );
        assert_eq!(r.code, 20, "{url}: {r:?}");
        let v = r.json();
        assert_eq!(v["errors"][0]["code"], "usage");
        assert_eq!(
            v["errors"][0]["message"],
            "--webhook: only http:// and https:// URLs are accepted"
        );
    }
    assert!(!run_path(dir.path(), "u1", "escalations.jsonl").exists());
    assert!(!run_path(dir.path(), "u1", "escalation.json").exists());
}

#[test]
fn a_missing_secret_variable_is_exit_20_naming_it_and_nothing_is_sent_or_written() {
    let dir = halted_run("m1");
    let cases: [&[&str]; 3] = [
        &[
            "--channel",
            "slack",
            "--slack-webhook-env",
            "LOOPEXEC_TEST_UNSET_SLACK",
        ],
        &[
            "--channel",
            "github",
            "--github-repo",
            "o/r",
            "--github-issue",
            "1",
            "--github-token-env",
            "LOOPEXEC_TEST_UNSET_GH",
        ],
        &[
            "--channel",
            "file",
            "--hmac-key-env",
            "LOOPEXEC_TEST_UNSET_KEY",
        ],
    ];
    for (flags, var) in cases.iter().zip([
        "LOOPEXEC_TEST_UNSET_SLACK",
        "LOOPEXEC_TEST_UNSET_GH",
        "LOOPEXEC_TEST_UNSET_KEY",
    ]) {
        let mut args = vec!["m1", "--json"];
        args.extend_from_slice(flags);
        let r = escalate(dir.path(), &args, &[]);
        assert_eq!(r.code, 20, "{r:?}");
        let message = r.json()["errors"][0]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            message.ends_with(&format!(
                "the environment variable {var} is not set (or empty)"
            )),
            "{message}"
        );
    }
    assert!(!run_path(dir.path(), "m1", "escalations.jsonl").exists());
    assert!(!run_path(dir.path(), "m1", "escalation.json").exists());
}

#[test]
fn the_file_channel_writes_the_packet_and_status_shows_escalation_pending_with_its_digest() {
    let dir = halted_run("p1");
    let out = dir.path().join("packet.json");
    let r = escalate(
        dir.path(),
        &[
            "p1",
            "--json",
            "--channel",
            "file",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(r.code, 16, "{r:?}");
    let bytes = std::fs::read(&out).unwrap();
    let packet_bytes = bytes.strip_suffix(b"\n").unwrap();
    let digest = sha256_hex(packet_bytes);
    assert_eq!(r.json()["escalation"]["packet_sha256"], digest);
    let status = loopexec(dir.path(), &["status", "p1", "--json"]);
    let v = status.json();
    assert_eq!(v["state"], "halted");
    assert_eq!(v["halt_reason"], "max_iterations_reached");
    assert_eq!(
        (
            v["escalation"]["state"].as_str(),
            v["escalation"]["packet_sha256"].as_str()
        ),
        (Some("escalation_pending"), Some(digest.as_str()))
    );
    assert_eq!(v["escalation"]["chain_intact"], true);
    let human = loopexec(dir.path(), &["status", "p1"]).stdout;
    assert!(
        human.contains(&format!(
            "escalation   escalation_pending (packet sha256:{digest}, file at "
        )),
        "{human}"
    );
}

#[test]
fn the_stdout_channel_prints_the_packet_as_one_json_object() {
    let dir = halted_run("o1");
    let r = escalate(dir.path(), &["o1", "--channel", "stdout"], &[]);
    assert_eq!(r.code, 16, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{r:?}");
    let packet: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(
        (packet["schema"].as_str(), packet["run_id"].as_str()),
        (Some("loopexec.escalation/v1"), Some("o1"))
    );
    assert_eq!(
        escalations(dir.path(), "o1")[0]["packet_sha256"],
        sha256_hex(lines[0].as_bytes())
    );
}

#[test]
fn a_run_that_has_not_halted_is_escalated_with_the_command_that_resumes_it() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--once",
            "--no-baseline",
            "--isolation",
            "none",
            "--run-id",
            "n1",
            "--check",
            "false",
            "--exec",
            "true",
            "--max-iterations",
            "3",
        ],
    );
    assert_eq!(
        (r.code, r.json()["state"].as_str()),
        (0, Some("paused")),
        "{r:?}"
    );
    let r = escalate(dir.path(), &["n1", "--json", "--channel", "file"], &[]);
    assert_eq!(r.code, 16, "{r:?}");
    let packet: Value = serde_json::from_slice(
        &std::fs::read(run_path(dir.path(), "n1", "escalation.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (packet["halted"].as_bool(), packet["state"].as_str()),
        (Some(false), Some("paused"))
    );
    let wd = dir.path().canonicalize().unwrap();
    assert_eq!(
        packet["continue"][0],
        format!("loopexec run --resume n1 --workdir {}", wd.display())
    );
}

#[test]
fn run_escalate_on_its_halt_reason_escalates_and_exits_16_keeping_the_receipts_reason() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--isolation",
            "none",
            "--run-id",
            "a1",
            "--check",
            "false",
            "--exec",
            "true",
            "--max-iterations",
            "1",
            "--escalate-on",
            "max_iterations_reached",
            "--channel",
            "file",
        ],
    );
    assert_eq!(r.code, 16, "{r:?}");
    let v = r.json();
    assert_eq!(
        (v["status"].as_str(), v["halt_reason"].as_str()),
        (Some("halted"), Some("max_iterations_reached"))
    );
    assert_eq!(v["escalation"]["state"], "escalation_pending");
    let halt = events(dir.path(), "a1")
        .into_iter()
        .find(|e| e["type"] == "halt")
        .unwrap();
    assert_eq!(halt["halt_reason"], "max_iterations_reached");
    assert_eq!(escalations(dir.path(), "a1").len(), 1);
}

#[test]
fn run_escalate_on_a_class_name_matches_its_reasons_and_another_reason_does_not_escalate() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--isolation",
            "none",
            "--run-id",
            "c1",
            "--check",
            "false",
            "--exec",
            "true",
            "--max-iterations",
            "1",
            "--escalate-on",
            "budget,no_convergence",
            "--channel",
            "file",
        ],
    );
    assert_eq!(r.code, 12, "{r:?}");
    assert_eq!(r.json()["escalation"], Value::Null);
    assert!(!run_path(dir.path(), "c1", "escalations.jsonl").exists());
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--isolation",
            "none",
            "--run-id",
            "c2",
            "--check",
            "false",
            "--exec",
            "true",
            "--max-iterations",
            "1",
            "--escalate-on",
            "iteration_cap",
            "--channel",
            "stdout",
        ],
    );
    assert_eq!(r.code, 16, "{r:?}");
    assert_eq!(
        r.json()["escalation"]["packet"]["schema"],
        "loopexec.escalation/v1"
    );
}

#[test]
fn run_escalate_on_an_unknown_reason_is_exit_20_before_any_run() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--isolation",
            "none",
            "--check",
            "false",
            "--exec",
            "true",
            "--escalate-on",
            "budget_exeeded",
            "--channel",
            "file",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(
        r.json()["errors"][0]["message"],
        "escalate-on: `budget_exeeded` is neither a halt reason nor an exit class"
    );
    assert!(
        !dir.path().join(".loopexec/runs").exists()
            || std::fs::read_dir(dir.path().join(".loopexec/runs"))
                .unwrap()
                .next()
                .is_none()
    );
}

/// A run whose halt detail carries what the agent named: a protected file called
/// `@channel <!here> ESC[2J [a](x) ![i](y)` (the native sandbox, a detached workspace).
fn hostile_run() -> Option<tempfile::TempDir> {
    let dir = workdir();
    git(dir.path(), &["init", "-q", "."]);
    write(dir.path(), "guarded/a", "x\n");
    commit_t0(dir.path());
    let agent = r#"printf x > "guarded/@channel <!here> $(printf '\033')[2J [a](x) ![i](y)""#;
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--run-id",
            "h1",
            "--protect",
            "guarded/**",
            "--exec",
            agent,
            "--check",
            "true",
            "--max-iterations",
            "2",
        ],
    );
    if r.code == 30 {
        eprintln!("skipped: the native sandbox is not available here: {r:?}");
        return None;
    }
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (13, Some("blocked_path_modified")),
        "{r:?}"
    );
    Some(dir)
}

#[test]
fn hostile_halt_details_are_neutralised_in_slack_and_github_texts() {
    let Some(dir) = hostile_run() else { return };
    let (port, rx) = server(&[(200, "ok"), (201, "{}")]);
    let slack = format!("http://127.0.0.1:{port}/slack");
    let r = escalate(
        dir.path(),
        &[
            "h1",
            "--json",
            "--channel",
            "slack",
            "--slack-webhook-env",
            "LOOPEXEC_TEST_SLACK",
        ],
        &[("LOOPEXEC_TEST_SLACK", &slack)],
    );
    assert_eq!(r.code, 16, "{r:?}");
    let api = format!("http://127.0.0.1:{port}");
    let r = escalate(
        dir.path(),
        &[
            "h1",
            "--json",
            "--channel",
            "github",
            "--github-api",
            &api,
            "--github-repo",
            "o/r",
            "--github-issue",
            "2",
            "--github-token-env",
            "LOOPEXEC_TEST_GH",
        ],
        &[("LOOPEXEC_TEST_GH", "t")],
    );
    assert_eq!(r.code, 16, "{r:?}");
    let got = all(&rx);
    assert_eq!(got.len(), 2);
    let slack_facts = got[0].json()["blocks"][1]["text"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(slack_facts.contains("*Detail:* the agent changed protected paths\u{2236} guarded/(at)channel &lt;!here&gt; \\x1b[2J [a](x) ![i](y)"), "{slack_facts}");
    let github = got[1].json()["body"].as_str().unwrap().to_string();
    assert!(github.contains("**Detail:** the agent changed protected paths\u{2236} guarded/\\(at\\)channel \\<\\!here\\> \\\\x1b\\[2J \\[a\\]\\(x\\) \\!\\[i\\]\\(y\\)"), "{github}");
    // Slack links are `<url|label>` (neutralised above); GitHub's are markdown's.
    assert!(
        !github.contains("](x)") && !github.contains("![i]"),
        "{github}"
    );
    for text in [String::from_utf8_lossy(&got[0].body).into_owned(), github] {
        assert!(
            !text.contains("@channel")
                && !text.contains("<!here>")
                && !text.contains('\u{1b}')
                && !text.contains("\\u001b"),
            "{text}"
        );
    }
}

#[test]
fn an_edited_escalation_log_is_shown_broken_and_refused_before_anything_is_sent() {
    let dir = halted_run("b1");
    for _ in 0..2 {
        assert_eq!(
            escalate(dir.path(), &["b1", "--json", "--channel", "file"], &[]).code,
            16
        );
    }
    let path = run_path(dir.path(), "b1", "escalations.jsonl");
    let edited = std::fs::read_to_string(&path)
        .unwrap()
        .replacen("\"seq\":1", "\"seq\":9", 1);
    std::fs::write(&path, &edited).unwrap();
    let status = loopexec(dir.path(), &["status", "b1", "--json"]).json();
    assert_eq!(status["escalation"]["chain_intact"], false);
    let (port, rx) = server(&[(200, "ok")]);
    let r = escalate(
        dir.path(),
        &[
            "b1",
            "--json",
            "--channel",
            "webhook",
            "--webhook",
            &format!("http://127.0.0.1:{port}/"),
        ],
        &[],
    );
    assert_eq!(r.code, 30, "{r:?}");
    assert_eq!(
        r.json()["errors"][0]["message"],
        "escalations.jsonl: line 2 breaks its hash chain; nothing was sent"
    );
    assert_eq!(all(&rx).len(), 0);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), edited);
}

fn verify_run(dir: &Path, run_id: &str) -> Ran {
    let pubkey = path_str(&key_dir().join("operator.pub"));
    loopexec(dir, &["verify", "--json", run_id, "--pubkey", &pubkey])
}

#[test]
fn verify_checks_the_escalation_logs_chain_and_fails_an_edited_line() {
    let dir = halted_run("v1");
    let out = dir.path().join("packet.json");
    for _ in 0..2 {
        assert_eq!(
            escalate(
                dir.path(),
                &[
                    "v1",
                    "--json",
                    "--channel",
                    "file",
                    "--out",
                    out.to_str().unwrap()
                ],
                &[]
            )
            .code,
            16
        );
    }
    let r = verify_run(dir.path(), "v1");
    assert_eq!(r.code, 0, "{r:?}");
    let checks = r.json()["verify"]["checks"].as_array().unwrap().clone();
    assert_eq!(
        checks.iter().find(|c| c["name"] == "escalations").unwrap()["detail"],
        "2 escalation(s) of this run (2 delivered), hash chain intact"
    );
    // Rewriting the first attempt as undelivered breaks the second line's `prev`.
    let log = run_path(dir.path(), "v1", "escalations.jsonl");
    let text = std::fs::read_to_string(&log).unwrap().replacen(
        "\"delivered\":true",
        "\"delivered\":false",
        1,
    );
    std::fs::write(&log, text).unwrap();
    let r = verify_run(dir.path(), "v1");
    assert_ne!(r.code, 0, "{r:?}");
    let errors = r.json()["errors"].clone();
    assert_eq!(errors[0]["code"], "verify_escalations");
    assert_eq!(
        errors[0]["message"],
        "escalations.jsonl: line 2 breaks its hash chain (edited, removed or reordered)"
    );
}
