//! The plan branch of a task_list run (docs/task-list.md): the `.small/` files read out of a
//! commit, and a commit that puts the supervisor's `.small/` files on top of another, both with
//! plumbing only (a private index file, `hash-object`, `commit-tree`), never the operator's
//! index or working tree.
//!
//! What is read is bounded: at most [`MAX_FILES`] entries under `.small/`, each a regular blob
//! of at most [`MAX_FILE_BYTES`] (a symlink, a submodule or a subdirectory there is refused with
//! its name escaped), so a hostile plan cannot make the supervisor read without limit.

use super::deliver::{AUTHOR_EMAIL, AUTHOR_NAME};
use super::git::Git;
use super::{ObjectId, WorkspaceError, WsResult};
use std::path::Path;

/// The directory of a SMALL workspace inside the tree.
pub const SMALL_DIR: &str = ".small";
/// Most entries read under `.small/`.
pub const MAX_FILES: usize = 64;
/// Largest `.small/` file read.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// One file of `.small/`: its name (no directory) and contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmallFile {
    pub name: String,
    pub bytes: Vec<u8>,
}

fn refused(detail: String) -> WorkspaceError {
    WorkspaceError::GitOutput {
        command: "ls-tree .small/".into(),
        detail,
    }
}

/// The `.small/` files of `commit`, in name order (none when it has no `.small/`).
pub fn read_small(repo: &Path, commit: &ObjectId) -> WsResult<Vec<SmallFile>> {
    let git = Git::new(repo);
    let listing = git.run(
        [
            "ls-tree",
            "-z",
            "--full-tree",
            &commit.to_hex(),
            "--",
            &format!("{SMALL_DIR}/"),
        ],
        None,
    )?;
    let mut files = Vec::new();
    for entry in listing.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        if files.len() == MAX_FILES {
            return Err(refused(format!(
                "{SMALL_DIR}/ holds more than {MAX_FILES} entries"
            )));
        }
        // "<mode> <type> <oid>\t<path>"
        let tab = entry
            .iter()
            .position(|b| *b == b'\t')
            .ok_or_else(|| refused(crate::inert::inert_bytes(entry)))?;
        let (head, path) = (&entry[..tab], &entry[tab + 1..]);
        let mut fields = head.split(|b| *b == b' ');
        let (mode, kind, oid) = (fields.next(), fields.next(), fields.next());
        let name = path
            .strip_prefix(format!("{SMALL_DIR}/").as_bytes())
            .unwrap_or(path);
        let shown = crate::inert::inert_bytes(name);
        if mode != Some(b"100644".as_slice()) && mode != Some(b"100755".as_slice())
            || kind != Some(b"blob".as_slice())
        {
            return Err(refused(format!(
                "{SMALL_DIR}/{shown} is not a regular file"
            )));
        }
        let name = std::str::from_utf8(name)
            .ok()
            .filter(|n| !n.contains('/'))
            .ok_or_else(|| refused(format!("{SMALL_DIR}/{shown}: not a plain UTF-8 name")))?;
        let oid = oid
            .and_then(ObjectId::from_hex)
            .ok_or_else(|| refused(format!("{SMALL_DIR}/{shown}: no object id")))?;
        let size = git.run(["cat-file", "-s", &oid.to_hex()], None)?;
        let size: u64 = std::str::from_utf8(&size)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| refused(format!("{SMALL_DIR}/{shown}: no size")))?;
        if size > MAX_FILE_BYTES {
            return Err(refused(format!(
                "{SMALL_DIR}/{shown} is {size} bytes (at most {MAX_FILE_BYTES})"
            )));
        }
        let bytes = git.run(["cat-file", "blob", &oid.to_hex()], None)?;
        files.push(SmallFile {
            name: name.to_string(),
            bytes,
        });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// A commit on top of `parent` whose tree is `onto`'s tree with `.small/` replaced by `files`
/// (made through the private index `index`, removed after). Returns the commit and its tree.
pub fn commit_small(
    repo: &Path,
    parent: &ObjectId,
    onto: &ObjectId,
    files: &[SmallFile],
    index: &Path,
    message: &str,
) -> WsResult<(ObjectId, ObjectId)> {
    let git = Git::new(repo).with_index_file(index);
    let _ = std::fs::remove_file(index);
    let result = (|| {
        git.run(["read-tree", &format!("{}^{{tree}}", onto.to_hex())], None)?;
        // What the index holds under `.small/` leaves it (plumbing: the operator's working
        // tree is never consulted).
        let held = git.run(["ls-files", "-z", "--", &format!("{SMALL_DIR}/")], None)?;
        if !held.is_empty() {
            git.run(
                ["update-index", "--force-remove", "-z", "--stdin"],
                Some(&held),
            )?;
        }
        for file in files {
            let out = git.run(["hash-object", "-w", "--stdin"], Some(&file.bytes))?;
            let oid = parse_oid(&out, "hash-object")?;
            git.run(
                [
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("100644,{},{SMALL_DIR}/{}", oid.to_hex(), file.name),
                ],
                None,
            )?;
        }
        let tree = parse_oid(&git.run(["write-tree"], None)?, "write-tree")?;
        let commit = parse_oid(
            &git.with_identity(AUTHOR_NAME, AUTHOR_EMAIL).run(
                [
                    "commit-tree",
                    "--no-gpg-sign",
                    "-p",
                    &parent.to_hex(),
                    "-m",
                    message,
                    &tree.to_hex(),
                ],
                None,
            )?,
            "commit-tree",
        )?;
        Ok((commit, tree))
    })();
    let _ = std::fs::remove_file(index);
    result
}

/// Point `refs/heads/<branch>` at `commit` (created or moved: the branch is the run's own).
pub fn set_branch(repo: &Path, branch: &str, commit: &ObjectId, reason: &str) -> WsResult<()> {
    let refname = format!("refs/heads/{branch}");
    Git::new(repo).run(
        [
            "update-ref",
            "--no-deref",
            "-m",
            reason,
            refname.as_str(),
            commit.to_hex().as_str(),
        ],
        None,
    )?;
    Ok(())
}

/// Whether `refs/heads/<branch>` exists.
pub fn branch_exists(repo: &Path, branch: &str) -> WsResult<bool> {
    Ok(Git::new(repo)
        .resolve(&format!("refs/heads/{branch}"))?
        .is_some())
}

fn parse_oid(out: &[u8], command: &str) -> WsResult<ObjectId> {
    let text = out.strip_suffix(b"\n").unwrap_or(out);
    ObjectId::from_hex(text).ok_or_else(|| WorkspaceError::GitOutput {
        command: command.into(),
        detail: String::from_utf8_lossy(text).into_owned(),
    })
}
