//! `loopexec doctor --check CMD`'s adequacy gate (issue 14 item 5) on a small Rust crate tested
//! with the real `cargo test`: the mutants come from the working tree's change against
//! `--diff-base` (default HEAD); a suite that tests the change kills them (gate passed); a suite
//! that asserts nothing lets every one survive and doctor exits 15 `check_inadequate`, listing
//! each survivor with file and line.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

/// The crate at t0 (committed): `is_adult` is a stub; `tests` is its inline test module. The
/// working tree then implements it (the change the gate mutates).
fn crate_with_change(tests: &str) -> tempfile::TempDir {
    let dir = workdir();
    write(
        dir.path(),
        "Cargo.toml",
        "[package]\nname = \"age\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    write(dir.path(), ".gitignore", "target/\n");
    let lib = |body: &str| {
        format!("pub fn is_adult(age: u32) -> bool {{\n{body}\n}}\n\n#[cfg(test)]\nmod tests {{\n    use super::*;\n{tests}\n}}\n")
    };
    write(dir.path(), "src/lib.rs", &lib("    false"));
    commit_t0(dir.path());
    write(dir.path(), "src/lib.rs", &lib("    age >= 18"));
    dir
}

const TESTING_SUITE: &str = "    #[test]\n    fn adults_are_18_or_older() {\n        assert!(is_adult(18));\n        assert!(!is_adult(17));\n    }\n";
const EMPTY_SUITE: &str = "    #[test]\n    fn runs() {\n        let _ = is_adult;\n    }\n";

fn cargo() -> String {
    let found = std::process::Command::new("sh")
        .args(["-c", "command -v cargo"])
        .output()
        .expect("sh");
    let path = String::from_utf8_lossy(&found.stdout).trim().to_string();
    assert!(
        !path.is_empty(),
        "cargo is needed on PATH for the adequacy doctor tests"
    );
    path
}

fn doctor(dir: &Path) -> (i32, Value) {
    let check = format!("{} test --offline --lib", cargo());
    let r = loopexec(
        dir,
        &[
            "--json",
            "doctor",
            "--isolation",
            "none",
            "--check",
            &check,
            "--runs",
            "2",
            "--mutants",
            "5",
        ],
    );
    (r.code, r.json())
}

fn adequacy_gate(v: &Value) -> &Value {
    v["gates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["gate"] == "adequacy")
        .unwrap_or_else(|| panic!("no adequacy gate in {v:#}"))
}

#[test]
fn a_suite_that_tests_the_change_passes_the_adequacy_gate() {
    let dir = crate_with_change(TESTING_SUITE);
    let (code, v) = doctor(dir.path());
    let gate = adequacy_gate(&v);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        v["probe"]["summary"]["modal"]["class"], "pass",
        "the unmutated tree is green: {v:#}"
    );
    assert_eq!(gate["verdict"], "passed", "{gate:#}");
    assert_eq!(gate["evidence"]["scope"], "diff");
    assert!(
        gate["evidence"]["killed"].as_u64().unwrap() >= 1,
        "{gate:#}"
    );
}

#[test]
fn a_suite_that_asserts_nothing_exits_15_listing_the_survivors_with_file_and_line() {
    let dir = crate_with_change(EMPTY_SUITE);
    let (code, v) = doctor(dir.path());
    assert_eq!(code, 15, "{v:#}");
    assert_eq!(v["halt_reason"], "check_inadequate", "{v:#}");
    let gate = adequacy_gate(&v);
    assert_eq!(gate["reason"], "check_inadequate");
    let mutants = gate["evidence"]["mutants"].as_array().unwrap();
    assert!(!mutants.is_empty());
    for m in mutants {
        assert_eq!(
            (
                m["outcome"].as_str(),
                m["path"].as_str(),
                m["line"].as_u64()
            ),
            (Some("survived"), Some("src/lib.rs"), Some(2)),
            "{m:#}"
        );
    }
}

#[test]
fn a_diff_base_that_is_no_commit_is_refused_with_exit_20() {
    let dir = crate_with_change(TESTING_SUITE);
    let r = loopexec(
        dir.path(),
        &[
            "--json",
            "doctor",
            "--isolation",
            "none",
            "--check",
            "true",
            "--runs",
            "2",
            "--diff-base",
            "no-such-rev",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert!(
        r.json()["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("--diff-base no-such-rev"),
        "{r:?}"
    );
}
