//! `loopexec verify --all DIR`: every entry of DIR (a `.loopexec/runs/` tree, or a collection
//! `fleet collect` made, docs/fleet.md) verified offline as a sealed run, in a bounded pool of
//! threads, each run reported as it finishes (a line, or with `--json` one JSON object per line:
//! `{"verify_run": {...}}`), then the summary: runs, verified, failed (and why), halts by reason
//! and by class, the verified runs' metered cost.
//!
//! DIR is hostile input: it is read through its directory descriptor, an entry that is a symlink
//! is refused (never followed), anything that is not a run directory is reported as failing,
//! every name is shown escaped. One directory stream, one run per worker at a time and bounded
//! channels between them: memory and descriptors are bounded by the pool, not by DIR's size.

use super::verify::{ack_check, holds_probe_receipt, VerifyKey};
use crate::audit::verify::{verify_run_with_history, Check, Verification};
use crate::error::{CmdResult, Failure};
use crate::halt::{ExitClass, HaltReason};
use crate::inert::inert;
use crate::output::Outcome;
use crate::receipt::seal::RECEIPT_FILE;
use crate::rules::budget::{self, Cost};
use crate::safefs::SafeDir;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Mutex;

/// The key of each streamed per-run object under `--json`.
pub const LINE_KEY: &str = "verify_run";
/// The failed runs the summary lists by name (the count covers them all).
pub const MAX_LISTED_FAILURES: usize = 100;

/// What one entry of DIR came to.
struct RunResult {
    /// The entry's name as read (not UTF-8: lossily, and failing).
    name: String,
    /// `run`, or `not_a_run` for an entry that is no run directory.
    kind: &'static str,
    run_id: Option<String>,
    halt: Option<HaltReason>,
    verified: bool,
    /// The failed checks, in order (an entry that is no run: one, `run_directory`).
    failures: Vec<Check>,
    /// The run's metered spend (verified runs only).
    cost: Option<Cost>,
}

impl RunResult {
    fn not_a_run(name: String, detail: impl Into<String>) -> RunResult {
        RunResult {
            name,
            kind: "not_a_run",
            run_id: None,
            halt: None,
            verified: false,
            failures: vec![Check {
                name: "run_directory",
                ok: false,
                detail: detail.into(),
            }],
            cost: None,
        }
    }

    fn json(&self) -> Value {
        json!({
            "name": self.name,
            "kind": self.kind,
            "run_id": self.run_id,
            "halt_reason": self.halt.map(HaltReason::as_str),
            "exit_code": self.halt.map(|h| h.class().code()),
            "verified": self.verified,
            "failed_checks": self.failures.iter().map(|c| json!({"name": c.name, "detail": c.detail})).collect::<Vec<_>>(),
            "cost": self.cost.map(cost_json),
        })
    }

    fn line(&self) -> String {
        if self.verified {
            let cost = self.cost.unwrap_or_default();
            format!(
                "ok    {}  {} (exit {})  {}\n",
                inert(&self.name),
                self.halt.map_or("-", HaltReason::as_str),
                self.halt.map_or(0, |h| h.class().code()),
                cost_text(&cost)
            )
        } else {
            format!("FAIL  {}  {}\n", inert(&self.name), self.why())
        }
    }

    /// The failed checks as one escaped line.
    fn why(&self) -> String {
        self.failures
            .iter()
            .map(|c| format!("{}: {}", c.name, inert(&c.detail)))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn cost_json(cost: Cost) -> Value {
    json!({
        "usd_micros_known": cost.usd_micros,
        "unknown_money_records": cost.unknown_money,
        "tokens": cost.tokens,
    })
}

fn cost_text(cost: &Cost) -> String {
    let mut text = format!("${}", budget::usd(cost.usd_micros));
    if cost.unknown_money > 0 {
        text.push_str(&format!("+? ({} unknown)", cost.unknown_money));
    }
    text.push_str(&format!("  {} tokens", cost.tokens));
    text
}

/// The summary, folded one result at a time (only the failed runs' names are kept, at most
/// [`MAX_LISTED_FAILURES`]).
#[derive(Default)]
struct Summary {
    runs: u64,
    verified: u64,
    failed: u64,
    not_runs: u64,
    failures: Vec<Value>,
    halts: BTreeMap<&'static str, u64>,
    classes: BTreeMap<i32, (ExitClass, u64)>,
    cost: Cost,
}

impl Summary {
    fn add(&mut self, r: &RunResult) {
        self.runs += 1;
        if r.kind == "not_a_run" {
            self.not_runs += 1;
        }
        if !r.verified {
            self.failed += 1;
            if self.failures.len() < MAX_LISTED_FAILURES {
                self.failures.push(json!({
                    "name": r.name,
                    "run_id": r.run_id,
                    "failed_checks": r.failures.iter().map(|c| json!({"name": c.name, "detail": c.detail})).collect::<Vec<_>>(),
                }));
            }
            return;
        }
        self.verified += 1;
        if let Some(halt) = r.halt {
            *self.halts.entry(halt.as_str()).or_default() += 1;
            let class = halt.class();
            self.classes.entry(class.code()).or_insert((class, 0)).1 += 1;
        }
        let cost = r.cost.unwrap_or_default();
        self.cost = Cost {
            usd_micros: self.cost.usd_micros.saturating_add(cost.usd_micros),
            unknown_money: self.cost.unknown_money.saturating_add(cost.unknown_money),
            tokens: self.cost.tokens.saturating_add(cost.tokens),
            wall_ms: self.cost.wall_ms.saturating_add(cost.wall_ms),
        };
    }

    fn classes_json(&self) -> Value {
        Value::Array(
            self.classes
                .iter()
                .map(|(code, (class, n))| json!({"class": class, "exit_code": code, "runs": n}))
                .collect(),
        )
    }
}

/// Verify one entry of `root` (named `raw`).
fn verify_entry(root: &SafeDir, raw: &OsString, key: &VerifyKey) -> RunResult {
    use nix::sys::stat::{fstatat, SFlag};
    let Some(name) = raw.to_str().map(str::to_string) else {
        return RunResult::not_a_run(
            raw.to_string_lossy().into_owned(),
            "the name is not UTF-8: not a run directory",
        );
    };
    let kind = fstatat(
        Some(root.fd().as_raw_fd()),
        raw.as_os_str(),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map(|st| SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()));
    match kind {
        Ok(SFlag::S_IFDIR) => {}
        Ok(SFlag::S_IFLNK) => {
            return RunResult::not_a_run(name, "a symlink: refused, not followed")
        }
        Ok(_) => return RunResult::not_a_run(name, "not a directory: not a run directory"),
        Err(e) => return RunResult::not_a_run(name, format!("cannot be read: {e}")),
    }
    let run_dir = match root.subdir(&name) {
        Ok(dir) => dir,
        Err(e) => return RunResult::not_a_run(name, e.to_string()),
    };
    if !run_dir.exists(RECEIPT_FILE) {
        return RunResult::not_a_run(
            name,
            format!("no {RECEIPT_FILE}: not a sealed run directory"),
        );
    }
    if holds_probe_receipt(&run_dir) {
        return RunResult::not_a_run(name, "it holds a probe's receipt, not a run's");
    }
    let (mut v, history) = verify_run_with_history(&run_dir, &key.key);
    // The workspace's ack log: a collection keeps a copy in the run's directory; a
    // `.loopexec/runs/` tree has it two levels up (the state directory).
    let state_root = run_dir
        .exists(crate::receipt::comprehension::DIR)
        .then(|| run_dir.path().to_path_buf());
    if let Some(check) = ack_check(&run_dir, state_root, false) {
        v.checks.push(check);
    }
    same_name(&mut v, &name);
    let verified = v.ok();
    let halt = history
        .as_ref()
        .and_then(|h| h.halt.as_ref())
        .map(|h| h.halt_reason);
    let cost = history.filter(|_| verified).map(|h| {
        let ran: Vec<&crate::receipt::history::IterationRecord> =
            h.iterations.iter().filter(|r| r.exec.is_some()).collect();
        budget::spent(&ran)
    });
    RunResult {
        name,
        kind: "run",
        run_id: v.run_id.clone(),
        halt,
        verified,
        failures: v.checks.into_iter().filter(|c| !c.ok).collect(),
        cost,
    }
}

/// A run directory is named for the run its receipt records (as `runs/<id>` is): a run copied
/// or renamed into a second directory would be counted, and its cost summed, twice.
fn same_name(v: &mut Verification, name: &str) {
    match v.run_id.as_deref() {
        Some(id) if id == name => {}
        Some(id) => v.fail_step(
            "run_directory",
            format!(
                "the directory is named {}, its receipt is run {}'s (copied or renamed)",
                inert(name),
                inert(id)
            ),
        ),
        None => {}
    }
}

/// Feed the entries of `root` to `tx`, one at a time; a read error is kept in `error`.
fn list_entries(
    root: &SafeDir,
    tx: std::sync::mpsc::SyncSender<OsString>,
    error: &Mutex<Option<String>>,
) {
    let fail = |e: nix::errno::Errno| {
        if let Ok(mut slot) = error.lock() {
            *slot = Some(format!("{}: {e}", root.path().display()));
        }
    };
    let mut dir = match nix::unistd::dup(root.fd().as_raw_fd()).and_then(nix::dir::Dir::from_fd) {
        Ok(dir) => dir,
        Err(e) => return fail(e),
    };
    for entry in dir.iter() {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return fail(e),
        };
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if tx
            .send(std::ffi::OsStr::from_bytes(name).to_os_string())
            .is_err()
        {
            return;
        }
    }
}

/// The next entry for a worker (`None` when the listing is done).
fn next_entry(rx: &Mutex<Receiver<OsString>>) -> Option<OsString> {
    rx.lock().ok().and_then(|rx| rx.recv().ok())
}

/// `verify --all DIR [--jobs N] [--pubkey FILE]` (`Command::dispatch` sends `verify` here when
/// `--all` is given).
pub fn run(args: super::verify::Args, json: bool) -> CmdResult<Outcome> {
    if args.jobs == Some(0) {
        return Err(Failure::usage("--jobs must be at least 1"));
    }
    let key = VerifyKey::choose(args.pubkey.as_deref())?;
    let Some(dir) = args.all else {
        return Err(Failure::usage("verify --all needs DIR"));
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    verify_dir(&dir, &key, jobs, json)
}

/// Stream each run's result on stdout as it finishes, return the summary.
fn verify_dir(dir: &Path, key: &VerifyKey, jobs: usize, json: bool) -> CmdResult<Outcome> {
    let root = SafeDir::open(dir).map_err(crate::error::fs_failure)?;
    let error = Mutex::new(None);
    let mut summary = Summary::default();
    let (name_tx, name_rx) = sync_channel::<OsString>(jobs * 2);
    let name_rx = Mutex::new(name_rx);
    std::thread::scope(|scope| {
        let (result_tx, result_rx) = sync_channel::<RunResult>(jobs * 2);
        let (root, error, name_rx) = (&root, &error, &name_rx);
        scope.spawn(move || list_entries(root, name_tx, error));
        for _ in 0..jobs {
            let result_tx = result_tx.clone();
            scope.spawn(move || {
                while let Some(name) = next_entry(name_rx) {
                    if result_tx.send(verify_entry(root, &name, key)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(result_tx);
        let stdout = std::io::stdout();
        for result in result_rx {
            let mut out = stdout.lock();
            let _ = if json {
                writeln!(
                    out,
                    "{}",
                    crate::inert::json_text(&json!({ LINE_KEY: result.json() }))
                        .unwrap_or_default()
                )
            } else {
                write!(out, "{}", result.line())
            };
            let _ = out.flush();
            summary.add(&result);
        }
    });
    if let Some(e) = error.into_inner().ok().flatten() {
        return Err(Failure::new(
            crate::error::FailureCode::Io,
            format!("verify --all: reading the directory: {e}"),
        ));
    }
    if summary.runs == 0 {
        return Err(Failure::invalid_input(format!(
            "verify --all {}: the directory holds no run directory: nothing verified",
            inert(&dir.to_string_lossy())
        ))
        .with_hint(
            "pass a .loopexec/runs directory or a collection `loopexec fleet collect` made",
        ));
    }
    // The listed failures in name order, whatever order the pool finished them in.
    summary
        .failures
        .sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(outcome(dir, key, jobs, &summary))
}

fn outcome(dir: &Path, key: &VerifyKey, jobs: usize, s: &Summary) -> Outcome {
    let mut human = format!(
        "runs      {}\nverified  {}\nfailed    {}\n",
        s.runs, s.verified, s.failed
    );
    for f in &s.failures {
        let name = f["name"].as_str().unwrap_or("");
        let why: Vec<String> = f["failed_checks"]
            .as_array()
            .map(|checks| {
                checks
                    .iter()
                    .map(|c| {
                        format!(
                            "{}: {}",
                            c["name"].as_str().unwrap_or(""),
                            inert(c["detail"].as_str().unwrap_or(""))
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        human.push_str(&format!("  {}  {}\n", inert(name), why.join("; ")));
    }
    if s.failed as usize > s.failures.len() {
        human.push_str(&format!(
            "  ... and {} more (listed above as they finished)\n",
            s.failed as usize - s.failures.len()
        ));
    }
    for (code, (class, n)) in &s.classes {
        let class = serde_json::to_value(class)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        human.push_str(&format!("class     {class} (exit {code}): {n}\n"));
    }
    for (reason, n) in &s.halts {
        human.push_str(&format!("halt      {reason}: {n}\n"));
    }
    human.push_str(&format!(
        "cost      {} (verified runs)\n",
        cost_text(&s.cost)
    ));
    human.push_str(if s.failed == 0 {
        "verified\n"
    } else {
        "NOT verified\n"
    });
    let mut out = Outcome::ok("verify");
    out.set("kind", "all");
    out.set(
        "all",
        json!({
            "dir": dir.to_string_lossy(),
            "jobs": jobs,
            "runs": s.runs,
            "verified": s.verified,
            "failed": s.failed,
            "not_runs": s.not_runs,
            "failures": s.failures,
            "halts": s.halts,
            "halts_by_class": s.classes_json(),
            "cost": cost_json(s.cost),
        }),
    );
    out.set("verified", s.failed == 0);
    out.set("key", key.json());
    if s.failed > 0 {
        out.status = "failed";
        out.exit = ExitClass::Integrity;
        out.errors.push(crate::error::ErrorEntry {
            code: "verify_all".into(),
            message: format!("{} of {} run(s) failed to verify", s.failed, s.runs),
            hint: None,
        });
    }
    out.human(human)
}
