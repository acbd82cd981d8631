//! `resources.disk_bytes`: the agent's workspace and the check's scratch layer live on a volume
//! of that size (an ext4 image on a loop device as root, a tmpfs unprivileged), so a zone writing
//! past it gets ENOSPC and the host's file system loses no more than the cap. (Where the host
//! cannot cap, the refusal unless `layers.may_skip` has `disk` is sandbox/src/preflight.rs's test.)
mod common;
use common::*;
use std::path::Path;

const CAP: u64 = 32 << 20;
/// What a zone tries to write: far more than the cap, far more than a shared host's noise.
const ATTEMPT: u64 = 1 << 30;

/// The shipped policy `name` with `[resources] disk_bytes = value` and `[layers] may_skip =
/// may_skip` (when not empty), written outside the repository.
fn policy_with(name: &str, value: &str, may_skip: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    zone_traversable(dir.path());
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("policies/{name}.toml")),
    )
    .unwrap();
    assert!(shipped.contains("\n[resources]\n"));
    let text = shipped.replacen(
        "\n[resources]\n",
        &format!("\n[resources]\ndisk_bytes = {value}\n"),
        1,
    );
    let text = if may_skip.is_empty() {
        text
    } else {
        assert!(text.contains("\nmay_skip = []\n"));
        text.replacen(
            "\nmay_skip = []\n",
            &format!("\nmay_skip = {may_skip}\n"),
            1,
        )
    };
    let path = dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let p = path_str(&path);
    (dir, p)
}

fn free_bytes(p: &Path) -> u64 {
    let s = nix::sys::statvfs::statvfs(p).unwrap();
    s.blocks_available() as u64 * s.fragment_size() as u64
}

/// Bytes the host file system gave a file (its allocated blocks, not its apparent size).
fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().blocks() * 512
}

/// A shell line writing ATTEMPT bytes to `big` (in the working directory: the layer under test;
/// its error goes to the zone's /tmp, a tmpfs), then recording the exit status and error in
/// `out` once `big` is gone again (on a full file system nothing else could be written).
fn write_past_the_cap(out: &str) -> String {
    format!(
        "(head -c {ATTEMPT} /dev/zero > big) 2> /tmp/err; rc=$?; rm -f big; echo \"$rc $(cat /tmp/err)\" > {out}"
    )
}

fn repo() -> tempfile::TempDir {
    let repo = workdir();
    std::fs::write(repo.path().join("answer"), "41\n").unwrap();
    commit_t0(repo.path());
    repo
}

#[test]
fn an_agent_writing_past_disk_bytes_gets_enospc_and_keeps_what_it_wrote_before() {
    let (_p, policy) = policy_with("agent", &CAP.to_string(), "");
    let repo = repo();
    let before = free_bytes(repo.path());
    let exec = format!("echo kept > kept.txt; {}", write_past_the_cap("enospc.txt"));
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "cap",
            "--policy",
            &policy,
            "--max-iterations",
            "1",
            "--exec",
            &exec,
            "--check",
            "grep -q 'No space left on device' enospc.txt",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let image = run_dir(repo.path(), "cap").join("workspace/disk.img");
    assert!(allocated(&image) <= CAP, "{}", allocated(&image));
    let dropped = before.saturating_sub(free_bytes(repo.path()));
    eprintln!(
        "agent tried {ATTEMPT} bytes; image allocated {} of cap {CAP}; host free space dropped {dropped}",
        allocated(&image)
    );
    assert!(dropped < ATTEMPT / 2, "the host lost {dropped} bytes");
    // What the agent wrote below the cap is in the delivered tree.
    let show = |p: &str| git(repo.path(), &["show", &format!("loopexec/cap:{p}")]);
    assert_eq!(show("kept.txt"), "kept\n");
    assert!(
        show("enospc.txt").starts_with("1 "),
        "{}",
        show("enospc.txt")
    );
    assert!(show("enospc.txt").contains("No space left on device"));
    // The volume is mounted nowhere on the host, before or after.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains("disk.img") && !mounts.contains(&path_str(repo.path())));
}

#[test]
fn a_check_writing_past_disk_bytes_gets_enospc_in_its_scratch_layer() {
    let (_p, check_policy) = policy_with("exec", &CAP.to_string(), "");
    let repo = repo();
    let before = free_bytes(repo.path());
    let check = format!(
        "{}; grep -q '^1 .*No space left on device' /tmp/enospc.txt",
        write_past_the_cap("/tmp/enospc.txt")
    );
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "cap",
            "--check-policy",
            &check_policy,
            "--max-iterations",
            "1",
            "--exec",
            "echo 42 > answer",
            "--check",
            &check,
        ],
    );
    assert_eq!(r.code, 10, "the check saw ENOSPC: {r:?}");
    let dropped = before.saturating_sub(free_bytes(repo.path()));
    eprintln!("check tried {ATTEMPT} bytes; host free space dropped {dropped}");
    assert!(dropped < ATTEMPT / 2, "the host lost {dropped} bytes");
}

#[test]
fn a_cap_the_host_cannot_enforce_runs_uncapped_when_the_policy_allows_skipping_disk() {
    let (_p, policy) = policy_with("agent", &CAP.to_string(), "[\"disk\"]");
    let repo = repo();
    let r = loopexec(
        repo.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "skip",
            "--policy",
            &policy,
            "--max-iterations",
            "1",
            "--exec",
            "echo 42 > answer",
            "--check",
            "grep -q 42 answer",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    // Where the host can cap, nothing is skipped and the workspace is on its volume.
    assert_eq!(
        run_dir(repo.path(), "skip")
            .join("workspace/disk.img")
            .exists(),
        sandbox::volume::unavailable().is_none()
    );
}

#[test]
fn a_malformed_disk_bytes_is_refused_with_its_line() {
    let dir = workdir();
    for (value, message) in [
        ("\"lots\"", "invalid type: string \"lots\", expected u64"),
        (
            "1048576",
            "resources.disk_bytes: must be at least 16777216 (16 MiB), got 1048576",
        ),
        ("-5", "invalid value: integer `-5`, expected u64"),
    ] {
        let path = dir.path().join("p.toml");
        std::fs::write(
            &path,
            format!("# a policy\n[resources]\ndisk_bytes = {value}\n"),
        )
        .unwrap();
        let r = loopexec(dir.path(), &["policy", "check", "--json", &path_str(&path)]);
        assert_eq!(r.code, 20, "{r:?}");
        assert_eq!(r.stdout.trim().lines().count(), 1, "one JSON object: {r:?}");
        let v = r.json();
        let text = v["errors"][0]["message"].as_str().unwrap();
        assert!(text.contains("p.toml:3:14: "), "{text}");
        assert!(text.ends_with(message), "{value}: {text}");
    }
}

#[test]
fn policy_show_names_the_cap_and_its_mechanism() {
    let (_p, policy) = policy_with("agent", &CAP.to_string(), "");
    let r = loopexec(Path::new("/"), &["policy", "show", &policy]);
    assert_eq!(r.code, 0, "{r:?}");
    let mechanism = if is_root() {
        "ext4 image on a loop device (detached mount)"
    } else {
        "tmpfs of a held user namespace (memory-backed, detached mount)"
    };
    assert!(
        r.stdout.contains(&format!("33554432 ({mechanism})")),
        "{}",
        r.stdout
    );
}

#[test]
fn a_capped_workspace_survives_an_interrupt_as_root_and_refuses_a_resume_when_it_was_memory() {
    let (_p, policy) = policy_with("agent", &CAP.to_string(), "");
    let repo = repo();
    // The first agent step writes `first` and is interrupted; the resumed run's agent step
    // finds it only if the workspace outlived the interrupted supervisor.
    let exec =
        "if [ -e first ]; then echo resumed > seen; else echo 42 > answer; : > first; sleep 30; fi";
    let args = [
        "run",
        "--json",
        "--run-id",
        "r",
        "--policy",
        &policy,
        "--max-iterations",
        "2",
        "--exec",
        exec,
        "--check",
        "grep -q 42 answer",
    ];
    interrupted_after(repo.path(), "r", &args, "iteration_start");
    let r = loopexec(repo.path(), &["run", "--json", "--resume", "r"]);
    if is_root() {
        // The image in the run directory is mounted again.
        assert_eq!(r.code, 10, "{r:?}");
        assert_eq!(git(repo.path(), &["show", "loopexec/r:seen"]), "resumed\n");
    } else {
        // The tmpfs went with the interrupted supervisor: refused, naming why.
        assert_eq!(r.code, 30, "{r:?}");
        assert!(
            r.stdout
                .contains("which did not outlive the process that made it"),
            "{r:?}"
        );
    }
}

#[test]
fn a_sandbox_overlay_whose_upper_layer_is_not_capped_is_refused_under_a_disk_cap() {
    let (_p, policy) = policy_with("agent", &CAP.to_string(), "");
    let dir = workdir();
    zone_traversable(dir.path());
    for d in ["l", "u", "w"] {
        std::fs::create_dir(dir.path().join(d)).unwrap();
    }
    zone_writable(&dir.path().join("u"));
    zone_writable(&dir.path().join("w"));
    let at = |d: &str| path_str(&dir.path().join(d));
    let overlay = format!(
        "target=/ws,lower={},upper={},work={}",
        at("l"),
        at("u"),
        at("w")
    );
    let r = loopexec(
        dir.path(),
        &[
            "sandbox",
            "--json",
            "--policy",
            &policy,
            "--overlay",
            &overlay,
            "--",
            "/bin/true",
        ],
    );
    assert_eq!(r.code, 30, "{r:?}");
    let v = r.json();
    assert_eq!(
        v["errors"][0]["message"],
        format!(
            "isolation layer disk unavailable: resources.disk_bytes is set but the overlay upper layer {} is not on a capped volume",
            at("u")
        )
    );
}
