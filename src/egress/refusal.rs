//! What a client of the proxy reads when it is refused: a short JSON body an agent can act on
//! (docs/egress.md, "Refusals the agent reads"): why, which host, what the zone's policy allows
//! (bounded), and that retrying the same destination through another route is futile.

use super::decision::Denial;
use super::request::printable;
use super::rule::AllowRule;

/// At most this many allowlist entries are listed in a refusal; the rest are counted.
pub const MAX_ALLOWED_LISTED: usize = 20;

/// The advice of a policy refusal: every route out of the zone goes through this proxy.
pub const RETRY_FUTILE: &str = "futile: every connection out of this zone passes this proxy and its policy; another route (another proxy, a direct connection, an IP address, DNS over HTTPS) is refused the same way and each attempt is recorded in the run's receipt";
/// The advice of an upstream failure on an allowed destination.
pub const RETRY_UPSTREAM: &str = "the policy allows this destination; the upstream failed, a later retry may succeed";

/// The JSON body for `denial` of `host` (the `host:port` the client asked for, if it got that far), with
/// `allowed` the zone's allowlist. `policy`: whether the proxy refused (else an upstream failed).
pub fn body(denial: &Denial, host: Option<&str>, allowed: &[AllowRule], policy: bool) -> String {
    let listed: Vec<String> = allowed.iter().take(MAX_ALLOWED_LISTED).map(|r| printable(&r.to_string())).collect();
    let value = serde_json::json!({
        "loopexec_egress": if policy { "denied" } else { "upstream_error" },
        "reason": denial.reason,
        "detail": printable(&denial.detail),
        "host": host.map(printable),
        "allowed": listed,
        "allowed_not_listed": allowed.len().saturating_sub(MAX_ALLOWED_LISTED),
        "retry": if policy { RETRY_FUTILE } else { RETRY_UPSTREAM },
    });
    format!("{value}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_reason_host_allowlist_and_that_retrying_is_futile() {
        let allowed: Vec<AllowRule> = (0..25).map(|i| AllowRule::parse(&format!("h{i}.example:443")).unwrap()).collect();
        let denial = Denial::new(403, "not_allowed", "evil.example:443 is not in the allowlist");
        let v: serde_json::Value = serde_json::from_str(&body(&denial, Some("evil.example\u{1b}[31m:443"), &allowed, true)).unwrap();
        assert_eq!(v["reason"], "not_allowed");
        assert_eq!(v["host"], "evil.example?[31m:443");
        assert_eq!(v["allowed"].as_array().unwrap().len(), MAX_ALLOWED_LISTED);
        assert_eq!(v["allowed"][0], "h0.example:443");
        assert_eq!(v["allowed_not_listed"], 5);
        assert_eq!(v["retry"], RETRY_FUTILE);
    }
}
