//! The failure signature with excerpts (docs/progress.md, "The no-convergence halts"):
//! `same_failure_repeated` compares the failing tests *and how they fail*, normalised. The same
//! test failing with another assertion message each time is not the same failure; failing the
//! same way is. The receipt carries what the signature needs (`check_result.failure_digests`),
//! so the judgement recomputed from the receipt alone is the one the live run recorded.
//!
//! The project is the four-function pytest package of the progress tests; the scripted agent
//! leaves `sub`, `mul` and `div` wrong and rewrites `add` wrongly in another way each iteration.
mod common;
use common::calc::{calc_project, PYTEST};
use common::*;
use loopexec::convergence::rules::Limits;
use loopexec::receipt::history::History;
use std::path::Path;

/// At iteration i, `add` returns `a + b + i` (its assertion message changes each time); the other
/// functions stay as t0 wrote them. `same`: `add` returns `a - b` every time instead.
fn agent(same: bool) -> String {
    let add = if same {
        "'    return a - b'".to_string()
    } else {
        "\"    return a + b + $LOOPEXEC_ITERATION\"".to_string()
    };
    format!(
        "printf '%s\\n' 'def add(a, b):' {add} 'def sub(a, b):' '    return a + b' 'def mul(a, b):' '    return a + b' 'def div(a, b):' '    return a * b' > src/calc/__init__.py"
    )
}

fn run(dir: &Path, same: bool) -> Ran {
    run_as(dir, "r", same)
}

fn run_as(dir: &Path, run_id: &str, same: bool) -> Ran {
    // No stall rule: the failing set never shrinks here, and only the signature is under test.
    std::fs::write(dir.join("loop.toml"), "[progress]\nno_progress_k = 0\n").unwrap();
    loopexec(
        dir,
        &[
            "run",
            "--json",
            "--run-id",
            run_id,
            "--exec",
            &agent(same),
            "--check",
            PYTEST,
            "--report",
            "out/junit.xml",
            "--max-iterations",
            "4",
        ],
    )
}

fn check_results(dir: &Path) -> Vec<serde_json::Value> {
    events(dir, "r")
        .into_iter()
        .filter(|e| e["type"] == "check_result")
        .collect()
}

#[test]
fn the_same_test_failing_with_another_assertion_message_each_time_is_not_the_same_failure() {
    let repo = calc_project();
    let r = run(repo.path(), false);
    assert_eq!(r.json()["halt_reason"], "max_iterations_reached", "{r:?}");
    let add_digest = |c: &serde_json::Value| {
        c["failure_digests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["test"] == "tests.test_calc::test_add")
            .unwrap()["sha256"]
            .clone()
    };
    let digests: Vec<_> = check_results(repo.path()).iter().map(add_digest).collect();
    assert_eq!(digests.len(), 4);
    assert!(digests.windows(2).all(|w| w[0] != w[1]), "{digests:?}");
}

#[test]
fn the_same_failure_each_time_halts_same_failure_repeated() {
    let repo = calc_project();
    let r = run(repo.path(), true);
    assert_eq!(
        (
            r.json()["halt_reason"].as_str(),
            r.json()["iteration"].as_u64()
        ),
        (Some("same_failure_repeated"), Some(3)),
        "{r:?}"
    );
}

#[test]
fn the_judgement_recomputed_from_the_receipt_alone_is_the_recorded_one() {
    let repo = calc_project();
    // One run id each: an unprivileged caller cannot remove a run directory whose layers hold the
    // zone's files.
    for (run_id, same) in [("differing", false), ("same", true)] {
        run_as(repo.path(), run_id, same);
        let lines: Vec<serde_json::Map<String, serde_json::Value>> =
            all_events(repo.path(), run_id)
                .into_iter()
                .map(|e| e.as_object().unwrap().clone())
                .collect();
        let history = History::of_lines(&lines).unwrap();
        let limits = Limits {
            no_progress_k: 0,
            ..Limits::default()
        };
        let recorded: Vec<_> = history
            .iterations
            .iter()
            .filter_map(|r| r.progress.clone())
            .collect();
        assert!(!recorded.is_empty());
        for p in recorded {
            let recomputed =
                loopexec::rules::progress::judge(&history, p.iteration, &limits, &[]).unwrap();
            assert_eq!(
                (recomputed.halt_reason, recomputed.evidence),
                (p.halt_reason, p.evidence),
                "same={same} iteration {}",
                p.iteration
            );
        }
    }
}
