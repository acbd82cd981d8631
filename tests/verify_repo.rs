//! `verify --repo DIR` re-runs the syntax-tree guards on the trees a run recorded, read as git
//! objects from DIR, and compares them with the receipt (the `tree_guards` check; docs/receipt.md,
//! "Replayed verdicts"): an honest run agrees; a finding dropped from (or rewritten in) a receipt
//! re-sealed with the operator's own key is named with the iteration, the guard and both
//! findings, for the metric-integrity guard and the tampering rules alike; a tree DIR lacks
//! is named as not replayable; a DIR that is no repository, or whose tree is not what its id
//! says, is refused input.
mod common;
use common::*;
use loopexec::receipt::chain::ReceiptLog;
use loopexec::receipt::keys::{OperatorKey, RunKey};
use loopexec::receipt::seal::{
    endorse_run_key, seal_run, ENVELOPE_FILE, RECEIPT_FILE, RUN_PUBKEY_FILE,
};
use loopexec::safefs::SafeDir;
use serde_json::Value;
use std::path::Path;

const REASON: &str = "total() pinned the off-by-one of add(); the fix changes its expected value";
const PYTEST: &str = "/usr/bin/python3 -m pytest -q -p no:cacheprovider";

/// A pytest project whose `add` has an off-by-one bug that `tests/test_api.py` pinned, the
/// operator allowing that file to change: an honest fix changes code and that test.
fn pinned_bug_project() -> tempfile::TempDir {
    require_pytest();
    let dir = workdir();
    write(dir.path(), "pyproject.toml", "[project]\nname = \"calc\"\nversion = \"0.1.0\"\n\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n");
    write(
        dir.path(),
        "calc/__init__.py",
        "from calc.core import add, total\n",
    );
    write(
        dir.path(),
        "calc/core.py",
        "def add(a, b):\n    return a + b + 1\n\n\ndef total(items):\n    result = 0\n    for item in items:\n        result = add(result, item)\n    return result\n",
    );
    write(
        dir.path(),
        "tests/test_core.py",
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    );
    write(
        dir.path(),
        "tests/test_api.py",
        "from calc import total\n\n\ndef test_total_of_two():\n    assert total([1, 2]) == 5\n",
    );
    write(dir.path(), "loop.toml", &format!("adequacy = \"off\"\n\n[[allow_test_change]]\npath = \"tests/test_api.py\"\nreason = \"{REASON}\"\n"));
    commit_t0(dir.path());
    dir
}

/// The honest fix: `add` corrected, the pinned assertion corrected with it, and one more test.
const HONEST_FIX: &str = "sed -i 's/return a + b + 1/return a + b/' calc/core.py && sed -i 's/total(\\[1, 2\\]) == 5/total([1, 2]) == 3/' tests/test_api.py \
    && printf '\\n\\ndef test_total_of_none():\\n    assert total([]) == 0\\n' >> tests/test_api.py";

/// The agent drops an assertion from the inline tests: the metric-integrity guard halts the run.
const DROP_ASSERTION: &str = "sed -i '/add(-1, 1)/d' src/lib.rs";

fn pubkey() -> String {
    path_str(&key_dir().join("operator.pub"))
}

fn verify(dir: &Path, run_id: &str, repo: &Path) -> Ran {
    loopexec(
        dir,
        &[
            "verify",
            "--json",
            run_id,
            "--pubkey",
            &pubkey(),
            "--repo",
            &path_str(repo),
        ],
    )
}

/// The verify checks that failed, by name.
fn failed(v: &Value) -> Vec<String> {
    v["verify"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

fn tree_guards(v: &Value) -> Value {
    v["verify"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "tree_guards")
        .cloned()
        .unwrap_or_else(|| panic!("no tree_guards check in {v:#}"))
}

/// The tree ids of a run: t0's (`workspace`) and each `snapshot`'s.
fn trees(dir: &Path, run_id: &str) -> (String, Vec<String>) {
    let ev = events(dir, run_id);
    let t0 = ev.iter().find(|e| e["type"] == "workspace").unwrap()["tree_id"]
        .as_str()
        .unwrap()
        .to_string();
    let snapshots = ev
        .iter()
        .filter(|e| e["type"] == "snapshot")
        .map(|e| e["tree_id"].as_str().unwrap().to_string())
        .collect();
    (t0, snapshots)
}

/// Rewrite run `run_id`'s receipt with `edit` applied to each event line, re-chained, its run key
/// endorsed again and the receipt re-sealed with the test operator's own key: every signature
/// check passes, so only a replay can tell.
fn reseal(dir: &Path, run_id: &str, edit: impl Fn(&mut Value)) {
    let lines = all_events(dir, run_id);
    let run = run_dir(dir, run_id);
    let envelope: Value =
        serde_json::from_slice(&std::fs::read(run.join(ENVELOPE_FILE)).unwrap()).unwrap();
    let payload = base64_decode(envelope["payload"].as_str().unwrap());
    let statement: Value = serde_json::from_slice(&payload).unwrap();
    let extra: Vec<Value> = statement["subject"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] != RECEIPT_FILE)
        .cloned()
        .collect();
    for f in [RECEIPT_FILE, ENVELOPE_FILE, RUN_PUBKEY_FILE] {
        let _ = std::fs::remove_file(run.join(f));
    }
    let operator = OperatorKey::load(&key_dir().join("operator.key")).unwrap();
    let run_dir = SafeDir::open(&run).unwrap();
    let mut log = ReceiptLog::create(&run_dir, RECEIPT_FILE).unwrap();
    let run_key = RunKey::mint();
    for mut line in lines {
        if line["type"] == "run_key" {
            endorse_run_key(&mut log, run_id, &run_key, &operator).unwrap();
            continue;
        }
        edit(&mut line);
        let mut fields = line.as_object().unwrap().clone();
        let kind = fields.remove("type").unwrap();
        for chain in ["seq", "prev", "ts"] {
            fields.remove(chain);
        }
        log.append(kind.as_str().unwrap(), fields).unwrap();
    }
    seal_run(&run_dir, run_key, extra).unwrap();
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

#[test]
fn an_honest_run_that_changes_code_and_an_allowed_test_agrees_with_the_guards_re_run_on_t0_and_its_tree(
) {
    let repo = pinned_bug_project();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "h",
            "--exec",
            HONEST_FIX,
            "--check",
            PYTEST,
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{r:?}"
    );
    let (_, snapshots) = trees(repo.path(), "h");
    assert_eq!(snapshots.len(), 1);
    let v = verify(repo.path(), "h", repo.path());
    assert_eq!(
        (v.code, v.json()["verified"].as_bool()),
        (0, Some(true)),
        "{v:?}"
    );
    assert_eq!(
        tree_guards(&v.json()),
        serde_json::json!({
            "name": "tree_guards",
            "ok": true,
            "detail": "re-ran 4 guard(s) on 2 tree(s), all agree with the receipt; shadowing re-run against the modules the recorded findings name (the receipt does not list the interpreter's)",
        })
    );
}

#[test]
fn without_repo_the_check_is_absent_and_the_human_output_says_so() {
    let repo = off_by_one_crate();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "d",
            "--no-baseline",
            "--exec",
            DROP_ASSERTION,
            "--check",
            "true",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    let v = loopexec(repo.path(), &["verify", "d", "--pubkey", &pubkey()]);
    assert_eq!(v.code, 0, "{v:?}");
    assert!(
        v.stdout.contains("tree guards not re-run: pass --repo\n"),
        "{}",
        v.stdout
    );
    assert!(!v.stdout.contains("tree_guards"), "{}", v.stdout);
}

#[test]
fn a_finding_dropped_from_a_resealed_receipt_fails_tree_guards_naming_the_iteration_the_guard_and_both_findings(
) {
    let repo = off_by_one_crate();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "d",
            "--no-baseline",
            "--exec",
            DROP_ASSERTION,
            "--check",
            "true",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    // The reviewer's repository holds the agent's tree: the same edit, committed.
    let (_, snapshots) = trees(repo.path(), "d");
    git(repo.path(), &["checkout", "-q", "-b", "agent"]);
    let edited = std::process::Command::new("sh")
        .arg("-c")
        .arg(DROP_ASSERTION)
        .current_dir(repo.path())
        .status()
        .unwrap();
    assert!(edited.success());
    git(repo.path(), &["commit", "-q", "-am", "the agent's step"]);
    assert_eq!(
        git_value(repo.path(), &["rev-parse", "HEAD^{tree}"]),
        snapshots[0]
    );
    reseal(repo.path(), "d", |line| {
        if line["type"] == "guard" && line["guard"] == "metric_integrity" {
            line["findings"].as_array_mut().unwrap().truncate(1);
        }
    });
    let v = verify(repo.path(), "d", repo.path());
    assert_eq!(
        (v.code, failed(&v.json())),
        (13, vec!["tree_guards".to_string()]),
        "{v:?}"
    );
    assert_eq!(
        tree_guards(&v.json())["detail"],
        "iteration 1, guard metric_integrity: recorded 1 finding(s): assertions in test code fell from A0 = 3 to 2; \
         re-run 2 finding(s): assertions in test code fell from A0 = 3 to 2; src/lib.rs: assertions in test code: 3 at t0, 2 now"
    );
}

/// A pytest project whose `Money.__eq__` a tampering agent makes always true.
fn money_project() -> tempfile::TempDir {
    let dir = workdir();
    write(
        dir.path(),
        "calc/__init__.py",
        "from calc.core import Money\n",
    );
    write(
        dir.path(),
        "calc/core.py",
        "class Money:\n    def __init__(self, cents):\n        self.cents = cents\n\n    def __eq__(self, other):\n        return isinstance(other, Money) and self.cents == other.cents\n",
    );
    write(
        dir.path(),
        "tests/test_core.py",
        "from calc import Money\n\n\ndef test_money_equality():\n    assert Money(5) == Money(5)\n",
    );
    commit_t0(dir.path());
    dir
}

const ALWAYS_EQUAL: &str = "sed -i 's/        return isinstance(other, Money) and self.cents == other.cents/        return True/' calc/core.py";

#[test]
fn a_tampering_finding_rewritten_in_a_resealed_receipt_fails_tree_guards_naming_the_tampering_guard(
) {
    let repo = money_project();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "t",
            "--no-baseline",
            "--exec",
            ALWAYS_EQUAL,
            "--check",
            "true",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.json()["halt_reason"], "reward_hacking_detected", "{r:?}");
    let (_, snapshots) = trees(repo.path(), "t");
    git(repo.path(), &["checkout", "-q", "-b", "agent"]);
    let edited = std::process::Command::new("sh")
        .arg("-c")
        .arg(ALWAYS_EQUAL)
        .current_dir(repo.path())
        .status()
        .unwrap();
    assert!(edited.success());
    git(repo.path(), &["commit", "-q", "-am", "the agent's step"]);
    assert_eq!(
        git_value(repo.path(), &["rev-parse", "HEAD^{tree}"]),
        snapshots[0]
    );
    let recorded = events(repo.path(), "t")
        .into_iter()
        .find(|e| e["type"] == "guard" && e["guard"] == "tampering")
        .unwrap();
    let what = recorded["findings"][0]["what"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        what,
        "line 5: rule always-equal: def __eq__(self, other): return True"
    );
    reseal(repo.path(), "t", |line| {
        if line["type"] == "guard" && line["guard"] == "tampering" {
            line["findings"][0]["path"] = "calc/other.py".into();
        }
    });
    let v = verify(repo.path(), "t", repo.path());
    assert_eq!(
        (v.code, failed(&v.json())),
        (13, vec!["tree_guards".to_string()]),
        "{v:?}"
    );
    assert_eq!(
        tree_guards(&v.json())["detail"],
        format!("iteration 1, guard tampering: recorded 1 finding(s): calc/other.py: {what}; re-run 1 finding(s): calc/core.py: {what}")
    );
}

#[test]
fn an_iteration_tree_the_repository_lacks_is_named_not_replayable_beside_t0_re_run() {
    let repo = off_by_one_crate();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "d",
            "--no-baseline",
            "--exec",
            DROP_ASSERTION,
            "--check",
            "true",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    // The refused step was never delivered: only t0 is in the operator's repository.
    let (_, snapshots) = trees(repo.path(), "d");
    let v = verify(repo.path(), "d", repo.path());
    assert_eq!(
        (v.code, v.json()["verified"].as_bool()),
        (0, Some(true)),
        "{v:?}"
    );
    assert_eq!(
        tree_guards(&v.json())["detail"],
        format!("re-ran 1 guard(s) on 1 tree(s), all agree with the receipt; not replayable: iteration 1 (tree {} is not in the repository)", snapshots[0])
    );
}

#[test]
fn a_repository_holding_none_of_the_trees_fails_tree_guards_naming_each_as_not_replayable() {
    let repo = off_by_one_crate();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "d",
            "--no-baseline",
            "--exec",
            DROP_ASSERTION,
            "--check",
            "true",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    let (t0, snapshots) = trees(repo.path(), "d");
    let other = workdir();
    write(other.path(), "README", "another project\n");
    commit_t0(other.path());
    let v = verify(repo.path(), "d", other.path());
    assert_eq!(
        (v.code, failed(&v.json())),
        (13, vec!["tree_guards".to_string()]),
        "{v:?}"
    );
    assert_eq!(
        tree_guards(&v.json())["detail"],
        format!(
            "no recorded tree is in {}: not replayable: t0 (tree {t0} is not in the repository), iteration 1 (tree {}: t0 is not there to judge it against)",
            other.path().display(),
            snapshots[0]
        )
    );
}

#[test]
fn a_directory_that_is_not_a_git_repository_is_refused_as_invalid_input_with_one_json_object() {
    let repo = off_by_one_crate();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "d",
            "--no-baseline",
            "--exec",
            DROP_ASSERTION,
            "--check",
            "true",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    let plain = workdir();
    let v = verify(repo.path(), "d", plain.path());
    assert_eq!(
        (v.code, v.json()["errors"][0]["code"].as_str()),
        (20, Some("invalid_input")),
        "{v:?}"
    );
    let message = v.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with(&format!(
            "--repo {}: not a git repository (",
            plain.path().display()
        )),
        "{message}"
    );
    assert_eq!(
        v.stdout.trim().lines().count(),
        1,
        "one JSON object: {}",
        v.stdout
    );
}

#[test]
fn a_tree_whose_listing_is_not_what_its_id_says_is_refused_as_corrupt() {
    let repo = off_by_one_crate();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "d",
            "--no-baseline",
            "--exec",
            DROP_ASSERTION,
            "--check",
            "true",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    let (t0, _) = trees(repo.path(), "d");
    // Another repository whose object store answers t0's id with another tree's object.
    let other = workdir();
    write(other.path(), "README", "another project\n");
    commit_t0(other.path());
    let planted = git_value(other.path(), &["rev-parse", "HEAD^{tree}"]);
    let objects = other.path().join(".git/objects");
    std::fs::create_dir_all(objects.join(&t0[..2])).unwrap();
    std::fs::copy(
        objects.join(&planted[..2]).join(&planted[2..]),
        objects.join(&t0[..2]).join(&t0[2..]),
    )
    .unwrap();
    let v = verify(repo.path(), "d", other.path());
    assert_eq!(
        (v.code, v.json()["errors"][0]["code"].as_str()),
        (20, Some("invalid_input")),
        "{v:?}"
    );
    // git itself notices the loose object's hash; were it not to, the listing's hash would.
    let message = v.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    let named = format!("--repo {}: tree {t0} is corrupt: ", other.path().display());
    assert!(message.starts_with(&named), "{message}");
    assert!(
        message.ends_with(&format!("its listing hashes to {planted}"))
            || message.contains(&format!("hash mismatch {t0}")),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
}
