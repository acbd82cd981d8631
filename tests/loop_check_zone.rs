//! The check zone end to end (issue 12, item 4): a check must not change the tree it tests. A
//! check that modified, replaced or deleted a file of that tree halts
//! `metric_integrity_violation` naming the file, green or not; t0's protected paths are read-only
//! inside the check (a write fails with EROFS, a removal with EBUSY); an honest check that only
//! adds files (`__pycache__/`, `.pytest_cache/`, `target/`) still converges.
mod common;
use common::calc::{calc_project, write_package, PYTEST};
use common::*;
use serde_json::Value;
use std::path::Path;

fn run(repo: &Path, run_id: &str, agent: &str, check: &str, extra: &[&str]) -> (Ran, Vec<Value>) {
    let mut args = vec![
        "run",
        "--json",
        "--run-id",
        run_id,
        "--exec",
        agent,
        "--check",
        check,
        "--max-iterations",
        "2",
    ];
    args.extend_from_slice(extra);
    let r = loopexec(repo, &args);
    let ev = events(repo, run_id);
    (r, ev)
}

/// Asserts the run halted `metric_integrity_violation` from the check-writes finding of
/// `iteration`, naming `path` as `what` (modified, deleted, replaced).
fn assert_check_wrote(r: &Ran, ev: &[Value], iteration: u64, path: &str, what: &str) {
    assert_eq!(r.code, 13, "{r:?}");
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    let guard = ev
        .iter()
        .find(|e| {
            e["type"] == "guard"
                && e["iteration"] == iteration
                && e["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("of the tree it tested"))
        })
        .unwrap_or_else(|| panic!("no check-writes finding at iteration {iteration}: {ev:#?}"));
    assert_eq!(guard["guard"], "metric_integrity");
    assert_eq!(guard["stage"], "after_check");
    let findings = guard["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["path"] == path && f["what"] == format!("{what} by the check")),
        "{findings:#?}"
    );
}

/// The fix of every function of the calc project (tests/common/calc.rs).
fn honest_fix() -> String {
    write_package(&["add", "sub", "mul", "div"])
}

#[test]
fn an_honest_pytest_run_that_writes_only_its_caches_converges() {
    let repo = calc_project();
    // Bytecode and pytest's cache on: `__pycache__/` and `.pytest_cache/` are new paths.
    let (r, ev) = run(
        repo.path(),
        "h",
        &honest_fix(),
        "/usr/bin/python3 -m pytest -q --junitxml=out/junit.xml",
        &["--no-baseline"],
    );
    assert_eq!(r.code, 10, "{r:?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

#[test]
fn a_check_that_deletes_a_tracked_file_halts_metric_integrity_violation() {
    let repo = calc_project();
    let check = format!("rm .gitignore && {PYTEST}");
    let (r, ev) = run(repo.path(), "d", &honest_fix(), &check, &["--no-baseline"]);
    assert_check_wrote(&r, &ev, 1, ".gitignore", "deleted");
    let check_result = ev.iter().find(|e| e["type"] == "check_result").unwrap();
    assert_eq!(check_result["check_exit"], 0, "the check itself was green");
}

#[test]
fn an_operators_check_that_rewrites_a_tracked_file_halts_at_t0_before_any_agent_call() {
    let repo = calc_project();
    let check = format!("echo '# touched' >> pyproject.toml && {PYTEST}");
    let (r, ev) = run(repo.path(), "t", "true", &check, &[]);
    assert_check_wrote(&r, &ev, 0, "pyproject.toml", "modified");
    assert!(
        ev.iter().all(|e| e["type"] != "exec_result"),
        "the agent was never called: {ev:#?}"
    );
    assert!(
        r.json()["run"]["detail"]
            .as_str()
            .unwrap_or_default()
            .starts_with(
            "the check on t0 wrote to 1 path(s) of the tree it tested: pyproject.toml (modified)"
        ),
        "{r:?}"
    );
}

#[test]
fn t0s_protected_paths_are_read_only_inside_the_check() {
    let repo = calc_project();
    // tests/ is protected: appending fails with EROFS, removing with EBUSY (a mount point); the
    // check exits 0 only when both were refused that way.
    let probe = "import errno, os, sys\n\
try:\n    open('tests/test_calc.py', 'a').write('x')\n    sys.exit(3)\nexcept OSError as e:\n    assert e.errno == errno.EROFS, e\n\
try:\n    os.unlink('tests/test_calc.py')\n    sys.exit(4)\nexcept OSError as e:\n    assert e.errno in (errno.EBUSY, errno.EROFS), e\n";
    write(repo.path(), "probe.py", probe);
    git(repo.path(), &["add", "probe.py"]);
    git(repo.path(), &["commit", "-q", "-m", "probe"]);
    let check = format!("/usr/bin/python3 probe.py && {PYTEST}");
    let (r, ev) = run(repo.path(), "p", &honest_fix(), &check, &["--no-baseline"]);
    assert_eq!(r.code, 10, "{r:?} {ev:#?}");
}

/// The calc project with `extra` files committed after t0's first commit, and the probe.
fn calc_project_with(extra: &[String]) -> tempfile::TempDir {
    let repo = calc_project();
    for path in extra {
        write(repo.path(), path, "def test_extra():\n    pass\n");
    }
    write(repo.path(), "probe.py", REWRITE_AND_RESTORE);
    git(repo.path(), &["add", "-A"]);
    git(
        repo.path(),
        &["commit", "-q", "-m", "extra protected files and the probe"],
    );
    repo
}

#[test]
fn three_hundred_protected_files_sorting_before_tests_leave_the_tests_read_only_in_the_check() {
    // 300 goldens (each a protected file held on its own) sort before `tests/`.
    let goldens: Vec<String> = (0..300)
        .map(|i| format!("data/case_{i:03}.golden"))
        .collect();
    let repo = calc_project_with(&goldens);
    let check = format!(
        "/usr/bin/python3 probe.py tests/test_calc.py data/case_299.golden && {PYTEST} tests"
    );
    let (r, ev) = run(
        repo.path(),
        "many",
        &honest_fix(),
        &check,
        &["--no-baseline"],
    );
    assert_eq!(
        r.code, 10,
        "the probe could rewrite a protected file: {r:?} {ev:#?}"
    );
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

#[test]
fn a_deep_tree_of_three_hundred_test_files_stays_read_only_in_the_check() {
    // `test_*.py` outside a protected directory: each file is held on its own, 50 levels down,
    // and all of them sort before `tests/`.
    let deep: String = (1..=50).map(|i| format!("d{i}/")).collect();
    let tests: Vec<String> = (0..300)
        .map(|i| format!("pkg/{deep}test_case_{i:03}.py"))
        .collect();
    let repo = calc_project_with(&tests);
    let check = format!("/usr/bin/python3 probe.py tests/test_calc.py pkg/{deep}test_case_299.py pkg/{deep}test_case_000.py && {PYTEST} tests");
    let (r, ev) = run(
        repo.path(),
        "deep",
        &honest_fix(),
        &check,
        &["--no-baseline"],
    );
    assert_eq!(
        r.code, 10,
        "the probe could rewrite a protected file: {r:?} {ev:#?}"
    );
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
}

#[test]
fn a_t0_whose_protected_files_need_more_holds_than_the_zone_takes_refuses_the_run_before_the_agent()
{
    // 8,000 held test files: 296,000 bytes of paths in the zone's plan, past its budget.
    let repo = workdir();
    let p = repo.path();
    std::fs::create_dir_all(p.join("pkg")).unwrap();
    for i in 0..8_000 {
        std::fs::write(p.join(format!("pkg/test_{i:05}.py")), "").unwrap();
    }
    commit_t0(p);
    let (r, ev) = run(p, "cap", "touch agent-ran", "true", &["--no-baseline"]);
    assert_eq!(r.code, 30, "{r:?}");
    let v = r.json();
    assert_eq!(v["errors"][0]["code"], "workspace_invalid", "{v:#}");
    let message = v["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("t0's protected paths need 8000 read-only holds in the check's zone (8001 mounts with the directories pinned above them, 296000 bytes of paths in the zone's plan), more than it takes (16384 mounts, 131072 bytes)"),
        "{message}"
    );
    assert!(
        ev.iter().all(|e| e["type"] != "exec_result"),
        "the agent was never called: {ev:#?}"
    );
}

/// A pytest project whose tests live in the package (`calc/testcore.py`, collected through
/// `python_files = test*.py`; no default protected pattern matches it) and import a helper
/// module `calc/support.py` the agent may change.
fn package_tests_project() -> tempfile::TempDir {
    require_pytest();
    let dir = workdir();
    write(
        dir.path(),
        "pytest.ini",
        "[pytest]\npython_files = test*.py\n",
    );
    write(
        dir.path(),
        "calc/__init__.py",
        "from calc.core import add\n",
    );
    write(
        dir.path(),
        "calc/core.py",
        "def add(a, b):\n    return a + b + 1\n",
    );
    write(
        dir.path(),
        "calc/support.py",
        "def pairs():\n    return [(2, 3, 5), (-1, 1, 0)]\n",
    );
    write(
        dir.path(),
        "calc/testcore.py",
        "from calc import add\nfrom calc.support import pairs\n\n\ndef test_add():\n    for a, b, total in pairs():\n        assert add(a, b) == total\n",
    );
    write(dir.path(), ".gitignore", "__pycache__/\n.loopexec/\n");
    commit_t0(dir.path());
    dir
}

#[test]
fn a_helper_module_that_rewrites_a_test_file_at_import_halts_naming_the_file() {
    let repo = package_tests_project();
    // The agent fixes the bug (the check is green) and makes the helper rewrite the test it
    // serves whenever it is imported: the next check would test nothing.
    let agent = "sed -i 's/return a + b + 1/return a + b/' calc/core.py && \
        printf '%s\\n' 'import pathlib' \"pathlib.Path(__file__).with_name('testcore.py').write_text('def test_add():\\\\n    pass\\\\n')\" >> calc/support.py";
    let (r, ev) = run(
        repo.path(),
        "w",
        agent,
        "/usr/bin/python3 -B -m pytest -q -p no:cacheprovider calc",
        &["--no-baseline"],
    );
    assert_check_wrote(&r, &ev, 1, "calc/testcore.py", "modified");
    let check_result = ev.iter().find(|e| e["type"] == "check_result").unwrap();
    assert_eq!(check_result["check_exit"], 0, "the check itself was green");
}

// ---- Runner pinning (`[runner]` of loop.toml) ----

/// A committed cargo project without dependencies or build script: `add` off by one, and its
/// inline test.
fn cargo_project() -> tempfile::TempDir {
    let dir = workdir();
    write(
        dir.path(),
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    write(
        dir.path(),
        "src/lib.rs",
        "pub fn add(a: i64, b: i64) -> i64 {\n    a + b + 1\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add(2, 3), 5);\n    }\n}\n",
    );
    write(dir.path(), ".gitignore", "target/\n.loopexec/\n");
    commit_t0(dir.path());
    dir
}

const HONEST_RUST_FIX: &str = "sed -i 's/a + b + 1/a + b/' src/lib.rs";

fn run_start_config(ev: &[Value]) -> Value {
    ev.iter()
        .find(|e| e["type"] == "run_start")
        .map(|e| e["config"].clone())
        .unwrap_or_else(|| panic!("no run_start in {ev:#?}"))
}

#[test]
fn a_cargo_check_that_writes_only_target_converges() {
    // The default exec policy's cargo is Debian's (/usr/bin): no rustup, nothing pinned.
    assert!(
        Path::new("/usr/bin/cargo").exists(),
        "Debian's cargo is needed in /usr/bin (ci/setup.sh installs it)"
    );
    let repo = cargo_project();
    let (r, ev) = run(
        repo.path(),
        "c",
        HONEST_RUST_FIX,
        "cargo test --offline",
        &["--no-baseline"],
    );
    assert_eq!(r.code, 10, "{r:?} {ev:#?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
    let runner = &run_start_config(&ev)["runner"];
    assert_eq!(runner["rust_toolchain_source"], "no rustup", "{runner}");
    assert!(runner.get("rust_toolchain").is_none(), "{runner}");
}

/// Whether rustup is installed for the operator (only a run outside CI may go without it).
fn rustup_present() -> bool {
    let present = std::process::Command::new("rustup")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        assert!(
            std::env::var_os("CI").is_none(),
            "rustup is needed under CI for the toolchain-pinning test"
        );
        eprintln!("NOT RUN: rustup is not installed (CI=true makes this a failure)");
    }
    present
}

/// loopexec run in place on the host (`--isolation none`): the check's cargo is the operator's,
/// a rustup proxy when rustup is installed (the exec zone binds only the system's, and rustup's
/// directories under /root are closed to the zone's uid). rustup never downloads anything here.
fn run_on_host(repo: &Path, run_id: &str, check: &str) -> (Ran, Vec<Value>) {
    let args = [
        "run",
        "--json",
        "--run-id",
        run_id,
        "--isolation",
        "none",
        "--no-baseline",
        "--exec",
        HONEST_RUST_FIX,
        "--check",
        check,
        "--max-iterations",
        "1",
    ];
    let out = command()
        .current_dir(repo)
        .args(args)
        .env("RUSTUP_AUTO_INSTALL", "0")
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .unwrap();
    let r = from_output(out);
    let ev = events(repo, run_id);
    (r, ev)
}

#[test]
fn a_toolchain_file_naming_a_missing_toolchain_does_not_change_what_the_check_runs() {
    if !rustup_present() {
        return;
    }
    // The check plants the toolchain file itself, before cargo runs: an agent planting it is
    // stopped before any check by the test-surface digest (tests/loop_guards.rs).
    let check = "printf '[toolchain]\\nchannel = \"nonexistent-0.0.1\"\\n' > rust-toolchain.toml && cargo test --offline";
    let repo = cargo_project();
    let (r, ev) = run_on_host(repo.path(), "r", check);
    let check_result = ev
        .iter()
        .find(|e| e["type"] == "check_result")
        .unwrap_or_else(|| panic!("{r:?} {ev:#?}"));
    assert_eq!(
        check_result["check_exit"], 0,
        "the pinned toolchain ran the tests: {check_result:#}"
    );
    let runner = &run_start_config(&ev)["runner"];
    let outside = std::process::Command::new("rustup")
        .args(["show", "active-toolchain"])
        .current_dir("/")
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .unwrap();
    let expected = String::from_utf8_lossy(&outside.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        (
            runner["rust_toolchain"].as_str(),
            runner["rust_toolchain_source"].as_str()
        ),
        (
            Some(expected.as_str()),
            Some("rustup show active-toolchain")
        )
    );

    // Unpinned, the same check runs the toolchain the file names (here: none installed).
    let repo = cargo_project();
    write(
        repo.path(),
        "loop.toml",
        "[runner]\nrust_toolchain = false\n",
    );
    git(repo.path(), &["add", "loop.toml"]);
    git(repo.path(), &["commit", "-q", "-m", "unpinned"]);
    let (r, ev) = run_on_host(repo.path(), "u", check);
    let check_result = ev
        .iter()
        .find(|e| e["type"] == "check_result")
        .unwrap_or_else(|| panic!("{r:?} {ev:#?}"));
    assert_ne!(check_result["check_exit"], 0, "{check_result:#}");
    assert_eq!(
        run_start_config(&ev)["runner"]["rust_toolchain_source"],
        "off"
    );
}

#[test]
fn named_pytest_plugins_are_the_only_ones_loaded_and_safe_path_reaches_the_check() {
    let repo = calc_project();
    write(
        repo.path(),
        "loop.toml",
        "[runner]\npytest_plugins = [\"pytest_cov.plugin\"]\npython_safe_path = true\n",
    );
    // `--cov` exists only with pytest-cov loaded: named, it is (autoload off).
    let check = format!("test \"$PYTEST_DISABLE_PLUGIN_AUTOLOAD\" = 1 && test \"$PYTHONSAFEPATH\" = 1 && {PYTEST} --cov=calc");
    let (r, ev) = run(repo.path(), "y", &honest_fix(), &check, &["--no-baseline"]);
    assert_eq!(r.code, 10, "{r:?} {ev:#?}");
    let runner = &run_start_config(&ev)["runner"];
    assert_eq!(
        runner["pytest_plugins"],
        serde_json::json!(["pytest_cov.plugin"])
    );
    assert_eq!(runner["python_safe_path"], true);
}

#[test]
fn with_no_plugin_named_autoload_is_off_and_an_unnamed_plugin_is_not_loaded() {
    let repo = calc_project();
    write(repo.path(), "loop.toml", "[runner]\npytest_plugins = []\n");
    let check = format!("{PYTEST} --cov=calc");
    let (r, ev) = run(repo.path(), "n", &honest_fix(), &check, &["--no-baseline"]);
    assert_ne!(r.code, 10, "{r:?}");
    let check_result = ev.iter().find(|e| e["type"] == "check_result").unwrap();
    assert_eq!(
        check_result["check_exit"], 4,
        "pytest's usage error: --cov is unknown without pytest-cov: {check_result:#}"
    );
}

#[test]
fn bad_runner_settings_are_refused_with_exit_20_and_nothing_is_written() {
    for (table, named) in [
        ("[runner]\nrust_tolchain = \"stable\"\n", "rust_tolchain"),
        (
            "[runner]\npytest_plugins = \"pytest_cov\"\n",
            "loop.toml line 2: invalid type: string \"pytest_cov\", expected a sequence",
        ),
        (
            "[runner]\npython_safe_path = \"yes\"\n",
            "loop.toml line 2: invalid type: string \"yes\", expected a boolean",
        ),
        (
            "[runner]\npytest_plugins = [\"pytest-cov\"]\n",
            "\"pytest-cov\" is not a Python module name",
        ),
        (
            "[runner]\nrust_toolchain = \"stable; true\"\n",
            "is not a toolchain name",
        ),
    ] {
        let repo = calc_project();
        write(repo.path(), "loop.toml", table);
        let r = loopexec(
            repo.path(),
            &[
                "run", "--json", "--run-id", "b", "--exec", "true", "--check", "true",
            ],
        );
        assert_eq!(r.code, 20, "{table}: {r:?}");
        let v = r.json();
        let message = v["errors"][0]["message"].as_str().unwrap().to_string();
        assert!(message.contains(named), "{table}: {message}");
        assert_eq!(
            r.stdout.lines().count(),
            1,
            "exactly one JSON object: {}",
            r.stdout
        );
        assert!(
            !repo.path().join(".loopexec").exists(),
            "nothing is written for a refused configuration"
        );
    }
}

#[test]
fn a_reference_whose_check_writes_to_its_tree_halts_before_any_agent_call() {
    let repo = calc_project();
    let p = repo.path();
    git(p, &["checkout", "-q", "-b", "solution"]);
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(honest_fix())
        .current_dir(p)
        .status()
        .unwrap();
    assert!(status.success());
    git(p, &["commit", "-q", "-am", "solution"]);
    git(p, &["checkout", "-q", "main"]);
    let check = format!("rm pyproject.toml; {PYTEST}");
    let (r, ev) = run(
        p,
        "f",
        "true",
        &check,
        &["--no-baseline", "--reference", "solution"],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (13, Some("metric_integrity_violation")),
        "{r:?}"
    );
    let detail = r.json()["run"]["detail"].as_str().unwrap().to_string();
    assert!(detail.starts_with("the check of the reference solution wrote to 1 path(s) of the tree it tested: pyproject.toml (deleted)"), "{detail}");
    assert!(
        ev.iter().all(|e| e["type"] != "exec_result"),
        "the agent was never called: {ev:#?}"
    );
}

#[test]
fn explain_halt_and_report_show_what_the_check_wrote() {
    let repo = calc_project();
    let check = format!("rm .gitignore && {PYTEST}");
    let (r, _) = run(repo.path(), "e", &honest_fix(), &check, &["--no-baseline"]);
    assert_eq!(r.code, 13, "{r:?}");
    let explain = loopexec(repo.path(), &["explain-halt", "--json", "e"]).json();
    let guard = &explain["explanation"]["guards"][0];
    assert_eq!(
        (guard["guard"].as_str(), guard["stage"].as_str()),
        (Some("metric_integrity"), Some("after_check")),
        "{explain:#}"
    );
    assert_eq!(
        guard["findings"][0],
        serde_json::json!({"path": ".gitignore", "what": "deleted by the check"})
    );
    let report = loopexec(repo.path(), &["report", "e"]);
    assert!(
        report
            .stdout
            .contains("guard metric_integrity (metric_integrity_violation)"),
        "{}",
        report.stdout
    );
}
