//! One request through the gateway. [`handle`] keeps the books (access record, metrics, error
//! response); [`handle_inner`] runs the stages with `?`:
//! identify → route → authorize → check origin → rate limit → endpoint → rewrite → upstream →
//! stream (or splice an upgrade) back.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, Version, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::body::{AccessRecord, ProxyBody};
use super::error::HttpError;
use super::{ConnInfo, Front};
use crate::auth::credentials::{self, Credentials};
use crate::auth::tickets;
use crate::gateway::Gateway;
use crate::rewrite::{self, Forward};
use crate::route::{self, Route, RouteInput};
use crate::state::{ProjectState, State, UserState};
use crate::upstream::UpstreamBody;

/// Longest request target kept in the access log.
const LOG_TARGET_MAX: usize = 512;

pub async fn handle(
    gw: Arc<Gateway>,
    conn: Arc<ConnInfo>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    gw.metrics.requests.fetch_add(1, Ordering::Relaxed);
    let state = gw.state();
    let mut record = AccessRecord {
        peer: conn.peer.ip(),
        transport: conn.transport(),
        user: None,
        project: None,
        method: req.method().clone(),
        target: log_target(req.uri()),
        status: 0,
        reason: None,
        started: Instant::now(),
    };
    let mut hold = None;
    let response = match handle_inner(&gw, &state, &conn, req, &mut record, &mut hold).await {
        Ok(r) => r,
        Err(e) => {
            record.reason = Some(e.code());
            if StatusCode::from(&e).is_server_error() {
                tracing::warn!(peer = %conn.peer.ip(), project = record.project.as_deref().unwrap_or("-"), reason = e.code(), "{e}");
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
    req.uri().authority().map(|a| a.as_str()).or_else(|| {
        req.headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
    })
}

/// Server-sent event streams: long-lived, exempt from the response timeout, counted per user.
fn is_event_stream(method: &Method, path: &str) -> bool {
    method == Method::GET && (path == "/event" || path.ends_with("/event"))
}

type Hold = Option<Box<dyn std::any::Any + Send + Sync>>;

async fn handle_inner(
    gw: &Arc<Gateway>,
    state: &State,
    conn: &ConnInfo,
    mut req: Request<Incoming>,
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

    // Identify.
    let (user, ticket_project) = identify(gw, state, conn, &req, upgrade.is_some()).await?;
    record.user = Some(user.name.clone());

    // Route.
    let host = request_host(&req).map(str::to_string);
    let path = req.uri().path().to_string();
    let input = RouteInput {
        bound: conn.bound_project(),
        host: host.as_deref(),
        path: &path,
    };
    let route = route::route(
        &input,
        state.settings.server.base_domain.as_deref(),
        |n| state.projects.contains_key(n),
        state.only_project.as_deref(),
    );
    let (project, upstream_path): (Arc<ProjectState>, &str) = match route {
        Route::Project { name, path } => (state.projects[name].clone(), path),
        Route::Unknown(name) => return Err(HttpError::UnknownProject(name.to_string())),
        Route::None => return Err(HttpError::NoProject),
    };
    record.project = Some(project.name.clone());
    if let Some(p) = &ticket_project
        && **p != *project.name
    {
        return Err(HttpError::Forbidden(
            "the terminal ticket was issued for another project".into(),
        ));
    }

    // Authorize.
    let role = user
        .grants
        .role_in(&project.name)
        .ok_or_else(|| HttpError::NotGranted {
            user: user.name.to_string(),
            project: project.name.to_string(),
        })?;
    crate::authz::check(role, req.method(), upstream_path)?;

    // A browser page from elsewhere may not write or open terminals with the user's credentials.
    let unsafe_method = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if (unsafe_method || upgrade.is_some())
        && let Some(origin) = req.headers().get(header::ORIGIN)
    {
        let origin = origin.to_str().unwrap_or("null");
        if !crate::origin::allowed(
            origin,
            conn.scheme(),
            host.as_deref(),
            &state.settings.server.allowed_origins,
        ) {
            tracing::warn!(target: "security", peer = %conn.peer.ip(), user = %user.name, project = %project.name, reason = "foreign_origin", origin, "request from a foreign origin refused");
            return Err(HttpError::Forbidden(format!(
                "requests from the origin {origin} are not allowed (add it to server.allowed_origins to allow it)"
            )));
        }
    }

    // Rate limit, then a stream slot for long-lived responses.
    gw.limiters
        .request(&user.name)
        .map_err(|d| HttpError::RateLimited {
            retry_after: d.retry_after,
        })?;
    let long_lived = upgrade.is_some() || is_event_stream(req.method(), upstream_path);
    let stream_slot = if long_lived {
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

    let endpoint = project.endpoint(limits.spawn_ready_timeout).await?;

    // Rewrite.
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
    let query = rewrite::upstream_query(req.uri().query()).map(|q| q.into_owned());
    let connect_token =
        *req.method() == Method::POST && tickets::is_connect_token_path(upstream_path);
    let mut path_and_query =
        String::with_capacity(upstream_path.len() + query.as_ref().map_or(0, |q| q.len() + 1));
    path_and_query.push_str(upstream_path);
    if let Some(q) = &query {
        path_and_query.push('?');
        path_and_query.push_str(q);
    }
    let (mut parts, body) = req.into_parts();
    parts.uri = Uri::builder()
        .scheme("http")
        .authority(endpoint.authority.as_str())
        .path_and_query(path_and_query)
        .build()
        .map_err(|_| HttpError::BadRequest("the request target cannot be forwarded".into()))?;
    parts.version = Version::HTTP_11;
    rewrite::request_headers(
        &mut parts.headers,
        &Forward {
            client_ip: conn.peer.ip(),
            proto: conn.scheme(),
            original_host: host.as_deref(),
            upstream_authority: &endpoint.authority,
            upstream_auth: endpoint.auth.as_ref(),
            upgrade: upgrade.clone(),
        },
    );
    let body = if upgrade.is_some() {
        UpstreamBody::Empty
    } else {
        UpstreamBody::client(body, limits.max_body_bytes)
    };
    let upstream_req = Request::from_parts(parts, body);

    // Upstream. Streams may legitimately say nothing for a long time (the per-session event
    // stream sends no headers until its first event), so only ordinary requests are timed.
    let sent = gw.upstream.request(upstream_req);
    let result = if long_lived {
        sent.await
    } else {
        tokio::time::timeout(limits.upstream_response_timeout, sent)
            .await
            .map_err(|_| HttpError::UpstreamTimeout {
                project: project.name.to_string(),
                secs: limits.upstream_response_timeout,
            })?
    };
    let mut response = result.map_err(|e| {
        if crate::upstream::is_body_too_large(&e) {
            HttpError::PayloadTooLarge {
                max: limits.max_body_bytes,
            }
        } else {
            HttpError::UpstreamUnavailable {
                project: project.name.to_string(),
                reason: crate::upstream::describe(&e),
            }
        }
    })?;

    if response.status() == StatusCode::UNAUTHORIZED {
        tracing::error!(project = %project.name, reason = "upstream_rejected_credential", "the OpenCode server refused the gateway's credential");
        return Err(HttpError::UpstreamRejectedCredential {
            project: project.name.to_string(),
        });
    }

    if let (Some(client_upgrade), StatusCode::SWITCHING_PROTOCOLS) =
        (client_upgrade, response.status())
    {
        let upstream_upgrade = hyper::upgrade::on(&mut response);
        let abort = gw.abort.clone();
        let slot = stream_slot;
        gw.tasks.spawn(async move {
            let _slot = slot;
            let (client, upstream) = tokio::join!(client_upgrade, upstream_upgrade);
            let (Ok(client), Ok(upstream)) = (client, upstream) else {
                return;
            };
            let mut client = TokioIo::new(client);
            let mut upstream = TokioIo::new(upstream);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                _ = abort.cancelled() => {}
            }
        });
        let (mut parts, _) = response.into_parts();
        rewrite::response_headers(&mut parts.headers, true);
        if let Some(r) = &endpoint.redactor {
            r.headers(&mut parts.headers);
        }
        return Ok(Response::from_parts(parts, ProxyBody::empty()));
    }

    let (mut parts, body) = response.into_parts();
    rewrite::response_headers(&mut parts.headers, false);
    if let Some(r) = &endpoint.redactor
        && r.headers(&mut parts.headers)
    {
        tracing::warn!(target: "security", project = %project.name, reason = "upstream_reflected_credential", "a response header carried the upstream's credential; it was dropped");
    }
    if connect_token && parts.status.is_success() {
        // A few bytes of JSON: read them to learn the ticket, then pass them on unchanged.
        let bytes: Bytes = Limited::new(body, 16 * 1024)
            .collect()
            .await
            .map_err(|_| HttpError::UpstreamUnavailable {
                project: project.name.to_string(),
                reason: "the terminal ticket response was cut or too large".into(),
            })?
            .to_bytes();
        if let Some(ticket) = tickets::ticket_from_body(&bytes) {
            gw.tickets
                .insert(&ticket, user.name.clone(), project.name.clone());
        }
        let bytes = match &endpoint.redactor {
            Some(r) => r.frame(bytes),
            None => bytes,
        };
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        return Ok(Response::from_parts(parts, ProxyBody::full(bytes)));
    }
    if let Some(slot) = stream_slot {
        *hold = Some(Box::new(slot));
    }
    Ok(Response::from_parts(
        parts,
        ProxyBody::stream(body, endpoint.redactor.clone()),
    ))
}

/// The user behind a request: the SSH login for tunnels, else Basic credentials (header or
/// `auth_token`), else, for a terminal WebSocket only, a ticket this gateway relayed. Returns the
/// ticket's project when a ticket was used, so routing can check it.
async fn identify(
    gw: &Gateway,
    state: &State,
    conn: &ConnInfo,
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
            let u = crate::auth::password(gw, state, conn.peer.ip(), &user, &password).await?;
            Ok((u, None))
        }
        Some(Credentials::Bearer(_)) => Err(HttpError::BadCredentials),
        None => {
            if upgrade
                && let Some(ticket) = req
                    .uri()
                    .query()
                    .and_then(|q| crate::query::get(q, "ticket"))
                && let Some((user, project)) = gw.tickets.take(&ticket)
                && let Some(u) = state.users.get(&*user)
            {
                return Ok((u.clone(), Some(project)));
            }
            Err(HttpError::Unauthenticated)
        }
    }
}
