//! Command-line flags for egress, shared by `run` and `sandbox` (flatten `EgressArgs` into their
//! clap structs). Values are validated while parsing, so a bad entry is a usage error that names it;
//! they stay strings so the caller can merge them with the policy's `[network]` table and hand
//! everything to `EgressConfig::from_parts`.

use super::resolve::ResolvePin;
use super::rule::AllowRule;
use super::upstream::UpstreamProxy;

/// `--allow-host`, `--resolve`, `--egress-proxy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct EgressArgs {
    /// Allow egress to HOST (port 443 unless given) or to every subdomain of *.DOMAIN;
    /// adds to the policy's [network] allow list. Repeatable.
    #[arg(long = "allow-host", value_name = "HOST[:PORT]", value_parser = allow_host_value)]
    pub allow_host: Vec<String>,

    /// Resolve HOST on PORT to ADDR (curl syntax) instead of asking DNS; the operator's explicit
    /// choice, so the address may be private or loopback. Repeatable.
    #[arg(long = "resolve", value_name = "HOST:PORT:ADDR", value_parser = resolve_value)]
    pub resolve: Vec<String>,

    /// Chain allowed connections through this HTTP proxy (http://host:port) with CONNECT; the
    /// allowlist is still enforced first.
    #[arg(long = "egress-proxy", value_name = "URL", value_parser = egress_proxy_value)]
    pub egress_proxy: Option<String>,
}

fn allow_host_value(text: &str) -> Result<String, String> {
    AllowRule::parse(text)
        .map(|_| text.to_string())
        .map_err(|e| e.problem)
}

fn resolve_value(text: &str) -> Result<String, String> {
    ResolvePin::parse(text)
        .map(|_| text.to_string())
        .map_err(|e| e.problem)
}

fn egress_proxy_value(text: &str) -> Result<String, String> {
    UpstreamProxy::parse(text).map(|_| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        egress: EgressArgs,
    }

    #[test]
    fn repeated_flags_collect_in_order() {
        let cli = Cli::try_parse_from([
            "x",
            "--allow-host",
            "api.example.com",
            "--allow-host",
            "*.example.org:8443",
            "--resolve",
            "api.example.com:443:127.0.0.1",
            "--egress-proxy",
            "http://127.0.0.1:3128",
        ])
        .unwrap();
        assert_eq!(
            cli.egress.allow_host,
            vec!["api.example.com", "*.example.org:8443"]
        );
        assert_eq!(cli.egress.resolve, vec!["api.example.com:443:127.0.0.1"]);
        assert_eq!(
            cli.egress.egress_proxy.as_deref(),
            Some("http://127.0.0.1:3128")
        );
    }

    #[test]
    fn a_bad_value_is_a_usage_error_naming_the_problem() {
        let err = Cli::try_parse_from(["x", "--allow-host", "a*.example.com"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(err.to_string().contains("leftmost label"), "{err}");
        assert!(Cli::try_parse_from(["x", "--resolve", "a.example:443"]).is_err());
        assert!(Cli::try_parse_from(["x", "--egress-proxy", "https://p.example"]).is_err());
    }
}
