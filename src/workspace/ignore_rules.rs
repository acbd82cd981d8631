//! What git would not commit: t0's ignore rules, and the caches no tree holds.
//!
//! The rules are those git applies to an untracked path of the operator's repository: every
//! `.gitignore` file of t0 (read from the baseline's files, never from the agent's tree, so an
//! agent cannot widen or narrow them) and the repository's `info/exclude` (read once when the run
//! starts and kept in the run directory, so a resumed run applies the same rules). The operator's
//! personal `core.excludesFile` is not read: it is not the repository's. Patterns are compiled and
//! matched by the `ignore` crate (ripgrep's gitignore matcher); this module only orders the files
//! as git does: a path is ignored when one of its ancestor directories is (git never re-includes
//! beneath an excluded directory), else by its own last matching pattern, the `.gitignore` nearest
//! to it first, shallower ones next, `info/exclude` last.
//!
//! Ignore rules apply to untracked paths only: a path t0 holds stays in the tree whatever the rules
//! say (the snapshot asks only about paths t0 has nothing at).
//!
//! Besides ignored paths, new *cache directories* are never part of the tree: a directory named
//! `__pycache__` (CPython's bytecode cache; the check runs with `PYTHONPYCACHEPREFIX` outside the
//! tree, so it never reads one) and a directory tagged as a cache by a `CACHEDIR.TAG` file carrying
//! the Cache Directory Tagging signature (cargo's `target/`, pytest's `.pytest_cache/`).

use super::baseline::Baseline;
use super::manifest::EntryKind;
use super::{fsat, tree_path, WorkspaceError, WsResult};
use crate::safefs::{SafeDir, SafeFsError};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The largest ignore file read (git itself refuses larger ones as not a pattern list); a larger
/// `.gitignore` of t0 is skipped, which only keeps more paths in the tree.
pub const MAX_IGNORE_FILE_BYTES: u64 = 1 << 20;

/// The Cache Directory Tagging signature a `CACHEDIR.TAG` starts with (bford.info/cachedir).
pub const CACHEDIR_SIGNATURE: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55";

/// Why an upper-layer path is not part of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeftOut {
    /// Ignored by t0's `.gitignore` files or the repository's `info/exclude`.
    Ignored,
    /// A new `__pycache__` directory or a directory tagged `CACHEDIR.TAG`.
    Cache,
}

impl LeftOut {
    pub fn as_str(self) -> &'static str {
        match self {
            LeftOut::Ignored => "ignored",
            LeftOut::Cache => "cache",
        }
    }
}

/// t0's ignore rules, compiled.
#[derive(Debug, Clone, Default)]
pub struct IgnoreRules {
    /// One matcher per `.gitignore` of t0, keyed by the directory holding it (`""`: the root).
    per_dir: BTreeMap<Vec<u8>, Gitignore>,
    /// The repository's `info/exclude`, relative to the root.
    exclude: Option<Gitignore>,
}

fn compile(text: &[u8]) -> Option<Gitignore> {
    let mut b = GitignoreBuilder::new(".");
    for line in text.split(|&c| c == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // A pattern that does not compile matches nothing, as in git.
        let _ = b.add_line(None, &String::from_utf8_lossy(line));
    }
    b.build().ok().filter(|g| !g.is_empty())
}

impl IgnoreRules {
    /// No rules: every path is kept.
    pub fn none() -> IgnoreRules {
        IgnoreRules::default()
    }

    /// The rules of `t0` (its `.gitignore` files) and the repository's `info_exclude` bytes.
    pub fn of_t0(t0: &Baseline, info_exclude: &[u8]) -> WsResult<IgnoreRules> {
        let manifest = t0.manifest()?;
        let files = &t0.files_dir;
        let root = fsat::open_dir_path(files).map_err(|e| WorkspaceError::io(files, e.into()))?;
        let mut per_dir = BTreeMap::new();
        // git does not follow a symlinked .gitignore in the work tree: only regular files count.
        for (path, _) in manifest.iter().filter(|(p, e)| {
            tree_path::file_name(p) == b".gitignore"
                && matches!(e.kind, EntryKind::File | EntryKind::Executable)
        }) {
            let at = || files.join(std::ffi::OsStr::from_bytes(path));
            let dir = fsat::open_dir_beneath(root.as_raw_fd(), tree_path::parent(path))
                .map_err(|e| WorkspaceError::io(at(), e.into()))?;
            let file = fsat::open_file(dir.as_raw_fd(), b".gitignore")
                .map_err(|e| WorkspaceError::io(at(), e.into()))?;
            let mut text = Vec::new();
            file.take(MAX_IGNORE_FILE_BYTES + 1)
                .read_to_end(&mut text)
                .map_err(|e| WorkspaceError::io(at(), e))?;
            if text.len() as u64 > MAX_IGNORE_FILE_BYTES {
                continue;
            }
            if let Some(g) = compile(&text) {
                per_dir.insert(tree_path::parent(path).to_vec(), g);
            }
        }
        Ok(IgnoreRules {
            per_dir,
            exclude: compile(info_exclude),
        })
    }

    /// Rules from the text of ignore files, keyed by the directory holding each (tests).
    pub fn from_texts(files: &[(&str, &str)], info_exclude: &str) -> IgnoreRules {
        let per_dir = files
            .iter()
            .filter_map(|(dir, text)| Some((dir.as_bytes().to_vec(), compile(text.as_bytes())?)))
            .collect();
        IgnoreRules {
            per_dir,
            exclude: compile(info_exclude.as_bytes()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.per_dir.is_empty() && self.exclude.is_none()
    }

    /// Whether `path`'s own patterns ignore it (its ancestors not considered): the nearest
    /// `.gitignore` with a matching pattern decides, `info/exclude` last.
    pub fn matches(&self, path: &[u8], is_dir: bool) -> bool {
        if self.is_empty() {
            return false;
        }
        let mut dir = tree_path::parent(path);
        loop {
            if let Some(g) = self.per_dir.get(dir) {
                let rel = if dir.is_empty() {
                    path
                } else {
                    &path[dir.len() + 1..]
                };
                match g.matched(Path::new(std::ffi::OsStr::from_bytes(rel)), is_dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
            if dir.is_empty() {
                break;
            }
            dir = tree_path::parent(dir);
        }
        self.exclude.as_ref().is_some_and(|g| {
            g.matched(Path::new(std::ffi::OsStr::from_bytes(path)), is_dir)
                .is_ignore()
        })
    }

    /// Whether git ignores the untracked `path`: one of its ancestor directories is ignored, or
    /// the path itself.
    pub fn is_ignored(&self, path: &[u8], is_dir: bool) -> bool {
        let mut i = 0;
        while let Some(off) = path[i..].iter().position(|&b| b == b'/') {
            if self.matches(&path[..i + off], true) {
                return true;
            }
            i += off + 1;
        }
        self.matches(path, is_dir)
    }
}

/// The bytes of the repository's `info/exclude` (where `git rev-parse --git-path` puts it; a
/// missing one is empty), at most [`MAX_IGNORE_FILE_BYTES`]. Read as `crate::safefs` reads:
/// never through a link, non-blocking and checked a regular file on its descriptor; a larger
/// one, a link, a fifo or anything else in its place is not read (no rules: nothing more is
/// left out of the tree).
pub fn read_info_exclude(repo: &Path) -> WsResult<Vec<u8>> {
    let out = super::git::Git::new(repo).run(["rev-parse", "--git-path", "info/exclude"], None)?;
    let rel = out.strip_suffix(b"\n").unwrap_or(&out);
    let path = repo.join(std::ffi::OsStr::from_bytes(rel));
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Ok(Vec::new());
    };
    match SafeDir::open(dir).and_then(|d| d.read(name, MAX_IGNORE_FILE_BYTES)) {
        Ok(text) => Ok(text),
        Err(e) if e.is_not_found() => Ok(Vec::new()),
        Err(
            SafeFsError::Symlink { .. }
            | SafeFsError::NotRegular { .. }
            | SafeFsError::TooLarge { .. },
        ) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// Whether a new directory named `name` is a cache by its name alone (`__pycache__`).
pub fn is_cache_dir_name(name: &[u8]) -> bool {
    name == b"__pycache__"
}

/// Whether the directory `dir` holds a `CACHEDIR.TAG` regular file starting with the signature
/// (never following a link; a tag that cannot be read is no tag).
pub fn has_cachedir_tag(dir: std::os::fd::RawFd) -> bool {
    // The lstat spares an open of what is plainly no regular file; the open itself is safefs's
    // (no link, non-blocking, a regular file by its descriptor), so a fifo swapped in after
    // the lstat is refused rather than blocking the walk.
    if !fsat::lstat(dir, b"CACHEDIR.TAG").is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)
    {
        return false;
    }
    // SAFETY: `dir` is the caller's open directory descriptor for the length of this call.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(dir) };
    let Ok(file) = SafeDir::duplicate(borrowed, Path::new("CACHEDIR.TAG's directory"))
        .and_then(|d| d.open_read("CACHEDIR.TAG"))
    else {
        return false;
    };
    let mut head = Vec::with_capacity(CACHEDIR_SIGNATURE.len());
    file.take(CACHEDIR_SIGNATURE.len() as u64)
        .read_to_end(&mut head)
        .is_ok()
        && head == CACHEDIR_SIGNATURE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_pattern_ignores_at_any_depth_and_a_slash_anchors_it() {
        let r = IgnoreRules::from_texts(&[("", "*.log\n/build\nout/\n")], "");
        assert!(r.is_ignored(b"a.log", false));
        assert!(r.is_ignored(b"deep/er/a.log", false));
        assert!(r.is_ignored(b"build", true));
        assert!(!r.is_ignored(b"src/build", true));
        assert!(r.is_ignored(b"src/out", true));
        assert!(
            !r.is_ignored(b"src/out", false),
            "`out/` names directories only"
        );
        assert!(!r.is_ignored(b"src/main.rs", false));
    }

    #[test]
    fn beneath_an_ignored_directory_nothing_is_re_included() {
        let r = IgnoreRules::from_texts(&[("", "target/\n!target/keep.txt\n")], "");
        assert!(r.is_ignored(b"target/debug/x", false));
        assert!(
            r.is_ignored(b"target/keep.txt", false),
            "git never re-includes beneath an excluded directory"
        );
    }

    #[test]
    fn a_deeper_gitignore_overrides_a_shallower_one_and_info_exclude_comes_last() {
        let r = IgnoreRules::from_texts(
            &[("", "*.gen\n"), ("pkg", "!keep.gen\n/local.txt\n")],
            "secret.txt\n*.gen\n",
        );
        assert!(r.is_ignored(b"a.gen", false));
        assert!(
            !r.is_ignored(b"pkg/keep.gen", false),
            "the nearer file's negation wins"
        );
        assert!(r.is_ignored(b"pkg/other.gen", false));
        assert!(r.is_ignored(b"pkg/local.txt", false));
        assert!(
            !r.is_ignored(b"local.txt", false),
            "a nested file's anchored pattern is relative to its directory"
        );
        assert!(r.is_ignored(b"x/secret.txt", false));
    }

    #[test]
    fn a_directory_named_like_a_prefix_of_another_is_not_confused_with_it() {
        let r = IgnoreRules::from_texts(&[("a/b", "/c\n")], "");
        assert!(r.is_ignored(b"a/b/c", false));
        assert!(!r.is_ignored(b"a/bc/c", false));
        assert!(!r.is_ignored(b"a/bc", false));
    }

    #[test]
    fn no_rules_keep_every_path() {
        let r = IgnoreRules::none();
        assert!(!r.is_ignored(b"__pycache__/x.pyc", false));
    }

    #[test]
    fn a_cachedir_tag_counts_only_with_its_signature() {
        let d = tempfile::tempdir().unwrap();
        let fd = fsat::open_dir_path(d.path()).unwrap();
        assert!(!has_cachedir_tag(fd.as_raw_fd()));
        std::fs::write(d.path().join("CACHEDIR.TAG"), b"not a tag\n").unwrap();
        assert!(!has_cachedir_tag(fd.as_raw_fd()));
        std::fs::write(
            d.path().join("CACHEDIR.TAG"),
            [
                CACHEDIR_SIGNATURE,
                b"\n# This file is a cache directory tag.\n",
            ]
            .concat(),
        )
        .unwrap();
        assert!(has_cachedir_tag(fd.as_raw_fd()));
    }

    /// A fresh repository whose `info/exclude` is replaced by `plant` (given its path).
    fn repo_with_exclude(plant: impl FnOnce(&Path)) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(d.path())
            .status()
            .unwrap();
        assert!(ok.success());
        let exclude = d.path().join(".git/info/exclude");
        std::fs::create_dir_all(exclude.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(&exclude);
        plant(&exclude);
        d
    }

    #[test]
    fn a_regular_info_exclude_is_read() {
        let d = repo_with_exclude(|p| std::fs::write(p, "*.secret\n").unwrap());
        assert_eq!(read_info_exclude(d.path()).unwrap(), b"*.secret\n");
    }

    #[test]
    fn an_info_exclude_that_is_a_symlink_is_not_followed_and_gives_no_rules() {
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("rules");
        std::fs::write(&target, "*.py\n").unwrap();
        let d = repo_with_exclude(|p| std::os::unix::fs::symlink(&target, p).unwrap());
        assert_eq!(read_info_exclude(d.path()).unwrap(), b"");
    }

    #[test]
    fn an_info_exclude_that_is_a_fifo_is_never_opened_blocking_and_gives_no_rules() {
        let d = repo_with_exclude(|p| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap()
        });
        assert_eq!(
            read_info_exclude(d.path()).unwrap(),
            b"",
            "opening the fifo would block this test"
        );
    }

    #[test]
    fn a_cachedir_tag_that_is_a_symlink_to_a_tag_is_no_tag() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("tag"), CACHEDIR_SIGNATURE).unwrap();
        std::os::unix::fs::symlink(outside.path().join("tag"), d.path().join("CACHEDIR.TAG"))
            .unwrap();
        let fd = fsat::open_dir_path(d.path()).unwrap();
        assert!(!has_cachedir_tag(fd.as_raw_fd()));
    }

    #[test]
    fn a_fifo_named_cachedir_tag_is_no_tag_and_is_never_opened() {
        let d = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(
            &d.path().join("CACHEDIR.TAG"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let fd = fsat::open_dir_path(d.path()).unwrap();
        assert!(
            !has_cachedir_tag(fd.as_raw_fd()),
            "opening the fifo would block this test"
        );
    }
}
