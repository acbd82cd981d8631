//! The examples under examples/ (issue 23, item 6) run as their READMEs say: each copied into a
//! fresh git repository and run with its own loop.toml in the native sandbox (the default
//! isolation), converging with a shrinking failing set read from its runner's own evidence.
mod common;
use common::*;
use std::path::{Path, PathBuf};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

/// Copies the tree at `from` into `to`, leaving out build output (`target/`).
fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().unwrap().is_dir() {
            if entry.file_name() == "target" {
                continue;
            }
            std::fs::create_dir_all(&dst).unwrap();
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// The example copied into a fresh directory and committed as t0, as its README says.
fn checkout(name: &str) -> tempfile::TempDir {
    let dir = workdir();
    copy_tree(&example(name), dir.path());
    commit_t0(dir.path());
    dir
}

/// The failing-set size of each iteration's check, in order.
fn failing_counts(dir: &Path, run_id: &str) -> Vec<u64> {
    events(dir, run_id).iter().filter(|e| e["type"] == "check_result").map(|e| e["failing_count"].as_u64().unwrap()).collect()
}

/// Runs the example's loop with its own loop.toml and asserts it converged sandboxed in three
/// iterations with `counts` failing.
fn assert_converges(dir: &Path, counts: [u64; 3]) {
    let r = loopexec(dir, &["run", "--json", "--run-id", "example"]);
    assert_eq!(r.code, 10, "{r:?}");
    let v = r.json();
    assert_eq!((v["halt_reason"].as_str(), v["iteration"].as_u64()), (Some("success_condition_met"), Some(3)), "{v}");
    assert_eq!(v["run"]["isolation"], "native", "the example runs sandboxed");
    assert_eq!(failing_counts(dir, "example"), counts);
}

/// A Debian package's program the example's check runs, or a failure naming it (ci/setup.sh
/// installs it as root).
fn require(program: &str, package: &str) {
    assert!(Path::new(program).exists(), "{program} is missing: install Debian's {package} (ci/setup.sh does as root)");
}

#[test]
fn the_rust_crate_example_converges_in_three_iterations_with_debians_cargo_offline() {
    require("/usr/bin/cargo", "cargo");
    let dir = checkout("rust-crate");
    assert_converges(dir.path(), [2, 1, 0]);
    let last = events(dir.path(), "example").into_iter().rev().find(|e| e["type"] == "check_result").unwrap();
    assert_eq!(last["collected_count"], 7, "libtest's seven tests: {last}");
}

#[test]
fn the_python_pytest_example_converges_in_three_iterations_from_its_junit_report() {
    require("/usr/bin/python3", "python3-pytest");
    let dir = checkout("python-pytest");
    assert_converges(dir.path(), [3, 1, 0]);
    let last = events(dir.path(), "example").into_iter().rev().find(|e| e["type"] == "check_result").unwrap();
    assert_eq!(last["collected_count"], 7, "the report's seven test cases: {last}");
}

#[test]
fn the_node_test_example_converges_in_three_iterations_from_its_tap_report() {
    require("/usr/bin/node", "nodejs");
    let dir = checkout("node-test");
    assert_converges(dir.path(), [3, 1, 0]);
    let last = events(dir.path(), "example").into_iter().rev().find(|e| e["type"] == "check_result").unwrap();
    assert_eq!(last["collected_count"], 7, "the stream's seven test points: {last}");
}
