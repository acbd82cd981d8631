//! Delivery at halt: the last accepted snapshot reaches the operator as a branch
//! `loopexec/<run-id>` in their repository and as a patch file in the run directory.
//!
//! Plumbing only, through the hardened `git` invocation, in this order: the blobs the operator's
//! object store lacks (one `cat-file --batch-check` asks which) are streamed into one `git
//! fast-import` process (content read by loopexec through descriptors without following
//! symlinks, 64 KiB at a time, and hashed on the way: what git stores is what the snapshot
//! hashed); the tree is built in a temporary index (`GIT_INDEX_FILE` in the run directory,
//! removed after) with `update-index --index-info` and `write-tree` (and must equal the
//! snapshot's tree id); the commit is made with `commit-tree --no-gpg-sign` by the fixed identity
//! `loopexec`, its parent being HEAD at t0; the patch is written (`diff --binary --full-index
//! --no-ext-diff --no-textconv` from t0's commit to the new one); and only then, last, the branch
//! is created with `update-ref <ref> <commit> ""`, which refuses to overwrite an existing branch.
//! So a branch exists only when everything before it succeeded, and the receipt's delivery says
//! exactly that. The operator's working tree, index, HEAD and current branch are never touched
//! and no hook, filter, textconv or external diff runs. The phase runs within [`Bounds`]: the
//! operator's interrupt and `workspace.delivery_timeout_seconds` stop it between steps and while
//! objects stream.

use super::bounds::Bounds;
use super::git::Git;
use super::manifest::EntryKind;
use super::object_id::{blob_id, blob_id_of_file, ObjectId};
use super::overlay::Workspace;
use super::snapshot::{self, Snapshot};
use super::{fsat, tree_path, WorkspaceError, WsResult};
use crate::safefs::SafeDir;
use sandbox::WorkspaceLimits;
use std::io::{Read, Write};
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

/// Deliver `snapshot` (the last accepted state of `workspace`) for run `run_id`, within the
/// delivery bounds of `limits`.
pub fn deliver(
    workspace: &Workspace,
    snapshot: &Snapshot,
    run_id: &str,
    run_dir: &SafeDir,
    message: &str,
    limits: &WorkspaceLimits,
) -> WsResult<Delivery> {
    let bounds = Bounds::delivery(limits);
    let baseline = workspace.baseline();
    let git = Git::new(&baseline.repo);
    let branch = format!("loopexec/{run_id}");
    let refname = format!("refs/heads/{branch}");
    git.run(["check-ref-format", refname.as_str()], None)
        .map_err(|_| WorkspaceError::unsafe_path(refname.as_bytes(), "not a valid branch name"))?;
    let existing = git.resolve(&refname)?;
    let large = write_missing_blobs(&git, workspace, snapshot, bounds.clone())?;
    bounds.check_now()?;
    let tree = write_tree(&git, snapshot, run_dir)?;
    bounds.check_now()?;
    let parent = baseline.head_commit.to_hex();
    if let Some(found) = existing {
        // A delivery of this run that a killed supervisor finished up to the branch (its halt
        // line never written): the branch is adopted when it holds this tree on t0's commit,
        // made by loopexec; any other branch of that name is the operator's, never overwritten.
        if !earlier_delivery(&git, &found, &tree, &parent) {
            return Err(WorkspaceError::BranchExists(branch));
        }
        let patch = write_patch(&git, &parent, &found, run_id, run_dir, &large)?;
        return Ok(Delivery {
            branch,
            commit: found.to_hex(),
            tree: tree.to_hex(),
            parent,
            patch,
        });
    }
    let commit_out = git.with_identity(AUTHOR_NAME, AUTHOR_EMAIL).run(
        [
            "commit-tree",
            "--no-gpg-sign",
            "-p",
            parent.as_str(),
            "-m",
            message,
            tree.to_hex().as_str(),
        ],
        None,
    )?;
    let commit = parse_oid(&commit_out, "commit-tree")?;
    let patch = write_patch(&git, &parent, &commit, run_id, run_dir, &large)?;
    #[cfg(debug_assertions)]
    crate::test_pause::at(crate::test_pause::BEFORE_BRANCH);
    bounds.check_now()?;
    if let Err(e) = git.run(
        [
            "update-ref",
            "--no-deref",
            "-m",
            &format!("loopexec: run {run_id}"),
            refname.as_str(),
            commit.to_hex().as_str(),
            "",
        ],
        None,
    ) {
        // What the branch holds now decides what the receipt says: ours (delivered), another
        // commit (someone created it meanwhile), or nothing (not delivered).
        match git.resolve(&refname).ok().flatten() {
            Some(c) if c == commit => {}
            Some(_) => return Err(WorkspaceError::BranchExists(branch)),
            None => return Err(e),
        }
    }
    #[cfg(debug_assertions)]
    crate::test_pause::at(crate::test_pause::AFTER_BRANCH);
    Ok(Delivery {
        branch,
        commit: commit.to_hex(),
        tree: tree.to_hex(),
        parent,
        patch,
    })
}

/// Whether `commit` is what this delivery would have made: `tree` on `parent` (its only parent),
/// authored by loopexec.
fn earlier_delivery(git: &Git, commit: &ObjectId, tree: &ObjectId, parent: &str) -> bool {
    let shown = git.run(
        ["show", "-s", "--format=%T %P %an", commit.to_hex().as_str()],
        None,
    );
    shown.is_ok_and(|out| {
        String::from_utf8_lossy(&out).trim() == format!("{} {parent} {AUTHOR_NAME}", tree.to_hex())
    })
}

/// Write `snapshot`'s blobs and tree into the operator's object store, no commit, no ref: what
/// the comprehension gate needs so that `git diff FROM TO` of an accepted step works in the
/// repository (docs/gates.md; unreferenced, so `git gc` may prune them once expired).
pub fn store_tree(
    workspace: &Workspace,
    snapshot: &Snapshot,
    run_dir: &SafeDir,
    limits: &WorkspaceLimits,
) -> WsResult<()> {
    let bounds = Bounds::delivery(limits);
    let git = Git::new(&workspace.baseline().repo);
    write_missing_blobs(&git, workspace, snapshot, bounds.clone())?;
    bounds.check_now()?;
    write_tree(&git, snapshot, run_dir)?;
    Ok(())
}

fn parse_oid(out: &[u8], command: &str) -> WsResult<ObjectId> {
    let text = out.strip_suffix(b"\n").unwrap_or(out);
    ObjectId::from_hex(text).ok_or_else(|| WorkspaceError::GitOutput {
        command: command.into(),
        detail: String::from_utf8_lossy(text).into_owned(),
    })
}

/// Write into the operator's object store every blob of the snapshot it does not have (the
/// agent's files, and working-tree files taken with `include_uncommitted`), streamed into one
/// `git fast-import`. Returns the paths whose blob is over [`LARGE_BLOB_BYTES`].
fn write_missing_blobs(
    git: &Git,
    workspace: &Workspace,
    snapshot: &Snapshot,
    mut bounds: Bounds,
) -> WsResult<Vec<Vec<u8>>> {
    let blobs: Vec<(&Vec<u8>, ObjectId)> = snapshot
        .manifest
        .iter()
        .filter(|(_, e)| e.kind != EntryKind::Gitlink)
        .map(|(p, e)| (p, e.oid))
        .collect();
    let mut query = Vec::with_capacity(blobs.len() * 41);
    for (_, oid) in &blobs {
        query.extend_from_slice(format!("{oid}\n").as_bytes());
    }
    let answer = git.run(
        [
            "cat-file",
            "--batch-check=%(objectname) %(objecttype) %(objectsize)",
        ],
        Some(&query),
    )?;
    drop(query);
    let lines: Vec<&[u8]> = answer
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() != blobs.len() {
        return Err(WorkspaceError::GitOutput {
            command: "cat-file --batch-check".into(),
            detail: format!("{} answers for {} objects", lines.len(), blobs.len()),
        });
    }
    let mut missing = Vec::new();
    let mut large = Vec::new();
    for ((path, _), line) in blobs.iter().zip(lines) {
        let mut fields = line.split(|&b| b == b' ').skip(1);
        match (
            fields.next(),
            fields
                .next()
                .and_then(|n| std::str::from_utf8(n).ok()?.parse::<u64>().ok()),
        ) {
            (Some(b"blob"), Some(size)) if size > LARGE_BLOB_BYTES => large.push(path.to_vec()),
            (Some(b"blob"), Some(_)) => {}
            _ => missing.push(*path),
        }
    }
    if missing.is_empty() {
        return Ok(large);
    }
    let mut importer = FastImport::start(git)?;
    let result = stream_blobs(
        &mut importer,
        workspace,
        snapshot,
        &missing,
        &mut bounds,
        &mut large,
    );
    importer.finish(git, result)?;
    Ok(large)
}

/// Blobs over this size are streamed straight into a pack (no delta search in memory) and only
/// listed in the patch: any `git diff` that prints them holds each whole in memory. The branch
/// holds them.
const LARGE_BLOB_BYTES: u64 = 64 << 20;

/// Each missing blob, read beneath its layer (the upper layer when the agent wrote it, the
/// baseline otherwise) with one bounded-descriptor cursor per layer, into fast-import.
fn stream_blobs(
    importer: &mut FastImport,
    workspace: &Workspace,
    snapshot: &Snapshot,
    missing: &[&Vec<u8>],
    bounds: &mut Bounds,
    large: &mut Vec<Vec<u8>>,
) -> WsResult<()> {
    let upper = workspace.upper_dir();
    let base = workspace.baseline().files_dir.as_path();
    let open = |root: &Path| {
        fsat::open_dir_path(root)
            .map(fsat::DirStack::new)
            .map_err(|e| WorkspaceError::io(root, e.into()))
    };
    let (mut upper_dirs, mut base_dirs) = (open(upper)?, open(base)?);
    for path in missing {
        bounds.tick()?;
        let entry = snapshot
            .manifest
            .get(path)
            .ok_or_else(|| WorkspaceError::unsafe_path(path, "not in the snapshot"))?;
        let from_upper = snapshot.from_upper.contains(*path);
        let (root, dirs) = if from_upper {
            (upper, &mut upper_dirs)
        } else {
            (base, &mut base_dirs)
        };
        let host_path = snapshot::source_of(snapshot, upper, base, path);
        let io = |e: std::io::Error| WorkspaceError::io(&host_path, e);
        let dir = dirs
            .seek(tree_path::parent(path), None, &mut |_, _| Ok(()))
            .map_err(|e| WorkspaceError::io(root, e.into()))?;
        let name = tree_path::file_name(path);
        let written = if entry.kind == EntryKind::Symlink {
            let target = fsat::read_link(dir, name).map_err(|e| io(e.into()))?;
            importer.blob_header(target.len() as u64).map_err(io)?;
            importer.write(&target).map_err(io)?;
            blob_id(&target)
        } else {
            let file = fsat::open_file(dir, name).map_err(|e| io(e.into()))?;
            let len = file.metadata().map_err(io)?.len();
            if len > LARGE_BLOB_BYTES {
                large.push(path.to_vec());
            }
            importer.blob_header(len).map_err(io)?;
            let mut stopped = None;
            let hashed = blob_id_of_file(&file, len, &mut |chunk| {
                if let Err(e) = bounds.tick() {
                    stopped = Some(e);
                    return Err(std::io::Error::other("stopped"));
                }
                importer.write(chunk)
            });
            if let Some(e) = stopped {
                return Err(e);
            }
            hashed.map_err(io)?
        };
        importer.write(b"\n").map_err(io)?;
        if written != entry.oid {
            return Err(WorkspaceError::Changed {
                what: host_path.display().to_string(),
                expected: entry.oid.to_hex(),
                found: written.to_hex(),
            });
        }
    }
    Ok(())
}

/// One `git fast-import` process receiving blobs on its stdin.
struct FastImport {
    child: std::process::Child,
    stdin: Option<std::io::BufWriter<std::process::ChildStdin>>,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl FastImport {
    fn start(git: &Git) -> WsResult<FastImport> {
        let threshold = format!("--big-file-threshold={LARGE_BLOB_BYTES}");
        let mut cmd = git.command(["fast-import", "--quiet", "--done", threshold.as_str()]);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null());
        let mut child = cmd.spawn().map_err(WorkspaceError::GitSpawn)?;
        let stdin = child
            .stdin
            .take()
            .map(|s| std::io::BufWriter::with_capacity(1 << 16, s));
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let _ = (&mut e).take(4096).read_to_end(&mut out);
                let _ = std::io::copy(&mut e, &mut std::io::sink());
                out
            })
        });
        Ok(FastImport {
            child,
            stdin,
            stderr,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match &mut self.stdin {
            Some(w) => w.write_all(bytes),
            None => Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
        }
    }

    fn blob_header(&mut self, len: u64) -> std::io::Result<()> {
        self.write(format!("blob\ndata {len}\n").as_bytes())
    }

    /// End the stream (`done`) when `result` is Ok and wait for git; on an error, kill it first
    /// (a half-written stream never becomes a branch: fast-import is given no ref to write).
    fn finish(mut self, git: &Git, result: WsResult<()>) -> WsResult<()> {
        let ended = match (&result, self.stdin.as_mut()) {
            (Ok(()), Some(w)) => w.write_all(b"done\n").and_then(|_| w.flush()),
            _ => Ok(()),
        };
        if result.is_err() || ended.is_err() {
            let _ = self.child.kill();
        }
        drop(self.stdin.take());
        let status = self.child.wait().map_err(WorkspaceError::GitSpawn)?;
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        result?;
        if !status.success() || ended.is_err() {
            return Err(WorkspaceError::Git {
                repo: git.repo().to_path_buf(),
                command: "fast-import".into(),
                detail: String::from_utf8_lossy(&stderr).trim().to_string(),
            });
        }
        Ok(())
    }
}

/// Build the tree in a temporary index and check it is the snapshot's.
fn write_tree(git: &Git, snapshot: &Snapshot, run_dir: &SafeDir) -> WsResult<ObjectId> {
    let index_name = "delivery.index";
    let index_path = run_dir.path().join(index_name);
    let _ = nix::unistd::unlinkat(
        Some(run_dir.fd().as_raw_fd()),
        index_name,
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    );
    let _ = nix::unistd::unlinkat(
        Some(run_dir.fd().as_raw_fd()),
        "delivery.index.lock",
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    );
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
    let _ = nix::unistd::unlinkat(
        Some(run_dir.fd().as_raw_fd()),
        index_name,
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    );
    let tree = result?;
    if tree != snapshot.tree_id {
        return Err(WorkspaceError::Changed {
            what: "the delivered tree".into(),
            expected: snapshot.tree_id.to_hex(),
            found: tree.to_hex(),
        });
    }
    Ok(tree)
}

/// The patch from t0's commit to the delivered one: `--binary` for every path but the `large`
/// ones, which follow as `--raw` lines (mode, blob ids, path: git reads no blob for them, and
/// `git apply` skips them as commentary; the branch holds their content).
fn write_patch(
    git: &Git,
    parent: &str,
    commit: &ObjectId,
    run_id: &str,
    run_dir: &SafeDir,
    large: &[Vec<u8>],
) -> WsResult<PathBuf> {
    let name = format!("loopexec-{run_id}.patch");
    // Truncated, not created anew: a delivery a killed supervisor began left its patch here.
    let file = run_dir.create_truncate(&name, 0o600)?;
    let commit = commit.to_hex();
    let threshold = format!("core.bigFileThreshold={LARGE_BLOB_BYTES}");
    let spec = |magic: &str, p: &[u8]| {
        let mut a = std::ffi::OsString::from(format!(":({magic})"));
        a.push(std::ffi::OsStr::from_bytes(p));
        a
    };
    let diff = |format: &str, pathspecs: Vec<std::ffi::OsString>| -> WsResult<()> {
        let mut args: Vec<std::ffi::OsString> = [
            "-c",
            threshold.as_str(),
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--full-index",
            "--no-abbrev",
            "--no-color",
            "--no-renames",
        ]
        .iter()
        .map(|a| a.into())
        .collect();
        args.push(format.into());
        args.extend([parent.into(), commit.as_str().into(), "--".into()]);
        args.extend(pathspecs);
        let mut cmd = git.command(args);
        cmd.stdout(
            file.try_clone()
                .map_err(|e| WorkspaceError::io(run_dir.path().join(&name), e))?,
        );
        let out = cmd.output().map_err(WorkspaceError::GitSpawn)?;
        if !out.status.success() {
            return Err(WorkspaceError::Git {
                repo: git.repo().to_path_buf(),
                command: "diff".into(),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(())
    };
    let mut everything_else = vec![std::ffi::OsString::from(":(top)")];
    everything_else.extend(large.iter().map(|p| spec("top,exclude,literal", p)));
    diff("--binary", everything_else)?;
    if !large.is_empty() {
        let note = format!("# loopexec: blobs over {LARGE_BLOB_BYTES} bytes, listed (mode, ids, path), not inlined; the branch holds them\n");
        (&file)
            .write_all(note.as_bytes())
            .map_err(|e| WorkspaceError::io(run_dir.path().join(&name), e))?;
        diff(
            "--raw",
            large.iter().map(|p| spec("top,literal", p)).collect(),
        )?;
    }
    Ok(run_dir
        .path()
        .join(std::ffi::OsStr::from_bytes(name.as_bytes())))
}
