//! `POST /_gw/passkey`: passkeys on the login host (the ceremonies are `auth/passkeys.rs`'s).
//! The page's script (`assets/passkey.js`) posts a form and reads JSON:
//! - `do=register-options`, then `do=register` with `credential` (the browser's answer, as JSON)
//!   and `label`: a logged-in user adds a passkey;
//! - `do=sign-in-options`, then `do=sign-in` with `credential`, `ceremony` (the sealed ceremony the
//!   options carried) and `next`: anyone signs in. Like
//!   the password form, this goes through the login limiter (a spent address is refused before any
//!   work; each sign-in started is charged) and ends in the same server-side session, cookie and
//!   audit record (`login`, `method=passkey`);
//! - `do=remove` with `id` (a plain form on the portal): a user revokes one of their own passkeys.
//!
//! Ceremonies happen only on the passkey origin (`Ctx::passkey_origin`: the login host's configured
//! origin by name, or, when that is an address, the named host `<host>.local`): a request to any
//! other origin, such as another port of the same name or the address, is refused with that
//! origin named.

use http::{HeaderValue, Response, StatusCode, header};
use hyper::body::Incoming;

use super::page::json;
use super::{Ctx, form, page};
use crate::auth::passkeys::{PasskeyError, Place};
use crate::auth::sessions::{LOGIN, Origin};
use crate::http::body::ProxyBody;
use crate::http::cookie;
use crate::http::error::HttpError;
use crate::metrics::LoginMethod;

pub(crate) async fn post(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    ctx.check_csrf()?;
    let f = form::read(body, ctx.gw.limits.body_idle_timeout).await?;
    let field = |name: &str| f.get(name).map_or("", String::as_str);
    let origin = ctx.passkey_origin();
    let place = Place {
        origin: &origin,
        peer: ctx.client,
    };
    if let Err(e) = here(ctx, &place) {
        tracing::warn!(target: "security", peer = %ctx.client, reason = e.code(), host = ctx.host.unwrap_or(""), "a passkey request away from the login origin refused");
        return Ok(refusal(&e));
    }
    let passkeys = &ctx.gw.browser.passkeys;
    let store = ctx.gw.browser.sessions.store();
    match field("do") {
        "sign-in-options" => Ok(sign_in_options(ctx, &place).await),
        "sign-in" => sign_in(ctx, &place, [field("credential"), field("ceremony")], field("next")).await,
        "register-options" | "register" | "remove" => {
            let Some(live) = ctx.login_session().await? else {
                return Err(HttpError::Unauthenticated);
            };
            match field("do") {
                "register-options" => Ok(match passkeys.start_registration(store, &live.user, &place).await {
                    Ok(options) => json(StatusCode::OK, options),
                    Err(e) => refusal(&e),
                }),
                "register" => Ok(register(ctx, &live.user, &place, field("credential"), field("label")).await),
                _ => remove(ctx, &live.user, field("id")).await,
            }
        }
        _ => Err(HttpError::BadRequest(
            "do: write sign-in-options, sign-in, register-options, register or remove".into(),
        )),
    }
}

/// The options a sign-in starts with. A spent address starts nothing. Starting is not charged: it
/// proves nothing and guesses nothing (a signature cannot be guessed), and the ceremonies it may
/// hold are bounded per address; a failed answer is charged.
async fn sign_in_options(ctx: &Ctx<'_>, place: &Place<'_>) -> Response<ProxyBody> {
    if let Err(denied) = ctx.gw.auth.limiters.spent(ctx.client, None) {
        return limited(denied.retry_after);
    }
    match ctx.gw.browser.passkeys.start_sign_in(place).await {
        Ok(options) => json(StatusCode::OK, options),
        Err(e) => refusal(&e),
    }
}

/// A logged-in user's new passkey, from the browser's answer to the registration options:
/// audited and logged when added; the reason logged when not.
async fn register(
    ctx: &Ctx<'_>,
    user: &std::sync::Arc<str>,
    place: &Place<'_>,
    credential: &str,
    label: &str,
) -> Response<ProxyBody> {
    let store = ctx.gw.browser.sessions.store();
    let made = ctx
        .gw
        .browser
        .passkeys
        .finish_registration(store, user, place, credential, label)
        .await;
    match made {
        Ok(p) => {
            ctx.gw.audit.record(
                crate::audit::Record::new("passkey_added")
                    .user(&**user)
                    .address(ctx.client)
                    .field("passkey", p.id.as_str())
                    .field("label", p.label.as_str()),
            );
            tracing::info!(target: "security", peer = %ctx.client, user = %user, passkey = %p.id, "a passkey was added");
            json(
                StatusCode::OK,
                serde_json::json!({ "id": p.id, "label": p.label }).to_string(),
            )
        }
        Err(e) => {
            tracing::warn!(target: "security", peer = %ctx.client, user = %user, reason = e.code(), detail = %e.detail(), "a passkey was not added");
            refusal(&e)
        }
    }
}

/// Whether this request may hold a ceremony: the login origin has a name (an RP ID), and the
/// request came to exactly that origin. A ceremony's origin names the port the browser used; a
/// page on another port of the same name (a project's own listener, or any HTTPS server with a
/// certificate the victim trusts) has the same RP ID and must not start or finish one here by
/// naming its own port in `Host`.
fn here(ctx: &Ctx<'_>, place: &Place<'_>) -> Result<(), PasskeyError> {
    place.rp_id()?;
    if ctx.own_origin() != place.origin {
        return Err(PasskeyError::ElsewhereHost(place.origin.to_string()));
    }
    Ok(())
}

/// Whether the pages offer passkeys to this request (see [`here`]).
pub(super) fn offered(ctx: &Ctx<'_>) -> bool {
    let origin = ctx.passkey_origin();
    here(
        ctx,
        &Place {
            origin: &origin,
            peer: ctx.client,
        },
    )
    .is_ok()
}

/// Where passkeys work when not on this request's origin, and the link there: the passkey origin
/// when it has a name; the named host through its handoff (`web/handoff_named.rs`), which logs
/// this browser in there without a password. `None`: no name anywhere (an address only).
pub(super) fn elsewhere(ctx: &Ctx<'_>) -> Option<(String, String)> {
    let origin = ctx.passkey_origin();
    let rp = crate::auth::passkey_parts::rp_id(origin.strip_prefix("https://")?);
    if rp.is_err() || ctx.own_origin() == origin {
        return None;
    }
    let link = if ctx.named_origin().as_deref() == Some(origin.as_str()) {
        format!("{origin}/_gw/arrive")
    } else {
        format!("{origin}/")
    };
    Some((origin, link))
}

async fn sign_in(
    ctx: &Ctx<'_>,
    place: &Place<'_>,
    [credential, ceremony]: [&str; 2],
    next: &str,
) -> Result<Response<ProxyBody>, HttpError> {
    if let Err(denied) = ctx.gw.auth.limiters.spent(ctx.client, None) {
        return Ok(limited(denied.retry_after));
    }
    let store = ctx.gw.browser.sessions.store();
    let record = match ctx
        .gw
        .browser
        .passkeys
        .finish_sign_in(store, place, credential, ceremony)
        .await
    {
        Ok(r) => r,
        Err(e) => return Ok(failed(ctx, None, &e).await),
    };
    // A user no longer configured: their passkeys open nothing.
    let Some(user) = ctx.state.users.get(record.user.as_str()).map(|u| u.name.clone()) else {
        return Ok(failed(ctx, Some(&record.user), &PasskeyError::Unknown).await);
    };
    // The user name's allowance too, as a password login's (a name locked out from elsewhere).
    if let Err(denied) = ctx.gw.auth.limiters.spent(ctx.client, Some(&user)) {
        return Ok(limited(denied.retry_after));
    }
    ctx.gw.auth.limiters.login_succeeded(ctx.client, &user);
    ctx.gw.metrics.login(LoginMethod::Passkey, true);
    let (value, live) = ctx.gw.browser.sessions.create(&user, Origin::Password, LOGIN).await?;
    ctx.gw.audit.record(
        crate::audit::Record::new("login")
            .user(&*user)
            .address(ctx.client)
            .via(crate::audit::Via::Passkey, Some(&record.id))
            .field("method", "passkey"),
    );
    tracing::info!(target: "security", peer = %ctx.client, user = %user, session = %live.id, passkey = %record.id, method = "passkey", "browser login");
    let next = form::local_path(if next.is_empty() { "/" } else { next }).to_string();
    let mut r = json(StatusCode::OK, serde_json::json!({ "next": next }).to_string());
    r.headers_mut().append(header::SET_COOKIE, cookie::set(&value, None));
    Ok(r)
}

/// A sign-in refused: charged to the address's login allowance (as a wrong password, without a
/// user name to charge), counted, logged and audited with why (the user only once a passkey
/// named one).
async fn failed(ctx: &Ctx<'_>, user: Option<&str>, e: &PasskeyError) -> Response<ProxyBody> {
    if let Err(denied) = ctx.gw.auth.limiters.attempt(ctx.client, None).await {
        tracing::warn!(target: "security", peer = %ctx.client, reason = denied.reason, "passkey sign-ins from this address: limit reached");
    }
    ctx.gw.metrics.login(LoginMethod::Passkey, false);
    tracing::warn!(target: "security", peer = %ctx.client, reason = e.code(), detail = %e.detail(), "passkey sign-in refused");
    let mut r = crate::audit::Record::new("login_failed")
        .address(ctx.client)
        .via(crate::audit::Via::Passkey, None)
        .field("method", "passkey")
        .field("reason", e.code());
    if let Some(u) = user {
        r = r.user(u);
    }
    ctx.gw.audit.record(r);
    refusal(e)
}

async fn remove(ctx: &Ctx<'_>, user: &str, id: &str) -> Result<Response<ProxyBody>, HttpError> {
    let store = ctx.gw.browser.sessions.store().clone();
    let (id, owner) = (id.to_string(), user.to_string());
    let (i, o) = (id.clone(), owner.clone());
    let revoked = crate::store::blocking("revoking a passkey", move || {
        store.revoke_passkey(&i, Some(&o), crate::auth::tokens::now_unix())
    })
    .await
    .map_err(HttpError::from)?;
    if !revoked {
        return Err(HttpError::NotFound(format!("you have no passkey {id:?}")));
    }
    ctx.gw.audit.record(
        crate::audit::Record::new("passkey_revoked")
            .user(owner.as_str())
            .address(ctx.client)
            .field("passkey", id.as_str()),
    );
    tracing::info!(target: "security", peer = %ctx.client, user = %owner, passkey = %id, "a passkey was revoked");
    Ok(page::redirect("/?done=passkey_removed"))
}

/// A passkey as the portal lists it.
pub(crate) struct PasskeyRow {
    pub id: String,
    pub label: String,
    pub added: String,
    pub used: String,
}

/// The user's live passkeys, newest first, for the portal.
pub(super) async fn rows_of(ctx: &Ctx<'_>, user: &str) -> Result<Vec<PasskeyRow>, HttpError> {
    let (store, user) = (ctx.gw.browser.sessions.store().clone(), user.to_string());
    let all = crate::store::blocking("listing passkeys", move || store.list_passkeys(Some(&user)))
        .await
        .map_err(HttpError::from)?;
    Ok(all
        .into_iter()
        .filter(|p| p.revoked_at.is_none())
        .map(|p| PasskeyRow {
            added: crate::support::when::when(p.created_at),
            used: p.last_used_at.map_or("never used".into(), |t| {
                format!("last used {}", crate::support::when::when(t))
            }),
            id: p.id,
            label: p.label,
        })
        .collect())
}

/// A refused ceremony: its status, and `{"error", "reason"}` for the page to show.
fn refusal(e: &PasskeyError) -> Response<ProxyBody> {
    let status = match e {
        PasskeyError::NoName | PasskeyError::ElsewhereHost(_) | PasskeyError::Malformed(_) => StatusCode::BAD_REQUEST,
        PasskeyError::Busy | PasskeyError::Store => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::UNAUTHORIZED,
    };
    json(
        status,
        serde_json::json!({ "error": e.message(), "reason": e.code() }).to_string(),
    )
}

fn limited(retry_after: std::time::Duration) -> Response<ProxyBody> {
    let secs = retry_after.as_secs().max(1);
    let mut r = json(
        StatusCode::TOO_MANY_REQUESTS,
        serde_json::json!({
            "error": format!("too many sign-in attempts from this address: try again in {secs} s"),
            "reason": "login_limited",
        })
        .to_string(),
    );
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    r
}
