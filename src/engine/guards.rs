//! Guards: judges of an iteration's step that are not the check. Each sits behind [`Guard`] and
//! is asked at two hooks, after the agent (on the snapshot of what it left) and after the check
//! (on the check's result and the run's history); an objection is recorded in the receipt and
//! `decide` halts on it. A step the guards object to is never accepted (never checked again,
//! never delivered). The protected-path guard is the first; the seats for the others are named
//! in [`super::seats`].

use super::allow_change::{self, Allowances};
use super::seats::Seat;
use crate::receipt::events::{
    CheckResult, ExecResult, GuardRecord, ProtectedChangeRecord, TestChangeAllowedRecord,
};
use crate::receipt::history::History;
use crate::workspace::{protected_changes, Manifest, ProtectedPaths, Snapshot};

/// What the agent's step left, as the guards see it.
pub struct AgentStep<'a> {
    pub iteration: u64,
    /// The agent's result (none when a resumed run re-judges the workspace a crashed process left).
    pub exec: Option<&'a ExecResult>,
    /// The detached workspace's snapshot and its baseline t0 (none for an in-place run).
    pub workspace: Option<(&'a Snapshot, &'a Manifest)>,
}

/// The check's result on the step, as the guards see it.
pub struct CheckStep<'a> {
    pub iteration: u64,
    pub check: &'a CheckResult,
    /// Everything recorded before this check's result.
    pub history: &'a History,
}

/// Why a guard refuses the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Objection {
    /// Protected paths the step changed: recorded as the `snapshot`'s `protected_changes`.
    ProtectedChanges(Vec<ProtectedChangeRecord>),
    /// Any other guard's finding: recorded as a `guard` event.
    Finding(GuardRecord),
    /// Not a refusal: the step goes on, but a green from it needs a review (the awareness
    /// findings, recorded as the `snapshot`'s `awareness`).
    ReviewRequired(Vec<crate::receipt::events::FindingRecord>),
}

impl Objection {
    /// Whether the step is refused (a review is not a refusal).
    pub fn refuses(&self) -> bool {
        !matches!(self, Objection::ReviewRequired(_))
    }
}

/// A judge of the agent's step.
pub trait Guard {
    fn seat(&self) -> Seat;
    /// After the agent ran (guards that judge only the check's result keep the default).
    fn after_agent(&mut self, _step: &AgentStep<'_>) -> Option<Objection> {
        None
    }
    /// After the check ran (recorded as a `guard` event).
    fn after_check(&mut self, _step: &CheckStep<'_>) -> Option<GuardRecord> {
        None
    }
    /// The changes the last hook let through under a `[[allow_test_change]]` allowance, taken
    /// once (recorded as a `test_change_allowed` event); guards without allowances keep the default.
    fn take_allowed(&mut self) -> Option<TestChangeAllowedRecord> {
        None
    }
}

/// The run's guards, asked in order.
#[derive(Default)]
pub struct Guards(Vec<Box<dyn Guard>>);

impl Guards {
    pub fn new(guards: Vec<Box<dyn Guard>>) -> Guards {
        Guards(guards)
    }

    /// The seats of the run's guards, in order.
    pub fn seats(&self) -> Vec<Seat> {
        self.0.iter().map(|g| g.seat()).collect()
    }

    /// Every objection after the agent.
    pub fn after_agent(&mut self, step: &AgentStep<'_>) -> Vec<Objection> {
        self.0
            .iter_mut()
            .filter_map(|g| g.after_agent(step))
            .collect()
    }

    /// Every objection after the check.
    pub fn after_check(&mut self, step: &CheckStep<'_>) -> Vec<GuardRecord> {
        self.0
            .iter_mut()
            .filter_map(|g| g.after_check(step))
            .collect()
    }

    /// What the last hook let through under allowances, per guard.
    pub fn take_allowed(&mut self) -> Vec<TestChangeAllowedRecord> {
        self.0.iter_mut().filter_map(|g| g.take_allowed()).collect()
    }
}

/// The agent must not change a protected path (tests, their configuration, CI; see
/// docs/workspace.md): compared with t0 on the step's snapshot.
pub struct ProtectedPathGuard {
    /// The run's protected paths, the allowed ones exempt.
    protected: ProtectedPaths,
    allowances: Allowances,
    allowed: Option<TestChangeAllowedRecord>,
}

impl ProtectedPathGuard {
    pub fn new(protected: ProtectedPaths, allowances: Allowances) -> ProtectedPathGuard {
        ProtectedPathGuard {
            protected,
            allowances,
            allowed: None,
        }
    }

    /// The protected paths `snapshot` changed that an allowance let through.
    fn allowed_changes(
        &self,
        iteration: u64,
        snapshot: &Snapshot,
        baseline: &Manifest,
    ) -> Option<TestChangeAllowedRecord> {
        if self.allowances.is_empty() {
            return None;
        }
        let uses = snapshot
            .changes(baseline)
            .into_iter()
            .filter(|(p, _)| self.protected.is_exempt(p))
            .filter_map(|(p, change)| {
                let path = String::from_utf8_lossy(&p).into_owned();
                let pin = self.allowances.for_path(&path)?;
                let change = format!("{change:?}").to_lowercase();
                Some(allow_change::use_of(
                    pin,
                    format!("{} {change}", crate::testreport::shown(&path)),
                ))
            })
            .collect();
        allow_change::record(
            iteration,
            Seat::ProtectedPaths.as_str(),
            "after_agent",
            uses,
        )
    }

    /// The protected paths `snapshot` changed against `baseline`.
    pub fn changes(&self, snapshot: &Snapshot, baseline: &Manifest) -> Vec<ProtectedChangeRecord> {
        protected_changes(baseline, snapshot, &self.protected)
            .into_iter()
            .map(|c| ProtectedChangeRecord {
                path: c.path,
                change: format!("{:?}", c.change).to_lowercase(),
            })
            .collect()
    }
}

impl Guard for ProtectedPathGuard {
    fn seat(&self) -> Seat {
        Seat::ProtectedPaths
    }

    fn after_agent(&mut self, step: &AgentStep<'_>) -> Option<Objection> {
        self.allowed = None;
        let (snapshot, baseline) = step.workspace?;
        self.allowed = self.allowed_changes(step.iteration, snapshot, baseline);
        let changes = self.changes(snapshot, baseline);
        (!changes.is_empty()).then_some(Objection::ProtectedChanges(changes))
    }

    fn take_allowed(&mut self) -> Option<TestChangeAllowedRecord> {
        self.allowed.take()
    }
}
