//! The transitions loopexec writes into `.small/`: start a task, checkpoint it, the handoff and
//! the sticky replayId. Each one is a transaction: the new contents of every file it changes are
//! built and the resulting workspace is validated in memory before anything touches the disk; then
//! the files are replaced one by one with `SafeDir::write_atomic` (a temporary beside the file,
//! fsync, rename, fsync of `.small/`), and when one replace fails the files already replaced get
//! their old bytes back (or are removed, when they did not exist). An error leaves `.small/`
//! byte-identical.
//!
//! Crash window: a crash while one file is being replaced can leave its temporary
//! (`.<file>.tmp-<pid>`) in `.small/`, which S4 forbids; `recover` removes such leftovers (and
//! nothing else) and the loop calls it when it resumes. A crash between two replaces leaves the
//! files written so far: the order (workspace.small.yml, then progress, then plan) keeps every
//! such prefix valid: the sticky replayId first, then the progress entry, then the plan status it
//! justifies (a completed task with no progress entry would break S1); `reconcile` then sets the
//! plan status an interrupted checkpoint did not get to.

use super::yaml::{self, Node};
use super::{
    load, open_v1, rules, Evidence, File, Outcome, SmallError, Status, Timestamp, Workspace, FILES,
    HANDOFF, PLAN, PROGRESS, SMALL_VERSION, WORKSPACE,
};
use crate::safefs::{SafeDir, SafeFsError};

/// Whether `name` is a temporary `SafeDir::write_atomic` leaves in `.small/` when it is
/// interrupted: `.<one of the SMALL files>.tmp-<pid>`.
pub(crate) fn is_leftover(name: &str) -> bool {
    FILES.iter().any(|f| {
        name.strip_prefix('.')
            .and_then(|rest| rest.strip_prefix(f))
            .and_then(|rest| rest.strip_prefix(".tmp-"))
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Remove the temporaries an interrupted transition left in `.small/` (regular files named like
/// them, nothing else); returns their names. Call it before `load` when resuming.
pub fn recover(workdir: &SafeDir) -> Result<Vec<String>, SmallError> {
    use std::os::fd::AsRawFd;
    let small = open_v1(workdir)?;
    let mut removed = Vec::new();
    for name in small.list()? {
        if !is_leftover(&name) {
            continue;
        }
        let st = nix::sys::stat::fstatat(
            Some(small.fd().as_raw_fd()),
            name.as_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        );
        let regular = st.is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG);
        if !regular {
            continue;
        }
        nix::unistd::unlinkat(
            Some(small.fd().as_raw_fd()),
            name.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
        .map_err(|e| {
            SmallError::Fs(SafeFsError::Io {
                path: small.path().join(&name),
                source: std::io::Error::from(e),
            })
        })?;
        removed.push(name);
    }
    if !removed.is_empty() {
        small.sync()?;
    }
    Ok(removed)
}

/// Finish checkpoints a crash interrupted between their two replaces: a plan task still
/// in_progress whose last progress entry is completed or blocked gets that status (the entry is
/// the record; the plan status is what it justifies). Returns the ids set. Call it on resume,
/// after `recover`, so that a checkpointed task is not run again. A task a person reset to
/// pending is left alone.
pub fn reconcile(workdir: &SafeDir) -> Result<Vec<String>, SmallError> {
    let ws = load(workdir)?;
    let mut plan = match ws.root(PLAN) {
        Some(p) => p.clone(),
        None => return Ok(Vec::new()),
    };
    let mut fixed = Vec::new();
    for (index, task) in ws.tasks().iter().enumerate() {
        if task.status != Status::InProgress {
            continue;
        }
        let last = entries(&ws)
            .iter()
            .rev()
            .find(|e| e.get("task_id").and_then(Node::as_str) == Some(task.id.as_str()))
            .and_then(|e| e.get("status").and_then(Node::as_str))
            .and_then(Status::parse);
        let Some(status @ (Status::Completed | Status::Blocked)) = last else {
            continue;
        };
        if let Some(yaml::Kind::Seq(tasks)) = plan.get_mut("tasks").map(|t| &mut t.kind) {
            if let Some(node) = tasks.get_mut(index) {
                node.set("status", Node::string(status.as_str()));
                fixed.push(task.id.clone());
            }
        }
    }
    if !fixed.is_empty() {
        let change = (PLAN, file(PLAN, &plan)?);
        commit(workdir, &ws, vec![change])?;
    }
    Ok(fixed)
}

/// `now` in progress-entry form: UTC, nine fractional digits.
pub fn format_timestamp(nanos: i128) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let format = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:9]Z"
    );
    at.format(format).unwrap_or_default()
}

/// The timestamp of a new entry: `now`, or the last entry's plus 1ns when the clock has not moved
/// past it.
fn entry_time(ws: &Workspace, now: Timestamp) -> String {
    let now = now.to_offset(time::UtcOffset::UTC).unix_timestamp_nanos();
    let last = entries(ws)
        .iter()
        .filter_map(|e| {
            e.get("timestamp")
                .and_then(Node::as_str)
                .and_then(rules::timestamp_nanos)
        })
        .max();
    format_timestamp(match last {
        Some(last) if last >= now => last + 1,
        _ => now,
    })
}

fn entries(ws: &Workspace) -> &[Node] {
    ws.root(PROGRESS)
        .and_then(|p| p.get("entries"))
        .and_then(Node::items)
        .unwrap_or_default()
}

/// A changed file: its tree is emitted, and parsed back so that what is validated is exactly
/// what will be written.
fn file(name: &'static str, root: &Node) -> Result<File, SmallError> {
    let raw = yaml::emit(root).into_bytes();
    let root = yaml::parse(name, &raw)?;
    Ok(File { raw, root })
}

/// A file to replace, with its new contents.
type Change = (&'static str, File);

/// The workspace with the sticky replayId set (workspace.small.yml created if absent), and the
/// change, if one was needed.
fn with_replay_id(ws: &Workspace) -> Result<(Workspace, Option<Change>), SmallError> {
    if super::replay::sticky(ws).is_some() {
        return Ok((ws.clone(), None));
    }
    let id = super::replay::compute(ws);
    let mut root = match ws.root(WORKSPACE) {
        Some(root) => root.clone(),
        None => Node::map(vec![
            ("small_version", Node::string(SMALL_VERSION)),
            ("owner", Node::string("agent")),
            ("kind", Node::string("repo-root")),
            (
                "created_at",
                Node::string(&format_timestamp(
                    time::OffsetDateTime::now_utc().unix_timestamp_nanos(),
                )),
            ),
        ]),
    };
    let mut run = root
        .get("run")
        .cloned()
        .unwrap_or_else(|| Node::map(vec![]));
    run.set("replay_id", Node::string(&id));
    root.set("run", run);
    let f = file(WORKSPACE, &root)?;
    Ok((ws.with(WORKSPACE, f.clone()), Some((WORKSPACE, f))))
}

fn refuse_unknown_task(ws: &Workspace, task_id: &str) -> Result<usize, SmallError> {
    ws.tasks()
        .iter()
        .position(|t| t.id == task_id)
        .ok_or_else(|| SmallError::Refused {
            file: PLAN.into(),
            key: "tasks".into(),
            message: format!("no task {task_id:?} in the plan"),
        })
}

/// Append `entry` to progress and set the plan task's status, with the sticky replayId.
fn record(
    workdir: &SafeDir,
    task_id: &str,
    status: Status,
    entry: impl FnOnce(String, String) -> Node,
    now: Timestamp,
) -> Result<(), SmallError> {
    let ws = load(workdir)?;
    let index = refuse_unknown_task(&ws, task_id)?;
    let (ws, sticky) = with_replay_id(&ws)?;
    let mut changes: Vec<Change> = sticky.into_iter().collect();

    let mut progress = ws
        .root(PROGRESS)
        .cloned()
        .ok_or_else(|| missing(PROGRESS))?;
    let mut list: Vec<Node> = entries(&ws).to_vec();
    list.push(entry(entry_time(&ws, now), ws.replay_id()));
    progress.set("entries", Node::seq(list));
    changes.push((PROGRESS, file(PROGRESS, &progress)?));

    let mut plan = ws.root(PLAN).cloned().ok_or_else(|| missing(PLAN))?;
    if let Some(yaml::Kind::Seq(tasks)) = plan.get_mut("tasks").map(|t| &mut t.kind) {
        if let Some(task) = tasks.get_mut(index) {
            task.set("status", Node::string(status.as_str()));
        }
    }
    changes.push((PLAN, file(PLAN, &plan)?));
    commit(workdir, &ws, changes)
}

fn missing(name: &str) -> SmallError {
    SmallError::Refused {
        file: name.into(),
        key: String::new(),
        message: "required file is missing".into(),
    }
}

/// Validate the workspace with `changes` applied, in memory; then replace the files in order,
/// rolling back on a failure.
fn commit(workdir: &SafeDir, base: &Workspace, changes: Vec<Change>) -> Result<(), SmallError> {
    let mut next = base.clone();
    for (name, f) in &changes {
        next = next.with(name, f.clone());
    }
    let violations = next.violations();
    if !violations.is_empty() {
        return Err(SmallError::Invalid { violations });
    }
    let small = open_v1(workdir)?;
    let before: Vec<(&'static str, Option<Vec<u8>>)> = changes
        .iter()
        .map(|(name, _)| {
            let old = load_raw(&small, name)?;
            Ok((*name, old))
        })
        .collect::<Result<_, SmallError>>()?;
    let writes: Vec<(&'static str, Vec<u8>)> =
        changes.into_iter().map(|(n, f)| (n, f.raw)).collect();
    replace_all(&small, &writes, &before)
}

fn load_raw(small: &SafeDir, name: &str) -> Result<Option<Vec<u8>>, SmallError> {
    match small.read(name, super::MAX_FILE_BYTES) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(SmallError::Fs(e)),
    }
}

/// Replace each file of `writes` in order; on a failure restore the ones already replaced to
/// `before` (their old bytes, or no file).
pub(crate) fn replace_all(
    small: &SafeDir,
    writes: &[(&'static str, Vec<u8>)],
    before: &[(&'static str, Option<Vec<u8>>)],
) -> Result<(), SmallError> {
    for (k, (name, bytes)) in writes.iter().enumerate() {
        if let Err(failed) = small.write_atomic(name, bytes) {
            for (done, _) in writes[..k].iter().rev() {
                let old = before
                    .iter()
                    .find(|(n, _)| n == done)
                    .and_then(|(_, b)| b.as_ref());
                let undo = match old {
                    Some(bytes) => small.write_atomic(done, bytes),
                    None => unlink(small, done),
                };
                if let Err(rollback) = undo {
                    return Err(SmallError::RollbackFailed {
                        failed,
                        file: done.to_string(),
                        rollback,
                    });
                }
            }
            return Err(SmallError::Fs(failed));
        }
    }
    Ok(())
}

fn unlink(small: &SafeDir, name: &str) -> Result<(), SafeFsError> {
    use std::os::fd::AsRawFd;
    nix::unistd::unlinkat(
        Some(small.fd().as_raw_fd()),
        name,
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    )
    .map_err(|e| SafeFsError::Io {
        path: small.path().join(name),
        source: std::io::Error::from(e),
    })?;
    small.sync()
}

/// Start `task_id`: append `{task_id, status: in_progress, timestamp, evidence, replayId}` and set
/// the plan task in_progress.
pub fn start_task(
    workdir: &SafeDir,
    task_id: &str,
    evidence: &str,
    now: Timestamp,
) -> Result<(), SmallError> {
    let evidence = if evidence.trim().is_empty() {
        format!("loopexec started task {task_id}")
    } else {
        evidence.to_string()
    };
    record(
        workdir,
        task_id,
        Status::InProgress,
        |timestamp, replay| {
            Node::map(vec![
                ("task_id", Node::string(task_id)),
                ("status", Node::string("in_progress")),
                ("timestamp", Node::string(&timestamp)),
                ("evidence", Node::string(&evidence)),
                ("replayId", Node::string(&replay)),
            ])
        },
        now,
    )
}

/// Checkpoint `task_id` completed or blocked: append `{task_id, status, timestamp, evidence,
/// command, verification: {exit_code, failing, tree_id}, replayId}` and set the plan task's
/// status. The tree id is written `tree:<id>` (a bare 40-hex value trips the strict secret scan).
pub fn checkpoint(
    workdir: &SafeDir,
    task_id: &str,
    outcome: Outcome,
    evidence: &Evidence,
    now: Timestamp,
) -> Result<(), SmallError> {
    let status = match outcome {
        Outcome::Completed => Status::Completed,
        Outcome::Blocked => Status::Blocked,
    };
    let summary = if evidence.summary.trim().is_empty() {
        format!("acceptance check: task {task_id} {}", status.as_str())
    } else {
        evidence.summary.clone()
    };
    let mut verification = vec![(
        "exit_code",
        match evidence.exit_code {
            Some(code) => Node::plain(&code.to_string()),
            None => Node::plain("null"),
        },
    )];
    verification.push((
        "failing",
        Node::seq(evidence.failing.iter().map(|f| Node::string(f)).collect()),
    ));
    if !evidence.tree_id.is_empty() {
        verification.push((
            "tree_id",
            Node::string(&format!("tree:{}", evidence.tree_id)),
        ));
    }
    record(
        workdir,
        task_id,
        status,
        |timestamp, replay| {
            let mut pairs = vec![
                ("task_id", Node::string(task_id)),
                ("status", Node::string(status.as_str())),
                ("timestamp", Node::string(&timestamp)),
                ("evidence", Node::string(&summary)),
            ];
            if !evidence.command.trim().is_empty() {
                pairs.push(("command", Node::string(&evidence.command)));
            }
            pairs.push(("verification", Node::map(verification)));
            pairs.push(("replayId", Node::string(&replay)));
            Node::map(pairs)
        },
        now,
    )
}

/// Write handoff.small.yml: `summary`, the current task (the in_progress one, else the next
/// actionable one, else null) and next steps from the plan, no links, the replayId. SMALL's rule
/// refuses a handoff while a task has progress but is neither completed nor blocked; loopexec
/// writes one at every halt instead, naming the task in progress as the current task and saying
/// in the summary that it is not checkpointed.
pub fn write_handoff(workdir: &SafeDir, summary: &str) -> Result<(), SmallError> {
    if summary.trim().is_empty() {
        return Err(SmallError::Refused {
            file: HANDOFF.into(),
            key: "summary".into(),
            message: "the summary must not be empty".into(),
        });
    }
    let ws = load(workdir)?;
    let (ws, sticky) = with_replay_id(&ws)?;
    let tasks = ws.tasks();
    let in_progress = tasks.iter().find(|t| t.status == Status::InProgress);
    let current = match (in_progress, ws.next()) {
        (Some(t), _) => Some(t),
        (None, super::Next::Task(id)) => tasks.iter().find(|t| t.id == id),
        _ => None,
    };
    let mut text = summary.trim().to_string();
    if let Some(t) = in_progress {
        text.push_str(&format!(
            " Task {} is in progress (started, not yet checkpointed).",
            t.id
        ));
    }
    let mut steps = Vec::new();
    if let Some(t) = current {
        steps.push(format!("{}: {}", t.id, t.title));
        steps.extend(t.steps.iter().map(|s| format!("{}: {s}", t.id)));
    }
    for t in tasks {
        if Some(&t.id) != current.map(|c| &c.id) && !matches!(t.status, Status::Completed) {
            steps.push(format!(
                "then {} ({}): {}",
                t.id,
                t.status.as_str(),
                t.title
            ));
        }
    }
    let root = Node::map(vec![
        ("small_version", Node::string(SMALL_VERSION)),
        ("owner", Node::string("agent")),
        ("summary", Node::string(&text)),
        (
            "resume",
            Node::map(vec![
                (
                    "current_task_id",
                    match current {
                        Some(t) => Node::string(&t.id),
                        None => Node::plain("null"),
                    },
                ),
                (
                    "next_steps",
                    Node::seq(steps.iter().map(|s| Node::string(s)).collect()),
                ),
            ]),
        ),
        ("links", Node::seq(vec![])),
        (
            "replayId",
            Node::map(vec![
                ("value", Node::string(&ws.replay_id())),
                ("source", Node::string("auto")),
            ]),
        ),
    ]);
    let mut changes: Vec<Change> = sticky.into_iter().collect();
    changes.push((HANDOFF, file(HANDOFF, &root)?));
    commit(workdir, &ws, changes)
}

/// The sticky replayId, setting workspace.small.yml `run.replay_id` (to the computed one) when
/// unset.
pub fn ensure_replay_id(workdir: &SafeDir) -> Result<String, SmallError> {
    let ws = load(workdir)?;
    let (next, sticky) = with_replay_id(&ws)?;
    let id = next.replay_id();
    if let Some(change) = sticky {
        commit(workdir, &ws, vec![change])?;
    }
    Ok(id)
}
