//! `POST /_gw/hook/<trigger>`: a signed webhook delivery starts a turn (issue 40). No login: the
//! signature is the credential. In order, each step refusing with its own reason, audited as
//! `trigger_refused` and charged to the address's login limiter:
//!
//! 1. the address's login allowance is not spent (before any HMAC work);
//! 2. the trigger exists and is a webhook;
//! 3. the body is within the trigger's `max_body` (by its length, then as read), there is room
//!    for it among the bodies arriving now (`limits.hook_body_bytes`, in all and per address),
//!    and it arrives within `limits.hook_body_timeout`;
//! 4. the signature matches the raw body (constant time), before anything parses it; the generic
//!    kind's timestamp is within its replay window;
//! 5. the payload is a JSON object and its event is one the trigger lists (GitHub's `ping` is
//!    answered and fires nothing);
//! 6. the delivery id is used once, in the state database (every gateway on it agrees).
//!
//! Then it fires (`fire`): a session of the project (new, or the titled one) is created and
//! prompted with the template's prompt through the one road (`pipeline::internal`), as the
//! trigger's `run_as_user` under the trigger's policy, so the policy answers the session's
//! permission requests; `trigger_fired` is audited once with the trigger, delivery and session.
//! Nothing of a refused delivery reaches a prompt.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::{Ctx, page};
use crate::audit::Record;
use crate::config::triggers::{HookKind, Trigger};
use crate::gateway::trigger;
use crate::http::body::ProxyBody;
use crate::http::error::HttpError;
use crate::policy::hook::{self, Refusal, refusal};
use crate::support::byte_budget::Full;

/// How long a refusal's or a firing's record may hold the answer back.
const AUDIT_WAIT: Duration = Duration::from_millis(250);
/// The longest delivery id kept.
const MAX_DELIVERY_ID: usize = 128;

/// A delivery that passed every check: what fires.
struct Accepted {
    trigger: Arc<Trigger>,
    delivery: String,
    event: String,
    prompt: String,
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h [u8]> {
    headers.get(name).map(|v| v.as_bytes())
}

fn answer(status: u16, body: serde_json::Value) -> Response<ProxyBody> {
    page::json(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        body.to_string(),
    )
}

/// The endpoint: judge the delivery, then fire it; every refusal audited, charged and answered
/// with its reason.
pub(crate) async fn deliver(ctx: &Ctx<'_>, name: &str, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    let accepted = match judge(ctx, name, body).await {
        Ok(Some(a)) => a,
        Ok(None) => return Ok(answer(200, serde_json::json!({"trigger": name, "pong": true}))),
        Err(r) => return Ok(refused(ctx, name, r).await),
    };
    let t = &accepted.trigger;
    let Some(user) = trigger::runner(ctx.state, t) else {
        let r = refusal(
            "firing_failed",
            503,
            format!("the trigger's user {} has no role in {}", t.run_as_user, t.project),
        );
        return Ok(refused(ctx, name, r).await);
    };
    let road = (ctx.on_behalf)(ctx.gw, user, trigger::who(t), ctx.client, "trigger");
    let firing = trigger::Firing {
        trigger: t,
        delivery: &accepted.delivery,
        event: &accepted.event,
        prompt: &accepted.prompt,
        client: ctx.client,
    };
    match trigger::fire(ctx.gw, &*road, &firing).await {
        Ok(session) => Ok(answer(
            202,
            serde_json::json!({"trigger": name, "delivery": accepted.delivery, "session": session}),
        )),
        Err(why) => Ok(refused(ctx, name, refusal("firing_failed", 502, why)).await),
    }
}

async fn refused(ctx: &Ctx<'_>, name: &str, r: Refusal) -> Response<ProxyBody> {
    // The name comes from the URL: logged only when it is a name a trigger could have.
    let name = if crate::config::validate::valid_user_name(name) {
        name
    } else {
        "(not a trigger name)"
    };
    tracing::warn!(target: "security", peer = %ctx.client, trigger = name, reason = r.reason, "a webhook delivery refused: {}", r.message);
    // Charged (unless the allowance is what refused it): a forger's guesses are bounded like a
    // password guesser's. A failed firing, or every address's bodies together filling the
    // gateway's room, is the gateway's or OpenCode's doing, not the sender's.
    if !matches!(
        r.reason,
        "limited" | "firing_failed" | "trigger_paused" | "bodies_in_all"
    ) {
        let _ = ctx.gw.auth.limiters.attempt(ctx.client, None).await;
    }
    let mut record = Record::new("trigger_refused")
        .address(ctx.client)
        .field("trigger", name.to_string())
        .field("reason", r.reason)
        .field("status", r.status);
    if let Some(t) = trigger_named(ctx, name) {
        record = record.project(t.project.clone());
    }
    ctx.gw.audit.record_written(record, AUDIT_WAIT).await;
    answer(r.status, serde_json::json!({"error": r.reason, "message": r.message}))
}

fn trigger_named(ctx: &Ctx<'_>, name: &str) -> Option<Arc<Trigger>> {
    let hook = |t: &&Arc<Trigger>| !matches!(t.kind, HookKind::Schedule { .. });
    ctx.state
        .settings
        .triggers
        .iter()
        .filter(hook)
        .find(|t| t.name == name)
        .cloned()
}

/// Steps 1–6; `None` for a ping.
async fn judge(ctx: &Ctx<'_>, name: &str, body: Incoming) -> Result<Option<Accepted>, Refusal> {
    if let Err(d) = ctx.gw.auth.limiters.spent(ctx.client, None) {
        return Err(refusal(
            "limited",
            429,
            format!(
                "too many refused deliveries from this address; retry in {} s",
                d.retry_after.as_secs().max(1)
            ),
        ));
    }
    let trigger =
        trigger_named(ctx, name).ok_or_else(|| refusal("unknown_trigger", 404, "no webhook trigger has this name"))?;
    let headers = &ctx.parts.headers;
    let raw = read_bounded(ctx, body, trigger.max_body).await?;
    let names = signed(&trigger.kind, headers, &raw)?;
    let payload: serde_json::Value = serde_json::from_slice(&raw)
        .ok()
        .filter(serde_json::Value::is_object)
        .ok_or_else(|| refusal("payload_not_json", 400, "the delivery's body is not a JSON object"))?;
    let sent = match &trigger.kind {
        HookKind::GitHub { .. } => header(headers, "x-github-event"),
        HookKind::Hmac { .. } | HookKind::Schedule { .. } => header(headers, "x-event"),
    };
    let sent = sent.and_then(|e| std::str::from_utf8(e).ok()).unwrap_or("").trim();
    if sent == "ping" && matches!(trigger.kind, HookKind::GitHub { .. }) {
        return Ok(None);
    }
    let event = hook::event_name(sent, &payload);
    if !hook::event_listed(&trigger.events, &event) {
        return Err(refusal(
            "event_not_listed",
            422,
            format!(
                "trigger {} does not listen for the event {:?}",
                trigger.name,
                event.chars().take(64).collect::<String>()
            ),
        ));
    }
    if crate::gateway::trigger_pause::paused(ctx.gw, &trigger.name).await {
        return Err(refusal(
            "trigger_paused",
            503,
            "the trigger is paused (`opencode-gateway trigger resume`)",
        ));
    }
    for name in &names {
        claim(ctx, &trigger, name).await?;
    }
    let delivery = names.into_iter().next().unwrap_or_default();
    let prompt = hook::render(&trigger.prompt, &payload);
    Ok(Some(Accepted {
        trigger,
        delivery,
        event,
        prompt,
    }))
}

/// Step 4: the signature (and the generic kind's timestamp); the names the delivery is used
/// once under. GitHub's `X-GitHub-Delivery` is not signed: a body captured once could come again
/// under a fresh id, so the signed body's MAC is used once too (GitHub never sends one body as
/// two events: each names its commit, issue or comment; its "Redeliver" keeps the id).
fn signed(kind: &HookKind, headers: &HeaderMap, raw: &[u8]) -> Result<Vec<String>, Refusal> {
    Ok(match kind {
        HookKind::GitHub { secret } => {
            let mac = hook::check_signature(secret, header(headers, "x-hub-signature-256"), &[raw])?;
            let id = delivery_id(header(headers, "x-github-delivery"))?;
            vec![id, format!("sig:{}", hex_digest(&mac))]
        }
        HookKind::Hmac { secret, window } => {
            let ts = header(headers, "x-signature-timestamp");
            let stamp = ts.ok_or_else(|| {
                refusal(
                    "timestamp_missing",
                    401,
                    "the delivery carries no X-Signature-Timestamp (Unix seconds)",
                )
            })?;
            let signature = header(headers, "x-signature-256");
            let mac = hook::check_signature(secret, signature, &[stamp, b".", raw])?;
            hook::check_timestamp(ts, crate::auth::tokens::now_unix(), window.as_secs())?;
            // The MAC is unique to its timestamp and body: it names the delivery. The MAC's bytes,
            // not the header's text: the same MAC in upper-case hex is the same delivery.
            vec![format!("sig:{}", hex_digest(&mac))]
        }
        HookKind::Schedule { .. } => return Err(refusal("unknown_trigger", 404, "no webhook trigger has this name")),
    })
}

/// Step 3: the body, bounded by the trigger's `max_body`, by what unsigned bodies may hold of the
/// gateway's memory (in all and per address: its room is taken before a byte is read, for its
/// declared length or else its bound) and by one deadline for the whole body.
async fn read_bounded(ctx: &Ctx<'_>, body: Incoming, max: usize) -> Result<Bytes, Refusal> {
    let too_large = || {
        refusal(
            "body_too_large",
            413,
            format!("the delivery's body is larger than {max} bytes"),
        )
    };
    let declared = ctx
        .parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let _room = ctx
        .gw
        .doors
        .hook_bodies
        .take(ctx.client, declared.unwrap_or(max as u64))
        .map_err(|full| match full {
            Full::Address => refusal(
                "bodies_per_address",
                429,
                "this address is sending too many webhook bodies at once; retry when one has arrived",
            ),
            Full::Gateway => refusal(
                "bodies_in_all",
                503,
                "the gateway is receiving too many webhook bodies at once; retry later",
            ),
        })?;
    let limited = http_body_util::Limited::new(body, max);
    let secs = ctx.gw.limits.hook_body_timeout.as_secs();
    match tokio::time::timeout(ctx.gw.limits.hook_body_timeout, limited.collect()).await {
        Err(_) => Err(refusal(
            "body_timeout",
            408,
            format!("the delivery's body did not arrive within {secs} s"),
        )),
        Ok(Err(_)) => Err(too_large()),
        Ok(Ok(c)) => Ok(c.to_bytes()),
    }
}

fn delivery_id(raw: Option<&[u8]>) -> Result<String, Refusal> {
    raw.and_then(|d| std::str::from_utf8(d).ok())
        .map(str::trim)
        .filter(|d| {
            !d.is_empty()
                && d.len() <= MAX_DELIVERY_ID
                && d.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
        .map(str::to_string)
        .ok_or_else(|| refusal("delivery_missing", 400, "the delivery carries no X-GitHub-Delivery id"))
}

fn hex_digest(bytes: &[u8]) -> String {
    use blake2::{Blake2b256, Digest};
    Blake2b256::digest(bytes)
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The delivery is used once, in the state database: a second one with its id (on this gateway
/// or another on the same database) is refused.
async fn claim(ctx: &Ctx<'_>, t: &Trigger, delivery: &str) -> Result<(), Refusal> {
    match trigger::use_once(ctx.gw, trigger::Once::Delivery, &t.name, delivery).await {
        Ok(crate::store::PutOnce::Kept) => Ok(()),
        Ok(crate::store::PutOnce::KeyInUse) => {
            Err(refusal("delivery_replayed", 409, "this delivery was received before"))
        }
        Ok(crate::store::PutOnce::Full) => Err(refusal(
            "deliveries_full",
            503,
            "the gateway remembers too many deliveries; retry later",
        )),
        Err(e) => {
            tracing::warn!(trigger = t.name, "a delivery could not be recorded: {e}");
            Err(refusal(
                "state_unavailable",
                503,
                "the gateway cannot record the delivery; retry later",
            ))
        }
    }
}
