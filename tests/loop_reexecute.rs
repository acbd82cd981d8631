//! `loopexec reexecute`: the whole loop re-run N times from a halted run's pinned configuration,
//! each a fresh run with its own receipt, and the distribution of halt reasons.
mod common;
use common::*;

#[test]
fn without_confirm_it_refuses_and_says_what_it_would_run() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "o",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let out = loopexec(dir.path(), &["reexecute", "--json", "o", "--samples", "2"]);
    assert_eq!(out.code, 20, "{out:?}");
    let v = out.json();
    assert_eq!(v["status"], "error");
    assert_eq!(v["reexecute"]["confirmed"], false);
    assert_eq!(
        v["reexecute"]["would_run"]["runs"],
        serde_json::json!(["o-re1", "o-re2"])
    );
    assert_eq!(v["reexecute"]["would_run"]["exec"], "true");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("would start 2 new run(s)"),
        "{v}"
    );
    assert!(!run_dir(dir.path(), "o-re1").exists(), "nothing ran");
}

#[test]
fn a_deterministic_loop_halts_the_same_way_in_every_sample() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "d",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let out = loopexec(
        dir.path(),
        &["reexecute", "--json", "d", "--samples", "3", "--confirm"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    let re = &v["reexecute"];
    assert_eq!(re["samples"], 3);
    assert_eq!(
        re["distribution"],
        serde_json::json!({"success_condition_met": 3})
    );
    assert_eq!(re["mode"], serde_json::json!(["success_condition_met"]));
    assert_eq!(re["original_is_mode"], true);
    let pubkey = path_str(&key_dir().join("operator.pub"));
    for (i, sample) in re["runs"].as_array().unwrap().iter().enumerate() {
        let id = format!("d-re{}", i + 1);
        assert_eq!(sample["run_id"], id.as_str());
        assert_eq!(sample["halt_reason"], "success_condition_met");
        let verified = loopexec(dir.path(), &["verify", "--json", &id, "--pubkey", &pubkey]);
        assert_eq!(
            verified.code, 0,
            "each sample is a full, sealed run: {verified:?}"
        );
    }
    // A second invocation continues the numbering instead of colliding.
    let again = loopexec(
        dir.path(),
        &["reexecute", "--json", "d", "--samples", "1", "--confirm"],
    );
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(again.json()["reexecute"]["runs"][0]["run_id"], "d-re4");
}

#[test]
fn an_original_reason_that_no_sample_reproduces_is_not_the_mode() {
    let dir = workdir();
    std::fs::write(dir.path().join("flag"), "").unwrap();
    let base = [
        "--isolation",
        "none",
        "--exec",
        "true",
        "--check",
        "test -e flag",
        "--max-iterations",
        "1",
    ];
    let mut args = vec!["run", "--json", "--run-id", "g"];
    args.extend(base);
    let r = loopexec(dir.path(), &args);
    assert_eq!(r.code, 10, "{r:?}");
    std::fs::remove_file(dir.path().join("flag")).unwrap();
    let out = loopexec(
        dir.path(),
        &["reexecute", "--json", "g", "--samples", "2", "--confirm"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let re = &out.json()["reexecute"];
    assert_eq!(re["original"]["halt_reason"], "success_condition_met");
    assert_eq!(
        re["distribution"],
        serde_json::json!({"max_iterations_reached": 2})
    );
    assert_eq!(re["original_is_mode"], false);
}

#[test]
fn a_run_that_has_not_halted_or_a_zero_sample_count_is_refused() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--once",
            "--run-id",
            "p",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "false",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let out = loopexec(
        dir.path(),
        &["reexecute", "--json", "p", "--samples", "1", "--confirm"],
    );
    assert_eq!(out.code, 30, "{out:?}");
    assert_eq!(out.json()["errors"][0]["code"], "not_reexecutable");
    let zero = loopexec(
        dir.path(),
        &["reexecute", "--json", "p", "--samples", "0", "--confirm"],
    );
    assert_eq!(zero.code, 20, "{zero:?}");
}

#[test]
fn detached_samples_start_from_the_original_t0_and_a_moved_head_is_refused() {
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    git(repo.path(), &["init", "-q", "-b", "main"]);
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", "t0"]);
    zone_traversable(repo.path());
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "w",
            "--exec",
            "echo 42 > answer",
            "--check",
            "test \"$(cat answer)\" = 42",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let out = loopexec(
        repo.path(),
        &["reexecute", "--json", "w", "--samples", "1", "--confirm"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let sample = &out.json()["reexecute"]["runs"][0];
    assert_eq!(sample["halt_reason"], "success_condition_met");
    assert_eq!(sample["same_t0"], true);
    std::fs::write(repo.path().join("answer"), "40\n").unwrap();
    git(repo.path(), &["commit", "-q", "-am", "moved"]);
    let moved = loopexec(
        repo.path(),
        &["reexecute", "--json", "w", "--samples", "1", "--confirm"],
    );
    assert_eq!(moved.code, 30, "{moved:?}");
    assert_eq!(moved.json()["errors"][0]["code"], "not_reexecutable");
}
