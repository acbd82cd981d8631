//! Test items (every test function, JS `test`/`it` call and Rust doctest, with the attributes
//! that decide whether and how it runs) and their comparison between t0 and the end state: an
//! item of t0 that is gone, or whose attributes changed, is what the metric-integrity guard
//! reports. Items added by the agent are not changes.

use std::collections::BTreeMap;

use serde::Serialize;
use tree_sitter::Node;

use super::rust_doc::{self, module_path};
use super::syntax::{
    ancestor, compact_text, first_argument, named_children, string_value, walk, Language,
    ParsedFile,
};
use super::test_code::{is_cfg_test, is_rust_test_fn, rust_attributes};

/// What kind of test an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TestItemKind {
    /// A Rust function with a test attribute (`#[test]`, `#[tokio::test]`, ...).
    RustTest,
    /// A Rust code fence in a doc comment.
    RustDoctest,
    /// A pytest/unittest test function or method.
    PythonTest,
    /// A Go `TestX`, `BenchmarkX`, `FuzzX` or `ExampleX` function.
    GoTest,
    /// A JS/TS `test(...)`/`it(...)` call.
    JsTest,
}

/// One test item of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TestItem {
    pub file: String,
    pub kind: TestItemKind,
    /// The item's name qualified within its file (`tests::adds`, `TestMath::test_add`,
    /// `math > adds`, `add#0` for the first doctest of `add`).
    pub name: String,
    pub line: u32,
    /// The attributes, sorted: Rust attributes (`ignore`, `should_panic(expected="x")`) and those
    /// of enclosing modules (`mod ...`); Python decorators (`@pytest.mark.xfail`), the class's
    /// (`class @...`) and `pytestmark`/`__test__` assignments; JS modifiers (`skip`, `only`,
    /// `todo`, options `skip:true`) and enclosing `describe`s' (`describe skip`); doctest fence
    /// tokens (`no_run`, `ignore`).
    pub attributes: Vec<String>,
}

/// How a test item of t0 differs at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum TestItemChange {
    /// The item is not in the end state (same file, kind and name).
    Removed { item: TestItem },
    /// The item is there with other attributes.
    AttributesChanged {
        before: TestItem,
        after: TestItem,
        added: Vec<String>,
        removed: Vec<String>,
    },
}

/// The test items of one parsed file (`whole_file_is_test` as decided by `test_code`).
pub fn items(file: &ParsedFile<'_>, whole_file_is_test: bool) -> Vec<TestItem> {
    let mut found = match file.language {
        Language::Rust => rust_items(file, whole_file_is_test),
        Language::Python if whole_file_is_test => python_items(file),
        Language::Go if whole_file_is_test => go_items(file),
        l if l.is_js_family() && whole_file_is_test => js_items(file),
        _ => Vec::new(),
    };
    for item in &mut found {
        item.attributes.sort();
        item.attributes.dedup();
    }
    found
}

/// The t0 items that are gone or changed attributes at the end, in t0's order.
pub fn diff(t0: &[TestItem], end: &[TestItem]) -> Vec<TestItemChange> {
    let mut at_end: BTreeMap<(&str, TestItemKind, &str), Vec<&TestItem>> = BTreeMap::new();
    for item in end {
        at_end
            .entry((&item.file, item.kind, &item.name))
            .or_default()
            .push(item);
    }
    let mut changes = Vec::new();
    for before in t0 {
        let candidates = at_end.get_mut(&(before.file.as_str(), before.kind, before.name.as_str()));
        let Some(candidates) = candidates.filter(|c| !c.is_empty()) else {
            changes.push(TestItemChange::Removed {
                item: before.clone(),
            });
            continue;
        };
        let position = candidates
            .iter()
            .position(|c| c.attributes == before.attributes)
            .unwrap_or(0);
        let after = candidates.remove(position);
        if after.attributes != before.attributes {
            let added = after
                .attributes
                .iter()
                .filter(|a| !before.attributes.contains(a))
                .cloned()
                .collect();
            let removed = before
                .attributes
                .iter()
                .filter(|a| !after.attributes.contains(a))
                .cloned()
                .collect();
            changes.push(TestItemChange::AttributesChanged {
                before: before.clone(),
                after: after.clone(),
                added,
                removed,
            });
        }
    }
    changes
}

fn item(
    file: &ParsedFile<'_>,
    kind: TestItemKind,
    name: String,
    node: Node<'_>,
    attributes: Vec<String>,
) -> TestItem {
    TestItem {
        file: file.path.to_string(),
        kind,
        name,
        line: file.line(node),
        attributes,
    }
}

fn rust_items(file: &ParsedFile<'_>, whole_file_is_test: bool) -> Vec<TestItem> {
    let mut found = Vec::new();
    walk(file.root(), |n| {
        if n.kind() == "function_item" && is_rust_test_fn(file, n) {
            let mut attributes = rust_attributes(file, n);
            let mut module = n.parent();
            while let Some(m) = module {
                if m.kind() == "mod_item" {
                    attributes.extend(
                        rust_attributes(file, m)
                            .into_iter()
                            .filter(|a| !is_cfg_test(a))
                            .map(|a| format!("mod {a}")),
                    );
                }
                module = m.parent();
            }
            let mut path = module_path(file, n);
            path.push(
                n.child_by_field_name("name")
                    .map_or_else(String::new, |x| file.text(x).into_owned()),
            );
            found.push(item(
                file,
                TestItemKind::RustTest,
                path.join("::"),
                n,
                attributes,
            ));
        }
        true
    });
    if !whole_file_is_test {
        for test in rust_doc::doctests(file) {
            found.push(TestItem {
                file: file.path.to_string(),
                kind: TestItemKind::RustDoctest,
                name: format!("{}#{}", test.owner, test.index),
                line: test.line,
                attributes: test.attributes,
            });
        }
    }
    found
}

/// The assignments `pytestmark = ...` and `__test__ = ...` directly in a module or class body.
fn python_marks(file: &ParsedFile<'_>, body: Node<'_>, prefix: &str) -> Vec<String> {
    let mut marks = Vec::new();
    for statement in named_children(body) {
        let Some(assignment) = statement
            .named_child(0)
            .filter(|a| statement.kind() == "expression_statement" && a.kind() == "assignment")
        else {
            continue;
        };
        let target = assignment
            .child_by_field_name("left")
            .map(|l| compact_text(file, l));
        if let (Some(target @ ("pytestmark" | "__test__")), Some(value)) =
            (target.as_deref(), assignment.child_by_field_name("right"))
        {
            marks.push(format!("{prefix}{target}={}", compact_text(file, value)));
        }
    }
    marks
}

fn python_decorators(file: &ParsedFile<'_>, definition: Node<'_>) -> Vec<String> {
    let Some(parent) = definition
        .parent()
        .filter(|p| p.kind() == "decorated_definition")
    else {
        return Vec::new();
    };
    named_children(parent)
        .into_iter()
        .filter(|d| d.kind() == "decorator")
        .map(|d| compact_text(file, d))
        .collect()
}

fn python_items(file: &ParsedFile<'_>) -> Vec<TestItem> {
    let mut found = Vec::new();
    let module_marks = python_marks(file, file.root(), "module ");
    // (body, class path, inherited attributes, inside a test class)
    let mut stack = vec![(file.root(), String::new(), module_marks, false)];
    while let Some((body, class_path, inherited, in_test_class)) = stack.pop() {
        for statement in named_children(body) {
            let definition = if statement.kind() == "decorated_definition" {
                statement.child_by_field_name("definition")
            } else {
                Some(statement)
            };
            let Some(definition) = definition else {
                continue;
            };
            let Some(name) = definition
                .child_by_field_name("name")
                .map(|n| file.text(n).into_owned())
            else {
                continue;
            };
            match definition.kind() {
                "function_definition"
                    if name.starts_with("test") && (class_path.is_empty() || in_test_class) =>
                {
                    let mut attributes = inherited.clone();
                    attributes.extend(python_decorators(file, definition));
                    let qualified = if class_path.is_empty() {
                        name
                    } else {
                        format!("{class_path}::{name}")
                    };
                    found.push(item(
                        file,
                        TestItemKind::PythonTest,
                        qualified,
                        definition,
                        attributes,
                    ));
                }
                "class_definition" => {
                    let unittest =
                        definition
                            .child_by_field_name("superclasses")
                            .is_some_and(|s| {
                                named_children(s)
                                    .iter()
                                    .any(|b| compact_text(file, *b).ends_with("TestCase"))
                            });
                    let is_test_class = name.starts_with("Test") || unittest;
                    let Some(class_body) = definition.child_by_field_name("body") else {
                        continue;
                    };
                    let mut attributes = inherited.clone();
                    attributes.extend(
                        python_decorators(file, definition)
                            .into_iter()
                            .map(|d| format!("class {d}")),
                    );
                    attributes.extend(python_marks(file, class_body, "class "));
                    let path = if class_path.is_empty() {
                        name
                    } else {
                        format!("{class_path}::{name}")
                    };
                    stack.push((class_body, path, attributes, is_test_class));
                }
                _ => {}
            }
        }
    }
    found.sort_by_key(|i| i.line);
    found
}

/// Go's rule: `TestX` where X does not start with a lower-case letter.
fn is_go_test_name(name: &str) -> bool {
    ["Test", "Benchmark", "Fuzz", "Example"]
        .iter()
        .any(|prefix| {
            name.strip_prefix(prefix)
                .is_some_and(|rest| !rest.starts_with(|c: char| c.is_lowercase()))
        })
}

fn go_items(file: &ParsedFile<'_>) -> Vec<TestItem> {
    named_children(file.root())
        .into_iter()
        .filter(|d| d.kind() == "function_declaration")
        .filter_map(|d| {
            let name = file.text(d.child_by_field_name("name")?).into_owned();
            (is_go_test_name(&name) && name != "TestMain")
                .then(|| item(file, TestItemKind::GoTest, name, d, Vec::new()))
        })
        .collect()
}

/// A JS test-framework call: its base name (`test`, `it`, `describe`, ...) and modifiers
/// (`skip`, `only`, `each`, ...), with `xit`/`fit` style prefixes turned into modifiers.
pub fn js_test_call(file: &ParsedFile<'_>, call: Node<'_>) -> Option<(String, Vec<String>)> {
    if call.kind() != "call_expression" {
        return None;
    }
    let mut callee = call.child_by_field_name("function")?;
    let mut modifiers = Vec::new();
    // `test.each(table)("name", fn)`: the callee is itself a call.
    if callee.kind() == "call_expression" {
        callee = callee.child_by_field_name("function")?;
    }
    while callee.kind() == "member_expression" {
        modifiers.push(
            file.text(callee.child_by_field_name("property")?)
                .into_owned(),
        );
        callee = callee.child_by_field_name("object")?;
    }
    if callee.kind() != "identifier" {
        return None;
    }
    modifiers.reverse();
    let base = file.text(callee).into_owned();
    let base = match base.as_str() {
        "test" | "it" | "describe" | "suite" | "context" => base,
        "xit" | "xtest" | "xdescribe" | "xcontext" => {
            modifiers.push("skip".to_string());
            base[1..].to_string()
        }
        "fit" | "fdescribe" => {
            modifiers.push("only".to_string());
            base[1..].to_string()
        }
        _ => return None,
    };
    if let Some(arguments) = call.child_by_field_name("arguments") {
        for argument in named_children(arguments)
            .into_iter()
            .filter(|a| a.kind() == "object")
        {
            for pair in named_children(argument)
                .into_iter()
                .filter(|p| p.kind() == "pair")
            {
                let key = pair
                    .child_by_field_name("key")
                    .map(|k| file.text(k).into_owned())
                    .unwrap_or_default();
                if matches!(key.as_str(), "skip" | "todo" | "only") {
                    modifiers.push(compact_text(file, pair));
                }
            }
        }
    }
    Some((base, modifiers))
}

fn js_test_name(file: &ParsedFile<'_>, call: Node<'_>) -> String {
    first_argument(call).map_or_else(String::new, |a| {
        string_value(file, a).unwrap_or_else(|| compact_text(file, a))
    })
}

fn js_items(file: &ParsedFile<'_>) -> Vec<TestItem> {
    let mut found = Vec::new();
    walk(file.root(), |n| {
        let Some((base, modifiers)) = js_test_call(file, n) else {
            return true;
        };
        if base != "test" && base != "it" {
            return true;
        }
        let mut names = vec![js_test_name(file, n)];
        let mut attributes = modifiers;
        let mut inner = n;
        while let Some(outer) = ancestor(inner, |a| js_test_call(file, a).is_some()) {
            if let Some((outer_base, outer_modifiers)) = js_test_call(file, outer) {
                names.push(js_test_name(file, outer));
                attributes.extend(
                    outer_modifiers
                        .into_iter()
                        .map(|m| format!("{outer_base} {m}")),
                );
            }
            inner = outer;
        }
        names.reverse();
        found.push(item(
            file,
            TestItemKind::JsTest,
            names.join(" > "),
            n,
            attributes,
        ));
        true
    });
    found
}
