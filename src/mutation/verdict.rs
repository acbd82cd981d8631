//! What the check's answers on the mutants mean: a mutant the check turned red is *killed*, one
//! it left green *survived*, one whose check could not run (zone setup failed, timed out before
//! exiting) is *not run*. The check is inadequate for the change when mutants ran and none was
//! killed. The mutation score is killed over those that ran.

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
}

impl MutantResult {
    pub fn of(mutant: &Mutant, outcome: MutantOutcome, check_exit: Option<i32>, duration_ms: u64, detail: Option<String>) -> MutantResult {
        MutantResult {
            path: crate::analysis::syntax::evidence_text(&mutant.path),
            line: mutant.line,
            operator: mutant.operator,
            change: mutant.change(),
            outcome,
            check_exit,
            duration_ms,
            detail: detail.map(|d| crate::analysis::syntax::evidence_text(&d)),
        }
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
}

pub fn score(results: &[MutantResult]) -> Score {
    let count = |o: MutantOutcome| results.iter().filter(|r| r.outcome == o).count() as u64;
    let (killed, survived, not_run) = (count(MutantOutcome::Killed), count(MutantOutcome::Survived), count(MutantOutcome::NotRun));
    let ran = killed + survived;
    let verdict = match (results.is_empty(), killed, survived) {
        (true, _, _) => Adequacy::NoMutants,
        (false, 0, 0) => Adequacy::NotRun,
        (false, 0, _) => Adequacy::Inadequate,
        _ => Adequacy::Adequate,
    };
    Score { killed, survived, not_run, score: (ran > 0).then(|| killed as f64 / ran as f64), verdict }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(outcome: MutantOutcome) -> MutantResult {
        MutantResult { path: "a.py".into(), line: 1, operator: Operator::BooleanLiteral, change: String::new(), outcome, check_exit: None, duration_ms: 0, detail: None }
    }

    #[test]
    fn no_killed_mutant_among_those_that_ran_is_inadequate() {
        let s = score(&[result(MutantOutcome::Survived), result(MutantOutcome::NotRun)]);
        assert_eq!((s.verdict, s.score), (Adequacy::Inadequate, Some(0.0)));
    }

    #[test]
    fn one_killed_mutant_is_adequate_with_its_score() {
        let s = score(&[result(MutantOutcome::Killed), result(MutantOutcome::Survived), result(MutantOutcome::Survived), result(MutantOutcome::Killed)]);
        assert_eq!((s.verdict, s.score, s.killed, s.survived), (Adequacy::Adequate, Some(0.5), 2, 2));
    }

    #[test]
    fn no_mutants_and_none_run_are_told_apart() {
        assert_eq!(score(&[]).verdict, Adequacy::NoMutants);
        assert_eq!(score(&[result(MutantOutcome::NotRun)]).verdict, Adequacy::NotRun);
    }
}
