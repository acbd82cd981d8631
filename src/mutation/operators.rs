//! The built-in mutation operators, applied through the syntax tree of one parsed file and only
//! on the lines the caller names (the agent's changed lines, trivial ones dropped by
//! [`substantive_lines`]). Every mutant keeps the file parseable and, as far as the tree tells,
//! well-typed (a mutant that only fails to compile would be "killed" by any suite, adequate or
//! not): comparison and boolean operators flipped, arithmetic flipped where it stays numeric
//! (`-` to `+`, `/` to `*`, and `+` to `-` only beside a number literal, since `+` also joins
//! strings), boolean and small-integer literals changed, an early return of a default, a
//! condition negated, a statement deleted.
//!
//! Walks are cursor loops (`analysis::syntax::walk`), never recursion.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use tree_sitter::Node;

use crate::analysis::syntax::{compact_text, evidence_text, walk, Language, ParsedFile};
use crate::analysis::test_code;

/// Which operator made a mutant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    ComparisonFlipped,
    BooleanOperatorFlipped,
    ArithmeticFlipped,
    BooleanLiteral,
    IntegerLiteral,
    EarlyReturn,
    ConditionNegated,
    StatementDeleted,
    /// A mutant the operator's `--mutate-cmd` made (its diff is not parsed by loopexec).
    External,
}

impl Operator {
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::ComparisonFlipped => "comparison_flipped",
            Operator::BooleanOperatorFlipped => "boolean_operator_flipped",
            Operator::ArithmeticFlipped => "arithmetic_flipped",
            Operator::BooleanLiteral => "boolean_literal",
            Operator::IntegerLiteral => "integer_literal",
            Operator::EarlyReturn => "early_return",
            Operator::ConditionNegated => "condition_negated",
            Operator::StatementDeleted => "statement_deleted",
            Operator::External => "external",
        }
    }
}

/// One mutant: replace `start..end` of the file at `path` with `replacement`. An
/// [`Operator::External`] mutant (an operator's mutator, `super::external`) instead holds its
/// description in `original` and its unified diff in `replacement`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mutant {
    pub path: String,
    /// One-based line the change is on.
    pub line: u32,
    pub operator: Operator,
    pub start: usize,
    pub end: usize,
    pub original: String,
    pub replacement: String,
}

impl Mutant {
    /// The file's bytes with this mutant applied (`None`: its range is not in `source`).
    pub fn apply(&self, source: &[u8]) -> Option<Vec<u8>> {
        if self.operator == Operator::External {
            return super::external::apply(&self.replacement, source);
        }
        if self.start > self.end || self.end > source.len() {
            return None;
        }
        let mut out = Vec::with_capacity(source.len() + self.replacement.len());
        out.extend_from_slice(&source[..self.start]);
        out.extend_from_slice(self.replacement.as_bytes());
        out.extend_from_slice(&source[self.end..]);
        Some(out)
    }

    /// What was changed, escaped and bounded for the terminal and the receipt.
    pub fn change(&self) -> String {
        let show = |s: &str| {
            if s.trim().is_empty() {
                "(nothing)".to_string()
            } else {
                evidence_text(s)
            }
        };
        if self.operator == Operator::External {
            return format!("external: {}", show(&self.original));
        }
        format!(
            "{}: `{}` -> `{}`",
            self.operator.as_str(),
            show(&self.original),
            show(&self.replacement)
        )
    }
}

fn row_line(row: usize) -> u32 {
    u32::try_from(row).map_or(u32::MAX, |r| r.saturating_add(1))
}

/// Nodes whose lines are trivial: comments, imports.
fn is_comment_or_import(language: Language, kind: &str) -> bool {
    let imports: &[&str] = match language {
        Language::Rust => &[
            "use_declaration",
            "extern_crate_declaration",
            "mod_item_declaration",
        ],
        Language::Python => &[
            "import_statement",
            "import_from_statement",
            "future_import_statement",
        ],
        Language::Go => &["import_declaration", "package_clause"],
        Language::JavaScript | Language::TypeScript | Language::Tsx => &["import_statement"],
    };
    kind.contains("comment") || imports.contains(&kind)
}

/// Whether `callee` (whitespace removed) names a logging or printing function.
fn is_logging_callee(language: Language, callee: &str) -> bool {
    let last = callee.rsplit(['.', ':']).next().unwrap_or(callee);
    match language {
        Language::Rust => [
            "println", "eprintln", "print", "eprint", "dbg", "trace", "debug", "info", "warn",
            "error",
        ]
        .contains(&last),
        Language::Python => {
            callee == "print"
                || ["logging.", "logger.", "log.", "LOGGER.", "LOG."]
                    .iter()
                    .any(|p| callee.starts_with(p))
        }
        Language::Go => {
            callee.starts_with("fmt.Print")
                || callee.starts_with("log.")
                || callee.starts_with("slog.")
        }
        Language::JavaScript | Language::TypeScript | Language::Tsx => {
            callee.starts_with("console.")
        }
    }
}

/// The callee of a call-like node, if it is one.
fn callee<'t>(node: Node<'t>) -> Option<Node<'t>> {
    match node.kind() {
        "macro_invocation" => node.child_by_field_name("macro"),
        "call_expression" | "call" => node.child_by_field_name("function"),
        _ => None,
    }
}

/// A statement consisting of one logging call.
fn is_logging_statement(file: &ParsedFile<'_>, node: Node<'_>) -> bool {
    if node.kind() != "expression_statement" {
        return false;
    }
    let Some(call) = node.named_child(0) else {
        return false;
    };
    callee(call).is_some_and(|c| is_logging_callee(file.language, &compact_text(file, c)))
}

/// The lines holding code that is not trivial: at least one token outside comments, imports and
/// logging statements. Blank lines hold no token and are never substantive.
pub fn substantive_lines(file: &ParsedFile<'_>) -> BTreeSet<u32> {
    let mut lines = BTreeSet::new();
    walk(file.root(), |node| {
        if is_comment_or_import(file.language, node.kind()) || is_logging_statement(file, node) {
            return false;
        }
        if node.child_count() == 0 && node.end_byte() > node.start_byte() {
            for row in node.start_position().row..=node.end_position().row {
                lines.insert(row_line(row));
            }
        }
        true
    });
    lines
}

/// The built-in mutants of `file` on `lines` (outside test code; none in a test file).
pub fn mutants(file: &ParsedFile<'_>, lines: &BTreeSet<u32>) -> Vec<Mutant> {
    let whole_file_is_test = test_code::is_test_file(file.path, file.language);
    if whole_file_is_test || lines.is_empty() {
        return Vec::new();
    }
    let eligible: BTreeSet<u32> = substantive_lines(file)
        .intersection(lines)
        .copied()
        .collect();
    let mut out = Vec::new();
    walk(file.root(), |node| {
        if is_comment_or_import(file.language, node.kind()) || is_logging_statement(file, node) {
            return false;
        }
        if test_code::in_test_code(file, false, node) {
            return false;
        }
        let on_line = eligible.contains(&row_line(node.start_position().row));
        if on_line {
            out.extend(token_mutant(file, node));
            out.extend(condition_mutant(file, node));
            out.extend(deletion_mutant(file, node));
        }
        out.extend(early_return_mutant(file, node, &eligible));
        true
    });
    out.sort_by(|a, b| (a.start, a.end, a.operator).cmp(&(b.start, b.end, b.operator)));
    out.dedup_by(|a, b| a.start == b.start && a.end == b.end && a.replacement == b.replacement);
    out
}

fn mutant(
    file: &ParsedFile<'_>,
    node: Node<'_>,
    operator: Operator,
    replacement: String,
) -> Mutant {
    Mutant {
        path: file.path.to_string(),
        line: file.line(node),
        operator,
        start: node.start_byte(),
        end: node.end_byte(),
        original: file.text(node).into_owned(),
        replacement,
    }
}

/// Operators flipped and literals changed: one-token mutants.
fn token_mutant(file: &ParsedFile<'_>, node: Node<'_>) -> Option<Mutant> {
    let text = file.text(node);
    let parent = node.parent().map(|p| p.kind()).unwrap_or_default();
    if !node.is_named() {
        if !matches!(
            parent,
            "binary_expression" | "comparison_operator" | "boolean_operator" | "binary_operator"
        ) {
            return None;
        }
        if let Some(flipped) = arithmetic_flip(node) {
            return Some(mutant(
                file,
                node,
                Operator::ArithmeticFlipped,
                flipped.to_string(),
            ));
        }
        let (flipped, operator) = match node.kind() {
            "==" => ("!=", Operator::ComparisonFlipped),
            "!=" => ("==", Operator::ComparisonFlipped),
            "===" => ("!==", Operator::ComparisonFlipped),
            "!==" => ("===", Operator::ComparisonFlipped),
            "<" => (">=", Operator::ComparisonFlipped),
            ">=" => ("<", Operator::ComparisonFlipped),
            ">" => ("<=", Operator::ComparisonFlipped),
            "<=" => (">", Operator::ComparisonFlipped),
            "&&" => ("||", Operator::BooleanOperatorFlipped),
            "||" => ("&&", Operator::BooleanOperatorFlipped),
            "and" => ("or", Operator::BooleanOperatorFlipped),
            "or" => ("and", Operator::BooleanOperatorFlipped),
            _ => return None,
        };
        return Some(mutant(file, node, operator, flipped.to_string()));
    }
    match (node.kind(), text.as_ref()) {
        ("true" | "false" | "boolean_literal", "true") => {
            Some(mutant(file, node, Operator::BooleanLiteral, "false".into()))
        }
        ("true" | "false" | "boolean_literal", "false") => {
            Some(mutant(file, node, Operator::BooleanLiteral, "true".into()))
        }
        ("true", "True") => Some(mutant(file, node, Operator::BooleanLiteral, "False".into())),
        ("false", "False") => Some(mutant(file, node, Operator::BooleanLiteral, "True".into())),
        ("integer_literal" | "integer" | "int_literal" | "number", _) => {
            integer_mutant(file, node, &text)
        }
        _ => None,
    }
}

/// The flip of an arithmetic operator token of a binary expression, where the result stays
/// numeric: `-` and `/` are numeric in every grammar here; `+` also joins strings, so it is
/// flipped only when one operand is a number literal.
fn arithmetic_flip(operator: Node<'_>) -> Option<&'static str> {
    let numeric = |n: Option<Node<'_>>| {
        n.is_some_and(|n| {
            matches!(
                n.kind(),
                "integer_literal"
                    | "integer"
                    | "int_literal"
                    | "number"
                    | "float_literal"
                    | "float"
            )
        })
    };
    match operator.kind() {
        "-" => Some("+"),
        "/" => Some("*"),
        "+" if numeric(operator.prev_named_sibling()) || numeric(operator.next_named_sibling()) => {
            Some("-")
        }
        _ => None,
    }
}

/// Integers up to this value are "small" and changed by one (0 and 1 swap).
const SMALL_INTEGER: u64 = 100;

fn integer_mutant(file: &ParsedFile<'_>, node: Node<'_>, text: &str) -> Option<Mutant> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, suffix) = text.split_at(digits);
    let plain_suffix = suffix.is_empty()
        || (file.language == Language::Rust
            && suffix.bytes().all(|b| b.is_ascii_alphanumeric())
            && suffix.starts_with(['u', 'i']));
    if digits == 0 || !plain_suffix || (number.len() > 1 && number.starts_with('0')) {
        return None;
    }
    // A length in a type (`[u8; 4]`), an array repeat (`[0; 4]`) or an attribute changes what
    // compiles, not what runs.
    let repeat_length = node.parent().and_then(|p| p.child_by_field_name("length")) == Some(node);
    if repeat_length
        || crate::analysis::syntax::ancestor(node, |a| {
            matches!(a.kind(), "array_type" | "attribute_item" | "type_arguments")
        })
        .is_some()
    {
        return None;
    }
    let value: u64 = number.parse().ok().filter(|v| *v <= SMALL_INTEGER)?;
    let changed = match value {
        0 => 1,
        1 => 0,
        v => v + 1,
    };
    Some(mutant(
        file,
        node,
        Operator::IntegerLiteral,
        format!("{changed}{suffix}"),
    ))
}

/// `if`/`while` conditions negated.
fn condition_mutant(file: &ParsedFile<'_>, node: Node<'_>) -> Option<Mutant> {
    let conditional = matches!(
        node.kind(),
        "if_expression" | "while_expression" | "if_statement" | "elif_clause" | "while_statement"
    );
    if !conditional {
        return None;
    }
    let condition = node.child_by_field_name("condition")?;
    if matches!(condition.kind(), "let_condition" | "let_chain") {
        return None;
    }
    let text = file.text(condition);
    let replacement = match file.language {
        Language::Python => format!("not ({text})"),
        // The condition node is the parenthesized expression itself.
        Language::JavaScript | Language::TypeScript | Language::Tsx => format!("(!{text})"),
        Language::Rust | Language::Go => format!("!({text})"),
    };
    Some(mutant(
        file,
        condition,
        Operator::ConditionNegated,
        replacement,
    ))
}

/// Statements with an effect deleted (Python keeps the block with `pass`).
fn deletion_mutant(file: &ParsedFile<'_>, node: Node<'_>) -> Option<Mutant> {
    let deletable = match file.language {
        Language::Rust => {
            node.kind() == "expression_statement"
                && file.text(node).trim_end().ends_with(';')
                && node.named_child(0).is_some_and(|e| {
                    matches!(
                        e.kind(),
                        "call_expression"
                            | "assignment_expression"
                            | "compound_assignment_expr"
                            | "macro_invocation"
                    )
                })
        }
        Language::Python => {
            node.kind() == "expression_statement"
                && node.named_child(0).is_some_and(|e| e.kind() != "string")
        }
        Language::Go => matches!(
            node.kind(),
            "expression_statement" | "inc_statement" | "dec_statement" | "assignment_statement"
        ),
        Language::JavaScript | Language::TypeScript | Language::Tsx => {
            node.kind() == "expression_statement"
                && node.named_child(0).is_some_and(|e| e.kind() != "string")
        }
    };
    if !deletable {
        return None;
    }
    let replacement = if file.language == Language::Python {
        "pass"
    } else {
        ""
    };
    Some(mutant(
        file,
        node,
        Operator::StatementDeleted,
        replacement.into(),
    ))
}

/// Rust return types whose `Default::default()` is a plain zero value.
fn rust_default_type(ty: &str) -> bool {
    const PLAIN: [&str; 18] = [
        "bool", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128",
        "usize", "f32", "f64", "String", "char", "()",
    ];
    PLAIN.contains(&ty) || ty.starts_with("Vec<") || ty.starts_with("Option<")
}

/// The `return` statement that returns a default from a function of `language` with return
/// type `ty` (`None`: no return type), if the tree tells a well-typed one.
fn default_return(language: Language, ty: Option<&str>) -> Option<String> {
    match language {
        Language::Python => Some("return None".into()),
        Language::JavaScript | Language::TypeScript | Language::Tsx => {
            Some("return undefined;".into())
        }
        Language::Rust => match ty {
            None => Some("return;".into()),
            Some(t) if rust_default_type(t) => Some("return Default::default();".into()),
            Some(_) => None,
        },
        Language::Go => match ty {
            None => Some("return;".into()),
            Some("bool") => Some("return false;".into()),
            Some("string") => Some("return \"\";".into()),
            Some("error") => Some("return nil;".into()),
            Some(t)
                if [
                    "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32",
                    "uint64", "float32", "float64", "byte", "rune",
                ]
                .contains(&t) =>
            {
                Some("return 0;".into())
            }
            Some(_) => None,
        },
    }
}

/// A function whose body holds a changed line returns a default before its first statement.
fn early_return_mutant(
    file: &ParsedFile<'_>,
    node: Node<'_>,
    eligible: &BTreeSet<u32>,
) -> Option<Mutant> {
    let (body_kind, type_field) = match (file.language, node.kind()) {
        (Language::Rust, "function_item") => ("block", "return_type"),
        (Language::Python, "function_definition") => ("block", "return_type"),
        (Language::Go, "function_declaration" | "method_declaration" | "func_literal") => {
            ("block", "result")
        }
        (
            l,
            "function_declaration"
            | "method_definition"
            | "function_expression"
            | "arrow_function"
            | "function",
        ) if l.is_js_family() => ("statement_block", "return_type"),
        _ => return None,
    };
    let body = node
        .child_by_field_name("body")
        .filter(|b| b.kind() == body_kind)?;
    let (first, last) = (
        row_line(body.start_position().row),
        row_line(body.end_position().row),
    );
    if !eligible.range(first..=last).any(|_| true) {
        return None;
    }
    let ty = node
        .child_by_field_name(type_field)
        .map(|t| compact_text(file, t));
    let ty = if file.language.is_js_family() || file.language == Language::Python {
        None
    } else {
        ty
    };
    let statement = default_return(file.language, ty.as_deref())?;
    let first_statement = body.named_child(0)?;
    let (at, text, line) = match file.language {
        Language::Python => {
            let row = first_statement.start_position().row;
            let separator = if row == node.start_position().row {
                "; ".to_string()
            } else {
                format!("\n{}", " ".repeat(first_statement.start_position().column))
            };
            (
                first_statement.start_byte(),
                format!("{statement}{separator}"),
                file.line(first_statement),
            )
        }
        // After the body's opening brace.
        _ => (
            body.start_byte() + 1,
            format!(" {statement} "),
            file.line(first_statement),
        ),
    };
    Some(Mutant {
        path: file.path.to_string(),
        line,
        operator: Operator::EarlyReturn,
        start: at,
        end: at,
        original: String::new(),
        replacement: text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::syntax::{parse, Limits, Parse};

    /// The mutants of `source` at `path` on `lines` (every line when empty), as
    /// (operator, line, the mutated source).
    fn mutated(path: &str, source: &str, lines: &[u32]) -> Vec<(Operator, u32, String)> {
        let Ok(Parse::Parsed(file)) = parse(path, source.as_bytes(), Limits::default()) else {
            panic!("{path} did not parse")
        };
        let lines: BTreeSet<u32> = if lines.is_empty() {
            (1..=1000).collect()
        } else {
            lines.iter().copied().collect()
        };
        mutants(&file, &lines)
            .into_iter()
            .map(|m| {
                (
                    m.operator,
                    m.line,
                    String::from_utf8(m.apply(source.as_bytes()).unwrap()).unwrap(),
                )
            })
            .collect()
    }

    fn of(all: &[(Operator, u32, String)], op: Operator) -> Vec<String> {
        all.iter()
            .filter(|(o, _, _)| *o == op)
            .map(|(_, _, s)| s.clone())
            .collect()
    }

    #[test]
    fn python_comparisons_are_flipped_only_on_the_given_lines() {
        let src = "def f(a, b):\n    x = a < b\n    return a == b\n";
        assert_eq!(
            of(&mutated("m.py", src, &[2]), Operator::ComparisonFlipped),
            vec!["def f(a, b):\n    x = a >= b\n    return a == b\n"]
        );
    }

    #[test]
    fn python_boolean_operators_and_literals_are_flipped() {
        let all = mutated("m.py", "ok = a and True\n", &[]);
        assert_eq!(
            of(&all, Operator::BooleanOperatorFlipped),
            vec!["ok = a or True\n"]
        );
        assert_eq!(
            of(&all, Operator::BooleanLiteral),
            vec!["ok = a and False\n"]
        );
    }

    #[test]
    fn subtraction_and_division_flip_in_every_grammar() {
        assert_eq!(
            of(
                &mutated("m.py", "x = a - b / c\n", &[]),
                Operator::ArithmeticFlipped
            ),
            vec!["x = a + b / c\n", "x = a - b * c\n"]
        );
        assert_eq!(
            of(
                &mutated("m.rs", "fn f(a: i64, b: i64) -> i64 { a - b }\n", &[]),
                Operator::ArithmeticFlipped
            ),
            vec!["fn f(a: i64, b: i64) -> i64 { a + b }\n"]
        );
        assert_eq!(
            of(
                &mutated(
                    "m.go",
                    "package m\n\nfunc f(a, b int) int { return a - b }\n",
                    &[]
                ),
                Operator::ArithmeticFlipped
            ),
            vec!["package m\n\nfunc f(a, b int) int { return a + b }\n"]
        );
        assert_eq!(
            of(
                &mutated("m.js", "const f = (a, b) => a - b;\n", &[]),
                Operator::ArithmeticFlipped
            ),
            vec!["const f = (a, b) => a + b;\n"]
        );
    }

    #[test]
    fn addition_flips_only_beside_a_number_literal_since_it_also_joins_strings() {
        assert_eq!(
            of(
                &mutated("m.py", "x = a + 1\ny = s + t\n", &[]),
                Operator::ArithmeticFlipped
            ),
            vec!["x = a - 1\ny = s + t\n"]
        );
        assert_eq!(
            of(
                &mutated("m.js", "const s = a + b;\n", &[]),
                Operator::ArithmeticFlipped
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_unary_minus_is_not_an_arithmetic_flip() {
        assert_eq!(
            of(
                &mutated("m.py", "x = -a\n", &[]),
                Operator::ArithmeticFlipped
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            of(
                &mutated("m.rs", "fn f(a: i64) -> i64 { -a }\n", &[]),
                Operator::ArithmeticFlipped
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn small_integers_change_by_one_and_zero_and_one_swap() {
        let all = mutated("m.py", "x = [0, 1, 7, 1000]\n", &[]);
        assert_eq!(
            of(&all, Operator::IntegerLiteral),
            vec![
                "x = [1, 1, 7, 1000]\n",
                "x = [0, 0, 7, 1000]\n",
                "x = [0, 1, 8, 1000]\n"
            ]
        );
    }

    #[test]
    fn a_python_function_returns_none_before_its_first_statement() {
        let src = "def f(a):\n    y = a + 1\n    return y\n";
        assert_eq!(
            of(&mutated("m.py", src, &[2]), Operator::EarlyReturn),
            vec!["def f(a):\n    return None\n    y = a + 1\n    return y\n"]
        );
    }

    #[test]
    fn a_python_condition_is_negated_and_a_statement_replaced_by_pass() {
        let all = mutated("m.py", "if a:\n    total += a\n", &[]);
        assert_eq!(
            of(&all, Operator::ConditionNegated),
            vec!["if not (a):\n    total += a\n"]
        );
        assert_eq!(
            of(&all, Operator::StatementDeleted),
            vec!["if a:\n    pass\n"]
        );
    }

    #[test]
    fn comments_imports_logging_and_blank_lines_are_not_mutated() {
        let src =
            "import os\nfrom a import b\n\n# x = 1 < 2\nprint(1 < 2)\nlogging.info(\"%d\", 3)\n";
        assert_eq!(mutated("m.py", src, &[]), vec![]);
        assert_eq!(
            mutated(
                "m.rs",
                "use std::io;\n// 1 < 2\nprintln!(\"{}\", 1);\n",
                &[]
            ),
            vec![]
        );
    }

    #[test]
    fn a_test_file_has_no_mutants() {
        assert_eq!(mutated("tests/test_calc.py", "assert 1 < 2\n", &[]), vec![]);
        assert_eq!(
            mutated("calc_test.go", "package calc\nvar x = 1 < 2\n", &[]),
            vec![]
        );
    }

    #[test]
    fn rust_operators_literals_and_suffixed_integers_are_mutated() {
        let all = mutated("lib.rs", "fn f(a: u8) -> bool { a < 3u8 && true }\n", &[]);
        assert_eq!(
            of(&all, Operator::ComparisonFlipped),
            vec!["fn f(a: u8) -> bool { a >= 3u8 && true }\n"]
        );
        assert_eq!(
            of(&all, Operator::BooleanOperatorFlipped),
            vec!["fn f(a: u8) -> bool { a < 3u8 || true }\n"]
        );
        assert_eq!(
            of(&all, Operator::BooleanLiteral),
            vec!["fn f(a: u8) -> bool { a < 3u8 && false }\n"]
        );
        assert_eq!(
            of(&all, Operator::IntegerLiteral),
            vec!["fn f(a: u8) -> bool { a < 4u8 && true }\n"]
        );
    }

    #[test]
    fn a_rust_function_returns_its_default_only_where_the_type_has_a_plain_one() {
        let all = mutated("lib.rs", "fn f(a: u32) -> u32 {\n    a + 1\n}\n", &[2]);
        assert_eq!(
            of(&all, Operator::EarlyReturn),
            vec!["fn f(a: u32) -> u32 { return Default::default(); \n    a + 1\n}\n"]
        );
        assert_eq!(
            of(
                &mutated("lib.rs", "fn f() -> Thing {\n    make()\n}\n", &[2]),
                Operator::EarlyReturn
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_rust_condition_is_negated_but_not_an_if_let() {
        let all = mutated(
            "lib.rs",
            "fn f(a: bool) { if a { g(); } if let Some(x) = h() { g(); } }\n",
            &[],
        );
        assert_eq!(
            of(&all, Operator::ConditionNegated),
            vec!["fn f(a: bool) { if !(a) { g(); } if let Some(x) = h() { g(); } }\n"]
        );
    }

    #[test]
    fn a_rust_call_statement_is_deleted() {
        let all = mutated(
            "lib.rs",
            "fn f(v: &mut Vec<u8>) {\n    v.push(2);\n}\n",
            &[2],
        );
        assert_eq!(
            of(&all, Operator::StatementDeleted),
            vec!["fn f(v: &mut Vec<u8>) {\n    \n}\n"]
        );
    }

    #[test]
    fn rust_test_modules_and_array_lengths_are_not_mutated() {
        let src = "const N: [u8; 4] = [0; 4];\n#[cfg(test)]\nmod tests {\n    fn t() { assert!(1 < 2); }\n}\n";
        let all = mutated("lib.rs", src, &[]);
        assert_eq!(
            all.iter().map(|(o, l, _)| (*o, *l)).collect::<Vec<_>>(),
            vec![(Operator::IntegerLiteral, 1)],
            "{all:?}"
        );
    }

    #[test]
    fn a_go_function_returns_its_zero_value() {
        let src = "package p\nfunc Even(n int) bool {\n\treturn n%2 == 0\n}\n";
        let all = mutated("p.go", src, &[3]);
        assert_eq!(
            of(&all, Operator::EarlyReturn),
            vec!["package p\nfunc Even(n int) bool { return false; \n\treturn n%2 == 0\n}\n"]
        );
        assert_eq!(
            of(&all, Operator::ComparisonFlipped),
            vec!["package p\nfunc Even(n int) bool {\n\treturn n%2 != 0\n}\n"]
        );
    }

    #[test]
    fn a_javascript_condition_is_negated_inside_its_parentheses() {
        let all = mutated("a.js", "if (x > 1) { go(); }\n", &[]);
        assert_eq!(
            of(&all, Operator::ConditionNegated),
            vec!["if (!(x > 1)) { go(); }\n"]
        );
    }

    #[test]
    fn every_mutant_of_a_file_still_parses() {
        let src = "def f(a, b):\n    if a < b and b > 0:\n        a += 1\n    return a == 2\n";
        for (op, line, text) in mutated("m.py", src, &[]) {
            let Ok(Parse::Parsed(file)) = parse("m.py", text.as_bytes(), Limits::default()) else {
                panic!()
            };
            assert!(!file.root().has_error(), "{op:?} at line {line}: {text}");
        }
    }
}
