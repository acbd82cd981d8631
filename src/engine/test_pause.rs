//! Test-only stopping points, compiled into debug builds only (absent from release builds):
//! with `LOOPEXEC_TEST_PAUSE=<point>` and `LOOPEXEC_TEST_PAUSE_MARKER=<file>`, the supervisor
//! reaching that point writes its pid to the file (atomically) and sleeps, so that a test can
//! kill it by pid exactly there (docs/architecture.md, "Test hooks").

/// Between the `halt` line and the seal (`lifecycle::ActiveRun::halt`).
pub(super) const BEFORE_SEAL: &str = "before_seal";

/// How long a paused supervisor waits to be killed before it goes on.
const PAUSE: std::time::Duration = std::time::Duration::from_secs(300);

/// Pause at `point` when the environment asks for it; otherwise return at once.
pub(super) fn at(point: &str) {
    if std::env::var("LOOPEXEC_TEST_PAUSE").ok().as_deref() != Some(point) {
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
