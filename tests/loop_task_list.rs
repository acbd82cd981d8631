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

/// The `.small/` the branch `rev` holds passes `loopexec check`'s strict validation.
fn assert_plan_checks(repo: &Path, rev: &str) {
    let dir = tempfile::tempdir().unwrap();
    let listing = git(repo, &["ls-tree", "--name-only", &format!("{rev}:.small")]);
    for name in listing.lines() {
        write(
            dir.path(),
            &format!(".small/{name}"),
            &yaml_at(repo, rev, name),
        );
    }
    let c = loopexec(dir.path(), &["check", "--json"]);
    assert_eq!(c.code, 0, "the plan on {rev} validates: {c:?}");
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
    assert_plan_checks(repo.path(), "loopexec/tl");
    // The operator's checkout did not move.
    assert!(!repo.path().join("a.txt").exists());
    let v = loopexec(repo.path(), &["verify", "--json", "tl"]);
    assert_eq!(v.code, 0, "{v:?}");
}

#[test]
fn a_task_red_for_its_cap_ends_blocked_its_dependent_never_starts_and_an_independent_task_completes(
) {
    let tasks = "[tasks.a]\ncheck = \"grep -qx 1 never.txt\"\n[tasks.b]\ncheck = \"true\"\n[tasks.c]\ncheck = \"grep -qx 3 c.txt\"\n";
    let repo = plan_repo(PLAN_ABC, AGENT, tasks);
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "bl"]);
    assert_eq!(r.code, 11, "{r:?}");
    let ev = events(repo.path(), "bl");
    let started: Vec<&str> = of_type(&ev, "task_started")
        .iter()
        .map(|e| e["task"].as_str().unwrap())
        .collect();
    assert_eq!(started, vec!["a", "c"], "b waits on the blocked a");
    let checkpoints = of_type(&ev, "task_checkpoint");
    assert_eq!(checkpoints[0]["outcome"], "blocked");
    assert_eq!(checkpoints[0]["run_halt"], "max_iterations_reached");
    assert_eq!(checkpoints[1]["outcome"], "completed");
    let halt = ev.last().unwrap();
    assert_eq!(halt["halt_reason"], "no_actionable_tasks");
    assert_eq!(
        halt["detail"],
        "no task can start: 2 remain (a, b), each blocked or waiting on a blocked task"
    );
    let v = loopexec(repo.path(), &["verify", "--json", "bl"]);
    assert_eq!(v.code, 0, "{v:?}");
}

#[test]
fn a_task_without_an_acceptance_check_halts_check_inadequate_before_its_agent_works() {
    let tasks = "[tasks.a]\ncheck = \"grep -qx 1 a.txt\"\n";
    let repo = plan_repo(PLAN_ABC, AGENT, tasks);
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "ci"]);
    assert_eq!(r.code, 15, "{r:?}");
    let ev = events(repo.path(), "ci");
    assert_eq!(of_type(&ev, "task_started").len(), 1, "only a ran");
    let halt = ev.last().unwrap();
    assert_eq!(halt["halt_reason"], "check_inadequate");
    assert!(
        halt["detail"]
            .as_str()
            .unwrap()
            .starts_with("task b has no acceptance check"),
        "{halt}"
    );
    let v = loopexec(repo.path(), &["verify", "--json", "ci"]);
    assert_eq!(v.code, 0, "{v:?}");
}

#[test]
fn an_agent_that_edits_the_plan_is_halted_blocked_path_modified() {
    let agent = "echo 1 > a.txt; sed -i 's/Write two/Skip two/' .small/plan.small.yml";
    let repo = plan_repo(PLAN_ABC, agent, &checks());
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "ed"]);
    assert_eq!(r.code, 13, "{r:?}");
    let ev = events(repo.path(), "ed");
    let halt = ev.last().unwrap();
    assert_eq!(halt["halt_reason"], "blocked_path_modified");
    let checkpoint = &of_type(&ev, "task_checkpoint")[0];
    assert_eq!(checkpoint["run_halt"], "blocked_path_modified");
    assert_eq!(checkpoint["outcome"], "blocked");
    // The plan on the branch is the supervisor's, not the agent's.
    let plan = yaml_at(repo.path(), "loopexec/ed", "plan.small.yml");
    assert!(
        plan.contains("Write two") && !plan.contains("Skip two"),
        "{plan}"
    );
}

/// A Python task the agent `agent` games instead of fixing the code.
fn gamed_task_repo(mode_task_list: bool, agent: &str) -> tempfile::TempDir {
    let check = "python3 -m pytest -q -p no:cacheprovider test_calc.py";
    let dir = if mode_task_list {
        plan_repo(
            "small_version: \"1.0.0\"\nowner: \"agent\"\ntasks:\n  - id: \"fix\"\n    title: \"Fix add\"\n",
            agent,
            &format!("[tasks.fix]\ncheck = {}\n", toml_string(check)),
        )
    } else {
        let dir = workdir();
        write(
            dir.path(),
            "loop.toml",
            &format!(
                "exec = {}\ncheck = {}\nmax_iterations = 2\n",
                toml_string(agent),
                toml_string(check)
            ),
        );
        dir
    };
    write(dir.path(), "calc.py", "def add(a, b):\n    return a - b\n");
    write(
        dir.path(),
        "test_calc.py",
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n    assert add(1, 1) == 2\n",
    );
    commit_t0(dir.path());
    dir
}

/// The halt and exit code of `agent` on the Python task in check_fixpoint mode, then in
/// task_list mode (where its task's checkpoint records the same halt).
fn halts_in_both_modes(agent: &str) -> ((Value, i32), (Value, i32)) {
    let fixpoint = gamed_task_repo(false, agent);
    let f = loopexec(fixpoint.path(), &["run", "--json", "--run-id", "fx"]);
    let fixpoint_halt = events(fixpoint.path(), "fx").last().unwrap()["halt_reason"].clone();
    let tasks = gamed_task_repo(true, agent);
    let r = loopexec(tasks.path(), &["run", "--json", "--run-id", "tx"]);
    let ev = events(tasks.path(), "tx");
    let halt = ev.last().unwrap()["halt_reason"].clone();
    assert_eq!(of_type(&ev, "task_checkpoint")[0]["run_halt"], halt);
    ((fixpoint_halt, f.code), (halt, r.code))
}

#[test]
fn an_agent_weakening_the_tasks_test_is_halted_exactly_as_in_check_fixpoint_mode() {
    require_pytest();
    let (fixpoint, task_list) =
        halts_in_both_modes("printf 'def test_add():\\n    pass\\n' > test_calc.py");
    assert_eq!(fixpoint, ("blocked_path_modified".into(), 13));
    assert_eq!(task_list, fixpoint);
}

#[test]
fn an_agent_planting_a_conftest_that_skips_the_tests_is_halted_exactly_as_in_check_fixpoint_mode() {
    require_pytest();
    let conftest = "printf 'import pytest\\n\\ndef pytest_collection_modifyitems(items):\\n    for i in items:\\n        i.add_marker(pytest.mark.skip)\\n' > conftest.py";
    let (fixpoint, task_list) = halts_in_both_modes(conftest);
    assert_ne!(fixpoint.0, "success_condition_met");
    assert_eq!(task_list, fixpoint);
}

fn no_run_written(repo: &Path) {
    let runs = repo.join(".loopexec/runs");
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(),
        "nothing is written"
    );
}

#[test]
fn a_dependency_cycle_is_refused_at_the_start_naming_it_and_nothing_is_written() {
    let plan = "small_version: \"1.0.0\"\nowner: \"agent\"\ntasks:\n  - id: \"a\"\n    title: \"A\"\n    dependencies: [\"b\"]\n  - id: \"b\"\n    title: \"B\"\n    dependencies: [\"a\"]\n";
    let repo = plan_repo(plan, AGENT, "");
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "cy"]);
    assert_eq!(r.code, 20, "{r:?}");
    let out = r.json();
    let message = out["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("a -> b -> a"), "{message}");
    no_run_written(repo.path());
}

#[test]
fn malformed_plan_yaml_is_refused_with_its_line_and_column_and_nothing_is_written() {
    let plan = "small_version: \"1.0.0\"\nowner: \"agent\"\ntasks:\n  - id: [unclosed\n";
    let repo = plan_repo(plan, AGENT, "");
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "my"]);
    assert_eq!(r.code, 20, "{r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("plan.small.yml:"), "{message}");
    assert!(
        message
            .split("plan.small.yml:")
            .nth(1)
            .is_some_and(|rest| rest.split(':').take(2).all(|n| n.parse::<u32>().is_ok())),
        "line and column follow the file name: {message}"
    );
    no_run_written(repo.path());
}

#[test]
fn duplicate_task_ids_are_refused_at_the_start() {
    let plan = "small_version: \"1.0.0\"\nowner: \"agent\"\ntasks:\n  - id: \"a\"\n    title: \"A\"\n  - id: \"a\"\n    title: \"A again\"\n";
    let repo = plan_repo(plan, AGENT, "[tasks.a]\ncheck = \"true\"\n");
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "du"]);
    assert_eq!(r.code, 20, "{r:?}");
    r.json();
    no_run_written(repo.path());
}

#[test]
fn a_task_check_for_a_task_not_in_the_plan_is_refused_at_the_start() {
    let repo = plan_repo(
        PLAN_ABC,
        AGENT,
        &format!("{}[tasks.ghost]\ncheck = \"true\"\n", checks()),
    );
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "gh"]);
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(
        r.json()["errors"][0]["message"],
        "an acceptance check is given for ghost, not a task of the plan"
    );
    no_run_written(repo.path());
}

#[test]
fn a_task_check_given_on_the_command_line_replaces_the_loop_files() {
    let repo = plan_repo(PLAN_ABC, AGENT, &checks());
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "cl",
            "--task-check",
            "c=grep -qx 4 c.txt",
        ],
    );
    assert_eq!(
        r.code, 11,
        "c cannot pass its new check, so nothing is left to do: {r:?}"
    );
    let ev = events(repo.path(), "cl");
    assert_eq!(ev[0]["config"]["tasks"]["c"]["check"], "grep -qx 4 c.txt");
    let last = of_type(&ev, "task_checkpoint")
        .last()
        .map(|c| (c["task"].clone(), c["outcome"].clone()));
    assert_eq!(last, Some(("c".into(), "blocked".into())));
}

#[test]
fn a_v2_workspace_is_refused_with_a_clear_message() {
    let repo = plan_repo(PLAN_ABC, AGENT, &checks());
    write(
        repo.path(),
        ".small/profile.json",
        "{\"small_version\": \"2.0.0\"}\n",
    );
    commit_t0(repo.path());
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "v2"]);
    assert_eq!(r.code, 20, "{r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("SMALL v2"), "{message}");
    no_run_written(repo.path());
}

#[test]
fn the_agent_finds_its_task_in_the_feedback_file() {
    let agent =
        "cp \"$LOOPEXEC_FEEDBACK\" seen.json; echo 1 > a.txt; echo 2 > b.txt; echo 3 > c.txt";
    let repo = plan_repo(PLAN_ABC, agent, &checks());
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "fb"]);
    assert_eq!(r.code, 10, "{r:?}");
    // The first task's run delivered the agent's copy of its feedback.
    let seen: Value =
        serde_json::from_str(&git(repo.path(), &["show", "loopexec/fb.t1:seen.json"])).unwrap();
    assert_eq!(seen["task"]["id"], "a");
    assert_eq!(seen["task"]["title"], "Write one");
    assert_eq!(seen["task"]["steps"][0], "put 1 in a.txt");
    assert_eq!(seen["task"]["acceptance"], "a.txt holds 1");
}

#[test]
fn a_checkpoint_whose_task_run_receipt_was_altered_fails_verify() {
    let repo = plan_repo(PLAN_ABC, AGENT, &checks());
    assert_eq!(
        loopexec(repo.path(), &["run", "--json", "--run-id", "tv"]).code,
        10
    );
    let receipt = run_dir(repo.path(), "tv.t2").join("receipt.jsonl");
    let mut bytes = std::fs::read(&receipt).unwrap();
    bytes.extend_from_slice(b"\n");
    std::fs::write(&receipt, bytes).unwrap();
    let v = loopexec(repo.path(), &["verify", "--json", "tv"]);
    assert_eq!(v.code, 13, "{v:?}");
    let failed: Vec<Value> = v.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].clone())
        .collect();
    assert_eq!(failed, vec![Value::from("verify_task_runs")]);
}

#[test]
fn a_supervisor_killed_between_a_tasks_check_and_its_checkpoint_resumes_without_running_the_task_twice(
) {
    let repo = plan_repo(PLAN_ABC, AGENT, &checks());
    let pause = tempfile::tempdir().unwrap();
    let marker = pause.path().join("before_checkpoint.pid");
    let mut child = command()
        .current_dir(repo.path())
        .args(["run", "--json", "--run-id", "kr"])
        .env("LOOPEXEC_TEST_PAUSE", "before_checkpoint")
        .env("LOOPEXEC_TEST_PAUSE_MARKER", &marker)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&marker, std::time::Duration::from_secs(300));
    let pid = read_pid(&marker);
    assert_eq!(pid as u32, child.id());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    let before = events(repo.path(), "kr");
    assert_eq!(of_type(&before, "task_started").len(), 1);
    assert!(of_type(&before, "task_checkpoint").is_empty());
    let r = loopexec(repo.path(), &["run", "--json", "--resume", "kr"]);
    assert_eq!(r.code, 10, "{r:?}");
    let ev = events(repo.path(), "kr");
    let started: Vec<&str> = of_type(&ev, "task_started")
        .iter()
        .map(|e| e["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        started,
        vec!["kr.t1", "kr.t2", "kr.t3"],
        "a's run is not run again"
    );
    assert_eq!(of_type(&events(repo.path(), "kr.t1"), "run_start").len(), 1);
    let progress = yaml_at(repo.path(), "loopexec/kr", "progress.small.yml");
    assert_eq!(progress.matches("task_id").count(), 6, "{progress}");
    assert_plan_checks(repo.path(), "loopexec/kr");
    let v = loopexec(repo.path(), &["verify", "--json", "kr"]);
    assert_eq!(v.code, 0, "{v:?}");
}
