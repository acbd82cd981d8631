//! The code the target tests ran at t0 (issue 18 item 3): the production functions that the
//! tests failing at t0 call by name, so that the canary mutates them too and not only the
//! agent's changed lines. A change that hollows out the tests (a lenient equality, a neutered
//! runner, an assertion helper made to pass) leaves every mutant of the function the failing
//! tests exercise alive while the mutants of the hollowing code itself get killed; judged apart
//! (`super::verdict`), that stratum shows the check no longer bites on the code it tests.
//!
//! What "call" means is syntactic: inside the test functions whose names the failing ids carry
//! (the last components of pytest's, libtest's and go's ids; for JS, the callback of a
//! `test(...)`/`it(...)` call whose description is one of them), every called name (`f(..)`,
//! `m.f(..)`, `a::f(..)`, and in Rust, `f(..)` inside a macro's token tree such as `assert_eq!`).
//! A production function definition (outside test code) with that name is a target. Names with
//! more than [`MAX_DEFINITIONS_PER_NAME`] production definitions are too ambiguous to say which
//! one ran and are left out. What this cannot see: calls through a variable, a decorator, a
//! dynamic dispatch table or a fixture; code reached only indirectly (a helper the called
//! function calls); tests in languages without a grammar.
//!
//! Pure: parsed files come in; nothing here reads the file system. Every walk is the cursor loop
//! of `analysis::syntax::walk` (no recursion).

use std::collections::{BTreeMap, BTreeSet};

use crate::analysis::syntax::{walk, Language, ParsedFile};
use crate::analysis::test_code;
use tree_sitter::Node;

/// Most test names taken from the failing ids.
pub const MAX_TEST_NAMES: usize = 256;
/// Most called names kept.
pub const MAX_CALLEES: usize = 1024;
/// A name with more production definitions than this is left out (ambiguous).
pub const MAX_DEFINITIONS_PER_NAME: usize = 2;
/// Most target functions.
pub const MAX_TARGET_FUNCTIONS: usize = 32;
/// Most production definitions remembered while scanning (beyond it, later ones are not).
pub const MAX_DEFINITIONS: usize = 200_000;

/// The names a failing test id can carry for its test function: every component of the id
/// (split at `::`, `/`, ` > ` and `.`), without a parameter suffix (`[1-2]`) or libtest's
/// ` - should panic` mark. Extra components (module names) match no test function and cost
/// nothing.
pub fn test_names(failing_ids: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for id in failing_ids {
        let id = id.split(" - ").next().unwrap_or(id);
        let id = match id.find('[') {
            Some(i) => &id[..i],
            None => id,
        };
        for part in id
            .split("::")
            .flat_map(|p| p.split(" > "))
            .flat_map(|p| p.split('/'))
            .flat_map(|p| p.split('.'))
        {
            let part = part.trim();
            if !part.is_empty() && part.len() <= 256 && out.len() < MAX_TEST_NAMES {
                out.insert(part.to_string());
            }
        }
    }
    out
}

/// One production function definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    pub path: String,
    pub name: String,
    /// First and last one-based line.
    pub first: u32,
    pub last: u32,
}

/// What one scan over a tree's parsed files gathered.
#[derive(Debug, Default)]
pub struct Scan {
    callees: BTreeSet<String>,
    definitions: BTreeMap<String, Vec<Definition>>,
    remembered: usize,
}

/// The node kinds that define a named function, per language.
fn is_function(language: Language, kind: &str) -> bool {
    match language {
        Language::Python => kind == "function_definition",
        Language::Rust => kind == "function_item",
        Language::Go => matches!(kind, "function_declaration" | "method_declaration"),
        _ => matches!(
            kind,
            "function_declaration" | "method_definition" | "generator_function_declaration"
        ),
    }
}

/// The name of a function node (JS arrow functions and function expressions take the name of the
/// variable they are assigned to).
fn function_name(file: &ParsedFile<'_>, node: Node<'_>) -> Option<String> {
    node.child_by_field_name("name")
        .map(|n| file.text(n).into_owned())
}

/// A JS `const f = (..) => ..` / `const f = function (..) {..}`: the declarator's name and value.
fn js_function_variable<'t>(file: &ParsedFile<'_>, node: Node<'t>) -> Option<(String, Node<'t>)> {
    if node.kind() != "variable_declarator" {
        return None;
    }
    let value = node.child_by_field_name("value")?;
    if !matches!(
        value.kind(),
        "arrow_function" | "function_expression" | "function"
    ) {
        return None;
    }
    Some((
        file.text(node.child_by_field_name("name")?).into_owned(),
        value,
    ))
}

/// The name a call calls: the last identifier of its callee.
fn called_name(file: &ParsedFile<'_>, call: Node<'_>) -> Option<String> {
    let callee = call.child_by_field_name("function")?;
    let last = match callee.kind() {
        "identifier" | "field_identifier" => Some(callee),
        // Python `m.f`, JS `a.f`, Go `pkg.F`.
        "attribute" => callee.child_by_field_name("attribute"),
        "member_expression" => callee.child_by_field_name("property"),
        "selector_expression" => callee.child_by_field_name("field"),
        // Rust `a::f`, `x.f`, `f::<T>`.
        "scoped_identifier" => callee.child_by_field_name("name"),
        "field_expression" => callee.child_by_field_name("field"),
        "generic_function" => callee
            .child_by_field_name("function")
            .and_then(|f| match f.kind() {
                "scoped_identifier" => f.child_by_field_name("name"),
                _ => Some(f),
            }),
        _ => None,
    }?;
    Some(file.text(last).into_owned())
}

/// The names called inside a Rust macro's token tree: an identifier followed by a `( .. )` tree.
fn token_tree_calls(file: &ParsedFile<'_>, tree: Node<'_>, out: &mut BTreeSet<String>) {
    walk(tree, |node| {
        if node.kind() == "identifier" {
            if let Some(next) = node.next_sibling() {
                if next.kind() == "token_tree"
                    && file.text(next).starts_with('(')
                    && out.len() < MAX_CALLEES
                {
                    out.insert(file.text(node).into_owned());
                }
            }
        }
        true
    });
}

/// Every name called beneath `body`.
fn calls_beneath(file: &ParsedFile<'_>, body: Node<'_>, out: &mut BTreeSet<String>) {
    walk(body, |node| {
        match node.kind() {
            "call" | "call_expression" => {
                if let Some(name) = called_name(file, node) {
                    if out.len() < MAX_CALLEES {
                        out.insert(name);
                    }
                }
            }
            "token_tree" if file.language == Language::Rust => {
                token_tree_calls(file, node, out);
                return false;
            }
            _ => {}
        }
        true
    });
}

/// A JS `test('desc', fn)` / `it(..)` / `test.each(..)(..)` call: its description and callback.
fn js_test_callback<'t>(file: &ParsedFile<'_>, call: Node<'t>) -> Option<(String, Node<'t>)> {
    if call.kind() != "call_expression" {
        return None;
    }
    let callee = call.child_by_field_name("function")?;
    let head = match callee.kind() {
        "identifier" => file.text(callee).into_owned(),
        "member_expression" => file
            .text(callee.child_by_field_name("object")?)
            .into_owned(),
        _ => return None,
    };
    if !matches!(head.as_str(), "test" | "it" | "specify") {
        return None;
    }
    let args = call.child_by_field_name("arguments")?;
    let mut cursor = args.walk();
    let named: Vec<Node<'t>> = args.named_children(&mut cursor).collect();
    let description = crate::analysis::syntax::string_value(file, *named.first()?)?;
    let callback = named.iter().copied().find(|n| {
        matches!(
            n.kind(),
            "arrow_function" | "function_expression" | "function"
        )
    })?;
    Some((description, callback))
}

impl Scan {
    /// Gather from one parsed file: the names called in the test functions `tests` names, and
    /// the production function definitions.
    pub fn add(&mut self, file: &ParsedFile<'_>, tests: &BTreeSet<String>) {
        let whole_file_is_test = test_code::is_test_file(file.path, file.language);
        walk(file.root(), |node| {
            let kind = node.kind();
            let named_function = if is_function(file.language, kind) {
                function_name(file, node).map(|name| (name, node))
            } else if file.language.is_js_family() {
                js_function_variable(file, node)
            } else {
                None
            };
            if let Some((name, function)) = named_function {
                if test_code::in_test_code(file, whole_file_is_test, function) || whole_file_is_test
                {
                    if tests.contains(&name) {
                        calls_beneath(file, function, &mut self.callees);
                    }
                } else if self.remembered < MAX_DEFINITIONS {
                    self.remembered += 1;
                    let first = file.line(function);
                    let last = u32::try_from(function.end_position().row)
                        .map_or(u32::MAX, |r| r.saturating_add(1));
                    self.definitions
                        .entry(name.clone())
                        .or_default()
                        .push(Definition {
                            path: file.path.to_string(),
                            name,
                            first,
                            last,
                        });
                }
            }
            if file.language.is_js_family() {
                if let Some((description, callback)) = js_test_callback(file, node) {
                    if tests.contains(&description) {
                        calls_beneath(file, callback, &mut self.callees);
                    }
                }
            }
            true
        });
    }

    /// The production functions the failing tests call: names called from them with at most
    /// [`MAX_DEFINITIONS_PER_NAME`] production definitions, at most [`MAX_TARGET_FUNCTIONS`],
    /// in name order.
    pub fn targets(&self) -> Vec<Definition> {
        self.callees
            .iter()
            .filter_map(|name| self.definitions.get(name))
            .filter(|defs| defs.len() <= MAX_DEFINITIONS_PER_NAME)
            .flatten()
            .take(MAX_TARGET_FUNCTIONS)
            .cloned()
            .collect()
    }
}

/// The target lines per file of `targets` (every line of each function).
pub fn lines_by_file(targets: &[Definition]) -> BTreeMap<String, BTreeSet<u32>> {
    let mut out: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for d in targets {
        out.entry(d.path.clone())
            .or_default()
            .extend(d.first..=d.last);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::syntax::{parse, Limits, Parse};

    fn scan(files: &[(&str, &str)], failing: &[&str]) -> Vec<(String, String, u32, u32)> {
        let tests = test_names(&failing.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let mut scan = Scan::default();
        for (path, text) in files {
            let Ok(Parse::Parsed(file)) = parse(path, text.as_bytes(), Limits::default()) else {
                panic!("{path} did not parse")
            };
            scan.add(&file, &tests);
        }
        scan.targets()
            .into_iter()
            .map(|d| (d.path, d.name, d.first, d.last))
            .collect()
    }

    #[test]
    fn test_names_are_the_components_of_pytest_libtest_and_go_ids() {
        let ids = [
            "tests.test_calc.TestCalc::test_zero[1-2]",
            "sample::tests::adds - should panic",
            "example.com/m/calc/TestTable/small",
        ];
        let names = test_names(&ids.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        for name in ["test_zero", "TestCalc", "adds", "TestTable", "small"] {
            assert!(names.contains(name), "{name} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains('[') || n.contains(" - ")));
    }

    #[test]
    fn a_python_failing_test_targets_the_production_function_it_calls_through_a_module() {
        let core = "def add(a, b):\n    return a - b\n\n\ndef unrelated():\n    return 1\n";
        let test = "import calc.core as c\n\ndef test_add():\n    assert c.add(1, 2) == 3\n\ndef test_other():\n    assert c.unrelated() == 1\n";
        let got = scan(
            &[("calc/core.py", core), ("tests/test_core.py", test)],
            &["tests.test_core::test_add"],
        );
        assert_eq!(got, vec![("calc/core.py".into(), "add".into(), 1, 2)]);
    }

    #[test]
    fn a_rust_unit_test_targets_a_function_called_inside_an_assert_macro() {
        let lib = "pub fn hamming(a: &str, b: &str) -> usize {\n    a.len() + b.len()\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n    #[test]\n    fn counts() {\n        assert_eq!(hamming(\"a\", \"b\"), 1);\n    }\n}\n";
        let got = scan(&[("src/lib.rs", lib)], &["strsim::tests::counts"]);
        assert_eq!(got, vec![("src/lib.rs".into(), "hamming".into(), 1, 3)]);
    }

    #[test]
    fn a_go_test_targets_the_function_it_calls_and_not_the_test_itself() {
        let code = "package calc\n\nfunc Add(a, b int) int {\n\treturn a - b\n}\n";
        let test = "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"bad\")\n\t}\n}\n";
        let got = scan(
            &[("calc/calc.go", code), ("calc/calc_test.go", test)],
            &["example.com/m/calc/TestAdd"],
        );
        assert_eq!(got, vec![("calc/calc.go".into(), "Add".into(), 3, 5)]);
    }

    #[test]
    fn a_node_test_described_by_its_id_targets_an_arrow_function_it_calls() {
        let code = "const add = (a, b) => a - b;\nmodule.exports = { add };\n";
        let test = "const { test } = require('node:test');\nconst { add } = require('../add');\ntest('adds', () => {\n  if (add(1, 2) !== 3) throw new Error('bad');\n});\n";
        let got = scan(&[("add.js", code), ("test/add.test.js", test)], &["adds"]);
        assert_eq!(got, vec![("add.js".into(), "add".into(), 1, 1)]);
    }

    #[test]
    fn a_name_defined_in_more_production_places_than_the_bound_is_left_out() {
        let a = "def get():\n    return 1\n";
        let test = "def test_get():\n    assert get() == 2\n";
        let got = scan(
            &[
                ("a.py", a),
                ("b.py", a),
                ("c.py", a),
                ("tests/test_get.py", test),
            ],
            &["tests.test_get::test_get"],
        );
        assert_eq!(got, Vec::<(String, String, u32, u32)>::new());
    }

    #[test]
    fn tests_that_did_not_fail_at_t0_target_nothing() {
        let core = "def add(a, b):\n    return a + b\n";
        let test = "def test_add():\n    assert add(1, 2) == 3\n";
        assert!(scan(
            &[("core.py", core), ("tests/test_core.py", test)],
            &["tests.test_core::test_sub"]
        )
        .is_empty());
    }

    #[test]
    fn target_lines_cover_every_line_of_each_target_function() {
        let defs = vec![
            Definition {
                path: "a.py".into(),
                name: "f".into(),
                first: 3,
                last: 5,
            },
            Definition {
                path: "a.py".into(),
                name: "g".into(),
                first: 9,
                last: 9,
            },
        ];
        assert_eq!(
            lines_by_file(&defs),
            BTreeMap::from([("a.py".to_string(), BTreeSet::from([3, 4, 5, 9]))])
        );
    }
}
