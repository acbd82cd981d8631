//! The environment that points a zone's programs at the proxy listener inside their namespace.

/// `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (and lowercase) set to `http://127.0.0.1:port`, and
/// `NO_PROXY` / `no_proxy` covering loopback, for the zone whose listener is on `port`.
pub fn proxy_env(port: u16) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let no_proxy = "localhost,127.0.0.1,::1".to_string();
    let mut vars = Vec::with_capacity(8);
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        vars.push((name.to_string(), url.clone()));
        vars.push((name.to_ascii_lowercase(), url.clone()));
    }
    vars.push(("NO_PROXY".to_string(), no_proxy.clone()));
    vars.push(("no_proxy".to_string(), no_proxy));
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_proxy_variable_points_at_the_loopback_listener() {
        let vars = proxy_env(3128);
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        for name in [
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            assert_eq!(get(name), Some("http://127.0.0.1:3128"), "{name}");
        }
        assert_eq!(get("NO_PROXY"), Some("localhost,127.0.0.1,::1"));
        assert_eq!(get("no_proxy"), Some("localhost,127.0.0.1,::1"));
        assert_eq!(vars.len(), 8);
    }
}
