//! `loopexec init`: create `.loopexec/` and a commented `loop.toml` in the workdir, and the
//! operator's key pair when there is none in the key directory (`--no-keygen`: not), so that
//! `init` then `run` works.

use super::loop_args::LoopCommandArgs;
use super::operator::absolute_workdir;
use crate::engine::loopfile::{self, LOOP_FILE};
use crate::error::{CmdResult, Failure};
use crate::output::{aligned, Outcome};
use crate::receipt::store::{fs_failure, StateDir};
use crate::safefs::SafeDir;
use crate::zones::Isolation;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory to initialise.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
    /// The commands written into loop.toml.
    #[command(flatten)]
    pub commands: LoopCommandArgs,
    /// Fill in the isolation choice.
    #[arg(long, value_enum)]
    pub isolation: Option<Isolation>,
    /// Overwrite an existing loop.toml.
    #[arg(long)]
    pub force: bool,
    /// Do not create the operator's key pair when there is none (`loopexec keygen` does).
    #[arg(long)]
    pub no_keygen: bool,
}

/// The operator key `init` found or made: `(created, private key path, fingerprint)`; `None`
/// with `--no-keygen` and no key.
fn operator_key(no_keygen: bool) -> CmdResult<Option<(bool, PathBuf, String)>> {
    use crate::receipt::keys::{
        default_key_dir, fingerprint, generate_operator_key, load_public_key, PRIVATE_KEY_FILE,
        PUBLIC_KEY_FILE,
    };
    let dir = default_key_dir().map_err(super::keygen::key_failure)?;
    let private = dir.join(PRIVATE_KEY_FILE);
    if std::fs::symlink_metadata(&private).is_ok() {
        let public =
            load_public_key(&dir.join(PUBLIC_KEY_FILE)).map_err(super::keygen::key_failure)?;
        return Ok(Some((false, private, fingerprint(&public))));
    }
    if no_keygen {
        return Ok(None);
    }
    let made = generate_operator_key(&dir, false).map_err(super::keygen::key_failure)?;
    Ok(Some((true, made.private_key, made.fingerprint)))
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let workdir = absolute_workdir(&args.workdir)?;
    let wd = SafeDir::open(&workdir).map_err(|e| Failure::workspace(format!("workdir: {e}")))?;
    let text = loopfile::template(
        args.commands.check.as_deref(),
        args.commands.exec.as_deref(),
        args.isolation,
    );
    let existed = wd.exists(LOOP_FILE);
    if existed && !args.force {
        return Err(Failure::usage(format!(
            "{}: already exists",
            workdir.join(LOOP_FILE).display()
        ))
        .with_hint("pass --force to overwrite it"));
    }
    // Validate our own template before writing anything.
    loopfile::parse(&text, LOOP_FILE)?;
    let key = operator_key(args.no_keygen)?;
    let statedir = StateDir::open_or_create(&workdir)?;
    if existed {
        wd.write_atomic(LOOP_FILE, text.as_bytes())
            .map_err(fs_failure)?;
    } else {
        let mut file = wd.create_new(LOOP_FILE, 0o644).map_err(fs_failure)?;
        file.write_all(text.as_bytes())
            .and_then(|_| file.sync_all())
            .map_err(|e| Failure::io(&workdir.join(LOOP_FILE), &e))?;
        wd.sync().map_err(fs_failure)?;
    }
    let loop_file = workdir.join(LOOP_FILE).to_string_lossy().into_owned();
    let state_dir = statedir.path().to_string_lossy().into_owned();
    let mut rows = vec![
        ("loop_file", loop_file.clone()),
        ("state_dir", state_dir.clone()),
    ];
    let key_json = match &key {
        Some((created, path, fp)) => {
            let what = if *created { "created" } else { "found" };
            rows.push((
                "operator_key",
                format!("{} ({what}; fingerprint {fp})", path.display()),
            ));
            json!({"private_key": path, "fingerprint": fp, "created": created})
        }
        None => {
            rows.push((
                "operator_key",
                "none (--no-keygen): create one with `loopexec keygen` before `loopexec run`"
                    .into(),
            ));
            serde_json::Value::Null
        }
    };
    let human = format!(
        "initialised\n{}next: edit loop.toml (check, exec, isolation), then `loopexec run`\n",
        aligned(&rows)
    );
    Ok(Outcome::ok("init")
        .field("init", json!({"loop_file": loop_file, "state_dir": state_dir, "overwrote": existed, "operator_key": key_json}))
        .human(human))
}
