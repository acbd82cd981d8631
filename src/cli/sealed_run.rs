//! Where `verify` and `attest` find a sealed run: a run id of the workdir, or a path to a run
//! directory (anything containing a `/`), opened without following a final symlink.

use crate::error::{CmdResult, Failure};
use crate::receipt::store::{fs_failure, StateDir};
use crate::safefs::SafeDir;
use std::path::{Path, PathBuf};

/// Open the run directory named by `target`.
pub fn open(target: &str, workdir: &Path) -> CmdResult<SafeDir> {
    if target.contains('/') {
        return SafeDir::open(&PathBuf::from(target)).map_err(fs_failure);
    }
    let statedir = StateDir::open(&super::operator::absolute_workdir(workdir)?)?;
    let run = statedir.resolve(Some(target))?;
    SafeDir::open(run.path()).map_err(|e| Failure::workspace(e.to_string()))
}
