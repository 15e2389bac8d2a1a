//! Which project a request is for, from (in this order) the front door it came through (a project's
//! own port or an SSH forward), its host (`<project>.<base_domain>`), its canonical path
//! (`/p/<project>/…`, prefix stripped), or the only project there is. Pure: no I/O, no state.

use std::borrow::Cow;

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// A configured project, and the index of the first path segment the upstream sees (after a
    /// `/p/<name>` prefix).
    Project { name: &'a str, start: usize },
    /// It names a project that does not exist.
    Unknown(&'a str),
    /// It names no project, and there is more than one.
    None,
}

pub struct RouteInput<'a> {
    /// The project a listener or SSH channel is bound to.
    pub bound: Option<&'a str>,
    /// The Host header or `:authority`, possibly with a port.
    pub host: Option<&'a str>,
    /// The canonical path's segments (decoded; see `canonical`).
    pub segments: &'a [Cow<'a, str>],
}

pub fn route<'a>(
    input: &RouteInput<'a>,
    base_domain: Option<&str>,
    is_project: impl Fn(&str) -> bool,
    only_project: Option<&'a str>,
) -> Route<'a> {
    if let Some(bound) = input.bound {
        return Route::Project { name: bound, start: 0 };
    }
    if let (Some(host), Some(domain)) = (input.host, base_domain)
        && let Some(label) = host_label(host, domain)
    {
        return if is_project(label) {
            Route::Project { name: label, start: 0 }
        } else {
            Route::Unknown(label)
        };
    }
    // `/p/<name>/…`, read on the decoded segments like everything else.
    let mut nonempty = input.segments.iter().enumerate().filter(|(_, s)| !s.is_empty());
    if let Some((_, first)) = nonempty.next()
        && first == "p"
    {
        let (start, name) = match nonempty.next() {
            Some((i, name)) => (i + 1, name.as_ref()),
            None => (input.segments.len(), ""),
        };
        return if is_project(name) {
            Route::Project { name, start }
        } else {
            Route::Unknown(name)
        };
    }
    match only_project {
        Some(name) => Route::Project { name, start: 0 },
        None => Route::None,
    }
}

/// `web` from `web.gw.localhost:8443` when the base domain is `gw.localhost`. Host names compare
/// case-insensitively; a name with more labels than one below the base domain is not a project.
pub(crate) fn host_label<'h>(host: &'h str, domain: &str) -> Option<&'h str> {
    let host = strip_port(host);
    if host.len() <= domain.len() + 1 {
        return None;
    }
    // A byte count from the end may fall inside a character of a name that is not ASCII (found
    // by the fuzz target): such a name is no project's host.
    let at = host.len() - domain.len() - 1;
    if !host.is_char_boundary(at) {
        return None;
    }
    let (label, rest) = host.split_at(at);
    if !rest.starts_with('.') || !rest[1..].eq_ignore_ascii_case(domain) || label.contains('.') {
        return None;
    }
    // Project names are lower-case; a host label is compared as the browser sends it, lower-cased.
    if label.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    Some(label)
}

/// The host without its port (`[::1]:8443` → `[::1]`).
pub(crate) fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |i| &host[..=i]);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::canonical::CanonicalPath;

    /// The fuzz target's finding: the label's end counted in bytes fell inside `\u{6df}`.
    #[test]
    fn a_host_whose_label_ends_inside_a_character_is_no_project() {
        assert_eq!(host_label("a\u{6df}x", "x"), None);
        assert_eq!(host_label("w&:\u{6df}{\0\0lauth_tot\n/", "lauth_tot\n/"), None);
        assert_eq!(
            host_label("\u{e9}t\u{e9}.gw.localhost", "gw.localhost"),
            Some("\u{e9}t\u{e9}")
        );
        assert_eq!(host_label("web.gw.localhost:8443", "gw.localhost"), Some("web"));
    }

    fn r<'a>(
        bound: Option<&'a str>,
        host: Option<&'a str>,
        path: &'a str,
        only: Option<&'a str>,
    ) -> (Route<'a>, String) {
        let parsed = Box::leak(Box::new(CanonicalPath::parse(path).unwrap()));
        let route = route(
            &RouteInput {
                bound,
                host,
                segments: parsed.segments(),
            },
            Some("gw.localhost"),
            |n| n == "web" || n == "api",
            only,
        );
        let rest = match route {
            Route::Project { start, .. } => parsed.tail(start).join("/"),
            _ => String::new(),
        };
        (route, rest)
    }

    fn project(name: &str, start: usize) -> Route<'_> {
        Route::Project { name, start }
    }

    #[test]
    fn path_prefix_is_stripped() {
        assert_eq!(
            r(None, None, "/p/web/session", None),
            (project("web", 2), "session".into())
        );
        assert_eq!(r(None, None, "/p/web", None), (project("web", 2), String::new()));
        assert_eq!(r(None, None, "/p/web/", None), (project("web", 2), String::new()));
        assert_eq!(r(None, None, "//p//web//x", None), (project("web", 4), "/x".into()));
        assert_eq!(r(None, None, "/%70/w%65b/x", None), (project("web", 2), "x".into()));
        assert_eq!(r(None, None, "/p/nope/x", None).0, Route::Unknown("nope"));
        assert_eq!(r(None, None, "/p/WEB/x", None).0, Route::Unknown("WEB"));
        assert_eq!(r(None, None, "/p", None).0, Route::Unknown(""));
        assert_eq!(r(None, None, "/session", None).0, Route::None);
    }

    #[test]
    fn host_routes_the_web_ui() {
        assert_eq!(
            r(None, Some("web.gw.localhost:8443"), "/assets/a.js", None).0,
            project("web", 0)
        );
        assert_eq!(r(None, Some("api.GW.localhost"), "/", None).0, project("api", 0));
        assert_eq!(r(None, Some("x.web.gw.localhost"), "/", None).0, Route::None);
        assert_eq!(r(None, Some("nope.gw.localhost"), "/", None).0, Route::Unknown("nope"));
        assert_eq!(
            r(None, Some("gw.localhost"), "/p/api/x", None),
            (project("api", 2), "x".into())
        );
        assert_eq!(r(None, Some("evilgw.localhost"), "/", None).0, Route::None);
    }

    #[test]
    fn a_bound_front_door_wins_and_a_single_project_takes_the_rest() {
        assert_eq!(
            r(Some("api"), Some("web.gw.localhost"), "/p/web/x", None),
            (project("api", 0), "p/web/x".into())
        );
        assert_eq!(
            r(None, Some("127.0.0.1:8443"), "/global/event", Some("web")).0,
            project("web", 0)
        );
    }

    #[test]
    fn ports_are_stripped_from_hosts() {
        assert_eq!(strip_port("a.b:80"), "a.b");
        assert_eq!(strip_port("[::1]:8443"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("a.b"), "a.b");
    }
}
