//! The response phase. What the gateway does with OpenCode's answer follows the plan the route
//! carries ([`Treatment`]), decided once on the canonical route: splice an upgrade, capture a
//! terminal ticket, scope a listing or the global event stream on a shared upstream, or stream
//! it as it comes. Every answer loses the upstream's credential; API answers (never the web UI's
//! own files) may not render as an active document on a gateway origin.

use crate::http::body::StreamHold;
use std::path::Path;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use hyper_util::rt::TokioIo;

use super::request::Target;
use crate::auth::tickets;
use crate::gateway::Gateway;
use crate::http::body::ProxyBody;
use crate::http::body::{SMALL_BODY, read_whole};
use crate::http::error::HttpError;
use crate::http::rewrite;
use crate::http::source::Source;
use crate::policy::event_scope::{EventFilter, Shape};
use crate::policy::plan::Treatment;
use crate::policy::scope;
use crate::support::compress;
use crate::upstream::endpoint::Endpoint;
use crate::upstream::pool::Lease;

const LISTING_BODY: usize = 16 * 1024 * 1024;

pub(crate) struct Answer<'a> {
    pub gw: &'a Gateway,
    pub user: &'a str,
    pub target: &'a Target,
    pub endpoint: &'a Endpoint,
    pub response: Response<Source>,
    /// The pooled connection hyper's client lent with the answer; the direct road's answers give
    /// theirs back themselves (`upstream/direct.rs`).
    pub lease: Option<Lease>,
    pub client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    pub stream_slot: Option<StreamHold>,
    pub terminal_close: Option<crate::http::audit::TerminalClose>,
    /// Where a session create's new id goes, for the audit trail.
    pub created: Option<&'a mut Option<String>>,
    /// The accepted coding of a request whose answer may be compressed (the web UI's files, the
    /// compressible API routes; never set for others).
    pub compress: Option<compress::Ask>,
}

type Filter = fn(&[u8], &Path) -> Option<Vec<u8>>;

pub(crate) async fn answer(a: Answer<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let Answer {
        gw,
        user,
        target,
        endpoint,
        response,
        lease,
        client_upgrade,
        stream_slot,
        terminal_close,
        created,
        compress: ask,
    } = a;
    let treatment = target.treatment();

    if let (Some(client_upgrade), StatusCode::SWITCHING_PROTOCOLS) = (client_upgrade, response.status()) {
        return Ok(upgraded(
            gw,
            endpoint,
            response,
            client_upgrade,
            stream_slot,
            terminal_close,
        ));
    }

    let (mut parts, body) = response.into_parts();
    clean_headers(&mut parts.headers, endpoint, target)?;
    let pinned = pinned_on_shared(target);
    super::withheld::unscoped_stream(target, treatment, pinned, &parts.headers)?;

    // Small bodies the gateway must read: a terminal ticket, a listing to scope, a created
    // session's id (audited creates only).
    let small = Small {
        ticket: treatment == Treatment::TicketIssue,
        listing: listing_filter(treatment, pinned),
        active: treatment == Treatment::ActiveSessions && pinned.is_some(),
        pinned,
        created,
    };
    if parts.status.is_success() && target.route.is_some_and(|r| r.carries_secrets) {
        // Boxed, as the branches below: most answers do not take it.
        return Box::pin(redacted(gw, target, endpoint, parts, body, lease, ask)).await;
    }
    if parts.status.is_success() && (small.ticket || small.listing.is_some() || small.active || small.created.is_some())
    {
        // Boxed, as every branch here that most answers do not take: hyper keeps the request's
        // future for an HTTP/1.1 connection's life, sized for its largest branch.
        return Box::pin(read_small(gw, user, target, endpoint, parts, body, lease, small)).await;
    }
    if let Some((len, ask, room)) = to_compress(gw, target, &mut parts, ask) {
        let held = Held { lease, stream_slot };
        return Box::pin(compress_or_stream(
            gw,
            target,
            endpoint,
            parts,
            body,
            held,
            (len, ask, room),
        ))
        .await;
    }
    let body = streamed(treatment, pinned, &mut parts.headers, body, endpoint);
    Ok(Response::from_parts(parts, body.leased(lease).holding(stream_slot)))
}

/// What an answer's body holds until it ends: its pooled connection, its stream slot.
struct Held {
    lease: Option<Lease>,
    stream_slot: Option<StreamHold>,
}

/// An answer to compress, read whole: its declared length, or (a web UI file without one) at
/// most [`UNKNOWN_LENGTH_MAX`]; one longer than that streams as it comes, uncompressed.
async fn compress_or_stream(
    gw: &Gateway,
    target: &Target,
    endpoint: &Endpoint,
    mut parts: http::response::Parts,
    body: Source,
    held: Held,
    (len, ask, room): (Option<usize>, compress::Ask, tokio::sync::SemaphorePermit<'_>),
) -> Result<Response<ProxyBody>, HttpError> {
    let cut = || HttpError::unavailable(&target.project.name, "the response was cut");
    let bytes = match len {
        Some(len) => read_whole(body, len).await.ok_or_else(cut)?,
        None => match body.read_up_to(UNKNOWN_LENGTH_MAX).await.ok_or_else(cut)? {
            Ok(bytes) => bytes,
            Err(body) => {
                drop(room);
                let body = streamed(target.treatment(), None, &mut parts.headers, body, endpoint);
                return Ok(Response::from_parts(
                    parts,
                    body.leased(held.lease).holding(held.stream_slot),
                ));
            }
        },
    };
    release(held.lease);
    let out = compressed(gw, target, endpoint, parts, bytes, ask).await;
    drop(room);
    Ok(out)
}

/// The most of a web UI file without a declared length that is read to be compressed (OpenCode
/// 2.1.2's largest is about 1 MB); its room in the compression budget is held while it is read.
const UNKNOWN_LENGTH_MAX: usize = 4 * 1024 * 1024;

/// A pooled connection whose answer was read whole goes back to its pool.
fn release(lease: Option<Lease>) {
    if let Some(lease) = lease {
        lease.release();
    }
}

/// The directory a pinned project's answers are scoped to, when it shares its upstream with
/// other directories (on a server of its own there is nothing else to hide).
fn pinned_on_shared(target: &Target) -> Option<&Path> {
    let project = &*target.project;
    project.config.directory.as_deref().filter(|_| project.shared_upstream)
}

/// Whether this answer is compressed here, and with what: the web UI's own files and the few API
/// routes whose answer echoes nothing of the request (never another API answer: BREACH), after
/// redaction; decided on the resolved route. Every eligible answer varies on the coding, even one
/// passed on as it came. The permit holds the buffered bytes' room while the body is read and
/// compressed.
fn to_compress<'g>(
    gw: &'g Gateway,
    target: &Target,
    parts: &mut http::response::Parts,
    ask: Option<compress::Ask>,
) -> Option<(Option<usize>, compress::Ask, tokio::sync::SemaphorePermit<'g>)> {
    if !(target.may_compress() && compress::eligible(false, parts.status, &parts.headers)) {
        return None;
    }
    parts
        .headers
        .append(header::VARY, HeaderValue::from_static("accept-encoding"));
    let ask = ask?;
    match content_length(&parts.headers) {
        Some(len) if len <= compress::MAX_BODY => Some((Some(len), ask, gw.browser.compressed.room_for(len)?)),
        Some(_) => None,
        // Only the web UI's own files are read without a declared length (2.x sends them
        // chunked); an API answer that may be compressed has one or streams.
        None if target.route.is_none() => Some((None, ask, gw.browser.compressed.room_for(UNKNOWN_LENGTH_MAX)?)),
        None => None,
    }
}

/// The body passed on as it comes: the global event stream of a pinned project on a shared
/// upstream scoped to its directory (its length no longer known), an event stream framed for
/// redaction, anything else streamed through the redactor.
fn streamed(
    treatment: Treatment,
    pinned: Option<&Path>,
    headers: &mut HeaderMap,
    body: Source,
    endpoint: &Endpoint,
) -> ProxyBody {
    let shape = match treatment {
        Treatment::GlobalEvents => Some(Shape::Global),
        Treatment::FolderEvents => Some(Shape::Located),
        _ => None,
    };
    match (shape, pinned) {
        (Some(shape), Some(root)) => {
            headers.remove(header::CONTENT_LENGTH);
            let filter = EventFilter::new(root.to_path_buf(), shape);
            ProxyBody::events(body, Some(filter), endpoint.redactor.clone())
        }
        // Decided on the route, not the answer's headers: nothing read on other answers.
        _ if (shape.is_some() || treatment == Treatment::EventStream)
            && !headers.contains_key(header::CONTENT_LENGTH) =>
        {
            ProxyBody::events(body, None, endpoint.redactor.clone())
        }
        _ => ProxyBody::stream(body, endpoint.redactor.clone()),
    }
}

/// The scope filter a listing's answer needs: only on a pinned project of a shared upstream.
fn listing_filter(treatment: Treatment, pinned: Option<&Path>) -> Option<Filter> {
    pinned?;
    match treatment {
        Treatment::ProjectListing => Some(scope::filter_projects),
        Treatment::SessionList => Some(scope::filter_sessions),
        Treatment::SessionPage => Some(scope::filter_session_page),
        _ => None,
    }
}

/// A terminal the upstream switched protocols for: splice the two upgraded connections and
/// answer the client's switch with the upstream's cleaned headers.
fn upgraded(
    gw: &Gateway,
    endpoint: &Endpoint,
    mut response: Response<Source>,
    client_upgrade: hyper::upgrade::OnUpgrade,
    stream_slot: Option<StreamHold>,
    terminal_close: Option<crate::http::audit::TerminalClose>,
) -> Response<ProxyBody> {
    let upstream_upgrade = hyper::upgrade::on(&mut response);
    splice(gw, client_upgrade, upstream_upgrade, stream_slot, terminal_close);
    let (mut parts, _) = response.into_parts();
    rewrite::response_headers(&mut parts.headers, true, &endpoint.origin_header);
    if let Some(r) = &endpoint.redactor {
        r.headers(&mut parts.headers);
    }
    Response::from_parts(parts, ProxyBody::empty())
}

/// A configuration answer with its secrets redacted (`withheld.rs`), compressed when it may be.
async fn redacted(
    gw: &Gateway,
    target: &Target,
    endpoint: &Endpoint,
    mut parts: http::response::Parts,
    body: Source,
    lease: Option<Lease>,
    ask: Option<compress::Ask>,
) -> Result<Response<ProxyBody>, HttpError> {
    let compress = to_compress(gw, target, &mut parts, ask);
    let bytes = super::withheld::redacted(target, body, lease).await?;
    if let Some((_, ask, _room)) = compress {
        return Ok(compressed(gw, target, endpoint, parts, bytes, ask).await);
    }
    let bytes = match &endpoint.redactor {
        Some(r) => r.frame(bytes),
        None => bytes,
    };
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    Ok(Response::from_parts(parts, ProxyBody::full(bytes)))
}

/// What of a small answer the gateway must read before it passes it on.
struct Small<'a> {
    /// A terminal ticket to remember for the user.
    ticket: bool,
    /// A listing to scope to the pinned directory.
    listing: Option<Filter>,
    /// 2.x's running sessions, to scope by each session's folder.
    active: bool,
    pinned: Option<&'a Path>,
    /// Where a session create's new id goes, for the audit trail.
    created: Option<&'a mut Option<String>>,
}

/// Read a small answer whole (a ticket, a listing to scope, a created session's id), do what it
/// asks, redact it and answer it with its new length.
#[allow(clippy::too_many_arguments)]
async fn read_small(
    gw: &Gateway,
    user: &str,
    target: &Target,
    endpoint: &Endpoint,
    mut parts: http::response::Parts,
    body: Source,
    lease: Option<Lease>,
    Small {
        ticket,
        listing,
        active,
        pinned,
        created,
    }: Small<'_>,
) -> Result<Response<ProxyBody>, HttpError> {
    let project = &*target.project;
    let max = if ticket { SMALL_BODY } else { LISTING_BODY };
    let mut bytes: Bytes = read_whole(body, max)
        .await
        .ok_or_else(|| HttpError::unavailable(&project.name, "the response was cut or too large to scope"))?;
    release(lease);
    if let Some(slot) = created {
        *slot = crate::audit::created_session(&bytes);
    }
    if ticket && let Some(t) = tickets::ticket_from_body(&bytes) {
        gw.browser.tickets.insert(&t, user, &project.name).await;
    }
    if let (Some(filter), Some(root)) = (listing, pinned) {
        bytes = filter(&bytes, root).map(Bytes::from).ok_or_else(|| {
            HttpError::unavailable(&project.name, "the listing is not the JSON the gateway can scope")
        })?;
    }
    if let (true, Some(root)) = (active, pinned) {
        let scoped = super::session_scope::scope_active(gw, project, endpoint, &bytes, root).await;
        bytes = scoped.map(Bytes::from).ok_or_else(|| {
            HttpError::unavailable(
                &project.name,
                "the active sessions are not the JSON the gateway can scope",
            )
        })?;
    }
    if let Some(r) = &endpoint.redactor {
        bytes = r.frame(bytes);
    }
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    Ok(Response::from_parts(parts, ProxyBody::full(bytes)))
}

/// An answer's headers as the client may see them: no credentialed CORS or gateway cookie
/// (`http/rewrite.rs`), no reflected upstream credential, never an encoded body the gateway cannot
/// redact, and API answers inert (they never run as pages).
fn clean_headers(headers: &mut HeaderMap, endpoint: &Endpoint, target: &Target) -> Result<(), HttpError> {
    let project = &*target.project;
    rewrite::response_headers(headers, false, &endpoint.origin_header);
    if let Some(r) = &endpoint.redactor {
        if r.headers(headers) {
            tracing::warn!(target: "security", project = %project.name, reason = "upstream_reflected_credential", "a response header carried the upstream's credential; it was dropped");
        }
        // The gateway asks for identity; an encoded body could hide the credential from redaction.
        if encoded(headers) {
            tracing::warn!(target: "security", project = %project.name, reason = "upstream_encoded_body", "the upstream sent an encoded body the gateway cannot redact");
            return Err(HttpError::unavailable(
                &project.name,
                "it sent a compressed body although the gateway asked for none",
            ));
        }
    }
    if target.is_api() {
        inert(headers);
    }
    Ok(())
}

/// The declared length of a body (1.x's web UI files have one, 2.x's do not).
fn content_length(headers: &HeaderMap) -> Option<usize> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// An answer compressed for the client: a hashed asset from the cache (compressed once per
/// validator), a catalog API answer from the cache (once per keyed digest of its bytes), the HTML
/// document on the fly. A matching `If-None-Match` gets 304.
async fn compressed(
    gw: &Gateway,
    target: &Target,
    endpoint: &Endpoint,
    mut parts: http::response::Parts,
    mut bytes: Bytes,
    ask: compress::Ask,
) -> Response<ProxyBody> {
    if let Some(r) = &endpoint.redactor {
        bytes = r.frame(bytes);
    }
    let path = target.label();
    let asset = compress::hashed_asset(path);
    let out = if let Some((path, validator, effort)) = cache_place(gw, target, &parts.headers, &bytes, asset) {
        let key = compress::Key {
            project: target.project.name.clone(),
            path: path.to_owned(),
            validator,
            coding: ask.coding,
            effort,
        };
        offer_etag(&mut parts.headers, &key.validator);
        let (out, hit) = gw.browser.compressed.get_or_compress(key, bytes.clone()).await;
        if hit {
            tracing::debug!(path, "compressed answer served from the cache");
        }
        out
    } else {
        compress::compress(&bytes, ask.coding, compress::Effort::Fly)
    };
    let Some(out) = out else {
        tracing::warn!(path, "compressing an answer failed: sent as it came");
        return Response::from_parts(parts, ProxyBody::full(bytes));
    };
    variant(parts, out, &ask, asset)
}

/// Where a compressed answer is cached, if it is: a catalog API answer under the route it was
/// judged on and a keyed digest of its bytes; a hashed asset under its path and validator. The
/// HTML document is not cached (compressed on the fly).
fn cache_place<'t>(
    gw: &Gateway,
    target: &'t Target,
    headers: &HeaderMap,
    bytes: &[u8],
    asset: bool,
) -> Option<(&'t str, String, compress::Effort)> {
    match target.route {
        // Keyed by the route the request was judged on, never by how the client spelled it.
        Some(route) => Some((
            route.pattern,
            gw.browser.compressed.digest(bytes),
            compress::Effort::Catalog,
        )),
        None if asset => Some((
            target.label(),
            compress::Key::validator(headers, bytes),
            compress::Effort::Asset,
        )),
        None => None,
    }
}

/// OpenCode sends no validator for its assets or catalogs: the digest one lets a browser
/// revalidate (a 304 instead of the body again).
fn offer_etag(headers: &mut HeaderMap, validator: &str) {
    if !headers.contains_key(header::ETAG)
        && !headers.contains_key(header::LAST_MODIFIED)
        && let Ok(etag) = HeaderValue::from_str(&format!("\"{validator}\""))
    {
        headers.insert(header::ETAG, etag);
    }
}

/// The compressed variant's answer, or 304 when the client's `If-None-Match` names it.
fn variant(mut parts: http::response::Parts, out: Bytes, ask: &compress::Ask, asset: bool) -> Response<ProxyBody> {
    let not_modified = compress::variant_headers(
        &mut parts.headers,
        ask.coding,
        out.len(),
        asset,
        ask.if_none_match.as_ref(),
    );
    if not_modified {
        parts.status = StatusCode::NOT_MODIFIED;
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, ProxyBody::empty());
    }
    Response::from_parts(parts, ProxyBody::full(out))
}

/// A body in any coding but identity.
fn encoded(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
}

/// API answers carry a project's bytes (files, transcripts, diffs) next to text an attacker may
/// control: they must never run as a page on a gateway origin, which every `/p/` project shares.
/// A sandboxed document has a unique origin and no scripts; nosniff stops a browser guessing an
/// active type; anything but a known inert type is downloaded, not shown.
fn inert(headers: &mut HeaderMap) {
    let active = headers
        .get(header::CONTENT_TYPE)
        .is_none_or(|t| !is_inert_type(t.as_bytes()));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if active {
        headers.insert(header::CONTENT_DISPOSITION, HeaderValue::from_static("attachment"));
    }
}

/// Types a browser never runs: what OpenCode's API answers with, and plain data. An allow-list,
/// compared without allocating (this runs on every API answer).
fn is_inert_type(content_type: &[u8]) -> bool {
    const INERT: [&[u8]; 9] = [
        b"application/json",
        b"text/event-stream",
        b"text/plain",
        b"application/octet-stream",
        b"image/png",
        b"image/jpeg",
        b"image/gif",
        b"image/webp",
        b"image/avif",
    ];
    let essence = content_type.split(|b| *b == b';').next().unwrap_or(b"").trim_ascii();
    INERT.iter().any(|t| essence.eq_ignore_ascii_case(t))
}

/// Copy bytes both ways between the client's and the upstream's upgraded connections until
/// either side closes or the drain deadline passes; the stream slot is held meanwhile.
fn splice(
    gw: &Gateway,
    client: hyper::upgrade::OnUpgrade,
    upstream: hyper::upgrade::OnUpgrade,
    slot: Option<StreamHold>,
    mut closed: Option<crate::http::audit::TerminalClose>,
) {
    let abort = gw.lifecycle.abort.clone();
    if let Some(c) = closed.as_mut() {
        c.arm();
    }
    gw.lifecycle.tasks.spawn(async move {
        let _slot = slot;
        // Dropped when the terminal ends, whichever way: records its close and duration.
        let _closed = closed;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_answers_cannot_run_as_pages() {
        for (ctype, attachment) in [
            (Some("text/html; charset=utf-8"), true),
            (Some("image/svg+xml"), true),
            (Some("application/xhtml+xml"), true),
            (Some("text/javascript"), true),
            (Some("application/jsonx"), true),
            (Some("something/unknown"), true),
            (None, true),
            (Some("application/json"), false),
            (Some("Application/JSON; charset=utf-8"), false),
            (Some("text/plain;charset=utf-8"), false),
            (Some("image/png"), false),
        ] {
            let mut h = HeaderMap::new();
            if let Some(t) = ctype {
                h.insert(header::CONTENT_TYPE, HeaderValue::from_static(t));
            }
            inert(&mut h);
            assert_eq!(h[header::CONTENT_SECURITY_POLICY], "sandbox", "{ctype:?}");
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert_eq!(h.contains_key(header::CONTENT_DISPOSITION), attachment, "{ctype:?}");
        }
    }

    #[test]
    fn any_coding_but_identity_is_encoded() {
        let mut h = HeaderMap::new();
        assert!(!encoded(&h));
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("identity"));
        assert!(!encoded(&h));
        h.append(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        assert!(encoded(&h));
    }
}
