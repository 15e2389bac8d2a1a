//! The portal's trigger cards (issue 40, item 3): under each project, its `[[trigger]]`s, whether
//! each is paused and why, a schedule's next due time, and its last runs (when, the session's
//! link, the outcome, the cost, why it failed). Operators of the project get "Pause" / "Resume"
//! (`web/trigger_form.rs`). Read from the state database at each render of the portal (the
//! runs of every gateway on it), never on the proxy's path.

use super::rows::{ago, session_link};
use super::{Room, role_of};
use crate::config::Role;
use crate::config::triggers::{HookKind, Trigger};
use crate::store::TriggerRun;
use crate::web::Ctx;

/// Runs shown per trigger.
const SHOWN_RUNS: i64 = 3;

pub(crate) struct TriggerRow {
    pub name: String,
    /// "GitHub webhook: push, issues.opened", "schedule 0 3 * * * (UTC)".
    pub kind: String,
    /// A schedule's next due time, as a date.
    pub next: Option<String>,
    /// Why it is paused; `None`: it is not.
    pub paused: Option<String>,
    pub runs: Vec<RunRow>,
    /// The user may pause and resume it (operators of its project).
    pub can_steer: bool,
}

pub(crate) struct RunRow {
    pub ago: String,
    /// When it started (ms since the epoch), for the page's script to count on.
    pub since_ms: u64,
    /// The badge's class and word: `running`, `ok`, `failed`.
    pub class: &'static str,
    pub outcome: &'static str,
    pub session: Option<String>,
    pub link: Option<String>,
    pub cost: Option<String>,
    pub detail: String,
}

/// Fill each project row of `room` with the triggers of its project that `user` may see.
pub(crate) async fn add(ctx: &Ctx<'_>, user: &str, room: &mut Room) {
    let triggers = &ctx.state.settings.triggers;
    if triggers.is_empty() {
        return;
    }
    let now = crate::inbox::now_ms();
    for row in &mut room.projects {
        let Some(role) = role_of(ctx.state, user, &row.name) else {
            continue;
        };
        for t in triggers.iter().filter(|t| t.project == row.name) {
            let runs = crate::gateway::trigger_runs::last_runs(ctx.gw, &t.name, SHOWN_RUNS).await;
            let origin = row.origin.clone();
            let runs = runs
                .iter()
                .map(|r| run_row(r, &origin, row.directory.as_deref(), now))
                .collect();
            row.triggers.push(TriggerRow {
                name: t.name.clone(),
                kind: kind_of(t),
                next: next_of(t),
                paused: crate::gateway::trigger_pause::paused_why(ctx.gw, &t.name).await,
                runs,
                can_steer: role >= Role::Operator,
            });
        }
    }
}

fn kind_of(t: &Trigger) -> String {
    let events = if t.events.is_empty() {
        String::new()
    } else {
        format!(": {}", t.events.join(", "))
    };
    match &t.kind {
        HookKind::GitHub { .. } => format!("GitHub webhook{events}"),
        HookKind::Hmac { .. } => format!("signed webhook{events}"),
        HookKind::Schedule { zone, .. } => format!("schedule ({zone})"),
    }
}

fn next_of(t: &Trigger) -> Option<String> {
    let HookKind::Schedule { cron, offset, .. } = &t.kind else {
        return None;
    };
    let now = crate::store::now_millis() / 1000;
    cron.next_after(now, *offset)
        .map(|at| crate::audit::rfc3339(at).replace('T', " "))
}

fn run_row(r: &TriggerRun, origin: &Option<String>, directory: Option<&str>, now: u64) -> RunRow {
    let (class, outcome) = match r.outcome.as_str() {
        "running" => ("busy", "running"),
        "ok" => ("running", "ok"),
        _ => ("failed", "failed"),
    };
    let started = u64::try_from(r.started_at).unwrap_or(0);
    RunRow {
        ago: ago(started, now),
        since_ms: started,
        class,
        outcome,
        link: r.session.as_deref().and_then(|s| session_link(origin, directory, s)),
        session: r.session.clone(),
        cost: r.usd.map(|usd| format!("${usd:.4}")),
        detail: r.detail.clone(),
    }
}
