//! Run identifiers: validation of `--run-id` and generation of a fresh one.
//!
//! A run id names a directory under `.loopexec/runs/`, so it must never contain a path separator
//! or be `.`/`..`: 1 to 64 characters of `A-Za-z0-9._-`, not made of dots only.

use crate::error::Failure;
use rand_core::{OsRng, RngCore};

/// Longest accepted run id.
pub const MAX_LEN: usize = 64;

/// A validated run id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunId(String);

impl RunId {
    /// Validate an operator-supplied id.
    pub fn parse(raw: &str) -> Result<RunId, Failure> {
        let bad = |why: &str| {
            Failure::usage(format!("invalid run id {raw:?}: {why}"))
                .with_hint("use 1-64 characters of A-Z a-z 0-9 . _ -")
        };
        if raw.is_empty() {
            return Err(bad("it is empty"));
        }
        if raw.len() > MAX_LEN {
            return Err(bad(&format!(
                "it is {} characters long (at most {MAX_LEN})",
                raw.len()
            )));
        }
        if let Some(c) = raw
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(bad(&format!("character {c:?} is not allowed")));
        }
        if raw.chars().all(|c| c == '.') {
            return Err(bad("it is made of dots only"));
        }
        Ok(RunId(raw.to_string()))
    }

    /// A fresh id: UTC timestamp plus a random suffix, e.g. `20261130T021502Z-3fa9c1`.
    pub fn generate() -> RunId {
        let now = time::OffsetDateTime::now_utc();
        let stamp = format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second()
        );
        let mut suffix = [0u8; 3];
        OsRng.fill_bytes(&mut suffix);
        RunId(format!("{stamp}-{}", hex::encode(suffix)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traversal_and_separators_are_refused() {
        for raw in ["", "..", ".", "../x", "a/b", "a\\b", "x y", &"a".repeat(65)] {
            assert!(RunId::parse(raw).is_err(), "{raw:?} must be refused");
        }
    }

    #[test]
    fn ordinary_ids_and_generated_ids_are_accepted() {
        for raw in ["a", "run-1", "v1.2_x", &"a".repeat(64)] {
            assert_eq!(RunId::parse(raw).unwrap().as_str(), raw);
        }
        let generated = RunId::generate();
        assert_eq!(RunId::parse(generated.as_str()).unwrap(), generated);
    }
}
