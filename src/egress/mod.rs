//! Egress for the agent zone: an allowlist proxy that runs in the oracle zone (the loopexec
//! process) and serves a TCP listener the sandbox created inside the agent zone's network
//! namespace. See docs/egress.md for the design and the policy syntax.
//!
//! - `rule`: allowlist entries and host-name normalisation (IDNA, case, trailing dot).
//! - `addr`: which addresses are public; private, loopback, metadata... are refused by default.
//! - `resolve`: the `Resolver` trait, system and fixed resolvers, `--resolve` pins.
//! - `config`: `EgressConfig` built from the policy and the command line.
//! - `decision`: allowlist -> resolution -> address check, for one destination.
//! - `request`: reading and parsing a bounded proxy request head.
//! - `body`: where a forwarded request's body ends (one request per connection).
//! - `sni`: the TLS ClientHello of a CONNECT tunnel to port 443 must name the CONNECT host.
//! - `relay`: copying bytes both ways under the byte budget and the idle timeout.
//! - `upstream`: chaining through the operator's proxy.
//! - `refusal`: the JSON body of the proxy's refusals (reason, host, allowlist, retry advice).
//! - `proxy`: the accept loop, per-connection handling, caps, stop.
//! - `audit`: the JSONL audit log, its digest and summary, refusals aggregated past a few per step.
//! - `args`: `--allow-host`, `--resolve`, `--egress-proxy` for clap.
//! - `env`: the proxy variables a zone's environment gets.
pub mod addr;
pub mod args;
pub mod audit;
pub mod body;
pub mod config;
pub mod decision;
pub mod env;
pub mod proxy;
pub mod refusal;
pub mod relay;
pub mod request;
pub mod resolve;
pub mod rule;
pub mod sni;
pub mod upstream;

pub use args::EgressArgs;
pub use audit::{AuditDigest, AuditLog, AuditRecord, Decision, EgressSummary};
pub use config::{EgressConfig, EgressError, Limits, WildcardShape};
pub use env::proxy_env;
pub use proxy::{Proxy, ProxyHandle, ProxyStats};
pub use resolve::{FixedResolver, Resolver, SystemResolver};
pub use rule::AllowRule;
