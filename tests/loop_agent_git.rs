//! `agent_git = "t0"`: the agent zone finds a fresh git repository in its workspace whose only
//! commit is t0's tree, without the operator's history; the supervisor never reads it back, so
//! nothing the agent writes to it reaches the delivered branch or runs outside the zone.
mod common;
use common::*;
use std::path::Path;

const SECRET: &str = "SECRET-FIX-7f3a9c";
const EARLIER: &str = "earlier commit holding the reference fix";

/// A repository whose first commit holds a secret and a message that t0 (its second commit) does not.
fn repo_with_history() -> tempfile::TempDir {
    let repo = workdir();
    write(repo.path(), "answer", "41\n");
    write(repo.path(), "fix.txt", &format!("{SECRET}\n"));
    git(repo.path(), &["init", "-q", "-b", "main"]);
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", EARLIER]);
    git(repo.path(), &["rm", "-q", "fix.txt"]);
    git(repo.path(), &["commit", "-q", "-m", "t0"]);
    zone_traversable(repo.path());
    repo
}

/// The delivered branch's file `path` (what the agent wrote there).
fn delivered(repo: &Path, run_id: &str, path: &str) -> String {
    git(repo, &["show", &format!("loopexec/{run_id}:{path}")])
}

/// Run one agent step with `exec` and the check `test "$(cat answer)" = 42`, `extra` flags first.
fn run(repo: &Path, run_id: &str, extra: &[&str], exec: &str) -> Ran {
    let mut args = vec!["run", "--json", "--run-id", run_id, "--max-iterations", "1"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--exec", exec, "--check", "test \"$(cat answer)\" = 42"]);
    loopexec(repo, &args)
}

#[test]
fn the_zones_repository_has_exactly_one_commit_whose_tree_is_t0() {
    let repo = repo_with_history();
    let exec = "git log --oneline > log.txt && git rev-parse HEAD^{tree} > tree.txt && git for-each-ref --format='%(refname)' > refs.txt && git remote > remotes.txt && echo 42 > answer";
    let r = run(repo.path(), "one", &["--agent-git", "t0"], exec);
    assert_eq!(r.code, 10, "{r:?}");
    let log = delivered(repo.path(), "one", "log.txt");
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.trim_end().ends_with(" t0"), "{log}");
    assert_eq!(
        delivered(repo.path(), "one", "tree.txt").trim(),
        git_value(repo.path(), &["rev-parse", "HEAD^{tree}"])
    );
    assert_eq!(
        delivered(repo.path(), "one", "refs.txt"),
        "refs/heads/main\n"
    );
    assert_eq!(delivered(repo.path(), "one", "remotes.txt"), "");
}

#[test]
fn the_operators_history_and_its_objects_are_absent_from_the_zone() {
    let repo = repo_with_history();
    let exec = "git log --all --format=%s > all.txt && git cat-file --batch-all-objects --batch > objects.txt && echo 42 > answer";
    let r = run(repo.path(), "hist", &["--agent-git", "t0"], exec);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(delivered(repo.path(), "hist", "all.txt"), "t0\n");
    let objects = delivered(repo.path(), "hist", "objects.txt");
    assert!(objects.contains("41\n"), "t0's blob is there: {objects}");
    assert!(
        !objects.contains(SECRET),
        "an earlier commit's blob leaked: {objects}"
    );
    assert!(
        !objects.contains(EARLIER),
        "an earlier commit leaked: {objects}"
    );
}

#[test]
fn git_diff_in_the_zone_shows_the_agents_edit() {
    let repo = repo_with_history();
    let r = run(repo.path(), "diff", &["--agent-git", "t0"], "echo 42 > answer && git diff > /tmp/diff.out && git status --porcelain > /tmp/status.out && mv /tmp/diff.out diff.txt && mv /tmp/status.out status.txt");
    assert_eq!(r.code, 10, "{r:?}");
    let diff = delivered(repo.path(), "diff", "diff.txt");
    assert!(diff.contains("--- a/answer\n+++ b/answer\n"), "{diff}");
    assert!(diff.contains("\n-41\n+42\n"), "{diff}");
    assert_eq!(delivered(repo.path(), "diff", "status.txt"), " M answer\n");
}

#[test]
fn the_commit_id_is_the_same_for_the_same_t0() {
    let exec = "git rev-parse HEAD > head.txt && echo 42 > answer";
    let ids: Vec<String> = ["a", "b"]
        .iter()
        .map(|id| {
            let repo = repo_with_history();
            let r = run(repo.path(), id, &["--agent-git", "t0"], exec);
            assert_eq!(r.code, 10, "{r:?}");
            delivered(repo.path(), id, "head.txt")
        })
        .collect();
    assert_eq!(ids[0], ids[1]);
}

#[test]
fn hooks_and_an_fsmonitor_the_agent_writes_never_run_and_its_git_dir_is_not_delivered() {
    let repo = repo_with_history();
    let marker = repo.path().join("pwned");
    let hook = format!("#!/bin/sh\ntouch {}\n", marker.display());
    let exec = format!(
        "mkdir -p .git/hooks && printf '%s' '{hook}' > .git/hooks/post-commit && cp .git/hooks/post-commit .git/hooks/pre-commit && cp .git/hooks/post-commit .git/hooks/reference-transaction && chmod +x .git/hooks/* && \
         printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n\\thooksPath = .git/hooks\\n[diff]\\n\\texternal = \"touch {m}\"\\n' >> .git/config && \
         mkdir -p sub/.git && cp .git/config sub/.git/config && echo 42 > answer",
        m = marker.display()
    );
    let r = run(repo.path(), "hostile", &["--agent-git", "t0"], &exec);
    assert_eq!(r.code, 10, "{r:?}");
    assert!(
        !marker.exists(),
        "nothing the agent wrote to .git ran outside its zone"
    );
    let delivered_paths = git(
        repo.path(),
        &["ls-tree", "-r", "--name-only", "loopexec/hostile"],
    );
    assert_eq!(delivered_paths, "answer\n");
    let snapshot = events(repo.path(), "hostile")
        .into_iter()
        .find(|e| e["type"] == "snapshot")
        .unwrap();
    assert_eq!(
        snapshot["protected_changes"],
        serde_json::json!([]),
        "{snapshot}"
    );
}

#[test]
fn loop_toml_agent_git_t0_is_pinned_in_the_receipt() {
    let repo = repo_with_history();
    write(repo.path(), "loop.toml", "agent_git = \"t0\"\ncheck = \"test \\\"$(cat answer)\\\" = 42\"\nexec = \"test -d .git && echo 42 > answer\"\nmax_iterations = 1\n");
    git(repo.path(), &["add", "loop.toml"]);
    git(repo.path(), &["commit", "-q", "-m", "loop"]);
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "file"]);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(events(repo.path(), "file")[0]["config"]["agent_git"], "t0");
}

#[test]
fn without_agent_git_the_workspace_has_no_git_dir_and_the_pin_is_absent() {
    let repo = repo_with_history();
    let r = run(
        repo.path(),
        "plain",
        &[],
        "test ! -e .git && echo 42 > answer",
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        events(repo.path(), "plain")[0]["config"].get("agent_git"),
        None
    );
}

#[test]
fn agent_git_in_place_is_refused_as_a_usage_error() {
    let dir = workdir();
    zone_writable(dir.path());
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--agent-git",
            "t0",
            "--check",
            "true",
            "--exec",
            "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    assert_eq!(v["errors"][0]["code"], "usage");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("agent_git"),
        "{v}"
    );
}

#[test]
fn an_unknown_agent_git_value_in_loop_toml_is_refused_with_its_line_and_nothing_written() {
    let dir = workdir();
    write(
        dir.path(),
        "loop.toml",
        "check = \"true\"\nexec = \"true\"\nagent_git = \"full\"\n",
    );
    let r = loopexec(dir.path(), &["run", "--json"]);
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    assert_eq!(v["errors"][0]["code"], "invalid_input");
    assert_eq!(
        v["errors"][0]["message"],
        "loop.toml line 3: unknown variant `full`, expected `none` or `t0`"
    );
    assert!(
        !dir.path().join(".loopexec").exists(),
        "a refused run wrote its state directory"
    );
}
