//! The janitor: a tick every 10 s for what keeps memory and the state database following
//! activity. Every minute, keyed limiters and the connection table forget idle keys; every tick,
//! a flood of connections that ended gives its memory back and the cost meter's changes are
//! saved; every hour, browser sessions that ended (revoked or expired) more than a day ago leave
//! the state database.

use std::sync::Arc;
use std::time::Duration;

use super::Gateway;

const TICK: Duration = Duration::from_secs(10);
/// Ticks between purges of idle keys (a minute).
const PURGE_EVERY: u32 = 6;
/// Ticks between prunes of ended browser sessions (an hour).
const PRUNE_EVERY: u32 = 360;
/// How long an ended session's row is kept (seconds): nothing reads it after its end; a day is
/// a margin for a clock that steps.
const KEEP_ENDED: i64 = 24 * 60 * 60;

pub(crate) fn start(gw: Arc<Gateway>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        let mut ticks = 0u32;
        let mut trim = crate::support::memory::TrimTrigger::default();
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    ticks = ticks.wrapping_add(1);
                    if ticks.is_multiple_of(PURGE_EVERY) {
                        gw.auth.limiters.purge();
                        gw.doors.conn_table.purge();
                    }
                    if ticks.is_multiple_of(PRUNE_EVERY) {
                        prune_ended_sessions(&gw).await;
                    }
                    save_spend(&gw).await;
                    let (peak, open) = gw.doors.conn_table.take_peak();
                    if trim.look(peak, open) {
                        // The ended connections' leases leave the table's queue first: left
                        // there (they leave lazily), a few thousand small blocks scattered
                        // through the heaps kept the pages around them resident.
                        gw.doors.conn_table.purge();
                        // Off the runtime: trimming walks every arena and may take milliseconds.
                        tokio::task::spawn_blocking(crate::support::memory::give_back_free_memory);
                    }
                }
                _ = gw.lifecycle.shutdown.cancelled() => break,
            }
        }
    });
}

/// Without it, every login and pairing left a row behind for ever (and every address that tried
/// a login, on a shared store).
async fn prune_ended_sessions(gw: &Gateway) {
    let store = gw.browser.sessions.store().clone();
    let before = crate::auth::tokens::now_unix() - KEEP_ENDED;
    if let Ok(n) = crate::store::blocking("pruning ended browser sessions", move || {
        store.prune_web_sessions(before)
    })
    .await
        && n > 0
    {
        tracing::info!(sessions = n, "pruned browser sessions that ended more than a day ago");
    }
    // Shared login allowances that are full again (a store of one gateway keeps none).
    let store = gw.browser.sessions.store().clone();
    let _ = crate::store::blocking("pruning full login allowances", move || {
        store.prune_allowances(crate::store::now_millis())
    })
    .await;
}

/// Budget raises another gateway on the shared store made (told by `NOTIFY`): read from the
/// store (today's and the sessions') and merged into this gateway's meter. Called on the thread
/// that listens for notices (blocking is fine there).
pub(crate) fn merge_raised(gw: &Gateway) {
    let store = gw.browser.sessions.store();
    let day = crate::budget::meter::today();
    let rows = store.spend_of_day(day as i64).and_then(|mut today| {
        today.extend(store.spend_of_day(crate::store::SESSION_RAISES_DAY)?);
        Ok(today)
    });
    match rows {
        Ok(rows) => {
            let raised = rows
                .into_iter()
                .filter(|(kind, _, _)| kind == "raised")
                .map(|(_, key, usd)| (key, usd))
                .collect();
            let grew = gw.meter.merge_raised(day, raised);
            tracing::info!(raised = grew, "budget raises made through another gateway merged");
        }
        Err(e) => tracing::error!(error = %e, "cannot read the budget raises another gateway made"),
    }
}

/// The meter as the state database kept it: today's totals and the sessions' last-seen costs
/// (a session's spend while the gateway was down is counted when the inbox sees it again).
pub(crate) fn restore_spend(meter: &crate::budget::Meter, store: &dyn crate::store::Store) {
    let day = crate::budget::meter::today();
    let month = crate::budget::meter::month_start(day) as i64;
    let earlier = store.spend_between(month, day as i64);
    // Today's totals and raises, and sessions' raises (kept apart: they outlive days).
    let totals = store.spend_of_day(day as i64).and_then(|mut today| {
        today.extend(store.spend_of_day(crate::store::SESSION_RAISES_DAY)?);
        Ok(today)
    });
    match (totals, store.session_costs(), earlier) {
        (Ok(totals), Ok(sessions), Ok(earlier)) => meter.restore(day, totals, sessions, earlier),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            tracing::error!(error = %e, "cannot read the spend kept in the state database; the meter starts empty")
        }
    }
}

/// Save what the meter changed since the last save (every tick, and once more at shutdown):
/// a crash loses at most a tick of it.
pub(crate) async fn save_spend(gw: &Gateway) {
    let Some(s) = gw.meter.to_save() else {
        return;
    };
    let store = gw.browser.sessions.store().clone();
    let _ = crate::store::blocking("saving spend", move || {
        store.save_spend(s.day as i64, &s.totals, &s.sessions, &s.forgotten)
    })
    .await;
}
