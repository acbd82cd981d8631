//! `loopexec replay`: re-run a halted run's recorded check on its recorded end-state tree, in an
//! exec zone, and compare the normalised fingerprint with the receipt's (engine::replay). The
//! rerun is a free sample of the tree's stability: the bound with it is printed, not recorded.

use crate::engine::replay::replay;
use crate::error::CmdResult;
use crate::halt::HaltReason;
use crate::output::{aligned, Outcome};
use crate::receipt::store::StateDir;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run to replay (a run id of the workdir).
    #[arg(value_name = "RUN")]
    pub run: String,
    /// The operator's public key (operator.pub) every hand acceptance in the receipt is checked
    /// against; default: operator.pub in the configuration directory, when there is one.
    #[arg(long, value_name = "FILE")]
    pub pubkey: Option<PathBuf>,
    /// Directory holding .loopexec/.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
}

fn fingerprint_text(fp: &crate::engine::replay::Fingerprint) -> String {
    let set = |s: &Option<Vec<String>>| {
        s.as_ref()
            .map(|s| s.len().to_string())
            .unwrap_or_else(|| "-".into())
    };
    format!(
        "{} (failing {}, collected {})",
        serde_json::to_value(fp.exit_class)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        set(&fp.failing_set),
        set(&fp.collected_set)
    )
}

/// The operator's public key hand acceptances are verified against: `explicit`, else
/// operator.pub in the configuration directory when it exists, else none (a receipt holding an
/// acceptance is then refused).
pub(crate) fn operator_public_key(
    explicit: Option<&std::path::Path>,
) -> CmdResult<Option<ed25519_dalek::VerifyingKey>> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match crate::receipt::keys::default_key_dir() {
            Ok(dir) => dir.join(crate::receipt::keys::PUBLIC_KEY_FILE),
            Err(_) => return Ok(None),
        },
    };
    if explicit.is_none() && std::fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    crate::receipt::keys::load_public_key(&path)
        .map(Some)
        .map_err(super::keygen::key_failure)
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let statedir = StateDir::open(&super::operator::absolute_workdir(&args.workdir)?)?;
    let run = statedir.resolve(Some(&args.run))?;
    let operator = operator_public_key(args.pubkey.as_deref())?;
    let r = replay(&statedir, &run, operator.as_ref())?;
    // The replay is one more sample of the recorded tree's stability (printed, never recorded).
    let (cfg, history) = crate::engine::replay::pinned_run(&run, operator.as_ref())?;
    let sample = crate::engine::replay_sample(&history, r.iteration, r.matched, &cfg)?;
    let human = aligned(&[
        ("run", r.run_id.clone()),
        ("tree", r.tree_id.clone()),
        ("iteration", r.iteration.to_string()),
        ("recorded", fingerprint_text(&r.recorded)),
        ("observed", fingerprint_text(&r.observed)),
        ("match", if r.matched { "yes".into() } else { "NO: objective_unverified".into() }),
        (
            "stability",
            format!(
                "lower bound {:.3} at confidence {} after {} sample(s) of this tree, {} agreeing (target {})",
                sample.stability_lower_bound, sample.confidence, sample.samples, sample.agreeing, sample.stability_target
            ),
        ),
    ]);
    let mut out = if r.matched {
        Outcome::ok("replay")
    } else {
        Outcome::halted("replay", HaltReason::ObjectiveUnverified)
    }
    .human(human);
    out.set("run_id", r.run_id.clone());
    out.set("iteration", r.iteration);
    out.set(
        "check_exit",
        serde_json::to_value(r.check_exit).unwrap_or_default(),
    );
    out.set("replay", serde_json::to_value(&r).unwrap_or_default());
    out.set(
        "stability",
        serde_json::to_value(&sample).unwrap_or_default(),
    );
    Ok(out)
}
