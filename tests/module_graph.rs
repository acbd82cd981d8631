//! The layering rule (docs/architecture.md, "The import graph"): no two top-level modules of src/
//! reach each other, and no two cli commands do. `ci/module-graph.py` prints both; these tests
//! hold the tree to it, and hold the tool to finding a circle where there is one.

use std::path::Path;
use std::process::Command;

/// What `ci/module-graph.py SRC` prints, or why it could not run.
fn graph_of(src: &Path) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/ci/module-graph.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(src)
        .output()
        .expect("python3 runs (ci/setup.sh installs it)");
    assert!(
        out.status.success(),
        "ci/module-graph.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the graph is UTF-8")
}

/// A source tree of the given files (path relative to src/, text).
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let at = dir.path().join(path);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, text).unwrap();
    }
    dir
}

fn line<'a>(graph: &'a str, prefix: &str) -> &'a str {
    graph
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{graph}"))
}

#[test]
fn no_two_top_level_modules_of_src_import_each_other() {
    let graph = graph_of(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")));
    assert_eq!(graph.lines().next(), Some("cycles: none"), "{graph}");
}

#[test]
fn no_two_cli_commands_import_each_other() {
    let graph = graph_of(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")));
    assert_eq!(line(&graph, "cli cycles:"), "cli cycles: none", "{graph}");
}

#[test]
fn a_circle_between_top_level_modules_is_reported_with_the_places_that_make_it() {
    let src = tree(&[
        ("lib.rs", "pub mod low;\npub mod high;\n"),
        (
            "low/mod.rs",
            "//! uses crate::ignored in a comment\nuse crate::high::Thing;\n",
        ),
        (
            "high.rs",
            "pub struct Thing;\nfn f() -> crate::low::Other { todo!() }\n",
        ),
    ]);
    let graph = graph_of(src.path());
    let p = src.path().display();
    assert_eq!(graph.lines().next(), Some("cycles: high<->low"), "{graph}");
    assert!(
        graph.contains(&format!("   high -> low {p}/high.rs:2\n")),
        "{graph}"
    );
    assert!(
        graph.contains(&format!("   low -> high {p}/low/mod.rs:2\n")),
        "{graph}"
    );
}

#[test]
fn a_circle_through_a_grouped_import_is_reported() {
    let src = tree(&[
        ("a.rs", "use crate::{b::x, c};\n"),
        ("b.rs", "use crate::a::y;\n"),
        ("c.rs", ""),
    ]);
    assert_eq!(graph_of(src.path()).lines().next(), Some("cycles: a<->b"));
}

#[test]
fn an_import_in_the_trailing_test_module_makes_no_circle() {
    let src = tree(&[
        ("a.rs", "use crate::b::x;\n"),
        (
            "b.rs",
            "pub fn x() {}\n#[cfg(test)]\nmod tests {\n    use crate::a::*;\n}\n",
        ),
    ]);
    assert_eq!(graph_of(src.path()).lines().next(), Some("cycles: none"));
}

#[test]
fn a_circle_between_cli_commands_is_reported_whether_through_super_or_crate_cli() {
    let src = tree(&[
        (
            "cli/mod.rs",
            "pub mod run;\npub mod doctor;\npub mod common;\n",
        ),
        (
            "cli/run.rs",
            "use super::doctor::gate_loop;\nuse super::common::key;\n",
        ),
        (
            "cli/doctor.rs",
            "fn f() { crate::cli::run::absolute_workdir(); }\n",
        ),
        ("cli/common.rs", "pub fn key() {}\n"),
    ]);
    let graph = graph_of(src.path());
    let p = src.path().display();
    assert_eq!(
        line(&graph, "cli cycles:"),
        "cli cycles: doctor<->run",
        "{graph}"
    );
    assert!(
        graph.contains(&format!("   doctor -> run {p}/cli/doctor.rs:1\n")),
        "{graph}"
    );
    assert!(
        graph.contains(&format!("   run -> doctor {p}/cli/run.rs:1\n")),
        "{graph}"
    );
}

#[test]
fn commands_sharing_a_helper_module_make_no_cli_circle() {
    let src = tree(&[
        (
            "cli/run.rs",
            "use super::doctor::gate_loop;\nuse super::common::key;\n",
        ),
        ("cli/doctor.rs", "use super::common::key;\n"),
        ("cli/common.rs", "pub fn key() {}\n"),
    ]);
    assert_eq!(
        line(&graph_of(src.path()), "cli cycles:"),
        "cli cycles: none"
    );
}
