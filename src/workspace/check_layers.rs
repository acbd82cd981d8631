//! The exec zone's throwaway copy of a snapshot, in which protected paths come from t0.
//!
//! Layers, top first: the *frozen* layer (the t0 entries of every protected path, hard-linked
//! from the baseline), a *hide* layer of whiteouts (protected paths the agent created, and
//! upper-layer entries that are not part of the tree, such as a planted `.git`, an ignored file or
//! a `__pycache__`, and the paths the
//! caller wants fresh, such as a declared test report the check must write itself; only when there
//! is something to hide), the agent's upper layer (read-only here), then the baseline. The check
//! writes into a scratch upper layer, so it can neither change the agent's workspace nor the
//! baseline.
//!
//! The frozen layer depends on t0 and the protected patterns only: a run builds it once
//! ([`FrozenLayer::build`], one link per protected t0 file) and every check stacks it again; a
//! check costs two directories (its scratch upper and work) and, rarely, a hide layer. The
//! scratch overlay is mounted `volatile` (its upper layer is thrown away, so unmounting it skips the
//! sync of the host filesystem). `replay` stacks the same frozen layer over a materialised
//! end-state tree instead of the agent's upper layer.

use super::baseline::Baseline;
use super::manifest::{EntryKind, Manifest};
use super::overlay::{make_layer_dirs, LayerRoot, Workspace, DISK_IMAGE};
use super::protected::ProtectedPaths;
use super::snapshot::Snapshot;
use super::{fsat, tree_path, WorkspaceError, WsResult};
use crate::safefs::SafeDir;
use sandbox::OverlayMount;
use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const FROZEN: &str = "frozen";
const HIDE: &str = "hide";
const UPPER: &str = "upper";
const WORK: &str = "work";

/// The overlay for one check, and what went into its frozen and hide layers.
#[derive(Debug, Clone)]
pub struct CheckLayers {
    pub overlay: OverlayMount,
    /// Protected t0 entries placed on top.
    pub frozen: usize,
    /// Paths hidden from the check (agent-created protected paths, entries not in the tree).
    pub hidden: Vec<String>,
    /// The tree under test as the check sees it: the tree with its hidden paths removed and
    /// t0's protected entries on top (what a check must leave as it found it).
    pub tested: Manifest,
    /// The paths the check's zone must hold read-only (the frozen layer's, [`FrozenLayer::read_only`]).
    pub read_only: Vec<Vec<u8>>,
    /// The capped volume holding the scratch `upper` and `work` (`resources.disk_bytes` of the
    /// exec policy), mounted as long as a clone of this is kept; None: plain directories.
    pub volume: Option<std::sync::Arc<sandbox::Volume>>,
}

/// t0's protected entries, hard-linked from the baseline into a directory of their own: the top
/// layer of every check of a run. It depends on t0 and the protected patterns only.
#[derive(Debug, Clone)]
pub struct FrozenLayer {
    path: PathBuf,
    entries: usize,
    /// The paths the check's zone holds read-only: each topmost protected directory of t0 and
    /// each protected t0 file outside one (symlinks left out: a bind cannot hold one without
    /// following it). Every one of them: a t0 that needs more than [`MAX_HOLD_MOUNTS`] mounts or
    /// [`MAX_HOLD_BYTES`] of paths refuses the run ([`WorkspaceError::TooManyHolds`]), never a
    /// hold dropped.
    read_only: Vec<Vec<u8>>,
}

/// The most mounts a check's zone makes to hold t0's protected paths read-only: one bind per
/// held path and one per directory pinned above a held path (docs/guards.md, "t0's protected
/// paths are read-only inside the check"). A t0 whose protected paths need more refuses the run
/// before any agent call: no protected path is ever left writable in the check.
pub const MAX_HOLD_MOUNTS: usize = 16_384;

/// The most bytes the held paths may take in the zone's plan, which travels as one socket
/// message (bounded by the socket's send buffer, 208 KiB by default; the rest of the plan needs
/// the remainder): each held path counts its length and [`HOLD_OVERHEAD_BYTES`].
pub const MAX_HOLD_BYTES: usize = 128 * 1024;

/// What one held path costs in the plan beyond its own bytes (the mount point and the encoding).
pub const HOLD_OVERHEAD_BYTES: usize = 20;

/// The read-only holds of t0's protected entries, in path order: for each protected entry
/// (symlinks left out) its topmost protected ancestor or itself, so that one directory hold
/// covers everything beneath it and no path beneath a held directory is held again. Refused when
/// the holds and the directories pinned above them are more than `max.0` mounts, or the held
/// paths take more than `max.1` bytes of the plan.
fn read_only_holds(
    baseline: &Manifest,
    protected: &ProtectedPaths,
    max: (usize, usize),
) -> WsResult<Vec<Vec<u8>>> {
    let mut holds: Vec<Vec<u8>> = Vec::new();
    let mut pinned: BTreeSet<&[u8]> = BTreeSet::new();
    for (p, entry) in baseline.iter().filter(|(p, _)| protected.is_protected(p)) {
        if entry.kind == EntryKind::Symlink {
            continue;
        }
        // Everything beneath a protected directory maps to that directory, and the paths beneath
        // one directory are contiguous in path order: comparing with the last hold coalesces them.
        let hold = topmost_protected(p, protected);
        if holds.last() == Some(&hold) {
            continue;
        }
        holds.push(hold);
    }
    let bytes: usize = holds.iter().map(|h| h.len() + HOLD_OVERHEAD_BYTES).sum();
    for hold in &holds {
        let mut end = hold.len();
        while let Some(slash) = hold[..end].iter().rposition(|&b| b == b'/') {
            if !pinned.insert(&hold[..slash]) {
                break; // its ancestors are in already
            }
            end = slash;
        }
    }
    if holds.len() + pinned.len() > max.0 || bytes > max.1 {
        return Err(WorkspaceError::TooManyHolds {
            holds: holds.len(),
            pinned: pinned.len(),
            bytes,
            max_mounts: max.0,
            max_bytes: max.1,
        });
    }
    Ok(holds)
}

/// The shortest protected ancestor of `path` (or `path`): what a read-only hold covers.
fn topmost_protected(path: &[u8], protected: &ProtectedPaths) -> Vec<u8> {
    let mut i = 0;
    while let Some(off) = path[i..].iter().position(|&b| b == b'/') {
        if protected.is_protected(&path[..i + off]) {
            return path[..i + off].to_vec();
        }
        i += off + 1;
    }
    path.to_vec()
}

impl FrozenLayer {
    /// The layer's directory name in its parent.
    pub const NAME: &'static str = FROZEN;

    /// Build the layer as `<parent>/frozen` (refused if it exists). `owner`: the exec zone's
    /// uid/gid when loopexec runs as root (the zone must be able to read the layer's directories).
    pub fn build(
        t0: &Baseline,
        protected: &ProtectedPaths,
        parent: &SafeDir,
        owner: Option<(u32, u32)>,
    ) -> WsResult<FrozenLayer> {
        let baseline = t0.manifest()?;
        let base_files = &t0.files_dir;
        let read_only = read_only_holds(baseline, protected, (MAX_HOLD_MOUNTS, MAX_HOLD_BYTES))?;
        let (path, root) = make_dir(parent, FROZEN, 0o755, owner)?;
        let base_root = fsat::open_dir_path(base_files)
            .map_err(|e| WorkspaceError::io(base_files, e.into()))?;
        let mut layer = Layer {
            root,
            root_path: path.clone(),
            owner,
        };
        let mut entries = 0;
        for (p, entry) in baseline.iter().filter(|(p, _)| protected.is_protected(p)) {
            let dst = layer.parent_of(p)?;
            let src = fsat::open_dir_beneath(base_root.as_raw_fd(), tree_path::parent(p)).map_err(
                |e| WorkspaceError::io(base_files.join(std::ffi::OsStr::from_bytes(p)), e.into()),
            )?;
            let name = tree_path::file_name(p);
            if entry.kind == EntryKind::Gitlink {
                fsat::ensure_dir(dst.as_raw_fd(), name, 0o755).map_err(|e| layer.err(p, e))?;
            } else {
                link_or_copy(src.as_raw_fd(), dst.as_raw_fd(), name, entry.kind)
                    .map_err(|e| layer.err(p, e))?;
            }
            entries += 1;
        }
        Ok(FrozenLayer {
            path,
            entries,
            read_only,
        })
    }

    /// The paths the check's zone holds read-only (tree paths, in path order).
    pub fn read_only(&self) -> &[Vec<u8>] {
        &self.read_only
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many t0 entries the layer holds.
    pub fn entries(&self) -> usize {
        self.entries
    }
}

/// Build the check's own layers in `check_dir` (a fresh, empty directory per check, e.g.
/// `<run>/checks/<iteration>`) and return the overlay the exec zone mounts at `target`: `frozen`
/// over the agent's upper layer over the baseline. Every path of the snapshot (or not in its
/// tree) for which `fresh` holds is hidden from the check.
#[allow(clippy::too_many_arguments)]
pub fn check_layers(
    workspace: &Workspace,
    snapshot: &Snapshot,
    frozen: &FrozenLayer,
    protected: &ProtectedPaths,
    fresh: &dyn Fn(&[u8]) -> bool,
    check_dir: &SafeDir,
    target: &Path,
    owner: Option<(u32, u32)>,
    disk: Option<u64>,
) -> WsResult<CheckLayers> {
    let middle = [
        workspace.upper_dir().to_path_buf(),
        workspace.baseline().files_dir.clone(),
    ];
    let baseline = workspace.baseline().manifest()?;
    // What is not part of the tree is not part of the check's copy: a planted `.git`, a fifo, and
    // what git would not commit (ignored paths, caches).
    let mut not_in_tree = snapshot.not_in_tree.clone();
    not_in_tree.extend(snapshot.left_out.iter().map(|(p, _)| p.clone()));
    layers_over(
        baseline,
        &snapshot.manifest,
        &not_in_tree,
        frozen,
        &middle,
        protected,
        fresh,
        check_dir,
        target,
        owner,
        disk,
    )
}

/// The same throwaway copy for `replay`: the check sees the materialised end-state tree
/// `end_state` (one lower layer holding the whole tree) under the same frozen layer of t0's
/// protected paths, so the replayed check runs on exactly what the loop's check ran on. The
/// frozen layer is built in `check_dir` too.
pub fn replay_layers(
    t0: &Baseline,
    end_state: &Baseline,
    protected: &ProtectedPaths,
    fresh: &dyn Fn(&[u8]) -> bool,
    check_dir: &SafeDir,
    target: &Path,
    owner: Option<(u32, u32)>,
) -> WsResult<CheckLayers> {
    let manifest = end_state.manifest()?;
    prepare_check_dir(check_dir)?;
    let frozen = FrozenLayer::build(t0, protected, check_dir, owner)?;
    layers_over(
        t0.manifest()?,
        manifest,
        &[],
        &frozen,
        std::slice::from_ref(&end_state.files_dir),
        protected,
        fresh,
        check_dir,
        target,
        owner,
        None,
    )
}

/// The check directory must be traversable by the exec zone's uid (root callers).
fn prepare_check_dir(check_dir: &SafeDir) -> WsResult<()> {
    nix::sys::stat::fchmod(
        check_dir.fd().as_raw_fd(),
        nix::sys::stat::Mode::from_bits_truncate(0o711),
    )
    .map_err(|e| WorkspaceError::io(check_dir.path(), e.into()))
}

/// `name` created in `parent` with `mode`, owned by `owner`; its path and an open descriptor.
fn make_dir(
    parent: &SafeDir,
    name: &str,
    mode: u32,
    owner: Option<(u32, u32)>,
) -> WsResult<(PathBuf, OwnedFd)> {
    let path = parent.path().join(name);
    nix::sys::stat::mkdirat(
        Some(parent.fd().as_raw_fd()),
        name,
        nix::sys::stat::Mode::from_bits_truncate(mode),
    )
    .map_err(|e| WorkspaceError::io(&path, e.into()))?;
    let fd = fsat::open_dir(parent.fd().as_raw_fd(), name.as_bytes())
        .map_err(|e| WorkspaceError::io(&path, e.into()))?;
    fsat::chown_fd(&fd, owner).map_err(|e| WorkspaceError::io(&path, e.into()))?;
    Ok((path, fd))
}

/// The frozen layer, a hide layer (whiteouts over protected paths `tree` added to t0 and over
/// `not_in_tree`, and over every path of `tree` for which `fresh` holds, when there are any) and
/// `lowers`, with a scratch upper layer.
#[allow(clippy::too_many_arguments)]
fn layers_over(
    baseline: &Manifest,
    tree: &Manifest,
    not_in_tree: &[Vec<u8>],
    frozen: &FrozenLayer,
    lowers: &[PathBuf],
    protected: &ProtectedPaths,
    fresh: &dyn Fn(&[u8]) -> bool,
    check_dir: &SafeDir,
    target: &Path,
    owner: Option<(u32, u32)>,
    disk: Option<u64>,
) -> WsResult<CheckLayers> {
    prepare_check_dir(check_dir)?;
    let mut hidden = BTreeSet::new();
    for (path, _) in tree.iter() {
        if baseline.get(path).is_none() && protected.is_protected(path) {
            hidden.insert(topmost_new_protected(path, baseline, protected));
        }
        if fresh(path) {
            hidden.insert(path.to_vec());
        }
    }
    for p in not_in_tree {
        hidden.insert(p.clone());
    }
    let hidden: Vec<Vec<u8>> = hidden
        .iter()
        .filter(|p| !hidden.iter().any(|a| is_beneath(p, a)))
        .cloned()
        .collect();

    let mut all_lowers = vec![frozen.path.clone()];
    if !hidden.is_empty() {
        // Below the frozen layer: a t0 entry at a hidden path (say a protected file the agent
        // replaced by a fifo) still comes from t0.
        let (hide_path, hide) = make_dir(check_dir, HIDE, 0o755, owner)?;
        let mut layer = Layer {
            root: hide,
            root_path: hide_path.clone(),
            owner,
        };
        for path in &hidden {
            let dst = layer.parent_of(path)?;
            fsat::whiteout(dst.as_raw_fd(), tree_path::file_name(path))
                .map_err(|e| layer.err(path, e))?;
        }
        all_lowers.push(hide_path);
    }
    all_lowers.extend(lowers.iter().cloned());
    let mut tested = tree.clone();
    for path in &hidden {
        tested.remove_tree(path);
    }
    for (path, entry) in baseline.iter().filter(|(p, _)| protected.is_protected(p)) {
        tested.insert(path.clone(), *entry)?;
    }
    // The scratch layer: in the check directory, or in a capped volume there (`disk.img`).
    let (volume, root) = match disk {
        None => (None, LayerRoot::of(check_dir)?),
        Some(bytes) => {
            let image = check_dir.path().join(DISK_IMAGE);
            let v = sandbox::Volume::create(
                check_dir.fd().as_raw_fd(),
                check_dir.path(),
                DISK_IMAGE,
                bytes,
                owner.unwrap_or((0, 0)),
            )
            .map_err(|e| WorkspaceError::io(&image, e))?;
            let root = LayerRoot::of_volume(&v)?;
            (Some(std::sync::Arc::new(v)), root)
        }
    };
    make_layer_dirs(&root, owner)?;
    let (upper_path, work_path) = (root.path.join(UPPER), root.path.join(WORK));
    Ok(CheckLayers {
        overlay: OverlayMount {
            target: target.to_path_buf(),
            lowers: all_lowers,
            upper: Some(upper_path),
            work: Some(work_path),
            volatile: true,
        },
        frozen: frozen.entries,
        hidden: hidden
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect(),
        tested,
        read_only: frozen.read_only.clone(),
        volume,
    })
}

/// The shortest ancestor of `path` (or `path`) that is protected and absent from t0.
fn topmost_new_protected(path: &[u8], baseline: &Manifest, protected: &ProtectedPaths) -> Vec<u8> {
    let mut i = 0;
    while let Some(off) = path[i..].iter().position(|&b| b == b'/') {
        let prefix = &path[..i + off];
        if protected.is_protected(prefix)
            && baseline.get(prefix).is_none()
            && !baseline.has_beneath(prefix)
        {
            return prefix.to_vec();
        }
        i += off + 1;
    }
    path.to_vec()
}

fn is_beneath(path: &[u8], ancestor: &[u8]) -> bool {
    path.len() > ancestor.len() && path.starts_with(ancestor) && path[ancestor.len()] == b'/'
}

/// Hard-link (or, across file systems, copy) one t0 entry into the frozen layer.
fn link_or_copy(src: RawFd, dst: RawFd, name: &[u8], kind: EntryKind) -> nix::Result<()> {
    match fsat::hardlink(src, name, dst, name) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EXDEV) | Err(nix::errno::Errno::EPERM) => {
            if kind == EntryKind::Symlink {
                let target = fsat::read_link(src, name)?;
                return fsat::symlink(dst, name, &target);
            }
            let mut from = fsat::open_file(src, name)?;
            let mode = if kind == EntryKind::Executable {
                0o755
            } else {
                0o644
            };
            let mut to = fsat::create_file(dst, name, mode)?;
            std::io::copy(&mut from, &mut to)
                .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The frozen layer being built: plain directories created on demand.
struct Layer {
    root: OwnedFd,
    root_path: PathBuf,
    owner: Option<(u32, u32)>,
}

impl Layer {
    fn err(&self, path: &[u8], e: nix::Error) -> WorkspaceError {
        WorkspaceError::io(
            self.root_path.join(std::ffi::OsStr::from_bytes(path)),
            e.into(),
        )
    }

    /// The directory that will hold `path`, created (0755, owned by the zone) as needed.
    fn parent_of(&mut self, path: &[u8]) -> WsResult<OwnedFd> {
        let mut cur = nix::unistd::dup(self.root.as_raw_fd())
            .map(|fd| unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
            .map_err(|e| self.err(b"", e))?;
        let parent = tree_path::parent(path);
        let mut so_far = Vec::new();
        for comp in parent.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            so_far = tree_path::join(&so_far, comp);
            let existed = fsat::lstat(cur.as_raw_fd(), comp).is_ok();
            cur =
                fsat::ensure_dir(cur.as_raw_fd(), comp, 0o755).map_err(|e| self.err(&so_far, e))?;
            if !existed {
                fsat::chown_fd(&cur, self.owner).map_err(|e| self.err(&so_far, e))?;
            }
        }
        Ok(cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::object_id::blob_id;

    fn manifest(paths: &[String]) -> Manifest {
        let mut m = Manifest::default();
        for p in paths {
            m.insert(
                p.as_bytes().to_vec(),
                super::super::manifest::Entry {
                    kind: EntryKind::File,
                    oid: blob_id(p.as_bytes()),
                },
            )
            .unwrap();
        }
        m
    }

    fn text(holds: &[Vec<u8>]) -> Vec<String> {
        holds
            .iter()
            .map(|h| String::from_utf8_lossy(h).into_owned())
            .collect()
    }

    #[test]
    fn three_hundred_protected_files_sorting_before_tests_leave_tests_held() {
        let mut paths: Vec<String> = (0..300)
            .map(|i| format!("data/case_{i:03}.golden"))
            .collect();
        paths.extend([
            "tests/test_calc.py".to_string(),
            "tests/unit/test_more.py".to_string(),
            "src/calc.py".to_string(),
        ]);
        let holds = text(
            &read_only_holds(
                &manifest(&paths),
                &ProtectedPaths::defaults(),
                (MAX_HOLD_MOUNTS, MAX_HOLD_BYTES),
            )
            .unwrap(),
        );
        assert_eq!(holds.len(), 301, "{holds:?}");
        assert_eq!(
            holds.last().map(String::as_str),
            Some("tests"),
            "the test directory is held as one"
        );
        assert_eq!(holds[299], "data/case_299.golden");
        assert!(
            !holds
                .iter()
                .any(|h| h == "src/calc.py" || h.starts_with("tests/")),
            "{holds:?}"
        );
    }

    #[test]
    fn a_deep_test_tree_is_held_file_by_file_outside_a_protected_directory_and_whole_inside_one() {
        let deep: String = (1..=50).map(|i| format!("d{i}/")).collect();
        let mut paths: Vec<String> = (0..300)
            .map(|i| format!("pkg/{deep}test_case_{i:03}.py"))
            .collect();
        paths.extend((0..300).map(|i| format!("tests/{deep}test_case_{i:03}.py")));
        let holds = text(
            &read_only_holds(
                &manifest(&paths),
                &ProtectedPaths::defaults(),
                (MAX_HOLD_MOUNTS, MAX_HOLD_BYTES),
            )
            .unwrap(),
        );
        assert_eq!(holds.len(), 301, "300 files in pkg/, tests/ whole");
        assert_eq!(holds[0], format!("pkg/{deep}test_case_000.py"));
        assert_eq!(holds[300], "tests");
    }

    #[test]
    fn holds_and_their_pinned_directories_past_the_cap_refuse_the_layer_naming_the_count() {
        let deep: String = (1..=50).map(|i| format!("d{i}/")).collect();
        let paths: Vec<String> = (0..300)
            .map(|i| format!("pkg/{deep}test_case_{i:03}.py"))
            .collect();
        let m = manifest(&paths);
        // 300 held files and the 51 directories above them.
        assert_eq!(
            read_only_holds(&m, &ProtectedPaths::defaults(), (351, MAX_HOLD_BYTES))
                .map(|h| h.len())
                .ok(),
            Some(300)
        );
        let refused =
            read_only_holds(&m, &ProtectedPaths::defaults(), (350, MAX_HOLD_BYTES)).unwrap_err();
        assert!(
            matches!(
                refused,
                WorkspaceError::TooManyHolds {
                    holds: 300,
                    pinned: 51,
                    max_mounts: 350,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert!(refused.to_string().starts_with("t0's protected paths need 300 read-only holds in the check's zone (351 mounts with the directories pinned above them, "), "{refused}");
    }

    #[test]
    fn held_paths_past_the_plans_byte_budget_refuse_the_layer_naming_the_bytes() {
        let paths: Vec<String> = (0..100).map(|i| format!("pkg/test_{i:03}.py")).collect();
        let m = manifest(&paths);
        // Each path is 15 bytes, plus the overhead.
        let bytes = 100 * (15 + HOLD_OVERHEAD_BYTES);
        assert!(read_only_holds(&m, &ProtectedPaths::defaults(), (MAX_HOLD_MOUNTS, bytes)).is_ok());
        let refused = read_only_holds(
            &m,
            &ProtectedPaths::defaults(),
            (MAX_HOLD_MOUNTS, bytes - 1),
        )
        .unwrap_err();
        assert!(
            matches!(refused, WorkspaceError::TooManyHolds { holds: 100, pinned: 1, bytes: b, .. } if b == bytes),
            "{refused:?}"
        );
    }
}
