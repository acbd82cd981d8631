//! Assertion counting over test code, per language, on syntax trees (a comment or a string that
//! says `assert` counts nothing). What counts:
//! - Python (test files only): `assert` statements; calls whose callee's last name starts with
//!   `assert` (`self.assertEqual`, `mock.assert_called_once_with`, `np.testing.assert_allclose`);
//!   `pytest.raises`, `pytest.warns`, `pytest.deprecated_call`.
//! - Rust (test files, `#[cfg(test)]` modules, test functions, running doctests): invocations of
//!   macros whose name starts with `assert`, `debug_assert` or `prop_assert` (also inside other
//!   macros' token trees); each `#[should_panic]` test counts one.
//! - Go (`_test.go`): `X.Error`, `X.Errorf`, `X.Fatal`, `X.Fatalf`, `X.Fail`, `X.FailNow` on any
//!   receiver but `log`; every call into testify's `assert` and `require` packages; gomega's
//!   `Expect`/`Ω`.
//! - JS/TS (test files): calls of `expect(...)` and `assert(...)`, and of any member of an
//!   object named `assert` (`assert.equal`, `t.assert.ok`, `chai.assert.isTrue`).
//! - Any other language: nothing is counted (the file is reported as not analysed).

use tree_sitter::Node;

use super::rust_doc;
use super::syntax::{compact_text, parse_as, walk, Language, Limits, Parse, ParsedFile};
use super::test_code::{in_test_code, is_rust_test_fn, rust_attributes};
use super::AnalysisError;

/// The number of assertions in the test code of one parsed file.
pub fn count(
    file: &ParsedFile<'_>,
    whole_file_is_test: bool,
    limits: Limits,
) -> Result<u64, AnalysisError> {
    type IsAssertion = fn(&ParsedFile<'_>, Node<'_>) -> bool;
    let mut total = 0u64;
    let whole_file_rule: Option<IsAssertion> = match file.language {
        Language::Python => Some(python_assertion),
        Language::Go => Some(go_assertion),
        Language::JavaScript | Language::TypeScript | Language::Tsx => Some(js_assertion),
        Language::Rust => None,
    };
    if let Some(is_assertion) = whole_file_rule {
        if whole_file_is_test {
            walk(file.root(), |n| {
                total += u64::from(is_assertion(file, n));
                true
            });
        }
        return Ok(total);
    }
    walk(file.root(), |n| {
        if is_rust_assertion(file, n) && in_test_code(file, whole_file_is_test, n) {
            total += 1;
        }
        if n.kind() == "function_item"
            && is_rust_test_fn(file, n)
            && rust_attributes(file, n)
                .iter()
                .any(|a| a.starts_with("should_panic"))
        {
            total += 1;
        }
        true
    });
    if !whole_file_is_test {
        total += doctest_assertions(file, limits)?;
    }
    Ok(total)
}

fn python_assertion(file: &ParsedFile<'_>, n: Node<'_>) -> bool {
    match n.kind() {
        "assert_statement" => true,
        "call" => {
            let Some(callee) = n.child_by_field_name("function") else {
                return false;
            };
            let name = compact_text(file, callee);
            let last = name.rsplit('.').next().unwrap_or_default();
            last.starts_with("assert")
                || matches!(
                    name.as_str(),
                    "pytest.raises" | "pytest.warns" | "pytest.deprecated_call"
                )
        }
        _ => false,
    }
}

/// Whether a macro name is an assertion macro.
pub fn is_assertion_macro(name: &str) -> bool {
    let last = name.rsplit("::").next().unwrap_or_default();
    last.starts_with("assert")
        || last.starts_with("debug_assert")
        || last.starts_with("prop_assert")
}

fn is_rust_assertion(file: &ParsedFile<'_>, n: Node<'_>) -> bool {
    match n.kind() {
        "macro_invocation" => n
            .child_by_field_name("macro")
            .is_some_and(|m| is_assertion_macro(&compact_text(file, m))),
        // Inside another macro's arguments an invocation is only tokens: `assert` `!` `(...)`.
        "identifier" => {
            n.parent().is_some_and(|p| p.kind() == "token_tree")
                && n.next_sibling().is_some_and(|s| s.kind() == "!")
                && is_assertion_macro(&file.text(n))
        }
        _ => false,
    }
}

/// Assertions in the doctests rustdoc runs, each fence parsed as the body of a function.
fn doctest_assertions(file: &ParsedFile<'_>, limits: Limits) -> Result<u64, AnalysisError> {
    let mut total = 0;
    for test in rust_doc::doctests(file) {
        if !test.runs() {
            continue;
        }
        let wrapped = format!("fn doctest() {{\n{}\n}}\n", test.code);
        if let Parse::Parsed(code) =
            parse_as(file.path, wrapped.as_bytes(), Language::Rust, limits)?
        {
            walk(code.root(), |n| {
                total += u64::from(is_rust_assertion(&code, n));
                true
            });
        }
        if test.attributes.iter().any(|a| a == "should_panic") {
            total += 1;
        }
    }
    Ok(total)
}

fn go_assertion(file: &ParsedFile<'_>, n: Node<'_>) -> bool {
    if n.kind() != "call_expression" {
        return false;
    }
    let Some(callee) = n.child_by_field_name("function") else {
        return false;
    };
    match callee.kind() {
        "identifier" => matches!(&*file.text(callee), "Expect" | "Ω"),
        "selector_expression" => {
            let operand = callee
                .child_by_field_name("operand")
                .map(|o| file.text(o).into_owned());
            let field = callee
                .child_by_field_name("field")
                .map(|f| file.text(f).into_owned());
            match (operand.as_deref(), field.as_deref()) {
                (Some("assert" | "require"), Some(_)) => true,
                (Some("log"), _) => false,
                (Some(_), Some("Error" | "Errorf" | "Fatal" | "Fatalf" | "Fail" | "FailNow")) => {
                    true
                }
                _ => false,
            }
        }
        _ => false,
    }
}

fn js_assertion(file: &ParsedFile<'_>, n: Node<'_>) -> bool {
    if n.kind() != "call_expression" {
        return false;
    }
    let Some(callee) = n.child_by_field_name("function") else {
        return false;
    };
    match callee.kind() {
        "identifier" => matches!(&*file.text(callee), "expect" | "assert"),
        "member_expression" => {
            callee
                .child_by_field_name("object")
                .is_some_and(|o| match o.kind() {
                    "identifier" => file.text(o) == "assert",
                    "member_expression" => o
                        .child_by_field_name("property")
                        .is_some_and(|p| file.text(p) == "assert"),
                    _ => false,
                })
        }
        _ => false,
    }
}
