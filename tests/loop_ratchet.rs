//! The ratchet's switch and the operator's hand on it (docs/progress.md, "The ratchet"):
//! `[progress] ratchet = false` keeps every judged iteration (nothing is reverted), so the rules
//! see the whole trajectory and `unsatisfiable_constraints` can fire; with the ratchet on, the
//! same agent is held at the frontier.
//!
//! The project is the four-function calc package (tests/common/calc.rs), all wrong at t0; the
//! scripted agent fixes `add` and `sub` in turn, each fix breaking the other, twice, while `mul`
//! and `div` vary so that no failing set comes back (no oscillation).
mod common;
use common::calc::{calc_project, plan_steps as agent, test_id, PYTEST};
use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// The functions right at iterations 1..=5: add; sub (add broken); add, mul (sub broken);
/// sub, mul (add broken); add, mul, div (sub broken).
const SEESAW: [&[&str]; 5] = [
    &["add"],
    &["sub"],
    &["add", "mul"],
    &["sub", "mul"],
    &["add", "mul", "div"],
];

/// `[progress]` for these runs: same_test_regressed would fire at the second regression of one
/// test (iteration 4) before the second cycle completes, so it waits for a third.
fn write_loop_toml(dir: &Path, ratchet: bool) {
    std::fs::write(
        dir.join("loop.toml"),
        format!("[progress]\nratchet = {ratchet}\nregressed_n = 3\n"),
    )
    .unwrap();
}

fn run_seesaw(dir: &Path) -> Ran {
    let exec = agent(&SEESAW);
    loopexec(
        dir,
        &[
            "run",
            "--json",
            "--run-id",
            "r",
            "--exec",
            &exec,
            "--check",
            PYTEST,
            "--report",
            "out/junit.xml",
            "--max-iterations",
            "5",
        ],
    )
}

fn of_type(dir: &Path, kind: &str) -> Vec<Value> {
    events(dir, "r")
        .into_iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

#[test]
fn with_the_ratchet_off_fixing_a_that_breaks_b_and_back_twice_halts_unsatisfiable_constraints() {
    let repo = calc_project();
    write_loop_toml(repo.path(), false);
    let r = run_seesaw(repo.path());
    assert_eq!(
        (
            r.code,
            r.json()["halt_reason"].as_str(),
            r.json()["iteration"].as_u64()
        ),
        (17, Some("unsatisfiable_constraints"), Some(5)),
        "{r:?}"
    );
    let progress = of_type(repo.path(), "progress");
    assert_eq!(
        progress
            .iter()
            .map(|p| p["accepted"].as_bool())
            .collect::<Vec<_>>(),
        vec![Some(true); 5]
    );
    assert!(
        progress
            .iter()
            .all(|p| p.get("reverted_to_tree").is_none() && p.get("rejection").is_none()),
        "{progress:?}"
    );
    assert_eq!(
        progress[4]["evidence"],
        json!({"rule": "unsatisfiable_constraints", "a": test_id("add"), "b": test_id("sub"), "a_fixed_broke_b": [3, 5], "b_fixed_broke_a": [2, 4]})
    );
    // Nothing was reverted: the delivered tree is the last iteration's.
    let last_tree = of_type(repo.path(), "snapshot")[4]["tree_id"].clone();
    assert_eq!(
        events(repo.path(), "r").pop().unwrap()["delivery"]["tree"],
        last_tree
    );
    let run_start = &events(repo.path(), "r")[0];
    assert_eq!(run_start["config"]["progress"]["ratchet"], false);
}

#[test]
fn with_the_ratchet_on_the_same_agent_is_held_at_the_frontier_and_reaches_the_cap() {
    let repo = calc_project();
    write_loop_toml(repo.path(), true);
    let r = run_seesaw(repo.path());
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (12, Some("max_iterations_reached")),
        "{r:?}"
    );
    let progress = of_type(repo.path(), "progress");
    assert_eq!(
        progress
            .iter()
            .map(|p| p["accepted"].as_bool())
            .collect::<Vec<_>>(),
        vec![Some(true), Some(false), Some(true), Some(false), Some(true)]
    );
    assert_eq!(
        progress[1]["rejection"],
        json!({"kind": "lost_tests", "lost": [test_id("add")]})
    );
    assert_eq!(
        progress[3]["rejection"],
        json!({"kind": "lost_tests", "lost": [test_id("add")]})
    );
    assert!(
        progress.iter().all(|p| p.get("halt_reason").is_none()),
        "{progress:?}"
    );
}

// ---- `ratchet --accept N --key KEY`: the operator's hand on the ratchet ----

/// add right at 1 (accepted), sub right at 2 (add broken: rejected), then no change.
const ADD_THEN_SUB: [&[&str]; 2] = [&["add"], &["sub"]];

/// A detached run paused after iteration 2, which the ratchet rejected (lost add) and reverted.
/// The agent prints the feedback it was given (its stdout artifact), then follows the plan.
fn paused_after_a_rejection(dir: &Path) {
    paused_after_a_rejection_of(dir, "3");
}

/// [`paused_after_a_rejection`] with `max` iterations.
fn paused_after_a_rejection_of(dir: &Path, max: &str) {
    let exec = format!("cat \"$LOOPEXEC_FEEDBACK\"; {}", agent(&ADD_THEN_SUB));
    let first = loopexec(
        dir,
        &[
            "run",
            "--json",
            "--run-id",
            "r",
            "--once",
            "--exec",
            &exec,
            "--check",
            PYTEST,
            "--report",
            "out/junit.xml",
            "--max-iterations",
            max,
        ],
    );
    assert_eq!(
        (first.code, first.json()["iteration"].as_u64()),
        (0, Some(1)),
        "{first:?}"
    );
    let second = loopexec(dir, &["run", "--json", "--resume", "r", "--once"]);
    assert_eq!(
        (second.code, second.json()["iteration"].as_u64()),
        (0, Some(2)),
        "{second:?}"
    );
    assert_eq!(of_type(dir, "progress")[1]["accepted"], false);
}

fn operator_key() -> String {
    path_str(&key_dir().join("operator.key"))
}

fn accept(dir: &Path, n: &str, key: &str) -> Ran {
    loopexec(
        dir,
        &["ratchet", "r", "--json", "--accept", n, "--key", key],
    )
}

fn receipt_bytes(dir: &Path) -> Vec<u8> {
    std::fs::read(run_dir(dir, "r").join("receipt.jsonl")).unwrap()
}

/// The refusal's exit code and message, asserting one JSON object and an untouched receipt.
fn refused(dir: &Path, n: &str, key: &str) -> (i32, String, String) {
    let before = receipt_bytes(dir);
    let r = accept(dir, n, key);
    assert_eq!(receipt_bytes(dir), before, "nothing is written: {r:?}");
    let error = &r.json()["errors"][0];
    (
        r.code,
        error["code"].as_str().unwrap_or("").to_string(),
        error["message"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn an_iteration_accepted_by_hand_is_where_the_resumed_run_starts_and_the_run_verifies() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    let rejected_tree = of_type(repo.path(), "snapshot")[1]["tree_id"]
        .as_str()
        .unwrap()
        .to_string();
    let accepted = accept(repo.path(), "2", &operator_key());
    assert_eq!(accepted.code, 0, "{accepted:?}");
    assert_eq!(
        (
            accepted.json()["accepted"]["iteration"].as_u64(),
            accepted.json()["accepted"]["tree_id"].as_str()
        ),
        (Some(2), Some(rejected_tree.as_str()))
    );
    let resumed = loopexec(repo.path(), &["run", "--json", "--resume", "r"]);
    assert_eq!(
        (resumed.code, resumed.json()["halt_reason"].as_str()),
        (12, Some("max_iterations_reached")),
        "{resumed:?}"
    );
    // Iteration 3 changed nothing: the agent was given iteration 2's tree, and the frontier is
    // iteration 2's passing set (sub), so it is accepted though add still fails.
    assert_eq!(
        of_type(repo.path(), "snapshot")[2]["tree_id"],
        rejected_tree.as_str()
    );
    let told: Value = serde_json::from_str(
        &std::fs::read_to_string(run_dir(repo.path(), "r").join("artifacts/0003-exec.stdout"))
            .unwrap(),
    )
    .unwrap();
    let failing: Vec<&str> = told["failing"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["test"].as_str())
        .collect();
    assert_eq!(
        failing,
        [test_id("add"), test_id("div"), test_id("mul")],
        "the agent is told it starts from iteration 2: {told}"
    );
    assert_eq!(told.get("rejected"), None, "{told}");
    let third = &of_type(repo.path(), "progress")[2];
    assert_eq!(
        (third["accepted"].as_bool(), third["frontier"].as_u64()),
        (Some(true), Some(3)),
        "{third}"
    );
    assert_eq!(
        events(repo.path(), "r").pop().unwrap()["delivery"]["tree"],
        rejected_tree.as_str()
    );
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let verified = loopexec(repo.path(), &["verify", "r", "--json", "--pubkey", &pubkey]);
    assert_eq!(verified.code, 0, "{verified:?}");
    let checks = verified.json()["verify"]["checks"].clone();
    let hand = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "hand_acceptances")
        .cloned();
    assert_eq!(
        hand,
        Some(
            json!({"name": "hand_acceptances", "ok": true, "detail": "1 hand acceptance(s) signed by the operator key"})
        )
    );
}

#[test]
fn ratchet_shows_a_hand_acceptance_and_the_frontier_it_set() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    assert_eq!(accept(repo.path(), "2", &operator_key()).code, 0);
    let shown = loopexec(repo.path(), &["ratchet", "r", "--json"]);
    assert_eq!(shown.code, 0, "{shown:?}");
    let ratchet = &shown.json()["ratchet"];
    let tree = of_type(repo.path(), "snapshot")[1]["tree_id"].clone();
    assert_eq!(
        ratchet["frontier"],
        json!({"iteration": 2, "tree_id": tree})
    );
    assert_eq!(
        (
            ratchet["judged"][1]["accepted"].as_bool(),
            ratchet["judged"][1]["accepted_by_hand"].as_bool()
        ),
        (Some(false), Some(true))
    );
    assert_eq!(ratchet["hand_accepted"][0]["applied"], false);
}

#[test]
fn a_tampered_acceptance_fails_verify() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    assert_eq!(accept(repo.path(), "2", &operator_key()).code, 0);
    assert_eq!(
        loopexec(repo.path(), &["run", "--json", "--resume", "r"]).code,
        12
    );
    let path = run_dir(repo.path(), "r").join("receipt.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let tampered: Vec<String> = text
        .lines()
        .map(|l| {
            if l.contains("\"type\":\"ratchet_accept\"") {
                l.replace("\"iteration\":2", "\"iteration\":1")
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_ne!(tampered.join("\n") + "\n", text);
    std::fs::write(&path, tampered.join("\n") + "\n").unwrap();
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let verified = loopexec(repo.path(), &["verify", "r", "--json", "--pubkey", &pubkey]);
    assert_eq!(
        (verified.code, verified.json()["status"].as_str()),
        (13, Some("failed")),
        "{verified:?}"
    );
}

#[test]
fn accepting_an_iteration_the_ratchet_accepted_is_refused() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    let (code, kind, message) = refused(repo.path(), "1", &operator_key());
    assert_eq!((code, kind.as_str()), (20, "usage"));
    assert_eq!(message, "--accept 1: iteration 1 is already accepted; only an iteration the ratchet rejected can be accepted by hand");
}

#[test]
fn accepting_an_iteration_that_was_not_judged_is_refused() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    let (code, _, message) = refused(repo.path(), "7", &operator_key());
    assert_eq!(
        (code, message.as_str()),
        (
            20,
            "--accept 7: iteration 7 is not a judged iteration of this run (judged: 1, 2)"
        )
    );
}

#[test]
fn accepting_while_a_process_drives_the_run_is_refused() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    // Hold the run's lock as a driving loopexec would (a POSIX record lock on `lock`).
    let lock = path_str(&run_dir(repo.path(), "r").join("lock"));
    let script = "import fcntl, sys, time\nf = open(sys.argv[1], 'r+')\nfcntl.lockf(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(120)\n";
    let mut holder = std::process::Command::new("python3")
        .args(["-c", script, &lock])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "locked\n");
    let (code, _, message) = refused(repo.path(), "2", &operator_key());
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(
        (code, message.as_str()),
        (30, "run r is being driven by another loopexec process")
    );
}

#[test]
fn a_key_file_that_is_no_private_key_is_refused() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    // A public key, readable only by its owner (so that its content, not its mode, is refused).
    let keys = tempfile::tempdir().unwrap();
    let not_private = keys.path().join("operator.pub");
    std::fs::copy(key_dir().join("operator.pub"), &not_private).unwrap();
    std::fs::set_permissions(
        &not_private,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let (code, kind, message) = refused(repo.path(), "2", &path_str(&not_private));
    assert_eq!((code, kind.as_str()), (20, "invalid_input"), "{message}");
    assert!(
        message.contains("not an Ed25519 private key in PEM form"),
        "{message}"
    );
}

#[test]
fn a_key_that_cannot_be_read_is_refused() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    let missing = path_str(&repo.path().join("no-such.key"));
    let (code, _, message) = refused(repo.path(), "2", &missing);
    assert_eq!(code, 30, "{message}");
    assert!(message.starts_with(&missing), "{message}");
}

#[test]
fn another_operators_key_is_refused() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    let other = tempfile::tempdir().unwrap();
    let other_keys = other.path().join("keys");
    assert_eq!(
        loopexec(
            repo.path(),
            &["keygen", "--json", "--dir", &path_str(&other_keys)]
        )
        .code,
        0
    );
    let (code, kind, message) = refused(
        repo.path(),
        "2",
        &path_str(&other_keys.join("operator.key")),
    );
    assert_eq!((code, kind.as_str()), (13, "not_verified"), "{message}");
    assert!(
        message.contains("run key not endorsed by operator key"),
        "{message}"
    );
}

#[test]
fn accepting_in_a_receipt_that_does_not_verify_is_refused() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    let path = run_dir(repo.path(), "r").join("receipt.jsonl");
    let text =
        std::fs::read_to_string(&path)
            .unwrap()
            .replacen("\"iteration\":1", "\"iteration\":9", 1);
    std::fs::write(&path, text).unwrap();
    let (code, _, message) = refused(repo.path(), "2", &operator_key());
    assert_eq!(code, 30, "{message}");
    assert!(message.contains("receipt does not verify"), "{message}");
}

#[test]
fn accepting_in_a_halted_run_is_refused() {
    let repo = calc_project();
    let exec = agent(&ADD_THEN_SUB);
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "r",
            "--exec",
            &exec,
            "--check",
            PYTEST,
            "--report",
            "out/junit.xml",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.code, 12, "{r:?}");
    let (code, kind, message) = refused(repo.path(), "2", &operator_key());
    assert_eq!(
        (code, kind.as_str(), message.as_str()),
        (
            20,
            "run_already_halted",
            "run r already halted with max_iterations_reached; a halted run is final"
        )
    );
}

#[test]
fn resume_refuses_a_hand_acceptance_the_operator_key_did_not_sign() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    assert_eq!(accept(repo.path(), "2", &operator_key()).code, 0);
    // The acceptance is the receipt's last line: no later line's `prev` binds it, so its
    // signature can be swapped without breaking the chain.
    let path = run_dir(repo.path(), "r").join("receipt.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let forged_signature = format!("\"signature\":\"{}==\"", "A".repeat(86));
    let forged: String = text
        .lines()
        .map(|l| {
            match (
                l.contains("\"type\":\"ratchet_accept\""),
                l.find("\"signature\":\""),
            ) {
                (true, Some(at)) => {
                    let end = at + 13 + l[at + 13..].find('"').unwrap() + 1;
                    format!("{}{}{}\n", &l[..at], forged_signature, &l[end..])
                }
                _ => format!("{l}\n"),
            }
        })
        .collect();
    assert_ne!(forged, text);
    std::fs::write(&path, &forged).unwrap();
    let resumed = loopexec(repo.path(), &["run", "--json", "--resume", "r"]);
    assert_eq!(
        (resumed.code, resumed.json()["errors"][0]["code"].as_str()),
        (13, Some("not_verified")),
        "{resumed:?}"
    );
    let message = resumed.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("not signed by operator key"), "{message}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        forged,
        "nothing is appended to the receipt"
    );
}

// ---- every hand acceptance in the history is the operator's, not only the pending one ----

/// Chain `events` onto run r's receipt, each line's `prev` the hash of the line before: what
/// anyone who can write the receipt can do, with no key at all.
fn chain_onto_receipt(dir: &Path, events: &[loopexec::receipt::events::Event]) {
    let run = loopexec::safefs::SafeDir::open(&run_dir(dir, "r")).unwrap();
    let (mut log, _) = loopexec::receipt::chain::ReceiptLog::open(&run, "receipt.jsonl").unwrap();
    for event in events {
        log.append_event(event).unwrap();
    }
}

/// The hash of run r's receipt's last line (the `prev` an acceptance appended now signs).
fn receipt_head(dir: &Path) -> String {
    let bytes = receipt_bytes(dir);
    loopexec::receipt::chain::line_hash(
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .last()
            .unwrap(),
    )
}

fn operator_fingerprint() -> String {
    let public = loopexec::receipt::keys::load_public_key(&key_dir().join("operator.pub")).unwrap();
    loopexec::receipt::keys::fingerprint(&public)
}

/// `accept` of iteration 2 chained onto the paused run, then an `iteration_start` of 3 chained
/// after it, so it is an acceptance already applied, not the pending one a resume starts from.
fn chain_applied_acceptance(dir: &Path, accept: loopexec::receipt::events::RatchetAcceptRecord) {
    use loopexec::receipt::events::Event;
    chain_onto_receipt(
        dir,
        &[
            Event::RatchetAccept(accept),
            Event::IterationStart { iteration: 3 },
        ],
    );
}

/// A resume of run r refused as tampered: exit 13 `not_verified`, the message's detail after the
/// receipt's path, and nothing appended to the receipt nor any ref written in the repository.
fn resume_refused(dir: &Path) -> String {
    let (before, refs) = (receipt_bytes(dir), git(dir, &["for-each-ref"]));
    let resumed = loopexec(dir, &["run", "--json", "--resume", "r"]);
    assert_eq!(
        (resumed.code, resumed.json()["errors"][0]["code"].as_str()),
        (13, Some("not_verified")),
        "{resumed:?}"
    );
    assert_eq!(
        receipt_bytes(dir),
        before,
        "nothing is appended to the receipt"
    );
    assert_eq!(git(dir, &["for-each-ref"]), refs, "nothing is delivered");
    let message = resumed.json()["errors"][0]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    message
        .split_once("receipt.jsonl: ")
        .map(|(_, detail)| detail.to_string())
        .unwrap_or(message)
}

/// The receipt line number the next appended line will have.
fn next_line(dir: &Path) -> usize {
    receipt_bytes(dir)
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count()
        + 1
}

/// A run paused after iteration 2 was rejected, with an unsigned acceptance of iteration 2 that
/// names the operator's key chained into its receipt: the receipt line it took and the key named.
fn unsigned_acceptance_chained(repo: &Path) -> (usize, String) {
    paused_after_a_rejection(repo);
    let tree = of_type(repo, "snapshot")[1]["tree_id"]
        .as_str()
        .unwrap()
        .to_string();
    let line = next_line(repo);
    let fingerprint = operator_fingerprint();
    let unsigned = loopexec::receipt::events::RatchetAcceptRecord {
        iteration: 2,
        tree_id: tree,
        operator_key: fingerprint.clone(),
        signature: String::new(),
    };
    chain_applied_acceptance(repo, unsigned);
    (line, fingerprint)
}

#[test]
fn resume_refuses_an_unsigned_acceptance_with_an_iteration_start_chained_after_it() {
    let repo = calc_project();
    let (line, fingerprint) = unsigned_acceptance_chained(repo.path());
    assert_eq!(resume_refused(repo.path()), format!("receipt line {line} (ratchet_accept of iteration 2): not signed by operator key {fingerprint}"));
}

/// A run paused after iteration 2 was rejected, and an acceptance of iteration 2 signed by a key
/// that is not the operator's; with the receipt line it would take.
fn acceptance_signed_by_another_key(
    repo: &Path,
) -> (usize, loopexec::receipt::events::RatchetAcceptRecord) {
    paused_after_a_rejection(repo);
    let tree = of_type(repo, "snapshot")[1]["tree_id"]
        .as_str()
        .unwrap()
        .to_string();
    let others = tempfile::tempdir().unwrap();
    let other = loopexec::receipt::keys::generate_operator_key(others.path(), false).unwrap();
    let other = loopexec::receipt::keys::OperatorKey::load(&other.private_key).unwrap();
    let line = next_line(repo);
    (
        line,
        loopexec::receipt::acceptance::sign(&other, "r", 2, &tree, &receipt_head(repo)),
    )
}

#[test]
fn resume_refuses_an_applied_acceptance_signed_by_another_key_naming_it() {
    let repo = calc_project();
    let (line, signed) = acceptance_signed_by_another_key(repo.path());
    let named = signed.operator_key.clone();
    chain_applied_acceptance(repo.path(), signed);
    let fingerprint = operator_fingerprint();
    assert_eq!(resume_refused(repo.path()), format!("receipt line {line} (ratchet_accept of iteration 2): names operator key {named}, not {fingerprint}"));
}

#[test]
fn resume_refuses_an_applied_acceptance_signed_by_another_key_claiming_the_operators() {
    let repo = calc_project();
    let (line, signed) = acceptance_signed_by_another_key(repo.path());
    let fingerprint = operator_fingerprint();
    chain_applied_acceptance(
        repo.path(),
        loopexec::receipt::events::RatchetAcceptRecord {
            operator_key: fingerprint.clone(),
            ..signed
        },
    );
    assert_eq!(resume_refused(repo.path()), format!("receipt line {line} (ratchet_accept of iteration 2): not signed by operator key {fingerprint}"));
}

/// `loopexec replay r` (with `env` set) refused as tampered: exit 13 `not_verified`, the
/// message's detail after the receipt's path.
fn replay_refused(dir: &Path, env: &[(&str, &Path)]) -> String {
    let mut c = command();
    c.current_dir(dir).args(["replay", "r", "--json"]);
    for (k, v) in env {
        c.env(k, v);
    }
    let replayed = from_output(c.output().expect("spawn loopexec"));
    assert_eq!(
        (replayed.code, replayed.json()["errors"][0]["code"].as_str()),
        (13, Some("not_verified")),
        "{replayed:?}"
    );
    let message = replayed.json()["errors"][0]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    message
        .split_once("receipt.jsonl: ")
        .map(|(_, detail)| detail.to_string())
        .unwrap_or(message)
}

#[test]
fn replay_refuses_an_unsigned_acceptance_chained_into_the_receipt() {
    let repo = calc_project();
    let (line, fingerprint) = unsigned_acceptance_chained(repo.path());
    assert_eq!(replay_refused(repo.path(), &[]), format!("receipt line {line} (ratchet_accept of iteration 2): not signed by operator key {fingerprint}"));
}

#[test]
fn replay_refuses_an_acceptance_signed_by_another_key_naming_it() {
    let repo = calc_project();
    let (line, signed) = acceptance_signed_by_another_key(repo.path());
    let named = signed.operator_key.clone();
    chain_applied_acceptance(repo.path(), signed);
    assert_eq!(replay_refused(repo.path(), &[]), format!("receipt line {line} (ratchet_accept of iteration 2): names operator key {named}, not {}", operator_fingerprint()));
}

#[test]
fn replay_without_an_operator_key_refuses_a_receipt_holding_an_acceptance() {
    let repo = calc_project();
    paused_after_a_rejection(repo.path());
    assert_eq!(accept(repo.path(), "2", &operator_key()).code, 0);
    let keyless = tempfile::tempdir().unwrap();
    assert_eq!(
        replay_refused(repo.path(), &[("LOOPEXEC_CONFIG_DIR", keyless.path())]),
        "the receipt holds a ratchet_accept (of iteration 2) and no operator public key is available to verify it"
    );
}

#[test]
fn an_applied_acceptance_the_operator_signed_is_still_honoured_by_a_later_resume() {
    let repo = calc_project();
    paused_after_a_rejection_of(repo.path(), "4");
    let rejected_tree = of_type(repo.path(), "snapshot")[1]["tree_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(accept(repo.path(), "2", &operator_key()).code, 0);
    let applied = loopexec(repo.path(), &["run", "--json", "--resume", "r", "--once"]);
    assert_eq!(
        (applied.code, applied.json()["iteration"].as_u64()),
        (0, Some(3)),
        "{applied:?}"
    );
    // The acceptance is no longer pending: this resume verifies it as an applied one, and the
    // agent's unchanged iteration 4 repeats iteration 2's failure (the tree it was given) again.
    let resumed = loopexec(repo.path(), &["run", "--json", "--resume", "r"]);
    assert_eq!(
        (resumed.code, resumed.json()["halt_reason"].as_str()),
        (17, Some("same_failure_repeated")),
        "{resumed:?}"
    );
    assert_eq!(
        resumed.json()["run"]["detail"],
        "the same failure repeated in 3 iterations in a row (2, 3, 4)"
    );
    assert_eq!(
        events(repo.path(), "r").pop().unwrap()["delivery"]["tree"],
        rejected_tree.as_str()
    );
}
