//! The set guard as a pure rule (docs/guards.md): after every check that exited 0, its collected
//! set must still hold every member of t0's C0 and its skipped set no member S0 lacks, else
//! `metric_integrity_violation`. It owns:
//!
//! - [`T0Sets`], C0 and S0 as the `check_baseline` event recorded them (a list repeating an id
//!   is that many tests);
//! - [`violation_of`], the finding (its detail, its findings naming at most [`NAMED_IDS`] ids,
//!   then a count and a digest of all);
//! - [`exempting`], a check's sets with the operator's pinned `[[allow_test_change]]` ids put
//!   back as at t0 (the only ids the guard lets through).
//!
//! The engine's guard (`engine::baseline::BaselineSetGuard`) decides with these live and records
//! each use of an allowance; the halt derivation (`super::derive`) recomputes the finding of
//! every recorded check from the receipt and compares it with the `guard` events it holds.

use crate::halt::HaltReason;
use crate::receipt::events::{CheckResult, FindingRecord, GuardRecord};
use crate::testreport::shown;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

/// At most this many ids are named in a set-guard finding; the rest are counted and digested.
pub const NAMED_IDS: usize = 50;
/// The guard seat a set-guard finding is recorded under, and its stage.
pub const GUARD: &str = "metric_integrity";
pub const STAGE: &str = "after_check";

/// C0 and S0: t0's collected and skipped sets, each id with its count when listed more than once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct T0Sets {
    pub collected: BTreeSet<String>,
    pub skipped: BTreeSet<String>,
    /// Ids of `collected` listed more than once, with their count (absent: once).
    pub collected_repeats: BTreeMap<String, u64>,
    /// Ids of `skipped` listed more than once, with their count (absent: once).
    pub skipped_repeats: BTreeMap<String, u64>,
}

/// A receipt's list as a set and the repeats of its ids.
fn unlisted(list: &[String]) -> (BTreeSet<String>, BTreeMap<String, u64>) {
    let mut set = BTreeSet::new();
    let mut repeats = BTreeMap::new();
    for id in list {
        if !set.insert(id.clone()) {
            *repeats.entry(id.clone()).or_insert(1) += 1;
        }
    }
    (set, repeats)
}

impl T0Sets {
    /// The sets of t0's check as the receipt recorded them; none when its reports named no
    /// tests (no set guard runs then).
    pub fn of_check(t0: &CheckResult) -> Option<T0Sets> {
        let collected = t0.collected_set.as_ref()?;
        let (collected, collected_repeats) = unlisted(collected);
        let (skipped, skipped_repeats) = unlisted(t0.skipped_set.as_deref().unwrap_or_default());
        Some(T0Sets {
            collected,
            skipped,
            collected_repeats,
            skipped_repeats,
        })
    }

    /// How many tests C0 holds (an id listed n times is n).
    pub fn collected_entries(&self) -> u64 {
        self.collected.len() as u64
            + self
                .collected_repeats
                .iter()
                .filter(|(id, _)| self.collected.contains(*id))
                .map(|(_, n)| n.saturating_sub(1))
                .sum::<u64>()
    }
}

/// `check` with each `allowed` id of C0 it lost counted as collected as often as at t0, and
/// each `allowed` id it skips more often than S0 did skipped only as often as then: what the set
/// guard compares when the operator pinned those ids (`[[allow_test_change]] id`).
pub fn exempting(check: &CheckResult, t0: &T0Sets, allowed: &BTreeSet<String>) -> CheckResult {
    let mut check = check.clone();
    if allowed.is_empty() {
        return check;
    }
    if let Some(collected) = check.collected_set.as_mut() {
        let have = counted(Some(&*collected))
            .into_iter()
            .map(|(id, n)| (id.clone(), n))
            .collect::<BTreeMap<String, u64>>();
        for id in t0.collected.iter().filter(|id| allowed.contains(*id)) {
            let at_t0 = t0.collected_repeats.get(id).copied().unwrap_or(1).max(1);
            let lost = at_t0.saturating_sub(have.get(id).copied().unwrap_or(0));
            collected.extend(std::iter::repeat_n(id.clone(), lost as usize));
        }
    }
    if let Some(skipped) = check.skipped_set.as_mut() {
        let mut left: BTreeMap<String, u64> = BTreeMap::new();
        for id in skipped.iter().filter(|id| allowed.contains(*id)) {
            *left.entry(id.clone()).or_insert(0) += 1;
        }
        for (id, n) in left.iter_mut() {
            let at_t0 = if t0.skipped.contains(id) {
                t0.skipped_repeats.get(id).copied().unwrap_or(1)
            } else {
                0
            };
            *n = n.saturating_sub(at_t0);
        }
        skipped.retain(|id| match left.get_mut(id) {
            Some(excess) if *excess > 0 => {
                *excess -= 1;
                false
            }
            _ => true,
        });
    }
    check
}

/// The members of `ids` named (escaped), at most [`NAMED_IDS`], then a count and a digest of all.
fn named(what: &str, ids: &[&String]) -> Vec<FindingRecord> {
    let mut out: Vec<FindingRecord> = ids
        .iter()
        .take(NAMED_IDS)
        .map(|id| FindingRecord {
            path: None,
            what: format!("{what}: {}", shown(id)),
        })
        .collect();
    if ids.len() > NAMED_IDS {
        let mut h = Sha256::new();
        for id in ids {
            h.update(id.as_bytes());
            h.update(b"\n");
        }
        out.push(FindingRecord {
            path: None,
            what: format!(
                "{what}: {} more (sha256 of all {} ids, one a line: {})",
                ids.len() - NAMED_IDS,
                ids.len(),
                hex::encode(h.finalize())
            ),
        });
    }
    out
}

/// How many entries of `list` bear each id.
fn counted(list: Option<&Vec<String>>) -> BTreeMap<&String, u64> {
    let mut counts = BTreeMap::new();
    for id in list.into_iter().flatten() {
        *counts.entry(id).or_insert(0) += 1;
    }
    counts
}

/// The set guard's finding on `check` (named `subject` in it: `the check`, `the held-out check`)
/// at `iteration` against `baseline`, if the sets moved the wrong way. Both are compared as
/// multisets (an id the receipt lists twice is two tests, such as two doctests of one item): an
/// id of C0 with fewer entries now lost a test, an id with more skipped entries than S0 gained a
/// skip; a count gained in the collected set is a new test.
pub fn violation_of(
    subject: &str,
    iteration: u64,
    check: &CheckResult,
    baseline: &T0Sets,
) -> Option<GuardRecord> {
    let collected = counted(check.collected_set.as_ref());
    let skipped = counted(check.skipped_set.as_ref());
    let times =
        |repeats: &BTreeMap<String, u64>, id: &String| repeats.get(id).copied().unwrap_or(1);
    // Each C0 id with fewer entries now than at t0, named once; `lost_entries` counts the tests.
    let mut lost: Vec<&String> = Vec::new();
    let mut lost_entries = 0u64;
    for id in &baseline.collected {
        let missing = times(&baseline.collected_repeats, id)
            .saturating_sub(collected.get(id).copied().unwrap_or(0));
        if missing > 0 {
            lost.push(id);
            lost_entries += missing;
        }
    }
    let newly_skipped: Vec<&String> = skipped
        .iter()
        .filter(|(id, n)| {
            !baseline.skipped.contains(**id) || **n > times(&baseline.skipped_repeats, id)
        })
        .map(|(id, _)| *id)
        .collect();
    if lost.is_empty() && newly_skipped.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !lost.is_empty() {
        let measured = if check.collected_set.is_none() {
            " (this check named no test at all)"
        } else {
            ""
        };
        let t0_entries = baseline.collected_entries();
        parts.push(format!("{lost_entries} test(s) of t0's {t0_entries} collected are no longer collected{measured}"));
    }
    if !newly_skipped.is_empty() {
        parts.push(format!(
            "{} test(s) are skipped that t0 did not skip",
            newly_skipped.len()
        ));
    }
    let mut findings = named("no longer collected", &lost);
    findings.extend(named("newly skipped", &newly_skipped));
    Some(GuardRecord {
        iteration,
        guard: GUARD.to_string(),
        stage: STAGE.to_string(),
        halt_reason: HaltReason::MetricIntegrityViolation,
        detail: format!(
            "{subject} exited 0 at iteration {iteration} but against the t0 baseline {}",
            parts.join(" and ")
        ),
        findings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::events::sample;

    fn t0(collected: &[&str], skipped: &[&str]) -> T0Sets {
        T0Sets::of_check(&sample::check_with_sets(collected, skipped)).unwrap()
    }

    #[test]
    fn the_same_sets_as_t0_and_new_tests_are_no_violation() {
        assert_eq!(
            violation_of(
                "the check",
                1,
                &sample::check_with_sets(&["a", "b", "c"], &["b"]),
                &t0(&["a", "b"], &["b"])
            ),
            None
        );
    }

    #[test]
    fn a_lost_test_is_named_in_the_finding() {
        let found = violation_of(
            "the check",
            2,
            &sample::check_with_sets(&["a"], &[]),
            &t0(&["a", "b"], &[]),
        )
        .unwrap();
        assert_eq!(found.halt_reason, HaltReason::MetricIntegrityViolation);
        assert_eq!(found.detail, "the check exited 0 at iteration 2 but against the t0 baseline 1 test(s) of t0's 2 collected are no longer collected");
        assert_eq!(
            found.findings,
            vec![FindingRecord {
                path: None,
                what: "no longer collected: b".into()
            }]
        );
    }

    #[test]
    fn a_newly_skipped_test_is_named_in_the_finding() {
        let found = violation_of(
            "the check",
            1,
            &sample::check_with_sets(&["a", "b"], &["a", "b"]),
            &t0(&["a", "b"], &["b"]),
        )
        .unwrap();
        assert_eq!(
            found.findings,
            vec![FindingRecord {
                path: None,
                what: "newly skipped: a".into()
            }]
        );
    }

    #[test]
    fn a_repeated_id_with_fewer_entries_than_at_t0_lost_a_test() {
        let doc = "doc/demo::src/lib.rs - add";
        let found = violation_of(
            "the check",
            3,
            &sample::check_with_sets(&["a", doc], &[]),
            &t0(&["a", doc, doc], &[]),
        )
        .unwrap();
        assert_eq!(found.detail, "the check exited 0 at iteration 3 but against the t0 baseline 1 test(s) of t0's 3 collected are no longer collected");
        assert_eq!(
            found.findings,
            vec![FindingRecord {
                path: None,
                what: format!("no longer collected: {doc}")
            }]
        );
    }

    #[test]
    fn a_repeated_id_with_more_entries_than_at_t0_is_a_new_test() {
        let doc = "doc/demo::src/lib.rs - add";
        assert_eq!(
            violation_of(
                "the check",
                1,
                &sample::check_with_sets(&[doc, doc, doc], &[]),
                &t0(&[doc, doc], &[])
            ),
            None
        );
    }

    #[test]
    fn a_repeated_id_skipped_more_often_than_at_t0_is_newly_skipped() {
        let doc = "doc/demo::src/lib.rs - add";
        let found = violation_of(
            "the check",
            1,
            &sample::check_with_sets(&[doc, doc], &[doc, doc]),
            &t0(&[doc, doc], &[doc]),
        )
        .unwrap();
        assert_eq!(
            found.findings,
            vec![FindingRecord {
                path: None,
                what: format!("newly skipped: {doc}")
            }]
        );
        assert_eq!(
            violation_of(
                "the check",
                1,
                &sample::check_with_sets(&[doc, doc], &[doc]),
                &t0(&[doc, doc], &[doc])
            ),
            None
        );
    }

    #[test]
    fn many_lost_tests_are_named_up_to_the_bound_then_counted_and_digested() {
        let ids: Vec<String> = (0..60).map(|i| format!("t{i:02}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let found = violation_of(
            "the check",
            1,
            &sample::check_with_sets(&[], &[]),
            &t0(&refs, &[]),
        )
        .unwrap();
        assert_eq!(found.findings.len(), NAMED_IDS + 1);
        let digest = hex::encode(Sha256::digest(
            ids.iter().map(|i| format!("{i}\n")).collect::<String>(),
        ));
        assert_eq!(
            found.findings[NAMED_IDS].what,
            format!("no longer collected: 10 more (sha256 of all 60 ids, one a line: {digest})")
        );
    }

    fn ids(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_allowed_id_lost_or_newly_skipped_is_put_back_as_at_t0_and_no_other() {
        let at_t0 = t0(&["a", "b", "c", "d"], &[]);
        let now = exempting(
            &sample::check_with_sets(&["a", "c"], &["c"]),
            &at_t0,
            &ids(&["b", "c"]),
        );
        assert_eq!(
            violation_of("the check", 1, &now, &at_t0).map(|f| f.findings),
            Some(vec![FindingRecord {
                path: None,
                what: "no longer collected: d".into()
            }])
        );
        let now = exempting(
            &sample::check_with_sets(&["a", "c", "d"], &["c"]),
            &at_t0,
            &ids(&["b", "c"]),
        );
        assert_eq!(violation_of("the check", 1, &now, &at_t0), None);
    }
}
