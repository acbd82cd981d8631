//! Property tests of test identity (issue 18, "Honest work converges"): honest edits keep the set
//! guard quiet, at parser and guard level (fast: no zone runs). Each property renders a random
//! project the way its real runner reports it (the shapes tests/testreport_tools.rs checks on the
//! real runners' output), applies an honest edit, reads both reports with loopexec's own parsers,
//! and asks the set guard (`set_violation`) about the edited run against the original as t0:
//!
//! - libtest doctests: lines inserted anywhere above or between doctests, a doctest or an item
//!   added, items reordered (and the output's order shuffled, as parallel doctests print it);
//! - node's JUnit: a test file split in two, a test moved to another file, a test added, files
//!   reported in another order;
//! - `go test -json`: a `_test.go` file split in two, a test function moved to another file of
//!   its package, a test added, packages interleaved.
//!
//! The converse is checked too: removing one test (one entry of a repeated id included) is
//! always found.

use loopexec::engine::baseline::set_violation;
use loopexec::engine::check::TestSets;
use loopexec::receipt::events::CheckResult;
use loopexec::testreport::{libtest, parse_report, ParsedReport};
use proptest::prelude::*;

/// The sets a check run over `report` records, as the receipt lists them.
fn sets_of(report: &ParsedReport) -> TestSets {
    let mut sets = TestSets::default();
    sets.add(report);
    sets
}

/// A green `check_result` whose sets are those of `report`.
fn green_check(report: &ParsedReport) -> CheckResult {
    let sets = sets_of(report);
    let stream = serde_json::json!({ "bytes": 0, "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "artifact": null, "truncated": false });
    serde_json::from_value(serde_json::json!({
        "iteration": 1,
        "ending": { "kind": "exited", "code": 0 },
        "check_exit": 0,
        "duration_ms": 1,
        "stdout": stream,
        "stderr": stream,
        "failing_set": [],
        "collected_set": TestSets::listed(&sets.collected, &sets.collected_repeats),
        "skipped_set": TestSets::listed(&sets.skipped, &sets.skipped_repeats),
    }))
    .unwrap()
}

/// Whether the set guard is quiet on `now` against `t0`.
fn quiet(t0: &ParsedReport, now: &ParsedReport) -> Result<(), TestCaseError> {
    match set_violation(1, &green_check(now), &sets_of(t0)) {
        None => Ok(()),
        Some(found) => Err(TestCaseError::fail(format!(
            "{}: {:?}",
            found.detail, found.findings
        ))),
    }
}

fn trips(t0: &ParsedReport, now: &ParsedReport) -> Result<(), TestCaseError> {
    prop_assert!(
        set_violation(1, &green_check(now), &sets_of(t0)).is_some(),
        "a lost test went unseen"
    );
    Ok(())
}

/// Shuffles `items` by the permutation `keys` gives (one key per item).
fn shuffled<T: Clone>(items: &[T], keys: &[u32]) -> Vec<T> {
    let mut keyed: Vec<(u32, usize)> = items
        .iter()
        .enumerate()
        .map(|(i, _)| (keys.get(i).copied().unwrap_or(0), i))
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, i)| items[i].clone()).collect()
}

// ---- libtest doctests ----

/// One documented item of `src/lib.rs`: its name, the lines of prose before it, and the number
/// of doctests in its doc comment.
#[derive(Debug, Clone)]
struct Item {
    name: String,
    padding: usize,
    doctests: usize,
}

/// libtest's output for the doctests of `items` laid out in order in src/lib.rs (each doctest
/// five lines, its line the fence's), printed in the order `order` gives.
fn doctest_output(items: &[Item], order: &[u32]) -> ParsedReport {
    let mut names = Vec::new();
    let mut line = 1;
    for item in items {
        line += item.padding;
        for _ in 0..item.doctests {
            names.push(format!("src/lib.rs - {} (line {line})", item.name));
            line += 5;
        }
        line += 3;
    }
    let names = shuffled(&names, order);
    let mut out = format!("\nrunning {} tests\n", names.len());
    for name in &names {
        out.push_str(&format!("test {name} ... ok\n"));
    }
    out.push_str(&format!("\ntest result: ok. {} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.20s\n\n", names.len()));
    let run =
        libtest::parse_output(out.as_bytes(), Some(b"   Doc-tests demo\n"), "stdout").unwrap();
    run.to_report("stdout").unwrap()
}

fn items() -> impl Strategy<Value = Vec<Item>> {
    // Few names, so that two items never share one but an item's doctests often do.
    prop::collection::vec((0usize..40, 1usize..4), 1..6).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (padding, doctests))| Item {
                name: format!("f{i}"),
                padding,
                doctests,
            })
            .collect()
    })
}

/// An honest edit of src/lib.rs.
#[derive(Debug, Clone)]
enum DocEdit {
    /// Lines of code or prose inserted before item `at`.
    Insert { at: usize, lines: usize },
    /// One more doctest on item `at`.
    AddDoctest { at: usize },
    /// A new documented item with one doctest before item `at`.
    AddItem { at: usize },
    /// Item `from` moved to before item `to`.
    Move { from: usize, to: usize },
}

fn doc_edit() -> impl Strategy<Value = DocEdit> {
    prop_oneof![
        (0usize..8, 1usize..200).prop_map(|(at, lines)| DocEdit::Insert { at, lines }),
        (0usize..8).prop_map(|at| DocEdit::AddDoctest { at }),
        (0usize..8).prop_map(|at| DocEdit::AddItem { at }),
        (0usize..8, 0usize..8).prop_map(|(from, to)| DocEdit::Move { from, to }),
    ]
}

fn apply_doc_edit(items: &[Item], edit: &DocEdit) -> Vec<Item> {
    let mut out = items.to_vec();
    let n = out.len();
    match *edit {
        DocEdit::Insert { at, lines } => out[at % n].padding += lines,
        DocEdit::AddDoctest { at } => out[at % n].doctests += 1,
        DocEdit::AddItem { at } => out.insert(
            at % (n + 1),
            Item {
                name: "added".into(),
                padding: 2,
                doctests: 1,
            },
        ),
        DocEdit::Move { from, to } => {
            let item = out.remove(from % n);
            out.insert(to % n, item);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn honest_edits_above_and_between_doctests_keep_the_set_guard_quiet(
        items in items(),
        edits in prop::collection::vec(doc_edit(), 1..5),
        order in prop::collection::vec(any::<u32>(), 0..32),
        order_now in prop::collection::vec(any::<u32>(), 0..32),
    ) {
        let t0 = doctest_output(&items, &order);
        let edited = edits.iter().fold(items.clone(), |acc, e| apply_doc_edit(&acc, e));
        quiet(&t0, &doctest_output(&edited, &order_now))?;
    }

    #[test]
    fn removing_any_one_doctest_is_found(items in items(), which in any::<usize>(), order in prop::collection::vec(any::<u32>(), 0..32)) {
        let t0 = doctest_output(&items, &order);
        let mut edited = items.clone();
        let at = which % edited.len();
        edited[at].doctests -= 1;
        trips(&t0, &doctest_output(&edited, &order))?;
    }
}

// ---- node's JUnit (`node --test --test-reporter=junit`) ----

/// One node test: the `describe` chain it sits in (possibly none) and its name.
#[derive(Debug, Clone, PartialEq)]
struct NodeTest {
    suites: Vec<String>,
    name: String,
}

/// node's JUnit for `files` (each a list of tests, in file order), as node 20 writes it: every
/// file's top-level tests and suites directly under `<testsuites>`, a suite's children inside
/// it, classname `test`, the closing comments.
fn node_junit(files: &[Vec<NodeTest>]) -> ParsedReport {
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<testsuites>\n");
    let (mut tests, mut suites) = (0, 0);
    for file in files {
        // Consecutive tests of one file under the same outermost describe share its element.
        let mut open: Vec<String> = Vec::new();
        for test in file {
            let common = open
                .iter()
                .zip(&test.suites)
                .take_while(|(a, b)| a == b)
                .count();
            while open.len() > common {
                open.pop();
                xml.push_str("</testsuite>\n");
            }
            for suite in &test.suites[common..] {
                xml.push_str(&format!("<testsuite name=\"{suite}\" time=\"0.1\" disabled=\"0\" errors=\"0\" tests=\"1\" failures=\"0\" skipped=\"0\" hostname=\"vm\">\n"));
                open.push(suite.clone());
                suites += 1;
            }
            xml.push_str(&format!(
                "<testcase name=\"{}\" time=\"0.001\" classname=\"test\"/>\n",
                test.name
            ));
            tests += 1;
        }
        for _ in open.drain(..) {
            xml.push_str("</testsuite>\n");
        }
    }
    xml.push_str(&format!(
        "<!-- tests {tests} -->\n<!-- suites {suites} -->\n<!-- pass {tests} -->\n<!-- fail 0 -->\n<!-- cancelled 0 -->\n<!-- skipped 0 -->\n<!-- todo 0 -->\n<!-- duration_ms 12.5 -->\n</testsuites>\n"
    ));
    let report = parse_report(xml.as_bytes(), "junit.xml", None).unwrap();
    assert_eq!(report.declared, Some(report.counts), "{xml}");
    report
}

fn node_test() -> impl Strategy<Value = NodeTest> {
    // A small alphabet: same-named tests in two files (one id, two entries) are common.
    (
        prop::collection::vec(prop::sample::select(vec!["math", "strs", "io"]), 0..3),
        prop::sample::select(vec!["adds", "works", "is empty", "throws"]),
    )
        .prop_map(|(suites, name)| NodeTest {
            suites: suites.into_iter().map(String::from).collect(),
            name: name.into(),
        })
}

fn node_files() -> impl Strategy<Value = Vec<Vec<NodeTest>>> {
    prop::collection::vec(prop::collection::vec(node_test(), 1..6), 1..4)
}

/// An honest edit of a node project's test files.
#[derive(Debug, Clone)]
enum NodeEdit {
    /// File `file` split in two at `at` (the second half a new file, placed last).
    Split { file: usize, at: usize },
    /// Test `test` of file `from` moved to the end of file `to`.
    Move { from: usize, test: usize, to: usize },
    /// A new test appended to file `file`.
    Add { file: usize, test: NodeTest },
    /// The files reported in another order (node runs them concurrently).
    Reorder { keys: Vec<u32> },
}

fn node_edit() -> impl Strategy<Value = NodeEdit> {
    prop_oneof![
        (any::<usize>(), any::<usize>()).prop_map(|(file, at)| NodeEdit::Split { file, at }),
        (any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(from, test, to)| NodeEdit::Move { from, test, to }),
        (any::<usize>(), node_test()).prop_map(|(file, test)| NodeEdit::Add { file, test }),
        prop::collection::vec(any::<u32>(), 0..8).prop_map(|keys| NodeEdit::Reorder { keys }),
    ]
}

fn apply_node_edit(files: &[Vec<NodeTest>], edit: &NodeEdit) -> Vec<Vec<NodeTest>> {
    let mut out = files.to_vec();
    let n = out.len();
    match edit {
        NodeEdit::Split { file, at } => {
            let file = &mut out[file % n];
            let second = file.split_off(at % (file.len() + 1));
            out.push(second);
        }
        NodeEdit::Move { from, test, to } => {
            let from = from % n;
            if !out[from].is_empty() {
                let len = out[from].len();
                let moved = out[from].remove(test % len);
                out[to % n].push(moved);
            }
        }
        NodeEdit::Add { file, test } => out[file % n].push(test.clone()),
        NodeEdit::Reorder { keys } => out = shuffled(&out, keys),
    }
    out.retain(|f| !f.is_empty());
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn splitting_moving_and_adding_node_tests_keeps_the_set_guard_quiet(files in node_files(), edits in prop::collection::vec(node_edit(), 1..5)) {
        let t0 = node_junit(&files);
        let edited = edits.iter().fold(files.clone(), |acc, e| apply_node_edit(&acc, e));
        quiet(&t0, &node_junit(&edited))?;
    }

    #[test]
    fn removing_any_one_node_test_is_found(files in node_files(), file in any::<usize>(), test in any::<usize>()) {
        let t0 = node_junit(&files);
        let mut edited = files.clone();
        let n = edited.len();
        let len = edited[file % n].len();
        edited[file % n].remove(test % len);
        edited.retain(|f| !f.is_empty());
        prop_assume!(!edited.is_empty());
        trips(&t0, &node_junit(&edited))?;
    }
}

// ---- go test -json ----

/// A Go module: packages, each a list of `_test.go` files, each a list of test function names.
type GoModule = Vec<Vec<Vec<String>>>;

/// `go test -json` for `module`: a package's tests run in file order (go sorts files by name; a
/// split or moved file changes the order, not the names), packages' events interleaved by
/// `interleave`.
fn go_json(module: &GoModule, interleave: &[u32]) -> ParsedReport {
    let mut per_package: Vec<Vec<String>> = Vec::new();
    for (p, files) in module.iter().enumerate() {
        let package = format!("example.com/m/p{p}");
        let mut events = Vec::new();
        for test in files.iter().flatten() {
            events.push(format!(
                "{{\"Action\":\"run\",\"Package\":\"{package}\",\"Test\":\"{test}\"}}"
            ));
            events.push(format!("{{\"Action\":\"output\",\"Package\":\"{package}\",\"Test\":\"{test}\",\"Output\":\"=== RUN   {test}\\n\"}}"));
            events.push(format!("{{\"Action\":\"pass\",\"Package\":\"{package}\",\"Test\":\"{test}\",\"Elapsed\":0}}"));
        }
        events.push(format!("{{\"Action\":\"output\",\"Package\":\"{package}\",\"Output\":\"ok  \\t{package}\\t0.01s\\n\"}}"));
        events.push(format!(
            "{{\"Action\":\"pass\",\"Package\":\"{package}\",\"Elapsed\":0.01}}"
        ));
        per_package.push(events);
    }
    // Interleave packages (go runs them in parallel), each package's own events in order.
    let mut lines = Vec::new();
    let mut cursors = vec![0usize; per_package.len()];
    let mut k = 0;
    while lines.len() < per_package.iter().map(Vec::len).sum::<usize>() {
        let pick = interleave.get(k).copied().unwrap_or(0) as usize % per_package.len();
        k += 1;
        let p = (0..per_package.len())
            .map(|i| (pick + i) % per_package.len())
            .find(|&p| cursors[p] < per_package[p].len())
            .unwrap();
        lines.push(per_package[p][cursors[p]].clone());
        cursors[p] += 1;
    }
    let text = lines.join("\n") + "\n";
    parse_report(text.as_bytes(), "go-test.json", None).unwrap()
}

fn go_module() -> impl Strategy<Value = GoModule> {
    // Test names unique within a package (go refuses two functions of one name in a package).
    prop::collection::vec(prop::collection::vec(1usize..4, 1..4), 1..4).prop_map(|packages| {
        packages
            .into_iter()
            .map(|files| {
                let mut next = 0;
                files
                    .into_iter()
                    .map(|count| {
                        (0..count)
                            .map(|_| {
                                next += 1;
                                format!("TestF{next}")
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect()
    })
}

/// An honest edit of a Go module's test files.
#[derive(Debug, Clone)]
enum GoEdit {
    /// A `_test.go` file split in two at `at`.
    Split {
        package: usize,
        file: usize,
        at: usize,
    },
    /// A test function moved to another file of its package.
    Move {
        package: usize,
        from: usize,
        test: usize,
        to: usize,
    },
    /// A new test function in a file.
    Add { package: usize, file: usize },
}

fn go_edit() -> impl Strategy<Value = GoEdit> {
    prop_oneof![
        (any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(package, file, at)| GoEdit::Split { package, file, at }),
        (
            any::<usize>(),
            any::<usize>(),
            any::<usize>(),
            any::<usize>()
        )
            .prop_map(|(package, from, test, to)| GoEdit::Move {
                package,
                from,
                test,
                to
            }),
        (any::<usize>(), any::<usize>()).prop_map(|(package, file)| GoEdit::Add { package, file }),
    ]
}

fn apply_go_edit(module: &GoModule, edit: &GoEdit, added: &mut usize) -> GoModule {
    let mut out = module.clone();
    let packages = out.len();
    let pick = |package: &usize| package % packages;
    match *edit {
        GoEdit::Split {
            ref package,
            file,
            at,
        } => {
            let files = &mut out[pick(package)];
            let n = files.len();
            let f = &mut files[file % n];
            let second = f.split_off(at % (f.len() + 1));
            files.insert(file % n + 1, second);
        }
        GoEdit::Move {
            ref package,
            from,
            test,
            to,
        } => {
            let files = &mut out[pick(package)];
            let n = files.len();
            if !files[from % n].is_empty() {
                let len = files[from % n].len();
                let moved = files[from % n].remove(test % len);
                files[to % n].push(moved);
            }
        }
        GoEdit::Add { ref package, file } => {
            *added += 1;
            let files = &mut out[pick(package)];
            let n = files.len();
            files[file % n].push(format!("TestAdded{added}"));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn splitting_moving_and_adding_go_tests_keeps_the_set_guard_quiet(
        module in go_module(),
        edits in prop::collection::vec(go_edit(), 1..5),
        interleave in prop::collection::vec(any::<u32>(), 0..64),
        interleave_now in prop::collection::vec(any::<u32>(), 0..64),
    ) {
        let t0 = go_json(&module, &interleave);
        let mut added = 0;
        let edited = edits.iter().fold(module.clone(), |acc, e| apply_go_edit(&acc, e, &mut added));
        quiet(&t0, &go_json(&edited, &interleave_now))?;
    }

    #[test]
    fn removing_any_one_go_test_is_found(module in go_module(), package in any::<usize>(), test in any::<usize>()) {
        let t0 = go_json(&module, &[]);
        let mut edited = module.clone();
        let p = package % edited.len();
        let all: Vec<(usize, usize)> = edited[p].iter().enumerate().flat_map(|(f, tests)| (0..tests.len()).map(move |t| (f, t))).collect();
        let (f, t) = all[test % all.len()];
        edited[p][f].remove(t);
        trips(&t0, &go_json(&edited, &[]))?;
    }
}
