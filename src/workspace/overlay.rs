//! The per-run workspace: an overlay whose lower layer is the read-only baseline and whose upper
//! and work directories live in the run directory (`<run>/workspace/{upper,work}`). Creating one
//! is two `mkdir`s, whatever the size of the repository; the overlay itself is mounted by the
//! sandbox inside the agent zone's mount namespace ([`Workspace::agent_overlay`]), so nothing is
//! mounted on the host and the zone never sees the baseline, the run directory or the state dir.

use super::baseline::Baseline;
use super::bounds::Bounds;
use super::ignore_rules::IgnoreRules;
use super::manifest::DirIds;
use super::snapshot::{self, Snapshot};
use super::{fsat, WorkspaceError, WsResult};
use crate::safefs::SafeDir;
use sandbox::{OverlayMount, WorkspaceLimits};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

pub(crate) const WORKSPACE: &str = "workspace";
const UPPER: &str = "upper";
const WORK: &str = "work";
/// The image of a capped workspace (`resources.disk_bytes`), holding `upper` and `work`.
pub(crate) const DISK_IMAGE: &str = "disk.img";

/// One run's workspace.
#[derive(Debug)]
pub struct Workspace {
    baseline: Baseline,
    upper: PathBuf,
    work: PathBuf,
    /// The baseline's directory tree ids, computed at the first snapshot: every later snapshot
    /// hashes only the directories the agent touched.
    baseline_dirs: OnceLock<DirIds>,
    /// t0's ignore rules: what the agent wrote that they ignore is left out of every snapshot.
    rules: IgnoreRules,
    /// The agent's own git repository of t0 (`agent_git = "t0"`): a read-only layer holding
    /// `.git`, between the agent's upper layer and the baseline (`super::agent_repo`).
    agent_repo: Option<PathBuf>,
    /// The capped volume holding `upper` and `work` (`resources.disk_bytes`), mounted for the
    /// run's life; None: they are plain directories of the run directory.
    volume: Option<Arc<sandbox::Volume>>,
    /// `<run>/workspace`: the host directory of the run's workspace.
    dir: PathBuf,
}

impl Workspace {
    /// Create `<run_dir>/workspace/{upper,work}` (refused if they exist). `owner`: the zone's
    /// uid/gid when loopexec runs as root (the zone must own its upper and work directories; it
    /// reaches them through the mount tree of `workspace/` the supervisor hands it, so the run
    /// directory and everything above it stay closed to every other uid).
    ///
    /// `disk`: the cap on the agent's writes (`resources.disk_bytes`, as `sandbox::volume::cap_of`
    /// allows it): `upper` and `work` are then made in a volume of that size,
    /// `<run_dir>/workspace/disk.img`, which the run keeps mounted (detached) across iterations.
    pub fn create(
        baseline: Baseline,
        run_dir: &SafeDir,
        owner: Option<(u32, u32)>,
        disk: Option<u64>,
    ) -> WsResult<Workspace> {
        let ws = run_dir.subdir_or_create(WORKSPACE)?;
        nix::sys::stat::fchmod(
            ws.fd().as_raw_fd(),
            nix::sys::stat::Mode::from_bits_truncate(0o711),
        )
        .map_err(|e| WorkspaceError::io(ws.path(), e.into()))?;
        let (volume, root) = match disk {
            None => (None, LayerRoot::of(&ws)?),
            Some(bytes) => {
                let image = ws.path().join(DISK_IMAGE);
                let v = sandbox::Volume::create(
                    ws.fd().as_raw_fd(),
                    ws.path(),
                    DISK_IMAGE,
                    bytes,
                    owner.unwrap_or((0, 0)),
                )
                .map_err(|e| WorkspaceError::io(&image, e))?;
                let root = LayerRoot::of_volume(&v)?;
                (Some(Arc::new(v)), root)
            }
        };
        make_layer_dirs(&root, owner)?;
        Ok(Workspace {
            baseline,
            upper: root.path.join(UPPER),
            work: root.path.join(WORK),
            baseline_dirs: OnceLock::new(),
            rules: IgnoreRules::none(),
            agent_repo: None,
            volume,
            dir: ws.path().to_path_buf(),
        })
    }

    /// Re-open the workspace of an existing run (resume after a crash), mounting its capped
    /// volume again when it has one.
    pub fn open(baseline: Baseline, run_dir: &SafeDir) -> WsResult<Workspace> {
        let ws = run_dir.subdir(WORKSPACE)?;
        let image = ws.path().join(DISK_IMAGE);
        let volume = match fsat::lstat(ws.fd().as_raw_fd(), DISK_IMAGE.as_bytes()) {
            Ok(_) => {
                let v = sandbox::Volume::open(ws.fd().as_raw_fd(), ws.path(), DISK_IMAGE)
                    .map_err(|e| WorkspaceError::io(&image, e))?;
                Some(Arc::new(v))
            }
            Err(nix::errno::Errno::ENOENT) => None,
            Err(e) => return Err(WorkspaceError::io(&image, e.into())),
        };
        let (upper, work) = match &volume {
            Some(v) => {
                let upper = SafeDir::open(&v.path().join(UPPER))?;
                let work = SafeDir::open(&v.path().join(WORK))?;
                (upper, work)
            }
            None => (ws.subdir(UPPER)?, ws.subdir(WORK)?),
        };
        Ok(Workspace {
            baseline,
            upper: upper.path().to_path_buf(),
            work: work.path().to_path_buf(),
            baseline_dirs: OnceLock::new(),
            rules: IgnoreRules::none(),
            agent_repo: None,
            volume,
            dir: ws.path().to_path_buf(),
        })
    }

    /// `<run>/workspace` on the host (where the revert-to-best copies are kept; for a capped
    /// workspace, the directory holding its image).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cap on the agent's writes, when its layers are on a capped volume.
    pub fn disk_bytes(&self) -> Option<u64> {
        self.volume.as_ref().map(|v| v.bytes())
    }

    pub fn baseline(&self) -> &Baseline {
        &self.baseline
    }

    /// The same workspace leaving out of its snapshots what `rules` (t0's) ignore.
    pub fn with_ignore_rules(mut self, rules: IgnoreRules) -> Workspace {
        self.rules = rules;
        self
    }

    /// The same workspace with the agent's git repository `layer` (built by
    /// `super::agent_repo::build`) beneath the agent's writes.
    pub fn with_agent_repo(mut self, layer: PathBuf) -> Workspace {
        self.agent_repo = Some(layer);
        self
    }

    /// t0's ignore rules, as the snapshots apply them.
    pub fn ignore_rules(&self) -> &IgnoreRules {
        &self.rules
    }

    /// The agent's changes (overlayfs upper layer).
    pub fn upper_dir(&self) -> &Path {
        &self.upper
    }

    /// The overlay the agent zone mounts at `target` (read-write; writes land in the upper layer).
    pub fn agent_overlay(&self, target: &Path) -> OverlayMount {
        OverlayMount {
            target: target.to_path_buf(),
            lowers: self
                .agent_repo
                .iter()
                .cloned()
                .chain([self.baseline.files_dir.clone()])
                .collect(),
            upper: Some(self.upper.clone()),
            work: Some(self.work.clone()),
            volatile: false,
        }
    }

    /// t0's tree alone, read-only, at `target` (the judge's working directory: the operator's
    /// code, whatever the agent changed).
    pub fn t0_overlay(&self, target: &Path) -> OverlayMount {
        OverlayMount {
            target: target.to_path_buf(),
            lowers: vec![self.baseline.files_dir.clone()],
            upper: None,
            work: None,
            volatile: false,
        }
    }

    /// The agent's tree as a read-only overlay at `target` (the judge's view of the candidate): no upper layer, so
    /// nothing written there can reach the workspace.
    pub fn read_only_overlay(&self, target: &Path) -> OverlayMount {
        OverlayMount {
            target: target.to_path_buf(),
            lowers: vec![self.upper.clone(), self.baseline.files_dir.clone()],
            upper: None,
            work: None,
            volatile: false,
        }
    }

    /// The merged tree now (call after the agent zone has ended), read within `limits` (the
    /// agent policy's `[workspace]` table) and its snapshot time bound.
    pub fn snapshot(&self, limits: &WorkspaceLimits) -> WsResult<Snapshot> {
        let mut bounds = Bounds::snapshot(limits);
        let manifest = self.baseline.manifest()?;
        let dirs = self.baseline_dirs.get_or_init(|| manifest.dir_ids());
        snapshot::take_reusing(manifest, dirs, &self.upper, &self.rules, &mut bounds)
    }
}

/// Where a workspace's or a check's `upper` and `work` directories are made: a directory of the
/// run directory, or the root of a capped volume (reached by descriptor, named by the path this
/// process opens it at).
pub(crate) struct LayerRoot {
    pub(crate) fd: std::os::fd::OwnedFd,
    pub(crate) path: PathBuf,
}

impl LayerRoot {
    pub(crate) fn of(dir: &SafeDir) -> WsResult<LayerRoot> {
        Ok(LayerRoot {
            fd: dir
                .fd()
                .try_clone_to_owned()
                .map_err(|e| WorkspaceError::io(dir.path(), e))?,
            path: dir.path().to_path_buf(),
        })
    }

    pub(crate) fn of_volume(v: &sandbox::Volume) -> WsResult<LayerRoot> {
        Ok(LayerRoot {
            fd: v.root().map_err(|e| WorkspaceError::io(v.path(), e))?,
            path: v.path(),
        })
    }
}

/// `upper` (0755) and `work` (0700) created in `root`, owned by `owner`.
pub(crate) fn make_layer_dirs(root: &LayerRoot, owner: Option<(u32, u32)>) -> WsResult<()> {
    for (name, mode) in [(UPPER, 0o755), (WORK, 0o700)] {
        let path = root.path.join(name);
        nix::sys::stat::mkdirat(
            Some(root.fd.as_raw_fd()),
            name,
            nix::sys::stat::Mode::from_bits_truncate(mode),
        )
        .map_err(|e| WorkspaceError::io(&path, e.into()))?;
        let fd = fsat::open_dir(root.fd.as_raw_fd(), name.as_bytes())
            .map_err(|e| WorkspaceError::io(&path, e.into()))?;
        fsat::chown_fd(&fd, owner).map_err(|e| WorkspaceError::io(&path, e.into()))?;
    }
    Ok(())
}
