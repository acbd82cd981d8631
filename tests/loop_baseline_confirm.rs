//! No green at t0 without confirmation (issue 19 item 7; docs/guards.md, "The baseline at t0"): a
//! check green on t0 is confirmed by `confirm_runs` reruns on t0 before the iteration-0 success and
//! before it is cached; a rerun that disagrees is a flake (`check_not_deterministic`, exit 14, as
//! at any iteration) and nothing is cached; only a confirmed green is cached, with its
//! confirmations, and an entry without them is never trusted as confirmed.
//!
//! Every flaky check reads its verdict from a FIFO the test feeds (`common::verdicts`).
mod common;
use common::verdicts::Verdicts;
use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A committed repository the check does not look at.
fn repo() -> tempfile::TempDir {
    let dir = workdir();
    write(dir.path(), "src/lib.txt", "x\n");
    commit_t0(dir.path());
    dir
}

fn run(dir: &Path, id: &str, check: &str, extra: &[&str]) -> (Ran, Vec<Value>) {
    let marker = path_str(&dir.join("agent-ran"));
    let agent = format!("touch {marker}");
    let mut args = vec![
        "run",
        "--json",
        "--run-id",
        id,
        "--exec",
        &agent,
        "--check",
        check,
        "--max-iterations",
        "1",
    ];
    args.extend_from_slice(extra);
    let r = loopexec(dir, &args);
    let ev = events(dir, id);
    (r, ev)
}

fn of_type<'a>(ev: &'a [Value], kind: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["type"] == kind).collect()
}

fn cache_entries(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir.join(".loopexec/check-baselines")) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => vec![],
    }
}

/// Exit 0 when the FIFO says `green`, 1 otherwise.
fn verdict_check(fifo: &str) -> String {
    format!("read -r v < {fifo}; echo \"verdict $v\"; [ \"$v\" = green ]")
}

/// The run halted `check_not_deterministic` at iteration 0 on its first confirmation rerun,
/// before any agent call, with nothing cached.
fn assert_flaky_t0_halted(dir: &Path, r: &Ran, ev: &[Value], shown: &str) {
    let v = r.json();
    assert_eq!(
        (r.code, v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (14, Some("check_not_deterministic"), Some(0)),
        "{v}\n{ev:#?}"
    );
    let detail = v["run"]["detail"].as_str().unwrap();
    assert!(detail.starts_with(&format!("the check passed on t0, but confirmation rerun 1 on the same tree was {shown}: a flake, not success")), "{detail}");
    let baseline = of_type(ev, "check_baseline");
    assert_eq!(
        (
            baseline[0]["check"]["check_exit"].as_i64(),
            baseline[0]["cache_hit"].as_bool()
        ),
        (Some(0), Some(false)),
        "{baseline:?}"
    );
    let c = of_type(ev, "check_confirmation");
    assert_eq!(c.len(), 1, "{c:#?}");
    assert_eq!(
        (
            c[0]["iteration"].as_u64(),
            c[0]["confirmation"].as_u64(),
            c[0]["agrees"].as_bool()
        ),
        (Some(0), Some(1), Some(false)),
        "{c:?}"
    );
    assert!(
        of_type(ev, "iteration_start").is_empty(),
        "the agent was never called: {ev:#?}"
    );
    assert!(!dir.join("agent-ran").exists());
    assert!(
        cache_entries(dir).is_empty(),
        "a green that did not confirm is never cached"
    );
}

#[test]
fn a_check_green_on_t0_and_red_on_its_confirmation_rerun_halts_check_not_deterministic_at_iteration_0_and_is_not_cached(
) {
    let dir = repo();
    let verdicts = Verdicts::new(&["green", "red"]);
    let policy = verdicts.check_policy();
    let check = verdict_check(&verdicts.fifo());
    let (r, ev) = run(dir.path(), "flaky", &check, &["--check-policy", &policy]);
    assert_flaky_t0_halted(dir.path(), &r, &ev, "red");
    assert_eq!(of_type(&ev, "check_confirmation")[0]["check_exit"], 1);
    // The same check on the same commit again: no entry replays the lucky green (t0 is red now).
    let (r, ev) = run(dir.path(), "again", &check, &["--check-policy", &policy]);
    let b = of_type(&ev, "check_baseline")[0];
    assert_eq!(
        (b["cache_hit"].as_bool(), b["check"]["check_exit"].as_i64()),
        (Some(false), Some(1)),
        "{b}"
    );
    assert_ne!(r.code, 10, "{r:?}");
}

#[test]
fn a_check_green_on_t0_whose_confirmation_rerun_exits_0_on_a_failing_report_halts_check_not_deterministic(
) {
    let dir = repo();
    let verdicts = Verdicts::new(&["green", "red"]);
    let policy = verdicts.check_policy();
    // Exit 0 both times; the rerun's own report shows a failure (its evidence disagrees).
    let check = format!(
        "read -r v < {}; if [ \"$v\" = green ]; then f=''; else f='<failure/>'; fi; printf '<testsuite tests=\"1\"><testcase classname=\"t\" name=\"a\">%s</testcase></testsuite>' \"$f\" > junit.xml",
        verdicts.fifo()
    );
    let (r, ev) = run(
        dir.path(),
        "forged",
        &check,
        &["--report", "junit.xml", "--check-policy", &policy],
    );
    assert_flaky_t0_halted(dir.path(), &r, &ev, "a zero exit whose evidence disagrees");
}

/// Green on every run (printing, so that each run leaves an output artifact).
const STEADY: &str = "echo steady";

#[test]
fn a_steady_green_on_t0_is_confirmed_then_success_at_iteration_0_and_cached_with_its_confirmation()
{
    let dir = repo();
    let (r, ev) = run(dir.path(), "first", STEADY, &[]);
    let v = r.json();
    assert_eq!(
        (r.code, v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (10, Some("success_condition_met"), Some(0)),
        "{v}"
    );
    assert_eq!(
        v["run"]["detail"],
        "the check already passes on t0 (the baseline run before any agent call, confirmed by 1 agreeing rerun(s)): halted at iteration 0, the agent was not called"
    );
    let c = of_type(&ev, "check_confirmation");
    assert_eq!(c.len(), 1, "{c:#?}");
    assert_eq!(
        (c[0]["iteration"].as_u64(), c[0]["agrees"].as_bool()),
        (Some(0), Some(true))
    );
    assert_eq!(
        c[0]["stdout"]["artifact"], "artifacts/0000-confirm-1.stdout",
        "the rerun ran on t0: {c:?}"
    );
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let at = types.iter().position(|t| *t == "check_baseline").unwrap();
    assert_eq!(
        types[at..],
        ["check_baseline", "check_confirmation", "halt"],
        "{types:?}"
    );
    let entries = cache_entries(dir.path());
    assert_eq!(entries.len(), 1);
    let entry: Value = serde_json::from_slice(&std::fs::read(&entries[0]).unwrap()).unwrap();
    assert_eq!(
        (
            entry["format"].as_u64(),
            entry["confirmations"].as_array().map(Vec::len)
        ),
        (Some(4), Some(1)),
        "{entry}"
    );

    // A second run on the same commit: the cached green with its cached confirmation.
    let (r, ev) = run(dir.path(), "second", STEADY, &[]);
    let v = r.json();
    assert_eq!(r.code, 10, "{v}");
    assert_eq!(
        v["run"]["detail"],
        "the check already passes on t0 (its cached baseline, confirmed by 1 agreeing rerun(s)): halted at iteration 0, the agent was not called"
    );
    assert_eq!(of_type(&ev, "check_baseline")[0]["cache_hit"], true);
    let c = of_type(&ev, "check_confirmation");
    assert_eq!(
        (c.len(), &c[0]["stdout"]["artifact"]),
        (1, &Value::Null),
        "a cached confirmation names no artifact of this run: {c:?}"
    );
    let artifacts = run_dir(dir.path(), "second").join("artifacts");
    assert!(
        !artifacts.join("0000-check.stdout").exists()
            && !artifacts.join("0000-confirm-1.stdout").exists(),
        "the check did not run on t0 again"
    );
}

#[test]
fn a_cached_green_without_confirmations_is_not_trusted_as_confirmed_and_is_recomputed() {
    let dir = repo();
    assert_eq!(run(dir.path(), "first", STEADY, &[]).0.code, 10);
    let entries = cache_entries(dir.path());
    let mut entry: Value = serde_json::from_slice(&std::fs::read(&entries[0]).unwrap()).unwrap();
    let name = entries[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // An entry as an unconfirmed green would be: no confirmation, then no confirmations field.
    for (id, why) in [
        (
            "emptied",
            "a green confirmed by 0 agreeing rerun(s), not the 1 this run asks for",
        ),
        ("stripped", "malformed: missing field `confirmations`"),
    ] {
        match id {
            "emptied" => entry["confirmations"] = json!([]),
            _ => {
                entry.as_object_mut().unwrap().remove("confirmations");
            }
        }
        std::fs::write(&entries[0], serde_json::to_vec(&entry).unwrap()).unwrap();
        let (r, ev) = run(dir.path(), id, STEADY, &[]);
        assert_eq!(r.code, 10, "{r:?}");
        let b = of_type(&ev, "check_baseline")[0];
        assert_eq!(b["cache_hit"], false, "{b}");
        let note = b["cache_note"].as_str().unwrap();
        assert!(
            note.starts_with(&format!(
                "cache entry check-baselines/{name} ignored ({why}"
            )),
            "{note}"
        );
        assert!(
            run_dir(dir.path(), id)
                .join("artifacts/0000-confirm-1.stdout")
                .exists(),
            "the green was confirmed again"
        );
        let rewritten: Value =
            serde_json::from_slice(&std::fs::read(&entries[0]).unwrap()).unwrap();
        assert_eq!(
            rewritten["confirmations"].as_array().map(Vec::len),
            Some(1),
            "the confirmed green replaced the entry"
        );
    }
}

#[test]
fn a_flaky_green_on_t0_in_place_is_not_success_at_iteration_0() {
    let dir = workdir();
    let verdicts = Verdicts::new(&["green", "red"]);
    let (r, ev) = run(
        dir.path(),
        "inplace",
        &verdict_check(&verdicts.fifo()),
        &["--isolation", "none"],
    );
    let v = r.json();
    assert_eq!(
        (r.code, v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (14, Some("check_not_deterministic"), Some(0)),
        "{v}\n{ev:#?}"
    );
    assert!(of_type(&ev, "iteration_start").is_empty());
}

/// An operator's SIGINT during the green t0's confirmation rerun records no confirmation and
/// leaves the run resumable; the resumed run makes the rerun on t0 before deciding, and its red
/// halts `check_not_deterministic` at iteration 0.
#[test]
fn a_run_interrupted_during_the_t0_confirmation_reruns_it_on_resume_before_deciding() {
    let dir = repo();
    let verdicts = Verdicts::new(&["green", "red"]);
    let policy = verdicts.check_policy();
    // The first run is green; a later one waits (long enough to be interrupted), then fails.
    let check = format!(
        "read -r v < {}; if [ \"$v\" = green ]; then exit 0; fi; sleep 8; exit 1",
        verdicts.fifo()
    );
    let args = [
        "run",
        "--json",
        "--run-id",
        "i",
        "--exec",
        "true",
        "--check",
        &check,
        "--max-iterations",
        "1",
        "--check-policy",
        &policy,
    ];
    let types = interrupted_after(dir.path(), "i", &args, "check_baseline");
    let at = types.iter().position(|t| t == "check_baseline").unwrap();
    assert_eq!(
        types[at..],
        ["check_baseline", "run_interrupted"],
        "{types:?}"
    );
    let r = loopexec(dir.path(), &["run", "--json", "--resume", "i"]);
    let v = r.json();
    assert_eq!(
        (r.code, v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (14, Some("check_not_deterministic"), Some(0)),
        "{v}"
    );
    let types = event_types(dir.path(), "i");
    let at = types.iter().position(|t| t == "run_resumed").unwrap();
    // (A resumed run records the syntax-tree guards' baseline again.)
    let after: Vec<&str> = types[at..]
        .iter()
        .map(String::as_str)
        .filter(|t| *t != "guard_baseline")
        .collect();
    assert_eq!(
        after,
        ["run_resumed", "check_confirmation", "halt"],
        "{types:?}"
    );
    let c = events(dir.path(), "i")
        .into_iter()
        .find(|e| e["type"] == "check_confirmation")
        .unwrap();
    assert_eq!(
        (
            c["iteration"].as_u64(),
            c["confirmation"].as_u64(),
            c["agrees"].as_bool(),
            c["check_exit"].as_i64()
        ),
        (Some(0), Some(1), Some(false), Some(1)),
        "{c}"
    );
    assert!(cache_entries(dir.path()).is_empty());
}

// ---- A success on met targets (a red check whose failures all precede the run) ----

/// The check's report from the FIFO's verdict: `t::a` fails when it names `a`, `t::b` when it
/// names `b` (`ok`: neither, exit 0); one line read with `read -r`.
fn targets_check(fifo: &str) -> String {
    format!(
        "read -r v < {fifo}; a=''; b=''; n=0; case $v in *a*) a='<failure/>'; n=$((n+1));; esac; case $v in *b*) b='<failure/>'; n=$((n+1));; esac; \
         printf '<testsuite tests=\"2\" failures=\"%s\"><testcase classname=\"t\" name=\"a\">%s</testcase><testcase classname=\"t\" name=\"b\">%s</testcase></testsuite>' \"$n\" \"$a\" \"$b\" > junit.xml; [ \"$n\" = 0 ]"
    )
}

/// The target `t::a`; `t::b` failing at t0 is a pre-existing failure.
const TARGET_A: [&str; 4] = ["--report", "junit.xml", "--target", "t::a"];

#[test]
fn a_red_t0_whose_targets_all_pass_and_whose_confirmation_rerun_disagrees_halts_check_not_deterministic_at_iteration_0_and_is_not_cached(
) {
    // The rerun fails the target too (red with another failing set), or passes everything (green).
    for (rerun, shown) in [("ab", "red"), ("ok", "green with another failing set")] {
        let dir = repo();
        let verdicts = Verdicts::new(&["b", rerun]);
        let policy = verdicts.check_policy();
        let check = targets_check(&verdicts.fifo());
        let mut extra = TARGET_A.to_vec();
        extra.extend(["--check-policy", &policy]);
        let (r, ev) = run(dir.path(), "lucky", &check, &extra);
        let v = r.json();
        assert_eq!(
            (r.code, v["halt_reason"].as_str(), v["iteration"].as_u64()),
            (14, Some("check_not_deterministic"), Some(0)),
            "{v}\n{ev:#?}"
        );
        let detail = v["run"]["detail"].as_str().unwrap();
        assert!(detail.starts_with(&format!("the check passed on t0, but confirmation rerun 1 on the same tree was {shown}: a flake, not success")), "{detail}");
        assert_eq!(
            of_type(&ev, "check_baseline")[0]["check"]["check_exit"],
            1,
            "t0 was red"
        );
        let c = of_type(&ev, "check_confirmation");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert_eq!(
            (
                c[0]["iteration"].as_u64(),
                c[0]["confirmation"].as_u64(),
                c[0]["agrees"].as_bool()
            ),
            (Some(0), Some(1), Some(false)),
            "{c:?}"
        );
        assert!(
            of_type(&ev, "iteration_start").is_empty(),
            "the agent was never called: {ev:#?}"
        );
        assert!(
            cache_entries(dir.path()).is_empty(),
            "a lucky red whose targets met did not confirm and is never cached"
        );
    }
}

#[test]
fn a_steady_red_t0_whose_targets_all_pass_is_confirmed_then_cached_with_its_confirmation_and_an_entry_without_it_is_recomputed(
) {
    let dir = repo();
    let verdicts = Verdicts::new(&["b"]);
    let policy = verdicts.check_policy();
    let check = targets_check(&verdicts.fifo());
    let mut extra = TARGET_A.to_vec();
    extra.extend(["--check-policy", &policy]);
    let met = "every target already passes on t0 (the check fails only on 1 pre-existing failure(s)): halted at iteration 0, the agent was not called";
    let (r, ev) = run(dir.path(), "first", &check, &extra);
    let v = r.json();
    assert_eq!(
        (r.code, v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (10, Some("success_condition_met"), Some(0)),
        "{v}\n{ev:#?}"
    );
    assert_eq!(
        v["run"]["detail"],
        format!(
            "{met}; t0 is the baseline run before any agent call, confirmed by 1 agreeing rerun(s)"
        )
    );
    let c = of_type(&ev, "check_confirmation");
    assert_eq!(c.len(), 1, "{c:#?}");
    assert_eq!(
        (
            c[0]["iteration"].as_u64(),
            c[0]["agrees"].as_bool(),
            c[0]["check_exit"].as_i64()
        ),
        (Some(0), Some(true), Some(1)),
        "{c:?}"
    );
    let entries = cache_entries(dir.path());
    assert_eq!(entries.len(), 1);
    let mut entry: Value = serde_json::from_slice(&std::fs::read(&entries[0]).unwrap()).unwrap();
    assert_eq!(
        entry["confirmations"].as_array().map(Vec::len),
        Some(1),
        "{entry}"
    );

    let (r, ev) = run(dir.path(), "second", &check, &extra);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        r.json()["run"]["detail"],
        format!("{met}; t0 is its cached baseline, confirmed by 1 agreeing rerun(s)")
    );
    assert_eq!(of_type(&ev, "check_baseline")[0]["cache_hit"], true);

    // An entry holding the red without its confirmation is not trusted for the success.
    entry["confirmations"] = json!([]);
    std::fs::write(&entries[0], serde_json::to_vec(&entry).unwrap()).unwrap();
    let name = entries[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let (r, ev) = run(dir.path(), "emptied", &check, &extra);
    assert_eq!(r.code, 10, "{r:?}");
    let b = of_type(&ev, "check_baseline")[0];
    assert_eq!(b["cache_hit"], false, "{b}");
    let note = b["cache_note"].as_str().unwrap();
    assert!(
        note.starts_with(&format!("cache entry check-baselines/{name} ignored (a red whose targets all pass confirmed by 0 agreeing rerun(s), not the 1 this run asks for)")),
        "{note}"
    );
    assert_eq!(
        of_type(&ev, "check_confirmation").len(),
        1,
        "the success was confirmed again"
    );
}

#[test]
fn targets_met_at_an_iteration_whose_confirmation_rerun_disagrees_halt_check_not_deterministic_not_success(
) {
    for (rerun, shown) in [("ab", "red"), ("ok", "green with another failing set")] {
        let dir = repo();
        // t0: the target fails; iteration 1: only the pre-existing failure; its rerun: `rerun`.
        let verdicts = Verdicts::new(&["ab", "b", rerun]);
        let policy = verdicts.check_policy();
        let check = targets_check(&verdicts.fifo());
        let mut args = vec![
            "run",
            "--json",
            "--run-id",
            "n",
            "--exec",
            "echo fix > fix.txt",
            "--check",
            &check,
            "--max-iterations",
            "2",
            "--check-policy",
            &policy,
        ];
        args.extend_from_slice(&TARGET_A);
        let r = loopexec(dir.path(), &args);
        let ev = events(dir.path(), "n");
        let v = r.json();
        assert_eq!(
            (r.code, v["halt_reason"].as_str(), v["iteration"].as_u64()),
            (14, Some("check_not_deterministic"), Some(1)),
            "{v}\n{ev:#?}"
        );
        let detail = v["run"]["detail"].as_str().unwrap();
        assert!(detail.starts_with(&format!("the check passed at iteration 1, but confirmation rerun 1 on the same tree was {shown}: a flake, not success")), "{detail}");
        let p = of_type(&ev, "progress");
        assert_eq!(
            p[0]["targets_met"], true,
            "iteration 1 met its targets: {p:?}"
        );
        let c = of_type(&ev, "check_confirmation");
        assert_eq!(c.len(), 1, "{c:#?}");
        assert_eq!(
            (
                c[0]["iteration"].as_u64(),
                c[0]["confirmation"].as_u64(),
                c[0]["agrees"].as_bool()
            ),
            (Some(1), Some(1), Some(false)),
            "{c:?}"
        );
    }
}
