//! The loop's two commands as flags, shared by `init` (which writes them into loop.toml), `run`
//! (flags over loop.toml) and `isolate` (resolved as `run` resolves them).

use crate::engine::config::ConfigInput;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct LoopCommandArgs {
    /// The external check; exit 0 means done. Run as `/bin/sh -c` in the workdir.
    #[arg(long, value_name = "CMD")]
    pub check: Option<String>,
    /// The agent command, run before each check.
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,
}

impl LoopCommandArgs {
    /// These flags over `rest` (the other configuration input).
    pub fn over(&self, rest: ConfigInput) -> ConfigInput {
        ConfigInput {
            check: self.check.clone(),
            exec: self.exec.clone(),
            ..rest
        }
    }
}
