//! `loopexec attest`: add the operator's signature to a sealed run that verifies against it.

use crate::audit::attest::{attest_run, AttestError};
use crate::error::{CmdResult, Failure};
use crate::output::Outcome;
use crate::receipt::keys::OperatorKey;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A run id of the workdir, or the path of a run directory.
    #[arg(value_name = "RUN")]
    pub run: String,
    /// The operator's private key (operator.key). Required: there is no default key.
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
    /// Directory holding .loopexec/ (for a run id).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let operator = OperatorKey::load(&args.key).map_err(super::keygen::key_failure)?;
    let run_dir = super::sealed_run::open(&args.run, &args.workdir)?;
    let verification = attest_run(&run_dir, &operator).map_err(|e| match e {
        AttestError::NotVerified(_) => {
            Failure::new(crate::error::FailureCode::NotVerified, e.to_string())
        }
        other => Failure::workspace(other.to_string()),
    })?;
    let mut out = Outcome::ok("attest").human(format!(
        "attested {} with operator key {}\n",
        run_dir.path().display(),
        verification.operator_key.clone().unwrap_or_default()
    ));
    if let Some(id) = &verification.run_id {
        out.set("run_id", id.clone());
    }
    out.set(
        "verify",
        serde_json::to_value(&verification).unwrap_or_default(),
    );
    Ok(out)
}
