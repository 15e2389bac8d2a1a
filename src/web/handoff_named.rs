//! The named host's handoff (issue 38): passkeys need a name, and in LAN mode the login host is
//! an address (`Reach::passkey_origin`). So a browser logged in at the address (a paired phone)
//! is given a login at the named host `https://<host>.local[:port]` without a password, by the
//! project hosts' handoff run the other way round (web/handoff.rs has the ticket's rules):
//! the portal's button opens `/_gw/arrive` on the named host, which sets its handoff state as a
//! host-only cookie and sends the browser to the address's `/_gw/handoff?to=<named origin>/`;
//! there the logged-in session mints a single-use ticket bound to it and to the state, for exactly
//! the named origin (its port, its host in any case, the portal's path only), and the named host's
//! `/_gw/callback` redeems it once, in the browser holding the state, into a login session that is
//! a child of the address's (same user and device, it dies with it: `Origin::Named`).
//!
//! A browser already logged in on the named host keeps its login: the callback there is refused
//! (a sibling port of the name could plant the state cookie, not replace a held login cookie).
//! One with no login there can be planted one by a sibling port anyway (web/front.rs's limit);
//! the state cookie adds nothing to that.

use http::Response;

use super::{Ctx, form, page};
use crate::http::body::ProxyBody;
use crate::http::error::HttpError;

/// Named host: `GET /_gw/arrive`. Logged in here already: the portal. Else set this host's
/// handoff state and go to the login address's handoff for the named origin.
pub(crate) async fn arrive(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let Some(named) = ctx.named_origin().filter(|n| *n == ctx.own_origin()) else {
        return Err(HttpError::NotFound("no such gateway page".into()));
    };
    if ctx.login_session().await?.is_some() {
        return Ok(page::redirect("/#passkeys"));
    }
    let state = crate::auth::sessions::random(16);
    let to = format!("{named}/");
    Err(HttpError::LoginRedirect {
        location: format!(
            "{}/_gw/handoff?to={}&state={state}",
            ctx.login_origin(),
            form::encode(&to)
        ),
        state,
        cookie: crate::http::cookie::HANDOFF_STATE.into(),
    })
}

/// Whether this request came to the named host (the one login-host name a ticket may be
/// redeemed on).
pub(crate) fn here(ctx: &Ctx<'_>) -> bool {
    ctx.named_origin().is_some_and(|n| n == ctx.own_origin())
}
