//! Crash trials (issue 24, item 2): loops killed by SIGKILL at a random instant or at a chosen
//! phase (the test stopping points: between the snapshot and the check, between a green and its
//! confirmation, mid-append of a `check_result` line, during the delivery, between the halt line
//! and the seal), natively sandboxed and under `--isolation none`, then resumed to their halt.
//! Each trial checks: the receipt verifies; no event is lost or duplicated (every iteration that
//! was not interrupted records exactly the events of an uninterrupted run's iteration, an
//! interrupted one a prefix of them, the run's opening and closing events are the uninterrupted
//! run's, resume markers aside); `state.json` agrees with the halt; no process, cgroup, mount,
//! placeholder record or shared directory of the killed supervisor remains; every minted
//! credential was revoked; the delivered branch holds the last snapshot's tree.
//!
//! `LOOPEXEC_CRASH_TRIALS` (default 6) trials, drawn from `LOOPEXEC_CRASH_SEED` (default: the
//! clock; printed); `ci/crash-trials.sh N` runs this with N and prints the figures.
mod common;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The chosen phases (the debug build's test stopping points, src/test_pause.rs).
const POINTS: [&str; 6] = [
    "before_check",
    "before_confirmation",
    "mid_append",
    "before_branch",
    "after_branch",
    "before_seal",
];

/// Events a start or a resume appends whatever the iteration: not part of the comparison
/// (`guard_baseline`: the syntax-tree guards' baseline, computed again by each start).
const MARKERS: [&str; 7] = [
    "guard_baseline",
    "run_resumed",
    "iteration_interrupted",
    "seal_resumed",
    "run_key",
    "credential_minted",
    "credential_revoked",
];

/// xorshift64*: the trials' draws, reproducible from the printed seed.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Isolation {
    Native,
    None,
}

#[derive(Debug, Clone, Copy)]
enum Kill {
    At(&'static str),
    After(Duration),
}

/// One trial's project: a committed repository (its check passes once `value.txt` holds 1) and
/// the credential hooks' ledger beside it.
struct Project {
    repo: tempfile::TempDir,
    ledger: tempfile::TempDir,
    /// The trial's own temporary directory (`TMPDIR` of its supervisors): where their shared
    /// directories go, and where the resume sweeps those a killed one left.
    tmp: tempfile::TempDir,
}

fn project() -> Project {
    let repo = workdir();
    write(repo.path(), "value.txt", "0\n");
    write(repo.path(), "check.sh", "test \"$(cat value.txt)\" = 1\n");
    commit_t0(repo.path());
    let ledger = tempfile::tempdir().unwrap();
    std::fs::create_dir(ledger.path().join("minted")).unwrap();
    std::fs::create_dir(ledger.path().join("revoked")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    zone_traversable(tmp.path());
    Project { repo, ledger, tmp }
}

/// The run's arguments: iteration 1 changes nothing (red), later ones set the value (green);
/// the agent's command line carries `marker`, so its processes can be found.
fn args(p: &Project, isolation: Isolation, marker: &str) -> Vec<String> {
    let ledger = p.ledger.path().display();
    let mut args: Vec<String> = [
        "run",
        "--json",
        "--run-id",
        "r",
        "--check",
        "sh check.sh",
        "--max-iterations",
        "6",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push("--exec".into());
    args.push(format!(
        ": {marker}; case $LOOPEXEC_ITERATION in 1) true ;; *) echo 1 > value.txt ;; esac; sleep 0.2"
    ));
    args.push("--mint-cmd".into());
    args.push(format!(
        "t=tok-$(date +%s%N); touch {ledger}/minted/$t; echo $t"
    ));
    args.push("--revoke-cmd".into());
    // The secret on stdin; after a crash none (it died with its supervisor): then every
    // credential minted for the run is revoked, as the hook's contract asks.
    args.push(format!(
        "read t || true; if [ -n \"$t\" ]; then touch {ledger}/revoked/$t; else for m in {ledger}/minted/*; do touch {ledger}/revoked/${{m##*/}}; done; fi"
    ));
    if isolation == Isolation::None {
        args.push("--isolation".into());
        args.push("none".into());
    }
    args
}

fn spawn(p: &Project, args: &[String], kill: Option<Kill>, marker_file: &Path) -> Child {
    let mut c = command();
    c.current_dir(p.repo.path())
        .env("TMPDIR", p.tmp.path())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(Kill::At(point)) = kill {
        c.env("LOOPEXEC_TEST_PAUSE", point)
            .env("LOOPEXEC_TEST_PAUSE_MARKER", marker_file);
    }
    c.spawn().expect("spawn loopexec")
}

/// The event types of each part of a receipt, resume markers left out: the opening (before the
/// first iteration), each iteration's (by number, and whether it was interrupted), the closing.
#[derive(Debug, PartialEq)]
struct Shape {
    opening: Vec<String>,
    iterations: Vec<(u64, Vec<String>, bool)>,
    closing: Vec<String>,
}

fn shape(events: &[Value]) -> Shape {
    let interrupted: BTreeSet<u64> = events
        .iter()
        .filter(|e| e["type"] == "iteration_interrupted")
        .filter_map(|e| e["iteration"].as_u64())
        .collect();
    let mut s = Shape {
        opening: vec![],
        iterations: vec![],
        closing: vec![],
    };
    let mut closed = false;
    for e in events {
        let t = e["type"].as_str().unwrap_or_default().to_string();
        if MARKERS.contains(&t.as_str()) {
            continue;
        }
        if t == "halt" {
            closed = true;
        }
        if closed {
            s.closing.push(t);
        } else if t == "iteration_start" {
            let n = e["iteration"].as_u64().unwrap_or(0);
            s.iterations.push((n, vec![t], interrupted.contains(&n)));
        } else if let Some((_, types, _)) = s.iterations.last_mut() {
            types.push(t);
        } else {
            s.opening.push(t);
        }
    }
    s
}

/// The uninterrupted run's shape, per isolation.
fn reference(isolation: Isolation) -> Shape {
    let p = project();
    let args = args(&p, isolation, "crash-trial-reference");
    let r = loopexec(
        p.repo.path(),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!([10, 11].contains(&r.code), "the reference run: {r:?}");
    shape(&events(p.repo.path(), "r"))
}

/// What differs between a trial's receipt and the reference, in words (empty: nothing).
fn lost_or_duplicated(trial: &Shape, reference: &Shape) -> Vec<String> {
    let mut found = vec![];
    // A run killed before its opening was complete may halt right away (a detached run killed
    // before it recorded its workspace: `workspace_invalid`), never go on without it.
    let cut_short = trial.opening != reference.opening;
    if !reference.opening.starts_with(&trial.opening) || (cut_short && !trial.iterations.is_empty())
    {
        found.push(format!(
            "opening {:?}, not {:?}",
            trial.opening, reference.opening
        ));
    }
    if trial.closing != reference.closing {
        found.push(format!(
            "closing {:?}, not {:?}",
            trial.closing, reference.closing
        ));
    }
    let numbers: Vec<u64> = trial.iterations.iter().map(|(n, _, _)| *n).collect();
    let expected: Vec<u64> = (1..=numbers.len() as u64).collect();
    if numbers != expected {
        found.push(format!("iterations numbered {numbers:?}"));
    }
    let red = &reference.iterations[0].1;
    let green = &reference.iterations[reference.iterations.len() - 1].1;
    for (n, types, interrupted) in &trial.iterations {
        let want = if *n == 1 { red } else { green };
        let ok = if *interrupted {
            want.starts_with(types)
        } else {
            types == want
        };
        if !ok {
            found.push(format!(
                "iteration {n} (interrupted: {interrupted}) recorded {types:?}, not {want:?}"
            ));
        }
    }
    found
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let mut found = vec![];
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() as i32 {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(marker) {
                found.push(pid);
            }
        }
    }
    found
}

/// Cgroup directories named for supervisor `pid` (`loopexec-zone-<pid>-*`,
/// `loopexec-supervisor-<pid>`), anywhere beneath /sys/fs/cgroup (bounded depth, no links).
fn cgroups_of(pid: i32) -> Vec<PathBuf> {
    let zone = format!("loopexec-zone-{pid}-");
    let supervisor = format!("loopexec-supervisor-{pid}");
    let mut found = vec![];
    let mut todo = vec![(PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = todo.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if !kind.is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&zone) || name == supervisor {
                found.push(entry.path());
            } else if depth < 8 {
                todo.push((entry.path(), depth + 1));
            }
        }
    }
    found
}

/// Placeholder records of supervisor `pid` in this user's registry.
fn placeholder_records_of(pid: i32) -> Vec<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")));
    let Some(base) = base else { return vec![] };
    let prefix = format!("{pid}-");
    std::fs::read_dir(base.join("loopexec/placeholders"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect()
}

/// Mounts of this mount namespace beneath `dir` (a zone's are in its own namespace; none may
/// reach the host's).
fn mounts_beneath(dir: &Path) -> Vec<String> {
    let needle = format!(" {}", dir.display());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_string)
        .collect()
}

/// Shared directories beneath `tmp` that no live supervisor holds.
fn abandoned_shared_dirs(tmp: &Path) -> Vec<PathBuf> {
    let mut found = vec![];
    for entry in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !["loopexec-held-", ".loopexec-new-"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
        {
            continue;
        }
        let Ok(dir) = std::fs::File::open(entry.path()) else {
            continue;
        };
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor we own; released when `dir` is closed below.
        if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            found.push(entry.path());
        }
    }
    found
}

#[derive(Debug, Default)]
struct Figures {
    trials: u64,
    native: u64,
    killed: u64,
    finished_before_the_kill: u64,
    resumes: u64,
    chain_breaks: u64,
    lost_or_duplicated: u64,
    state_disagreements: u64,
    orphans: u64,
    unrevoked_credentials: u64,
    unsealed: u64,
    branch_mismatches: u64,
}

#[test]
fn supervisors_killed_at_any_point_resume_to_a_sealed_consistent_run_leaving_nothing_behind() {
    let trials: u64 = std::env::var("LOOPEXEC_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let seed: u64 = std::env::var("LOOPEXEC_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    println!("crash trials: {trials} trials, seed {seed} (LOOPEXEC_CRASH_SEED reproduces them)");
    let references = [reference(Isolation::Native), reference(Isolation::None)];
    let mut draw = Draw(seed);
    let mut f = Figures::default();
    let mut problems: Vec<String> = vec![];
    for i in 0..trials {
        let isolation = if draw.below(3) < 2 {
            Isolation::Native
        } else {
            Isolation::None
        };
        // Every point in turn on the first trials, then a random instant or point.
        let kill = match i {
            i if (i as usize) < POINTS.len() => Kill::At(POINTS[i as usize]),
            _ if draw.below(2) == 0 => Kill::At(POINTS[draw.below(POINTS.len() as u64) as usize]),
            _ => Kill::After(Duration::from_millis(50 + draw.below(1200))),
        };
        let p = project();
        let marker = format!("crash-trial-{seed}-{i}");
        let marker_file = p.ledger.path().join("paused");
        let args = args(&p, isolation, &marker);
        let mut child = spawn(&p, &args, Some(kill), &marker_file);
        let pid = child.id() as i32;
        let started = Instant::now();
        let reached = loop {
            if child.try_wait().unwrap().is_some() {
                break false;
            }
            let due = match kill {
                Kill::At(_) => marker_file.exists(),
                Kill::After(delay) => started.elapsed() >= delay,
            };
            if due {
                break true;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "trial {i} hung"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        f.trials += 1;
        f.native += u64::from(isolation == Isolation::Native);
        if reached {
            child.kill().unwrap();
            f.killed += 1;
        } else {
            f.finished_before_the_kill += 1;
        }
        let _ = child.wait();
        let what = format!("trial {i} ({isolation:?}, {kill:?}, killed: {reached})");
        // Resume until halted (a resume may itself halt, or find the run already sealed).
        let repo = p.repo.path();
        let in_trial = |args: &[&str]| {
            from_output(
                command()
                    .current_dir(repo)
                    .env("TMPDIR", p.tmp.path())
                    .args(args)
                    .output()
                    .expect("spawn loopexec"),
            )
        };
        for _ in 0..3 {
            let state = in_trial(&["status", "--json", "r"]);
            if state.json()["status"]["state"] == "halted" || state.json()["state"] == "halted" {
                break;
            }
            let resumed = in_trial(&["run", "--json", "--resume", "r"]);
            f.resumes += 1;
            // A resume finds the run halted when its supervisor died after the seal.
            let already =
                resumed.code == 20 && resumed.json()["errors"][0]["code"] == "run_already_halted";
            if ![10, 11, 30].contains(&resumed.code) && !already {
                problems.push(format!(
                    "{what}: resume exited {}: {resumed:?}",
                    resumed.code
                ));
            }
        }
        let pubkey = path_str(&key_dir().join("operator.pub"));
        let verified = loopexec(repo, &["verify", "--json", "r", "--pubkey", &pubkey]);
        if verified.code != 0 {
            f.chain_breaks += 1;
            problems.push(format!("{what}: verify: {verified:?}"));
        }
        let ev = events(repo, "r");
        let halt = ev.iter().find(|e| e["type"] == "halt").cloned();
        let Some(halt) = halt else {
            f.unsealed += 1;
            problems.push(format!("{what}: no halt after resuming"));
            continue;
        };
        let reference = &references[usize::from(isolation == Isolation::None)];
        let differs = lost_or_duplicated(&shape(&ev), reference);
        if !differs.is_empty() {
            f.lost_or_duplicated += 1;
            problems.push(format!("{what}: {}", differs.join("; ")));
        }
        let state: Value =
            serde_json::from_slice(&std::fs::read(run_dir(repo, "r").join("state.json")).unwrap())
                .unwrap();
        if state["state"] != "halted" || state["halt_reason"] != halt["halt_reason"] {
            f.state_disagreements += 1;
            problems.push(format!("{what}: state.json {state} against halt {halt}"));
        }
        let mut left = vec![];
        left.extend(
            processes_with(&marker)
                .iter()
                .map(|p| format!("process {p}")),
        );
        left.extend(cgroups_of(pid).iter().map(|c| c.display().to_string()));
        left.extend(
            placeholder_records_of(pid)
                .iter()
                .map(|c| c.display().to_string()),
        );
        left.extend(mounts_beneath(repo));
        left.extend(mounts_beneath(p.tmp.path()));
        left.extend(
            abandoned_shared_dirs(p.tmp.path())
                .iter()
                .map(|c| c.display().to_string()),
        );
        if !left.is_empty() {
            f.orphans += 1;
            problems.push(format!("{what}: left behind: {left:?}"));
        }
        let names = |dir: &str| -> BTreeSet<String> {
            std::fs::read_dir(p.ledger.path().join(dir))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        };
        let unrevoked: Vec<String> = names("minted")
            .difference(&names("revoked"))
            .cloned()
            .collect();
        if !unrevoked.is_empty() {
            f.unrevoked_credentials += 1;
            problems.push(format!("{what}: credentials never revoked: {unrevoked:?}"));
        }
        if let Some(branch) = halt["delivery"]["branch"].as_str() {
            let last_tree = ev
                .iter()
                .rev()
                .find(|e| e["type"] == "snapshot")
                .and_then(|e| e["tree_id"].as_str())
                .unwrap_or_default()
                .to_string();
            let delivered = git(repo, &["rev-parse", &format!("{branch}^{{tree}}")]);
            if delivered.trim() != last_tree {
                f.branch_mismatches += 1;
                problems.push(format!(
                    "{what}: {branch} holds {delivered}, the last snapshot {last_tree}"
                ));
            }
        } else if isolation == Isolation::Native && halt["iteration"].as_u64() > Some(0) {
            // (A run halted before any agent step, e.g. killed before it recorded its
            // workspace, has nothing to deliver.)
            f.branch_mismatches += 1;
            problems.push(format!("{what}: no branch delivered: {halt}"));
        }
    }
    println!("crash trials: {f:?}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
