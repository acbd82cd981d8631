//! `loopexec verify`: offline verification of a sealed run, or of a probe's receipt
//! (`.loopexec/probes/<id>`), against the operator's public key.

use crate::audit::verify::{verify_run, verify_run_with_repo};
use crate::error::CmdResult;
use crate::halt::ExitClass;
use crate::output::Outcome;
use crate::receipt::keys::load_public_key;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A run id of the workdir, or the path of a run directory (e.g. .loopexec/runs/<id>) or of a
    /// probe's directory (.loopexec/probes/<id>).
    #[arg(value_name = "RUN", required_unless_present = "all")]
    pub run: Option<String>,
    /// Verify every sealed run directory in DIR instead (a `.loopexec/runs` directory, or a
    /// collection `fleet collect` made), in parallel: one line per run as it finishes (JSON
    /// Lines `{"verify_run": ...}` under --json), then the summary (docs/fleet.md).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["run", "repo", "acks"])]
    pub all: Option<PathBuf>,
    /// With --all: how many runs are verified at once (default: the available cores).
    #[arg(long, value_name = "N", requires = "all")]
    pub jobs: Option<usize>,
    /// The operator's public key (operator.pub). Default: operator.pub in the operator's key
    /// directory ($LOOPEXEC_CONFIG_DIR, $XDG_CONFIG_HOME/loopexec or ~/.config/loopexec), for the
    /// operator verifying their own run; a third party passes the key they were given.
    #[arg(long, value_name = "FILE")]
    pub pubkey: Option<PathBuf>,
    /// Directory holding .loopexec/ (for a run id).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
    /// A git repository holding the run's trees (the operator's): re-run the tree guards on t0
    /// and on each iteration's tree it holds, and compare with the receipt (`tree_guards`).
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Check the workspace's comprehension ack log (chain, signatures, and that every ack the
    /// receipt says cleared debt is in it, byte-identical); on by default for a run whose
    /// receipt has `comprehension` events (docs/gates.md, "The comprehension gate").
    #[arg(long)]
    pub acks: bool,
}

/// The operator's public key a run is verified against, and where it came from.
pub(crate) struct VerifyKey {
    pub path: PathBuf,
    pub key: ed25519_dalek::VerifyingKey,
    /// The operator's own key from its default place (no `--pubkey`).
    pub defaulted: bool,
}

impl VerifyKey {
    /// `--pubkey FILE`, or else the operator's own `operator.pub` in its key directory (an error
    /// naming `--pubkey` and `keygen` when there is none).
    pub(crate) fn choose(pubkey: Option<&std::path::Path>) -> CmdResult<VerifyKey> {
        let (path, defaulted) = match pubkey {
            Some(path) => (path.to_path_buf(), false),
            None => {
                let path = crate::receipt::keys::default_key_dir()
                    .map_err(super::keygen::key_failure)?
                    .join(crate::receipt::keys::PUBLIC_KEY_FILE);
                if std::fs::symlink_metadata(&path).is_err() {
                    return Err(crate::error::Failure::usage(format!("no --pubkey and no operator public key at {}", path.display()))
                        .with_hint("pass --pubkey FILE (the key of the operator who ran it), or create your own with `loopexec keygen`"));
                }
                (path, true)
            }
        };
        let key = load_public_key(&path).map_err(super::keygen::key_failure)?;
        Ok(VerifyKey {
            path,
            key,
            defaulted,
        })
    }

    /// The `key` object of `verify --json`: its path, fingerprint and source.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "path": self.path,
            "fingerprint": crate::receipt::keys::fingerprint(&self.key),
            "source": if self.defaulted { "operator_default" } else { "pubkey" },
        })
    }
}

/// A loop run's verification as `verify` computes it without `--repo`: every check of
/// [`verify_run`], then the comprehension acks (`acks` asked, or the receipt has `comprehension`
/// events; `state_root` is the state directory holding the run), and the operator's verdict on
/// its halt when it verifies.
pub(crate) fn verify_loop_run(
    run_dir: &crate::safefs::SafeDir,
    state_root: Option<PathBuf>,
    key: &VerifyKey,
    acks: bool,
) -> (
    crate::audit::verify::Verification,
    Option<super::explain_halt::HaltVerdict>,
) {
    let mut verification = verify_run(run_dir, &key.key);
    if let Some(check) = ack_check(run_dir, state_root, acks) {
        verification.checks.push(check);
    }
    let verdict = if verification.ok() {
        halt_verdict(run_dir)
    } else {
        None
    };
    (verification, verdict)
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let chosen = VerifyKey::choose(args.pubkey.as_deref())?;
    // `--all` is dispatched to `super::verify_all` before this (cli::Command::dispatch).
    let Some(target) = args.run.clone() else {
        return Err(crate::error::Failure::usage(
            "verify needs RUN, or --all DIR",
        ));
    };
    let (pubkey, defaulted, operator) = (&chosen.path, chosen.defaulted, &chosen.key);
    let key_used = chosen.json();
    let run_dir = super::sealed_run::open(&target, &args.workdir)?;
    let repo = args
        .repo
        .as_deref()
        .map(crate::audit::tree_guards::Repo::open)
        .transpose()
        .map_err(|e| e.failure())?;
    // A probe's receipt (`probe-check`, `doctor --check`) verifies with its verdict recomputed.
    let probe = holds_probe_receipt(&run_dir);
    if probe && repo.is_some() {
        return Err(crate::error::Failure::usage(
            "--repo re-runs a run's tree guards: a probe's receipt records no tree",
        ));
    }
    let (mut verification, verdict) = match &repo {
        _ if probe => (crate::audit::probe::verify_probe(&run_dir, operator), None),
        Some(repo) => {
            let mut v = verify_run_with_repo(&run_dir, operator, repo).map_err(|e| e.failure())?;
            if let Some(check) = ack_check(&run_dir, state_root(&args), args.acks) {
                v.checks.push(check);
            }
            let verdict = if v.ok() { halt_verdict(&run_dir) } else { None };
            (v, verdict)
        }
        None => verify_loop_run(&run_dir, state_root(&args), &chosen, args.acks),
    };
    // A run id names a run: a probe's receipt copied under runs/ is not passed off as one.
    if probe && !target.contains('/') {
        verification.fail_step(
            "receipt_kind",
            format!(
                "run {} holds a probe's receipt, not a run's",
                crate::inert::inert(&target)
            ),
        );
    }
    let mut human = format!(
        "key  {} (fingerprint {}{})\n",
        crate::inert::inert(&pubkey.to_string_lossy()),
        key_used["fingerprint"].as_str().unwrap_or(""),
        if defaulted {
            "; the operator's own key: a third party passes --pubkey"
        } else {
            ""
        }
    );
    for check in &verification.checks {
        human.push_str(&format!(
            "{:<4} {:<22} {}\n",
            if check.ok { "ok" } else { "FAIL" },
            check.name,
            crate::inert::inert(&check.detail)
        ));
    }
    if repo.is_none() && !probe {
        human.push_str("tree guards not re-run: pass --repo\n");
    } else if !probe
        && !verification
            .checks
            .iter()
            .any(|c| c.name == crate::audit::tree_guards::CHECK)
    {
        human.push_str("tree guards not re-run: the checks before them did not pass\n");
    }
    let ok = verification.ok();
    // The operator's verdict, as `explain-halt` computes it from the same receipt: only of a
    // receipt that verifies (a halt that does not follow, or a seal that does not hold, gets none).
    let verdict = if ok { verdict } else { None };
    if let Some(verdict) = &verdict {
        human.push_str(&format!(
            "verdict {} (loopexec explain-halt)\n",
            verdict.explanation.verdict.as_str()
        ));
    }
    human.push_str(if ok { "verified\n" } else { "NOT verified\n" });
    let mut out = Outcome::ok("verify");
    out.set("kind", if probe { "probe" } else { "run" });
    if let Some(id) = &verification.run_id {
        out.set("run_id", id.clone());
    }
    if let Some(reason) = &verification.halt_reason {
        out.set("halt_reason", reason.clone());
    }
    out.set(
        "verify",
        serde_json::to_value(&verification).unwrap_or_default(),
    );
    if let Some(verdict) = &verdict {
        out.set("verdict", serde_json::to_value(verdict).unwrap_or_default());
    }
    out.set("verified", ok);
    out.set("key", key_used);
    if !ok {
        out.status = "failed";
        out.exit = ExitClass::Integrity;
        for check in verification.checks.iter().filter(|c| !c.ok) {
            out.errors.push(crate::error::ErrorEntry {
                code: format!("verify_{}", check.name),
                message: check.detail.clone(),
                hint: None,
            });
        }
    }
    Ok(out.human(human))
}

/// The state dir holding the run: `--workdir`'s for a run id, two levels up from a run directory.
fn state_root(args: &Args) -> Option<PathBuf> {
    match args.run.as_deref().is_none_or(|run| run.contains('/')) {
        true => None,
        false => super::operator::absolute_workdir(&args.workdir)
            .ok()
            .map(|w| w.join(crate::receipt::store::STATE_DIR)),
    }
}

/// The `acks` check: the run's `comprehension` events against the workspace's ack log (in
/// `state_root`, or else two levels up from the run directory). `None` when not asked for and the
/// receipt has no `comprehension` event.
pub(crate) fn ack_check(
    run_dir: &crate::safefs::SafeDir,
    state_root: Option<PathBuf>,
    asked: bool,
) -> Option<crate::audit::verify::Check> {
    use crate::receipt::events::{Event, Recorded};
    let fail = |detail: String| {
        Some(crate::audit::verify::Check {
            name: "acks",
            ok: false,
            detail,
        })
    };
    let bytes = run_dir
        .read(
            crate::receipt::seal::RECEIPT_FILE,
            crate::receipt::chain::MAX_RECEIPT_BYTES,
        )
        .ok();
    let records = bytes
        .as_deref()
        .and_then(|b| crate::receipt::chain::verify(b).ok())
        .and_then(|v| Recorded::decode_all(&v.events).ok())
        .unwrap_or_default();
    let events: Vec<(usize, &crate::receipt::events::ComprehensionRecord)> = records
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match &r.event {
            Event::Comprehension(c) => Some((i + 1, c)),
            _ => None,
        })
        .collect();
    if events.is_empty() && !asked {
        return None;
    }
    let root = state_root.or_else(|| {
        run_dir
            .path()
            .parent()
            .and_then(std::path::Path::parent)
            .map(std::path::Path::to_path_buf)
    });
    let Some(root) = root.and_then(|r| crate::safefs::SafeDir::open(&r).ok()) else {
        return fail("the state directory holding the run cannot be opened".into());
    };
    let files = match crate::receipt::comprehension::Files::open(&root) {
        Ok(Some(files)) => files,
        Ok(None) => return fail("the workspace has no comprehension ledger or ack log".into()),
        Err(e) => return fail(e.message),
    };
    let (ledger, log) = match (files.ledger(), files.acks()) {
        (Ok(Some(ledger)), Ok(log)) => (ledger, log),
        (Ok(None), _) => return fail("the workspace has no comprehension ledger".into()),
        (Err(e), _) | (_, Err(e)) => return fail(e.message),
    };
    Some(
        match crate::rules::comprehension::audit(&events, &log, &ledger.ledger_id) {
            Ok(detail) => crate::audit::verify::Check {
                name: "acks",
                ok: true,
                detail,
            },
            Err(failures) => crate::audit::verify::Check {
                name: "acks",
                ok: false,
                detail: failures.join("; "),
            },
        },
    )
}

/// The verdict on the run's halt from its receipt alone (the caller asks only when it verifies; none when the run
/// has not halted, or its halt was never sealed: `explain-halt` gives none then either).
fn halt_verdict(run_dir: &crate::safefs::SafeDir) -> Option<super::explain_halt::HaltVerdict> {
    use crate::receipt::chain;
    if !run_dir.exists(crate::receipt::seal::ENVELOPE_FILE) {
        return None;
    }
    let bytes = run_dir
        .read(crate::receipt::seal::RECEIPT_FILE, chain::MAX_RECEIPT_BYTES)
        .ok()?;
    let verified = chain::verify(&bytes).ok()?;
    let history = crate::receipt::history::History::of_lines(&verified.events).ok()?;
    super::explain_halt::verdict_of(&history)
}

/// Whether the directory's receipt starts with `probe_start` (read without verifying: the
/// verifier then checks everything).
pub(crate) fn holds_probe_receipt(dir: &crate::safefs::SafeDir) -> bool {
    use std::io::{BufRead, BufReader};
    let Ok(file) = dir.open_read(crate::receipt::seal::RECEIPT_FILE) else {
        return false;
    };
    let mut first = Vec::new();
    if BufReader::new(std::io::Read::take(file, 64 * 1024))
        .read_until(b'\n', &mut first)
        .is_err()
    {
        return false;
    }
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&first)
        .is_ok_and(|line| crate::receipt::probe::is_probe_receipt(std::slice::from_ref(&line)))
}
