//! A named path for a legitimate test change (issue 18): `[[allow_test_change]]` in loop.toml
//! lists the test files (`path`, a glob over repository-relative paths) and the test ids (`id`,
//! exact, as the reports spell them) the operator allows the agent to change, each with the
//! reason the receipt records. It owns:
//!
//! - [`AllowTestChange`], the pin as loop.toml gives it and `run_start`'s `config` records it,
//!   validated strictly before anything is written (an unknown key, an empty reason, a bad glob,
//!   an entry naming nothing: exit 20);
//! - [`Allowances`], the compiled pins the guards ask: a `path` exempts that file from exactly
//!   the protected-path guard (and t0's frozen copy of it in the check), the assertion-count and
//!   the test-item comparisons; an `id` exempts that test from the set guard. Nothing else: the
//!   tampering rules, the test-surface digest, shadowing, the check-writes guard and every other
//!   file and id stay judged;
//! - the `test_change_allowed` event of each iteration in which an allowance was used.

use crate::error::Failure;
use crate::receipt::events::{AllowanceUse, TestChangeAllowedRecord};
use crate::testreport::shown;
use globset::GlobMatcher;
use serde::{Deserialize, Serialize};

/// At most this many uses are recorded per guard and iteration (then one counting the rest).
const MAX_USES: usize = 50;
/// The longest reason accepted (characters).
const MAX_REASON_CHARS: usize = 1000;
/// The longest test id accepted (bytes), as the report readers bound an id.
const MAX_ID_BYTES: usize = 16 * 1024;

/// One `[[allow_test_change]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowTestChange {
    /// A glob over repository-relative paths (`*` within one component, `**` across), matched
    /// against the whole path: `tests/test_api.py`, `tests/api/**`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A test id exactly as the check's reports name it (`tests.test_api::test_error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Why the change is legitimate (required, non-empty): recorded with every use.
    #[serde(default)]
    pub reason: String,
}

/// The glob an allowance's `path` stands for (the protected paths' exemptions use the same).
pub fn path_glob(pattern: &str) -> Result<GlobMatcher, String> {
    crate::workspace::protected::exempt_glob(pattern).map(|g| g.compile_matcher())
}

impl AllowTestChange {
    fn name(&self) -> String {
        match (&self.path, &self.id) {
            (Some(p), _) => format!("path {}", shown(p)),
            (None, Some(id)) => format!("id {}", shown(id)),
            (None, None) => "an entry".into(),
        }
    }

    /// Why this entry is refused, if it is.
    fn problem(&self) -> Option<String> {
        if self.path.is_none() && self.id.is_none() {
            return Some("an entry must name a `path` (a glob over test files) or an `id` (a test id), or both".into());
        }
        if self.reason.trim().is_empty() {
            return Some(format!(
                "{}: give a non-empty `reason = \"...\"`, which the receipt records with every use",
                self.name()
            ));
        }
        if self.reason.chars().count() > MAX_REASON_CHARS {
            return Some(format!(
                "{}: the reason is longer than {MAX_REASON_CHARS} characters",
                self.name()
            ));
        }
        if self.reason.chars().any(|c| c.is_control()) {
            return Some(format!(
                "{}: the reason holds a control character",
                self.name()
            ));
        }
        if let Some(path) = &self.path {
            if let Err(why) = path_glob(path) {
                return Some(format!("path {}: {why}", shown(path)));
            }
        }
        if let Some(id) = &self.id {
            if id.is_empty() || id.contains('\0') || id.len() > MAX_ID_BYTES {
                return Some(format!("id {}: a test id must be non-empty, without a NUL byte, at most {MAX_ID_BYTES} bytes", shown(id)));
            }
        }
        None
    }
}

/// Validate the pins as loop.toml gave them, for a run with a detached workspace (`detached`)
/// and the t0 baseline (`baseline`): a path allowance needs the first (the guards it exempts
/// exist only there), an id allowance the second (the set guard compares with t0's sets).
pub fn validated(
    pins: Vec<AllowTestChange>,
    detached: bool,
    baseline: bool,
) -> Result<Vec<AllowTestChange>, Failure> {
    for pin in &pins {
        if let Some(problem) = pin.problem() {
            return Err(Failure::usage(format!("[[allow_test_change]] {problem}")));
        }
        if pin.path.is_some() && !detached {
            return Err(Failure::usage(format!(
                "[[allow_test_change]] {}: a path allowance applies to a detached workspace only",
                pin.name()
            )));
        }
        if pin.id.is_some() && !baseline {
            return Err(Failure::usage(format!("[[allow_test_change]] {}: an id allowance exempts it from the set guard, which needs the t0 baseline; drop --no-baseline", pin.name())));
        }
    }
    Ok(pins)
}

/// The run's allowances, compiled.
#[derive(Debug, Clone, Default)]
pub struct Allowances {
    entries: Vec<(AllowTestChange, Option<GlobMatcher>)>,
}

impl Allowances {
    /// Compile validated pins (a pin whose glob does not compile is refused).
    pub fn new(pins: &[AllowTestChange]) -> Result<Allowances, Failure> {
        let mut entries = Vec::new();
        for pin in pins {
            let glob = pin
                .path
                .as_deref()
                .map(path_glob)
                .transpose()
                .map_err(|e| Failure::usage(format!("[[allow_test_change]] {e}")))?;
            entries.push((pin.clone(), glob));
        }
        Ok(Allowances { entries })
    }

    /// The `path` globs, for the protected paths' exemptions.
    pub fn path_globs(pins: &[AllowTestChange]) -> Vec<String> {
        pins.iter().filter_map(|p| p.path.clone()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The first allowance whose `path` matches `path`.
    pub fn for_path(&self, path: &str) -> Option<&AllowTestChange> {
        self.entries
            .iter()
            .find(|(_, g)| g.as_ref().is_some_and(|g| g.is_match(path)))
            .map(|(pin, _)| pin)
    }

    /// The first allowance naming the test id `id`.
    pub fn for_id(&self, id: &str) -> Option<&AllowTestChange> {
        self.entries
            .iter()
            .map(|(pin, _)| pin)
            .find(|pin| pin.id.as_deref() == Some(id))
    }
}

/// One use of `pin`: `what` changed.
pub fn use_of(pin: &AllowTestChange, what: String) -> AllowanceUse {
    AllowanceUse {
        path: pin.path.clone(),
        id: pin.id.clone(),
        reason: shown(&pin.reason),
        what,
    }
}

/// The `test_change_allowed` record of `guard`'s uses at `stage` of `iteration` (none without a
/// use), bounded.
pub fn record(
    iteration: u64,
    guard: &str,
    stage: &str,
    mut uses: Vec<AllowanceUse>,
) -> Option<TestChangeAllowedRecord> {
    if uses.is_empty() {
        return None;
    }
    if uses.len() > MAX_USES {
        let rest = uses.len() - MAX_USES;
        uses.truncate(MAX_USES);
        uses.push(AllowanceUse {
            path: None,
            id: None,
            reason: String::new(),
            what: format!("{rest} more uses not recorded"),
        });
    }
    Some(TestChangeAllowedRecord {
        iteration,
        guard: guard.to_string(),
        stage: stage.to_string(),
        uses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(path: Option<&str>, id: Option<&str>, reason: &str) -> AllowTestChange {
        AllowTestChange {
            path: path.map(String::from),
            id: id.map(String::from),
            reason: reason.into(),
        }
    }

    #[test]
    fn a_path_glob_matches_whole_repository_paths_only() {
        let a = Allowances::new(&[
            pin(Some("tests/test_api.py"), None, "r"),
            pin(Some("tests/api/**"), None, "s"),
        ])
        .unwrap();
        assert_eq!(
            a.for_path("tests/test_api.py").map(|p| p.reason.as_str()),
            Some("r")
        );
        assert_eq!(
            a.for_path("tests/api/deep/test_x.py")
                .map(|p| p.reason.as_str()),
            Some("s")
        );
        assert!(a.for_path("other/tests/test_api.py").is_none());
        assert!(a.for_path("tests/test_other.py").is_none());
    }

    #[test]
    fn a_star_does_not_cross_a_directory() {
        let a = Allowances::new(&[pin(Some("tests/*.py"), None, "r")]).unwrap();
        assert!(a.for_path("tests/test_a.py").is_some());
        assert!(a.for_path("tests/sub/test_a.py").is_none());
    }

    #[test]
    fn an_id_allowance_matches_that_id_exactly() {
        let a =
            Allowances::new(&[pin(None, Some("tests.test_api::test_error[1-2]"), "r")]).unwrap();
        assert!(a.for_id("tests.test_api::test_error[1-2]").is_some());
        assert!(a.for_id("tests.test_api::test_error[1-3]").is_none());
    }

    #[test]
    fn an_empty_reason_is_refused_naming_the_entry() {
        let err =
            validated(vec![pin(Some("tests/test_api.py"), None, "  ")], true, true).unwrap_err();
        assert_eq!(err.class().code(), 20);
        assert_eq!(err.message, "[[allow_test_change]] path tests/test_api.py: give a non-empty `reason = \"...\"`, which the receipt records with every use");
    }

    #[test]
    fn bad_globs_and_paths_outside_the_tree_are_refused() {
        for bad in ["tests/[", "/etc/passwd", "../x.py", "tests//x.py", ""] {
            let err = validated(vec![pin(Some(bad), None, "r")], true, true).unwrap_err();
            assert_eq!(err.class().code(), 20, "{bad}");
            assert!(
                err.message.starts_with("[[allow_test_change]] path "),
                "{bad}: {}",
                err.message
            );
        }
    }

    #[test]
    fn an_entry_naming_nothing_is_refused() {
        let err = validated(vec![pin(None, None, "r")], true, true).unwrap_err();
        assert!(
            err.message.contains("must name a `path`"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_path_allowance_in_place_and_an_id_allowance_without_baseline_are_refused() {
        assert!(
            validated(vec![pin(Some("tests/a.py"), None, "r")], false, true)
                .unwrap_err()
                .message
                .contains("detached workspace only")
        );
        assert!(validated(vec![pin(None, Some("a::b"), "r")], true, false)
            .unwrap_err()
            .message
            .contains("needs the t0 baseline"));
    }

    #[test]
    fn uses_over_the_bound_are_counted() {
        let p = pin(Some("t/*"), None, "r");
        let uses = (0..60)
            .map(|i| use_of(&p, format!("t/{i} modified")))
            .collect();
        let r = record(3, "protected_paths", "after_agent", uses).unwrap();
        assert_eq!(r.uses.len(), MAX_USES + 1);
        assert_eq!(r.uses[MAX_USES].what, "10 more uses not recorded");
    }
}
