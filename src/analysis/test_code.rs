//! Which code is test code: whole test files by each runner's default discovery, and, inside Rust
//! production files, `#[cfg(test)]` modules and test functions. Assertion counting and the
//! tampering rules ask this module; nothing else decides it.

use tree_sitter::Node;

use super::syntax::{file_name, Language, ParsedFile};

/// Whether the whole file at `path` is test code for `language`:
/// - Python: pytest's and unittest's default discovery (`test*.py`, `*_test.py`), `conftest.py`,
///   and any file under a `tests/` or `test/` directory (test helpers);
/// - Rust: files under a `tests/` directory (integration tests and their helpers) and files named
///   `tests.rs`, `test.rs`, `*_tests.rs`, `*_test.rs` (out-of-line `#[cfg(test)] mod x_tests;`);
/// - Go: `*_test.go`;
/// - JS/TS: `*.test.*`, `*.spec.*`, anything under `__tests__/` or `test/`, and node --test's
///   defaults `test.*`, `test-*.*`, `*-test.*`, `*_test.*`.
pub fn is_test_file(path: &str, language: Language) -> bool {
    let name = file_name(path);
    let stem = name.split_once('.').map_or(name, |(s, _)| s);
    let dirs: Vec<&str> = path.split('/').collect();
    let dirs = &dirs[..dirs.len().saturating_sub(1)];
    let under = |d: &str| dirs.contains(&d);
    match language {
        Language::Python => {
            name.starts_with("test")
                || stem.ends_with("_test")
                || name == "conftest.py"
                || under("tests")
                || under("test")
        }
        Language::Rust => {
            under("tests")
                || matches!(stem, "tests" | "test")
                || stem.ends_with("_tests")
                || stem.ends_with("_test")
        }
        Language::Go => name.ends_with("_test.go"),
        Language::JavaScript | Language::TypeScript | Language::Tsx => {
            let mut parts = name.split('.');
            let base = parts.next().unwrap_or_default();
            let rest: Vec<&str> = parts.collect();
            // jest/vitest: the part just before the extension is `test` or `spec`.
            let marked = rest.len() >= 2 && matches!(rest[rest.len() - 2], "test" | "spec");
            // node --test: `test.js`, `test-*.js`, `*-test.js`, `*_test.js` (one extension).
            let node_default = rest.len() == 1
                && (base == "test"
                    || base.starts_with("test-")
                    || base.ends_with("-test")
                    || base.ends_with("_test"));
            marked || node_default || under("__tests__") || under("test")
        }
    }
}

/// Whether `node` lies in test code: the file is a test file, or (Rust) the node is inside a
/// `#[cfg(test)]` module or a test function. Doctest fences are handled by `rust_doc`.
pub fn in_test_code(file: &ParsedFile<'_>, whole_file_is_test: bool, node: Node<'_>) -> bool {
    if whole_file_is_test {
        return true;
    }
    if file.language != Language::Rust {
        return false;
    }
    let mut current = Some(node);
    while let Some(n) = current {
        match n.kind() {
            "mod_item" if rust_attributes(file, n).iter().any(|a| is_cfg_test(a)) => return true,
            "function_item" if is_rust_test_fn(file, n) => return true,
            _ => {}
        }
        current = n.parent();
    }
    false
}

/// The texts of the attributes (`#[...]` contents, whitespace removed) written before a Rust item.
pub fn rust_attributes(file: &ParsedFile<'_>, item: Node<'_>) -> Vec<String> {
    let mut attrs = Vec::new();
    let mut sibling = item.prev_sibling();
    while let Some(s) = sibling {
        match s.kind() {
            "attribute_item" => {
                if let Some(attr) = s.named_child(0) {
                    attrs.push(compact(&file.text(attr)));
                }
            }
            "line_comment" | "block_comment" => {}
            _ => break,
        }
        sibling = s.prev_sibling();
    }
    attrs.reverse();
    attrs
}

/// Whitespace removed: attributes compare by their tokens, not their layout.
pub fn compact(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// `cfg(test)` exactly (a module compiled only for tests).
pub fn is_cfg_test(attr: &str) -> bool {
    attr == "cfg(test)"
}

/// Whether an attribute marks a test function: `test`, or a path ending in `::test`
/// (`tokio::test`, `async_std::test`), `rstest`, `test_case(...)`, `wasm_bindgen_test`.
pub fn is_test_attribute(attr: &str) -> bool {
    let path = attr.split(['(', '=']).next().unwrap_or_default();
    let last = path.rsplit("::").next().unwrap_or_default();
    matches!(last, "test" | "rstest" | "test_case" | "wasm_bindgen_test")
}

/// Whether a Rust `function_item` is a test function (carries a test attribute).
pub fn is_rust_test_fn(file: &ParsedFile<'_>, function: Node<'_>) -> bool {
    rust_attributes(file, function)
        .iter()
        .any(|a| is_test_attribute(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_test_files_follow_pytest_and_unittest_discovery() {
        for p in [
            "test_a.py",
            "pkg/a_test.py",
            "tests.py",
            "conftest.py",
            "tests/helpers.py",
        ] {
            assert!(is_test_file(p, Language::Python), "{p}");
        }
        for p in ["a.py", "pkg/contest.py", "src/attest.py"] {
            assert!(!is_test_file(p, Language::Python), "{p}");
        }
    }

    #[test]
    fn js_test_files_follow_jest_vitest_and_node_defaults() {
        for p in [
            "a.test.js",
            "src/a.spec.tsx",
            "__tests__/a.js",
            "test/a.mjs",
            "test-a.js",
            "a_test.cjs",
        ] {
            assert!(is_test_file(p, Language::JavaScript), "{p}");
        }
        for p in ["src/a.js", "test.config.js", "latest.js", "contest.js"] {
            assert!(!is_test_file(p, Language::JavaScript), "{p}");
        }
    }

    #[test]
    fn go_and_rust_test_files() {
        assert!(is_test_file("pkg/a_test.go", Language::Go));
        assert!(!is_test_file("pkg/a.go", Language::Go));
        assert!(is_test_file("tests/it.rs", Language::Rust));
        assert!(is_test_file("src/parser/tests.rs", Language::Rust));
        assert!(is_test_file("src/parser_tests.rs", Language::Rust));
        assert!(!is_test_file("src/lib.rs", Language::Rust));
    }

    #[test]
    fn test_attributes_include_async_runtimes() {
        assert!(is_test_attribute("test"));
        assert!(is_test_attribute("tokio::test(flavor=\"multi_thread\")"));
        assert!(!is_test_attribute("cfg(test)"));
        assert!(!is_test_attribute("testing"));
    }
}
