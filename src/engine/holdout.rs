//! Held-out checks (`--holdout-check CMD --holdout-dir DIR`, `holdout_check` / `holdout_dir` in
//! loop.toml; docs/guards.md, "Held-out checks"): a second check the agent never sees, run on the
//! candidate tree of a green that every guard let through (and the judge approved), before that
//! step is accepted. It catches work fitted to the visible tests' inputs: a step that passes the
//! visible check but fails tests on inputs the agent never saw halts `objective_unverified`.
//!
//! This module owns the held-out configuration and its validation (the directory must exist, be a
//! directory, not a symbolic link, and lie outside the workdir and everything the agent zone and
//! the judge zone bind), the digest of the directory's contents (the receipt records it, never the
//! contents), how the held-out command is made from the check's (its command line, the directory
//! bound read-only into that exec zone only, named in [`DIR_ENV`] for that command only), the stage
//! that runs it and its record, and the decision on that record. The held-out check goes through
//! the one check runner with every guard the visible check's evidence gets (the declared reports
//! and their agreement with the exit code, the check-writes guard, t0's protected paths read-only);
//! what it printed stays in the run directory, which no zone sees, and the feedback file is built
//! from the visible check alone.

use super::detached::Taken;
use super::lifecycle::ActiveRun;
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::receipt::events::GuardRecord;
use crate::receipt::events::{CheckResult, Event, HoldoutRecord};
use crate::rules::decide::Step;
use crate::rules::verdict::Verdict;
use crate::workspace::fsat;
use crate::workspace::Snapshot;
use crate::zones::{Zone, ZoneCommand};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The variable naming the held-out directory, in the held-out command's environment only.
pub const DIR_ENV: &str = "LOOPEXEC_HOLDOUT_DIR";
/// The name of the `guard` event recorded when the held-out directory can no longer be read.
pub const GUARD: &str = "holdout";
/// The most entries (files, directories, links) the held-out directory may hold.
pub const MAX_ENTRIES: u64 = 100_000;
/// The most bytes its regular files may hold together.
pub const MAX_BYTES: u64 = 1 << 30;

/// The held-out settings as given (flags over loop.toml), before validation. `dir` is absolute.
#[derive(Debug, Clone, Default)]
pub struct HoldoutInput {
    pub command: Option<String>,
    pub dir: Option<PathBuf>,
}

impl HoldoutInput {
    /// `self` (flags) over `file` (loop.toml): a flag that is given wins.
    pub fn over(self, file: HoldoutInput) -> HoldoutInput {
        HoldoutInput {
            command: self.command.or(file.command),
            dir: self.dir.or(file.dir),
        }
    }
}

/// What the held-out directory held: a SHA-256 over every entry's path, kind, mode bits that
/// matter (executable), size and content digest (a link's target), in path order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirDigest {
    pub sha256: String,
    pub entries: u64,
    pub bytes: u64,
}

/// The held-out check a run pinned (`run_start`'s `config.holdout`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldoutPins {
    /// Run as `/bin/sh -c` in an exec zone on the candidate tree, like the check.
    pub command: String,
    /// The canonical absolute path of the held-out directory (bound read-only at that path).
    pub dir: String,
    /// Its contents at the start of the run.
    pub digest: DirDigest,
}

impl HoldoutPins {
    /// The check's zone command (`check`) made the held-out one: its command line, the directory
    /// bound read-only, its path in [`DIR_ENV`].
    pub fn apply(&self, cmd: &mut ZoneCommand) {
        cmd.command_line = self.command.clone();
        cmd.read_only.push(PathBuf::from(&self.dir));
        cmd.inject.push((
            DIR_ENV.to_string(),
            crate::secret::Secret::new(self.dir.clone()),
        ));
    }
}

fn refused(dir: &Path, why: impl std::fmt::Display) -> Failure {
    Failure::invalid_input(format!("held-out directory {}: {why}", dir.display()))
        .with_hint("--holdout-dir (holdout_dir in loop.toml) names a directory outside the workdir that no agent zone binds")
}

/// Validate the held-out settings of a run: both or neither of the command and the directory, a
/// detached workspace (the only one with a candidate tree the agent cannot change under the check),
/// and a directory the agent can never see (`agent_grants`: every path the agent and judge zones'
/// policies bind). Pins the directory's digest.
pub fn resolve(
    input: HoldoutInput,
    workdir: &Path,
    detached: bool,
    agent_grants: &[PathBuf],
) -> Result<Option<HoldoutPins>, Failure> {
    let (command, dir) = match (input.command, input.dir) {
        (None, None) => return Ok(None),
        (None, Some(_)) => {
            return Err(Failure::usage("--holdout-dir needs --holdout-check: the directory is only bound into the held-out check's zone")
                .with_hint("give --holdout-check '<command>' (holdout_check in loop.toml), or leave the directory out"))
        }
        (Some(_), None) => {
            return Err(Failure::usage("--holdout-check needs --holdout-dir DIR: the held-out tests the agent never sees")
                .with_hint("give --holdout-dir DIR (holdout_dir in loop.toml), a directory outside the workdir"))
        }
        (Some(command), Some(dir)) => (command, dir),
    };
    if command.trim().is_empty() {
        return Err(Failure::usage("--holdout-check: the command is empty"));
    }
    if !detached {
        return Err(Failure::usage(
            "a held-out check needs a detached workspace (native isolation in a git repository)",
        )
        .with_hint(
            "in place, or without isolation, the agent could read the held-out directory itself",
        ));
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => refused(&dir, "does not exist"),
        _ => refused(&dir, e),
    })?;
    if meta.file_type().is_symlink() {
        return Err(refused(
            &dir,
            "is a symbolic link (name the directory itself)",
        ));
    }
    if !meta.is_dir() {
        return Err(refused(&dir, "is not a directory"));
    }
    let canonical = std::fs::canonicalize(&dir).map_err(|e| refused(&dir, e))?;
    let workdir = std::fs::canonicalize(workdir).map_err(|e| Failure::io(workdir, &e))?;
    let overlaps = |a: &Path, b: &Path| a.starts_with(b) || b.starts_with(a);
    if canonical.starts_with(&workdir) {
        return Err(refused(
            &dir,
            format!(
                "lies inside the workdir {} (the agent's tree and the state dir)",
                workdir.display()
            ),
        ));
    }
    if workdir.starts_with(&canonical) {
        return Err(refused(
            &dir,
            format!("holds the workdir {}", workdir.display()),
        ));
    }
    for grant in agent_grants {
        // A grant that does not exist binds nothing.
        let Ok(grant) = std::fs::canonicalize(grant) else {
            continue;
        };
        if overlaps(&canonical, &grant) {
            return Err(refused(
                &dir,
                format!(
                    "overlaps {}, which the agent's zone (or the judge's) binds",
                    grant.display()
                ),
            ));
        }
    }
    let digest = digest(&canonical).map_err(|why| refused(&dir, why))?;
    Ok(Some(HoldoutPins {
        command,
        dir: canonical.to_string_lossy().into_owned(),
        digest,
    }))
}

/// One entry's line of the digest: kind, path, then what identifies its content.
fn entry_line(hasher: &mut Sha256, kind: &[u8], path: &[u8], rest: &[u8]) {
    for part in [kind, path, rest] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
}

/// The digest of the directory `root`'s contents, read without following any link (a link is
/// recorded by its target), never opening anything but directories and regular files, depth first
/// with an explicit stack and bounded descriptors ([`fsat::DirStack`]), within [`MAX_ENTRIES`] and
/// [`MAX_BYTES`].
pub fn digest(root: &Path) -> Result<DirDigest, String> {
    let fd = fsat::open_dir_path(root).map_err(|e| e.to_string())?;
    let mut stack = fsat::DirStack::new(fd);
    let mut hasher = Sha256::new();
    let (mut entries, mut bytes) = (0u64, 0u64);
    let list = |fd: std::os::fd::RawFd, left: u64| -> Result<Vec<Vec<u8>>, String> {
        match fsat::list_at_most(fd, usize::try_from(left).unwrap_or(usize::MAX))
            .map_err(|e| e.to_string())?
        {
            Some(mut names) => {
                names.reverse();
                Ok(names)
            }
            None => Err(format!("holds more than {MAX_ENTRIES} entries")),
        }
    };
    let top = stack.top().map_err(|e| e.to_string())?;
    let mut pending = vec![list(top, MAX_ENTRIES)?];
    while let Some(names) = pending.last_mut() {
        let Some(name) = names.pop() else {
            pending.pop();
            stack.pop();
            continue;
        };
        entries += 1;
        if entries > MAX_ENTRIES {
            return Err(format!("holds more than {MAX_ENTRIES} entries"));
        }
        let mut path = stack.path();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&name);
        let shown = || crate::inert::inert(&String::from_utf8_lossy(&path)).into_owned();
        let dir = stack.top().map_err(|e| format!("{}: {e}", shown()))?;
        let st = fsat::lstat(dir, &name).map_err(|e| format!("{}: {e}", shown()))?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                entry_line(&mut hasher, b"dir", &path, b"");
                stack
                    .push(&name, None)
                    .map_err(|e| format!("{}: {e}", shown()))?;
                let fd = stack.top().map_err(|e| format!("{}: {e}", shown()))?;
                pending.push(list(fd, MAX_ENTRIES - entries)?);
            }
            libc::S_IFREG => {
                bytes = bytes.saturating_add(st.st_size as u64);
                if bytes > MAX_BYTES {
                    return Err(format!("holds more than {MAX_BYTES} bytes of files"));
                }
                let file = fsat::open_file(dir, &name).map_err(|e| format!("{}: {e}", shown()))?;
                let content = file_sha256(file, st.st_size as u64)
                    .map_err(|e| format!("{}: {e}", shown()))?;
                let kind: &[u8] = if st.st_mode & 0o111 != 0 {
                    b"exe"
                } else {
                    b"file"
                };
                entry_line(&mut hasher, kind, &path, &content);
            }
            libc::S_IFLNK => {
                let target =
                    fsat::read_link(dir, &name).map_err(|e| format!("{}: {e}", shown()))?;
                entry_line(&mut hasher, b"link", &path, &target);
            }
            other => entry_line(&mut hasher, b"special", &path, &other.to_le_bytes()),
        }
    }
    Ok(DirDigest {
        sha256: hex::encode(hasher.finalize()),
        entries,
        bytes,
    })
}

/// The SHA-256 of at most `size` bytes of `file` (a file that grew meanwhile is cut there).
fn file_sha256(file: std::fs::File, size: u64) -> std::io::Result<[u8; 32]> {
    let mut hasher = Sha256::new();
    let mut reader = file.take(size);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}

/// The verdict a held-out record gives: `green` only for a zero exit whose evidence agrees.
pub fn verdict_name(check: &CheckResult) -> &'static str {
    match Verdict::of_check(check) {
        Verdict::Pass => "green",
        Verdict::Fail => "red",
        Verdict::Disagrees => "disagree",
        Verdict::CouldNotRun => "could_not_run",
    }
}

/// What one held-out run gave the stage that asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HeldOutRun {
    /// A zero exit whose evidence agrees, on the pinned directory, with no objection.
    pub green: bool,
    /// The halt a `guard` event recorded with it (a write to its tree, a held-out test of t0 lost
    /// or newly skipped, a directory that can no longer be read).
    pub objection: Option<(HaltReason, String)>,
    /// The held-out command could not run (126/127, killed, timed out, did not start).
    pub could_not_run: bool,
}

impl ActiveRun<'_> {
    /// The held-out check on t0, once per run before the first agent call (not with
    /// `--no-baseline`; never on resume:
    /// the workspace then holds the agent's work): what the held-out set guard compares against
    /// (its `holdout_check` of iteration 0). A red t0 is expected; it halts the run only when the
    /// held-out check cannot run, wrote to t0 or its directory cannot be read.
    pub(super) fn holdout_baseline(&mut self, zone: &mut dyn Zone) -> CmdResult<Option<Step>> {
        if self.cfg.holdout.is_none()
            || !self.cfg.baseline
            || self.history.last_started > 0
            || self.history.holdout_baseline.is_some()
        {
            return Ok(None);
        }
        let snapshot = match self.workspace.as_mut().map(|ws| ws.snapshot()) {
            None => None,
            Some(Taken::Snapshot { snapshot, .. }) => Some(snapshot),
            Some(Taken::Refused(detail)) => {
                return Ok(Some(Step::Halt(HaltReason::WorkspaceInvalid, detail)))
            }
            Some(Taken::Interrupted(signal)) => return Ok(Some(Step::Interrupted(signal))),
        };
        let ran = match self.holdout_check(zone, 0, snapshot.as_ref())? {
            Ok(ran) => ran,
            Err(step) => return Ok(Some(step)),
        };
        if let Some((reason, detail)) = ran.objection {
            return Ok(Some(Step::Halt(
                reason,
                format!("{detail} (before any agent call)"),
            )));
        }
        if ran.could_not_run {
            let detail = "the held-out check could not run on t0 (exit 126/127, killed, timed out or did not start): it could not verify any green";
            return Ok(Some(Step::Halt(
                HaltReason::ExecutionFailure,
                detail.to_string(),
            )));
        }
        Ok(None)
    }

    /// The held-out check of iteration `n` (0: t0) on `candidate`: the held-out command through
    /// the one check runner, its `holdout_check` appended, and a `guard` event for a write to
    /// its tree, for a held-out test of t0 no longer collected or newly skipped (iteration > 0,
    /// against its t0 run when that recorded its sets), or for a directory that can no longer be
    /// read. `Ok(Err(step))`: its layers or its zone could not be set up, or the operator
    /// interrupted it (nothing recorded: a resumed run runs it again).
    pub(super) fn holdout_check(
        &mut self,
        zone: &mut dyn Zone,
        n: u64,
        candidate: Option<&Snapshot>,
    ) -> CmdResult<Result<HeldOutRun, Step>> {
        let Some(pins) = self.cfg.holdout.clone() else {
            return Ok(Ok(HeldOutRun {
                green: true,
                objection: None,
                could_not_run: false,
            }));
        };
        if let Some(sig) = crate::interrupt::pending() {
            return Ok(Err(Step::Interrupted(sig)));
        }
        let now = match digest(Path::new(&pins.dir)) {
            Ok(now) => now,
            Err(why) => {
                // Gone, replaced by a link, or past its bounds since the run started: the green
                // cannot be verified, and the run still ends sealed with that reason.
                let detail = format!("the held-out directory {} can no longer be read ({why}): nothing can be verified", crate::inert::inert(&pins.dir));
                return self.objection(n, HaltReason::ObjectiveUnverified, detail, vec![]);
            }
        };
        let outcome =
            match self.run_check(zone, n, candidate, super::iteration::CheckRun::Holdout)? {
                Ok(outcome) => outcome,
                Err(step) => return Ok(Err(step)),
            };
        if let crate::ending::Ending::Interrupted { signal } = outcome.ending() {
            return Ok(Err(Step::Interrupted(*signal)));
        }
        let check = outcome.record(n);
        let verdict = verdict_name(&check);
        let dir_changed = now.sha256 != pins.digest.sha256;
        let lost = match (
            n,
            verdict,
            self.history
                .holdout_baseline
                .as_ref()
                .and_then(|b| sets_of(&b.check)),
        ) {
            (1.., "green", Some(t0)) => {
                super::baseline::set_violation_of("the held-out check", n, &check, &t0)
            }
            _ => None,
        };
        let record = HoldoutRecord {
            dir: pins.dir.clone(),
            dir_sha256: now.sha256,
            dir_entries: now.entries,
            dir_changed,
            verdict: verdict.to_string(),
            check,
        };
        // The objection's guard goes first: a supervisor killed between the two appends leaves
        // a receipt that still halts, never a green record without its objection.
        if let Some(finding) = outcome.tree_writes.or(lost) {
            let objection = Some((finding.halt_reason, finding.detail.clone()));
            self.append(Event::Guard(finding))?;
            self.append(Event::HoldoutCheck(record))?;
            return Ok(Ok(HeldOutRun {
                green: false,
                objection,
                could_not_run: false,
            }));
        }
        self.append(Event::HoldoutCheck(record))?;
        Ok(Ok(HeldOutRun {
            green: verdict == "green" && !dir_changed,
            objection: None,
            could_not_run: verdict == "could_not_run",
        }))
    }

    fn objection(
        &mut self,
        n: u64,
        reason: HaltReason,
        detail: String,
        findings: Vec<crate::receipt::events::FindingRecord>,
    ) -> CmdResult<Result<HeldOutRun, Step>> {
        let record = GuardRecord {
            iteration: n,
            guard: GUARD.into(),
            stage: "after_check".into(),
            halt_reason: reason,
            detail: detail.clone(),
            findings,
        };
        self.append(Event::Guard(record))?;
        Ok(Ok(HeldOutRun {
            green: false,
            objection: Some((reason, detail)),
            could_not_run: false,
        }))
    }
}

/// The collected and skipped sets a held-out run recorded whole (none when it named no test, or
/// when they were over the receipt's inline bound and moved to an artifact).
fn sets_of(check: &CheckResult) -> Option<super::check::TestSets> {
    let (collected, skipped) = (check.collected_set.as_ref()?, check.skipped_set.as_ref()?);
    // The lists hold an id once per run of it: read back with its repeats, as `Baseline::of_record`
    // does, so a lost repeat of a held-out test is a lost test.
    let (collected, collected_repeats) = super::check::TestSets::unlisted(collected);
    let (skipped, skipped_repeats) = super::check::TestSets::unlisted(skipped);
    Some(super::check::TestSets {
        collected,
        skipped,
        collected_repeats,
        skipped_repeats,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_out_run_that_lost_one_entry_of_a_repeated_test_lost_a_test() {
        let Event::CheckResult(mut t0) = crate::receipt::events::sample::check_result(0, 0) else {
            unreachable!()
        };
        let ids = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let doc = "doc/c::src/lib.rs - f";
        (t0.collected_set, t0.skipped_set) = (ids(&["a", doc, doc]), ids(&[doc, doc]));
        let sets = sets_of(&t0).unwrap();
        assert_eq!(
            (
                sets.collected_repeats.get(doc),
                sets.skipped_repeats.get(doc)
            ),
            (Some(&2), Some(&2))
        );
        let mut now = t0.clone();
        (now.collected_set, now.skipped_set) = (ids(&["a", doc]), ids(&[doc]));
        let found =
            super::super::baseline::set_violation_of("the held-out check", 1, &now, &sets).unwrap();
        assert_eq!(found.detail, "the held-out check exited 0 at iteration 1 but against the t0 baseline 1 test(s) of t0's 3 collected are no longer collected");
    }

    fn input(command: Option<&str>, dir: Option<&Path>) -> HoldoutInput {
        HoldoutInput {
            command: command.map(str::to_string),
            dir: dir.map(Path::to_path_buf),
        }
    }

    #[test]
    fn neither_command_nor_directory_is_no_held_out_check() {
        let work = tempfile::tempdir().unwrap();
        assert_eq!(
            resolve(input(None, None), work.path(), true, &[]).unwrap(),
            None
        );
    }

    #[test]
    fn a_directory_without_a_command_and_a_command_without_a_directory_are_refused() {
        let (work, held) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let e = resolve(input(None, Some(held.path())), work.path(), true, &[]).unwrap_err();
        assert_eq!((e.class().code(), e.message.as_str()), (20, "--holdout-dir needs --holdout-check: the directory is only bound into the held-out check's zone"));
        let e = resolve(input(Some("pytest"), None), work.path(), true, &[]).unwrap_err();
        assert_eq!(
            (e.class().code(), e.message.as_str()),
            (
                20,
                "--holdout-check needs --holdout-dir DIR: the held-out tests the agent never sees"
            )
        );
    }

    #[test]
    fn a_missing_directory_a_file_a_link_and_a_directory_inside_the_workdir_are_refused() {
        let (work, outside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let missing = outside.path().join("missing");
        let file = outside.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let link = outside.path().join("link");
        let real = outside.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let inside = work.path().join("hidden");
        std::fs::create_dir(&inside).unwrap();
        for (dir, why) in [
            (&missing, "does not exist"),
            (&file, "is not a directory"),
            (&link, "is a symbolic link (name the directory itself)"),
        ] {
            let e = resolve(input(Some("t"), Some(dir)), work.path(), true, &[]).unwrap_err();
            assert_eq!(e.class().code(), 20);
            assert_eq!(
                e.message,
                format!("held-out directory {}: {why}", dir.display())
            );
        }
        let e = resolve(input(Some("t"), Some(&inside)), work.path(), true, &[]).unwrap_err();
        assert!(
            e.message.contains("lies inside the workdir"),
            "{}",
            e.message
        );
        let e = resolve(input(Some("t"), Some(outside.path())), &real, true, &[]).unwrap_err();
        assert!(e.message.contains("holds the workdir"), "{}", e.message);
    }

    #[test]
    fn a_directory_the_agent_zone_binds_is_refused() {
        let (work, outside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let held = outside.path().join("tests");
        std::fs::create_dir(&held).unwrap();
        let e = resolve(
            input(Some("t"), Some(&held)),
            work.path(),
            true,
            &[outside.path().to_path_buf()],
        )
        .unwrap_err();
        assert!(
            e.message
                .contains("which the agent's zone (or the judge's) binds"),
            "{}",
            e.message
        );
    }

    #[test]
    fn in_place_a_held_out_check_is_refused() {
        let (work, held) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let e = resolve(input(Some("t"), Some(held.path())), work.path(), false, &[]).unwrap_err();
        assert_eq!(e.class().code(), 20);
        assert!(
            e.message.contains("needs a detached workspace"),
            "{}",
            e.message
        );
    }

    #[test]
    fn the_digest_changes_with_a_name_a_byte_or_a_mode_and_never_follows_a_link() {
        let held = tempfile::tempdir().unwrap();
        let p = held.path();
        std::fs::create_dir_all(p.join("a/b")).unwrap();
        std::fs::write(p.join("a/b/test_x.py"), "assert f(7) == 49\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", p.join("a/out")).unwrap();
        let first = digest(p).unwrap();
        assert_eq!((first.entries, first.bytes), (4, 18));
        assert_eq!(
            digest(p).unwrap(),
            first,
            "the same contents give the same digest"
        );
        std::fs::write(p.join("a/b/test_x.py"), "assert f(7) == 48\n").unwrap();
        let byte = digest(p).unwrap();
        assert_ne!(byte.sha256, first.sha256);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            p.join("a/b/test_x.py"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        assert_ne!(digest(p).unwrap().sha256, byte.sha256);
        std::fs::rename(p.join("a/b/test_x.py"), p.join("a/b/test_y.py")).unwrap();
        assert_ne!(digest(p).unwrap().sha256, byte.sha256);
    }

    #[test]
    fn a_deep_tree_is_digested_without_recursion_or_a_descriptor_per_level() {
        let held = tempfile::tempdir().unwrap();
        let mut at = held.path().to_path_buf();
        for _ in 0..300 {
            at.push("d");
        }
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("leaf"), "x").unwrap();
        let d = digest(held.path()).unwrap();
        assert_eq!((d.entries, d.bytes), (301, 1));
    }

    #[test]
    fn the_held_out_verdict_is_green_for_a_zero_exit_red_for_a_failing_one_and_could_not_run_for_127(
    ) {
        let Event::CheckResult(mut check) = crate::receipt::events::sample::check_result(2, 0)
        else {
            unreachable!()
        };
        check.evidence = None;
        let named = |code: i32| {
            let mut c = check.clone();
            (c.ending, c.check_exit) = (crate::ending::Ending::Exited { code }, Some(code));
            verdict_name(&c)
        };
        assert_eq!(
            (named(0), named(1), named(127)),
            ("green", "red", "could_not_run")
        );
    }
}
