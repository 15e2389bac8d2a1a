//! One request through the gateway, a phase a file: [`handle`] keeps the books (access record,
//! metrics, the audit record, the error response); `handle_inner` reads the request once
//! (`request`: the canonical request, or one of the gateway's pages) and identifies its user
//! (`identify`); [`proceed`] then admits it (`admit`: role, origin, limits, size, the gateway's
//! files), plans it (`plan`: endpoint, the upstream's own routes, session scope, audit) and
//! forwards it (`forward`: the request phase; `response`: the answer). A request the gateway
//! makes on a user's behalf (`internal`) enters at [`proceed`].

mod admit;
mod body_check;
mod deadline;
mod fleet_gate;
pub mod forward;
mod identify;
pub mod internal;
mod origin_rule;
pub mod own_files;
mod plan;
mod policy_check;
pub mod request;
pub mod response;
mod session_scope;
mod withheld;

pub(crate) use crate::http::transport::Here;
pub use crate::http::transport::{ConnInfo, Front};

use admit::admit;
use identify::{Identified, identify};
use plan::plan;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode, header, request::Parts};
use hyper::body::Incoming;

use crate::audit::Who;
use crate::auth::users::UserState;
use crate::gateway::Gateway;
use crate::gateway::state::State;
use crate::http::body::{AccessRecord, ProxyBody, RequestBody};
use crate::http::error::HttpError;
use crate::http::rewrite;
use crate::policy::grants::Grant;
use forward::Forwarding;
use request::{Canonical, Reading, Target};

// Built at compile time: a `&str` name is parsed and validated on every lookup.
const SEC_FETCH_MODE: http::HeaderName = http::HeaderName::from_static("sec-fetch-mode");

/// How long an audited act's answer waits for its record to be written (a slow disk does not
/// hold answers back longer).
pub(crate) const AUDIT_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// Longest request target kept in the access log.
const LOG_TARGET_MAX: usize = 512;

pub(crate) async fn handle(
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
    record.answered(response.status().as_u16(), &gw.metrics);
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
        let here = Here {
            gw,
            state,
            conn,
            client,
        };
        let (mut request, target) = match request::read(state, conn, parts, gw.limits.max_uri_bytes)? {
            Reading::Page { page, parts, host } => {
                let ctx = crate::web::Ctx {
                    here,
                    parts: &parts,
                    host: host.as_deref(),
                    on_behalf: internal::on_behalf,
                };
                let body = body.take().expect("the body is taken once, here or by the forward");
                // Boxed: a page's future (the login's, a passkey's) is three times a proxied
                // request's, and hyper keeps the request's future for an HTTP/1.1 connection's
                // life and moves it into place per request (22 KiB where 6 suffice).
                return Box::pin(serve_page(&ctx, body, page, record)).await;
            }
            Reading::Project { request, target } => (request, target),
        };
        let Identified { user, by_cookie, who } = identify(&identify::Asking {
            here,
            request: &request,
            target: &target,
        })
        .await?;
        record.user = Some(user.name.clone());
        // A valid credential: the connection leaves the unauthenticated share (gateway/connections.rs).
        conn.authenticated(gw);
        let on = Proceeding {
            here,
            principal: Principal::User {
                user: &user,
                grant: None,
            },
            who,
            origin: if by_cookie {
                OriginRule::Cookie
            } else {
                OriginRule::Credentials
            },
        };
        let body = || RequestBody::Stream(body.take().expect("the body is taken once, here or by a page"));
        proceed(&on, &mut request, target?, body, record).await
    }
}

/// A gateway page: its answer, or (for a browser) its error as a page.
async fn serve_page(
    ctx: &crate::web::Ctx<'_>,
    body: Incoming,
    page: crate::web::Page,
    record: &mut AccessRecord,
) -> Result<Response<ProxyBody>, HttpError> {
    let html = crate::web::page::wants_html(&ctx.parts.headers) || ctx.parts.method == Method::POST;
    match crate::web::serve(ctx, body, page).await {
        Ok(r) => Ok(r),
        Err(e) if html && !matches!(e, HttpError::LoginRedirect { .. }) => {
            record.reason = Some(e.code());
            Ok(crate::web::page::error_page(e))
        }
        Err(e) => Err(e),
    }
}

/// Which origin rule a request passes (`policy::csrf`: `credentials_rule`, `check`).
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

/// Who a request is for and how it arrived, once identified: what the later phases read
/// beside the canonical request.
pub(crate) struct Proceeding<'a> {
    pub here: Here<'a>,
    pub principal: Principal<'a>,
    pub who: Who,
    pub origin: OriginRule,
}

/// Who a request to OpenCode is made for. Every request takes [`proceed`], whoever makes it:
/// a client's own, a page's act on a user's behalf, or the gateway's own act.
#[derive(Clone, Copy)]
pub(crate) enum Principal<'a> {
    /// A person, a token, a device: their role in the project decides, by the route table; or,
    /// for one of the table's named acts made on their word (`grant`, e.g. "Resume"), by the
    /// grant's class and only on its route. A client's own request never carries a grant.
    User {
        user: &'a Arc<UserState>,
        grant: Option<&'static Grant>,
    },
    /// The gateway itself (its guard, its control socket): no role, only what its grant names.
    Gateway(&'static Grant),
}

/// Who asks, for the body checks of a permission policy (`policy_check.rs`).
#[derive(Clone, Copy)]
pub(crate) enum Asker<'a> {
    /// A client or a person: with their token's policy, if it carries one.
    Client(Option<&'a str>),
    /// The gateway's own act (its policy's answers, its control socket's): not judged there.
    Gateway,
}

impl<'a> Asker<'a> {
    pub(super) fn policy(self) -> Option<&'a str> {
        match self {
            Asker::Client(p) => p,
            Asker::Gateway => None,
        }
    }
}

/// The session a `POST /session` made (its id, read from the answer for the audit).
fn created_session(audit: &Option<Box<crate::http::audit::Pending>>) -> Option<String> {
    audit
        .as_ref()
        .filter(|p| p.kind == crate::policy::plan::AuditKind::SessionCreate)
        .and_then(|p| p.created.clone())
}

impl<'p> Principal<'p> {
    pub(crate) fn asker(&self) -> Asker<'p> {
        match self {
            Principal::User { user, .. } => Asker::Client(user.policy.as_deref()),
            Principal::Gateway(_) => Asker::Gateway,
        }
    }

    /// The name in logs, limits and the audit trail (`guard`, `control` for the gateway).
    pub(crate) fn name(&self) -> &str {
        match self {
            Principal::User { user, .. } => &user.name,
            Principal::Gateway(g) => g.holder.name(),
        }
    }

    pub(crate) fn grant(&self) -> Option<&'static Grant> {
        match self {
            Principal::User { grant, .. } => *grant,
            Principal::Gateway(g) => Some(g),
        }
    }
}

/// The phases after identification, the same for a client's request and for one the gateway
/// makes on a user's behalf: admit (role, origin, limits, size, files), plan (endpoint, the
/// upstream's own routes, session scope, audit), the body phase (the few bodies that decide
/// something, read whole and judged: `body_check.rs`), forward. `body` is taken by the body phase.
#[allow(clippy::manual_async_fn)] // on purpose: an async fn would keep its arguments twice
pub(crate) fn proceed<'a>(
    on: &'a Proceeding<'a>,
    request: &'a mut Canonical,
    mut target: Target,
    body: impl FnOnce() -> RequestBody + 'a,
    record: &'a mut AccessRecord,
) -> impl Future<Output = Result<Response<ProxyBody>, HttpError>> + 'a {
    // Not an `async fn`, so the arguments are kept once in the future (see `forward::forward`).
    async move {
        record.project = Some(target.project.clone());
        record.class = target.class();
        let admitted = admit(on, request, &target)?;
        let planned = plan(on, request, &mut target, admitted.role, record).await?;
        fleet_gate::wait_for_room(on, &target).await?;
        let mut audit = planned.audit;
        let here = on.here;
        let terminal_close = audit.as_ref().and_then(|p| p.terminal_close(&here.gw.audit));
        let (user, upgrade) = (on.principal.name(), request.upgrade.is_some());
        let body = body_check::check(
            here,
            &on.principal,
            &planned.endpoint,
            &target,
            body(),
            upgrade,
            audit.as_deref_mut(),
        );
        let result = match body.await {
            Ok(body) => {
                forward::forward(Forwarding {
                    here,
                    endpoint: &planned.endpoint,
                    user,
                    request,
                    body,
                    target: &target,
                    stream_slot: admitted.stream_slot,
                    audit: audit.as_deref_mut(),
                    terminal_close,
                })
                .await
            }
            // Refused by the body phase: nothing was sent; the turn and the audit close below.
            Err(e) => Err(e),
        };
        if let (Some(policy), Some(session)) = (on.principal.asker().policy(), created_session(&audit)) {
            policy_check::keep(here.gw, &target.project.name, &session, policy).await;
        }
        if let Some(turn) = admitted.turn {
            let accepted = result.as_ref().is_ok_and(|r| r.status().is_success());
            here.gw.meter.turn_answered(turn, accepted);
        }
        // Finished once the status (the upstream's, or the gateway's error) is known.
        record.audit = audit;
        result
    }
}

#[cfg(test)]
mod tests {
    /// The size of the future a function returns, without calling it.
    fn returned_size<A, B, C, F>(_: fn(A, B, C) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// hyper keeps a request's future for an HTTP/1.1 connection's life (an idle event stream
    /// included) and moves it into place for every request: its size is memory per connection and
    /// copying per request. Rare branches (a page, a login's argon2 run, a body read whole, a
    /// server starting) are boxed where they are awaited; unboxed, a page alone made it 22 KiB in
    /// a release build (docs/performance.md, "Idle streams, round three"). Test builds are not
    /// optimized and make larger futures than release builds: the bound is for this build.
    #[test]
    fn a_requests_future_stays_small() {
        let size = returned_size(super::handle);
        eprintln!("the request's future: {size} bytes");
        assert!(
            size <= 8 * 1024,
            "the request's future is {size} bytes: box the branch that grew it"
        );
    }
}
