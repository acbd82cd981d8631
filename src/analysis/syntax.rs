//! Parsing one workspace file into a tree-sitter syntax tree, bounded: the language is chosen
//! from the path, files above the size cap are digested instead of parsed, and every walk over a
//! tree is a cursor loop (never recursion), so a deeply nested hostile file costs memory
//! proportional to its size and no stack.

use std::fmt;

use sha2::{Digest, Sha256};
use tree_sitter::{Node, Parser, Tree};

use super::AnalysisError;

/// Files larger than this are not parsed by default (they are digested and reported).
pub const DEFAULT_MAX_PARSE_BYTES: usize = 1024 * 1024;

/// Evidence strings are cut to this many characters.
pub const EVIDENCE_MAX_CHARS: usize = 160;

/// The languages with a grammar. Everything else is "not analysed".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Language {
    Rust,
    Python,
    Go,
    JavaScript,
    TypeScript,
    Tsx,
}

impl Language {
    /// The language of a repository-relative path, by its extension.
    pub fn of_path(path: &str) -> Option<Language> {
        let name = file_name(path);
        let ext = name.rsplit_once('.').map(|(_, e)| e)?;
        match ext {
            "rs" => Some(Language::Rust),
            "py" | "pyi" => Some(Language::Python),
            "go" => Some(Language::Go),
            "js" | "jsx" | "mjs" | "cjs" => Some(Language::JavaScript),
            "ts" | "mts" | "cts" => Some(Language::TypeScript),
            "tsx" => Some(Language::Tsx),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::Go => "go",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Tsx => "tsx",
        }
    }

    /// JavaScript and both TypeScript dialects share the test conventions and node kinds used here.
    pub fn is_js_family(self) -> bool {
        matches!(
            self,
            Language::JavaScript | Language::TypeScript | Language::Tsx
        )
    }

    fn grammar(self) -> tree_sitter::Language {
        match self {
            Language::Rust => tree_sitter_rust::LANGUAGE.into(),
            Language::Python => tree_sitter_python::LANGUAGE.into(),
            Language::Go => tree_sitter_go::LANGUAGE.into(),
            Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
        }
    }
}

impl serde::Serialize for Language {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a file was not analysed; the engine reports these, so "not analysed" is never silent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum NotAnalysedReason {
    /// Larger than the parse cap.
    TooLarge { bytes: usize, cap: usize },
    /// No grammar for this file's language.
    NoGrammar,
}

impl fmt::Display for NotAnalysedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotAnalysedReason::TooLarge { bytes, cap } => {
                write!(f, "{bytes} bytes is above the parse cap of {cap} bytes")
            }
            NotAnalysedReason::NoGrammar => f.write_str("no grammar for this file type"),
        }
    }
}

/// A file that was digested instead of analysed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NotAnalysed {
    pub path: String,
    pub reason: NotAnalysedReason,
    /// Hex SHA-256 of the file's bytes.
    pub sha256: String,
}

/// Parsing limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_parse_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_parse_bytes: DEFAULT_MAX_PARSE_BYTES,
        }
    }
}

/// One parsed file: its path, its bytes and its tree.
pub struct ParsedFile<'a> {
    pub path: &'a str,
    pub source: &'a [u8],
    pub language: Language,
    pub tree: Tree,
}

impl<'a> ParsedFile<'a> {
    pub fn root(&self) -> Node<'_> {
        self.tree.root_node()
    }

    /// The text of a node (lossy where the file is not UTF-8).
    pub fn text(&self, node: Node<'_>) -> std::borrow::Cow<'a, str> {
        let range = node.byte_range();
        String::from_utf8_lossy(self.source.get(range).unwrap_or_default())
    }

    /// The one-based line a node starts on.
    pub fn line(&self, node: Node<'_>) -> u32 {
        u32::try_from(node.start_position().row).map_or(u32::MAX, |r| r.saturating_add(1))
    }

    /// A node's text made fit for evidence: whitespace runs collapsed, control characters
    /// escaped, cut to [`EVIDENCE_MAX_CHARS`].
    pub fn evidence(&self, node: Node<'_>) -> String {
        evidence_text(&self.text(node))
    }
}

/// The outcome of trying to parse a file.
pub enum Parse<'a> {
    Parsed(ParsedFile<'a>),
    NotAnalysed(NotAnalysed),
}

/// Parses `source` as the language of `path`, unless it is too large or has no grammar.
pub fn parse<'a>(
    path: &'a str,
    source: &'a [u8],
    limits: Limits,
) -> Result<Parse<'a>, AnalysisError> {
    let Some(language) = Language::of_path(path) else {
        return Ok(Parse::NotAnalysed(not_analysed(
            path,
            source,
            NotAnalysedReason::NoGrammar,
        )));
    };
    parse_as(path, source, language, limits)
}

/// Parses `source` as `language` (used for doctest fences, whose language is not in a path).
pub fn parse_as<'a>(
    path: &'a str,
    source: &'a [u8],
    language: Language,
    limits: Limits,
) -> Result<Parse<'a>, AnalysisError> {
    if source.len() > limits.max_parse_bytes {
        let reason = NotAnalysedReason::TooLarge {
            bytes: source.len(),
            cap: limits.max_parse_bytes,
        };
        return Ok(Parse::NotAnalysed(not_analysed(path, source, reason)));
    }
    let mut parser = Parser::new();
    parser
        .set_language(&language.grammar())
        .map_err(|e| AnalysisError::Grammar {
            language,
            message: e.to_string(),
        })?;
    let tree = parser
        .parse(source, None)
        .ok_or_else(|| AnalysisError::ParseAborted {
            path: path.to_string(),
            language,
        })?;
    Ok(Parse::Parsed(ParsedFile {
        path,
        source,
        language,
        tree,
    }))
}

fn not_analysed(path: &str, source: &[u8], reason: NotAnalysedReason) -> NotAnalysed {
    NotAnalysed {
        path: path.to_string(),
        reason,
        sha256: sha256_hex(source),
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The last component of a `/`-separated path.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Collapses whitespace, escapes control characters and cuts to [`EVIDENCE_MAX_CHARS`].
pub fn evidence_text(text: &str) -> String {
    let mut out = String::new();
    let mut count = 0usize;
    let mut pending_space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            pending_space = !out.is_empty();
            continue;
        }
        if count >= EVIDENCE_MAX_CHARS {
            out.push('…');
            return out;
        }
        if pending_space {
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
        count += 1;
    }
    out
}

/// Visits every node of the subtree at `root` in document order, without recursion.
/// `visit` returns whether to descend into the node's children.
pub fn walk<'t>(root: Node<'t>, mut visit: impl FnMut(Node<'t>) -> bool) {
    let mut cursor = root.walk();
    loop {
        let node = cursor.node();
        if visit(node) && cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.node() == root {
                return;
            }
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return;
            }
        }
    }
}

/// The nearest ancestor of `node` (not `node` itself) satisfying `pred`.
pub fn ancestor<'t>(node: Node<'t>, mut pred: impl FnMut(Node<'t>) -> bool) -> Option<Node<'t>> {
    let mut current = node.parent();
    while let Some(n) = current {
        if pred(n) {
            return Some(n);
        }
        current = n.parent();
    }
    None
}

/// The named children of a node, collected (tree-sitter children need a cursor).
pub fn named_children(node: Node<'_>) -> Vec<Node<'_>> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor).collect()
}

/// The value of a plain string literal node (no interpolation), in any supported language;
/// `None` for anything else, f-strings and template strings with substitutions included.
pub fn string_value(file: &ParsedFile<'_>, node: Node<'_>) -> Option<String> {
    let content_kinds: &[&str] = match node.kind() {
        "string" if file.language == Language::Python => &["string_content"],
        "string" | "template_string" => &["string_fragment"],
        "string_literal" | "raw_string_literal" => &["string_content"],
        "interpreted_string_literal" => &["interpreted_string_literal_content"],
        _ => return None,
    };
    if node.kind() == "raw_string_literal" && file.language == Language::Go {
        let text = file.text(node);
        return Some(text.trim_matches('`').to_string());
    }
    let mut value = String::new();
    for child in named_children(node) {
        match child.kind() {
            k if content_kinds.contains(&k) => value.push_str(&file.text(child)),
            "string_start" | "string_end" | "escape_sequence" => {}
            _ => return None,
        }
    }
    Some(value)
}

/// A callee or target with all whitespace removed (`pytest . skip` reads as `pytest.skip`).
pub fn compact_text(file: &ParsedFile<'_>, node: Node<'_>) -> String {
    file.text(node)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// The first named argument node of a call node (the `arguments`/`argument_list` field's first
/// named child), if any.
pub fn first_argument(node: Node<'_>) -> Option<Node<'_>> {
    node.child_by_field_name("arguments")
        .and_then(|a| a.named_child(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_collapses_whitespace_and_escapes_controls() {
        assert_eq!(evidence_text("  a \n\t b\u{7}c "), "a b\\u{7}c");
    }

    #[test]
    fn evidence_is_cut_at_the_cap() {
        let long = "x".repeat(EVIDENCE_MAX_CHARS + 5);
        let cut = evidence_text(&long);
        assert_eq!(cut.chars().count(), EVIDENCE_MAX_CHARS + 1);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn walk_visits_a_deeply_nested_tree_without_recursion() {
        let depth = 20_000;
        let source = format!("x = {}1{}\n", "(".repeat(depth), ")".repeat(depth));
        let Ok(Parse::Parsed(file)) = parse("deep.py", source.as_bytes(), Limits::default()) else {
            panic!("deep.py did not parse");
        };
        let mut integers = 0;
        walk(file.root(), |n| {
            if n.kind() == "integer" {
                integers += 1;
            }
            true
        });
        assert_eq!(integers, 1);
    }

    #[test]
    fn a_file_above_the_cap_is_digested_not_parsed() {
        let limits = Limits { max_parse_bytes: 4 };
        let Ok(Parse::NotAnalysed(na)) = parse("a.py", b"x = 1\n", limits) else {
            panic!("a.py was parsed despite the cap");
        };
        assert_eq!(na.reason, NotAnalysedReason::TooLarge { bytes: 6, cap: 4 });
        assert_eq!(na.sha256, sha256_hex(b"x = 1\n"));
    }
}
