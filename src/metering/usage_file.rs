//! The `LOOPEXEC_USAGE` file: the agent (or a wrapper around its model client) appends one JSON
//! object per model call, schema `loopexec.usage/v1`:
//! `{"provider":"anthropic","model":"...","input_tokens":N,"output_tokens":N,
//! "cache_read_tokens":N?,"cache_write_tokens":N?,"usd":X?,"id":"..."?,"schema":"loopexec.usage/v1"?}`.
//!
//! The file is the agent's, so it is read bounded and never fatally: at most [`MAX_TOTAL_BYTES`]
//! in all, lines over [`MAX_LINE_BYTES`] skipped to their newline through a fixed buffer (a line
//! of any length costs bounded memory) and counted `oversized`, like the rest past the total cap;
//! a line that is no such object (bad JSON, nesting past serde_json's recursion limit, a negative
//! or fractional or over-u64 token count, a negative or non-finite `usd`, another schema) counted
//! `malformed`; a line whose `id` an earlier line had, `duplicate`. Blank lines are skipped.

use super::record::Call;
use crate::receipt::usage::{RejectedInput, TokenCounts};
use serde::Deserialize;
use std::collections::HashSet;
use std::io::Read;

/// The schema a line may name (a line naming another is malformed).
pub const SCHEMA: &str = "loopexec.usage/v1";
/// The longest line read.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// The most bytes read from one file.
pub const MAX_TOTAL_BYTES: u64 = 8 * 1024 * 1024;
/// The largest `usd` one line may state (a larger one is malformed, not a budget breaker).
pub const MAX_LINE_USD: f64 = 1.0e9;

/// What a usage file gave: the calls believed, and the lines that were not.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reading {
    pub calls: Vec<Call>,
    pub rejected: RejectedInput,
}

impl Reading {
    /// Whether the file had anything in it at all.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty() && self.rejected == RejectedInput::default()
    }
}

#[derive(Deserialize)]
struct Line {
    #[serde(default)]
    schema: Option<String>,
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    model: Option<String>,
    input_tokens: u64,
    output_tokens: u64,
    #[serde(default)]
    cache_read_tokens: Option<u64>,
    #[serde(default)]
    cache_write_tokens: Option<u64>,
    #[serde(default)]
    usd: Option<f64>,
    #[serde(default)]
    id: Option<String>,
}

/// USD as micro-USD rounded up; `None` for a negative, non-finite or over-cap amount.
pub fn usd_to_micros(usd: f64) -> Option<u64> {
    if !usd.is_finite() || usd < 0.0 || usd > MAX_LINE_USD {
        return None;
    }
    Some((usd * 1_000_000.0).ceil() as u64)
}

/// Read a usage file from `input`, bounded as the module says.
pub fn read(input: impl Read) -> Reading {
    let mut reading = Reading::default();
    let mut ids = HashSet::new();
    for_each_line(
        input,
        MAX_LINE_BYTES,
        MAX_TOTAL_BYTES,
        &mut |line| match line {
            Chunk::Line(bytes) => take_line(bytes, &mut ids, &mut reading),
            Chunk::Oversized => reading.rejected.oversized += 1,
        },
    );
    reading
}

fn take_line(bytes: &[u8], ids: &mut HashSet<String>, reading: &mut Reading) {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let Ok(line) = serde_json::from_slice::<Line>(bytes) else {
        reading.rejected.malformed += 1;
        return;
    };
    let usd_micros = match line.usd.map(usd_to_micros) {
        Some(None) => {
            reading.rejected.malformed += 1;
            return;
        }
        Some(Some(m)) => Some(m),
        None => None,
    };
    if line.schema.as_deref().is_some_and(|s| s != SCHEMA) {
        reading.rejected.malformed += 1;
        return;
    }
    if let Some(id) = line.id {
        if !ids.insert(id) {
            reading.rejected.duplicate += 1;
            return;
        }
    }
    reading.calls.push(Call {
        provider: line.provider.as_deref().map(super::clean_name),
        model: line.model.as_deref().map(super::clean_name),
        tokens: TokenCounts {
            input: line.input_tokens,
            output: line.output_tokens,
            cache_read: line.cache_read_tokens.unwrap_or(0),
            cache_write: line.cache_write_tokens.unwrap_or(0),
        },
        usd_micros,
    });
}

/// One line of a bounded line reader: its bytes (without the newline), or a line that was too long.
pub enum Chunk<'a> {
    Line(&'a [u8]),
    Oversized,
}

/// Call `each` on every line of `input` (at most `max_total` bytes read; the last line need not
/// end in a newline). A line over `max_line` bytes is skipped to its newline through a fixed
/// buffer and given as [`Chunk::Oversized`], as is a line the total cap cut. A read error ends
/// the reading like the end of the input.
pub fn for_each_line(
    input: impl Read,
    max_line: usize,
    max_total: u64,
    each: &mut dyn FnMut(Chunk<'_>),
) {
    let mut input = input.take(max_total);
    let mut buf = vec![0u8; 64 * 1024];
    let mut line: Vec<u8> = Vec::new();
    let mut skipping = false;
    let mut total = 0u64;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        total += n as u64;
        for piece in buf[..n].split_inclusive(|b| *b == b'\n') {
            let ends = piece.last() == Some(&b'\n');
            let body = if ends {
                &piece[..piece.len() - 1]
            } else {
                piece
            };
            if !skipping {
                if line.len() + body.len() > max_line {
                    skipping = true;
                    line.clear();
                } else {
                    line.extend_from_slice(body);
                }
            }
            if ends {
                if skipping {
                    each(Chunk::Oversized);
                } else {
                    each(Chunk::Line(&line));
                }
                line.clear();
                skipping = false;
            }
        }
    }
    // The last line without its newline: whole when the input ended, cut when the cap did.
    if skipping || (total >= max_total && !line.is_empty()) {
        each(Chunk::Oversized);
    } else if !line.is_empty() {
        each(Chunk::Line(&line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_str(s: &str) -> Reading {
        read(s.as_bytes())
    }

    /// `len` bytes of `byte` without allocating them, then `tail`.
    struct Endless {
        left: u64,
        byte: u8,
        tail: std::io::Cursor<Vec<u8>>,
    }

    impl Read for Endless {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return self.tail.read(out);
            }
            let n = out.len().min(self.left as usize);
            out[..n].fill(self.byte);
            self.left -= n as u64;
            Ok(n)
        }
    }

    const GOOD: &str = r#"{"provider":"anthropic","model":"claude-sonnet-4-5","input_tokens":1200,"output_tokens":300,"cache_read_tokens":50,"usd":0.0123,"id":"c1"}"#;

    #[test]
    fn a_line_gives_its_call_with_the_usd_in_micro_usd_rounded_up() {
        let r = read_str(&format!("{GOOD}\n"));
        assert_eq!(r.rejected, RejectedInput::default());
        assert_eq!(
            r.calls,
            vec![Call {
                provider: Some("anthropic".into()),
                model: Some("claude-sonnet-4-5".into()),
                tokens: TokenCounts {
                    input: 1200,
                    output: 300,
                    cache_read: 50,
                    cache_write: 0
                },
                usd_micros: Some(12_300),
            }]
        );
        assert_eq!(usd_to_micros(0.0000001), Some(1));
    }

    #[test]
    fn the_last_line_needs_no_newline_and_blank_lines_are_skipped() {
        let r = read_str(&format!("\n  \n{GOOD}"));
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.rejected, RejectedInput::default());
    }

    #[test]
    fn malformed_lines_are_counted_and_the_good_ones_kept() {
        let lines = [
            "not json",
            r#"{"model":"m","input_tokens":-1,"output_tokens":0}"#,
            r#"{"model":"m","input_tokens":"12","output_tokens":0}"#,
            r#"{"model":"m","input_tokens":1.5,"output_tokens":0}"#,
            r#"{"model":"m","input_tokens":18446744073709551616,"output_tokens":0}"#,
            r#"{"model":"m","input_tokens":1,"output_tokens":0,"usd":-0.5}"#,
            r#"{"model":"m","input_tokens":1,"output_tokens":0,"usd":1e300}"#,
            r#"{"model":"m","input_tokens":1,"output_tokens":0,"schema":"other/v9"}"#,
            r#"{"model":"m","output_tokens":0}"#,
            "\0\0\0\0",
            "[1,2,3]",
        ];
        let r = read_str(&format!("{}\n{GOOD}\n", lines.join("\n")));
        assert_eq!(
            r.rejected,
            RejectedInput {
                malformed: lines.len() as u64,
                ..Default::default()
            }
        );
        assert_eq!(r.calls.len(), 1);
    }

    #[test]
    fn nesting_past_the_recursion_limit_is_malformed_not_a_stack_overflow() {
        // 30k deep fits the line cap (a 100k-deep line is oversized, skipped unparsed).
        let deep = format!("{}{}\n{GOOD}\n", "[".repeat(30_000), "]".repeat(30_000));
        let r = read_str(&deep);
        assert_eq!(r.rejected.malformed, 1);
        assert_eq!(r.calls.len(), 1);
    }

    #[test]
    fn a_repeated_id_is_a_duplicate_and_counted_once() {
        let r = read_str(&format!("{GOOD}\n{GOOD}\n{GOOD}\n"));
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.rejected.duplicate, 2);
    }

    #[test]
    fn lines_without_an_id_are_never_duplicates() {
        let line = r#"{"model":"m","input_tokens":1,"output_tokens":2}"#;
        let r = read_str(&format!("{line}\n{line}\n"));
        assert_eq!(r.calls.len(), 2);
        assert_eq!(r.rejected.duplicate, 0);
    }

    #[test]
    fn a_one_gib_line_is_skipped_as_oversized_with_bounded_memory_and_the_next_line_read() {
        let input = Endless {
            left: 1 << 30,
            byte: b'a',
            tail: std::io::Cursor::new(format!("\n{GOOD}\n").into_bytes()),
        };
        // The total cap would stop the reading first: lift it to see the next line read.
        let mut reading = Reading::default();
        let mut ids = HashSet::new();
        for_each_line(input, MAX_LINE_BYTES, u64::MAX, &mut |c| match c {
            Chunk::Line(b) => take_line(b, &mut ids, &mut reading),
            Chunk::Oversized => reading.rejected.oversized += 1,
        });
        assert_eq!(
            reading.rejected,
            RejectedInput {
                oversized: 1,
                ..Default::default()
            }
        );
        assert_eq!(reading.calls.len(), 1);
    }

    #[test]
    fn reading_stops_at_the_total_cap_and_counts_the_cut_line_oversized() {
        let line = r#"{"model":"m","input_tokens":1,"output_tokens":2}"#;
        let many = format!("{line}\n").repeat((MAX_TOTAL_BYTES as usize / (line.len() + 1)) + 10);
        let r = read_str(&many);
        let whole = MAX_TOTAL_BYTES as usize / (line.len() + 1);
        assert_eq!(r.calls.len(), whole);
        assert_eq!(r.rejected.oversized, 1);
    }

    #[test]
    fn a_truncated_last_line_is_malformed() {
        let r = read_str(&format!("{GOOD}\n{}", &GOOD[..40]));
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.rejected.malformed, 1);
    }

    #[test]
    fn model_names_are_cleaned() {
        let r = read_str("{\"model\":\"evil\\u001b[2J\",\"input_tokens\":1,\"output_tokens\":1}\n");
        assert_eq!(r.calls[0].model.as_deref(), Some("evil??2J"));
    }
}
