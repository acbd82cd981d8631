//! Runs side by side in one workdir (issue 24, item 3): ten loops at once with distinct run ids
//! each seal a receipt that verifies and deliver their own branch, and compute the t0 baseline
//! once between them; one run id started twice at once runs once; two resumes of one run at once
//! let one drive it; `status`, `report` and `verify` read a run while it writes.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Stdio};

/// A committed repository whose check passes once `value.txt` holds 1 (t0: 0).
fn project() -> tempfile::TempDir {
    let dir = workdir();
    write(dir.path(), "value.txt", "0\n");
    write(dir.path(), "check.sh", "test \"$(cat value.txt)\" = 1\n");
    commit_t0(dir.path());
    dir
}

/// The agent: sets the value, and leaves its run id in `who.txt` (each run's tree is its own).
const AGENT: &str = "echo 1 > value.txt && echo \"$LOOPEXEC_RUN_ID\" > who.txt";

fn spawn_run(repo: &Path, args: &[&str]) -> Child {
    command()
        .current_dir(repo)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn loopexec")
}

fn run_args<'a>(run_id: &'a str, agent: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--json",
        "--run-id",
        run_id,
        "--exec",
        agent,
        "--check",
        "sh check.sh",
        "--max-iterations",
        "3",
    ]
}

fn finish(child: Child) -> Ran {
    from_output(child.wait_with_output().expect("wait for loopexec"))
}

fn pubkey() -> String {
    path_str(&key_dir().join("operator.pub"))
}

#[test]
fn ten_loops_at_once_in_one_workdir_each_seal_a_verified_receipt_and_their_own_branch() {
    let repo = project();
    let ids: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    let children: Vec<Child> = ids
        .iter()
        .map(|id| spawn_run(repo.path(), &run_args(id, AGENT)))
        .collect();
    let results: Vec<Ran> = children.into_iter().map(finish).collect();
    for (id, r) in ids.iter().zip(&results) {
        assert_eq!(r.code, 10, "{id}: {r:?}");
        let verified = loopexec(
            repo.path(),
            &["verify", "--json", id, "--pubkey", &pubkey()],
        );
        assert_eq!(verified.code, 0, "{id}: {verified:?}");
        let branch = format!("loopexec/{id}");
        assert_eq!(
            git(repo.path(), &["show", &format!("{branch}:who.txt")]).trim(),
            id,
            "{branch} holds its own run's tree"
        );
        assert_eq!(
            git(repo.path(), &["show", &format!("{branch}:value.txt")]).trim(),
            "1"
        );
    }
    // One of them computed t0's baseline; the nine others waited for it and read its entry.
    let computed: Vec<&String> = ids
        .iter()
        .filter(|id| {
            let ev = events(repo.path(), id);
            let baseline = ev
                .iter()
                .find(|e| e["type"] == "check_baseline")
                .unwrap_or_else(|| panic!("{id}: no check_baseline"));
            baseline["cache_hit"] == false
        })
        .collect();
    assert_eq!(
        computed.len(),
        1,
        "runs that computed the baseline: {computed:?}"
    );
    let entries = std::fs::read_dir(repo.path().join(".loopexec/check-baselines"))
        .unwrap()
        .count();
    assert_eq!(entries, 1, "one cache entry");
}

#[test]
fn one_run_id_started_twice_at_once_runs_once_and_the_other_start_is_refused() {
    let repo = project();
    let slow = "sleep 1; echo 1 > value.txt";
    let first = spawn_run(repo.path(), &run_args("same", slow));
    let second = spawn_run(repo.path(), &run_args("same", slow));
    let mut both = [finish(first), finish(second)];
    both.sort_by_key(|r| r.code);
    let [ran, refused] = both;
    assert_eq!(ran.code, 10, "{ran:?}");
    assert_eq!(refused.code, 20, "{refused:?}");
    let error = &refused.json()["errors"][0]["message"];
    assert!(
        error
            .as_str()
            .is_some_and(|m| m.starts_with("run id same is already used in ")),
        "{refused:?}"
    );
    let verified = loopexec(
        repo.path(),
        &["verify", "--json", "same", "--pubkey", &pubkey()],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
}

#[test]
fn two_resumes_of_one_run_at_once_let_one_drive_it_and_refuse_the_other() {
    let repo = project();
    // Iteration 1 fails; a resumed iteration 2 takes two seconds, then passes.
    let agent = "case $LOOPEXEC_ITERATION in 1) true ;; *) sleep 2; echo 1 > value.txt ;; esac";
    let mut first = run_args("p", agent);
    first.push("--once");
    let paused = loopexec(repo.path(), &first);
    assert_eq!(paused.json()["state"], "paused", "{paused:?}");
    let resume = ["run", "--json", "--resume", "p"];
    let a = spawn_run(repo.path(), &resume);
    let b = spawn_run(repo.path(), &resume);
    let mut both = [finish(a), finish(b)];
    both.sort_by_key(|r| r.code);
    let [won, refused] = both;
    assert_eq!(won.code, 10, "{won:?}");
    assert_eq!(refused.code, 30, "{refused:?}");
    let message = refused.json()["errors"][0]["message"].clone();
    assert_eq!(
        message,
        Value::String("run p is being driven by another loopexec process".into()),
        "{refused:?}"
    );
    let verified = loopexec(
        repo.path(),
        &["verify", "--json", "p", "--pubkey", &pubkey()],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
    let iterations: Vec<u64> = events(repo.path(), "p")
        .iter()
        .filter(|e| e["type"] == "iteration_start")
        .filter_map(|e| e["iteration"].as_u64())
        .collect();
    assert_eq!(iterations, vec![1, 2], "each iteration recorded once");
}

#[test]
fn status_report_and_verify_read_a_run_while_it_writes_and_each_answers_one_object() {
    let repo = project();
    // Five red iterations a quarter of a second apart, then green.
    let agent = "sleep 0.25; [ \"$LOOPEXEC_ITERATION\" -ge 6 ] && echo 1 > value.txt; true";
    let mut args = run_args("w", agent);
    args[9] = "8";
    let mut writer = spawn_run(repo.path(), &args);
    let mut reads = 0;
    while writer.try_wait().expect("poll the run").is_none() {
        for query in [
            vec!["status", "--json", "w"],
            vec!["report", "--json", "w"],
            vec!["verify", "--json", "w", "--pubkey", &pubkey()],
        ] {
            let r = loopexec(repo.path(), &query);
            // Each answers one JSON object whatever the moment: the run's state, its report so
            // far, or (not sealed yet, or no receipt yet) a refusal naming why.
            let v: Value = serde_json::from_str(r.stdout.trim())
                .unwrap_or_else(|e| panic!("{query:?} gave no JSON object ({e}): {r:?}"));
            assert!(v.is_object(), "{query:?}: {v}");
            assert!(
                ![50, 101].contains(&r.code),
                "{query:?} failed internally: {r:?}"
            );
            reads += 1;
        }
    }
    let done = finish(writer);
    assert_eq!(done.code, 10, "{done:?}");
    assert!(reads >= 6, "only {reads} reads while the run wrote");
    let verified = loopexec(
        repo.path(),
        &["verify", "--json", "w", "--pubkey", &pubkey()],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
}
