//! The adequacy canary's rules: the `guard` event its recorded outcome gives (uncovered changed
//! lines first, then the mutants' verdict), pure functions of the `adequacy` event. The engine
//! records the guard these give; the halt derivation gives it again from the recorded event
//! (`super::judgements`, the `canary` judgement).

use crate::halt::HaltReason;
use crate::mutation::verdict::Adequacy;
use crate::mutation::{MutantOutcome, Stratum};
use crate::receipt::events::{AdequacyRecord, CoverageRecord, FindingRecord, GuardRecord};
use crate::testreport::shown;

/// Uncovered changed lines a guard names (the rest are counted).
pub const MAX_NAMED_UNCOVERED: usize = 50;
/// Surviving mutants a guard names (the rest are counted).
pub const MAX_NAMED_SURVIVORS: usize = 20;

/// The `guard` event the canary's recorded outcome gives, if it halts: the coverage tier's
/// uncovered changed lines first, else the mutants' verdict `verdict`.
pub fn canary_guard(record: &AdequacyRecord, verdict: Adequacy) -> Option<GuardRecord> {
    record
        .coverage
        .as_ref()
        .and_then(|c| uncovered_guard(record.iteration, c))
        .or_else(|| adequacy_guard(record, verdict))
}

/// The `guard` event that halts the run `check_inadequate` when the tier found uncovered lines.
pub fn uncovered_guard(iteration: u64, record: &CoverageRecord) -> Option<GuardRecord> {
    if record.uncovered_count == 0 {
        return None;
    }
    let findings = record
        .uncovered
        .iter()
        .take(MAX_NAMED_UNCOVERED)
        .map(|u| {
            let why = if u.ambiguous {
                "an entry of the coverage report could name this file or another one, and counts for neither"
            } else if u.file_missing {
                "the coverage report does not name the file"
            } else {
                "never executed by the check"
            };
            FindingRecord { path: Some(u.path.clone()), what: format!("line {}: {why}", u.line) }
        })
        .collect();
    Some(GuardRecord {
        iteration,
        guard: "adequacy".into(),
        stage: "after_check".into(),
        halt_reason: HaltReason::CheckInadequate,
        detail: format!(
            "{} of the {} substantive lines the agent changed were never executed by the check ({})",
            record.uncovered_count,
            record.changed_lines,
            shown(&record.report)
        ),
        findings,
    })
}

/// The `guard` event that halts the run on the canary's verdict, if it halts.
pub fn adequacy_guard(record: &AdequacyRecord, verdict: Adequacy) -> Option<GuardRecord> {
    let t0_failure = |m: &&crate::mutation::MutantResult| m.stratum == Stratum::T0Failure;
    let t0_ran = record
        .mutants
        .iter()
        .filter(t0_failure)
        .filter(|m| m.outcome != MutantOutcome::NotRun)
        .count();
    let t0_killed = record
        .mutants
        .iter()
        .filter(t0_failure)
        .filter(|m| m.outcome == MutantOutcome::Killed)
        .count();
    let (halt_reason, detail) = match verdict {
        Adequacy::Adequate | Adequacy::NoMutants => return None,
        // The change's mutants were killed but none of the code the failing tests call: the
        // check bites on the agent's lines, not on the code it tests.
        Adequacy::Inadequate if record.killed > 0 && t0_ran > 0 && t0_killed == 0 => (
            HaltReason::CheckInadequate,
            format!(
                "no mutant of the code the tests failing at t0 call turned the check red: {t0_ran} of {t0_ran} survived in {}, while {} mutant(s) of the agent's change were killed (seed {}): the check no longer bites on the code it tests",
                record.t0_failure_functions.join(", "),
                record.killed,
                record.seed
            ),
        ),
        Adequacy::Inadequate if t0_ran > 0 => (
            HaltReason::CheckInadequate,
            format!(
                "no mutant of the agent's change or of the code the tests failing at t0 call ({}) turned the check red: {} of {} survived (seed {})",
                record.t0_failure_functions.join(", "),
                record.survived,
                record.sampled,
                record.seed
            ),
        ),
        Adequacy::Inadequate => (
            HaltReason::CheckInadequate,
            format!(
                "no mutant of the agent's change turned the check red: {} of {} survived (seed {})",
                record.survived, record.sampled, record.seed
            ),
        ),
        Adequacy::NotRun => (
            HaltReason::ExecutionFailure,
            format!("the adequacy canary could not run the check on any of its {} mutants", record.sampled),
        ),
    };
    let only_t0 = record.killed > 0;
    let findings = record
        .mutants
        .iter()
        .filter(|m| !only_t0 || m.stratum == Stratum::T0Failure)
        .filter(|m| m.outcome != MutantOutcome::Killed)
        .take(MAX_NAMED_SURVIVORS)
        .map(|m| FindingRecord {
            path: Some(m.path.clone()),
            what: format!("line {}: {}", m.line, m.change),
        })
        .collect();
    Some(GuardRecord {
        iteration: record.iteration,
        guard: "adequacy".into(),
        stage: "after_check".into(),
        halt_reason,
        detail,
        findings,
    })
}
