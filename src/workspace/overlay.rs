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
use std::sync::OnceLock;

const WORKSPACE: &str = "workspace";
const UPPER: &str = "upper";
const WORK: &str = "work";

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
}

impl Workspace {
    /// Create `<run_dir>/workspace/{upper,work}` (refused if they exist). `owner`: the zone's
    /// uid/gid when loopexec runs as root (the zone must own its upper and work directories; it
    /// reaches them through the mount tree of `workspace/` the supervisor hands it, so the run
    /// directory and everything above it stay closed to every other uid).
    pub fn create(
        baseline: Baseline,
        run_dir: &SafeDir,
        owner: Option<(u32, u32)>,
    ) -> WsResult<Workspace> {
        let ws = run_dir.subdir_or_create(WORKSPACE)?;
        nix::sys::stat::fchmod(
            ws.fd().as_raw_fd(),
            nix::sys::stat::Mode::from_bits_truncate(0o711),
        )
        .map_err(|e| WorkspaceError::io(ws.path(), e.into()))?;
        for (name, mode) in [(UPPER, 0o755), (WORK, 0o700)] {
            let path = ws.path().join(name);
            nix::sys::stat::mkdirat(
                Some(ws.fd().as_raw_fd()),
                name,
                nix::sys::stat::Mode::from_bits_truncate(mode),
            )
            .map_err(|e| WorkspaceError::io(&path, e.into()))?;
            let fd = fsat::open_dir(ws.fd().as_raw_fd(), name.as_bytes())
                .map_err(|e| WorkspaceError::io(&path, e.into()))?;
            fsat::chown_fd(&fd, owner).map_err(|e| WorkspaceError::io(&path, e.into()))?;
        }
        Ok(Workspace {
            baseline,
            upper: ws.path().join(UPPER),
            work: ws.path().join(WORK),
            baseline_dirs: OnceLock::new(),
            rules: IgnoreRules::none(),
        })
    }

    /// Re-open the workspace of an existing run (resume after a crash).
    pub fn open(baseline: Baseline, run_dir: &SafeDir) -> WsResult<Workspace> {
        let ws = run_dir.subdir(WORKSPACE)?;
        let upper = ws.subdir(UPPER)?;
        let work = ws.subdir(WORK)?;
        Ok(Workspace {
            baseline,
            upper: upper.path().to_path_buf(),
            work: work.path().to_path_buf(),
            baseline_dirs: OnceLock::new(),
            rules: IgnoreRules::none(),
        })
    }

    pub fn baseline(&self) -> &Baseline {
        &self.baseline
    }

    /// The same workspace leaving out of its snapshots what `rules` (t0's) ignore.
    pub fn with_ignore_rules(mut self, rules: IgnoreRules) -> Workspace {
        self.rules = rules;
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
            lowers: vec![self.baseline.files_dir.clone()],
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
