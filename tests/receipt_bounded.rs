//! A bounded receipt whatever the agent does (issue 11 item 7): a check reporting 200,000
//! failing tests, or an agent adding 200,000 protected paths, leaves a receipt under a stated
//! bound, the full sets in a run artifact the
//! receipt names by digest, and `report` and `verify` still work (verify checks the artifact when
//! present and says what it cannot check when it is absent).

mod common;
use common::*;
use std::path::Path;

/// 200,000 failing test cases in one JUnit report, and a failing exit.
const CHECK: &str = "mkdir -p out && /usr/bin/python3 -c \"import sys; n=200000; w=sys.stdout.write; w('<testsuite tests=\\\"%d\\\" failures=\\\"%d\\\">' % (n, n)); [w('<testcase classname=\\\"tests.generated\\\" name=\\\"case_%06d\\\"><failure message=\\\"no\\\"/></testcase>' % i) for i in range(n)]; w('</testsuite>')\" > out/r.xml; exit 1";

/// The stated bound: a receipt of two such iterations stays under 1 MiB (inline, the failing and
/// collected sets would add about 12 MB per iteration).
const RECEIPT_BOUND: u64 = 1 << 20;

fn two_iterations(dir: &Path) {
    let r = loopexec(
        dir,
        &[
            "run",
            "--json",
            "--no-baseline",
            "--run-id",
            "big",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            CHECK,
            "--report",
            "out/r.xml",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.json()["halt_reason"], "max_iterations_reached", "{r:?}");
}

#[test]
fn two_hundred_thousand_failing_tests_leave_a_bounded_receipt_that_reports_and_verifies() {
    let dir = workdir();
    two_iterations(dir.path());
    let size = std::fs::metadata(run_dir(dir.path(), "big").join("receipt.jsonl"))
        .unwrap()
        .len();
    eprintln!("receipt of 2 iterations x 200,000 failing tests: {size} bytes");
    assert!(size < RECEIPT_BOUND, "receipt is {size} bytes");
    let evs = events(dir.path(), "big");
    let checks: Vec<_> = evs.iter().filter(|e| e["type"] == "check_result").collect();
    assert_eq!(checks.len(), 2);
    assert!(checks
        .iter()
        .all(|c| c["failing_count"] == 200_000 && c["failing_set"].is_null()));
    let ext: Vec<_> = evs.iter().filter(|e| e["type"] == "externalised").collect();
    assert_eq!(ext.len(), 2);
    let failing = &ext[0]["lists"]["failing_set"];
    assert_eq!(
        (failing["count"].as_u64(), failing["sample"][0].as_str()),
        (Some(200_000), Some("tests.generated::case_000000"))
    );
    let artifact = run_dir(dir.path(), "big").join(ext[0]["artifact"]["path"].as_str().unwrap());
    let whole: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&artifact).unwrap()).unwrap();
    assert_eq!(whole["failing_set"].as_array().unwrap().len(), 200_000);

    let report = loopexec(dir.path(), &["report", "--json", "big"]);
    assert_eq!(report.code, 0, "{report:?}");
    let verified = loopexec(
        dir.path(),
        &[
            "verify",
            "--json",
            "big",
            "--pubkey",
            &path_str(&key_dir().join("operator.pub")),
        ],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
    // Per iteration: the externalised sets, and the failure excerpts (`message="no"`, 50 kept).
    assert!(
        verified
            .stdout
            .contains("4 artifact(s) match their digests"),
        "{}",
        verified.stdout
    );
}

#[test]
fn verify_says_which_artifact_it_could_not_check_and_refuses_a_changed_one() {
    let dir = workdir();
    two_iterations(dir.path());
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let arts = run_dir(dir.path(), "big").join("artifacts");
    std::fs::remove_file(arts.join("check_result-0001.json")).unwrap();
    let absent = loopexec(
        dir.path(),
        &["verify", "--json", "big", "--pubkey", &pubkey],
    );
    assert_eq!(absent.code, 0, "{absent:?}");
    assert!(absent.stdout.contains("1 absent, their full lists not checked (counts, digests and samples are): artifacts/check_result-0001.json"), "{}", absent.stdout);
    std::fs::write(arts.join("check_result-0002.json"), b"{\"failing_set\":[]}").unwrap();
    let changed = loopexec(
        dir.path(),
        &["verify", "--json", "big", "--pubkey", &pubkey],
    );
    assert_eq!(changed.code, 13, "{changed:?}");
    assert!(
        changed
            .stdout
            .contains("artifacts/check_result-0002.json: 18 bytes"),
        "{}",
        changed.stdout
    );
}

#[test]
fn two_hundred_thousand_protected_paths_changed_leave_a_bounded_receipt_that_verifies() {
    let repo = workdir();
    std::fs::create_dir(repo.path().join("tests")).unwrap();
    std::fs::write(
        repo.path().join("tests/test_a.py"),
        "def test_a():\n    assert True\n",
    )
    .unwrap();
    commit_t0(repo.path());
    let exec = "/usr/bin/python3 -c \"import os\nfor d in range(200):\n    os.makedirs('tests/g%03d' % d)\n    for f in range(1000):\n        open('tests/g%03d/t%04d.py' % (d, f), 'w').close()\"";
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "many",
            "--exec",
            exec,
            "--check",
            "true",
            "--max-iterations",
            "1",
            "--no-baseline",
        ],
    );
    assert_eq!(r.json()["halt_reason"], "blocked_path_modified", "{r:?}");
    let size = std::fs::metadata(run_dir(repo.path(), "many").join("receipt.jsonl"))
        .unwrap()
        .len();
    eprintln!("receipt of 1 iteration x 200,000 protected paths added: {size} bytes");
    assert!(size < RECEIPT_BOUND, "receipt is {size} bytes");
    let evs = events(repo.path(), "many");
    let halt = evs.iter().find(|e| e["type"] == "halt").unwrap();
    assert!(
        halt["detail"]
            .as_str()
            .unwrap()
            .ends_with("tests/g000/t0019.py (and 199980 more)"),
        "{}",
        halt["detail"]
    );
    let snap = evs.iter().find(|e| e["type"] == "snapshot").unwrap();
    assert_eq!(
        (
            snap["changed_paths"].as_u64(),
            snap["protected_changes"].as_array().map(Vec::len)
        ),
        (Some(200_000), Some(20))
    );
    let ext = evs.iter().find(|e| e["type"] == "externalised").unwrap();
    assert_eq!(
        (
            ext["of"].as_str(),
            ext["lists"]["protected_changes"]["count"].as_u64()
        ),
        (Some("snapshot"), Some(200_000))
    );
    let verified = loopexec(
        repo.path(),
        &[
            "verify",
            "--json",
            "many",
            "--pubkey",
            &path_str(&key_dir().join("operator.pub")),
        ],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
    assert!(
        verified
            .stdout
            .contains("1 artifact(s) match their digests"),
        "{}",
        verified.stdout
    );
    assert_eq!(loopexec(repo.path(), &["report", "--json", "many"]).code, 0);
}

// Issue 19 item 1: the bound covers every event that embeds check evidence, whatever its shape.

/// Most bytes of one receipt line (`receipt::bounded::MAX_LINE_BYTES`).
const LINE_BOUND: usize = 1 << 20;

/// The length of every line of run `run_id`'s receipt, by type.
fn line_sizes(dir: &Path, run_id: &str) -> Vec<(String, usize)> {
    let bytes = std::fs::read(run_dir(dir, run_id).join("receipt.jsonl")).unwrap();
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            (
                serde_json::from_slice::<serde_json::Value>(l).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                l.len(),
            )
        })
        .collect()
}

fn largest_line(dir: &Path, run_id: &str) -> usize {
    line_sizes(dir, run_id)
        .into_iter()
        .map(|(_, n)| n)
        .max()
        .unwrap()
}

fn line_of(dir: &Path, run_id: &str, kind: &str) -> usize {
    line_sizes(dir, run_id)
        .into_iter()
        .find(|(t, _)| t == kind)
        .unwrap_or_else(|| panic!("no {kind} line"))
        .1
}

/// `loopexec verify` passes and re-hashes `n` artifacts.
fn verifies_with_artifacts(dir: &Path, run_id: &str, n: usize) {
    let verified = loopexec(
        dir,
        &[
            "verify",
            "--json",
            run_id,
            "--pubkey",
            &path_str(&key_dir().join("operator.pub")),
        ],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
    assert!(
        verified
            .stdout
            .contains(&format!("{n} artifact(s) match their digests")),
        "{}",
        verified.stdout
    );
}

/// A check writing `n` JUnit files under `out/` (each one test case, failing when `fail`), then
/// exiting `exit`.
fn many_reports(n: usize, fail: bool, exit: i32) -> String {
    let case = if fail {
        r#"<testcase classname=\\\"t\\\" name=\\\"c\\\"><failure message=\\\"no\\\"/></testcase>"#
    } else {
        r#"<testcase classname=\\\"t\\\" name=\\\"c\\\"/>"#
    };
    format!("/usr/bin/python3 -c \"import os\nos.makedirs('out', exist_ok=True)\nfor i in range({n}):\n    open('out/r%05d.xml' % i, 'w').write('<testsuite>{case}</testsuite>')\"; exit {exit}")
}

#[test]
fn ten_thousand_reports_matched_by_one_glob_leave_bounded_lines_with_their_evidence_in_an_artifact()
{
    let dir = workdir();
    // Exit 0 with every report failing: 10,000 reports and 10,000 disagreements.
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--run-id",
            "reports",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            &many_reports(10_000, true, 0),
            "--report",
            "out/*.xml",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    let detail = r.json()["run"]["detail"].as_str().unwrap().to_string();
    assert!(
        detail.ends_with("report out/r00019.xml: 1 failing test(s), e.g. t::c (and 9980 more)"),
        "{detail}"
    );
    let (check, largest) = (
        line_of(dir.path(), "reports", "check_result"),
        largest_line(dir.path(), "reports"),
    );
    eprintln!("10,000 reports: check_result line {check} bytes, largest line {largest} bytes");
    assert!(check < 64 * 1024, "check_result line of {check} bytes");
    assert!(largest <= LINE_BOUND, "a line of {largest} bytes");
    let evs = events(dir.path(), "reports");
    let c = evs.iter().find(|e| e["type"] == "check_result").unwrap();
    assert_eq!(
        (
            c["evidence"]["verdict"].as_str(),
            c["evidence"]["reports"].as_array().map(Vec::len)
        ),
        (Some("disagree"), Some(20))
    );
    assert_eq!(
        c["evidence"]["disagreements"].as_array().map(Vec::len),
        Some(20)
    );
    let x = evs
        .iter()
        .find(|e| e["type"] == "externalised" && e["of"] == "check_result")
        .unwrap();
    assert_eq!(
        (
            x["lists"]["evidence.reports"]["count"].as_u64(),
            x["lists"]["evidence.disagreements"]["count"].as_u64()
        ),
        (Some(10_000), Some(10_000))
    );
    let whole: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            run_dir(dir.path(), "reports").join(x["artifact"]["path"].as_str().unwrap()),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        whole["evidence.reports"].as_array().map(Vec::len),
        Some(10_000)
    );
    // The externalised evidence and the failure excerpts.
    verifies_with_artifacts(dir.path(), "reports", 2);
}

#[test]
fn a_report_path_thousands_of_characters_long_is_recorded_escaped_and_cut() {
    let dir = workdir();
    // 12 directories of 200 characters, one holding a report whose name carries an escape.
    let deep = (0..12)
        .map(|i| format!("{i}{}", "d".repeat(199)))
        .collect::<Vec<_>>()
        .join("/");
    let check = format!("/usr/bin/python3 -c \"import os\nos.makedirs('out/{deep}')\nopen('out/{deep}/r\\x1b.xml', 'w').write('<testsuite><testcase classname=\\\"t\\\" name=\\\"c\\\"/></testsuite>')\"; exit 1");
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--run-id",
            "deep",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            &check,
            "--report",
            "out/**/*.xml",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.json()["halt_reason"], "max_iterations_reached", "{r:?}");
    let evs = events(dir.path(), "deep");
    let c = evs.iter().find(|e| e["type"] == "check_result").unwrap();
    let path = c["evidence"]["reports"][0]["path"].as_str().unwrap();
    assert_eq!(path.chars().count(), 512 + 3, "{path}");
    assert!(
        path.starts_with("out/0ddd") && path.ends_with("...") && !path.contains('\x1b'),
        "{path}"
    );
    assert!(largest_line(dir.path(), "deep") < 64 * 1024);
}

#[test]
fn a_confirmation_of_two_hundred_thousand_and_one_tests_is_bounded_like_its_check_result() {
    let dir = workdir();
    let check = "mkdir -p out && /usr/bin/python3 -c \"import sys; n=200001; w=sys.stdout.write; w('<testsuite tests=\\\"%d\\\">' % n); [w('<testcase classname=\\\"tests.generated\\\" name=\\\"case_%06d\\\"/>' % i) for i in range(n)]; w('</testsuite>')\" > out/r.xml";
    std::fs::write(dir.path().join("value.txt"), "t0\n").unwrap();
    commit_t0(dir.path());
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--run-id",
            "confirmed",
            "--exec",
            "true",
            "--check",
            check,
            "--report",
            "out/r.xml",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.json()["halt_reason"], "success_condition_met", "{r:?}");
    let (confirmation, largest) = (
        line_of(dir.path(), "confirmed", "check_confirmation"),
        largest_line(dir.path(), "confirmed"),
    );
    eprintln!("200,001 passing tests: check_confirmation line {confirmation} bytes, largest line {largest} bytes");
    assert!(
        confirmation < 16 * 1024,
        "check_confirmation line of {confirmation} bytes"
    );
    assert!(largest < 64 * 1024, "a line of {largest} bytes");
    let evs = events(dir.path(), "confirmed");
    let c = evs
        .iter()
        .find(|e| e["type"] == "check_confirmation")
        .unwrap();
    assert_eq!(
        (
            c["collected_set"].is_null(),
            c["collected_count"].as_u64(),
            c["agrees"].as_bool()
        ),
        (true, Some(200_001), Some(true))
    );
    let x = evs
        .iter()
        .find(|e| e["type"] == "externalised" && e["of"] == "check_confirmation")
        .unwrap();
    assert_eq!(
        (
            x["lists"]["collected_set"]["count"].as_u64(),
            x["artifact"]["path"].as_str()
        ),
        (
            Some(200_001),
            Some("artifacts/check_confirmation-0001-c1.json")
        )
    );
    // The check_result's sets and the confirmation's.
    verifies_with_artifacts(dir.path(), "confirmed", 2);
}

#[test]
fn the_judge_packet_of_ten_thousand_reports_is_bounded_like_the_receipt() {
    let dir = workdir();
    std::fs::write(dir.path().join("value.txt"), "bad\n").unwrap();
    commit_t0(dir.path());
    let judge = r#"cat > /dev/null; echo '{"verdict":"approve","reason":"looks right"}'"#;
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--run-id",
            "judged",
            "--exec",
            "echo good > value.txt",
            "--check",
            &many_reports(10_000, false, 0),
            "--report",
            "out/*.xml",
            "--judge",
            judge,
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.json()["halt_reason"], "success_condition_met", "{r:?}");
    let evs = events(dir.path(), "judged");
    let j = evs.iter().find(|e| e["type"] == "judge").unwrap();
    let packet_bytes = j["packet_bytes"].as_u64().unwrap();
    let largest = largest_line(dir.path(), "judged");
    eprintln!("10,000 reports, judged: packet {packet_bytes} bytes, largest line {largest} bytes");
    assert!(
        packet_bytes < 64 * 1024,
        "a judge packet of {packet_bytes} bytes"
    );
    assert!(largest < 64 * 1024, "a line of {largest} bytes");
    let packet: serde_json::Value = serde_json::from_slice(
        &std::fs::read(run_dir(dir.path(), "judged").join(j["packet"].as_str().unwrap())).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (
            packet["check"]["reports"].as_array().map(Vec::len),
            packet["check"]["reports_count"].as_u64()
        ),
        (Some(20), Some(10_000))
    );
    assert!(evs.iter().any(|e| e["type"] == "externalised"
        && e["of"] == "check_confirmation"
        && e["lists"]["evidence.reports"]["count"] == 10_000));
}

/// Chain `events` onto run `run_id`'s receipt, each line's `prev` the hash of the line before:
/// what anyone who can write the receipt can do, with no key at all.
fn chain_onto_receipt(dir: &Path, run_id: &str, events: &[loopexec::receipt::events::Event]) {
    let run = loopexec::safefs::SafeDir::open(&run_dir(dir, run_id)).unwrap();
    let (mut log, _) = loopexec::receipt::chain::ReceiptLog::open(&run, "receipt.jsonl").unwrap();
    for event in events {
        log.append_event(event).unwrap();
    }
}

/// A whole-event `externalised` record naming an artifact (written into the run's artifacts/,
/// with its true size and digest) that holds `held`.
fn forged_whole_record(
    dir: &Path,
    run_id: &str,
    held: &loopexec::receipt::events::Event,
) -> loopexec::receipt::events::Event {
    use sha2::Digest;
    let bytes = serde_json::to_vec(&serde_json::json!({ "event": held })).unwrap();
    let arts = run_dir(dir, run_id).join("artifacts");
    std::fs::create_dir_all(&arts).unwrap();
    std::fs::write(arts.join("forged.json"), &bytes).unwrap();
    let artifact = loopexec::receipt::bounded::ArtifactRef {
        path: "artifacts/forged.json".into(),
        bytes: bytes.len() as u64,
        sha256: hex::encode(sha2::Sha256::digest(&bytes)),
    };
    loopexec::receipt::events::Event::Externalised(loopexec::receipt::bounded::Externalised {
        of: held.kind().into(),
        iteration: 1,
        lists: Default::default(),
        artifact,
        whole_event: true,
    })
}

#[test]
fn a_forged_whole_event_record_after_a_check_or_an_acceptance_refuses_resume_and_fails_verify() {
    use loopexec::receipt::events::{Event, RatchetAcceptRecord};
    // Two hostile shapes: a green check in place of the red one recorded, an acceptance of
    // another tree in place of the one recorded.
    for forge in ["check_result", "ratchet_accept"] {
        let dir = workdir();
        let r = loopexec(
            dir.path(),
            &[
                "run",
                "--json",
                "--no-baseline",
                "--run-id",
                "p",
                "--once",
                "--isolation",
                "none",
                "--exec",
                "true",
                "--check",
                "exit 1",
                "--max-iterations",
                "3",
            ],
        );
        assert_eq!(r.code, 0, "{r:?}");
        let last = events(dir.path(), "p")
            .into_iter()
            .rev()
            .find(|e| e["type"] == "check_result")
            .unwrap();
        let (recorded, held) = match forge {
            "check_result" => {
                let red: Event = serde_json::from_value(last).unwrap();
                let Event::CheckResult(mut green) = red.clone() else {
                    unreachable!()
                };
                green.check_exit = Some(0);
                (red, Event::CheckResult(green))
            }
            _ => {
                let accept = |tree: &str| {
                    Event::RatchetAccept(RatchetAcceptRecord {
                        iteration: 1,
                        tree_id: tree.repeat(40),
                        operator_key: "k".into(),
                        signature: "s".into(),
                    })
                };
                (accept("a"), accept("b"))
            }
        };
        let x = forged_whole_record(dir.path(), "p", &held);
        chain_onto_receipt(dir.path(), "p", &[recorded, x]);
        let before = std::fs::read(run_dir(dir.path(), "p").join("receipt.jsonl")).unwrap();
        let resumed = loopexec(dir.path(), &["run", "--json", "--resume", "p", "--once"]);
        assert_eq!(
            (resumed.code, resumed.json()["errors"][0]["code"].as_str()),
            (13, Some("not_verified")),
            "{forge}: {resumed:?}"
        );
        let message = resumed.json()["errors"][0]["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            message.contains("artifacts/forged.json: ")
                && message.contains(&format!("the {forge} event at line")),
            "{message}"
        );
        assert_eq!(
            std::fs::read(run_dir(dir.path(), "p").join("receipt.jsonl")).unwrap(),
            before,
            "nothing is appended"
        );
        let verified = loopexec(
            dir.path(),
            &[
                "verify",
                "--json",
                "p",
                "--pubkey",
                &path_str(&key_dir().join("operator.pub")),
            ],
        );
        let check = verified.json()["verify"]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "externalised_events")
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (verified.code, &check["ok"]),
            (13, &serde_json::json!(false)),
            "{forge}: {verified:?}"
        );
        assert!(
            check["detail"]
                .as_str()
                .unwrap_or("")
                .starts_with("artifacts/forged.json: "),
            "{check}"
        );
    }
}
