//! The agent's short-lived credential: the operator's `--mint-cmd` / `--revoke-cmd` hooks.
//!
//! Both hooks run on the HOST, in the oracle zone (this process), never in a zone: they hold the
//! operator's provider key, which the agent must never see. Each runs as `/bin/sh -c CMD` in the
//! workdir, in its own process group, with the operator's environment (minus `LOOPEXEC_*`) plus
//! `LOOPEXEC_RUN_ID` and `LOOPEXEC_HOOK` (`mint` / `revoke`), stderr discarded, and a wall clock
//! of [`HOOK_TIMEOUT`] after which its whole process group is killed.
//!
//! - mint: stdin is `/dev/null`; stdout (at most [`MAX_SECRET_BYTES`], trimmed, one non-empty
//!   line) is the secret. It lives only in this process's memory ([`Secret`]: redacted `Debug`,
//!   zeroed on drop) and reaches the agent zone through its environment only.
//! - revoke: stdin carries the secret and a newline (never argv); after a crash the secret died
//!   with its process, so the revoke run on resume gets an empty stdin and
//!   `LOOPEXEC_REVOKE_CAUSE=supervisor_lost` and must revoke what was minted for the run id (run
//!   on every resume after a crash: the dead supervisor may have minted before recording it).
//!
//! The receipt records that a credential was minted or revoked (and how the hook ended), never
//! the secret nor any digest of it.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use zeroize::Zeroize;

/// The variable the agent finds its credential in, unless `--mint-env` names another.
pub const DEFAULT_ENV: &str = "LOOPEXEC_AGENT_TOKEN";
/// Wall clock of one hook.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the hook's stdout may stay open after the hook's process group was killed.
const OUTPUT_GRACE: Duration = Duration::from_secs(5);
/// Largest secret a mint hook may print.
pub const MAX_SECRET_BYTES: usize = 4096;

/// The hooks a run pinned (`config.credentials` in `run_start`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialHooks {
    pub mint_cmd: String,
    pub revoke_cmd: String,
    /// The agent zone's variable holding the secret.
    pub env: String,
}

/// Validate the flags: a mint needs a revoke, and the variable must be a plain name.
pub fn hooks_from_flags(
    mint: Option<String>,
    revoke: Option<String>,
    env: Option<String>,
) -> Result<Option<CredentialHooks>, crate::error::Failure> {
    use crate::error::Failure;
    let mint = mint.filter(|m| !m.trim().is_empty());
    let revoke = revoke.filter(|r| !r.trim().is_empty());
    match (mint, revoke) {
        (None, None) => match env {
            Some(_) => Err(Failure::usage(
                "--mint-env names the variable of a minted credential: it needs --mint-cmd",
            )),
            None => Ok(None),
        },
        (Some(_), None) => Err(Failure::usage(
            "--mint-cmd without --revoke-cmd: a minted credential must be revocable",
        )
        .with_hint("add --revoke-cmd '<command that revokes the token read from stdin>'")),
        (None, Some(_)) => Err(Failure::usage(
            "--revoke-cmd without --mint-cmd: there is nothing to revoke",
        )),
        (Some(mint_cmd), Some(revoke_cmd)) => {
            let env = env.unwrap_or_else(|| DEFAULT_ENV.to_string());
            let plain = !env.is_empty()
                && !env.starts_with(|c: char| c.is_ascii_digit())
                && env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !plain {
                return Err(Failure::usage(format!(
                    "--mint-env {env:?}: not a variable name (A-Z, a-z, 0-9, _)"
                )));
            }
            if env.starts_with("LOOPEXEC_") && env != DEFAULT_ENV {
                return Err(Failure::usage(format!(
                    "--mint-env {env}: LOOPEXEC_* names are loopexec's own"
                )));
            }
            Ok(Some(CredentialHooks {
                mint_cmd,
                revoke_cmd,
                env,
            }))
        }
    }
}

pub use crate::secret::Secret;

/// How a hook ended, for the receipt (nothing it printed).
#[derive(Debug, Clone)]
pub struct HookRun {
    pub duration_ms: u64,
    /// None when it succeeded; else why not (exit status, timeout, ...).
    pub failure: Option<String>,
}

/// Why a mint gave no secret (a sentence for the halt detail; never the hook's output).
pub type MintError = String;

/// Run the mint hook and return the secret it printed.
pub fn mint(
    hooks: &CredentialHooks,
    workdir: &str,
    run_id: &str,
) -> Result<(Secret, HookRun), MintError> {
    let started = Instant::now();
    let out = run_hook(
        &hooks.mint_cmd,
        workdir,
        run_id,
        "mint",
        &[],
        None,
        HOOK_TIMEOUT,
    )?;
    let duration_ms = started.elapsed().as_millis() as u64;
    let mut bytes = out;
    if bytes.len() > MAX_SECRET_BYTES {
        bytes.zeroize();
        return Err(format!(
            "the mint hook printed more than {MAX_SECRET_BYTES} bytes"
        ));
    }
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            e.into_bytes().zeroize();
            return Err("the mint hook printed bytes that are not UTF-8".into());
        }
    };
    let mut text = text;
    let trimmed = text.trim().to_string();
    text.zeroize();
    let secret = Secret::new(trimmed);
    if secret.expose().is_empty() {
        return Err("the mint hook printed no secret".into());
    }
    if secret.expose().contains(['\n', '\r', '\0']) {
        return Err("the mint hook printed more than one line".into());
    }
    Ok((
        secret,
        HookRun {
            duration_ms,
            failure: None,
        },
    ))
}

/// Run the revoke hook with `secret` on its stdin (None after a crash: empty stdin).
pub fn revoke(
    hooks: &CredentialHooks,
    workdir: &str,
    run_id: &str,
    secret: Option<&Secret>,
    cause: &str,
) -> HookRun {
    let started = Instant::now();
    let mut input = secret
        .map(|s| format!("{}\n", s.expose()).into_bytes())
        .unwrap_or_default();
    let result = run_hook(
        &hooks.revoke_cmd,
        workdir,
        run_id,
        "revoke",
        &[("LOOPEXEC_REVOKE_CAUSE", cause)],
        Some(&input),
        HOOK_TIMEOUT,
    );
    input.zeroize();
    HookRun {
        duration_ms: started.elapsed().as_millis() as u64,
        failure: result.err(),
    }
}

/// Run one hook to completion; its stdout (at most MAX_SECRET_BYTES + 1 bytes are kept).
fn run_hook(
    cmd: &str,
    workdir: &str,
    run_id: &str,
    which: &str,
    extra_env: &[(&str, &str)],
    stdin: Option<&[u8]>,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(cmd)
        .current_dir(workdir)
        .env_clear()
        .envs(crate::engine::operator_env())
        .env("LOOPEXEC_RUN_ID", run_id)
        .env("LOOPEXEC_HOOK", which)
        .envs(extra_env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|e| format!("the {which} hook could not start: {e}"))?;
    let pgid = child.id() as i32;
    let kill_group = || {
        // SAFETY: kill(2) on the hook's own process group (created by process_group(0) above).
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    };
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let bytes = bytes.to_vec();
        std::thread::spawn(move || {
            let mut bytes = bytes;
            let _ = pipe.write_all(&bytes);
            bytes.zeroize();
        });
    }
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| format!("the {which} hook has no stdout"))?;
    let (sender, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = (&mut stdout)
            .take(MAX_SECRET_BYTES as u64 + 1)
            .read_to_end(&mut out);
        // Drain the rest without keeping it, so the hook never blocks on a full pipe.
        let _ = std::io::copy(&mut stdout, &mut std::io::sink());
        if let Err(mut unsent) = sender.send(out) {
            unsent.0.zeroize();
        }
    });
    let deadline = Instant::now() + timeout;
    // Wait without reaping (WNOWAIT): the hook's pid, and so its process group id, stays ours
    // until the group was killed, so the kill can never reach a process that reused the id.
    let exited = loop {
        use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(nix::unistd::Pid::from_raw(pgid)), flags) {
            Ok(WaitStatus::StillAlive) if Instant::now() >= deadline => break false,
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(5)),
            Ok(_) => break true,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                kill_group();
                let _ = child.wait();
                return Err(format!("waiting for the {which} hook: {e}"));
            }
        }
    };
    // Nothing the hook started outlives it.
    kill_group();
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the {which} hook: {e}"))?;
    let status = exited.then_some(status);
    // A process that left the group (setsid) and still holds stdout open is not waited for.
    let mut out = received
        .recv_timeout(OUTPUT_GRACE)
        .map_err(|_| format!("the {which} hook left a process holding its stdout open"))?;
    match status {
        None => {
            out.zeroize();
            Err(format!(
                "the {which} hook did not finish within {} ms",
                timeout.as_millis()
            ))
        }
        Some(s) if !s.success() => {
            out.zeroize();
            Err(match s.code() {
                Some(code) => format!("the {which} hook exited {code}"),
                None => format!("the {which} hook was killed ({s})"),
            })
        }
        Some(_) => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hooks(mint: &str, revoke: &str) -> CredentialHooks {
        CredentialHooks {
            mint_cmd: mint.into(),
            revoke_cmd: revoke.into(),
            env: DEFAULT_ENV.into(),
        }
    }

    #[test]
    fn a_mint_without_a_revoke_is_refused() {
        let err = hooks_from_flags(Some("echo t".into()), None, None).unwrap_err();
        assert_eq!(err.class().code(), 20);
        assert!(err.message.contains("--revoke-cmd"), "{}", err.message);
    }

    #[test]
    fn the_variable_must_be_a_plain_name_and_not_loopexecs() {
        assert!(hooks_from_flags(Some("a".into()), Some("b".into()), Some("A=B".into())).is_err());
        assert!(hooks_from_flags(
            Some("a".into()),
            Some("b".into()),
            Some("LOOPEXEC_RUN_ID".into())
        )
        .is_err());
        let h = hooks_from_flags(Some("a".into()), Some("b".into()), Some("API_TOKEN".into()))
            .unwrap()
            .unwrap();
        assert_eq!(h.env, "API_TOKEN");
    }

    #[test]
    fn the_minted_secret_is_stdout_trimmed() {
        let (secret, _) = mint(&hooks("printf '  tok-1 \\n'", "true"), "/", "r").unwrap();
        assert_eq!(secret.expose(), "tok-1");
        assert_eq!(format!("{secret:?}"), "Secret([redacted])");
    }

    #[test]
    fn a_failing_empty_or_oversized_mint_gives_no_secret() {
        assert_eq!(
            mint(&hooks("exit 3", "true"), "/", "r").unwrap_err(),
            "the mint hook exited 3"
        );
        assert_eq!(
            mint(&hooks("true", "true"), "/", "r").unwrap_err(),
            "the mint hook printed no secret"
        );
        let big = mint(
            &hooks("head -c 5000 /dev/zero | tr '\\0' a", "true"),
            "/",
            "r",
        )
        .unwrap_err();
        assert!(big.contains("more than 4096 bytes"), "{big}");
        assert!(mint(&hooks("printf 'a\\nb'", "true"), "/", "r")
            .unwrap_err()
            .contains("more than one line"));
    }

    #[test]
    fn a_hook_that_leaves_its_stdout_open_in_another_session_gives_no_secret() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let cmd = format!(
            "echo tok; setsid sh -c 'echo $$ > {}; exec sleep 30' & sleep 0.2",
            pidfile.display()
        );
        let err = mint(&hooks(&cmd, "true"), "/", "r").unwrap_err();
        assert_eq!(err, "the mint hook left a process holding its stdout open");
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // SAFETY: kill(2) of the sleeper this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }

    #[test]
    fn a_hook_past_its_timeout_is_killed_with_everything_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let cmd = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let started = Instant::now();
        let err = run_hook(
            &cmd,
            "/",
            "r",
            "mint",
            &[],
            None,
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert_eq!(err, "the mint hook did not finish within 300 ms");
        assert!(started.elapsed() < Duration::from_secs(10));
        let pid = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .to_string();
        // SIGKILL was sent; on a loaded machine the sleeper may take a moment to finish dying.
        let alive = || {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            state
                .rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(), "the hook's background sleeper outlived it");
    }

    #[test]
    fn revoke_reads_the_secret_on_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("got");
        let h = hooks("true", &format!("cat > {}", out.display()));
        let run = revoke(&h, "/", "r", Some(&Secret::new("tok-9".into())), "halt");
        assert!(run.failure.is_none(), "{:?}", run.failure);
        assert_eq!(std::fs::read_to_string(out).unwrap(), "tok-9\n");
        let failed = revoke(&hooks("true", "exit 2"), "/", "r", None, "halt");
        assert_eq!(failed.failure.as_deref(), Some("the revoke hook exited 2"));
    }
}
