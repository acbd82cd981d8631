//! The adequacy canary on the loop's final green iteration (issue 14 item 5), end to end on a
//! small pytest project: the agent implements `clamp`; a suite that exercises it kills the
//! mutants of the change and the run converges; a suite that only imports the module lets every
//! mutant survive and the run halts `check_inadequate` (exit 15), naming the survivors with file
//! and line in the receipt. With `mutate_cmd` the mutants come from an operator's mutator (a
//! Python script written for the test, printing `{file, line, description, diff}` entries), run
//! once in an exec zone on the green tree, into the same `adequacy` event (`tier` `external`); a
//! mutator that prints garbage halts `execution_failure`.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const CHECK: &str = "/usr/bin/python3 -m pytest -q -p no:cacheprovider";

/// The agent's change: `clamp` implemented (t0 returns `x` unchanged).
const AGENT: &str = "printf 'def clamp(x, lo, hi):\\n    if x < lo:\\n        return lo\\n    if x > hi:\\n        return hi\\n    return x\\n' > calc/core.py";

/// A pytest project whose `calc.clamp` is a stub (`t0_core`; `None`: not written yet, so even an
/// import fails at t0), with `tests` as its suite and `loop_toml` as its loop file.
fn project(t0_core: Option<&str>, tests: &str, loop_toml: &str) -> tempfile::TempDir {
    project_with(t0_core, tests, loop_toml, &[])
}

/// [`project`], with `extra` files (path, text) in t0 too.
fn project_with(
    t0_core: Option<&str>,
    tests: &str,
    loop_toml: &str,
    extra: &[(&str, &str)],
) -> tempfile::TempDir {
    let dir = workdir();
    for (path, text) in extra {
        write(dir.path(), path, text);
    }
    write(dir.path(), "pyproject.toml", "[project]\nname = \"calc\"\nversion = \"0.1.0\"\n\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n");
    write(
        dir.path(),
        "calc/__init__.py",
        "from calc.core import clamp\n",
    );
    if let Some(core) = t0_core {
        write(dir.path(), "calc/core.py", core);
    }
    write(dir.path(), "tests/test_core.py", tests);
    write(dir.path(), "loop.toml", loop_toml);
    commit_t0(dir.path());
    dir
}

const STUB: &str = "def clamp(x, lo, hi):\n    return x\n";
const ADEQUATE_SUITE: &str = "from calc import clamp\n\n\ndef test_clamp():\n    assert clamp(-1, 0, 10) == 0\n    assert clamp(11, 0, 10) == 10\n    assert clamp(5, 0, 10) == 5\n    assert clamp(0, 0, 10) == 0\n    assert clamp(10, 0, 10) == 10\n";
const IMPORT_ONLY_SUITE: &str =
    "import calc\n\n\ndef test_imports():\n    assert calc is not None\n";

fn run(repo: &Path, run_id: &str) -> (Ran, Vec<Value>) {
    let r = loopexec(
        repo,
        &[
            "run",
            "--json",
            "--run-id",
            run_id,
            "--exec",
            AGENT,
            "--check",
            CHECK,
            "--max-iterations",
            "2",
        ],
    );
    (r, events(repo, run_id))
}

fn adequacy(ev: &[Value]) -> &Value {
    ev.iter()
        .find(|e| e["type"] == "adequacy")
        .unwrap_or_else(|| panic!("no adequacy event in {ev:#?}"))
}

#[test]
fn a_suite_that_exercises_the_change_kills_its_mutants_and_the_run_converges() {
    let repo = project(
        Some(STUB),
        ADEQUATE_SUITE,
        "adequacy = \"final\"\nmutants = 20\n",
    );
    let (r, ev) = run(repo.path(), "adequate");
    assert_eq!(r.code, 10, "{r:?}");
    let a = adequacy(&ev);
    assert_eq!(a["verdict"], "adequate", "{a:#}");
    // Every mutant of the change: the early return, both conditions negated, both comparisons flipped.
    assert_eq!(
        (
            a["generated"].as_u64(),
            a["sampled"].as_u64(),
            a["killed"].as_u64()
        ),
        (Some(5), Some(5), Some(5)),
        "{a:#}"
    );
    assert_eq!(a["score"], 1.0);
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

#[test]
fn a_suite_that_only_imports_the_module_halts_check_inadequate_naming_the_survivors() {
    let repo = project(
        None,
        IMPORT_ONLY_SUITE,
        "adequacy = \"final\"\nmutants = 4\n",
    );
    let (r, ev) = run(repo.path(), "inadequate");
    assert_eq!(r.code, 15, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "check_inadequate", "{r:?}");
    let a = adequacy(&ev);
    assert_eq!(
        (
            a["verdict"].as_str(),
            a["killed"].as_u64(),
            a["survived"].as_u64()
        ),
        (Some("inadequate"), Some(0), Some(4)),
        "{a:#}"
    );
    for m in a["mutants"].as_array().unwrap() {
        assert_eq!(m["outcome"], "survived");
        assert_eq!(m["path"], "calc/core.py");
        assert!((2..=6).contains(&m["line"].as_u64().unwrap()), "{m:#}");
        assert!(m["change"].as_str().unwrap().contains("->"), "{m:#}");
    }
    let guard = ev
        .iter()
        .find(|e| e["type"] == "guard")
        .expect("guard event");
    assert_eq!(
        (guard["guard"].as_str(), guard["halt_reason"].as_str()),
        (Some("adequacy"), Some("check_inadequate"))
    );
    assert_eq!(guard["findings"].as_array().unwrap().len(), 4);
}

#[test]
fn the_mutant_runs_hold_t0s_tests_read_only_like_every_check() {
    // A check that fails whenever it can rewrite the test file (and writes it back): with the
    // test read-only in every run of the check, the mutants of an import-only suite survive.
    let repo = project_with(
        None,
        IMPORT_ONLY_SUITE,
        "adequacy = \"final\"\nmutants = 4\n",
        &[("probe.py", REWRITE_AND_RESTORE)],
    );
    let check = format!("/usr/bin/python3 probe.py tests/test_core.py && {CHECK}");
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "held",
            "--exec",
            AGENT,
            "--check",
            &check,
            "--max-iterations",
            "2",
        ],
    );
    let ev = events(repo.path(), "held");
    let a = adequacy(&ev);
    assert_eq!(
        (
            a["verdict"].as_str(),
            a["killed"].as_u64(),
            a["survived"].as_u64()
        ),
        (Some("inadequate"), Some(0), Some(4)),
        "{a:#}"
    );
    assert_eq!(r.code, 15, "{r:?}");
}

#[test]
fn the_same_seed_runs_the_same_mutants() {
    let toml = "adequacy = \"final\"\nmutants = 3\n\n[sampling]\nseed = 11\n";
    let picked = |run_id: &str| {
        let repo = project(None, IMPORT_ONLY_SUITE, toml);
        let (r, ev) = run(repo.path(), run_id);
        assert_eq!(r.code, 15, "{r:?}");
        let a = adequacy(&ev).clone();
        assert_eq!(a["seed"], 11);
        a["mutants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["line"].clone(), m["change"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(picked("first"), picked("second"));
}

#[test]
fn adequacy_final_without_a_detached_workspace_is_refused_and_nothing_is_written() {
    let dir = workdir();
    write(dir.path(), "loop.toml", "adequacy = \"final\"\n");
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert!(
        r.json()["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("detached workspace"),
        "{r:?}"
    );
    assert!(!dir.path().join(".loopexec/runs").exists());
}

#[test]
fn mutants_zero_in_loop_toml_is_refused() {
    let dir = workdir();
    write(dir.path(), "loop.toml", "mutants = 0\n");
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert!(
        r.json()["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("mutants must be in 1..=1000"),
        "{r:?}"
    );
}

/// Flips `<` and `>` in calc/core.py, one mutant a comparison; and lists one mutant of
/// calc/__init__.py, a file the agent does not change (the loop's canary leaves it out).
const MUTATOR: &str = r#"import difflib, json
def mutants_of(path, flips):
    source = open(path).read().splitlines(keepends=True)
    for i, line in enumerate(source):
        for old, new in flips:
            if old in line:
                mutated = source[:i] + [line.replace(old, new)] + source[i + 1:]
                diff = "".join(difflib.unified_diff(source, mutated, "a/" + path, "b/" + path))
                yield {"file": path, "line": i + 1, "description": f"{old.strip()} -> {new.strip()}", "diff": diff}
listed = list(mutants_of("calc/core.py", ((" < ", " >= "), (" > ", " <= "))))
listed += list(mutants_of("calc/__init__.py", (("clamp", "clamp as clamp"),)))
print(json.dumps(listed))
"#;

/// The project at t0: `calc.clamp` a stub (`t0_core`; `None`: not written yet, so even the
/// import-only suite fails at t0 and the agent is called).
/// The project with `mutator.py` in t0 and `mutate_cmd` in its loop file.
fn mutator_project(t0_core: Option<&str>, tests: &str, mutate_cmd: &str) -> tempfile::TempDir {
    let toml = format!(
        "adequacy = \"final\"\nmutants = 20\nmutate_cmd = {}\n",
        serde_json::to_string(mutate_cmd).unwrap()
    );
    project_with(t0_core, tests, &toml, &[("mutator.py", MUTATOR)])
}

fn mutants(a: &Value) -> Vec<(String, u64, String, String)> {
    a["mutants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap().into(),
                m["line"].as_u64().unwrap(),
                m["change"].as_str().unwrap().into(),
                m["outcome"].as_str().unwrap().into(),
            )
        })
        .collect()
}

const MUTATOR_CMD: &str = "/usr/bin/python3 -B mutator.py";

#[test]
fn a_suite_that_exercises_the_change_kills_the_mutators_mutants_and_the_run_converges() {
    let repo = mutator_project(Some(STUB), ADEQUATE_SUITE, MUTATOR_CMD);
    let (r, ev) = run(repo.path(), "external-adequate");
    assert_eq!(r.code, 10, "{r:?}");
    let a = adequacy(&ev);
    assert_eq!(
        (
            a["tier"].as_str(),
            a["verdict"].as_str(),
            a["external_exit"].as_i64()
        ),
        (Some("external"), Some("adequate"), Some(0)),
        "{a:#}"
    );
    // calc/__init__.py's mutant is left out: the agent did not change that file.
    assert_eq!(
        (
            a["generated"].as_u64(),
            a["sampled"].as_u64(),
            a["killed"].as_u64()
        ),
        (Some(2), Some(2), Some(2)),
        "{a:#}"
    );
    let expected = vec![
        (
            "calc/core.py".to_string(),
            2,
            "external: < -> >=".to_string(),
            "killed".to_string(),
        ),
        (
            "calc/core.py".to_string(),
            4,
            "external: > -> <=".to_string(),
            "killed".to_string(),
        ),
    ];
    assert_eq!(mutants(a), expected, "{a:#}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

#[test]
fn a_suite_that_only_imports_the_module_halts_check_inadequate_naming_the_mutators_survivors() {
    let repo = mutator_project(None, IMPORT_ONLY_SUITE, MUTATOR_CMD);
    let (r, ev) = run(repo.path(), "external-inadequate");
    assert_eq!(r.code, 15, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "check_inadequate", "{r:?}");
    let a = adequacy(&ev);
    let survivors: Vec<(String, u64)> = mutants(a)
        .into_iter()
        .filter(|m| m.3 == "survived")
        .map(|m| (m.0, m.1))
        .collect();
    assert_eq!(
        survivors,
        vec![
            ("calc/core.py".to_string(), 2),
            ("calc/core.py".to_string(), 4)
        ],
        "{a:#}"
    );
    let guard = ev
        .iter()
        .find(|e| e["type"] == "guard")
        .expect("guard event");
    assert_eq!(
        (guard["guard"].as_str(), guard["halt_reason"].as_str()),
        (Some("adequacy"), Some("check_inadequate"))
    );
}

#[test]
fn a_mutator_that_prints_garbage_halts_execution_failure() {
    let repo = mutator_project(Some(STUB), ADEQUATE_SUITE, "echo 'two mutants, trust me'");
    let (r, ev) = run(repo.path(), "garbage");
    assert_eq!(r.code, 40, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "execution_failure", "{r:?}");
    let a = adequacy(&ev);
    assert_eq!(
        (
            a["tier"].as_str(),
            a["verdict"].as_str(),
            a["sampled"].as_u64()
        ),
        (Some("external"), Some("not_run"), Some(0)),
        "{a:#}"
    );
    let guard = ev
        .iter()
        .find(|e| e["type"] == "guard")
        .expect("guard event");
    assert_eq!(guard["halt_reason"], "execution_failure");
    assert!(guard["detail"].as_str().unwrap().starts_with("the mutator (mutate_cmd) printed no valid list: the mutator's output is not a JSON array"), "{guard:#}");
}

/// The run of a mutator that lists no mutant of the agent's change, on the import-only suite:
/// the built-in operators judge the change instead, so the hollow suite is still found out.
fn assert_empty_list_fell_back_to_the_built_in_operators(mutate_cmd: &str, run_id: &str) {
    let repo = mutator_project(None, IMPORT_ONLY_SUITE, mutate_cmd);
    let (r, ev) = run(repo.path(), run_id);
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (15, Some("check_inadequate")),
        "{r:?}"
    );
    let a = adequacy(&ev);
    assert_eq!(
        (
            a["tier"].as_str(),
            a["verdict"].as_str(),
            a["external_exit"].as_i64()
        ),
        (Some("mutation"), Some("inadequate"), Some(0)),
        "{a:#}"
    );
    assert_eq!(
        (
            a["generated"].as_u64(),
            a["killed"].as_u64(),
            a["survived"].as_u64()
        ),
        (Some(5), Some(0), Some(5)),
        "{a:#}"
    );
    assert!(
        mutants(a)
            .iter()
            .all(|m| m.0 == "calc/core.py" && !m.2.starts_with("external:")),
        "{a:#}"
    );
}

#[test]
fn a_mutator_that_lists_no_mutant_of_a_substantive_change_is_no_verdict_the_built_in_operators_judge_it(
) {
    assert_empty_list_fell_back_to_the_built_in_operators("echo '[]'", "empty-list");
}

#[test]
fn a_mutator_that_lists_mutants_only_of_files_the_agent_did_not_change_is_no_verdict_either() {
    let unchanged_only = "/usr/bin/python3 -B -c 'import json; print(json.dumps([{\"file\": \"calc/__init__.py\", \"diff\": \"--- a/calc/__init__.py\\n+++ b/calc/__init__.py\\n@@ -1 +1 @@\\n-from calc.core import clamp\\n+clamp = None\\n\"}]))'";
    assert_empty_list_fell_back_to_the_built_in_operators(unchanged_only, "unchanged-only");
}

#[test]
fn an_honest_change_converges_when_the_mutator_lists_nothing_and_the_suite_kills_the_built_in_mutants(
) {
    let repo = mutator_project(Some(STUB), ADEQUATE_SUITE, "echo '[]'");
    let (r, ev) = run(repo.path(), "empty-honest");
    assert_eq!(r.code, 10, "{r:?}");
    let a = adequacy(&ev);
    assert_eq!(
        (
            a["tier"].as_str(),
            a["verdict"].as_str(),
            a["killed"].as_u64()
        ),
        (Some("mutation"), Some("adequate"), Some(5)),
        "{a:#}"
    );
}

#[test]
fn the_operators_mutator_script_is_protected_and_an_agent_rewriting_it_halts_blocked_path_modified()
{
    let repo = mutator_project(None, IMPORT_ONLY_SUITE, MUTATOR_CMD);
    let agent = format!("{AGENT}; echo 'print(\"[]\")' > mutator.py");
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "steer",
            "--exec",
            &agent,
            "--check",
            CHECK,
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (13, Some("blocked_path_modified")),
        "{r:?}"
    );
    let ev = events(repo.path(), "steer");
    let snap = ev.iter().find(|e| e["type"] == "snapshot").unwrap();
    assert_eq!(snap["protected_changes"][0]["path"], "mutator.py");
    assert!(ev.iter().all(|e| e["type"] != "adequacy"), "{ev:#?}");
}

/// An operator's SIGINT while the canary's mutants run is no verdict on a partial sample: no
/// `adequacy` event, no `guard`, no halt; the run is left resumable (the resumed run runs the
/// canary again). The check hangs only on a mutant: its `calc/core.py` differs from the copy
/// the agent kept beside it.
#[test]
fn an_operator_interrupt_during_the_canary_records_no_adequacy_and_leaves_the_run_resumable() {
    let repo = project(
        Some(STUB),
        ADEQUATE_SUITE,
        "adequacy = \"final\"\nmutants = 4\n",
    );
    let agent = format!("{AGENT} && cp calc/core.py calc/agent_core.txt");
    let check = format!("if test -f calc/agent_core.txt && ! cmp -s calc/core.py calc/agent_core.txt; then sleep 120; fi; {CHECK}");
    // The canary's mutants hang once the sentinel run has been recorded.
    let types = interrupted_after(
        repo.path(),
        "i",
        &[
            "run",
            "--json",
            "--run-id",
            "i",
            "--exec",
            &agent,
            "--check",
            &check,
            "--max-iterations",
            "2",
        ],
        "guard_sentinel",
    );
    assert!(
        !types
            .iter()
            .any(|t| t == "adequacy" || t == "guard" || t == "halt"),
        "{types:?}"
    );
    assert_eq!(
        types.last().map(String::as_str),
        Some("run_interrupted"),
        "{types:?}"
    );
    assert_eq!(
        loopexec(repo.path(), &["status", "--json"]).json()["state"],
        "interrupted"
    );
}

/// A project the built-in operators cannot mutate: `file` (a shell script, or a text file a
/// shell check reads) holds `t0` and the check (`check`, a shell test) passes once the agent
/// wrote `fixed` into it; the operator's mutator (`mutate_cmd`) is the only one that could judge
/// the change.
fn unmutatable_project(file: &str, t0: &str, check: &str, mutate_cmd: &str) -> tempfile::TempDir {
    let dir = workdir();
    write(dir.path(), file, t0);
    write(dir.path(), "check.sh", check);
    write(
        dir.path(),
        "loop.toml",
        &format!(
            "adequacy = \"final\"\nmutants = 20\nmutate_cmd = {}\n",
            serde_json::to_string(mutate_cmd).unwrap()
        ),
    );
    commit_t0(dir.path());
    dir
}

#[test]
fn a_mutator_listing_nothing_on_a_change_the_built_in_operators_cannot_mutate_either_halts_execution_failure_not_run(
) {
    // A mutator that lists nothing, and one that lists only a file the agent did not change.
    let elsewhere = "printf '[{\"file\": \"check.sh\", \"diff\": \"--- a/check.sh\\\\n+++ b/check.sh\\\\n@@ -1 +1 @@\\\\n-x\\\\n+y\\\\n\"}]'";
    let cases = [
        (
            "prog.sh",
            "echo 1\n",
            "[ \"$(sh prog.sh)\" = 2 ]\n",
            "printf 'echo 2\\n' > prog.sh",
            "echo '[]'",
        ),
        (
            "answer.txt",
            "41\n",
            "[ \"$(cat answer.txt)\" = 42 ]\n",
            "printf '42\\n' > answer.txt",
            elsewhere,
        ),
    ];
    for (file, t0, check, agent, mutate_cmd) in cases {
        let repo = unmutatable_project(file, t0, check, mutate_cmd);
        let id = file.replace('.', "-");
        let r = loopexec(
            repo.path(),
            &[
                "run",
                "--json",
                "--run-id",
                &id,
                "--exec",
                agent,
                "--check",
                "sh check.sh",
                "--max-iterations",
                "2",
            ],
        );
        let ev = events(repo.path(), &id);
        assert_eq!(
            (r.code, r.json()["halt_reason"].as_str()),
            (40, Some("execution_failure")),
            "{r:?}\n{ev:#?}"
        );
        let a = adequacy(&ev);
        assert_eq!(
            (
                a["tier"].as_str(),
                a["verdict"].as_str(),
                a["generated"].as_u64(),
                a["external_exit"].as_i64()
            ),
            (Some("external"), Some("not_run"), Some(0), Some(0)),
            "{a:#}"
        );
        let guard = ev
            .iter()
            .find(|e| e["type"] == "guard")
            .expect("guard event");
        assert_eq!(
            (guard["guard"].as_str(), guard["halt_reason"].as_str()),
            (Some("adequacy"), Some("execution_failure")),
            "{guard:#}"
        );
        assert_eq!(
            guard["detail"],
            "the mutator (mutate_cmd) listed no mutant of the agent's change, and the built-in operators generate none in it either (a language they do not mutate): the canary judged nothing, so no verdict"
        );
    }
}

/// Run `inadequate` (every mutant survived, halted `check_inadequate`) with its canary's outcome
/// rewritten as anyone who can write the receipt could: the `adequacy` event made to say every
/// mutant was killed, its halting `guard` dropped, the halt made a success, the chain rebuilt
/// from there and the envelope gone (what a crash before the seal leaves).
fn forged_adequate_canary(repo: &Path) {
    use loopexec::receipt::events::{Event, Recorded};
    let (r, _) = run(repo, "inadequate");
    assert_eq!(r.code, 15, "{r:?}");
    let dir = run_dir(repo, "inadequate");
    let receipt = dir.join("receipt.jsonl");
    let text = std::fs::read_to_string(&receipt).unwrap();
    let lines: Vec<serde_json::Map<String, Value>> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = lines
        .iter()
        .position(|l| l["type"] == "guard" && l["guard"] == "adequacy")
        .expect("the canary's guard");
    let events: Vec<Event> = Recorded::decode_all(&lines)
        .unwrap()
        .into_iter()
        .map(|r| r.event)
        .collect();
    std::fs::write(
        &receipt,
        text.lines()
            .take(at)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();
    std::fs::remove_file(dir.join("envelope.dsse.json")).unwrap();
    let run = loopexec::safefs::SafeDir::open(&dir).unwrap();
    let (mut log, _) = loopexec::receipt::chain::ReceiptLog::open(&run, "receipt.jsonl").unwrap();
    for event in &events[at + 1..] {
        let mut event = event.clone();
        match &mut event {
            Event::Adequacy(a) => {
                (a.killed, a.survived, a.score, a.verdict) =
                    (a.survived, 0, Some(1.0), "adequate".into());
            }
            Event::Halt(h) => {
                (h.halt_reason, h.exit_code, h.detail) = (
                    loopexec::halt::HaltReason::SuccessConditionMet,
                    10,
                    "the check passed at iteration 1".into(),
                );
            }
            _ => {}
        }
        log.append_event(&event).unwrap();
    }
}

const FORGED_CANARY: &str = "the canary judgement of iteration 1 is recorded as killed 4, survived 0, not run 0, score Some(1.0), verdict adequate, \
                             but its recorded observations give killed 0, survived 4, not run 0, score Some(0.0), verdict inadequate";

#[test]
fn a_canary_outcome_rewritten_to_adequate_is_refused_by_resume_and_given_no_verdict() {
    let repo = project(
        None,
        IMPORT_ONLY_SUITE,
        "adequacy = \"final\"\nmutants = 4\n",
    );
    forged_adequate_canary(repo.path());
    let before = std::fs::read(run_dir(repo.path(), "inadequate").join("receipt.jsonl")).unwrap();
    let resumed = loopexec(repo.path(), &["run", "--json", "--resume", "inadequate"]);
    assert_eq!(
        (resumed.code, resumed.json()["errors"][0]["code"].as_str()),
        (30, Some("workspace_invalid")),
        "{resumed:?}"
    );
    let message = resumed.json()["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.ends_with(&format!(
            "the recorded halt does not follow from its observations: {FORGED_CANARY}"
        )),
        "{message}"
    );
    assert_eq!(
        std::fs::read(run_dir(repo.path(), "inadequate").join("receipt.jsonl")).unwrap(),
        before,
        "nothing is appended"
    );
    assert!(
        !run_dir(repo.path(), "inadequate")
            .join("envelope.dsse.json")
            .exists(),
        "nothing is sealed"
    );
    let explained = loopexec(repo.path(), &["explain-halt", "--json", "inadequate"]).json();
    assert_eq!(
        (
            explained["explanation"]["consistent"].as_bool(),
            explained["explanation"]["verdict"].is_null()
        ),
        (Some(false), true),
        "{explained}"
    );
}

#[test]
fn an_honest_inadequate_canary_replays_in_verify() {
    let repo = project(
        None,
        IMPORT_ONLY_SUITE,
        "adequacy = \"final\"\nmutants = 4\n",
    );
    let (r, _) = run(repo.path(), "inadequate");
    assert_eq!(r.code, 15, "{r:?}");
    let verified = loopexec(
        repo.path(),
        &[
            "verify",
            "--json",
            "inadequate",
            "--pubkey",
            &path_str(&key_dir().join("operator.pub")),
        ],
    );
    assert_eq!(verified.code, 0, "{verified:?}");
    let checks = verified.json()["verify"]["checks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let derivation = checks
        .iter()
        .find(|c| c["name"] == "halt_derivation")
        .cloned()
        .unwrap_or_default();
    assert_eq!(derivation["detail"], "check_inadequate follows from the recorded observations (1 iteration decision(s) re-derived)", "{derivation}");
}
