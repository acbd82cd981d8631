//! The agent's own git repository (`agent_git = "t0"`): a fresh repository whose only commit is
//! t0's tree, so that an agent running `git status` or `git diff` in its zone sees its own
//! changes, while the operator's history (and whatever fix it may hold) stays out of the zone.
//!
//! It is built once per run by the supervisor, with the hardened invocation ([`super::git`]), in
//! `<run>/workspace/agent-git/.git`: `git init` without templates (no hooks, no `info/`, no
//! description), the config replaced by a fixed one (format, the zone's identity, nothing else),
//! the blobs and the one commit written by `git fast-import` from the baseline's files (never
//! from the operator's object store, so no other object of it can be there), `refs/heads/main`
//! its only ref, the index read from that commit. Author, committer, date and message are fixed,
//! so the commit id depends on t0's tree alone; its tree id is checked against t0's.
//!
//! The directory is a read-only lower layer of the agent's overlay, above the baseline: what the
//! agent writes to `.git` lands in its upper layer like any other write, and a revert puts the
//! repository back as built. Nothing here ever reads it back: the snapshot leaves `.git` out of the
//! tree, the check's copy and the delivery never see it, and no git runs in the workspace.

use super::baseline::Baseline;
use super::git::Git;
use super::manifest::EntryKind;
use super::{fsat, tree_path, WorkspaceError, WsResult};
use crate::safefs::SafeDir;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The layer's name in `<run>/workspace/`.
const LAYER: &str = "agent-git";
/// The one branch, and the only ref.
const BRANCH: &str = "refs/heads/main";
/// Author and committer of the t0 commit, and the identity the agent's commits get.
const NAME: &str = "loopexec";
const EMAIL: &str = "t0@loopexec.invalid";
/// 2000-01-01T00:00:00Z: a fixed date, so the commit id is a function of the tree.
const DATE: &str = "946684800 +0000";
const MESSAGE: &str = "t0\n";
/// The whole config of the agent's repository.
const CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = false\n[user]\n\tname = loopexec\n\temail = t0@loopexec.invalid\n";

/// Build the agent's repository of `baseline` in `<run>/workspace/agent-git` (refused if it
/// exists) and return the layer's path. `owner`: the zone's uid/gid when loopexec runs as root
/// (the zone reads the layer, and what it copies up keeps the layer's owner).
pub fn build(
    baseline: &Baseline,
    run_dir: &SafeDir,
    owner: Option<(u32, u32)>,
) -> WsResult<PathBuf> {
    let ws = run_dir.subdir_or_create(super::overlay::WORKSPACE)?;
    let layer = ws.path().join(LAYER);
    nix::sys::stat::mkdirat(
        Some(ws.fd().as_raw_fd()),
        LAYER,
        nix::sys::stat::Mode::from_bits_truncate(0o755),
    )
    .map_err(|e| WorkspaceError::io(&layer, e.into()))?;
    let git_dir = layer.join(".git");
    let git = Git::new(&layer);
    git.run(
        ["init", "--quiet", "--template=", "--initial-branch=main"],
        None,
    )?;
    std::fs::write(git_dir.join("config"), CONFIG)
        .map_err(|e| WorkspaceError::io(git_dir.join("config"), e))?;
    let in_repo = |args: &[&str]| -> Vec<String> {
        std::iter::once(format!("--git-dir={}", git_dir.display()))
            .chain(args.iter().map(|a| a.to_string()))
            .collect()
    };
    import_t0(
        &git,
        &in_repo(&["fast-import", "--quiet", "--done"]),
        baseline,
    )?;
    let head = git.run(
        in_repo(&[
            "rev-parse",
            "--verify",
            "--end-of-options",
            &format!("{BRANCH}^{{tree}}"),
        ]),
        None,
    )?;
    let head = String::from_utf8_lossy(&head).trim().to_string();
    if head != baseline.tree_id.to_hex() {
        return Err(WorkspaceError::Changed {
            what: "the agent repository's t0 tree".into(),
            expected: baseline.tree_id.to_hex(),
            found: head,
        });
    }
    git.run(in_repo(&["read-tree", BRANCH]), None)?;
    open_to_zone(&layer, owner)?;
    Ok(layer)
}

/// The layer of a run being resumed (built by [`build`] when the run started).
pub fn existing(run_dir: &SafeDir) -> WsResult<PathBuf> {
    let ws = run_dir.subdir(super::overlay::WORKSPACE)?;
    let layer = ws.subdir(LAYER)?;
    Ok(layer.path().to_path_buf())
}

/// Feed `git fast-import` t0's files, read from the baseline (descriptor-relative, nothing
/// followed), and the commit of their tree.
fn import_t0(git: &Git, args: &[String], baseline: &Baseline) -> WsResult<()> {
    let manifest = baseline.manifest()?;
    let root = fsat::open_dir_path(&baseline.files_dir)
        .map_err(|e| WorkspaceError::io(&baseline.files_dir, e.into()))?;
    let mut child = git
        .command(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(WorkspaceError::GitSpawn)?;
    let fed = child
        .stdin
        .take()
        .map(|pipe| feed(pipe, manifest, root.as_raw_fd(), &baseline.files_dir));
    let out = child.wait_with_output().map_err(WorkspaceError::GitSpawn)?;
    let failed = |detail: String| WorkspaceError::Git {
        repo: baseline.files_dir.clone(),
        command: "fast-import".into(),
        detail,
    };
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr)
                .trim()
                .chars()
                .take(2000)
                .collect(),
        ));
    }
    match fed {
        Some(result) => result,
        None => Err(failed("no input pipe".into())),
    }
}

fn feed(
    pipe: std::process::ChildStdin,
    manifest: &super::Manifest,
    root: std::os::fd::RawFd,
    files_dir: &Path,
) -> WsResult<()> {
    let mut out = std::io::BufWriter::new(pipe);
    let io = |path: &[u8], e: std::io::Error| {
        WorkspaceError::io(files_dir.join(String::from_utf8_lossy(path).as_ref()), e)
    };
    let mut commit = format!("commit {BRANCH}\nauthor {NAME} <{EMAIL}> {DATE}\ncommitter {NAME} <{EMAIL}> {DATE}\ndata {}\n{MESSAGE}", MESSAGE.len()).into_bytes();
    for (mark, (path, entry)) in manifest.iter().enumerate() {
        let line = |dataref: &str| {
            [
                format!("M {} {dataref} ", entry.kind.git_mode()).as_bytes(),
                &quoted(path),
                b"\n",
            ]
            .concat()
        };
        if entry.kind == EntryKind::Gitlink {
            commit.extend(line(&entry.oid.to_hex()));
            continue;
        }
        let parent = fsat::open_dir_beneath(root, tree_path::parent(path))
            .map_err(|e| io(path, e.into()))?;
        let name = tree_path::file_name(path);
        let bytes = if entry.kind == EntryKind::Symlink {
            fsat::read_link(parent.as_raw_fd(), name).map_err(|e| io(path, e.into()))?
        } else {
            let mut bytes = Vec::new();
            fsat::open_file(parent.as_raw_fd(), name)
                .map_err(|e| io(path, e.into()))?
                .read_to_end(&mut bytes)
                .map_err(|e| io(path, e))?;
            bytes
        };
        let write = |out: &mut std::io::BufWriter<_>| -> std::io::Result<()> {
            write!(out, "blob\nmark :{}\ndata {}\n", mark + 1, bytes.len())?;
            out.write_all(&bytes)?;
            out.write_all(b"\n")
        };
        // A broken pipe means fast-import stopped: its exit status says why.
        if write(&mut out).is_err() {
            return Ok(());
        }
        commit.extend(line(&format!(":{}", mark + 1)));
    }
    commit.extend_from_slice(b"\ndone\n");
    let _ = out.write_all(&commit).and_then(|()| out.flush());
    Ok(())
}

/// A path as fast-import reads it: C-style quoted, every byte outside printable ASCII, `"` and
/// `\` as an octal escape.
fn quoted(path: &[u8]) -> Vec<u8> {
    let mut q = vec![b'"'];
    for &b in path {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            q.push(b);
        } else {
            q.extend(format!("\\{b:03o}").into_bytes());
        }
    }
    q.push(b'"');
    q
}

/// Give the zone's uid the layer git just wrote (as root; unprivileged the caller owns it).
fn open_to_zone(dir: &Path, owner: Option<(u32, u32)>) -> WsResult<()> {
    let Some((uid, gid)) = owner else {
        return Ok(());
    };
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid))
            .map_err(|e| WorkspaceError::io(&path, e))?;
        if std::fs::symlink_metadata(&path)
            .map_err(|e| WorkspaceError::io(&path, e))?
            .is_dir()
        {
            for entry in std::fs::read_dir(&path).map_err(|e| WorkspaceError::io(&path, e))? {
                pending.push(entry.map_err(|e| WorkspaceError::io(&path, e))?.path());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::quoted;

    #[test]
    fn a_path_is_quoted_with_octal_escapes_for_quotes_backslashes_and_control_bytes() {
        assert_eq!(
            quoted(b"a b/\"c\\\n\xff"),
            b"\"a b/\\042c\\134\\012\\377\"".to_vec()
        );
    }
}
