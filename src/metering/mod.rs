//! Metering: what each stage of an iteration consumed, read from sources the agent controls
//! (so every reader here is bounded and never fatal) and turned into the receipt's `usage`
//! records (`crate::receipt::usage`). No I/O beyond the readers' `Read` inputs; no engine import.
//!
//! - [`usage_file`]: the `LOOPEXEC_USAGE` file (`loopexec.usage/v1`, one JSON line per call).
//! - [`agent_output`]: the agent CLIs' own machine-readable output (claude, codex, gemini, aider).
//! - [`prices`]: the price table (tokens -> micro-USD, integer arithmetic) and the CPU rate.
//! - [`record`]: a stage's calls folded into one `UsageRecord` (tokens, models, money, sources).
//!
//! docs/budget.md, "Metering", states the rules.

pub mod agent_output;
pub mod config;
pub mod prices;
pub mod record;
pub mod usage_file;

/// A model or provider name as the receipt keeps it: at most [`MAX_NAME`] characters of
/// `[A-Za-z0-9._:/@+-]`, anything else replaced by `?` (the source is the agent's).
pub fn clean_name(name: &str) -> String {
    name.chars()
        .take(MAX_NAME)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._:/@+-".contains(c) {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// Whether a reported model id is the pinned one: the same string, or the pinned id followed by
/// `-` or `@` and more (a dated or versioned release of it: `claude-sonnet-4` matches
/// `claude-sonnet-4-20250514` and `claude-sonnet-4@20250514`, not `claude-sonnet-40`); a reported
/// id with a routing prefix (`anthropic/claude-sonnet-4`, as aider and LiteLLM name models) is
/// compared without it when the pinned id has none.
pub fn model_matches(pinned: &str, reported: &str) -> bool {
    let same = |r: &str| {
        r == pinned
            || r.strip_prefix(pinned)
                .is_some_and(|rest| rest.starts_with('-') || rest.starts_with('@'))
    };
    same(reported)
        || (!pinned.contains('/')
            && reported
                .rsplit_once('/')
                .is_some_and(|(_, bare)| same(bare)))
}

/// The longest model or provider name kept.
pub const MAX_NAME: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_keeps_its_safe_characters_and_loses_the_rest_within_the_bound() {
        assert_eq!(
            clean_name("claude-sonnet-4.5@2025"),
            "claude-sonnet-4.5@2025"
        );
        assert_eq!(clean_name("a\u{1b}[31mb c"), "a??31mb?c");
        assert_eq!(clean_name(&"x".repeat(1000)).len(), MAX_NAME);
    }
}
