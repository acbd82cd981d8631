//! The task_list mode's decisions, over a plan's tasks and the outcomes recorded so far: which
//! task comes next, the halt when none does, and what a task's own run coming to a halt means
//! for the plan. Pure: the live loop decides with them over the SMALL files, `verify` over the
//! `task_plan` and `task_checkpoint` events of the receipt.
//!
//! - The next task is the first `in_progress` one in plan order, else the first `pending` one
//!   whose dependencies all exist and are `completed` (docs/task-list.md).
//! - Every task completed: `success_condition_met`. Tasks remain but none can start (blocked, or
//!   waiting on a blocked dependency): `no_actionable_tasks`. An unknown dependency or a cycle:
//!   `invariant_failed`, naming it.
//! - A task's run that converged completes the task. One that ran out of its iteration cap or
//!   stopped converging blocks the task, and the loop moves on to what is still actionable.
//!   Every other halt of a task's run (a guard, a budget, a human needed, the machinery) halts
//!   the whole loop with that reason, exactly as in `check_fixpoint` mode.

use crate::halt::HaltReason;
use std::collections::{BTreeMap, BTreeSet};

/// The `run_start.mode` of a task_list run.
pub const MODE_TASK_LIST: &str = "task_list";

pub use crate::small::{PlannedTask, Status as TaskState};

/// What comes next in the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Work on this task (its id).
    Task(String),
    /// Every task is completed.
    AllCompleted,
    /// Tasks remain, none can start: the ids of those not completed.
    NoneActionable { remaining: Vec<String> },
    /// The plan's dependencies are not a DAG over its own tasks.
    Invalid(String),
}

/// What a task's run coming to `reason` means for the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEnd {
    /// The task's acceptance check converged: the task is completed.
    Completed,
    /// The task did not converge within its own limits: blocked, the loop goes on.
    Blocked,
    /// The whole loop halts with the task run's reason.
    HaltsTheLoop,
}

/// The meaning of a task run's halt for the plan.
pub fn task_end(reason: HaltReason) -> TaskEnd {
    use HaltReason::*;
    match reason {
        SuccessConditionMet => TaskEnd::Completed,
        MaxIterationsReached
        | NoProgressDetected
        | SameFailureRepeated
        | OscillationDetected
        | SameTestRegressed
        | UnsatisfiableConstraints
        | InfeasibleSuspected => TaskEnd::Blocked,
        _ => TaskEnd::HaltsTheLoop,
    }
}

/// An unknown dependency or a dependency cycle, named; None when the dependencies form a DAG
/// over the plan's own tasks. Iterative (no recursion: a hostile plan may be deep).
pub fn dependency_problem(tasks: &[PlannedTask]) -> Option<String> {
    let index: BTreeMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    for t in tasks {
        if let Some(dep) = t
            .dependencies
            .iter()
            .find(|d| !index.contains_key(d.as_str()))
        {
            return Some(format!(
                "task {:?} depends on {dep:?}, which is not a task of the plan",
                t.id
            ));
        }
    }
    // Colours: 0 unvisited, 1 on the current path, 2 done.
    let mut colour = vec![0u8; tasks.len()];
    for root in 0..tasks.len() {
        if colour[root] != 0 {
            continue;
        }
        // (task, next dependency to look at)
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        colour[root] = 1;
        while let Some(&mut (task, ref mut next_dep)) = path.last_mut() {
            let deps = &tasks[task].dependencies;
            if *next_dep == deps.len() {
                colour[task] = 2;
                path.pop();
                continue;
            }
            let dep = index[deps[*next_dep].as_str()];
            *next_dep += 1;
            match colour[dep] {
                0 => {
                    colour[dep] = 1;
                    path.push((dep, 0));
                }
                1 => {
                    let start = path.iter().position(|(t, _)| *t == dep).unwrap_or(0);
                    let mut cycle: Vec<&str> = path[start..]
                        .iter()
                        .map(|(t, _)| tasks[*t].id.as_str())
                        .collect();
                    cycle.push(tasks[dep].id.as_str());
                    return Some(format!(
                        "the plan's dependencies form a cycle: {}",
                        cycle.join(" -> ")
                    ));
                }
                _ => {}
            }
        }
    }
    None
}

/// The next task of the plan, or why there is none.
pub fn next(tasks: &[PlannedTask]) -> Next {
    match dependency_problem(tasks) {
        Some(problem) => Next::Invalid(problem),
        None => next_of(tasks),
    }
}

/// The next task of a plan whose dependencies are known to form a DAG over its own tasks
/// (SMALL's rule, `small::next_of`).
pub fn next_of(tasks: &[PlannedTask]) -> Next {
    match crate::small::next_of(tasks) {
        crate::small::Next::Task(id) => Next::Task(id),
        crate::small::Next::AllCompleted => Next::AllCompleted,
        crate::small::Next::NoneActionable { remaining } => Next::NoneActionable { remaining },
    }
}

/// The halt `next` comes to, when it comes to one.
pub fn halt_of(next: &Next) -> Option<(HaltReason, String)> {
    match next {
        Next::Task(_) => None,
        Next::AllCompleted => Some((
            HaltReason::SuccessConditionMet,
            "every task of the plan is completed, each by its own acceptance check".into(),
        )),
        Next::NoneActionable { remaining } => Some((
            HaltReason::NoActionableTasks,
            format!(
                "no task can start: {} remain ({}), each blocked or waiting on a blocked task",
                remaining.len(),
                remaining.join(", ")
            ),
        )),
        Next::Invalid(problem) => Some((HaltReason::InvariantFailed, problem.clone())),
    }
}

/// The plan after a task's checkpoint: its status set to `state`.
pub fn with_state(tasks: &[PlannedTask], id: &str, state: TaskState) -> Vec<PlannedTask> {
    tasks
        .iter()
        .map(|t| PlannedTask {
            status: if t.id == id { state } else { t.status },
            ..t.clone()
        })
        .collect()
}

/// Whether a task_list run's recorded halt follows from its plan and its checkpoints, replayed
/// with the rules above: every task started was the plan's next one, every checkpoint's outcome
/// is what its task run's halt gives, and the halt is the one the plan comes to (a task run's
/// own halt, when it halts the loop). `pinned`: the tasks the run has an acceptance check for.
/// `Ok(Some(why))`: accepted as recorded without replay (a supervisor failure, or a halt over a
/// plan that did not read, which the receipt does not hold), saying why.
pub fn derive(
    history: &crate::receipt::history::History,
    recorded: HaltReason,
    pinned: &BTreeSet<String>,
) -> Result<Option<String>, (u64, String, String)> {
    let supervisor = matches!(
        recorded,
        HaltReason::InternalError
            | HaltReason::WorkspaceInvalid
            | HaltReason::IsolationUnsatisfiable
            | HaltReason::ExecutionFailure
    );
    let Some(first) = &history.tasks.first else {
        return match recorded {
            HaltReason::InvariantFailed => Ok(Some(
                "the plan did not read at the start (the receipt does not hold the files)".into(),
            )),
            _ if supervisor => Ok(Some("a supervisor failure before the plan was read".into())),
            _ => Err((0, "halt".into(), "no task_plan is recorded".into())),
        };
    };
    let mut tasks = first.tasks.clone();
    let mut last_end = None;
    for (i, started) in history.tasks.started.iter().enumerate() {
        let n = i as u64 + 1;
        if last_end == Some(TaskEnd::HaltsTheLoop) {
            return Err((
                n,
                "task_started".into(),
                format!(
                    "task {} was started after a task run that halts the loop",
                    crate::inert::inert(&started.task)
                ),
            ));
        }
        match next(&tasks) {
            Next::Task(id) if id == started.task => {}
            other => {
                return Err((
                    n,
                    "task_started".into(),
                    format!(
                        "task {} was started, but the plan's next step is {}",
                        crate::inert::inert(&started.task),
                        describe(&other)
                    ),
                ))
            }
        }
        tasks = with_state(&tasks, &started.task, TaskState::InProgress);
        let Some(c) = history
            .tasks
            .checkpoints
            .iter()
            .find(|c| c.run_id == started.run_id)
        else {
            // The last task's run was under way when the run halted: only a supervisor failure,
            // or a checkpoint that could not be written (`invariant_failed`), ends it there.
            if i + 1 == history.tasks.started.len()
                && (supervisor || recorded == HaltReason::InvariantFailed)
            {
                return Ok(Some(format!(
                    "the halt came while task {}'s run was under way (its checkpoint is not recorded)",
                    crate::inert::inert(&started.task)
                )));
            }
            return Err((
                n,
                "task_checkpoint".into(),
                format!(
                    "task {} was started but never checkpointed",
                    crate::inert::inert(&started.task)
                ),
            ));
        };
        let end = task_end(c.run_halt);
        let expected = match end {
            TaskEnd::Completed => TaskState::Completed,
            TaskEnd::Blocked | TaskEnd::HaltsTheLoop => TaskState::Blocked,
        };
        if c.task != started.task || c.outcome != expected {
            return Err((
                n,
                "task_checkpoint".into(),
                format!(
                    "the checkpoint of task {} records {}, but its run's halt {} gives {}",
                    crate::inert::inert(&c.task),
                    c.outcome.as_str(),
                    c.run_halt.as_str(),
                    expected.as_str()
                ),
            ));
        }
        tasks = with_state(&tasks, &c.task, expected);
        last_end = Some(end);
    }
    if let (Some(TaskEnd::HaltsTheLoop), Some(c)) = (last_end, history.tasks.checkpoints.last()) {
        return match recorded == c.run_halt {
            true => Ok(None),
            false => Err((
                history.tasks.started.len() as u64,
                "halt".into(),
                c.run_halt.as_str().into(),
            )),
        };
    }
    let derived = match next(&tasks) {
        Next::Task(id) if !pinned.contains(&id) => HaltReason::CheckInadequate,
        Next::Task(id) => {
            return match supervisor || recorded == HaltReason::InvariantFailed {
                true => Ok(Some(format!(
                    "task {} was next when the run halted {} (the plan's files are not in the receipt)",
                    crate::inert::inert(&id),
                    recorded.as_str()
                ))),
                false => Err((history.tasks.started.len() as u64, "halt".into(), "continue".into())),
            };
        }
        other => match halt_of(&other) {
            Some((reason, _)) => reason,
            None => HaltReason::InternalError,
        },
    };
    match derived == recorded {
        true => Ok(None),
        false if supervisor => Ok(Some("a supervisor failure, accepted as recorded".into())),
        false => Err((
            history.tasks.started.len() as u64,
            "halt".into(),
            derived.as_str().into(),
        )),
    }
}

fn describe(next: &Next) -> String {
    match next {
        Next::Task(id) => format!("task {}", crate::inert::inert(id)),
        Next::AllCompleted => "none (every task is completed)".into(),
        Next::NoneActionable { .. } => "none (no task is actionable)".into(),
        Next::Invalid(why) => format!("none ({why})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, deps: &[&str], status: TaskState) -> PlannedTask {
        PlannedTask {
            id: id.into(),
            dependencies: deps.iter().map(|d| d.to_string()).collect(),
            status,
        }
    }
    use TaskState::*;

    #[test]
    fn the_first_in_progress_task_comes_before_any_pending_one() {
        let plan = [task("a", &[], Pending), task("b", &[], InProgress)];
        assert_eq!(next(&plan), Next::Task("b".into()));
    }

    #[test]
    fn a_pending_task_waits_until_its_dependencies_are_completed() {
        let plan = [task("a", &["b"], Pending), task("b", &[], Pending)];
        assert_eq!(next(&plan), Next::Task("b".into()));
        let plan = with_state(&plan, "b", Completed);
        assert_eq!(next(&plan), Next::Task("a".into()));
    }

    #[test]
    fn a_blocked_dependency_leaves_an_independent_task_actionable() {
        let plan = [
            task("a", &[], Blocked),
            task("b", &["a"], Pending),
            task("c", &[], Pending),
        ];
        assert_eq!(next(&plan), Next::Task("c".into()));
    }

    #[test]
    fn only_blocked_work_left_is_no_actionable_tasks_naming_what_remains() {
        let plan = [
            task("a", &[], Blocked),
            task("b", &["a"], Pending),
            task("c", &[], Completed),
        ];
        let n = next(&plan);
        assert_eq!(
            n,
            Next::NoneActionable {
                remaining: vec!["a".into(), "b".into()]
            }
        );
        assert_eq!(
            halt_of(&n).map(|h| h.0),
            Some(HaltReason::NoActionableTasks)
        );
    }

    #[test]
    fn every_task_completed_is_success() {
        let plan = [task("a", &[], Completed), task("b", &["a"], Completed)];
        assert_eq!(
            halt_of(&next(&plan)).map(|h| h.0),
            Some(HaltReason::SuccessConditionMet)
        );
    }

    #[test]
    fn an_unknown_dependency_is_named() {
        let plan = [task("a", &["ghost"], Pending)];
        let Next::Invalid(why) = next(&plan) else {
            panic!("expected invalid")
        };
        assert_eq!(
            why,
            "task \"a\" depends on \"ghost\", which is not a task of the plan"
        );
    }

    #[test]
    fn a_cycle_is_named_along_its_path() {
        let plan = [
            task("a", &["b"], Pending),
            task("b", &["c"], Pending),
            task("c", &["a"], Pending),
            task("d", &[], Pending),
        ];
        assert_eq!(
            next(&plan),
            Next::Invalid("the plan's dependencies form a cycle: a -> b -> c -> a".into())
        );
    }

    #[test]
    fn a_deep_chain_of_dependencies_is_walked_without_recursion() {
        let n = 200_000;
        let plan: Vec<PlannedTask> = (0..n)
            .map(|i| {
                let deps = if i + 1 < n {
                    vec![format!("t{}", i + 1)]
                } else {
                    vec![]
                };
                PlannedTask {
                    id: format!("t{i}"),
                    dependencies: deps,
                    status: Pending,
                }
            })
            .collect();
        assert_eq!(next(&plan), Next::Task(format!("t{}", n - 1)));
    }

    #[test]
    fn a_task_run_that_ran_out_of_iterations_blocks_its_task_and_a_guard_halts_the_loop() {
        assert_eq!(
            task_end(HaltReason::SuccessConditionMet),
            TaskEnd::Completed
        );
        assert_eq!(task_end(HaltReason::MaxIterationsReached), TaskEnd::Blocked);
        assert_eq!(task_end(HaltReason::NoProgressDetected), TaskEnd::Blocked);
        assert_eq!(
            task_end(HaltReason::MetricIntegrityViolation),
            TaskEnd::HaltsTheLoop
        );
        assert_eq!(task_end(HaltReason::BudgetExceeded), TaskEnd::HaltsTheLoop);
    }
}

#[cfg(test)]
mod derive_tests {
    use super::*;
    use crate::receipt::events::{TaskCheckpointRecord, TaskPlanRecord, TaskStartedRecord};
    use crate::receipt::history::History;

    fn plan() -> History {
        let mut h = History::default();
        h.tasks.first = Some(TaskPlanRecord {
            tasks: vec![
                PlannedTask {
                    id: "a".into(),
                    dependencies: vec![],
                    status: TaskState::Pending,
                },
                PlannedTask {
                    id: "b".into(),
                    dependencies: vec!["a".into()],
                    status: TaskState::Pending,
                },
            ],
            replay_id: "0".repeat(64),
            small_sha256: "0".repeat(64),
            commit: "0".repeat(40),
        });
        h
    }

    fn ran(h: &mut History, task: &str, k: usize, halt: HaltReason, outcome: TaskState) {
        let run_id = format!("r.t{k}");
        h.tasks.started.push(TaskStartedRecord {
            task: task.into(),
            run_id: run_id.clone(),
            base_commit: None,
        });
        h.tasks.checkpoints.push(TaskCheckpointRecord {
            task: task.into(),
            run_id,
            outcome,
            run_halt: halt,
            run_exit_code: halt.class().code(),
            run_receipt_sha256: "0".repeat(64),
            tree: None,
            commit: None,
            small_sha256: "0".repeat(64),
        });
    }

    fn pinned() -> BTreeSet<String> {
        ["a".to_string(), "b".to_string()].into_iter().collect()
    }

    #[test]
    fn every_task_converged_derives_success() {
        let mut h = plan();
        ran(
            &mut h,
            "a",
            1,
            HaltReason::SuccessConditionMet,
            TaskState::Completed,
        );
        ran(
            &mut h,
            "b",
            2,
            HaltReason::SuccessConditionMet,
            TaskState::Completed,
        );
        assert_eq!(
            derive(&h, HaltReason::SuccessConditionMet, &pinned()),
            Ok(None)
        );
    }

    #[test]
    fn a_success_recorded_over_a_blocked_task_does_not_follow() {
        let mut h = plan();
        ran(
            &mut h,
            "a",
            1,
            HaltReason::MaxIterationsReached,
            TaskState::Blocked,
        );
        assert_eq!(
            derive(&h, HaltReason::SuccessConditionMet, &pinned()),
            Err((1, "halt".into(), "no_actionable_tasks".into()))
        );
        assert_eq!(
            derive(&h, HaltReason::NoActionableTasks, &pinned()),
            Ok(None)
        );
    }

    #[test]
    fn a_checkpoint_calling_a_task_completed_whose_run_ran_out_of_iterations_does_not_follow() {
        let mut h = plan();
        ran(
            &mut h,
            "a",
            1,
            HaltReason::MaxIterationsReached,
            TaskState::Completed,
        );
        ran(
            &mut h,
            "b",
            2,
            HaltReason::SuccessConditionMet,
            TaskState::Completed,
        );
        let Err((at, judgement, _)) = derive(&h, HaltReason::SuccessConditionMet, &pinned()) else {
            panic!("a forged checkpoint was accepted")
        };
        assert_eq!((at, judgement.as_str()), (1, "task_checkpoint"));
    }

    #[test]
    fn a_task_started_out_of_plan_order_does_not_follow() {
        let mut h = plan();
        ran(
            &mut h,
            "b",
            1,
            HaltReason::SuccessConditionMet,
            TaskState::Completed,
        );
        let Err((at, judgement, _)) = derive(&h, HaltReason::SuccessConditionMet, &pinned()) else {
            panic!("b ran before its dependency and was accepted")
        };
        assert_eq!((at, judgement.as_str()), (1, "task_started"));
    }

    #[test]
    fn a_task_run_halted_by_a_guard_gives_the_loop_its_halt() {
        let mut h = plan();
        ran(
            &mut h,
            "a",
            1,
            HaltReason::MetricIntegrityViolation,
            TaskState::Blocked,
        );
        assert_eq!(
            derive(&h, HaltReason::MetricIntegrityViolation, &pinned()),
            Ok(None)
        );
        assert_eq!(
            derive(&h, HaltReason::NoActionableTasks, &pinned()),
            Err((1, "halt".into(), "metric_integrity_violation".into()))
        );
    }

    #[test]
    fn the_next_task_without_a_pinned_check_derives_check_inadequate() {
        let mut h = plan();
        ran(
            &mut h,
            "a",
            1,
            HaltReason::SuccessConditionMet,
            TaskState::Completed,
        );
        let only_a: BTreeSet<String> = ["a".to_string()].into_iter().collect();
        assert_eq!(derive(&h, HaltReason::CheckInadequate, &only_a), Ok(None));
    }
}
