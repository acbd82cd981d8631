//! The detached workspace of a native run, from the engine's side: which tree the agent starts
//! from, what each agent step changed, which protected paths it touched, what the check runs on,
//! and what reaches the operator at the end.
//!
//! The agent never works in the operator's repository: it gets an overlay over the baseline t0
//! mounted at [`WORKSPACE_TARGET`]. After each agent step the oracle snapshots the overlay's upper
//! layer (a git tree id for the receipt) and checks the protected paths; the check then runs on a
//! throwaway overlay in which protected paths come from t0. At halt the last accepted snapshot is
//! delivered as the branch `loopexec/<run-id>` plus a patch in the run directory.

use crate::error::{CmdResult, Failure};
use crate::receipt::events::WorkspaceRecord;
use crate::receipt::store::{fs_failure, RunDir, StateDir};
use crate::safefs::SafeDir;
use crate::workspace::{
    check_layers, deliver, Baseline, BaselineOptions, Delivery, FrozenLayer, IgnoreRules, ObjectId,
    ProtectedPaths, Snapshot, Workspace, WorkspaceError,
};
use sandbox::OverlayMount;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Where the workspace appears inside the zones.
pub const WORKSPACE_TARGET: &str = "/workspace";
/// Where the judge zone sees the agent's tree (read-only data; its working directory,
/// [`WORKSPACE_TARGET`], is t0's tree: the operator's code).
pub const CANDIDATE_TARGET: &str = "/candidate";
/// Per-check scratch layers live under the run directory and are removed after each check; the
/// frozen layer of t0's protected paths (`checks/frozen`) is built once per run.
const CHECKS: &str = "checks";
/// The repository's `info/exclude` as it was when the run started (t0's ignore rules beside its
/// `.gitignore` files), kept so that a resumed run leaves out exactly what the live run did.
const INFO_EXCLUDE: &str = "info-exclude";

/// How a run's commands see the operator's directory.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMode {
    /// An overlay over the committed tree (t0) of the workdir's git repository (native isolation).
    Detached,
    /// The workdir itself, read-write (a directory that is not a git repository, or `--isolation none`).
    InPlace,
}

impl WorkspaceMode {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceMode::Detached => "detached",
            WorkspaceMode::InPlace => "in_place",
        }
    }
}

/// Which git repository the agent zone finds in its workspace (`agent_git` in loop.toml,
/// `--agent-git`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum AgentGit {
    /// None: the workspace is plain files (the default).
    #[default]
    None,
    /// A fresh repository whose only commit is t0's tree (`crate::workspace::agent_repo`).
    T0,
}

impl AgentGit {
    pub fn is_none(&self) -> bool {
        *self == AgentGit::None
    }
}

/// Whether `workdir` is the top of a git work tree (it has a `.git` entry).
pub fn is_git_repository(workdir: &Path) -> bool {
    std::fs::symlink_metadata(workdir.join(".git")).is_ok()
}

/// The uid/gid that must own the zone-writable layers: the zone's, when loopexec runs as root.
pub fn zone_owner(policy: &sandbox::Policy) -> Option<(u32, u32)> {
    nix::unistd::geteuid()
        .is_root()
        .then_some((policy.identity.uid_when_root, policy.identity.gid_when_root))
}

/// How reading the workspace after an agent step ended.
pub enum Taken {
    /// A snapshot (for the guards), and how long it took (its bound is the policy's
    /// `workspace.snapshot_timeout_seconds`).
    Snapshot {
        snapshot: Snapshot,
        duration_ms: u64,
    },
    /// The workspace cannot be taken (over a `[workspace]` limit, a name git treats as `.git`,
    /// the snapshot's time bound, a tree that cannot be read): the run halts `workspace_invalid`
    /// with this detail, naming the limit and the path.
    Refused(String),
    /// The operator interrupted the snapshot; the run stays resumable.
    Interrupted(i32),
}

/// A check's scratch layers, removed when dropped.
pub struct CheckScratch {
    /// The checks directory and the name of this check's directory in it.
    parent: std::os::fd::OwnedFd,
    name: String,
    upper: SafeDir,
    /// The tree under test as the check sees it (what it must leave as it found it).
    tested: crate::workspace::Manifest,
    /// The capped volume holding the scratch layer, mounted until the scratch is dropped.
    _volume: Option<std::sync::Arc<sandbox::Volume>>,
}

/// A check's scratch upper layer: in its check directory, or in its capped volume.
fn scratch_upper(dir: &SafeDir, layers: &crate::workspace::CheckLayers) -> CmdResult<SafeDir> {
    match layers
        .overlay
        .upper
        .as_ref()
        .filter(|_| layers.volume.is_some())
    {
        Some(upper) => SafeDir::open(upper).map_err(fs_failure),
        None => dir.subdir("upper").map_err(fs_failure),
    }
}

impl CheckScratch {
    /// The check's own writes (its scratch upper layer), e.g. to read the JUnit report it wrote.
    pub fn writes(&self) -> &SafeDir {
        &self.upper
    }

    /// The paths of the tree under test the check modified, replaced or deleted, and the files
    /// it created where `counts` holds (read once its process tree is dead), within `limits`.
    pub fn tree_writes(
        &self,
        limits: &sandbox::WorkspaceLimits,
        counts: &dyn Fn(&[u8], bool) -> bool,
    ) -> Result<Vec<super::check_writes::TreeWrite>, super::check_writes::Unlisted> {
        super::check_writes::writes(&self.tested, self.upper.path(), limits, counts)
    }
}

impl Drop for CheckScratch {
    fn drop(&mut self) {
        // Through descriptors: the overlay's work directory inside is mode 000.
        let _ = crate::workspace::fsat::remove_tree(self.parent.as_raw_fd(), self.name.as_bytes());
    }
}

/// Write `files` into the new directory `<checks>/<name>/sentinel`: every directory created
/// (0755) or entered without following a link, every file created new (0644, `O_EXCL |
/// O_NOFOLLOW`).
fn write_sentinel_layer(
    checks: &SafeDir,
    name: &str,
    files: &[(String, Vec<u8>)],
) -> std::io::Result<()> {
    use crate::workspace::fsat;
    use std::io::Write;
    let check_dir = fsat::open_dir(checks.fd().as_raw_fd(), name.as_bytes())?;
    nix::sys::stat::mkdirat(
        Some(check_dir.as_raw_fd()),
        "sentinel",
        nix::sys::stat::Mode::from_bits_truncate(0o755),
    )?;
    let root = fsat::open_dir(check_dir.as_raw_fd(), b"sentinel")?;
    // The exec zone's uid reads the layer whatever the supervisor's umask.
    let readable = |fd: std::os::fd::RawFd, mode: u32| {
        nix::sys::stat::fchmod(fd, nix::sys::stat::Mode::from_bits_truncate(mode))
    };
    readable(root.as_raw_fd(), 0o755)?;
    for (path, bytes) in files {
        let parts: Vec<&str> = path.split('/').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("not a tree path: {path:?}"),
            ));
        }
        let mut dir = nix::unistd::dup(root.as_raw_fd()).map(|fd| unsafe {
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        })?;
        for part in &parts[..parts.len() - 1] {
            dir = fsat::ensure_dir(dir.as_raw_fd(), part.as_bytes(), 0o755)?;
            readable(dir.as_raw_fd(), 0o755)?;
        }
        let mut file =
            fsat::create_file(dir.as_raw_fd(), parts[parts.len() - 1].as_bytes(), 0o644)?;
        readable(std::os::fd::AsRawFd::as_raw_fd(&file), 0o644)?;
        file.write_all(bytes)?;
    }
    Ok(())
}

/// The detached workspace of one run.
pub struct RunWorkspace {
    workspace: Workspace,
    protected: ProtectedPaths,
    check_owner: Option<(u32, u32)>,
    /// The cap on each check's scratch layer (the exec policy's `resources.disk_bytes`, when
    /// the host can enforce it).
    check_disk: Option<u64>,
    /// `<run>/checks`, where each check's scratch layers are made.
    checks: SafeDir,
    /// t0's protected entries: the top layer of every check.
    frozen: FrozenLayer,
    /// The last snapshot the guards accepted (what is delivered at the end).
    last_accepted: Option<Snapshot>,
    /// The agent policy's `[workspace]` limits and time bounds.
    limits: sandbox::WorkspaceLimits,
}

fn ws_failure(e: crate::workspace::WorkspaceError) -> Failure {
    e.into()
}

/// `<run>/checks`, traversable by the exec zone's uid when loopexec runs as root.
fn checks_dir(run: &RunDir, check_owner: Option<(u32, u32)>) -> CmdResult<SafeDir> {
    let checks = run.dir().subdir_or_create(CHECKS).map_err(fs_failure)?;
    if check_owner.is_some() {
        crate::workspace::fsat::allow_traverse(&checks.fd())
            .map_err(|e| Failure::io(checks.path(), &e.into()))?;
    }
    Ok(checks)
}

/// The checks directory and the run's frozen layer in it, built afresh (a resumed run replaces
/// the one its crashed process left).
fn build_frozen(
    workspace: &Workspace,
    protected: &ProtectedPaths,
    run: &RunDir,
    check_owner: Option<(u32, u32)>,
) -> CmdResult<(SafeDir, FrozenLayer)> {
    let checks = checks_dir(run, check_owner)?;
    let _ =
        crate::workspace::fsat::remove_tree(checks.fd().as_raw_fd(), FrozenLayer::NAME.as_bytes());
    let frozen = FrozenLayer::build(workspace.baseline(), protected, &checks, check_owner)
        .map_err(ws_failure)?;
    Ok((checks, frozen))
}

/// What a run protects beyond the defaults: the loop's `protected` patterns, its
/// `[[allow_test_change]]` path globs (exempt), and the operator's commands whose t0 files are
/// protected ([`crate::engine::config::LoopConfig::operator_commands`]).
#[derive(Clone, Copy)]
pub struct Protection<'a> {
    pub extra: &'a [String],
    pub exempt: &'a [String],
    pub commands: &'a [(&'a str, crate::workspace::command_files::Follow)],
}

/// The run's protected paths: the defaults, the loop's `protected` patterns, and every t0 file
/// `commands` (the check's, the operator's mutator's, the held-out check's) run, directly or
/// through a file they run (`crate::workspace::command_files`), the loop's `[[allow_test_change]]`
/// paths exempt. The same t0 and commands give the same set, so a resumed run protects what the
/// live run did.
fn run_protected(workspace: &Workspace, protection: &Protection<'_>) -> CmdResult<ProtectedPaths> {
    use crate::workspace::command_files::{files_run, literal_pattern};
    let Protection {
        extra: protected_extra,
        exempt,
        commands,
    } = *protection;
    let t0 = workspace.baseline().manifest().map_err(ws_failure)?;
    let root = workspace.baseline().files_dir.clone();
    let read = |path: &[u8], limit: usize| {
        crate::engine::analysis_guards::read_bounded(&root, path, limit)
    };
    let mut patterns = protected_extra.to_vec();
    // Past a cap the files run would go partly unprotected: the run is refused (before any agent call).
    let run = files_run(commands, t0, &read).map_err(|e| Failure::workspace(e.to_string()))?;
    patterns.extend(run.iter().map(|p| literal_pattern(p)));
    ProtectedPaths::new(true, &patterns)
        .and_then(|p| p.exempting(exempt))
        .map_err(ws_failure)
}

/// What a new run's workspace starts from: t0 with or without the working tree's changes, and
/// whether the agent gets a git repository of it.
#[derive(Clone)]
pub struct Start {
    pub include_uncommitted: bool,
    pub agent_git: AgentGit,
    /// The commit t0 is taken from instead of HEAD (`config.base_commit`).
    pub base_commit: Option<String>,
}

impl RunWorkspace {
    /// Take the baseline t0 of `repo` and create the run's workspace; returns its `workspace`
    /// receipt event. `protection`: what it protects beyond the defaults; its `exempt`, the loop's
    /// `[[allow_test_change]]` path globs, are neither guarded nor frozen from t0 in the check.
    pub fn create(
        repo: &Path,
        statedir: &StateDir,
        run: &RunDir,
        start: Start,
        protection: &Protection<'_>,
        agent_policy: &sandbox::Policy,
        check_policy: &sandbox::Policy,
    ) -> CmdResult<(RunWorkspace, WorkspaceRecord)> {
        let Start {
            include_uncommitted,
            agent_git,
            base_commit,
        } = start;
        let agent_owner = zone_owner(agent_policy);
        let opts = BaselineOptions {
            include_uncommitted,
            owner: agent_owner,
            base_commit,
        };
        let baseline = Baseline::prepare(repo, statedir.root(), &opts).map_err(ws_failure)?;
        let info_exclude =
            crate::workspace::ignore_rules::read_info_exclude(repo).map_err(ws_failure)?;
        run.dir()
            .write_atomic(INFO_EXCLUDE, &info_exclude)
            .map_err(fs_failure)?;
        // Fail-closed before anything is made: a cap the host cannot enforce refuses the run
        // unless the policy allows skipping the `disk` layer.
        let agent_disk = sandbox::volume::cap_of(agent_policy)?;
        let check_disk = sandbox::volume::cap_of(check_policy)?;
        let workspace =
            Workspace::create(baseline, run.dir(), agent_owner, agent_disk).map_err(ws_failure)?;
        let workspace = match agent_git {
            AgentGit::None => workspace,
            AgentGit::T0 => {
                let layer = crate::workspace::agent_repo::build(
                    workspace.baseline(),
                    run.dir(),
                    agent_owner,
                )
                .map_err(ws_failure)?;
                workspace.with_agent_repo(layer)
            }
        };
        let rules = IgnoreRules::of_t0(workspace.baseline(), &info_exclude).map_err(ws_failure)?;
        let workspace = workspace.with_ignore_rules(rules);
        let protected = run_protected(&workspace, protection)?;
        let b = workspace.baseline();
        let record = WorkspaceRecord {
            mode: WorkspaceMode::Detached.as_str().into(),
            repo: repo.to_string_lossy().into_owned(),
            baseline_key: b.key.clone(),
            head_commit: b.head_commit.to_hex(),
            tree_id: b.tree_id.to_hex(),
            include_uncommitted: b.include_uncommitted,
            baseline_reused: b.reused,
            target: WORKSPACE_TARGET.into(),
            protected: protected.patterns().to_vec(),
            limits: Some(
                serde_json::to_value(&agent_policy.workspace)
                    .map_err(|e| Failure::internal(e.to_string()))?,
            ),
        };
        let check_owner = zone_owner(check_policy);
        let (checks, frozen) = build_frozen(&workspace, &protected, run, check_owner)?;
        let limits = agent_policy.workspace.clone();
        let ws = RunWorkspace {
            workspace,
            protected,
            check_owner,
            check_disk,
            checks,
            frozen,
            last_accepted: None,
            limits,
        };
        Ok((ws, record))
    }

    /// Re-open the workspace of a run being resumed, from its `workspace` event. Nothing is
    /// accepted yet: the caller's guards judge the workspace as the crashed process left it.
    pub fn reopen(
        event: &WorkspaceRecord,
        statedir: &StateDir,
        run: &RunDir,
        agent_git: AgentGit,
        protection: &Protection<'_>,
        agent_policy: &sandbox::Policy,
        check_policy: &sandbox::Policy,
    ) -> CmdResult<RunWorkspace> {
        let broken = || {
            Failure::workspace(format!(
                "{}: malformed workspace event",
                run.receipt_path().display()
            ))
        };
        let head = ObjectId::from_hex(event.head_commit.as_bytes()).ok_or_else(broken)?;
        let baseline = Baseline::reopen(
            Path::new(&event.repo),
            statedir.root(),
            &event.baseline_key,
            head,
            event.include_uncommitted,
        )
        .map_err(ws_failure)?;
        let workspace = Workspace::open(baseline, run.dir()).map_err(ws_failure)?;
        let workspace = match agent_git {
            AgentGit::None => workspace,
            AgentGit::T0 => workspace.with_agent_repo(
                crate::workspace::agent_repo::existing(run.dir()).map_err(ws_failure)?,
            ),
        };
        // A run started before the rules were kept has none: it goes on as it began.
        let info_exclude = match run.dir().read(
            INFO_EXCLUDE,
            crate::workspace::ignore_rules::MAX_IGNORE_FILE_BYTES,
        ) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(fs_failure(e)),
        };
        let workspace = match info_exclude {
            Some(bytes) => {
                let rules = IgnoreRules::of_t0(workspace.baseline(), &bytes).map_err(ws_failure)?;
                workspace.with_ignore_rules(rules)
            }
            None => workspace,
        };
        let protected = run_protected(&workspace, protection)?;
        let check_owner = zone_owner(check_policy);
        let check_disk = sandbox::volume::cap_of(check_policy)?;
        let (checks, frozen) = build_frozen(&workspace, &protected, run, check_owner)?;
        let limits = agent_policy.workspace.clone();
        Ok(RunWorkspace {
            workspace,
            protected,
            check_owner,
            check_disk,
            checks,
            frozen,
            last_accepted: None,
            limits,
        })
    }

    /// The overlay the agent zone mounts.
    pub fn agent_overlay(&self) -> OverlayMount {
        self.workspace.agent_overlay(Path::new(WORKSPACE_TARGET))
    }

    /// What the judge zone mounts: t0's tree alone, read-only, at [`WORKSPACE_TARGET`] (its
    /// working directory, so whatever its command names, `./review.sh`, `python3 tools/judge.py`
    /// or a helper one of them sources, is the operator's copy), and the agent's tree,
    /// read-only, at [`CANDIDATE_TARGET`]: data to review, never code the judge runs.
    pub fn judge_overlays(&self) -> (OverlayMount, OverlayMount) {
        (
            self.workspace.t0_overlay(Path::new(WORKSPACE_TARGET)),
            self.workspace
                .read_only_overlay(Path::new(CANDIDATE_TARGET)),
        )
    }

    /// The tree id of t0.
    pub fn t0_tree(&self) -> String {
        self.workspace.baseline().tree_id.to_hex()
    }

    /// Snapshot the workspace after an agent step, within the policy's limits.
    pub fn snapshot(&mut self) -> Taken {
        let started = std::time::Instant::now();
        let taken = self.workspace.snapshot(&self.limits);
        let duration_ms = started.elapsed().as_millis() as u64;
        tracing::debug!(duration_ms, "workspace snapshot");
        match taken {
            Ok(snapshot) => Taken::Snapshot {
                snapshot,
                duration_ms,
            },
            Err(WorkspaceError::Interrupted { signal, .. }) => Taken::Interrupted(signal),
            Err(e) => Taken::Refused(format!("the workspace cannot be taken: {e}")),
        }
    }

    /// The run's protected paths (what the protected-path guard compares).
    /// Where t0's files and the agent's layer live on the host (for the syntax-tree guards).
    pub fn tree_files(&self) -> crate::engine::analysis_guards::TreeFiles {
        crate::engine::analysis_guards::TreeFiles {
            t0_dir: self.workspace.baseline().files_dir.clone(),
            upper: self.workspace.upper_dir().to_path_buf(),
        }
    }

    /// The baseline t0.
    pub fn baseline(&self) -> &Baseline {
        self.workspace.baseline()
    }

    pub fn protected(&self) -> &ProtectedPaths {
        &self.protected
    }

    /// The baseline's manifest (t0).
    pub fn baseline_manifest(&self) -> CmdResult<&crate::workspace::Manifest> {
        self.workspace.baseline().manifest().map_err(ws_failure)
    }

    /// Accept a snapshot the guards let through (after its check).
    pub fn accept(&mut self, snapshot: Snapshot) {
        self.last_accepted = Some(snapshot);
    }

    /// Forget the accepted state: nothing is delivered (the sentinel run showed the accepted green
    /// was not the check's own; a resumed run whose re-taken workspace a held-out check refused,
    /// when the tree accepted before it is unknown).
    pub fn withdraw_acceptance(&mut self) {
        self.last_accepted = None;
    }

    /// Accept a snapshot the ratchet kept too, keeping a copy of its layer to revert to.
    pub fn accept_as_best(&mut self, snapshot: Snapshot) -> Result<(), String> {
        super::revert::keep_accepted(self.workspace.upper_dir(), self.workspace.dir())?;
        self.accept(snapshot);
        Ok(())
    }

    /// Return the agent's layer to the last accepted snapshot (t0 before any) and prove it: the
    /// tree id of the workspace taken again. The layer of the `rejected` iteration is kept first
    /// (for a hand acceptance). `Err`: why it could not be reverted exactly.
    pub fn revert_to_best(&mut self, rejected: u64) -> Result<String, String> {
        super::revert::keep_rejected(self.workspace.upper_dir(), self.workspace.dir(), rejected)?;
        super::revert::restore_accepted(self.workspace.upper_dir(), self.workspace.dir())?;
        let expected = self
            .last_accepted
            .as_ref()
            .map_or(self.workspace.baseline().tree_id, |s| s.tree_id);
        match self.snapshot() {
            Taken::Snapshot { snapshot, .. } if snapshot.tree_id == expected => {
                Ok(expected.to_hex())
            }
            Taken::Snapshot { snapshot, .. } => Err(format!(
                "the reverted workspace has tree {}, not the accepted {}",
                snapshot.tree_id.to_hex(),
                expected.to_hex()
            )),
            Taken::Refused(detail) => Err(detail),
            Taken::Interrupted(signal) => {
                Err(format!("interrupted by signal {signal} while reverting"))
            }
        }
    }

    /// Start from the kept layer of `iteration`, which the operator accepted by hand: put it in
    /// place, take the workspace again, and accept it as the best if its tree is `tree_id`
    /// exactly. `Err`: why it could not be taken.
    pub fn take_hand_accepted(&mut self, iteration: u64, tree_id: &str) -> Result<(), String> {
        super::revert::restore_rejected(
            self.workspace.upper_dir(),
            self.workspace.dir(),
            iteration,
        )?;
        match self.snapshot() {
            Taken::Snapshot { snapshot, .. } if snapshot.tree_id.to_hex() == tree_id => self.accept_as_best(snapshot),
            Taken::Snapshot { snapshot, .. } => Err(format!(
                "the kept layer of iteration {iteration} (accepted by hand) has tree {}, not the accepted {tree_id}",
                snapshot.tree_id.to_hex()
            )),
            Taken::Refused(detail) => Err(detail),
            Taken::Interrupted(signal) => Err(format!("interrupted by signal {signal} while taking the workspace")),
        }
    }

    pub fn last_accepted(&self) -> Option<&Snapshot> {
        self.last_accepted.as_ref()
    }

    /// Build the throwaway layers of the check of `iteration` over `snapshot` (the agent's step,
    /// which the guards let through to its check); the paths `fresh` names (declared reports)
    /// are hidden from the check, so that what it reads there it wrote itself.
    pub fn check_overlay(
        &self,
        iteration: u64,
        snapshot: &Snapshot,
        fresh: &dyn Fn(&[u8]) -> bool,
    ) -> CmdResult<(OverlayMount, CheckScratch)> {
        let started = std::time::Instant::now();
        let name = format!("{iteration:04}");
        let _ = crate::workspace::fsat::remove_tree(self.checks.fd().as_raw_fd(), name.as_bytes());
        let dir = self.checks.subdir_or_create(&name).map_err(fs_failure)?;
        let target = Path::new(WORKSPACE_TARGET);
        let layers = check_layers(
            &self.workspace,
            snapshot,
            &self.frozen,
            &self.protected,
            fresh,
            &dir,
            target,
            self.check_owner,
            self.check_disk,
        )
        .map_err(ws_failure)?;
        let upper = scratch_upper(&dir, &layers)?;
        tracing::debug!(
            elapsed_us = started.elapsed().as_micros() as u64,
            "check layers"
        );
        let parent = self
            .checks
            .fd()
            .try_clone_to_owned()
            .map_err(|e| Failure::io(self.checks.path(), &e))?;
        Ok((
            layers.overlay,
            CheckScratch {
                parent,
                name,
                upper,
                tested: layers.tested,
                _volume: layers.volume,
            },
        ))
    }

    /// t0's protected paths the check's zone holds read-only (relative to the workspace).
    pub fn check_read_only(&self) -> Vec<std::path::PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        self.frozen
            .read_only()
            .iter()
            .map(|p| std::path::PathBuf::from(std::ffi::OsStr::from_bytes(p)))
            .collect()
    }

    /// Whether a file or directory a check created at `path` counts as a write to the tree it
    /// tested: at a path t0 held or a protected one (the test surface), unless it is harmless
    /// (`check_writes::harmless`: caches, bytecode, coverage data, a runner's mismatch record),
    /// ignored by t0's rules, or `fresh` (a declared report the check must write).
    pub fn created_counts(&self, path: &[u8], is_dir: bool, fresh: &dyn Fn(&[u8]) -> bool) -> bool {
        let Ok(t0) = self.workspace.baseline().manifest() else {
            return true;
        };
        // The protected patterns without the `[[allow_test_change]]` exemptions: the check-writes
        // guard stays judged on an allowed path (docs: allow_change.rs).
        (t0.get(path).is_some() || t0.has_beneath(path) || self.protected.matches_patterns(path))
            && !super::check_writes::harmless(path)
            && !self.workspace.ignore_rules().is_ignored(path, is_dir)
            && !fresh(path)
    }

    /// The `[workspace]` limits the check's writes are listed within (the agent policy's).
    pub fn limits(&self) -> &sandbox::WorkspaceLimits {
        &self.limits
    }

    /// The check's throwaway layers under the scratch name `name` (e.g. `0003-mutator`, where the
    /// canary runs an operator's mutator on the green tree; its writes land in the scratch).
    pub fn named_check_overlay(
        &self,
        name: &str,
        snapshot: &Snapshot,
        fresh: &dyn Fn(&[u8]) -> bool,
    ) -> CmdResult<(OverlayMount, CheckScratch)> {
        let _ = crate::workspace::fsat::remove_tree(self.checks.fd().as_raw_fd(), name.as_bytes());
        let dir = self.checks.subdir_or_create(name).map_err(fs_failure)?;
        let layers = check_layers(
            &self.workspace,
            snapshot,
            &self.frozen,
            &self.protected,
            fresh,
            &dir,
            Path::new(WORKSPACE_TARGET),
            self.check_owner,
            self.check_disk,
        )
        .map_err(ws_failure)?;
        let parent = self
            .checks
            .fd()
            .try_clone_to_owned()
            .map_err(|e| Failure::io(self.checks.path(), &e))?;
        let upper = scratch_upper(&dir, &layers)?;
        Ok((
            layers.overlay,
            CheckScratch {
                parent,
                name: name.to_string(),
                upper,
                tested: layers.tested,
                _volume: layers.volume,
            },
        ))
    }

    /// The throwaway layers of the check of one mutant (`name`, e.g. `0003-mutant-07`): those of
    /// [`Self::check_overlay`] with one more layer, just above the agent's, holding the mutated
    /// file at `path` (a tree path of the snapshot, never a protected one: protected paths come
    /// from t0 above it).
    pub fn mutant_overlay(
        &self,
        name: &str,
        snapshot: &Snapshot,
        fresh: &dyn Fn(&[u8]) -> bool,
        path: &str,
        bytes: &[u8],
    ) -> CmdResult<(OverlayMount, CheckScratch)> {
        let (mut overlay, scratch) = self.named_check_overlay(name, snapshot, fresh)?;
        let layer = self.checks.path().join(name).join("mutant");
        super::canary::write_layer_file(&layer, path, bytes)
            .map_err(|e| Failure::io(&layer, &e))?;
        let agent = overlay
            .lowers
            .iter()
            .position(|l| l == self.workspace.upper_dir())
            .unwrap_or(overlay.lowers.len());
        overlay.lowers.insert(agent, layer);
        Ok((overlay, scratch))
    }

    /// The throwaway layers of the sentinel run (`name`, e.g. `0003-sentinel`): those of
    /// [`Self::named_check_overlay`] with one more layer on top holding the sentinel `files`
    /// (tree paths the tree does not have, with their bytes), written by the supervisor into a
    /// directory it just made, descriptor-relative and without following a link. Only this one
    /// check sees them; the layer goes with the scratch.
    pub fn sentinel_overlay(
        &self,
        name: &str,
        snapshot: &Snapshot,
        fresh: &dyn Fn(&[u8]) -> bool,
        files: &[(String, Vec<u8>)],
    ) -> CmdResult<(OverlayMount, CheckScratch)> {
        let (mut overlay, scratch) = self.named_check_overlay(name, snapshot, fresh)?;
        let layer = self.checks.path().join(name).join("sentinel");
        write_sentinel_layer(&self.checks, name, files).map_err(|e| Failure::io(&layer, &e))?;
        overlay.lowers.insert(0, layer);
        Ok((overlay, scratch))
    }

    /// Deliver the last accepted state, if it differs from t0, within the delivery time bound.
    /// Write the last accepted tree into the operator's object store (the comprehension gate's
    /// `git diff FROM TO`); nothing when there is none.
    pub fn store_accepted(&self, run: &RunDir) -> Result<(), WorkspaceError> {
        match &self.last_accepted {
            Some(snapshot) => crate::workspace::deliver::store_tree(
                &self.workspace,
                snapshot,
                run.dir(),
                &self.limits,
            ),
            None => Ok(()),
        }
    }

    pub fn deliver(
        &self,
        run_id: &str,
        run: &RunDir,
        message: &str,
    ) -> Result<Option<Delivery>, WorkspaceError> {
        let Some(snapshot) = &self.last_accepted else {
            return Ok(None);
        };
        if snapshot.tree_id == self.workspace.baseline().tree_id {
            return Ok(None);
        }
        deliver(
            &self.workspace,
            snapshot,
            run_id,
            run.dir(),
            message,
            &self.limits,
        )
        .map(Some)
    }
}
