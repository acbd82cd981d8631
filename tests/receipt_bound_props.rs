//! The receipt's line bound as a property over every event type (issue 19 item 1): whatever the
//! size of an event's lists and strings, the line `receipt::bounded::bound` lets through, and each
//! `externalised` event it adds, is at most `MAX_LINE_BYTES` once appended to a receipt, still
//! reads as its type, and a resumed history (`bounded::history_of`) gets the event back whole
//! from the artifacts, re-hashed.
//!
//! Every variant of `Event` is covered structurally: `index` matches every variant without a
//! wildcard (a new variant does not compile until it is given an index), and
//! `every_event_type_has_a_template` fails until `VARIANTS` counts it and `template` builds it.

use loopexec::receipt::bounded::{self, MAX_LINE_BYTES};
use loopexec::receipt::chain::ReceiptLog;
use loopexec::receipt::events::Event;
use loopexec::safefs::SafeDir;
use proptest::prelude::*;
use serde_json::{json, Value};

/// How many variants `Event` has (`index` gives each one of 0..VARIANTS).
const VARIANTS: usize = 39;

/// The place of each variant; a new variant fails to compile here.
fn index(e: &Event) -> usize {
    match e {
        Event::RunStart(_) => 0,
        Event::RunKey(_) => 1,
        Event::Workspace(_) => 2,
        Event::IterationStart { .. } => 3,
        Event::ExecResult(_) => 4,
        Event::Snapshot(_) => 5,
        Event::CheckResult(_) => 6,
        Event::IterationInterrupted { .. } => 7,
        Event::RunResumed(_) => 8,
        Event::RunInterrupted { .. } => 9,
        Event::CredentialMinted { .. } => 10,
        Event::CredentialRevoked(_) => 11,
        Event::Guard(_) => 12,
        Event::GuardBaseline(_) => 13,
        Event::Adequacy(_) => 14,
        Event::GuardSentinel(_) => 15,
        Event::CheckConfirmation(_) => 16,
        Event::Progress(_) => 17,
        Event::RatchetAccept(_) => 18,
        Event::Reference(_) => 19,
        Event::CheckBaseline(_) => 20,
        Event::Targets(_) => 21,
        Event::Judge(_) => 22,
        Event::TestChangeAllowed(_) => 23,
        Event::HoldoutCheck(_) => 24,
        Event::Halt(_) => 25,
        Event::Externalised(_) => 26,
        Event::ProbeStart(_) => 27,
        Event::ProbeRun(_) => 28,
        Event::ProbeVerdict(_) => 29,
        Event::Preconditions(_) => 30,
        Event::Unknown => 31,
        Event::SealResumed(_) => 32,
        Event::Usage(_) => 33,
        Event::Comprehension(_) => 34,
        Event::SelfTest(_) => 35,
        Event::TaskPlan(_) => 36,
        Event::TaskStarted(_) => 37,
        Event::TaskCheckpoint(_) => 38,
    }
}

fn stream(s: &str) -> Value {
    json!({"bytes": 1, "sha256": "0".repeat(64), "artifact": s, "truncated": false})
}

/// A check result with `n` of every list and `s` in every free string.
fn check(n: usize, s: &str) -> Value {
    let ids: Vec<String> = (0..n).map(|i| format!("{s}{i}")).collect();
    let report = json!({"pattern": s, "path": s, "format": s, "counts": [1, 1, 0, 0], "error": s});
    let disagreement = json!({"kind": s, "subject": s, "detail": s});
    json!({
        "iteration": 3, "ending": {"kind": "exited", "code": 0}, "check_exit": 0, "duration_ms": 1,
        "stdout": stream(s), "stderr": stream(s),
        "failing_set": ids, "failing_count": n, "collected_set": ids, "collected_count": n,
        "skipped_set": ids, "skipped_count": n, "junit_error": s,
        "evidence": {"verdict": "disagree", "reports": vec![report; n], "sources": vec![s; n], "disagreements": vec![disagreement; n]},
        "coverage": {"report": s, "format": s, "covered_lines": 1, "coverable_lines": 2, "error": s},
        "failure_digests": vec![json!({"test": s, "sha256": "0".repeat(64)}); n],
        "excerpts_artifact": {"path": s, "bytes": 1, "sha256": s},
        "score": {"source": s, "value": 1.0, "error": s},
        "output_sight": {"runners": vec![s; n], "cargo_stopped_at": s, "cargo_ran": vec![s; n]},
    })
}

fn finding(s: &str) -> Value {
    json!({"path": s, "what": s})
}

/// The event of variant `i` with `n` items in every list and `s` in every free string.
fn template(i: usize, n: usize, s: &str) -> Value {
    let list = |v: Value| vec![v; n];
    let strings = || vec![s.to_string(); n];
    let halt = "max_iterations_reached";
    let body = match i {
        0 => {
            json!({"type": "run_start", "run_id": s, "mode": s, "isolation": s, "zone": s, "loopexec_version": s, "pid": 1, "cgroup_scope": s, "config": {"check": s, "protected": strings()}, "schema": 1})
        }
        1 => json!({"type": "run_key", "public_key": s, "operator_key": s, "endorsement": s}),
        2 => {
            json!({"type": "workspace", "mode": s, "repo": s, "baseline_key": s, "head_commit": s, "tree_id": s, "target": s, "protected": strings(), "limits": {"x": strings()}})
        }
        3 => json!({"type": "iteration_start", "iteration": 1}),
        4 => {
            json!({"type": "exec_result", "iteration": 1, "ending": {"kind": "failed_to_start", "reason": s}, "exit_code": null, "duration_ms": 1, "stdout": stream(s), "stderr": stream(s), "egress": {"totals": {"hosts": strings()}, "audit": s, "audit_sha256": s}})
        }
        5 => {
            json!({"type": "snapshot", "iteration": 1, "tree_id": s, "changed_paths": n, "protected_changes": list(json!({"path": s, "change": s})), "duration_ms": 1, "awareness": list(finding(s)), "left_out": {"count": n, "named": strings(), "sha256": s}})
        }
        6 => {
            let mut c = check(n, s);
            c["type"] = json!("check_result");
            c
        }
        7 => json!({"type": "iteration_interrupted", "iteration": 1, "cause": s}),
        8 => {
            json!({"type": "run_resumed", "run_id": s, "previous_state": s, "last_iteration": 1, "next_iteration": 2, "pid": 1, "cgroup_scope": {"s": strings()}})
        }
        9 => json!({"type": "run_interrupted", "signal": s, "iteration": 1}),
        10 => json!({"type": "credential_minted", "env": s, "duration_ms": 1}),
        11 => {
            json!({"type": "credential_revoked", "cause": s, "duration_ms": 1, "ok": false, "error": s})
        }
        12 => {
            json!({"type": "guard", "iteration": 1, "guard": s, "stage": s, "halt_reason": halt, "detail": s, "findings": list(finding(s))})
        }
        13 => {
            json!({"type": "guard_baseline", "assertions": 1, "surface_sha256": s, "surface": list(json!({"path": s})), "not_analysed": strings(), "python_module_names": 1, "disabled_rules": list(json!({"rule": s}))})
        }
        14 => {
            json!({"type": "adequacy", "iteration": 1, "tier": s, "seed": 1, "generated": 1, "sampled": 1, "killed": 1, "survived": 0, "not_run": 0, "score": 1.0, "verdict": s,
            "mutants": list(json!({"path": s, "line": 1, "operator": "comparison_flipped", "change": s, "outcome": "killed", "check_exit": 1, "duration_ms": 1, "detail": s, "stratum": "change"})),
            "external_exit": 0, "coverage": {"report": s, "changed_lines": 1, "uncovered": list(json!({"path": s, "line": 1, "file_missing": false})), "uncovered_count": n, "error": s},
            "t0_failure_functions": strings(), "duration_ms": 1})
        }
        15 => {
            json!({"type": "guard_sentinel", "iteration": 1, "active": true, "inactive_reason": s,
            "surfaces": list(json!({"runner": s, "found_at": s, "file": s, "fail_nonce": s, "pass_nonce": s, "proof": s})),
            "unrecognised": list(json!({"surface": s, "reason": s})),
            "check": {"ending": {"kind": "exited", "code": 1}, "check_exit": 1, "duration_ms": 1, "stdout": stream(s), "stderr": stream(s), "failing_count": 1, "collected_count": 1},
            "holds": false, "broken": strings(), "not_started": 0, "duration_ms": 1})
        }
        16 => {
            let mut c = check(n, s);
            for (k, v) in [
                ("type", json!("check_confirmation")),
                ("confirmation", json!(1)),
                ("agrees", json!(true)),
                ("stability_lower_bound", json!(0.5)),
                ("confidence", json!(0.95)),
                ("stability_target", json!(0.99)),
            ] {
                c[k] = v;
            }
            c
        }
        17 => {
            json!({"type": "progress", "iteration": 1, "failing_targets": 1, "accepted": false, "rejection": {"kind": "lost_tests", "lost": strings()}, "frontier": 0, "reverted_to_tree": s, "halt_reason": halt, "detail": s, "evidence": {"rule": s, "ids": strings()}, "targets_met": true})
        }
        18 => {
            json!({"type": "ratchet_accept", "iteration": 1, "tree_id": s, "operator_key": s, "signature": s})
        }
        19 => {
            json!({"type": "reference", "given": true, "rev": s, "patch": s, "patch_sha256": s, "tree_id": s, "passed": false, "check_exit": 1, "failing_set": strings(), "detail": s})
        }
        20 => {
            json!({"type": "check_baseline", "check": check(n, s), "tree_id": s, "cache_key": s, "cache_hit": false, "cache_note": s, "sets_unmeasured": s,
            "inactive_guards": list(json!({"guard": "test_set", "blindness": "inactive", "cause": "no_test_ids", "detail": s, "enable": s}))})
        }
        21 => {
            json!({"type": "targets", "patterns": strings(), "targets": strings(), "targets_count": n, "targets_sha256": s, "preexisting_failures": strings(), "preexisting_failures_count": n, "preexisting_failures_sha256": s})
        }
        22 => {
            json!({"type": "judge", "iteration": 1, "outcome": "failed", "reward_hacking": false, "reason": s, "ending": {"kind": "exited", "code": 1}, "duration_ms": 1, "packet": s, "packet_bytes": 1, "packet_sha256": s, "stdout": stream(s), "stderr": stream(s)})
        }
        23 => {
            json!({"type": "test_change_allowed", "iteration": 1, "guard": s, "stage": s, "uses": list(json!({"path": s, "id": s, "reason": s, "what": s}))})
        }
        24 => {
            json!({"type": "holdout_check", "dir": s, "dir_sha256": s, "dir_entries": n, "dir_changed": false, "verdict": s, "check": check(n, s)})
        }
        25 => {
            json!({"type": "halt", "halt_reason": halt, "exit_code": 1, "iteration": 1, "detail": s, "delivery": {"branch": s, "reason": s, "error": s}})
        }
        26 => {
            json!({"type": "externalised", "of": s, "iteration": 1, "lists": {"l": {"count": n, "sha256": s, "sample": strings()}}, "artifact": {"path": s, "bytes": 1, "sha256": s}})
        }
        27 => {
            json!({"type": "probe_start", "probe_id": s, "command": s, "check": s, "isolation": s, "check_policy": s, "check_timeout_ms": 1, "reports": strings(), "seed": 1, "dimensions": vec!["order"; n], "jobs": 1, "target": 0.9, "confidence": 0.9, "runs_required": 1, "runs": 1, "loopexec_version": s, "pid": 1})
        }
        28 => {
            json!({"type": "probe_run", "run": 1, "dimension": "seed", "class": "fail", "failing_digest": s, "failing_count": 1, "exit_code": 1, "duration_ms": 1, "plan": {"argv": strings()}})
        }
        29 => {
            json!({"type": "probe_verdict", "verdict": s, "runs": 1, "disagreeing": 0, "modal_class": "pass", "modal_failing_digest": s, "flake_rate_bound": 0.1, "broken_by": list(json!({"dimension": "clock", "runs": vec![1; n]})), "gates": list(json!({"gate": s})), "halt_reason": halt, "exit_code": 1})
        }
        30 => {
            json!({"type": "preconditions", "probe_receipt": s, "probe_id": s, "envelope_sha256": s, "gates": list(json!({"gate": s})), "runs": 1, "flake_rate_bound": 0.1, "halt_reason": halt, "detail": s})
        }
        // An event type this version does not know is never appended by it (it decodes without a body).
        31 => json!({"type": "a_later_type", "anything": strings()}),
        32 => {
            json!({"type": "seal_resumed", "run_id": s, "previous_state": s, "halt_reason": halt, "pid": 1})
        }
        33 => {
            json!({"type": "usage", "iteration": 1, "stage": "agent", "usd_micros": 1, "basis": "priced", "tokens": {"input": 1, "output": 1},
            "models": list(json!({"provider": s, "model": s, "tokens": {"input": 1}, "usd_micros": null})),
            "sources": list(json!({"name": s, "records": 1, "rejected": {"malformed": 1}})), "egress_bytes": 1, "cpu_ms": 1})
        }
        34 => {
            json!({"type": "comprehension", "outcome": s, "iteration": 1, "every": 1, "ledger_id": s, "unread_count": n, "unread": strings(),
            "acks": list(json!({"line": 1, "line_sha256": s, "reviewer": s, "cleared": strings(), "rejected": s})), "acks_sha256": s})
        }
        35 => {
            let operation =
                json!({"operation": s, "target": s, "expected": "fail", "errno": 1, "observed": s});
            // Two zones (agent, check), each with `n` operations: the lists that grow.
            let zone = |role: &str| json!({"role": role, "operations": vec![operation.clone(); n], "error": s});
            json!({"type": "self_test", "held": true, "zones": [zone("agent"), zone("check")]})
        }
        36 => {
            let task = json!({"id": s, "dependencies": strings(), "status": "pending"});
            json!({"type": "task_plan", "tasks": list(task), "replay_id": s, "small_sha256": s, "commit": s})
        }
        37 => json!({"type": "task_started", "task": s, "run_id": s, "base_commit": s}),
        38 => {
            json!({"type": "task_checkpoint", "task": s, "run_id": s, "outcome": "blocked", "run_halt": halt, "run_exit_code": 12, "run_receipt_sha256": s, "tree": s, "commit": s, "small_sha256": s})
        }
        _ => unreachable!("no template for variant {i}"),
    };
    body
}

fn event(i: usize, n: usize, s: &str) -> Event {
    let value = template(i, n, s);
    serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("template {i} ({}) does not read: {e}", value["type"]))
}

/// Append `e` through the bound to a fresh receipt; every line's length, and the history a
/// resumed run reads back.
fn appended(e: &Event) -> (Vec<usize>, Vec<Event>, tempfile::TempDir) {
    let (sizes, back, refused, tmp) = appended_or_refused(e);
    assert_eq!(refused, None, "the bound refused a {} event", e.kind());
    (sizes, back, tmp)
}

/// Like [`appended`]; a bound that refuses the event (one of `NEVER_TRIMMED` over the line
/// bound) gives its error and no line.
fn appended_or_refused(e: &Event) -> (Vec<usize>, Vec<Event>, Option<String>, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SafeDir::open(tmp.path()).unwrap();
    let mut log = ReceiptLog::create(&dir, "receipt.jsonl").unwrap();
    let b = match bounded::bound(e, &dir) {
        Ok(b) => b,
        Err(err) => return (vec![], vec![], Some(err.to_string()), tmp),
    };
    match b {
        None => {
            log.append_event(e).unwrap();
        }
        Some(b) => {
            log.append_event(&b.event).unwrap();
            for x in &b.after {
                log.append_event(x).unwrap();
            }
        }
    }
    let bytes = std::fs::read(tmp.path().join("receipt.jsonl")).unwrap();
    let sizes = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::len)
        .collect();
    let (_, lines) = ReceiptLog::open(&dir, "receipt.jsonl").unwrap();
    let mut recorded = loopexec::receipt::events::Recorded::decode_all(&lines).unwrap();
    // (The `externalised` template, appended alone, follows no event: rightly refused.)
    match bounded::rehydrate(&mut recorded, &dir) {
        Ok(notes) => assert!(
            notes.is_empty() && !matches!(e, Event::Externalised(_)),
            "{notes:?}"
        ),
        Err(why) => assert!(
            matches!(e, Event::Externalised(_))
                && why[0].ends_with("the externalised event at line 1 follows no event it bounds"),
            "{why:?}"
        ),
    }
    // The artifacts the bound wrote (the templates' own artifact names are made up).
    let written: Vec<Event> = recorded.iter().skip(1).map(|r| r.event.clone()).collect();
    let found = bounded::check_artifacts(&written, &dir);
    assert_eq!(
        (found.matched, &found.absent, &found.mismatched),
        (written.len(), &vec![], &vec![]),
        "{found:?}"
    );
    (
        sizes,
        recorded.into_iter().map(|r| r.event).collect(),
        None,
        tmp,
    )
}

/// The bound holds for `e`: every line at most `MAX_LINE_BYTES`, and the first event read back
/// (rehydrated) is `e` whole.
fn holds(e: &Event) {
    let (sizes, back, refused, _tmp) = appended_or_refused(e);
    if let Some(err) = refused {
        // An event a resume acts on as recorded is never trimmed: over the bound, its append fails
        // with this error, and nothing is written.
        assert!(
            bounded::NEVER_TRIMMED.contains(&e.kind()) && err.contains("is never trimmed"),
            "{err}"
        );
        return;
    }
    let largest = sizes.iter().copied().max().unwrap_or(0);
    assert!(
        largest <= MAX_LINE_BYTES,
        "a {} line of {largest} bytes (bound {MAX_LINE_BYTES})",
        e.kind()
    );
    assert_eq!(back[0].kind(), e.kind());
    if !matches!(e, Event::Unknown) {
        assert!(
            back[0] == *e,
            "the {} event read back from its artifacts is not the one appended",
            e.kind()
        );
    }
    assert!(back[1..]
        .iter()
        .all(|x| matches!(x, Event::Externalised(_))));
}

#[test]
fn every_event_type_has_a_template() {
    let kinds: std::collections::BTreeSet<usize> =
        (0..VARIANTS).map(|i| index(&event(i, 1, "x"))).collect();
    assert_eq!(kinds, (0..VARIANTS).collect());
}

#[test]
fn every_event_type_with_huge_lists_and_strings_makes_lines_within_the_bound() {
    // Many items, many long items, one huge string (sizes kept to tens of MB per event).
    for i in 0..VARIANTS {
        holds(&event(i, 3000, "\u{1}é/"));
        holds(&event(i, 60, &"\u{1}é/".repeat(1500)));
        holds(&event(i, 1, &"x".repeat(2 * MAX_LINE_BYTES)));
    }
}

#[test]
fn a_confirmation_of_two_hundred_thousand_and_one_ids_is_bounded_and_rehydrated() {
    let Event::CheckConfirmation(mut c) = event(16, 1, "tests::case_") else {
        unreachable!()
    };
    let ids: Vec<String> = (0..200_001)
        .map(|i| format!("tests::case_{i:06}"))
        .collect();
    (c.check.failing_set, c.check.collected_set) = (Some(ids.clone()), Some(ids));
    let e = Event::CheckConfirmation(c);
    let (sizes, back, _tmp) = appended(&e);
    assert_eq!(
        sizes.len(),
        2,
        "the confirmation and one externalised event"
    );
    assert!(sizes[0] < 64 * 1024 && sizes[1] < 64 * 1024, "{sizes:?}");
    let Event::CheckConfirmation(c) = &back[0] else {
        panic!("{:?}", back[0].kind())
    };
    assert_eq!(c.check.failing_set.as_ref().map(Vec::len), Some(200_001));
}

/// `n` items of strings of one unit (which JSON writes as 1 to 6 bytes) repeated, with at most
/// about 300,000 characters per list (the templates hold some twenty lists).
fn hostile_shape() -> impl Strategy<Value = (usize, String)> {
    (
        prop::sample::select(vec!["a", "\u{7}", "\"", "é", "\u{1F600}", "/"]),
        0usize..2500,
        0usize..300_000,
    )
        .prop_map(|(unit, n, chars)| (n, unit.repeat(chars / n.max(1))))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn no_event_line_exceeds_the_bound_however_large_its_lists_and_strings(i in 0..VARIANTS, (n, s) in hostile_shape()) {
        holds(&event(i, n, &s));
    }
}
