//! `POST /_gw/push`: this browser's Web Push subscription, for the logged-in user (and the paired
//! device it runs on, if any: revoking the device deletes it). The page's script posts a form:
//! `do=subscribe` with `endpoint`, `p256dh` and `auth` as `PushSubscription.toJSON()` gives them
//! (base64url), or `do=remove` with `endpoint`. The endpoint is a URL the client chose and the
//! gateway will POST to: only `https` is kept here, and where it resolves is checked again at
//! every send (`notify::push_endpoint`).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{Response, StatusCode};
use hyper::body::Incoming;

use super::{Ctx, form};
use crate::auth::sessions::Live;
use crate::http::body::ProxyBody;
use crate::http::error::HttpError;
use crate::notify::{push_endpoint, webpush};
use crate::store::PushSubscription;

/// Subscriptions one user may have.
const MAX_PER_USER: usize = 20;

pub(crate) async fn subscribe(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    ctx.check_csrf()?;
    let Some(live) = ctx.login_session().await? else {
        return Err(HttpError::Unauthenticated);
    };
    let f = form::read(body, ctx.gw.limits.body_idle_timeout).await?;
    let field = |name: &str| f.get(name).map_or("", String::as_str);
    let endpoint = field("endpoint");
    push_endpoint::parse(endpoint).map_err(|why| HttpError::BadRequest(format!("endpoint: {why}")))?;
    let answer = match field("do") {
        "remove" => remove(ctx, &live, endpoint).await?,
        "subscribe" => add(ctx, &live, endpoint, field("p256dh"), field("auth")).await?,
        _ => return Err(HttpError::BadRequest("do: write subscribe or remove".into())),
    };
    Ok(super::page::json(StatusCode::OK, answer.to_string()))
}

async fn remove(ctx: &Ctx<'_>, live: &Live, endpoint: &str) -> Result<serde_json::Value, HttpError> {
    let store = ctx.gw.browser.sessions.store().clone();
    let (e, user) = (endpoint.to_string(), live.user.to_string());
    let removed = crate::store::blocking("deleting a push subscription", move || {
        store.delete_push(&e, Some(&user))
    })
    .await
    .map_err(HttpError::from)?;
    ctx.gw.audit.record(
        crate::audit::Record::new("push_unsubscribed")
            .user(&*live.user)
            .field("endpoint", webpush::endpoint_tag(endpoint).as_str())
            .field("removed", removed),
    );
    Ok(serde_json::json!({ "removed": removed }))
}

async fn add(
    ctx: &Ctx<'_>,
    live: &Live,
    endpoint: &str,
    p256dh: &str,
    auth: &str,
) -> Result<serde_json::Value, HttpError> {
    let key = |name: &str, value: &str, len: usize| {
        URL_SAFE_NO_PAD
            .decode(value.trim_end_matches('='))
            .ok()
            .filter(|k| k.len() == len)
            .ok_or_else(|| HttpError::BadRequest(format!("{name}: not the {len}-byte base64url key a browser gives")))
    };
    let p256dh = key("p256dh", p256dh, 65)?;
    let auth = key("auth", auth, 16)?;
    // The gateway's key exists before a device is told to expect it.
    if let Err(e) = ctx.gw.browser.push.vapid() {
        tracing::error!(error = %e, "no VAPID key: a device cannot subscribe to push notifications");
        return Err(HttpError::StateUnavailable(crate::store::Unavailable::Failed));
    }
    // A user's devices, bounded: each subscription is a request the gateway makes for every
    // pending request, to a URL a browser chose. Subscribing again replaces.
    let store = ctx.gw.browser.sessions.store().clone();
    let (read, user) = (store.clone(), live.user.to_string());
    let theirs = crate::store::blocking("reading push subscriptions", move || read.push_endpoints_of(&user))
        .await
        .map_err(HttpError::from)?;
    if theirs.len() >= MAX_PER_USER && !theirs.iter().any(|e| e == endpoint) {
        return Err(HttpError::BadRequest(format!(
            "{MAX_PER_USER} devices already get notifications for {}: stop one first",
            live.user
        )));
    }
    let sub = PushSubscription {
        endpoint: endpoint.to_string(),
        user: live.user.to_string(),
        session_id: live.login_id.to_string(),
        device_id: live.device.as_deref().map(String::from),
        p256dh,
        auth,
        created_at: crate::auth::tokens::now_unix(),
    };
    crate::store::blocking("saving a push subscription", move || store.save_push(&sub))
        .await
        .map_err(HttpError::from)?;
    let tag = webpush::endpoint_tag(endpoint);
    ctx.gw.audit.record(
        crate::audit::Record::new("push_subscribed")
            .user(&*live.user)
            .field("device", live.device.as_deref().unwrap_or("-"))
            .field("endpoint", tag.as_str()),
    );
    tracing::info!(target: "security", peer = %ctx.client, user = %live.user, endpoint = %tag, "a device subscribed to push notifications");
    Ok(serde_json::json!({ "subscribed": true }))
}
