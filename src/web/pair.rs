//! Pairing a phone: `opencode-gateway pair <user>` (on the host: running it is the proof of
//! presence) asks the running gateway for a code over the control socket; the phone opens
//! `https://<login host>/pair#<code>` (the code only in the fragment: never sent in a request
//! line, a log or a Referer) or has it typed in, and posts it; the gateway makes a device and a
//! persistent session for the code's user.
//!
//! A code is `IIII-SSSS-SSSS` in a base32 alphabet without the letters people confuse (no 0, 1,
//! I, O): the first group (20 bits) selects the pending code, the other two are its secret (40
//! bits). Codes are single-use records in the state database (`auth/pairing.rs`), at most 15 minutes,
//! single use (taken out under the lock that checks them), and die after [`MAX_TRIES`] wrong
//! secrets. Only a keyed digest of the secret is kept; it is compared in constant time. Every
//! attempt first passes the login limiter (see `submit`), so 40 bits are plenty. Unknown, used,
//! expired, dead and wrong codes get one answer (status, body, and the same allowance charged), so
//! a guesser cannot find a live id to aim its wrong tries at.

use askama::Template;
use http::{HeaderValue, Response, StatusCode, header};
use hyper::body::Incoming;

use super::{Ctx, form, page};
use crate::audit::{Record, Via};
use crate::auth::pairing::{Refused, UNKNOWN_USER, parse};
use crate::auth::sessions::{DEVICE, Origin};
use crate::auth::tokens::now_unix;
use crate::http::body::ProxyBody;
use crate::http::cookie;
use crate::http::error::HttpError;
use crate::store::DeviceRecord;

#[derive(Template)]
#[template(path = "pair.html")]
struct PairPage<'a> {
    error: Option<&'a str>,
    /// At the address, the named host where passkeys work (issue 38): the page's script probes
    /// it and pairs there when this phone resolves it (the code stays in the fragment).
    named: Option<String>,
}

/// What a person sees for any refused code (which of the reasons it was is only logged).
pub(crate) const REFUSED_TEXT: &str =
    "This pairing code is wrong, used or expired. Run `opencode-gateway pair <user>` on the host for a new one.";

/// `GET /pair`: the form (its script fills it from the fragment and submits it).
pub(crate) async fn form(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let named = ctx.named_origin().filter(|n| *n != ctx.own_origin());
    let mut r = page::html(
        StatusCode::OK,
        &PairPage {
            error: None,
            named: named.clone(),
        },
    )?;
    if let Some(n) = named {
        page::allow_connect(&mut r, &n);
    }
    Ok(r)
}

/// `POST /pair`: redeem the code, make the device and its session, set a persistent cookie.
pub(crate) async fn submit(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    ctx.check_csrf()?;
    let f = form::read(body, ctx.gw.limits.body_idle_timeout).await?;
    let parsed = parse(f.get("code").map_or("", String::as_str));
    // Every attempt is charged to the address alone, whatever its id selects: an allowance that
    // followed the code's user would tell live ids from unknown ones by which allowance runs out.
    // Guessing one code's secret is bounded by the code itself (MAX_TRIES, then it dies).
    if let Err(d) = ctx.gw.auth.limiters.attempt(ctx.client, None).await {
        return limited(ctx, d);
    }
    let Some(redeemed) = redeem(ctx, parsed).await? else {
        return refused();
    };
    let now = now_unix();
    let device = DeviceRecord {
        id: format!("dev_{}", crate::auth::sessions::random(9)),
        user: redeemed.user,
        label: redeemed.label,
        created_at: now,
        last_seen_at: Some(now),
        last_address: Some(ctx.client.to_string()),
        revoked_at: None,
    };
    let store = ctx.gw.browser.sessions.store().clone();
    let record = device.clone();
    crate::store::blocking("storing a paired device", move || store.insert_device(&record))
        .await
        .map_err(HttpError::from)?;
    let (value, live) = ctx
        .gw
        .browser
        .sessions
        .create(&device.user, Origin::Device(&device.id), DEVICE)
        .await?;
    paired(ctx, &device, &live);
    let max_age = (live.expires_at - now).max(1);
    // The portal confirms it: "This device is paired".
    let mut r = page::redirect("/?done=paired");
    r.headers_mut()
        .append(header::SET_COOKIE, cookie::set(&value, Some(max_age)));
    Ok(r)
}

/// The code taken out of the store, if it is a live one for a user still configured (`None`:
/// refused, and logged with its reason; the person sees the same answer whichever it was).
async fn redeem(
    ctx: &Ctx<'_>,
    parsed: Option<crate::auth::pairing::Parsed>,
) -> Result<Option<crate::auth::pairing::Redeemed>, HttpError> {
    let pairing = ctx.gw.browser.pairing.clone();
    let (charged, verdict) = crate::store::blocking("redeeming a pairing code", move || {
        let Some(p) = parsed else {
            return Ok((None, Err(Refused::Malformed)));
        };
        pairing.redeem(&p)
    })
    .await
    .map_err(HttpError::from)?;
    let charged = charged.unwrap_or_else(|| UNKNOWN_USER.to_string());
    match verdict {
        Ok(r) if ctx.state.users.contains_key(&r.user) => Ok(Some(r)),
        Ok(r) => {
            tracing::warn!(target: "security", peer = %ctx.client, user = %r.user, reason = "pairing_user_gone", "pairing refused");
            Ok(None)
        }
        Err(why) => {
            ctx.gw.metrics.login(crate::metrics::LoginMethod::Pairing, false);
            tracing::warn!(target: "security", peer = %ctx.client, user = %charged, reason = why.code(), "pairing refused");
            ctx.gw
                .audit
                .record(pairing_refused(ctx, "login_failed", &charged, why.code()));
            Ok(None)
        }
    }
}

/// A paired device: the address's allowance refilled, counted, logged and audited.
fn paired(ctx: &Ctx<'_>, device: &DeviceRecord, live: &crate::auth::sessions::Live) {
    ctx.gw.auth.limiters.login_succeeded(ctx.client, &live.user);
    ctx.gw.metrics.login(crate::metrics::LoginMethod::Pairing, true);
    tracing::info!(target: "security", peer = %ctx.client, user = %device.user, device = %device.id, label = %device.label, session = %live.id, "device paired");
    ctx.gw.audit.record(
        Record::new("device_paired")
            .user(&device.user)
            .address(ctx.client)
            .via(Via::Device, Some(&device.id))
            .field("method", "pairing")
            .field("label", device.label.as_str()),
    );
}

/// The address's login allowance is spent: 429 with Retry-After, on the pairing page, before the
/// code is looked at.
fn limited(ctx: &Ctx<'_>, d: crate::ratelimit::Denied) -> Result<Response<ProxyBody>, HttpError> {
    ctx.gw.metrics.refused(crate::metrics::Refusal::Login);
    tracing::warn!(target: "security", peer = %ctx.client, reason = d.reason, "pairing refused before the code was looked at: limit reached");
    ctx.gw
        .audit
        .record(pairing_refused(ctx, "lockout", UNKNOWN_USER, d.reason));
    let text = HttpError::LoginLimited {
        retry_after: d.retry_after,
        reason: d.reason,
    }
    .to_string();
    let mut r = page::html(
        StatusCode::TOO_MANY_REQUESTS,
        &PairPage {
            error: Some(&text),
            named: None,
        },
    )?;
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(d.retry_after.as_secs().max(1)));
    Ok(r)
}

/// A refused pairing: the user the code was for, when it is a configured one; never the code.
fn pairing_refused(ctx: &Ctx<'_>, event: &'static str, user: &str, reason: &'static str) -> Record {
    let r = Record::new(event)
        .address(ctx.client)
        .via(Via::Device, None)
        .field("method", "pairing")
        .field("reason", reason);
    if ctx.state.users.contains_key(user) {
        r.user(user)
    } else {
        r
    }
}

fn refused() -> Result<Response<ProxyBody>, HttpError> {
    page::html(
        StatusCode::UNAUTHORIZED,
        &PairPage {
            error: Some(REFUSED_TEXT),
            named: None,
        },
    )
}
