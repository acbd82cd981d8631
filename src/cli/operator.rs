//! What the commands take from the operator's side of the machine, each read one way for all of
//! them: the workdir (absolute, an existing directory), a policy named on a flag (as the source a
//! run pins), and the operator key that endorses run and probe keys. `run`, `doctor`,
//! `probe-check` and the other commands use these; no command reaches into another for them.

use crate::error::{CmdResult, Failure};
use crate::receipt::keys::{default_key_dir, OperatorKey, PRIVATE_KEY_FILE};
use std::path::{Path, PathBuf};

/// A policy flag as a pinned source: `builtin:<name>` stays, a path becomes absolute.
pub fn policy_source(raw: &Path) -> String {
    let text = raw.to_string_lossy();
    if text.starts_with("builtin:") {
        return text.into_owned();
    }
    std::path::absolute(raw)
        .unwrap_or_else(|_| raw.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// The operator key that endorses run keys: `--operator-key`, or operator.key in the key dir.
/// There is no default key: without one, no run starts.
pub fn load_operator_key(explicit: Option<&Path>) -> CmdResult<OperatorKey> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => default_key_dir()
            .map_err(super::keygen::key_failure)?
            .join(PRIVATE_KEY_FILE),
    };
    if explicit.is_none() && std::fs::symlink_metadata(&path).is_err() {
        return Err(Failure::usage(format!(
            "no operator key at {}: every run's receipt is endorsed by the operator's key",
            path.display()
        ))
        .with_hint("create one with `loopexec keygen`, or pass --operator-key FILE"));
    }
    OperatorKey::load(&path).map_err(super::keygen::key_failure)
}

/// The absolute workdir, which must be an existing directory.
pub fn absolute_workdir(raw: &Path) -> CmdResult<PathBuf> {
    let abs = std::path::absolute(raw).map_err(|e| Failure::io(raw, &e))?;
    match std::fs::metadata(&abs) {
        Ok(m) if m.is_dir() => Ok(abs),
        Ok(_) => Err(Failure::workspace(format!(
            "workdir {}: not a directory",
            abs.display()
        ))),
        Err(e) => Err(
            Failure::workspace(format!("workdir {}: {e}", abs.display()))
                .with_hint("check --workdir"),
        ),
    }
}
