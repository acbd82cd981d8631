//! `loopexec replay`: the recorded check re-run, in an exec zone, on the recorded end-state tree
//! (never on the working copy), compared by a normalised fingerprint with the receipt.
mod common;
use common::*;
use std::path::Path;

/// A committed repository whose `answer` is 41; the agent makes it 42, the check wants 42.
fn answer_repo() -> tempfile::TempDir {
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    repo
}

const AGENT: &str = "echo 42 > answer";
const CHECK_WITH_REPORT: &str = "printf '<testsuite><testcase classname=\"t\" name=\"answer\"/><testcase classname=\"t\" name=\"other\"/></testsuite>' > report.xml; test \"$(cat answer)\" = 42";

#[test]
fn a_converged_run_replays_to_the_same_fingerprint_on_its_delivered_tree() {
    let repo = answer_repo();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "r",
            "--exec",
            AGENT,
            "--check",
            CHECK_WITH_REPORT,
            "--junit",
            "report.xml",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let check = events(repo.path(), "r")
        .into_iter()
        .rev()
        .find(|e| e["type"] == "check_result")
        .unwrap();
    assert_eq!(
        check["collected_set"],
        serde_json::json!(["t::answer", "t::other"])
    );
    assert_eq!(check["collected_count"], 2);
    // The operator's working copy now fails the check: replay must not look at it.
    std::fs::write(repo.path().join("answer"), "0\n").unwrap();
    let out = loopexec(repo.path(), &["replay", "--json", "r"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["replay"]["match"], true);
    assert_eq!(v["replay"]["recorded"]["exit_class"], "pass");
    assert_eq!(v["replay"]["observed"]["exit_class"], "pass");
    assert_eq!(
        v["replay"]["observed"]["failing_set"],
        serde_json::json!([])
    );
    assert_eq!(
        v["replay"]["observed"]["collected_set"],
        serde_json::json!(["t::answer", "t::other"])
    );
    let delivered = git(repo.path(), &["rev-parse", "loopexec/r^{tree}"]);
    assert_eq!(v["replay"]["tree_id"].as_str().unwrap(), delivered.trim());
    assert!(
        !run_dir(repo.path(), "r").join("replay/check").exists(),
        "the scratch layers are removed"
    );
}

/// A directory the test owns and an exec policy granting the check zone read access to it (and
/// nothing more than the shipped `exec` policy): lets a test make a check flaky by design.
fn verdict_dir() -> (tempfile::TempDir, String, String) {
    let verdicts = tempfile::tempdir().unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(verdicts.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let dir = path_str(verdicts.path());
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/exec.toml"))
            .unwrap();
    let policy = shipped.replacen("read_only = [", &format!("read_only = [\"{dir}\", "), 1);
    assert_ne!(policy, shipped);
    let policy_path = verdicts.path().join("exec.toml");
    std::fs::write(&policy_path, policy).unwrap();
    let policy_path = path_str(&policy_path);
    (verdicts, dir, policy_path)
}

#[test]
fn an_end_state_that_no_longer_passes_is_objective_unverified() {
    let repo = answer_repo();
    // The check also fails when a verdict file the test owns exists: flaky by design.
    let (verdicts, dir, policy_path) = verdict_dir();
    let check = format!("test \"$(cat answer)\" = 42 && ! test -e {dir}/fail");
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "f",
            "--exec",
            AGENT,
            "--check",
            &check,
            "--check-policy",
            &policy_path,
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    std::fs::write(verdicts.path().join("fail"), "").unwrap();
    let out = loopexec(repo.path(), &["replay", "--json", "f"]);
    assert_eq!(out.code, 13, "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "a computed verdict writes nothing on stderr: {}",
        out.stderr
    );
    let v = out.json();
    assert_eq!(v["status"], "halted");
    assert_eq!(v["halt_reason"], "objective_unverified");
    assert_eq!(v["replay"]["match"], false);
    assert_eq!(v["replay"]["recorded"]["exit_class"], "pass");
    assert_eq!(v["replay"]["observed"]["exit_class"], "fail");
    assert_eq!(v["check_exit"], 1);
}

#[test]
fn a_run_that_has_not_halted_is_refused() {
    let repo = answer_repo();
    let r = loopexec(
        repo.path(),
        &[
            "run", "--json", "--once", "--run-id", "p", "--exec", "true", "--check", "false",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let out = loopexec(repo.path(), &["replay", "--json", "p"]);
    assert_eq!(out.code, 30, "{out:?}");
    let v = out.json();
    assert_eq!(v["errors"][0]["code"], "not_replayable");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("has not halted"),
        "{v}"
    );
}

#[test]
fn a_run_without_a_check_result_is_refused() {
    let repo = answer_repo();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            "x",
            "--exec",
            "exit 3",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 40, "{r:?}");
    let out = loopexec(repo.path(), &["replay", "--json", "x"]);
    assert_eq!(out.code, 30, "{out:?}");
    let v = out.json();
    assert_eq!(v["errors"][0]["code"], "not_replayable");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("no check result"),
        "{v}"
    );
}

#[test]
fn an_in_place_run_has_no_tree_to_replay_on() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "i",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let out = loopexec(dir.path(), &["replay", "--json", "i"]);
    assert_eq!(out.code, 30, "{out:?}");
    let v = out.json();
    assert_eq!(v["errors"][0]["code"], "not_replayable");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("in place"),
        "{v}"
    );
}

#[test]
fn unknown_and_malformed_runs_are_refused() {
    let repo = answer_repo();
    let r = loopexec(
        repo.path(),
        &[
            "run", "--json", "--run-id", "k", "--exec", AGENT, "--check", "true",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let unknown = loopexec(repo.path(), &["replay", "--json", "nope"]);
    assert_eq!(unknown.code, 30, "{unknown:?}");
    assert_eq!(unknown.json()["status"], "error");
    let malformed = loopexec(repo.path(), &["replay", "--json", "../k"]);
    assert_eq!(malformed.code, 20, "{malformed:?}");
    assert_eq!(malformed.json()["status"], "error");
}

#[test]
fn the_same_exit_class_with_another_failing_set_is_objective_unverified() {
    let repo = answer_repo();
    let (verdicts, dir, policy_path) = verdict_dir();
    // Always exits 1; the testcase t::flag fails only once the verdict file exists.
    let check = format!(
        "if test -e {dir}/fail; then r='<failure/>'; else r=''; fi; printf '<testsuite><testcase classname=\"t\" name=\"flag\">%s</testcase></testsuite>' \"$r\" > report.xml; exit 1"
    );
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "s",
            "--exec",
            AGENT,
            "--check",
            &check,
            "--junit",
            "report.xml",
            "--max-iterations",
            "1",
            "--check-policy",
            &policy_path,
        ],
    );
    assert_eq!(r.code, 12, "{r:?}");
    let same = loopexec(repo.path(), &["replay", "--json", "s"]);
    assert_eq!(same.code, 0, "{same:?}");
    assert_eq!(same.json()["replay"]["recorded"]["exit_class"], "fail");
    std::fs::write(verdicts.path().join("fail"), "").unwrap();
    let out = loopexec(repo.path(), &["replay", "--json", "s"]);
    assert_eq!(out.code, 13, "{out:?}");
    let v = out.json();
    assert_eq!(v["halt_reason"], "objective_unverified");
    assert_eq!(v["replay"]["observed"]["exit_class"], "fail");
    assert_eq!(
        v["replay"]["recorded"]["failing_set"],
        serde_json::json!([])
    );
    assert_eq!(
        v["replay"]["observed"]["failing_set"],
        serde_json::json!(["t::flag"])
    );
    assert_eq!(
        v["replay"]["observed"]["collected_set"],
        serde_json::json!(["t::flag"])
    );
}

#[test]
fn a_replay_is_a_free_sample_of_the_trees_stability_printed_with_its_confirmation_and_never_recorded(
) {
    let repo = answer_repo();
    let (verdicts, dir, policy_path) = verdict_dir();
    let check = format!("test \"$(cat answer)\" = 42 && ! test -e {dir}/fail");
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "s",
            "--exec",
            AGENT,
            "--check",
            &check,
            "--check-policy",
            &policy_path,
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let receipt = std::fs::read(run_dir(repo.path(), "s").join("receipt.jsonl")).unwrap();
    // The default confirm_runs = 1 rerun agreed; the replay agrees too: 2 of 2.
    let v = loopexec(repo.path(), &["replay", "--json", "s"]).json();
    let s = &v["stability"];
    assert_eq!(
        (
            s["samples"].as_u64(),
            s["agreeing"].as_u64(),
            s["confidence"].as_f64()
        ),
        (Some(2), Some(2), Some(0.95)),
        "{v}"
    );
    // Wilson lower bound of 2 agreeing samples of 2 at 95%: 1 / (1 + z^2 / 2), z = 1.6448536...
    assert!(
        (s["stability_lower_bound"].as_f64().unwrap()
            - 1.0 / (1.0 + 1.6448536269514722f64.powi(2) / 2.0))
            .abs()
            < 1e-9,
        "{v}"
    );
    std::fs::write(verdicts.path().join("fail"), "").unwrap();
    let v = loopexec(repo.path(), &["replay", "--json", "s"]).json();
    assert_eq!(
        (
            v["stability"]["samples"].as_u64(),
            v["stability"]["agreeing"].as_u64()
        ),
        (Some(2), Some(1)),
        "{v}"
    );
    assert_eq!(
        std::fs::read(run_dir(repo.path(), "s").join("receipt.jsonl")).unwrap(),
        receipt,
        "the sealed receipt is unchanged"
    );
}

#[test]
fn a_malformed_or_missing_pubkey_refuses_the_replay_with_one_json_error_and_writes_nothing() {
    let repo = answer_repo();
    let r = loopexec(
        repo.path(),
        &[
            "run", "--json", "--run-id", "p", "--exec", AGENT, "--check", "true",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let junk = repo.path().join("junk.pub");
    std::fs::write(&junk, "not a public key\n").unwrap();
    let missing = repo.path().join("absent.pub");
    // As `verify --pubkey` answers: a file that is no key is bad input (20), an absent one 30.
    for (key, exit, code) in [
        (path_str(&junk), 20, "invalid_input"),
        (path_str(&missing), 30, "workspace_invalid"),
    ] {
        let out = loopexec(repo.path(), &["replay", "--json", "--pubkey", &key, "p"]);
        let v = out.json();
        assert_eq!(
            (
                out.code,
                v["status"].as_str(),
                v["errors"][0]["code"].as_str()
            ),
            (exit, Some("error"), Some(code)),
            "{out:?}"
        );
        assert!(
            v["errors"][0]["message"].as_str().unwrap().contains(&key),
            "the error names the key file: {v}"
        );
        assert!(
            !run_dir(repo.path(), "p").join("replay").exists(),
            "nothing is replayed"
        );
    }
}
