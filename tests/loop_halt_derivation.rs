//! A `halt` line is never trusted: one that does not follow from the receipt's recorded
//! observations (a success chained, correctly, after a red check; a `progress` event rewritten
//! to say the targets were met, and the chain rebuilt after it) is refused by `run --resume` and
//! given no verdict by `explain-halt`; a judgement whose lists are in an artifact that is gone
//! is named not replayed by `verify` (docs/receipt.md, "Replayed verdicts").
mod common;
use common::*;
use loopexec::halt::HaltReason;
use loopexec::receipt::events::{Event, HaltRecord};
use serde_json::Value;
use std::path::Path;

const MISMATCH: &str = "the halt records success_condition_met at iteration 1, but that iteration's recorded stages decide continue (no halt)";

/// Run r paused after one red iteration, with a `halt` claiming success chained after it: what
/// anyone who can write the receipt can do, with no key at all.
fn forged_success_after_a_red_check(dir: &Path) {
    let r = loopexec(
        dir,
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--run-id",
            "r",
            "--no-baseline",
            "--once",
            "--exec",
            "true",
            "--check",
            "exit 3",
        ],
    );
    assert_eq!(
        (r.code, r.json()["state"].as_str()),
        (0, Some("paused")),
        "{r:?}"
    );
    let run = loopexec::safefs::SafeDir::open(&run_dir(dir, "r")).unwrap();
    let (mut log, _) = loopexec::receipt::chain::ReceiptLog::open(&run, "receipt.jsonl").unwrap();
    log.append_event(&Event::Halt(HaltRecord {
        halt_reason: HaltReason::SuccessConditionMet,
        exit_code: 10,
        iteration: 1,
        detail: "the check passed at iteration 1".into(),
        delivery: None,
    }))
    .unwrap();
}

fn receipt_bytes(dir: &Path) -> Vec<u8> {
    std::fs::read(run_dir(dir, "r").join("receipt.jsonl")).unwrap()
}

/// `run --resume r` refuses the run, exit 30 `workspace_invalid`, saying its halt does not follow
/// (`mismatch`); nothing is appended to the receipt and nothing is sealed.
fn assert_resume_refused(dir: &Path, mismatch: &str) {
    let before = receipt_bytes(dir);
    let resumed = loopexec(dir, &["run", "--json", "--resume", "r"]);
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
            "receipt.jsonl: the recorded halt does not follow from its observations: {mismatch}"
        )),
        "{message}"
    );
    assert_eq!(
        receipt_bytes(dir),
        before,
        "nothing is appended to the receipt"
    );
    assert!(
        !run_dir(dir, "r").join("envelope.dsse.json").exists(),
        "nothing is sealed"
    );
}

#[test]
fn resume_refuses_a_forged_success_after_a_red_check_as_workspace_invalid_naming_both_reasons() {
    let dir = workdir();
    forged_success_after_a_red_check(dir.path());
    assert_resume_refused(dir.path(), MISMATCH);
}

#[test]
fn explain_halt_gives_no_verdict_on_a_forged_success_after_a_red_check() {
    let dir = workdir();
    forged_success_after_a_red_check(dir.path());
    let receipt = path_str(&run_dir(dir.path(), "r").join("receipt.jsonl"));
    let explained = loopexec(
        dir.path(),
        &["explain-halt", "--json", "--receipt", &receipt],
    );
    assert_eq!(explained.code, 0, "{explained:?}");
    let v = explained.json();
    assert_eq!(v["halt_reason"], "success_condition_met");
    assert_eq!(
        v["explanation"],
        serde_json::json!({
            "halted": true,
            "consistent": false,
            "summary": format!("the recorded halt does not follow from the receipt's observations: {MISMATCH}"),
            "derived": "continue (no halt)",
            "derived_at": 1,
            "verdict": Value::Null,
        })
    );
}

#[test]
fn explain_halt_of_an_honest_halt_gives_its_verdict() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--run-id",
            "r",
            "--no-baseline",
            "--exec",
            "true",
            "--check",
            "exit 3",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.code, 12, "{r:?}");
    let receipt = path_str(&run_dir(dir.path(), "r").join("receipt.jsonl"));
    let v = loopexec(
        dir.path(),
        &["explain-halt", "--json", "--receipt", &receipt],
    )
    .json();
    assert_eq!(
        v["explanation"]["verdict"]["verdict"], "human_needed",
        "{v}"
    );
    assert_eq!(v["explanation"].get("consistent"), None);
}

#[test]
fn report_says_a_forged_success_after_a_red_check_does_not_follow() {
    let dir = workdir();
    forged_success_after_a_red_check(dir.path());
    let receipt = path_str(&run_dir(dir.path(), "r").join("receipt.jsonl"));
    let reported = loopexec(dir.path(), &["report", "--json", "--receipt", &receipt]);
    assert_eq!(reported.code, 0, "{reported:?}");
    assert_eq!(
        reported.json()["report"]["halt_derivation"],
        serde_json::json!({"consistent": false, "replayed": true, "detail": MISMATCH, "derived": "continue (no halt)", "derived_at": 1})
    );
    let human = loopexec(dir.path(), &["report", "--receipt", &receipt]);
    assert!(
        human
            .stdout
            .contains(&format!("HALT DOES NOT FOLLOW: {MISMATCH}\n")),
        "{human:?}"
    );
}

#[test]
fn report_of_an_honest_halt_says_it_follows() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--run-id",
            "r",
            "--no-baseline",
            "--exec",
            "true",
            "--check",
            "exit 3",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.code, 12, "{r:?}");
    let receipt = path_str(&run_dir(dir.path(), "r").join("receipt.jsonl"));
    let derivation = loopexec(dir.path(), &["report", "--json", "--receipt", &receipt]).json()
        ["report"]["halt_derivation"]
        .clone();
    assert_eq!(
        derivation,
        serde_json::json!({"consistent": true, "replayed": true, "detail": "max_iterations_reached follows from the recorded observations (2 iteration decision(s) re-derived)"})
    );
}

/// A faulty or subverted supervisor: it holds the run key it minted, so the seal it makes is
/// valid. Run r's red iteration is written again into a fresh receipt with a run key this test
/// mints and endorses with the test's operator key (the one line that changes), the forged
/// success is chained after it, and the receipt is sealed with that key.
fn sealed_forged_success_after_a_red_check(dir: &Path) {
    use loopexec::receipt::{
        chain::ReceiptLog,
        events::Recorded,
        keys::{OperatorKey, RunKey},
        seal,
    };
    let r = loopexec(
        dir,
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--run-id",
            "r",
            "--no-baseline",
            "--once",
            "--exec",
            "true",
            "--check",
            "exit 3",
        ],
    );
    assert_eq!(
        (r.code, r.json()["state"].as_str()),
        (0, Some("paused")),
        "{r:?}"
    );
    let run = loopexec::safefs::SafeDir::open(&run_dir(dir, "r")).unwrap();
    let (_, lines) = ReceiptLog::open(&run, "receipt.jsonl").unwrap();
    let recorded = Recorded::decode_all(&lines).unwrap();
    std::fs::remove_file(run_dir(dir, "r").join("receipt.jsonl")).unwrap();
    let operator = OperatorKey::load(&key_dir().join("operator.key")).unwrap();
    let run_key = RunKey::mint();
    let mut log = ReceiptLog::create(&run, "receipt.jsonl").unwrap();
    for record in &recorded {
        match &record.event {
            Event::RunKey(_) => seal::endorse_run_key(&mut log, "r", &run_key, &operator)
                .map(drop)
                .unwrap(),
            event => log.append_event(event).map(drop).unwrap(),
        }
    }
    log.append_event(&Event::Halt(HaltRecord {
        halt_reason: HaltReason::SuccessConditionMet,
        exit_code: 10,
        iteration: 1,
        detail: "the check passed at iteration 1".into(),
        delivery: None,
    }))
    .unwrap();
    drop(log);
    seal::seal_run(&run, run_key, Vec::new()).unwrap();
}

#[test]
fn verify_fails_a_validly_sealed_forged_success_on_the_halt_derivation_alone_naming_the_iteration()
{
    let dir = workdir();
    sealed_forged_success_after_a_red_check(dir.path());
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let verified = loopexec(dir.path(), &["verify", "--json", "r", "--pubkey", &pubkey]);
    assert_eq!(verified.code, 13, "{verified:?}");
    let checks = verified.json()["verify"]["checks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let failed: Vec<(String, String)> = checks
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_string(),
                c["detail"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        failed,
        vec![("halt_derivation".to_string(), MISMATCH.to_string())],
        "{verified:?}"
    );
    assert_eq!(
        verified.json().get("verdict"),
        None,
        "a receipt that does not verify gets no verdict"
    );
}

/// A check writing a JUnit report of `tests` tests (`t::t0`, `t::t1`, ...) of which `t::t0` fails.
fn junit_check(tests: usize) -> String {
    format!(
        "mkdir -p out && {{ printf '<testsuite tests=\"{tests}\" failures=\"1\">'; printf '<testcase classname=\"t\" name=\"t0\"><failure message=\"x\"/></testcase>'; \
         i=1; while [ $i -lt {tests} ]; do printf '<testcase classname=\"t\" name=\"t%s\"/>' $i; i=$((i+1)); done; printf '</testsuite>'; }} > out/junit.xml; exit 1"
    )
}

/// The receipt's lines, each a JSON object.
fn receipt_lines(dir: &Path) -> Vec<serde_json::Map<String, Value>> {
    String::from_utf8(receipt_bytes(dir))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const FORGED_PROGRESS: &str = "the progress judgement of iteration 1 is recorded as accepted true, no halt, targets_met true, \
                               but its recorded observations give accepted true, no halt, targets_met false";

/// Run r paused after one red iteration whose report names its tests, its `progress` event
/// rewritten to say every target was met and the chain rebuilt from it, then a `halt` claiming
/// the success that `targets_met` would give: every line chained, with no key at all.
fn forged_targets_met(dir: &Path) {
    let check = junit_check(3);
    let r = loopexec(
        dir,
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--run-id",
            "r",
            "--once",
            "--exec",
            "true",
            "--check",
            &check,
            "--report",
            "out/junit.xml",
        ],
    );
    assert_eq!(
        (r.code, r.json()["state"].as_str()),
        (0, Some("paused")),
        "{r:?}"
    );
    let lines = receipt_lines(dir);
    let at = lines
        .iter()
        .position(|l| l["type"] == "progress")
        .expect("a progress event");
    let events: Vec<Event> = loopexec::receipt::events::Recorded::decode_all(&lines)
        .unwrap()
        .into_iter()
        .map(|r| r.event)
        .collect();
    let kept: String = String::from_utf8(receipt_bytes(dir))
        .unwrap()
        .lines()
        .take(at)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(run_dir(dir, "r").join("receipt.jsonl"), kept).unwrap();
    let run = loopexec::safefs::SafeDir::open(&run_dir(dir, "r")).unwrap();
    let (mut log, _) = loopexec::receipt::chain::ReceiptLog::open(&run, "receipt.jsonl").unwrap();
    for event in &events[at..] {
        let mut event = event.clone();
        if let Event::Progress(p) = &mut event {
            assert!(!p.targets_met, "the honest judgement");
            p.targets_met = true;
        }
        log.append_event(&event).unwrap();
    }
    log.append_event(&Event::Halt(HaltRecord {
        halt_reason: HaltReason::SuccessConditionMet,
        exit_code: 10,
        iteration: 1,
        detail: "every target passes at iteration 1".into(),
        delivery: None,
    }))
    .unwrap();
}

#[test]
fn resume_refuses_a_rewritten_progress_event_that_claims_the_targets_met() {
    let dir = workdir();
    forged_targets_met(dir.path());
    assert_resume_refused(dir.path(), FORGED_PROGRESS);
}

#[test]
fn explain_halt_gives_no_verdict_on_a_rewritten_progress_event() {
    let dir = workdir();
    forged_targets_met(dir.path());
    let receipt = path_str(&run_dir(dir.path(), "r").join("receipt.jsonl"));
    let explained = loopexec(
        dir.path(),
        &["explain-halt", "--json", "--receipt", &receipt],
    );
    assert_eq!(explained.code, 0, "{explained:?}");
    assert_eq!(
        explained.json()["explanation"],
        serde_json::json!({
            "halted": true,
            "consistent": false,
            "summary": format!("the recorded halt does not follow from the receipt's observations: {FORGED_PROGRESS}"),
            "derived": "accepted true, no halt, targets_met false",
            "derived_at": 1,
            "verdict": Value::Null,
        })
    );
}

#[test]
fn verify_names_the_judgements_whose_sets_are_in_a_removed_artifact_not_replayed() {
    let dir = workdir();
    // Over the receipt's inline bound (1000 ids): the sets are moved to run artifacts.
    let check = junit_check(1001);
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--run-id",
            "r",
            "--max-iterations",
            "1",
            "--exec",
            "true",
            "--check",
            &check,
            "--report",
            "out/junit.xml",
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (12, Some("max_iterations_reached")),
        "{r:?}"
    );
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let derivation = |dir: &Path| {
        let v = loopexec(
            dir,
            &[
                "verify",
                "--json",
                &path_str(&run_dir(dir, "r")),
                "--pubkey",
                &pubkey,
            ],
        )
        .json();
        v["verify"]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "halt_derivation")
            .cloned()
            .expect("a halt_derivation check")
    };
    assert_eq!(
        derivation(dir.path()),
        serde_json::json!({"name": "halt_derivation", "ok": true, "detail": "max_iterations_reached follows from the recorded observations (1 iteration decision(s) re-derived)"})
    );
    let x = events(dir.path(), "r")
        .into_iter()
        .find(|e| e["type"] == "externalised" && e["of"] == "check_result" && e["iteration"] == 1)
        .expect("iteration 1's sets externalised");
    let artifact = x["artifact"]["path"].as_str().unwrap().to_string();
    std::fs::remove_file(run_dir(dir.path(), "r").join(&artifact)).unwrap();
    let lists: Vec<&String> = x["lists"].as_object().unwrap().keys().collect();
    let why = format!(
        "check_result {} of iteration 1 is in {artifact}, absent or changed",
        lists[0]
    );
    assert_eq!(
        derivation(dir.path()),
        serde_json::json!({
            "name": "halt_derivation",
            "ok": true,
            "detail": format!("max_iterations_reached follows from the recorded observations (1 iteration decision(s) re-derived); judgement(s) not replayed: progress of iteration 1 ({why})"),
        })
    );
}
