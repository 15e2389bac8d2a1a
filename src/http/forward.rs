//! The last stages: rewrite the request for the upstream (credentials, forwarding headers,
//! directory pinning, checked bodies), send it on the pooled client, and bring the response back
//! (streamed, filtered for a shared upstream, or an upgrade spliced both ways).

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, Version, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::ConnInfo;
use super::body::ProxyBody;
use super::error::HttpError;
use super::pipeline::Hold;
use crate::auth::tickets;
use crate::gateway::Gateway;
use crate::ratelimit::SlotGuard;
use crate::rewrite::{self, Forward};
use crate::state::{ProjectState, UserState};
use crate::upstream::endpoint::Endpoint;
use crate::upstream::{ClientBodyFault, UpstreamBody};

/// Bodies the gateway reads whole (directory checks, tickets, listings) are small JSON.
const SMALL_BODY: usize = 1024 * 1024;
const LISTING_BODY: usize = 16 * 1024 * 1024;

pub struct Forwarding<'a> {
    pub gw: &'a Arc<Gateway>,
    pub conn: &'a ConnInfo,
    /// The client's address (after trusted proxies).
    pub client: IpAddr,
    pub project: &'a Arc<ProjectState>,
    pub endpoint: &'a Arc<Endpoint>,
    pub user: &'a UserState,
    pub req: Request<Incoming>,
    pub upstream_path: &'a str,
    pub host: Option<&'a str>,
    pub upgrade: Option<HeaderValue>,
    pub long_lived: bool,
    pub stream_slot: Option<SlotGuard<Arc<str>>>,
    pub hold: &'a mut Hold,
}

fn unavailable(project: &ProjectState, reason: impl Into<String>) -> HttpError {
    HttpError::UpstreamUnavailable {
        project: project.name.to_string(),
        reason: reason.into(),
    }
}

pub async fn forward(f: Forwarding<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let Forwarding {
        gw,
        conn,
        client,
        project,
        endpoint,
        user,
        mut req,
        upstream_path,
        host,
        upgrade,
        long_lived,
        stream_slot,
        hold,
    } = f;
    let limits = &gw.limits;
    let pinned = project.config.directory.as_deref();
    let method = req.method().clone();
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
    let query = rewrite::upstream_query(req.uri().query(), pinned.is_some()).map(|q| q.into_owned());
    let mut path_and_query = String::with_capacity(upstream_path.len() + query.as_ref().map_or(0, |q| q.len() + 1));
    path_and_query.push_str(upstream_path);
    if let Some(q) = &query {
        path_and_query.push('?');
        path_and_query.push_str(q);
    }
    let (mut parts, body) = req.into_parts();
    // Origin form: the connection already goes to the upstream, and Host names it.
    parts.uri = Uri::builder()
        .path_and_query(path_and_query)
        .build()
        .map_err(|_| HttpError::BadRequest("the request target cannot be forwarded".into()))?;
    parts.version = Version::HTTP_11;
    rewrite::request_headers(
        &mut parts.headers,
        &Forward {
            client_ip: client,
            proto: conn.scheme(),
            original_host: host,
            upstream_host: &endpoint.host_header,
            upstream_origin: &endpoint.origin_header,
            upstream_auth: endpoint.auth.as_ref(),
            upgrade: upgrade.clone(),
        },
    );
    if let Some(dir) = &project.dir_header {
        crate::policy::pin::pin_headers(&mut parts.headers, dir);
    }
    let body = match (pinned, crate::policy::pin::body_rule(&method, upstream_path)) {
        _ if upgrade.is_some() => UpstreamBody::Empty,
        (Some(root), Some(rule)) => {
            let bytes = Limited::new(body, SMALL_BODY)
                .collect()
                .await
                .map_err(|_| HttpError::BadRequest("the request body is cut or larger than 1 MiB".into()))?
                .to_bytes();
            crate::policy::pin::check_body(&bytes, &rule, root).map_err(|why| {
                tracing::warn!(target: "security", peer = %client, user = %user.name, project = %project.name, reason = "directory_outside_project", "{why}");
                HttpError::Forbidden(why)
            })?;
            UpstreamBody::Full(Some(bytes))
        }
        _ => UpstreamBody::client(body, limits.max_body_bytes, limits.body_idle_timeout),
    };
    let upstream_req = Request::from_parts(parts, body);

    // Streams may legitimately say nothing for a long time (the per-session event stream sends
    // no headers until its first event), so only ordinary requests are timed.
    let sent = endpoint.pool.send(upstream_req, limits.upstream_connect_timeout);
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
    let (mut response, lease) = result.map_err(|e| match crate::upstream::client_body_fault(&*e) {
        Some(ClientBodyFault::TooLarge) => HttpError::PayloadTooLarge {
            max: limits.max_body_bytes,
        },
        Some(ClientBodyFault::Idle) => HttpError::BodyTimeout {
            secs: limits.body_idle_timeout,
        },
        None => unavailable(project, crate::upstream::describe(&*e)),
    })?;

    if response.status() == StatusCode::UNAUTHORIZED {
        tracing::error!(project = %project.name, reason = "upstream_rejected_credential", "the OpenCode server refused the gateway's credential");
        return Err(HttpError::UpstreamRejectedCredential {
            project: project.name.to_string(),
        });
    }

    if let (Some(client_upgrade), StatusCode::SWITCHING_PROTOCOLS) = (client_upgrade, response.status()) {
        let upstream_upgrade = hyper::upgrade::on(&mut response);
        splice(gw, client_upgrade, upstream_upgrade, stream_slot);
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
    let success = parts.status.is_success();

    // Small bodies the gateway must read: a PTY ticket to remember, listings to scope.
    let ticket = method == Method::POST && tickets::is_connect_token_path(upstream_path);
    let listing = match (project.shared_upstream, &method, upstream_path) {
        (true, &Method::GET, "/project") => {
            Some(crate::policy::scope::filter_projects as fn(&[u8], &std::path::Path) -> Option<Vec<u8>>)
        }
        (true, &Method::GET, "/experimental/session") => Some(crate::policy::scope::filter_sessions as _),
        _ => None,
    };
    if success && (ticket || listing.is_some()) {
        let max = if ticket { SMALL_BODY } else { LISTING_BODY };
        let mut bytes: Bytes = Limited::new(body, max)
            .collect()
            .await
            .map_err(|_| unavailable(project, "the response was cut or too large to scope"))?
            .to_bytes();
        lease.release();
        if ticket && let Some(t) = tickets::ticket_from_body(&bytes) {
            gw.tickets.insert(&t, user.name.clone(), project.name.clone());
        }
        if let (Some(filter), Some(root)) = (listing, pinned) {
            bytes = filter(&bytes, root)
                .map(Bytes::from)
                .ok_or_else(|| unavailable(project, "the listing is not the JSON array the gateway can scope"))?;
        }
        if let Some(r) = &endpoint.redactor {
            bytes = r.frame(bytes);
        }
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        return Ok(Response::from_parts(parts, ProxyBody::full(bytes)));
    }
    if let Some(slot) = stream_slot {
        *hold = Some(Box::new(slot));
    }
    if project.shared_upstream
        && upstream_path == "/global/event"
        && let Some(root) = pinned
    {
        parts.headers.remove(header::CONTENT_LENGTH);
        let filter = crate::policy::scope::EventFilter::new(root.to_path_buf());
        return Ok(Response::from_parts(
            parts,
            ProxyBody::events(body, filter, endpoint.redactor.clone()).leased(lease),
        ));
    }
    Ok(Response::from_parts(
        parts,
        ProxyBody::stream(body, endpoint.redactor.clone()).leased(lease),
    ))
}

/// Copy bytes both ways between the client's and the upstream's upgraded connections until
/// either side closes or the drain deadline passes; the stream slot is held meanwhile.
fn splice(
    gw: &Gateway,
    client: hyper::upgrade::OnUpgrade,
    upstream: hyper::upgrade::OnUpgrade,
    slot: Option<SlotGuard<Arc<str>>>,
) {
    let abort = gw.abort.clone();
    gw.tasks.spawn(async move {
        let _slot = slot;
        let (client, upstream) = tokio::join!(client, upstream);
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
}

/// On a shared upstream, a session is usable only if it lives in the project's directory.
/// Session IDs are global, so one project's client could otherwise name another's session.
pub async fn check_session_scope(
    gw: &Gateway,
    project: &ProjectState,
    endpoint: &Endpoint,
    id: &str,
) -> Result<(), HttpError> {
    let Some(root) = project.config.directory.as_deref() else {
        return Ok(());
    };
    let dir = match project.sessions.get(id) {
        Some(d) => d,
        None => match session_directory(gw, endpoint, id)
            .await
            .map_err(|e| unavailable(project, e))?
        {
            Some(d) => {
                project.sessions.insert(id, d.clone());
                d
            }
            // Unknown to the upstream: it will answer 404 itself.
            None => return Ok(()),
        },
    };
    if dir.starts_with(root) {
        Ok(())
    } else {
        tracing::warn!(target: "security", project = %project.name, reason = "session_outside_project", session = id, "a request named a session of another directory");
        Err(HttpError::Forbidden(format!(
            "session {id} does not belong to project {}",
            project.name
        )))
    }
}

async fn session_directory(gw: &Gateway, endpoint: &Endpoint, id: &str) -> Result<Option<PathBuf>, String> {
    if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        return Ok(None);
    }
    let mut req = Request::get(format!("http://{}/session/{id}", endpoint.authority))
        .body(UpstreamBody::Empty)
        .map_err(|e| e.to_string())?;
    if let Some(auth) = &endpoint.auth {
        req.headers_mut().insert(header::AUTHORIZATION, auth.clone());
    }
    let resp = tokio::time::timeout(gw.limits.upstream_connect_timeout * 2, gw.upstream.request(req))
        .await
        .map_err(|_| "no answer about the session in time".to_string())?
        .map_err(|e| crate::upstream::describe(&e))?;
    if resp.status() == StatusCode::NOT_FOUND || resp.status() == StatusCode::BAD_REQUEST {
        return Ok(None);
    }
    let bytes = Limited::new(resp.into_body(), SMALL_BODY)
        .collect()
        .await
        .map_err(|_| "the session lookup was cut".to_string())?
        .to_bytes();
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|_| "the session lookup is not JSON".to_string())?;
    Ok(v.get("directory").and_then(|d| d.as_str()).map(PathBuf::from))
}
