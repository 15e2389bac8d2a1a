//! A trigger's firing (issue 40), the same for a webhook delivery (`web/hook.rs`) and a schedule
//! (`front/schedule.rs`): a session of the project (new, or the titled one) created or found and
//! prompted through the one road as the trigger's user, narrowed to the project and carrying the
//! trigger's policy (as a policy token's user is), so `pipeline::proceed` keeps the new session
//! under the policy and the inbox's policy task answers its permission requests; audited once as
//! `trigger_fired`. The caller makes the road (the pipeline's `on_behalf`), so it stays one road.

use std::net::IpAddr;
use std::sync::Arc;

use super::Gateway;
use super::state::State;
use crate::audit::{Record, Via, Who};
use crate::auth::users::UserState;
use crate::config::Grants;
use crate::config::triggers::{SessionChoice, Trigger};
use crate::inbox::{Call, Road};

/// Delivery ids are remembered this long (GitHub redelivers by hand, days later); at most
/// `MAX_ONCE` at once, past which deliveries are refused, never forgotten.
const ONCE_TTL: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);
const MAX_ONCE: usize = 100_000;

/// A schedule's due time is fired only near it (one missed while down is skipped, never run
/// later), so its record need outlive only the gateways on the database waking for it, clocks
/// apart. Kept apart from deliveries: kept with them for a week, a schedule with a seconds field
/// (`* * * * * *`) would fill the shared 100 000 records in 28 hours, and every webhook after
/// them would be refused.
const RUN_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// Which single-use record a firing takes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Once {
    /// A webhook's delivery id.
    Delivery,
    /// A schedule's due time.
    ScheduleRun,
}

/// How long a firing's record may hold its caller back.
const AUDIT_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// One firing: which trigger, the delivery's id (or the schedule's due time), the event, the
/// rendered prompt, and the address it came from (loopback for a schedule).
pub(crate) struct Firing<'a> {
    pub trigger: &'a Trigger,
    pub delivery: &'a str,
    pub event: &'a str,
    pub prompt: &'a str,
    pub client: IpAddr,
}

/// The trigger's user, narrowed to its project and carrying its policy; `None` when the user or
/// their role there is gone (a reload since the trigger was checked cannot remove one without
/// the check refusing the file, but the state and the settings are read apart).
pub(crate) fn runner(state: &State, t: &Trigger) -> Option<Arc<UserState>> {
    let user = state.users.get(&t.run_as_user)?;
    let role = user.grants.role_in(&t.project)?;
    Some(Arc::new(UserState {
        name: user.name.clone(),
        hash: None,
        fingerprint: user.fingerprint,
        grants: Grants::Each([(t.project.clone(), role)].into_iter().collect()),
        ssh_keys: Vec::new(),
        policy: Some(Arc::from(t.policy.as_str())),
    }))
}

/// How a trigger's requests are identified in the audit trail: `via: trigger`, its name.
pub(crate) fn who(t: &Trigger) -> Who {
    Who {
        via: Via::Trigger,
        id: Some(Arc::from(t.name.as_str())),
    }
}

/// Use `id` (a delivery's, or a schedule's due time) of trigger `name` once, in the state
/// database: `Kept` the first time on any gateway sharing it, `KeyInUse` after.
pub(crate) async fn use_once(
    gw: &Gateway,
    of: Once,
    name: &str,
    id: &str,
) -> Result<crate::store::PutOnce, crate::store::StoreError> {
    use blake2::{Blake2b256, Digest};
    let store = gw.browser.sessions.store().clone();
    let (kind, ttl) = match of {
        Once::Delivery => ("hook-delivery", ONCE_TTL),
        Once::ScheduleRun => ("schedule-run", RUN_TTL),
    };
    let once = Arc::new(crate::auth::once::OnceKind::<String>::new(store, kind, ttl, MAX_ONCE));
    let key: [u8; 32] = Blake2b256::digest(format!("{name}\0{id}")).into();
    once.put(key, name.to_string()).await
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn failed(what: &str, status: u16, body: &[u8]) -> String {
    let said: String = String::from_utf8_lossy(body).chars().take(200).collect();
    format!("{what} answered {status}: {said}")
}

/// Create (or find) the session and prompt it on `road`, kept as a run (`trigger_runs.rs`); the
/// session's id, or why not (a failed run).
pub(crate) async fn fire(gw: &Gateway, road: &dyn Road, f: &Firing<'_>) -> Result<String, String> {
    let t = f.trigger;
    let session = match session_for(gw, road, f).await {
        Ok(session) => session,
        Err(why) => {
            super::trigger_runs::failed(gw, t, f.delivery, None, &why).await;
            return Err(why);
        }
    };
    let run = super::trigger_runs::begin(gw, t, f.delivery, &session).await;
    if let Err(why) = prompt(road, f, &session).await {
        super::trigger_runs::failed(gw, t, f.delivery, run, &why).await;
        return Err(why);
    }
    let record = Record::new("trigger_fired")
        .user(t.run_as_user.clone())
        .address(f.client)
        .project(t.project.clone())
        .via(Via::Trigger, Some(&t.name))
        .field("trigger", t.name.clone())
        .field("delivery", f.delivery.to_string())
        .field("hook_event", f.event.to_string())
        .field("session", session.clone())
        .field("policy", t.policy.clone());
    gw.audit.record_written(record, AUDIT_WAIT).await;
    tracing::info!(target: "security", trigger = t.name, project = t.project, session, delivery = f.delivery, "a trigger fired");
    Ok(session)
}

/// The session a firing prompts: the titled one when it is listed and the trigger's own (under
/// its policy), else a new one.
async fn session_for(gw: &Gateway, road: &dyn Road, f: &Firing<'_>) -> Result<String, String> {
    let t = f.trigger;
    if let SessionChoice::Titled(title) = &t.session
        && let Some(id) = titled(gw, road, t, title).await
    {
        return Ok(id);
    }
    let title = match &t.session {
        SessionChoice::Titled(title) => title.clone(),
        SessionChoice::New => format!("{}: {}", t.name, f.event),
    };
    let call = Call::post(&t.project, "/session".into(), Some(serde_json::json!({"title": title})));
    let (status, body) = road
        .call(call)
        .await
        .map_err(|e| failed("creating the session", e.status, e.error.to_string().as_bytes()))?;
    crate::audit::created_session(&body)
        .filter(|id| valid_id(id))
        .ok_or_else(|| failed("creating the session", status.as_u16(), &body))
}

/// Prompt `session` with the firing's prompt (OpenCode answers at once; the turn runs on).
async fn prompt(road: &dyn Road, f: &Firing<'_>, session: &str) -> Result<(), String> {
    let prompt = serde_json::json!({"parts": [{"type": "text", "text": f.prompt}]});
    let call = Call::post(
        &f.trigger.project,
        format!("/session/{session}/prompt_async"),
        Some(prompt),
    );
    let (status, body) = road
        .call(call)
        .await
        .map_err(|e| failed("prompting the session", e.status, e.error.to_string().as_bytes()))?;
    if !status.is_success() {
        return Err(failed("prompting the session", status.as_u16(), &body));
    }
    Ok(())
}

/// The project's session titled `title` that the trigger may wake: one under the trigger's own
/// policy (a session a policy token or trigger made: the state database keeps which, and no
/// person's session is ever in it) whose own rules allow nothing. A person's session with that
/// title, whatever its rules, is never adopted (round five, item 5: an operator's session titled
/// so, with allow-all rules, ran a webhook comment's `rm`); a new one is made instead.
async fn titled(gw: &Gateway, road: &dyn Road, t: &Trigger, title: &str) -> Option<String> {
    let call = Call::get(&t.project, "/session".into());
    let (status, body) = road.call(call).await.ok()?;
    if !status.is_success() {
        return None;
    }
    let list: serde_json::Value = serde_json::from_slice(&body).ok()?;
    list.as_array()?
        .iter()
        .filter(|s| s["title"] == title && !crate::policy::permission::allows_of_its_own(s))
        .filter_map(|s| s["id"].as_str())
        .filter(|id| valid_id(id))
        .find(|id| gw.inbox.session_policy(&t.project, id).as_deref() == Some(t.policy.as_str()))
        .map(str::to_string)
}
