//! The typed events of a receipt: one [`Event`] variant per event kind, serialised as the
//! receipt's JSON lines (the `type` key is the serde tag). Their names and fields are a contract
//! (the signing and verification work keys on them); see docs/receipt.md.
//!
//! Writing goes through [`ReceiptLog::append_event`](super::chain::ReceiptLog::append_event);
//! reading through [`Recorded::decode`], which keeps each event's raw body beside its typed form
//! (the sealed predicate is made of the bodies exactly as they are on disk, so that receipts
//! written by earlier versions still verify). Receipts without a `schema` field in `run_start`
//! are schema 1 (the format before the field existed); events of a type this version does not
//! know decode as [`Event::Unknown`].

use crate::capture::StreamRecord;
use crate::ending::Ending;
use crate::halt::HaltReason;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The receipt format this version writes (recorded in `run_start` as `schema`).
pub const SCHEMA_VERSION: u32 = 1;

/// Fields of every line that belong to the chain, not to the event.
pub const CHAIN_FIELDS: [&str; 4] = ["seq", "prev", "ts", "type"];

/// One receipt event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    RunStart(RunStart),
    /// The run's public key endorsed by the operator key (docs/signing.md).
    RunKey(RunKeyEndorsement),
    /// The detached workspace of a run: baseline t0 (commit, tree), protected paths.
    Workspace(WorkspaceRecord),
    IterationStart {
        iteration: u64,
    },
    ExecResult(ExecResult),
    /// The tree an agent step left, and the protected paths it touched.
    Snapshot(SnapshotRecord),
    CheckResult(CheckResult),
    IterationInterrupted {
        iteration: u64,
        cause: String,
    },
    RunResumed(RunResumed),
    /// A `run --resume` that found the run halted but not sealed (its supervisor died between
    /// the `halt` line and the seal) and finished the seal: only its own `run_key` follows it
    /// (docs/receipt.md, "The crash window between halt and seal").
    SealResumed(SealResumed),
    RunInterrupted {
        signal: String,
        iteration: u64,
    },
    /// The agent's credential was minted by the operator's hook (never the secret itself).
    CredentialMinted {
        env: String,
        duration_ms: u64,
    },
    /// The operator's revoke hook ran.
    CredentialRevoked(CredentialRevoked),
    /// A guard's finding on an iteration that the `snapshot` does not carry (the protected-path
    /// guard's findings are the snapshot's `protected_changes`): the metric-integrity and
    /// tampering guards after the agent, guards after the check. Listed in the sealed
    /// predicate's `guards`.
    Guard(GuardRecord),
    /// What the syntax-tree guards compare against, computed once per run (per process) from t0.
    GuardBaseline(GuardBaselineRecord),
    /// The adequacy canary on the final green iteration: the mutants the check ran on, the
    /// score and the survivors (docs/oracle-trust.md, "Adequacy"). Listed in the sealed
    /// predicate's `guards`.
    Adequacy(AdequacyRecord),
    /// The sentinel run on the final green iteration (docs/guards.md, "The sentinel run"): the
    /// surfaces the sentinels went to, what the run showed, and which expectation broke; or why
    /// the guard was inactive. Listed in the sealed predicate's `guards` (its type starts with
    /// `guard`, so earlier versions list it too).
    GuardSentinel(SentinelRecord),
    /// A rerun of a green check on the same tree before `success_condition_met` (`confirm_runs`),
    /// and whether it agreed with the iteration's `check_result` (docs/oracle-trust.md).
    CheckConfirmation(ConfirmationRecord),
    /// The progress judgement of an iteration whose check named its tests: the ratchet's
    /// acceptance and, when a no-convergence rule fired, its halt and evidence (docs/progress.md).
    Progress(ProgressRecord),
    /// The operator advanced the ratchet's frontier by hand to an iteration it rejected
    /// (`loopexec ratchet --accept`), signed by the operator key; a resumed run starts from that
    /// iteration's tree (docs/progress.md, "Accepting by hand").
    RatchetAccept(RatchetAcceptRecord),
    /// The known-feasible reference checked at the start, or that none was given.
    Reference(ReferenceRecord),
    /// The check run once on t0 before the first agent call (or its cache entry): the sets the
    /// baseline guards compare against (docs/guards.md, "The baseline at t0").
    CheckBaseline(CheckBaselineRecord),
    /// The loop's targets and the tests already failing at t0 that are not targets, selected
    /// right after the `check_baseline` (docs/progress.md, "Targets").
    Targets(TargetsRecord),
    /// The advisory judge's answer on a green iteration (or why it gave none).
    Judge(JudgeRecord),
    /// A named allowance of loop.toml (`[[allow_test_change]]`) let a test change through a
    /// guard that would otherwise have halted on it, in one iteration (docs/guards.md, "A named
    /// path for a legitimate test change").
    TestChangeAllowed(TestChangeAllowedRecord),
    /// The held-out check on a green iteration every guard let through (docs/guards.md,
    /// "Held-out checks"): its result and the digest of the held-out directory, never its contents.
    HoldoutCheck(HoldoutRecord),
    /// What one stage of an iteration consumed (docs/budget.md).
    Usage(crate::receipt::usage::UsageRecord),
    /// The comprehension gate before an agent step (docs/gates.md, "The comprehension gate"):
    /// it stopped the run (unread diffs past `every`; resumable) or, on the first check after
    /// such a stop, found the debt cleared, with what each ack line did.
    Comprehension(ComprehensionRecord),
    Halt(HaltRecord),
    /// The lists the event just before it left out because they were over the receipt's bound
    /// (`receipt::bounded`): each by count, digest and sample, and the artifact holding them.
    Externalised(crate::receipt::bounded::Externalised),
    /// The first event of a probe receipt (`probe-check`, `doctor --check`; `receipt::probe`):
    /// never in a run's receipt.
    ProbeStart(crate::receipt::probe::ProbeStart),
    /// One determinism run of a probe: its plan, exit class and failing-set digest.
    ProbeRun(crate::receipt::probe::ProbeRunRecord),
    /// A probe's verdict, bound and (doctor) gates: the last event of a probe receipt.
    ProbeVerdict(crate::receipt::probe::ProbeVerdictRecord),
    /// `doctor = true`: the gates' verdicts before the first agent call, and the doctor receipt
    /// holding their runs and evidence. A failed gate halts the run with its reason.
    Preconditions(crate::receipt::probe::PreconditionsRecord),
    /// `self_test = true` (`run --self-test`): each zone's probe of forbidden operations before
    /// the first agent call (docs/zones.md, "The zone self-test"). One that succeeded halts the
    /// run (`isolation_unsatisfiable`).
    SelfTest(SelfTestRecord),
    /// task_list mode: the plan as the run read it from `.small/` at its start (or at a resume):
    /// its tasks in order with their dependencies and states, the replayId, the files' digest
    /// (docs/task-list.md).
    TaskPlan(TaskPlanRecord),
    /// task_list mode: a task's own `check_fixpoint` run is about to start (its run id and the
    /// commit it starts from).
    TaskStarted(TaskStartedRecord),
    /// task_list mode: a task's run came to its halt and the plan was checkpointed: the task
    /// completed or blocked, with the evidence.
    TaskCheckpoint(TaskCheckpointRecord),
    /// An event type this version does not know (kept verbatim in [`Recorded::body`]).
    #[serde(other)]
    Unknown,
}

impl Event {
    /// The event's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStart(_) => "run_start",
            Event::RunKey(_) => "run_key",
            Event::Workspace(_) => "workspace",
            Event::IterationStart { .. } => "iteration_start",
            Event::ExecResult(_) => "exec_result",
            Event::Snapshot(_) => "snapshot",
            Event::CheckResult(_) => "check_result",
            Event::IterationInterrupted { .. } => "iteration_interrupted",
            Event::RunResumed(_) => "run_resumed",
            Event::SealResumed(_) => "seal_resumed",
            Event::RunInterrupted { .. } => "run_interrupted",
            Event::CredentialMinted { .. } => "credential_minted",
            Event::CredentialRevoked(_) => "credential_revoked",
            Event::Guard(_) => "guard",
            Event::GuardBaseline(_) => "guard_baseline",
            Event::Adequacy(_) => "adequacy",
            Event::GuardSentinel(_) => "guard_sentinel",
            Event::CheckConfirmation(_) => "check_confirmation",
            Event::Progress(_) => "progress",
            Event::Reference(_) => "reference",
            Event::RatchetAccept(_) => "ratchet_accept",
            Event::CheckBaseline(_) => "check_baseline",
            Event::Targets(_) => "targets",
            Event::Judge(_) => "judge",
            Event::TestChangeAllowed(_) => "test_change_allowed",
            Event::HoldoutCheck(_) => "holdout_check",
            Event::Usage(_) => "usage",
            Event::Comprehension(_) => "comprehension",
            Event::Halt(_) => "halt",
            Event::Externalised(_) => "externalised",
            Event::ProbeStart(_) => "probe_start",
            Event::ProbeRun(_) => "probe_run",
            Event::ProbeVerdict(_) => "probe_verdict",
            Event::Preconditions(_) => "preconditions",
            Event::SelfTest(_) => "self_test",
            Event::TaskPlan(_) => "task_plan",
            Event::TaskStarted(_) => "task_started",
            Event::TaskCheckpoint(_) => "task_checkpoint",
            Event::Unknown => "unknown",
        }
    }

    /// The event's own fields (everything but `type`), as they are written.
    pub fn fields(&self) -> Result<Map<String, Value>, serde_json::Error> {
        match serde_json::to_value(self)? {
            Value::Object(mut map) => {
                map.remove("type");
                Ok(map)
            }
            _ => Ok(Map::new()),
        }
    }
}

/// What the comprehension gate found before an agent step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComprehensionRecord {
    /// `stopped` (the run stops, resumable) or `cleared` (the debt of an earlier stop was acked).
    pub outcome: String,
    /// The iteration the gate stood before.
    pub iteration: u64,
    /// The pinned limit: the run stops when more than `every` diffs are unread.
    pub every: u64,
    pub ledger_id: String,
    pub unread_count: u64,
    /// The unread diff digests (at most [`crate::receipt::comprehension::LISTED`]; `unread_count` is all of them).
    pub unread: Vec<String>,
    /// What each ack line did (the last [`crate::receipt::comprehension::LISTED`] lines).
    pub acks: Vec<crate::receipt::comprehension::AckOutcome>,
    /// sha256 of the ack log as read (empty bytes when there is none).
    pub acks_sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStart {
    pub run_id: String,
    pub mode: String,
    // Only `run_id` and `mode` are required of a `run_start` (as every reader before typed
    // events required): a receipt without the rest still reports, verifies and seals.
    #[serde(default)]
    pub isolation: String,
    #[serde(default)]
    pub zone: String,
    #[serde(default)]
    pub loopexec_version: String,
    #[serde(default)]
    pub pid: u32,
    /// The delegated systemd scope the supervisor moved into for its zone cgroups, or null
    /// (absent in receipts written before delegation).
    #[serde(default)]
    pub cgroup_scope: Option<Value>,
    /// The pinned configuration (`engine::config::LoopConfig`; the engine reads it back).
    #[serde(default)]
    pub config: Value,
    /// The receipt format; absent in receipts of schema 1 written before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<u32>,
}

impl RunStart {
    pub fn schema(&self) -> u32 {
        self.schema.unwrap_or(1)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunKeyEndorsement {
    /// Hex Ed25519 public key.
    pub public_key: String,
    /// Fingerprint of the endorsing operator key.
    pub operator_key: String,
    /// Base64 signature over the endorsement message.
    pub endorsement: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRecord {
    pub mode: String,
    pub repo: String,
    pub baseline_key: String,
    pub head_commit: String,
    pub tree_id: String,
    #[serde(default)]
    pub include_uncommitted: bool,
    #[serde(default)]
    pub baseline_reused: bool,
    pub target: String,
    #[serde(default)]
    pub protected: Vec<String>,
    /// The agent policy's `[workspace]` limits (absent in receipts written before them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedChangeRecord {
    pub path: String,
    /// `added`, `modified`, `deleted`, ... (lowercase).
    pub change: String,
}

/// A hand acceptance (`ratchet_accept`): the operator key's signature over the run id, the
/// iteration, its tree and the receipt line before this event (`receipt::acceptance`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RatchetAcceptRecord {
    pub iteration: u64,
    /// The git tree id of the accepted iteration's snapshot.
    pub tree_id: String,
    /// The fingerprint of the operator key that signed.
    pub operator_key: String,
    /// Base64 Ed25519 signature (docs/signing.md).
    pub signature: String,
}

/// The known-feasible reference of a run (docs/progress.md, "The reference").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReferenceRecord {
    /// Whether the run named a reference (false: no existence proof was given).
    pub given: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<String>,
    /// A patch reference (`--reference PATCH`): its absolute path and the SHA-256 of the bytes
    /// applied to t0 (`tree_id` is the tree it made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_id: Option<String>,
    /// Whether the check passed on the reference's tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_exit: Option<i32>,
    /// The failing test ids the reference's check reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_set: Option<Vec<String>>,
    /// One sentence.
    pub detail: String,
}

/// The targets of a run (docs/progress.md, "Targets"). Each list holds at most 50 ids (sorted);
/// `*_count` is its exact length and `*_sha256` the SHA-256 of all its ids, one per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetsRecord {
    /// The `--target` patterns (none: every test failing at t0 is a target).
    pub patterns: Vec<String>,
    pub targets: Vec<String>,
    pub targets_count: u64,
    pub targets_sha256: String,
    /// Tests failing at t0 that are not targets: they neither block success nor count as
    /// regressions.
    pub preexisting_failures: Vec<String>,
    pub preexisting_failures_count: u64,
    pub preexisting_failures_sha256: String,
}

/// What the progress rules concluded after one iteration's check (docs/progress.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressRecord {
    pub iteration: u64,
    /// Failing targets after this iteration (exact count).
    pub failing_targets: u64,
    /// Whether the ratchet accepted the iteration (its passing set kept every test the last
    /// accepted iteration passed); a rejected iteration is never delivered.
    pub accepted: bool,
    /// Why the ratchet rejected it (`{"kind": "lost_tests", "lost": [...]}`), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejection: Option<Value>,
    /// The last accepted iteration after this one (0: the start).
    pub frontier: u64,
    /// For a rejected iteration of a detached run: the tree id the workspace was reverted to
    /// (the last accepted snapshot's, or t0's), taken again after the revert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverted_to_tree: Option<String>,
    /// The no-convergence halt a rule computed, when one fired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt_reason: Option<crate::halt::HaltReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The rule's evidence (`{"rule": ..., ...}`), when one fired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Value>,
    /// Whether the check was red only on tests already failing at t0 that are not targets, with
    /// every target and every test passing at t0 passing: success (docs/progress.md, "Targets").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub targets_met: bool,
    /// With a declared score (`[progress.score]`): this iteration's score (null: missing), the
    /// best accepted score before it (null: none yet) and the band (absent without a score).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<ProgressScore>,
}

/// The score part of a `progress` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressScore {
    pub score: Option<f64>,
    pub best: Option<f64>,
    pub band: f64,
    pub direction: Direction,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    pub iteration: u64,
    /// Git tree id of the workspace the agent left.
    pub tree_id: String,
    pub changed_paths: u64,
    #[serde(default)]
    pub protected_changes: Vec<ProtectedChangeRecord>,
    /// How long the snapshot took (absent in receipts written before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// What the agent's production code observes that can tell a test run from a real one (the
    /// awareness rule, docs/guards.md): a green from this tree needs a review. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awareness: Vec<FindingRecord>,
    /// What the agent left that is not part of the tree (what t0's ignore rules ignore, new
    /// caches): never in the check's copy, never delivered. Absent when nothing was left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_out: Option<LeftOutRecord>,
}

/// The paths an agent step left out of the tree, bounded: the first [`LeftOutRecord::MAX_NAMED`]
/// named (escaped, with why), the count and the SHA-256 of all of them (one a line, as bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOutRecord {
    pub count: u64,
    /// `path (ignored)` or `path (cache)`, escaped.
    pub named: Vec<String>,
    pub sha256: String,
}

impl LeftOutRecord {
    pub const MAX_NAMED: usize = 20;

    /// The record of `paths` (each with why it was left out); `None` when there are none.
    pub fn of<'a>(
        paths: impl ExactSizeIterator<Item = (&'a [u8], &'static str)>,
    ) -> Option<LeftOutRecord> {
        use sha2::{Digest, Sha256};
        let count = paths.len() as u64;
        if count == 0 {
            return None;
        }
        let mut h = Sha256::new();
        let mut named = Vec::new();
        for (path, why) in paths {
            h.update(path);
            h.update(b"\n");
            if named.len() < Self::MAX_NAMED {
                named.push(format!("{} ({why})", crate::inert::inert_bytes(path)));
            }
        }
        Some(LeftOutRecord {
            count,
            named,
            sha256: hex::encode(h.finalize()),
        })
    }
}

impl SnapshotRecord {
    /// Whether the guards let this snapshot through (it touched no protected path).
    pub fn accepted(&self) -> bool {
        self.protected_changes.is_empty()
    }
}

/// Cumulative egress of the run after an agent step, and the digest of its audit log so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EgressRecord {
    pub totals: Value,
    pub audit: String,
    pub audit_sha256: Option<String>,
    /// This step's refusals by destination, bounded (absent when there were none, and in
    /// receipts written before it); what the next feedback file's `egress_denied` lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied: Vec<crate::egress::refusal::DeniedHost>,
}

/// Which way the score improves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    #[default]
    Higher,
    Lower,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecResult {
    pub iteration: u64,
    pub ending: Ending,
    /// Null unless the agent exited.
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub stdout: StreamRecord,
    pub stderr: StreamRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressRecord>,
    /// What the kernel applied to the agent's zone, read back from inside it (docs/zones.md,
    /// "Enforcement evidence"); absent without a native zone and in older receipts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<sandbox::Enforcement>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub iteration: u64,
    pub ending: Ending,
    /// Null unless the check exited.
    pub check_exit: Option<i32>,
    pub duration_ms: u64,
    pub stdout: StreamRecord,
    pub stderr: StreamRecord,
    /// Sorted `classname::name` ids of the failing tests (null without a readable report, or
    /// when over the receipt's bound: then an `externalised` event follows with it).
    #[serde(default)]
    pub failing_set: Option<Vec<String>>,
    #[serde(default)]
    pub failing_count: Option<u64>,
    /// Sorted ids of every test the report collected, an id listed once per test entry bearing
    /// it (two doctests of one item; receipts before repeats were recorded list each id once;
    /// null without a readable report).
    #[serde(default)]
    pub collected_set: Option<Vec<String>>,
    #[serde(default)]
    pub collected_count: Option<u64>,
    /// Sorted ids of the tests skipped, ignored or xfailed, listed like `collected_set` (null
    /// without a source naming tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_set: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_count: Option<u64>,
    /// Why a declared report could not be used (the first such report; the name predates
    /// `--report`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub junit_error: Option<String>,
    /// The evidence the check left and whether it agrees with its exit code (null when the check
    /// did not exit, and in receipts written before the evidence was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<CheckEvidence>,
    /// The declared coverage report (`--coverage`) as this check left it (null without one, when
    /// the check did not exit, and in receipts written before coverage was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<LineCoverageRecord>,
    /// Per failing test with a failure excerpt, the hex SHA-256 of its normalised excerpt, by id
    /// (what the failure signature needs; null without excerpts and in older receipts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_digests: Option<Vec<FailureDigest>>,
    /// The artifact holding the excerpts themselves (`artifacts/<stem>-excerpts.json`), which the
    /// feedback file quotes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excerpts_artifact: Option<crate::receipt::bounded::ArtifactRef>,
    /// The score the loop declares (`[progress.score]`) as this check reported it (null without
    /// a declared score, when the check did not exit, and in older receipts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<ScoreRecord>,
    /// What the check's own output showed about the reach of its evidence
    /// (`testreport::sight`: the runners whose summaries it printed, whether cargo stopped at its
    /// first failing target). Recorded for the t0 baseline's check only (`check_baseline`), where
    /// the inactive-guard assessment reads it; absent when it showed nothing, and in older receipts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_sight: Option<crate::testreport::sight::OutputSight>,
    /// How often the check's zone tried to send to an address outside its network namespace,
    /// as that namespace's kernel counted them (it has no route out: every attempt failed; the
    /// `hermeticity_violation` rule, docs/halts.md). Absent where the zone cannot count (no native
    /// zone), when the check was killed, and in older receipts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_attempts: Option<OutsideAttemptsRecord>,
    /// What the kernel applied to the check's zone, read back from inside it (docs/zones.md,
    /// "Enforcement evidence"); absent without a native zone, from a baseline cache hit, and in
    /// older receipts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<sandbox::Enforcement>,
}

/// Attempts to reach an address outside a zone's network namespace, by IP version (the kernel's
/// `OutNoRoutes` counters of that namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OutsideAttemptsRecord {
    pub ipv4: u64,
    pub ipv6: u64,
}

impl OutsideAttemptsRecord {
    pub fn total(&self) -> u64 {
        self.ipv4.saturating_add(self.ipv6)
    }
}

/// A declared score as one check reported it: its value, or why it has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreRecord {
    /// `stdout` (the regex's source) or the score file's path.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Why there is no value (missing, a link, unparsable), escaped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One failing test's normalised failure excerpt, by digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureDigest {
    pub test: String,
    pub sha256: String,
}

/// A declared coverage report as one check left it: its overall line coverage, or why it could
/// not be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineCoverageRecord {
    /// The report's path, relative to the check's working directory.
    pub report: String,
    /// `lcov` or `cobertura`, when it parsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Lines the report shows executed, and lines it instruments, over every file it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covered_lines: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverable_lines: Option<u64>,
    /// Why the report could not be used (missing, a link, too large, malformed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A second look at iteration `check.iteration`'s check on a tree it already ran on: a
/// confirmation rerun of its green (`confirmation` 1, 2, ...), or, with `same_tree_as`, its own
/// check compared with an earlier iteration's on the same tree (`confirmation` 0; recorded only when
/// they disagree).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfirmationRecord {
    /// 1 for the first rerun; 0 for a comparison with an earlier iteration.
    pub confirmation: u64,
    /// The earlier iteration whose check ran on the same tree (an agent step that changed nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_tree_as: Option<u64>,
    /// Whether its verdict class and failing set are the iteration's `check_result`'s.
    pub agrees: bool,
    /// The one-sided Wilson lower bound on stability over the iteration's samples so far, at
    /// `confidence`, against `stability_target` (1 - max_flake_rate).
    pub stability_lower_bound: f64,
    pub confidence: f64,
    pub stability_target: f64,
    #[serde(flatten)]
    pub check: CheckResult,
}

/// The evidence of one check run, bounded: per declared report its counts or its error, and
/// each disagreement with a zero exit code, or a red one's gaps (docs/guards.md, "The agreement").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckEvidence {
    /// `green` (exit 0 and every source agrees), `red` (a non-zero exit) or `disagree`.
    pub verdict: String,
    #[serde(default)]
    pub reports: Vec<ReportRecord>,
    /// The sources consulted by a green verdict (empty: the exit code was the only evidence).
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub disagreements: Vec<DisagreementRecord>,
}

/// One declared report as read after the check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportRecord {
    pub pattern: String,
    /// The file the pattern matched (null: it matched nothing).
    pub path: Option<String>,
    pub format: Option<String>,
    /// `[total, passed, failed, skipped]` entries.
    pub counts: Option<[u64; 4]>,
    pub error: Option<String>,
}

/// A source contradicting a zero exit code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisagreementRecord {
    /// `report_unusable`, `report_has_no_tests`, `report_shows_failures`, ...
    pub kind: String,
    /// The report or stream it is about, escaped.
    pub subject: String,
    /// A sentence, escaped and at most 1000 characters.
    pub detail: String,
}

impl CheckEvidence {
    /// Whether the evidence keeps a zero exit from being green.
    pub fn disagrees(&self) -> bool {
        self.verdict == "disagree"
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResumed {
    pub run_id: String,
    /// The state.json phase the resumed run was left in (null when unreadable).
    pub previous_state: Option<String>,
    pub last_iteration: u64,
    pub next_iteration: u64,
    pub pid: u32,
    /// The resuming supervisor's scope, as in `run_start`.
    #[serde(default)]
    pub cgroup_scope: Option<Value>,
}

/// The resume that finished the seal of a run halted but never sealed (`seal_resumed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SealResumed {
    pub run_id: String,
    /// The state.json phase the run was left in (null when unreadable).
    pub previous_state: Option<String>,
    /// The recorded halt this resume seals.
    pub halt_reason: HaltReason,
    pub pid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialRevoked {
    /// `halt`, `pause`, `interrupt`, `error` or `supervisor_lost`.
    pub cause: String,
    pub duration_ms: u64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One thing a guard found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingRecord {
    /// The workspace path it concerns, if any.
    #[serde(default)]
    pub path: Option<String>,
    pub what: String,
}

/// The adequacy canary's record: which tier ran, from which seed, over how many mutants, and
/// what the check answered on each (paths and changes escaped and bounded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdequacyRecord {
    pub iteration: u64,
    /// `mutation` (the built-in operators) or `external` (`mutate_cmd`).
    pub tier: String,
    pub seed: u64,
    /// Mutants the operators allowed on the changed lines, and how many were sampled.
    pub generated: u64,
    pub sampled: u64,
    pub killed: u64,
    pub survived: u64,
    pub not_run: u64,
    /// killed / (killed + survived), when any ran.
    pub score: Option<f64>,
    /// `adequate`, `inadequate`, `no_mutants` or `not_run`.
    pub verdict: String,
    /// Every sampled mutant's result (survivors have `outcome = "survived"`).
    #[serde(default)]
    pub mutants: Vec<crate::mutation::MutantResult>,
    /// The external mutator's exit code (`tier = "external"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_exit: Option<i32>,
    /// The coverage-delta tier, when the run declares a coverage report (`--coverage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<CoverageRecord>,
    /// The production functions the tests failing at t0 call (`path: name`, escaped), whose
    /// mutants are the `t0_failure` stratum (`crate::mutation::targets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub t0_failure_functions: Vec<String>,
    pub duration_ms: u64,
}

/// The sentinel run's record (`guard_sentinel`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentinelRecord {
    pub iteration: u64,
    /// Whether a sentinel run ran; when not, `inactive_reason` says why (turned off, no
    /// recognised surface, no test ids).
    pub active: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inactive_reason: Option<String>,
    /// The sentinels written, one pair per recognised surface.
    #[serde(default)]
    pub surfaces: Vec<SentinelSurfaceRecord>,
    /// Surfaces found but not recognised, and why.
    #[serde(default)]
    pub unrecognised: Vec<UnrecognisedSurface>,
    /// The sentinel run itself (output in `NNNN-sentinel.{stdout,stderr}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<SentinelCheck>,
    /// Whether every expectation held (null when inactive).
    pub holds: Option<bool>,
    /// Each expectation that broke, as a sentence (at most 20).
    #[serde(default)]
    pub broken: Vec<String>,
    /// Tests of the green check in libtest binaries cargo never started in the sentinel run (it
    /// stops after the first failing binary without `--no-fail-fast`).
    #[serde(default)]
    pub not_started: u64,
    pub duration_ms: u64,
}

/// One surface's sentinels: where the surface was found, the sentinel file, its nonces (fresh,
/// used once) and the proof file the passing one writes at the workspace root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentinelSurfaceRecord {
    /// `pytest`, `cargo`, `go` or `node`.
    pub runner: String,
    pub found_at: String,
    pub file: String,
    pub fail_nonce: String,
    pub pass_nonce: String,
    pub proof: String,
}

/// A test surface the sentinel could not be placed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnrecognisedSurface {
    pub surface: String,
    pub reason: String,
}

/// The sentinel run's check, bounded: how it ended, its output and its counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentinelCheck {
    pub ending: Ending,
    pub check_exit: Option<i32>,
    pub duration_ms: u64,
    pub stdout: StreamRecord,
    pub stderr: StreamRecord,
    pub failing_count: Option<u64>,
    pub collected_count: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The coverage-delta tier's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoverageRecord {
    /// The report's path, relative to the check's working directory.
    pub report: String,
    /// Changed substantive lines the report names.
    pub changed_lines: u64,
    /// Changed lines never executed (bounded; `uncovered_count` is the whole number).
    pub uncovered: Vec<crate::mutation::coverage::Uncovered>,
    pub uncovered_count: u64,
    /// Report entries that could name a changed file and another tree file (bounded, entries
    /// escaped; `ambiguous_count` is the whole number): their hits count for neither, the changed
    /// files they could name are uncovered. Absent when there are none, and in older receipts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ambiguous: Vec<crate::mutation::coverage::AmbiguousEntry>,
    #[serde(default, skip_serializing_if = "crate::receipt::events::is_zero")]
    pub ambiguous_count: u64,
    /// Why the report could not be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The syntax-tree guards' baseline: A0, H0, and what they run with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardBaselineRecord {
    /// A0: assertions in test code over t0's files with a grammar.
    pub assertions: u64,
    /// H0: hex SHA-256 of the test-surface digest, and its entries (`{path, part, sha256}`).
    pub surface_sha256: String,
    #[serde(default)]
    pub surface: Vec<Value>,
    /// t0 files above the parse cap (not counted in A0).
    #[serde(default)]
    pub not_analysed: Vec<String>,
    /// How many module names shadowing is judged against (null: t0 has no Python files).
    #[serde(default)]
    pub python_module_names: Option<u64>,
    /// Tampering rules the loop disabled (`{rule, reason}`).
    #[serde(default)]
    pub disabled_rules: Vec<Value>,
}

/// The held-out check of an iteration (`--holdout-check`, `engine::holdout`): the directory it was
/// given (its canonical path and a SHA-256 over its entries' paths, kinds and content digests;
/// never a byte of its contents), whether that digest is still the one `run_start` pinned, the
/// verdict, and the check's result as for any check (`check.iteration` is the iteration).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HoldoutRecord {
    pub dir: String,
    pub dir_sha256: String,
    pub dir_entries: u64,
    /// The digest differs from `config.holdout.digest` (the operator changed the directory).
    pub dir_changed: bool,
    /// `green`, `red`, `disagree` (exit 0 whose evidence disagrees) or `could_not_run`.
    pub verdict: String,
    pub check: CheckResult,
}

/// The t0 baseline: the check's result on t0 (iteration 0) and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckBaselineRecord {
    /// The check's result on t0, as run now or as the cache entry kept it (a cached result names
    /// no artifact: its output belongs to the run that computed it).
    pub check: CheckResult,
    /// The tree the check ran on (t0's tree id; null in place).
    pub tree_id: Option<String>,
    /// The cache key (hex SHA-256 of t0's tree, the check command, the exec policy, the
    /// environment; null when the baseline is not cacheable).
    pub cache_key: Option<String>,
    /// Whether the result came from the cache.
    pub cache_hit: bool,
    /// Why nothing was cached or read, or why a cache entry was ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_note: Option<String>,
    /// Why the collected and skipped sets cannot be measured (null: they were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sets_unmeasured: Option<String>,
    /// Which guards of the run cannot see (inactive or partly blind), why, and the switch that
    /// enables each, from the run's setting and this baseline's evidence (empty: every guard can;
    /// absent in receipts written before it; docs/guards.md, "Guards that cannot see").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inactive_guards: Option<Vec<InactiveGuard>>,
}

/// A guard that cannot see all it judges, as `check_baseline`'s `inactive_guards` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlindGuard {
    /// The set guard (C0, S0 of the t0 baseline; seat `metric_integrity`, after the check).
    TestSet,
    /// The progress rules and the targets (the ratchet, the no-convergence halts): they read the
    /// failing sets.
    Progress,
    /// The coverage guard's comparison with t0's line coverage.
    Coverage,
    /// The protected-path guard (`blocked_path_modified`).
    ProtectedPaths,
    /// The syntax-tree guards after the agent (assertions, test items, surface, shadowing,
    /// tampering rules).
    SyntaxTree,
    /// The check-writes guard (the check must not change the tree it tests).
    CheckWrites,
}

/// How much of what it judges a guard cannot see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Blindness {
    /// It never runs.
    Inactive,
    /// It runs, over less than it should.
    Partial,
}

/// Why a guard cannot see, computed from the run's configuration and the t0 evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlindCause {
    /// `--no-baseline`: no check on t0, so no C0, S0 or t0 coverage.
    NoBaseline,
    /// An in-place run: no t0 tree the agent cannot change.
    InPlace,
    /// The check on t0 did not exit (timed out, killed, could not start).
    CheckDidNotExit,
    /// The check on t0 exited but no source named a test (no declared report, no libtest output).
    NoTestIds,
    /// A declared report could not be read on t0.
    ReportUnusable,
    /// cargo stopped at its first failing test target on t0 (fail-fast): later targets never ran.
    CargoStoppedEarly,
    /// The declared coverage report gave no usable coverage on t0.
    CoverageAbsentAtT0,
    /// t0 files the syntax-tree guards could not parse (above the parse cap).
    NotParsed,
}

/// One guard that cannot see (`check_baseline`'s `inactive_guards`): which, how much, why (a
/// sentence naming the evidence, escaped) and the switch that enables it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InactiveGuard {
    pub guard: BlindGuard,
    pub blindness: Blindness,
    pub cause: BlindCause,
    pub detail: String,
    /// What the operator changes so that the guard sees (a flag, a loop.toml key, a runner switch).
    pub enable: String,
}

/// One use of an allowance: what changed and the allowance (with its reason) that let it through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllowanceUse {
    /// The allowance as loop.toml names it: its `path` glob or its test `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub reason: String,
    /// What changed (escaped): `tests/test_api.py modified`, `assertions in test code: 3 at t0,
    /// 2 now`, `no longer collected: ID`.
    pub what: String,
}

impl AllowanceUse {
    /// How the allowance is named: `path GLOB` or `id ID`.
    pub fn name(&self) -> String {
        match (&self.path, &self.id) {
            (Some(path), _) => format!("path {path}"),
            (None, Some(id)) => format!("id {id}"),
            (None, None) => "-".into(),
        }
    }
}

/// The `test_change_allowed` event: the changes one guard let through in one iteration under an
/// allowance (at most 50 uses, then one counting the rest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestChangeAllowedRecord {
    pub iteration: u64,
    /// The guard that would have halted (`protected_paths`, `metric_integrity`).
    pub guard: String,
    /// `after_agent` or `after_check`.
    pub stage: String,
    pub uses: Vec<AllowanceUse>,
}

/// What the judge's answer was (docs/guards.md, "The judge").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgeOutcome {
    /// The judge approved the green step.
    Approve,
    /// The judge vetoed it (`reviewer_rejected`, or `reward_hacking_detected` when it said so).
    Veto,
    /// The judge gave no answer that counts: it crashed, timed out, could not start, wrote more
    /// than its bound or something that is not an answer (`escalation_pending`).
    Failed,
}

/// The judge of one green iteration: the packet it was given (by digest), how its command ended,
/// and its answer or its failure. The reason is the judge's own text, escaped and bounded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeRecord {
    pub iteration: u64,
    pub outcome: JudgeOutcome,
    /// The judge said the step games the check (a veto halts `reward_hacking_detected`).
    #[serde(default)]
    pub reward_hacking: bool,
    /// The judge's reason (approve/veto), or what was wrong with its answer (failed).
    pub reason: String,
    pub ending: Ending,
    pub duration_ms: u64,
    /// The packet's artifact (relative to the run directory), its size and sha256.
    pub packet: String,
    pub packet_bytes: u64,
    pub packet_sha256: String,
    pub stdout: StreamRecord,
    pub stderr: StreamRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardRecord {
    pub iteration: u64,
    /// The guard's name.
    pub guard: String,
    /// `after_agent` or `after_check`.
    pub stage: String,
    pub halt_reason: HaltReason,
    /// A sentence (the halt's detail).
    pub detail: String,
    #[serde(default)]
    pub findings: Vec<FindingRecord>,
}

/// What reached the operator at the halt of a detached run: the branch (null when nothing was
/// delivered, with a `reason` or an `error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRecord {
    pub branch: Option<String>,
    /// How long the delivery took (when one was attempted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The patch, relative to the run directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The zone self-test's record: one entry per probed zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfTestRecord {
    pub zones: Vec<SelfTestZone>,
    /// Every operation of every zone failed, as it must.
    pub held: bool,
}

/// One zone's self-test: the role's policy, each forbidden operation's outcome, and the zone's
/// read-back enforcement; or why the zone could not be probed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfTestZone {
    pub role: crate::zones::Role,
    pub operations: Vec<sandbox::self_test::ProbeOutcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<sandbox::Enforcement>,
    /// Why the zone could not be probed (a backend without zones, a zone that did not start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl SelfTestZone {
    /// Probed, and every operation failed.
    pub fn held(&self) -> bool {
        self.error.is_none()
            && !self.operations.is_empty()
            && self.operations.iter().all(|o| o.held())
    }
}

/// A plan's task and its state, as SMALL defines them (`crate::small`).
pub use crate::small::{PlannedTask, Status as TaskState};

/// The plan of a task_list run as read from `.small/` (`task_plan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskPlanRecord {
    pub tasks: Vec<PlannedTask>,
    /// SMALL's replayId of the plan (sticky once set).
    pub replay_id: String,
    /// sha256 over the `.small/` files' names and contents, in name order.
    pub small_sha256: String,
    /// The plan branch's commit the plan was read from.
    pub commit: String,
}

/// A task's run starting (`task_started`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStartedRecord {
    pub task: String,
    /// The `check_fixpoint` run that works on it (`.loopexec/runs/<run_id>`).
    pub run_id: String,
    /// The commit it starts from (detached workspace), absent in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_commit: Option<String>,
}

/// A task checkpointed after its run's halt (`task_checkpoint`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCheckpointRecord {
    pub task: String,
    pub run_id: String,
    /// `completed` or `blocked`.
    pub outcome: TaskState,
    /// The task run's halt and its exit code.
    pub run_halt: HaltReason,
    pub run_exit_code: i32,
    /// sha256 of the task run's sealed receipt file, as it was when the checkpoint was made.
    pub run_receipt_sha256: String,
    /// The tree the task run delivered and the commit the plan's branch reached with the
    /// checkpoint (detached workspace); absent in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The `.small/` files' digest after the checkpoint.
    pub small_sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HaltRecord {
    pub halt_reason: HaltReason,
    // As for `run_start`, only the reason is required of a `halt`.
    /// The exit code of the reason's class.
    #[serde(default)]
    pub exit_code: i32,
    #[serde(default)]
    pub iteration: u64,
    /// A sentence.
    #[serde(default)]
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryRecord>,
}

/// Why a chain-valid receipt line is not a well-formed event.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("receipt line {line}: malformed {kind} event: {detail}")]
pub struct EventError {
    pub line: usize,
    pub kind: String,
    pub detail: String,
}

/// One event as read from a receipt (or as just appended to it): its typed form and its whole
/// line exactly as it is on disk (the sealed predicate is made of the lines' bodies).
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub event: Event,
    pub line: Map<String, Value>,
}

impl Recorded {
    /// Decode one verified line (`index` is 0-based).
    pub fn decode(index: usize, line: &Map<String, Value>) -> Result<Recorded, EventError> {
        let event: Event =
            serde_json::from_value(Value::Object(line.clone())).map_err(|e| EventError {
                line: index + 1,
                kind: type_of(line).to_string(),
                detail: e.to_string(),
            })?;
        Ok(Recorded {
            event,
            line: line.clone(),
        })
    }

    /// Decode every line of a verified receipt.
    pub fn decode_all(lines: &[Map<String, Value>]) -> Result<Vec<Recorded>, EventError> {
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| Recorded::decode(i, l))
            .collect()
    }

    /// The `type` as written (also for [`Event::Unknown`]).
    pub fn kind(&self) -> &str {
        type_of(&self.line)
    }

    /// The event's fields without the chain's (`seq`, `prev`, `ts`, `type`).
    pub fn body(&self) -> Map<String, Value> {
        self.line
            .iter()
            .filter(|(k, _)| !CHAIN_FIELDS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

fn type_of(line: &Map<String, Value>) -> &str {
    line.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Complete events for tests (every field a writer writes).
#[cfg(test)]
pub(crate) mod sample {
    use super::*;

    pub fn stream() -> StreamRecord {
        StreamRecord {
            bytes: 0,
            sha256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
            artifact: None,
            truncated: false,
        }
    }

    pub fn run_start(run_id: &str) -> Event {
        Event::RunStart(RunStart {
            run_id: run_id.into(),
            mode: "check_fixpoint".into(),
            isolation: "none".into(),
            zone: "host".into(),
            loopexec_version: "0.1.0".into(),
            pid: 1,
            cgroup_scope: None,
            // As this version pins it: the cap and the progress limits (their defaults).
            config: serde_json::json!({
                "check": "true", "exec": "true", "max_iterations": 3,
                "progress": {"no_progress_k": 3, "same_failure_n": 3, "regressed_n": 2, "unsatisfiable_cycles": 2, "oscillation": true, "ratchet": true},
            }),
            schema: Some(SCHEMA_VERSION),
        })
    }

    pub fn exec_result(iteration: u64, code: i32) -> Event {
        Event::ExecResult(ExecResult {
            iteration,
            ending: Ending::Exited { code },
            exit_code: Some(code),
            duration_ms: 1,
            stdout: stream(),
            stderr: stream(),
            egress: None,
            enforcement: None,
        })
    }

    pub fn check_result(iteration: u64, code: i32) -> Event {
        Event::CheckResult(CheckResult {
            iteration,
            ending: Ending::Exited { code },
            check_exit: Some(code),
            duration_ms: 1,
            stdout: stream(),
            stderr: stream(),
            failing_set: None,
            failing_count: None,
            collected_set: None,
            collected_count: None,
            skipped_set: None,
            skipped_count: None,
            junit_error: None,
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

    /// The judge's answer `outcome` on iteration 1 (its streams empty).
    pub fn judge(outcome: JudgeOutcome, reward_hacking: bool) -> JudgeRecord {
        JudgeRecord {
            iteration: 1,
            outcome,
            reward_hacking,
            reason: "why".into(),
            ending: Ending::Exited { code: 0 },
            duration_ms: 1,
            packet: "artifacts/0001-judge-packet.json".into(),
            packet_bytes: 2,
            packet_sha256: String::new(),
            stdout: stream(),
            stderr: stream(),
            egress: None,
        }
    }

    /// A green check of iteration 1 that collected and skipped exactly these test ids.
    pub fn check_with_sets(collected: &[&str], skipped: &[&str]) -> CheckResult {
        let Event::CheckResult(mut c) = check_result(1, 0) else {
            unreachable!("check_result makes a CheckResult")
        };
        c.collected_set = Some(collected.iter().map(|s| s.to_string()).collect());
        c.skipped_set = Some(skipped.iter().map(|s| s.to_string()).collect());
        c
    }

    pub fn halt(reason: HaltReason, iteration: u64) -> Event {
        Event::Halt(HaltRecord {
            halt_reason: reason,
            exit_code: reason.class().code(),
            iteration,
            detail: "a sentence".into(),
            delivery: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn left_out_paths_are_named_escaped_up_to_the_bound_then_counted_and_digested() {
        let paths: Vec<Vec<u8>> = (0..25)
            .map(|i| format!("cache{i:02}").into_bytes())
            .chain([b"a\x1b[2Jb".to_vec()])
            .collect();
        let record = LeftOutRecord::of(paths.iter().map(|p| (p.as_slice(), "cache"))).unwrap();
        assert_eq!(record.count, 26);
        assert_eq!(record.named.len(), LeftOutRecord::MAX_NAMED);
        assert_eq!(record.named[0], "cache00 (cache)");
        let all: Vec<u8> = paths
            .iter()
            .flat_map(|p| p.iter().copied().chain([b'\n']))
            .collect();
        use sha2::Digest;
        assert_eq!(record.sha256, hex::encode(sha2::Sha256::digest(&all)));
        let escaped = LeftOutRecord::of([(&b"a\x1b[2Jb"[..], "ignored")].into_iter()).unwrap();
        assert!(!escaped.named[0].contains('\x1b'), "{:?}", escaped.named);
        assert_eq!(LeftOutRecord::of(std::iter::empty::<(&[u8], &str)>()), None);
    }

    #[test]
    fn an_event_of_an_unknown_type_decodes_as_unknown_with_its_body() {
        let r = Recorded::decode(
            3,
            &line(r#"{"seq":3,"prev":"x","ts":"t","type":"guard_note","why":"w"}"#),
        )
        .unwrap();
        assert_eq!((&r.event, r.kind()), (&Event::Unknown, "guard_note"));
        assert_eq!(Value::Object(r.body()), serde_json::json!({"why": "w"}));
    }

    #[test]
    fn a_known_event_missing_a_field_is_named_with_its_line() {
        let err = Recorded::decode(
            0,
            &line(r#"{"seq":0,"prev":"x","ts":"t","type":"iteration_start"}"#),
        )
        .unwrap_err();
        assert_eq!((err.line, err.kind.as_str()), (1, "iteration_start"));
        assert!(err.detail.contains("iteration"), "{err}");
    }

    #[test]
    fn a_revoke_without_an_error_writes_no_error_field() {
        let e = Event::CredentialRevoked(CredentialRevoked {
            cause: "halt".into(),
            duration_ms: 3,
            ok: true,
            error: None,
        });
        assert_eq!(
            Value::Object(e.fields().unwrap()),
            serde_json::json!({"cause": "halt", "duration_ms": 3, "ok": true})
        );
    }
}
