//! Where `report` and `explain-halt` read a receipt from: a run of the workdir (default the
//! latest) or an explicit receipt file, always verified and folded
//! into its history before use.

use crate::error::{CmdResult, Failure};
use crate::receipt::chain::{verify, VerifiedChain, MAX_RECEIPT_BYTES};
use crate::receipt::history::History;
use crate::receipt::store::StateDir;
use std::io::Read;
use std::path::PathBuf;

/// Common arguments for reading a receipt.
#[derive(Debug, clap::Args)]
pub struct ReceiptArgs {
    /// The run (default: the latest run of the workdir).
    #[arg(value_name = "RUN_ID")]
    pub run_id: Option<String>,
    /// Read this receipt file instead of a run of the workdir.
    #[arg(long, value_name = "PATH", conflicts_with = "run_id")]
    pub receipt: Option<PathBuf>,
    /// Directory holding .loopexec/.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
}

/// A verified receipt, its history, and where it came from.
pub struct LoadedReceipt {
    pub path: PathBuf,
    pub chain: VerifiedChain,
    pub history: History,
}

fn read_file_nofollow(path: &PathBuf) -> CmdResult<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Failure::workspace(format!("{}: {e}", path.display())))?;
    let mut bytes = Vec::new();
    file.take(MAX_RECEIPT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::io(path, &e))?;
    if bytes.len() as u64 > MAX_RECEIPT_BYTES {
        return Err(Failure::workspace(format!(
            "{}: larger than {MAX_RECEIPT_BYTES} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

pub fn load(args: &ReceiptArgs) -> CmdResult<LoadedReceipt> {
    let (path, bytes) = match &args.receipt {
        Some(path) => (path.clone(), read_file_nofollow(path)?),
        None => {
            let statedir = StateDir::open(&super::operator::absolute_workdir(&args.workdir)?)?;
            let run = statedir.resolve(args.run_id.as_deref())?;
            (run.receipt_path(), run.receipt_bytes()?)
        }
    };
    let chain = verify(&bytes).map_err(|e| {
        Failure::workspace(format!("{}: receipt does not verify: {e}", path.display()))
    })?;
    let history = History::of_lines(&chain.events)
        .map_err(|e| Failure::workspace(format!("{}: {e}", path.display())))?;
    Ok(LoadedReceipt {
        path,
        chain,
        history,
    })
}
