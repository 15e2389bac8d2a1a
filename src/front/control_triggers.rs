//! The control socket's trigger routes, for `opencode-gateway trigger list|fire|pause|resume`
//! (only the gateway's OS user reaches the socket):
//!
//! - `GET /triggers`: each trigger, its kind, project, user, policy, whether it is paused and
//!   why, a schedule's next due time, and its last runs (when, session, outcome, cost);
//! - `POST /trigger/fire?name=N` (body: a JSON object, the payload; empty: `{}`): fire it now, as
//!   a delivery would (the template, the trigger's user and policy, the one road), without a
//!   signature, an event filter or a delivery id: `delivery: manual:<ms>`, `from: control_socket`;
//!   a paused trigger fires too (the operator asked for this run);
//! - `POST /trigger/pause?name=N`, `POST /trigger/resume?name=N`: kept in the state database, so
//!   every gateway on it stops (deliveries refused 503 `trigger_paused`, scheduled runs skipped)
//!   and starts again; audited `trigger_paused` / `trigger_resumed` (`trigger_pause::steer`).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::config::triggers::{HookKind, Trigger};
use crate::gateway::Gateway;
use crate::gateway::trigger::{self, Firing};
use crate::gateway::trigger_pause;

/// The answer to a trigger route, or `None` for a path that is not one.
pub(super) async fn route(
    gw: &Arc<Gateway>,
    method: &Method,
    path: &str,
    query: &str,
    body: &[u8],
) -> Option<(StatusCode, Value)> {
    let name = crate::policy::query::get(query, "name").unwrap_or_default();
    Some(match (method, path) {
        (&Method::GET, "/triggers") => (StatusCode::OK, list(gw).await),
        (&Method::POST, "/trigger/fire") => fire(gw, &name, body).await,
        (&Method::POST, "/trigger/pause") => pause(gw, &name, true).await,
        (&Method::POST, "/trigger/resume") => pause(gw, &name, false).await,
        _ => return None,
    })
}

fn named(gw: &Gateway, name: &str) -> Result<Arc<Trigger>, (StatusCode, Value)> {
    let state = gw.state();
    state
        .settings
        .triggers
        .iter()
        .find(|t| t.name == name)
        .cloned()
        .ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                json!({"error": format!("no [[trigger]] is named {name:?}")}),
            )
        })
}

/// Runs listed per trigger.
const LISTED_RUNS: i64 = 5;

fn run_json(r: &crate::store::TriggerRun) -> Value {
    let ms = |t: i64| crate::audit::rfc3339(t / 1000);
    json!({
        "started": ms(r.started_at),
        "ended": r.ended_at.map(ms),
        "session": r.session,
        "delivery": r.delivery,
        "outcome": r.outcome,
        "detail": r.detail,
        "usd": r.usd,
    })
}

async fn list(gw: &Gateway) -> Value {
    let state = gw.state();
    let now = crate::store::now_millis() / 1000;
    let mut out = Vec::new();
    for t in &state.settings.triggers {
        let (kind, next) = match &t.kind {
            HookKind::GitHub { .. } => ("github", None),
            HookKind::Hmac { .. } => ("hmac", None),
            HookKind::Schedule { cron, offset, .. } => ("schedule", cron.next_after(now, *offset)),
        };
        let paused = trigger_pause::paused_why(gw, &t.name).await;
        let runs: Vec<Value> = crate::gateway::trigger_runs::last_runs(gw, &t.name, LISTED_RUNS)
            .await
            .iter()
            .map(run_json)
            .collect();
        out.push(json!({
            "name": t.name,
            "kind": kind,
            "project": t.project,
            "run_as_user": t.run_as_user,
            "policy": t.policy,
            "events": t.events,
            "paused": paused.is_some(),
            "paused_why": paused,
            "runs": runs,
            "next": next.map(crate::audit::rfc3339),
            "endpoint": matches!(kind, "github" | "hmac").then(|| format!("/_gw/hook/{}", t.name)),
        }));
    }
    json!({ "triggers": out })
}

async fn fire(gw: &Arc<Gateway>, name: &str, body: &[u8]) -> (StatusCode, Value) {
    let t = match named(gw, name) {
        Ok(t) => t,
        Err(e) => return e,
    };
    let payload: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(v) if v.is_object() => v,
            _ => {
                return (
                    StatusCode::BAD_REQUEST,
                    json!({"error": "the payload is not a JSON object"}),
                );
            }
        }
    };
    let state = gw.state();
    let Some(user) = trigger::runner(&state, &t) else {
        let why = format!("{} has no role in {}", t.run_as_user, t.project);
        return (StatusCode::CONFLICT, json!({ "error": why }));
    };
    let client = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let road = crate::pipeline::internal::on_behalf(gw, user, trigger::who(&t), client, "control_socket");
    let prompt = crate::policy::hook::render(&t.prompt, &payload);
    let delivery = format!("manual:{}", crate::store::now_millis());
    let firing = Firing {
        trigger: &t,
        delivery: &delivery,
        event: "manual",
        prompt: &prompt,
        client,
    };
    match trigger::fire(gw, &*road, &firing).await {
        Ok(session) => (
            StatusCode::OK,
            json!({"trigger": t.name, "delivery": delivery, "session": session}),
        ),
        Err(why) => (StatusCode::BAD_GATEWAY, json!({ "error": why })),
    }
}

async fn pause(gw: &Gateway, name: &str, pause: bool) -> (StatusCode, Value) {
    if let Err(e) = named(gw, name) {
        return e;
    }
    match trigger_pause::steer(gw, name, pause, "control_socket", None).await {
        Ok(changed) => (
            StatusCode::OK,
            json!({"trigger": name, "paused": pause, "changed": changed}),
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": format!("the state database did not answer: {e}")}),
        ),
    }
}
