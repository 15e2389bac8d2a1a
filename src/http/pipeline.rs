//! One request through the gateway. [`handle`] keeps the books (access record, metrics, error
//! response); [`handle_inner`] runs the stages with `?`:
//! identify → route → authorize → origin → rate limit → scope → [`super::forward`].

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use http::{Method, Request, Response, StatusCode, Uri, header};
use hyper::body::Incoming;

use super::body::{AccessRecord, ProxyBody};
use super::error::HttpError;
use super::forward::{self, Forwarding};
use super::{ConnInfo, Front};
use crate::auth::credentials::{self, Credentials};
use crate::gateway::Gateway;
use crate::policy::route::{self, Route, RouteInput};
use crate::rewrite;
use crate::state::{ProjectState, State, UserState};

/// Longest request target kept in the access log.
const LOG_TARGET_MAX: usize = 512;

pub type Hold = Option<Box<dyn std::any::Any + Send + Sync>>;

pub async fn handle(
    gw: Arc<Gateway>,
    conn: Arc<ConnInfo>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    gw.metrics.requests.fetch_add(1, Ordering::Relaxed);
    let state = gw.state();
    let client = crate::client_addr::client_ip(conn.peer.ip(), req.headers(), &state.settings.server.trusted_proxies);
    let mut record = AccessRecord {
        peer: client,
        transport: conn.transport(),
        user: None,
        project: None,
        method: req.method().clone(),
        // Only built when access lines are written (RUST_LOG can turn them off).
        target: if tracing::enabled!(target: "access", tracing::Level::INFO) {
            log_target(req.uri())
        } else {
            String::new()
        },
        status: 0,
        reason: None,
        started: Instant::now(),
    };
    let mut hold = None;
    let response = match handle_inner(&gw, &state, &conn, client, req, &mut record, &mut hold).await {
        Ok(r) => r,
        Err(e) => {
            record.reason = Some(e.code());
            if StatusCode::from(&e).is_server_error() {
                tracing::warn!(peer = %client, project = record.project.as_deref().unwrap_or("-"), reason = e.code(), "{e}");
            }
            e.into_response()
        }
    };
    record.status = response.status().as_u16();
    gw.metrics.count_status(record.status);
    let (parts, body) = response.into_parts();
    Ok(Response::from_parts(parts, body.metered(record, hold)))
}

fn log_target(uri: &Uri) -> String {
    let mut t = uri.path().to_string();
    if let Some(q) = uri.query() {
        t.push('?');
        t.push_str(&rewrite::loggable_query(q));
    }
    if t.len() > LOG_TARGET_MAX {
        let mut cut = LOG_TARGET_MAX;
        while !t.is_char_boundary(cut) {
            cut -= 1;
        }
        t.truncate(cut);
        t.push('…');
    }
    t
}

/// The host the client addressed: `:authority` (h2) or the Host header (HTTP/1.1).
fn request_host(req: &Request<Incoming>) -> Option<&str> {
    req.uri()
        .authority()
        .map(|a| a.as_str())
        .or_else(|| req.headers().get(header::HOST).and_then(|h| h.to_str().ok()))
}

/// Server-sent event streams: long-lived, exempt from the response timeout, counted per user.
fn is_event_stream(method: &Method, path: &str) -> bool {
    method == Method::GET && (path == "/event" || path.ends_with("/event"))
}

async fn handle_inner(
    gw: &Arc<Gateway>,
    state: &State,
    conn: &ConnInfo,
    client: IpAddr,
    req: Request<Incoming>,
    record: &mut AccessRecord,
    hold: &mut Hold,
) -> Result<Response<ProxyBody>, HttpError> {
    let limits = &gw.limits;
    let uri_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if uri_len > limits.max_uri_bytes {
        return Err(HttpError::UriTooLong {
            max: limits.max_uri_bytes,
        });
    }
    let upgrade = rewrite::upgrade_protocol(req.headers());

    let (user, ticket_project) = identify(gw, state, conn, client, &req, upgrade.is_some()).await?;
    record.user = Some(user.name.clone());

    let host = request_host(&req).map(str::to_string);
    if matches!(conn.front, Front::Ssh { .. }) && !host.as_deref().is_some_and(crate::policy::origin::is_local_host) {
        tracing::warn!(target: "security", peer = %conn.peer.ip(), user = %user.name, reason = "foreign_host_over_ssh", "a request through an SSH tunnel named a non-local host");
        return Err(HttpError::Forbidden(
            "through an SSH tunnel, use http://127.0.0.1:<local port> or http://localhost:<local port>".into(),
        ));
    }
    let path = req.uri().path().to_string();
    let (project, upstream_path) = route_request(state, conn, host.as_deref(), &path)?;
    record.project = Some(project.name.clone());
    if let Some(p) = &ticket_project
        && **p != *project.name
    {
        return Err(HttpError::Forbidden(
            "the terminal ticket was issued for another project".into(),
        ));
    }

    let role = user
        .grants
        .role_in(&project.name)
        .ok_or_else(|| HttpError::NotGranted {
            user: user.name.to_string(),
            project: project.name.to_string(),
        })?;
    crate::policy::authz::check(role, req.method(), upstream_path)?;
    check_origin(state, conn, &req, host.as_deref(), upgrade.is_some(), &user, &project)?;

    gw.limiters.request(&user.name).map_err(|d| HttpError::RateLimited {
        retry_after: d.retry_after,
    })?;
    let long_lived = upgrade.is_some() || is_event_stream(req.method(), upstream_path);
    // An SSH channel already holds the user's stream slot for everything it carries.
    let stream_slot = if long_lived && !matches!(conn.front, Front::Ssh { .. }) {
        Some(
            gw.streams
                .try_acquire(user.name.clone(), limits.max_streams_per_user)
                .ok_or(HttpError::TooManyStreams {
                    max: limits.max_streams_per_user,
                })?,
        )
    } else {
        None
    };
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        && len > limits.max_body_bytes
    {
        return Err(HttpError::PayloadTooLarge {
            max: limits.max_body_bytes,
        });
    }
    if project.config.directory.is_some() && crate::policy::pin::is_workspace_switch(req.method(), upstream_path) {
        return Err(HttpError::Forbidden(format!(
            "{} {upstream_path} would leave project {}'s directory; workspaces are not available through the gateway",
            req.method(),
            project.name
        )));
    }

    let endpoint = project.endpoint(limits.spawn_ready_timeout).await?;
    if project.shared_upstream
        && let Some(id) = crate::policy::scope::session_id(upstream_path)
    {
        forward::check_session_scope(gw, &project, &endpoint, id).await?;
    }
    let upstream_path = upstream_path.to_string();
    forward::forward(Forwarding {
        gw,
        conn,
        client,
        project: &project,
        endpoint: &endpoint,
        user: &user,
        req,
        upstream_path: &upstream_path,
        host: host.as_deref(),
        upgrade,
        long_lived,
        stream_slot,
        hold,
    })
    .await
}

fn route_request<'a>(
    state: &'a State,
    conn: &'a ConnInfo,
    host: Option<&'a str>,
    path: &'a str,
) -> Result<(Arc<ProjectState>, &'a str), HttpError> {
    let input = RouteInput {
        bound: conn.bound_project(),
        host,
        path,
    };
    let route = route::route(
        &input,
        state.settings.server.base_domain.as_deref(),
        |n| state.projects.contains_key(n),
        state.only_project.as_deref(),
    );
    match route {
        Route::Project { name, path } => Ok((state.projects[name].clone(), path)),
        Route::Unknown(name) => Err(HttpError::UnknownProject(name.to_string())),
        Route::None => Err(HttpError::NoProject),
    }
}

/// A browser page from elsewhere may not write or open terminals with the user's credentials
/// (browsers attach cached Basic credentials to any request to the gateway's origin).
fn check_origin(
    state: &State,
    conn: &ConnInfo,
    req: &Request<Incoming>,
    host: Option<&str>,
    upgrade: bool,
    user: &UserState,
    project: &ProjectState,
) -> Result<(), HttpError> {
    let unsafe_method = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return Ok(());
    };
    if !unsafe_method && !upgrade {
        return Ok(());
    }
    let origin = origin.to_str().unwrap_or("null");
    if crate::policy::origin::allowed(origin, conn.scheme(), host, &state.settings.server.allowed_origins) {
        return Ok(());
    }
    tracing::warn!(target: "security", peer = %conn.peer.ip(), user = %user.name, project = %project.name, reason = "foreign_origin", origin, "request from a foreign origin refused");
    Err(HttpError::Forbidden(format!(
        "requests from the origin {origin} are not allowed (add it to server.allowed_origins to allow it)"
    )))
}

/// The user behind a request: the SSH login for tunnels, else Basic credentials (header or
/// `auth_token`), else, for a terminal WebSocket only, a ticket this gateway relayed. Returns the
/// ticket's project when a ticket was used, so routing can check it.
async fn identify(
    gw: &Gateway,
    state: &State,
    conn: &ConnInfo,
    client: IpAddr,
    req: &Request<Incoming>,
    upgrade: bool,
) -> Result<(Arc<UserState>, Option<Arc<str>>), HttpError> {
    if let Front::Ssh { user, .. } = &conn.front {
        return state
            .users
            .get(&**user)
            .cloned()
            .map(|u| (u, None))
            .ok_or_else(|| HttpError::Forbidden(format!("user {user} no longer exists")));
    }
    let creds = match credentials::from_headers(req.headers()) {
        Ok(Some(c)) => Some(c),
        Ok(None) => credentials::from_query(req.uri().query()),
        Err(e) => return Err(HttpError::MalformedCredentials(e.to_string())),
    };
    match creds {
        Some(Credentials::Basic { user, password }) => {
            let u = crate::auth::password(gw, state, client, &user, &password).await?;
            Ok((u, None))
        }
        Some(Credentials::Bearer(_)) => Err(HttpError::BadCredentials),
        None => {
            if upgrade
                && let Some(ticket) = req.uri().query().and_then(|q| crate::policy::query::get(q, "ticket"))
                && let Some((user, project)) = gw.tickets.take(&ticket)
                && let Some(u) = state.users.get(&*user)
            {
                return Ok((u.clone(), Some(project)));
            }
            Err(HttpError::Unauthenticated)
        }
    }
}
