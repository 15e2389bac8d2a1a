//! A task's line on its card (issue 41, items 2 and 4): files and lines changed since its base,
//! and the link to its review. Read from git at each render of the portal (never on the proxy's
//! path), all tasks at once, within [`WITHIN`]: a slow checkout shows no count rather than
//! holding the page.

use std::time::Duration;

use super::Room;
use crate::gateway::task_review;
use crate::web::Ctx;

const WITHIN: Duration = Duration::from_secs(3);

pub(crate) struct TaskRow {
    /// "+12 −3 in 2 files since main" (none: git did not say in time).
    pub changes: Option<String>,
    pub review: String,
}

/// Fill the row of each project of `room` that is a task.
pub(crate) async fn add(ctx: &Ctx<'_>, room: &mut Room) {
    let places: Vec<_> = (room.projects.iter().enumerate())
        .filter_map(|(i, p)| task_review::place(ctx.gw, &p.name).map(|place| (i, place)))
        .collect();
    if places.is_empty() {
        return;
    }
    let mut counting = tokio::task::JoinSet::new();
    let mut rows = Vec::with_capacity(places.len());
    for (i, place) in places {
        rows.push(i);
        counting.spawn(async move { (i, task_review::changes(&place, false).await) });
    }
    let mut said_of = std::collections::HashMap::new();
    let _ = tokio::time::timeout(WITHIN, async {
        while let Some(done) = counting.join_next().await {
            if let Ok((i, Ok(c))) = done {
                said_of.insert(i, said(&c));
            }
        }
    })
    .await;
    for i in rows {
        let row = &mut room.projects[i];
        row.task = Some(TaskRow {
            changes: said_of.remove(&i),
            review: format!("/_gw/review?project={}", crate::support::form::encode(&row.name)),
        });
    }
}

/// The changes in a few words.
pub(crate) fn said(c: &crate::gateway::task_diff::Changes) -> String {
    let (added, removed) = c.totals();
    let files = match c.files.len() {
        1 => "1 file".to_string(),
        n => format!("{n} files"),
    };
    let on = c.branch.as_deref().map(|b| format!("{b}: ")).unwrap_or_default();
    match &c.base {
        Some(base) => format!("{on}+{added} \u{2212}{removed} in {files} since {base}"),
        None => format!("{on}+{added} \u{2212}{removed} in {files}, not committed"),
    }
}

/// The sets `user` may start tasks in (those with a checkout, where a task's project would give
/// them the operator role), for the portal's form.
pub(crate) fn sets_for(ctx: &Ctx<'_>, user: &str) -> Vec<String> {
    let Some(u) = ctx.state.users.get(user) else {
        return Vec::new();
    };
    (ctx.state.settings.project_sets.iter())
        .filter(|s| s.tasks.repository.is_some())
        .filter(|s| {
            u.grants
                .role_in(&format!("{}-{}task", s.name, s.prefix))
                .is_some_and(|r| r >= crate::config::Role::Operator)
        })
        .map(|s| s.name.clone())
        .collect()
}
