//! `loopexec policy check FILE` (validate; errors name line and column), `loopexec policy show
//! FILE` (the effective policy as a reviewer's table, or JSON with its sha256), `loopexec policy
//! diff A B` (keys whose effective values differ).

use crate::error::{CmdResult, Failure};
use crate::output::{aligned, Outcome};
use sandbox::Policy;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub action: PolicyAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum PolicyAction {
    /// Validate a policy file.
    Check { file: PathBuf },
    /// Show the effective policy (every key with its value) and its sha256.
    Show { file: PathBuf },
    /// Show the keys whose effective values differ between two policies.
    Diff { a: PathBuf, b: PathBuf },
}

fn load(file: &Path) -> CmdResult<Policy> {
    Policy::load(file).map_err(|e| {
        let mut f = Failure::invalid_input(e.to_string());
        if e.line > 0 {
            f = f.with_hint(format!("line {}, column {}", e.line, e.column));
        }
        f
    })
}

pub fn run(args: PolicyArgs, _json: bool) -> CmdResult<Outcome> {
    match args.action {
        PolicyAction::Check { file } => {
            let p = load(&file)?;
            Ok(Outcome::ok("policy check")
                .field("file", file.display().to_string())
                .field("sha256", p.sha256.clone())
                .field("valid", true)
                .human(format!("{}: valid (sha256 {})", file.display(), p.sha256)))
        }
        PolicyAction::Show { file } => {
            let p = load(&file)?;
            let rows = p.rows();
            let table: Vec<(&str, String)> =
                rows.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
            Ok(Outcome::ok("policy show")
                .field("file", file.display().to_string())
                .field("sha256", p.sha256.clone())
                .field("policy", p.to_json())
                .human(aligned(&table)))
        }
        PolicyAction::Diff { a, b } => {
            let (pa, pb) = (load(&a)?, load(&b)?);
            let diff = pa.diff(&pb);
            let human = if diff.is_empty() {
                "no difference in effective policy\n".to_string()
            } else {
                let width = diff.iter().map(|(k, _, _)| k.len()).max().unwrap_or(0);
                diff.iter()
                    .map(|(k, x, y)| format!("{k:<width$}  - {x}\n{:<width$}  + {y}\n", ""))
                    .collect()
            };
            let json: Vec<serde_json::Value> = diff
                .iter()
                .map(|(k, x, y)| serde_json::json!({"key": k, "a": x, "b": y}))
                .collect();
            Ok(Outcome::ok("policy diff")
                .field(
                    "a",
                    serde_json::json!({"file": a.display().to_string(), "sha256": pa.sha256}),
                )
                .field(
                    "b",
                    serde_json::json!({"file": b.display().to_string(), "sha256": pb.sha256}),
                )
                .field("identical", diff.is_empty())
                .field("differences", json)
                .human(human))
        }
    }
}
