//! Failure excerpts: for each failing test, a bounded piece of what its failure printed (JUnit's
//! `<failure>`/`<error>` message and text, the `Output` lines of a failing `go test -json` test,
//! TAP's YAML diagnostic block, libtest's `---- NAME stdout ----` section), as the parsers find it.
//!
//! Everything here is hostile input kept as data: control characters other than newline and tab
//! are escaped (`\u{1b}`) when an excerpt is finished, so an excerpt can reach a terminal, a
//! Markdown file or a JSON document without being interpreted. Three bounds hold whatever the
//! report: [`MAX_EXCERPT_BYTES`] per excerpt (cut at a character boundary and marked `cut`),
//! [`MAX_EXCERPTS`] tests with an excerpt per report, [`MAX_TOTAL_BYTES`] over a report's
//! excerpts. While a report is parsed, an excerpt being gathered ([`Gathering`]) keeps at most
//! [`MAX_EXCERPT_BYTES`] of its input, so gathering stays bounded by the report's own size.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Largest excerpt kept of one test's failure (bytes, after escaping).
pub const MAX_EXCERPT_BYTES: usize = 2048;
/// Most tests with an excerpt in one report (the first ones the report shows).
pub const MAX_EXCERPTS: usize = 50;
/// Most bytes of excerpts kept over one report.
pub const MAX_TOTAL_BYTES: usize = 64 * 1024;

/// What one failing test printed, bounded and escaped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Excerpt {
    pub text: String,
    /// Whether `text` was cut to [`MAX_EXCERPT_BYTES`].
    pub cut: bool,
}

/// The excerpt of one test while its report is read: its raw text, at most
/// [`MAX_EXCERPT_BYTES`] (plus one character) of it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Gathering {
    text: String,
    cut: bool,
}

impl Gathering {
    /// Append `piece`, keeping at most one character past the bound (so [`Gathering::finish`]
    /// knows the text was longer).
    pub(crate) fn push(&mut self, piece: &str) {
        if self.cut {
            return;
        }
        let room = MAX_EXCERPT_BYTES.saturating_sub(self.text.len());
        if piece.len() <= room {
            self.text.push_str(piece);
            return;
        }
        let mut end = room;
        while !piece.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(&piece[..end]);
        self.cut = true;
    }

    /// Append `line` and a newline.
    pub(crate) fn push_line(&mut self, line: &str) {
        self.push(line);
        self.push("\n");
    }

    /// The excerpt: surrounding blank lines dropped, control characters escaped, cut to the
    /// bound at a character boundary. `None` when nothing but whitespace was gathered.
    pub(crate) fn finish(self) -> Option<Excerpt> {
        let trimmed = self
            .text
            .trim_matches(|c: char| c == '\n' || c == '\r' || c == ' ' || c == '\t');
        if trimmed.is_empty() {
            return None;
        }
        let mut text = String::with_capacity(trimmed.len());
        for c in trimmed.chars() {
            match c {
                '\n' | '\t' => text.push(c),
                '\r' => {}
                c if c.is_control() => text.extend(c.escape_unicode()),
                c => text.push(c),
            }
        }
        let mut cut = self.cut;
        if text.len() > MAX_EXCERPT_BYTES {
            let mut end = MAX_EXCERPT_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            cut = true;
        }
        Some(Excerpt { text, cut })
    }
}

/// The excerpts of one report, by test id, within the per-report bounds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Excerpts {
    by_test: BTreeMap<String, Excerpt>,
    bytes: usize,
}

impl Excerpts {
    /// Keep `gathered` as `id`'s excerpt while the report's bounds allow (the first excerpt of an
    /// id is kept; later ones for the same id are dropped).
    pub(crate) fn add(&mut self, id: &str, gathered: Gathering) {
        if self.by_test.len() >= MAX_EXCERPTS || self.by_test.contains_key(id) {
            return;
        }
        let Some(excerpt) = gathered.finish() else {
            return;
        };
        if self.bytes + excerpt.text.len() > MAX_TOTAL_BYTES {
            return;
        }
        self.bytes += excerpt.text.len();
        self.by_test.insert(id.to_string(), excerpt);
    }

    /// The excerpts of the tests in `failing` (a test that passed in the end keeps none).
    pub(crate) fn of_failing(
        mut self,
        failing: &std::collections::BTreeSet<String>,
    ) -> BTreeMap<String, Excerpt> {
        self.by_test.retain(|id, _| failing.contains(id));
        self.by_test
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gathered(text: &str) -> Gathering {
        let mut g = Gathering::default();
        g.push(text);
        g
    }

    #[test]
    fn control_characters_are_escaped_and_lines_kept() {
        let e = gathered("\n\nassert 1 == 2\n\u{1b}[31mred\u{7}\tend\n\n")
            .finish()
            .unwrap();
        assert_eq!(
            e,
            Excerpt {
                text: "assert 1 == 2\n\\u{1b}[31mred\\u{7}\tend".into(),
                cut: false
            }
        );
    }

    #[test]
    fn a_long_excerpt_is_cut_at_a_character_boundary_and_marked() {
        let mut g = Gathering::default();
        for _ in 0..MAX_EXCERPT_BYTES {
            g.push("é");
        }
        let e = g.finish().unwrap();
        assert!(e.cut);
        assert_eq!(e.text, "é".repeat(MAX_EXCERPT_BYTES / 2));
    }

    #[test]
    fn escaping_that_grows_past_the_bound_is_cut_too() {
        let e = gathered(&"\u{1}".repeat(MAX_EXCERPT_BYTES - 10))
            .finish()
            .unwrap();
        assert!(e.cut);
        assert_eq!(e.text.len(), MAX_EXCERPT_BYTES);
    }

    #[test]
    fn whitespace_only_is_no_excerpt() {
        assert_eq!(gathered(" \n\t\n").finish(), None);
    }

    #[test]
    fn at_most_max_excerpts_tests_keep_one() {
        let mut all = Excerpts::default();
        let ids: std::collections::BTreeSet<String> =
            (0..MAX_EXCERPTS + 5).map(|i| format!("t{i:03}")).collect();
        for id in &ids {
            all.add(id, gathered("boom"));
        }
        let kept = all.of_failing(&ids);
        assert_eq!(kept.len(), MAX_EXCERPTS);
        assert!(kept.contains_key("t000") && !kept.contains_key(&format!("t{:03}", MAX_EXCERPTS)));
    }

    #[test]
    fn the_report_total_is_bounded() {
        let mut all = Excerpts::default();
        let ids: std::collections::BTreeSet<String> =
            (0..MAX_EXCERPTS).map(|i| format!("t{i:03}")).collect();
        for id in &ids {
            all.add(id, gathered(&"x".repeat(MAX_EXCERPT_BYTES)));
        }
        let kept = all.of_failing(&ids);
        assert_eq!(kept.len(), MAX_TOTAL_BYTES / MAX_EXCERPT_BYTES);
        assert!(kept.values().map(|e| e.text.len()).sum::<usize>() <= MAX_TOTAL_BYTES);
    }

    #[test]
    fn a_test_not_failing_in_the_end_keeps_no_excerpt() {
        let mut all = Excerpts::default();
        all.add("a", gathered("flaky"));
        assert!(all.of_failing(&Default::default()).is_empty());
    }
}
