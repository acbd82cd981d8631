//! The adequacy mutation canary's pure half (issue 14 item 5): which lines of the agent's change
//! can be mutated, the mutants the syntax trees allow there, the K of them a seed picks, and what
//! the check's answers on them mean. Parsing is `crate::analysis::syntax`'s (no second parser);
//! nothing here touches the file system or runs a process: the engine's canary
//! (the engine's canary) materialises each mutant in a throwaway copy and runs the check.
//!
//! - `lines`: the changed and added lines against t0.
//! - `operators`: trivial lines dropped, the built-in mutation operators per language.
//! - `sample`: K mutants chosen deterministically from the seed.
//! - `external`: an operator's mutator (`--mutate-cmd`): its list of diffs, validated.
//! - `coverage`: the coverage-delta tier (changed lines covered, from lcov or Cobertura).
//! - `targets`: the production functions the tests failing at t0 call (the `t0_failure` stratum).
//! - `verdict`: mutation score, survivors, adequate or `check_inadequate`.

pub mod coverage;
pub mod external;
pub mod lines;
pub mod operators;
pub mod sample;
pub mod targets;
pub mod verdict;

use std::collections::BTreeSet;

pub use operators::{Mutant, Operator};
pub use verdict::{Adequacy, MutantOutcome, MutantResult, Stratum};

use crate::analysis::syntax::{self, Limits, Parse};
use crate::analysis::AnalysisError;

/// The default number of mutants the canary runs when loop.toml asks for it (`adequacy = "final"`).
pub const DEFAULT_MUTANTS: usize = 20;
/// The default number when the canary runs by default (no `adequacy` key): a small sample.
pub const DEFAULT_SMALL_MUTANTS: usize = 8;

/// One file of the change, with its t0 and end versions.
#[derive(Debug, Clone, Copy)]
pub struct ChangedSource<'a> {
    pub path: &'a str,
    /// `None`: the file is new.
    pub t0: Option<&'a [u8]>,
    pub end: &'a [u8],
}

/// Every built-in mutant of the change: on the changed lines of each end version with a
/// grammar (files above the parse cap and without a grammar have none). `whole_files`: mutate
/// every line, not only the changed ones (doctor's fallback over a tree without changes).
pub fn generate(
    changes: &[ChangedSource<'_>],
    whole_files: bool,
    limits: Limits,
) -> Result<Vec<Mutant>, AnalysisError> {
    let mut out = Vec::new();
    for change in changes {
        let parsed = match syntax::parse(change.path, change.end, limits)? {
            Parse::Parsed(parsed) => parsed,
            Parse::NotAnalysed(_) => continue,
        };
        let changed: BTreeSet<u32> = if whole_files {
            (1..=lines::line_count(change.end)).collect()
        } else {
            lines::changed_lines(change.t0, change.end)
        };
        out.extend(operators::mutants(&parsed, &changed));
    }
    Ok(out)
}

/// The mutants of the `t0_failure` stratum: on `lines` (per file, the lines of the functions the
/// tests failing at t0 call) of each file's end version. `sources` are (path, end bytes).
pub fn generate_on_lines(
    sources: &[(&str, &[u8], &BTreeSet<u32>)],
    limits: Limits,
) -> Result<Vec<Mutant>, AnalysisError> {
    let mut out = Vec::new();
    for (path, end, lines) in sources {
        match syntax::parse(path, end, limits)? {
            Parse::Parsed(parsed) => out.extend(operators::mutants(&parsed, lines)),
            Parse::NotAnalysed(_) => continue,
        }
    }
    Ok(out)
}
