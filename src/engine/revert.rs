//! Revert-to-best for the detached workspace: the agent's layer (the overlay's upper directory)
//! is copied aside each time the ratchet accepts an iteration (`<run>/workspace/accepted`, in the
//! run's workspace directory `copies`: beside the upper directory, or beside the image of a
//! capped workspace, so the copies never take the agent's room), and an
//! iteration the ratchet rejects is undone by putting that copy back, so the next agent call, and
//! the delivery at the halt, start from the last accepted tree exactly (the caller re-snapshots
//! and compares tree ids).
//!
//! The layer of a rejected iteration is kept too (`<run>/workspace/rejected-NNNN`, replacing the
//! one kept before, so at most one such copy exists), so that the operator can accept it by hand
//! (`ratchet --accept N`, only the last judged iteration) and a resumed run start from it.
//!
//! The copy is `cp -a` (no symlink is followed; whiteouts, opaque-directory xattrs, modes and, as
//! root, owners are kept). It runs only after the agent zone has ended, on a layer the snapshot
//! already bounded; the entries of the rejected layer are removed through descriptors.

use crate::workspace::fsat;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The name of the accepted copy next to the upper directory.
const ACCEPTED: &str = "accepted";

fn accepted_of(copies: &Path) -> PathBuf {
    copies.join(ACCEPTED)
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let out = Command::new("cp")
        .arg("-a")
        .arg("--no-target-directory")
        .arg(from)
        .arg(to)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cp: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "copying {} to {}: cp {}: {}",
        from.display(),
        to.display(),
        out.status,
        crate::inert::inert(stderr.trim())
    ))
}

/// Remove `name` beneath `dir` (nothing when it does not exist).
fn remove(dir: &Path, name: &str) -> Result<(), String> {
    let fd = fsat::open_dir_path(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    match fsat::remove_tree(fd.as_raw_fd(), name.as_bytes()) {
        Ok(()) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => Err(format!("removing {}: {e}", dir.join(name).display())),
    }
}

/// The name of the kept layer of rejected iteration `n`.
fn rejected_name(n: u64) -> String {
    format!("{REJECTED}{n:04}")
}
const REJECTED: &str = "rejected-";

/// Keep the agent's layer of rejected iteration `n` (before it is reverted), replacing the
/// layer kept of an earlier rejection.
pub fn keep_rejected(upper: &Path, copies: &Path, n: u64) -> Result<(), String> {
    let parent = copies;
    let fd = fsat::open_dir_path(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    for name in fsat::list(fd.as_raw_fd()).map_err(|e| format!("{}: {e}", parent.display()))? {
        if name.starts_with(REJECTED.as_bytes()) {
            fsat::remove_tree(fd.as_raw_fd(), &name)
                .map_err(|e| format!("removing from {}: {e}", parent.display()))?;
        }
    }
    copy_tree(upper, &parent.join(rejected_name(n)))
}

/// Whether the layer of rejected iteration `n` is kept in the run's workspace directory
/// (`<run>/workspace`).
pub fn rejected_kept(workspace_dir: &Path, n: u64) -> bool {
    std::fs::symlink_metadata(workspace_dir.join(rejected_name(n))).is_ok_and(|m| m.is_dir())
}

/// Put the kept layer of rejected iteration `n` in place of the agent's.
pub fn restore_rejected(upper: &Path, copies: &Path, n: u64) -> Result<(), String> {
    let parent = copies;
    if !rejected_kept(parent, n) {
        return Err(format!(
            "the layer of iteration {n} is not kept in {}",
            parent.display()
        ));
    }
    replace_with(upper, &parent.join(rejected_name(n)))
}

/// Empty the agent's layer.
fn clear(upper: &Path) -> Result<(), String> {
    let fd = fsat::open_dir_path(upper).map_err(|e| format!("{}: {e}", upper.display()))?;
    for name in fsat::list(fd.as_raw_fd()).map_err(|e| format!("{}: {e}", upper.display()))? {
        fsat::remove_tree(fd.as_raw_fd(), &name)
            .map_err(|e| format!("removing from {}: {e}", upper.display()))?;
    }
    Ok(())
}

/// Empty the agent's layer and copy `from` into it.
fn replace_with(upper: &Path, from: &Path) -> Result<(), String> {
    clear(upper)?;
    copy_tree(from, upper)
}

/// Keep the agent's layer as the accepted one (replacing the copy of an earlier acceptance).
pub fn keep_accepted(upper: &Path, copies: &Path) -> Result<(), String> {
    let accepted = accepted_of(copies);
    remove(copies, ACCEPTED)?;
    copy_tree(upper, &accepted)
}

/// Put the accepted layer back in place of the agent's (an empty layer, t0, before any
/// acceptance).
pub fn restore_accepted(upper: &Path, copies: &Path) -> Result<(), String> {
    let accepted = accepted_of(copies);
    match std::fs::symlink_metadata(&accepted) {
        Ok(meta) if meta.is_dir() => replace_with(upper, &accepted),
        Ok(_) => Err(format!("{}: not a directory", accepted.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => clear(upper),
        Err(e) => Err(format!("{}: {e}", accepted.display())),
    }
}
