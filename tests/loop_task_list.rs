//! task_list mode (docs/task-list.md): the SMALL plan of a repository worked through task by
//! task, each task its own guarded `check_fixpoint` run with its own acceptance check, the plan
//! checkpointed by the supervisor on the run's plan branch, the run sealed and verifiable.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const INTENT: &str = "small_version: \"1.0.0\"\nowner: \"human\"\nintent: \"Three numbers in three files\"\nscope:\n  include: [\"./\"]\n  exclude: []\nsuccess_criteria:\n  - \"each file holds its number\"\n";
const CONSTRAINTS: &str = "small_version: \"1.0.0\"\nowner: \"human\"\nconstraints:\n  - id: \"tests-stay\"\n    rule: \"Checks are not edited\"\n    severity: \"error\"\n";
const PROGRESS: &str = "small_version: \"1.0.0\"\nowner: \"agent\"\nentries: []\n";
const HANDOFF: &str = "small_version: \"1.0.0\"\nowner: \"agent\"\nsummary: \"Nothing done yet\"\nresume:\n  current_task_id: null\n  next_steps: []\nlinks: []\nreplayId:\n  value: \"0000000000000000000000000000000000000000000000000000000000000000\"\n  source: \"auto\"\n";

/// `a` first, `b` after `a`, `c` independent: in plan order a, c? No: the next task is the first
/// actionable one in plan order, so a, then b (a done), then c.
const PLAN_ABC: &str = "small_version: \"1.0.0\"\nowner: \"agent\"\ntasks:\n  - id: \"a\"\n    title: \"Write one\"\n    steps: [\"put 1 in a.txt\"]\n    acceptance: [\"a.txt holds 1\"]\n  - id: \"b\"\n    title: \"Write two\"\n    dependencies: [\"a\"]\n  - id: \"c\"\n    title: \"Write three\"\n";

/// An agent that does the task `LOOPEXEC_TASK_ID` names (and leaves a trace of its order).
const AGENT: &str = "case \"$LOOPEXEC_TASK_ID\" in a) echo 1 > a.txt;; b) echo 2 > b.txt;; c) echo 3 > c.txt;; esac";

fn checks() -> String {
    "[tasks.a]\ncheck = \"grep -qx 1 a.txt\"\n[tasks.b]\ncheck = \"grep -qx 2 b.txt && grep -qx 1 a.txt\"\n[tasks.c]\ncheck = \"grep -qx 3 c.txt\"\n"
        .to_string()
}

/// A committed repository with a valid SMALL v1 workspace holding `plan`, and a loop.toml in
/// task_list mode with the agent `exec` and the task tables `tasks`.
fn plan_repo(plan: &str, exec: &str, tasks: &str) -> tempfile::TempDir {
    let dir = workdir();
    let p = dir.path();
    for (name, text) in [
        ("intent.small.yml", INTENT),
        ("constraints.small.yml", CONSTRAINTS),
        ("plan.small.yml", plan),
        ("progress.small.yml", PROGRESS),
        ("handoff.small.yml", HANDOFF),
    ] {
        write(p, &format!(".small/{name}"), text);
    }
    write(
        p,
        "loop.toml",
        &format!(
            "mode = \"task_list\"\nexec = {}\nmax_iterations = 2\n\n{tasks}",
            toml_string(exec)
        ),
    );
    commit_t0(p);
    dir
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn yaml_at(repo: &Path, rev: &str, file: &str) -> String {
    git(repo, &["show", &format!("{rev}:.small/{file}")])
}

fn of_type<'a>(ev: &'a [Value], kind: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["type"] == kind).collect()
}

#[test]
fn a_three_task_plan_with_a_dependency_completes_in_order_each_task_by_its_own_check() {
    let repo = plan_repo(PLAN_ABC, AGENT, &checks());
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "tl"]);
    assert_eq!(r.code, 10, "{r:?}");
    let out = r.json();
    assert_eq!(out["run"]["mode"], "task_list");
    let ev = events(repo.path(), "tl");
    assert_eq!(ev[0]["mode"], "task_list");
    let started: Vec<(&str, &str)> = of_type(&ev, "task_started")
        .iter()
        .map(|e| (e["task"].as_str().unwrap(), e["run_id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        started,
        vec![("a", "tl.t1"), ("b", "tl.t2"), ("c", "tl.t3")]
    );
    let outcomes: Vec<(&str, &str)> = of_type(&ev, "task_checkpoint")
        .iter()
        .map(|e| (e["task"].as_str().unwrap(), e["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        vec![("a", "completed"), ("b", "completed"), ("c", "completed")]
    );
    let halt = ev.last().unwrap();
    assert_eq!(halt["halt_reason"], "success_condition_met");
    assert_eq!(halt["delivery"]["branch"], "loopexec/tl");
    // Each task's run is a check_fixpoint run that knew its task.
    let task_run = events(repo.path(), "tl.t2");
    assert_eq!(task_run[0]["mode"], "check_fixpoint");
    assert_eq!(task_run[0]["config"]["task"]["id"], "b");
    assert_eq!(task_run[0]["config"]["task"]["parent_run"], "tl");
    // The plan branch holds every task's work and the checkpointed plan.
    for (file, n) in [("a.txt", "1"), ("b.txt", "2"), ("c.txt", "3")] {
        assert_eq!(
            git(repo.path(), &["show", &format!("loopexec/tl:{file}")]).trim(),
            n
        );
    }
    let plan = yaml_at(repo.path(), "loopexec/tl", "plan.small.yml");
    assert_eq!(
        plan.matches("status: \"completed\"").count() + plan.matches("status: completed").count(),
        3,
        "{plan}"
    );
    let progress = yaml_at(repo.path(), "loopexec/tl", "progress.small.yml");
    assert_eq!(
        progress.matches("task_id").count(),
        6,
        "a start and a checkpoint per task:\n{progress}"
    );
    // The operator's checkout did not move.
    assert!(!repo.path().join("a.txt").exists());
    let v = loopexec(repo.path(), &["verify", "--json", "tl"]);
    assert_eq!(v.code, 0, "{v:?}");
}
