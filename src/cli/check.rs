//! `loopexec check`: state hygiene of `.loopexec/` (not the oracle). Every problem is listed:
//! symlinks anywhere, state files that do not parse, receipt chains that do not verify, a
//! `latest` that names no run. Exit 0 when clean, 30 otherwise. In a SMALL workspace (a
//! `.small/` in the workdir) also the strict SMALL validation (`crate::small`): every violation
//! with its file and key, exit 20 `invariant_failed`; 30 wins when both have problems.

use crate::error::{CmdResult, ErrorEntry, FailureCode};
use crate::halt::ExitClass;
use crate::output::{aligned, Outcome};
use crate::receipt::chain::{verify, MAX_RECEIPT_BYTES};
use crate::receipt::state::{RunState, MAX_STATE_BYTES};
use crate::receipt::store::{StateDir, ARTIFACTS, LATEST, RECEIPT, RUNS, STATE_FILE};
use crate::run_id::RunId;
use crate::safefs::SafeDir;
use crate::small;
use nix::fcntl::AtFlags;
use nix::sys::stat::{fstatat, SFlag};
use serde_json::json;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory holding .loopexec/ (and .small/, if any).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Link,
    Other,
}

fn kind(dir: &SafeDir, name: &str) -> Option<Kind> {
    let st = fstatat(
        Some(dir.fd().as_raw_fd()),
        name,
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .ok()?;
    let fmt = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    Some(match fmt {
        SFlag::S_IFDIR => Kind::Dir,
        SFlag::S_IFREG => Kind::File,
        SFlag::S_IFLNK => Kind::Link,
        _ => Kind::Other,
    })
}

struct Problems(Vec<ErrorEntry>);

impl Problems {
    fn add(&mut self, message: String) {
        self.0.push(ErrorEntry {
            code: crate::error::FailureCode::WorkspaceInvalid.as_str().into(),
            message,
            hint: None,
        });
    }

    /// Flag every symlink or special file directly in `dir`.
    fn scan_entries(&mut self, dir: &SafeDir) -> Vec<String> {
        let names = match dir.list() {
            Ok(names) => names,
            Err(e) => {
                self.add(e.to_string());
                return Vec::new();
            }
        };
        for name in &names {
            match kind(dir, name) {
                Some(Kind::Link) => self.add(format!(
                    "{}: is a symlink (planted?)",
                    dir.path().join(name).display()
                )),
                Some(Kind::Other) => self.add(format!(
                    "{}: is not a regular file or directory",
                    dir.path().join(name).display()
                )),
                _ => {}
            }
        }
        names
    }
}

fn check_run(problems: &mut Problems, runs: &SafeDir, name: &str) -> u64 {
    let path = runs.path().join(name);
    if RunId::parse(name).is_err() {
        problems.add(format!("{}: not a valid run id", path.display()));
        return 0;
    }
    if kind(runs, name) != Some(Kind::Dir) {
        if kind(runs, name) == Some(Kind::File) {
            problems.add(format!("{}: not a directory", path.display()));
        }
        return 0;
    }
    let dir = match runs.subdir(name) {
        Ok(dir) => dir,
        Err(e) => {
            problems.add(e.to_string());
            return 0;
        }
    };
    problems.scan_entries(&dir);
    let mut events = 0;
    // A link among them was reported by the scan; do not report it twice.
    let is_link = |name: &str| kind(&dir, name) == Some(Kind::Link);
    match dir.read(RECEIPT, MAX_RECEIPT_BYTES) {
        _ if is_link(RECEIPT) => {}
        Ok(bytes) => match verify(&bytes) {
            Ok(chain) => events = chain.events.len() as u64,
            Err(e) => problems.add(format!(
                "{}: receipt does not verify: {e}",
                path.join(RECEIPT).display()
            )),
        },
        Err(e) if e.is_not_found() => {
            problems.add(format!("{}: missing", path.join(RECEIPT).display()))
        }
        Err(e) => problems.add(e.to_string()),
    }
    match dir.read(STATE_FILE, MAX_STATE_BYTES) {
        _ if is_link(STATE_FILE) => {}
        Ok(bytes) => match RunState::from_bytes(&bytes) {
            Ok(state) if state.run_id != name => problems.add(format!(
                "{}: names run {:?}, not {name:?}",
                path.join(STATE_FILE).display(),
                state.run_id
            )),
            Ok(_) => {}
            Err(e) => problems.add(format!(
                "{}: does not parse: {e}",
                path.join(STATE_FILE).display()
            )),
        },
        Err(e) if e.is_not_found() => {
            problems.add(format!("{}: missing", path.join(STATE_FILE).display()))
        }
        Err(e) => problems.add(e.to_string()),
    }
    if kind(&dir, ARTIFACTS) == Some(Kind::Dir) {
        if let Ok(artifacts) = dir.subdir(ARTIFACTS) {
            problems.scan_entries(&artifacts);
        }
    }
    events
}

/// The `.loopexec/` hygiene: the `checked` object and every problem found.
fn hygiene(statedir: &StateDir) -> (serde_json::Value, Vec<ErrorEntry>) {
    let root = statedir.root();
    let mut problems = Problems(Vec::new());
    problems.scan_entries(root);
    let mut runs_checked = 0u64;
    let mut events = 0u64;
    let mut run_names = Vec::new();
    if kind(root, RUNS) == Some(Kind::Dir) {
        match root.subdir(RUNS) {
            Ok(runs) => {
                run_names = problems.scan_entries(&runs);
                for name in &run_names {
                    events += check_run(&mut problems, &runs, name);
                    runs_checked += 1;
                }
            }
            Err(e) => problems.add(e.to_string()),
        }
    }
    if kind(root, LATEST) == Some(Kind::File) {
        match statedir.latest() {
            Ok(Some(id)) if !run_names.iter().any(|n| n == id.as_str()) => problems.add(format!(
                "{}/latest: names run {id}, which does not exist",
                statedir.path().display()
            )),
            Ok(_) => {}
            Err(f) => problems.add(f.message),
        }
    }
    if kind(root, STATE_FILE) == Some(Kind::File) {
        if let Err(f) = statedir.read_summary() {
            problems.add(f.message);
        }
    }
    let state_dir = statedir.path().to_string_lossy().into_owned();
    let checked = json!({"state_dir": state_dir, "runs": runs_checked, "events": events, "problems": problems.0.len()});
    (checked, problems.0)
}

/// The strict SMALL validation of `.small/`: the `small` object and one `invariant_failed`
/// error per violation (or for a file that does not parse, a v2 or linked workspace).
fn small_check(workdir: &SafeDir) -> (serde_json::Value, Vec<ErrorEntry>) {
    let entry = |message: String| ErrorEntry {
        code: FailureCode::InvariantFailed.as_str().into(),
        message,
        hint: None,
    };
    let refused = |e: small::SmallError| {
        let mut value = json!({"version": null, "valid": false, "error": e.to_string()});
        if let small::SmallError::Parse {
            file,
            line,
            col,
            message,
        } = &e
        {
            value["parse_error"] =
                json!({"file": file, "line": line, "column": col, "message": message});
        }
        if matches!(e, small::SmallError::V2Unsupported { .. }) {
            value["version"] = json!("2");
        }
        let failure = crate::error::Failure::from(e);
        (value, vec![failure.entry()])
    };
    let ws = match small::load(workdir) {
        Ok(ws) => ws,
        Err(e) => return refused(e),
    };
    let violations = ws.violations();
    let value = json!({
        "version": small::SMALL_VERSION,
        "valid": violations.is_empty(),
        "tasks": ws.tasks().len(),
        "replay_id": ws.replay_id(),
        "violations": violations,
    });
    (
        value,
        violations.iter().map(|v| entry(v.to_string())).collect(),
    )
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let workdir = super::operator::absolute_workdir(&args.workdir)?;
    let dir = SafeDir::open(&workdir).map_err(crate::error::fs_failure)?;
    let detected = small::detect(&dir);
    let has_small = !matches!(detected, Ok(small::Detected::Absent));
    // A SMALL workspace is checked without a state dir; without `.small/` a missing state dir is
    // the refusal it always was.
    let statedir = match StateDir::open_for_inspection(&workdir) {
        Ok(s) => Some(s),
        Err(_) if has_small && !workdir.join(crate::receipt::store::STATE_DIR).exists() => None,
        Err(f) => return Err(f),
    };
    let mut out = Outcome::ok("check");
    let mut human = Vec::new();
    let mut state_errors = Vec::new();
    if let Some(statedir) = &statedir {
        let (checked, problems) = hygiene(statedir);
        let state_dir = statedir.path().to_string_lossy().into_owned();
        if problems.is_empty() {
            human.push(("state_dir", state_dir));
            human.push(("runs", checked["runs"].to_string()));
        } else {
            human.push((
                "state_dir",
                format!("{state_dir}: {} problem(s)", problems.len()),
            ));
        }
        out = out.field("checked", checked);
        state_errors = problems;
    }
    let mut small_errors = Vec::new();
    if has_small {
        let (value, errors) = small_check(&dir);
        let small_dir = workdir
            .join(small::SMALL_DIR)
            .to_string_lossy()
            .into_owned();
        if errors.is_empty() {
            human.push((
                "small",
                format!("{small_dir}: valid, {} task(s)", value["tasks"]),
            ));
        } else {
            human.push(("small", format!("{small_dir}: {} problem(s)", errors.len())));
        }
        out = out.field("small", value);
        small_errors = errors;
    }
    if state_errors.is_empty() && small_errors.is_empty() {
        human.push(("result", "clean".into()));
        return Ok(out.human(aligned(&human)));
    }
    // Both broken: the state dir's class (30) wins; every problem is listed either way.
    out.status = "error";
    out.exit = if state_errors.is_empty() {
        ExitClass::Invariant
    } else {
        ExitClass::Workspace
    };
    out.human = aligned(&human);
    out.errors = state_errors;
    out.errors.extend(small_errors);
    Ok(out)
}
