//! `verify --all DIR` and `fleet collect` (issue 26, item 2; docs/fleet.md): a directory of real
//! sealed runs verified in bulk, one JSON object per run as it finishes, then the summary; a
//! tampered run named and failing the whole; DIR as hostile input (a symlink refused, a directory
//! that is no run reported, names escaped); a collection gathered from workdirs, branch bundles
//! included, that `verify --all` verifies.
mod common;
use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const RUNS: usize = 100;

/// A workdir holding `n` real sealed runs `r000`, `r001`, ... (in place, `--isolation none`,
/// each halting `human_required` at iteration 1), made four at a time.
fn sealed_runs(n: usize) -> PathBuf {
    let dir = tempfile::tempdir().unwrap().keep();
    let ids: Vec<String> = (0..n).map(|i| format!("r{i:03}")).collect();
    std::thread::scope(|s| {
        for chunk in ids.chunks(n.div_ceil(4)) {
            let dir = &dir;
            s.spawn(move || {
                for id in chunk {
                    let exec = format!("echo $LOOPEXEC_ITERATION > it-{id}");
                    let check = format!("test \"$(cat it-{id})\" -ge 1");
                    let r = loopexec(
                        dir,
                        &[
                            "run",
                            "--json",
                            "--run-id",
                            id,
                            "--isolation",
                            "none",
                            "--exec",
                            &exec,
                            "--check",
                            &check,
                        ],
                    );
                    assert_eq!(r.code, 11, "{r:?}");
                }
            });
        }
    });
    dir
}

/// The hundred runs, made once per test binary.
fn hundred_runs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| sealed_runs(RUNS))
}

/// A fresh copy of the hundred runs' `.loopexec/runs` directory (names and files as they are).
fn copy_of_runs() -> (tempfile::TempDir, PathBuf) {
    let tmp = workdir();
    let runs = tmp.path().join("runs");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(hundred_runs().join(".loopexec/runs"))
        .arg(&runs)
        .status()
        .unwrap();
    assert!(status.success());
    (tmp, runs)
}

fn pubkey() -> String {
    path_str(&key_dir().join("operator.pub"))
}

fn verify_all(dir: &Path, extra: &[&str]) -> Ran {
    let (dir, key) = (path_str(dir), pubkey());
    let mut args = vec!["verify", "--all", &dir, "--pubkey", &key, "--jobs", "2"];
    args.extend(extra);
    loopexec(Path::new("/"), &args)
}

/// The streamed per-run objects (by name) and the final object of a `--json` run.
fn lines(r: &Ran) -> (Vec<Value>, Value) {
    let mut objects: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let last = objects.pop().expect("a final object");
    let mut runs: Vec<Value> = objects
        .into_iter()
        .map(|o| o["verify_run"].clone())
        .collect();
    runs.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    (runs, last)
}

fn names_failing(runs: &[Value]) -> Vec<(String, Vec<String>)> {
    runs.iter()
        .filter(|r| r["verified"] == false)
        .map(|r| {
            let checks = r["failed_checks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_string())
                .collect();
            (r["name"].as_str().unwrap().to_string(), checks)
        })
        .collect()
}

#[test]
fn a_hundred_sealed_runs_verify_with_the_exact_summary_and_exit_0() {
    let (_tmp, runs) = copy_of_runs();
    let r = verify_all(&runs, &["--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let (each, last) = lines(&r);
    assert_eq!(each.len(), RUNS);
    assert!(each
        .iter()
        .all(|o| o["verified"] == true && o["halt_reason"] == "human_required"));
    assert_eq!(each[42]["name"], "r042");
    assert_eq!(each[42]["run_id"], "r042");
    assert_eq!(
        last["all"],
        json!({
            "dir": path_str(&runs),
            "jobs": 2,
            "runs": 100,
            "verified": 100,
            "failed": 0,
            "not_runs": 0,
            "failures": [],
            "halts": {"human_required": 100},
            "halts_by_class": [{"class": "terminal_blocked", "exit_code": 11, "runs": 100}],
            "cost": {"usd_micros_known": 0, "unknown_money_records": 0, "tokens": 0},
        })
    );
    assert_eq!(
        (last["status"].clone(), last["verified"].clone()),
        (json!("ok"), json!(true))
    );
}

#[test]
fn one_tampered_run_among_a_hundred_is_named_and_fails_the_whole_with_exit_13() {
    let (_tmp, runs) = copy_of_runs();
    let receipt = runs.join("r042/receipt.jsonl");
    let text = std::fs::read_to_string(&receipt).unwrap();
    assert!(text.contains("\"check_exit\":0"));
    std::fs::write(
        &receipt,
        text.replacen("\"check_exit\":0", "\"check_exit\":1", 1),
    )
    .unwrap();
    let r = verify_all(&runs, &["--json"]);
    assert_eq!(r.code, 13, "{r:?}");
    let (each, last) = lines(&r);
    assert_eq!(each.len(), RUNS);
    assert_eq!(
        names_failing(&each),
        vec![("r042".to_string(), vec!["receipt_chain".to_string()])]
    );
    assert_eq!(
        (
            last["status"].clone(),
            last["all"]["verified"].clone(),
            last["all"]["failed"].clone(),
            last["all"]["failures"][0]["name"].clone(),
            last["errors"][0]["message"].clone(),
        ),
        (
            json!("failed"),
            json!(99),
            json!(1),
            json!("r042"),
            json!("1 of 100 run(s) failed to verify")
        )
    );
}

#[test]
fn the_human_output_is_one_line_per_run_then_the_summary() {
    let (_tmp, runs) = copy_of_runs();
    let r = verify_all(&runs, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    let per_run: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("ok    r"))
        .collect();
    assert_eq!(per_run.len(), RUNS);
    assert!(
        r.stdout
            .contains("ok    r007  human_required (exit 11)  $0.000000  0 tokens\n"),
        "{}",
        r.stdout
    );
    assert_eq!(
        lines[RUNS..].to_vec(),
        vec![
            "runs      100",
            "verified  100",
            "failed    0",
            "class     terminal_blocked (exit 11): 100",
            "halt      human_required: 100",
            "cost      $0.000000  0 tokens (verified runs)",
            "verified",
        ]
    );
}

/// A collection of two real sealed runs, `r000` and `r001`.
fn two_runs() -> (tempfile::TempDir, PathBuf) {
    let tmp = workdir();
    let dir = tmp.path().join("collection");
    std::fs::rename(sealed_runs(2).join(".loopexec/runs"), &dir).unwrap();
    (tmp, dir)
}

#[test]
fn a_symlink_in_dir_is_refused_not_followed() {
    let (tmp, dir) = two_runs();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::rename(dir.join("r001"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("r001")).unwrap();
    let r = verify_all(&dir, &["--json"]);
    assert_eq!(r.code, 13, "{r:?}");
    let (each, _) = lines(&r);
    assert_eq!(each[1]["kind"], "not_a_run");
    assert_eq!(
        each[1]["failed_checks"],
        json!([{"name": "run_directory", "detail": "a symlink: refused, not followed"}])
    );
    assert_eq!(names_failing(&each).len(), 1);
}

#[test]
fn an_empty_dir_is_refused_with_exit_20_and_one_object() {
    let tmp = workdir();
    let r = verify_all(tmp.path(), &["--json"]);
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    assert_eq!(v["errors"][0]["code"], "invalid_input");
    assert!(v["errors"][0]["message"]
        .as_str()
        .unwrap()
        .ends_with("the directory holds no run directory: nothing verified"));
}

#[test]
fn a_directory_that_is_no_run_is_reported_and_fails() {
    let (_tmp, dir) = two_runs();
    std::fs::create_dir(dir.join("notes")).unwrap();
    std::fs::write(dir.join("README"), "hello").unwrap();
    let r = verify_all(&dir, &["--json"]);
    assert_eq!(r.code, 13, "{r:?}");
    let (each, last) = lines(&r);
    assert_eq!(
        each.iter()
            .filter(|o| o["kind"] == "not_a_run")
            .map(|o| (o["name"].clone(), o["failed_checks"][0]["detail"].clone()))
            .collect::<Vec<_>>(),
        vec![
            (
                json!("README"),
                json!("not a directory: not a run directory")
            ),
            (
                json!("notes"),
                json!("no receipt.jsonl: not a sealed run directory")
            ),
        ]
    );
    assert_eq!(
        (
            last["all"]["runs"].clone(),
            last["all"]["verified"].clone(),
            last["all"]["not_runs"].clone()
        ),
        (json!(4), json!(2), json!(2))
    );
}

#[test]
fn a_run_copied_under_another_name_fails_run_directory() {
    let (_tmp, dir) = two_runs();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(dir.join("r000"))
        .arg(dir.join("r000-copy"))
        .status()
        .unwrap();
    assert!(status.success());
    let r = verify_all(&dir, &["--json"]);
    assert_eq!(r.code, 13, "{r:?}");
    let (each, _) = lines(&r);
    assert_eq!(
        names_failing(&each),
        vec![("r000-copy".to_string(), vec!["run_directory".to_string()])]
    );
    assert_eq!(
        each[1]["failed_checks"][0]["detail"],
        "the directory is named r000-copy, its receipt is run r000's (copied or renamed)"
    );
}

#[test]
fn a_hostile_entry_name_is_shown_escaped() {
    let (_tmp, dir) = two_runs();
    std::fs::create_dir(dir.join("x\u{1b}[31mred")).unwrap();
    let r = verify_all(&dir, &[]);
    assert_eq!(r.code, 13, "{r:?}");
    assert!(!r.stdout.contains('\u{1b}'), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("FAIL  x\\x1b[31mred  run_directory: no receipt.jsonl"),
        "{}",
        r.stdout
    );
}

/// A git repository whose sealed, detached run `id` delivered a branch (native isolation).
fn delivered_run(dir: &Path, id: &str) {
    if !dir.join(".git").exists() {
        write(dir, "n", "0\n");
        commit_t0(dir);
    }
    let r = loopexec(
        dir,
        &[
            "run",
            "--json",
            "--run-id",
            id,
            "--exec",
            "echo 1 > n",
            "--check",
            "test \"$(cat n)\" = 1",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
}

#[test]
fn fleet_collect_gathers_sealed_runs_with_their_branches_and_verify_all_passes() {
    let (a, b) = (workdir(), workdir());
    delivered_run(a.path(), "a1");
    delivered_run(b.path(), "b1");
    let out = workdir();
    let collection = out.path().join("c");
    let r = loopexec(
        Path::new("/"),
        &[
            "fleet",
            "collect",
            &path_str(a.path()),
            &path_str(b.path()),
            "--out",
            &path_str(&collection),
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    let collected: Vec<(Value, Value)> = v["collect"]["collected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["run_id"].clone(), c["bundle"]["written"].clone()))
        .collect();
    assert_eq!(
        collected,
        vec![(json!("a1"), json!(true)), (json!("b1"), json!(true))]
    );
    for name in [
        "receipt.jsonl",
        "envelope.dsse.json",
        "run-key.pub",
        "loopexec-a1.patch",
        "branch.bundle",
    ] {
        assert!(collection.join("a1").join(name).is_file(), "{name}");
    }
    assert!(!collection.join("a1/lock").exists());
    // The bundle holds the delivered commit, as the receipt records it.
    let clone = out.path().join("clone");
    git(
        out.path(),
        &[
            "clone",
            "-q",
            "-b",
            "loopexec/a1",
            &path_str(&collection.join("a1/branch.bundle")),
            &path_str(&clone),
        ],
    );
    let halt = all_events(a.path(), "a1")
        .into_iter()
        .find(|e| e["type"] == "halt")
        .unwrap();
    assert_eq!(
        git_value(&clone, &["rev-parse", "HEAD"]),
        halt["delivery"]["commit"].as_str().unwrap()
    );
    let r = verify_all(&collection, &["--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let (_, last) = lines(&r);
    assert_eq!(
        (
            last["all"]["verified"].clone(),
            last["all"]["halts"].clone()
        ),
        (json!(2), json!({"success_condition_met": 2}))
    );
    // Collected again: nothing new, nothing rewritten.
    let again = loopexec(
        Path::new("/"),
        &[
            "fleet",
            "collect",
            &path_str(a.path()),
            "--out",
            &path_str(&collection),
            "--json",
        ],
    );
    assert_eq!(again.json()["collect"]["already"], json!(["a1"]));
}

#[test]
fn fleet_collect_refuses_a_run_id_the_collection_holds_with_another_receipt_writing_nothing() {
    let (a, b) = (workdir(), workdir());
    delivered_run(a.path(), "same");
    delivered_run(b.path(), "same");
    let out = workdir();
    let collection = out.path().join("c");
    let r = loopexec(
        Path::new("/"),
        &[
            "fleet",
            "collect",
            &path_str(a.path()),
            &path_str(b.path()),
            "--out",
            &path_str(&collection),
            "--json",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(r.json()["errors"][0]["code"], "invalid_input");
    assert!(!collection.exists());
}
