//! The CI scripts' own rules: every target ci/user-independent-tests.txt lets the unprivileged
//! whole-suite run skip is an integration test that calls the library only (it starts no
//! loopexec, no zone and no process), so the user running it cannot change its outcome.
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn every_user_independent_target_starts_no_process() {
    let list = std::fs::read_to_string(format!("{ROOT}/ci/user-independent-tests.txt")).unwrap();
    let names: Vec<&str> = list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert!(!names.is_empty());
    for name in names {
        let source = std::fs::read_to_string(format!("{ROOT}/tests/{name}.rs"))
            .unwrap_or_else(|e| panic!("tests/{name}.rs: {e}"));
        for spawns in [
            "mod common",
            "LOOPEXEC_BIN",
            "Command::new",
            "process::Command",
            "Zone",
            "sandbox::",
        ] {
            assert!(!source.contains(spawns), "tests/{name}.rs uses `{spawns}`: it may depend on its user, so it must run as loopexec-test too");
        }
    }
}
