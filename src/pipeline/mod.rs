//! One request through the gateway. [`handle`] keeps the books (access record, metrics, error
//! response); [`handle_inner`] runs the phases with `?`: read (the canonical request, or a
//! gateway page) → identify → [`proceed`]: admit (role, origin, limits, size, the gateway's
//! files) → plan (endpoint, session scope, audit) → [`forward`] (request phase) →
//! [`response`] (response phase). A request the gateway makes on a user's behalf
//! (`pipeline/internal.rs`) enters at [`proceed`].

pub mod forward;
pub mod internal;
pub mod own_files;
pub mod request;
pub mod response;

pub use crate::http::transport::{ConnInfo, Front};
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderValue, Method, Request, Response, StatusCode, header, request::Parts};
use hyper::body::Incoming;

use crate::audit::Via;
use crate::audit::Who;
use crate::auth::credentials::{self, Credentials};
use crate::auth::tokens;
use crate::auth::users::UserState;
use crate::config::Role;
use crate::gateway::Gateway;
use crate::gateway::state::State;
use crate::http::audit::Pending;
use crate::http::body::{AccessRecord, ProxyBody, RequestBody, StreamHold};
use crate::http::error::HttpError;
use crate::http::rewrite;
use crate::metrics::{Refusal, StreamKind};
use crate::policy::plan::Treatment;
use forward::Forwarding;
use request::{Reading, Target};

// Names built at compile time: a `&str` name is parsed and validated on every lookup.
const SEC_FETCH_MODE: http::HeaderName = http::HeaderName::from_static("sec-fetch-mode");
const SEC_FETCH_SITE: http::HeaderName = http::HeaderName::from_static("sec-fetch-site");

/// How long an audited act's answer waits for its record to be written (a slow disk does not
/// hold answers back longer).
pub(crate) const AUDIT_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// Longest request target kept in the access log.
const LOG_TARGET_MAX: usize = 512;

pub async fn handle(
    gw: Arc<Gateway>,
    conn: Arc<ConnInfo>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let state = gw.state();
    let client =
        crate::http::client_addr::client_ip(conn.peer.ip(), req.headers(), &state.settings.server.trusted_proxies);
    let mut record = AccessRecord::new(client, conn.transport(), req.method().clone(), || log_target(req.uri()));
    // A browser's own fetches (they say Sec-Fetch-Mode) never get a Basic challenge: it would pop
    // up a password dialog over the web UI; browsers log in with the form and a cookie.
    let browser = req.headers().contains_key(SEC_FETCH_MODE);
    let (parts, body) = req.into_parts();
    // Decided while the head is at hand (a GET's empty body answers at once). The body stays
    // here until a stage takes it (a page, or the forward): a refusal before that reads a small
    // body first, so an HTTP/2 client sees the refusal instead of a reset stream.
    let read_before_refusal = crate::http::discard::wanted(&parts.headers, &body);
    let mut body = Some(body);
    let response = match handle_inner(&gw, &state, &conn, client, parts, &mut body, &mut record).await {
        Ok(r) => r,
        Err(e) => {
            if let Some(unread) = body.take()
                && read_before_refusal
            {
                crate::http::discard::discard(unread).await;
            }
            record.reason = Some(e.code());
            if StatusCode::from(&e).is_server_error() {
                tracing::warn!(peer = %client, project = record.project.as_ref().map_or("-", |p| &*p.name), reason = e.code(), "{e}");
            }
            let mut r = e.into_response();
            if browser {
                r.headers_mut().remove(header::WWW_AUTHENTICATE);
            }
            r
        }
    };
    record.status = response.status().as_u16();
    // The handles were resolved with the state: one atomic add, no label lookup.
    record
        .project
        .as_ref()
        .map_or(&gw.metrics.unrouted, |p| &p.metrics)
        .count(record.class, record.status);
    if let Some(pending) = record.audit.take()
        && let Some(r) = pending.finish(record.status)
    {
        // Written before the answer goes out: an act the client saw answered is in the trail.
        gw.audit.record_written(r, AUDIT_WAIT).await;
    }
    let (parts, body) = response.into_parts();
    Ok(Response::from_parts(parts, body.metered(record)))
}

fn log_target(uri: &http::Uri) -> String {
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

#[allow(clippy::manual_async_fn)] // on purpose: an async fn would keep its arguments twice
fn handle_inner<'a>(
    gw: &'a Arc<Gateway>,
    state: &'a State,
    conn: &'a ConnInfo,
    client: IpAddr,
    parts: Parts,
    body: &'a mut Option<Incoming>,
    record: &'a mut AccessRecord,
) -> impl Future<Output = Result<Response<ProxyBody>, HttpError>> + 'a {
    // Not an `async fn`, so `parts` is kept once in the future (see `forward::forward`).
    async move {
        let limits = &gw.limits;
        let uri_len = parts.uri.path_and_query().map_or(0, |pq| pq.as_str().len());
        if uri_len > limits.max_uri_bytes {
            return Err(HttpError::UriTooLong {
                max: limits.max_uri_bytes,
            });
        }
        let Reading {
            host,
            upgrade,
            target,
            page,
        } = request::read(state, conn, &parts)?;
        if let Some(page) = page {
            let body = body.take().expect("the body is taken once, here or by the forward");
            return serve_page(gw, state, conn, client, &parts, host.as_deref(), body, page, record).await;
        }

        let Identified { user, by_cookie, who } = identify(
            gw,
            state,
            conn,
            client,
            &parts,
            host.as_deref(),
            &target,
            upgrade.is_some(),
        )
        .await?;
        record.user = Some(user.name.clone());
        // A valid credential: the connection leaves the unauthenticated share (front/listen/table.rs).
        conn.authenticated(gw);

        if matches!(conn.front, Front::Ssh { .. }) && !host.as_deref().is_some_and(crate::policy::origin::is_local_host)
        {
            tracing::warn!(target: "security", peer = %conn.peer.ip(), user = %user.name, reason = "foreign_host_over_ssh", "a request through an SSH tunnel named a non-local host");
            return Err(HttpError::Forbidden(
                "through an SSH tunnel, use http://127.0.0.1:<local port> or http://localhost:<local port>".into(),
            ));
        }
        let on = Proceeding {
            gw,
            state,
            conn,
            client,
            host: host.as_deref(),
            user: &user,
            who,
            origin: if by_cookie {
                OriginRule::Cookie
            } else {
                OriginRule::Credentials
            },
        };
        let body = || RequestBody::Stream(body.take().expect("the body is taken once, here or by a page"));
        proceed(&on, parts, target?, upgrade, body, record).await
    }
}

/// A gateway page: its answer, or (for a browser) its error as a page.
#[allow(clippy::too_many_arguments)]
async fn serve_page(
    gw: &Arc<Gateway>,
    state: &State,
    conn: &ConnInfo,
    client: IpAddr,
    parts: &Parts,
    host: Option<&str>,
    body: Incoming,
    page: crate::web::Page,
    record: &mut AccessRecord,
) -> Result<Response<ProxyBody>, HttpError> {
    let html = crate::web::page::wants_html(&parts.headers) || parts.method == Method::POST;
    let ctx = crate::web::Ctx {
        gw,
        state,
        conn,
        client,
        parts,
        host,
        on_behalf: internal::on_behalf,
    };
    match crate::web::serve(&ctx, body, page).await {
        Ok(r) => Ok(r),
        Err(e) if html && !matches!(e, HttpError::LoginRedirect { .. }) => {
            record.reason = Some(e.code());
            Ok(crate::web::page::error_page(e))
        }
        Err(e) => Err(e),
    }
}

/// Which origin rule a request passes (`check_origin`, `web::csrf`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OriginRule {
    /// Basic, Bearer, a ticket, an SSH channel: the older origin rule.
    Credentials,
    /// A project front's cookie: the stricter cross-site rule, and a WebSocket's exact origin.
    Cookie,
    /// A request the gateway makes on a user's behalf from one of its own pages, which passed
    /// the page's cross-site rule before it was made (`pipeline/internal.rs`).
    CheckedByPage,
}

/// Who a request is for and how it arrived, once identified: what the later phases read.
pub(crate) struct Proceeding<'a> {
    pub gw: &'a Arc<Gateway>,
    pub state: &'a State,
    pub conn: &'a ConnInfo,
    pub client: IpAddr,
    pub host: Option<&'a str>,
    pub user: &'a Arc<UserState>,
    pub who: Who,
    pub origin: OriginRule,
}

/// The phases after identification, the same for a client's request and for one the gateway
/// makes on a user's behalf: admit (role, origin, limits, size, files), plan (endpoint, the
/// upstream's own routes, session scope, audit), forward. `body` is taken only by the forward.
#[allow(clippy::manual_async_fn)] // on purpose: an async fn would keep its arguments twice
pub(crate) fn proceed<'a>(
    on: &'a Proceeding<'a>,
    parts: Parts,
    mut target: Target,
    upgrade: Option<HeaderValue>,
    body: impl FnOnce() -> RequestBody + 'a,
    record: &'a mut AccessRecord,
) -> impl Future<Output = Result<Response<ProxyBody>, HttpError>> + 'a {
    // Not an `async fn`, so the arguments are kept once in the future (see `forward::forward`).
    async move {
        record.project = Some(target.project.clone());
        record.class = target.class();
        let admitted = admit(on, &parts, &target, upgrade.is_some())?;
        let planned = plan(on, &parts, &mut target, admitted.role, record).await?;
        let mut audit = planned.audit;
        let terminal_close = audit.as_ref().and_then(|p| p.terminal_close(&on.gw.audit));
        let result = forward::forward(Forwarding {
            gw: on.gw,
            conn: on.conn,
            client: on.client,
            endpoint: &planned.endpoint,
            user: on.user,
            parts,
            body: body(),
            target: &target,
            host: on.host,
            upgrade,
            stream_slot: admitted.stream_slot,
            audit: audit.as_deref_mut(),
            terminal_close,
        })
        .await;
        // Finished once the status (the upstream's, or the gateway's error) is known.
        record.audit = audit;
        result
    }
}

struct Admitted {
    role: Role,
    stream_slot: Option<StreamHold>,
}

/// May this user do this here, now? The role the route needs, the origin rule, the request and
/// stream budgets, the declared size, the gateway's own files, the workspace guard.
fn admit(on: &Proceeding<'_>, parts: &Parts, target: &Target, upgrade: bool) -> Result<Admitted, HttpError> {
    let (gw, user, project) = (on.gw, on.user, &target.project);
    let limits = &gw.limits;
    let role = user
        .grants
        .role_in(&project.name)
        .ok_or_else(|| HttpError::NotGranted {
            user: user.name.to_string(),
            project: project.name.to_string(),
        })?;
    crate::policy::authz::check_target(role, &parts.method, target.class, target.label(), target.note())?;
    match on.origin {
        OriginRule::Cookie => {
            // The browser's cookie authenticates this: the stricter rule, and a WebSocket must
            // say the project front's exact origin.
            let own =
                crate::policy::origin::normalize(&format!("https://{}", on.host.unwrap_or(""))).unwrap_or_default();
            crate::web::csrf::check(&parts.method, upgrade, &parts.headers, &own, &on.state.settings.server.allowed_origins)
                .map_err(|r| {
                    tracing::warn!(target: "security", peer = %on.client, user = %user.name, project = %project.name, reason = r.code(), "a cross-origin request with a project host's cookie refused");
                    HttpError::Forbidden(r.message().into())
                })?;
        }
        OriginRule::Credentials => {
            check_origin(on.state, on.conn, parts, on.host, upgrade, &user.name, &project.name)?;
        }
        OriginRule::CheckedByPage => {}
    }
    let treatment = target.treatment();
    if upgrade && treatment != Treatment::TerminalConnect {
        return Err(HttpError::BadRequest(format!(
            "{} {} does not switch protocols; only terminal connections do",
            parts.method,
            target.label()
        )));
    }
    gw.auth.limiters.request(&user.name).map_err(|d| {
        gw.metrics.refused(Refusal::Requests);
        HttpError::RateLimited {
            retry_after: d.retry_after,
        }
    })?;
    let stream_slot = treatment.long_lived().then(|| stream_hold(on, treatment)).transpose()?;
    if let Some(len) = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        && len > limits.max_body_bytes
    {
        return Err(HttpError::PayloadTooLarge {
            max: limits.max_body_bytes,
        });
    }
    own_files::check_request(gw, on.client, user, target, parts)?;
    if project.config.directory.is_some() && target.route.is_some_and(|r| r.workspace_switch) {
        return Err(HttpError::Forbidden(format!(
            "{} {} would leave project {}'s directory; workspaces are not available through the gateway",
            parts.method,
            target.label(),
            project.name
        )));
    }
    Ok(Admitted { role, stream_slot })
}

/// A long-lived request's hold: the user's stream slot (an SSH channel already holds one for
/// everything it carries) and its count in the open-streams gauge.
fn stream_hold(on: &Proceeding<'_>, treatment: Treatment) -> Result<StreamHold, HttpError> {
    let gw = on.gw;
    let slot = if matches!(on.conn.front, Front::Ssh { .. }) {
        None
    } else {
        Some(
            gw.streams
                .try_acquire(on.user.name.clone(), gw.limits.max_streams_per_user)
                .ok_or_else(|| {
                    gw.metrics.refused(Refusal::Streams);
                    HttpError::TooManyStreams {
                        max: gw.limits.max_streams_per_user,
                    }
                })?,
        )
    };
    let kind = if treatment == Treatment::TerminalConnect {
        StreamKind::Terminal
    } else {
        StreamKind::Events
    };
    Ok(StreamHold {
        slot,
        gauge: gw.metrics.stream_open(kind),
    })
}

struct Planned {
    endpoint: Arc<crate::upstream::endpoint::Endpoint>,
    audit: Option<Box<Pending>>,
}

/// Where and how it goes: the project's endpoint (started if it must be), the request judged
/// again when the upstream's own route table arrived meanwhile, a shared upstream's session
/// scope, and the audit record the route asks for.
async fn plan(
    on: &Proceeding<'_>,
    parts: &Parts,
    target: &mut Target,
    role: Role,
    record: &mut AccessRecord,
) -> Result<Planned, HttpError> {
    let gw = on.gw;
    let project = target.project.clone();
    let endpoint = match project.ready_endpoint() {
        Some(e) => e,
        None => project.endpoint(gw.limits.spawn_ready_timeout, &gw.upstream).await?,
    };
    // A server whose API document was not known when the request was read has it now (or could
    // not be read): judge the request again with it (a route it added may need more than the
    // table's guess).
    if !target.upstream_known && project.api().is_some() {
        *target = target.with_upstream_api(on.state, &parts.method, parts.uri.path())?;
        crate::policy::authz::check_target(role, &parts.method, target.class, target.label(), target.note())?;
        own_files::check_request(gw, on.client, on.user, target, parts)?;
        record.class = target.class();
    }
    if project.shared_upstream
        && let Some(id) = &target.session
    {
        forward::check_session_scope(gw, &project, &endpoint, id).await?;
    }
    // Decided on the route the request was judged on; nothing allocated for other routes.
    let audit = match target.route.and_then(|r| r.audit) {
        Some(kind) if gw.audit.enabled() => Some(Box::new(Pending::begin(
            kind,
            &on.user.name,
            &project.name,
            on.client,
            &on.who,
            target.session.as_deref(),
            target.label(),
            &target.upstream_path,
            &parts.headers,
        ))),
        _ => None,
    };
    Ok(Planned { endpoint, audit })
}

/// A browser page from elsewhere may not write or open terminals with the user's credentials
/// (browsers attach cached Basic credentials to any request to the gateway's origin). Without an
/// `Origin`, a browser's own word that the request is cross-site (`Sec-Fetch-Site`) is enough.
fn check_origin(
    state: &State,
    conn: &ConnInfo,
    parts: &Parts,
    host: Option<&str>,
    upgrade: bool,
    user: &str,
    project: &str,
) -> Result<(), HttpError> {
    let unsafe_method = !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !unsafe_method && !upgrade {
        return Ok(());
    }
    let Some(origin) = parts.headers.get(header::ORIGIN) else {
        if parts
            .headers
            .get(SEC_FETCH_SITE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
        {
            tracing::warn!(target: "security", peer = %conn.peer.ip(), user, project, reason = "cross_site_fetch", "a cross-site request without Origin refused");
            return Err(HttpError::Forbidden(
                "a cross-site request (Sec-Fetch-Site: cross-site) may not write or open terminals".into(),
            ));
        }
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("null");
    if crate::policy::origin::allowed(origin, conn.scheme(), host, &state.settings.server.allowed_origins) {
        return Ok(());
    }
    tracing::warn!(target: "security", peer = %conn.peer.ip(), user, project, reason = "foreign_origin", origin, "request from a foreign origin refused");
    Err(HttpError::Forbidden(format!(
        "requests from the origin {origin} are not allowed (add it to server.allowed_origins to allow it)"
    )))
}

/// A user identified by `via`, no device or token id, not by a cookie.
fn plain(via: Via) -> impl Fn(Arc<UserState>) -> Identified {
    move |user| Identified {
        user,
        by_cookie: false,
        who: Who { via, id: None },
    }
}

struct Identified {
    user: Arc<UserState>,
    /// A project host's cookie authenticated it (so the cookie CSRF rule applies).
    by_cookie: bool,
    /// How, for the audit trail.
    who: Who,
}

/// The user behind a request: the SSH login for tunnels, else Basic credentials (header or
/// `auth_token`; the password may be an API token), else a Bearer API token, else a project
/// host's own cookie (handed off from a browser login), else, for a terminal WebSocket only, a
/// ticket this gateway relayed to the same project. A ticket is used up only once the request
/// passes the origin check. A browser navigating to a project host with none of these is sent to
/// the login host's handoff.
#[allow(clippy::too_many_arguments)]
async fn identify(
    gw: &Gateway,
    state: &State,
    conn: &ConnInfo,
    client: IpAddr,
    parts: &Parts,
    host: Option<&str>,
    target: &Result<Target, HttpError>,
    upgrade: bool,
) -> Result<Identified, HttpError> {
    let by_token = |(user, id): (Arc<UserState>, Arc<str>)| Identified {
        user,
        by_cookie: false,
        who: Who {
            via: Via::Token,
            id: Some(id),
        },
    };
    if let Front::Ssh { user, .. } = &conn.front {
        return state
            .users
            .get(&**user)
            .cloned()
            .map(plain(Via::Ssh))
            .ok_or_else(|| HttpError::Forbidden(format!("user {user} no longer exists")));
    }
    // The same Authorization header as the last password verified on this connection.
    let header = parts.headers.get(header::AUTHORIZATION);
    if let Some(user) = header.and_then(|h| conn.auth_memo.recall(h.as_bytes(), &state.users)) {
        return Ok(plain(Via::Password)(user));
    }
    let creds = match credentials::from_headers(&parts.headers) {
        Ok(Some(c)) => Some(c),
        Ok(None) => credentials::from_query(parts.uri.query()),
        Err(e) => return Err(HttpError::MalformedCredentials(e.to_string())),
    };
    let check = crate::auth::Check {
        auth: &gw.auth,
        metrics: &gw.metrics,
        audit: &gw.audit,
        users: &state.users,
    };
    match creds {
        // A token never goes to argon2, whichever way it comes.
        Some(Credentials::Basic { user, password }) if tokens::is_token(password.expose()) => {
            let found = tokens::authenticate(&check, client, Some(&user), &password).await?;
            Ok(by_token(found))
        }
        Some(Credentials::Basic { user, password }) => {
            let (user, until) = crate::auth::password_until(&check, client, &user, &password, "basic").await?;
            // Only a header's credential: one from the query is not what the next request's
            // header will be compared with.
            if let Some(h) = header {
                conn.auth_memo.remember(h.as_bytes(), user.clone(), until);
            }
            Ok(plain(Via::Password)(user))
        }
        Some(Credentials::Bearer(token)) if tokens::is_token(token.expose()) => {
            let found = tokens::authenticate(&check, client, None, &token).await?;
            Ok(by_token(found))
        }
        Some(Credentials::Bearer(_)) => Err(HttpError::BadCredentials),
        None => by_cookie_or_ticket(gw, state, conn, client, parts, host, target, upgrade).await,
    }
}

/// No credential in the request: a project front's own cookie, else (a terminal WebSocket
/// only) a ticket this gateway relayed to the same project, used up once the origin passes.
#[allow(clippy::too_many_arguments)]
async fn by_cookie_or_ticket(
    gw: &Gateway,
    state: &State,
    conn: &ConnInfo,
    client: IpAddr,
    parts: &Parts,
    host: Option<&str>,
    target: &Result<Target, HttpError>,
    upgrade: bool,
) -> Result<Identified, HttpError> {
    let Ok(t) = target else {
        return Err(HttpError::Unauthenticated);
    };
    if let Some((user, device)) = by_cookie(gw, state, conn, client, parts, host, t).await? {
        let via = if device.is_some() { Via::Device } else { Via::Cookie };
        return Ok(Identified {
            user,
            by_cookie: true,
            who: Who { via, id: device },
        });
    }
    let Some(ticket) = parts.uri.query().and_then(|q| crate::policy::query::get(q, "ticket")) else {
        return Err(HttpError::Unauthenticated);
    };
    if !upgrade || t.treatment() != Treatment::TerminalConnect {
        return Err(HttpError::Unauthenticated);
    }
    check_origin(state, conn, parts, host, upgrade, "-", &t.project.name)?;
    match gw.tickets.take(&ticket, &t.project.name) {
        Some(user) => state
            .users
            .get(&*user)
            .cloned()
            .map(plain(Via::Ticket))
            .ok_or(HttpError::Unauthenticated),
        None => Err(HttpError::Unauthenticated),
    }
}

/// The user of a project front's own cookie (`web/front.rs`: a project host, or the project's
/// own port), when the request is on that project's front and the session was handed off to
/// exactly that project. A browser navigation there without one goes to the login host's
/// handoff (only on a project front: the handoff can only give a cookie to one).
async fn by_cookie(
    gw: &Gateway,
    state: &State,
    conn: &ConnInfo,
    client: IpAddr,
    parts: &Parts,
    host: Option<&str>,
    t: &Target,
) -> Result<Option<(Arc<UserState>, Option<Arc<str>>)>, HttpError> {
    let front = crate::web::front::of(conn, host, state.settings.server.base_domain.as_deref());
    let crate::web::front::WebFront::Project { name, own_port } = front else {
        return Ok(None);
    };
    if name != &*t.project.name {
        return Ok(None);
    }
    if let Some(value) = front.find_session(&parts.headers)
        && let Some(live) = gw.web.check(value, client).await?
        && live.host.as_deref() == Some(&*t.project.name)
        && let Some(user) = state.users.get(&*live.user)
    {
        return Ok(Some((user.clone(), live.device.clone())));
    }
    if parts.method == Method::GET && crate::web::page::wants_html(&parts.headers) {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let handoff_state = crate::auth::sessions::random(16);
        let here = host.unwrap_or("");
        let location = match (own_port, state.settings.server.base_domain.as_deref()) {
            (false, Some(domain)) => crate::web::handoff::login_redirect(domain, here, path, &handoff_state),
            // A project port sends the browser to the main port of the same host it used, so the
            // login and the project share a host (and a phone needs no other name).
            _ => {
                let main = gw.ports.get().map_or(state.settings.server.listen.port(), |p| p.main);
                let bare = crate::policy::route::strip_port(here);
                crate::web::handoff::login_redirect_to(&format!("{bare}:{main}"), here, path, &handoff_state)
            }
        };
        return Err(HttpError::LoginRedirect {
            location,
            state: handoff_state,
            cookie: front.handoff_cookie().into_owned(),
        });
    }
    Ok(None)
}
