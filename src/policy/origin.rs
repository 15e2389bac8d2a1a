//! Browser origins. A browser attaches a site's cached Basic credentials to any request it makes to
//! that site, even one a malicious page started, so writes and WebSocket upgrades are accepted only
//! from the gateway's own origin (the one the request is addressed to) or from configured origins.

use crate::config::{Project, Settings};

/// `scheme://host[:port]` lower-cased, with the scheme's default port removed.
pub fn normalize(origin: &str) -> Option<String> {
    let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    let (scheme, rest) = origin.split_once("://")?;
    if rest.is_empty() || rest.contains('/') || rest.contains('@') {
        return None;
    }
    let default = match scheme {
        "https" => ":443",
        "http" => ":80",
        _ => return None,
    };
    let rest = rest.strip_suffix(default).unwrap_or(rest);
    Some(format!("{scheme}://{rest}"))
}

/// May a request carrying `origin`, addressed to `host` over `scheme`, act on this gateway?
pub fn allowed(origin: &str, scheme: &str, host: Option<&str>, extra: &[String]) -> bool {
    let Some(origin) = normalize(origin) else {
        return false;
    };
    if let Some(own) = host.and_then(|h| normalize(&format!("{scheme}://{h}")))
        && own == origin
    {
        return true;
    }
    extra.iter().any(|o| normalize(o).is_some_and(|o| o == origin))
}

/// Is `host` (a Host header) a name for this machine? Over an SSH tunnel the client reaches the
/// gateway through its own local port, so only loopback names are real; anything else is a
/// web page that rebound its own domain to that port (DNS rebinding) and rides the tunnel.
pub fn is_local_host(host: &str) -> bool {
    let h = crate::policy::route::strip_port(host)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    h == "localhost" || h.ends_with(".localhost") || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The origins browsers use for a project through this gateway (for the spawned server's `--cors`).
pub(crate) fn project_origins(settings: &Settings, project: &Project) -> Vec<String> {
    let reach = crate::reach::Reach::new(settings, Some(settings.server.listen.port()));
    let mut out = vec![reach.base().to_string()];
    out.extend(reach.web_ui_origin(&project.name));
    if let Some(l) = project.listen {
        let host = settings
            .server
            .public_url
            .strip_prefix("https://")
            .map(crate::policy::route::strip_port)
            .unwrap_or("localhost");
        out.push(format!("https://{host}:{}", l.port()));
    }
    out.extend(settings.server.allowed_origins.iter().cloned());
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_are_local() {
        for h in [
            "127.0.0.1:4096",
            "localhost:4096",
            "[::1]:4096",
            "web.localhost",
            "127.1.2.3",
        ] {
            assert!(is_local_host(h), "{h}");
        }
        for h in ["evil.example:4096", "192.168.1.2:4096", "localhost.evil.example", ""] {
            assert!(!is_local_host(h), "{h}");
        }
    }

    #[test]
    fn own_origin_is_allowed_and_others_are_not() {
        let host = Some("web.gw.localhost:8443");
        assert!(allowed("https://web.gw.localhost:8443", "https", host, &[]));
        assert!(allowed("HTTPS://Web.GW.localhost:8443/", "https", host, &[]));
        assert!(!allowed("https://evil.example", "https", host, &[]));
        assert!(
            !allowed("http://web.gw.localhost:8443", "https", host, &[]),
            "scheme matters"
        );
        assert!(!allowed("null", "https", host, &[]));
        assert!(!allowed("https://web.gw.localhost:8443", "https", None, &[]));
        assert!(allowed(
            "https://phone.example",
            "https",
            host,
            &["https://phone.example:443".into()]
        ));
        assert!(allowed("https://gw.example", "https", Some("gw.example:443"), &[]));
    }
}
