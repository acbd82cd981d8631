//! The halt taxonomy: every reason a loop can stop, and the coarse exit class each maps to.
//!
//! This is the integration contract of SPEC.md §2 (the halt taxonomy table). The string of a reason (`halt_reason` in JSON)
//! and the number of its class (the process exit code) never change within a major version.
//! A reason is only ever produced by the engine from observed state: there is deliberately no
//! `FromStr` for the CLI, so no flag can force one.

use serde::{Deserialize, Serialize};

/// The process exit code of an outcome: the coarse class of a halt reason, or of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitClass {
    Nominal,
    Converged,
    TerminalBlocked,
    IterationCap,
    Integrity,
    OracleUntrusted,
    CheckInadequate,
    ResumableJudgment,
    NoConvergence,
    Budget,
    LivenessDrift,
    Invariant,
    Workspace,
    Execution,
    Internal,
}

impl ExitClass {
    /// The exit code users script against.
    pub const fn code(self) -> i32 {
        match self {
            ExitClass::Nominal => 0,
            ExitClass::Converged => 10,
            ExitClass::TerminalBlocked => 11,
            ExitClass::IterationCap => 12,
            ExitClass::Integrity => 13,
            ExitClass::OracleUntrusted => 14,
            ExitClass::CheckInadequate => 15,
            ExitClass::ResumableJudgment => 16,
            ExitClass::NoConvergence => 17,
            ExitClass::Budget => 18,
            ExitClass::LivenessDrift => 19,
            ExitClass::Invariant => 20,
            ExitClass::Workspace => 30,
            ExitClass::Execution => 40,
            ExitClass::Internal => 50,
        }
    }
}

/// Every halt reason of SPEC.md §2 (those §3 lists are computed, the rest reserved). Serialised as its snake_case string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HaltReason {
    SuccessConditionMet,
    NoActionableTasks,
    HumanRequired,
    MaxIterationsReached,
    BlockedPathModified,
    RewardHackingDetected,
    MetricIntegrityViolation,
    CredentialScopeInvalid,
    ObjectiveUnverified,
    CheckFlaky,
    CheckNotDeterministic,
    CheckHasSideEffects,
    CheckNotHermetic,
    HermeticityViolation,
    CheckInadequate,
    EscalationPending,
    ReviewerRejected,
    NoProgressDetected,
    SameFailureRepeated,
    OscillationDetected,
    SameTestRegressed,
    UnsatisfiableConstraints,
    InfeasibleSuspected,
    BudgetExceeded,
    CostAnomaly,
    HeartbeatStale,
    ModelDriftDetected,
    ComprehensionDebtExceeded,
    ContextBudgetUnsatisfiable,
    InvariantFailed,
    WorkspaceInvalid,
    IsolationUnsatisfiable,
    ExecutionFailure,
    InternalError,
}

impl HaltReason {
    /// Every reason, in contract order (used by docs and by the contract tests).
    pub const ALL: [HaltReason; 34] = [
        HaltReason::SuccessConditionMet,
        HaltReason::NoActionableTasks,
        HaltReason::HumanRequired,
        HaltReason::MaxIterationsReached,
        HaltReason::BlockedPathModified,
        HaltReason::RewardHackingDetected,
        HaltReason::MetricIntegrityViolation,
        HaltReason::CredentialScopeInvalid,
        HaltReason::ObjectiveUnverified,
        HaltReason::CheckFlaky,
        HaltReason::CheckNotDeterministic,
        HaltReason::CheckHasSideEffects,
        HaltReason::CheckNotHermetic,
        HaltReason::HermeticityViolation,
        HaltReason::CheckInadequate,
        HaltReason::EscalationPending,
        HaltReason::ReviewerRejected,
        HaltReason::NoProgressDetected,
        HaltReason::SameFailureRepeated,
        HaltReason::OscillationDetected,
        HaltReason::SameTestRegressed,
        HaltReason::UnsatisfiableConstraints,
        HaltReason::InfeasibleSuspected,
        HaltReason::BudgetExceeded,
        HaltReason::CostAnomaly,
        HaltReason::HeartbeatStale,
        HaltReason::ModelDriftDetected,
        HaltReason::ComprehensionDebtExceeded,
        HaltReason::ContextBudgetUnsatisfiable,
        HaltReason::InvariantFailed,
        HaltReason::WorkspaceInvalid,
        HaltReason::IsolationUnsatisfiable,
        HaltReason::ExecutionFailure,
        HaltReason::InternalError,
    ];

    /// The coarse class, i.e. the process exit code, of this reason.
    pub const fn class(self) -> ExitClass {
        use HaltReason::*;
        match self {
            SuccessConditionMet => ExitClass::Converged,
            NoActionableTasks | HumanRequired => ExitClass::TerminalBlocked,
            MaxIterationsReached => ExitClass::IterationCap,
            BlockedPathModified
            | RewardHackingDetected
            | MetricIntegrityViolation
            | CredentialScopeInvalid
            | ObjectiveUnverified => ExitClass::Integrity,
            CheckFlaky
            | CheckNotDeterministic
            | CheckHasSideEffects
            | CheckNotHermetic
            | HermeticityViolation => ExitClass::OracleUntrusted,
            CheckInadequate => ExitClass::CheckInadequate,
            EscalationPending | ReviewerRejected => ExitClass::ResumableJudgment,
            NoProgressDetected
            | SameFailureRepeated
            | OscillationDetected
            | SameTestRegressed
            | UnsatisfiableConstraints
            | InfeasibleSuspected => ExitClass::NoConvergence,
            BudgetExceeded | CostAnomaly => ExitClass::Budget,
            HeartbeatStale
            | ModelDriftDetected
            | ComprehensionDebtExceeded
            | ContextBudgetUnsatisfiable => ExitClass::LivenessDrift,
            InvariantFailed => ExitClass::Invariant,
            WorkspaceInvalid | IsolationUnsatisfiable => ExitClass::Workspace,
            ExecutionFailure => ExitClass::Execution,
            InternalError => ExitClass::Internal,
        }
    }

    /// The contract string of this reason, e.g. `success_condition_met`.
    pub const fn as_str(self) -> &'static str {
        use HaltReason::*;
        match self {
            SuccessConditionMet => "success_condition_met",
            NoActionableTasks => "no_actionable_tasks",
            HumanRequired => "human_required",
            MaxIterationsReached => "max_iterations_reached",
            BlockedPathModified => "blocked_path_modified",
            RewardHackingDetected => "reward_hacking_detected",
            MetricIntegrityViolation => "metric_integrity_violation",
            CredentialScopeInvalid => "credential_scope_invalid",
            ObjectiveUnverified => "objective_unverified",
            CheckFlaky => "check_flaky",
            CheckNotDeterministic => "check_not_deterministic",
            CheckHasSideEffects => "check_has_side_effects",
            CheckNotHermetic => "check_not_hermetic",
            HermeticityViolation => "hermeticity_violation",
            CheckInadequate => "check_inadequate",
            EscalationPending => "escalation_pending",
            ReviewerRejected => "reviewer_rejected",
            NoProgressDetected => "no_progress_detected",
            SameFailureRepeated => "same_failure_repeated",
            OscillationDetected => "oscillation_detected",
            SameTestRegressed => "same_test_regressed",
            UnsatisfiableConstraints => "unsatisfiable_constraints",
            InfeasibleSuspected => "infeasible_suspected",
            BudgetExceeded => "budget_exceeded",
            CostAnomaly => "cost_anomaly",
            HeartbeatStale => "heartbeat_stale",
            ModelDriftDetected => "model_drift_detected",
            ComprehensionDebtExceeded => "comprehension_debt_exceeded",
            ContextBudgetUnsatisfiable => "context_budget_unsatisfiable",
            InvariantFailed => "invariant_failed",
            WorkspaceInvalid => "workspace_invalid",
            IsolationUnsatisfiable => "isolation_unsatisfiable",
            ExecutionFailure => "execution_failure",
            InternalError => "internal_error",
        }
    }
}

impl std::fmt::Display for HaltReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_serialises_to_its_contract_string() {
        for reason in HaltReason::ALL {
            let json = serde_json::to_value(reason).unwrap();
            assert_eq!(json, serde_json::Value::String(reason.as_str().to_string()));
        }
    }

    #[test]
    fn exit_codes_match_the_contract_table() {
        let expect = [
            ("success_condition_met", 10),
            ("no_actionable_tasks", 11),
            ("human_required", 11),
            ("max_iterations_reached", 12),
            ("blocked_path_modified", 13),
            ("objective_unverified", 13),
            ("check_flaky", 14),
            ("hermeticity_violation", 14),
            ("check_inadequate", 15),
            ("escalation_pending", 16),
            ("no_progress_detected", 17),
            ("infeasible_suspected", 17),
            ("budget_exceeded", 18),
            ("heartbeat_stale", 19),
            ("context_budget_unsatisfiable", 19),
            ("invariant_failed", 20),
            ("workspace_invalid", 30),
            ("isolation_unsatisfiable", 30),
            ("execution_failure", 40),
            ("internal_error", 50),
        ];
        for (name, code) in expect {
            let reason = HaltReason::ALL.iter().find(|r| r.as_str() == name).unwrap();
            assert_eq!(reason.class().code(), code, "{name}");
        }
    }
}
