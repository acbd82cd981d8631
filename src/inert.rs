//! Making agent-controlled text inert before it reaches the operator's terminal. A file name, a
//! report's test name or a zone's output can carry escape sequences (set the window title, clear
//! the screen, move the cursor), C1 controls (`U+009B` is a CSI on some terminals), Unicode bidi
//! overrides (text shown in another order than it is) and newlines (a forged output line). Every
//! human renderer passes such strings through [`inert`] (one line: newlines escaped too) or, for
//! text whose line structure is the renderer's own, [`inert_lines`]. JSON output is written by
//! [`json_text`]: serde_json escapes every C0 control, and the rest of the characters above are
//! written as `\uNNNN` escapes too, so the JSON text itself is safe to print on a terminal and
//! still decodes to the exact strings.
//!
//! What is escaped, and how (always visibly, never dropped): `\n`, `\r`, `\t` as themselves;
//! every other C0 control and DEL as `\xNN`; C1 controls, bidi controls (`U+061C`, `U+200E`,
//! `U+200F`, `U+202A`-`U+202E`, `U+2066`-`U+2069`) and the line/paragraph separators (`U+2028`,
//! `U+2029`) as `\u{NNNN}`; bytes that are not UTF-8 (in [`inert_bytes`]) as `\xNN`. A backslash
//! is left as it is, so escaping twice (a renderer, then the output's own pass) changes nothing: a
//! name that spells `\x1b` in plain characters looks like an escaped ESC, and is as harmless. The
//! exact string is in the JSON output.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` as one inert line: every control shown as an escape, newlines included.
pub fn inert(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// `text` with its newlines kept (the renderer's own line structure) and everything else escaped.
pub fn inert_lines(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// Bytes that may not be UTF-8 (a path from the workspace), as one inert line.
pub fn inert_bytes(bytes: &[u8]) -> String {
    escape_bytes(bytes, false)
}

/// Bytes that may not be UTF-8 (a command's output), with their newlines kept.
pub fn inert_lines_bytes(bytes: &[u8]) -> String {
    escape_bytes(bytes, true)
}

fn escape_bytes(bytes: &[u8], keep_lines: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(&escape(chunk.valid(), keep_lines));
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// `value` as compact JSON text in which no character a terminal would act on appears raw: C0
/// controls (by serde_json), C1 controls, bidi controls and line separators as `\uNNNN`.
/// None if it cannot be serialised.
pub fn json_text(value: &serde_json::Value) -> Option<String> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, InertJson);
    serde::Serialize::serialize(value, &mut ser).ok()?;
    String::from_utf8(out).ok()
}

/// serde_json's compact format, with terminal-active characters in strings written as escapes.
struct InertJson;

impl serde_json::ser::Formatter for InertJson {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if needs_escape(c, true) && c as u32 >= 0x80 {
                writer.write_all(fragment[start..i].as_bytes())?;
                write!(writer, "\\u{:04x}", c as u32)?;
                start = i + c.len_utf8();
            }
        }
        writer.write_all(fragment[start..].as_bytes())
    }
}

fn needs_escape(c: char, keep_newlines: bool) -> bool {
    match c {
        '\n' => !keep_newlines,
        c if (c as u32) < 0x20 || c == '\u{7f}' => true,
        '\u{80}'..='\u{9f}' => true,
        '\u{061c}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}' => true,
        '\u{2028}' | '\u{2029}' => true,
        _ => false,
    }
}

fn escape(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    if !text.chars().any(|c| needs_escape(c, keep_newlines)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !needs_escape(c, keep_newlines) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_returned_unchanged_and_borrowed() {
        assert!(matches!(
            inert("src/lib.rs and ünïcode"),
            Cow::Borrowed("src/lib.rs and ünïcode")
        ));
    }

    #[test]
    fn escape_sequences_and_newlines_are_shown_visibly() {
        assert_eq!(
            inert("\x1b]0;pwned\x07a\x1b[2Jb\nloopexec: forged"),
            "\\x1b]0;pwned\\x07a\\x1b[2Jb\\nloopexec: forged"
        );
        assert_eq!(inert("tab\there\r\u{7f}\0"), "tab\\there\\r\\x7f\\x00");
    }

    #[test]
    fn c1_controls_bidi_overrides_and_separators_are_escaped() {
        assert_eq!(inert("a\u{9b}2Jb"), "a\\u{009b}2Jb");
        assert_eq!(inert("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(inert("x\u{2066}y\u{2028}z"), "x\\u{2066}y\\u{2028}z");
    }

    #[test]
    fn escaping_twice_changes_nothing() {
        let once = inert("a\x1b[2J\nb\u{202e}").into_owned();
        assert_eq!(inert(&once), once);
        assert_eq!(inert_lines(&once), once);
    }

    #[test]
    fn inert_lines_keeps_newlines_only() {
        assert_eq!(inert_lines("one\ntwo\x1b[2J\r"), "one\ntwo\\x1b[2J\\r");
    }

    #[test]
    fn json_text_escapes_what_a_terminal_would_act_on_and_decodes_to_the_exact_string() {
        let value = serde_json::json!({"name": "a\x1b[2J\u{9b}b\u{202e}c\u{2028}d ü"});
        let text = json_text(&value).unwrap();
        assert_eq!(text, r#"{"name":"a\u001b[2J\u009bb\u202ec\u2028d ü"}"#);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            value
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_shown_as_hex() {
        assert_eq!(
            inert_bytes(b"name\xff\xfe\x1b.txt"),
            "name\\xff\\xfe\\x1b.txt"
        );
    }
}
