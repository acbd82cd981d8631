//! A run's history: the receipt's events folded, in order, into what every reader needs. It is
//! the one reader of a receipt: `run --resume` (where the run left off, what was already
//! observed), `report`, `explain-halt`, `status`, `replay`, the sealed predicate (and so
//! `verify`), and the live loop, which records each event it appends into the same `History`, so
//! that a live run and a resumed one decide from the same state.

use super::events::{
    CheckResult, Event, ExecResult, GuardRecord, HaltRecord, JudgeRecord, ProgressRecord, Recorded,
    ReferenceRecord, RunStart, SnapshotRecord, WorkspaceRecord,
};
use serde_json::{Map, Value};

/// What the receipt recorded of one iteration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IterationRecord {
    pub iteration: u64,
    pub exec: Option<ExecResult>,
    /// The guards' record of the agent's step (detached workspace).
    pub snapshot: Option<SnapshotRecord>,
    pub check: Option<CheckResult>,
    /// Guard findings recorded in `guard` events.
    pub guards: Vec<GuardRecord>,
    /// Confirmation reruns of a green check (`check_confirmation` events).
    pub confirmations: Vec<crate::receipt::events::ConfirmationRecord>,
    /// The progress judgement after the check (`progress` event; docs/progress.md).
    pub progress: Option<ProgressRecord>,
    /// The judge's answer on a green check (`judge` event).
    pub judge: Option<JudgeRecord>,
    /// The test changes allowances of loop.toml let through (`test_change_allowed` events).
    pub allowed: Vec<crate::receipt::events::TestChangeAllowedRecord>,
    /// The held-out check on a green every guard let through (`holdout_check` event).
    pub holdout: Option<crate::receipt::events::HoldoutRecord>,
    /// The adequacy canary's outcome (`adequacy`), when it ran on this iteration's green.
    pub adequacy: Option<crate::receipt::events::AdequacyRecord>,
    /// What the iteration's stages consumed (`usage` events), in order.
    pub usage: Vec<crate::receipt::usage::UsageRecord>,
    /// The cause, when the iteration was interrupted (`SIGINT`, `SIGTERM`, `supervisor_lost`).
    pub interrupted: Option<String>,
    /// Lists of this iteration's events moved to run artifacts (`externalised` events).
    pub externalised: Vec<crate::receipt::bounded::Externalised>,
    /// The lines of the exec, check and interruption events (for the sealed predicate).
    pub lines: IterationLines,
}

/// The raw lines of an iteration's events, as they are on disk.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IterationLines {
    pub exec: Option<Map<String, Value>>,
    pub check: Option<Map<String, Value>>,
    pub interrupted: Option<Map<String, Value>>,
    pub judge: Option<Map<String, Value>>,
}

impl IterationRecord {
    /// The size of the failing set the check's report gave.
    pub fn failing_count(&self) -> Option<u64> {
        self.check.as_ref()?.failing_count
    }

    pub fn check_exit(&self) -> Option<i32> {
        self.check.as_ref()?.check_exit
    }
}

/// How the run last stopped without a halt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastStop {
    Interrupted,
    Resumed,
}

/// The folded receipt.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct History {
    /// Number of events folded.
    pub events: u64,
    /// The first `run_start`, and whether it is the receipt's first event.
    pub start: Option<RunStart>,
    pub start_line: Option<Map<String, Value>>,
    pub starts_the_receipt: bool,
    /// The public keys of every `run_key` endorsement, in order (the last one seals).
    pub run_keys: Vec<String>,
    pub workspace: Option<WorkspaceRecord>,
    /// The known-feasible reference checked at the start (or that none was given).
    pub reference: Option<ReferenceRecord>,
    pub iterations: Vec<IterationRecord>,
    /// The last `iteration_start`'s iteration (0 before the first).
    pub last_started: u64,
    /// Whether the last `credential_minted` has no `credential_revoked` after it.
    pub credential_outstanding: bool,
    /// The last `comprehension` event stopped the run (a resume that finds the debt cleared
    /// records it).
    pub comprehension_stopped: bool,
    pub interruptions: u64,
    pub resumes: u64,
    pub last_stop: Option<LastStop>,
    /// The last `halt` (a run has at most one) and its line.
    pub halt: Option<HaltRecord>,
    pub halt_line: Option<Map<String, Value>>,
    /// Bodies of the `seal_resumed` events: resumes that finished the seal of the halt (listed
    /// in the predicate when there are any).
    pub seal_resumes: Vec<Map<String, Value>>,
    /// Bodies of events whose type starts with `guard` (listed in the predicate).
    pub guard_bodies: Vec<Map<String, Value>>,
    /// The iterations an `adequacy` event (the canary) was recorded for.
    pub adequacy_iterations: Vec<u64>,
    /// The iterations a `guard_sentinel` event (the sentinel run) was recorded for, and those
    /// whose sentinel run broke an expectation (their green was not the check's own).
    pub sentinel_iterations: Vec<u64>,
    pub sentinel_refused: Vec<u64>,
    /// The `doctor = true` gates the run ran before its first agent call.
    pub preconditions: Option<crate::receipt::probe::PreconditionsRecord>,
    /// The zone self-test the run ran before its first agent call (`self_test = true`).
    pub self_test: Option<crate::receipt::events::SelfTestRecord>,
    /// The t0 baseline check (`check_baseline`), when the run recorded one, and the
    /// `externalised` event that holds its large sets (read back from the receipt).
    pub check_baseline: Option<super::events::CheckBaselineRecord>,
    pub check_baseline_externalised: Option<crate::receipt::bounded::Externalised>,
    /// The confirmation reruns of a green t0 baseline (`check_confirmation` events of iteration 0,
    /// recorded after `check_baseline`), in order.
    pub baseline_confirmations: Vec<crate::receipt::events::ConfirmationRecord>,
    /// The held-out check's run on t0 (a `holdout_check` of iteration 0), when the run made one.
    pub holdout_baseline: Option<super::events::HoldoutRecord>,
    /// The run's `targets` event, when it recorded one.
    pub targets: Option<super::events::TargetsRecord>,
    /// The syntax-tree guards' last `guard_baseline` (A0, H0, the t0 files not parsed).
    pub guard_baseline: Option<super::events::GuardBaselineRecord>,
    /// The operator's hand acceptances (`ratchet_accept`), in order, each with the last
    /// iteration started when it was recorded.
    pub hand_accepted: Vec<(super::events::RatchetAcceptRecord, u64)>,
    /// A task_list run's plan, task starts and checkpoints, in order.
    pub tasks: TaskHistory,
}

/// What a task_list run recorded of its plan (docs/task-list.md).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskHistory {
    /// The last `task_plan` (the start's, or a resume's).
    pub plan: Option<super::events::TaskPlanRecord>,
    /// The first `task_plan`: the plan as the run found it at HEAD when it started.
    pub first: Option<super::events::TaskPlanRecord>,
    pub started: Vec<super::events::TaskStartedRecord>,
    pub checkpoints: Vec<super::events::TaskCheckpointRecord>,
}

impl TaskHistory {
    /// The task started last whose checkpoint is not recorded: its run was under way when the
    /// supervisor stopped.
    pub fn unfinished(&self) -> Option<&super::events::TaskStartedRecord> {
        self.started
            .last()
            .filter(|s| !self.checkpoints.iter().any(|c| c.run_id == s.run_id))
    }
}

impl History {
    /// Fold a receipt's events.
    pub fn fold<'a>(events: impl IntoIterator<Item = &'a Recorded>) -> History {
        let mut history = History::default();
        for event in events {
            history.record(event);
        }
        history
    }

    /// Decode and fold the lines of a verified receipt.
    pub fn of_lines(lines: &[Map<String, Value>]) -> Result<History, super::events::EventError> {
        Ok(History::fold(&Recorded::decode_all(lines)?))
    }

    /// Fold one more event (the live loop calls this with each event it appends).
    pub fn record(&mut self, recorded: &Recorded) {
        let first = self.events == 0;
        self.events += 1;
        match &recorded.event {
            Event::RunStart(start) => {
                if self.start.is_none() {
                    self.start = Some(start.clone());
                    self.start_line = Some(recorded.line.clone());
                    self.starts_the_receipt = first;
                }
            }
            Event::RunKey(key) => self.run_keys.push(key.public_key.clone()),
            Event::Workspace(ws) => {
                if self.workspace.is_none() {
                    self.workspace = Some(ws.clone());
                }
            }
            Event::IterationStart { iteration } => {
                self.last_started = *iteration;
                self.iterations.push(IterationRecord {
                    iteration: *iteration,
                    ..Default::default()
                });
            }
            Event::ExecResult(exec) => {
                if let Some(slot) = self.slot(exec.iteration) {
                    slot.exec = Some(exec.clone());
                    slot.lines.exec = Some(recorded.line.clone());
                }
            }
            Event::Snapshot(snapshot) => {
                if let Some(slot) = self.slot(snapshot.iteration) {
                    slot.snapshot = Some(snapshot.clone());
                }
            }
            Event::CheckResult(check) => {
                if let Some(slot) = self.slot(check.iteration) {
                    slot.check = Some(check.clone());
                    slot.lines.check = Some(recorded.line.clone());
                }
            }
            Event::IterationInterrupted { iteration, cause } => {
                if let Some(slot) = self.slot(*iteration) {
                    slot.interrupted = Some(cause.clone());
                    slot.lines.interrupted = Some(recorded.line.clone());
                }
            }
            Event::RunResumed(_) => {
                self.resumes += 1;
                self.last_stop = Some(LastStop::Resumed);
            }
            Event::SealResumed(_) => self.seal_resumes.push(recorded.body()),
            Event::RunInterrupted { .. } => {
                self.interruptions += 1;
                self.last_stop = Some(LastStop::Interrupted);
            }
            Event::CredentialMinted { .. } => self.credential_outstanding = true,
            Event::CredentialRevoked(_) => self.credential_outstanding = false,
            Event::Guard(guard) => {
                self.guard_bodies.push(recorded.body());
                if let Some(slot) = self.slot(guard.iteration) {
                    slot.guards.push(guard.clone());
                }
            }
            Event::GuardBaseline(baseline) => {
                self.guard_bodies.push(recorded.body());
                self.guard_baseline = Some(baseline.clone());
            }
            Event::Adequacy(adequacy) => {
                self.adequacy_iterations.push(adequacy.iteration);
                if let Some(slot) = self.slot(adequacy.iteration) {
                    slot.adequacy = Some(adequacy.clone());
                }
                self.guard_bodies.push(recorded.body());
            }
            Event::GuardSentinel(sentinel) => {
                self.sentinel_iterations.push(sentinel.iteration);
                if sentinel.holds == Some(false) {
                    self.sentinel_refused.push(sentinel.iteration);
                }
                self.guard_bodies.push(recorded.body());
            }
            Event::CheckConfirmation(confirmation) if confirmation.check.iteration == 0 => {
                self.baseline_confirmations.push(confirmation.clone());
            }
            Event::CheckConfirmation(confirmation) => {
                if let Some(slot) = self.slot(confirmation.check.iteration) {
                    slot.confirmations.push(confirmation.clone());
                }
            }
            Event::Reference(reference) => self.reference = Some(reference.clone()),
            Event::RatchetAccept(accept) => {
                self.hand_accepted.push((accept.clone(), self.last_started))
            }
            Event::Progress(progress) => {
                if let Some(slot) = self.slot(progress.iteration) {
                    slot.progress = Some(progress.clone());
                }
            }
            Event::CheckBaseline(baseline) => self.check_baseline = Some(baseline.clone()),
            Event::Targets(targets) => self.targets = Some(targets.clone()),
            Event::TestChangeAllowed(allowed) => {
                if let Some(slot) = self.slot(allowed.iteration) {
                    slot.allowed.push(allowed.clone());
                }
            }
            Event::Judge(judge) => {
                if let Some(slot) = self.slot(judge.iteration) {
                    slot.judge = Some(judge.clone());
                    slot.lines.judge = Some(recorded.line.clone());
                }
            }
            Event::HoldoutCheck(holdout) => {
                self.guard_bodies.push(recorded.body());
                if holdout.check.iteration == 0 {
                    self.holdout_baseline = Some(holdout.clone());
                } else if let Some(slot) = self.slot(holdout.check.iteration) {
                    slot.holdout = Some(holdout.clone());
                }
            }
            Event::Usage(usage) => {
                if let Some(slot) = self.slot(usage.iteration) {
                    slot.usage.push(usage.clone());
                }
            }
            Event::Comprehension(gate) => self.comprehension_stopped = gate.outcome == "stopped",
            Event::Halt(halt) => {
                self.halt = Some(halt.clone());
                self.halt_line = Some(recorded.line.clone());
            }
            Event::Externalised(x) if x.of == "check_baseline" => {
                self.check_baseline_externalised = Some(x.clone())
            }
            Event::Externalised(x) => {
                if let Some(slot) = self.slot(x.iteration) {
                    slot.externalised.push(x.clone());
                }
            }
            Event::Preconditions(p) => {
                self.preconditions = Some(p.clone());
                self.guard_bodies.push(recorded.body());
            }
            Event::SelfTest(s) => self.self_test = Some(s.clone()),
            Event::TaskPlan(p) => {
                if self.tasks.first.is_none() {
                    self.tasks.first = Some(p.clone());
                }
                self.tasks.plan = Some(p.clone());
            }
            Event::TaskStarted(t) => self.tasks.started.push(t.clone()),
            Event::TaskCheckpoint(c) => self.tasks.checkpoints.push(c.clone()),
            // A probe's events make a probe receipt (`receipt::probe`), not a run's history.
            Event::ProbeStart(_) | Event::ProbeRun(_) | Event::ProbeVerdict(_) => {}
            Event::Unknown => {
                if recorded.kind().starts_with("guard") {
                    self.guard_bodies.push(recorded.body());
                }
            }
        }
    }

    /// The latest iteration numbered `n` (events of an iteration name it).
    fn slot(&mut self, n: u64) -> Option<&mut IterationRecord> {
        self.iterations.iter_mut().rev().find(|r| r.iteration == n)
    }

    /// The record of the last iteration started.
    pub fn current(&self) -> Option<&IterationRecord> {
        self.iterations.last()
    }

    /// Whether an `adequacy` event (the canary) was recorded for iteration `n`.
    pub fn adequacy_of(&self, n: u64) -> bool {
        self.adequacy_iterations.contains(&n)
    }

    /// Whether a `guard_sentinel` event (the sentinel run) was recorded for iteration `n`.
    pub fn sentinel_of(&self, n: u64) -> bool {
        self.sentinel_iterations.contains(&n)
    }

    /// Whether iteration `n`'s sentinel run broke an expectation.
    pub fn sentinel_refused_of(&self, n: u64) -> bool {
        self.sentinel_refused.contains(&n)
    }

    pub fn run_id(&self) -> Option<&str> {
        self.start.as_ref().map(|s| s.run_id.as_str())
    }

    /// The last check that exited: its exit code and failing-set size.
    pub fn last_exited_check(&self) -> Option<&CheckResult> {
        self.iterations
            .iter()
            .rev()
            .filter_map(|r| r.check.as_ref())
            .find(|c| c.check_exit.is_some())
    }

    /// The last recorded check result.
    pub fn last_check(&self) -> Option<(u64, &CheckResult)> {
        self.iterations
            .iter()
            .rev()
            .find_map(|r| r.check.as_ref().map(|c| (r.iteration, c)))
    }

    /// The lists of iteration `n`'s `of` event (`check_result`, ...) that the receipt holds in
    /// a run artifact, by count, digest and sample.
    pub fn externalised(&self, n: u64, of: &str) -> Option<&crate::receipt::bounded::Externalised> {
        self.iterations
            .iter()
            .rev()
            .find(|r| r.iteration == n)?
            .externalised
            .iter()
            .find(|x| x.of == of)
    }

    /// The failing-set size of every iteration that recorded a check, in order.
    pub fn failing_counts(&self) -> Vec<Option<u64>> {
        self.iterations
            .iter()
            .filter(|r| r.check.is_some())
            .map(IterationRecord::failing_count)
            .collect()
    }

    /// Whether the operator accepted iteration `n` by hand (`ratchet --accept`).
    pub fn accepted_by_hand(&self, n: u64) -> bool {
        self.hand_accepted.iter().any(|(a, _)| a.iteration == n)
    }

    /// Whether the ratchet kept iteration `n`: its `progress` accepted it, or the operator did.
    pub fn ratchet_kept(&self, record: &IterationRecord) -> bool {
        record.progress.as_ref().is_some_and(|p| p.accepted)
            || self.accepted_by_hand(record.iteration)
    }

    /// The hand acceptance no iteration has started from yet (what a resume applies).
    pub fn pending_hand_acceptance(&self) -> Option<&super::events::RatchetAcceptRecord> {
        self.hand_accepted
            .last()
            .filter(|(_, after)| *after == self.last_started)
            .map(|(a, _)| a)
    }

    /// The last snapshot the guards accepted (the end state of a detached run).
    pub fn last_accepted_snapshot(&self) -> Option<&SnapshotRecord> {
        // An iteration the ratchet rejected (and the operator did not accept) is never the end state.
        let ratcheted = |r: &&IterationRecord| r.progress.is_none() || self.ratchet_kept(r);
        self.iterations
            .iter()
            .rev()
            .filter(ratcheted)
            .filter_map(|r| r.snapshot.as_ref())
            .find(|s| s.accepted())
    }

    /// The egress audit digest the receipt recorded last.
    pub fn last_egress_audit_sha256(&self) -> Option<&str> {
        self.iterations
            .iter()
            .rev()
            .filter_map(|r| r.exec.as_ref()?.egress.as_ref()?.audit_sha256.as_deref())
            .next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::StreamRecord;
    use crate::ending::Ending;
    use crate::halt::HaltReason;
    use crate::receipt::chain::{self, ReceiptLog};
    use crate::receipt::events::*;
    use crate::safefs::SafeDir;
    use proptest::prelude::*;

    fn ending() -> impl Strategy<Value = Ending> {
        prop_oneof![
            (-1i32..130).prop_map(|code| Ending::Exited { code }),
            (1i32..32).prop_map(|signal| Ending::Signaled { signal }),
            (0u64..10_000).prop_map(|after_ms| Ending::TimedOut { after_ms }),
            "[a-z ]{0,12}".prop_map(|reason| Ending::FailedToStart { reason }),
            prop_oneof![Just(2), Just(15)].prop_map(|signal| Ending::Interrupted { signal }),
        ]
    }

    fn stream() -> impl Strategy<Value = StreamRecord> {
        (
            0u64..1 << 40,
            "[0-9a-f]{64}",
            proptest::option::of("artifacts/[0-9]{4}-exec\\.stdout"),
            any::<bool>(),
        )
            .prop_map(|(bytes, sha256, artifact, truncated)| StreamRecord {
                bytes,
                sha256,
                artifact,
                truncated,
            })
    }

    fn set() -> impl Strategy<Value = Option<Vec<String>>> {
        proptest::option::of(proptest::collection::vec("[a-z]{1,4}::[a-z]{1,4}", 0..4))
    }

    fn reason() -> impl Strategy<Value = HaltReason> {
        prop_oneof![
            Just(HaltReason::SuccessConditionMet),
            Just(HaltReason::MaxIterationsReached),
            Just(HaltReason::ExecutionFailure),
            Just(HaltReason::BlockedPathModified),
        ]
    }

    /// Any event the engine writes, with iteration numbers drawn from a small range so that
    /// events also name iterations that are not the current one.
    fn event() -> impl Strategy<Value = Event> {
        let n = 0u64..5;
        prop_oneof![
            n.clone().prop_map(|iteration| Event::IterationStart { iteration }),
            (n.clone(), ending(), 0u64..100_000, stream(), stream(), any::<bool>()).prop_map(|(iteration, ending, duration_ms, stdout, stderr, egress)| {
                Event::ExecResult(ExecResult {
                    iteration,
                    exit_code: ending.exit_code(),
                    ending,
                    duration_ms,
                    stdout,
                    stderr,
                    egress: egress.then(|| EgressRecord {
                        totals: serde_json::json!({"allowed": 1, "denied": 0, "bytes_up": 10, "bytes_down": 20}),
                        audit: "egress.jsonl".into(),
                        audit_sha256: Some("ab".repeat(32)),
                        denied: vec![],
                    }),
                    enforcement: None,
                })
            }),
            (n.clone(), "[0-9a-f]{40}", 0u64..50, proptest::collection::vec("tests/[a-z]{1,5}", 0..3)).prop_map(|(iteration, tree_id, changed_paths, paths)| {
                Event::Snapshot(SnapshotRecord {
                    iteration,
                    tree_id,
                    changed_paths,
                    protected_changes: paths.into_iter().map(|path| ProtectedChangeRecord { path, change: "modified".into() }).collect(),
                    duration_ms: Some(changed_paths * 3),
                    awareness: vec![],
                    left_out: None,
                })
            }),
            (n.clone(), ending(), stream(), stream(), set(), set(), proptest::option::of("[a-z ]{1,10}")).prop_map(
                |(iteration, ending, stdout, stderr, failing_set, collected_set, junit_error)| {
                    Event::CheckResult(CheckResult {
                        iteration,
                        check_exit: ending.exit_code(),
                        ending,
                        duration_ms: 7,
                        stdout,
                        stderr,
                        failing_count: failing_set.as_ref().map(|s| s.len() as u64),
                        failing_set,
                        collected_count: collected_set.as_ref().map(|s| s.len() as u64),
                        collected_set,
                        skipped_set: None,
                        skipped_count: None,
                        junit_error,
                        evidence: None,
                        coverage: None,
                        failure_digests: None,
                        excerpts_artifact: None,
                        score: None,
                        output_sight: None,
                        outside_attempts: None,
                        enforcement: None,
                    })
                }
            ),
            (n.clone(), prop_oneof![Just("SIGTERM"), Just("supervisor_lost")])
                .prop_map(|(iteration, cause)| Event::IterationInterrupted { iteration, cause: cause.into() }),
            n.clone().prop_map(|last| Event::RunResumed(RunResumed {
                run_id: "r".into(),
                previous_state: Some("paused".into()),
                last_iteration: last,
                next_iteration: last + 1,
                pid: 7,
                cgroup_scope: None,
            })),
            n.clone().prop_map(|iteration| Event::RunInterrupted { signal: "SIGINT".into(), iteration }),
            Just(Event::CredentialMinted { env: "LOOPEXEC_AGENT_TOKEN".into(), duration_ms: 3 }),
            proptest::option::of("[a-z ]{1,10}")
                .prop_map(|error| Event::CredentialRevoked(CredentialRevoked { cause: "halt".into(), duration_ms: 3, ok: error.is_none(), error })),
            "[0-9a-f]{64}".prop_map(|public_key| Event::RunKey(RunKeyEndorsement { public_key, operator_key: "SHA256:x".into(), endorsement: "c2ln".into() })),
            (n.clone(), reason()).prop_map(|(iteration, halt_reason)| Event::Guard(GuardRecord {
                iteration,
                guard: "analysis".into(),
                stage: "after_check".into(),
                halt_reason,
                detail: "d".into(),
                findings: vec![FindingRecord { path: Some("src/a.rs".into()), what: "w".into() }],
            })),
            (n, reason(), proptest::option::of("loopexec/[a-z]{1,4}")).prop_map(|(iteration, halt_reason, branch)| Event::Halt(HaltRecord {
                halt_reason,
                exit_code: halt_reason.class().code(),
                iteration,
                detail: "a sentence".into(),
                delivery: Some(DeliveryRecord {
                    reason: branch.is_none().then(|| "no accepted change to deliver".to_string()),
                    duration_ms: branch.as_ref().map(|_| 12),
                    branch,
                    commit: None,
                    tree: None,
                    parent: None,
                    patch: None,
                    error: None,
                }),
            })),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// The history the live loop holds (each appended event recorded as it is written) is the
        /// history `resume`, `report` and `verify` fold from the receipt on disk.
        #[test]
        fn the_history_folded_from_the_receipt_is_the_one_the_live_loop_held(events in proptest::collection::vec(event(), 0..24)) {
            let tmp = tempfile::tempdir().unwrap();
            let dir = SafeDir::open(tmp.path()).unwrap();
            let mut log = ReceiptLog::create(&dir, "receipt.jsonl").unwrap();
            let mut live = History::default();
            live.record(&log.append_event(&sample::run_start("r")).unwrap());
            for event in &events {
                live.record(&log.append_event(event).unwrap());
            }
            let chain = chain::verify(&dir.read("receipt.jsonl", 1 << 24).unwrap()).unwrap();
            let folded = History::of_lines(&chain.events).unwrap();
            prop_assert_eq!(&folded, &live);
            prop_assert_eq!(super::super::statement::predicate(&folded), super::super::statement::predicate(&live));
        }
    }

    #[test]
    fn events_of_an_iteration_attach_to_it_and_a_revoke_clears_the_outstanding_credential() {
        let line = |i: usize, e: &Event| {
            let mut m = e.fields().unwrap();
            m.insert("type".into(), e.kind().into());
            m.insert("seq".into(), (i as u64).into());
            Recorded::decode(i, &m).unwrap()
        };
        let events = [
            sample::run_start("r"),
            Event::CredentialMinted {
                env: "T".into(),
                duration_ms: 1,
            },
            Event::IterationStart { iteration: 1 },
            sample::exec_result(1, 0),
            sample::check_result(1, 1),
            Event::IterationStart { iteration: 2 },
            sample::exec_result(2, 0),
        ];
        let records: Vec<Recorded> = events.iter().enumerate().map(|(i, e)| line(i, e)).collect();
        let h = History::fold(&records);
        assert_eq!(
            (h.last_started, h.iterations.len(), h.credential_outstanding),
            (2, 2, true)
        );
        assert_eq!(h.last_exited_check().and_then(|c| c.check_exit), Some(1));
        assert!(h
            .current()
            .is_some_and(|r| r.exec.is_some() && r.check.is_none()));
    }
}
