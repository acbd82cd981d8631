//! Protected paths of writable grants (step 7 of docs/zones.md, "The native zone's setup
//! sequence"): found without following symlinks, a missing one held by an empty placeholder
//! directory (recorded in the registry of `placeholders.rs`, removed at teardown), a symlinked one
//! refused. Also used by backends that mount the holds themselves.

use crate::error::SandboxError;
use crate::placeholders::{self, Placeholders};
use crate::sys;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// The placeholders a zone holds; released (removed unless another live zone holds them) when
/// dropped.
pub struct ProtectedPlaceholders(pub(crate) Placeholders);

/// What a backend that mounts protected paths itself must hold for a zone.
pub struct ProtectedHolds {
    /// (root, sub-path) pairs to bind read-only (parents pinned).
    pub protected: Vec<(PathBuf, PathBuf)>,
    /// Paths to hide: the policy's, plus the placeholder registry when a grant contains it (and
    /// the zone's uid could enter it).
    pub hidden: Vec<PathBuf>,
    pub placeholders: ProtectedPlaceholders,
}

/// Step 7, also for a backend that mounts the holds itself: placeholders
/// made (and recorded, so that a killed supervisor's are collected) for missing ones, the
/// registry shielded, a symlinked protected path refused, exactly as for a native zone.
pub fn hold_protected_paths(
    read_only: &[PathBuf],
    rw: &[PathBuf],
    protected: &[PathBuf],
    hidden: &[PathBuf],
) -> Result<ProtectedHolds, SandboxError> {
    hold_protected_paths_for(None, read_only, rw, protected, hidden)
}

/// [`hold_protected_paths`] for a zone whose processes run as `zone_uid` (None: not known, the
/// registry is then hidden whenever a grant contains it).
pub(crate) fn hold_protected_paths_for(
    zone_uid: Option<u32>,
    read_only: &[PathBuf],
    rw: &[PathBuf],
    protected: &[PathBuf],
    hidden: &[PathBuf],
) -> Result<ProtectedHolds, SandboxError> {
    let mut held = placeholders::open();
    let mut pairs = hold_sub_paths(rw, protected, &mut held)?;
    let mut hidden = hidden.to_vec();
    placeholders::shield_registry(&held, zone_uid, read_only, rw, &mut pairs, &mut hidden)
        .map_err(SandboxError::Spec)?;
    held.end_setup();
    Ok(ProtectedHolds {
        protected: pairs,
        hidden,
        placeholders: ProtectedPlaceholders(held),
    })
}

/// For every writable root and protected sub-path: the (root, sub-path) pairs the zone must hold
/// read-only. Nothing is followed through a symlink.
fn hold_sub_paths(
    rw: &[PathBuf],
    protected: &[PathBuf],
    held: &mut Placeholders,
) -> Result<Vec<(PathBuf, PathBuf)>, SandboxError> {
    let mut out: Vec<(PathBuf, PathBuf)> = Vec::new();
    let nofollow = sys::RESOLVE_BENEATH | sys::RESOLVE_NO_SYMLINKS;
    for root in rw {
        if !root.is_dir() {
            continue;
        }
        let root_fd = sys::openat2(
            libc::AT_FDCWD,
            &root.to_string_lossy(),
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .map_err(|e| SandboxError::io(root.display().to_string(), e))?;
        'each: for sub in protected {
            if out.iter().any(|(r, s)| r == root && sub.starts_with(s)) {
                continue; // already covered by a held ancestor
            }
            match sys::openat2(
                root_fd.as_raw_fd(),
                &sub.to_string_lossy(),
                libc::O_PATH,
                nofollow,
            ) {
                Ok(fd) => {
                    held.adopt_if_placeholder(fd.as_raw_fd(), root, sub)
                        .map_err(|e| SandboxError::io("placeholder registry", e))?;
                    out.push((root.clone(), sub.clone()));
                    continue;
                }
                Err(e)
                    if e.raw_os_error() == Some(libc::ELOOP)
                        || e.raw_os_error() == Some(libc::EXDEV) =>
                {
                    return Err(SandboxError::ProtectedSymlink {
                        path: root.join(sub),
                    });
                }
                Err(e)
                    if e.raw_os_error() == Some(libc::ENOENT)
                        || e.raw_os_error() == Some(libc::ENOTDIR) => {}
                Err(e) => return Err(SandboxError::io(root.join(sub).display().to_string(), e)),
            }
            // Walk down to the first missing component and hold it with an empty directory.
            let mut prefix = PathBuf::new();
            let mut dir: Option<OwnedFd> = None;
            for comp in sub.components() {
                let parent: RawFd = dir
                    .as_ref()
                    .map(|d| d.as_raw_fd())
                    .unwrap_or(root_fd.as_raw_fd());
                let name = comp.as_os_str();
                prefix.push(name);
                match sys::openat2(parent, &name.to_string_lossy(), libc::O_PATH, nofollow) {
                    Ok(fd) => {
                        let is_dir = nix::sys::stat::fstat(fd.as_raw_fd())
                            .map(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR)
                            .unwrap_or(false);
                        // A file, or another live zone's placeholder: held as it is.
                        let adopted = is_dir
                            && held
                                .adopt_if_placeholder(fd.as_raw_fd(), root, &prefix)
                                .map_err(|e| SandboxError::io("placeholder registry", e))?;
                        if !is_dir || adopted {
                            out.push((root.clone(), prefix.clone()));
                            continue 'each;
                        }
                        dir = Some(fd);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                        held.create(parent, name, root, &prefix).map_err(|e| {
                            SandboxError::io(
                                format!("placeholder {}", root.join(&prefix).display()),
                                e,
                            )
                        })?;
                        out.push((root.clone(), prefix.clone()));
                        continue 'each;
                    }
                    Err(e) => {
                        return Err(SandboxError::io(
                            root.join(&prefix).display().to_string(),
                            e,
                        ))
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_protected_path_gets_a_placeholder_that_is_removed_afterwards() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut held = Placeholders::unrecorded();
        let pairs = hold_sub_paths(
            std::slice::from_ref(&root),
            &[PathBuf::from(".git/hooks"), PathBuf::from(".git/config")],
            &mut held,
        )
        .unwrap();
        // `.git` is missing: it is held itself, and covers both protected paths.
        assert_eq!(pairs, vec![(root.clone(), PathBuf::from(".git"))]);
        assert!(root.join(".git").is_dir());
        drop(held);
        assert!(!root.join(".git").exists());
    }

    #[test]
    fn symlinked_protected_path_refuses_the_launch() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("/etc", root.join(".git")).unwrap();
        let mut held = Placeholders::unrecorded();
        let r = hold_sub_paths(
            std::slice::from_ref(&root),
            &[PathBuf::from(".git/config")],
            &mut held,
        );
        assert!(
            matches!(r, Err(SandboxError::ProtectedSymlink { path }) if path == root.join(".git/config"))
        );
    }
}
