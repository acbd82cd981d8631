//! The operator's mutator (`doctor --mutate-cmd CMD`, `mutate_cmd` in loop.toml): its protocol,
//! and the validation of what it printed. The mutator's output is hostile input (it ran on the
//! agent's tree): read bounded, every entry checked, nothing of it reaches the terminal, git or
//! the receipt unescaped.
//!
//! Protocol (docs/oracle-trust.md, "An operator's mutator"): CMD runs once, `/bin/sh -c`, in an
//! exec zone on a throwaway copy of the tree, and prints on stdout one JSON array of mutants,
//! each an object with
//! - `file`: the tree path of the one file it mutates (relative, no `.`/`..`/empty component);
//! - `diff`: a unified diff of that file alone (its `---`/`+++` names are not read: cargo-mutants
//!   names the mutation on the `+++` line); hunks are applied to the file's version in the tree;
//! - `line` (optional): the line it is on; else `span.start.line` (cargo-mutants), else the
//!   first hunk's start;
//! - `description` (optional): what it changes; else `name` (cargo-mutants), else the file and
//!   line.
//!
//! Other keys are ignored, so `cargo mutants --list --json --diff` is a mutator as it is. The
//! supervisor redirects the command's stdout to [`MUTANTS_FILE`] in the copy ([`wrapped`]),
//! so the list is not bounded by the output capture but by [`MAX_LIST_BYTES`].

use serde::Deserialize;

use super::operators::{Mutant, Operator};

/// Where the mutator's stdout goes, in the working directory of its throwaway copy.
pub const MUTANTS_FILE: &str = ".loopexec-mutants.json";
/// Largest list read (16 MiB).
pub const MAX_LIST_BYTES: u64 = 16 << 20;
/// Most mutants one list may hold.
pub const MAX_LISTED: usize = 100_000;
/// Largest diff of one mutant.
pub const MAX_DIFF_BYTES: usize = 1 << 20;
const MAX_PATH_BYTES: usize = 4096;

/// The command line that runs `cmd` with its stdout in [`MUTANTS_FILE`].
pub fn wrapped(cmd: &str) -> String {
    format!("{{ {cmd}\n}} > {MUTANTS_FILE}")
}

/// Why a mutator's list is refused (the canary cannot conclude: `execution_failure`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    #[error("the mutator printed more than {MAX_LIST_BYTES} bytes")]
    TooLarge,
    #[error("the mutator's output is not a JSON array of mutants: {0}")]
    NotAList(String),
    #[error("the mutator listed {0} mutants, more than {MAX_LISTED}")]
    TooMany(usize),
    #[error("mutant {index} of the mutator's list: {what}")]
    Entry { index: usize, what: String },
}

#[derive(Deserialize)]
struct Position {
    line: u32,
}

#[derive(Deserialize)]
struct Span {
    start: Position,
}

#[derive(Deserialize)]
struct Listed {
    file: String,
    diff: String,
    #[serde(default)]
    line: Option<u32>,
    #[serde(default)]
    span: Option<Span>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

/// A tree path: relative, `/`-separated, no empty, `.` or `..` component, no NUL, bounded.
fn tree_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_PATH_BYTES || path.contains('\0') {
        return Err("`file` is empty, too long or holds a NUL".into());
    }
    if path
        .split('/')
        .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return Err(format!(
            "`file` {} is not a relative tree path",
            crate::analysis::syntax::evidence_text(path)
        ));
    }
    Ok(())
}

/// The number of file headers (`--- ` directly followed by `+++ `) in a diff.
fn file_headers(diff: &str) -> usize {
    let lines: Vec<&str> = diff.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[0].starts_with("--- ") && w[1].starts_with("+++ "))
        .count()
}

/// One listed entry as a mutant (`Operator::External`: `original` holds the description,
/// `replacement` the diff; [`Mutant::apply`] applies it).
fn mutant_of(entry: Listed) -> Result<Mutant, String> {
    tree_path(&entry.file)?;
    if entry.diff.len() > MAX_DIFF_BYTES {
        return Err(format!("its diff is larger than {MAX_DIFF_BYTES} bytes"));
    }
    if file_headers(&entry.diff) > 1 {
        return Err("its diff changes more than one file".into());
    }
    let patch =
        diffy::Patch::from_str(&entry.diff).map_err(|e| format!("its diff does not parse: {e}"))?;
    let Some(first) = patch.hunks().first() else {
        return Err("its diff has no hunk".into());
    };
    let line = entry
        .line
        .or(entry.span.map(|s| s.start.line))
        .unwrap_or(first.old_range().start() as u32)
        .max(1);
    let description = entry
        .description
        .or(entry.name)
        .unwrap_or_else(|| format!("{}:{line}", entry.file));
    Ok(Mutant {
        path: entry.file,
        line,
        operator: Operator::External,
        start: 0,
        end: 0,
        original: crate::analysis::syntax::evidence_text(&description),
        replacement: entry.diff,
    })
}

/// The mutants of the list file a mutator left, as read ([`MUTANTS_FILE`] from its scratch, at
/// most [`MAX_LIST_BYTES`]), or why there are none: a phrase that follows "the mutator".
pub fn list_from(read: Result<Vec<u8>, crate::safefs::SafeFsError>) -> Result<Vec<Mutant>, String> {
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(crate::safefs::SafeFsError::TooLarge { .. }) => {
            return Err(format!("printed no valid list: {}", ListError::TooLarge))
        }
        Err(e) => {
            return Err(format!(
                "left no list: {}",
                crate::analysis::syntax::evidence_text(&e.to_string())
            ))
        }
    };
    parse(&bytes).map_err(|e| format!("printed no valid list: {e}"))
}

/// The mutants of a mutator's list (its stdout, read at most [`MAX_LIST_BYTES`] + 1 bytes).
pub fn parse(bytes: &[u8]) -> Result<Vec<Mutant>, ListError> {
    if bytes.len() as u64 > MAX_LIST_BYTES {
        return Err(ListError::TooLarge);
    }
    let listed: Vec<serde_json::Value> = serde_json::from_slice(bytes)
        .map_err(|e| ListError::NotAList(crate::analysis::syntax::evidence_text(&e.to_string())))?;
    if listed.len() > MAX_LISTED {
        return Err(ListError::TooMany(listed.len()));
    }
    listed
        .into_iter()
        .enumerate()
        .map(|(index, value)| {
            let entry: Listed = serde_json::from_value(value).map_err(|e| ListError::Entry {
                index,
                what: crate::analysis::syntax::evidence_text(&e.to_string()),
            })?;
            mutant_of(entry).map_err(|what| ListError::Entry { index, what })
        })
        .collect()
}

/// The file's bytes with an external mutant's diff applied (`None`: its hunks do not fit the
/// file, or the file is not UTF-8 text).
pub fn apply(diff: &str, source: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(source).ok()?;
    let patch = diffy::Patch::from_str(diff).ok()?;
    diffy::apply(text, &patch).ok().map(String::into_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIFF: &str = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n+    return a - b\n";

    fn list(entries: &str) -> Vec<u8> {
        format!("[{entries}]").into_bytes()
    }

    #[test]
    fn an_entry_with_file_line_description_and_diff_is_a_mutant_that_applies() {
        let text = format!(
            r#"{{"file": "calc.py", "line": 2, "description": "+ to -", "diff": {}}}"#,
            serde_json::to_string(DIFF).unwrap()
        );
        let m = parse(&list(&text)).unwrap();
        assert_eq!(
            (m[0].path.as_str(), m[0].line, m[0].operator),
            ("calc.py", 2, Operator::External)
        );
        assert_eq!(m[0].change(), "external: + to -");
        assert_eq!(
            m[0].apply(b"def add(a, b):\n    return a + b\n").unwrap(),
            b"def add(a, b):\n    return a - b\n"
        );
    }

    #[test]
    fn a_cargo_mutants_entry_takes_its_line_from_the_span_and_its_description_from_the_name() {
        let diff = "--- src/lib.rs\n+++ replace add -> i32 with 0\n@@ -1,3 +1,3 @@\n pub fn add(a: i32, b: i32) -> i32 {\n-    a + b\n+    0\n }\n";
        let text = format!(
            r#"{{"package": "p", "file": "src/lib.rs", "function": {{"function_name": "add"}}, "span": {{"start": {{"line": 2, "column": 5}}, "end": {{"line": 2, "column": 10}}}}, "replacement": "0", "genre": "FnValue", "name": "src/lib.rs:2:5: replace add -> i32 with 0", "diff": {}}}"#,
            serde_json::to_string(diff).unwrap()
        );
        let m = parse(&list(&text)).unwrap();
        assert_eq!(m[0].line, 2);
        assert_eq!(
            m[0].change(),
            "external: src/lib.rs:2:5: replace add -> i32 with 0"
        );
        assert_eq!(
            m[0].apply(b"pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n")
                .unwrap(),
            b"pub fn add(a: i32, b: i32) -> i32 {\n    0\n}\n"
        );
    }

    #[test]
    fn output_that_is_not_a_json_array_is_refused() {
        assert!(matches!(
            parse(b"mutant 1: calc.py"),
            Err(ListError::NotAList(_))
        ));
        assert!(matches!(
            parse(br#"{"file": "a"}"#),
            Err(ListError::NotAList(_))
        ));
    }

    #[test]
    fn a_path_leaving_the_tree_is_refused_naming_the_entry() {
        let text = format!(
            r#"{{"file": "ok.py", "diff": {d}}}, {{"file": "../etc/passwd", "diff": {d}}}"#,
            d = serde_json::to_string(DIFF).unwrap()
        );
        assert!(
            matches!(parse(&list(&text)), Err(ListError::Entry { index: 1, ref what }) if what.contains("not a relative tree path"))
        );
        let text = format!(
            r#"{{"file": "/etc/passwd", "diff": {}}}"#,
            serde_json::to_string(DIFF).unwrap()
        );
        assert!(matches!(
            parse(&list(&text)),
            Err(ListError::Entry { index: 0, .. })
        ));
    }

    #[test]
    fn a_diff_of_two_files_is_refused() {
        let two = format!("{DIFF}--- a/other.py\n+++ b/other.py\n@@ -1 +1 @@\n-x\n+y\n");
        let text = format!(
            r#"{{"file": "calc.py", "diff": {}}}"#,
            serde_json::to_string(&two).unwrap()
        );
        assert!(
            matches!(parse(&list(&text)), Err(ListError::Entry { index: 0, ref what }) if what.contains("more than one file"))
        );
    }

    #[test]
    fn an_entry_without_a_diff_is_refused() {
        assert!(
            matches!(parse(&list(r#"{"file": "calc.py", "line": 3}"#)), Err(ListError::Entry { index: 0, ref what }) if what.contains("diff"))
        );
    }

    #[test]
    fn a_diff_whose_context_is_not_in_the_file_does_not_apply() {
        assert_eq!(apply(DIFF, b"something else entirely\n"), None);
    }

    #[test]
    fn an_empty_list_has_no_mutants() {
        assert_eq!(parse(b"[]").unwrap(), Vec::new());
    }

    #[test]
    fn the_wrapped_command_sends_stdout_to_the_list_file() {
        assert_eq!(
            wrapped("cargo mutants --list --json --diff"),
            "{ cargo mutants --list --json --diff\n} > .loopexec-mutants.json"
        );
    }
}
