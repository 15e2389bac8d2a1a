//! The gateway's own pages: the browser login, the handoff that gives a project host its own
//! cookie, pairing a phone, and the control room (every session and every pending approval the
//! user may see). They live on the login host (any host that is not `<project>.<base_domain>`:
//! `base_domain` itself, the listen address) and, on project hosts, under the reserved prefix
//! `/_gw/` (OpenCode serves nothing there).
//!
//! Where this meets "the only project is served at `/`": a request that carries `Authorization`
//! (every OpenCode client, the SDK, scripts) to `/` goes to the project as before; a browser without
//! it gets the control room. The other page paths (`/login`, `/logout`, `/inbox`, `/pair`) are
//! OpenCode web-UI routes nobody uses, and always the gateway's.

pub mod budget_form;
pub mod ca_page;
pub mod form;
pub mod front;
pub mod handoff;
pub mod handoff_named;
pub mod handoff_target;
pub mod hook;
pub mod login;
pub mod page;
pub mod pair;
pub mod passkey_form;
pub mod push_form;
pub mod review;
pub mod room;
pub mod sso;
pub mod task_form;
pub mod trigger_form;

use std::net::IpAddr;
use std::sync::Arc;

use http::request::Parts;
use http::{Method, Response};
use hyper::body::Incoming;

use crate::gateway::Gateway;
use crate::http::body::ProxyBody;
use crate::http::cookie;
use crate::http::error::HttpError;
use crate::http::transport::{ConnInfo, Front, Here};
use crate::policy::canonical::CanonicalPath;

/// The reserved first path segment (any case: nothing under it ever reaches OpenCode).
pub(crate) const PREFIX: &str = "_gw";

/// A gateway page a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    Portal,
    Login,
    Logout,
    Inbox,
    Pair,
    /// Login host: mint a handoff ticket for a project host.
    Handoff,
    /// Project host, or the named host: redeem a handoff ticket, set the host's own cookie.
    Callback,
    /// The named host: begin the handoff from the login address (`handoff_named.rs`).
    Arrive,
    /// The control room's live updates (SSE).
    Events,
    /// Answer a pending request, abort a session.
    Act,
    /// Create a session in a project, then open it in the web UI.
    NewSession,
    /// Restart a project's spawned server (operators).
    Restart,
    /// Raise or reset a project's or a session's budget (operators).
    Budget,
    Trigger,
    Task,
    /// A task's review (issue 41): its diff, Ask for changes, Remove.
    Review,
    /// This browser's Web Push subscription.
    Push,
    /// Passkeys: add one, sign in with one, revoke one.
    Passkey,
    Static(&'static str),
    /// Login host: begin single sign-on (`[oidc]`).
    OidcStart,
    /// Login host: back from the identity provider.
    OidcCallback,
    /// A signed webhook delivery for a `[[trigger]]` (`hook.rs`): no login.
    Hook,
    /// Under the reserved prefix, but nothing there.
    Missing,
}

/// Which gateway page, if any, a request is for. Pure (no state beyond its arguments).
pub(crate) fn page(
    conn: &ConnInfo,
    host: Option<&str>,
    base_domain: Option<&str>,
    path: &CanonicalPath<'_>,
    has_authorization: bool,
    only_project: bool,
) -> Option<Page> {
    let own_port = match &conn.front {
        Front::Tls { bound: None } => false,
        Front::Tls { bound: Some(_) } => true,
        Front::Ssh { .. } => return None,
    };
    // The first few non-empty segments, without allocating (this runs for every request).
    let mut buf = [""; 4];
    let mut n = 0;
    for s in path.segments().iter().filter(|s| !s.is_empty()) {
        if n == buf.len() {
            n += 1;
            break;
        }
        buf[n] = s.as_ref();
        n += 1;
    }
    let segs = &buf[..n.min(buf.len())];
    let too_long = n > buf.len();
    // A project's own port is a project front like a project host: only the handoff's callback.
    let project_host = own_port
        || matches!((host, base_domain), (Some(h), Some(d)) if crate::policy::route::host_label(h, d).is_some());
    if segs.first().is_some_and(|s| s.eq_ignore_ascii_case(PREFIX)) {
        let rest = if too_long { &["", "", ""][..] } else { &segs[1..] };
        return Some(reserved_page(project_host, rest));
    }
    if project_host || too_long {
        return None;
    }
    login_host_page(segs, has_authorization, only_project)
}

/// A page under the reserved prefix (`rest`: the segments after it). A project front serves
/// only the handoff's callback; anything else there is missing.
fn reserved_page(project_host: bool, rest: &[&str]) -> Page {
    match (project_host, rest) {
        (true, ["callback"]) => Page::Callback,
        (false, ["handoff"]) => Page::Handoff,
        // The named host's side of its handoff (refused on any other login-host name).
        (false, ["callback"]) => Page::Callback,
        (false, ["arrive"]) => Page::Arrive,
        (false, ["events"]) => Page::Events,
        (false, ["act"]) => Page::Act,
        (false, ["new"]) => Page::NewSession,
        (false, ["restart"]) => Page::Restart,
        (false, ["budget"]) => Page::Budget,
        (false, ["trigger"]) => Page::Trigger,
        (false, ["task"]) => Page::Task,
        (false, ["review"]) => Page::Review,
        (false, ["push"]) => Page::Push,
        (false, ["passkey"]) => Page::Passkey,
        (false, ["oidc", "start"]) => Page::OidcStart,
        (false, ["oidc", "callback"]) => Page::OidcCallback,
        (false, ["hook", _]) => Page::Hook,
        (false, ["static", name]) => page::asset(name).map_or(Page::Missing, Page::Static),
        _ => Page::Missing,
    }
}

/// The login host's pages outside the reserved prefix; any other path is a project's.
fn login_host_page(segs: &[&str], has_authorization: bool, only_project: bool) -> Option<Page> {
    match segs {
        [] if has_authorization && only_project => None,
        // `/` with credentials and several projects keeps its old answer (which project?).
        [] if has_authorization => None,
        [] => Some(Page::Portal),
        ["login"] => Some(Page::Login),
        ["logout"] => Some(Page::Logout),
        ["inbox"] => Some(Page::Inbox),
        ["pair"] => Some(Page::Pair),
        // Browsers ask for it on their own: the gateway's icon, not a 401 from a project.
        ["favicon.ico"] => Some(Page::Static("icon.svg")),
        _ => None,
    }
}

/// A login-host page asked for on another name of the gateway (its address, `localhost`, a LAN
/// address): the browser goes to the login host (the base domain) first, so that the login,
/// pairing and the handoff to project hosts share one cookie. A login made on 127.0.0.1 was
/// unknown to the handoff on the base domain: a second password prompt, and a paired phone could
/// open no project's web UI. Without a base domain there are no project hosts and any name is
/// the login host. A navigation is redirected (the browser keeps a pairing code's fragment);
/// anything else is refused, since only a page served elsewhere could have sent it.
fn elsewhere(ctx: &Ctx<'_>, which: Page) -> Option<Result<Response<ProxyBody>, HttpError>> {
    let domain = ctx.state.settings.server.base_domain.as_deref()?;
    // A webhook's sender is no browser: it posts to whichever name its URL has.
    if matches!(which, Page::Static(_) | Page::Callback | Page::Missing | Page::Hook) {
        return None;
    }
    let host = ctx.host?;
    // The login host itself, and project hosts (whose only page is the handoff's callback).
    if crate::policy::route::strip_port(host).eq_ignore_ascii_case(domain)
        || crate::policy::route::host_label(host, domain).is_some()
    {
        return None;
    }
    let port = match handoff_target::port_of(host) {
        443 => String::new(),
        p => format!(":{p}"),
    };
    let login = format!("https://{domain}{port}");
    let path = ctx.parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    Some(match ctx.parts.method {
        Method::GET | Method::HEAD => Ok(page::redirect(&format!("{login}{path}"))),
        _ => Err(HttpError::Forbidden(format!(
            "the gateway's pages live on its login host: open {login}{} there",
            ctx.parts.uri.path()
        ))),
    })
}

/// Everything a page handler (and identification) may need about its request.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    /// The gateway, its state, the connection and the client: read as `ctx.gw`, `ctx.client`.
    pub here: Here<'a>,
    pub parts: &'a Parts,
    pub host: Option<&'a str>,
    /// The road for a request a page makes on a user's behalf (the control room's answers, aborts
    /// and new sessions): the pipeline's own phases as that user (`pipeline/internal.rs`), handed
    /// in by the pipeline, so there is one road to the upstream.
    pub on_behalf: OnBehalf,
}

impl<'a> std::ops::Deref for Ctx<'a> {
    type Target = Here<'a>;
    fn deref(&self) -> &Here<'a> {
        &self.here
    }
}

/// Makes the road for requests on a user's behalf: the gateway, the user, how they were
/// identified, the client's address and where the act came from (for the audit trail).
pub(crate) type OnBehalf = for<'g> fn(
    &'g Arc<Gateway>,
    Arc<crate::auth::users::UserState>,
    crate::audit::Who,
    IpAddr,
    &'static str,
) -> Box<dyn crate::inbox::Road + 'g>;

impl Ctx<'_> {
    /// This request's own origin, `https://host[:port]`, normalised.
    pub(crate) fn own_origin(&self) -> String {
        crate::policy::origin::normalize(&format!("https://{}", self.host.unwrap_or("localhost"))).unwrap_or_default()
    }

    /// The login host's origin as configured (`Reach::login_origin`: the public URL's port, or
    /// the port bound at start when it says 0), whatever this request's `Host` says.
    pub(crate) fn login_origin(&self) -> String {
        let login = self.reach().login_origin();
        crate::policy::origin::normalize(&login).unwrap_or(login)
    }

    /// The one origin passkey ceremonies are valid on (`Reach::passkey_origin`: the login origin
    /// by name, else the named host `<host>.local` the certificate covers), whatever this
    /// request's `Host` says.
    pub(crate) fn passkey_origin(&self) -> String {
        let origin = self.reach().passkey_origin();
        crate::policy::origin::normalize(&origin).unwrap_or(origin)
    }

    /// The named host's origin when passkeys live there instead of at the login address.
    pub(crate) fn named_origin(&self) -> Option<String> {
        self.reach().named_origin()
    }

    /// Where the gateway is reached, with the ports bound at start and its named host. Built
    /// only for the pages that need it (a passkey, the portal, a handoff), never per proxied request.
    fn reach(&self) -> crate::reach::Reach {
        let bound = self.gw.doors.ports.get().map(|p| p.main);
        crate::reach::Reach::new(&self.state.settings, bound)
            .with_named(crate::reach::named_host(|n| self.gw.doors.certs.covers(n)))
    }

    /// Refuse an unsafe request from another origin (see [`crate::policy::csrf`]).
    pub(crate) fn check_csrf(&self) -> Result<(), HttpError> {
        crate::policy::csrf::check(
            &self.parts.method,
            false,
            crate::policy::csrf::Browser::of(&self.parts.headers),
            &self.own_origin(),
            &self.state.settings.server.allowed_origins,
        )
        .map_err(|r| {
            tracing::warn!(target: "security", peer = %self.client, reason = r.code(), path = self.parts.uri.path(), "a cross-origin request to a gateway page refused");
            HttpError::Forbidden(r.message().into())
        })
    }

    /// The login session behind the request's cookie (a login-host session only).
    pub(crate) async fn login_session(&self) -> Result<Option<Arc<crate::auth::sessions::Live>>, HttpError> {
        let Some(value) = cookie::find(&self.parts.headers) else {
            return Ok(None);
        };
        let live = (self.gw.browser.sessions)
            .for_host(value, self.client, None, &self.state.users)
            .await?
            .map(|(live, _)| live);
        if live.is_some() {
            // A live login session is a valid credential: the connection leaves the
            // unauthenticated share (gateway/connections.rs).
            self.conn.authenticated(self.gw);
        }
        Ok(live)
    }
}

/// Serve a gateway page.
pub(crate) async fn serve(ctx: &Ctx<'_>, body: Incoming, which: Page) -> Result<Response<ProxyBody>, HttpError> {
    if let Some(login_host) = elsewhere(ctx, which) {
        return login_host;
    }
    let method = &ctx.parts.method;
    match (which, method) {
        (Page::Static(name), &Method::GET | &Method::HEAD) => {
            let host = crate::policy::route::strip_port(ctx.host.unwrap_or(""));
            let http = ctx.gw.doors.ports.get().and_then(|p| p.http);
            Ok(page::asset_response(name, http.map(|port| (host, port))))
        }
        (Page::Login, &Method::GET) => login::form(ctx).await,
        (Page::Login, &Method::POST) => login::submit(ctx, body).await,
        (Page::Logout, &Method::POST) => login::logout(ctx).await,
        (Page::Logout, &Method::GET) => Ok(page::redirect("/")),
        (Page::Handoff, &Method::GET) => handoff::mint(ctx).await,
        (Page::Callback, &Method::GET) => handoff::redeem(ctx).await,
        (Page::Arrive, &Method::GET) => handoff_named::arrive(ctx).await,
        (Page::Pair, &Method::GET) => pair::form(ctx).await,
        (Page::Pair, &Method::POST) => pair::submit(ctx, body).await,
        (Page::Portal, &Method::GET) => room::portal(ctx).await,
        (Page::Inbox, &Method::GET) => room::inbox(ctx).await,
        (Page::Events, &Method::GET) => room::events(ctx).await,
        (Page::Act, &Method::POST) => room::act(ctx, body).await,
        (Page::NewSession, &Method::POST) => room::new_session(ctx, body).await,
        (Page::Restart, &Method::POST) => room::restart(ctx, body).await,
        (Page::Budget, &Method::POST) => budget_form::raise(ctx, body).await,
        (Page::Trigger, &Method::POST) => trigger_form::steer(ctx, body).await,
        (Page::Task, &Method::POST) => task_form::create(ctx, body).await,
        (Page::Review, &Method::GET) => review::show(ctx).await,
        (Page::Review, &Method::POST) => review::act(ctx, body).await,
        (Page::Push, &Method::POST) => push_form::subscribe(ctx, body).await,
        (Page::Passkey, &Method::POST) => passkey_form::post(ctx, body).await,
        (Page::OidcStart, &Method::GET) => sso::start(ctx).await,
        (Page::OidcCallback, &Method::GET) => sso::callback(ctx).await,
        (Page::Hook, &Method::POST) => {
            let name = ctx.parts.uri.path().rsplit('/').next().unwrap_or("");
            hook::deliver(ctx, name, body).await
        }
        (Page::Missing, _) => Err(HttpError::NotFound("no such gateway page".into())),
        _ => Err(HttpError::MethodNotAllowed),
    }
}
