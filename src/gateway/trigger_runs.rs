//! Triggers' runs (issue 40, item 3): each firing is kept in the state database (`store/runs.rs`)
//! as `running` once its session is known, before the prompt (a fast model must not end the turn
//! before the run exists), and ended by the first gateway that sees the session's turn end (the
//! inbox's [`TurnEnd`]): `failed` when the guard flagged or stopped it or OpenCode said an error,
//! else `ok`, with what the session had cost. A firing that fails before its turn starts is a
//! failed run at once. After [`FAILED_IN_A_ROW`] failed runs in a row the trigger pauses itself
//! (as `trigger pause` would: every gateway on the database stops firing it), which is audited
//! (`trigger_paused`, `from: gateway`) and told as the runaway guard tells (an alert, never a
//! prompt or a tool's output).

use std::sync::Arc;

use super::Gateway;
use crate::config::triggers::Trigger;
use crate::inbox::{Alert, AlertKind, TurnEnd};
use crate::store::{Store, TriggerRun};

/// Failed runs in a row after which a trigger pauses itself.
pub(crate) const FAILED_IN_A_ROW: usize = 2;

fn store(gw: &Gateway) -> Arc<dyn Store> {
    gw.browser.sessions.store().clone()
}

fn run_of(t: &Trigger, delivery: &str, session: Option<&str>, outcome: &str, detail: &str) -> TriggerRun {
    let now = crate::store::now_millis();
    TriggerRun {
        id: format!("run_{}", crate::auth::sessions::random(9)),
        trigger_name: t.name.clone(),
        project: t.project.clone(),
        session: session.map(str::to_string),
        delivery: delivery.to_string(),
        started_at: now,
        ended_at: (outcome != "running").then_some(now),
        outcome: outcome.to_string(),
        detail: detail.to_string(),
        usd: None,
    }
}

/// A run of `t` for `delivery` begins in `session`: its id, or `None` when the database did not
/// keep it (logged; the firing goes on, unrecorded).
pub(crate) async fn begin(gw: &Gateway, t: &Trigger, delivery: &str, session: &str) -> Option<String> {
    let run = run_of(t, delivery, Some(session), "running", "");
    let id = run.id.clone();
    let store = store(gw);
    crate::store::blocking("keeping a trigger's run", move || store.add_trigger_run(&run))
        .await
        .ok()
        .map(|()| id)
}

/// The firing of `t` for `delivery` failed: before a session (`run` none), or at its prompt
/// (`run` begun).
pub(crate) async fn failed(gw: &Gateway, t: &Trigger, delivery: &str, run: Option<String>, why: &str) {
    let store = store(gw);
    let kept = match run {
        Some(id) => {
            let why = why.to_string();
            let at = crate::store::now_millis();
            crate::store::blocking("ending a trigger's run", move || {
                store.end_trigger_run(&id, at, "failed", &why, None)
            })
            .await
        }
        None => {
            let run = run_of(t, delivery, None, "failed", why);
            crate::store::blocking("keeping a trigger's run", move || {
                store.add_trigger_run(&run).map(|()| true)
            })
            .await
        }
    };
    if kept.unwrap_or(false) {
        after_failure(gw, &t.name, &t.project, None).await;
    }
}

/// A session's turn ended: end the runs running in it (only asked of the database when the
/// config has triggers).
pub(crate) async fn turn_ended(gw: &Gateway, end: TurnEnd) {
    if gw.state().settings.triggers.is_empty() {
        return;
    }
    let store = store(gw);
    let session = end.session.clone();
    let Ok(running) =
        crate::store::blocking("reading a session's trigger runs", move || store.running_in(&session)).await
    else {
        return;
    };
    for run in running.into_iter().filter(|r| r.project == end.project) {
        end_run(gw, run, &end).await;
    }
}

async fn end_run(gw: &Gateway, run: TriggerRun, end: &TurnEnd) {
    let usd = gw.meter.session_spend(&end.project, &end.session);
    let outcome = if end.failure.is_some() { "failed" } else { "ok" };
    let detail = end.failure.clone().unwrap_or_default();
    let (store, id, at, why) = (store(gw), run.id.clone(), crate::store::now_millis(), detail.clone());
    let ended = crate::store::blocking("ending a trigger's run", move || {
        store.end_trigger_run(&id, at, outcome, &why, Some(usd))
    })
    .await;
    if !ended.unwrap_or(false) {
        return; // another gateway ended it
    }
    gw.audit.record(
        crate::audit::Record::new("trigger_run_ended")
            .project(run.project.clone())
            .via(crate::audit::Via::Trigger, Some(&run.trigger_name))
            .field("trigger", run.trigger_name.clone())
            .field("session", end.session.clone())
            .field("delivery", run.delivery.clone())
            .field("outcome", outcome)
            .field("reason", detail)
            .field("usd", usd),
    );
    tracing::info!(target: "security", trigger = run.trigger_name, session = end.session, outcome, usd, "a trigger's run ended");
    if end.failure.is_some() {
        after_failure(gw, &run.trigger_name, &run.project, Some(&end.session)).await;
    }
}

/// After a failed run: when the trigger's last [`FAILED_IN_A_ROW`] runs all failed, pause it
/// (once: a trigger paused already is left as it is), audit and tell.
async fn after_failure(gw: &Gateway, name: &str, project: &str, session: Option<&str>) {
    let (store, trigger) = (store(gw), name.to_string());
    let last = crate::store::blocking("reading a trigger's runs", move || {
        store.trigger_runs(&trigger, FAILED_IN_A_ROW as i64)
    })
    .await
    .unwrap_or_default();
    if last.len() < FAILED_IN_A_ROW || last.iter().any(|r| r.outcome != "failed") {
        return;
    }
    let reason = format!(
        "paused itself: its last {FAILED_IN_A_ROW} runs failed ({})",
        last[0].detail
    );
    if !matches!(
        super::trigger_pause::set_paused(gw, name, Some(&reason)).await,
        Ok(true)
    ) {
        return;
    }
    gw.audit.record(
        crate::audit::Record::new("trigger_paused")
            .project(project.to_string())
            .field("trigger", name.to_string())
            .field("from", "gateway")
            .field("reason", reason.clone()),
    );
    tracing::warn!(target: "security", trigger = name, project, reason, "a trigger paused itself");
    gw.inbox.tell(Alert {
        project: project.to_string(),
        session: session.unwrap_or_default().to_string(),
        title: format!("trigger {name}"),
        kind: AlertKind::TriggerPaused,
        reason,
        stopped: false,
    });
}

/// The newest `n` runs of trigger `name` (none when the database does not answer: logged).
pub(crate) async fn last_runs(gw: &Gateway, name: &str, n: i64) -> Vec<TriggerRun> {
    let (store, name) = (store(gw), name.to_string());
    crate::store::blocking("reading a trigger's runs", move || store.trigger_runs(&name, n))
        .await
        .unwrap_or_default()
}
