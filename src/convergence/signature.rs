//! Failure signatures: a digest of what failed and how, normalised so that the same failure seen
//! twice gives the same signature. Timings, hexadecimal addresses, temporary paths, process ids in
//! the usual spellings and line/column suffixes of temp files are replaced by placeholders before
//! hashing; the test ids themselves are kept.
//!
//! A failing test's excerpt enters the signature as its digest ([`excerpt_digest`], the SHA-256
//! of the normalised excerpt), which is what the receipt records per failing test
//! (`check_result.failure_digests`), so `verify` recomputes the signature offline. A failing
//! test without an excerpt enters with an empty one, as every test did in receipts written
//! before excerpts were kept (their signatures are unchanged).

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
            (
                r"(?:/tmp|/var/tmp|/var/folders|/private/var/folders)/[^\s:'\x22)]*",
                "<tmp>",
            ),
            (r"pytest-of-[^\s/]+/pytest-\d+", "<tmp>"),
            // Addresses and object ids.
            (r"0x[0-9a-fA-F]+", "<addr>"),
            // Durations: `0.12s`, `12 ms`, `in 3.4 seconds`, `(1.2s)`, `12µs`.
            (
                r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds|min)\b",
                "<time>",
            ),
            // Timestamps (ISO 8601 / RFC 3339) and clock times.
            (
                r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?",
                "<timestamp>",
            ),
            (r"\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b", "<clock>"),
            // Process and thread ids as runners print them.
            (r"\b(?:pid|PID|process|thread)\s*[=:]?\s*\d+", "<pid>"),
            // libtest's thread id after the thread's name: `thread 'a::b' (8591) panicked`.
            (r"(thread '[^'\n]*' )\(\d+\)", "$1(<tid>)"),
            // node's TAP durations: `duration_ms: 0.960898`.
            (r"\bduration_ms: \d+(?:\.\d+)?", "duration_ms: <time>"),
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

/// The digest a failing test's excerpt enters the signature with: hex SHA-256 of the normalised
/// excerpt.
pub fn excerpt_digest(excerpt: &str) -> String {
    hex::encode(Sha256::digest(normalise(excerpt).as_bytes()))
}

/// The signature of an iteration's failures: the sorted failing test ids, each with its
/// excerpt's digest ([`excerpt_digest`]; `None`: no excerpt, entered as empty), hashed (hex
/// SHA-256). The same failures in another order give the same signature.
pub fn of_failures<'a>(failures: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> String {
    let mut entries: Vec<(&str, &str)> = failures
        .into_iter()
        .map(|(id, digest)| (id, digest.unwrap_or("")))
        .collect();
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
        assert_eq!(normalisers().len(), 9);
    }

    fn of_excerpts<'a>(failures: &'a [(&'a str, &'a str)]) -> String {
        let digests: Vec<(&str, String)> = failures
            .iter()
            .map(|(id, e)| (*id, excerpt_digest(e)))
            .collect();
        of_failures(digests.iter().map(|(id, d)| (*id, Some(d.as_str()))))
    }

    #[test]
    fn the_same_test_failing_with_another_assertion_message_is_another_signature() {
        assert_ne!(
            of_excerpts(&[(
                "t::a",
                "assertion `left == right` failed\n  left: 1\n right: 2"
            )]),
            of_excerpts(&[(
                "t::a",
                "assertion `left == right` failed\n  left: 1\n right: 3"
            )])
        );
    }

    #[test]
    fn the_same_message_with_other_timings_addresses_and_thread_ids_is_the_same_signature() {
        assert_eq!(
            of_excerpts(&[(
                "t::a",
                "thread 't::a' (8591) panicked at src/lib.rs:3:5:\n<Obj at 0x7f00aa> after 0.12s"
            )]),
            of_excerpts(&[(
                "t::a",
                "thread 't::a' (9015) panicked at src/lib.rs:3:5:\n<Obj at 0x55bb01> after 3.40s"
            )])
        );
    }

    #[test]
    fn a_test_without_an_excerpt_signs_as_before_excerpts_were_kept() {
        // The signature receipts written before excerpts recorded for one failing test `t::a`.
        let mut hasher = Sha256::new();
        hasher.update(4u64.to_le_bytes());
        hasher.update(b"t::a");
        hasher.update(0u64.to_le_bytes());
        assert_eq!(
            of_failures([("t::a", None)]),
            hex::encode(hasher.finalize())
        );
    }

    #[test]
    fn timings_are_ignored() {
        assert_eq!(
            normalise("1 failed in 0.12s"),
            normalise("1 failed in 3.40s")
        );
        assert_eq!(
            normalise("test a ... FAILED (12 ms)"),
            normalise("test a ... FAILED (7 ms)")
        );
    }

    #[test]
    fn addresses_are_ignored() {
        assert_eq!(
            normalise("<Foo object at 0x7f3a2c1b>"),
            "<Foo object at <addr>>"
        );
    }

    #[test]
    fn temp_paths_are_ignored() {
        assert_eq!(
            normalise("FileNotFoundError: /tmp/pytest-of-root/pytest-12/test_x0/data.txt"),
            "FileNotFoundError: <tmp>"
        );
        assert_eq!(
            normalise("at /var/tmp/abc123/x.go:12"),
            normalise("at /var/tmp/zz9/x.go:12")
        );
    }

    #[test]
    fn the_message_itself_is_kept() {
        assert_ne!(
            normalise("expected 3, got 4"),
            normalise("expected 3, got 5")
        );
    }

    #[test]
    fn signature_ignores_order_and_volatile_parts() {
        let a = of_excerpts(&[("t::a", "boom in 0.1s"), ("t::b", "at 0xdead")]);
        let b = of_excerpts(&[("t::b", "at 0xbeef"), ("t::a", "boom in 9.9s")]);
        assert_eq!(a, b);
    }

    #[test]
    fn signature_tells_different_tests_apart() {
        assert_ne!(
            of_excerpts(&[("t::a", "boom")]),
            of_excerpts(&[("t::b", "boom")])
        );
    }
}
