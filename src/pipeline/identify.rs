//! Identify: the user behind a request (SSH login, Basic or Bearer credentials, a project host's
//! cookie, a terminal ticket), before anything else is decided about it.

use std::sync::Arc;

use http::Method;

use super::request::{Canonical, Target};
use crate::audit::Via;
use crate::audit::Who;
use crate::auth::credentials::Credentials;
use crate::auth::tokens;
use crate::auth::users::UserState;
use crate::http::error::HttpError;
use crate::policy::plan::Treatment;

use super::origin_rule::check_origin;
use super::{Front, Here};

/// What identification reads: where the request is handled, the canonical request, and its
/// target (looked at only once a credential is known good, or for a cookie's or ticket's
/// project).
pub(super) struct Asking<'a> {
    pub(super) here: Here<'a>,
    pub(super) request: &'a Canonical,
    pub(super) target: &'a Result<Target, HttpError>,
}

/// A user identified by `via`, no device or token id, not by a cookie.
pub(super) fn plain(via: Via) -> impl Fn(Arc<UserState>) -> Identified {
    move |user| Identified {
        user,
        by_cookie: false,
        who: Who { via, id: None },
    }
}

pub(super) struct Identified {
    pub(super) user: Arc<UserState>,
    /// A project host's cookie authenticated it (so the cookie CSRF rule applies).
    pub(super) by_cookie: bool,
    /// How, for the audit trail.
    pub(super) who: Who,
}

/// The user behind a request: the SSH login for tunnels, else Basic credentials (header or
/// `auth_token`; the password may be an API token), else a Bearer API token, else a project
/// host's own cookie (handed off from a browser login), else, for a terminal WebSocket only, a
/// ticket this gateway relayed to the same project. A ticket is used up only once the request
/// passes the origin check. A browser navigating to a project host with none of these is sent to
/// the login host's handoff.
pub(super) async fn identify(a: &Asking<'_>) -> Result<Identified, HttpError> {
    let Here {
        gw,
        state,
        conn,
        client,
    } = a.here;
    if let Front::Ssh { user, .. } = &conn.front {
        return state
            .users
            .get(&**user)
            .cloned()
            .map(plain(Via::Ssh))
            .ok_or_else(|| HttpError::Forbidden(format!("user {user} no longer exists")));
    }
    // The same Authorization header as the last password verified on this connection.
    let header = a.request.authorization();
    if let Some(user) = header.and_then(|h| conn.auth_memo.recall(h.as_bytes(), &state.users)) {
        return Ok(plain(Via::Password)(user));
    }
    let creds = a
        .request
        .credentials()
        .map_err(|e| HttpError::MalformedCredentials(e.to_string()))?;
    let check = crate::auth::Check {
        auth: &gw.auth,
        metrics: &gw.metrics,
        audit: &gw.audit,
        users: &state.users,
    };
    match creds {
        // A token never goes to argon2, whichever way it comes.
        Some(Credentials::Basic { user, password }) if tokens::is_token(password.expose()) => {
            // The user name counts only when it is a gateway user's (the token must then be
            // theirs): OpenCode 2's clients always send `opencode`, and a name nobody has must
            // not become a lockout key every such client shares.
            let named = check.users.contains_key(user.as_str()).then_some(user.as_str());
            let found = tokens::authenticate(&check, client, named, &password).await?;
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
        None => by_cookie_or_ticket(a).await,
    }
}

/// A user an API token vouched for, with the token's id for the audit trail.
fn by_token((user, id): (Arc<UserState>, Arc<str>)) -> Identified {
    Identified {
        user,
        by_cookie: false,
        who: Who {
            via: Via::Token,
            id: Some(id),
        },
    }
}

/// No credential in the request: a project front's own cookie, else (a terminal WebSocket
/// only) a ticket this gateway relayed to the same project, used up once the origin passes.
pub(super) async fn by_cookie_or_ticket(a: &Asking<'_>) -> Result<Identified, HttpError> {
    let (Here { gw, state, conn, .. }, request) = (a.here, a.request);
    let Ok(t) = a.target else {
        return Err(HttpError::Unauthenticated);
    };
    if let Some((user, device)) = by_cookie(a.here, request, t).await? {
        let via = if device.is_some() { Via::Device } else { Via::Cookie };
        return Ok(Identified {
            user,
            by_cookie: true,
            who: Who { via, id: device },
        });
    }
    let Some(ticket) = request.ticket() else {
        return Err(HttpError::Unauthenticated);
    };
    if request.upgrade.is_none() || t.treatment() != Treatment::TerminalConnect {
        return Err(HttpError::Unauthenticated);
    }
    check_origin(state, conn, request, "-", &t.project.name)?;
    match gw.browser.tickets.take(ticket, &t.project.name).await {
        Some(user) => state
            .users
            .get(&*user)
            .cloned()
            .map(plain(Via::Ticket))
            .ok_or(HttpError::Unauthenticated),
        None => Err(HttpError::Unauthenticated),
    }
}

/// On a project port, whether the browser also holds the login session `live` was handed off
/// from. A sibling port can plant a port cookie whose value its maker knows (his own, from his
/// own browser) but can neither read nor replace the HttpOnly login cookie a browser already
/// holds, which every port of the host name receives (`web/front.rs`). A project host never sees
/// the login cookie, and a sibling host cannot plant a `__Host-` cookie there.
async fn beside_its_login(
    here: Here<'_>,
    request: &Canonical,
    front: &crate::web::front::WebFront<'_>,
    live: &crate::auth::sessions::Live,
) -> Result<bool, HttpError> {
    if !front.own_port() {
        return Ok(true);
    }
    let login = request.login_cookie();
    let login = here.gw.browser.sessions.login_of(login, here.client).await?;
    if login.as_deref() == Some(&*live.login_id) {
        return Ok(true);
    }
    tracing::warn!(target: "security", peer = %here.client, user = %live.user, project = front.project().unwrap_or(""), reason = "port_session_other_login", "a project port's cookie beside another login (or none) refused");
    Ok(false)
}

/// The user of a project front's own cookie (`web/front.rs`: a project host, or the project's
/// own port), when the request is on that project's front and the session was handed off to
/// exactly that project. A browser navigation there without one goes to the login host's
/// handoff (only on a project front: the handoff can only give a cookie to one).
pub(super) async fn by_cookie(
    here: Here<'_>,
    request: &Canonical,
    t: &Target,
) -> Result<Option<(Arc<UserState>, Option<Arc<str>>)>, HttpError> {
    let Here {
        gw,
        state,
        conn,
        client,
    } = here;
    let host = request.host.as_deref();
    let front = crate::web::front::of(conn, host, state.settings.server.base_domain.as_deref());
    let crate::web::front::WebFront::Project { name, own_port } = front else {
        return Ok(None);
    };
    if name != &*t.project.name {
        return Ok(None);
    }
    if let Some(value) = request.session_cookie(&front)
        && let Some((live, user)) = (gw.browser.sessions)
            .for_host(value, client, Some(&t.project.name), &state.users)
            .await?
        && beside_its_login(here, request, &front, &live).await?
    {
        return Ok(Some((user, live.device.clone())));
    }
    if request.method() == Method::GET && request.wants_html() {
        let path = request.path_and_query();
        let handoff_state = crate::auth::sessions::random(16);
        let here = host.unwrap_or("");
        let location = match (own_port, state.settings.server.base_domain.as_deref()) {
            (false, Some(domain)) => crate::web::handoff::login_redirect(domain, here, path, &handoff_state),
            // A project port sends the browser to the main port of the same host it used, so the
            // login and the project share a host (and a phone needs no other name).
            _ => {
                let main = gw
                    .doors
                    .ports
                    .get()
                    .map_or(state.settings.server.listen.port(), |p| p.main);
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
