//! The crash window between the `halt` line and the seal: a supervisor killed (by pid, with
//! SIGKILL) exactly there, at the debug builds' `LOOPEXEC_TEST_PAUSE=before_seal` stopping point,
//! leaves a receipt that is halted but not sealed. `verify` says so, `explain-halt` gives no
//! verdict, and `run --resume` finishes the seal once with a run key of its own, endorsed after
//! the halt; nothing is delivered twice, and nothing but the seal's completion may follow a halt
//! (docs/receipt.md, "The crash window between halt and seal").
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// Start `loopexec run ARGS` in `dir` paused at `before_seal`, wait for the pause, kill the
/// supervisor by the pid it wrote with SIGKILL, and return once it is gone.
fn killed_between_halt_and_seal(dir: &Path, args: &[&str]) {
    let pause = tempfile::tempdir().unwrap();
    let marker = pause.path().join("before_seal.pid");
    let mut child = command()
        .current_dir(dir)
        .args(args)
        .env("LOOPEXEC_TEST_PAUSE", "before_seal")
        .env("LOOPEXEC_TEST_PAUSE_MARKER", &marker)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !marker.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("loopexec ended ({status}) before it reached the pause between halt and seal");
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the run never reached the pause"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = read_pid(&marker);
    assert_eq!(
        pid as u32,
        child.id(),
        "the supervisor is the loopexec process itself"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "killed by SIGKILL"
    );
}

fn receipt_bytes(dir: &Path, run: &str) -> Vec<u8> {
    std::fs::read(run_dir(dir, run).join("receipt.jsonl")).unwrap()
}

fn envelope(dir: &Path, run: &str) -> std::path::PathBuf {
    run_dir(dir, run).join("envelope.dsse.json")
}

fn pubkey() -> String {
    path_str(&key_dir().join("operator.pub"))
}

/// The types of the receipt's events after its `halt` line.
fn after_the_halt(dir: &Path, run: &str) -> Vec<String> {
    let all = all_events(dir, run);
    let at = all
        .iter()
        .position(|e| e["type"] == "halt")
        .expect("a halt line");
    all[at + 1..]
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

fn check<'a>(verified: &'a Value, name: &str) -> &'a Value {
    verified["verify"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {verified}"))
}

/// A run under `--isolation none` whose check passes at once, killed between halt and seal (in
/// place, a green halts human_required: no guard could judge the step).
fn unsealed_green(dir: &Path) {
    killed_between_halt_and_seal(
        dir,
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--run-id",
            "s",
            "--no-baseline",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
}

#[test]
fn a_supervisor_killed_between_halt_and_seal_leaves_the_halt_line_and_no_envelope() {
    let dir = workdir();
    unsealed_green(dir.path());
    let all = all_events(dir.path(), "s");
    let halt = all.last().unwrap();
    assert_eq!(
        (halt["type"].as_str(), halt["halt_reason"].as_str()),
        (Some("halt"), Some("human_required"))
    );
    assert!(!envelope(dir.path(), "s").exists(), "nothing is sealed");
}

#[test]
fn verify_of_a_halted_unsealed_run_fails_naming_the_missing_seal() {
    let dir = workdir();
    unsealed_green(dir.path());
    let verified = loopexec(
        dir.path(),
        &["verify", "--json", "s", "--pubkey", &pubkey()],
    );
    assert_eq!(verified.code, 13, "{verified:?}");
    let v = verified.json();
    assert_eq!(v["verified"], false);
    assert_eq!(
        v.get("verdict"),
        None,
        "no verdict on a halt that was never sealed, as explain-halt gives none"
    );
    let failed: Vec<&str> = v["verify"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(failed, vec!["sealed"]);
    assert_eq!(
        check(&v, "sealed")["detail"],
        "the run halted (human_required) but was never sealed: there is no envelope.dsse.json (the supervisor died between the halt and the seal); `loopexec run --resume s` finishes the seal"
    );
}

#[test]
fn explain_halt_of_a_halted_unsealed_run_says_it_is_not_sealed_and_gives_no_verdict() {
    let dir = workdir();
    unsealed_green(dir.path());
    let explained = loopexec(dir.path(), &["explain-halt", "--json", "s"]);
    assert_eq!(explained.code, 0, "{explained:?}");
    let v = explained.json();
    assert_eq!(
        (v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (Some("human_required"), Some(1))
    );
    assert_eq!(
        v["explanation"],
        serde_json::json!({
            "halted": true,
            "sealed": false,
            "consistent": true,
            "summary": "halted human_required at iteration 1, but the run is not sealed (its supervisor died between the halt and the seal); `loopexec run --resume s` finishes the seal",
            "next_command": "loopexec run --resume s",
            "verdict": Value::Null,
        })
    );
}

#[test]
fn resume_of_a_halted_unsealed_run_seals_it_with_a_run_key_endorsed_after_the_halt_and_it_verifies()
{
    let dir = workdir();
    unsealed_green(dir.path());
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "s"]);
    assert_eq!(resumed.code, 11, "{resumed:?}");
    let r = resumed.json();
    assert_eq!(
        (r["halt_reason"].as_str(), r["state"].as_str()),
        (Some("human_required"), Some("halted")),
        "{r}"
    );
    assert_eq!(
        (
            &r["run"]["resumed"],
            &r["run"]["sealed"],
            &r["run"]["finished_seal"]
        ),
        (&Value::from(true), &Value::from(true), &Value::from(true))
    );
    assert_eq!(
        after_the_halt(dir.path(), "s"),
        vec!["seal_resumed", "run_key"]
    );
    let verified = loopexec(
        dir.path(),
        &["verify", "--json", "s", "--pubkey", &pubkey()],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
    let v = verified.json();
    assert_eq!(
        check(&v, "run_key_endorsement")["detail"],
        "2 run key(s) endorsed by operator key"
    );
    assert_eq!(check(&v, "halt_derivation")["ok"], true);
    assert_eq!(
        check(&v, "seal_completion")["detail"],
        "the halt is followed only by the seal's completion (1 seal_resumed, each run key minted and endorsed after the halt by the resume that finished the seal)"
    );
    let state: Value = serde_json::from_slice(
        &std::fs::read(run_dir(dir.path(), "s").join("state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (
            state["state"].as_str(),
            state["halt_reason"].as_str(),
            state["exit_code"].as_i64()
        ),
        (Some("halted"), Some("human_required"), Some(11))
    );
}

#[test]
fn explain_halt_gives_its_verdict_once_the_resume_sealed_the_run() {
    let dir = workdir();
    unsealed_green(dir.path());
    assert_eq!(
        loopexec(dir.path(), &["run", "--json", "--resume", "s"]).code,
        11
    );
    let v = loopexec(dir.path(), &["explain-halt", "--json", "s"]).json();
    assert_eq!(
        v["explanation"]["verdict"]["verdict"], "human_needed",
        "{v}"
    );
    assert_eq!(v["explanation"].get("sealed"), None);
}

#[test]
fn a_second_resume_of_the_run_the_first_one_sealed_is_run_already_halted_and_appends_nothing() {
    let dir = workdir();
    unsealed_green(dir.path());
    assert_eq!(
        loopexec(dir.path(), &["run", "--json", "--resume", "s"]).code,
        11
    );
    let (receipt, sealed) = (
        receipt_bytes(dir.path(), "s"),
        std::fs::read(envelope(dir.path(), "s")).unwrap(),
    );
    let again = loopexec(dir.path(), &["run", "--json", "--resume", "s"]);
    assert_eq!(
        (again.code, again.json()["errors"][0]["code"].as_str()),
        (20, Some("run_already_halted")),
        "{again:?}"
    );
    assert_eq!(
        receipt_bytes(dir.path(), "s"),
        receipt,
        "nothing is appended"
    );
    assert_eq!(
        std::fs::read(envelope(dir.path(), "s")).unwrap(),
        sealed,
        "the envelope is the first resume's"
    );
}

#[test]
fn a_halted_unsealed_run_whose_halt_does_not_follow_is_refused_by_resume_and_nothing_is_sealed() {
    let dir = workdir();
    // A red check at the cap: the supervisor halts max_iterations_reached and is killed before it seals.
    killed_between_halt_and_seal(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--run-id",
            "s",
            "--no-baseline",
            "--exec",
            "true",
            "--check",
            "exit 3",
            "--max-iterations",
            "1",
        ],
    );
    // The halt line taken off and a success chained in its place: correctly chained, no key needed.
    let path = run_dir(dir.path(), "s").join("receipt.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text.lines().collect();
    assert!(
        kept.last().unwrap().contains("\"max_iterations_reached\""),
        "the supervisor recorded its halt"
    );
    std::fs::write(&path, format!("{}\n", kept[..kept.len() - 1].join("\n"))).unwrap();
    let run = loopexec::safefs::SafeDir::open(&run_dir(dir.path(), "s")).unwrap();
    let (mut log, _) = loopexec::receipt::chain::ReceiptLog::open(&run, "receipt.jsonl").unwrap();
    log.append_event(&loopexec::receipt::events::Event::Halt(
        loopexec::receipt::events::HaltRecord {
            halt_reason: loopexec::halt::HaltReason::SuccessConditionMet,
            exit_code: 10,
            iteration: 1,
            detail: "the check passed at iteration 1".into(),
            delivery: None,
        },
    ))
    .unwrap();
    let before = receipt_bytes(dir.path(), "s");
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "s"]);
    assert_eq!(
        (resumed.code, resumed.json()["errors"][0]["code"].as_str()),
        (30, Some("workspace_invalid")),
        "{resumed:?}"
    );
    let message = resumed.json()["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("the recorded halt does not follow from its observations"),
        "{message}"
    );
    assert_eq!(
        receipt_bytes(dir.path(), "s"),
        before,
        "nothing is appended"
    );
    assert!(!envelope(dir.path(), "s").exists(), "nothing is sealed");
}

#[test]
fn resume_refuses_a_halted_unsealed_run_with_an_endorsed_run_key_no_resume_minted_after_its_halt() {
    let dir = workdir();
    unsealed_green(dir.path());
    // The operator key endorses a run key chained right after the halt, with no `seal_resumed`:
    // not the seal's completion, whoever signed it.
    let run = loopexec::safefs::SafeDir::open(&run_dir(dir.path(), "s")).unwrap();
    let (mut log, _) = loopexec::receipt::chain::ReceiptLog::open(&run, "receipt.jsonl").unwrap();
    let operator =
        loopexec::receipt::keys::OperatorKey::load(&key_dir().join("operator.key")).unwrap();
    loopexec::receipt::seal::endorse_run_key(
        &mut log,
        "s",
        &loopexec::receipt::keys::RunKey::mint(),
        &operator,
    )
    .unwrap();
    let lines = receipt_bytes(dir.path(), "s")
        .iter()
        .filter(|b| **b == b'\n')
        .count();
    let before = receipt_bytes(dir.path(), "s");
    let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "s"]);
    assert_eq!(
        (resumed.code, resumed.json()["errors"][0]["code"].as_str()),
        (30, Some("workspace_invalid")),
        "{resumed:?}"
    );
    let message = resumed.json()["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.ends_with(&format!(
            "receipt.jsonl: the receipt holds events after its halt that are not the seal's completion: receipt line {lines}: a run_key after the halt (line {}) that does not directly follow a seal_resumed",
            lines - 1
        )),
        "{message}"
    );
    assert_eq!(
        receipt_bytes(dir.path(), "s"),
        before,
        "nothing is appended"
    );
    assert!(!envelope(dir.path(), "s").exists(), "nothing is sealed");
}

/// A repository whose agent writes the answer the check wants: one detached, sandboxed
/// iteration that halts success_condition_met and delivers `loopexec/d`.
fn answering_repo() -> tempfile::TempDir {
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    repo
}

#[test]
fn a_detached_sandboxed_run_killed_between_halt_and_seal_is_sealed_by_resume_and_delivered_once() {
    let repo = answering_repo();
    killed_between_halt_and_seal(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "d",
            "--no-baseline",
            "--max-iterations",
            "2",
            "--exec",
            "echo 42 > answer",
            "--check",
            "grep -qx 42 answer",
        ],
    );
    let halt = all_events(repo.path(), "d").last().unwrap().clone();
    assert_eq!(
        (halt["type"].as_str(), halt["halt_reason"].as_str()),
        (Some("halt"), Some("success_condition_met"))
    );
    // Delivery happens before the halt line, which records it: the branch is there already.
    assert_eq!(halt["delivery"]["branch"], "loopexec/d");
    let delivered = git_value(repo.path(), &["rev-parse", "loopexec/d"]);
    assert!(!envelope(repo.path(), "d").exists(), "nothing is sealed");
    let resumed = loopexec(repo.path(), &["run", "--json", "--resume", "d"]);
    assert_eq!(
        (resumed.code, resumed.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{resumed:?}"
    );
    let verified = loopexec(
        repo.path(),
        &["verify", "--json", "d", "--pubkey", &pubkey()],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
    assert_eq!(check(&verified.json(), "halt_derivation")["ok"], true);
    let branches = git(
        repo.path(),
        &[
            "for-each-ref",
            "--format=%(refname:short) %(objectname)",
            "refs/heads/loopexec/",
        ],
    );
    assert_eq!(
        branches,
        format!("loopexec/d {delivered}\n"),
        "one branch, as the halt delivered it"
    );
    assert_eq!(
        git_value(repo.path(), &["rev-parse", "loopexec/d^{tree}"]),
        halt["delivery"]["tree"].as_str().unwrap()
    );
    assert_eq!(git_value(repo.path(), &["show", "loopexec/d:answer"]), "42");
    // The seal names the delivered tree as the end state.
    let sealed: Value =
        serde_json::from_slice(&std::fs::read(envelope(repo.path(), "d")).unwrap()).unwrap();
    let statement: Value = {
        use base64::Engine;
        serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(sealed["payload"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    let end_state = statement["subject"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "end-state")
        .cloned();
    assert_eq!(
        end_state.map(|s| s["digest"]["gitTree"].clone()),
        Some(halt["delivery"]["tree"].clone())
    );
    let again = loopexec(repo.path(), &["run", "--json", "--resume", "d"]);
    assert_eq!(
        again.json()["errors"][0]["code"],
        "run_already_halted",
        "{again:?}"
    );
    assert_eq!(
        git(
            repo.path(),
            &[
                "for-each-ref",
                "--format=%(refname:short) %(objectname)",
                "refs/heads/loopexec/"
            ]
        ),
        branches
    );
}
