//! `loopexec escalate`: tell a person that a run needs them. Builds the run's escalation packet
//! (`loopexec.escalation/v1`, [`crate::escalation::packet`]) from its verified receipt and
//! explain-halt's explanation, delivers it on one channel, records the delivery in the run's
//! hash-chained `escalations.jsonl`, and exits 16 (`escalation_pending`) once delivered. The
//! receipt is never appended to (it may be sealed). A run that has not halted may be escalated
//! too (a stale run `watch` found, a paused one): its packet says so and its commands resume it.
//! `run --escalate-on` calls [`escalate`] after a halt it escalates on. docs/gates.md,
//! "Escalation".

use super::receipt_source::ReceiptArgs;
use crate::error::{CmdResult, Failure, FailureCode};
use crate::escalation::channels::{self, Outcome as Delivery};
use crate::escalation::config::{self, Settings, Target};
use crate::escalation::log::{self, Record};
use crate::escalation::packet::{self, HaltFacts, PacketInput};
use crate::halt::ExitClass;
use crate::output::{aligned, Outcome};
use crate::receipt::store::{RunDir, StateDir};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The channel flags, shared by `escalate` and `run --escalate-on`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ChannelArgs {
    /// Where the escalation goes: file, stdout, webhook, slack or github (or [escalation] channel).
    #[arg(long, value_name = "CHANNEL")]
    pub channel: Option<String>,
    /// `file`: the path the packet is written to (default: escalation.json in the run's directory).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// `webhook`: the http(s) URL the packet is POSTed to.
    #[arg(long, value_name = "URL")]
    pub webhook: Option<String>,
    /// `github`: the repository, OWNER/NAME.
    #[arg(long, value_name = "OWNER/NAME")]
    pub github_repo: Option<String>,
    /// `github`: the issue or pull-request number commented on.
    #[arg(long, value_name = "N")]
    pub github_issue: Option<u64>,
    /// `github`: the API base (default https://api.github.com; GitHub Enterprise: https://HOST/api/v3).
    #[arg(long, value_name = "URL")]
    pub github_api: Option<String>,
    /// `slack`: the NAME of the environment variable holding the incoming-webhook URL
    /// (default LOOPEXEC_SLACK_WEBHOOK_URL).
    #[arg(long, value_name = "NAME")]
    pub slack_webhook_env: Option<String>,
    /// `github`: the NAME of the environment variable holding the token (default GITHUB_TOKEN).
    #[arg(long, value_name = "NAME")]
    pub github_token_env: Option<String>,
    /// The NAME of the environment variable holding the HMAC key that signs each HTTP delivery.
    #[arg(long, value_name = "NAME")]
    pub hmac_key_env: Option<String>,
}

impl ChannelArgs {
    /// The flags as settings (over loop.toml's `[escalation]`).
    pub fn settings(&self, on: Option<Vec<String>>) -> Settings {
        Settings {
            on,
            channel: self.channel.clone(),
            out: self.out.clone(),
            webhook: self.webhook.clone(),
            github_repo: self.github_repo.clone(),
            github_issue: self.github_issue,
            github_api: self.github_api.clone(),
            slack_webhook_env: self.slack_webhook_env.clone(),
            github_token_env: self.github_token_env.clone(),
            hmac_key_env: self.hmac_key_env.clone(),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (default: the latest run of the workdir).
    #[arg(value_name = "RUN_ID")]
    pub run_id: Option<String>,
    #[command(flatten)]
    pub channel: ChannelArgs,
    /// Directory holding .loopexec/ (and loop.toml).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
}

/// The flags over the workdir's loop.toml `[escalation]` table.
pub fn settings_of(workdir: &Path, flags: Settings) -> CmdResult<Settings> {
    let wd = crate::safefs::SafeDir::open(workdir)
        .map_err(|e| Failure::workspace(format!("workdir: {e}")))?;
    Ok(flags.over(config::from_loop_file(&wd)?))
}

/// The default path of the `file` channel: `escalation.json` in the run's directory.
pub fn default_out(run: &RunDir) -> PathBuf {
    run.path().join("escalation.json")
}

/// The result of one escalation: the packet, its digest and the recorded delivery.
pub struct Escalated {
    pub packet: Value,
    pub packet_sha256: String,
    pub record: Record,
}

impl Escalated {
    pub fn json(&self, with_packet: bool) -> Value {
        let mut v = json!({
            "state": "escalation_pending",
            "channel": self.record.channel,
            "target": self.record.target,
            "packet_sha256": self.packet_sha256,
            "receipt_sha256": self.record.receipt_sha256,
            "status": self.record.status,
            "attempts": self.record.attempts,
            "seq": self.record.seq,
        });
        if let (true, Some(fields)) = (with_packet, v.as_object_mut()) {
            fields.insert("packet".into(), self.packet.clone());
        }
        v
    }
}

/// Build the packet of `run`, deliver it to `target`, record the delivery. A failed delivery is
/// recorded too and returned as `delivery_failed` (exit 40) with its status and answer excerpt.
pub fn escalate(workdir: &Path, run: &RunDir, target: &Target) -> CmdResult<Escalated> {
    // A log whose chain is broken is refused before anything is sent.
    let prior = log::read(run.dir()).map_err(crate::error::fs_failure)?;
    if let Some(line) = prior.broken_at {
        return Err(Failure::workspace(format!(
            "{}: line {line} breaks its hash chain; nothing was sent",
            log::FILE
        )));
    }
    let source = ReceiptArgs {
        run_id: Some(run.id().as_str().to_string()),
        receipt: None,
        workdir: workdir.to_path_buf(),
    };
    let loaded = super::receipt_source::load(&source)?;
    let receipt_bytes = run.receipt_bytes()?;
    let receipt_sha256 = hex::encode(Sha256::digest(&receipt_bytes));
    let explained = super::explain_halt::run(super::explain_halt::Args { source }, true)?;
    let explanation = explained
        .fields
        .get("explanation")
        .cloned()
        .unwrap_or(Value::Null);
    let sealed = run.dir().exists(crate::receipt::seal::ENVELOPE_FILE);
    let state = run.read_state()?;
    let mut halt = loaded.history.halt.as_ref().map(|h| HaltFacts {
        reason: h.halt_reason,
        iteration: h.iteration,
        detail: h.detail.clone(),
    });
    // A run the comprehension gate stopped is no sealed halt, but a person must decide all the same.
    if halt.is_none() && state.state == crate::receipt::state::RunPhase::Gated {
        let detail = "the comprehension gate stopped the run (resumable, not sealed): more accepted diffs unread than --comprehension-every".to_string();
        halt = Some(HaltFacts {
            reason: crate::halt::HaltReason::ComprehensionDebtExceeded,
            iteration: state.iteration,
            detail,
        });
    }
    let input = PacketInput {
        run_id: run.id().as_str().to_string(),
        workdir: workdir.to_string_lossy().into_owned(),
        state: state.state.as_str().to_string(),
        halt,
        explanation,
        receipt_path: loaded.path.to_string_lossy().into_owned(),
        receipt_sha256: receipt_sha256.clone(),
        receipt_events: loaded.chain.events.len(),
        sealed,
        created_at: crate::timestamp::now_rfc3339(),
    };
    let built = packet::build(&input);
    let packet_sha256 = built.sha256();
    let delivery = channels::deliver(target, &built, &receipt_sha256);
    let (delivered, status, attempts, error) = match &delivery {
        Delivery::Delivered { status, attempts } => (true, *status, *attempts, None),
        Delivery::Failed(f) => {
            let status = match f {
                channels::Failure::Http(e) => e.status,
                channels::Failure::File(_) => None,
            };
            let attempts = match f {
                channels::Failure::Http(e) => e.attempts,
                channels::Failure::File(_) => 1,
            };
            (false, status, attempts, Some(f.to_string()))
        }
    };
    let record = Record {
        seq: 0,
        time: crate::timestamp::now_rfc3339(),
        run_id: input.run_id.clone(),
        packet_sha256: packet_sha256.clone(),
        receipt_sha256,
        channel: target.channel.name().to_string(),
        target: target.channel.target(),
        delivered,
        status,
        attempts,
        error: error.clone(),
        prev: String::new(),
    };
    let record = log::append(run.dir(), record).map_err(Failure::workspace)?;
    if let Some(error) = error {
        return Err(Failure::new(FailureCode::DeliveryFailed, format!("escalation over {} not delivered: {error}", target.channel.name()))
            .with_hint("the attempt is recorded in the run's escalations.jsonl; fix the channel and escalate again"));
    }
    Ok(Escalated {
        packet: built.value,
        packet_sha256,
        record,
    })
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let workdir = super::operator::absolute_workdir(&args.workdir)?;
    let statedir = StateDir::open(&workdir)?;
    let run = statedir.resolve(args.run_id.as_deref())?;
    let settings = settings_of(&workdir, args.channel.settings(None))?;
    let target = config::resolve(&settings, || default_out(&run))?;
    let stdout = matches!(target.channel, config::Channel::Stdout);
    let done = escalate(&workdir, &run, &target)?;
    let mut out = Outcome::ok("escalate");
    out.status = "escalation_pending";
    out.exit = ExitClass::ResumableJudgment;
    let human = match stdout {
        // The stdout channel's one JSON object is the packet itself.
        true => crate::inert::json_text(&done.packet).unwrap_or_default(),
        false => aligned(&[
            ("run_id", run.id().as_str().to_string()),
            ("state", "escalation_pending".into()),
            (
                "channel",
                format!("{} ({})", done.record.channel, done.record.target),
            ),
            ("packet", format!("sha256:{}", done.packet_sha256)),
            ("receipt", format!("sha256:{}", done.record.receipt_sha256)),
        ]),
    };
    Ok(out
        .field("run_id", run.id().as_str())
        .field("escalation", done.json(stdout))
        .human(human))
}
