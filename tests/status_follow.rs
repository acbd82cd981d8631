//! `loopexec status --follow` (issue 23 item 3): a running loop tailed from another terminal
//! through its receipt shows each iteration as it happens and ends at the halt; `--json` streams
//! one JSON object per event, then the status object.
mod common;
use common::*;
use std::time::Duration;

/// A run of three one-second iterations that never pass, started in the background.
fn slow_run(dir: &std::path::Path, id: &str) -> std::process::Child {
    let mut c = command();
    c.current_dir(dir)
        .args([
            "run",
            "--json",
            "--isolation",
            "none",
            "--no-baseline",
            "--run-id",
            id,
            "--exec",
            "sleep 1",
            "--check",
            "false",
            "--max-iterations",
            "3",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let child = c.spawn().expect("spawn loopexec run");
    wait_for_file(
        &dir.join(".loopexec/runs").join(id).join("state.json"),
        Duration::from_secs(20),
    );
    child
}

#[test]
fn follow_shows_each_iteration_as_it_happens_and_ends_at_the_halt() {
    let dir = workdir();
    let mut run = slow_run(dir.path(), "f1");
    let followed = loopexec(dir.path(), &["status", "--follow", "f1"]);
    let run_status = run.wait().unwrap();
    assert_eq!(run_status.code(), Some(12));
    assert_eq!(followed.code, 0, "{followed:?}");
    let agent_lines: Vec<&str> = followed
        .stdout
        .lines()
        .filter(|l| l.contains(" agent    exit 0"))
        .collect();
    assert_eq!(agent_lines.len(), 3, "{}", followed.stdout);
    assert!(
        agent_lines[0].starts_with("#1 ") && agent_lines[2].starts_with("#3 "),
        "{}",
        followed.stdout
    );
    let halt = followed
        .stdout
        .lines()
        .position(|l| l.starts_with("halt     max_iterations_reached (exit 12): "))
        .expect("the halt line");
    let last_check = followed
        .stdout
        .lines()
        .collect::<Vec<_>>()
        .iter()
        .rposition(|l| l.starts_with("#3   check    exit 1"))
        .expect("the third check");
    assert!(last_check < halt, "{}", followed.stdout);
    assert!(
        followed.stdout.contains("state") && followed.stdout.contains("halted"),
        "{}",
        followed.stdout
    );
}

#[test]
fn follow_json_streams_one_object_per_event_then_the_status() {
    let dir = workdir();
    let mut run = slow_run(dir.path(), "f2");
    let followed = loopexec(dir.path(), &["status", "--follow", "--json", "f2"]);
    assert_eq!(run.wait().unwrap().code(), Some(12));
    assert_eq!(followed.code, 0, "{followed:?}");
    let objects: Vec<serde_json::Value> = followed
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line one JSON object"))
        .collect();
    let (last, streamed) = objects.split_last().unwrap();
    assert_eq!(
        (last["command"].as_str(), last["state"].as_str()),
        (Some("status"), Some("halted"))
    );
    let types: Vec<&str> = streamed
        .iter()
        .map(|o| o["follow"]["event"]["type"].as_str().unwrap())
        .collect();
    let recorded = event_types(dir.path(), "f2");
    // Every event of the receipt, in order (run keys included in the stream).
    assert_eq!(
        types
            .iter()
            .filter(|t| **t != "run_key")
            .copied()
            .collect::<Vec<_>>(),
        recorded.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(types.last(), Some(&"halt"));
    assert!(streamed.iter().all(|o| o["follow"]["run_id"] == "f2"));
}
