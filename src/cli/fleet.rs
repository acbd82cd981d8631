//! `loopexec fleet collect WORKDIR... --out DIR`: the sealed runs of one or many workdirs
//! gathered into a collection (docs/fleet.md, "The collection layout"): one directory per run,
//! named for its run id, holding the run directory's sealed files (receipt, envelope, run key,
//! patch, logs, `artifacts/`), a copy of its workspace's comprehension ledger and ack log, and
//! the delivered branch as `branch.bundle`; `verify --all DIR` then verifies it.
//!
//! Nothing is half-written: every run is assembled in a hidden directory of DIR and renamed into
//! place whole; a run id already in DIR with another receipt (or two workdirs with one id) is
//! refused before anything is written. Runs not sealed (running, paused, a seal not finished)
//! are skipped and named. Sources are read through [`SafeDir`]: a planted link is refused.

use crate::error::{fs_failure, CmdResult, Failure};
use crate::inert::inert;
use crate::output::Outcome;
use crate::receipt::seal::{ENVELOPE_FILE, RECEIPT_FILE};
use crate::receipt::store::{StateDir, ARTIFACTS};
use crate::safefs::SafeDir;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The delivered branch of a collected run, as a `git bundle`.
pub const BUNDLE_FILE: &str = "branch.bundle";
/// Files of a run directory that are the live run's bookkeeping, not its record: not collected.
const NOT_COLLECTED: &[&str] = &["lock", "heartbeat.json", "info-exclude"];
/// The comprehension files a collected run carries (`receipt::comprehension`).
const COMPREHENSION_FILES: &[&str] = &[
    crate::receipt::comprehension::LEDGER_FILE,
    crate::receipt::comprehension::ACKS_FILE,
];

#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub command: FleetCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum FleetCommand {
    /// Gather the sealed runs of workdirs into a collection directory `verify --all` verifies.
    Collect(CollectArgs),
}

#[derive(Debug, clap::Args)]
pub struct CollectArgs {
    /// Workdirs holding .loopexec/ (each one's sealed runs are collected).
    #[arg(value_name = "WORKDIR", required = true)]
    pub workdirs: Vec<PathBuf>,
    /// The collection directory (created when missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

pub fn run(args: FleetArgs, _json: bool) -> CmdResult<Outcome> {
    match args.command {
        FleetCommand::Collect(args) => collect(args),
    }
}

/// One sealed run found in a workdir.
struct Source {
    workdir: PathBuf,
    run_id: String,
    dir: SafeDir,
    receipt: Vec<u8>,
    /// The delivered branch and commit, from the receipt's `halt`.
    delivery: Option<(String, String)>,
}

/// Why a run directory of a workdir is not collected.
struct Skipped {
    workdir: PathBuf,
    name: String,
    reason: String,
}

fn show(path: &Path) -> String {
    inert(&path.to_string_lossy()).into_owned()
}

/// The sealed runs of `workdir`, and the run directories skipped.
fn sources(workdir: &Path, found: &mut Vec<Source>, skipped: &mut Vec<Skipped>) -> CmdResult<()> {
    let workdir = super::operator::absolute_workdir(workdir)?;
    let state = StateDir::open(&workdir)?;
    let runs = state.runs()?;
    for name in runs.list().map_err(fs_failure)? {
        let skip = |reason: String| Skipped {
            workdir: workdir.clone(),
            name: name.clone(),
            reason,
        };
        let dir = match runs.subdir(&name) {
            Ok(dir) => dir,
            Err(e) => {
                skipped.push(skip(e.to_string()));
                continue;
            }
        };
        if !dir.exists(ENVELOPE_FILE) {
            skipped.push(skip(format!(
                "not sealed (no {ENVELOPE_FILE}: running, paused, or its seal not finished)"
            )));
            continue;
        }
        let receipt = match dir.read(RECEIPT_FILE, crate::receipt::chain::MAX_RECEIPT_BYTES) {
            Ok(bytes) => bytes,
            Err(e) => {
                skipped.push(skip(e.to_string()));
                continue;
            }
        };
        // The run id and the delivery as the receipt records them; a receipt that does not
        // verify is collected under its directory's name, without a bundle (`verify --all`
        // names it).
        let history = crate::receipt::chain::verify(&receipt)
            .ok()
            .and_then(|v| crate::receipt::history::History::of_lines(&v.events).ok());
        let run_id = history
            .as_ref()
            .and_then(|h| h.run_id().map(str::to_string))
            .unwrap_or_else(|| name.clone());
        if run_id != name {
            skipped.push(skip(format!(
                "its receipt is run {}'s: a run directory is named for its run",
                inert(&run_id)
            )));
            continue;
        }
        let delivery = history
            .as_ref()
            .and_then(|h| h.halt.as_ref())
            .and_then(|h| h.delivery.as_ref())
            .and_then(|d| Some((d.branch.clone()?, d.commit.clone()?)));
        found.push(Source {
            workdir: workdir.clone(),
            run_id,
            dir,
            receipt,
            delivery,
        });
    }
    Ok(())
}

/// Copy the regular file `name` of `from` into `to` (streamed, links refused).
fn copy_file(from: &SafeDir, to: &SafeDir, name: &str) -> CmdResult<u64> {
    let mut src = from.open_read(name).map_err(fs_failure)?;
    let mut dst = to.create_new(name, 0o600).map_err(fs_failure)?;
    let n =
        std::io::copy(&mut src, &mut dst).map_err(|e| Failure::io(&to.path().join(name), &e))?;
    dst.sync_all()
        .map_err(|e| Failure::io(&to.path().join(name), &e))?;
    Ok(n)
}

fn is_regular(dir: &SafeDir, name: &str) -> Option<bool> {
    use nix::sys::stat::{fstatat, SFlag};
    let st = fstatat(
        Some(dir.fd().as_raw_fd()),
        name,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .ok()?;
    let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    match kind {
        SFlag::S_IFREG => Some(true),
        SFlag::S_IFDIR => Some(false),
        _ => None,
    }
}

/// Every regular file of `from` (flat), copied into `to`; the names copied.
fn copy_flat(from: &SafeDir, to: &SafeDir, skip: &[&str]) -> CmdResult<Vec<String>> {
    let mut copied = Vec::new();
    for name in from.list().map_err(fs_failure)? {
        if skip.contains(&name.as_str()) || is_regular(from, &name) != Some(true) {
            continue;
        }
        copy_file(from, to, &name)?;
        copied.push(name);
    }
    Ok(copied)
}

/// Assemble `source` in the hidden directory `tmp` of `out`: its files, its workspace's
/// comprehension files, its bundle. What the bundle came to (`Ok(true)`, or why there is none).
fn assemble(source: &Source, out: &SafeDir, tmp: &str) -> CmdResult<Value> {
    let dest = out.subdir_or_create(tmp).map_err(fs_failure)?;
    let files = copy_flat(&source.dir, &dest, NOT_COLLECTED)?;
    let mut artifacts = 0;
    if is_regular(&source.dir, ARTIFACTS) == Some(false) {
        let from = source.dir.subdir(ARTIFACTS).map_err(fs_failure)?;
        let to = dest.subdir_or_create(ARTIFACTS).map_err(fs_failure)?;
        artifacts = copy_flat(&from, &to, &[])?.len();
        to.sync().map_err(fs_failure)?;
    }
    let state = StateDir::open(&source.workdir)?;
    let comprehension = crate::receipt::comprehension::DIR;
    let mut acks = false;
    if is_regular(state.root(), comprehension) == Some(false) {
        let from = state.root().subdir(comprehension).map_err(fs_failure)?;
        let to = dest.subdir_or_create(comprehension).map_err(fs_failure)?;
        for name in COMPREHENSION_FILES {
            if is_regular(&from, name) == Some(true) {
                copy_file(&from, &to, name)?;
                acks = true;
            }
        }
        to.sync().map_err(fs_failure)?;
    }
    let bundle = match &source.delivery {
        None => json!({"written": false, "reason": "the run delivered no branch"}),
        Some((branch, commit)) => bundle(source, branch, commit, &dest)?,
    };
    dest.sync().map_err(fs_failure)?;
    Ok(json!({
        "run_id": source.run_id,
        "workdir": source.workdir.to_string_lossy(),
        "files": files,
        "artifacts": artifacts,
        "comprehension": acks,
        "bundle": bundle,
    }))
}

/// `branch` of the source's workdir as `branch.bundle` in `dest`, when its tip is still the
/// delivered `commit` (a branch moved or deleted since is said, not bundled).
fn bundle(source: &Source, branch: &str, commit: &str, dest: &SafeDir) -> CmdResult<Value> {
    let git = crate::workspace::git::Git::new(&source.workdir);
    let refname = format!("refs/heads/{branch}");
    let tip = git
        .run(
            [
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{refname}^{{commit}}"),
            ],
            None,
        )
        .ok()
        .map(|out| String::from_utf8_lossy(&out).trim().to_string());
    match tip {
        None => {
            return Ok(
                json!({"written": false, "reason": format!("branch {branch} is not in the workdir's repository")}),
            )
        }
        Some(tip) if tip != commit => {
            return Ok(
                json!({"written": false, "reason": format!("branch {branch} is at {tip}, not the delivered {commit}")}),
            )
        }
        Some(_) => {}
    }
    let path = dest.path().join(BUNDLE_FILE);
    git.run(
        [
            std::ffi::OsStr::new("bundle"),
            "create".as_ref(),
            "--quiet".as_ref(),
            path.as_os_str(),
            refname.as_ref(),
        ],
        None,
    )
    .map_err(|e| Failure::workspace(format!("git bundle of {}: {e}", inert(branch))))?;
    Ok(json!({"written": true, "branch": branch, "commit": commit}))
}

fn collect(args: CollectArgs) -> CmdResult<Outcome> {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for workdir in &args.workdirs {
        sources(workdir, &mut found, &mut skipped)?;
    }
    // Refused before anything is written: one id from two workdirs, or an id DIR holds with
    // another receipt.
    let mut seen: BTreeMap<&str, &Source> = BTreeMap::new();
    for s in &found {
        if let Some(other) = seen.insert(&s.run_id, s) {
            if other.receipt != s.receipt {
                return Err(Failure::invalid_input(format!(
                    "run id {} is in {} and in {} with different receipts: one collection holds one run per id",
                    inert(&s.run_id),
                    show(&other.workdir),
                    show(&s.workdir)
                ))
                .with_hint("collect them into separate collections"));
            }
        }
    }
    let out = SafeDir::open_or_create(&args.out).map_err(fs_failure)?;
    let mut already = Vec::new();
    let mut todo = Vec::new();
    for (id, s) in &seen {
        if !out.exists(id) {
            todo.push(*s);
            continue;
        }
        let present = out
            .subdir(id)
            .and_then(|d| d.read(RECEIPT_FILE, crate::receipt::chain::MAX_RECEIPT_BYTES));
        match present {
            Ok(bytes) if bytes == s.receipt => already.push(id.to_string()),
            _ => {
                return Err(Failure::invalid_input(format!(
                    "{} already holds a run {} with another receipt",
                    show(&args.out),
                    inert(id)
                ))
                .with_hint("collect into another directory"))
            }
        }
    }
    let mut collected = Vec::new();
    for s in todo {
        let tmp = format!(".collect-{}-{}", std::process::id(), s.run_id);
        let record = match assemble(s, &out, &tmp) {
            Ok(record) => record,
            Err(e) => {
                let _ = std::fs::remove_dir_all(out.path().join(&tmp));
                return Err(e);
            }
        };
        nix::fcntl::renameat(
            Some(out.fd().as_raw_fd()),
            tmp.as_str(),
            Some(out.fd().as_raw_fd()),
            s.run_id.as_str(),
        )
        .map_err(|e| {
            let _ = std::fs::remove_dir_all(out.path().join(&tmp));
            Failure::io(&out.path().join(&s.run_id), &std::io::Error::from(e))
        })?;
        out.sync().map_err(fs_failure)?;
        collected.push(record);
    }
    let mut human = format!("collection {}\n", show(&args.out));
    for c in &collected {
        let bundle = if c["bundle"]["written"] == true {
            format!(
                "bundle {}",
                inert(c["bundle"]["branch"].as_str().unwrap_or(""))
            )
        } else {
            format!(
                "no bundle: {}",
                inert(c["bundle"]["reason"].as_str().unwrap_or(""))
            )
        };
        human.push_str(&format!(
            "collected  {}  {bundle}\n",
            inert(c["run_id"].as_str().unwrap_or(""))
        ));
    }
    for id in &already {
        human.push_str(&format!("already    {}\n", inert(id)));
    }
    for s in &skipped {
        human.push_str(&format!(
            "skipped    {} ({}): {}\n",
            inert(&s.name),
            show(&s.workdir),
            inert(&s.reason)
        ));
    }
    human.push_str(&format!(
        "{} collected, {} already there, {} skipped; verify with `loopexec verify --all {}`\n",
        collected.len(),
        already.len(),
        skipped.len(),
        show(&args.out)
    ));
    let skipped_json: Vec<Value> = skipped
        .iter()
        .map(
            |s| json!({"workdir": s.workdir.to_string_lossy(), "name": s.name, "reason": s.reason}),
        )
        .collect();
    Ok(Outcome::ok("fleet")
        .field(
            "collect",
            json!({
                "out": args.out.to_string_lossy(),
                "collected": collected,
                "already": already,
                "skipped": skipped_json,
            }),
        )
        .human(human))
}
