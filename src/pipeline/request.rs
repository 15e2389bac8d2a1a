//! The canonical request: the one reading of a request that every later stage decides on. Built
//! once, before any decision, from the request head: the host it names (one, consistent), the
//! path as OpenCode's router reads it, the project it is for, and the table route it is.
//! Nothing after this reads the raw path again; what is forwarded is this reading's spelling.

use std::sync::Arc;

use http::{HeaderValue, Method, header, request::Parts};

use super::ConnInfo;
use crate::gateway::state::{ProjectState, State};
use crate::http::error::HttpError;
use crate::policy::authz::{self, ApiRoute, Class, Extra};
use crate::policy::canonical::CanonicalPath;
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
        self.route.map_or("", |r| r.note())
    }

    /// Resolve again once the upstream's API document is known (a spawned server that was not
    /// ready when the request came): the same path, the same config, now with the document.
    pub(crate) fn with_upstream_api(
        &self,
        state: &State,
        method: &Method,
        raw_path: &str,
    ) -> Result<Target, HttpError> {
        let path = CanonicalPath::parse(raw_path).map_err(HttpError::BadPath)?;
        Ok(resolve(state, self.project.clone(), method, &path, self.path_start))
    }
}

pub struct Reading {
    /// The host the client addressed (`:authority` or the one Host header).
    pub host: Option<String>,
    /// The protocol an upgrade asks for (`websocket`).
    pub upgrade: Option<HeaderValue>,
    /// The target, or why there is none. Kept, not returned early: an unauthenticated client
    /// learns nothing about which projects exist.
    pub target: Result<Target, HttpError>,
    /// The gateway's own page this is for, if any (then `target` is not used).
    pub page: Option<crate::web::Page>,
}

/// Read the request head once. Errors here are about the request's form (two hosts, a path
/// OpenCode could read two ways) and come before authentication.
pub fn read(state: &State, conn: &ConnInfo, parts: &Parts) -> Result<Reading, HttpError> {
    let host = request_host(parts)?;
    let path = CanonicalPath::parse(parts.uri.path()).map_err(HttpError::BadPath)?;
    let upgrade = crate::http::rewrite::upgrade_protocol(&parts.headers);
    let page = crate::web::page(
        conn,
        host,
        state.settings.server.base_domain.as_deref(),
        &path,
        parts.headers.contains_key(header::AUTHORIZATION),
        state.only_project.is_some(),
    );
    let target = target(state, conn, host, &parts.method, &path);
    Ok(Reading {
        host: host.map(str::to_string),
        upgrade,
        target,
        page,
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
