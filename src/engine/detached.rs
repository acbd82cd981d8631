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
use crate::receipt::store::{fs_failure, RunDir, StateDir};
use crate::safefs::SafeDir;
use crate::workspace::{
    check_layers, deliver, protected_changes, Baseline, BaselineOptions, Delivery, FrozenLayer, ObjectId, ProtectedChange,
    ProtectedPaths, Snapshot, Workspace, WorkspaceError,
};
use sandbox::OverlayMount;
use serde_json::{json, Map, Value};
use std::os::fd::AsRawFd;
use std::path::Path;

/// Where the workspace appears inside the zones.
pub const WORKSPACE_TARGET: &str = "/workspace";
/// Per-check scratch layers live under the run directory and are removed after each check; the
/// frozen layer of t0's protected paths (`checks/frozen`) is built once per run.
const CHECKS: &str = "checks";

/// How a run's commands see the operator's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
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

/// Whether `workdir` is the top of a git work tree (it has a `.git` entry).
pub fn is_git_repository(workdir: &Path) -> bool {
    std::fs::symlink_metadata(workdir.join(".git")).is_ok()
}

/// The uid/gid that must own the zone-writable layers: the zone's, when loopexec runs as root.
pub fn zone_owner(policy: &sandbox::Policy) -> Option<(u32, u32)> {
    nix::unistd::geteuid().is_root().then_some((policy.identity.uid_when_root, policy.identity.gid_when_root))
}

/// What an agent step left behind.
pub struct AgentStep {
    pub snapshot: Snapshot,
    pub protected: Vec<ProtectedChange>,
    /// How long the snapshot took (its bound is the policy's `workspace.snapshot_timeout_seconds`).
    pub duration_ms: u64,
}

/// How reading the workspace after an agent step ended.
pub enum AfterAgent {
    /// A snapshot, to guard and accept.
    Step(AgentStep),
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
}

impl CheckScratch {
    /// The check's own writes (its scratch upper layer), e.g. to read the JUnit report it wrote.
    pub fn writes(&self) -> &SafeDir {
        &self.upper
    }
}

impl Drop for CheckScratch {
    fn drop(&mut self) {
        // Through descriptors: the overlay's work directory inside is mode 000.
        let _ = crate::workspace::fsat::remove_tree(self.parent.as_raw_fd(), self.name.as_bytes());
    }
}

/// The detached workspace of one run.
pub struct RunWorkspace {
    workspace: Workspace,
    protected: ProtectedPaths,
    check_owner: Option<(u32, u32)>,
    /// `<run>/checks`, where each check's scratch layers are made.
    checks: SafeDir,
    /// t0's protected entries: the top layer of every check.
    frozen: FrozenLayer,
    /// The last snapshot that passed the guards (what is delivered at the end).
    last_accepted: Option<Snapshot>,
    /// The agent policy's `[workspace]` limits and time bounds.
    limits: sandbox::WorkspaceLimits,
    /// Why the workspace a resumed run found could not be taken (the run then halts with it).
    refused_at_reopen: Option<String>,
}

fn ws_failure(e: crate::workspace::WorkspaceError) -> Failure {
    e.into()
}

/// `<run>/checks`, traversable by the exec zone's uid when loopexec runs as root.
fn checks_dir(run: &RunDir, check_owner: Option<(u32, u32)>) -> CmdResult<SafeDir> {
    let checks = run.dir().subdir_or_create(CHECKS).map_err(fs_failure)?;
    if check_owner.is_some() {
        crate::workspace::fsat::allow_traverse(&checks.fd()).map_err(|e| Failure::io(checks.path(), &e.into()))?;
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
    let _ = crate::workspace::fsat::remove_tree(checks.fd().as_raw_fd(), FrozenLayer::NAME.as_bytes());
    let frozen = FrozenLayer::build(workspace.baseline(), protected, &checks, check_owner).map_err(ws_failure)?;
    Ok((checks, frozen))
}

impl RunWorkspace {
    /// Take the baseline t0 of `repo` and create the run's workspace; returns the fields of the
    /// `workspace` receipt event.
    pub fn create(
        repo: &Path,
        statedir: &StateDir,
        run: &RunDir,
        include_uncommitted: bool,
        protected_extra: &[String],
        agent_policy: &sandbox::Policy,
        check_policy: &sandbox::Policy,
    ) -> CmdResult<(RunWorkspace, Map<String, Value>)> {
        let protected = ProtectedPaths::new(true, protected_extra).map_err(ws_failure)?;
        let agent_owner = zone_owner(agent_policy);
        let opts = BaselineOptions { include_uncommitted, owner: agent_owner };
        let baseline = Baseline::prepare(repo, statedir.root(), &opts).map_err(ws_failure)?;
        let workspace = Workspace::create(baseline, run.dir(), agent_owner).map_err(ws_failure)?;
        let b = workspace.baseline();
        let fields = match json!({
            "mode": WorkspaceMode::Detached.as_str(),
            "repo": repo.to_string_lossy(),
            "baseline_key": b.key,
            "head_commit": b.head_commit.to_hex(),
            "tree_id": b.tree_id.to_hex(),
            "include_uncommitted": b.include_uncommitted,
            "baseline_reused": b.reused,
            "target": WORKSPACE_TARGET,
            "protected": protected.patterns(),
            "limits": agent_policy.workspace,
        }) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        let check_owner = zone_owner(check_policy);
        let (checks, frozen) = build_frozen(&workspace, &protected, run, check_owner)?;
        let limits = agent_policy.workspace.clone();
        let ws = RunWorkspace { workspace, protected, check_owner, checks, frozen, last_accepted: None, limits, refused_at_reopen: None };
        Ok((ws, fields))
    }

    /// Re-open the workspace of a run being resumed, from its `workspace` event.
    pub fn reopen(
        event: &Map<String, Value>,
        statedir: &StateDir,
        run: &RunDir,
        protected_extra: &[String],
        agent_policy: &sandbox::Policy,
        check_policy: &sandbox::Policy,
    ) -> CmdResult<RunWorkspace> {
        let text = |k: &str| event.get(k).and_then(Value::as_str).map(str::to_string);
        let broken = || Failure::workspace(format!("{}: malformed workspace event", run.receipt_path().display()));
        let repo = text("repo").ok_or_else(broken)?;
        let key = text("baseline_key").ok_or_else(broken)?;
        let head = text("head_commit").and_then(|h| ObjectId::from_hex(h.as_bytes())).ok_or_else(broken)?;
        let include_uncommitted = event.get("include_uncommitted").and_then(Value::as_bool).unwrap_or(false);
        let baseline = Baseline::reopen(Path::new(&repo), statedir.root(), &key, head, include_uncommitted).map_err(ws_failure)?;
        let workspace = Workspace::open(baseline, run.dir()).map_err(ws_failure)?;
        let protected = ProtectedPaths::new(true, protected_extra).map_err(ws_failure)?;
        let check_owner = zone_owner(check_policy);
        let (checks, frozen) = build_frozen(&workspace, &protected, run, check_owner)?;
        let limits = agent_policy.workspace.clone();
        let mut ws = RunWorkspace { workspace, protected, check_owner, checks, frozen, last_accepted: None, limits, refused_at_reopen: None };
        // The workspace as the crashed process left it is accepted again only if it passes the
        // guard; one that cannot be taken halts the resumed run with the reason.
        match ws.after_agent() {
            AfterAgent::Step(step) if step.protected.is_empty() => ws.last_accepted = Some(step.snapshot),
            AfterAgent::Step(_) => {}
            AfterAgent::Refused(detail) => ws.refused_at_reopen = Some(detail),
            AfterAgent::Interrupted(signal) => {
                return Err(Failure::workspace(format!("interrupted ({}) while reading the workspace", crate::interrupt::signal_name(signal)))
                    .with_hint("resume the run again"))
            }
        }
        Ok(ws)
    }

    /// The overlay the agent zone mounts.
    pub fn agent_overlay(&self) -> OverlayMount {
        self.workspace.agent_overlay(Path::new(WORKSPACE_TARGET))
    }

    /// Snapshot the workspace after an agent step and check the protected paths.
    pub fn after_agent(&mut self) -> AfterAgent {
        let started = std::time::Instant::now();
        let taken = self.workspace.snapshot(&self.limits).and_then(|snapshot| {
            let baseline = self.workspace.baseline().manifest()?;
            Ok((protected_changes(baseline, &snapshot, &self.protected), snapshot))
        });
        let duration_ms = started.elapsed().as_millis() as u64;
        tracing::debug!(duration_ms, "workspace snapshot");
        match taken {
            Ok((protected, snapshot)) => AfterAgent::Step(AgentStep { snapshot, protected, duration_ms }),
            Err(WorkspaceError::Interrupted { signal, .. }) => AfterAgent::Interrupted(signal),
            Err(e) => AfterAgent::Refused(format!("the workspace cannot be taken: {e}")),
        }
    }

    /// Why the workspace of a resumed run could not be taken, if it could not.
    pub fn refused_at_reopen(&self) -> Option<&str> {
        self.refused_at_reopen.as_deref()
    }

    /// The baseline's manifest (t0).
    pub fn baseline_manifest(&self) -> CmdResult<&crate::workspace::Manifest> {
        self.workspace.baseline().manifest().map_err(ws_failure)
    }

    /// Accept a snapshot that passed the guards.
    pub fn accept(&mut self, snapshot: Snapshot) {
        self.last_accepted = Some(snapshot);
    }

    pub fn last_accepted(&self) -> Option<&Snapshot> {
        self.last_accepted.as_ref()
    }

    /// Build the throwaway layers of the check of `iteration` over the last accepted snapshot.
    pub fn check_overlay(&self, iteration: u64) -> CmdResult<(OverlayMount, CheckScratch)> {
        let started = std::time::Instant::now();
        let snapshot = self.last_accepted.as_ref().ok_or_else(|| Failure::internal("no accepted snapshot to check"))?;
        let name = format!("{iteration:04}");
        let _ = crate::workspace::fsat::remove_tree(self.checks.fd().as_raw_fd(), name.as_bytes());
        let dir = self.checks.subdir_or_create(&name).map_err(fs_failure)?;
        let target = Path::new(WORKSPACE_TARGET);
        let layers = check_layers(&self.workspace, snapshot, &self.frozen, &self.protected, &dir, target, self.check_owner)
            .map_err(ws_failure)?;
        let upper = dir.subdir("upper").map_err(fs_failure)?;
        tracing::debug!(elapsed_us = started.elapsed().as_micros() as u64, "check layers");
        let parent = self.checks.fd().try_clone_to_owned().map_err(|e| Failure::io(self.checks.path(), &e))?;
        Ok((layers.overlay, CheckScratch { parent, name, upper }))
    }

    /// Deliver the last accepted state, if it differs from t0, within the delivery time bound.
    pub fn deliver(&self, run_id: &str, run: &RunDir, message: &str) -> Result<Option<Delivery>, WorkspaceError> {
        let Some(snapshot) = &self.last_accepted else {
            return Ok(None);
        };
        if snapshot.tree_id == self.workspace.baseline().tree_id {
            return Ok(None);
        }
        deliver(&self.workspace, snapshot, run_id, run.dir(), message, &self.limits).map(Some)
    }
}
