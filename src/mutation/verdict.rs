//! What the check's answers on the mutants mean: a mutant the check turned red is *killed*, one
//! it left green *survived*, one whose check could not run (zone setup failed, timed out before
//! exiting) is *not run*. The check is inadequate for the change when mutants ran and none was
//! killed, or when mutants of the code the tests failing at t0 call ran (stratum `t0_failure`,
//! `super::targets`) and none of those was killed: a hollowed-out check kills the mutants of the
//! hollowing code but none of the function it no longer tests. The mutation score is killed over
//! those that ran.

use serde::{Deserialize, Serialize};

use super::operators::{Mutant, Operator};

/// How the check answered one mutant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MutantOutcome {
    Killed,
    Survived,
    NotRun,
}

impl MutantOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            MutantOutcome::Killed => "killed",
            MutantOutcome::Survived => "survived",
            MutantOutcome::NotRun => "not_run",
        }
    }
}

/// Which part of the code a mutant was drawn from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stratum {
    /// A line the agent changed or added (every receipt before issue 18 holds only these).
    #[default]
    Change,
    /// A line of a production function that a test failing at t0 calls (`super::targets`).
    T0Failure,
}

/// One mutant's result, as the receipt records it (`change` escaped and bounded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutantResult {
    pub path: String,
    pub line: u32,
    pub operator: Operator,
    pub change: String,
    pub outcome: MutantOutcome,
    /// The check's exit code on the mutant, when it exited.
    pub check_exit: Option<i32>,
    pub duration_ms: u64,
    /// Why the check could not run on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Where the mutant was drawn from.
    #[serde(default)]
    pub stratum: Stratum,
}

impl MutantResult {
    pub fn of(
        mutant: &Mutant,
        outcome: MutantOutcome,
        check_exit: Option<i32>,
        duration_ms: u64,
        detail: Option<String>,
    ) -> MutantResult {
        MutantResult {
            path: crate::analysis::syntax::evidence_text(&mutant.path),
            line: mutant.line,
            operator: mutant.operator,
            change: mutant.change(),
            outcome,
            check_exit,
            duration_ms,
            detail: detail.map(|d| crate::analysis::syntax::evidence_text(&d)),
            stratum: Stratum::Change,
        }
    }

    /// The same result, drawn from `stratum`.
    pub fn in_stratum(mut self, stratum: Stratum) -> MutantResult {
        self.stratum = stratum;
        self
    }
}

/// The canary's conclusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Adequacy {
    /// At least one mutant was killed.
    Adequate,
    /// Mutants ran and none was killed: `check_inadequate`.
    Inadequate,
    /// The change has no mutable line (nothing to conclude).
    NoMutants,
    /// Mutants were chosen but the check ran on none of them.
    NotRun,
}

impl Adequacy {
    pub fn as_str(self) -> &'static str {
        match self {
            Adequacy::Adequate => "adequate",
            Adequacy::Inadequate => "inadequate",
            Adequacy::NoMutants => "no_mutants",
            Adequacy::NotRun => "not_run",
        }
    }
}

/// The score over the results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Score {
    pub killed: u64,
    pub survived: u64,
    pub not_run: u64,
    /// killed / (killed + survived); `None` when none ran.
    pub score: Option<f64>,
    pub verdict: Adequacy,
    /// The `t0_failure` stratum's own (killed, survived), when any of its mutants ran.
    pub t0_failure: Option<(u64, u64)>,
}

pub fn score(results: &[MutantResult]) -> Score {
    let count = |o: MutantOutcome| results.iter().filter(|r| r.outcome == o).count() as u64;
    let (killed, survived, not_run) = (
        count(MutantOutcome::Killed),
        count(MutantOutcome::Survived),
        count(MutantOutcome::NotRun),
    );
    let ran = killed + survived;
    let in_t0 = |o: MutantOutcome| {
        results
            .iter()
            .filter(|r| r.stratum == Stratum::T0Failure && r.outcome == o)
            .count() as u64
    };
    let t0_failure = Some((in_t0(MutantOutcome::Killed), in_t0(MutantOutcome::Survived)))
        .filter(|(k, s)| k + s > 0);
    let verdict = match (results.is_empty(), killed, survived, t0_failure) {
        (true, _, _, _) => Adequacy::NoMutants,
        (false, 0, 0, _) => Adequacy::NotRun,
        (false, 0, _, _) | (false, _, _, Some((0, _))) => Adequacy::Inadequate,
        _ => Adequacy::Adequate,
    };
    Score {
        killed,
        survived,
        not_run,
        score: (ran > 0).then(|| killed as f64 / ran as f64),
        verdict,
        t0_failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(outcome: MutantOutcome) -> MutantResult {
        MutantResult {
            path: "a.py".into(),
            line: 1,
            operator: Operator::BooleanLiteral,
            change: String::new(),
            outcome,
            check_exit: None,
            duration_ms: 0,
            detail: None,
            stratum: Stratum::Change,
        }
    }

    fn t0(outcome: MutantOutcome) -> MutantResult {
        result(outcome).in_stratum(Stratum::T0Failure)
    }

    #[test]
    fn mutants_of_the_code_t0_failed_on_all_surviving_are_inadequate_even_when_the_change_kills() {
        let s = score(&[
            result(MutantOutcome::Killed),
            result(MutantOutcome::Killed),
            t0(MutantOutcome::Survived),
            t0(MutantOutcome::Survived),
        ]);
        assert_eq!(
            (s.verdict, s.t0_failure, s.killed),
            (Adequacy::Inadequate, Some((0, 2)), 2)
        );
    }

    #[test]
    fn one_killed_mutant_of_the_code_t0_failed_on_is_enough() {
        let s = score(&[
            result(MutantOutcome::Survived),
            t0(MutantOutcome::Killed),
            t0(MutantOutcome::Survived),
        ]);
        assert_eq!(
            (s.verdict, s.t0_failure),
            (Adequacy::Adequate, Some((1, 1)))
        );
    }

    #[test]
    fn t0_failure_mutants_that_did_not_run_do_not_judge_their_stratum() {
        let s = score(&[result(MutantOutcome::Killed), t0(MutantOutcome::NotRun)]);
        assert_eq!((s.verdict, s.t0_failure), (Adequacy::Adequate, None));
    }

    #[test]
    fn no_killed_mutant_among_those_that_ran_is_inadequate() {
        let s = score(&[
            result(MutantOutcome::Survived),
            result(MutantOutcome::NotRun),
        ]);
        assert_eq!((s.verdict, s.score), (Adequacy::Inadequate, Some(0.0)));
    }

    #[test]
    fn one_killed_mutant_is_adequate_with_its_score() {
        let s = score(&[
            result(MutantOutcome::Killed),
            result(MutantOutcome::Survived),
            result(MutantOutcome::Survived),
            result(MutantOutcome::Killed),
        ]);
        assert_eq!(
            (s.verdict, s.score, s.killed, s.survived),
            (Adequacy::Adequate, Some(0.5), 2, 2)
        );
    }

    #[test]
    fn no_mutants_and_none_run_are_told_apart() {
        assert_eq!(score(&[]).verdict, Adequacy::NoMutants);
        assert_eq!(
            score(&[result(MutantOutcome::NotRun)]).verdict,
            Adequacy::NotRun
        );
    }
}
