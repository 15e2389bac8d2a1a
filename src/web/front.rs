//! Which browser front a request arrived at: the login host, or one project's web UI, either as
//! `<project>.<base_domain>` on the main listener (host mode) or on the project's own port (port
//! mode, for a LAN without wildcard DNS: the phone needs only the gateway's address). The one place
//! that decides it, so the cookie a front reads, the cookie names it sets and the handoff target
//! it accepts cannot disagree.
//!
//! Browsers do not isolate cookies by port (RFC 6265 §8.5): every port of `192.168.1.20` sees
//! every cookie of that host. A project port therefore uses cookie names of its own
//! (`__Host-ocgw-p-<project>`), so no port overwrites another's, and a session it accepts must have
//! been handed off to exactly its project ([`crate::auth::sessions::Live::host`]); a cookie minted on
//! the login port or for another project's port is refused there. Scripts on a sibling port are
//! the same site but not the same origin, so the cross-site rule (Sec-Fetch-Site, Origin exactly)
//! refuses their writes as it refuses a sibling host's.
//!
//! Names keep ports from overwriting each other by accident, not an attacker from planting. A
//! sibling port is another project's web UI, whose content a user of that project (or an agent)
//! may control. Its script can create a cookie of any name for the host name, `__Host-` ones
//! included (they forbid `Domain`, not other ports), whenever the browser holds no HttpOnly
//! cookie of that name; it can read none of the gateway's cookies (all HttpOnly) and cannot
//! overwrite one the browser holds; its pages can send the browser anywhere on the host name
//! (same site: SameSite=Lax cookies go along). The gateway strips its cookie names from what an
//! upstream sets. So any value its maker knows can be planted where the browser has none: bob's
//! own port cookie, or the handoff state of a handoff bob began with the ticket the login host
//! minted for him, would log alice's browser in to the project as bob (login CSRF). What a
//! sibling cannot touch is the login cookie the browser already holds, and every port of the
//! host name receives it. So on a project port the login cookie says whose browser this is: a
//! port's session counts only beside the login session it was handed off from
//! (`pipeline/identify.rs`), and the callback redeems a ticket only beside the login session it
//! was minted in (`web/handoff.rs`), the state cookie still binding it to this port's flow.
//! Limit: a browser holding no login cookie (never logged in, logged out, or its cookie evicted
//! by a flood of cookies) can be given the attacker's login cookie itself and is then the attacker
//! everywhere on that host name, the portal included, which shows who is logged in; no cookie
//! scheme on one shared host name prevents that (host mode, a host name per project, does).

use crate::http::transport::{ConnInfo, Front};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WebFront<'a> {
    /// The main listener on a name that is not a project host: the login host's pages.
    Login,
    /// A project's web UI.
    Project { name: &'a str, own_port: bool },
    /// An SSH channel: no browser cookies at all.
    Ssh,
}

/// The front of a request on `conn` addressed to `host`.
pub(crate) fn of<'a>(conn: &'a ConnInfo, host: Option<&'a str>, base_domain: Option<&str>) -> WebFront<'a> {
    match &conn.front {
        Front::Ssh { .. } => WebFront::Ssh,
        Front::Tls { bound: Some(name) } => WebFront::Project { name, own_port: true },
        Front::Tls { bound: None } => match (host, base_domain) {
            (Some(h), Some(d)) => match crate::policy::route::host_label(h, d) {
                Some(name) => WebFront::Project { name, own_port: false },
                None => WebFront::Login,
            },
            _ => WebFront::Login,
        },
    }
}

impl WebFront<'_> {
    /// The session cookie's name here.
    pub(crate) fn session_cookie(&self) -> std::borrow::Cow<'static, str> {
        match self {
            WebFront::Project { name, own_port: true } => format!("{}-p-{name}", crate::http::cookie::NAME).into(),
            _ => crate::http::cookie::NAME.into(),
        }
    }

    /// The session cookie's value in `headers` (exactly once), read without building its name:
    /// this runs for every browser request to a project front.
    pub(crate) fn find_session<'h>(&self, headers: &'h http::HeaderMap) -> Option<&'h str> {
        let base = crate::http::cookie::NAME;
        match self {
            WebFront::Project { name, own_port: true } => crate::http::cookie::find_matching(headers, |n| {
                n.strip_prefix(base).and_then(|r| r.strip_prefix("-p-")) == Some(*name)
            }),
            _ => crate::http::cookie::find_named(headers, base),
        }
    }

    /// The handoff state cookie's name here.
    pub(crate) fn handoff_cookie(&self) -> std::borrow::Cow<'static, str> {
        match self {
            WebFront::Project { name, own_port: true } => {
                format!("{}-p-{name}", crate::http::cookie::HANDOFF_STATE).into()
            }
            _ => crate::http::cookie::HANDOFF_STATE.into(),
        }
    }

    /// A project's own port (port mode), where the login cookie of the same host name arrives too.
    pub(crate) fn own_port(&self) -> bool {
        matches!(self, WebFront::Project { own_port: true, .. })
    }

    /// The project whose web UI this is.
    pub(crate) fn project(&self) -> Option<&str> {
        match self {
            WebFront::Project { name, .. } => Some(name),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn conn(front: Front) -> ConnInfo {
        ConnInfo::new("198.18.0.2:5000".parse().unwrap(), front)
    }

    #[test]
    fn a_project_port_has_cookie_names_of_its_own_and_hosts_share_the_plain_ones() {
        let main = conn(Front::Tls { bound: None });
        let port = conn(Front::Tls {
            bound: Some(Arc::from("demo")),
        });
        let login = of(&main, Some("198.18.0.1:8443"), None);
        assert_eq!(login, WebFront::Login);
        assert_eq!(login.session_cookie(), "__Host-ocgw");
        let host = of(&main, Some("demo.gw.localhost:8443"), Some("gw.localhost"));
        assert_eq!(
            host,
            WebFront::Project {
                name: "demo",
                own_port: false
            }
        );
        assert_eq!(host.session_cookie(), "__Host-ocgw");
        let own = of(&port, Some("198.18.0.1:8444"), Some("gw.localhost"));
        assert_eq!(
            own,
            WebFront::Project {
                name: "demo",
                own_port: true
            }
        );
        assert_eq!(own.session_cookie(), "__Host-ocgw-p-demo");
        assert_eq!(own.handoff_cookie(), "__Host-ocgw-handoff-p-demo");
        // Read without building the name: exactly this port's, exactly once.
        let jar = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::COOKIE, v.parse().unwrap());
            h
        };
        let cookies = jar("__Host-ocgw=login; __Host-ocgw-p-demox=x; __Host-ocgw-p-demo=mine");
        assert_eq!(own.find_session(&cookies), Some("mine"));
        assert_eq!(login.find_session(&cookies), Some("login"));
        assert_eq!(
            own.find_session(&jar("__Host-ocgw-p-demo=a; __Host-ocgw-p-demo=b")),
            None
        );
        assert_eq!(
            own.find_session(&jar("__Host-ocgw-p-dem=a; __host-ocgw-p-demo=b")),
            None
        );
        // The Host header does not move a request off its port's project.
        let lying = of(&port, Some("api.gw.localhost:8444"), Some("gw.localhost"));
        assert_eq!(lying.project(), Some("demo"));
    }
}
