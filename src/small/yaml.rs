//! The YAML of a SMALL file: parsed into a positioned tree (every node keeps its line and column),
//! and written back from such a tree. Parsing goes through `yaml-rust2`'s event parser, which keeps
//! each scalar's style, so that `small_version: "1.0.0"` (quoted) can be told from a plain
//! `1.0.0`. Refused while parsing, with file, line and column: malformed YAML, a duplicate key in
//! a mapping, a key that is not a scalar, anchors and aliases (no sharing, no alias bombs), tags,
//! and more than one document.

use super::SmallError;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// One node of a parsed file.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: Kind,
    /// 1-based line of the node's first character (0 for nodes built in memory).
    pub line: usize,
    /// 1-based column.
    pub col: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Keys in file order (unique).
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
    Scalar(Scalar),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    pub value: String,
    /// Any style but plain (single, double quoted, literal, folded): always a string.
    pub quoted: bool,
}

/// What a scalar means under the YAML 1.2 core schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
}

impl Node {
    fn new(kind: Kind) -> Node {
        Node {
            kind,
            line: 0,
            col: 0,
        }
    }

    /// A string written double-quoted.
    pub fn string(s: &str) -> Node {
        Node::new(Kind::Scalar(Scalar {
            value: s.to_string(),
            quoted: true,
        }))
    }

    /// A plain scalar (a number, `null`, `true`), written as is.
    pub fn plain(s: &str) -> Node {
        Node::new(Kind::Scalar(Scalar {
            value: s.to_string(),
            quoted: false,
        }))
    }

    pub fn map(pairs: Vec<(&str, Node)>) -> Node {
        Node::new(Kind::Map(
            pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        ))
    }

    pub fn seq(items: Vec<Node>) -> Node {
        Node::new(Kind::Seq(items))
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            Kind::Map(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        match &mut self.kind {
            Kind::Map(pairs) => pairs.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Set `key` (replacing its value in place, or appending the key).
    pub fn set(&mut self, key: &str, value: Node) {
        if let Kind::Map(pairs) = &mut self.kind {
            match pairs.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) => *v = value,
                None => pairs.push((key.to_string(), value)),
            }
        }
    }

    pub fn pairs(&self) -> Option<&[(String, Node)]> {
        match &self.kind {
            Kind::Map(pairs) => Some(pairs),
            _ => None,
        }
    }

    pub fn items(&self) -> Option<&[Node]> {
        match &self.kind {
            Kind::Seq(items) => Some(items),
            _ => None,
        }
    }

    pub fn scalar(&self) -> Option<&Scalar> {
        match &self.kind {
            Kind::Scalar(s) => Some(s),
            _ => None,
        }
    }

    /// The scalar's core-schema value (None for a map or a sequence).
    pub fn value(&self) -> Option<Value<'_>> {
        self.scalar().map(Scalar::resolve)
    }

    /// The text of a scalar that resolves to a string.
    pub fn as_str(&self) -> Option<&str> {
        match self.value() {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The JSON value of this node under the YAML 1.2 core schema (what the JSON schemas see).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match &self.kind {
            Kind::Map(pairs) => J::Object(
                pairs
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
            Kind::Seq(items) => J::Array(items.iter().map(Node::to_json).collect()),
            Kind::Scalar(s) => match s.resolve() {
                Value::Null => J::Null,
                Value::Bool(b) => J::Bool(b),
                Value::Int(i) => J::from(i),
                Value::Float(f) => serde_json::Number::from_f64(f)
                    .map(J::Number)
                    .unwrap_or_else(|| J::String(s.value.clone())),
                Value::Str(s) => J::String(s.to_string()),
            },
        }
    }
}

impl Scalar {
    pub fn resolve(&self) -> Value<'_> {
        let v = self.value.as_str();
        if self.quoted {
            return Value::Str(v);
        }
        match v {
            "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
            "true" | "True" | "TRUE" => return Value::Bool(true),
            "false" | "False" | "FALSE" => return Value::Bool(false),
            _ => {}
        }
        let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(i) = v.parse::<i64>() {
                return Value::Int(i);
            }
        }
        let float_shape = regex_float().is_match(v);
        if float_shape {
            if let Ok(f) = v.parse::<f64>() {
                return Value::Float(f);
            }
        }
        Value::Str(v)
    }
}

fn regex_float() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
            .unwrap_or_else(|_| unreachable!("a constant pattern"))
    })
}

/// Deepest nesting of mappings and sequences accepted (SMALL files nest four levels; the walks
/// over a tree recurse).
pub const MAX_DEPTH: usize = 32;

/// Parse `text` (the bytes of `file`) into its one document's root node. An empty document is a
/// null scalar.
pub fn parse(file: &str, bytes: &[u8]) -> Result<Node, SmallError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let (line, col) = line_col(bytes, e.valid_up_to());
        SmallError::Parse {
            file: file.to_string(),
            line,
            col,
            message: "not UTF-8".into(),
        }
    })?;
    let mut builder = Builder {
        file,
        stack: Vec::new(),
        root: None,
        documents: 0,
        error: None,
    };
    let mut parser = Parser::new_from_str(text);
    if let Err(e) = parser.load(&mut builder, true) {
        let m = e.marker();
        return Err(SmallError::Parse {
            file: file.to_string(),
            line: m.line(),
            col: m.col() + 1,
            message: e.info().to_string(),
        });
    }
    if let Some(err) = builder.error {
        return Err(err);
    }
    Ok(builder.root.unwrap_or_else(|| Node {
        kind: Kind::Scalar(Scalar {
            value: String::new(),
            quoted: false,
        }),
        line: 1,
        col: 1,
    }))
}

fn line_col(bytes: &[u8], offset: usize) -> (usize, usize) {
    let before = &bytes[..offset.min(bytes.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, col)
}

enum Frame {
    Map {
        node: Node,
        pairs: Vec<(String, Node)>,
        key: Option<(String, Marker)>,
    },
    Seq {
        node: Node,
        items: Vec<Node>,
    },
}

struct Builder<'a> {
    file: &'a str,
    stack: Vec<Frame>,
    root: Option<Node>,
    documents: usize,
    error: Option<SmallError>,
}

impl Builder<'_> {
    fn fail(&mut self, mark: Marker, message: String) {
        if self.error.is_none() {
            self.error = Some(SmallError::Parse {
                file: self.file.to_string(),
                line: mark.line(),
                col: mark.col() + 1,
                message,
            });
        }
    }

    fn push_value(&mut self, node: Node, mark: Marker) {
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { pairs, key, .. }) => match key.take() {
                Some((k, _)) => pairs.push((k, node)),
                None => {
                    let Kind::Scalar(s) = node.kind else {
                        self.fail(mark, "a mapping key must be a scalar".into());
                        return;
                    };
                    if pairs.iter().any(|(k, _)| *k == s.value) {
                        let message = format!("duplicate key {:?}", s.value);
                        self.fail(mark, message);
                        return;
                    }
                    *key = Some((s.value, mark));
                }
            },
        }
    }
}

impl MarkedEventReceiver for Builder<'_> {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let at = |kind| Node {
            kind,
            line: mark.line(),
            col: mark.col() + 1,
        };
        match ev {
            Event::DocumentStart => {
                self.documents += 1;
                if self.documents > 1 {
                    self.fail(mark, "more than one YAML document".into());
                }
            }
            Event::Alias(_) => self.fail(mark, "aliases are not allowed".into()),
            Event::Scalar(value, style, anchor, tag) => {
                if anchor != 0 {
                    return self.fail(mark, "anchors are not allowed".into());
                }
                if tag.is_some() {
                    return self.fail(mark, "tags are not allowed".into());
                }
                let quoted = style != TScalarStyle::Plain;
                self.push_value(at(Kind::Scalar(Scalar { value, quoted })), mark);
            }
            Event::SequenceStart(anchor, tag) | Event::MappingStart(anchor, tag)
                if anchor != 0 || tag.is_some() =>
            {
                self.fail(mark, "anchors and tags are not allowed".into())
            }
            Event::SequenceStart(..) | Event::MappingStart(..) if self.stack.len() >= MAX_DEPTH => {
                self.fail(mark, format!("nested deeper than {MAX_DEPTH} levels"))
            }
            Event::SequenceStart(..) => self.stack.push(Frame::Seq {
                node: at(Kind::Seq(Vec::new())),
                items: Vec::new(),
            }),
            Event::MappingStart(..) => self.stack.push(Frame::Map {
                node: at(Kind::Map(Vec::new())),
                pairs: Vec::new(),
                key: None,
            }),
            Event::SequenceEnd | Event::MappingEnd => {
                let node = match self.stack.pop() {
                    Some(Frame::Seq { mut node, items }) => {
                        node.kind = Kind::Seq(items);
                        node
                    }
                    Some(Frame::Map {
                        mut node, pairs, ..
                    }) => {
                        node.kind = Kind::Map(pairs);
                        node
                    }
                    None => return,
                };
                self.push_value(node, mark);
            }
            _ => {}
        }
    }
}

/// The YAML text of `root`: block style, two-space indents, strings double-quoted (JSON escapes
/// are valid YAML double-quoted escapes), plain scalars kept plain only when they cannot be
/// misread. Parsing the result gives back the same tree (without positions).
pub fn emit(root: &Node) -> String {
    let mut out = String::new();
    match &root.kind {
        Kind::Map(pairs) if !pairs.is_empty() => emit_pairs(&mut out, pairs, 0),
        _ => {
            out.push_str(&inline(root));
            out.push('\n');
        }
    }
    out
}

fn is_block(node: &Node) -> bool {
    match &node.kind {
        Kind::Map(p) => !p.is_empty(),
        Kind::Seq(i) => !i.is_empty(),
        Kind::Scalar(_) => false,
    }
}

fn inline(node: &Node) -> String {
    match &node.kind {
        Kind::Map(_) => "{}".into(),
        Kind::Seq(_) => "[]".into(),
        Kind::Scalar(s) => scalar_text(s),
    }
}

fn scalar_text(s: &Scalar) -> String {
    let safe_plain = !s.quoted
        && (s.value.is_empty()
            || s.value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b))
                && !s.value.starts_with(['-', '.'])
            || matches!(s.resolve(), Value::Int(_) | Value::Float(_)));
    if safe_plain {
        if s.value.is_empty() {
            "null".into()
        } else {
            s.value.clone()
        }
    } else {
        quote(&s.value)
    }
}

/// `s` as a YAML double-quoted scalar: `\\` and `"` escaped, and every character YAML does not
/// allow printed (controls, DEL, C1 controls, U+FEFF, U+FFFE/FFFF) as `\u` escapes.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\u{20}'..='\u{7e}'
            | '\u{a0}'..='\u{d7ff}'
            | '\u{e000}'..='\u{fffd}'
            | '\u{10000}'..
                if ch != '\u{feff}' =>
            {
                out.push(ch)
            }
            other => out.push_str(&format!("\\u{:04x}", other as u32)),
        }
    }
    out.push('"');
    out
}

fn key_text(k: &str) -> String {
    let plain = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
        && !k.starts_with('-')
        && Scalar {
            value: k.to_string(),
            quoted: false,
        }
        .resolve()
            == Value::Str(k);
    if plain {
        k.to_string()
    } else {
        quote(k)
    }
}

fn emit_pairs(out: &mut String, pairs: &[(String, Node)], indent: usize) {
    for (k, v) in pairs {
        out.push_str(&" ".repeat(indent));
        out.push_str(&key_text(k));
        out.push(':');
        emit_value(out, v, indent);
    }
}

/// The value after `key:` or `- `: inline on the same line, or a block on the next lines.
fn emit_value(out: &mut String, v: &Node, indent: usize) {
    if !is_block(v) {
        out.push(' ');
        out.push_str(&inline(v));
        out.push('\n');
        return;
    }
    out.push('\n');
    match &v.kind {
        Kind::Map(pairs) => emit_pairs(out, pairs, indent + 2),
        Kind::Seq(items) => emit_items(out, items, indent + 2),
        Kind::Scalar(_) => {}
    }
}

fn emit_items(out: &mut String, items: &[Node], indent: usize) {
    for item in items {
        out.push_str(&" ".repeat(indent));
        out.push('-');
        match &item.kind {
            Kind::Map(pairs) if !pairs.is_empty() => {
                // `- key: value` then the other keys aligned under the first.
                let mut first = String::new();
                emit_pairs(&mut first, &pairs[..1], indent + 2);
                out.push(' ');
                out.push_str(first.trim_start());
                emit_pairs(out, &pairs[1..], indent + 2);
            }
            Kind::Seq(inner) if !inner.is_empty() => {
                out.push('\n');
                emit_items(out, inner, indent + 2);
            }
            _ => {
                out.push(' ');
                out.push_str(&inline(item));
                out.push('\n');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip(node: &Node) -> Node {
        let kind = match &node.kind {
            Kind::Map(p) => Kind::Map(p.iter().map(|(k, v)| (k.clone(), strip(v))).collect()),
            Kind::Seq(i) => Kind::Seq(i.iter().map(strip).collect()),
            Kind::Scalar(s) => Kind::Scalar(s.clone()),
        };
        Node::new(kind)
    }

    #[test]
    fn a_quoted_version_is_told_from_a_plain_one() {
        let quoted = parse("f", b"v: \"1.0.0\"\n").unwrap();
        let plain = parse("f", b"v: 1.0.0\n").unwrap();
        assert!(quoted.get("v").unwrap().scalar().unwrap().quoted);
        assert!(!plain.get("v").unwrap().scalar().unwrap().quoted);
    }

    #[test]
    fn a_duplicate_key_is_refused_with_its_line_and_column() {
        let err = parse("plan.small.yml", b"a: 1\nb:\n  c: 2\n  c: 3\n").unwrap_err();
        assert_eq!(err.to_string(), "plan.small.yml:4:3: duplicate key \"c\"");
    }

    #[test]
    fn malformed_yaml_names_line_and_column() {
        let err = parse("intent.small.yml", b"a: [1, 2\nb: 3\n").unwrap_err();
        let SmallError::Parse { line, col, .. } = err else {
            panic!("{err:?}")
        };
        assert_eq!((line, col), (2, 2));
    }

    #[test]
    fn aliases_are_refused() {
        let err = parse("f", b"a: &x 1\nb: *x\n").unwrap_err();
        assert!(err.to_string().starts_with("f:1:7: anchors"), "{err}");
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_refused() {
        let text = format!(
            "a: {}{}\n",
            "[".repeat(MAX_DEPTH + 1),
            "]".repeat(MAX_DEPTH + 1)
        );
        let err = parse("f", text.as_bytes()).unwrap_err();
        assert!(
            err.to_string().contains("nested deeper than 32 levels"),
            "{err}"
        );
    }

    #[test]
    fn controls_and_del_survive_a_round_trip() {
        let value = "a\u{7f}b\u{1b}[31m\u{85}c\u{feff}\"\\\r\n";
        let node = Node::map(vec![("k", Node::string(value))]);
        let again = parse("f", emit(&node).as_bytes()).unwrap();
        assert_eq!(again.get("k").unwrap().as_str(), Some(value));
    }

    #[test]
    fn emitted_yaml_parses_back_to_the_same_tree() {
        let text = "a: \"x: y # z\"\nb:\n  - id: t1\n    deps: []\n    n: 3\n    s: \"true\"\n  - plain\nc: {}\nd: null\ne: \"line\\nnext\"\n";
        let node = parse("f", text.as_bytes()).unwrap();
        let emitted = emit(&node);
        let again = parse("f", emitted.as_bytes()).unwrap();
        assert_eq!(strip(&node), strip(&again), "{emitted}");
        assert_eq!(again.get("s"), None);
        assert_eq!(
            again.get("b").unwrap().items().unwrap()[0]
                .get("s")
                .unwrap()
                .value(),
            Some(Value::Str("true"))
        );
    }
}
