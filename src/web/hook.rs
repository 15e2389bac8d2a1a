//! `POST /_gw/hook/<trigger>`: a signed webhook delivery starts a turn (issue 40). No login: the
//! signature is the credential. In order, each step refusing with its own reason, audited as
//! `trigger_refused` and charged to the address's login limiter:
//!
//! 1. the address's login allowance is not spent (before any HMAC work);
//! 2. the trigger exists and is a webhook;
//! 3. the body is within the trigger's `max_body` (by its length, then as read);
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
use crate::audit::{Record, Via, Who};
use crate::auth::once::OnceKind;
use crate::auth::users::UserState;
use crate::config::Grants;
use crate::config::triggers::{HookKind, SessionChoice, Trigger};
use crate::http::body::ProxyBody;
use crate::http::error::HttpError;
use crate::inbox::Call;
use crate::policy::hook::{self, Refusal, refusal};

/// Delivery ids are remembered this long (GitHub redelivers by hand, days later).
const DELIVERY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// At most this many remembered at once; past it deliveries are refused, not forgotten.
const MAX_DELIVERIES: usize = 100_000;
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
    match fire(ctx, &accepted).await {
        Ok(session) => Ok(answer(
            202,
            serde_json::json!({"trigger": name, "delivery": accepted.delivery, "session": session}),
        )),
        Err(r) => Ok(refused(ctx, name, r).await),
    }
}

async fn refused(ctx: &Ctx<'_>, name: &str, r: Refusal) -> Response<ProxyBody> {
    tracing::warn!(target: "security", peer = %ctx.client, trigger = name, reason = r.reason, "a webhook delivery refused: {}", r.message);
    // Charged (unless the allowance is what refused it): a forger's guesses are bounded like a
    // password guesser's. A failed firing is the gateway's or OpenCode's fault, not the sender's.
    if r.reason != "limited" && r.reason != "firing_failed" {
        let _ = ctx.gw.auth.limiters.attempt(ctx.client, None).await;
    }
    let mut record = Record::new("trigger_refused")
        .address(ctx.client)
        .field("trigger", name.chars().take(64).collect::<String>())
        .field("reason", r.reason)
        .field("status", r.status);
    if let Some(t) = trigger_named(ctx, name) {
        record = record.project(t.project.clone());
    }
    ctx.gw.audit.record_written(record, AUDIT_WAIT).await;
    answer(r.status, serde_json::json!({"error": r.reason, "message": r.message}))
}

fn trigger_named(ctx: &Ctx<'_>, name: &str) -> Option<Arc<Trigger>> {
    ctx.state.settings.triggers.iter().find(|t| t.name == name).cloned()
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
    let delivery = signed(&trigger.kind, headers, &raw)?;
    let payload: serde_json::Value = serde_json::from_slice(&raw)
        .ok()
        .filter(serde_json::Value::is_object)
        .ok_or_else(|| refusal("payload_not_json", 400, "the delivery's body is not a JSON object"))?;
    let sent = match &trigger.kind {
        HookKind::GitHub { .. } => header(headers, "x-github-event"),
        HookKind::Hmac { .. } => header(headers, "x-event"),
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
    claim(ctx, &trigger, &delivery).await?;
    let prompt = hook::render(&trigger.prompt, &payload);
    Ok(Some(Accepted {
        trigger,
        delivery,
        event,
        prompt,
    }))
}

/// Step 4: the signature (and the generic kind's timestamp); the delivery's id.
fn signed(kind: &HookKind, headers: &HeaderMap, raw: &[u8]) -> Result<String, Refusal> {
    Ok(match kind {
        HookKind::GitHub { secret } => {
            hook::check_signature(secret, header(headers, "x-hub-signature-256"), &[raw])?;
            delivery_id(header(headers, "x-github-delivery"))?
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
            hook::check_signature(secret, signature, &[stamp, b".", raw])?;
            hook::check_timestamp(ts, crate::auth::tokens::now_unix(), window.as_secs())?;
            // The signature is unique to its timestamp and body: it names the delivery.
            format!("sig:{}", hex_digest(signature.unwrap_or_default()))
        }
    })
}

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
    let limited = http_body_util::Limited::new(body, max);
    match tokio::time::timeout(ctx.gw.limits.body_idle_timeout, limited.collect()).await {
        Err(_) => Err(refusal("body_timeout", 408, "the delivery's body stopped arriving")),
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
async fn claim(ctx: &Ctx<'_>, trigger: &Trigger, delivery: &str) -> Result<(), Refusal> {
    use blake2::{Blake2b256, Digest};
    let store = ctx.gw.browser.sessions.store().clone();
    let once = Arc::new(OnceKind::<String>::new(
        store,
        "hook-delivery",
        DELIVERY_TTL,
        MAX_DELIVERIES,
    ));
    let key: [u8; 32] = Blake2b256::digest(format!("{}\0{delivery}", trigger.name)).into();
    match once.put(key, trigger.name.clone()).await {
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
            tracing::warn!(trigger = trigger.name, "a delivery could not be recorded: {e}");
            Err(refusal(
                "state_unavailable",
                503,
                "the gateway cannot record the delivery; retry later",
            ))
        }
    }
}

/// The trigger's user, narrowed to its project and carrying its policy, as a token with the
/// policy would be: the sessions it makes are answered by the policy.
fn runner(ctx: &Ctx<'_>, t: &Trigger) -> Result<Arc<UserState>, Refusal> {
    let gone = || {
        refusal(
            "firing_failed",
            503,
            format!("the trigger's user {} is not configured", t.run_as_user),
        )
    };
    let user = ctx.state.users.get(&t.run_as_user).ok_or_else(gone)?;
    let role = user.grants.role_in(&t.project).ok_or_else(gone)?;
    Ok(Arc::new(UserState {
        name: user.name.clone(),
        hash: None,
        fingerprint: user.fingerprint,
        grants: Grants::Each([(t.project.clone(), role)].into_iter().collect()),
        ssh_keys: Vec::new(),
        policy: Some(Arc::from(t.policy.as_str())),
    }))
}

/// Create (or find) the session and prompt it, as the trigger's user through the one road.
async fn fire(ctx: &Ctx<'_>, a: &Accepted) -> Result<String, Refusal> {
    let t = &a.trigger;
    let who = Who {
        via: Via::Trigger,
        id: Some(Arc::from(t.name.as_str())),
    };
    let road = (ctx.on_behalf)(ctx.gw, runner(ctx, t)?, who, ctx.client, "trigger");
    let failed = |what: &str, status: u16, body: &[u8]| {
        let said: String = String::from_utf8_lossy(body).chars().take(200).collect();
        refusal("firing_failed", 502, format!("{what} answered {status}: {said}"))
    };
    let session = match &t.session {
        SessionChoice::New => None,
        SessionChoice::Titled(title) => titled(&*road, &t.project, title).await,
    };
    let session = match session {
        Some(id) => id,
        None => {
            let title = match &t.session {
                SessionChoice::Titled(title) => title.clone(),
                SessionChoice::New => format!("{}: {}", t.name, a.event),
            };
            let call = Call::post(&t.project, "/session".into(), Some(serde_json::json!({"title": title})));
            let (status, body) = road
                .call(call)
                .await
                .map_err(|e| failed("creating the session", e.status, b""))?;
            crate::audit::created_session(&body)
                .filter(|id| id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
                .ok_or_else(|| failed("creating the session", status.as_u16(), &body))?
        }
    };
    let prompt = serde_json::json!({"parts": [{"type": "text", "text": a.prompt}]});
    let call = Call::post(&t.project, format!("/session/{session}/prompt_async"), Some(prompt));
    let (status, body) = road
        .call(call)
        .await
        .map_err(|e| failed("prompting the session", e.status, b""))?;
    if !status.is_success() {
        return Err(failed("prompting the session", status.as_u16(), &body));
    }
    let record = Record::new("trigger_fired")
        .user(t.run_as_user.clone())
        .address(ctx.client)
        .project(t.project.clone())
        .via(Via::Trigger, Some(&t.name))
        .field("trigger", t.name.clone())
        .field("delivery", a.delivery.clone())
        .field("hook_event", a.event.clone())
        .field("session", session.clone())
        .field("policy", t.policy.clone());
    ctx.gw.audit.record_written(record, AUDIT_WAIT).await;
    tracing::info!(target: "security", trigger = t.name, project = t.project, session, delivery = a.delivery, "a trigger fired");
    Ok(session)
}

/// The project's session titled `title`, if one is listed.
async fn titled(road: &dyn crate::inbox::Road, project: &str, title: &str) -> Option<String> {
    let call = Call {
        method: http::Method::GET,
        project,
        path: "/session".into(),
        json: None,
        grant: None,
        note: Vec::new(),
    };
    let (status, body) = road.call(call).await.ok()?;
    if !status.is_success() {
        return None;
    }
    let list: serde_json::Value = serde_json::from_slice(&body).ok()?;
    list.as_array()?
        .iter()
        .find(|s| s["title"] == title)
        .and_then(|s| s["id"].as_str())
        .filter(|id| id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(str::to_string)
}
