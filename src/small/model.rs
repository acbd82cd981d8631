//! The typed plan of a SMALL workspace: its tasks (id, title, steps, acceptance prose, status,
//! dependencies) and which task comes next.

use super::yaml::{Node, Value};

/// A task's state in the plan (SMALL's values, compared lowercase; absent or empty is pending).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pending,
    InProgress,
    Blocked,
    Completed,
}

impl Status {
    /// The state a plan task's `status` text names; None for a value SMALL does not know.
    pub fn parse(text: &str) -> Option<Status> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "pending" => Some(Status::Pending),
            "in_progress" => Some(Status::InProgress),
            "blocked" => Some(Status::Blocked),
            "completed" => Some(Status::Completed),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::InProgress => "in_progress",
            Status::Blocked => "blocked",
            Status::Completed => "completed",
        }
    }
}

/// One task of the plan as the decisions see it (`next_of`, `rules::task_list`, the receipt's
/// `task_plan`): its id, dependencies and state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlannedTask {
    pub id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<String>,
    pub status: Status,
}

/// One task of plan.small.yml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub id: String,
    pub title: String,
    pub steps: Vec<String>,
    /// Prose, never executed. SMALL's reference writes a list of strings: its items are joined
    /// with newlines.
    pub acceptance: Option<String>,
    pub status: Status,
    pub dependencies: Vec<String>,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The id of the task to work on.
    Task(String),
    AllCompleted,
    /// Tasks remain, but none can be worked on (blocked, or waiting on blocked dependencies).
    NoneActionable {
        remaining: Vec<String>,
    },
}

fn strings(node: Option<&Node>) -> Vec<String> {
    node.and_then(Node::items)
        .map(|items| {
            items
                .iter()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The tasks of a plan tree, in file order (entries without a string id are left out; the rules
/// report them).
pub(crate) fn tasks_of(plan: &Node) -> Vec<Task> {
    let Some(items) = plan.get("tasks").and_then(Node::items) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|t| {
            let id = t.get("id")?.as_str()?.to_string();
            let acceptance = match t.get("acceptance") {
                Some(n) if n.items().is_some() => Some(strings(Some(n)).join("\n")),
                Some(n) => n.as_str().map(str::to_string),
                None => None,
            };
            let status = match t.get("status").and_then(Node::value) {
                Some(Value::Str(s)) => Status::parse(s).unwrap_or(Status::Pending),
                _ => Status::Pending,
            };
            Some(Task {
                id,
                title: t
                    .get("title")
                    .and_then(Node::as_str)
                    .unwrap_or_default()
                    .to_string(),
                steps: strings(t.get("steps")),
                acceptance,
                status,
                dependencies: strings(t.get("dependencies")),
            })
        })
        .collect()
}

/// SMALL's next task: the first in_progress one in file order, else the first pending one whose
/// dependencies all exist and are completed.
pub(crate) fn next(tasks: &[Task]) -> Next {
    let planned: Vec<PlannedTask> = tasks
        .iter()
        .map(|t| PlannedTask {
            id: t.id.clone(),
            dependencies: t.dependencies.clone(),
            status: t.status,
        })
        .collect();
    next_of(&planned)
}

/// [`next`] over the plan as the decisions see it (`rules::task_list` replays it from the
/// receipt's `task_plan`).
pub fn next_of(tasks: &[PlannedTask]) -> Next {
    let completed: std::collections::BTreeSet<&str> = tasks
        .iter()
        .filter(|t| t.status == Status::Completed)
        .map(|t| t.id.as_str())
        .collect();
    if let Some(t) = tasks.iter().find(|t| t.status == Status::InProgress) {
        return Next::Task(t.id.clone());
    }
    if let Some(t) = tasks.iter().find(|t| {
        t.status == Status::Pending
            && t.dependencies
                .iter()
                .all(|d| completed.contains(d.as_str()))
    }) {
        return Next::Task(t.id.clone());
    }
    let remaining: Vec<String> = tasks
        .iter()
        .filter(|t| t.status != Status::Completed)
        .map(|t| t.id.clone())
        .collect();
    if remaining.is_empty() {
        Next::AllCompleted
    } else {
        Next::NoneActionable { remaining }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, status: Status, deps: &[&str]) -> Task {
        Task {
            id: id.into(),
            title: id.into(),
            steps: vec![],
            acceptance: None,
            status,
            dependencies: deps.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn next_is_the_first_in_progress_task_before_any_pending_one() {
        let tasks = [
            task("a", Status::Pending, &[]),
            task("b", Status::InProgress, &[]),
        ];
        assert_eq!(next(&tasks), Next::Task("b".into()));
    }

    #[test]
    fn next_skips_a_pending_task_until_its_dependencies_are_completed() {
        let mut tasks = vec![
            task("a", Status::Pending, &["b"]),
            task("b", Status::Pending, &[]),
        ];
        assert_eq!(next(&tasks), Next::Task("b".into()));
        tasks[1].status = Status::Completed;
        assert_eq!(next(&tasks), Next::Task("a".into()));
    }

    #[test]
    fn a_blocked_dependency_leaves_nothing_actionable() {
        let tasks = [
            task("a", Status::Completed, &[]),
            task("b", Status::Blocked, &[]),
            task("c", Status::Pending, &["b"]),
        ];
        assert_eq!(
            next(&tasks),
            Next::NoneActionable {
                remaining: vec!["b".into(), "c".into()]
            }
        );
    }

    #[test]
    fn every_task_completed_is_all_completed() {
        let tasks = [task("a", Status::Completed, &[])];
        assert_eq!(next(&tasks), Next::AllCompleted);
    }

    #[test]
    fn status_is_compared_lowercase_and_empty_is_pending() {
        assert_eq!(Status::parse("In_Progress"), Some(Status::InProgress));
        assert_eq!(Status::parse(""), Some(Status::Pending));
        assert_eq!(Status::parse("done"), None);
    }
}
