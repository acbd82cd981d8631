//! The one check runner: runs the check command in its zone and reads the test report it wrote.
//! The loop, `replay` (and, through the loop, `reexecute`) run the check through it; its result
//! is one typed value, [`CheckOutcome`], that the verdict, the guards and `decide` see.

use super::commands::run_in_zone;
use super::verdict::Verdict;
use crate::error::Failure;
use crate::oracle::junit::{self, ReportSets};
use crate::receipt::events::CheckResult;
use crate::safefs::SafeDir;
use crate::ending::Ending;
use crate::zones::{Zone, ZoneCommand, ZoneRun};

/// What the check's test report said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportOutcome {
    /// The run configured no report.
    NotConfigured,
    /// The check did not exit (timed out, killed, never started): no report is read.
    NotRead,
    /// The report's failing and collected sets.
    Read(ReportSets),
    /// A configured report that could not be read (missing, malformed, too large).
    Unreadable(String),
}

impl ReportOutcome {
    pub fn sets(&self) -> Option<&ReportSets> {
        match self {
            ReportOutcome::Read(sets) => Some(sets),
            _ => None,
        }
    }

    pub fn error(&self) -> Option<&str> {
        match self {
            ReportOutcome::Unreadable(e) => Some(e),
            _ => None,
        }
    }
}

/// Where the check's report is read from: the path the run configured, in the directory holding
/// the check's writes (its scratch upper layer, or the workdir in place).
pub struct ReportSource<'a> {
    pub dir: &'a SafeDir,
    pub path: &'a str,
}

/// Everything one check run observed.
#[derive(Debug, Clone)]
pub struct CheckOutcome {
    pub run: ZoneRun,
    pub report: ReportOutcome,
}

impl CheckOutcome {
    pub fn ending(&self) -> &Ending {
        &self.run.ending
    }

    pub fn verdict(&self) -> Verdict {
        Verdict::of(&self.run.ending)
    }

    /// The `check_result` event of iteration `iteration`.
    pub fn record(&self, iteration: u64) -> CheckResult {
        let sets = self.report.sets();
        CheckResult {
            iteration,
            ending: self.run.ending.clone(),
            check_exit: self.run.ending.exit_code(),
            duration_ms: self.run.duration.as_millis() as u64,
            stdout: self.run.output.stdout.clone(),
            stderr: self.run.output.stderr.clone(),
            failing_set: sets.map(|s| s.failing.clone()),
            failing_count: sets.map(|s| s.failing.len() as u64),
            collected_set: sets.map(|s| s.collected.clone()),
            collected_count: sets.map(|s| s.collected.len() as u64),
            junit_error: self.report.error().map(str::to_string),
        }
    }
}

/// Where a check's output artifacts go: a directory, its path relative to the run directory, and
/// the file stem (`NNNN-check`).
pub struct Artifacts<'a> {
    pub dir: &'a SafeDir,
    pub rel: &'a str,
    pub stem: String,
}

/// Run the check `cmd` in `zone` and, when it exited, read its report from `report` (none: the
/// run configured no report). `Ok(Err(detail))`: the zone could not be set up for the check.
pub fn run_check(
    zone: &mut dyn Zone,
    cmd: &ZoneCommand,
    artifacts: Artifacts<'_>,
    report: Option<ReportSource<'_>>,
) -> Result<Result<CheckOutcome, String>, Failure> {
    let run = match run_in_zone(zone, cmd, artifacts.dir, artifacts.rel, &artifacts.stem)? {
        Ok(run) => run,
        Err(detail) => return Ok(Err(detail)),
    };
    let report = match run.ending.exit_code() {
        None => ReportOutcome::NotRead,
        Some(_) => match report {
            None => ReportOutcome::NotConfigured,
            Some(source) => match junit::read_report(source.dir, source.path) {
                Ok(sets) => ReportOutcome::Read(sets),
                Err(e) => ReportOutcome::Unreadable(e.to_string()),
            },
        },
    };
    Ok(Ok(CheckOutcome { run, report }))
}
