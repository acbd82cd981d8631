//! One probe run, in its own process: what the probe hands it and what it reports back.
//! `probe-check` and `doctor` start one `loopexec __probe-run --spec FILE` per run (so that each
//! run's zone supervisor, a child subreaper that removes every descendant it finds, owns its own
//! process tree alone, and `--jobs` runs can go side by side), with the [`RunSpec`] written to
//! FILE, and read its [`RunReport`] back from the one JSON object it prints. What the process
//! does with the spec (the check run once in an exec zone on a throwaway copy, the run's
//! perturbation applied) is the engine's `probe_run`: the engine runs checks; this layer only
//! plans the runs and reads what they showed.

use super::perturb::RunPlan;
use crate::receipt::probe::RunClass;
use crate::rules::probe::Outcome;
use crate::testreport::sight::CheckSight;
use crate::zones::Isolation;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Largest spec file read (it is written by loopexec itself).
pub const MAX_SPEC_BYTES: u64 = 1024 * 1024;

/// Everything one probe run needs: written by the probe, read by its run process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSpec {
    pub isolation: Isolation,
    /// The exec zone's policy source under native isolation (`builtin:exec` or a path).
    pub check_policy: Option<String>,
    pub check: String,
    pub timeout_ms: u64,
    pub reports: Vec<String>,
    /// The throwaway copy the check runs in (its working directory).
    pub tree: PathBuf,
    /// Where the check's bounded output goes.
    pub artifacts: PathBuf,
    pub plan: RunPlan,
    /// Run without any network (the hermeticity gate).
    #[serde(default)]
    pub no_network: bool,
    /// Run the check this many times in the same copy without a reset (the side-effect gate); 1
    /// otherwise. Each run's outcome is reported.
    #[serde(default = "one")]
    pub repeat: u32,
}

fn one() -> u32 {
    1
}

/// What one run of the check showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShownRun {
    pub class: RunClass,
    pub failing_digest: String,
    pub failing_count: Option<u64>,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    /// What the run showed of its evidence's reach (`engine::inactive_guards`): doctor names
    /// the guards a loop on this check would have blind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sight: Option<CheckSight>,
}

impl ShownRun {
    pub fn outcome(&self) -> Outcome {
        Outcome {
            class: self.class,
            failing_digest: self.failing_digest.clone(),
        }
    }
}

/// What a run process reports: one [`ShownRun`] per repetition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    pub run: u64,
    pub shown: Vec<ShownRun>,
    /// The offset the check's monotonic and boot clocks ran at (its own time namespace), when the
    /// plan moved them; the wall clock never moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_applied_s: Option<i64>,
}
