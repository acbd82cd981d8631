//! The state of the workspace after an agent step, computed by the supervisor from the baseline
//! manifest and the overlay's upper layer (read on the host after the agent zone has ended):
//!
//! - a regular file or symlink in the upper layer replaces the entry at its path (symlinks are
//!   recorded as symlinks, their target as the blob; nothing in the upper layer is ever followed);
//! - a whiteout (character device 0:0, or an empty file carrying `user.overlay.whiteout`)
//!   deletes the path and everything beneath it;
//! - an opaque directory (`user.overlay.opaque`=`y`) hides everything the baseline had beneath it;
//! - a directory over a baseline file replaces the file;
//! - names git cannot hold (`.git` in any case) and file types it cannot hold (fifos, sockets,
//!   devices) are left out of the tree and listed in `not_in_tree`;
//! - what git would not commit is left out of the tree too and listed in `left_out`: a path t0
//!   has nothing at that t0's ignore rules ignore ([`IgnoreRules`]), and new caches (anything new
//!   beneath a `__pycache__` directory, a new directory tagged `CACHEDIR.TAG`), never descended
//!   into;
//! - every file the agent wrote that the tree holds and that is a build artefact by its name or
//!   its first bytes ([`super::artefact`]) is listed in `artefacts`.
//!
//! The result is a [`Manifest`] and its git tree id: the id `git write-tree` would give the same
//! content, so the receipt's tree, the delivered commit's tree and `git` agree. [`take_reusing`]
//! computes that same id hashing only the directories the upper layer touched (and their
//! ancestors), taking every other directory's id from the baseline's [`DirIds`].

use super::artefact;
use super::bounds::Bounds;
use super::ignore_rules::{self, IgnoreRules, LeftOut};
use super::manifest::{DirIds, Entry, EntryKind, Manifest};
use super::object_id::{blob_id, blob_id_of_file, ObjectId};
use super::{fsat, tree_path, WorkspaceError, WsResult};
use std::collections::BTreeSet;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub const OPAQUE_XATTR: &str = "user.overlay.opaque";
pub const WHITEOUT_XATTR: &str = "user.overlay.whiteout";

/// The merged tree after an agent step.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Git tree id of `manifest`.
    pub tree_id: ObjectId,
    pub manifest: Manifest,
    /// Paths whose entry comes from the upper layer (written by the agent).
    pub from_upper: BTreeSet<Vec<u8>>,
    /// Upper-layer files with more than one hard link.
    pub hardlinked: BTreeSet<Vec<u8>>,
    /// Upper-layer paths left out of the tree (`.git`, fifos, sockets, devices).
    pub not_in_tree: Vec<Vec<u8>>,
    /// Upper-layer paths git would not commit (ignored by t0's rules, or caches), each the
    /// topmost such path (nothing beneath it was read), in walk order.
    pub left_out: Vec<(Vec<u8>, LeftOut)>,
    /// Files the agent wrote that the tree holds with other content than t0's and that are build
    /// artefacts, in walk order.
    pub artefacts: Vec<Artefact>,
}

/// A build artefact the agent wrote into the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artefact {
    pub path: Vec<u8>,
    /// What it is (`shared object`, `ELF binary`, ...).
    pub kind: &'static str,
    /// How it was recognised: `name` or `content`.
    pub by: &'static str,
}

/// How a path differs between two manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    /// Content unchanged, but the file is hard-linked to another path of the upper layer.
    Hardlinked,
}

impl Snapshot {
    /// Every path that differs from `baseline`, in path order.
    pub fn changes(&self, baseline: &Manifest) -> Vec<(Vec<u8>, ChangeKind)> {
        let mut out = Vec::new();
        let mut a = baseline.iter().peekable();
        let mut b = self.manifest.iter().peekable();
        loop {
            match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some((pa, _)), None) => {
                    out.push(((*pa).clone(), ChangeKind::Deleted));
                    a.next();
                }
                (None, Some((pb, _))) => {
                    out.push(((*pb).clone(), ChangeKind::Added));
                    b.next();
                }
                (Some((pa, ea)), Some((pb, eb))) => match pa.cmp(pb) {
                    std::cmp::Ordering::Less => {
                        out.push(((*pa).clone(), ChangeKind::Deleted));
                        a.next();
                    }
                    std::cmp::Ordering::Greater => {
                        out.push(((*pb).clone(), ChangeKind::Added));
                        b.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if ea != eb {
                            out.push(((*pa).clone(), ChangeKind::Modified));
                        } else if self.hardlinked.contains(*pa) {
                            out.push(((*pa).clone(), ChangeKind::Hardlinked));
                        }
                        a.next();
                        b.next();
                    }
                },
            }
        }
        out
    }
}

/// Which entries of an upper layer the walk reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Every entry: the agent's layer, all of which may be delivered.
    Everything,
    /// Only the entries at a path of the lower tree or above one: a check's scratch layer, where
    /// a new file or a new directory is no write to the tree under test (never opened, never
    /// hashed, never descended into: a `target/` of any size costs one entry).
    TreePaths,
}

/// Merge the upper layer at `upper` over `baseline` (the tree id hashed in full), within
/// `bounds`, leaving out what `rules` ignore.
pub fn take(
    baseline: &Manifest,
    upper: &Path,
    rules: &IgnoreRules,
    bounds: &mut Bounds,
) -> WsResult<Snapshot> {
    let mut s = merge(baseline, upper, Scope::Everything, rules, None, bounds)?.0;
    s.tree_id = s.manifest.tree_id();
    Ok(s)
}

/// The same snapshot as [`take`], hashing only the directories the upper layer touched;
/// `baseline_dirs` is `baseline.dir_ids()`.
pub fn take_reusing(
    baseline: &Manifest,
    baseline_dirs: &DirIds,
    upper: &Path,
    rules: &IgnoreRules,
    bounds: &mut Bounds,
) -> WsResult<Snapshot> {
    let (mut s, dirty) = merge(baseline, upper, Scope::Everything, rules, None, bounds)?;
    s.tree_id = s.manifest.tree_id_reusing(baseline_dirs, &dirty);
    Ok(s)
}

/// What the tree `tested` became under the upper layer at `upper` (a check's writes), reading
/// only the upper entries at paths of `tested` or above them (see [`Scope::TreePaths`]), and the
/// new entries for which `read_new(path, is_dir)` holds (a new directory it refuses is never
/// descended into): so [`Snapshot::changes`] against `tested` names exactly the paths the layer
/// modified, replaced or deleted, and the new files `read_new` asked for. The tree id is not
/// computed.
pub fn over_tree_paths(
    tested: &Manifest,
    upper: &Path,
    bounds: &mut Bounds,
    read_new: &dyn Fn(&[u8], bool) -> bool,
) -> WsResult<Snapshot> {
    Ok(merge(
        tested,
        upper,
        Scope::TreePaths,
        &IgnoreRules::none(),
        Some(read_new),
        bounds,
    )?
    .0)
}

/// The merged manifest (tree id not yet computed), and every directory path where it may
/// differ from `baseline`: each changed path, its ancestors, and the root `""`.
fn merge(
    baseline: &Manifest,
    upper: &Path,
    scope: Scope,
    rules: &IgnoreRules,
    read_new: Option<&dyn Fn(&[u8], bool) -> bool>,
    bounds: &mut Bounds,
) -> WsResult<(Snapshot, BTreeSet<Vec<u8>>)> {
    let root = fsat::open_dir_path(upper).map_err(|e| WorkspaceError::io(upper, e.into()))?;
    let mut s = Snapshot {
        tree_id: ObjectId([0; 20]),
        manifest: baseline.clone(),
        from_upper: BTreeSet::new(),
        hardlinked: BTreeSet::new(),
        not_in_tree: Vec::new(),
        left_out: Vec::new(),
        artefacts: Vec::new(),
    };
    let mut dirty = BTreeSet::from([Vec::new()]);
    walk(
        root, upper, baseline, scope, rules, read_new, &mut s, &mut dirty, bounds,
    )?;
    bounds.check_now()?;
    Ok((s, dirty))
}

/// Mark `path` and its ancestors as possibly changed.
fn touch(dirty: &mut BTreeSet<Vec<u8>>, path: &[u8]) {
    let mut i = 0;
    while let Some(off) = path[i..].iter().position(|&b| b == b'/') {
        dirty.insert(path[..i + off].to_vec());
        i += off + 1;
    }
    dirty.insert(path.to_vec());
}

/// The names of the directory `dir` (at `path`), in the order they are taken off the end.
fn listing(
    dir: RawFd,
    path: &[u8],
    at: &dyn Fn(&[u8]) -> PathBuf,
    bounds: &Bounds,
) -> WsResult<Vec<Vec<u8>>> {
    let left = bounds.entries_left();
    match fsat::list_at_most(dir, left).map_err(|e| WorkspaceError::io(at(path), e.into()))? {
        Some(mut names) => {
            names.reverse();
            Ok(names)
        }
        None => Err(WorkspaceError::Limit {
            limit: "max_entries",
            allowed: bounds.limits.max_entries,
            path: String::from_utf8_lossy(path).into_owned(),
        }),
    }
}

/// One directory level of the walk: the names left to read, and what its path implies for new
/// entries beneath it.
struct Level {
    names: Vec<Vec<u8>>,
    /// An ancestor (or the directory itself) is ignored by t0's rules.
    ignored: bool,
    /// An ancestor (or the directory itself) is named `__pycache__`.
    in_cache: bool,
    /// A new directory `read_new` accepted, or beneath one: every entry is read.
    read_whole: bool,
}

/// Read the upper layer depth first with an explicit stack ([`fsat::DirStack`]: bounded
/// descriptors whatever the depth), checking every entry against `bounds` as it is read. In
/// [`Scope::TreePaths`], an entry at a path `t0` neither holds nor has anything beneath is
/// skipped unread; in [`Scope::Everything`] such a new entry is left out of the tree when `rules`
/// ignore it or it is a cache, and the files kept are classified as artefacts or not.
#[allow(clippy::too_many_arguments)]
fn walk(
    root: OwnedFd,
    upper: &Path,
    t0: &Manifest,
    scope: Scope,
    rules: &IgnoreRules,
    read_new: Option<&dyn Fn(&[u8], bool) -> bool>,
    s: &mut Snapshot,
    dirty: &mut BTreeSet<Vec<u8>>,
    bounds: &mut Bounds,
) -> WsResult<()> {
    let at = |p: &[u8]| upper.join(std::ffi::OsStr::from_bytes(p));
    let mut stack = fsat::DirStack::new(root);
    let mut rel: Vec<u8> = Vec::new();
    let first = stack
        .top()
        .map_err(|e| WorkspaceError::io(upper, e.into()))?;
    // Everything the agent wrote belongs to the uid owning the upper layer (the zone's).
    let zone_uid = nix::sys::stat::fstat(first)
        .map_err(|e| WorkspaceError::io(upper, e.into()))?
        .st_uid;
    let mut pending = vec![Level {
        names: listing(first, &rel, &at, bounds)?,
        ignored: false,
        in_cache: false,
        read_whole: false,
    }];
    while let Some(level) = pending.last_mut() {
        let Some(name) = level.names.pop() else {
            pending.pop();
            stack.pop();
            rel = tree_path::parent(&rel).to_vec();
            continue;
        };
        let (ignored_above, in_cache_above, read_whole) =
            (level.ignored, level.in_cache, level.read_whole);
        let path = tree_path::join(&rel, &name);
        let is_new = t0.get(&path).is_none() && !t0.has_beneath(&path);
        // Below a new directory `read_new` accepted, every entry is read.
        if scope == Scope::TreePaths && is_new && !read_whole {
            let dir = stack
                .top()
                .map_err(|e| WorkspaceError::io(at(&rel), e.into()))?;
            let is_dir =
                fsat::lstat(dir, &name).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR);
            if !read_new.is_some_and(|wanted| wanted(&path, is_dir)) {
                continue;
            }
        }
        bounds.entry(&path, stack.depth() + 1)?;
        let io = |e: nix::Error| WorkspaceError::io(at(&path), e.into());
        if tree_path::component_problem(&name).is_some() {
            s.not_in_tree.push(path);
            continue;
        }
        if let Some(alias) = tree_path::git_alias(&name) {
            return Err(WorkspaceError::GitAlias {
                path: String::from_utf8_lossy(&path).into_owned(),
                alias,
            });
        }
        let dir = stack
            .top()
            .map_err(|e| WorkspaceError::io(at(&rel), e.into()))?;
        let st = fsat::lstat(dir, &name).map_err(io)?;
        // Whiteouts too: overlayfs makes them as the mounter (the zone), while any local user
        // may `mknod` a 0:0 device, which would delete a t0 path from the delivery.
        if st.st_uid != zone_uid {
            return Err(WorkspaceError::ForeignOwner {
                path: String::from_utf8_lossy(&path).into_owned(),
                uid: st.st_uid,
                zone_uid,
            });
        }
        let kind = st.st_mode & libc::S_IFMT;
        let is_dir = kind == libc::S_IFDIR;
        let is_whiteout = kind == libc::S_IFCHR && st.st_rdev == 0;
        // What git would not commit, decided by the path alone (a whiteout deletes, it adds nothing).
        let ignored_here = scope == Scope::Everything
            && (ignored_above
                || ((is_new || is_dir) && !rules.is_empty() && rules.matches(&path, is_dir)));
        let in_cache = in_cache_above || (is_dir && ignore_rules::is_cache_dir_name(&name));
        if scope == Scope::Everything
            && is_new
            && !is_whiteout
            && matches!(kind, libc::S_IFDIR | libc::S_IFREG | libc::S_IFLNK)
        {
            if ignored_here {
                s.left_out.push((path, LeftOut::Ignored));
                continue;
            }
            if in_cache {
                s.left_out.push((path, LeftOut::Cache));
                continue;
            }
        }
        match kind {
            libc::S_IFCHR if st.st_rdev == 0 => {
                touch(dirty, &path);
                forget(s, &path)
            }
            libc::S_IFDIR => {
                stack.push(&name, None).map_err(io)?;
                let fd = stack.top().map_err(io)?;
                if scope == Scope::Everything && is_new && ignore_rules::has_cachedir_tag(fd) {
                    stack.pop();
                    s.left_out.push((path, LeftOut::Cache));
                    continue;
                }
                let opaque = fsat::get_xattr(&fd, OPAQUE_XATTR).is_some_and(|v| v == b"y");
                match s.manifest.get(&path) {
                    Some(e) if e.kind != EntryKind::Gitlink || opaque => {
                        touch(dirty, &path);
                        s.manifest.remove_tree(&path)
                    }
                    _ if opaque => {
                        touch(dirty, &path);
                        s.manifest.remove_beneath(&path)
                    }
                    _ => {}
                }
                let read_whole = read_whole || (scope == Scope::TreePaths && is_new);
                pending.push(Level {
                    names: listing(fd, &path, &at, bounds)?,
                    ignored: ignored_here,
                    in_cache,
                    read_whole,
                });
                rel = path;
            }
            libc::S_IFREG => {
                let size = st.st_size as u64;
                bounds.file(&path, size)?;
                let f = fsat::open_file(dir, &name).map_err(io)?;
                if size == 0 && fsat::get_xattr(&f, WHITEOUT_XATTR).is_some() {
                    touch(dirty, &path);
                    forget(s, &path);
                    continue;
                }
                let class = if scope == Scope::Everything {
                    classify(&f, &name)
                } else {
                    None
                };
                let mut stopped = None;
                let hashed = blob_id_of_file(&f, size, &mut |_| {
                    bounds.tick().map_err(|e| {
                        stopped = Some(e);
                        std::io::Error::other("stopped")
                    })
                });
                if let Some(e) = stopped {
                    return Err(e);
                }
                let oid = hashed.map_err(|e| WorkspaceError::io(at(&path), e))?;
                let kind = if st.st_mode & 0o100 != 0 {
                    EntryKind::Executable
                } else {
                    EntryKind::File
                };
                if st.st_nlink > 1 {
                    s.hardlinked.insert(path.clone());
                }
                touch(dirty, &path);
                let entry = Entry { kind, oid };
                if let Some((kind, by)) = class.filter(|_| t0.get(&path) != Some(&entry)) {
                    s.artefacts.push(Artefact {
                        path: path.clone(),
                        kind,
                        by,
                    });
                }
                record(s, path, entry)?;
            }
            libc::S_IFLNK => {
                let target = fsat::read_link(dir, &name).map_err(io)?;
                touch(dirty, &path);
                let entry = Entry {
                    kind: EntryKind::Symlink,
                    oid: blob_id(&target),
                };
                // A link is never followed: only its name can make it an artefact.
                if let Some(kind) = artefact::by_name(&name)
                    .filter(|_| scope == Scope::Everything && t0.get(&path) != Some(&entry))
                {
                    s.artefacts.push(Artefact {
                        path: path.clone(),
                        kind,
                        by: "name",
                    });
                }
                record(s, path, entry)?;
            }
            _ => s.not_in_tree.push(path),
        }
    }
    Ok(())
}

/// A file's artefact kind by its name, else by its first bytes (one `pread`, nothing else read).
fn classify(f: &std::fs::File, name: &[u8]) -> Option<(&'static str, &'static str)> {
    if let Some(kind) = artefact::by_name(name) {
        return Some((kind, "name"));
    }
    let mut head = [0u8; artefact::HEAD_BYTES];
    let n = std::os::unix::fs::FileExt::read_at(f, &mut head, 0).ok()?;
    artefact::by_content(&head[..n]).map(|kind| (kind, "content"))
}

fn forget(s: &mut Snapshot, path: &[u8]) {
    s.manifest.remove_tree(path);
    s.from_upper.remove(path);
}

fn record(s: &mut Snapshot, path: Vec<u8>, entry: Entry) -> WsResult<()> {
    s.from_upper.insert(path.clone());
    s.manifest.insert(path, entry)
}

/// Where the bytes of `path` of a snapshot live on the host: the upper layer when the agent
/// wrote it, the baseline otherwise.
pub fn source_of(snapshot: &Snapshot, upper: &Path, baseline_files: &Path, path: &[u8]) -> PathBuf {
    let base = if snapshot.from_upper.contains(path) {
        upper
    } else {
        baseline_files
    };
    base.join(std::ffi::OsStr::from_bytes(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn set_xattr(path: &Path, name: &str, value: &[u8]) {
        let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let n = std::ffi::CString::new(name).unwrap();
        let rc = unsafe {
            libc::lsetxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        assert_eq!(
            rc,
            0,
            "setxattr {name}: {}",
            std::io::Error::last_os_error()
        );
    }

    fn bounds() -> Bounds {
        Bounds::snapshot(&sandbox::WorkspaceLimits::default())
    }

    fn t0() -> Manifest {
        let mut m = Manifest::default();
        for p in ["a", "d/x", "d/y", "e", "f", "keep"] {
            m.insert(
                p.as_bytes().to_vec(),
                Entry {
                    kind: EntryKind::File,
                    oid: blob_id(p.as_bytes()),
                },
            )
            .unwrap();
        }
        m
    }

    #[test]
    fn whiteouts_opaque_directories_and_type_changes_merge_like_overlayfs() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        // A character-device whiteout deletes `a`.
        nix::sys::stat::mknod(
            &u.join("a"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .unwrap();
        // An opaque `d` hides d/x and d/y; d/z is new.
        std::fs::create_dir(u.join("d")).unwrap();
        set_xattr(&u.join("d"), OPAQUE_XATTR, b"y");
        std::fs::write(u.join("d/z"), b"z").unwrap();
        // An empty file carrying the whiteout xattr deletes `e`.
        std::fs::write(u.join("e"), b"").unwrap();
        set_xattr(&u.join("e"), WHITEOUT_XATTR, b"");
        // A directory over the file `f` replaces it; an executable is recorded as such.
        std::fs::create_dir(u.join("f")).unwrap();
        std::fs::write(u.join("f/inner"), b"i").unwrap();
        std::fs::write(u.join("run.sh"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(u.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let s = take(&t0(), u, &IgnoreRules::none(), &mut bounds()).unwrap();
        let paths: Vec<String> = s
            .manifest
            .iter()
            .map(|(p, _)| String::from_utf8_lossy(p).into_owned())
            .collect();
        assert_eq!(paths, vec!["d/z", "f/inner", "keep", "run.sh"]);
        assert_eq!(
            s.manifest.get(b"run.sh").unwrap().kind,
            EntryKind::Executable
        );
        assert_eq!(s.manifest.get(b"d/z").unwrap().oid, blob_id(b"z"));
        assert_eq!(s.tree_id, s.manifest.tree_id());
        let changes: Vec<(String, ChangeKind)> = s
            .changes(&t0())
            .into_iter()
            .map(|(p, c)| (String::from_utf8_lossy(&p).into_owned(), c))
            .collect();
        assert_eq!(
            changes,
            vec![
                ("a".into(), ChangeKind::Deleted),
                ("d/x".into(), ChangeKind::Deleted),
                ("d/y".into(), ChangeKind::Deleted),
                ("d/z".into(), ChangeKind::Added),
                ("e".into(), ChangeKind::Deleted),
                ("f".into(), ChangeKind::Deleted),
                ("f/inner".into(), ChangeKind::Added),
                ("run.sh".into(), ChangeKind::Added),
            ]
        );
    }

    /// A deeper t0 than `t0()`: nested directories beside untouched ones.
    fn nested_t0() -> Manifest {
        let mut m = t0();
        for p in [
            "d/sub/z",
            "deep/1/2/3",
            "deep/1/other",
            "deep/keep",
            "lib/a.rs",
            "lib/b.rs",
            "lib/x/y.rs",
        ] {
            m.insert(
                p.as_bytes().to_vec(),
                Entry {
                    kind: EntryKind::File,
                    oid: blob_id(p.as_bytes()),
                },
            )
            .unwrap();
        }
        m
    }

    /// The incremental tree id equals the full one (and so what git computes).
    fn assert_incremental_equals_full(t0: &Manifest, upper: &Path) -> Snapshot {
        let full = take(t0, upper, &IgnoreRules::none(), &mut bounds()).unwrap();
        let incremental = take_reusing(
            t0,
            &t0.dir_ids(),
            upper,
            &IgnoreRules::none(),
            &mut bounds(),
        )
        .unwrap();
        assert_eq!(incremental.tree_id, full.tree_id);
        assert_eq!(incremental.tree_id, incremental.manifest.tree_id());
        assert_eq!(incremental.manifest, full.manifest);
        incremental
    }

    #[test]
    fn an_untouched_workspace_reuses_the_baselines_tree_id() {
        let upper = tempfile::tempdir().unwrap();
        let s = assert_incremental_equals_full(&nested_t0(), upper.path());
        assert_eq!(s.tree_id, nested_t0().tree_id());
    }

    #[test]
    fn incremental_tree_id_equals_the_full_one_for_adds_deletes_renames_and_mode_changes() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        // Add in an existing nested directory and in a new one.
        std::fs::create_dir_all(u.join("deep/1/2")).unwrap();
        std::fs::write(u.join("deep/1/2/new"), b"n").unwrap();
        std::fs::create_dir_all(u.join("fresh/dir")).unwrap();
        std::fs::write(u.join("fresh/dir/f"), b"f").unwrap();
        // Rename lib/a.rs -> lib/x/a.rs: a whiteout plus an add.
        std::fs::create_dir_all(u.join("lib/x")).unwrap();
        nix::sys::stat::mknod(
            &u.join("lib/a.rs"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .unwrap();
        std::fs::write(u.join("lib/x/a.rs"), b"lib/a.rs").unwrap();
        // Mode change: the same content, now executable (a copy-up).
        std::fs::write(u.join("lib/b.rs"), b"lib/b.rs").unwrap();
        std::fs::set_permissions(u.join("lib/b.rs"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        // Delete a whole nested directory's only file.
        std::fs::create_dir_all(u.join("d/sub")).unwrap();
        nix::sys::stat::mknod(
            &u.join("d/sub/z"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .unwrap();
        let s = assert_incremental_equals_full(&nested_t0(), u);
        assert_eq!(
            s.manifest.get(b"lib/b.rs").unwrap().kind,
            EntryKind::Executable
        );
        assert!(s.manifest.get(b"d/sub/z").is_none() && s.manifest.get(b"lib/a.rs").is_none());
    }

    #[test]
    fn incremental_tree_id_equals_the_full_one_for_symlinks_whiteouts_opaque_dirs_and_type_changes()
    {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        // A symlink replaces a file; an xattr whiteout deletes one; an opaque directory hides a
        // subtree and adds to it; a directory replaces a file; a file replaces a directory.
        std::os::unix::fs::symlink("../keep", u.join("keep")).unwrap();
        std::fs::write(u.join("e"), b"").unwrap();
        set_xattr(&u.join("e"), WHITEOUT_XATTR, b"");
        std::fs::create_dir_all(u.join("deep/1")).unwrap();
        set_xattr(&u.join("deep/1"), OPAQUE_XATTR, b"y");
        std::fs::write(u.join("deep/1/only"), b"o").unwrap();
        std::fs::create_dir(u.join("f")).unwrap();
        std::fs::write(u.join("f/inner"), b"i").unwrap();
        std::fs::write(u.join("lib"), b"now a file").unwrap();
        let s = assert_incremental_equals_full(&nested_t0(), u);
        assert_eq!(s.manifest.get(b"keep").unwrap().kind, EntryKind::Symlink);
        assert!(s.manifest.get(b"deep/1/2/3").is_none() && s.manifest.get(b"deep/keep").is_some());
        assert!(s.manifest.get(b"lib/x/y.rs").is_none() && s.manifest.get(b"lib").is_some());
    }

    fn paths_of(s: &Snapshot) -> Vec<String> {
        s.manifest
            .iter()
            .map(|(p, _)| String::from_utf8_lossy(p).into_owned())
            .collect()
    }

    fn left_out_of(s: &Snapshot) -> Vec<(String, LeftOut)> {
        s.left_out
            .iter()
            .map(|(p, why)| (String::from_utf8_lossy(p).into_owned(), *why))
            .collect()
    }

    #[test]
    fn what_t0s_ignore_rules_ignore_is_left_out_of_the_tree_unread() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        std::fs::create_dir_all(u.join("out/deep")).unwrap();
        std::fs::write(u.join("out/deep/report.xml"), b"<x/>").unwrap();
        std::fs::write(u.join("debug.log"), b"log").unwrap();
        std::fs::create_dir(u.join("d")).unwrap();
        std::fs::write(u.join("d/new.log"), b"log").unwrap();
        std::fs::write(u.join("d/kept.txt"), b"kept").unwrap();
        // A t0 path stays in the tree whatever the rules say (git tracks it).
        std::fs::write(u.join("keep"), b"changed").unwrap();
        let rules = IgnoreRules::from_texts(&[("", "out/\n*.log\nkeep\n")], "");
        let s = take(&t0(), u, &rules, &mut bounds()).unwrap();
        assert_eq!(
            paths_of(&s),
            vec!["a", "d/kept.txt", "d/x", "d/y", "e", "f", "keep"]
        );
        assert_eq!(s.manifest.get(b"keep").unwrap().oid, blob_id(b"changed"));
        assert_eq!(
            left_out_of(&s),
            vec![
                ("d/new.log".into(), LeftOut::Ignored),
                ("debug.log".into(), LeftOut::Ignored),
                ("out".into(), LeftOut::Ignored)
            ]
        );
    }

    #[test]
    fn new_caches_are_left_out_whatever_the_ignore_rules() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        std::fs::create_dir_all(u.join("pkg/__pycache__")).unwrap();
        std::fs::write(u.join("pkg/__pycache__/core.cpython-311.pyc"), b"bytecode").unwrap();
        std::fs::create_dir_all(u.join("target/debug")).unwrap();
        std::fs::write(
            u.join("target/CACHEDIR.TAG"),
            ignore_rules::CACHEDIR_SIGNATURE,
        )
        .unwrap();
        std::fs::write(u.join("target/debug/calc"), b"\x7fELF").unwrap();
        std::fs::create_dir(u.join("notes")).unwrap();
        std::fs::write(u.join("notes/CACHEDIR.TAG"), b"no signature").unwrap();
        let s = take(&t0(), u, &IgnoreRules::none(), &mut bounds()).unwrap();
        assert_eq!(
            left_out_of(&s),
            vec![
                ("pkg/__pycache__".into(), LeftOut::Cache),
                ("target".into(), LeftOut::Cache)
            ]
        );
        assert!(paths_of(&s).contains(&"notes/CACHEDIR.TAG".to_string()));
        assert!(s.artefacts.is_empty(), "{:?}", s.artefacts);
    }

    #[test]
    fn artefacts_the_agent_wrote_are_named_by_name_or_by_content() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        std::fs::write(u.join("core.cpython-311-x86_64-linux-gnu.so"), b"whatever").unwrap();
        std::fs::write(u.join("helper.py"), b"\x7fELF\x02\x01\x01").unwrap();
        std::fs::write(u.join("plain.py"), b"def f():\n    return 1\n").unwrap();
        std::os::unix::fs::symlink("/usr/lib/libz.so.1", u.join("libz.so.1")).unwrap();
        let s = take(&t0(), u, &IgnoreRules::none(), &mut bounds()).unwrap();
        let found: Vec<(String, &str, &str)> = s
            .artefacts
            .iter()
            .map(|a| (String::from_utf8_lossy(&a.path).into_owned(), a.kind, a.by))
            .collect();
        assert_eq!(
            found,
            vec![
                (
                    "core.cpython-311-x86_64-linux-gnu.so".into(),
                    "shared object",
                    "name"
                ),
                ("helper.py".into(), "ELF binary", "content"),
                ("libz.so.1".into(), "shared object", "name"),
            ]
        );
    }

    #[test]
    fn a_t0_artefact_copied_up_unchanged_is_not_the_agents() {
        let mut t0 = t0();
        t0.insert(
            b"lib.so".to_vec(),
            Entry {
                kind: EntryKind::File,
                oid: blob_id(b"elf"),
            },
        )
        .unwrap();
        let upper = tempfile::tempdir().unwrap();
        std::fs::write(upper.path().join("lib.so"), b"elf").unwrap();
        let s = take(&t0, upper.path(), &IgnoreRules::none(), &mut bounds()).unwrap();
        assert!(s.artefacts.is_empty());
    }

    #[test]
    fn a_symlink_in_the_upper_layer_is_recorded_not_followed() {
        let upper = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/shadow", upper.path().join("keep")).unwrap();
        let s = take(&t0(), upper.path(), &IgnoreRules::none(), &mut bounds()).unwrap();
        let e = s.manifest.get(b"keep").unwrap();
        assert_eq!(
            (e.kind, e.oid),
            (EntryKind::Symlink, blob_id(b"/etc/shadow"))
        );
    }

    #[test]
    fn a_symlinked_upper_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("upper")).unwrap();
        assert!(matches!(
            take(
                &t0(),
                &tmp.path().join("upper"),
                &IgnoreRules::none(),
                &mut bounds()
            ),
            Err(WorkspaceError::Io { .. })
        ));
    }

    fn limits(edit: impl FnOnce(&mut sandbox::WorkspaceLimits)) -> Bounds {
        let mut l = sandbox::WorkspaceLimits::default();
        edit(&mut l);
        Bounds::snapshot(&l)
    }

    fn refused(upper: &Path, mut bounds: Bounds) -> (String, String) {
        match take(&t0(), upper, &IgnoreRules::none(), &mut bounds) {
            Err(WorkspaceError::Limit { limit, path, .. }) => (limit.to_string(), path),
            other => panic!("expected a limit, got {other:?}"),
        }
    }

    #[test]
    fn a_whiteout_another_uid_made_is_refused_not_taken_as_a_deletion() {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs the unit tests as root (mknod and chown need it)"
            );
            return;
        }
        let upper = tempfile::tempdir().unwrap();
        std::fs::create_dir(upper.path().join("lib")).unwrap();
        let planted = upper.path().join("lib/a.rs");
        nix::sys::stat::mknod(
            &planted,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .unwrap();
        std::os::unix::fs::lchown(&planted, Some(4242), Some(4242)).unwrap();
        match take(&t0(), upper.path(), &IgnoreRules::none(), &mut bounds()) {
            Err(WorkspaceError::ForeignOwner {
                path,
                uid,
                zone_uid,
            }) => assert_eq!((path.as_str(), uid, zone_uid), ("lib/a.rs", 4242, 0)),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_tree_deeper_than_max_depth_is_refused_naming_the_limit_and_the_path() {
        let upper = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(upper.path().join("a/b/c/d")).unwrap();
        assert_eq!(
            refused(upper.path(), limits(|l| l.max_depth = 3)),
            ("max_depth".into(), "a/b/c/d".into())
        );
    }

    #[test]
    fn too_many_entries_a_long_path_a_large_file_and_too_many_bytes_are_refused() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        for i in 0..5 {
            std::fs::write(u.join(format!("f{i}")), vec![b'x'; 10]).unwrap();
        }
        assert_eq!(refused(u, limits(|l| l.max_entries = 4)).0, "max_entries");
        assert_eq!(
            refused(u, limits(|l| l.max_file_bytes = 9)),
            ("max_file_bytes".into(), "f0".into())
        );
        assert_eq!(
            refused(u, limits(|l| l.max_total_bytes = 45)),
            ("max_total_bytes".into(), "f4".into())
        );
        std::fs::write(u.join("a-rather-long-name"), b"").unwrap();
        assert_eq!(
            refused(u, limits(|l| l.max_path_bytes = 10)),
            ("max_path_bytes".into(), "a-rather-long-name".into())
        );
    }

    #[test]
    fn a_sparse_file_counts_its_apparent_size_against_the_limits() {
        let upper = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(upper.path().join("sparse")).unwrap();
        f.set_len(1 << 30).unwrap();
        assert_eq!(
            refused(upper.path(), limits(|l| l.max_file_bytes = 1 << 20)),
            ("max_file_bytes".into(), "sparse".into())
        );
    }

    #[test]
    fn a_name_git_treats_as_dot_git_elsewhere_is_refused() {
        let upper = tempfile::tempdir().unwrap();
        std::fs::create_dir(upper.path().join("sub")).unwrap();
        std::fs::write(upper.path().join("sub/GIT~1"), b"").unwrap();
        match take(&t0(), upper.path(), &IgnoreRules::none(), &mut bounds()) {
            Err(WorkspaceError::GitAlias { path, alias }) => {
                assert_eq!((path.as_str(), alias), ("sub/GIT~1", ".git"))
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_tree_deeper_than_the_descriptor_bound_snapshots_on_a_small_stack() {
        let upper = tempfile::tempdir().unwrap();
        let deep: PathBuf = (0..200).map(|_| "d").collect();
        std::fs::create_dir_all(upper.path().join(&deep)).unwrap();
        std::fs::write(upper.path().join(&deep).join("f"), b"deep").unwrap();
        let u = upper.path().to_path_buf();
        let s = std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || take(&t0(), &u, &IgnoreRules::none(), &mut bounds()).unwrap())
            .unwrap()
            .join()
            .unwrap();
        let path: Vec<u8> = [deep.as_os_str().as_bytes(), b"/f"].concat();
        assert_eq!(s.manifest.get(&path).unwrap().oid, blob_id(b"deep"));
    }
}
