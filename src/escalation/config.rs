//! Where an escalation goes and with which secrets: loop.toml's `[escalation]` table under the
//! command's flags ([`Settings::over`]), resolved into a [`Target`] whose secrets (the Slack
//! webhook URL, the GitHub token, the HMAC key) are read from environment variables named in
//! the settings, never from argv. A missing or empty variable, a missing or non-http(s) URL, an
//! unknown channel or an unknown `on` reason is a usage error (exit 20) that names the setting or
//! the variable, never a secret's value; nothing is sent or written then.

use crate::error::Failure;
use crate::halt::{ExitClass, HaltReason};
use crate::safefs::SafeDir;
use crate::secret::Secret;
use serde::Deserialize;
use std::path::PathBuf;

/// The default API base of the `github` channel (GitHub Enterprise: `https://HOST/api/v3`).
pub const GITHUB_API: &str = "https://api.github.com";
/// The variable holding the Slack incoming-webhook URL when none is named.
pub const SLACK_WEBHOOK_ENV: &str = "LOOPEXEC_SLACK_WEBHOOK_URL";
/// The variable holding the GitHub token when none is named.
pub const GITHUB_TOKEN_ENV: &str = "GITHUB_TOKEN";

/// loop.toml's `[escalation]` table (also the merged settings of flags over it).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `run`: the halt reasons (or classes) that escalate automatically.
    pub on: Option<Vec<String>>,
    pub channel: Option<String>,
    pub out: Option<PathBuf>,
    pub webhook: Option<String>,
    pub github_repo: Option<String>,
    pub github_issue: Option<u64>,
    pub github_api: Option<String>,
    pub slack_webhook_env: Option<String>,
    pub github_token_env: Option<String>,
    pub hmac_key_env: Option<String>,
}

impl Settings {
    /// These settings (flags) over `file`'s: a value given here wins.
    pub fn over(self, file: Settings) -> Settings {
        Settings {
            on: self.on.or(file.on),
            channel: self.channel.or(file.channel),
            out: self.out.or(file.out),
            webhook: self.webhook.or(file.webhook),
            github_repo: self.github_repo.or(file.github_repo),
            github_issue: self.github_issue.or(file.github_issue),
            github_api: self.github_api.or(file.github_api),
            slack_webhook_env: self.slack_webhook_env.or(file.slack_webhook_env),
            github_token_env: self.github_token_env.or(file.github_token_env),
            hmac_key_env: self.hmac_key_env.or(file.hmac_key_env),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct OnlyEscalation {
    escalation: Option<Settings>,
}

/// The `[escalation]` table of the workdir's loop.toml (none without the file or the table). The
/// rest of the file is `run`'s to validate; a malformed table is `invalid_input` (exit 20).
pub fn from_loop_file(workdir: &SafeDir) -> Result<Settings, Failure> {
    let bytes = match workdir.read("loop.toml", 1024 * 1024) {
        Ok(bytes) => bytes,
        Err(e) if e.is_not_found() => return Ok(Settings::default()),
        Err(e) => return Err(Failure::invalid_input(format!("loop.toml: {e}"))),
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| Failure::invalid_input("loop.toml: not valid UTF-8"))?;
    let parsed: OnlyEscalation = toml::from_str(&text).map_err(|e| {
        Failure::invalid_input(format!("loop.toml [escalation]: {}", e.message().trim()))
    })?;
    let mut settings = parsed.escalation.unwrap_or_default();
    // The file channel's path in loop.toml is relative to the workdir.
    if let Some(out) = settings.out.as_mut().filter(|o| o.is_relative()) {
        *out = workdir.path().join(&*out);
    }
    Ok(settings)
}

/// What `on` matched: a halt reason by its name, or every reason of a class by the class's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    Reason(HaltReason),
    Class(ExitClass),
}

/// The `on` list parsed: each entry a halt reason's snake_case name or an exit class's
/// (`budget`, `liveness_drift`, ...); anything else is exit 20 naming it.
pub fn triggers(on: &[String]) -> Result<Vec<Trigger>, Failure> {
    on.iter()
        .flat_map(|s| s.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|name| {
            if let Some(r) = HaltReason::ALL.iter().find(|r| r.as_str() == name) {
                return Ok(Trigger::Reason(*r));
            }
            let class = HaltReason::ALL.iter().map(|r| r.class()).find(|c| {
                serde_json::to_value(c)
                    .ok()
                    .and_then(|v| v.as_str().map(|s| s == name))
                    == Some(true)
            });
            class.map(Trigger::Class).ok_or_else(|| {
                Failure::usage(format!(
                    "escalate-on: `{}` is neither a halt reason nor an exit class",
                    crate::inert::inert(name)
                ))
                .with_hint("use the snake_case names of SPEC.md §2, e.g. budget_exceeded or budget")
            })
        })
        .collect()
}

/// Whether `reason` is one `triggers` escalates on.
pub fn triggered(triggers: &[Trigger], reason: HaltReason) -> bool {
    triggers.iter().any(|t| match t {
        Trigger::Reason(r) => *r == reason,
        Trigger::Class(c) => *c == reason.class(),
    })
}

/// A resolved channel, its secrets read.
#[derive(Debug)]
pub enum Channel {
    File {
        out: PathBuf,
    },
    Stdout,
    Webhook {
        url: String,
    },
    Slack {
        url: Secret,
        env: String,
    },
    Github {
        api: String,
        repo: String,
        issue: u64,
        token: Secret,
        env: String,
    },
}

impl Channel {
    pub fn name(&self) -> &'static str {
        match self {
            Channel::File { .. } => "file",
            Channel::Stdout => "stdout",
            Channel::Webhook { .. } => "webhook",
            Channel::Slack { .. } => "slack",
            Channel::Github { .. } => "github",
        }
    }

    /// Where it went, in words that carry no secret (recorded in escalations.jsonl).
    pub fn target(&self) -> String {
        match self {
            Channel::File { out } => out.display().to_string(),
            Channel::Stdout => "stdout".into(),
            Channel::Webhook { url } => url.clone(),
            Channel::Slack { env, .. } => format!("${env}"),
            Channel::Github {
                api, repo, issue, ..
            } => format!("{api} {repo}#{issue}"),
        }
    }
}

/// A resolved target: the channel and, with `hmac_key_env`, the signing key.
#[derive(Debug)]
pub struct Target {
    pub channel: Channel,
    pub hmac_key: Option<(Secret, String)>,
}

/// The value of the variable `name`, or exit 20 naming it (never its value).
pub fn secret_env(name: &str, what: &str) -> Result<Secret, Failure> {
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(Failure::usage(format!(
            "{what}: `{}` is not an environment variable name",
            crate::inert::inert(name)
        )));
    }
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Ok(Secret::new(v)),
        _ => Err(Failure::usage(format!(
            "{what}: the environment variable {name} is not set (or empty)"
        ))
        .with_hint(format!(
            "export {name}=... in the environment of loopexec; secrets are never taken from argv"
        ))),
    }
}

fn http_url(url: &str, what: &str) -> Result<(), Failure> {
    match super::http::is_http_url(url) {
        true => Ok(()),
        false => Err(Failure::usage(format!(
            "{what}: only http:// and https:// URLs are accepted"
        ))),
    }
}

/// Resolve `settings` into a target; `out_default` is the file channel's default path.
pub fn resolve(
    settings: &Settings,
    out_default: impl FnOnce() -> PathBuf,
) -> Result<Target, Failure> {
    let channel = settings
        .channel
        .as_deref()
        .ok_or_else(|| Failure::usage("no escalation channel: pass --channel file|stdout|webhook|slack|github or set [escalation] channel"))?;
    let channel = match channel {
        "file" => Channel::File {
            out: settings.out.clone().unwrap_or_else(out_default),
        },
        "stdout" => Channel::Stdout,
        "webhook" => {
            let url = settings.webhook.clone().ok_or_else(|| {
                Failure::usage("--channel webhook needs --webhook URL (or [escalation] webhook)")
            })?;
            http_url(&url, "--webhook")?;
            Channel::Webhook { url }
        }
        "slack" => {
            let env = settings
                .slack_webhook_env
                .clone()
                .unwrap_or_else(|| SLACK_WEBHOOK_ENV.into());
            let url = secret_env(&env, "the Slack webhook URL")?;
            http_url(url.expose(), &format!("the Slack webhook URL in ${env}"))?;
            Channel::Slack { url, env }
        }
        "github" => {
            let repo = settings.github_repo.clone().ok_or_else(|| {
                Failure::usage(
                    "--channel github needs --github-repo OWNER/NAME (or [escalation] github_repo)",
                )
            })?;
            let valid_part = |p: &str| {
                !p.is_empty()
                    && p.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                    && p != "."
                    && p != ".."
            };
            match repo.split_once('/') {
                Some((o, n)) if valid_part(o) && valid_part(n) => {}
                _ => {
                    return Err(Failure::usage(format!(
                        "--github-repo: `{}` is not OWNER/NAME",
                        crate::inert::inert(&repo)
                    )))
                }
            }
            let issue = settings.github_issue.filter(|n| *n > 0).ok_or_else(|| {
                Failure::usage(
                    "--channel github needs --github-issue N (or [escalation] github_issue), N > 0",
                )
            })?;
            let api = settings
                .github_api
                .clone()
                .unwrap_or_else(|| GITHUB_API.into());
            http_url(&api, "github_api")?;
            let env = settings
                .github_token_env
                .clone()
                .unwrap_or_else(|| GITHUB_TOKEN_ENV.into());
            let token = secret_env(&env, "the GitHub token")?;
            Channel::Github {
                api: api.trim_end_matches('/').to_string(),
                repo,
                issue,
                token,
                env,
            }
        }
        other => {
            return Err(Failure::usage(format!(
                "--channel: `{}` is not one of file, stdout, webhook, slack, github",
                crate::inert::inert(other)
            )))
        }
    };
    let hmac_key = match &settings.hmac_key_env {
        Some(env) => Some((secret_env(env, "the HMAC key")?, env.clone())),
        None => None,
    };
    Ok(Target { channel, hmac_key })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_accepts_reason_and_class_names_and_refuses_others() {
        let t = triggers(&["budget_exceeded, liveness_drift".into()]).unwrap();
        assert_eq!(
            t,
            vec![
                Trigger::Reason(HaltReason::BudgetExceeded),
                Trigger::Class(ExitClass::LivenessDrift)
            ]
        );
        assert!(triggered(&t, HaltReason::HeartbeatStale));
        assert!(!triggered(&t, HaltReason::CostAnomaly));
        let err = triggers(&["budget_exeeded".into()]).unwrap_err();
        assert_eq!(err.class().code(), 20);
        assert!(err.message.contains("budget_exeeded"), "{}", err.message);
    }

    #[test]
    fn a_non_http_webhook_is_a_usage_error() {
        let s = Settings {
            channel: Some("webhook".into()),
            webhook: Some("file:///etc/passwd".into()),
            ..Settings::default()
        };
        assert_eq!(resolve(&s, PathBuf::new).unwrap_err().class().code(), 20);
    }

    #[test]
    fn flags_win_over_the_loop_file() {
        let flags = Settings {
            channel: Some("stdout".into()),
            ..Settings::default()
        };
        let file = Settings {
            channel: Some("file".into()),
            webhook: Some("http://h/".into()),
            ..Settings::default()
        };
        let merged = flags.over(file);
        assert_eq!(merged.channel.as_deref(), Some("stdout"));
        assert_eq!(merged.webhook.as_deref(), Some("http://h/"));
    }
}
