//! Specifications of `crate::small` on workspaces written by the tests: each strict rule broken
//! once, the transitions (atomic, valid against the strict rules and the pinned SMALL v1.0.0 JSON
//! schemas in tests/data/small-schemas/v1.0.0/).

use super::*;

pub(crate) const INTENT_YML: &str = "small_version: \"1.0.0\"\nowner: \"human\"\nintent: \"Ship the parser\"\nscope:\n  include: [\"src/\"]\n  exclude: []\nsuccess_criteria:\n  - \"tests pass\"\n";
pub(crate) const CONSTRAINTS_YML: &str = "small_version: \"1.0.0\"\nowner: \"human\"\nconstraints:\n  - id: \"no-net\"\n    rule: \"No network in tests\"\n    severity: \"error\"\n";
pub(crate) const PLAN_YML: &str = "small_version: \"1.0.0\"\nowner: \"agent\"\ntasks:\n  - id: \"t1\"\n    title: \"Lexer\"\n    steps: [\"write the lexer\"]\n    acceptance: [\"lexer tests pass\"]\n    status: \"pending\"\n  - id: \"t2\"\n    title: \"Parser\"\n    dependencies: [\"t1\"]\n  - id: \"t3\"\n    title: \"Docs\"\n";
pub(crate) const PROGRESS_YML: &str = "small_version: \"1.0.0\"\nowner: \"agent\"\nentries: []\n";
pub(crate) const HANDOFF_YML: &str = "small_version: \"1.0.0\"\nowner: \"agent\"\nsummary: \"Nothing done yet\"\nresume:\n  current_task_id: null\n  next_steps: []\nlinks: []\nreplayId:\n  value: \"0000000000000000000000000000000000000000000000000000000000000000\"\n  source: \"auto\"\n";

/// A valid three-task workspace (t2 depends on t1) in a fresh directory.
fn workspace() -> (tempfile::TempDir, SafeDir) {
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join(SMALL_DIR);
    std::fs::create_dir(&small).unwrap();
    for (name, text) in [
        (INTENT, INTENT_YML),
        (CONSTRAINTS, CONSTRAINTS_YML),
        (PLAN, PLAN_YML),
        (PROGRESS, PROGRESS_YML),
        (HANDOFF, HANDOFF_YML),
    ] {
        std::fs::write(small.join(name), text).unwrap();
    }
    let dir = SafeDir::open(tmp.path()).unwrap();
    (tmp, dir)
}

fn write(tmp: &tempfile::TempDir, name: &str, text: &str) {
    std::fs::write(tmp.path().join(SMALL_DIR).join(name), text).unwrap();
}

fn replace(tmp: &tempfile::TempDir, name: &str, from: &str, to: &str) {
    let path = tmp.path().join(SMALL_DIR).join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{from:?} not in {name}");
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// The violations of the workspace, as (rule, file, key).
fn broken(dir: &SafeDir) -> Vec<(&'static str, String, String)> {
    load(dir)
        .unwrap()
        .violations()
        .into_iter()
        .map(|v| (v.rule, v.file, v.key))
        .collect()
}

fn one(rule: &'static str, file: &str, key: &str) -> Vec<(&'static str, String, String)> {
    vec![(rule, file.to_string(), key.to_string())]
}

fn snapshot(tmp: &tempfile::TempDir) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(tmp.path().join(SMALL_DIR))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

fn at(secs: i64, nanos: u32) -> Timestamp {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .unwrap()
        .replace_nanosecond(nanos)
        .unwrap()
}

fn evidence(exit: i32) -> Evidence {
    Evidence {
        command: "cargo test lexer".into(),
        exit_code: Some(exit),
        failing: if exit == 0 {
            vec![]
        } else {
            vec!["lexer::eof".into()]
        },
        tree_id: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
        summary: "acceptance check ran".into(),
    }
}

#[test]
fn the_fixture_workspace_is_valid() {
    let (_tmp, dir) = workspace();
    assert_eq!(detect(&dir).unwrap(), Detected::V1);
    assert_eq!(broken(&dir), vec![]);
    let ws = load(&dir).unwrap();
    let ids: Vec<_> = ws.tasks().iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t1", "t2", "t3"]);
    assert_eq!(
        ws.tasks()[0].acceptance.as_deref(),
        Some("lexer tests pass")
    );
    assert_eq!(ws.tasks()[1].dependencies, ["t1"]);
    assert_eq!(ws.task("t3").map(|t| t.title.as_str()), Some("Docs"));
    assert_eq!(ws.task("t9"), None);
}

#[test]
fn no_small_dir_is_absent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SafeDir::open(tmp.path()).unwrap();
    assert_eq!(detect(&dir).unwrap(), Detected::Absent);
    assert!(matches!(load(&dir), Err(SmallError::Absent { .. })));
}

#[test]
fn a_v2_workspace_is_detected_and_refused() {
    let (tmp, dir) = workspace();
    write(&tmp, V2_MARKER, "{}");
    assert_eq!(detect(&dir).unwrap(), Detected::V2);
    let err = load(&dir).unwrap_err();
    assert!(matches!(err, SmallError::V2Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("only SMALL v1.0.0 is supported"));
}

#[test]
fn a_symlinked_small_dir_is_refused() {
    let (tmp, _) = workspace();
    let other = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(tmp.path().join(SMALL_DIR), other.path().join(SMALL_DIR)).unwrap();
    let dir = SafeDir::open(other.path()).unwrap();
    assert!(matches!(
        detect(&dir),
        Err(SmallError::NotADirectory { .. })
    ));
}

#[test]
fn a_symlinked_plan_is_a_violation_and_never_followed() {
    let (tmp, dir) = workspace();
    let outside = tmp.path().join("plan-elsewhere.yml");
    std::fs::write(&outside, PLAN_YML).unwrap();
    let plan = tmp.path().join(SMALL_DIR).join(PLAN);
    std::fs::remove_file(&plan).unwrap();
    std::os::unix::fs::symlink(&outside, &plan).unwrap();
    assert_eq!(broken(&dir), one("file", PLAN, ""));
    assert!(load(&dir).unwrap().tasks().is_empty());
}

#[test]
fn a_fifo_in_place_of_a_file_is_a_violation() {
    let (tmp, dir) = workspace();
    let progress = tmp.path().join(SMALL_DIR).join(PROGRESS);
    std::fs::remove_file(&progress).unwrap();
    nix::unistd::mkfifo(&progress, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert_eq!(broken(&dir), one("file", PROGRESS, ""));
}

#[test]
fn malformed_yaml_is_an_error_naming_file_line_and_column() {
    let (tmp, dir) = workspace();
    write(
        &tmp,
        PLAN,
        "small_version: \"1.0.0\"\ntasks:\n  - id: [unclosed\n",
    );
    let err = load(&dir).unwrap_err();
    let SmallError::Parse {
        file, line, col, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!((file.as_str(), *line, *col), (PLAN, 4, 1), "{err}");
    assert!(err.to_string().starts_with("plan.small.yml:4:1: "), "{err}");
}

#[test]
fn schema_an_unknown_top_level_key_is_invalid() {
    let (tmp, dir) = workspace();
    replace(&tmp, INTENT, "owner:", "extra: 1\nowner:");
    assert_eq!(broken(&dir), one("schema", INTENT, "extra"));
}

#[test]
fn schema_an_unknown_task_key_is_invalid() {
    let (tmp, dir) = workspace();
    replace(
        &tmp,
        PLAN,
        "    title: \"Docs\"\n",
        "    title: \"Docs\"\n    check: \"make docs\"\n",
    );
    assert_eq!(broken(&dir), one("schema", PLAN, "tasks[2].check"));
}

#[test]
fn schema_a_missing_required_file_is_invalid() {
    let (tmp, dir) = workspace();
    std::fs::remove_file(tmp.path().join(SMALL_DIR).join(CONSTRAINTS)).unwrap();
    assert_eq!(broken(&dir), one("schema", CONSTRAINTS, ""));
}

#[test]
fn owner_must_be_the_files_owner() {
    let (tmp, dir) = workspace();
    replace(&tmp, PLAN, "owner: \"agent\"", "owner: \"human\"");
    assert_eq!(broken(&dir), one("owner", PLAN, "owner"));
}

#[test]
fn small_version_must_be_a_quoted_string() {
    let (tmp, dir) = workspace();
    replace(
        &tmp,
        CONSTRAINTS,
        "small_version: \"1.0.0\"",
        "small_version: 1.0.0",
    );
    assert_eq!(
        broken(&dir),
        one("small_version", CONSTRAINTS, "small_version")
    );
}

#[test]
fn non_empty_intent_is_required() {
    let (tmp, dir) = workspace();
    replace(&tmp, INTENT, "\"Ship the parser\"", "\"  \"");
    assert_eq!(broken(&dir), one("non_empty", INTENT, "intent"));
}

#[test]
fn non_empty_constraints_are_required() {
    let (tmp, dir) = workspace();
    write(
        &tmp,
        CONSTRAINTS,
        "small_version: \"1.0.0\"\nowner: \"human\"\nconstraints: []\n",
    );
    assert_eq!(broken(&dir), one("non_empty", CONSTRAINTS, "constraints"));
}

#[test]
fn status_must_be_a_small_status() {
    let (tmp, dir) = workspace();
    replace(&tmp, PLAN, "status: \"pending\"", "status: \"done\"");
    assert_eq!(broken(&dir), one("status", PLAN, "tasks[0].status"));
}

#[test]
fn duplicate_task_ids_are_invalid() {
    let (tmp, dir) = workspace();
    replace(&tmp, PLAN, "id: \"t3\"", "id: \"t1\"");
    assert_eq!(broken(&dir), one("duplicate_id", PLAN, "tasks[2].id"));
}

#[test]
fn unknown_dependency_is_invalid() {
    let (tmp, dir) = workspace();
    replace(&tmp, PLAN, "[\"t1\"]", "[\"t9\"]");
    let v = load(&dir).unwrap().violations();
    assert_eq!(
        broken(&dir),
        one("unknown_dependency", PLAN, "tasks[1].dependencies")
    );
    assert!(v[0].message.contains("\"t9\""), "{}", v[0].message);
}

#[test]
fn a_dependency_cycle_is_invalid_and_named() {
    let (tmp, dir) = workspace();
    replace(
        &tmp,
        PLAN,
        "    status: \"pending\"\n",
        "    status: \"pending\"\n    dependencies: [\"t2\"]\n",
    );
    let v = load(&dir).unwrap().violations();
    assert_eq!(broken(&dir), one("cycle", PLAN, "tasks[0].dependencies"));
    assert_eq!(v[0].message, "dependency cycle: t1 -> t2 -> t1");
}

const ENTRY_T1: &str = "  - task_id: \"t1\"\n    status: \"in_progress\"\n    timestamp: \"2026-01-02T03:04:05.000000002Z\"\n    evidence: \"started\"\n";

fn with_entries(tmp: &tempfile::TempDir, entries: &str) {
    write(
        tmp,
        PROGRESS,
        &format!("small_version: \"1.0.0\"\nowner: \"agent\"\nentries:\n{entries}"),
    );
}

#[test]
fn timestamp_must_be_utc_with_a_fraction() {
    let (tmp, dir) = workspace();
    with_entries(&tmp, &ENTRY_T1.replace(".000000002Z", "+01:00"));
    assert_eq!(
        broken(&dir),
        one("timestamp", PROGRESS, "entries[0].timestamp")
    );
}

#[test]
fn timestamp_must_increase_strictly() {
    let (tmp, dir) = workspace();
    with_entries(
        &tmp,
        // The same timestamp twice: equal is not later.
        &format!("{ENTRY_T1}{ENTRY_T1}"),
    );
    assert_eq!(
        broken(&dir),
        one("timestamp", PROGRESS, "entries[1].timestamp")
    );
}

#[test]
fn evidence_is_required_on_every_entry() {
    let (tmp, dir) = workspace();
    with_entries(&tmp, &ENTRY_T1.replace("    evidence: \"started\"\n", ""));
    assert_eq!(broken(&dir), one("evidence", PROGRESS, "entries[0]"));
}

#[test]
fn s1_a_completed_task_needs_progress_with_evidence() {
    let (tmp, dir) = workspace();
    replace(&tmp, PLAN, "status: \"pending\"", "status: \"completed\"");
    assert_eq!(broken(&dir), one("S1", PLAN, "tasks[0].status"));
}

#[test]
fn s2_progress_names_a_plan_task_or_meta() {
    let (tmp, dir) = workspace();
    let meta = ENTRY_T1.replace("\"t1\"", "\"meta/setup\"");
    let stray = ENTRY_T1
        .replace("\"t1\"", "\"t7\"")
        .replace("05.000000002Z", "06.5Z");
    with_entries(&tmp, &format!("{meta}{stray}"));
    assert_eq!(broken(&dir), one("S2", PROGRESS, "entries[1].task_id"));
}

#[test]
fn s3_the_handoffs_current_task_exists() {
    let (tmp, dir) = workspace();
    replace(
        &tmp,
        HANDOFF,
        "current_task_id: null",
        "current_task_id: \"t8\"",
    );
    assert_eq!(broken(&dir), one("S3", HANDOFF, "resume.current_task_id"));
}

#[test]
fn s4_nothing_else_is_allowed_in_small() {
    let (tmp, dir) = workspace();
    write(&tmp, "notes.txt", "x");
    assert_eq!(broken(&dir), one("S4", "notes.txt", ""));
}

#[test]
fn secret_looking_keys_and_values_are_invalid() {
    let (tmp, dir) = workspace();
    with_entries(
        &tmp,
        &format!("{ENTRY_T1}    notes: \"QWxhZGRpbjpvcGVuIHNlc2FtZUFsYWRkaW46b3Blbg==\"\n"),
    );
    assert_eq!(broken(&dir), one("secret", PROGRESS, "entries[0].notes"));
    replace(&tmp, INTENT, "owner:", "api_token: \"x\"\nowner:");
    let rules: Vec<_> = broken(&dir)
        .into_iter()
        .map(|(r, f, k)| format!("{r} {f} {k}"))
        .collect();
    assert!(
        rules.contains(&"secret intent.small.yml api_token".to_string()),
        "{rules:?}"
    );
}

#[test]
fn insecure_links_are_invalid() {
    let (tmp, dir) = workspace();
    replace(
        &tmp,
        HANDOFF,
        "links: []",
        "links:\n  - url: \"http://example.com/run\"",
    );
    assert_eq!(broken(&dir), one("insecure_link", HANDOFF, "links[0].url"));
}

#[test]
fn replay_id_is_computed_from_raw_files_and_sticky_once_set() {
    let (tmp, dir) = workspace();
    let expect = replay::of(
        INTENT_YML.as_bytes(),
        PLAN_YML.as_bytes(),
        CONSTRAINTS_YML.as_bytes(),
    );
    assert_eq!(load(&dir).unwrap().replay_id(), expect);
    assert_eq!(ensure_replay_id(&dir).unwrap(), expect);
    replace(&tmp, PLAN, "Docs", "Documentation");
    assert_eq!(load(&dir).unwrap().replay_id(), expect);
    assert_eq!(broken(&dir), vec![]);
}

#[test]
fn start_then_checkpoint_records_progress_and_plan_status() {
    let (_tmp, dir) = workspace();
    start_task(&dir, "t1", "loopexec iteration 1", at(1_700_000_000, 5)).unwrap();
    let ws = load(&dir).unwrap();
    assert_eq!(ws.next(), Next::Task("t1".into()));
    assert_eq!(ws.tasks()[0].status, Status::InProgress);
    checkpoint(
        &dir,
        "t1",
        Outcome::Completed,
        &evidence(0),
        at(1_700_000_001, 0),
    )
    .unwrap();
    let ws = load(&dir).unwrap();
    assert_eq!(ws.violations(), vec![]);
    assert_eq!(ws.tasks()[0].status, Status::Completed);
    assert_eq!(ws.next(), Next::Task("t2".into()));
    let progress = ws.root(PROGRESS).unwrap().to_json();
    let entries = progress["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["timestamp"], "2023-11-14T22:13:20.000000005Z");
    assert_eq!(entries[1]["status"], "completed");
    assert_eq!(entries[1]["command"], "cargo test lexer");
    assert_eq!(entries[1]["verification"]["exit_code"], 0);
    assert_eq!(
        entries[1]["verification"]["tree_id"],
        "tree:4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    );
    assert_eq!(entries[1]["replayId"], ws.replay_id());
    assert_eq!(entries[0]["replayId"], ws.replay_id());
}

#[test]
fn entries_get_previous_plus_one_nanosecond_when_the_clock_has_not_moved() {
    let (_tmp, dir) = workspace();
    let now = at(1_700_000_000, 999_999_999);
    start_task(&dir, "t1", "start", now).unwrap();
    checkpoint(&dir, "t1", Outcome::Blocked, &evidence(1), now).unwrap();
    start_task(&dir, "t3", "start", at(1_600_000_000, 0)).unwrap();
    let ws = load(&dir).unwrap();
    let progress = ws.root(PROGRESS).unwrap().to_json();
    let stamps: Vec<_> = progress["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["timestamp"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        stamps,
        [
            "2023-11-14T22:13:20.999999999Z",
            "2023-11-14T22:13:21.000000000Z",
            "2023-11-14T22:13:21.000000001Z"
        ]
    );
    assert_eq!(ws.violations(), vec![]);
}

#[test]
fn checkpoint_refuses_a_task_not_in_the_plan_and_writes_nothing() {
    let (tmp, dir) = workspace();
    let before = snapshot(&tmp);
    let err = checkpoint(&dir, "t9", Outcome::Completed, &evidence(0), at(1, 0)).unwrap_err();
    assert!(matches!(err, SmallError::Refused { .. }), "{err:?}");
    assert_eq!(snapshot(&tmp), before);
}

#[test]
fn a_checkpoint_whose_result_would_not_validate_leaves_small_byte_identical() {
    let (tmp, dir) = workspace();
    // An http:// command makes the new entry invalid (insecure_link).
    let mut bad = evidence(0);
    bad.command = "curl http://example.com/check".into();
    let before = snapshot(&tmp);
    let err = checkpoint(&dir, "t1", Outcome::Completed, &bad, at(5, 0)).unwrap_err();
    let SmallError::Invalid { violations } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(violations[0].rule, "insecure_link");
    assert_eq!(violations[0].key, "entries[0].command");
    assert_eq!(snapshot(&tmp), before);
}

#[test]
fn a_failed_replace_rolls_back_the_files_already_replaced() {
    let (tmp, dir) = workspace();
    let small = dir.subdir(SMALL_DIR).unwrap();
    // A directory where the plan's temporary goes makes the second replace fail.
    let blocker = tmp
        .path()
        .join(SMALL_DIR)
        .join(format!(".{PLAN}.tmp-{}", std::process::id()));
    std::fs::create_dir(&blocker).unwrap();
    let before_progress = PROGRESS_YML.as_bytes().to_vec();
    let writes = [
        (PROGRESS, b"new progress".to_vec()),
        (PLAN, b"new plan".to_vec()),
        (WORKSPACE, b"ws".to_vec()),
    ];
    let before = [
        (PROGRESS, Some(before_progress.clone())),
        (PLAN, Some(PLAN_YML.as_bytes().to_vec())),
        (WORKSPACE, None),
    ];
    let err = write::replace_all(&small, &writes, &before).unwrap_err();
    assert!(matches!(err, SmallError::Fs(_)), "{err:?}");
    std::fs::remove_dir(&blocker).unwrap();
    assert_eq!(
        std::fs::read(tmp.path().join(SMALL_DIR).join(PROGRESS)).unwrap(),
        before_progress
    );
    assert_eq!(
        std::fs::read(tmp.path().join(SMALL_DIR).join(PLAN)).unwrap(),
        PLAN_YML.as_bytes()
    );
    assert!(!tmp.path().join(SMALL_DIR).join(WORKSPACE).exists());
}

#[test]
fn recover_removes_only_leftover_temporaries() {
    let (tmp, dir) = workspace();
    write(&tmp, ".plan.small.yml.tmp-4242", "half");
    write(&tmp, "keep.txt", "x");
    assert_eq!(recover(&dir).unwrap(), [".plan.small.yml.tmp-4242"]);
    assert_eq!(broken(&dir), one("S4", "keep.txt", ""));
}

#[test]
fn the_handoff_names_the_task_in_progress() {
    let (_tmp, dir) = workspace();
    start_task(&dir, "t1", "start", at(10, 0)).unwrap();
    write_handoff(&dir, "Halted: budget").unwrap();
    let ws = load(&dir).unwrap();
    assert_eq!(ws.violations(), vec![]);
    let h = ws.root(HANDOFF).unwrap().to_json();
    assert_eq!(h["resume"]["current_task_id"], "t1");
    assert_eq!(
        h["summary"],
        "Halted: budget Task t1 is in progress (started, not yet checkpointed)."
    );
    assert_eq!(h["resume"]["next_steps"][0], "t1: Lexer");
    assert_eq!(h["replayId"]["value"], ws.replay_id());
}

#[test]
fn a_blocked_dependency_leaves_nothing_actionable_in_a_workspace() {
    let (_tmp, dir) = workspace();
    start_task(&dir, "t1", "start", at(10, 0)).unwrap();
    checkpoint(&dir, "t1", Outcome::Blocked, &evidence(1), at(11, 0)).unwrap();
    start_task(&dir, "t3", "start", at(12, 0)).unwrap();
    checkpoint(&dir, "t3", Outcome::Completed, &evidence(0), at(13, 0)).unwrap();
    assert_eq!(
        load(&dir).unwrap().next(),
        Next::NoneActionable {
            remaining: vec!["t1".into(), "t2".into()]
        }
    );
}

fn schema(name: &str) -> jsonschema::Validator {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/small-schemas/v1.0.0")
        .join(format!("{name}.schema.json"));
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    jsonschema::options()
        .should_validate_formats(true)
        .build(&value)
        .unwrap()
}

#[test]
fn what_the_transitions_write_validates_against_the_pinned_schemas() {
    let (_tmp, dir) = workspace();
    ensure_replay_id(&dir).unwrap();
    start_task(&dir, "t1", "start", at(10, 0)).unwrap();
    checkpoint(&dir, "t1", Outcome::Completed, &evidence(0), at(11, 0)).unwrap();
    start_task(&dir, "t2", "start", at(12, 0)).unwrap();
    let mut none = evidence(1);
    none.exit_code = None;
    checkpoint(&dir, "t2", Outcome::Blocked, &none, at(13, 0)).unwrap();
    write_handoff(&dir, "Halted: no actionable tasks").unwrap();
    let ws = load(&dir).unwrap();
    assert_eq!(ws.violations(), vec![]);
    for (file, name) in [
        (INTENT, "intent"),
        (CONSTRAINTS, "constraints"),
        (PLAN, "plan"),
        (PROGRESS, "progress"),
        (HANDOFF, "handoff"),
    ] {
        let instance = ws.root(file).unwrap().to_json();
        let errors: Vec<String> = schema(name)
            .iter_errors(&instance)
            .map(|e| e.to_string())
            .collect();
        assert_eq!(errors, Vec::<String>::new(), "{file}");
    }
}

#[test]
fn reconcile_finishes_a_checkpoint_interrupted_before_the_plan_was_replaced() {
    let (tmp, dir) = workspace();
    start_task(&dir, "t1", "start", at(10, 0)).unwrap();
    let plan_in_progress = std::fs::read(tmp.path().join(SMALL_DIR).join(PLAN)).unwrap();
    checkpoint(&dir, "t1", Outcome::Completed, &evidence(0), at(11, 0)).unwrap();
    // The crash: progress replaced, plan not.
    std::fs::write(tmp.path().join(SMALL_DIR).join(PLAN), &plan_in_progress).unwrap();
    assert_eq!(broken(&dir), vec![]);
    assert_eq!(load(&dir).unwrap().next(), Next::Task("t1".into()));
    assert_eq!(reconcile(&dir).unwrap(), ["t1"]);
    let ws = load(&dir).unwrap();
    assert_eq!(ws.task("t1").unwrap().status, Status::Completed);
    assert_eq!(ws.next(), Next::Task("t2".into()));
    assert_eq!(reconcile(&dir).unwrap(), Vec::<String>::new());
}
