//! `loopexec check` in a SMALL workspace (`.small/`): the strict validation with every violation
//! named by file and key, exit 0 or 20 `invariant_failed`, one JSON object; a v2 workspace and
//! malformed YAML refused; and the `.loopexec/` hygiene's class 30 winning when both are broken.
mod common;
use common::*;
use std::path::Path;

/// A valid three-task SMALL workspace (t2 depends on t1) in `dir`.
fn small(dir: &Path) {
    let s = dir.join(".small");
    std::fs::create_dir(&s).unwrap();
    let files = [
        ("intent.small.yml", "small_version: \"1.0.0\"\nowner: \"human\"\nintent: \"Ship it\"\nscope:\n  include: []\n  exclude: []\nsuccess_criteria: []\n"),
        ("constraints.small.yml", "small_version: \"1.0.0\"\nowner: \"human\"\nconstraints:\n  - id: \"c1\"\n    rule: \"No network\"\n    severity: \"warn\"\n"),
        ("plan.small.yml", "small_version: \"1.0.0\"\nowner: \"agent\"\ntasks:\n  - id: \"t1\"\n    title: \"One\"\n  - id: \"t2\"\n    title: \"Two\"\n    dependencies: [\"t1\"]\n  - id: \"t3\"\n    title: \"Three\"\n"),
        ("progress.small.yml", "small_version: \"1.0.0\"\nowner: \"agent\"\nentries: []\n"),
        ("handoff.small.yml", "small_version: \"1.0.0\"\nowner: \"agent\"\nsummary: \"start\"\nresume:\n  next_steps: []\nlinks: []\nreplayId:\n  value: \"0000000000000000000000000000000000000000000000000000000000000000\"\n  source: \"auto\"\n"),
    ];
    for (name, text) in files {
        std::fs::write(s.join(name), text).unwrap();
    }
}

fn check(dir: &Path) -> Ran {
    loopexec(dir, &["check", "--json"])
}

#[test]
fn a_valid_small_workspace_checks_clean_without_a_state_dir() {
    let dir = workdir();
    small(dir.path());
    let r = check(dir.path());
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["small"]["valid"], true);
    assert_eq!(v["small"]["tasks"], 3);
    assert_eq!(v["small"]["violations"], serde_json::json!([]));
}

#[test]
fn every_violation_is_listed_with_file_and_key_and_exits_20() {
    let dir = workdir();
    small(dir.path());
    let plan = dir.path().join(".small/plan.small.yml");
    let text = std::fs::read_to_string(&plan).unwrap();
    std::fs::write(
        &plan,
        text.replace("id: \"t3\"", "id: \"t1\"")
            .replace("[\"t1\"]", "[\"t9\"]"),
    )
    .unwrap();
    std::fs::write(dir.path().join(".small/notes.md"), "x").unwrap();
    let r = check(dir.path());
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    let got: Vec<(String, String, String)> = v["small"]["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["rule"].as_str().unwrap().into(),
                x["file"].as_str().unwrap().into(),
                x["key"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = [
        ("S4", "notes.md", ""),
        ("duplicate_id", "plan.small.yml", "tasks[2].id"),
        (
            "unknown_dependency",
            "plan.small.yml",
            "tasks[1].dependencies",
        ),
    ];
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(v["errors"].as_array().unwrap().len(), 3);
    assert_eq!(v["errors"][1]["code"], "invariant_failed");
    assert_eq!(
        v["errors"][1]["message"],
        "plan.small.yml: tasks[2].id: task id \"t1\" is already used by tasks[0] [duplicate_id]"
    );
}

#[test]
fn malformed_yaml_is_refused_with_line_and_column() {
    let dir = workdir();
    small(dir.path());
    std::fs::write(
        dir.path().join(".small/intent.small.yml"),
        "small_version: \"1.0.0\"\nintent: \"unterminated\n",
    )
    .unwrap();
    let r = check(dir.path());
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    let pe = &v["small"]["parse_error"];
    assert_eq!(pe["file"], "intent.small.yml");
    assert_eq!(
        (pe["line"].as_u64(), pe["column"].as_u64()),
        (Some(2), Some(9))
    );
    let message = v["errors"][0]["message"].as_str().unwrap();
    assert!(message.starts_with("intent.small.yml:2:9: "), "{message}");
}

#[test]
fn a_duplicate_key_is_refused_with_line_and_column() {
    let dir = workdir();
    small(dir.path());
    std::fs::write(
        dir.path().join(".small/progress.small.yml"),
        "small_version: \"1.0.0\"\nowner: \"agent\"\nowner: \"human\"\nentries: []\n",
    )
    .unwrap();
    let r = check(dir.path());
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(
        r.json()["errors"][0]["message"],
        "progress.small.yml:3:1: duplicate key \"owner\""
    );
}

#[test]
fn a_v2_workspace_is_refused_with_a_clear_message() {
    let dir = workdir();
    small(dir.path());
    std::fs::write(dir.path().join(".small/profile.json"), "{}").unwrap();
    let r = check(dir.path());
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    assert_eq!(v["small"]["version"], "2");
    assert_eq!(v["errors"][0]["code"], "invariant_failed");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("SMALL v2 workspace (.small/profile.json); only SMALL v1.0.0 is supported"),
        "{v}"
    );
}

#[test]
fn a_symlinked_plan_is_refused_and_not_followed() {
    let dir = workdir();
    small(dir.path());
    let plan = dir.path().join(".small/plan.small.yml");
    std::fs::rename(&plan, dir.path().join("plan.yml")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("plan.yml"), &plan).unwrap();
    let r = check(dir.path());
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    assert_eq!(v["small"]["violations"][0]["rule"], "file");
    assert_eq!(v["small"]["violations"][0]["file"], "plan.small.yml");
}

#[test]
fn state_dir_problems_win_over_small_violations_and_both_are_listed() {
    let dir = workdir();
    small(dir.path());
    std::fs::write(dir.path().join(".small/extra"), "x").unwrap();
    std::fs::create_dir(dir.path().join(".loopexec")).unwrap();
    std::os::unix::fs::symlink("/", dir.path().join(".loopexec/runs")).unwrap();
    let r = check(dir.path());
    assert_eq!(r.code, 30, "{r:?}");
    let v = r.json();
    let codes: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["workspace_invalid", "invariant_failed"]);
}
