//! Scheduled triggers (issue 40): a `[[trigger]]` with `schedule` fires at each due time of its
//! cron expression (in its `time_zone`), on the same road as a webhook's firing
//! (`gateway/trigger.rs`), from loopback, `from: schedule`.
//!
//! - **Once across gateways.** Each due time is a single-use record in the state database (the
//!   trigger's name and the due time); every gateway on the database wakes for it, and the one
//!   whose record is kept fires. The others log that it was fired elsewhere.
//! - **A time that was due while the gateway was down is skipped**, not run at start: the first
//!   due time is the first at or after the start. An unattended run at an hour nobody expects
//!   (after an outage, or many at once after a long one) is worse than one missed run; the next
//!   due time runs as usual (logged when planned: `a scheduled trigger planned`).
//! - **Reload.** Each wake reads the running state: a trigger added, changed or removed by a
//!   reload is scheduled from the reload on (its next due time after now).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use crate::config::triggers::{HookKind, Trigger};
use crate::gateway::Gateway;
use crate::gateway::trigger::{self, Firing};

/// The longest sleep between looks at the state: a trigger a reload adds is seen within it.
const NAP: Duration = Duration::from_secs(1);

fn now_millis() -> i64 {
    crate::store::now_millis()
}

/// Start the scheduler: one task for the gateway's life.
pub(crate) fn start(gw: Arc<Gateway>) {
    tokio::spawn(async move {
        // Each schedule trigger as last seen and its next due time (Unix seconds).
        let mut next: HashMap<String, (Arc<Trigger>, i64)> = HashMap::new();
        loop {
            let now = now_millis();
            let wake = look(&gw, &mut next, now / 1000);
            let nap = Duration::from_millis(u64::try_from(wake * 1000 - now).unwrap_or(0)).min(NAP);
            tokio::select! {
                _ = tokio::time::sleep(nap) => {}
                _ = gw.lifecycle.shutdown.cancelled() => break,
            }
        }
    });
}

/// Fire what is due at `now`, plan the rest; the earliest next due time.
fn look(gw: &Arc<Gateway>, next: &mut HashMap<String, (Arc<Trigger>, i64)>, now: i64) -> i64 {
    let state = gw.state();
    let mut wake = now + NAP.as_secs() as i64;
    let scheduled: Vec<&Arc<Trigger>> = state
        .settings
        .triggers
        .iter()
        .filter(|t| matches!(t.kind, HookKind::Schedule { .. }))
        .collect();
    next.retain(|name, _| scheduled.iter().any(|t| &t.name == name));
    for t in scheduled {
        let HookKind::Schedule { cron, offset, .. } = &t.kind else {
            continue;
        };
        let known = next.get(&t.name).filter(|(seen, _)| seen == t).map(|(_, due)| *due);
        // First seen (at start, or added or changed by a reload): from now on; nothing missed runs.
        let Some(due) = known.or_else(|| {
            let due = cron.next_after(now - 1, *offset);
            tracing::info!(
                trigger = t.name,
                next = due.map(crate::audit::rfc3339),
                "a scheduled trigger planned"
            );
            due
        }) else {
            continue;
        };
        if due > now {
            next.insert(t.name.clone(), (t.clone(), due));
            wake = wake.min(due);
            continue;
        }
        tokio::spawn(run(gw.clone(), t.clone(), due));
        if let Some(after) = cron.next_after(due.max(now), *offset) {
            next.insert(t.name.clone(), (t.clone(), after));
            wake = wake.min(after);
        }
    }
    wake
}

/// One due time: used once across the gateways on the database, then fired.
async fn run(gw: Arc<Gateway>, t: Arc<Trigger>, due: i64) {
    let at = crate::audit::rfc3339(due);
    let delivery = format!("schedule:{at}");
    if crate::gateway::trigger_pause::paused(&gw, &t.name).await {
        tracing::info!(
            trigger = t.name,
            due = at,
            "a scheduled run was skipped: the trigger is paused"
        );
        return;
    }
    match trigger::use_once(&gw, trigger::Once::ScheduleRun, &t.name, &delivery).await {
        Ok(crate::store::PutOnce::Kept) => {}
        Ok(crate::store::PutOnce::Full) => {
            tracing::warn!(
                trigger = t.name,
                due = at,
                "a scheduled run was not fired: the state database holds too many delivery records"
            );
            return;
        }
        Ok(crate::store::PutOnce::KeyInUse) => {
            tracing::info!(
                trigger = t.name,
                due = at,
                "a scheduled run was fired by another gateway"
            );
            return;
        }
        Err(e) => {
            tracing::warn!(
                trigger = t.name,
                due = at,
                "a scheduled run could not be recorded, so it was not fired: {e}"
            );
            return;
        }
    }
    let state = gw.state();
    let client = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let Some(user) = trigger::runner(&state, &t) else {
        tracing::warn!(
            trigger = t.name,
            "a scheduled run was not fired: its user has no role in its project"
        );
        return;
    };
    let road = crate::pipeline::internal::on_behalf(&gw, user, trigger::who(&t), client, "schedule");
    let prompt = crate::policy::hook::render(&t.prompt, &serde_json::json!({}));
    let firing = Firing {
        trigger: &t,
        delivery: &delivery,
        event: "schedule",
        prompt: &prompt,
        client,
    };
    if let Err(why) = trigger::fire(&gw, &*road, &firing).await {
        tracing::warn!(target: "security", trigger = t.name, due = at, "a scheduled run failed: {why}");
        let record = crate::audit::Record::new("trigger_failed")
            .project(t.project.clone())
            .field("trigger", t.name.clone())
            .field("delivery", delivery.clone())
            .field("reason", why);
        gw.audit.record(record);
    }
}
