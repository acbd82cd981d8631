//! `loopexec init`: create `.loopexec/` and a commented `loop.toml` in the workdir.

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
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let workdir = absolute_workdir(&args.workdir)?;
    let wd = SafeDir::open(&workdir).map_err(|e| Failure::workspace(format!("workdir: {e}")))?;
    let text = loopfile::template(args.commands.check.as_deref(), args.commands.exec.as_deref(), args.isolation);
    let existed = wd.exists(LOOP_FILE);
    if existed && !args.force {
        return Err(Failure::usage(format!("{}: already exists", workdir.join(LOOP_FILE).display()))
            .with_hint("pass --force to overwrite it"));
    }
    // Validate our own template before writing anything.
    loopfile::parse(&text, LOOP_FILE)?;
    let statedir = StateDir::open_or_create(&workdir)?;
    if existed {
        wd.write_atomic(LOOP_FILE, text.as_bytes()).map_err(fs_failure)?;
    } else {
        let mut file = wd.create_new(LOOP_FILE, 0o644).map_err(fs_failure)?;
        file.write_all(text.as_bytes()).and_then(|_| file.sync_all()).map_err(|e| Failure::io(&workdir.join(LOOP_FILE), &e))?;
        wd.sync().map_err(fs_failure)?;
    }
    let loop_file = workdir.join(LOOP_FILE).to_string_lossy().into_owned();
    let state_dir = statedir.path().to_string_lossy().into_owned();
    let human = format!(
        "initialised\n{}next: edit loop.toml (check, exec, isolation), then `loopexec run`\n",
        aligned(&[("loop_file", loop_file.clone()), ("state_dir", state_dir.clone())])
    );
    Ok(Outcome::ok("init")
        .field("init", json!({"loop_file": loop_file, "state_dir": state_dir, "overwrote": existed}))
        .human(human))
}
