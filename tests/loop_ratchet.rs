//! The ratchet's switch and the operator's hand on it (docs/progress.md, "The ratchet"):
//! `[progress] ratchet = false` keeps every judged iteration (nothing is reverted), so the rules
//! see the whole trajectory and `unsatisfiable_constraints` can fire; with the ratchet on, the
//! same agent is held at the frontier.
//!
//! The project is the four-function calc package (tests/common/calc.rs), all wrong at t0; the
//! scripted agent fixes `add` and `sub` in turn, each fix breaking the other, twice, while `mul`
//! and `div` vary so that no failing set comes back (no oscillation).
mod common;
use common::calc::{calc_project, plan_steps as agent, test_id, PYTEST};
use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// The functions right at iterations 1..=5: add; sub (add broken); add, mul (sub broken);
/// sub, mul (add broken); add, mul, div (sub broken).
const SEESAW: [&[&str]; 5] = [&["add"], &["sub"], &["add", "mul"], &["sub", "mul"], &["add", "mul", "div"]];

/// `[progress]` for these runs: same_test_regressed would fire at the second regression of one
/// test (iteration 4) before the second cycle completes, so it waits for a third.
fn write_loop_toml(dir: &Path, ratchet: bool) {
    std::fs::write(dir.join("loop.toml"), format!("[progress]\nratchet = {ratchet}\nregressed_n = 3\n")).unwrap();
}

fn run_seesaw(dir: &Path) -> Ran {
    let exec = agent(&SEESAW);
    loopexec(dir, &["run", "--json", "--run-id", "r", "--exec", &exec, "--check", PYTEST, "--report", "out/junit.xml", "--max-iterations", "5"])
}

fn of_type(dir: &Path, kind: &str) -> Vec<Value> {
    events(dir, "r").into_iter().filter(|e| e["type"] == kind).collect()
}

#[test]
fn with_the_ratchet_off_fixing_a_that_breaks_b_and_back_twice_halts_unsatisfiable_constraints() {
    let repo = calc_project();
    write_loop_toml(repo.path(), false);
    let r = run_seesaw(repo.path());
    assert_eq!((r.code, r.json()["halt_reason"].as_str(), r.json()["iteration"].as_u64()), (17, Some("unsatisfiable_constraints"), Some(5)), "{r:?}");
    let progress = of_type(repo.path(), "progress");
    assert_eq!(progress.iter().map(|p| p["accepted"].as_bool()).collect::<Vec<_>>(), vec![Some(true); 5]);
    assert!(progress.iter().all(|p| p.get("reverted_to_tree").is_none() && p.get("rejection").is_none()), "{progress:?}");
    assert_eq!(
        progress[4]["evidence"],
        json!({"rule": "unsatisfiable_constraints", "a": test_id("add"), "b": test_id("sub"), "a_fixed_broke_b": [3, 5], "b_fixed_broke_a": [2, 4]})
    );
    // Nothing was reverted: the delivered tree is the last iteration's.
    let last_tree = of_type(repo.path(), "snapshot")[4]["tree_id"].clone();
    assert_eq!(events(repo.path(), "r").pop().unwrap()["delivery"]["tree"], last_tree);
    let run_start = &events(repo.path(), "r")[0];
    assert_eq!(run_start["config"]["progress"]["ratchet"], false);
}

#[test]
fn with_the_ratchet_on_the_same_agent_is_held_at_the_frontier_and_reaches_the_cap() {
    let repo = calc_project();
    write_loop_toml(repo.path(), true);
    let r = run_seesaw(repo.path());
    assert_eq!((r.code, r.json()["halt_reason"].as_str()), (12, Some("max_iterations_reached")), "{r:?}");
    let progress = of_type(repo.path(), "progress");
    assert_eq!(
        progress.iter().map(|p| p["accepted"].as_bool()).collect::<Vec<_>>(),
        vec![Some(true), Some(false), Some(true), Some(false), Some(true)]
    );
    assert_eq!(progress[1]["rejection"], json!({"kind": "lost_tests", "lost": [test_id("add")]}));
    assert_eq!(progress[3]["rejection"], json!({"kind": "lost_tests", "lost": [test_id("add")]}));
    assert!(progress.iter().all(|p| p.get("halt_reason").is_none()), "{progress:?}");
}
