//! The bundled example (examples/fizzbuzz) converges in three iterations with a shrinking
//! failing set, exactly as its loop.toml says.
mod common;
use common::*;

#[test]
fn the_fizzbuzz_example_converges_in_three_iterations() {
    let dir = workdir();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fizzbuzz");
    for entry in std::fs::read_dir(&example).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    // As ci/demo.sh does: a git repository, so the run is detached and guarded.
    commit_t0(dir.path());
    let r = loopexec(dir.path(), &["run", "--json", "--run-id", "example"]);
    assert_eq!(r.code, 10, "{r:?}");
    let v = r.json();
    assert_eq!(
        (v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (Some("success_condition_met"), Some(3))
    );
    assert_eq!(
        v["run"]["isolation"], "native",
        "the example runs sandboxed"
    );
    let counts: Vec<u64> = events(dir.path(), "example")
        .iter()
        .filter(|e| e["type"] == "check_result")
        .map(|e| e["failing_count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [3, 1, 0]);
    // The delivered fizzbuzz.sh prints what expected.txt holds.
    let script = git(dir.path(), &["show", "loopexec/example:fizzbuzz.sh"]);
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        std::fs::read_to_string(dir.path().join("expected.txt")).unwrap()
    );
}
