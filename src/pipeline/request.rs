//! The canonical request: the one reading of a request that every later stage decides on. Built
//! once, before any decision, from the request head: the host it names (one, consistent), the
//! path as OpenCode's router reads it, the project it is for and the table route it is
//! ([`Target`]), and the facts the stages decide on ([`Canonical`]): the method, the
//! credentials it offers, what a browser says of its origin, the query's facts, the declared
//! length, the upgrade. The head itself is private to this file: no stage reads it raw, and the
//! forward alone takes it back ([`Canonical::take_head`]) to rewrite it for the upstream,
//! with this reading's spelling of the path.

use std::sync::Arc;

use http::{HeaderValue, Method, header, request::Parts};

use super::ConnInfo;
use crate::auth::credentials::{self, CredentialError, Credentials};
use crate::gateway::state::{ProjectState, State};
use crate::http::error::HttpError;
use crate::policy::authz::{self, ApiRoute, Class, Extra};
use crate::policy::canonical::CanonicalPath;
use crate::policy::csrf::Browser;
use crate::policy::plan::Treatment;
use crate::policy::route::{self, Route, RouteInput};

/// Where a request goes and what it is, in OpenCode's terms.
pub struct Target {
    pub project: Arc<ProjectState>,
    /// The table route, when the path is one.
    pub route: Option<&'static ApiRoute>,
    /// The least class needed; `None`: no role may (an API route the table does not know).
    pub class: Option<Class>,
    /// The session the route names (decoded).
    pub session: Option<String>,
    /// The path to forward (no query): the spelling OpenCode reads as `route`.
    pub upstream_path: String,
    /// The file a file-path route names (decoded).
    pub file: Option<String>,
    /// Where the project's part of the path starts (after `/p/<name>`).
    path_start: usize,
    /// The upstream's API document was known when this was resolved.
    pub upstream_known: bool,
}

impl Target {
    pub(crate) fn treatment(&self) -> Treatment {
        self.route.map_or(Treatment::Plain, |r| r.treatment)
    }

    /// What the request counts as in the metrics (the web UI's files: other).
    pub(crate) fn class(&self) -> crate::policy::plan::RouteClass {
        self.route.map_or(Default::default(), |r| r.metric)
    }

    /// An OpenCode API route (as opposed to the web UI's files).
    pub(crate) fn is_api(&self) -> bool {
        self.route.is_some()
    }

    /// Its answer may be compressed: the web UI's files, and the few API routes whose answer
    /// echoes nothing of the request (`plan::COMPRESSIBLE`), decided on the resolved route.
    pub(crate) fn may_compress(&self) -> bool {
        self.route.is_none_or(|r| r.compressible)
    }

    /// The table pattern (`/session/*`) or, for the web UI's files, the path.
    pub(crate) fn label(&self) -> &str {
        self.route.map_or(&self.upstream_path, |r| r.pattern)
    }

    /// Where the route's role comes from, for a refusal (empty for table routes).
    pub(crate) fn note(&self) -> &'static str {
        match self.route {
            Some(r) => r.note(),
            None if self.unread_default() => {
                " (this OpenCode server's API document has not been read: until it is, a path the gateway's table does not know needs an operator)"
            }
            None => "",
        }
    }

    /// A GET under a root nobody lists, judged before the server's API document was read: an
    /// operator's for now (`policy::authz`); the plan judges it again once the document is read
    /// or could not be.
    pub(crate) fn unread_default(&self) -> bool {
        !self.upstream_known && self.route.is_none() && self.class == Some(Class::Operate)
    }
}

/// A request, read: for one of the gateway's own pages (whose head is the page's to read), or
/// for a project.
// Moved once per request, never stored: boxing the larger variant would cost an allocation on
// every proxied request to save bytes on the rare page.
#[allow(clippy::large_enum_variant)]
pub enum Reading {
    Page {
        page: crate::web::Page,
        parts: Parts,
        /// The host the client addressed.
        host: Option<String>,
    },
    Project {
        request: Canonical,
        /// The target, or why there is none. Kept, not returned early: an unauthenticated
        /// client learns nothing about which projects exist.
        target: Result<Target, HttpError>,
    },
}

/// The facts of a request every stage after reading decides on, each read one way, here.
pub struct Canonical {
    /// The head as it came. Private: read only through the facts below, and taken back whole
    /// only by the forward.
    head: Parts,
    /// The host the client addressed (`:authority` or the one Host header).
    pub host: Option<String>,
    /// The protocol an upgrade asks for (`websocket`).
    pub(crate) upgrade: Option<HeaderValue>,
    /// The declared body length (`Content-Length`), when there is one that reads as a number.
    pub(crate) content_length: Option<u64>,
    /// Boxed, and only when the query names one of them: most requests carry none, and the
    /// canonical request is moved from phase to phase.
    query: Option<Box<QueryFacts>>,
}

/// What the gateway decides on in the query, read in one pass with the decoding OpenCode's
/// `URLSearchParams` uses for names.
#[derive(Default)]
pub(crate) struct QueryFacts {
    /// The first `auth_token` (OpenCode's `base64(user:password)`, where a browser can't set
    /// headers), decoded.
    pub(crate) auth_token: Option<String>,
    /// The first `ticket` (a terminal ticket this gateway relayed), decoded.
    pub(crate) ticket: Option<String>,
    /// Every `path` parameter, decoded (files the request names).
    pub(crate) paths: Vec<String>,
}

impl QueryFacts {
    fn read(query: Option<&str>) -> QueryFacts {
        use crate::policy::query::{pairs, percent_decode};
        let mut facts = QueryFacts::default();
        let Some(query) = query else {
            return facts;
        };
        for (name, pair) in pairs(query) {
            let value = || pair.split_once('=').map_or("", |(_, v)| v);
            match &*name {
                "auth_token" if facts.auth_token.is_none() => {
                    facts.auth_token = Some(percent_decode(value(), false).into_owned())
                }
                "ticket" if facts.ticket.is_none() => facts.ticket = Some(percent_decode(value(), false).into_owned()),
                "path" => facts.paths.push(percent_decode(value(), true).into_owned()),
                _ => {}
            }
        }
        facts
    }

    fn is_empty(&self) -> bool {
        self.auth_token.is_none() && self.ticket.is_none() && self.paths.is_empty()
    }
}

impl Canonical {
    fn new(head: Parts, host: Option<String>) -> Canonical {
        let upgrade = crate::http::rewrite::upgrade_protocol(&head.headers);
        let content_length = head
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let query = Some(QueryFacts::read(head.uri.query()))
            .filter(|q| !q.is_empty())
            .map(Box::new);
        Canonical {
            head,
            host,
            upgrade,
            content_length,
            query,
        }
    }

    /// The first `ticket` in the query (a terminal ticket this gateway relayed), decoded.
    pub(crate) fn ticket(&self) -> Option<&str> {
        self.query.as_ref()?.ticket.as_deref()
    }

    /// Every `path` in the query, decoded: files the request names.
    pub(crate) fn query_paths(&self) -> &[String] {
        self.query.as_ref().map_or(&[], |q| &q.paths)
    }

    pub(crate) fn method(&self) -> &Method {
        &self.head.method
    }

    /// The Authorization header as sent (the connection's memo compares it byte for byte).
    pub(crate) fn authorization(&self) -> Option<&HeaderValue> {
        self.head.headers.get(header::AUTHORIZATION)
    }

    /// The credentials offered: the Authorization header's, else the query's `auth_token`.
    pub(crate) fn credentials(&self) -> Result<Option<Credentials>, CredentialError> {
        match credentials::from_headers(&self.head.headers)? {
            Some(c) => Ok(Some(c)),
            None => Ok(self
                .query
                .as_ref()
                .and_then(|q| q.auth_token.as_deref())
                .and_then(credentials::parse_basic_token)),
        }
    }

    /// What a browser says of the request's origin (for the origin rules).
    pub(crate) fn browser(&self) -> Browser<'_> {
        Browser::of(&self.head.headers)
    }

    /// A browser navigating to a page (not a script's fetch).
    pub(crate) fn wants_html(&self) -> bool {
        crate::web::page::wants_html(&self.head.headers)
    }

    /// The browser session cookie of a web front (a project host's, or a project port's own).
    pub(crate) fn session_cookie(&self, front: &crate::web::front::WebFront<'_>) -> Option<&str> {
        front.find_session(&self.head.headers)
    }

    /// The login host's cookie, which a project port receives too (cookies ignore ports).
    pub(crate) fn login_cookie(&self) -> Option<&str> {
        crate::http::cookie::find(&self.head.headers)
    }

    /// Path and query as the client sent them (where a login sends the browser back to).
    pub(crate) fn path_and_query(&self) -> &str {
        self.head.uri.path_and_query().map_or("/", |p| p.as_str())
    }

    /// The same request resolved again once the upstream's API document is known (a spawned
    /// server that was not ready when the request came): the same path, the same config, now
    /// with the document.
    pub(crate) fn resolve_again(&self, state: &State, target: &Target) -> Result<Target, HttpError> {
        let path = CanonicalPath::parse(self.head.uri.path()).map_err(HttpError::BadPath)?;
        Ok(resolve(
            state,
            target.project.clone(),
            self.method(),
            &path,
            target.path_start,
        ))
    }

    /// The head, for the forward to rewrite for the upstream; an empty head is left in its
    /// place. Taken, not moved out whole: the canonical request stays where `handle` put it and
    /// the phases borrow it (moving it through each phase's future cost about 1 % of a proxied
    /// request's instructions in copies, docs/performance.md).
    pub(crate) fn take_head(&mut self) -> Parts {
        std::mem::replace(&mut self.head, http::Request::new(()).into_parts().0)
    }
}

/// Read the request head once. Errors here are about the request's form (too long, two hosts, a
/// path OpenCode could read two ways) and come before authentication.
pub fn read(state: &State, conn: &ConnInfo, parts: Parts, max_uri_bytes: usize) -> Result<Reading, HttpError> {
    let uri_len = parts.uri.path_and_query().map_or(0, |pq| pq.as_str().len());
    if uri_len > max_uri_bytes {
        return Err(HttpError::UriTooLong { max: max_uri_bytes });
    }
    let host = request_host(&parts)?;
    let path = CanonicalPath::parse(parts.uri.path()).map_err(HttpError::BadPath)?;
    let page = crate::web::page(
        conn,
        host,
        state.settings.server.base_domain.as_deref(),
        &path,
        parts.headers.contains_key(header::AUTHORIZATION),
        state.only_project.is_some(),
    );
    let host = host.map(str::to_string);
    if let Some(page) = page {
        return Ok(Reading::Page { page, parts, host });
    }
    let target = target(state, conn, host.as_deref(), &parts.method, &path);
    drop(path);
    Ok(Reading::Project {
        request: Canonical::new(parts, host),
        target,
    })
}

fn target(
    state: &State,
    conn: &ConnInfo,
    host: Option<&str>,
    method: &Method,
    path: &CanonicalPath<'_>,
) -> Result<Target, HttpError> {
    let bound = conn.bound_project();
    let input = RouteInput {
        bound,
        host,
        segments: path.segments(),
    };
    let (name, start) = match route::route(
        &input,
        state.settings.server.base_domain.as_deref(),
        |n| state.projects.contains_key(n),
        state.only_project.as_deref(),
    ) {
        Route::Project { name, start } => (name, start),
        Route::Unknown(name) => return Err(HttpError::UnknownProject(name.to_string())),
        Route::None => return Err(HttpError::NoProject),
    };
    let project = match state.projects.get(name) {
        Some(p) => p.clone(),
        // A project's own port (or an SSH channel) outlives the project when a reload removes it.
        None if bound.is_some() => return Err(HttpError::ProjectGone(name.to_string())),
        None => return Err(HttpError::UnknownProject(name.to_string())),
    };
    // The gateway's prefix is its own on every host and every road (`/p/<name>/_gw/…` on the
    // login host, an SSH channel, a project's port): nothing under it reaches OpenCode.
    if path
        .tail(start)
        .iter()
        .find(|s| !s.is_empty())
        .is_some_and(|s| s.eq_ignore_ascii_case(crate::web::PREFIX))
    {
        return Err(HttpError::NotFound(format!(
            "/{}/ is reserved for the gateway's own pages; nothing there reaches project {name}",
            crate::web::PREFIX
        )));
    }
    Ok(resolve(state, project, method, path, start))
}

/// The table, the project's upstream's own API document and the config's `[[route_role]]`.
fn resolve(
    state: &State,
    project: Arc<ProjectState>,
    method: &Method,
    path: &CanonicalPath<'_>,
    start: usize,
) -> Target {
    let api = project.api();
    let extra = Extra {
        upstream: api.as_deref(),
        configured: &state.route_roles,
    };
    let resolved = authz::resolve_with(method, path.tail(start), extra);
    let upstream_known = api.is_some();
    drop(api);
    Target {
        project,
        route: resolved.route,
        class: resolved.class,
        session: resolved.session.map(str::to_string),
        upstream_path: resolved.upstream_path,
        file: resolved.file,
        path_start: start,
        upstream_known,
    }
}

/// The host the client addressed: `:authority` (h2) or the Host header (HTTP/1.1). Two Host
/// headers, or an authority and a Host that disagree, leave it ambiguous: refused.
fn request_host(parts: &Parts) -> Result<Option<&str>, HttpError> {
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    let header_host = hosts.next();
    if hosts.next().is_some() {
        return Err(HttpError::BadRequest(
            "the request has more than one Host header".into(),
        ));
    }
    let header_host = header_host
        .map(|h| {
            h.to_str()
                .map_err(|_| HttpError::BadRequest("the Host header is not ASCII".into()))
        })
        .transpose()?;
    match (parts.uri.authority().map(|a| a.as_str()), header_host) {
        (Some(a), Some(h)) if !a.eq_ignore_ascii_case(h) => Err(HttpError::BadRequest(
            "the request's authority and Host header disagree".into(),
        )),
        (Some(a), _) => Ok(Some(a)),
        (None, h) => Ok(h),
    }
}

#[cfg(test)]
mod tests {
    use super::QueryFacts;
    use crate::policy::query;
    use proptest::prelude::*;

    /// Query parts a hostile client would mix: the names the gateway decides on, their encoded
    /// and cased spellings, empty and repeated pairs, `+` and `%` escapes in values.
    fn part() -> impl Strategy<Value = String> {
        let name = prop::sample::select(vec![
            "auth_token",
            "ticket",
            "path",
            "auth%5Ftoken",
            "tick%65t",
            "pa%74h",
            "Path",
            "TICKET",
            "directory",
            "",
        ]);
        let value = prop::sample::select(vec!["", "a", "a+b", "%2Fetc%2Fpasswd", "x%zz", "=", "c3Vl:cHc", "%00"]);
        (name, value, any::<bool>()).prop_map(|(n, v, eq)| if eq { format!("{n}={v}") } else { n.to_string() })
    }

    proptest! {
        /// The one-pass reading agrees with the query helpers the rest of the gateway (and the
        /// fuzz targets) use: the first `auth_token` and `ticket` as `query::get` reads them,
        /// and every `path`, in order, decoded as a form value.
        #[test]
        fn the_query_facts_are_what_the_query_says(parts in prop::collection::vec(part(), 0..8)) {
            let q = parts.join("&");
            let facts = QueryFacts::read(Some(&q));
            let (auth_token, ticket) = (query::get(&q, "auth_token"), query::get(&q, "ticket"));
            prop_assert_eq!(facts.auth_token.as_deref(), auth_token.as_deref());
            prop_assert_eq!(facts.ticket.as_deref(), ticket.as_deref());
            let paths: Vec<String> = query::pairs(&q)
                .filter(|(n, _)| n == "path")
                .map(|(_, p)| query::percent_decode(p.split_once('=').map_or("", |(_, v)| v), true).into_owned())
                .collect();
            prop_assert_eq!(facts.paths, paths);
        }
    }

    #[test]
    fn no_query_has_no_facts() {
        let facts = QueryFacts::read(None);
        assert!(facts.auth_token.is_none() && facts.ticket.is_none() && facts.paths.is_empty());
        let facts = QueryFacts::read(Some("path=a&pa%74h=b+c&ticket=t1&ticket=t2&auth_token=x%3D"));
        assert_eq!(facts.paths, ["a", "b c"]);
        assert_eq!(
            facts.ticket.as_deref(),
            Some("t1"),
            "the first ticket, as OpenCode's reader"
        );
        assert_eq!(facts.auth_token.as_deref(), Some("x="));
    }
}
