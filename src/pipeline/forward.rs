//! The request phase: rewrite the request for the upstream (the canonical path, credentials,
//! forwarding headers, directory pinning) and send it, with the body as the body phase left it
//! (`body_check.rs`), on the endpoint's pool. It decides nothing: every refusal was made before.
//! What comes back is handed to [`super::response`], which follows the route's plan.

use crate::http::body::StreamHold;
use std::sync::Arc;

use http::{HeaderValue, Request, Response, StatusCode, Uri, Version, request::Parts};

use super::body_check::Checked;
use super::deadline::deadline;
use super::request::{Canonical, Target};
use super::response::{self, Answer};
use crate::gateway::Gateway;
use crate::gateway::state::ProjectState;
use crate::http::body::{ProxyBody, RequestBody};
use crate::http::error::HttpError;
use crate::http::rewrite::{self, Forward};
use crate::http::source::Source;
use crate::policy::plan::AuditKind;
use crate::upstream::endpoint::Endpoint;
use crate::upstream::pool::{Lease, Pool};
use crate::upstream::{ClientBodyFault, UpstreamBody};

pub(crate) struct Forwarding<'a> {
    pub here: super::Here<'a>,
    pub endpoint: &'a Arc<Endpoint>,
    pub user: &'a str,
    /// The canonical request; the forward takes its head to rewrite for the upstream.
    pub request: &'a mut Canonical,
    /// The body as the body phase left it (`body_check.rs`).
    pub body: Checked,
    pub target: &'a Target,
    pub stream_slot: Option<StreamHold>,
    /// The audit record begun for this request: a body without a length is counted, a created
    /// session noted.
    pub audit: Option<&'a mut crate::http::audit::Pending>,
    /// Records the terminal's close when its splice ends.
    pub terminal_close: Option<crate::http::audit::TerminalClose>,
}

/// The request phase. Not an `async fn`: an async fn keeps each by-value argument twice in its
/// future (once as given, once bound inside), and every connection's task holds the largest
/// request future it may run; the fields of `f` are used where they lie (docs/performance.md).
#[allow(clippy::manual_async_fn)] // on purpose: an async fn would keep its arguments twice
pub(crate) fn forward(f: Forwarding<'_>) -> impl Future<Output = Result<Response<ProxyBody>, HttpError>> + '_ {
    async move {
        let (gw, target) = (f.here.gw, f.target);
        let project = &*target.project;
        let (mut parts, upgrade) = (f.request.take_head(), f.request.upgrade.take());
        // An HTTP/1 request is polled by its connection's tick; an h2 one runs as its own task.
        let ticked = f.here.conn.tick.filter(|_| parts.version <= Version::HTTP_11);
        let upgrading = upgrade.is_some();
        let client_upgrade = client_upgrade(&mut parts, upgrading);
        // Taken before the headers are rewritten for the upstream (which asks it for identity).
        let compress = compress_ask(target, &parts, upgrading);
        if let Checked::Whole(bytes) = &f.body {
            // The bytes the body phase holds, which may be its own serialization (a placed folder).
            parts
                .headers
                .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(bytes.len()));
        }
        let body = upstream_body(&gw.limits, f.body, f.audit.as_deref());
        let head = UpstreamHead {
            here: f.here,
            host: f.request.host.as_deref(),
            endpoint: f.endpoint,
            target,
            upgrade,
        };
        let outgoing = outgoing(parts, body, head)?;
        // Streams may legitimately say nothing for a long time (the per-session event stream
        // sends no headers until its first event), so only ordinary requests are timed.
        let asked = std::time::Instant::now();
        // Pinned where it is made: the time-out wraps a reference, not a copy of the future.
        let owner = crate::upstream::pool::Owner::of(f.user);
        let sent = std::pin::pin!(send(
            &f.endpoint.pool,
            outgoing,
            owner,
            gw.limits.upstream_connect_timeout
        ));
        let result = match target.treatment().long_lived() {
            true => sent.await,
            false => deadline(sent, asked, gw.limits.upstream_response_timeout, ticked)
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
            created: created_slot(f.audit),
            terminal_close: f.terminal_close,
            compress,
        })
        .await
    }
}

/// The request as it goes to the upstream, on its road: one without a body that is not a
/// protocol switch (a GET or a HEAD) on the direct road (`upstream/direct.rs`), its head written
/// by the gateway (`http/upstream_head.rs`) and its answer read on a kept connection; anything
/// else through hyper's client on a pooled one, lent with its answer. The road is chosen by
/// method and body only, after every decision, never by path.
enum Outgoing {
    Direct {
        head: Vec<u8>,
        method: http::Method,
    },
    /// Boxed: the request's future (which hyper keeps per HTTP/1.1 connection) is sized for its
    /// largest state, and a request with a body costs more than an allocation anyway.
    Pooled(Box<Request<UpstreamBody>>),
}

fn outgoing(mut parts: Parts, body: UpstreamBody, head: UpstreamHead<'_>) -> Result<Outgoing, HttpError> {
    use hyper::body::Body as _;
    let bodiless = matches!(parts.method, http::Method::GET | http::Method::HEAD) && body.is_end_stream();
    if bodiless && head.upgrade.is_none() {
        let bytes = head.write(&parts)?;
        return Ok(Outgoing::Direct {
            head: bytes,
            method: parts.method,
        });
    }
    head.rewrite(&mut parts)?;
    Ok(Outgoing::Pooled(Box::new(Request::from_parts(parts, body))))
}

/// Send the request on its road, on the endpoint's pool; the same dial either way.
/// `owner`: whose request it is (a connection another principal's answer ended on lately is not
/// lent to it: `upstream/pool.rs`'s reuse grace).
async fn send(
    pool: &Arc<Pool>,
    outgoing: Outgoing,
    owner: crate::upstream::pool::Owner,
    connect_timeout: std::time::Duration,
) -> Result<(Response<Source>, Option<Lease>), crate::upstream::BoxError> {
    match outgoing {
        Outgoing::Direct { head, method } => {
            let response = crate::upstream::direct::send(pool, &head, &method, owner, connect_timeout).await?;
            Ok((response.map(Source::from), None))
        }
        Outgoing::Pooled(request) => {
            let (response, lease) = pool.send(*request, owner, connect_timeout).await?;
            Ok((response.map(Source::Pooled), Some(lease)))
        }
    }
}

/// The client's side of a protocol switch, taken with the request's extensions (where hyper keeps
/// it) before the head is rewritten.
fn client_upgrade(parts: &mut Parts, upgrading: bool) -> Option<hyper::upgrade::OnUpgrade> {
    upgrading.then(|| {
        let mut head = Request::new(());
        *head.extensions_mut() = std::mem::take(&mut parts.extensions);
        hyper::upgrade::on(head)
    })
}

/// The coding the client accepts, for the web UI's files and the compressible API routes only
/// (decided on the resolved route). GET only: a HEAD answer has a length but no body to compress.
fn compress_ask(target: &Target, parts: &Parts, upgrading: bool) -> Option<crate::support::compress::Ask> {
    if !target.may_compress() || upgrading || parts.method != http::Method::GET {
        return None;
    }
    crate::support::compress::Ask::take(&parts.headers)
}

/// Where a session create's new id goes: only an audited create's record has a place for it.
fn created_slot(audit: Option<&mut crate::http::audit::Pending>) -> Option<&mut Option<String>> {
    audit
        .filter(|p| p.kind == AuditKind::SessionCreate)
        .map(|p| &mut p.created)
}

/// The head the upstream gets: the canonical path in origin form with the client's query (less
/// gateway credentials and, pinned, directory selectors), HTTP/1.1, rewritten headers
/// (`http/rewrite.rs`: the gateway's credential, forwarding headers), the project's directory pinned.
struct UpstreamHead<'a> {
    here: super::Here<'a>,
    /// The host the client asked for.
    host: Option<&'a str>,
    endpoint: &'a Endpoint,
    target: &'a Target,
    upgrade: Option<HeaderValue>,
}

impl UpstreamHead<'_> {
    fn forward(&self) -> Forward<'_> {
        Forward {
            client_ip: self.here.client,
            proto: self.here.conn.scheme(),
            original_host: self.host,
            upstream_host: &self.endpoint.host_header,
            upstream_origin: &self.endpoint.origin_header,
            upstream_auth: self.endpoint.auth.as_ref(),
            upgrade: self.upgrade.clone(),
        }
    }

    /// The client's query less gateway credentials and, pinned, directory selectors.
    fn query<'p>(&self, parts: &'p Parts) -> Option<std::borrow::Cow<'p, str>> {
        rewrite::upstream_query(parts.uri.query(), self.target.project.config.directory.is_some())
    }

    fn uri(&self, parts: &Parts) -> Result<Uri, HttpError> {
        origin_form(&self.target.upstream_path, self.query(parts).as_deref())
    }

    /// For hyper's client: the head edited in place.
    fn rewrite(&self, parts: &mut Parts) -> Result<(), HttpError> {
        parts.uri = self.uri(parts)?;
        parts.version = Version::HTTP_11;
        rewrite::request_headers(&mut parts.headers, &self.forward());
        if let Some(dir) = &self.target.project.dir_header {
            crate::policy::pin::pin_headers(&mut parts.headers, dir);
        }
        Ok(())
    }

    /// For the direct road: the same head, written in one pass; the target as it is when it is
    /// plain, or as `http::Uri` reads it (as on hyper's road).
    fn write(&self, parts: &Parts) -> Result<Vec<u8>, HttpError> {
        use crate::http::upstream_head::{self, Target};
        let query = self.query(parts);
        let mut target = Target {
            path: &self.target.upstream_path,
            query: query.as_deref(),
        };
        let uri;
        if !target.is_plain() {
            uri = origin_form(target.path, target.query)?;
            target = uri
                .path_and_query()
                .map_or(Target { path: "/", query: None }, |p| Target {
                    path: p.path(),
                    query: p.query(),
                });
        }
        let dir = self.target.project.dir_header.as_ref();
        Ok(upstream_head::write(
            &parts.method,
            target,
            &parts.headers,
            &self.forward(),
            dir,
        ))
    }
}

/// The body the upstream gets, as the body phase left it (`body_check.rs`): a client's stream
/// bounded in size and idle time and counted for the audit, or the bytes the gateway holds.
fn upstream_body(
    limits: &crate::config::Limits,
    body: Checked,
    audit: Option<&crate::http::audit::Pending>,
) -> UpstreamBody {
    match body {
        Checked::Empty => UpstreamBody::Empty,
        Checked::Whole(bytes) => UpstreamBody::Full(Some(bytes)),
        Checked::Untouched(RequestBody::Stream(body)) => {
            UpstreamBody::client(body, limits.max_body_bytes, limits.body_idle_timeout)
                .counting(audit.and_then(|p| p.counted.clone()))
        }
        Checked::Untouched(RequestBody::Whole(bytes)) if bytes.is_empty() => UpstreamBody::Empty,
        Checked::Untouched(RequestBody::Whole(bytes)) => UpstreamBody::Full(Some(bytes)),
    }
}

fn timed_out(gw: &Gateway, project: &ProjectState) -> HttpError {
    HttpError::UpstreamTimeout {
        project: project.name.to_string(),
        secs: gw.limits.upstream_response_timeout,
    }
}

/// What the endpoint's pool gave back: the upstream's latency observed, a client body's fault
/// told apart from the upstream's, the upstream's 401 for the gateway's credential a 502.
fn received<B, L>(
    gw: &Gateway,
    project: &ProjectState,
    asked: std::time::Instant,
    result: Result<(Response<B>, L), crate::upstream::BoxError>,
) -> Result<(Response<B>, L), HttpError> {
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

/// The canonical path with the query the upstream gets (see `UpstreamHead::query`), in origin
/// form: the connection already goes to the upstream, and Host names it.
fn origin_form(path: &str, query: Option<&str>) -> Result<Uri, HttpError> {
    let mut path_and_query = String::with_capacity(path.len() + query.map_or(0, |q| q.len() + 1));
    path_and_query.push_str(path);
    if let Some(q) = query {
        path_and_query.push('?');
        path_and_query.push_str(q);
    }
    Uri::builder()
        .path_and_query(path_and_query)
        .build()
        .map_err(|_| HttpError::BadRequest("the request target cannot be forwarded".into()))
}
