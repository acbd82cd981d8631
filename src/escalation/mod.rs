//! Escalation: telling a person that a run needs them. A structured packet
//! (`loopexec.escalation/v1`, [`packet`]) is delivered over one channel ([`channels`]: a file,
//! stdout, a webhook, Slack, a GitHub comment) through a bounded HTTP client ([`http`]), signed
//! with an HMAC when a key is configured ([`signature`]), and each delivery is recorded in the
//! run's append-only, hash-chained `escalations.jsonl` ([`log`]). Every string of the run that a
//! packet or a chat message carries is bounded and neutralised first ([`text`]). Where the
//! channels' settings and secrets come from (loop.toml's `[escalation]`, flags naming environment
//! variables) is [`config`]. This module computes no halt and imports no engine: the command
//! that escalates hands it the verdict it already computed.

pub mod channels;
pub mod config;
pub mod http;
pub mod log;
pub mod packet;
pub mod signature;
pub mod text;
