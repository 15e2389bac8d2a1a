//! `GET /_gw/events`: the control room's live stream.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, header};

use super::*;

/// How often an idle live stream says it is alive (and re-checks its login).
const KEEPALIVE: Duration = Duration::from_secs(15);

/// `GET /_gw/events`: an event stream that says `change` whenever what this user sees changed
/// (computed per user, so a change in another project is not even hinted at). Holds one of the
/// user's stream slots; ends when the login ends (checked at each keep-alive) or the gateway stops.
pub(crate) async fn events(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let Some(live) = ctx.login_session().await? else {
        return Err(HttpError::Unauthenticated);
    };
    let slot = ctx
        .gw
        .doors
        .streams
        .try_acquire(live.user.clone(), ctx.gw.limits.max_streams_per_user)
        .ok_or_else(|| {
            ctx.gw.metrics.refused(crate::metrics::Refusal::Streams);
            HttpError::TooManyStreams {
                max: ctx.gw.limits.max_streams_per_user,
            }
        })?;
    let cookie = crate::http::cookie::find(&ctx.parts.headers)
        .unwrap_or_default()
        .to_string();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let gw = ctx.gw.clone();
    let client = ctx.client;
    let user = live.user.clone();
    tokio::spawn(say_changes(gw, user, cookie, client, tx));
    let mut r = Response::new(ProxyBody::channel(rx).holding(Some(crate::http::body::StreamHold {
        _slot: Some(slot),
        _gauge: ctx.gw.metrics.stream_open(crate::metrics::StreamKind::Events),
    })));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    Ok(r)
}

/// The stream's task: `change` when what the user sees changed, a keep-alive at each tick while
/// the login lasts; ends when the client goes, the login ends or the gateway stops.
async fn say_changes(
    gw: Arc<crate::gateway::Gateway>,
    user: Arc<str>,
    cookie: String,
    client: std::net::IpAddr,
    tx: tokio::sync::mpsc::Sender<Bytes>,
) {
    let mut changes = gw.inbox.changes();
    let mut last = seen_by(&gw, &user);
    if tx.send(Bytes::from_static(b": connected\n\n")).await.is_err() {
        return;
    }
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
    loop {
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() { return; }
                let now = seen_by(&gw, &user);
                if now != last {
                    last = now;
                    if tx.send(Bytes::from_static(b"event: change\ndata: {}\n\n")).await.is_err() { return; }
                }
            }
            _ = tick.tick() => {
                if !matches!(gw.browser.sessions.check(&cookie, client).await, Ok(Some(_))) { return; }
                if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() { return; }
            }
            _ = tx.closed() => return,
            _ = gw.lifecycle.shutdown.cancelled() => return,
        }
    }
}

/// What the user sees of the inbox, as text to compare: only projects they have a role in.
fn seen_by(gw: &crate::gateway::Gateway, user: &str) -> String {
    let state = gw.state();
    let views = gw.inbox.view(|p| role_of(&state, user, p).is_some());
    let mut seen = serde_json::to_string(&views).unwrap_or_default();
    // The projects' acceptance tests: their outcomes are on the portal too.
    for v in &views {
        if let Some(o) = gw.lifecycle.acceptance.of(&v.name) {
            seen += &format!("\n{} {} {:?}", v.name, o.at_ms, o.result);
        }
    }
    seen
}
