//! The baseline t0: the tree the agent starts from, materialised once per tree id and cached
//! read-only under `.loopexec/baselines/<key>/` (`tree/` holds the files, `manifest` the listing).
//!
//! Built with plumbing only (see `git`): `rev-parse` finds HEAD's commit and tree, `ls-tree -r -z`
//! lists it, `cat-file --batch` streams the blobs, and the files are written through descriptors
//! (`fsat`) with every path checked by `tree_path`. No hook, filter, textconv or fsmonitor of the
//! repository can run, and nothing of `.git` (remotes, config, credentials, objects) is copied:
//! the baseline is plain files. With `include_uncommitted`, the working-tree bytes of tracked
//! files and of untracked, non-ignored files are taken instead (raw bytes, no clean filter; the
//! state dir itself is left out when it lies inside the working tree); the cache key is then the
//! tree id of that state.
//!
//! A cache entry is built in a `.building-*` directory and renamed into place only when complete
//! (after `syncfs`), so a present entry is always whole. When loopexec runs as root the files are
//! owned by the zone's uid (the cache key then carries `-u<uid>`), so the agent can edit them
//! through the overlay. The cache is never written after it is complete; the overlay never
//! writes to a lower layer.

use super::fsat;
use super::git::Git;
use super::manifest::{Entry, EntryKind, Manifest};
use super::object_id::{blob_id, blob_id_of_file, ObjectId};
use super::tree_path;
use super::{WorkspaceError, WsResult};
use crate::safefs::SafeDir;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How to take the baseline.
#[derive(Debug, Clone, Default)]
pub struct BaselineOptions {
    /// Also take the working-tree changes of tracked files and untracked, non-ignored files.
    pub include_uncommitted: bool,
    /// Owner (uid, gid) of the materialised files: the zone's ids when loopexec runs as root;
    /// None keeps the caller's.
    pub owner: Option<(u32, u32)>,
    /// The commit t0 is taken from instead of HEAD (a task_list run's task runs start from the
    /// tree the plan reached); never with `include_uncommitted`.
    pub base_commit: Option<String>,
}

/// A materialised, cached baseline.
#[derive(Debug)]
pub struct Baseline {
    /// The repository's top-level directory.
    pub repo: PathBuf,
    /// HEAD's commit at t0 (the parent of the delivered commit).
    pub head_commit: ObjectId,
    /// The tree id of t0 (HEAD's tree, or the working state's with `include_uncommitted`).
    pub tree_id: ObjectId,
    /// Whether the working-tree changes are part of t0.
    pub include_uncommitted: bool,
    /// The cache entry's directory name under `baselines/`.
    pub key: String,
    /// The directory holding the files (the overlay's lowest layer).
    pub files_dir: PathBuf,
    /// Whether the cache entry already existed (warm) or was built now (cold).
    pub reused: bool,
    cache_dir: PathBuf,
    manifest: OnceLock<Manifest>,
}

const BASELINES: &str = "baselines";

/// A full hexadecimal object id (SHA-1 or SHA-256): what a base commit is given as.
fn is_hex_object_id(raw: &str) -> bool {
    matches!(raw.len(), 40 | 64) && raw.bytes().all(|b| b.is_ascii_hexdigit())
}
const MANIFEST: &str = "manifest";
const FILES: &str = "tree";
const MANIFEST_LIMIT: u64 = 4 << 30;
const SYMLINK_LIMIT: u64 = 4096;

impl Baseline {
    /// Find or build the baseline of `repo` under `state_root` (the `.loopexec` directory).
    pub fn prepare(
        repo: &Path,
        state_root: &SafeDir,
        opts: &BaselineOptions,
    ) -> WsResult<Baseline> {
        let top = toplevel(repo)?;
        let git = Git::new(&top);
        let no_commit = |detail: &str| WorkspaceError::NoCommit {
            repo: top.clone(),
            detail: detail.into(),
        };
        let head_commit = match &opts.base_commit {
            None => git
                .resolve("HEAD^{commit}")?
                .ok_or_else(|| no_commit("HEAD does not name a commit"))?,
            Some(base) if opts.include_uncommitted || !is_hex_object_id(base) => {
                return Err(no_commit(&format!(
                    "the base commit {} is not a full object id taken alone",
                    crate::inert::inert(base)
                )))
            }
            Some(base) => git
                .resolve(&format!("{base}^{{commit}}"))?
                .ok_or_else(|| no_commit("the base commit is not in the repository"))?,
        };
        let head_tree = git
            .resolve(&format!("{head_commit}^{{tree}}"))?
            .ok_or_else(|| no_commit("HEAD has no tree"))?;
        let state_inside = state_root.path().canonicalize().ok().and_then(|s| {
            s.strip_prefix(&top)
                .ok()
                .map(|r| r.as_os_str().as_bytes().to_vec())
        });
        let working = if opts.include_uncommitted {
            Some(working_manifest(&git, &top, state_inside.as_deref())?)
        } else {
            None
        };
        let tree_id = working.as_ref().map(|m| m.tree_id()).unwrap_or(head_tree);
        Baseline::materialise_tree(top, git, state_root, head_commit, tree_id, working, opts)
    }

    /// Find or build the cached files of one tree of `repo` by its id (e.g. a delivered end
    /// state, for `replay`): the cache entry when one exists, else the tree object read from the
    /// repository with plumbing only. `commit` is recorded as the baseline's commit (a commit
    /// whose tree it is, or the run's t0). A tree the repository does not hold is refused.
    pub fn of_tree(
        repo: &Path,
        state_root: &SafeDir,
        tree_id: ObjectId,
        commit: ObjectId,
        owner: Option<(u32, u32)>,
    ) -> WsResult<Baseline> {
        let top = toplevel(repo)?;
        let git = Git::new(&top);
        let cached = state_root
            .subdir(BASELINES)
            .map(|b| b.exists(&cache_key(tree_id, owner)))
            .unwrap_or(false);
        if !cached && git.resolve(&format!("{tree_id}^{{tree}}"))? != Some(tree_id) {
            return Err(WorkspaceError::Git {
                repo: top,
                command: format!("rev-parse {tree_id}^{{tree}}"),
                detail: "the repository does not hold this tree (was the delivery branch deleted and garbage-collected?)".into(),
            });
        }
        let opts = BaselineOptions {
            include_uncommitted: false,
            owner,
            base_commit: None,
        };
        Baseline::materialise_tree(top, git, state_root, commit, tree_id, None, &opts)
    }

    fn materialise_tree(
        top: PathBuf,
        git: Git,
        state_root: &SafeDir,
        head_commit: ObjectId,
        tree_id: ObjectId,
        working: Option<Manifest>,
        opts: &BaselineOptions,
    ) -> WsResult<Baseline> {
        let key = cache_key(tree_id, opts.owner);
        // The cache is the operator's: no other uid may pass through it (the zones get their
        // layers as mount trees from the supervisor, docs/workspace.md "Who can reach what").
        let baselines = state_root.subdir_or_create(BASELINES)?;
        set_mode(&baselines, 0o700)?;
        let reused = baselines.exists(&key);
        if !reused {
            let manifest = match &working {
                Some(m) => m.clone(),
                None => Manifest::parse(&git.run(
                    ["ls-tree", "-r", "-z", "--full-tree", &tree_id.to_hex()],
                    None,
                )?)?,
            };
            build(
                &git,
                &top,
                &baselines,
                &key,
                &manifest,
                working.is_some(),
                opts.owner,
            )?;
        }
        let entry = baselines.subdir(&key)?;
        let files = entry.subdir(FILES)?;
        let b = Baseline {
            repo: top,
            head_commit,
            tree_id,
            include_uncommitted: opts.include_uncommitted,
            key,
            files_dir: files.path().to_path_buf(),
            reused,
            cache_dir: entry.path().to_path_buf(),
            manifest: OnceLock::new(),
        };
        if let Some(m) = working {
            let _ = b.manifest.set(m);
        }
        Ok(b)
    }

    /// Re-open a cached baseline by the key and HEAD commit a run recorded (resume): the working
    /// tree and HEAD are not consulted again, so an operator's later edits cannot change t0.
    pub fn reopen(
        repo: &Path,
        state_root: &SafeDir,
        key: &str,
        head_commit: ObjectId,
        include_uncommitted: bool,
    ) -> WsResult<Baseline> {
        if key.is_empty() || key.starts_with('.') || key.contains('/') {
            return Err(WorkspaceError::unsafe_path(
                key.as_bytes(),
                "not a baseline key",
            ));
        }
        let entry = state_root.subdir(BASELINES)?.subdir(key)?;
        let files = entry.subdir(FILES)?;
        let manifest = Manifest::parse(&entry.read(MANIFEST, MANIFEST_LIMIT)?)?;
        let tree_id = manifest.tree_id();
        if !key.starts_with(&tree_id.to_hex()) {
            return Err(WorkspaceError::DamagedCache(
                entry.path().to_path_buf(),
                "its manifest does not hash to its key".into(),
            ));
        }
        let b = Baseline {
            repo: toplevel(repo)?,
            head_commit,
            tree_id,
            include_uncommitted,
            key: key.to_string(),
            files_dir: files.path().to_path_buf(),
            reused: true,
            cache_dir: entry.path().to_path_buf(),
            manifest: OnceLock::new(),
        };
        let _ = b.manifest.set(manifest);
        Ok(b)
    }

    /// The t0 listing (read from the cache on first use).
    pub fn manifest(&self) -> WsResult<&Manifest> {
        if let Some(m) = self.manifest.get() {
            return Ok(m);
        }
        let dir = SafeDir::open(&self.cache_dir)?;
        let m = Manifest::parse(&dir.read(MANIFEST, MANIFEST_LIMIT)?)?;
        if m.tree_id() != self.tree_id {
            return Err(WorkspaceError::DamagedCache(
                self.cache_dir.clone(),
                "its manifest does not hash to its tree id".into(),
            ));
        }
        let _ = self.manifest.set(m);
        Ok(self.manifest.get().expect("set just above"))
    }
}

fn cache_key(tree: ObjectId, owner: Option<(u32, u32)>) -> String {
    match owner {
        Some((uid, _)) if uid != nix::unistd::geteuid().as_raw() => format!("{tree}-u{uid}"),
        _ => tree.to_hex(),
    }
}

fn set_mode(dir: &SafeDir, mode: u32) -> WsResult<()> {
    nix::sys::stat::fchmod(
        dir.fd().as_raw_fd(),
        nix::sys::stat::Mode::from_bits_truncate(mode),
    )
    .map_err(|e| WorkspaceError::io(dir.path(), e.into()))
}

/// The repository's top-level directory (`rev-parse --show-toplevel`).
fn toplevel(repo: &Path) -> WsResult<PathBuf> {
    let out = Git::new(repo)
        .run(["rev-parse", "--show-toplevel"], None)
        .map_err(|e| WorkspaceError::NoCommit {
            repo: repo.to_path_buf(),
            detail: e.to_string(),
        })?;
    let text = out.strip_suffix(b"\n").unwrap_or(&out);
    if text.is_empty() {
        return Err(WorkspaceError::NoCommit {
            repo: repo.to_path_buf(),
            detail: "a bare repository has no working tree".into(),
        });
    }
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(text)))
}

/// The listing of the working state: tracked files (index) and untracked non-ignored files, as
/// they are on disk now (read without following symlinks; a path under a symlinked or missing
/// directory counts as deleted).
/// The state dir, when it lies inside the working tree (`state_dir`, relative), is never part of
/// it: its receipts and cached baselines are not the operator's files.
fn working_manifest(git: &Git, top: &Path, state_dir: Option<&[u8]>) -> WsResult<Manifest> {
    let root = fsat::open_dir_path(top).map_err(|e| WorkspaceError::io(top, e.into()))?;
    let staged = git.run(["ls-files", "-z", "--stage", "--full-name"], None)?;
    let others = git.run(
        [
            "ls-files",
            "-z",
            "--others",
            "--exclude-standard",
            "--full-name",
        ],
        None,
    )?;
    let mut m = Manifest::default();
    for rec in staged.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let tab =
            rec.iter()
                .position(|&b| b == b'\t')
                .ok_or_else(|| WorkspaceError::GitOutput {
                    command: "ls-files --stage".into(),
                    detail: "a record without a tab".into(),
                })?;
        let (head, path) = (&rec[..tab], &rec[tab + 1..]);
        tree_path::check(path)?;
        if head.starts_with(b"160000 ") {
            if let Some(oid) = head.get(7..47).and_then(ObjectId::from_hex) {
                m.insert(
                    path.to_vec(),
                    Entry {
                        kind: EntryKind::Gitlink,
                        oid,
                    },
                )?;
            }
            continue;
        }
        if let Some(e) = worktree_entry(root.as_raw_fd(), path)? {
            m.insert(path.to_vec(), e)?;
        }
    }
    let in_state_dir = |p: &[u8]| {
        state_dir.is_some_and(|d| {
            !d.is_empty() && (p == d || (p.starts_with(d) && p.get(d.len()) == Some(&b'/')))
        })
    };
    for path in others
        .split(|&b| b == 0)
        .filter(|r| !r.is_empty() && !in_state_dir(r))
    {
        tree_path::check(path)?;
        if let Some(e) = worktree_entry(root.as_raw_fd(), path)? {
            m.insert(path.to_vec(), e)?;
        }
    }
    Ok(m)
}

/// What the working tree holds at `path`: a file, an executable, a symlink, or nothing usable.
fn worktree_entry(root: RawFd, path: &[u8]) -> WsResult<Option<Entry>> {
    let shown = || PathBuf::from(std::ffi::OsStr::from_bytes(path));
    let dir = match fsat::open_dir_beneath(root, tree_path::parent(path)) {
        Ok(d) => d,
        Err(_) => return Ok(None),
    };
    let name = tree_path::file_name(path);
    let st = match fsat::lstat(dir.as_raw_fd(), name) {
        Ok(st) => st,
        Err(_) => return Ok(None),
    };
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {
            let f = fsat::open_file(dir.as_raw_fd(), name)
                .map_err(|e| WorkspaceError::io(shown(), e.into()))?;
            let oid = blob_id_of_file(&f, st.st_size as u64, &mut |_| Ok(()))
                .map_err(|e| WorkspaceError::io(shown(), e))?;
            let kind = if st.st_mode & 0o100 != 0 {
                EntryKind::Executable
            } else {
                EntryKind::File
            };
            Ok(Some(Entry { kind, oid }))
        }
        libc::S_IFLNK => {
            let target = fsat::read_link(dir.as_raw_fd(), name)
                .map_err(|e| WorkspaceError::io(shown(), e.into()))?;
            Ok(Some(Entry {
                kind: EntryKind::Symlink,
                oid: blob_id(&target),
            }))
        }
        _ => Ok(None),
    }
}

/// Where the bytes of the baseline come from.
enum Source {
    /// `cat-file --batch` output, in manifest order.
    Objects(BufReader<std::process::ChildStdout>),
    /// The working tree, re-verified against the manifest while copying.
    WorkingTree(OwnedFd),
}

fn build(
    git: &Git,
    top: &Path,
    baselines: &SafeDir,
    key: &str,
    manifest: &Manifest,
    from_worktree: bool,
    owner: Option<(u32, u32)>,
) -> WsResult<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp_name = format!(".building-{}-{nanos}", std::process::id());
    let tmp = baselines.subdir_or_create(&tmp_name)?;
    let result = (|| -> WsResult<()> {
        set_mode(&tmp, 0o700)?;
        let files = fsat::ensure_dir(tmp.fd().as_raw_fd(), FILES.as_bytes(), 0o755)
            .map_err(|e| WorkspaceError::io(tmp.path().join(FILES), e.into()))?;
        fsat::chown_fd(&files, owner)
            .map_err(|e| WorkspaceError::io(tmp.path().join(FILES), e.into()))?;
        let files_path = tmp.path().join(FILES);
        if from_worktree {
            let root = fsat::open_dir_path(top).map_err(|e| WorkspaceError::io(top, e.into()))?;
            materialise(
                manifest,
                files,
                &files_path,
                Source::WorkingTree(root),
                owner,
            )?;
        } else {
            let mut child = git
                .command(["cat-file", "--batch"])
                .stdin(std::process::Stdio::piped())
                .spawn()
                .map_err(WorkspaceError::GitSpawn)?;
            let mut stdin = child
                .stdin
                .take()
                .ok_or_else(|| WorkspaceError::GitSpawn(std::io::Error::other("no stdin pipe")))?;
            let oids: Vec<ObjectId> = manifest
                .iter()
                .filter(|(_, e)| e.kind != EntryKind::Gitlink)
                .map(|(_, e)| e.oid)
                .collect();
            let feeder = std::thread::spawn(move || -> std::io::Result<()> {
                let mut w = std::io::BufWriter::new(&mut stdin);
                for oid in oids {
                    writeln!(w, "{oid}")?;
                }
                w.flush()
            });
            let stdout = child
                .stdout
                .take()
                .ok_or_else(|| WorkspaceError::GitSpawn(std::io::Error::other("no stdout pipe")))?;
            let r = materialise(
                manifest,
                files,
                &files_path,
                Source::Objects(BufReader::with_capacity(1 << 20, stdout)),
                owner,
            );
            if r.is_err() {
                let _ = child.kill();
            }
            let _ = feeder.join();
            let status = child.wait().map_err(WorkspaceError::GitSpawn)?;
            r?;
            if !status.success() {
                return Err(WorkspaceError::Git {
                    repo: git.repo().to_path_buf(),
                    command: "cat-file --batch".into(),
                    detail: format!("exited with {status}"),
                });
            }
        }
        let mut mf = fsat::create_file(tmp.fd().as_raw_fd(), MANIFEST.as_bytes(), 0o400)
            .map_err(|e| WorkspaceError::io(tmp.path().join(MANIFEST), e.into()))?;
        mf.write_all(&manifest.to_bytes())
            .map_err(|e| WorkspaceError::io(tmp.path().join(MANIFEST), e))?;
        drop(mf);
        nix::unistd::syncfs(tmp.fd().as_raw_fd())
            .map_err(|e| WorkspaceError::io(tmp.path(), e.into()))?;
        Ok(())
    })();
    if let Err(e) = result {
        let _ = fsat::remove_tree(baselines.fd().as_raw_fd(), tmp_name.as_bytes());
        return Err(e);
    }
    match nix::fcntl::renameat2(
        Some(baselines.fd().as_raw_fd()),
        tmp_name.as_str(),
        Some(baselines.fd().as_raw_fd()),
        key,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => baselines.sync().map_err(Into::into),
        Err(nix::errno::Errno::EEXIST) | Err(nix::errno::Errno::ENOTEMPTY) => {
            // Another loopexec finished the same baseline first: use theirs.
            let _ = fsat::remove_tree(baselines.fd().as_raw_fd(), tmp_name.as_bytes());
            Ok(())
        }
        Err(e) => {
            let _ = fsat::remove_tree(baselines.fd().as_raw_fd(), tmp_name.as_bytes());
            Err(WorkspaceError::io(baselines.path().join(key), e.into()))
        }
    }
}

/// Write every manifest entry beneath `root` (a fresh, empty directory).
fn materialise(
    manifest: &Manifest,
    root: OwnedFd,
    root_path: &Path,
    mut source: Source,
    owner: Option<(u32, u32)>,
) -> WsResult<()> {
    let mut stack = fsat::DirStack::new(root);
    let at = |p: &[u8]| root_path.join(std::ffi::OsStr::from_bytes(p));
    for (path, entry) in manifest.iter() {
        let parent = tree_path::parent(path);
        let dir = stack
            .seek(parent, Some(0o755), &mut |fd, _| fsat::chown_fd(&fd, owner))
            .map_err(|e| WorkspaceError::io(at(parent), e.into()))?;
        let name = tree_path::file_name(path);
        let io = |e: std::io::Error| WorkspaceError::io(at(path), e);
        match entry.kind {
            EntryKind::Gitlink => {
                let fd = fsat::ensure_dir(dir, name, 0o755).map_err(|e| io(e.into()))?;
                fsat::chown_fd(&fd, owner).map_err(|e| io(e.into()))?;
            }
            EntryKind::Symlink => {
                let target = match &mut source {
                    Source::Objects(r) => {
                        read_object(r, entry.oid, SYMLINK_LIMIT, &mut Vec::new(), path)?
                    }
                    Source::WorkingTree(wt) => {
                        let d = fsat::open_dir_beneath(wt.as_raw_fd(), tree_path::parent(path))
                            .map_err(|e| io(e.into()))?;
                        fsat::read_link(d.as_raw_fd(), name).map_err(|e| io(e.into()))?
                    }
                };
                if blob_id(&target) != entry.oid {
                    return Err(changed(path, entry.oid, blob_id(&target)));
                }
                fsat::symlink(dir, name, &target).map_err(|e| io(e.into()))?;
                fsat::chown_at(dir, name, owner).map_err(|e| io(e.into()))?;
            }
            EntryKind::File | EntryKind::Executable => {
                let mode = if entry.kind == EntryKind::Executable {
                    0o755
                } else {
                    0o644
                };
                let mut out = fsat::create_file(dir, name, mode).map_err(|e| io(e.into()))?;
                match &mut source {
                    Source::Objects(r) => {
                        read_object(r, entry.oid, u64::MAX, &mut out, path)?;
                    }
                    Source::WorkingTree(wt) => {
                        let d = fsat::open_dir_beneath(wt.as_raw_fd(), tree_path::parent(path))
                            .map_err(|e| io(e.into()))?;
                        let src = fsat::open_file(d.as_raw_fd(), name).map_err(|e| io(e.into()))?;
                        let len = src.metadata().map_err(io)?.len();
                        let found = blob_id_of_file(&src, len, &mut |chunk| out.write_all(chunk))
                            .map_err(io)?;
                        if found != entry.oid {
                            return Err(changed(path, entry.oid, found));
                        }
                    }
                }
                nix::sys::stat::fchmod(
                    out.as_raw_fd(),
                    nix::sys::stat::Mode::from_bits_truncate(mode),
                )
                .map_err(|e| io(e.into()))?;
                fsat::chown_fd(&out, owner).map_err(|e| io(e.into()))?;
            }
        }
    }
    Ok(())
}

fn changed(path: &[u8], expected: ObjectId, found: ObjectId) -> WorkspaceError {
    WorkspaceError::Changed {
        what: String::from_utf8_lossy(path).into_owned(),
        expected: expected.to_hex(),
        found: found.to_hex(),
    }
}

/// Read one `cat-file --batch` record for `oid` into `out`; returns the bytes when `out` is a Vec.
fn read_object<W: Write + AsBytes>(
    r: &mut BufReader<std::process::ChildStdout>,
    oid: ObjectId,
    limit: u64,
    out: &mut W,
    path: &[u8],
) -> WsResult<Vec<u8>> {
    let bad = |detail: String| WorkspaceError::GitOutput {
        command: "cat-file --batch".into(),
        detail,
    };
    let mut header = Vec::new();
    r.read_until(b'\n', &mut header)
        .map_err(|e| bad(e.to_string()))?;
    let text = String::from_utf8_lossy(&header);
    let mut fields = text.trim_end().split(' ');
    let (id, kind, size) = (fields.next(), fields.next(), fields.next());
    if id != Some(oid.to_hex().as_str()) || kind != Some("blob") {
        return Err(bad(format!(
            "expected blob {oid} for {}, got {:?}",
            String::from_utf8_lossy(path),
            text.trim_end()
        )));
    }
    let size: u64 = size
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("no size in {:?}", text.trim_end())))?;
    if size > limit {
        return Err(WorkspaceError::unsafe_path(
            path,
            format!("symlink target of {size} bytes"),
        ));
    }
    let copied = std::io::copy(&mut r.by_ref().take(size), out)
        .map_err(|e| WorkspaceError::io(PathBuf::from(std::ffi::OsStr::from_bytes(path)), e))?;
    if copied != size {
        return Err(bad(format!("short object {oid}")));
    }
    let mut nl = [0u8; 1];
    r.read_exact(&mut nl).map_err(|e| bad(e.to_string()))?;
    Ok(out.bytes())
}

/// Lets `read_object` hand back what it wrote when writing into memory.
trait AsBytes {
    fn bytes(&self) -> Vec<u8>;
}
impl AsBytes for Vec<u8> {
    fn bytes(&self) -> Vec<u8> {
        self.clone()
    }
}
impl AsBytes for std::fs::File {
    fn bytes(&self) -> Vec<u8> {
        Vec::new()
    }
}
