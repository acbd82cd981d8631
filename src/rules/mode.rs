//! The loop's mode: what it drives towards. The decision routes through it.

use serde::{Deserialize, Serialize};

/// What the loop drives towards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Run the agent, then the check, until the check passes or a halt stops the run.
    #[default]
    #[value(name = "check_fixpoint")]
    CheckFixpoint,
    /// Work through a SMALL plan (`.small/`) task by task, each task its own `check_fixpoint`
    /// run with the task's acceptance check (docs/task-list.md).
    #[value(name = "task_list")]
    TaskList,
}

impl Mode {
    /// The mode a receipt names (`run_start.mode`), the inverse of [`Mode::as_str`].
    pub fn of_name(name: &str) -> Option<Mode> {
        [Mode::CheckFixpoint, Mode::TaskList]
            .into_iter()
            .find(|m| m.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::CheckFixpoint => "check_fixpoint",
            Mode::TaskList => super::task_list::MODE_TASK_LIST,
        }
    }

    pub fn is_check_fixpoint(&self) -> bool {
        *self == Mode::CheckFixpoint
    }
}
