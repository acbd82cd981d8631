//! A newcomer's first run (issue 23 item 1): `init` makes the operator's key pair when the key
//! directory has none, so `init` then `run` works, and `verify RUN` without `--pubkey` uses the
//! operator's own public key and says which; each refusal on the way names the command that fixes it.
mod common;
use common::*;
use std::path::Path;

/// loopexec with its key directory at `keys` (a fresh one: no key yet).
fn with_keys(dir: &Path, keys: &Path, args: &[&str]) -> Ran {
    let mut c = command();
    c.current_dir(dir)
        .env("LOOPEXEC_CONFIG_DIR", keys)
        .args(args);
    from_output(c.output().expect("spawn loopexec"))
}

#[test]
fn init_then_run_works_with_no_key_and_verify_uses_the_operators_own_key() {
    let dir = workdir();
    let keys = tempfile::tempdir().unwrap();
    let init = with_keys(
        dir.path(),
        keys.path(),
        &[
            "init",
            "--json",
            "--check",
            "test -f done",
            "--exec",
            "touch done",
            "--isolation",
            "none",
        ],
    );
    assert_eq!(init.code, 0, "{init:?}");
    let made = init.json()["init"]["operator_key"].clone();
    assert_eq!(made["created"], true);
    assert_eq!(
        made["private_key"],
        path_str(&keys.path().join("operator.key"))
    );
    assert!(keys.path().join("operator.pub").exists());
    let run = with_keys(
        dir.path(),
        keys.path(),
        &["run", "--json", "--run-id", "first"],
    );
    // In place a passing check is `human_required` (11): no guard could judge the step.
    assert_eq!(run.code, 11, "{run:?}");
    let verify = with_keys(dir.path(), keys.path(), &["verify", "--json", "first"]);
    assert_eq!(verify.code, 0, "{verify:?}");
    let key = verify.json()["key"].clone();
    assert_eq!(
        (key["source"].as_str(), key["path"].as_str()),
        (
            Some("operator_default"),
            Some(path_str(&keys.path().join("operator.pub")).as_str())
        )
    );
    assert_eq!(key["fingerprint"], made["fingerprint"]);
    let human = with_keys(dir.path(), keys.path(), &["verify", "first"]).stdout;
    assert!(
        human.starts_with(&format!(
            "key  {} (fingerprint ",
            keys.path().join("operator.pub").display()
        )),
        "{human}"
    );
}

#[test]
fn a_second_init_finds_the_key_and_keeps_it() {
    let keys = tempfile::tempdir().unwrap();
    let first = with_keys(workdir().path(), keys.path(), &["init", "--json"]);
    let second = with_keys(workdir().path(), keys.path(), &["init", "--json"]);
    assert_eq!((first.code, second.code), (0, 0));
    let (a, b) = (
        first.json()["init"]["operator_key"].clone(),
        second.json()["init"]["operator_key"].clone(),
    );
    assert_eq!(
        (a["created"].as_bool(), b["created"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(a["fingerprint"], b["fingerprint"]);
}

#[test]
fn init_without_keygen_makes_no_key_and_run_then_names_keygen() {
    let dir = workdir();
    let keys = tempfile::tempdir().unwrap();
    let init = with_keys(
        dir.path(),
        keys.path(),
        &[
            "init",
            "--json",
            "--no-keygen",
            "--check",
            "true",
            "--exec",
            "true",
            "--isolation",
            "none",
        ],
    );
    assert_eq!(init.code, 0, "{init:?}");
    assert_eq!(init.json()["init"]["operator_key"], serde_json::Value::Null);
    assert!(!keys.path().join("operator.key").exists());
    let run = with_keys(dir.path(), keys.path(), &["run", "--json"]);
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(
        run.json()["errors"][0]["hint"],
        "create one with `loopexec keygen`, or pass --operator-key FILE"
    );
}

#[test]
fn verify_without_a_pubkey_or_an_own_key_names_both_ways_out() {
    let dir = workdir();
    let keys = tempfile::tempdir().unwrap();
    let r = with_keys(dir.path(), keys.path(), &["verify", "--json", "nosuchrun"]);
    assert_eq!(r.code, 20, "{r:?}");
    let error = r.json()["errors"][0].clone();
    assert_eq!(
        error["message"],
        format!(
            "no --pubkey and no operator public key at {}",
            keys.path().join("operator.pub").display()
        )
    );
    assert_eq!(error["hint"], "pass --pubkey FILE (the key of the operator who ran it), or create your own with `loopexec keygen`");
}
