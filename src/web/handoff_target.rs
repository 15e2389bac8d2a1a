//! Which handoff targets the login host hands a ticket for (web/handoff.rs has the ticket's
//! rules): a project host of the base domain on this port, a project's own port on the same host
//! name, or the gateway's named host (web/handoff_named.rs) at exactly its origin. Pure parsing,
//! apart from the pages, so both handoffs read targets the one way.

use super::form;

/// The port of a `host[:port]` (443 when none).
pub(crate) fn port_of(host: &str) -> u16 {
    let h = crate::policy::route::strip_port(host);
    host[h.len()..]
        .strip_prefix(':')
        .and_then(|p| p.parse().ok())
        .unwrap_or(443)
}

/// Why a handoff target is refused (a stable code for logs and tests).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BadTarget {
    NotHttps,
    NotAProjectHost,
    OtherPort,
    BadPath,
}

/// Read a handoff target: `https://<project>.<base_domain>[:port]/path` on this gateway's port.
/// Returns the authority, the project and the path.
pub(crate) fn parse_target<'a>(
    to: &'a str,
    base_domain: &str,
    port: u16,
) -> Result<(&'a str, &'a str, &'a str), BadTarget> {
    let (authority, path) = split_target(to)?;
    let project = crate::policy::route::host_label(authority, base_domain).ok_or(BadTarget::NotAProjectHost)?;
    if port_of(authority) != port {
        return Err(BadTarget::OtherPort);
    }
    Ok((authority, project, path))
}

/// Read a handoff target asked for on the login host `here` (its Host header): a project host
/// (see [`parse_target`]), a project's own port on the same host name as `here` (port mode,
/// `web/front.rs`), or the named host `named` when given ([`named_target`]: the project is
/// then empty). Returns the authority, the project and the path.
pub(crate) fn target<'a>(
    to: &'a str,
    here: &str,
    base_domain: Option<&str>,
    named: Option<&str>,
    ports: &crate::reach::BoundPorts,
) -> Result<(&'a str, String, &'a str), BadTarget> {
    if let Some(n) = named
        && let Some(read) = named_target(to, n)
    {
        return read.map(|path| (split_target(to).map_or("", |(a, _)| a), String::new(), path));
    }
    if let Some(d) = base_domain
        && let Ok((authority, project, path)) = parse_target(to, d, port_of(here))
    {
        return Ok((authority, project.to_string(), path));
    }
    let (authority, path) = split_target(to)?;
    if let Some(d) = base_domain
        && crate::policy::route::host_label(authority, d).is_some()
    {
        return Err(BadTarget::OtherPort);
    }
    let same_name =
        crate::policy::route::strip_port(authority).eq_ignore_ascii_case(crate::policy::route::strip_port(here));
    let project = ports
        .project_on(port_of(authority))
        .filter(|_| same_name)
        .ok_or(BadTarget::NotAProjectHost)?;
    Ok((authority, project.to_string(), path))
}

/// `https://authority/path` → the authority and the path (`/` when empty), refusing user info,
/// backslashes and any path that is not a plain local one.
fn split_target(to: &str) -> Result<(&str, &str), BadTarget> {
    let rest = to.strip_prefix("https://").ok_or(BadTarget::NotHttps)?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() || authority.contains(['@', '\\']) {
        return Err(BadTarget::NotAProjectHost);
    }
    let path = if path.is_empty() { "/" } else { path };
    if form::local_path(path) != path || path.contains('#') {
        return Err(BadTarget::BadPath);
    }
    Ok((authority, path))
}

/// Read a handoff target naming the named host `named` (`https://<name>[:port]`): exactly its
/// origin (host in any case, the same port) and the portal's path (`/`, with a query at most).
/// `None`: the target names another host (the other rules apply). Returns the path.
pub(crate) fn named_target<'a>(to: &'a str, named: &str) -> Option<Result<&'a str, BadTarget>> {
    let (authority, path) = match split_target(to) {
        Ok(parts) => parts,
        Err(e) => return Some(Err(e)),
    };
    let named = named.strip_prefix("https://").unwrap_or(named);
    let name = crate::policy::route::strip_port(named);
    if !crate::policy::route::strip_port(authority).eq_ignore_ascii_case(name) {
        return None;
    }
    // The port as the origin spells it (`:08443` and `:443` are no spelling of it).
    Some(if !authority.eq_ignore_ascii_case(named) {
        Err(BadTarget::OtherPort)
    } else if path != "/" && !path.starts_with("/?") {
        Err(BadTarget::BadPath)
    } else {
        Ok(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reach::BoundPorts;

    #[test]
    fn only_this_gateways_project_hosts_on_its_port_are_targets() {
        let d = "gw.localhost";
        assert_eq!(
            parse_target("https://web.gw.localhost:8443/x?y=1", d, 8443),
            Ok(("web.gw.localhost:8443", "web", "/x?y=1"))
        );
        assert_eq!(parse_target("https://web.gw.localhost:8443", d, 8443).unwrap().2, "/");
        assert_eq!(parse_target("https://web.gw.localhost/", d, 443).unwrap().1, "web");
        let refused = [
            ("http://web.gw.localhost:8443/", BadTarget::NotHttps),
            ("//web.gw.localhost:8443/", BadTarget::NotHttps),
            ("https://evil.example/", BadTarget::NotAProjectHost),
            ("https://gw.localhost:8443/", BadTarget::NotAProjectHost),
            ("https://a.b.gw.localhost:8443/", BadTarget::NotAProjectHost),
            (
                "https://web.gw.localhost.evil.example:8443/",
                BadTarget::NotAProjectHost,
            ),
            (
                "https://web.gw.localhost:8443@evil.example/",
                BadTarget::NotAProjectHost,
            ),
            (
                "https://evil.example\\@web.gw.localhost:8443/",
                BadTarget::NotAProjectHost,
            ),
            ("https://web.gw.localhost:9443/", BadTarget::OtherPort),
            ("https://web.gw.localhost:8443//evil.example/", BadTarget::BadPath),
            ("https://web.gw.localhost:8443/#frag", BadTarget::BadPath),
        ];
        for (to, want) in refused {
            assert_eq!(parse_target(to, d, 8443), Err(want), "{to}");
        }
    }

    #[test]
    fn a_project_port_is_a_target_only_on_the_same_host_name_and_a_bound_port() {
        let ports = crate::reach::BoundPorts {
            main: 8443,
            projects: vec![("demo".into(), 8444), ("api".into(), 8445)],
            http: None,
        };
        let here = "198.18.0.1:8443";
        assert_eq!(
            target("https://198.18.0.1:8444/s?x=1", here, None, None, &ports),
            Ok(("198.18.0.1:8444", "demo".to_string(), "/s?x=1"))
        );
        assert_eq!(
            target("https://198.18.0.1:8445", here, None, None, &ports).unwrap().1,
            "api"
        );
        for (to, want) in [
            ("https://198.18.0.1:8443/", BadTarget::NotAProjectHost),
            ("https://198.18.0.1:9999/", BadTarget::NotAProjectHost),
            ("https://198.18.0.9:8444/", BadTarget::NotAProjectHost),
            ("https://evil.example:8444/", BadTarget::NotAProjectHost),
            ("https://198.18.0.1:8444@evil.example/", BadTarget::NotAProjectHost),
            ("http://198.18.0.1:8444/", BadTarget::NotHttps),
            ("https://198.18.0.1:8444//evil.example/", BadTarget::BadPath),
        ] {
            assert_eq!(target(to, here, None, None, &ports), Err(want), "{to}");
        }
        // With a base domain, project hosts keep their rules and ports work beside them.
        let d = Some("gw.localhost");
        assert_eq!(
            target("https://web.gw.localhost:8443/", "gw.localhost:8443", d, None, &ports)
                .unwrap()
                .1,
            "web"
        );
        assert_eq!(
            target("https://web.gw.localhost:9443/", "gw.localhost:8443", d, None, &ports),
            Err(BadTarget::OtherPort)
        );
        assert_eq!(
            target("https://gw.localhost:8444/", "gw.localhost:8443", d, None, &ports)
                .unwrap()
                .1,
            "demo"
        );
    }

    const NAMED: &str = "https://devbox.local:8443";

    fn ports() -> BoundPorts {
        BoundPorts {
            main: 8443,
            projects: vec![("demo".into(), 8444)],
            http: None,
        }
    }

    /// From the address: the named host's exact origin, its portal only.
    fn from_address(to: &str) -> Result<(&str, String, &str), BadTarget> {
        target(to, "192.168.1.20:8443", None, Some(NAMED), &ports())
    }

    #[test]
    fn the_named_host_is_a_target_only_at_its_exact_origin_and_portal() {
        assert_eq!(
            from_address("https://devbox.local:8443/"),
            Ok(("devbox.local:8443", String::new(), "/"))
        );
        assert_eq!(from_address("https://devbox.local:8443").unwrap().2, "/");
        assert_eq!(from_address("https://DevBox.LOCAL:8443/?x=1").unwrap().2, "/?x=1");
        let refused = [
            ("https://other.local:8443/", BadTarget::NotAProjectHost),
            ("https://devbox.local.evil:8443/", BadTarget::NotAProjectHost),
            ("https://devbox.local.:8443/", BadTarget::NotAProjectHost),
            ("https://xdevbox.local:8443/", BadTarget::NotAProjectHost),
            ("https://devbox%2elocal:8443/", BadTarget::NotAProjectHost),
            ("https://devbox.local:8443@evil.example/", BadTarget::NotAProjectHost),
            ("https://evil.example@devbox.local:8443/", BadTarget::NotAProjectHost),
            ("https://devbox.local:8443\\@evil.example/", BadTarget::NotAProjectHost),
            ("https://devbox.local\\evil.example:8443/", BadTarget::NotAProjectHost),
            ("http://devbox.local:8443/", BadTarget::NotHttps),
            ("//devbox.local:8443/", BadTarget::NotHttps),
            ("https://devbox.local:9443/", BadTarget::OtherPort),
            ("https://devbox.local/", BadTarget::OtherPort),
            ("https://devbox.local:08443/", BadTarget::OtherPort),
            // A project's own port on the name is not the named origin.
            ("https://devbox.local:8444/", BadTarget::OtherPort),
            ("https://devbox.local:8443//evil.example/", BadTarget::BadPath),
            ("https://devbox.local:8443/../x", BadTarget::BadPath),
            ("https://devbox.local:8443/login", BadTarget::BadPath),
            ("https://devbox.local:8443/_gw/callback", BadTarget::BadPath),
            ("https://devbox.local:8443/#frag", BadTarget::BadPath),
        ];
        for (to, want) in refused {
            assert_eq!(from_address(to), Err(want), "{to}");
        }
    }

    #[test]
    fn without_a_named_host_or_on_it_the_other_rules_stand() {
        // No named host (a login host by name, or a certificate without the name): refused.
        assert_eq!(
            target("https://devbox.local:8443/", "192.168.1.20:8443", None, None, &ports()),
            Err(BadTarget::NotAProjectHost)
        );
        // The address's project ports stay targets beside it.
        assert_eq!(from_address("https://192.168.1.20:8444/").unwrap().1, "demo");
        // On the named host (which passes no named origin): its own project ports, as before.
        assert_eq!(
            target("https://devbox.local:8444/", "devbox.local:8443", None, None, &ports())
                .unwrap()
                .1,
            "demo"
        );
    }

    #[test]
    fn any_target_string_is_answered_without_a_panic() {
        // Property: whatever follows `https://`, the parser answers, and accepts only the exact
        // named origin's portal.
        let pieces = [
            "devbox.local",
            "DEVBOX.local",
            ":8443",
            ":08443",
            ":8444",
            ":",
            "@",
            "\\",
            "/",
            "//",
            "?",
            "#",
            "%2e",
            ".",
            "é",
            "evil",
            "..",
            "x",
        ];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let to = format!("https://{a}{b}{c}");
                    if let Some(Ok(_)) = named_target(&to, NAMED) {
                        let rest = to["https://".len()..].to_ascii_lowercase();
                        let after = rest.strip_prefix("devbox.local:8443");
                        assert!(
                            after.is_some_and(|a| a.is_empty() || a == "/" || a.starts_with("/?")),
                            "{to} accepted"
                        );
                    }
                }
            }
        }
    }
}
