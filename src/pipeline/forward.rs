//! The request phase: rewrite the request for the upstream (the canonical path, credentials,
//! forwarding headers, directory pinning, checked bodies) and send it on the endpoint's pool.
//! What comes back is handed to [`super::response`], which follows the route's plan.

use crate::http::body::{SMALL_BODY, StreamHold};
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Uri, Version, request::Parts};

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::ConnInfo;
use super::request::{Canonical, Target};
use super::response::{self, Answer};
use crate::gateway::Gateway;
use crate::gateway::state::ProjectState;
use crate::http::body::{ProxyBody, RequestBody};
use crate::http::error::HttpError;
use crate::http::rewrite::{self, Forward};
use crate::policy::plan::AuditKind;
use crate::upstream::endpoint::Endpoint;
use crate::upstream::{ClientBodyFault, UpstreamBody};

pub(crate) struct Forwarding<'a> {
    pub here: super::Here<'a>,
    pub endpoint: &'a Arc<Endpoint>,
    pub user: &'a str,
    /// The canonical request; the forward takes its head to rewrite for the upstream.
    pub request: &'a mut Canonical,
    pub body: RequestBody,
    pub target: &'a Target,
    pub stream_slot: Option<StreamHold>,
    /// The audit record begun for this request: a permission answer's once/always/reject is
    /// read from its small body, a body without a length is counted, a created session noted.
    pub audit: Option<&'a mut crate::http::audit::Pending>,
    /// Records the terminal's close when its splice ends.
    pub terminal_close: Option<crate::http::audit::TerminalClose>,
    /// Who asks, for a permission policy's body checks.
    pub asker: super::Asker<'a>,
}

/// The request phase. Not an `async fn`: an async fn keeps each by-value argument twice in its
/// future (once as given, once bound inside), and every connection's task holds the largest
/// request future it may run; the fields of `f` are used where they lie (docs/performance.md).
#[allow(clippy::manual_async_fn)] // on purpose: an async fn would keep its arguments twice
pub(crate) fn forward(mut f: Forwarding<'_>) -> impl Future<Output = Result<Response<ProxyBody>, HttpError>> + '_ {
    async move {
        let (gw, target) = (f.here.gw, f.target);
        let project = &*target.project;
        let (mut parts, upgrade) = (f.request.take_head(), f.request.upgrade.take());
        let client_upgrade = upgrade.as_ref().map(|_| {
            let mut head = Request::new(());
            *head.extensions_mut() = std::mem::take(&mut parts.extensions);
            hyper::upgrade::on(head)
        });
        // Taken before the headers are rewritten for the upstream (which asks it for identity),
        // for the web UI's files and the compressible API routes only (decided on the resolved
        // route). GET only: a HEAD answer has a length but no body to compress.
        let compress = if !target.may_compress() || upgrade.is_some() || parts.method != http::Method::GET {
            None
        } else {
            crate::support::compress::Ask::take(&parts.headers)
        };
        let upgrading = upgrade.is_some();
        upstream_head(
            &mut parts,
            f.here.conn,
            f.here.client,
            f.request.host.as_deref(),
            f.endpoint,
            target,
            upgrade,
        )?;
        let body = policy_body(f.here, target, f.asker, f.body, upgrading, f.audit.as_deref_mut()).await?;
        let body = upstream_body(
            f.here,
            f.user,
            f.endpoint,
            target,
            body,
            upgrading,
            f.audit.as_deref_mut(),
        )
        .await?;
        // Streams may legitimately say nothing for a long time (the per-session event stream
        // sends no headers until its first event), so only ordinary requests are timed.
        let asked = std::time::Instant::now();
        // Pinned where it is made: the time-out wraps a reference, not a copy of the future.
        let sent = std::pin::pin!(
            f.endpoint
                .pool
                .send(Request::from_parts(parts, body), gw.limits.upstream_connect_timeout)
        );
        let result = match target.treatment().long_lived() {
            true => sent.await,
            false => tokio::time::timeout(gw.limits.upstream_response_timeout, sent)
                .await
                .map_err(|_| timed_out(gw, project))?,
        };
        let (response, lease) = received(gw, project, asked, result)?;
        response::answer(Answer {
            gw,
            user: f.user,
            target,
            endpoint: f.endpoint,
            response,
            lease,
            client_upgrade,
            stream_slot: f.stream_slot,
            created: f
                .audit
                .filter(|p| p.kind == AuditKind::SessionCreate)
                .map(|p| &mut p.created),
            terminal_close: f.terminal_close,
            compress,
        })
        .await
    }
}

/// The head the upstream gets: the canonical path in origin form with the client's query (less
/// gateway credentials and, pinned, directory selectors), HTTP/1.1, rewritten headers
/// (`http/rewrite.rs`: the gateway's credential, forwarding headers), the project's directory pinned.
fn upstream_head(
    parts: &mut Parts,
    conn: &ConnInfo,
    client: IpAddr,
    host: Option<&str>,
    endpoint: &Endpoint,
    target: &Target,
    upgrade: Option<HeaderValue>,
) -> Result<(), HttpError> {
    let project = &*target.project;
    let pinned = project.config.directory.as_deref();
    parts.uri = upstream_uri(&target.upstream_path, parts.uri.query(), pinned.is_some())?;
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
            upgrade,
        },
    );
    if let Some(dir) = &project.dir_header {
        crate::policy::pin::pin_headers(&mut parts.headers, dir);
    }
    Ok(())
}

/// The body the upstream gets: none for an upgrade; read whole and checked when the route's
/// body can choose a directory (pinned projects) or is a permission answer (for the audit);
/// else the client's stream, bounded in size and idle time (or the bytes the gateway holds).
#[allow(clippy::too_many_arguments)]
async fn upstream_body(
    here: super::Here<'_>,
    user: &str,
    endpoint: &Endpoint,
    target: &Target,
    body: RequestBody,
    upgrade: bool,
    mut audit: Option<&mut crate::http::audit::Pending>,
) -> Result<UpstreamBody, HttpError> {
    let (gw, client) = (here.gw, here.client);
    let limits = &gw.limits;
    let project = &*target.project;
    Ok(
        match (project.config.directory.as_deref(), target.route.and_then(|r| r.body)) {
            _ if upgrade => UpstreamBody::Empty,
            (Some(root), Some(rule)) => {
                let bytes = whole(body, None).await?;
                let names = crate::policy::pin::check_body(&bytes, rule, root).map_err(|why| {
                tracing::warn!(target: "security", peer = %client, user = %user, project = %project.name, reason = "directory_outside_project", "{why}");
                HttpError::Forbidden(why)
            })?;
                for path in &names.paths {
                    super::own_files::refuse(&here.state.settings.protected, client, user, project, path)?;
                }
                if project.shared_upstream {
                    for id in &names.sessions {
                        super::session_scope::check(gw, project, endpoint, id).await?;
                    }
                }
                UpstreamBody::Full(Some(bytes))
            }
            // A permission answer is read whole (small JSON) for its once/always/reject, bounded in
            // size and in time like any client body.
            (_, _) if audit.as_ref().is_some_and(|p| p.kind == AuditKind::PermissionAnswer) => {
                let bytes = whole(body, Some(limits.body_idle_timeout)).await?;
                if let Some(p) = audit.as_deref_mut() {
                    p.answer = crate::http::audit::permission_answer(&bytes);
                }
                UpstreamBody::Full(Some(bytes))
            }
            _ => match body {
                RequestBody::Stream(body) => {
                    UpstreamBody::client(body, limits.max_body_bytes, limits.body_idle_timeout)
                        .counting(audit.as_ref().and_then(|p| p.counted.clone()))
                }
                RequestBody::Whole(bytes) if bytes.is_empty() => UpstreamBody::Empty,
                RequestBody::Whole(bytes) => UpstreamBody::Full(Some(bytes)),
            },
        },
    )
}

/// A client's body a permission policy judges (`policy_check.rs`), read whole (small JSON,
/// bounded in size and time like any client body): a permission answer, and a new session made
/// with a policy token. Anything else, and the gateway's own acts, go on as they came.
async fn policy_body(
    here: super::Here<'_>,
    target: &Target,
    asker: super::Asker<'_>,
    body: RequestBody,
    upgrade: bool,
    audit: Option<&mut crate::http::audit::Pending>,
) -> Result<RequestBody, HttpError> {
    let (Some(route), super::Asker::Client(own)) = (target.route, asker) else {
        return Ok(body);
    };
    let project = &target.project.name;
    let idle = Some(here.gw.limits.body_idle_timeout);
    Ok(match route.audit {
        _ if upgrade => body,
        Some(AuditKind::PermissionAnswer) => {
            let bytes = whole(body, idle).await?;
            // A refused answer is recorded with what it said.
            if let Some(p) = audit {
                p.answer = crate::http::audit::permission_answer(&bytes);
            }
            let id = crate::policy::plan::last_param(route.pattern, &target.upstream_path);
            super::policy_check::answer(here.gw, project, id, own, &bytes)?;
            RequestBody::Whole(bytes)
        }
        // Only while a policy could apply: a gateway without policy sessions streams as before.
        _ if crate::policy::permission::sets_session_rules(route)
            && (own.is_some() || here.gw.inbox.any_session_policy()) =>
        {
            let bytes = whole(body, idle).await?;
            let session = target.session.as_deref();
            super::policy_check::session_rules(here.gw, project, own, session, &bytes)?;
            RequestBody::Whole(bytes)
        }
        _ => body,
    })
}

fn timed_out(gw: &Gateway, project: &ProjectState) -> HttpError {
    HttpError::UpstreamTimeout {
        project: project.name.to_string(),
        secs: gw.limits.upstream_response_timeout,
    }
}

/// What the endpoint's pool gave back: the upstream's latency observed, a client body's fault
/// told apart from the upstream's, the upstream's 401 for the gateway's credential a 502.
fn received(
    gw: &Gateway,
    project: &ProjectState,
    asked: std::time::Instant,
    result: Result<(Response<Incoming>, crate::upstream::pool::Lease), crate::upstream::BoxError>,
) -> Result<(Response<Incoming>, crate::upstream::pool::Lease), HttpError> {
    let limits = &gw.limits;
    if result.is_ok() {
        project.metrics.upstream_latency.observe(asked.elapsed());
    }
    let (response, lease) = result.map_err(|e| match crate::upstream::client_body_fault(&*e) {
        Some(ClientBodyFault::TooLarge) => HttpError::PayloadTooLarge {
            max: limits.max_body_bytes,
        },
        Some(ClientBodyFault::Idle) => HttpError::BodyTimeout {
            secs: limits.body_idle_timeout,
        },
        Some(ClientBodyFault::Broken(why)) => HttpError::MalformedBody(why),
        None => HttpError::unavailable(&project.name, crate::upstream::describe(&*e)),
    })?;
    // The upstream refused the gateway's own credential: never a login prompt for the client.
    if response.status() == StatusCode::UNAUTHORIZED {
        tracing::error!(project = %project.name, reason = "upstream_rejected_credential", "the OpenCode server refused the gateway's credential");
        return Err(HttpError::UpstreamRejectedCredential {
            project: project.name.to_string(),
        });
    }
    Ok((response, lease))
}

/// A small body read whole (at most [`SMALL_BODY`], within `idle` when given): a client's
/// stream is read, bytes the gateway holds are taken as they are.
async fn whole(body: RequestBody, idle: Option<std::time::Duration>) -> Result<Bytes, HttpError> {
    let body = match body {
        RequestBody::Whole(bytes) => return Ok(bytes),
        RequestBody::Stream(body) => body,
    };
    let read = Limited::new(body, SMALL_BODY).collect();
    let collected = match idle {
        Some(secs) => tokio::time::timeout(secs, read)
            .await
            .map_err(|_| HttpError::BodyTimeout { secs })?,
        None => read.await,
    };
    Ok(collected
        .map_err(|_| HttpError::BadRequest("the request body is cut or larger than 1 MiB".into()))?
        .to_bytes())
}

/// The canonical path with the client's query, less gateway credentials and (pinned) directory
/// selectors, in origin form: the connection already goes to the upstream, and Host names it.
fn upstream_uri(path: &str, query: Option<&str>, pinned: bool) -> Result<Uri, HttpError> {
    let query = rewrite::upstream_query(query, pinned);
    let mut path_and_query = String::with_capacity(path.len() + query.as_ref().map_or(0, |q| q.len() + 1));
    path_and_query.push_str(path);
    if let Some(q) = &query {
        path_and_query.push('?');
        path_and_query.push_str(q);
    }
    Uri::builder()
        .path_and_query(path_and_query)
        .build()
        .map_err(|_| HttpError::BadRequest("the request target cannot be forwarded".into()))
}
