//! Every halt reason the engine computes has an honest receipt on which `verify`'s
//! `halt_derivation` check passes (issue 20, docs/receipt.md "Replayed verdicts"): one test per
//! reason produces that halt with a real run, leaves the receipt exactly as loopexec wrote it, and
//! asserts that `verify --json --pubkey` exits 0 with `halt_derivation` passed and its detail exactly
//! what the derivation must say: the reason follows, with how many iteration decisions were
//! re-derived, or the reason is not replayable, and why.
//!
//! [`coverage`] classifies every `HaltReason` without a wildcard: a new reason does not compile
//! until it names its test here or says which issue will compute it, and
//! [`every_halt_reason_is_covered_here_or_named_as_not_computed`] checks that each named test exists.
//!
//! Where the reason is about the tests, the check is a real runner (pytest) in a detached workspace
//! under native isolation; where it is generic, a shell line, in place where the sandbox is beside
//! the point.
mod common;
use common::calc::{calc_project, plan_steps, write_package, PYTEST};
use common::verdicts::Verdicts;
use common::*;
use loopexec::halt::HaltReason;
use serde_json::Value;
use std::path::Path;

// ------------------------------------------------------------------ the classification

/// How a halt reason is covered by this file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coverage {
    /// The test (a function of this file) that produces it with an honest run and verifies it.
    Test(&'static str),
    /// No code path produces it yet; the issue that will.
    NotComputed(&'static str),
    /// Produced only where the engine fails closed on its own bug: no honest run reaches it.
    OnlyOnABug(&'static str),
}

/// Every reason, classified (no wildcard: a new reason must be classified here to compile).
fn coverage(reason: HaltReason) -> Coverage {
    use Coverage::*;
    use HaltReason::*;
    match reason {
        SuccessConditionMet => Test("success_condition_met_follows_from_a_confirmed_green_pytest_run"),
        NoActionableTasks => NotComputed("issue 22 (task_list mode)"),
        HumanRequired => Test("human_required_follows_from_a_green_pytest_run_in_place"),
        MaxIterationsReached => Test("max_iterations_reached_follows_from_red_checks_to_the_cap"),
        BlockedPathModified => Test("blocked_path_modified_follows_from_a_conftest_planted_beside_the_tests"),
        RewardHackingDetected => Test("reward_hacking_detected_follows_from_a_sentinel_run_the_forged_pytest_cannot_fail"),
        MetricIntegrityViolation => Test("metric_integrity_violation_follows_from_a_failing_pytest_report_behind_a_zero_exit"),
        CredentialScopeInvalid => Test("credential_scope_invalid_is_not_replayable_a_mint_that_failed_before_the_agent"),
        ObjectiveUnverified => Test("objective_unverified_follows_from_a_red_held_out_pytest_check"),
        CheckFlaky => Test("check_flaky_is_not_replayable_a_doctor_gate_before_the_agent"),
        CheckNotDeterministic => Test("check_not_deterministic_follows_from_a_pytest_confirmation_rerun_that_disagreed"),
        CheckHasSideEffects => Test("check_has_side_effects_is_not_replayable_a_doctor_gate_before_the_agent"),
        CheckNotHermetic => Test("check_not_hermetic_is_not_replayable_a_doctor_gate_before_the_agent"),
        HermeticityViolation => NotComputed("issue 24 (a check reaching the network during an iteration)"),
        CheckInadequate => Test("check_inadequate_follows_from_mutants_the_pytest_suite_lets_survive"),
        EscalationPending => Test("escalation_pending_follows_from_a_judge_that_gave_no_answer"),
        ReviewerRejected => Test("reviewer_rejected_follows_from_a_judge_veto"),
        NoProgressDetected => Test("no_progress_detected_follows_from_no_new_best_over_k_pytest_runs"),
        SameFailureRepeated => Test("same_failure_repeated_follows_from_the_same_pytest_failures_three_times"),
        OscillationDetected => Test("oscillation_detected_follows_from_a_pytest_failing_set_that_comes_back"),
        SameTestRegressed => Test("same_test_regressed_follows_from_a_pytest_test_broken_again_and_again"),
        UnsatisfiableConstraints => Test("unsatisfiable_constraints_follows_from_two_pytest_tests_that_break_each_other"),
        InfeasibleSuspected => Test("infeasible_suspected_is_not_replayable_a_reference_that_fails_before_the_agent"),
        BudgetExceeded => Test("budget_exceeded_follows_from_the_wall_time_the_zones_ran_against_the_cap"),
        CostAnomaly => NotComputed("issue 21 (metered budgets)"),
        HeartbeatStale => Test("heartbeat_stale_follows_from_an_agent_the_stall_rule_stopped"),
        ModelDriftDetected => NotComputed("issue 21 (model drift)"),
        ComprehensionDebtExceeded => NotComputed("issue 21 (the comprehension gate)"),
        ContextBudgetUnsatisfiable => NotComputed("issue 22 (task_list mode)"),
        InvariantFailed => Test("invariant_failed_is_not_replayable_a_target_matching_no_test_before_the_agent"),
        WorkspaceInvalid => Test("workspace_invalid_is_accepted_as_the_supervisors_failure_on_a_tree_it_cannot_take"),
        IsolationUnsatisfiable => Test("isolation_unsatisfiable_is_not_replayable_a_zone_refused_before_the_agent"),
        ExecutionFailure => Test("execution_failure_follows_from_an_agent_that_exited_non_zero"),
        InternalError => OnlyOnABug("the t0 success with fewer confirmations than asked, which every path rules out (engine::baseline)"),
    }
}

#[test]
fn every_halt_reason_is_covered_here_or_named_as_not_computed() {
    let source = include_str!("verify_every_halt_reason.rs");
    let mut tests = Vec::new();
    for reason in HaltReason::ALL {
        if let Coverage::Test(name) = coverage(reason) {
            assert!(
                name.starts_with(reason.as_str()),
                "the test of {reason} is named for it: {name}"
            );
            assert!(
                source.contains(&format!("#[test]\nfn {name}() {{")),
                "no test fn {name} in this file for {reason}"
            );
            tests.push(name);
        }
    }
    let distinct: std::collections::BTreeSet<&str> = tests.iter().copied().collect();
    assert_eq!(distinct.len(), tests.len(), "one test per reason");
    // Every computed reason of SPEC.md §2 has its test; the rest are named with their issue.
    let not_computed: Vec<&str> = HaltReason::ALL
        .iter()
        .filter(|r| matches!(coverage(**r), Coverage::NotComputed(_)))
        .map(|r| r.as_str())
        .collect();
    assert_eq!(
        not_computed,
        [
            "no_actionable_tasks",
            "hermeticity_violation",
            "cost_anomaly",
            "model_drift_detected",
            "comprehension_debt_exceeded",
            "context_budget_unsatisfiable"
        ]
    );
    assert_eq!(
        tests.len(),
        HaltReason::ALL.len() - not_computed.len() - 1,
        "internal_error is the one reason only a bug reaches"
    );
}

// ------------------------------------------------------------------ what verify must say

/// `verify --json RUN --pubkey` of an untouched receipt: exit 0, every check passed; the detail
/// of its `halt_derivation` check.
fn halt_derivation(dir: &Path, run_id: &str) -> String {
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let r = loopexec(dir, &["verify", "--json", run_id, "--pubkey", &pubkey]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["verified"], true, "{v:#}");
    let checks = v["verify"]["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("no checks in {v:#}"));
    let derivation: Vec<&Value> = checks
        .iter()
        .filter(|c| c["name"] == "halt_derivation")
        .collect();
    assert_eq!(derivation.len(), 1, "one halt_derivation check: {v:#}");
    assert_eq!(derivation[0]["ok"], true, "{v:#}");
    derivation[0]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The detail of a halt re-derived from its observations.
fn follows(reason: &str, decisions: u64) -> String {
    format!("{reason} follows from the recorded observations ({decisions} iteration decision(s) re-derived)")
}

/// The detail of a halt at iteration 0 that t0's record does not decide (the reference, the
/// doctor gates, the targets' selection, a hook before the agent, a zone refused).
fn run_level(reason: &str) -> String {
    format!(
        "{reason} not replayable: {reason} at iteration 0 is decided by run-level events this rule does not replay \
         (the reference, the doctor gates, the targets' selection, the machinery) (0 iteration decision(s) re-derived)"
    )
}

/// The detail of the supervisor's own failure at iteration `at` after its stages decided `stages`.
fn supervisor_failure(reason: &str, at: u64, stages: &str, decisions: u64) -> String {
    format!(
        "{reason} not replayable: {reason} records the supervisor's own failure at iteration {at}, accepted as recorded ({stages} by the stages) ({decisions} iteration decision(s) re-derived)"
    )
}

/// Asserts that the run exited with `reason`'s class, halting `reason` at iteration `at`.
fn assert_halted(r: &Ran, reason: HaltReason, at: u64) {
    let v = r.json();
    assert_eq!(
        (r.code, v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (reason.class().code(), Some(reason.as_str()), Some(at)),
        "{r:?}"
    );
}

fn run(dir: &Path, run_id: &str, args: &[&str]) -> Ran {
    let mut all = vec!["run", "--json", "--run-id", run_id];
    all.extend_from_slice(args);
    loopexec(dir, &all)
}

/// The calc project's four functions all made right.
fn full_fix() -> String {
    write_package(&["add", "sub", "mul", "div"])
}

/// A pytest run of the calc project (detached, native) with the agent `exec`.
fn pytest_run(dir: &Path, run_id: &str, exec: &str, extra: &[&str]) -> Ran {
    let mut args = vec![
        "--exec",
        exec,
        "--check",
        PYTEST,
        "--report",
        "out/junit.xml",
    ];
    args.extend_from_slice(extra);
    run(dir, run_id, &args)
}

// ------------------------------------------------------------------ converged and capped

#[test]
fn success_condition_met_follows_from_a_confirmed_green_pytest_run() {
    let repo = calc_project();
    let r = pytest_run(repo.path(), "r", &full_fix(), &["--max-iterations", "2"]);
    assert_halted(&r, HaltReason::SuccessConditionMet, 1);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("success_condition_met", 1)
    );
}

#[test]
fn human_required_follows_from_a_green_pytest_run_in_place() {
    let repo = calc_project();
    let r = pytest_run(
        repo.path(),
        "r",
        &full_fix(),
        &["--isolation", "none", "--max-iterations", "2"],
    );
    assert_halted(&r, HaltReason::HumanRequired, 1);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("human_required", 1)
    );
}

#[test]
fn max_iterations_reached_follows_from_red_checks_to_the_cap() {
    let dir = workdir();
    let r = run(
        dir.path(),
        "r",
        &[
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "exit 3",
            "--max-iterations",
            "2",
        ],
    );
    assert_halted(&r, HaltReason::MaxIterationsReached, 2);
    assert_eq!(
        halt_derivation(dir.path(), "r"),
        follows("max_iterations_reached", 2)
    );
}

/// Runs `loopexec ARGS` (run `r`), interrupts it with SIGINT 3 s after its receipt holds an
/// `after` event, and resumes it: the halt the resume records is at the interrupted iteration.
fn interrupted_then_resumed(dir: &Path, args: &[&str], after: &str) -> Ran {
    let mut all = vec!["run", "--json", "--run-id", "r"];
    all.extend_from_slice(args);
    let types = interrupted_after(dir, "r", &all, after);
    assert_eq!(
        types.last().map(String::as_str),
        Some("run_interrupted"),
        "{types:?}"
    );
    loopexec(dir, &["run", "--json", "--resume", "r"])
}

#[test]
fn max_iterations_reached_follows_from_the_cap_an_iteration_interrupted_after_its_green_check_used()
{
    let repo = workdir();
    write(repo.path(), "answer", "41\n");
    commit_t0(repo.path());
    // Interrupted during the green's confirmation rerun: the iteration decides nothing, and it
    // was the last one the cap allows.
    let args = [
        "--no-baseline",
        "--exec",
        "echo 42 > answer",
        "--check",
        "sleep 4; grep -q 42 answer",
        "--max-iterations",
        "1",
    ];
    let r = interrupted_then_resumed(repo.path(), &args, "check_result");
    assert_halted(&r, HaltReason::MaxIterationsReached, 1);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("max_iterations_reached", 1)
    );
}

// ------------------------------------------------------------------ integrity

#[test]
fn blocked_path_modified_follows_from_a_conftest_planted_beside_the_tests() {
    let repo = calc_project();
    let agent = "printf 'def pytest_collection_modifyitems(items):\\n    items.clear()\\n' > tests/conftest.py";
    let r = pytest_run(repo.path(), "r", agent, &["--max-iterations", "2"]);
    assert_halted(&r, HaltReason::BlockedPathModified, 1);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("blocked_path_modified", 1)
    );
}

/// pytest's reporting patched from the production package's import (tests/loop_sentinel.rs): every
/// call-phase report says passed, so only the sentinel run shows the check cannot fail.
const PYTEST_FORGER: &str = "import importlib\n\nfrom calc.core import add\n\n_reports = importlib.import_module(\"_py\" + \"test.reports\")\n_made = _reports.TestReport.from_item_and_call\n\n\ndef _as_passed(item, call):\n    report = _made(item, call)\n    if report.when == \"call\":\n        report.outcome = \"passed\"\n        report.longrepr = None\n    return report\n\n\nsetattr(_reports.TestReport, \"from_item_and_call\", staticmethod(_as_passed))\n";

#[test]
fn reward_hacking_detected_follows_from_a_sentinel_run_the_forged_pytest_cannot_fail() {
    require_pytest();
    let repo = workdir();
    let p = repo.path();
    write(p, "pyproject.toml", "[project]\nname = \"calc\"\nversion = \"0.1.0\"\n\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n");
    write(p, "calc/__init__.py", "from calc.core import add\n");
    write(p, "calc/core.py", "def add(a, b):\n    return a + b + 1\n");
    write(
        p,
        "tests/test_core.py",
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    );
    // The awareness rule would halt the forger human_required first: its import is allowed, so
    // that the sentinel run is what decides.
    write(p, "loop.toml", "[guards]\nallow = [{ api = \"import:_pytest.reports\", reason = \"the sentinel run is under test\" }]\n");
    commit_t0(p);
    let b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(PYTEST_FORGER)
    };
    let agent = format!("echo {b64} | base64 -d > calc/__init__.py");
    let check = "/usr/bin/python3 -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml";
    let r = run(
        p,
        "r",
        &[
            "--exec",
            &agent,
            "--check",
            check,
            "--report",
            "out/junit.xml",
            "--max-iterations",
            "2",
        ],
    );
    assert_halted(&r, HaltReason::RewardHackingDetected, 1);
    assert_eq!(
        halt_derivation(p, "r"),
        follows("reward_hacking_detected", 1)
    );
}

#[test]
fn metric_integrity_violation_follows_from_a_failing_pytest_report_behind_a_zero_exit() {
    let repo = calc_project();
    let check = format!("{PYTEST} || true");
    let r = run(
        repo.path(),
        "r",
        &[
            "--no-baseline",
            "--exec",
            "true",
            "--check",
            &check,
            "--report",
            "out/junit.xml",
            "--max-iterations",
            "2",
        ],
    );
    assert_halted(&r, HaltReason::MetricIntegrityViolation, 1);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("metric_integrity_violation", 1)
    );
}

#[test]
fn credential_scope_invalid_is_not_replayable_a_mint_that_failed_before_the_agent() {
    let dir = workdir();
    let r = run(
        dir.path(),
        "r",
        &[
            "--isolation",
            "none",
            "--no-baseline",
            "--exec",
            "true",
            "--check",
            "true",
            "--mint-cmd",
            "exit 3",
            "--revoke-cmd",
            "true",
        ],
    );
    assert_halted(&r, HaltReason::CredentialScopeInvalid, 0);
    assert_eq!(
        halt_derivation(dir.path(), "r"),
        run_level("credential_scope_invalid")
    );
}

#[test]
fn credential_scope_invalid_at_the_resume_after_an_interrupted_iteration_is_accepted_as_the_supervisors_failure(
) {
    let dir = workdir();
    let state = workdir();
    // The mint hook gives a credential once: at the resume it fails.
    let mint = format!(
        "n={runs}; test -e $n && exit 1; touch $n; echo tok",
        runs = path_str(&state.path().join("minted"))
    );
    let args = [
        "--isolation",
        "none",
        "--no-baseline",
        "--exec",
        "sleep 30",
        "--check",
        "false",
        "--max-iterations",
        "3",
        "--mint-cmd",
        &mint,
        "--revoke-cmd",
        "true",
    ];
    let r = interrupted_then_resumed(dir.path(), &args, "iteration_start");
    assert_halted(&r, HaltReason::CredentialScopeInvalid, 1);
    assert_eq!(
        halt_derivation(dir.path(), "r"),
        supervisor_failure(
            "credential_scope_invalid",
            1,
            "no halt: interrupted (SIGINT)",
            1
        )
    );
}

#[test]
fn objective_unverified_follows_from_a_red_held_out_pytest_check() {
    require_pytest();
    let repo = workdir();
    let p = repo.path();
    write(
        p,
        "src/sq/__init__.py",
        "def square(x):\n    return x + x\n",
    );
    write(
        p,
        "tests/test_sq.py",
        "from sq import square\n\n\ndef test_square_of_three():\n    assert square(3) == 9\n",
    );
    write(
        p,
        "pyproject.toml",
        "[tool.pytest.ini_options]\npythonpath = [\"src\"]\n",
    );
    write(p, ".gitignore", "out/\n__pycache__/\n.loopexec/\n");
    commit_t0(p);
    // The held-out tests, outside the workdir: inputs the visible test never uses.
    let outer = workdir();
    zone_traversable(outer.path());
    let held = outer.path().join("holdout");
    write(
        &held,
        "test_hidden.py",
        "from sq import square\n\n\ndef test_square_of_seven():\n    assert square(7) == 49\n",
    );
    let fitted =
        "printf 'def square(x):\\n    return 9 if x == 3 else x + x\\n' > src/sq/__init__.py";
    let check =
        "/usr/bin/python3 -B -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml tests";
    let holdout = "PYTHONPATH=src /usr/bin/python3 -B -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml \"$LOOPEXEC_HOLDOUT_DIR\"";
    let held = path_str(&held);
    let r = run(
        p,
        "r",
        &[
            "--exec",
            fitted,
            "--check",
            check,
            "--report",
            "out/junit.xml",
            "--holdout-check",
            holdout,
            "--holdout-dir",
            &held,
            "--max-iterations",
            "2",
        ],
    );
    assert_halted(&r, HaltReason::ObjectiveUnverified, 1);
    assert_eq!(halt_derivation(p, "r"), follows("objective_unverified", 1));
}

// ------------------------------------------------------------------ the oracle untrusted

/// A pytest project in place whose one test passes on its first run only: it counts its runs in
/// a file outside the workdir (`--isolation none`: the check keeps state between its runs, as
/// doctor's determinism gate runs it).
fn first_run_green_project() -> (tempfile::TempDir, tempfile::TempDir) {
    require_pytest();
    let state = workdir();
    let repo = workdir();
    let count = path_str(&state.path().join("runs"));
    write(
        repo.path(),
        "tests/test_once.py",
        &format!("import os\n\nCOUNT = {count:?}\n\n\ndef test_passes_on_its_first_run_only():\n    runs = int(open(COUNT).read()) if os.path.exists(COUNT) else 0\n    open(COUNT, 'w').write(str(runs + 1))\n    assert runs == 0\n"),
    );
    (repo, state)
}

#[test]
fn check_not_deterministic_follows_from_a_pytest_confirmation_rerun_that_disagreed() {
    require_pytest();
    // pytest's one test reads its verdict from the FIFO: green on the iteration's check, red on
    // its confirmation rerun on the same tree.
    let verdicts = Verdicts::new(&["green", "red"]);
    let repo = workdir();
    let test = format!("def test_verdict():\n    with open({:?}) as fifo:\n        assert fifo.readline().strip() == 'green'\n", verdicts.fifo());
    write(repo.path(), "tests/test_verdict.py", &test);
    write(repo.path(), ".gitignore", "out/\n__pycache__/\n");
    commit_t0(repo.path());
    let policy = verdicts.check_policy();
    let r = run(
        repo.path(),
        "r",
        &[
            "--no-baseline",
            "--exec",
            "echo step > notes.txt",
            "--check",
            PYTEST,
            "--report",
            "out/junit.xml",
            "--check-policy",
            &policy,
            "--max-iterations",
            "2",
        ],
    );
    assert_halted(&r, HaltReason::CheckNotDeterministic, 1);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("check_not_deterministic", 1)
    );
}

#[test]
fn check_flaky_is_not_replayable_a_doctor_gate_before_the_agent() {
    let (repo, _state) = first_run_green_project();
    write(repo.path(), "loop.toml", &format!("doctor = true\nisolation = \"none\"\nexec = \"true\"\ncheck = {PYTEST:?}\nreport = [\"out/junit.xml\"]\n"));
    let r = run(repo.path(), "r", &[]);
    assert_halted(&r, HaltReason::CheckFlaky, 0);
    assert_eq!(halt_derivation(repo.path(), "r"), run_level("check_flaky"));
}

#[test]
fn check_has_side_effects_is_not_replayable_a_doctor_gate_before_the_agent() {
    let dir = workdir();
    // Green on every fresh copy, red when run again on the copy it wrote (tests/doctor_check.rs).
    write(dir.path(), "loop.toml", "doctor = true\nisolation = \"none\"\nexec = \"true\"\ncheck = \"test ! -e marker && touch marker\"\n");
    let r = run(dir.path(), "r", &[]);
    assert_halted(&r, HaltReason::CheckHasSideEffects, 0);
    assert_eq!(
        halt_derivation(dir.path(), "r"),
        run_level("check_has_side_effects")
    );
}

#[test]
fn check_not_hermetic_is_not_replayable_a_doctor_gate_before_the_agent() {
    let dir = workdir();
    // Its verdict depends on the time zone, which the hermeticity gate varies.
    write(dir.path(), "loop.toml", "doctor = true\nisolation = \"none\"\nexec = \"true\"\ncheck = 'test \"$(date +%H%M)\" = \"$(date -u +%H%M)\"'\n");
    let r = run(dir.path(), "r", &[]);
    assert_halted(&r, HaltReason::CheckNotHermetic, 0);
    assert_eq!(
        halt_derivation(dir.path(), "r"),
        run_level("check_not_hermetic")
    );
}

#[test]
fn check_inadequate_follows_from_mutants_the_pytest_suite_lets_survive() {
    require_pytest();
    let repo = workdir();
    let p = repo.path();
    write(p, "pyproject.toml", "[project]\nname = \"calc\"\nversion = \"0.1.0\"\n\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n");
    write(p, "calc/__init__.py", "from calc.core import clamp\n");
    // A suite that only imports the module: no mutant of the agent's clamp turns it red.
    write(
        p,
        "tests/test_core.py",
        "import calc\n\n\ndef test_imports():\n    assert calc is not None\n",
    );
    write(p, "loop.toml", "adequacy = \"final\"\nmutants = 4\n");
    commit_t0(p);
    let agent = "printf 'def clamp(x, lo, hi):\\n    if x < lo:\\n        return lo\\n    if x > hi:\\n        return hi\\n    return x\\n' > calc/core.py";
    let r = run(
        p,
        "r",
        &[
            "--exec",
            agent,
            "--check",
            "/usr/bin/python3 -m pytest -q -p no:cacheprovider",
            "--max-iterations",
            "2",
        ],
    );
    assert_halted(&r, HaltReason::CheckInadequate, 1);
    assert_eq!(halt_derivation(p, "r"), follows("check_inadequate", 1));
}

// ------------------------------------------------------------------ the judge

#[test]
fn escalation_pending_follows_from_a_judge_that_gave_no_answer() {
    let repo = calc_project();
    let r = pytest_run(
        repo.path(),
        "r",
        &full_fix(),
        &["--judge", "exit 3", "--max-iterations", "2"],
    );
    assert_halted(&r, HaltReason::EscalationPending, 1);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("escalation_pending", 1)
    );
}

#[test]
fn reviewer_rejected_follows_from_a_judge_veto() {
    let repo = calc_project();
    let veto = r#"echo '{"verdict":"veto","reason":"the fix hard-codes the expected value"}'"#;
    let r = pytest_run(
        repo.path(),
        "r",
        &full_fix(),
        &["--judge", veto, "--max-iterations", "2"],
    );
    assert_halted(&r, HaltReason::ReviewerRejected, 1);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("reviewer_rejected", 1)
    );
}

// ------------------------------------------------------------------ no convergence

#[test]
fn no_progress_detected_follows_from_no_new_best_over_k_pytest_runs() {
    let repo = calc_project();
    std::fs::write(
        repo.path().join("loop.toml"),
        "[progress]\nsame_failure_n = 0\n",
    )
    .unwrap();
    let r = pytest_run(
        repo.path(),
        "r",
        &plan_steps(&[&["add"]]),
        &[
            "--isolation",
            "none",
            "--max-iterations",
            "8",
            "--no-progress-k",
            "2",
        ],
    );
    assert_halted(&r, HaltReason::NoProgressDetected, 3);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("no_progress_detected", 3)
    );
}

#[test]
fn same_failure_repeated_follows_from_the_same_pytest_failures_three_times() {
    let repo = calc_project();
    let r = pytest_run(
        repo.path(),
        "r",
        &plan_steps(&[&["add"]]),
        &["--max-iterations", "8"],
    );
    assert_halted(&r, HaltReason::SameFailureRepeated, 3);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("same_failure_repeated", 3)
    );
}

#[test]
fn oscillation_detected_follows_from_a_pytest_failing_set_that_comes_back() {
    let repo = calc_project();
    let r = pytest_run(
        repo.path(),
        "r",
        &plan_steps(&[&["add"], &["sub"], &["add"]]),
        &["--isolation", "none", "--max-iterations", "8"],
    );
    assert_halted(&r, HaltReason::OscillationDetected, 3);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("oscillation_detected", 3)
    );
}

#[test]
fn same_test_regressed_follows_from_a_pytest_test_broken_again_and_again() {
    let repo = calc_project();
    let r = pytest_run(
        repo.path(),
        "r",
        &plan_steps(&[&["add"], &["mul"], &["div"]]),
        &["--isolation", "none", "--max-iterations", "8"],
    );
    assert_halted(&r, HaltReason::SameTestRegressed, 3);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("same_test_regressed", 3)
    );
}

#[test]
fn unsatisfiable_constraints_follows_from_two_pytest_tests_that_break_each_other() {
    let repo = calc_project();
    // The ratchet off, so every iteration is kept; same_test_regressed waits for a third regression.
    std::fs::write(
        repo.path().join("loop.toml"),
        "[progress]\nratchet = false\nregressed_n = 3\n",
    )
    .unwrap();
    let seesaw: [&[&str]; 5] = [
        &["add"],
        &["sub"],
        &["add", "mul"],
        &["sub", "mul"],
        &["add", "mul", "div"],
    ];
    let r = pytest_run(
        repo.path(),
        "r",
        &plan_steps(&seesaw),
        &["--max-iterations", "5"],
    );
    assert_halted(&r, HaltReason::UnsatisfiableConstraints, 5);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        follows("unsatisfiable_constraints", 5)
    );
}

#[test]
fn infeasible_suspected_is_not_replayable_a_reference_that_fails_before_the_agent() {
    let repo = calc_project();
    let r = pytest_run(repo.path(), "r", &full_fix(), &["--reference", "main"]);
    assert_halted(&r, HaltReason::InfeasibleSuspected, 0);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        run_level("infeasible_suspected")
    );
}

// ------------------------------------------------------------------ invariant, workspace, execution

#[test]
fn invariant_failed_is_not_replayable_a_target_matching_no_test_before_the_agent() {
    let repo = calc_project();
    let r = pytest_run(
        repo.path(),
        "r",
        &full_fix(),
        &["--target", "tests.test_nothing::*"],
    );
    assert_halted(&r, HaltReason::InvariantFailed, 0);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        run_level("invariant_failed")
    );
}

#[test]
fn workspace_invalid_is_accepted_as_the_supervisors_failure_on_a_tree_it_cannot_take() {
    let repo = workdir();
    write(repo.path(), "answer", "41\n");
    commit_t0(repo.path());
    // A directory git takes for `.git` on NTFS: the detached workspace cannot be taken.
    let agent = "echo 42 > answer && mkdir -p 'sub/GIT~1' && echo x > 'sub/GIT~1/config'";
    let r = run(
        repo.path(),
        "r",
        &["--no-baseline", "--exec", agent, "--check", "true"],
    );
    assert_halted(&r, HaltReason::WorkspaceInvalid, 1);
    assert_eq!(
        halt_derivation(repo.path(), "r"),
        supervisor_failure("workspace_invalid", 1, "continue (no halt)", 1)
    );
}

#[test]
fn isolation_unsatisfiable_is_not_replayable_a_zone_refused_before_the_agent() {
    let dir = workdir();
    zone_writable(dir.path());
    let outside = workdir();
    // A protected path that is a symlink: no zone can hold it read-only.
    std::os::unix::fs::symlink(outside.path(), dir.path().join(".gitmodules")).unwrap();
    let r = run(
        dir.path(),
        "r",
        &["--max-iterations", "1", "--exec", "true", "--check", "true"],
    );
    assert_halted(&r, HaltReason::IsolationUnsatisfiable, 0);
    assert_eq!(
        halt_derivation(dir.path(), "r"),
        run_level("isolation_unsatisfiable")
    );
}

#[test]
fn heartbeat_stale_follows_from_an_agent_the_stall_rule_stopped() {
    // The agent's recorded ending (`stalled`, with what the loop observed) decides the halt: the
    // live stall is replayed from it. (`watch --kill`'s halt is the run-level one: tests/watch_kill.rs.)
    let dir = workdir();
    let r = run(
        dir.path(),
        "r",
        &[
            "--isolation",
            "none",
            "--no-baseline",
            "--stall-timeout",
            "0.5",
            "--exec",
            "sleep 300",
            "--check",
            "true",
        ],
    );
    assert_halted(&r, HaltReason::HeartbeatStale, 1);
    assert_eq!(
        halt_derivation(dir.path(), "r"),
        follows("heartbeat_stale", 1)
    );
}

#[test]
fn execution_failure_follows_from_an_agent_that_exited_non_zero() {
    let dir = workdir();
    let r = run(
        dir.path(),
        "r",
        &[
            "--isolation",
            "none",
            "--no-baseline",
            "--exec",
            "exit 4",
            "--check",
            "true",
        ],
    );
    assert_halted(&r, HaltReason::ExecutionFailure, 1);
    assert_eq!(
        halt_derivation(dir.path(), "r"),
        follows("execution_failure", 1)
    );
}

// ------------------------------------------------------------------ budgets

#[test]
fn budget_exceeded_follows_from_the_wall_time_the_zones_ran_against_the_cap() {
    // The agent runs at least 0.3 s: within a 0.5 s cap after iteration 1, never with a second
    // one projected (or crossed already), so the run halts budget_exceeded at iteration 1.
    let dir = workdir();
    let r = run(
        dir.path(),
        "r",
        &[
            "--isolation",
            "none",
            "--no-baseline",
            "--exec",
            "sleep 0.3",
            "--check",
            "exit 1",
            "--budget-wall",
            "0.5",
        ],
    );
    assert_halted(&r, HaltReason::BudgetExceeded, 1);
    assert_eq!(
        halt_derivation(dir.path(), "r"),
        follows("budget_exceeded", 1)
    );
}
