//! A 1 GB output flood is drained to the end, hashed and counted, with bounded memory.
mod common;
use common::*;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

/// Run loopexec and return its exit code and its peak RSS in KiB (from wait4's rusage, which
/// covers loopexec and the children it reaped).
#[allow(clippy::zombie_processes)] // reaped below with wait4, which also reports its rusage
fn run_measured(dir: &std::path::Path, args: &[&str]) -> (i32, i64, String) {
    let child = common::command()
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stdout = child.stdout.unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid);
    let code = std::process::ExitStatus::from_raw(status)
        .code()
        .unwrap_or(-1);
    (code, usage.ru_maxrss, text)
}

#[test]
fn a_one_gigabyte_flood_finishes_with_bounded_memory() {
    let dir = workdir();
    let (code, max_rss_kib, stdout) = run_measured(
        dir.path(),
        &[
            "run",
            "--json",
            "--no-baseline",
            "--run-id",
            "flood",
            "--isolation",
            "none",
            "--exec",
            "head -c 1073741824 /dev/zero",
            "--check",
            "head -c 1000 /dev/zero >&2",
        ],
    );
    assert_eq!(code, 11, "{stdout}");
    let exec = events(dir.path(), "flood")
        .into_iter()
        .find(|e| e["type"] == "exec_result")
        .unwrap();
    assert_eq!(exec["stdout"]["bytes"], 1u64 << 30);
    assert_eq!(exec["stdout"]["truncated"], true);
    // sha256 of 1 GiB of zero bytes.
    assert_eq!(
        exec["stdout"]["sha256"],
        "49bc20df15e412a64472421e13fe86ff1c5165e18b2afccf160d4dc19fe68a14"
    );
    let artifact = run_dir(dir.path(), "flood").join(exec["stdout"]["artifact"].as_str().unwrap());
    let kept = std::fs::metadata(artifact).unwrap().len();
    assert!(kept < 200 * 1024, "artifact is bounded, got {kept} bytes");
    assert!(
        max_rss_kib < 64 * 1024,
        "peak RSS {max_rss_kib} KiB must stay under 64 MiB"
    );
}
