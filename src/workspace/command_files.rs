//! The t0 files a command runs: what the check and the operator's mutator execute out of the
//! operator's tree, so that they are protected by default (the agent changing one halts
//! `blocked_path_modified`, and the check's layers hold t0's copy). The judge needs none of this:
//! it runs with t0's tree as its working directory (docs/guards.md, "The judge").
//!
//! A command line is read as a shell reads it, roughly: words (quotes and backslashes undone),
//! simple commands split at `; | & ( ) < >`, newlines and backticks. A file is *run* when it is
//! in a run position: the first word of a simple command naming a path (`./check.sh`,
//! `scripts/x`), or the first operand of an interpreter or wrapper (`sh`, `bash`, `python3`,
//! `node`, `source`, `.`, `exec`, `env`, ...; `python3 -m pkg.mod` names `pkg/mod.py` or
//! `pkg/mod/__main__.py`). A quoted word is read again as a command line (`bash -c 'sh
//! scripts/x.sh'`). Each file found is read too (UTF-8 text, at most [`MAX_READ_BYTES`]) and
//! followed ([`Follow`]), from the tree's root and from the file's directory: for the check, what
//! it sources (`. lib.sh`, `source ci/env.sh`), so a helper a check script sources is protected
//! like the script, but not a program it runs (that may be the code under test); for the
//! operator's mutator also what its files run or import (`from tools import helper`,
//! `require('./helper')`). A name that only data-reads a file (`grep -q ok value.txt`) does not
//! protect it: the check must be able to read the agent's files.
//!
//! This is recognition, so it has limits (docs/guards.md): a file reached only through a
//! computed name (`$(ls scripts)`, `$DIR/x.sh`, an interpreter's search path) is not found. The
//! loop's own `protected` patterns cover such files.
//!
//! Bounded: at most [`MAX_FILES`] files named, [`MAX_TEXTS`] texts read, each at most
//! [`MAX_READ_BYTES`]; no recursion (a work list). Past either cap the scan fails closed
//! ([`TooMany`]): a file past the cap would be left unprotected, so the run is refused instead.

use super::manifest::{EntryKind, Manifest};
use std::collections::{BTreeSet, VecDeque};

/// Most files one set of commands may name (more: [`TooMany`], the run is refused).
pub const MAX_FILES: usize = 256;
/// Most texts (command lines, quoted words, files) read.
pub const MAX_TEXTS: usize = 2048;
/// Largest part of a named file read to follow what it runs.
pub const MAX_READ_BYTES: usize = 64 * 1024;

/// Interpreters and wrappers whose first operand is the file they run (or, for wrappers, the
/// command they run).
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "ash", "busybox", "python", "python2", "python3", "pypy",
    "pypy3", "node", "nodejs", "deno", "bun", "tsx", "ts-node", "ruby", "perl", "php", "lua",
    "tclsh", "Rscript", "pwsh", "source", ".",
];
/// Words that run the rest of their simple command as a command.
const WRAPPERS: &[&str] = &[
    "exec", "env", "nohup", "time", "command", "nice", "timeout", "xargs", "sudo", "then", "do",
    "else", "if", "while", "until", "!", "{",
];

/// How far the files a command runs are followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// A check's (or held-out check's) command: the files its command line runs, and what those
    /// source (`.`, `source`): a file they *run* or import may be the code under test itself
    /// (the bundled example's `check.sh` runs `sh ./fizzbuzz.sh`, the program the agent fixes).
    Sourced,
    /// The operator's mutator: everything its files run, source or import is the mutator's code.
    Everything,
}

/// The commands name more than a cap allows: past it files they run would go unprotected, so
/// the scan fails closed instead of stopping short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TooMany {
    /// More than [`MAX_FILES`] distinct files named.
    Files,
    /// More than [`MAX_TEXTS`] texts (command lines, quoted words, files) to read.
    Texts,
}

impl std::fmt::Display for TooMany {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TooMany::Files => write!(f, "the check and mutator commands run more than {MAX_FILES} files (MAX_FILES): past the cap a file they run would be left unprotected; list them in the loop's `protected` patterns and call fewer"),
            TooMany::Texts => write!(f, "following the check and mutator commands reads more than {MAX_TEXTS} texts (MAX_TEXTS: command lines, quoted words, files): past the cap a file they run would be left unprotected; simplify the commands"),
        }
    }
}

/// Reads a t0 file: its bytes, at most the limit plus one (None: unreadable).
pub type ReadT0<'a> = &'a dyn Fn(&[u8], usize) -> Option<Vec<u8>>;

/// The t0 files (repository paths, sorted) that `commands` run, directly or through files they
/// run, each followed as its [`Follow`] says. `read`: a t0 file's bytes, at most the limit plus
/// one (None: unreadable). Past [`MAX_FILES`] or [`MAX_TEXTS`]: [`TooMany`] (fail closed).
pub fn files_run(
    commands: &[(&str, Follow)],
    t0: &Manifest,
    read: ReadT0<'_>,
) -> Result<Vec<String>, TooMany> {
    let mut named: BTreeSet<String> = BTreeSet::new();
    // (text, directory of the file it came from, what the text is, how far to follow)
    let mut work: VecDeque<(String, String, Text, Follow)> = commands
        .iter()
        .map(|(c, f)| (c.to_string(), String::new(), Text::CommandLine, *f))
        .collect();
    let mut texts = 0usize;
    while let Some((text, dir, kind, follow)) = work.pop_front() {
        texts += 1;
        if texts > MAX_TEXTS {
            return Err(TooMany::Texts);
        }
        let mut found: Vec<String> = Vec::new();
        match kind {
            Text::CommandLine | Text::Shell => {
                let mut quoted: Vec<String> = Vec::new();
                for words in simple_commands(&text, &mut quoted) {
                    for (candidate, sourced) in run_operands(&words) {
                        if kind == Text::CommandLine || sourced || follow == Follow::Everything {
                            found.extend(resolve(&candidate, &dir, t0));
                        }
                    }
                }
                for q in quoted {
                    work.push_back((q, dir.clone(), kind, follow));
                }
            }
            Text::Python if follow == Follow::Everything => {
                for module in python_imports(&text) {
                    found.extend(resolve_module(&module, &dir, t0));
                }
            }
            // `require('./helper')`, `import x from '../lib/x.mjs'`: a quoted relative name.
            Text::JavaScript if follow == Follow::Everything => {
                for module in quoted_relative_names(&text) {
                    found.extend(resolve(&module, &dir, t0));
                }
            }
            Text::Python | Text::JavaScript => {}
        }
        for path in found {
            if named.contains(&path) {
                continue;
            }
            if named.len() >= MAX_FILES {
                return Err(TooMany::Files);
            }
            named.insert(path.clone());
            let Some(bytes) = read(path.as_bytes(), MAX_READ_BYTES) else {
                continue;
            };
            let bytes = &bytes[..bytes.len().min(MAX_READ_BYTES)];
            let Ok(content) = std::str::from_utf8(bytes) else {
                continue;
            };
            let Some(kind) = Text::of_file(&path, content) else {
                continue;
            };
            let parent = path
                .rsplit_once('/')
                .map(|(d, _)| d.to_string())
                .unwrap_or_default();
            work.push_back((content.to_string(), parent, kind, follow));
        }
    }
    Ok(named.into_iter().collect())
}

/// What a text read is, so it is read in its own language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Text {
    /// A command as loop.toml gives it (or a quoted command line in one).
    CommandLine,
    /// A shell script's text.
    Shell,
    Python,
    JavaScript,
}

impl Text {
    /// A named file's language, by its extension or `#!` line; None: one not followed (data, a
    /// binary, another language).
    fn of_file(path: &str, content: &str) -> Option<Text> {
        let name = path.rsplit('/').next().unwrap_or(path);
        let shebang = content
            .lines()
            .next()
            .filter(|l| l.starts_with("#!"))
            .unwrap_or_default();
        let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or_default();
        if ext == "py" || shebang.contains("python") {
            Some(Text::Python)
        } else if matches!(ext, "js" | "mjs" | "cjs" | "ts" | "mts" | "cts")
            || shebang.contains("node")
            || shebang.contains("deno")
            || shebang.contains("bun")
        {
            Some(Text::JavaScript)
        } else if matches!(ext, "sh" | "bash" | "zsh" | "ksh")
            || shebang.contains("sh")
            || (ext.is_empty() && shebang.is_empty())
        {
            Some(Text::Shell)
        } else {
            None
        }
    }
}

/// `path` as a literal protected-path pattern: anchored at the root, glob metacharacters escaped.
pub fn literal_pattern(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 2);
    out.push('/');
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\' | '!') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The simple commands of `text` as word lists (a redirection's target left out); quoted words
/// that hold a command line of their own (whitespace or an operator inside, or the operand of
/// `-c`) are also pushed to `quoted`.
fn simple_commands(text: &str, quoted: &mut Vec<String>) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    // The next word is a redirection's target (`> out.txt`, `< in`): data, never run.
    let mut redirect = false;
    let mut chars = text.chars().peekable();
    let end_word =
        |word: &mut String, in_word: &mut bool, words: &mut Vec<String>, redirect: &mut bool| {
            if *in_word {
                let w = std::mem::take(word);
                if !std::mem::take(redirect) {
                    words.push(w);
                }
                *in_word = false;
            }
        };
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                let mut q = String::new();
                while let Some(d) = chars.next() {
                    if d == c {
                        break;
                    }
                    if d == '\\' && c == '"' {
                        if let Some(e) = chars.next() {
                            q.push(e);
                        }
                        continue;
                    }
                    q.push(d);
                }
                let after_c = word.is_empty() && words.last().is_some_and(|w| w == "-c");
                let command_like = q
                    .chars()
                    .any(|c| c.is_whitespace() || matches!(c, ';' | '|' | '&' | '(' | ')' | '`'));
                word.push_str(&q);
                in_word = true;
                if !q.trim().is_empty() && (after_c || command_like) {
                    quoted.push(q);
                }
            }
            '\\' => {
                if let Some(d) = chars.next() {
                    if d != '\n' {
                        word.push(d);
                        in_word = true;
                    }
                }
            }
            '#' if !in_word => {
                // A comment to the end of the line.
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
                end_word(&mut word, &mut in_word, &mut words, &mut redirect);
                commands.push(std::mem::take(&mut words));
            }
            c if c.is_whitespace() && c != '\n' => {
                end_word(&mut word, &mut in_word, &mut words, &mut redirect)
            }
            '<' | '>' => {
                end_word(&mut word, &mut in_word, &mut words, &mut redirect);
                redirect = true;
            }
            ';' | '|' | '&' | '(' | ')' | '\n' | '`' => {
                end_word(&mut word, &mut in_word, &mut words, &mut redirect);
                redirect = false;
                commands.push(std::mem::take(&mut words));
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut words, &mut redirect);
    commands.push(words);
    commands.retain(|w| !w.is_empty());
    commands
}

/// The words of a simple command that name a file it runs (not yet resolved), each with whether
/// it is sourced (`.`, `source`) rather than run.
fn run_operands(words: &[String]) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut i = 0;
    // Leading assignments (`FOO=1 ./x`).
    while words.get(i).is_some_and(|w| is_assignment(w)) {
        i += 1;
    }
    while let Some(first) = words.get(i) {
        let name = first.rsplit('/').next().unwrap_or(first);
        if WRAPPERS.contains(&name) {
            i += 1;
            // A wrapper's own options and assignments (`env -i A=1`, `timeout 60`).
            while words
                .get(i)
                .is_some_and(|w| w.starts_with('-') || is_assignment(w) || w.parse::<f64>().is_ok())
            {
                i += 1;
            }
            continue;
        }
        if first.contains('/') {
            out.push((first.clone(), false));
        }
        let sourcing = name == "." || name == "source";
        let interpreter = INTERPRETERS.contains(&name)
            || name.starts_with("python3.")
            || name.starts_with("python2.");
        if interpreter {
            let mut j = i + 1;
            while let Some(w) = words.get(j) {
                match w.as_str() {
                    "-m" => {
                        if let Some(module) = words.get(j + 1) {
                            out.push((format!("module:{module}"), false));
                        }
                        break;
                    }
                    // The code itself, read again as a quoted word.
                    "-c" | "-e" | "--eval" => break,
                    "-f" | "--file" | "--require" | "-r" | "--import" | "--loader" => {
                        if let Some(file) = words.get(j + 1) {
                            out.push((file.clone(), false));
                        }
                        j += 2;
                    }
                    w if w.starts_with('-') => j += 1,
                    "run" if name == "deno" || name == "bun" => j += 1,
                    w => {
                        out.push((w.to_string(), sourcing));
                        break;
                    }
                }
            }
        }
        // A bare first word runs from the PATH, not from the tree.
        break;
    }
    out
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty()
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !k.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// A named word as t0 files: from the root and from `dir`; a `./`/`../` name (a JS `require`)
/// also with the usual source extensions when t0 has it only with one.
fn resolve(word: &str, dir: &str, t0: &Manifest) -> Vec<String> {
    if let Some(module) = word.strip_prefix("module:") {
        return resolve_module(module, dir, t0);
    }
    let mut out = Vec::new();
    let bases: Vec<String> = if dir.is_empty() {
        vec![String::new()]
    } else {
        vec![String::new(), format!("{dir}/")]
    };
    for base in bases {
        let Some(path) = normalise(&format!("{base}{word}")) else {
            continue;
        };
        let relative = word.starts_with("./") || word.starts_with("../");
        let exts: &[&str] = if relative {
            &["", ".js", ".mjs", ".cjs", ".ts", ".py", ".sh"]
        } else {
            &[""]
        };
        for ext in exts {
            let p = format!("{path}{ext}");
            if is_file(t0, &p) {
                out.push(p);
                break;
            }
        }
    }
    out
}

/// A Python module name as t0 files (`a.b` -> `a/b.py`, `a/b/__init__.py`, `a/b/__main__.py`),
/// from the root and from `dir`; a relative import's dots climb from `dir`.
fn resolve_module(module: &str, dir: &str, t0: &Manifest) -> Vec<String> {
    let dots = module.chars().take_while(|c| *c == '.').count();
    let rest = &module[dots..];
    let mut bases: Vec<String> = Vec::new();
    if dots > 0 {
        let mut d: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
        for _ in 1..dots {
            d.pop();
        }
        bases.push(d.join("/"));
    } else {
        bases.push(String::new());
        if !dir.is_empty() {
            bases.push(dir.to_string());
        }
    }
    let mut out = Vec::new();
    for base in bases {
        let stem = rest.replace('.', "/");
        let joined = [base.as_str(), stem.as_str()]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("/");
        if joined.is_empty() {
            continue;
        }
        for p in [
            format!("{joined}.py"),
            format!("{joined}/__init__.py"),
            format!("{joined}/__main__.py"),
        ] {
            if is_file(t0, &p) {
                out.push(p);
            }
        }
    }
    out
}

/// The quoted names starting `./` or `../` in a file's text (a JS `require` or `import`).
fn quoted_relative_names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for quote in ['\'', '"', '`'] {
        for (i, piece) in text.split(quote).enumerate() {
            if i % 2 == 1
                && (piece.starts_with("./") || piece.starts_with("../"))
                && !piece.contains(char::is_whitespace)
            {
                out.push(piece.to_string());
            }
        }
    }
    out
}

/// The modules a Python file imports (`import a.b, c`, `from .x import y` -> `.x` and `.x.y`).
fn python_imports(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("import ") {
            out.extend(
                rest.split(',')
                    .filter_map(|m| m.split_whitespace().next())
                    .map(str::to_string),
            );
        } else if let Some(rest) = line.strip_prefix("from ") {
            let mut parts = rest.splitn(2, " import ");
            let (Some(module), names) = (parts.next(), parts.next()) else {
                continue;
            };
            let module = module.trim();
            out.push(module.to_string());
            for name in names
                .unwrap_or_default()
                .trim_matches(|c| c == '(' || c == ')')
                .split(',')
            {
                if let Some(name) = name.split_whitespace().next() {
                    let sep = if module.ends_with('.') { "" } else { "." };
                    out.push(format!("{module}{sep}{name}"));
                }
            }
        }
    }
    out
}

/// A relative, `/`-separated tree path without `.`/`..`/empty components (`./x` -> `x`); None
/// for an absolute path, one that climbs out, or an empty one.
fn normalise(word: &str) -> Option<String> {
    if word.starts_with('/') || word.is_empty() || word.contains('\0') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in word.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

fn is_file(t0: &Manifest, path: &str) -> bool {
    t0.get(path.as_bytes()).is_some_and(|e| {
        matches!(
            e.kind,
            EntryKind::File | EntryKind::Executable | EntryKind::Symlink
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::{object_id::blob_id, Entry};
    use std::collections::BTreeMap;

    fn tree(files: &[(&str, &str)]) -> (Manifest, BTreeMap<String, String>) {
        let mut m = Manifest::default();
        for (p, text) in files {
            m.insert(
                p.as_bytes().to_vec(),
                Entry {
                    kind: EntryKind::File,
                    oid: blob_id(text.as_bytes()),
                },
            )
            .unwrap();
        }
        (
            m,
            files
                .iter()
                .map(|(p, t)| (p.to_string(), t.to_string()))
                .collect(),
        )
    }

    fn try_run_as(
        follow: Follow,
        commands: &[&str],
        files: &[(&str, &str)],
    ) -> Result<Vec<String>, TooMany> {
        let (m, texts) = tree(files);
        let commands: Vec<(&str, Follow)> = commands.iter().map(|c| (*c, follow)).collect();
        files_run(&commands, &m, &|p, _| {
            texts
                .get(std::str::from_utf8(p).ok()?)
                .map(|t| t.as_bytes().to_vec())
        })
    }

    fn run_as(follow: Follow, commands: &[&str], files: &[(&str, &str)]) -> Vec<String> {
        try_run_as(follow, commands, files).expect("within the caps")
    }

    #[test]
    fn more_files_run_than_max_files_fails_closed_not_short() {
        let names: Vec<String> = (0..=MAX_FILES)
            .map(|i| format!("ci/lib{i:03}.sh"))
            .collect();
        let script: String = names.iter().map(|n| format!(". {n}\n")).collect();
        let mut files: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "")).collect();
        files.push(("check.sh", &script));
        // 257 sourced helpers plus the script: more than MAX_FILES, in one script or split over a
        // command line and the helpers it sources.
        assert_eq!(
            try_run_as(Follow::Sourced, &["sh check.sh"], &files),
            Err(TooMany::Files)
        );
        let split: String = names[..10].iter().map(|n| format!("sh {n}; ")).collect();
        let chained: Vec<(String, String)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    n.clone(),
                    names
                        .get(i + 1)
                        .map(|m| format!(". {m}\n"))
                        .unwrap_or_default(),
                )
            })
            .collect();
        let chained: Vec<(&str, &str)> = chained
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        assert_eq!(
            try_run_as(Follow::Sourced, &[&split], &chained),
            Err(TooMany::Files)
        );
        // At the cap exactly, every file is named.
        assert_eq!(
            try_run_as(Follow::Sourced, &["sh check.sh"], &files[2..]).map(|f| f.len()),
            Ok(MAX_FILES)
        );
    }

    #[test]
    fn more_texts_than_max_texts_fails_closed_not_short() {
        // A `-c` word is read again as a command line: one text each, in a script or on the line.
        let quoted: String = (0..=MAX_TEXTS)
            .map(|i| format!("sh -c 'true {i}'\n"))
            .collect();
        assert_eq!(
            try_run_as(Follow::Sourced, &["sh check.sh"], &[("check.sh", &quoted)]),
            Err(TooMany::Texts)
        );
        let nested = (0..MAX_TEXTS)
            .map(|i| format!("bash -c 'true {i}'"))
            .collect::<Vec<_>>()
            .join("; ");
        assert_eq!(
            try_run_as(Follow::Everything, &[&nested], &[]),
            Err(TooMany::Texts)
        );
    }

    fn run(commands: &[&str], files: &[(&str, &str)]) -> Vec<String> {
        run_as(Follow::Everything, commands, files)
    }

    #[test]
    fn a_check_script_protects_what_it_sources_but_not_the_program_it_runs() {
        let files = [
            (
                "check.sh",
                ". ci/lib.sh\nsh ./fizzbuzz.sh > actual.txt\npython3 app.py\n",
            ),
            ("ci/lib.sh", ""),
            ("fizzbuzz.sh", ""),
            ("app.py", ""),
        ];
        assert_eq!(
            run_as(Follow::Sourced, &["sh ./check.sh"], &files),
            ["check.sh", "ci/lib.sh"]
        );
        assert_eq!(
            run_as(Follow::Everything, &["sh ./check.sh"], &files),
            ["app.py", "check.sh", "ci/lib.sh", "fizzbuzz.sh"]
        );
    }

    #[test]
    fn a_script_run_by_path_or_by_an_interpreter_is_named() {
        let files = [
            ("check.sh", "exit 0\n"),
            ("tools/review.py", "print(1)\n"),
            ("value.txt", "bad\n"),
            ("src/app.py", "x = 1\n"),
        ];
        assert_eq!(run(&["./check.sh"], &files), ["check.sh"]);
        assert_eq!(
            run(&["python3 -B tools/review.py --strict"], &files),
            ["tools/review.py"]
        );
        assert_eq!(
            run(
                &["FOO=1 timeout 60 bash check.sh && grep -q good value.txt"],
                &files
            ),
            ["check.sh"]
        );
    }

    #[test]
    fn a_file_the_command_only_reads_or_writes_is_not_named() {
        let files = [
            ("value.txt", "bad\n"),
            ("expected.txt", "x\n"),
            ("src/sq/__init__.py", ""),
        ];
        let commands = [
            "grep -q good value.txt",
            "diff value.txt expected.txt",
            "cat < value.txt",
            "echo '# touched' >> src/sq/__init__.py",
            "grep -q x 'src/sq/__init__.py'",
        ];
        assert_eq!(run(&commands, &files), Vec::<String>::new());
    }

    #[test]
    fn a_mutator_script_naming_the_files_it_mutates_as_strings_does_not_protect_them() {
        let files = [
            (
                "mutator.py",
                "import json\nsource = open(\"calc/core.py\").read()\nmutants_of('calc/core.py')\n",
            ),
            ("calc/core.py", ""),
        ];
        assert_eq!(
            run(&["/usr/bin/python3 -B mutator.py"], &files),
            ["mutator.py"]
        );
    }

    #[test]
    fn a_command_inside_quotes_is_read_again() {
        let files = [("scripts/x.sh", "true\n")];
        assert_eq!(
            run(&["bash -c 'sh scripts/x.sh'"], &files),
            ["scripts/x.sh"]
        );
        assert_eq!(
            run(&["sh -c \"cd . && ./scripts/x.sh\""], &files),
            ["scripts/x.sh"]
        );
    }

    #[test]
    fn a_helper_a_script_sources_or_imports_is_named_too() {
        let files = [
            (
                "ci/check.sh",
                "#!/bin/sh\n. ci/lib.sh\nsource ./ci/env.sh\npython3 -m tools.gate\n",
            ),
            ("ci/lib.sh", "run() { :; }\n"),
            ("ci/env.sh", "X=1\n"),
            ("tools/__init__.py", ""),
            (
                "tools/gate.py",
                "from tools import rules\nfrom .verdict import decide\n",
            ),
            ("tools/rules.py", "R = 1\n"),
            ("tools/verdict.py", "def decide(): pass\n"),
        ];
        assert_eq!(
            run(&["sh ci/check.sh"], &files),
            [
                "ci/check.sh",
                "ci/env.sh",
                "ci/lib.sh",
                "tools/__init__.py",
                "tools/gate.py",
                "tools/rules.py",
                "tools/verdict.py"
            ]
        );
    }

    #[test]
    fn paths_that_leave_the_tree_or_are_absolute_name_nothing() {
        let files = [("x.sh", "true\n")];
        assert_eq!(
            run(
                &["sh ../x.sh", "/usr/bin/python3 -m pytest", "sh /x.sh"],
                &files
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_literal_pattern_is_anchored_and_escaped() {
        assert_eq!(literal_pattern("ci/run[1].sh"), "/ci/run\\[1\\].sh");
    }

    #[test]
    fn a_bare_command_name_runs_from_the_path_and_names_no_tree_file() {
        let files = [("pytest", "x\n"), ("check.sh", "true\n")];
        assert_eq!(
            run(&["pytest -q", "check.sh"], &files),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_relative_require_in_a_named_script_names_the_module_file() {
        let files = [
            (
                "ci/run.js",
                "const h = require('./helper')\nimport x from '../lib/x.mjs'\n",
            ),
            ("ci/helper.js", ""),
            ("lib/x.mjs", ""),
        ];
        assert_eq!(
            run(&["node ci/run.js"], &files),
            ["ci/helper.js", "ci/run.js", "lib/x.mjs"]
        );
    }

    #[test]
    fn a_script_that_runs_itself_is_read_once() {
        let files = [("loop.sh", "sh loop.sh\n")];
        assert_eq!(run(&["sh loop.sh"], &files), ["loop.sh"]);
    }
}
