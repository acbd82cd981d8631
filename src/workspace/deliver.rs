//! Delivery at halt: the last accepted snapshot reaches the operator as a branch
//! `loopexec/<run-id>` in their repository and as a patch file in the run directory.
//!
//! Plumbing only, through the hardened `git` invocation: missing blobs are written with
//! `hash-object -w --no-filters --stdin` (content read by loopexec without following symlinks),
//! the tree is built in a temporary index (`GIT_INDEX_FILE` in the run directory, removed after)
//! with `update-index --index-info` and `write-tree` (and must equal the snapshot's tree id), the
//! commit is made with `commit-tree --no-gpg-sign` by the fixed identity `loopexec`, its parent
//! being HEAD at t0, and the branch is created with `update-ref <ref> <commit> ""`, which refuses
//! to overwrite an existing branch. The operator's working tree, index, HEAD and current branch
//! are never touched and no hook, filter, textconv or external diff runs. The patch is
//! `diff --binary --full-index --no-ext-diff --no-textconv` from t0's commit to the new one.

use super::git::Git;
use super::manifest::EntryKind;
use super::object_id::ObjectId;
use super::overlay::Workspace;
use super::snapshot::{self, Snapshot};
use super::{fsat, tree_path, WorkspaceError, WsResult};
use crate::safefs::SafeDir;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub const AUTHOR_NAME: &str = "loopexec";
pub const AUTHOR_EMAIL: &str = "loopexec@localhost";

/// What was delivered.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Delivery {
    /// `loopexec/<run-id>`.
    pub branch: String,
    pub commit: String,
    pub tree: String,
    /// The commit the branch starts from (HEAD at t0).
    pub parent: String,
    pub patch: PathBuf,
}

/// Deliver `snapshot` (the last accepted state of `workspace`) for run `run_id`.
pub fn deliver(workspace: &Workspace, snapshot: &Snapshot, run_id: &str, run_dir: &SafeDir, message: &str) -> WsResult<Delivery> {
    let baseline = workspace.baseline();
    let git = Git::new(&baseline.repo);
    let branch = format!("loopexec/{run_id}");
    let refname = format!("refs/heads/{branch}");
    git.run(["check-ref-format", refname.as_str()], None)
        .map_err(|_| WorkspaceError::unsafe_path(refname.as_bytes(), "not a valid branch name"))?;
    if git.resolve(&refname)?.is_some() {
        return Err(WorkspaceError::BranchExists(branch));
    }
    write_missing_blobs(&git, workspace, snapshot)?;
    let tree = write_tree(&git, snapshot, run_dir)?;
    let parent = baseline.head_commit.to_hex();
    let commit_out = git
        .with_identity(AUTHOR_NAME, AUTHOR_EMAIL)
        .run(["commit-tree", "--no-gpg-sign", "-p", parent.as_str(), "-m", message, tree.to_hex().as_str()], None)?;
    let commit = parse_oid(&commit_out, "commit-tree")?;
    git.run(["update-ref", "--no-deref", "-m", &format!("loopexec: run {run_id}"), refname.as_str(), commit.to_hex().as_str(), ""], None)
        .map_err(|e| if git.resolve(&refname).ok().flatten().is_some_and(|c| c != commit) { WorkspaceError::BranchExists(branch.clone()) } else { e })?;
    let patch = write_patch(&git, &parent, &commit, run_id, run_dir)?;
    Ok(Delivery { branch, commit: commit.to_hex(), tree: tree.to_hex(), parent, patch })
}

fn parse_oid(out: &[u8], command: &str) -> WsResult<ObjectId> {
    let text = out.strip_suffix(b"\n").unwrap_or(out);
    ObjectId::from_hex(text).ok_or_else(|| WorkspaceError::GitOutput { command: command.into(), detail: String::from_utf8_lossy(text).into_owned() })
}

/// Write into the operator's object store every blob of the snapshot it does not have (the
/// agent's files, and working-tree files taken with `include_uncommitted`).
fn write_missing_blobs(git: &Git, workspace: &Workspace, snapshot: &Snapshot) -> WsResult<()> {
    let blobs: Vec<(&Vec<u8>, ObjectId)> =
        snapshot.manifest.iter().filter(|(_, e)| e.kind != EntryKind::Gitlink).map(|(p, e)| (p, e.oid)).collect();
    let mut query = Vec::with_capacity(blobs.len() * 41);
    for (_, oid) in &blobs {
        query.extend_from_slice(format!("{oid}\n").as_bytes());
    }
    let answer = git.run(["cat-file", "--batch-check=%(objectname) %(objecttype)"], Some(&query))?;
    let lines: Vec<&[u8]> = answer.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    if lines.len() != blobs.len() {
        return Err(WorkspaceError::GitOutput { command: "cat-file --batch-check".into(), detail: format!("{} answers for {} objects", lines.len(), blobs.len()) });
    }
    let upper = workspace.upper_dir();
    let base = &workspace.baseline().files_dir;
    for ((path, oid), line) in blobs.iter().zip(lines) {
        if line.ends_with(b" blob") {
            continue;
        }
        let host_path = snapshot::source_of(snapshot, upper, base, path);
        let layer_root = if snapshot.from_upper.contains(*path) { upper } else { base.as_path() };
        let content = read_entry(layer_root, path, snapshot.manifest.get(path).map(|e| e.kind) == Some(EntryKind::Symlink))
            .map_err(|e| WorkspaceError::io(&host_path, e))?;
        let written = parse_oid(&git.run(["hash-object", "-w", "--no-filters", "-t", "blob", "--stdin"], Some(&content))?, "hash-object")?;
        if written != *oid {
            return Err(WorkspaceError::Changed { what: host_path.display().to_string(), expected: oid.to_hex(), found: written.to_hex() });
        }
    }
    Ok(())
}

/// The bytes of one entry (a symlink's target), opened beneath `root` without following links.
fn read_entry(root: &Path, path: &[u8], symlink: bool) -> std::io::Result<Vec<u8>> {
    let root_fd = fsat::open_dir_path(root)?;
    let dir = fsat::open_dir_beneath(root_fd.as_raw_fd(), tree_path::parent(path))?;
    let name = tree_path::file_name(path);
    if symlink {
        return Ok(fsat::read_link(dir.as_raw_fd(), name)?);
    }
    let mut f = fsat::open_file(dir.as_raw_fd(), name)?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

/// Build the tree in a temporary index and check it is the snapshot's.
fn write_tree(git: &Git, snapshot: &Snapshot, run_dir: &SafeDir) -> WsResult<ObjectId> {
    let index_name = "delivery.index";
    let index_path = run_dir.path().join(index_name);
    let _ = nix::unistd::unlinkat(Some(run_dir.fd().as_raw_fd()), index_name, nix::unistd::UnlinkatFlags::NoRemoveDir);
    let _ = nix::unistd::unlinkat(Some(run_dir.fd().as_raw_fd()), "delivery.index.lock", nix::unistd::UnlinkatFlags::NoRemoveDir);
    let private = git.with_index_file(&index_path);
    let mut info = Vec::with_capacity(snapshot.manifest.len() * 80);
    for (path, e) in snapshot.manifest.iter() {
        info.extend_from_slice(format!("{} {}\t", e.kind.git_mode(), e.oid).as_bytes());
        info.extend_from_slice(path);
        info.push(0);
    }
    let result = (|| {
        private.run(["update-index", "-z", "--index-info"], Some(&info))?;
        let out = private.run(["write-tree"], None)?;
        parse_oid(&out, "write-tree")
    })();
    let _ = nix::unistd::unlinkat(Some(run_dir.fd().as_raw_fd()), index_name, nix::unistd::UnlinkatFlags::NoRemoveDir);
    let tree = result?;
    if tree != snapshot.tree_id {
        return Err(WorkspaceError::Changed { what: "the delivered tree".into(), expected: snapshot.tree_id.to_hex(), found: tree.to_hex() });
    }
    Ok(tree)
}

fn write_patch(git: &Git, parent: &str, commit: &ObjectId, run_id: &str, run_dir: &SafeDir) -> WsResult<PathBuf> {
    let name = format!("loopexec-{run_id}.patch");
    let file = run_dir.create_new(&name, 0o644)?;
    let mut cmd = git.command(["diff", "--no-ext-diff", "--no-textconv", "--binary", "--full-index", "--no-color", "--no-renames", parent, &commit.to_hex()]);
    cmd.stdout(file);
    let out = cmd.output().map_err(WorkspaceError::GitSpawn)?;
    if !out.status.success() {
        return Err(WorkspaceError::Git {
            repo: git.repo().to_path_buf(),
            command: "diff".into(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(run_dir.path().join(std::ffi::OsStr::from_bytes(name.as_bytes())))
}
