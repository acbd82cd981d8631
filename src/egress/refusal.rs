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
pub const RETRY_UPSTREAM: &str =
    "the policy allows this destination; the upstream failed, a later retry may succeed";

/// The JSON body for `denial` of `host` (the `host:port` the client asked for, if it got that far), with
/// `allowed` the zone's allowlist. `policy`: whether the proxy refused (else an upstream failed).
pub fn body(denial: &Denial, host: Option<&str>, allowed: &[AllowRule], policy: bool) -> String {
    let listed: Vec<String> = allowed
        .iter()
        .take(MAX_ALLOWED_LISTED)
        .map(|r| printable(&r.to_string()))
        .collect();
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

/// At most this many destinations are told apart in a step's [`DeniedHost`] list; refusals of
/// any other destination are counted on the last entry, whose `host` is then null.
pub const MAX_DENIED_HOSTS: usize = 20;

/// The refusals of one destination in one step, with the reason of the first.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeniedHost {
    /// `host:port` as the client asked (printable, bounded); null for refusals before a request
    /// head, or of destinations past [`MAX_DENIED_HOSTS`].
    pub host: Option<String>,
    pub reason: String,
    pub count: u64,
}

/// Count one refusal of `host` for `reason` in `list` (bounded by [`MAX_DENIED_HOSTS`]).
pub fn count_denied(list: &mut Vec<DeniedHost>, host: Option<&str>, reason: &str) {
    let host = host.map(printable);
    if let Some(entry) = list.iter_mut().find(|d| d.host == host) {
        entry.count += 1;
        return;
    }
    if list.len() + 1 >= MAX_DENIED_HOSTS {
        match list.iter_mut().find(|d| d.host.is_none()) {
            Some(rest) => rest.count += 1,
            None => list.push(DeniedHost {
                host: None,
                reason: "(more destinations)".into(),
                count: 1,
            }),
        }
        return;
    }
    list.push(DeniedHost {
        host,
        reason: reason.to_string(),
        count: 1,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_reason_host_allowlist_and_that_retrying_is_futile() {
        let allowed: Vec<AllowRule> = (0..25)
            .map(|i| AllowRule::parse(&format!("h{i}.example:443")).unwrap())
            .collect();
        let denial = Denial::new(
            403,
            "not_allowed",
            "evil.example:443 is not in the allowlist",
        );
        let v: serde_json::Value = serde_json::from_str(&body(
            &denial,
            Some("evil.example\u{1b}[31m:443"),
            &allowed,
            true,
        ))
        .unwrap();
        assert_eq!(v["reason"], "not_allowed");
        assert_eq!(v["host"], "evil.example?[31m:443");
        assert_eq!(v["allowed"].as_array().unwrap().len(), MAX_ALLOWED_LISTED);
        assert_eq!(v["allowed"][0], "h0.example:443");
        assert_eq!(v["allowed_not_listed"], 5);
        assert_eq!(v["retry"], RETRY_FUTILE);
    }

    #[test]
    fn denied_destinations_are_counted_each_and_bounded() {
        let mut list = Vec::new();
        count_denied(&mut list, Some("a.example:443"), "no_matching_rule");
        count_denied(&mut list, Some("a.example:443"), "no_matching_rule");
        for i in 0..30 {
            count_denied(
                &mut list,
                Some(&format!("h{i}.example:443")),
                "no_matching_rule",
            );
        }
        assert_eq!(list.len(), MAX_DENIED_HOSTS);
        assert_eq!(
            list[0],
            DeniedHost {
                host: Some("a.example:443".into()),
                reason: "no_matching_rule".into(),
                count: 2
            }
        );
        let rest = list.last().unwrap();
        assert_eq!(
            (rest.host.as_deref(), rest.count),
            (None, 30 - (MAX_DENIED_HOSTS as u64 - 2))
        );
    }
}
