//! `loopexec sandbox -- CMD` end to end: exit codes, and what the zone can see and do.
//! Runs as root (the zone then runs as the policy's uid_when_root, 60200) and as an unprivileged
//! user (ci/test-unprivileged.sh).

mod common;
use common::{bin, is_root, ZONE_UID_WHEN_ROOT};
use std::path::Path;
use std::process::{Command, Output};

fn sandbox(extra: &[&str], script: &str) -> Output {
    Command::new(bin())
        .arg("sandbox")
        .args(extra)
        .args(["--", "/bin/bash", "-c", script])
        .current_dir("/")
        .output()
        .expect("run loopexec")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// A directory the zone may write: owned by the zone uid when we are root.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if is_root() {
        std::os::unix::fs::chown(
            dir.path(),
            Some(ZONE_UID_WHEN_ROOT),
            Some(ZONE_UID_WHEN_ROOT),
        )
        .unwrap();
    }
    dir
}

#[test]
fn true_exits_zero() {
    let o = Command::new(bin())
        .args(["sandbox", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn exit_code_of_the_command_is_returned() {
    let o = sandbox(&[], "exit 7");
    assert_eq!(
        o.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn command_found_through_the_zone_path() {
    let o = Command::new(bin())
        .args(["sandbox", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn missing_command_is_an_execution_failure() {
    let o = Command::new(bin())
        .args(["--json", "sandbox", "--", "/no/such/program"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(40));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["errors"][0]["code"], "spawn_failed");
}

#[test]
fn zone_sees_no_host_processes() {
    let o = sandbox(
        &[],
        "ls /proc | grep -c '^[0-9]'; cat /proc/1/cmdline | tr '\\0' ' '",
    );
    let text = stdout(&o);
    let mut lines = text.lines();
    let count: u32 = lines.next().unwrap().trim().parse().unwrap();
    assert!(count <= 4, "zone sees {count} processes: {text}");
    assert!(
        lines.next().unwrap().starts_with("loopexec-zone-init"),
        "{text}"
    );
}

#[test]
fn zone_has_loopback_only() {
    let o = sandbox(&[], "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
    assert_eq!(stdout(&o).trim(), "lo");
}

#[test]
fn zone_has_no_capabilities_no_new_privs_and_seccomp() {
    let o = sandbox(
        &[],
        "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status",
    );
    let text = stdout(&o);
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            text.contains(&format!("{set}:\t0000000000000000")),
            "{set}: {text}"
        );
    }
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("Seccomp:\t2"), "{text}");
}

#[test]
fn system_is_read_only() {
    let o = sandbox(
        &[],
        "touch /usr/loopexec-probe; echo $?; touch /loopexec-probe; echo $?",
    );
    assert_eq!(stdout(&o), "1\n1\n");
    assert!(!Path::new("/usr/loopexec-probe").exists());
}

#[test]
fn host_secrets_are_absent() {
    let o = sandbox(&[], "for p in /root /home /etc/shadow /run /var/run/docker.sock /sys; do test -e $p && echo $p; done; true");
    assert_eq!(stdout(&o), "");
}

#[test]
fn granted_path_is_writable_and_the_write_reaches_the_host() {
    let ws = workspace();
    let p = ws.path().display().to_string();
    let o = sandbox(&["--rw", &p], &format!("echo hello > {p}/out.txt"));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "hello\n"
    );
}

#[test]
fn protected_paths_stay_read_only_and_cannot_be_swapped() {
    let ws = workspace();
    let git = ws.path().join(".git");
    std::fs::create_dir(&git).unwrap();
    std::fs::write(git.join("config"), "[core]\n").unwrap();
    if is_root() {
        for p in [git.as_path(), &git.join("config")] {
            std::os::unix::fs::chown(p, Some(ZONE_UID_WHEN_ROOT), Some(ZONE_UID_WHEN_ROOT))
                .unwrap();
        }
    }
    let p = ws.path().display().to_string();
    let o = sandbox(
        &["--rw", &p],
        &format!("cd {p}; echo '[core] hooksPath=/tmp' >> .git/config; mkdir -p .git/hooks/x; mv .git g2; touch .gitmodules; true"),
    );
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(git.join("config")).unwrap(),
        "[core]\n"
    );
    assert!(
        !git.join("hooks").exists(),
        "placeholder left behind or hook created"
    );
    assert!(!ws.path().join("g2").exists());
    assert!(!ws.path().join(".gitmodules").exists());
}

#[test]
fn a_symlinked_protected_path_is_isolation_unsatisfiable_naming_the_path() {
    let ws = workspace();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join(".git")).unwrap();
    let p = ws.path().display().to_string();
    let o = Command::new(bin())
        .args(["sandbox", "--json", "--rw", &p, "--", "/bin/true"])
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(30), "{}", stdout(&o));
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["errors"][0]["code"], "isolation_unsatisfiable", "{out}");
    let message = out["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{p}/.git")) && message.contains("symlink"),
        "{message}"
    );
}

#[test]
fn a_placeholder_registry_inside_a_writable_grant_is_out_of_reach_and_cannot_be_moved() {
    // The registry of protected-path placeholders lives under XDG_STATE_HOME; here the operator
    // put that inside the workspace. The zone must not see, forge or swap its records.
    let ws = workspace();
    let p = ws.path().display().to_string();
    let registry = ws.path().join("state/loopexec/placeholders");
    let o = Command::new(bin())
        .args(["sandbox", "--rw", &p, "--", "/bin/bash", "-c"])
        .arg(format!(
            "cd {p}; ls -A state/loopexec/placeholders > seen 2>&1; echo '{{}}' > state/loopexec/placeholders/forged.jsonl; mv state moved; mv state/loopexec state/x; true"
        ))
        .env("XDG_STATE_HOME", ws.path().join("state"))
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Unprivileged, the zone's uid owns the registry: it is hidden (an empty tmpfs). As root, the
    // registry is root's, 0700: the zone's uid cannot enter it, so it needs no mount.
    let expected = if is_root() {
        "ls: cannot open directory 'state/loopexec/placeholders': Permission denied\n"
    } else {
        ""
    };
    assert_eq!(
        std::fs::read_to_string(ws.path().join("seen")).unwrap(),
        expected,
        "the zone saw the registry's records"
    );
    assert!(
        !registry.join("forged.jsonl").exists(),
        "the zone planted a record"
    );
    assert!(
        !ws.path().join("moved").exists() && !ws.path().join("state/x").exists(),
        "the zone moved the registry away"
    );
    let left: Vec<_> = std::fs::read_dir(&registry)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("lock")],
        "the zone's record outlived it"
    );
}

#[test]
fn a_read_only_root_with_the_registry_under_a_0700_home_starts_and_keeps_the_registry_out_of_reach()
{
    // `read_only = ["/"]` contains the placeholder registry, here under a 0700 home (like
    // root's /root) outside /tmp (the zone's /tmp is its own). It used to fail as root: the zone
    // init could not resolve the registry's path to hide it (exit 40, "Permission denied").
    let base = tempfile::Builder::new()
        .prefix("loopexec-home-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let home = base.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let registry = home.join(".local/state/loopexec/placeholders");
    let policy = base.path().join("root-ro.toml");
    std::fs::write(
        &policy,
        "[filesystem]\nread_only = [\"/\"]\n[env]\nset = { PATH = \"/usr/bin:/bin\" }\n",
    )
    .unwrap();
    let o = Command::new(bin())
        .args([
            "sandbox",
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
        ])
        .arg(format!(
            "ls -A {} 2>/dev/null; test -e {}/lock && echo seen || echo out-of-reach",
            registry.display(),
            registry.display()
        ))
        .env("HOME", &home)
        .env_remove("XDG_STATE_HOME")
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (Some(0), "out-of-reach\n"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        registry.join("lock").is_file(),
        "the supervisor used another registry"
    );
}

#[test]
fn without_its_zone_init_executable_loopexec_starts_no_zone_and_names_the_missing_file() {
    // A loopexec binary alone in a directory (no loopexec-zone-init beside it).
    let dir = tempfile::Builder::new()
        .prefix("loopexec-alone-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let alone = dir.path().join("loopexec");
    if std::fs::hard_link(bin(), &alone).is_err() {
        std::fs::copy(bin(), &alone).unwrap();
    }
    let o = Command::new(&alone)
        .args(["--json", "sandbox", "--", "/bin/true"])
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(40), "{}", stdout(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["errors"][0]["code"], "spawn_failed");
    let message = v["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "the zone init executable {}: No such file or directory;",
            dir.path().join("loopexec-zone-init").display()
        )),
        "{message}"
    );
}

#[test]
fn tmp_is_private_and_writable() {
    let o = sandbox(&[], "echo x > /tmp/loopexec-zone-private && ls -A /tmp");
    assert_eq!(stdout(&o), "loopexec-zone-private\n");
    assert!(!Path::new("/tmp/loopexec-zone-private").exists());
}

#[test]
fn environment_comes_from_the_allowlist() {
    let o = Command::new(bin())
        .args(["sandbox", "--", "/usr/bin/env"])
        .env("AWS_SECRET_ACCESS_KEY", "leak")
        .env("LANG", "C.UTF-8")
        .output()
        .unwrap();
    let text = stdout(&o);
    assert!(!text.contains("AWS_SECRET_ACCESS_KEY"), "{text}");
    assert!(text.contains("LANG=C.UTF-8"), "{text}");
    assert!(text.contains("HOME=/tmp"), "{text}");
}

#[test]
fn no_process_outlives_the_zone() {
    let marker = format!("loopexec-daemon-{}", std::process::id());
    let o = sandbox(&[], &format!("setsid sh -c 'exec -a {marker} sleep 300' & (sh -c 'exec -a {marker} sleep 300' &); exit 0"));
    assert_eq!(o.status.code(), Some(0));
    std::thread::sleep(std::time::Duration::from_millis(100));
    let left = Command::new("pgrep")
        .args(["-f", &marker])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&left.stdout), "");
}

#[test]
fn json_report_lists_every_layer_as_applied() {
    let o = Command::new(bin())
        .args(["--json", "sandbox", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["command_exit_code"], 0);
    let layers = v["zone"]["layers"].as_array().unwrap();
    assert!(layers.len() >= 10);
    assert!(layers.iter().all(|l| l["applied"] == true), "{layers:?}");
    assert_eq!(v["zone"]["skipped"].as_array().unwrap().len(), 0);
}

#[test]
fn doctor_passes_on_this_host() {
    let o = Command::new(bin())
        .args(["--json", "doctor"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{v}");
    assert_eq!(v["satisfiable"], true);
}

#[test]
fn proxy_mode_denies_tcp_connect_through_landlock() {
    // agent.toml is network mode "proxy": without a proxy listener no TCP connect is allowed,
    // not even to loopback (Landlock ABI >= 4 answers EACCES; exec.toml gets "refused").
    let o = sandbox(&["--builtin", "agent"], "exec 3<>/dev/tcp/127.0.0.1/9");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = sandbox(&["--builtin", "exec"], "exec 3<>/dev/tcp/127.0.0.1/9");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Connection refused"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn wall_clock_limit_kills_the_zone_with_the_budget_class() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("short.toml");
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/exec.toml"))
            .unwrap();
    std::fs::write(
        &policy,
        text.replace("wall_clock_seconds = 1800", "wall_clock_seconds = 1"),
    )
    .unwrap();
    let marker = format!("loopexec-wall-{}", std::process::id());
    let started = std::time::Instant::now();
    let o = Command::new(bin())
        .args([
            "--json",
            "sandbox",
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "/bin/bash",
            "-c",
        ])
        .arg(format!("exec -a {marker} sleep 60"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(18));
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["errors"][0]["code"], "wall_clock_exceeded");
    let left = Command::new("pgrep")
        .args(["-f", &marker])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&left.stdout), "");
}

#[test]
fn hidden_paths_are_covered() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("hide.toml");
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/exec.toml"))
            .unwrap();
    std::fs::write(
        &policy,
        text.replace("hidden = []", "hidden = [\"/etc/passwd\", \"/etc/ssl\"]"),
    )
    .unwrap();
    let o = sandbox(
        &["--policy", policy.to_str().unwrap()],
        "wc -c < /etc/passwd; ls -A /etc/ssl | wc -l; touch /etc/ssl/x 2>/dev/null || echo ro",
    );
    assert_eq!(stdout(&o), "0\n0\nro\n");
}

#[test]
fn zone_init_memory_is_out_of_reach() {
    let o = sandbox(&[], "head -c1 /proc/1/mem 2>/dev/null || echo denied; cat /proc/1/environ 2>/dev/null || echo denied");
    assert_eq!(stdout(&o), "denied\ndenied\n");
}

#[test]
fn zone_dies_with_its_supervisor() {
    let marker = format!("loopexec-orphan-{}", std::process::id());
    let mut sup = Command::new(bin())
        .args(["sandbox", "--", "/bin/bash", "-c"])
        .arg(format!("exec -a {marker} sleep 60"))
        .spawn()
        .unwrap();
    let find = || {
        let o = Command::new("pgrep")
            .args(["-f", &format!("^{marker}")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(|p| p.parse::<i32>().unwrap())
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while find().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!find().is_empty(), "the command never started");
    sup.kill().unwrap();
    sup.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let left = find();
    for pid in &left {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(
        left.is_empty(),
        "zone processes outlived the supervisor: {left:?}"
    );
}

#[test]
fn command_starts_with_default_signal_dispositions() {
    let o = Command::new(bin())
        .args([
            "sandbox",
            "--",
            "/bin/grep",
            "-E",
            "^Sig(Ign|Blk):",
            "/proc/self/status",
        ])
        .output()
        .unwrap();
    assert_eq!(
        stdout(&o),
        "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
    );
}

#[test]
fn files_the_zone_creates_belong_to_the_workspace_owner() {
    // As root, a workspace owned by another (non-root) user stays theirs: the zone (uid 60200)
    // writes it through an idmapped mount, and what it creates is stored as the owner's.
    // Unprivileged: plain bind, the caller's uid.
    use std::os::unix::fs::MetadataExt;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("existing"), "a\n").unwrap();
    std::fs::create_dir(ws.path().join(".git")).unwrap();
    std::fs::write(ws.path().join(".git/config"), "[core]\n").unwrap();
    if nix::unistd::geteuid().is_root() {
        for p in [
            ws.path().to_path_buf(),
            ws.path().join("existing"),
            ws.path().join(".git"),
            ws.path().join(".git/config"),
        ] {
            std::os::unix::fs::chown(&p, Some(4242), Some(4242)).unwrap();
        }
    }
    let p = ws.path().display().to_string();
    let o = sandbox(&["--rw", &p], &format!("cd {p} && echo b >> existing && echo c > created && mkdir dir; echo x >> .git/config; true"));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let owner = std::fs::metadata(ws.path()).unwrap().uid();
    assert_eq!(
        std::fs::read_to_string(ws.path().join("existing")).unwrap(),
        "a\nb\n"
    );
    for name in ["created", "dir"] {
        assert_eq!(
            std::fs::metadata(ws.path().join(name)).unwrap().uid(),
            owner,
            "{name}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(ws.path().join(".git/config")).unwrap(),
        "[core]\n"
    );
}

#[test]
fn a_root_owned_writable_grant_is_never_mapped_onto_root() {
    // Only root can own such a grant and start a zone over it; unprivileged callers never reach
    // this path (their zone runs as themselves).
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path().display().to_string();
    let o = Command::new(bin())
        .args(["--json", "sandbox", "--rw", &p, "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(20),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("never mapped onto root"));
}

#[test]
fn a_command_line_larger_than_one_socket_message_runs_through_the_plan_memfd() {
    // 8 arguments of 100 KB: legal for execve, together (about 3 MB as the encoded plan) far
    // larger than one message on the zone's socket. The command counts and measures them.
    let big = "x".repeat(100 * 1024);
    let mut args = vec![
        "sandbox".to_string(),
        "--".to_string(),
        "/bin/sh".to_string(),
        "-c".to_string(),
        "n=0; for a in \"$@\"; do n=$((n + ${#a})); done; echo \"$# $n\"".to_string(),
        "sh".to_string(),
    ];
    args.extend(std::iter::repeat(big).take(8));
    let out = Command::new(bin())
        .args(&args)
        .current_dir("/")
        .output()
        .expect("run loopexec");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout(&out).trim(), format!("8 {}", 8 * 100 * 1024));
}
