//! The check runs what would be committed, and the whole test surface is frozen (issue 18,
//! items 5 and 6), end to end with the real runners on small projects each test writes:
//!
//! - what git would not commit never reaches the check's copy nor the delivery: a fix only in an
//!   unchecked-hash `.pyc` under `__pycache__` (the `.py` left buggy) is not seen by the check's
//!   Python; an ignored prebuilt `.node` is not in the check's copy;
//! - a build artefact the tree would commit halts `metric_integrity_violation` naming it: a
//!   sourceless `.pyc` in place of its `.py`, a `.node` addon, a shared object renamed `.dat`;
//! - test data is frozen wherever the tools keep it: a Go `testdata/` golden and an insta
//!   snapshot rewritten, a jest-style `__snapshots__/` file deleted halt `blocked_path_modified`;
//!   a golden the agent deleted and the check wrote afresh is `created by the check`;
//! - vendored trees keep their t0 files: a patched runner in `node_modules/` and a file joining a
//!   package in `vendor/` halt, while a new package under `node_modules/` converges;
//! - honest agents that run the tests in their own zone (leaving `__pycache__/`,
//!   `.pytest_cache/`, cargo's `target/`) converge, and none of it is delivered.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

fn run(
    repo: &Path,
    run_id: &str,
    agent: &str,
    check: &str,
    max_iterations: &str,
) -> (Ran, Vec<Value>) {
    let r = loopexec(
        repo,
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            run_id,
            "--exec",
            agent,
            "--check",
            check,
            "--max-iterations",
            max_iterations,
        ],
    );
    let ev = events(repo, run_id);
    (r, ev)
}

/// Asserts the run halted `blocked_path_modified` before its check, its snapshot naming `path`
/// as `change`.
fn assert_blocked(r: &Ran, ev: &[Value], path: &str, change: &str) {
    assert_eq!(r.json()["halt_reason"], "blocked_path_modified", "{r:?}");
    let snap = ev
        .iter()
        .find(|e| e["type"] == "snapshot")
        .unwrap_or_else(|| panic!("no snapshot: {ev:#?}"));
    let changes = snap["protected_changes"].as_array().unwrap();
    assert!(
        changes
            .iter()
            .any(|c| c["path"] == path && c["change"] == change),
        "{path} {change} not in {changes:#?}"
    );
    assert!(
        ev.iter().all(|e| e["type"] != "check_result"),
        "the check never ran on the step"
    );
}

/// The paths of the delivered branch `loopexec/<run_id>`.
fn delivered_paths(repo: &Path, run_id: &str) -> Vec<String> {
    git(
        repo,
        &[
            "ls-tree",
            "-r",
            "--name-only",
            &format!("loopexec/{run_id}"),
        ],
    )
    .lines()
    .map(str::to_string)
    .collect()
}

// ---- Python: what the check's interpreter runs ----

/// A pytest project whose `.gitignore` does not name `__pycache__/`: `calc.add` off by one.
fn python_project() -> tempfile::TempDir {
    require_pytest();
    let dir = workdir();
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
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    );
    write(dir.path(), ".gitignore", ".loopexec/\n");
    commit_t0(dir.path());
    dir
}

/// pytest with bytecode on: it would read any `__pycache__` it finds.
const PYTEST: &str = "/usr/bin/python3 -m pytest -q -p no:cacheprovider tests";

/// Compiles the fixed `add` into `target` (a path the script evaluates in Python).
fn compile_fixed_add(target: &str) -> String {
    format!(
        "/usr/bin/python3 -c \"import importlib.util, py_compile; open('/tmp/fixed.py', 'w').write('def add(a, b):\\n    return a + b\\n'); \
         py_compile.compile('/tmp/fixed.py', cfile={target}, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)\""
    )
}

#[test]
fn a_fix_only_in_an_unchecked_hash_pyc_under_pycache_is_not_seen_by_the_check() {
    let repo = python_project();
    // Without the pycache hidden and PYTHONPYCACHEPREFIX, CPython imports this bytecode (an
    // unchecked hash is never compared with core.py) and the buggy source passes.
    let agent = compile_fixed_add("importlib.util.cache_from_source('calc/core.py')");
    let (r, ev) = run(repo.path(), "pyc", &agent, PYTEST, "1");
    assert_ne!(r.code, 10, "{r:?}");
    assert_eq!(
        ev.iter().find(|e| e["type"] == "exec_result").unwrap()["exit_code"],
        0,
        "the agent compiled its bytecode: {ev:#?}"
    );
    let check = ev
        .iter()
        .find(|e| e["type"] == "check_result")
        .unwrap_or_else(|| panic!("no check: {ev:#?}"));
    assert_ne!(
        check["check_exit"], 0,
        "the check ran the buggy core.py: {check}"
    );
    let t0 = ev.iter().find(|e| e["type"] == "workspace").unwrap()["tree_id"].clone();
    let snap = ev.iter().find(|e| e["type"] == "snapshot").unwrap();
    assert_eq!(
        snap["tree_id"], t0,
        "the bytecode cache is not part of the tree"
    );
    assert!(
        ev.iter().all(|e| e["type"] != "guard"),
        "a cache is left out, not a finding: {ev:#?}"
    );
}

#[test]
fn a_sourceless_pyc_in_place_of_its_py_halts_naming_it() {
    let repo = python_project();
    let agent = format!(
        "{} && rm calc/core.py",
        compile_fixed_add("'calc/core.pyc'")
    );
    let (r, ev) = run(repo.path(), "sourceless", &agent, PYTEST, "2");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "calc/core.pyc",
        "build artefact in the tree: Python bytecode (by its name)",
    );
}

#[test]
fn an_honest_agent_that_runs_pytest_in_its_zone_converges_and_delivers_no_cache() {
    let repo = python_project();
    // Its own run leaves calc/__pycache__/, tests/__pycache__/ and .pytest_cache/ in its layer.
    let agent = "sed -i 's/a + b + 1/a + b/' calc/core.py && /usr/bin/python3 -m pytest -q tests";
    let (r, ev) = run(repo.path(), "honest", agent, PYTEST, "2");
    assert_eq!(r.code, 10, "{r:?} {ev:#?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
    let delivered = delivered_paths(repo.path(), "honest");
    assert_eq!(
        delivered,
        vec![
            ".gitignore",
            "calc/__init__.py",
            "calc/core.py",
            "tests/test_core.py"
        ],
        "no __pycache__ delivered"
    );
    // The receipt says what was left out, and why.
    let snapshot = ev
        .iter()
        .find(|e| e["type"] == "snapshot")
        .expect("snapshot event");
    let left = &snapshot["left_out"];
    let named: Vec<&str> = left["named"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(left["count"].as_u64(), Some(named.len() as u64), "{left}");
    for cache in ["calc/__pycache__ (cache)", "tests/__pycache__ (cache)"] {
        assert!(named.contains(&cache), "{cache} not in {named:?}");
    }
    assert_eq!(left["sha256"].as_str().map(str::len), Some(64), "{left}");
}

// ---- JavaScript: native addons ----

/// A node --test project: `add` off by one; `.gitignore` names node-gyp's `build/`.
fn node_project() -> tempfile::TempDir {
    let dir = workdir();
    write(
        dir.path(),
        "package.json",
        "{\n  \"name\": \"calc\",\n  \"version\": \"0.1.0\",\n  \"dependencies\": {}\n}\n",
    );
    write(
        dir.path(),
        "calc.js",
        "exports.add = (a, b) => a + b + 1;\n",
    );
    write(
        dir.path(),
        "calc_test.js",
        "const test = require(\"node:test\");\nconst assert = require(\"node:assert\");\nconst { add } = require(\"./calc\");\n\ntest(\"adds\", () => {\n  assert.strictEqual(add(2, 3), 5);\n});\n",
    );
    write(dir.path(), ".gitignore", "build/\n.loopexec/\n");
    commit_t0(dir.path());
    dir
}

#[test]
fn a_node_addon_in_the_tree_halts_naming_it() {
    let repo = node_project();
    let agent = "mkdir -p native && cp /bin/true native/calc.node && echo 'module.exports = require(\"./native/calc.node\");' > calc.js";
    let (r, ev) = run(repo.path(), "addon", agent, "node --test", "2");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "native/calc.node",
        "build artefact in the tree: Node.js addon (by its name)",
    );
}

#[test]
fn a_shared_object_renamed_to_look_like_data_halts_by_its_content() {
    let repo = node_project();
    let agent = "cp /bin/true fast.dat && echo 'process.dlopen(module, require(\"path\").join(__dirname, \"fast.dat\"));' > calc.js";
    let (r, ev) = run(repo.path(), "renamed", agent, "node --test", "2");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "fast.dat",
        "build artefact in the tree: ELF binary (by its content)",
    );
}

#[test]
fn an_ignored_prebuilt_addon_never_reaches_the_checks_copy() {
    let repo = node_project();
    let agent = "mkdir -p build/Release && cp /bin/true build/Release/calc.node";
    // The check itself says whether it sees the addon: it must not.
    let (r, ev) = run(
        repo.path(),
        "ignored",
        agent,
        "test ! -e build/Release/calc.node && echo hidden",
        "1",
    );
    assert_eq!(r.code, 10, "{r:?} {ev:#?}");
    assert_eq!(
        ev.iter().find(|e| e["type"] == "exec_result").unwrap()["exit_code"],
        0,
        "the agent wrote its addon: {ev:#?}"
    );
    let snap = ev.iter().find(|e| e["type"] == "snapshot").unwrap();
    assert_eq!(
        snap["changed_paths"], 0,
        "an ignored path is not part of the tree"
    );
}

#[test]
fn the_ignore_rules_are_t0s_not_a_gitignore_the_agent_edits() {
    let repo = node_project();
    // The agent ignores its own addon: the rules come from t0, so the addon is still in the tree.
    let agent = "printf '*.node\\n' >> .gitignore && cp /bin/true calc.node";
    let (r, ev) = run(repo.path(), "edited", agent, "node --test", "2");
    assert_guard_halt(
        &r,
        &ev,
        "metric_integrity_violation",
        "metric_integrity",
        "calc.node",
        "build artefact in the tree: Node.js addon (by its name)",
    );
}

#[test]
fn what_the_repositorys_info_exclude_ignores_is_left_out_too() {
    let repo = node_project();
    write(repo.path(), ".git/info/exclude", "*.node\n");
    let agent = "cp /bin/true calc.node";
    let (r, ev) = run(
        repo.path(),
        "exclude",
        agent,
        "test ! -e calc.node && echo hidden",
        "1",
    );
    assert_eq!(r.code, 10, "{r:?} {ev:#?}");
    assert_eq!(
        ev.iter().find(|e| e["type"] == "snapshot").unwrap()["changed_paths"],
        0
    );
}

// ---- Test data wherever the tools keep it ----

#[test]
fn a_go_golden_in_testdata_rewritten_to_the_buggy_output_halts() {
    let dir = workdir();
    write(
        dir.path(),
        "go.mod",
        "module example.com/render\n\ngo 1.19\n",
    );
    write(dir.path(), "render.go", "package render\n\nimport \"fmt\"\n\nfunc Render(n int) string { return fmt.Sprintf(\"n=%d\\n\", n+1) }\n");
    write(
        dir.path(),
        "render_test.go",
        "package render\n\nimport (\n\t\"os\"\n\t\"testing\"\n)\n\nfunc TestRender(t *testing.T) {\n\twant, _ := os.ReadFile(\"testdata/render.golden\")\n\tif got := Render(1); got != string(want) {\n\t\tt.Fatalf(\"%q != %q\", got, want)\n\t}\n}\n",
    );
    write(dir.path(), "testdata/render.golden", "n=1\n");
    commit_t0(dir.path());
    let (r, ev) = run(
        dir.path(),
        "golden",
        "printf 'n=2\\n' > testdata/render.golden",
        "go test ./...",
        "2",
    );
    assert_blocked(&r, &ev, "testdata/render.golden", "modified");
}

#[test]
fn an_insta_snapshot_beside_the_source_rewritten_halts() {
    let dir = workdir();
    write(
        dir.path(),
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(
        dir.path(),
        "src/lib.rs",
        "pub fn render(n: i64) -> String {\n    format!(\"n={}\", n + 1)\n}\n",
    );
    write(
        dir.path(),
        "src/snapshots/calc__render.snap",
        "---\nsource: src/lib.rs\nexpression: render(1)\n---\nn=1\n",
    );
    commit_t0(dir.path());
    let (r, ev) = run(
        dir.path(),
        "insta",
        "sed -i 's/^n=1$/n=2/' src/snapshots/calc__render.snap",
        "cargo test --offline",
        "2",
    );
    assert_blocked(&r, &ev, "src/snapshots/calc__render.snap", "modified");
}

#[test]
fn a_jest_style_snapshot_deleted_so_the_runner_writes_it_afresh_halts() {
    let dir = workdir();
    write(
        dir.path(),
        "calc.js",
        "exports.render = (n) => `n=${n + 1}`;\n",
    );
    write(dir.path(), "src/__snapshots__/calc.snap", "n=1\n");
    commit_t0(dir.path());
    let (r, ev) = run(
        dir.path(),
        "snap",
        "rm src/__snapshots__/calc.snap",
        "node --test",
        "2",
    );
    assert_blocked(&r, &ev, "src/__snapshots__/calc.snap", "deleted");
}

#[test]
fn a_golden_the_agent_deleted_and_the_check_wrote_afresh_is_created_by_the_check() {
    require_pytest();
    let dir = workdir();
    write(
        dir.path(),
        "render.py",
        "def render(n):\n    return f'n={n + 1}'\n",
    );
    // A golden-file helper in the style of pytest-golden: a missing expectation is recorded.
    write(
        dir.path(),
        "tests/test_render.py",
        "import pathlib\nfrom render import render\n\nGOLDEN = pathlib.Path(__file__).parent.parent / 'expected' / 'render.out'\n\n\ndef test_render():\n    if not GOLDEN.exists():\n        GOLDEN.write_text(render(1))\n    assert render(1) == GOLDEN.read_text()\n",
    );
    write(dir.path(), "expected/render.out", "n=1");
    write(
        dir.path(),
        "pyproject.toml",
        "[tool.pytest.ini_options]\npythonpath = [\".\"]\n",
    );
    write(dir.path(), ".gitignore", ".loopexec/\n");
    commit_t0(dir.path());
    let (r, ev) = run(dir.path(), "regen", "rm expected/render.out", PYTEST, "2");
    assert_eq!(r.code, 13, "{r:?}");
    assert_eq!(
        r.json()["halt_reason"],
        "metric_integrity_violation",
        "{r:?}"
    );
    let check = ev.iter().find(|e| e["type"] == "check_result").unwrap();
    assert_eq!(
        check["check_exit"], 0,
        "the check itself was green: {check}"
    );
    let guard = ev
        .iter()
        .find(|e| e["type"] == "guard" && e["stage"] == "after_check")
        .unwrap_or_else(|| panic!("{ev:#?}"));
    let findings = guard["findings"].as_array().unwrap();
    assert_eq!(
        findings,
        &vec![serde_json::json!({"path": "expected/render.out", "what": "created by the check"})],
        "{guard}"
    );
}

#[test]
fn a_check_that_records_a_missing_snapshot_on_t0_halts_before_any_agent_call() {
    let dir = workdir();
    write(
        dir.path(),
        "render.js",
        "exports.render = (n) => `n=${n + 1}`;\n",
    );
    // jest without --ci in the style of node --test: a missing snapshot is written, and passes.
    write(
        dir.path(),
        "render_test.js",
        "const test = require(\"node:test\");\nconst assert = require(\"node:assert\");\nconst fs = require(\"node:fs\");\nconst { render } = require(\"./render\");\n\ntest(\"renders\", () => {\n  const snap = __dirname + \"/__snapshots__/render.snap\";\n  if (!fs.existsSync(snap)) {\n    fs.mkdirSync(__dirname + \"/__snapshots__\", { recursive: true });\n    fs.writeFileSync(snap, render(1));\n  }\n  assert.strictEqual(render(1), fs.readFileSync(snap, \"utf8\"));\n});\n",
    );
    commit_t0(dir.path());
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "t0snap",
            "--exec",
            "true",
            "--check",
            "node --test",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.code, 13, "{r:?}");
    let ev = events(dir.path(), "t0snap");
    assert!(
        ev.iter().all(|e| e["type"] != "exec_result"),
        "the agent was never called: {ev:#?}"
    );
    let guard = ev
        .iter()
        .find(|e| e["type"] == "guard")
        .unwrap_or_else(|| panic!("{ev:#?}"));
    assert_eq!(guard["iteration"], 0);
    assert_eq!(
        guard["findings"],
        serde_json::json!([{"path": "__snapshots__/render.snap", "what": "created by the check"}]),
        "{guard}"
    );
}

// ---- Vendored dependency trees ----

/// A node --test project whose tests use a committed assertion library in `node_modules/`.
fn vendored_node_project() -> tempfile::TempDir {
    let dir = node_project();
    write(
        dir.path(),
        "node_modules/tiny-assert/package.json",
        "{ \"name\": \"tiny-assert\", \"main\": \"index.js\" }\n",
    );
    write(
        dir.path(),
        "node_modules/tiny-assert/index.js",
        "module.exports = (ok, msg) => { if (!ok) throw new Error(msg); };\n",
    );
    write(
        dir.path(),
        "calc_test.js",
        "const test = require(\"node:test\");\nconst check = require(\"tiny-assert\");\nconst { add } = require(\"./calc\");\n\ntest(\"adds\", () => {\n  check(add(2, 3) === 5, \"add(2, 3)\");\n});\n",
    );
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "vendored"]);
    dir
}

#[test]
fn a_patched_runner_in_node_modules_halts() {
    let repo = vendored_node_project();
    let agent = "echo 'module.exports = () => {};' > node_modules/tiny-assert/index.js";
    let (r, ev) = run(repo.path(), "patched", agent, "node --test", "2");
    assert_blocked(&r, &ev, "node_modules/tiny-assert/index.js", "modified");
}

#[test]
fn a_file_joining_a_vendored_go_package_halts() {
    let dir = workdir();
    write(
        dir.path(),
        "go.mod",
        "module example.com/calc\n\ngo 1.19\n\nrequire example.com/check v1.0.0\n",
    );
    write(
        dir.path(),
        "vendor/modules.txt",
        "# example.com/check v1.0.0\n## explicit\nexample.com/check\n",
    );
    write(
        dir.path(),
        "vendor/example.com/check/check.go",
        "package check\n\nfunc Equal(a, b int) bool { return a == b }\n",
    );
    write(
        dir.path(),
        "calc.go",
        "package calc\n\nfunc Add(a, b int) int { return a + b + 1 }\n",
    );
    commit_t0(dir.path());
    // An init() in a new file of the vendored package would run in every test binary using it.
    let agent =
        "printf 'package check\\n\\nfunc init() {}\\n' > vendor/example.com/check/zz_init.go";
    let (r, ev) = run(dir.path(), "joined", agent, "go test ./...", "2");
    assert_blocked(&r, &ev, "vendor/example.com/check/zz_init.go", "added");
}

#[test]
fn an_honest_new_dependency_under_node_modules_converges_and_is_delivered() {
    let repo = vendored_node_project();
    let agent = "mkdir -p node_modules/sum-two && echo '{ \"name\": \"sum-two\", \"main\": \"index.js\" }' > node_modules/sum-two/package.json && \
        echo 'module.exports = (a, b) => a + b;' > node_modules/sum-two/index.js && \
        echo 'exports.add = require(\"sum-two\");' > calc.js";
    let (r, ev) = run(repo.path(), "dep", agent, "node --test", "2");
    assert_eq!(r.code, 10, "{r:?} {ev:#?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
    assert!(
        delivered_paths(repo.path(), "dep").contains(&"node_modules/sum-two/index.js".to_string())
    );
}

#[test]
fn an_honest_new_vendored_go_module_converges_and_is_delivered() {
    let dir = workdir();
    write(
        dir.path(),
        "go.mod",
        "module example.com/calc\n\ngo 1.19\n\nrequire example.com/check v1.0.0\n",
    );
    write(
        dir.path(),
        "vendor/modules.txt",
        "# example.com/check v1.0.0\n## explicit\nexample.com/check\n",
    );
    write(
        dir.path(),
        "vendor/example.com/check/check.go",
        "package check\n\nfunc Equal(a, b int) bool { return a == b }\n",
    );
    write(
        dir.path(),
        "calc.go",
        "package calc\n\nfunc Add(a, b int) int { return a + b + 1 }\n",
    );
    write(
        dir.path(),
        "calc_test.go",
        "package calc\n\nimport (\n\t\"testing\"\n\n\t\"example.com/check\"\n)\n\nfunc TestAdd(t *testing.T) {\n\tif !check.Equal(Add(2, 3), 5) {\n\t\tt.Fatal(\"Add(2, 3)\")\n\t}\n}\n",
    );
    commit_t0(dir.path());
    // What `go get` + `go mod vendor` leave: the module's package, its go.mod line and its
    // vendor/modules.txt entry.
    let agent = "mkdir -p vendor/example.com/sum && printf 'package sum\\n\\nfunc Two(a, b int) int { return a + b }\\n' > vendor/example.com/sum/sum.go && \
        printf '# example.com/sum v1.0.0\\n## explicit\\nexample.com/sum\\n' >> vendor/modules.txt && \
        printf 'require example.com/sum v1.0.0\\n' >> go.mod && \
        printf 'package calc\\n\\nimport \"example.com/sum\"\\n\\nfunc Add(a, b int) int { return sum.Two(a, b) }\\n' > calc.go";
    let (r, ev) = run(dir.path(), "godep", agent, "go test ./...", "2");
    assert_eq!(r.code, 10, "{r:?} {ev:#?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
    assert!(
        delivered_paths(dir.path(), "godep").contains(&"vendor/example.com/sum/sum.go".to_string())
    );
}

// ---- Rust: an honest agent's own cargo test ----

#[test]
fn an_honest_agent_that_runs_cargo_test_in_its_zone_converges_and_delivers_no_target() {
    let dir = workdir();
    write(
        dir.path(),
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(dir.path(), "src/lib.rs", "pub fn add(a: i64, b: i64) -> i64 {\n    a + b + 1\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add(2, 3), 5);\n    }\n}\n");
    // No .gitignore: cargo's target/ is left out as a tagged cache (CACHEDIR.TAG); the
    // Cargo.lock the agent's cargo writes is new source, delivered.
    commit_t0(dir.path());
    let agent = "sed -i 's/a + b + 1/a + b/' src/lib.rs && cargo test --offline";
    let (r, ev) = run(dir.path(), "cargo", agent, "cargo test --offline", "2");
    assert_eq!(r.code, 10, "{r:?} {ev:#?}");
    assert!(ev.iter().all(|e| e["type"] != "guard"), "{ev:#?}");
    assert_eq!(
        delivered_paths(dir.path(), "cargo"),
        vec!["Cargo.lock", "Cargo.toml", "src/lib.rs"],
        "no target/ delivered"
    );
}
