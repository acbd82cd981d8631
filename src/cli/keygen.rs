//! `loopexec keygen`: create the operator's long-lived Ed25519 key pair (or, with `--reviewer`,
//! a reviewer's pair for comprehension acks).

use crate::error::{CmdResult, Failure};
use crate::output::{aligned, Outcome};
use crate::receipt::keys::{default_key_dir, generate_operator_key, KeyError};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory for operator.key / operator.pub (default: $LOOPEXEC_CONFIG_DIR,
    /// $XDG_CONFIG_HOME/loopexec or ~/.config/loopexec).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Replace an existing key pair.
    #[arg(long)]
    pub force: bool,
    /// Create a reviewer's pair (reviewer.key / reviewer.pub) instead: it signs comprehension
    /// acks (`loopexec ack`), never a run; its hex public key goes to --reviewer-pubkey.
    #[arg(long)]
    pub reviewer: bool,
}

pub fn key_failure(err: KeyError) -> Failure {
    match err {
        KeyError::Exists { .. } => Failure::usage(err.to_string()),
        KeyError::NoConfigDir => Failure::usage(err.to_string()).with_hint("pass --dir"),
        // A key file that is a link, a fifo or a directory, or too long, is a malformed key file.
        KeyError::Permissions { .. }
        | KeyError::Malformed { .. }
        | KeyError::Fs(
            crate::safefs::SafeFsError::Symlink { .. }
            | crate::safefs::SafeFsError::NotRegular { .. }
            | crate::safefs::SafeFsError::TooLarge { .. },
        ) => Failure::invalid_input(err.to_string()),
        other => Failure::workspace(other.to_string()),
    }
}

pub fn run(args: Args, _json: bool) -> CmdResult<Outcome> {
    let dir = match args.dir {
        Some(d) => d,
        None => default_key_dir().map_err(key_failure)?,
    };
    let generated = match args.reviewer {
        true => crate::receipt::keys::generate_reviewer_key(&dir, args.force),
        false => generate_operator_key(&dir, args.force),
    }
    .map_err(key_failure)?;
    let mut rows = vec![
        ("private key", generated.private_key.display().to_string()),
        ("public key", generated.public_key.display().to_string()),
        ("fingerprint", generated.fingerprint.clone()),
    ];
    if args.reviewer {
        rows.push((
            "reviewer",
            format!("--reviewer-pubkey {}", generated.public_hex),
        ));
    }
    let human = aligned(&rows);
    Ok(Outcome::ok("keygen")
        .field(
            "keygen",
            serde_json::json!({
                "private_key": generated.private_key,
                "public_key": generated.public_key,
                "fingerprint": generated.fingerprint,
                "kind": if args.reviewer { "reviewer" } else { "operator" },
                "public_key_hex": generated.public_hex,
            }),
        )
        .human(human))
}
