//! Rust doctests: the code fences of doc comments (`///`, `//!`, `/** */`, `/*! */`), with the
//! item they document and their fence attributes, read the way rustdoc decides which fences are
//! Rust tests.

use tree_sitter::Node;

use super::syntax::{walk, ParsedFile};

/// One Rust code fence of a doc comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocTest {
    /// The documented item's path within the file (`crate` for the file's own `//!` docs).
    pub owner: String,
    /// The fence's position among the Rust fences of the owner's doc comment, from 0.
    pub index: usize,
    /// The one-based line of the opening fence.
    pub line: u32,
    /// The fence's info tokens (`rust`, `ignore`, `no_run`, ...), sorted.
    pub attributes: Vec<String>,
    /// The code, with rustdoc's hidden-line markers (`# `) removed.
    pub code: String,
}

impl DocTest {
    /// Whether rustdoc runs this doctest (it is neither `ignore`d, `no_run` nor `compile_fail`).
    pub fn runs(&self) -> bool {
        !self.attributes.iter().any(|a| {
            a == "ignore" || a.starts_with("ignore-") || a == "no_run" || a == "compile_fail"
        })
    }
}

/// Every Rust doctest in a parsed Rust file.
pub fn doctests(file: &ParsedFile<'_>) -> Vec<DocTest> {
    let mut blocks: Vec<(String, Vec<(u32, String)>)> = Vec::new();
    let mut previous_doc: Option<(usize, bool)> = None; // (end row, inner)
    walk(file.root(), |node| {
        let Some(inner) = doc_comment_kind(node) else {
            return !matches!(node.kind(), "line_comment" | "block_comment");
        };
        let lines = doc_lines(file, node);
        let start_row = node.start_position().row;
        let continues = previous_doc
            .is_some_and(|(end, was_inner)| was_inner == inner && start_row <= end + 1)
            && node.kind() == "line_comment";
        if continues {
            if let Some((_, block)) = blocks.last_mut() {
                block.extend(lines);
            }
        } else {
            blocks.push((doc_owner(file, node, inner), lines));
        }
        let end = node.end_position().row;
        // A line comment's node ends on the next line (it includes its newline).
        let end = if node.kind() == "line_comment" {
            end.saturating_sub(1)
        } else {
            end
        };
        previous_doc = Some((end, inner));
        false
    });
    let mut tests = Vec::new();
    let mut per_owner: std::collections::BTreeMap<String, usize> =
        std::collections::BTreeMap::new();
    for (owner, lines) in blocks {
        for (line, info, code) in fences(&lines) {
            let Some(attributes) = rust_fence_attributes(&info) else {
                continue;
            };
            let index = per_owner.entry(owner.clone()).or_insert(0);
            tests.push(DocTest {
                owner: owner.clone(),
                index: *index,
                line,
                attributes,
                code,
            });
            *index += 1;
        }
    }
    tests
}

/// `Some(true)` for an inner doc comment (`//!`, `/*!`), `Some(false)` for an outer one.
fn doc_comment_kind(node: Node<'_>) -> Option<bool> {
    if !matches!(node.kind(), "line_comment" | "block_comment") {
        return None;
    }
    let mut cursor = node.walk();
    let mut kind = None;
    for child in node.children(&mut cursor) {
        match child.kind() {
            "inner_doc_comment_marker" => kind = Some(true),
            "outer_doc_comment_marker" => kind = Some(false),
            _ => {}
        }
    }
    kind
}

/// The doc text of one comment node, line by line with one-based line numbers.
fn doc_lines(file: &ParsedFile<'_>, node: Node<'_>) -> Vec<(u32, String)> {
    let Some(doc) = node.child_by_field_name("doc") else {
        return Vec::new();
    };
    let first = file.line(doc);
    let text = file.text(doc);
    let block = node.kind() == "block_comment";
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            let l = if block {
                let t = l.trim_start();
                t.strip_prefix('*').unwrap_or(t)
            } else {
                l
            };
            (
                first.saturating_add(u32::try_from(i).unwrap_or(u32::MAX)),
                l.to_string(),
            )
        })
        .collect()
}

/// The path of the item a doc comment documents: the next item for an outer doc comment, the
/// enclosing module (or `crate`) for an inner one.
fn doc_owner(file: &ParsedFile<'_>, node: Node<'_>, inner: bool) -> String {
    let mut path = module_path(file, node);
    if !inner {
        let mut next = node.next_sibling();
        while let Some(n) = next {
            if !matches!(
                n.kind(),
                "line_comment" | "block_comment" | "attribute_item"
            ) {
                break;
            }
            next = n.next_sibling();
        }
        let name = next
            .and_then(|n| {
                n.child_by_field_name("name")
                    .or_else(|| n.child_by_field_name("type"))
            })
            .map_or_else(|| "?".to_string(), |n| file.text(n).into_owned());
        path.push(name);
    }
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

/// The names of the modules and impl blocks enclosing `node`, outermost first.
pub fn module_path(file: &ParsedFile<'_>, node: Node<'_>) -> Vec<String> {
    let mut names = Vec::new();
    let mut current = node.parent();
    while let Some(n) = current {
        let name = match n.kind() {
            "mod_item" => n.child_by_field_name("name"),
            "impl_item" | "trait_item" => n
                .child_by_field_name("type")
                .or_else(|| n.child_by_field_name("name")),
            _ => None,
        };
        if let Some(name) = name {
            names.push(file.text(name).into_owned());
        }
        current = n.parent();
    }
    names.reverse();
    names
}

/// The fenced code blocks of markdown lines: (line of the opening fence, info string, code).
fn fences(lines: &[(u32, String)]) -> Vec<(u32, String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(u32, char, usize, String, String)> = None;
    for (line, text) in lines {
        let trimmed = text.trim_start();
        let fence_char = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = fence_char.map_or(0, |c| trimmed.chars().take_while(|x| *x == c).count());
        match (&mut open, fence_char) {
            (Some((_, c, len, _, _)), Some(fc))
                if fc == *c && run >= *len && trimmed[run..].trim().is_empty() =>
            {
                if let Some((l, _, _, info, code)) = open.take() {
                    out.push((l, info, code));
                }
            }
            (Some((_, _, _, _, code)), _) => {
                code.push_str(unhide(text));
                code.push('\n');
            }
            (None, Some(fc)) if run >= 3 => {
                open = Some((
                    *line,
                    fc,
                    run,
                    trimmed[run..].trim().to_string(),
                    String::new(),
                ));
            }
            (None, _) => {}
        }
    }
    out
}

/// A doctest line without rustdoc's hidden-line marker (`# x` and a lone `#` are compiled).
fn unhide(line: &str) -> &str {
    let t = line.trim_start();
    if t == "#" {
        ""
    } else if let Some(rest) = t.strip_prefix("# ") {
        rest
    } else {
        line
    }
}

/// The attributes of a fence if rustdoc treats it as a Rust doctest, `None` otherwise: a fence is
/// Rust when it names no language, or names `rust` or a rustdoc attribute; a fence naming another
/// language (`text`, `sh`, `toml`) is not a test.
fn rust_fence_attributes(info: &str) -> Option<Vec<String>> {
    let mut rust_tags = false;
    let mut other_tags = false;
    let mut attributes = Vec::new();
    for token in info.split(|c: char| c == ',' || c.is_whitespace()) {
        let token = token
            .trim_matches(|c| c == '{' || c == '}')
            .trim_start_matches('.');
        if token.is_empty() {
            continue;
        }
        let known = matches!(
            token,
            "rust"
                | "ignore"
                | "should_panic"
                | "no_run"
                | "compile_fail"
                | "test_harness"
                | "standalone_crate"
                | "allow_fail"
        ) || token.starts_with("ignore-")
            || token.starts_with("edition")
            || (token.len() == 5
                && token.starts_with('E')
                && token[1..].bytes().all(|b| b.is_ascii_digit()));
        if known {
            rust_tags = true;
            attributes.push(token.to_string());
        } else {
            other_tags = true;
        }
    }
    if rust_tags || !other_tags {
        attributes.sort();
        attributes.dedup();
        Some(attributes)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::syntax::{parse, Limits, Parse};
    use super::*;

    fn doctests_of(source: &str) -> Vec<DocTest> {
        let Ok(Parse::Parsed(file)) = parse("src/lib.rs", source.as_bytes(), Limits::default())
        else {
            panic!("did not parse");
        };
        doctests(&file)
    }

    #[test]
    fn a_fence_without_a_language_is_a_rust_doctest_owned_by_the_next_item() {
        let tests = doctests_of("/// Adds.\n/// ```\n/// assert_eq!(add(1, 1), 2);\n/// ```\npub fn add(a: u8, b: u8) -> u8 { a + b }\n");
        assert_eq!(tests.len(), 1);
        assert_eq!(tests[0].owner, "add");
        assert_eq!(tests[0].line, 2);
        assert_eq!(tests[0].attributes, Vec::<String>::new());
        assert_eq!(tests[0].code, " assert_eq!(add(1, 1), 2);\n");
    }

    #[test]
    fn fence_attributes_are_kept_and_other_languages_are_not_doctests() {
        let tests = doctests_of("//! ```no_run,edition2021\n//! # let x = 1;\n//! ```\n//! ```text\n//! not code\n//! ```\n");
        assert_eq!(tests.len(), 1);
        assert_eq!(tests[0].owner, "crate");
        assert_eq!(
            tests[0].attributes,
            vec!["edition2021".to_string(), "no_run".to_string()]
        );
        assert_eq!(tests[0].code, "let x = 1;\n");
        assert!(!tests[0].runs());
    }

    #[test]
    fn doctests_of_methods_are_owned_by_the_impl_path() {
        let tests = doctests_of("mod m { impl S {\n/// ```\n/// x();\n/// ```\nfn f() {}\n} }\n");
        assert_eq!(tests.len(), 1);
        assert_eq!(tests[0].owner, "m::S::f");
    }
}
