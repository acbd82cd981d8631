//! The loop's numeric score (loop.toml `[progress.score]`, docs/progress.md "The score"): where
//! the check reports a number, how it is read after each check, and what a missing score on a
//! green check means.
//!
//! - [`ScorePins`]: the declaration, validated at start (exactly one of `regex`, a pattern with
//!   one capture group over the check's captured stdout, or `file`, a path the check writes
//!   beneath its working directory; `direction` `higher` or `lower`; `band` >= 0) and pinned in
//!   `run_start`.
//! - [`read`]: the score one check reported, as the `check_result` event records it: the
//!   regex's last match in the captured (bounded) stdout, or the file read from the check's
//!   writes like a report (hidden from the check's copy beforehand, so only this check's write
//!   counts; bounded; never through a link), parsed as a finite number.
//! - [`ScoreGuard`]: a green check whose declared score is missing or unparsable is
//!   `metric_integrity_violation` (a red one is only recorded without its score).
//! - [`ScoreRule`]: what the ratchet needs (`convergence::ratchet`), which judges scores oriented
//!   so that higher is better.

use super::guards::{CheckStep, Guard};
use super::seats::Seat;
use crate::error::Failure;
use crate::halt::HaltReason;
use crate::receipt::events::{CheckResult, GuardRecord, ScoreRecord};
use crate::safefs::SafeDir;
use crate::testreport::shown;
use serde::{Deserialize, Serialize};

/// Largest score file read.
const MAX_SCORE_FILE_BYTES: u64 = 64 * 1024;
/// Largest compiled score regex (bytes of its program).
const MAX_REGEX_BYTES: usize = 1 << 20;
/// Longest captured text parsed as a number.
const MAX_NUMBER_CHARS: usize = 64;

/// Which way the score improves (a recorded type: the receipt names it).
pub use crate::receipt::events::Direction;

/// `[progress.score]` as given and pinned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScorePins {
    /// A pattern with exactly one capture group, matched against the check's captured stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// A file the check writes, relative to its working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default)]
    pub direction: Direction,
    /// How far below the best accepted score (in the score's units) an iteration may fall.
    #[serde(default)]
    pub band: f64,
}

/// What the ratchet needs of the score declaration (a pure rule: `crate::rules::progress`).
pub use crate::rules::progress::ScoreRule;

fn malformed(why: impl std::fmt::Display) -> Failure {
    Failure::invalid_input(format!("[progress.score]: {why}"))
}

impl ScorePins {
    /// The declaration, refused (exit 20, before anything is written) when it names neither or
    /// both sources, its regex does not compile or has other than one capture group, its file is
    /// no normalised relative path, or its band is negative or not finite.
    pub fn validated(self) -> Result<ScorePins, Failure> {
        match (&self.regex, &self.file) {
            (None, None) => {
                return Err(malformed(
                    "names neither `regex` nor `file`: say where the check reports its score",
                ))
            }
            (Some(_), Some(_)) => return Err(malformed("names both `regex` and `file`: give one")),
            (Some(pattern), None) => {
                let groups = compile(pattern).map_err(malformed)?.captures_len() - 1;
                if groups != 1 {
                    return Err(malformed(format!(
                        "regex {} has {groups} capture groups; it needs exactly one (the number)",
                        shown(pattern)
                    )));
                }
            }
            (None, Some(path)) => {
                super::coverage_guard::check_path(path)
                    .map_err(|why| malformed(format!("file {}: {why}", shown(path))))?;
            }
        }
        if !self.band.is_finite() || self.band < 0.0 {
            return Err(malformed(format!(
                "band must be a finite number >= 0, got {}",
                self.band
            )));
        }
        Ok(self)
    }

    pub fn rule(&self) -> ScoreRule {
        ScoreRule {
            direction: self.direction,
            band: self.band,
        }
    }

    /// Whether the tree path `path` is the declared score file (hidden from the check's copy).
    pub fn hides(&self, path: &[u8]) -> bool {
        self.file.as_deref().is_some_and(|f| f.as_bytes() == path)
    }

    /// Where the score is read from, as recorded.
    fn source(&self) -> String {
        match (&self.file, &self.regex) {
            (Some(file), _) => file.clone(),
            _ => "stdout".to_string(),
        }
    }
}

fn compile(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(MAX_REGEX_BYTES)
        .build()
        .map_err(|e| format!("regex {} does not compile: {e}", shown(pattern)))
}

/// The score one check reported: from `stdout` (its captured, bounded bytes) by the regex, or
/// from the file beneath `writes` (the check's writes).
pub fn read(pins: &ScorePins, stdout: &[u8], writes: &SafeDir) -> ScoreRecord {
    let found = match (&pins.regex, &pins.file) {
        (Some(pattern), _) => from_stdout(pattern, stdout),
        (None, Some(path)) => from_file(writes, path),
        (None, None) => Err("no score source is declared".to_string()),
    };
    match found {
        Ok(value) => ScoreRecord {
            source: pins.source(),
            value: Some(value),
            error: None,
        },
        Err(error) => ScoreRecord {
            source: pins.source(),
            value: None,
            error: Some(error),
        },
    }
}

fn from_stdout(pattern: &str, stdout: &[u8]) -> Result<f64, String> {
    let re = compile(pattern)?;
    let text = String::from_utf8_lossy(stdout);
    let captured = re.captures_iter(&text).filter_map(|c| c.get(1)).last();
    match captured {
        Some(m) => number(m.as_str()),
        None => Err(format!(
            "the regex {} matched nothing in the check's stdout",
            shown(pattern)
        )),
    }
}

fn from_file(writes: &SafeDir, path: &str) -> Result<f64, String> {
    match writes.read(path, MAX_SCORE_FILE_BYTES) {
        Ok(bytes) => number(&String::from_utf8_lossy(&bytes)),
        Err(e) if e.is_not_found() => Err(format!("the check did not write {}", shown(path))),
        Err(e) => Err(format!("{}: {e}", shown(path))),
    }
}

/// `text` (trimmed) as a finite number.
fn number(text: &str) -> Result<f64, String> {
    let text = text.trim();
    let shown_text = || shown(&text.chars().take(MAX_NUMBER_CHARS).collect::<String>());
    if text.len() > MAX_NUMBER_CHARS {
        return Err(format!("{}... is no number", shown_text()));
    }
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("\"{}\" is not a finite number", shown_text())),
    }
}

/// A green check must report its declared score.
pub struct ScoreGuard;

impl ScoreGuard {
    /// The guard of a run pinned with `pins` (none: no score is declared).
    pub fn of(pins: Option<&ScorePins>) -> Option<Box<dyn Guard>> {
        pins.map(|_| Box::new(ScoreGuard) as Box<dyn Guard>)
    }
}

/// The guard's finding on `check`: green, and its declared score missing or unparsable.
pub fn missing_on_green(iteration: u64, check: &CheckResult) -> Option<GuardRecord> {
    if check.check_exit != Some(0) {
        return None;
    }
    let score = check.score.as_ref()?;
    let error = score.error.as_ref()?;
    Some(GuardRecord {
        iteration,
        guard: Seat::MetricIntegrity.as_str().to_string(),
        stage: "after_check".to_string(),
        halt_reason: HaltReason::MetricIntegrityViolation,
        detail: format!(
            "the check exited 0 at iteration {iteration} but its declared score ({}) cannot be read: {}",
            shown(&score.source),
            shown(error)
        ),
        findings: vec![crate::receipt::events::FindingRecord { path: Some(score.source.clone()), what: shown(error) }],
    })
}

impl Guard for ScoreGuard {
    fn seat(&self) -> Seat {
        Seat::MetricIntegrity
    }

    fn after_check(&mut self, step: &CheckStep<'_>) -> Option<GuardRecord> {
        missing_on_green(step.iteration, step.check)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::{sample, Event};

    fn pins(regex: Option<&str>, file: Option<&str>) -> ScorePins {
        ScorePins {
            regex: regex.map(Into::into),
            file: file.map(Into::into),
            direction: Direction::Higher,
            band: 0.0,
        }
    }

    fn refusal(p: ScorePins) -> String {
        p.validated().unwrap_err().message
    }

    fn writes() -> (tempfile::TempDir, SafeDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SafeDir::open(tmp.path()).unwrap();
        (tmp, dir)
    }

    #[test]
    fn the_last_match_of_the_regex_in_stdout_is_the_score() {
        let (_t, w) = writes();
        let r = read(
            &pins(Some(r"score: ([0-9.]+)"), None),
            b"score: 0.5\n...\nscore: 0.75\n",
            &w,
        );
        assert_eq!(
            r,
            ScoreRecord {
                source: "stdout".into(),
                value: Some(0.75),
                error: None
            }
        );
    }

    #[test]
    fn a_score_file_is_read_and_parsed() {
        let (t, w) = writes();
        std::fs::write(t.path().join("score.txt"), "  12.5\n").unwrap();
        assert_eq!(
            read(&pins(None, Some("score.txt")), b"", &w).value,
            Some(12.5)
        );
    }

    #[test]
    fn a_linked_score_file_is_not_followed() {
        let (t, w) = writes();
        std::fs::write(t.path().join("real"), "1").unwrap();
        std::os::unix::fs::symlink(t.path().join("real"), t.path().join("score.txt")).unwrap();
        let r = read(&pins(None, Some("score.txt")), b"", &w);
        assert_eq!(r.value, None);
        assert!(r.error.is_some());
    }

    #[test]
    fn missing_and_unparsable_scores_are_errors_naming_the_problem() {
        let (_t, w) = writes();
        assert_eq!(
            read(&pins(None, Some("s.txt")), b"", &w).error.as_deref(),
            Some("the check did not write s.txt")
        );
        assert_eq!(
            read(&pins(Some(r"s=(\S+)"), None), b"s=NaN", &w)
                .error
                .as_deref(),
            Some("\"NaN\" is not a finite number")
        );
        assert_eq!(
            read(&pins(Some(r"s=(\d+)"), None), b"none", &w)
                .error
                .as_deref(),
            Some("the regex s=(\\\\d+) matched nothing in the check's stdout")
        );
    }

    #[test]
    fn a_declaration_needs_exactly_one_source_one_group_and_a_sane_band() {
        assert!(refusal(pins(None, None)).contains("names neither"));
        assert!(refusal(pins(Some("(1)"), Some("f"))).contains("names both"));
        assert!(refusal(pins(Some("a(b)(c)"), None)).contains("has 2 capture groups"));
        assert!(refusal(pins(Some("(unclosed"), None)).contains("does not compile"));
        assert!(refusal(pins(None, Some("../up"))).contains("file ../up"));
        assert!(refusal(ScorePins {
            band: -1.0,
            ..pins(Some("(x)"), None)
        })
        .contains("band must be"));
        assert!(pins(Some(r"score (\d+)"), None).validated().is_ok());
    }

    #[test]
    fn lower_is_better_scores_are_oriented_by_negation() {
        let rule = ScoreRule {
            direction: Direction::Lower,
            band: 0.0,
        };
        assert!(rule.oriented(1.0) > rule.oriented(2.0));
    }

    #[test]
    fn a_green_check_without_its_score_is_a_metric_integrity_violation_and_a_red_one_is_not() {
        let Event::CheckResult(mut green) = sample::check_result(2, 0) else {
            unreachable!()
        };
        green.score = Some(ScoreRecord {
            source: "stdout".into(),
            value: None,
            error: Some("nothing matched".into()),
        });
        let found = missing_on_green(2, &green).unwrap();
        assert_eq!(found.halt_reason, HaltReason::MetricIntegrityViolation);
        let red = CheckResult {
            check_exit: Some(1),
            ..green
        };
        assert_eq!(missing_on_green(2, &red), None);
    }
}
