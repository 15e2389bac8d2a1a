//! Giving a project host its own cookie without a second login (the pattern of Coder's and
//! GitLab's workspace proxies). A project host without a cookie sets a random handoff state as a
//! host-only cookie and sends the browser to the login host's `/_gw/handoff?to=<url>&state=<s>`;
//! there, with a live login session, the gateway checks that the target is
//! `https://<project>.<base_domain>` on this port for a project the user may use, mints a
//! single-use ticket (`limits.handoff_ttl`, 60 s, kept as a digest, bound to the login session,
//! project, path and state) and sends the browser to `https://<project host>/_gw/callback?ticket=…`.
//! The project host redeems it once, only in the browser holding the state (so a ticket an attacker
//! minted with their own login cannot log a victim's browser into the attacker's session) and, on
//! a project's own port, only beside the login cookie of the session it was minted in (a sibling
//! port can plant the state cookie there, not replace the login cookie: `web/front.rs`), sets its
//! own host-only `__Host-` cookie (a child of the login session: it dies with it) and goes on to the
//! path. The same ticket also gives the gateway's named host (`<host>.local`, where passkeys work
//! when the login host is an address) a login of its own: `web/handoff_named.rs`. Nothing under
//! `/_gw/` reaches OpenCode; the ticket is redacted from access lines and never
//! sent as a Referer (`Referrer-Policy: no-referrer`).

use blake2::{Blake2b256, Digest};
use http::{Response, header};

use super::handoff_target::{port_of, target};
use super::{Ctx, form, page};
use crate::auth::handoff::Ticket;
use crate::auth::once::Seen;
use crate::auth::sessions::{LOGIN, Origin};
use crate::http::body::ProxyBody;
use crate::http::cookie;
use crate::http::error::HttpError;
use crate::store::PutOnce;

fn digest(ticket: &str) -> [u8; 32] {
    Blake2b256::digest(ticket.as_bytes()).into()
}

/// Login host: `GET /_gw/handoff?to=…`.
pub(crate) async fn mint(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let base_domain = ctx.state.settings.server.base_domain.as_deref();
    let query = ctx.parts.uri.query().unwrap_or("");
    let Some(login) = ctx.login_session().await? else {
        let here = format!("/_gw/handoff?{query}");
        return Ok(page::redirect(&format!("/login?next={}", form::encode(&here))));
    };
    let to = crate::policy::query::get(query, "to").unwrap_or_default();
    let state = crate::policy::query::get(query, "state").unwrap_or_default();
    if state.is_empty() {
        return Err(HttpError::BadRequest(
            "this login link has no state; open the project's address again".into(),
        ));
    }
    let ports = ctx.gw.doors.ports.get().cloned().unwrap_or_default();
    // The named host, from anywhere but itself (where its own project ports are the targets).
    let named = ctx.named_origin().filter(|n| *n != ctx.own_origin());
    let (authority, project, path) = target(&to, ctx.host.unwrap_or(""), base_domain, named.as_deref(), &ports).map_err(|e| {
        tracing::warn!(target: "security", peer = %ctx.client, user = %login.user, reason = ?e, "a handoff to a target that is not a project host of this gateway refused");
        HttpError::BadRequest(format!("cannot hand off to that address ({e:?})"))
    })?;
    let project = granted(ctx, &login.user, project)?;
    // The callback on the origin as configured, however the target spelled its host.
    let authority = match &named {
        Some(n) if project.is_empty() => n.trim_start_matches("https://").to_string(),
        _ => authority.to_string(),
    };
    let ticket = crate::auth::sessions::random(32);
    let record = Ticket {
        user: login.user.to_string(),
        login_id: login.id.to_string(),
        login_expires_at: login.expires_at,
        project,
        path: path.to_string(),
        state: digest(&state),
    };
    keep(ctx, &ticket, record).await?;
    Ok(page::redirect(&format!(
        "https://{authority}/_gw/callback?ticket={ticket}"
    )))
}

/// The target's project, if the user may use it (and it is still configured). The named host (no
/// project) is the login host by another name: the user's own.
fn granted(ctx: &Ctx<'_>, user: &str, project: String) -> Result<String, HttpError> {
    let granted = ctx
        .state
        .users
        .get(user)
        .is_some_and(|u| u.grants.role_in(&project).is_some());
    if !project.is_empty() && (!granted || !ctx.state.projects.contains_key(project.as_str())) {
        return Err(HttpError::NotGranted {
            user: user.to_string(),
            project,
        });
    }
    Ok(project)
}

/// The minted ticket kept (by its digest) until the callback takes it.
async fn keep(ctx: &Ctx<'_>, ticket: &str, record: Ticket) -> Result<(), HttpError> {
    match ctx.gw.browser.handoffs.tickets.put(digest(ticket), record).await {
        Ok(PutOnce::Kept) => Ok(()),
        // 10 000 tickets in a minute: a flood, answered as one.
        Ok(_) => Err(HttpError::RateLimited {
            retry_after: std::time::Duration::from_secs(60),
        }),
        Err(e) => Err(e.into()),
    }
}

/// Project host: `GET /_gw/callback?ticket=…`.
pub(crate) async fn redeem(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let front = super::front::of(ctx.conn, ctx.host, ctx.state.settings.server.base_domain.as_deref());
    // On a login-host name, only the named host has a callback (the ticket is left alone).
    if front == super::front::WebFront::Login && !super::handoff_named::here(ctx) {
        return Err(HttpError::NotFound("no such gateway page".into()));
    }
    let t = take(ctx, &front).await?;
    let user = ctx.state.users.get(&*t.user);
    let granted = user.is_some_and(|u| u.grants.role_in(&t.project).is_some());
    // A named host's ticket (no project): the login host by another name, for a configured user.
    let named = t.project.is_empty();
    if !(granted || named && user.is_some()) {
        return Err(HttpError::NotGranted {
            user: t.user.clone(),
            project: t.project.clone(),
        });
    }
    let origin = if named {
        Origin::Named {
            parent: &t.login_id,
            parent_expires_at: t.login_expires_at,
        }
    } else {
        Origin::Handoff {
            parent: &t.login_id,
            parent_expires_at: t.login_expires_at,
            project: &t.project,
        }
    };
    let (value, child) = ctx.gw.browser.sessions.create(&t.user, origin, LOGIN).await?;
    tracing::info!(target: "security", peer = %ctx.client, user = %child.user, project = %t.project, session = %child.id, login = %child.login_id, "{}", if named { "named host handoff" } else { "project host handoff" });
    let mut r = page::redirect(&t.path);
    r.headers_mut().append(
        header::SET_COOKIE,
        cookie::set_named(&front.session_cookie(), &value, None),
    );
    r.headers_mut()
        .append(header::SET_COOKIE, cookie::clear_handoff_state(&front.handoff_cookie()));
    Ok(r)
}

/// Take the request's ticket if it is this front's and this browser's; else refuse, leaving it
/// in place (a ticket shown to a foreign host or browser stays unusable there and cannot be
/// burnt by it either).
async fn take(ctx: &Ctx<'_>, front: &super::front::WebFront<'_>) -> Result<Ticket, HttpError> {
    let here = front.project().unwrap_or("").to_string();
    let query = ctx.parts.uri.query().unwrap_or("");
    let key = digest(&crate::policy::query::get(query, "ticket").unwrap_or_default());
    let holder = Holder::of(ctx, front).await?;
    let (h, at) = (holder.clone(), here.clone());
    let tickets = &ctx.gw.browser.handoffs.tickets;
    let seen = tickets
        .take_if(key, move |t| h.refusal(t, &at).is_none())
        .await
        .map_err(HttpError::from)?;
    let (reason, text) = match seen {
        Seen::Live(t) => match holder.refusal(&t, &here) {
            None => return Ok(t),
            Some(refused) => refused,
        },
        _ => (
            "handoff_unknown",
            "this login link has expired or was used already; open the project again",
        ),
    };
    tracing::warn!(target: "security", peer = %ctx.client, project = %here, reason, "a handoff ticket refused");
    Err(HttpError::Forbidden(text.into()))
}

/// What the browser at a callback holds that ties a ticket to it.
#[derive(Clone)]
struct Holder {
    /// The digest of this front's handoff state cookie: the flow began on this front in a browser
    /// holding it.
    state: Option<[u8; 32]>,
    /// On a project port: the login session of the login cookie the browser sent (every port
    /// of a host name receives it); on the named host, the login it holds there already. `None`
    /// on a project host, which never sees it.
    login: Option<Option<std::sync::Arc<str>>>,
    /// On the login front: whether it is the named host (`web/handoff_named.rs`), the one login
    /// name a ticket is redeemed on. `None` on a project front.
    named: Option<bool>,
}

impl Holder {
    async fn of(ctx: &Ctx<'_>, front: &super::front::WebFront<'_>) -> Result<Holder, HttpError> {
        let state = cookie::find_named(&ctx.parts.headers, &front.handoff_cookie()).map(digest);
        let named = matches!(front, super::front::WebFront::Login).then(|| super::handoff_named::here(ctx));
        let login = if front.own_port() || named == Some(true) {
            // Read directly, not through `ctx.login_session()`: here the login cookie only
            // names the browser's login; it does not admit the connection.
            let value = cookie::find(&ctx.parts.headers);
            Some(ctx.gw.browser.sessions.login_of(value, ctx.client).await?)
        } else {
            None
        };
        Ok(Holder { state, login, named })
    }

    /// Why this browser on the front of project `here` may not redeem `t` (a stable reason for
    /// the log, and the words for the page), or `None`.
    fn refusal(&self, t: &Ticket, here: &str) -> Option<(&'static str, &'static str)> {
        if t.project != here {
            return Some(("handoff_foreign_host", "this login link is for another project's host"));
        }
        match self.named {
            Some(false) => {
                return Some((
                    "handoff_foreign_host",
                    "this login link is for the gateway's named host",
                ));
            }
            // A login held on the named host stays (a handoff never replaces it).
            Some(true) if matches!(self.login, Some(Some(_))) => {
                return Some((
                    "handoff_logged_in",
                    "this browser is logged in here already; open the gateway's portal",
                ));
            }
            _ => {}
        }
        // On a project port the state cookie can be planted by a sibling port, so it alone
        // does not show whose flow this is; the login cookie the browser already holds can be
        // neither read nor replaced from there (web/front.rs).
        if let Some(login) = self.login.as_ref().filter(|_| self.named.is_none())
            && login.as_deref() != Some(t.login_id.as_str())
        {
            return Some((
                "handoff_other_login",
                "this login link was made for another login; open the project's address again",
            ));
        }
        if !self
            .state
            .is_some_and(|s| crate::auth::tokens::same_digest(&s, &t.state))
        {
            return Some((
                "handoff_other_browser",
                "this login link was started in another browser; open the project's address here",
            ));
        }
        None
    }
}

/// Where a project host sends a browser that has no cookie: the login host's handoff for the
/// URL it asked for (same port; the login host is `base_domain`).
pub(crate) fn login_redirect(base_domain: &str, host: &str, path_and_query: &str, state: &str) -> String {
    let port = port_of(host);
    let port = if port == 443 { String::new() } else { format!(":{port}") };
    login_redirect_to(&format!("{base_domain}{port}"), host, path_and_query, state)
}

/// The handoff on the login host `login` (`host[:port]`) for `https://<host><path_and_query>`.
pub(crate) fn login_redirect_to(login: &str, host: &str, path_and_query: &str, state: &str) -> String {
    let login = login.strip_suffix(":443").unwrap_or(login);
    let to = format!("https://{host}{path_and_query}");
    format!("https://{login}/_gw/handoff?to={}&state={state}", form::encode(&to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_redeemed_only_on_its_front_beside_its_login_and_its_state() {
        let t = Ticket {
            user: "bob".into(),
            login_id: "ws_bob".into(),
            login_expires_at: 0,
            project: "web".into(),
            path: "/".into(),
            state: digest("S"),
        };
        let holder = |state: &str, login: Option<Option<&str>>| Holder {
            state: Some(digest(state)),
            login: login.map(|l| l.map(Into::into)),
            named: None,
        };
        let reason = |h: Holder, here| h.refusal(&t, here).map(|r| r.0);
        // A project host never sees the login cookie: the state alone binds it.
        assert_eq!(reason(holder("S", None), "web"), None);
        assert_eq!(reason(holder("S", None), "api"), Some("handoff_foreign_host"));
        assert_eq!(reason(holder("T", None), "web"), Some("handoff_other_browser"));
        // A project port: bob's planted state beside alice's login, or beside none, is refused.
        assert_eq!(reason(holder("S", Some(Some("ws_bob"))), "web"), None);
        assert_eq!(
            reason(holder("S", Some(Some("ws_alice"))), "web"),
            Some("handoff_other_login")
        );
        assert_eq!(reason(holder("S", Some(None)), "web"), Some("handoff_other_login"));
        assert_eq!(
            reason(holder("T", Some(Some("ws_bob"))), "web"),
            Some("handoff_other_browser")
        );
        // The login front: only the named host redeems, only its own tickets, only in a browser
        // holding the state and no login there yet.
        let named_ticket = Ticket {
            project: String::new(),
            ..t.clone()
        };
        let at_login = |state: &str, login: Option<&str>, named: bool| {
            Holder {
                state: Some(digest(state)),
                login: Some(login.map(Into::into)),
                named: Some(named),
            }
            .refusal(&named_ticket, "")
            .map(|r| r.0)
        };
        assert_eq!(at_login("S", None, true), None);
        assert_eq!(at_login("S", None, false), Some("handoff_foreign_host"));
        assert_eq!(at_login("T", None, true), Some("handoff_other_browser"));
        assert_eq!(at_login("S", Some("ws_bob"), true), Some("handoff_logged_in"));
        let on_project = holder("S", None).refusal(&named_ticket, "web").map(|r| r.0);
        assert_eq!(on_project, Some("handoff_foreign_host"));
    }

    #[test]
    fn the_login_redirect_names_the_login_host_on_the_same_port() {
        assert_eq!(
            login_redirect("gw.localhost", "web.gw.localhost:8443", "/a?b=c", "S1"),
            "https://gw.localhost:8443/_gw/handoff?to=https%3A%2F%2Fweb.gw.localhost%3A8443%2Fa%3Fb%3Dc&state=S1"
        );
        assert!(login_redirect("gw.example", "web.gw.example", "/", "S").starts_with("https://gw.example/_gw/"));
    }
}
