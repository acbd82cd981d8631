//! The agent's credential: `--mint-cmd` / `--revoke-cmd` run on the host by loopexec; the secret
//! reaches the agent through its environment only, never argv, a file under `.loopexec/`, or the
//! receipt; it is revoked whenever the run stops, and after a crash on resume.
mod common;
use common::*;
use sha2::{Digest, Sha256};
use std::path::Path;

/// The operator's side of the hooks: a secret file, and logs of what the hooks saw.
struct Hooks {
    dir: tempfile::TempDir,
    secret: String,
}

impl Hooks {
    fn new() -> Hooks {
        let dir = tempfile::tempdir().unwrap();
        let mut raw = [0u8; 16];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut raw)
            .unwrap();
        let secret = format!("tok-{}", hex::encode(raw));
        std::fs::write(dir.path().join("secret"), format!("{secret}\n")).unwrap();
        Hooks { dir, secret }
    }
    fn p(&self, name: &str) -> String {
        path_str(&self.dir.path().join(name))
    }
    /// Prints the secret; logs its own argv.
    fn mint(&self) -> String {
        format!(
            "tr '\\0' ' ' < /proc/$$/cmdline >> {argv}; echo >> {argv}; cat {secret}",
            argv = self.p("argv.log"),
            secret = self.p("secret")
        )
    }
    /// Logs the cause and what it read on stdin, and its own argv.
    fn revoke(&self) -> String {
        format!(
            "tr '\\0' ' ' < /proc/$$/cmdline >> {argv}; echo >> {argv}; {{ echo \"cause=$LOOPEXEC_REVOKE_CAUSE\"; cat; echo ---; }} >> {log}",
            argv = self.p("argv.log"),
            log = self.p("revoked.log")
        )
    }
    fn revoked(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("revoked.log")).unwrap_or_default()
    }
    fn argv(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("argv.log")).unwrap_or_default()
    }
    /// An agent that prints `match` when `var` holds the secret (compared by digest, so the
    /// secret is in no command line), else `mismatch`.
    fn agent(&self, var: &str) -> String {
        let digest = hex::encode(Sha256::digest(self.secret.as_bytes()));
        format!("if [ \"$(printf %s \"${var}\" | sha256sum | cut -d' ' -f1)\" = {digest} ]; then echo match; else echo mismatch; fi")
    }
}

/// Every regular file beneath `dir`, recursively (symlinks are not followed).
fn files_beneath(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let ft = entry.file_type().unwrap();
        if ft.is_dir() {
            files_beneath(&entry.path(), out);
        } else if ft.is_file() {
            out.push(entry.path());
        }
    }
}

fn assert_secret_in_no_state_file(workdir: &Path, secret: &str) {
    let mut files = Vec::new();
    files_beneath(&workdir.join(".loopexec"), &mut files);
    assert!(files.len() > 3, "{files:?}");
    for f in files {
        let bytes = std::fs::read(&f).unwrap_or_default();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the secret is in {}",
            f.display()
        );
    }
}

#[test]
fn the_minted_secret_reaches_only_the_agent_and_is_revoked_once_at_the_halt() {
    let dir = workdir();
    zone_writable(dir.path());
    let hooks = Hooks::new();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            "c",
            "--workspace",
            "in-place",
            "--exec",
            &hooks.agent("LOOPEXEC_AGENT_TOKEN"),
            // The check zone never gets the credential.
            "--check",
            "test -z \"$LOOPEXEC_AGENT_TOKEN\"",
            "--mint-cmd",
            &hooks.mint(),
            "--revoke-cmd",
            &hooks.revoke(),
        ],
    );
    assert_eq!(r.code, 11, "{r:?}");
    assert!(!r.stdout.contains(&hooks.secret) && !r.stderr.contains(&hooks.secret));
    let out = std::fs::read_to_string(run_dir(dir.path(), "c").join("artifacts/0001-exec.stdout"))
        .unwrap();
    assert_eq!(out, "match\n");
    assert_eq!(
        hooks.revoked(),
        format!("cause=halt\n{}\n---\n", hooks.secret),
        "revoked exactly once, with the secret on stdin"
    );
    let argv = hooks.argv();
    assert_eq!(argv.lines().count(), 2, "{argv}");
    assert!(
        !argv.contains(&hooks.secret),
        "a hook saw the secret in its argv: {argv}"
    );
    let types = event_types(dir.path(), "c");
    let minted = types.iter().position(|t| t == "credential_minted").unwrap();
    assert!(
        minted < types.iter().position(|t| t == "iteration_start").unwrap(),
        "{types:?}"
    );
    let revoked = events(dir.path(), "c")
        .into_iter()
        .find(|e| e["type"] == "credential_revoked")
        .unwrap();
    assert_eq!(revoked["cause"], "halt");
    assert_eq!(revoked["ok"], true);
    assert_eq!(
        types[types.len() - 2],
        "credential_revoked",
        "revoked before the halt event: {types:?}"
    );
    assert_secret_in_no_state_file(dir.path(), &hooks.secret);
    let pubkey = path_str(&key_dir().join("operator.pub"));
    let v = loopexec(dir.path(), &["verify", "--json", "c", "--pubkey", &pubkey]);
    assert_eq!(v.code, 0, "{v:?}");
}

#[test]
fn mint_env_names_the_agents_variable() {
    let dir = workdir();
    let hooks = Hooks::new();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            "e",
            "--isolation",
            "none",
            "--exec",
            &format!(
                "{}; test -z \"$LOOPEXEC_AGENT_TOKEN\" && echo default-unset",
                hooks.agent("API_TOKEN")
            ),
            "--check",
            "true",
            "--mint-cmd",
            &hooks.mint(),
            "--revoke-cmd",
            &hooks.revoke(),
            "--mint-env",
            "API_TOKEN",
        ],
    );
    assert_eq!(r.code, 11, "{r:?}");
    let out = std::fs::read_to_string(run_dir(dir.path(), "e").join("artifacts/0001-exec.stdout"))
        .unwrap();
    assert_eq!(out, "match\ndefault-unset\n");
    assert_secret_in_no_state_file(dir.path(), &hooks.secret);
}

#[test]
fn a_mint_without_a_revoke_is_refused_before_anything_runs() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--exec",
            "true",
            "--check",
            "true",
            "--mint-cmd",
            "echo t",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("--revoke-cmd"));
    assert!(!dir.path().join(".loopexec/runs").exists());
}

#[test]
fn a_failing_mint_halts_credential_scope_invalid_before_the_agent_runs() {
    let dir = workdir();
    let hooks = Hooks::new();
    let marker = dir.path().join("agent-ran");
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            "m",
            "--isolation",
            "none",
            "--exec",
            &format!("touch {}", path_str(&marker)),
            "--check",
            "true",
            "--mint-cmd",
            "exit 3",
            "--revoke-cmd",
            &hooks.revoke(),
        ],
    );
    assert_eq!(r.code, 13, "{r:?}");
    let v = r.json();
    assert_eq!(v["halt_reason"], "credential_scope_invalid");
    assert!(
        v["run"]["detail"]
            .as_str()
            .unwrap()
            .contains("the mint hook exited 3"),
        "{v}"
    );
    assert!(
        !marker.exists(),
        "the agent must not run without its credential"
    );
    let types = event_types(dir.path(), "m");
    assert!(
        !types.iter().any(|t| t == "iteration_start"
            || t == "credential_minted"
            || t == "credential_revoked"),
        "{types:?}"
    );
    assert_eq!(hooks.revoked(), "", "nothing was minted, nothing to revoke");
}

#[test]
fn a_pause_revokes_and_a_resume_mints_a_new_credential() {
    let dir = workdir();
    let hooks = Hooks::new();
    let args = [
        "--isolation",
        "none",
        "--exec",
        "true",
        "--check",
        "test -e done || { touch done; exit 1; }",
    ];
    let mut first = vec!["run", "--no-baseline", "--json", "--once", "--run-id", "p"];
    first.extend(args);
    let (mint, revoke) = (hooks.mint(), hooks.revoke());
    first.extend(["--mint-cmd", &mint, "--revoke-cmd", &revoke]);
    let r = loopexec(dir.path(), &first);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        hooks.revoked(),
        format!("cause=pause\n{}\n---\n", hooks.secret)
    );
    let r = loopexec(dir.path(), &["run", "--json", "--resume", "p"]);
    assert_eq!(r.code, 11, "{r:?}");
    assert_eq!(
        hooks.revoked(),
        format!(
            "cause=pause\n{s}\n---\ncause=halt\n{s}\n---\n",
            s = hooks.secret
        )
    );
    let minted = event_types(dir.path(), "p")
        .iter()
        .filter(|t| *t == "credential_minted")
        .count();
    assert_eq!(minted, 2);
}

#[test]
fn a_credential_left_by_a_crashed_loopexec_is_revoked_on_resume() {
    let dir = workdir();
    let hooks = Hooks::new();
    // The first agent kills loopexec itself (its parent) with SIGKILL: nothing can revoke then.
    let agent = "if [ ! -e crashed ]; then touch crashed; kill -9 $PPID; sleep 5; fi";
    let (mint, revoke) = (hooks.mint(), hooks.revoke());
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--run-id",
            "k",
            "--isolation",
            "none",
            "--exec",
            agent,
            "--check",
            "true",
            "--mint-cmd",
            &mint,
            "--revoke-cmd",
            &revoke,
        ],
    );
    assert_eq!(r.code, -1, "killed by SIGKILL: {r:?}");
    assert_eq!(hooks.revoked(), "");
    let r = loopexec(dir.path(), &["run", "--json", "--resume", "k"]);
    assert_eq!(r.code, 11, "{r:?}");
    // The lost secret cannot be handed over: the hook gets an empty stdin and the cause.
    assert_eq!(
        hooks.revoked(),
        format!(
            "cause=supervisor_lost\n---\ncause=halt\n{}\n---\n",
            hooks.secret
        )
    );
    let revokes: Vec<String> = events(dir.path(), "k")
        .into_iter()
        .filter(|e| e["type"] == "credential_revoked")
        .map(|e| e["cause"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(revokes, ["supervisor_lost", "halt"]);
    assert_secret_in_no_state_file(dir.path(), &hooks.secret);
}

#[test]
fn loop_toml_can_name_the_hooks_and_a_mint_without_revoke_there_is_refused_too() {
    let dir = workdir();
    let hooks = Hooks::new();
    let toml = format!(
        "check = \"true\"\nexec = {:?}\nisolation = \"none\"\nmint_cmd = {:?}\nrevoke_cmd = {:?}\n",
        hooks.agent("LOOPEXEC_AGENT_TOKEN"),
        hooks.mint(),
        hooks.revoke()
    );
    std::fs::write(dir.path().join("loop.toml"), &toml).unwrap();
    let r = loopexec(
        dir.path(),
        &["run", "--no-baseline", "--json", "--run-id", "t"],
    );
    assert_eq!(r.code, 11, "{r:?}");
    let out = std::fs::read_to_string(run_dir(dir.path(), "t").join("artifacts/0001-exec.stdout"))
        .unwrap();
    assert_eq!(out, "match\n");
    assert_eq!(
        hooks.revoked(),
        format!("cause=halt\n{}\n---\n", hooks.secret)
    );
    std::fs::write(
        dir.path().join("loop.toml"),
        "check = \"true\"\nexec = \"true\"\nisolation = \"none\"\nmint_cmd = \"echo t\"\n",
    )
    .unwrap();
    let refused = loopexec(
        dir.path(),
        &["run", "--no-baseline", "--json", "--run-id", "u"],
    );
    assert_eq!(refused.code, 20, "{refused:?}");
    assert!(!run_dir(dir.path(), "u").exists());
}
