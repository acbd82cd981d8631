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
    let r = loopexec(dir, &["run", "--json", "--no-baseline", "--run-id", "big", "--isolation", "none", "--exec", "true", "--check", CHECK, "--report", "out/r.xml", "--max-iterations", "2"]);
    assert_eq!(r.json()["halt_reason"], "max_iterations_reached", "{r:?}");
}

#[test]
fn two_hundred_thousand_failing_tests_leave_a_bounded_receipt_that_reports_and_verifies() {
    let dir = workdir();
    two_iterations(dir.path());
    let size = std::fs::metadata(run_dir(dir.path(), "big").join("receipt.jsonl")).unwrap().len();
    eprintln!("receipt of 2 iterations x 200,000 failing tests: {size} bytes");
    assert!(size < RECEIPT_BOUND, "receipt is {size} bytes");
    let evs = events(dir.path(), "big");
    let checks: Vec<_> = evs.iter().filter(|e| e["type"] == "check_result").collect();
    assert_eq!(checks.len(), 2);
    assert!(checks.iter().all(|c| c["failing_count"] == 200_000 && c["failing_set"].is_null()));
    let ext: Vec<_> = evs.iter().filter(|e| e["type"] == "externalised").collect();
    assert_eq!(ext.len(), 2);
    let failing = &ext[0]["lists"]["failing_set"];
    assert_eq!((failing["count"].as_u64(), failing["sample"][0].as_str()), (Some(200_000), Some("tests.generated::case_000000")));
    let artifact = run_dir(dir.path(), "big").join(ext[0]["artifact"]["path"].as_str().unwrap());
    let whole: serde_json::Value = serde_json::from_slice(&std::fs::read(&artifact).unwrap()).unwrap();
    assert_eq!(whole["failing_set"].as_array().unwrap().len(), 200_000);

    let report = loopexec(dir.path(), &["report", "--json", "big"]);
    assert_eq!(report.code, 0, "{report:?}");
    let verified = loopexec(dir.path(), &["verify", "--json", "big", "--pubkey", &path_str(&key_dir().join("operator.pub"))]);
    assert_eq!(verified.code, 0, "{verified:?}");
    // Per iteration: the externalised sets, and the failure excerpts (`message="no"`, 50 kept).
    assert!(verified.stdout.contains("4 artifact(s) match their digests"), "{}", verified.stdout);
}

#[test]
fn verify_says_which_artifact_it_could_not_check_and_refuses_a_changed_one() {
    let dir = workdir();
    two_iterations(dir.path());
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let arts = run_dir(dir.path(), "big").join("artifacts");
    std::fs::remove_file(arts.join("check_result-0001.json")).unwrap();
    let absent = loopexec(dir.path(), &["verify", "--json", "big", "--pubkey", &pubkey]);
    assert_eq!(absent.code, 0, "{absent:?}");
    assert!(absent.stdout.contains("1 absent, their full lists not checked (counts, digests and samples are): artifacts/check_result-0001.json"), "{}", absent.stdout);
    std::fs::write(arts.join("check_result-0002.json"), b"{\"failing_set\":[]}").unwrap();
    let changed = loopexec(dir.path(), &["verify", "--json", "big", "--pubkey", &pubkey]);
    assert_eq!(changed.code, 13, "{changed:?}");
    assert!(changed.stdout.contains("artifacts/check_result-0002.json: 18 bytes"), "{}", changed.stdout);
}

#[test]
fn two_hundred_thousand_protected_paths_changed_leave_a_bounded_receipt_that_verifies() {
    let repo = workdir();
    std::fs::create_dir(repo.path().join("tests")).unwrap();
    std::fs::write(repo.path().join("tests/test_a.py"), "def test_a():\n    assert True\n").unwrap();
    commit_t0(repo.path());
    let exec = "/usr/bin/python3 -c \"import os\nfor d in range(200):\n    os.makedirs('tests/g%03d' % d)\n    for f in range(1000):\n        open('tests/g%03d/t%04d.py' % (d, f), 'w').close()\"";
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "many", "--exec", exec, "--check", "true", "--max-iterations", "1", "--no-baseline"]);
    assert_eq!(r.json()["halt_reason"], "blocked_path_modified", "{r:?}");
    let size = std::fs::metadata(run_dir(repo.path(), "many").join("receipt.jsonl")).unwrap().len();
    eprintln!("receipt of 1 iteration x 200,000 protected paths added: {size} bytes");
    assert!(size < RECEIPT_BOUND, "receipt is {size} bytes");
    let evs = events(repo.path(), "many");
    let halt = evs.iter().find(|e| e["type"] == "halt").unwrap();
    assert!(halt["detail"].as_str().unwrap().ends_with("tests/g000/t0019.py (and 199980 more)"), "{}", halt["detail"]);
    let snap = evs.iter().find(|e| e["type"] == "snapshot").unwrap();
    assert_eq!((snap["changed_paths"].as_u64(), snap["protected_changes"].as_array().map(Vec::len)), (Some(200_000), Some(20)));
    let ext = evs.iter().find(|e| e["type"] == "externalised").unwrap();
    assert_eq!((ext["of"].as_str(), ext["lists"]["protected_changes"]["count"].as_u64()), (Some("snapshot"), Some(200_000)));
    let verified = loopexec(repo.path(), &["verify", "--json", "many", "--pubkey", &path_str(&key_dir().join("operator.pub"))]);
    assert_eq!(verified.code, 0, "{verified:?}");
    assert!(verified.stdout.contains("1 artifact(s) match their digests"), "{}", verified.stdout);
    assert_eq!(loopexec(repo.path(), &["report", "--json", "many"]).code, 0);
}
