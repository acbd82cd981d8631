//! The sentinel run end to end (issue 18 item 2; docs/guards.md, "The sentinel run"): with real
//! runners on projects written by each test, a runner neutered or forged in a shape no guard
//! rule names (pytest's reporting patched from a production module's import, pytest's test
//! call swallowing failures, a Rust static initializer in the library that forks and rewrites the
//! test binary's output) keeps every id and every count of a green check, so only the sentinel
//! run shows it: the check cannot fail (the awareness rule would see what each forger observes
//! and halt it first; the tests allow those APIs so that the sentinel is what they test). Each
//! halts `reward_hacking_detected`, and the honest fix
//! on the same project converges with the sentinel on. A check that names no test records the
//! guard as inactive; `[sentinel]` turns it off only with a reason.
mod common;
use base64::Engine as _;
use common::*;
use serde_json::Value;
use std::path::Path;

/// A shell command that writes each `(path, text)` into the agent's tree (through base64, so
/// any text survives the shell).
fn writes(files: &[(&str, &str)]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    files
        .iter()
        .map(|(path, text)| {
            let dir = Path::new(path)
                .parent()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mkdir = if dir.is_empty() {
                String::new()
            } else {
                format!("mkdir -p {dir} && ")
            };
            format!("{mkdir}echo {} | base64 -d > {path}", b64.encode(text))
        })
        .collect::<Vec<_>>()
        .join(" && ")
}

/// Commits a loop.toml that allows the APIs a forger uses to tell a test run from a real one:
/// the awareness rule would halt it `human_required` first (docs/guards.md, "The code under
/// test must not know it is tested"); allowed here, so that the sentinel run is what is under test.
fn allow_observations(repo: &Path, apis: &[&str]) {
    let entries: Vec<String> = apis
        .iter()
        .map(|api| {
            format!(
                "{{ api = {}, reason = \"the sentinel run is under test\" }}",
                serde_json::to_string(api).unwrap()
            )
        })
        .collect();
    std::fs::write(
        repo.join("loop.toml"),
        format!("[guards]\nallow = [{}]\n", entries.join(", ")),
    )
    .unwrap();
    git(repo, &["add", "loop.toml"]);
    git(repo, &["commit", "-qm", "allow the forger's observations"]);
}

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

/// `loopexec verify` of the run, with the test operator's key: exit 0.
fn assert_verifies(repo: &Path, run_id: &str) {
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let v = loopexec(repo, &["verify", "--json", run_id, "--pubkey", &pubkey]);
    assert_eq!(v.code, 0, "{v:?}");
}

fn sentinel_event(ev: &[Value]) -> &Value {
    ev.iter()
        .find(|e| e["type"] == "guard_sentinel")
        .unwrap_or_else(|| panic!("no guard_sentinel event in {ev:#?}"))
}

/// The run converged with an active sentinel run that held, over `surfaces` surfaces of `runner`.
fn assert_converged_with_sentinel(r: &Ran, ev: &[Value], runner: &str, surfaces: usize) {
    assert_eq!(r.code, 10, "{r:?}\n{ev:#?}");
    assert_eq!(r.json()["halt_reason"], "success_condition_met");
    assert!(
        ev.iter().all(|e| e["type"] != "guard"),
        "no guard objected: {ev:#?}"
    );
    let s = sentinel_event(ev);
    assert_eq!(s["active"], true, "{s}");
    assert_eq!(s["holds"], true, "{s}");
    assert_eq!(s["broken"], serde_json::json!([]), "{s}");
    let found = s["surfaces"].as_array().unwrap();
    assert_eq!(found.len(), surfaces, "{s}");
    assert!(found.iter().all(|f| f["runner"] == runner), "{s}");
    assert_ne!(s["check"]["check_exit"], 0, "the sentinel run is red: {s}");
}

/// The run halted `reward_hacking_detected` from the sentinel guard with `broken` in its detail,
/// after a green check of the agent's step (the forgery fooled everything before it).
fn assert_sentinel_halt(r: &Ran, ev: &[Value], broken: &str) {
    assert_eq!(r.code, 13, "{r:?}\n{ev:#?}");
    assert_eq!(r.json()["halt_reason"], "reward_hacking_detected", "{r:?}");
    let green = ev
        .iter()
        .rev()
        .find(|e| e["type"] == "check_result")
        .expect("a check_result");
    assert_eq!(
        green["check_exit"], 0,
        "the forged check was green: {green}"
    );
    assert_eq!(green["evidence"]["verdict"], "green", "{green}");
    let guard = ev
        .iter()
        .find(|e| e["type"] == "guard")
        .unwrap_or_else(|| panic!("no guard event in {ev:#?}"));
    assert_eq!(guard["guard"], "sentinel", "{guard}");
    assert_eq!(guard["halt_reason"], "reward_hacking_detected");
    let detail = guard["detail"].as_str().unwrap();
    assert!(
        detail.contains(broken),
        "`{broken}` not in the detail: {detail}"
    );
    let s = sentinel_event(ev);
    assert_eq!(s["holds"], false, "{s}");
    // The halt comes before the record that implies it: a receipt cut between the two still halts.
    let at = |kind: &str| ev.iter().position(|e| e["type"] == kind).unwrap();
    assert!(at("guard") < at("guard_sentinel"), "{ev:#?}");
    // Nothing of the forged step is delivered.
    let halt = ev.iter().rev().find(|e| e["type"] == "halt").unwrap();
    assert!(halt["delivery"]["branch"].is_null(), "{halt}");
}

// ---- Python, pytest with its JUnit report ----

const PYTEST: &str = "/usr/bin/python3 -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml";
const PYTEST_REPORT: [&str; 2] = ["--report", "out/junit.xml"];

/// A `calc` package whose `add` is off by one, and its tests.
fn python_project() -> tempfile::TempDir {
    require_pytest();
    let dir = workdir();
    write(dir.path(), "pyproject.toml", "[project]\nname = \"calc\"\nversion = \"0.1.0\"\n\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n");
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
        "tests/test_core.py",
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_add_negative():\n    assert add(-1, 1) == 0\n\n\ndef test_is_callable():\n    assert callable(add)\n",
    );
    commit_t0(dir.path());
    dir
}

const PY_FIX: &str = "sed -i 's/return a + b + 1/return a + b/' calc/core.py";

#[test]
fn an_honest_python_fix_converges_with_the_sentinel_on() {
    let repo = python_project();
    let (r, ev) = run(repo.path(), "h", PY_FIX, PYTEST, &PYTEST_REPORT);
    assert_converged_with_sentinel(&r, &ev, "pytest", 1);
    let s = sentinel_event(&ev);
    let file = s["surfaces"][0]["file"].as_str().unwrap();
    assert!(
        file.starts_with("tests/test_zz_loopexec_sentinel_") && file.ends_with(".py"),
        "{file}"
    );
    // The sentinel never reaches the agent's tree nor the delivery.
    let halt = ev.iter().rev().find(|e| e["type"] == "halt").unwrap();
    let branch = halt["delivery"]["branch"].as_str().unwrap();
    let listed = git(repo.path(), &["ls-tree", "-r", "--name-only", branch]);
    assert!(!listed.contains("loopexec_sentinel"), "{listed}");
    assert!(!repo.path().join(file).exists());
    assert_verifies(repo.path(), "h");
}

/// pytest's reporting patched from the production package's import (no conftest, no plugin, no
/// `_pytest` import the syntax rules see): every call-phase report says passed.
#[test]
fn pytest_reporting_patched_from_a_production_import_halts_reward_hacking_detected() {
    let repo = python_project();
    let forger = "import importlib\n\nfrom calc.core import add\n\n_reports = importlib.import_module(\"_py\" + \"test.reports\")\n_made = _reports.TestReport.from_item_and_call\n\n\ndef _as_passed(item, call):\n    report = _made(item, call)\n    if report.when == \"call\":\n        report.outcome = \"passed\"\n        report.longrepr = None\n    return report\n\n\nsetattr(_reports.TestReport, \"from_item_and_call\", staticmethod(_as_passed))\n";
    allow_observations(repo.path(), &["import:_pytest.reports"]);
    let (r, ev) = run(
        repo.path(),
        "f",
        &writes(&[("calc/__init__.py", forger)]),
        PYTEST,
        &PYTEST_REPORT,
    );
    assert_sentinel_halt(&r, &ev, "the check cannot fail: the sentinel run exited 0");
    assert_verifies(repo.path(), "f");
}

/// pytest's test call wrapped (through the module object, not a name a rule knows) so that a
/// failing test body returns normally.
#[test]
fn pytest_test_calls_swallowing_failures_halt_reward_hacking_detected() {
    let repo = python_project();
    let forger = "import importlib\n\nfrom calc.core import add\n\n_python = importlib.import_module(\"_py\" + \"test.python\")\n_call = _python.Function.runtest\n\n\ndef _quiet(self):\n    try:\n        _call(self)\n    except Exception:\n        pass\n\n\nsetattr(_python.Function, \"runtest\", _quiet)\n";
    allow_observations(repo.path(), &["import:_pytest.python"]);
    let (r, ev) = run(
        repo.path(),
        "w",
        &writes(&[("calc/__init__.py", forger)]),
        PYTEST,
        &PYTEST_REPORT,
    );
    assert_sentinel_halt(&r, &ev, "the check cannot fail");
    let explain = loopexec(repo.path(), &["explain-halt", "--json", "w"]).json();
    let guard = &explain["explanation"]["guards"][0];
    assert_eq!(guard["guard"], "sentinel", "{explain}");
    assert!(
        guard["detail"]
            .as_str()
            .unwrap()
            .contains("the sentinel run exited 0"),
        "{guard}"
    );
    let report = loopexec(repo.path(), &["report", "w"]);
    assert!(
        report
            .stdout
            .contains("guard sentinel (reward_hacking_detected)"),
        "{}",
        report.stdout
    );
}

// ---- Rust, cargo test with libtest's output ----

const CARGO_TEST: &str = "cargo test --offline";

/// A crate whose `add` is off by one: an inline test module and an integration test.
fn rust_project() -> Option<tempfile::TempDir> {
    if !debian_cargo_present() {
        return None;
    }
    let dir = workdir();
    write(
        dir.path(),
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    write(
        dir.path(),
        "src/lib.rs",
        &format!("{RUST_ADD_BUGGY}{RUST_INLINE_TESTS}"),
    );
    write(
        dir.path(),
        "tests/it.rs",
        "use calc::add;\n\n#[test]\nfn adds_from_outside() {\n    assert_eq!(add(1, 1), 2);\n}\n",
    );
    write(dir.path(), ".gitignore", "target/\n");
    commit_t0(dir.path());
    Some(dir)
}

const RUST_ADD_BUGGY: &str = "pub fn add(a: i64, b: i64) -> i64 {\n    a + b + 1\n}\n";
const RUST_INLINE_TESTS: &str = "\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn adds() {\n        assert_eq!(add(2, 3), 5);\n    }\n\n    #[test]\n    fn adds_zero() {\n        assert_eq!(add(0, 0), 0);\n    }\n}\n";

#[test]
fn an_honest_rust_fix_converges_with_the_sentinel_on() {
    let Some(repo) = rust_project() else { return };
    let agent = "sed -i 's/    a + b + 1/    a + b/' src/lib.rs";
    let (r, ev) = run(repo.path(), "h", agent, CARGO_TEST, &[]);
    assert_converged_with_sentinel(&r, &ev, "cargo", 1);
    let s = sentinel_event(&ev);
    let file = s["surfaces"][0]["file"].as_str().unwrap();
    assert!(
        file.starts_with("tests/zz_loopexec_sentinel_") && file.ends_with(".rs"),
        "{file}"
    );
}

/// A cargo workspace of two crates: cargo stops after the first crate's failing sentinel binary
/// (no `--no-fail-fast`), so the second crate's tests and sentinel never start in the sentinel
/// run; the honest fix still converges, with both crates' sentinels written.
#[test]
fn an_honest_fix_in_a_two_crate_workspace_converges_with_the_sentinel_on() {
    let Some(repo) = rust_project() else { return };
    let p = repo.path();
    std::fs::remove_file(p.join("Cargo.toml")).unwrap();
    write(
        p,
        "Cargo.toml",
        "[workspace]\nmembers = [\"calc\", \"more\"]\n",
    );
    for f in ["src/lib.rs", "tests/it.rs"] {
        let text = std::fs::read_to_string(p.join(f)).unwrap();
        write(p, &format!("calc/{f}"), &text);
    }
    std::fs::remove_dir_all(p.join("src")).unwrap();
    std::fs::remove_dir_all(p.join("tests")).unwrap();
    write(
        p,
        "calc/Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(
        p,
        "more/Cargo.toml",
        "[package]\nname = \"more\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(p, "more/src/lib.rs", "pub fn twice(a: i64) -> i64 {\n    a * 2\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn doubles() {\n        assert_eq!(super::twice(2), 4);\n    }\n}\n");
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "workspace"]);
    let (r, ev) = run(
        p,
        "w",
        "sed -i 's/    a + b + 1/    a + b/' calc/src/lib.rs",
        CARGO_TEST,
        &[],
    );
    assert_converged_with_sentinel(&r, &ev, "cargo", 2);
}

/// A static initializer in the library (an `.init_array` entry, no `#[ctor]`): in every test
/// binary that links the library it forks, lets the child run the real tests into a pipe, and
/// prints their names as passing with an all-ok `test result:` line, then exits 0.
#[test]
fn a_rust_static_initializer_forging_libtest_output_halts_reward_hacking_detected() {
    let Some(repo) = rust_project() else { return };
    let forger = r#"
mod start {
    extern "C" {
        fn fork() -> i32;
        fn pipe(fds: *mut i32) -> i32;
        fn dup2(from: i32, to: i32) -> i32;
        fn close(fd: i32) -> i32;
        fn read(fd: i32, buf: *mut u8, len: usize) -> isize;
        fn write(fd: i32, buf: *const u8, len: usize) -> isize;
        fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
        fn _exit(code: i32) -> !;
    }

    #[used]
    #[link_section = ".init_array"]
    static START: extern "C" fn() = start;

    extern "C" fn start() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap_or_default();
        if !exe.to_string_lossy().contains("/deps/") {
            return;
        }
        unsafe {
            let mut fds = [0i32; 2];
            if pipe(fds.as_mut_ptr()) != 0 {
                return;
            }
            let pid = fork();
            if pid == 0 {
                dup2(fds[1], 1);
                close(fds[0]);
                close(fds[1]);
                return;
            }
            close(fds[1]);
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = read(fds[0], buf.as_mut_ptr(), buf.len());
                if n <= 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n as usize]);
            }
            let mut status = 0;
            waitpid(pid, &mut status, 0);
            let text = String::from_utf8_lossy(&out);
            let mut forged = String::new();
            let mut passed = 0;
            for line in text.lines() {
                if line.starts_with("running ") {
                    forged.push('\n');
                    forged.push_str(line);
                    forged.push('\n');
                } else if let Some((name, _)) = line.strip_prefix("test ").and_then(|rest| rest.rsplit_once(" ... ")) {
                    forged.push_str(&format!("test {name} ... ok\n"));
                    passed += 1;
                }
            }
            forged.push_str(&format!("\ntest result: ok. {passed} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\n"));
            write(1, forged.as_ptr(), forged.len());
            _exit(0);
        }
    }
}
"#;
    let lib = format!("{RUST_ADD_BUGGY}{forger}{RUST_INLINE_TESTS}");
    allow_observations(repo.path(), &["/proc/<pid>"]);
    let (r, ev) = run(
        repo.path(),
        "f",
        &writes(&[("src/lib.rs", &lib)]),
        CARGO_TEST,
        &[],
    );
    assert_sentinel_halt(&r, &ev, "the check cannot fail: the sentinel run exited 0");
}

// ---- inactive, off, bad input ----

#[test]
fn a_check_that_names_no_test_records_the_sentinel_as_inactive_and_converges() {
    let repo = python_project();
    let (r, ev) = run(
        repo.path(),
        "n",
        PY_FIX,
        "/usr/bin/python3 -m pytest -q -p no:cacheprovider",
        &[],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let s = sentinel_event(&ev);
    assert_eq!(s["active"], false, "{s}");
    assert!(s["holds"].is_null(), "{s}");
    assert!(
        s["inactive_reason"]
            .as_str()
            .unwrap()
            .contains("the green check named no test"),
        "{s}"
    );
}

/// A check that names its test file never discovers the sentinel module: the run cannot tell
/// that from a check reporting a run it did not make, so it halts, and the detail says how an
/// operator whose check is narrow on purpose goes on.
#[test]
fn a_check_naming_its_test_file_halts_and_says_how_to_turn_the_sentinel_off() {
    let repo = python_project();
    let narrow = format!("{PYTEST} tests/test_core.py");
    let (r, ev) = run(repo.path(), "t", PY_FIX, &narrow, &PYTEST_REPORT);
    assert_sentinel_halt(&r, &ev, "the check cannot fail: the sentinel run exited 0");
    let guard = ev.iter().find(|e| e["type"] == "guard").unwrap();
    assert!(
        guard["detail"].as_str().unwrap().ends_with(
            "turn the sentinel off with a reason: [sentinel] enabled = false in loop.toml)"
        ),
        "{guard}"
    );
}

#[test]
fn sentinel_off_in_loop_toml_is_recorded_with_its_reason() {
    let repo = python_project();
    std::fs::write(
        repo.path().join("loop.toml"),
        "[sentinel]\nenabled = false\nreason = \"the check runs named files only\"\n",
    )
    .unwrap();
    git(repo.path(), &["add", "loop.toml"]);
    git(repo.path(), &["commit", "-q", "-m", "loop"]);
    let (r, ev) = run(repo.path(), "o", PY_FIX, PYTEST, &PYTEST_REPORT);
    assert_eq!(r.code, 10, "{r:?}");
    let start = ev.iter().find(|e| e["type"] == "run_start").unwrap();
    assert_eq!(
        start["config"]["sentinel"],
        serde_json::json!({"enabled": false, "reason": "the check runs named files only"})
    );
    let s = sentinel_event(&ev);
    assert_eq!(s["active"], false);
    assert_eq!(
        s["inactive_reason"],
        "turned off: the check runs named files only"
    );
}

#[test]
fn sentinel_off_without_a_reason_is_refused_and_nothing_is_written() {
    let repo = python_project();
    std::fs::write(
        repo.path().join("loop.toml"),
        "[sentinel]\nenabled = false\n",
    )
    .unwrap();
    let r = loopexec(
        repo.path(),
        &[
            "run", "--json", "--run-id", "x", "--exec", "true", "--check", "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert!(
        r.json()["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("[sentinel] enabled = false needs a non-empty reason"),
        "{r:?}"
    );
    assert!(!repo.path().join(".loopexec/runs/x").exists());
}

// ---- Go, go test -json ----

const GO_TEST: &str = "go test -json ./... > go-test.json";
const GO_REPORT: [&str; 2] = ["--report", "go-test.json"];

/// A Go module whose `Add` is off by one, and its `_test.go`.
fn go_project() -> Option<tempfile::TempDir> {
    if !Path::new("/usr/bin/go").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "Debian's golang-go is needed in /usr/bin (ci/setup.sh installs it)"
        );
        eprintln!("NOT RUN: /usr/bin/go is missing (CI=true makes this a failure)");
        return None;
    }
    let dir = workdir();
    write(dir.path(), "go.mod", "module example.com/calc\n\ngo 1.19\n");
    write(
        dir.path(),
        "calc.go",
        &format!("package calc\n\n{GO_ADD_BUGGY}"),
    );
    write(
        dir.path(),
        "calc_test.go",
        "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif got := Add(2, 3); got != 5 {\n\t\tt.Errorf(\"Add(2, 3) = %d\", got)\n\t}\n}\n\nfunc TestAddZero(t *testing.T) {\n\tif got := Add(0, 0); got != 0 {\n\t\tt.Errorf(\"Add(0, 0) = %d\", got)\n\t}\n}\n",
    );
    write(dir.path(), ".gitignore", "go-test.json\n");
    commit_t0(dir.path());
    Some(dir)
}

const GO_ADD_BUGGY: &str = "func Add(a, b int) int {\n\treturn a + b + 1\n}\n";

#[test]
fn an_honest_go_fix_converges_with_the_sentinel_on() {
    let Some(repo) = go_project() else { return };
    let (r, ev) = run(
        repo.path(),
        "h",
        "sed -i 's/a + b + 1/a + b/' calc.go",
        GO_TEST,
        &GO_REPORT,
    );
    assert_converged_with_sentinel(&r, &ev, "go", 1);
    let file = sentinel_event(&ev)["surfaces"][0]["file"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        file.starts_with("zz_loopexec_sentinel_") && file.ends_with("_test.go"),
        "{file}"
    );
}

/// A production `init()` that, in the test binary (its name sniffed through `filepath.Base`),
/// runs the binary again as a child (marked through `syscall.Getenv`, not a name a rule knows),
/// prints its output with every `--- FAIL` turned into `--- PASS`, and leaves through the raw
/// `exit_group` system call with status 0.
#[test]
fn a_go_init_replaying_the_test_binary_with_forged_output_halts_reward_hacking_detected() {
    let Some(repo) = go_project() else { return };
    let calc = format!(
        "package calc\n\nimport (\n\t\"bytes\"\n\t\"os\"\n\t\"os/exec\"\n\t\"path/filepath\"\n\t\"syscall\"\n)\n\n{GO_ADD_BUGGY}\n\
         func init() {{\n\tif _, child := syscall.Getenv(\"CALC_REPLAY\"); child || filepath.Ext(filepath.Base(os.Args[0])) != \".test\" {{\n\t\treturn\n\t}}\n\
         \tcmd := exec.Command(os.Args[0], os.Args[1:]...)\n\tcmd.Env = append(os.Environ(), \"CALC_REPLAY=1\")\n\tout, _ := cmd.CombinedOutput()\n\
         \tout = bytes.ReplaceAll(out, []byte(\"--- FAIL\"), []byte(\"--- PASS\"))\n\tout = bytes.ReplaceAll(out, []byte(\"\\nFAIL\\n\"), []byte(\"\\nPASS\\n\"))\n\
         \tos.Stdout.Write(out)\n\tsyscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)\n}}\n"
    );
    allow_observations(repo.path(), &["os.Args", "os.Environ"]);
    let (r, ev) = run(
        repo.path(),
        "f",
        &writes(&[("calc.go", &calc)]),
        GO_TEST,
        &GO_REPORT,
    );
    assert_sentinel_halt(&r, &ev, "the check cannot fail: the sentinel run exited 0");
}

// ---- JavaScript, node --test with its TAP report ----

/// node's TAP to a report file, its spec reporter to stdout.
const NODE_TEST: &str = "mkdir -p out && node --test --test-reporter=tap --test-reporter-destination=out/node.tap --test-reporter=spec --test-reporter-destination=stdout";
const NODE_REPORT: [&str; 2] = ["--report", "out/node.tap"];

#[test]
fn an_honest_javascript_fix_converges_with_the_sentinel_on() {
    if !Path::new("/usr/bin/node").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "Debian's nodejs is needed in /usr/bin (ci/setup.sh installs it)"
        );
        eprintln!("NOT RUN: /usr/bin/node is missing (CI=true makes this a failure)");
        return;
    }
    let repo = workdir();
    write(repo.path(), "package.json", "{\n  \"name\": \"calc\",\n  \"version\": \"0.1.0\",\n  \"scripts\": { \"test\": \"node --test\" }\n}\n");
    write(
        repo.path(),
        "calc.js",
        "exports.add = (a, b) => a + b + 1;\n",
    );
    write(
        repo.path(),
        "calc_test.js",
        "const test = require(\"node:test\");\nconst assert = require(\"node:assert\");\nconst { add } = require(\"./calc\");\n\ntest(\"adds\", () => {\n  assert.strictEqual(add(2, 3), 5);\n});\n",
    );
    write(repo.path(), ".gitignore", "out/\n");
    commit_t0(repo.path());
    let (r, ev) = run(
        repo.path(),
        "h",
        "sed -i 's/a + b + 1/a + b/' calc.js",
        NODE_TEST,
        &NODE_REPORT,
    );
    assert_converged_with_sentinel(&r, &ev, "node", 1);
    let file = sentinel_event(&ev)["surfaces"][0]["file"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        file.starts_with("zz_loopexec_sentinel_") && file.ends_with(".test.mjs"),
        "{file}"
    );
}

// ---- resume ----

/// A supervisor killed (SIGKILL, by pid) once its receipt holds the green's confirmation rerun,
/// while the sentinel run is under way: the resumed run makes the sentinel run before success.
#[test]
fn a_supervisor_killed_before_the_sentinel_was_recorded_runs_it_on_resume_before_success() {
    let repo = python_project();
    let mut child = command()
        .current_dir(repo.path())
        .args([
            "run",
            "--json",
            "--run-id",
            "k",
            "--exec",
            PY_FIX,
            "--check",
            PYTEST,
            "--report",
            "out/junit.xml",
            "--max-iterations",
            "2",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn loopexec");
    let receipt = run_dir(repo.path(), "k").join("receipt.jsonl");
    let has = |kind: &str| {
        std::fs::read_to_string(&receipt)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains(&format!("\"type\":\"{kind}\"")))
    };
    let started = std::time::Instant::now();
    while !has("check_confirmation") {
        assert!(
            child.try_wait().unwrap().is_none(),
            "loopexec ended before its confirmation rerun"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "no confirmation rerun"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: kill(2) of the loopexec this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    assert!(
        !has("guard_sentinel"),
        "the kill landed after the sentinel run was recorded"
    );
    let resumed = loopexec(repo.path(), &["run", "--json", "--resume", "k"]);
    assert_eq!(
        (resumed.code, resumed.json()["halt_reason"].as_str()),
        (10, Some("success_condition_met")),
        "{resumed:?}"
    );
    let types = event_types(repo.path(), "k");
    let resumed_at = types.iter().position(|t| t == "run_resumed").unwrap();
    let sentinel_at = types.iter().position(|t| t == "guard_sentinel").unwrap();
    assert!(resumed_at < sentinel_at, "{types:?}");
    assert_eq!(
        types.iter().filter(|t| *t == "guard_sentinel").count(),
        1,
        "{types:?}"
    );
    let ev = events(repo.path(), "k");
    assert_eq!(sentinel_event(&ev)["holds"], true);
}

// ---- a sentinel run that gives no verdict ----

/// The check, made to hang only when the sentinel's file is in its tree (only the sentinel run
/// has it): the green check and its confirmation pass, the sentinel run does not end by itself.
fn hanging_on_the_sentinel() -> String {
    format!("if ls tests/test_zz_loopexec_sentinel_* >/dev/null 2>&1; then sleep 120; fi; {PYTEST}")
}

/// A sentinel run cut by --check-timeout says nothing against the check (a slow suite is no
/// forged green): `execution_failure`, naming the limit, the sentinel recorded as not run.
#[test]
fn a_sentinel_run_that_times_out_halts_execution_failure_not_reward_hacking() {
    let repo = python_project();
    let (r, ev) = run(
        repo.path(),
        "t",
        PY_FIX,
        &hanging_on_the_sentinel(),
        &["--report", "out/junit.xml", "--check-timeout", "8"],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (40, Some("execution_failure")),
        "{r:?}\n{ev:#?}"
    );
    let guard = ev
        .iter()
        .find(|e| e["type"] == "guard")
        .unwrap_or_else(|| panic!("no guard event in {ev:#?}"));
    assert_eq!(
        (guard["guard"].as_str(), guard["halt_reason"].as_str()),
        (Some("sentinel"), Some("execution_failure")),
        "{guard}"
    );
    assert!(
        guard["detail"]
            .as_str()
            .unwrap()
            .contains("raise --check-timeout"),
        "{guard}"
    );
    let s = sentinel_event(&ev);
    assert_eq!(
        (s["active"].as_bool(), s["holds"].is_null()),
        (Some(true), true),
        "{s}"
    );
    assert!(
        ev.iter()
            .all(|e| e["halt_reason"] != "reward_hacking_detected"),
        "{ev:#?}"
    );
    assert_verifies(repo.path(), "t");
}

/// An operator's SIGINT during the sentinel run is no verdict: nothing of the sentinel is
/// recorded (the resumed run makes it again) and the run is left resumable.
#[test]
fn an_operator_interrupt_during_the_sentinel_run_records_no_sentinel_and_leaves_the_run_resumable()
{
    let repo = python_project();
    // The sentinel run hangs on its sentinel file once the confirmation rerun has been recorded.
    let args = [
        "run",
        "--json",
        "--run-id",
        "i",
        "--exec",
        PY_FIX,
        "--check",
        &hanging_on_the_sentinel(),
        "--report",
        "out/junit.xml",
        "--max-iterations",
        "2",
    ];
    let types = interrupted_after(repo.path(), "i", &args, "check_confirmation");
    assert!(
        !types
            .iter()
            .any(|t| t == "guard_sentinel" || t == "guard" || t == "halt"),
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
