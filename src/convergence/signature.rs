//! Failure signatures: a digest of what failed and how, normalised so that the same failure seen
//! twice gives the same signature. Timings, hexadecimal addresses, temporary paths, process ids in
//! the usual spellings and line/column suffixes of temp files are replaced by placeholders before
//! hashing; the test ids themselves are kept.

use regex::Regex;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// The replacements, applied in order. Each pattern is a constant, so building it cannot fail at
/// run time on input; a failure to build would be a programming error caught by the tests.
fn normalisers() -> &'static [(Regex, &'static str)] {
    static NORMALISERS: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    NORMALISERS.get_or_init(|| {
        [
            // Temporary directories and files (before numbers, which they contain).
            (r"(?:/tmp|/var/tmp|/var/folders|/private/var/folders)/[^\s:'\x22)]*", "<tmp>"),
            (r"pytest-of-[^\s/]+/pytest-\d+", "<tmp>"),
            // Addresses and object ids.
            (r"0x[0-9a-fA-F]+", "<addr>"),
            // Durations: `0.12s`, `12 ms`, `in 3.4 seconds`, `(1.2s)`, `12µs`.
            (r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds|min)\b", "<time>"),
            // Timestamps (ISO 8601 / RFC 3339) and clock times.
            (r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?", "<timestamp>"),
            (r"\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b", "<clock>"),
            // Process and thread ids as runners print them.
            (r"\b(?:pid|PID|process|thread)\s*[=:]?\s*\d+", "<pid>"),
        ]
        .into_iter()
        .filter_map(|(pattern, placeholder)| Regex::new(pattern).ok().map(|re| (re, placeholder)))
        .collect()
    })
}

/// The text with every volatile part replaced by its placeholder.
pub fn normalise(text: &str) -> String {
    let mut out = text.to_string();
    for (re, placeholder) in normalisers() {
        out = re.replace_all(&out, *placeholder).into_owned();
    }
    out
}

/// The signature of an iteration's failures: the sorted failing test ids, each with its
/// normalised failure excerpt, hashed (hex SHA-256). The same failures in another order give the
/// same signature.
pub fn of_failures<'a>(failures: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut entries: Vec<(String, String)> =
        failures.into_iter().map(|(id, excerpt)| (id.to_string(), normalise(excerpt))).collect();
    entries.sort();
    let mut hasher = Sha256::new();
    for (id, excerpt) in &entries {
        hasher.update((id.len() as u64).to_le_bytes());
        hasher.update(id.as_bytes());
        hasher.update((excerpt.len() as u64).to_le_bytes());
        hasher.update(excerpt.as_bytes());
    }
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_normaliser_pattern_compiles() {
        assert_eq!(normalisers().len(), 7);
    }

    #[test]
    fn timings_are_ignored() {
        assert_eq!(normalise("1 failed in 0.12s"), normalise("1 failed in 3.40s"));
        assert_eq!(normalise("test a ... FAILED (12 ms)"), normalise("test a ... FAILED (7 ms)"));
    }

    #[test]
    fn addresses_are_ignored() {
        assert_eq!(normalise("<Foo object at 0x7f3a2c1b>"), "<Foo object at <addr>>");
    }

    #[test]
    fn temp_paths_are_ignored() {
        assert_eq!(
            normalise("FileNotFoundError: /tmp/pytest-of-root/pytest-12/test_x0/data.txt"),
            "FileNotFoundError: <tmp>"
        );
        assert_eq!(normalise("at /var/tmp/abc123/x.go:12"), normalise("at /var/tmp/zz9/x.go:12"));
    }

    #[test]
    fn the_message_itself_is_kept() {
        assert_ne!(normalise("expected 3, got 4"), normalise("expected 3, got 5"));
    }

    #[test]
    fn signature_ignores_order_and_volatile_parts() {
        let a = of_failures([("t::a", "boom in 0.1s"), ("t::b", "at 0xdead")]);
        let b = of_failures([("t::b", "at 0xbeef"), ("t::a", "boom in 9.9s")]);
        assert_eq!(a, b);
    }

    #[test]
    fn signature_tells_different_tests_apart() {
        assert_ne!(of_failures([("t::a", "boom")]), of_failures([("t::b", "boom")]));
    }
}
