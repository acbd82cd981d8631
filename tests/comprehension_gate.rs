//! The comprehension gate (docs/gates.md, "The comprehension gate"): every accepted iteration of
//! a detached workspace adds its diff to the workspace's ledger; before each agent step, more
//! than `--comprehension-every N` of them unacked stop the run resumable (exit 19,
//! `comprehension_debt_exceeded`, not sealed); `loopexec ack` by a pinned reviewer key and a
//! resume clear it; a forged, unknown-key, replayed or chain-broken ack clears nothing.
mod common;
use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// A repository whose check passes once `notes.txt` has three lines; the agent adds one per
/// iteration, so iterations 1 and 2 are accepted red steps and iteration 3 is green.
fn repo() -> tempfile::TempDir {
    let dir = workdir();
    write(dir.path(), "notes.txt", "");
    write(
        dir.path(),
        "check.sh",
        "test \"$(wc -l < notes.txt)\" -ge 3\n",
    );
    commit_t0(dir.path());
    dir
}

/// A reviewer key pair made by `keygen --reviewer`: (its directory, its hex public key).
fn reviewer() -> (tempfile::TempDir, String) {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "keygen",
            "--json",
            "--reviewer",
            "--dir",
            &path_str(dir.path()),
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let hex = r.json()["keygen"]["public_key_hex"]
        .as_str()
        .unwrap()
        .to_string();
    (dir, hex)
}

fn key_of(dir: &Path) -> String {
    path_str(&dir.join("reviewer.key"))
}

fn gated_run(repo: &Path, id: &str, reviewer: &str) -> Ran {
    loopexec(
        repo,
        &[
            "run",
            "--json",
            "--run-id",
            id,
            "--exec",
            "echo x >> notes.txt",
            "--check",
            "sh check.sh",
            "--comprehension-every",
            "1",
            "--reviewer-pubkey",
            reviewer,
        ],
    )
}

fn of_type(repo: &Path, id: &str, kind: &str) -> Vec<Value> {
    events(repo, id)
        .into_iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

fn digest(from: &str, to: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"loopexec.diff/v1\0");
    h.update(from.as_bytes());
    h.update(b"\0");
    h.update(to.as_bytes());
    hex::encode(h.finalize())
}

/// The two diffs of iterations 1 and 2: t0 -> T1 -> T2.
fn diffs(repo: &Path, id: &str) -> Vec<String> {
    let t0 = of_type(repo, id, "workspace")[0]["tree_id"]
        .as_str()
        .unwrap()
        .to_string();
    let trees: Vec<String> = of_type(repo, id, "snapshot")
        .iter()
        .map(|s| s["tree_id"].as_str().unwrap().to_string())
        .collect();
    vec![digest(&t0, &trees[0]), digest(&trees[0], &trees[1])]
}

fn acks_file(repo: &Path) -> std::path::PathBuf {
    repo.join(".loopexec/comprehension/acks.jsonl")
}

fn resume(repo: &Path, id: &str) -> Ran {
    loopexec(repo, &["run", "--json", "--resume", id])
}

/// Asserts `r` is the gate's stop: exit 19, resumable, not sealed, after iteration 2.
fn assert_gated(r: &Ran) {
    let j = r.json();
    assert_eq!(
        (
            r.code,
            j["halt_reason"].as_str(),
            j["state"].as_str(),
            j["status"].as_str()
        ),
        (
            19,
            Some("comprehension_debt_exceeded"),
            Some("gated"),
            Some("gated")
        ),
        "{r:?}"
    );
    assert_eq!(
        (
            j["run"]["sealed"].as_bool(),
            j["run"]["resumable"].as_bool(),
            j["iteration"].as_u64()
        ),
        (Some(false), Some(true), Some(2)),
        "{r:?}"
    );
}

#[test]
fn more_unread_diffs_than_every_stop_the_run_resumable_before_the_next_agent_step() {
    let repo = repo();
    let (_keys, hex) = reviewer();
    let r = gated_run(repo.path(), "g", &hex);
    assert_gated(&r);
    let gate = of_type(repo.path(), "g", "comprehension");
    let ledger_id = gate[0]["ledger_id"].as_str().unwrap().to_string();
    assert_eq!(
        gate[0],
        json!({"type": "comprehension", "seq": gate[0]["seq"], "prev": gate[0]["prev"], "ts": gate[0]["ts"], "outcome": "stopped", "iteration": 3, "every": 1,
               "ledger_id": ledger_id, "unread_count": 2, "unread": diffs(repo.path(), "g"), "acks": [],
               "acks_sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"})
    );
    assert_eq!(
        of_type(repo.path(), "g", "exec_result").len(),
        2,
        "no third agent call"
    );
    assert!(
        of_type(repo.path(), "g", "halt").is_empty()
            && !run_dir(repo.path(), "g").join("envelope.json").exists(),
        "not a sealed halt"
    );
    let status = loopexec(repo.path(), &["status", "--json", "g"]).json();
    assert_eq!(
        (status["state"].as_str(), status["halt_reason"].as_str()),
        (Some("gated"), Some("comprehension_debt_exceeded")),
        "{status:#}"
    );
    assert_eq!(status["run"]["resumable"], true, "{status:#}");
    let human = loopexec(repo.path(), &["status", "g"]).stdout;
    assert!(
        human.contains(
            "ack          loopexec ack g --key REVIEWER_KEY (review the diffs it prints)\n"
        ),
        "{human}"
    );
    assert!(
        human.contains("resume       loopexec run --resume g\n"),
        "{human}"
    );
    let explained = loopexec(repo.path(), &["explain-halt", "--json", "g"]).json();
    assert_eq!(explained["explanation"]["summary"], "not halted: stopped by the comprehension gate (comprehension_debt_exceeded): a pinned reviewer's `loopexec ack`, then resumable");
}

#[test]
fn a_signed_ack_by_a_pinned_reviewer_clears_the_debt_and_the_resumed_run_succeeds() {
    let repo = repo();
    let (keys, hex) = reviewer();
    assert_gated(&gated_run(repo.path(), "g", &hex));
    let ack = loopexec(
        repo.path(),
        &["ack", "g", "--json", "--key", &key_of(keys.path())],
    );
    assert_eq!(ack.code, 0, "{ack:?}");
    let d = diffs(repo.path(), "g");
    assert_eq!(ack.json()["ack"]["digests"], json!(d));
    let t0 = of_type(repo.path(), "g", "workspace")[0]["tree_id"]
        .as_str()
        .unwrap()
        .to_string();
    let t1 = of_type(repo.path(), "g", "snapshot")[0]["tree_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        ack.json()["ack"]["diffs"][0]["command"],
        format!("git diff {t0} {t1}")
    );
    // The trees are in the repository: the command shows the step.
    let shown = git(repo.path(), &["diff", &t0, &t1]);
    assert!(
        shown.contains("+++ b/notes.txt\n@@ -0,0 +1 @@\n+x\n"),
        "{shown}"
    );
    let r = resume(repo.path(), "g");
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["iteration"].as_u64()
        ),
        (10, Some("success_condition_met"), Some(3)),
        "{r:?}"
    );
    let gate = of_type(repo.path(), "g", "comprehension");
    assert_eq!(gate[1]["outcome"], "cleared");
    assert_eq!(gate[1]["acks"][0]["cleared"], json!(d));
    assert_eq!(gate[1]["acks"][0]["reviewer"], hex);
}

/// Gate run `g`, ack it with the pinned key, change the ack log with `tamper`, resume: the gate
/// stops the run again without an agent step; returns the `rejected` reason of ack line `line`.
fn tampered_ack_rejected(tamper: impl Fn(&Path, &str), line: usize) -> String {
    let repo = repo();
    let (keys, hex) = reviewer();
    assert_gated(&gated_run(repo.path(), "g", &hex));
    assert_eq!(
        loopexec(
            repo.path(),
            &["ack", "g", "--json", "--key", &key_of(keys.path())]
        )
        .code,
        0
    );
    let text = std::fs::read_to_string(acks_file(repo.path())).unwrap();
    tamper(repo.path(), &text);
    let r = resume(repo.path(), "g");
    assert_gated(&r);
    assert_eq!(
        of_type(repo.path(), "g", "exec_result").len(),
        2,
        "no agent step after a refused ack"
    );
    let gate = of_type(repo.path(), "g", "comprehension");
    assert_eq!(
        (
            gate.len(),
            gate[1]["outcome"].as_str(),
            gate[1]["unread_count"].as_u64()
        ),
        (2, Some("stopped"), Some(2))
    );
    let detail = r.json()["run"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let why = gate[1]["acks"][line - 1]["rejected"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        detail.contains(&format!("ack line {line}: {why}")),
        "the detail says why: {detail}"
    );
    why
}

#[test]
fn a_forged_ack_whose_signed_digests_were_changed_clears_nothing() {
    let why = tampered_ack_rejected(
        |repo, text| {
            let mut line: Value = serde_json::from_str(text.trim()).unwrap();
            line["digests"].as_array_mut().unwrap().reverse();
            std::fs::write(acks_file(repo), format!("{line}\n")).unwrap();
        },
        1,
    );
    assert!(
        why.starts_with("bad signature: not signed by reviewer key "),
        "{why}"
    );
}

#[test]
fn an_unsigned_ack_clears_nothing() {
    let why = tampered_ack_rejected(
        |repo, text| {
            let mut line: Value = serde_json::from_str(text.trim()).unwrap();
            line.as_object_mut().unwrap().remove("signature");
            std::fs::write(acks_file(repo), format!("{line}\n")).unwrap();
        },
        1,
    );
    assert_eq!(why, "unsigned");
}

#[test]
fn an_ack_moved_out_of_its_place_in_the_chain_clears_nothing() {
    let why = tampered_ack_rejected(
        |repo, text| std::fs::write(acks_file(repo), format!("{{}}\n{text}")).unwrap(),
        2,
    );
    assert_eq!(why, "chain broken: seq 1 and prev 0000000000000000000000000000000000000000000000000000000000000000 do not follow line 1");
}

#[test]
fn an_ack_by_a_key_that_is_not_pinned_clears_nothing() {
    let repo = repo();
    let (_pinned, hex) = reviewer();
    let (other, other_hex) = reviewer();
    assert_gated(&gated_run(repo.path(), "g", &hex));
    let ack = loopexec(
        repo.path(),
        &["ack", "g", "--json", "--key", &key_of(other.path())],
    );
    assert_eq!(
        (ack.code, ack.json()["ack"]["pinned_reviewer"].as_bool()),
        (0, Some(false)),
        "{ack:?}"
    );
    let r = resume(repo.path(), "g");
    assert_gated(&r);
    let gate = of_type(repo.path(), "g", "comprehension");
    assert_eq!(
        gate[1]["acks"][0]["rejected"],
        format!("unknown key: reviewer {other_hex} is not one of the run's pinned reviewers")
    );
}

#[test]
fn an_ack_replayed_from_another_workspaces_log_clears_nothing() {
    let (keys, hex) = reviewer();
    let (a, b) = (repo(), repo());
    assert_gated(&gated_run(a.path(), "g", &hex));
    assert_gated(&gated_run(b.path(), "g", &hex));
    // B's honest ack, over B's diffs (the same trees: the same digests), copied into A's log.
    assert_eq!(
        loopexec(
            b.path(),
            &["ack", "g", "--json", "--key", &key_of(keys.path())]
        )
        .code,
        0
    );
    std::fs::copy(acks_file(b.path()), acks_file(a.path())).unwrap();
    let r = resume(a.path(), "g");
    assert_gated(&r);
    let gate = of_type(a.path(), "g", "comprehension");
    let why = gate[1]["acks"][0]["rejected"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("replayed: made for another workspace's ledger ("),
        "{why}"
    );
}

#[test]
fn debt_carries_across_runs_in_the_same_workdir() {
    let repo = repo();
    let (_keys, hex) = reviewer();
    assert_gated(&gated_run(repo.path(), "g", &hex));
    let r = gated_run(repo.path(), "h", &hex);
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["iteration"].as_u64()
        ),
        (19, Some("comprehension_debt_exceeded"), Some(0)),
        "{r:?}"
    );
    assert!(
        of_type(repo.path(), "h", "exec_result").is_empty(),
        "the new run stopped before its first agent step"
    );
    assert_eq!(
        of_type(repo.path(), "h", "comprehension")[0]["unread"],
        json!(diffs(repo.path(), "g"))
    );
}

/// `run --json` with `args` in a fresh repository: exit 20, one JSON object, nothing written;
/// returns the error's message.
fn refused(args: &[&str]) -> String {
    let repo = repo();
    let mut all = vec!["run", "--json", "--exec", "true", "--check", "true"];
    all.extend_from_slice(args);
    let r = loopexec(repo.path(), &all);
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(r.stdout.trim().lines().count(), 1, "one JSON object: {r:?}");
    assert!(!repo.path().join(".loopexec").exists(), "nothing written");
    r.json()["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

const KEY: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

#[test]
fn a_zero_negative_or_non_numeric_limit_is_refused() {
    assert_eq!(refused(&["--comprehension-every", "0", "--reviewer-pubkey", KEY]), "--comprehension-every must be at least 1 (0 would stop before every agent step after the first accepted one)");
    assert_eq!(
        refused(&["--comprehension-every", "-2", "--reviewer-pubkey", KEY]),
        "--comprehension-every: \"-2\" is not a whole number of diffs"
    );
    assert_eq!(
        refused(&["--comprehension-every", "many", "--reviewer-pubkey", KEY]),
        "--comprehension-every: \"many\" is not a whole number of diffs"
    );
}

#[test]
fn a_malformed_reviewer_public_key_is_refused() {
    let message = refused(&[
        "--comprehension-every",
        "1",
        "--reviewer-pubkey",
        "not-a-key",
    ]);
    assert_eq!(message, "--reviewer-pubkey: \"not-a-key\" is not an Ed25519 public key (64 hex digits, as `loopexec keygen --reviewer` prints)");
}

#[test]
fn the_gate_in_place_is_refused() {
    let message = refused(&[
        "--isolation",
        "none",
        "--comprehension-every",
        "1",
        "--reviewer-pubkey",
        KEY,
    ]);
    assert_eq!(message, "--comprehension-every needs a detached workspace (the ledger records accepted trees; in place there are none)");
}

#[test]
fn the_gate_in_loop_toml_is_pinned_in_run_start() {
    let repo = repo();
    let (_keys, hex) = reviewer();
    std::fs::write(
        repo.path().join("loop.toml"),
        format!("[comprehension]\nevery = 5\nreviewers = [\"{hex}\"]\n"),
    )
    .unwrap();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "t",
            "--exec",
            "echo x >> notes.txt",
            "--check",
            "sh check.sh",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        events(repo.path(), "t")[0]["config"]["comprehension"],
        json!({"every": 5, "reviewers": [hex]})
    );
}

/// A run gated, acked and resumed to success: (the repository, the operator public key path).
fn acked_and_sealed() -> (tempfile::TempDir, String) {
    let repo = repo();
    let (keys, hex) = reviewer();
    assert_gated(&gated_run(repo.path(), "g", &hex));
    assert_eq!(
        loopexec(
            repo.path(),
            &["ack", "g", "--json", "--key", &key_of(keys.path())]
        )
        .code,
        0
    );
    assert_eq!(resume(repo.path(), "g").code, 10);
    (repo, path_str(&key_dir().join("operator.pub")))
}

#[test]
fn verify_checks_the_honest_ack_log_of_a_gated_run() {
    let (repo, pubkey) = acked_and_sealed();
    let r = loopexec(
        repo.path(),
        &["verify", "--json", "g", "--pubkey", &pubkey, "--acks"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let checks = r.json()["verify"]["checks"].as_array().unwrap().clone();
    let acks = checks.iter().find(|c| c["name"] == "acks").unwrap();
    assert_eq!(
        acks["detail"],
        "1 ack line(s) chained and signed; 1 ack(s) the receipt says cleared debt are in the log"
    );
}

#[test]
fn verify_fails_on_an_ack_log_whose_clearing_ack_was_rewritten() {
    let (repo, pubkey) = acked_and_sealed();
    // `signed_at` is outside the signature: the line still verifies, but is not the line that cleared.
    let text = std::fs::read_to_string(acks_file(repo.path())).unwrap();
    let mut line: Value = serde_json::from_str(text.trim()).unwrap();
    line["signed_at"] = json!("2000-01-01T00:00:00Z");
    std::fs::write(acks_file(repo.path()), format!("{line}\n")).unwrap();
    // On by default: the receipt has comprehension events.
    let r = loopexec(repo.path(), &["verify", "--json", "g", "--pubkey", &pubkey]);
    assert_ne!(r.code, 0, "{r:?}");
    let error = r.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["code"] == "verify_acks")
        .cloned()
        .unwrap();
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("cleared debt, and the log does not hold it as recorded"),
        "{message}"
    );
}

#[test]
fn a_gated_run_is_escalated_with_ack_then_resume_as_the_commands_to_continue() {
    let repo = repo();
    let (_keys, hex) = reviewer();
    assert_gated(&gated_run(repo.path(), "g", &hex));
    let out = repo.path().join("packet.json");
    let r = loopexec(
        repo.path(),
        &[
            "escalate",
            "g",
            "--json",
            "--channel",
            "file",
            "--out",
            &path_str(&out),
        ],
    );
    assert_eq!(r.code, 16, "{r:?}");
    let packet: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let wd = path_str(repo.path());
    assert_eq!(packet["halt"]["reason"], "comprehension_debt_exceeded");
    assert_eq!(
        packet["continue"][0],
        format!("loopexec ack g --workdir {wd} --key REVIEWER_KEY")
    );
    assert_eq!(
        packet["continue"][1],
        format!("loopexec run --resume g --workdir {wd}")
    );
}

#[test]
fn a_malformed_ledger_is_bad_state_and_the_resume_writes_nothing() {
    let repo = repo();
    let (_keys, hex) = reviewer();
    assert_gated(&gated_run(repo.path(), "g", &hex));
    let ledger = repo.path().join(".loopexec/comprehension/ledger.jsonl");
    let mut text = std::fs::read_to_string(&ledger).unwrap();
    text.push_str("{\"run_id\": \"g\"}\n");
    std::fs::write(&ledger, text).unwrap();
    let before = events(repo.path(), "g").len();
    let r = resume(repo.path(), "g");
    assert_eq!(r.code, 30, "{r:?}");
    assert_eq!(r.stdout.trim().lines().count(), 1, "one JSON object: {r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("ledger.jsonl: line 4 is not a ledger entry"),
        "{message}"
    );
    assert_eq!(
        events(repo.path(), "g").len(),
        before,
        "nothing appended to the receipt"
    );
    let status = loopexec(repo.path(), &["status", "--json", "g"]).json();
    assert_eq!(
        status["state"], "gated",
        "the run is still gated: {status:#}"
    );
}

#[test]
fn a_resume_cannot_change_its_pinned_gate() {
    let repo = repo();
    let (_keys, hex) = reviewer();
    assert_gated(&gated_run(repo.path(), "g", &hex));
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--resume",
            "g",
            "--comprehension-every",
            "100",
        ],
    );
    assert_eq!((r.code, r.stdout.trim().lines().count()), (20, 1), "{r:?}");
    assert_eq!(
        of_type(repo.path(), "g", "comprehension").len(),
        1,
        "nothing written"
    );
}

#[test]
fn an_ack_of_a_run_without_the_gate_is_refused_and_writes_nothing() {
    let repo = repo();
    let (keys, _hex) = reviewer();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "n",
            "--exec",
            "echo x >> notes.txt",
            "--check",
            "sh check.sh",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let ack = loopexec(
        repo.path(),
        &["ack", "n", "--json", "--key", &key_of(keys.path())],
    );
    assert_eq!(
        (ack.code, ack.stdout.trim().lines().count()),
        (20, 1),
        "{ack:?}"
    );
    assert_eq!(
        ack.json()["errors"][0]["message"],
        "run n has no comprehension gate (it was started without --comprehension-every)"
    );
    assert!(
        !repo.path().join(".loopexec/comprehension").exists(),
        "nothing written"
    );
}

#[test]
fn a_second_ack_with_nothing_unread_is_refused_and_the_log_keeps_one_line() {
    let repo = repo();
    let (keys, hex) = reviewer();
    assert_gated(&gated_run(repo.path(), "g", &hex));
    assert_eq!(
        loopexec(
            repo.path(),
            &["ack", "g", "--json", "--key", &key_of(keys.path())]
        )
        .code,
        0
    );
    let again = loopexec(
        repo.path(),
        &["ack", "g", "--json", "--key", &key_of(keys.path())],
    );
    assert_eq!(again.code, 20, "{again:?}");
    assert_eq!(
        again.json()["errors"][0]["message"],
        "nothing to acknowledge: every accepted diff of this workspace is acked for run g"
    );
    assert_eq!(
        std::fs::read_to_string(acks_file(repo.path()))
            .unwrap()
            .lines()
            .count(),
        1
    );
}
