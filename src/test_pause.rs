//! Test-only stopping points, compiled into debug builds only (absent from release builds):
//! with `LOOPEXEC_TEST_PAUSE=<point>` and `LOOPEXEC_TEST_PAUSE_MARKER=<file>`, the supervisor
//! reaching that point writes its pid to the file (atomically) and sleeps, so that a test can
//! kill it by pid exactly there (docs/architecture.md, "Test hooks"; the crash trials,
//! tests/crash_trials.rs). A crate-level module: the receipt's writer has a point too, and it
//! sits below the engine.

/// Between the `halt` line and the seal (`engine::lifecycle::ActiveRun::halt`).
pub const BEFORE_SEAL: &str = "before_seal";
/// After the agent's step was snapshotted, before the iteration's check (`engine::iteration`).
pub const BEFORE_CHECK: &str = "before_check";
/// After a green check was recorded, before its first confirmation rerun (`engine::confirm`).
pub const BEFORE_CONFIRMATION: &str = "before_confirmation";
/// During the delivery: the commit and the patch written, the branch not yet
/// (`workspace::deliver`).
pub const BEFORE_BRANCH: &str = "before_branch";
/// During the delivery: the branch written, the `halt` line that names it not yet.
pub const AFTER_BRANCH: &str = "after_branch";
/// Half of a `check_result` line written and synced, the rest not (`receipt::chain`): the torn
/// final line a resume cuts off.
pub const MID_APPEND: &str = "mid_append";

/// task_list mode: a task's run sealed, its checkpoint not yet written (`engine::task_list`).
pub const BEFORE_CHECKPOINT: &str = "before_checkpoint";

/// How long a paused supervisor waits to be killed before it goes on.
const PAUSE: std::time::Duration = std::time::Duration::from_secs(300);

/// Whether the environment asks to pause at `point`.
pub fn armed(point: &str) -> bool {
    std::env::var("LOOPEXEC_TEST_PAUSE").ok().as_deref() == Some(point)
        && std::env::var_os("LOOPEXEC_TEST_PAUSE_MARKER").is_some()
}

/// Pause at `point` when the environment asks for it; otherwise return at once.
pub fn at(point: &str) {
    if !armed(point) {
        return;
    }
    let Some(marker) = std::env::var_os("LOOPEXEC_TEST_PAUSE_MARKER").map(std::path::PathBuf::from)
    else {
        return;
    };
    let partial = marker.with_extension("partial");
    let written = std::fs::write(&partial, format!("{}\n", std::process::id()))
        .and_then(|_| std::fs::rename(&partial, &marker));
    if let Err(e) = written {
        tracing::warn!("test pause {point}: writing {}: {e}", marker.display());
        return;
    }
    std::thread::sleep(PAUSE);
}
