//! The one way loopexec runs git against the operator's repository: plumbing commands only, with
//! an environment that cannot make git execute anything of the repository's choosing.
//!
//! - The environment is cleared; only a fixed PATH, `LC_ALL=C` and git's own safety switches are
//!   set: no system or global config (`GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL=/dev/null`), no
//!   prompt (`GIT_TERMINAL_PROMPT=0`), no optional index writes (`GIT_OPTIONAL_LOCKS=0`), no
//!   replace refs (`GIT_NO_REPLACE_OBJECTS=1`: a planted replace ref would change what a tree id
//!   means), no system attributes, `HOME` pointing nowhere.
//! - The repository's own config is still read by git, so every key of it that can run a program
//!   or change what plumbing does is overridden on the command line: `core.hooksPath=/dev/null`
//!   (hooks, including `reference-transaction`), `core.fsmonitor=false`,
//!   `core.untrackedCache=false`, `commit.gpgSign=false` (gpg.program), `gc.auto=0` and
//!   `maintenance.auto=false` (no background work), `core.sshCommand`/`protocol.allow` (no
//!   transport), `core.pager=cat`.
//! - Only commands that never apply filters, textconv or external diff are used: `rev-parse`,
//!   `ls-tree`, `ls-files`, `cat-file --batch` (without `--filters`), `hash-object --no-filters`,
//!   `update-index --index-info`, `write-tree`, `commit-tree --no-gpg-sign`, `update-ref`,
//!   `check-ref-format`, `diff --no-ext-diff --no-textconv`.

use super::{WorkspaceError, WsResult};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SAFE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

const CONFIG_OVERRIDES: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.pager=cat",
    "core.sshCommand=/bin/false",
    "protocol.allow=never",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "core.askPass=/bin/false",
    "credential.helper=",
    "diff.external=",
];

/// A repository (the operator's) reached through the hardened invocation.
#[derive(Debug, Clone)]
pub struct Git {
    repo: PathBuf,
    index_file: Option<PathBuf>,
    identity: Option<(String, String)>,
}

impl Git {
    pub fn new(repo: &Path) -> Git {
        Git {
            repo: repo.to_path_buf(),
            index_file: None,
            identity: None,
        }
    }

    /// The same repository with a private index file (never the operator's index).
    pub fn with_index_file(&self, index: &Path) -> Git {
        Git {
            index_file: Some(index.to_path_buf()),
            ..self.clone()
        }
    }

    /// The same repository with a fixed author and committer.
    pub fn with_identity(&self, name: &str, email: &str) -> Git {
        Git {
            identity: Some((name.into(), email.into())),
            ..self.clone()
        }
    }

    pub fn repo(&self) -> &Path {
        &self.repo
    }

    /// A `git` command with the hardened environment and overrides; the caller adds arguments.
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut c = Command::new("git");
        c.env_clear()
            .env("PATH", SAFE_PATH)
            .env("LC_ALL", "C")
            .env("HOME", "/nonexistent")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_PAGER", "cat")
            .env("GIT_ADVICE", "0");
        if let Some(index) = &self.index_file {
            c.env("GIT_INDEX_FILE", index);
        }
        if let Some((name, email)) = &self.identity {
            c.env("GIT_AUTHOR_NAME", name)
                .env("GIT_AUTHOR_EMAIL", email)
                .env("GIT_COMMITTER_NAME", name)
                .env("GIT_COMMITTER_EMAIL", email);
        }
        c.arg("--no-pager").arg("-C").arg(&self.repo);
        for o in CONFIG_OVERRIDES {
            c.arg("-c").arg(o);
        }
        c.args(args);
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Run to completion; stdout on success, a `Git` error with stderr otherwise.
    pub fn run<I, S>(&self, args: I, stdin: Option<&[u8]>) -> WsResult<Vec<u8>>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<std::ffi::OsStr>,
    {
        let shown: Vec<String> = args
            .clone()
            .into_iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        let mut cmd = self.command(args);
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(WorkspaceError::GitSpawn)?;
        let feeder = match (stdin, child.stdin.take()) {
            (Some(bytes), Some(mut pipe)) => {
                let bytes = bytes.to_vec();
                Some(std::thread::spawn(move || pipe.write_all(&bytes)))
            }
            _ => None,
        };
        let out = child.wait_with_output().map_err(WorkspaceError::GitSpawn)?;
        if let Some(f) = feeder {
            let _ = f.join();
        }
        if !out.status.success() {
            return Err(WorkspaceError::Git {
                repo: self.repo.clone(),
                command: shown.join(" "),
                detail: String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .chars()
                    .take(2000)
                    .collect(),
            });
        }
        Ok(out.stdout)
    }

    /// `rev-parse --verify -q <rev>`: the object id, or None when it does not resolve.
    pub fn resolve(&self, rev: &str) -> WsResult<Option<super::ObjectId>> {
        let mut cmd = self.command(["rev-parse", "--verify", "-q", "--end-of-options", rev]);
        let out = cmd.output().map_err(WorkspaceError::GitSpawn)?;
        if !out.status.success() {
            return Ok(None);
        }
        let text = out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout);
        super::ObjectId::from_hex(text)
            .map(Some)
            .ok_or_else(|| WorkspaceError::GitOutput {
                command: format!("rev-parse {rev}"),
                detail: String::from_utf8_lossy(text).into_owned(),
            })
    }
}
