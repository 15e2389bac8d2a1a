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

/// Agents and models offered for a new task.
#[derive(Default)]
pub(crate) struct Choices {
    pub agents: Vec<String>,
    /// `provider/model`.
    pub models: Vec<String>,
}

/// What New task offers: the lists of a server running in one of `sets` (a task's worktree has
/// the checkout's configuration), asked as the person on their road, within [`WITHIN`]; none
/// when no server runs there (then the form takes the names as typed, checked by the task).
pub(crate) async fn choices(ctx: &Ctx<'_>, live: &crate::auth::sessions::Live, sets: &[String]) -> Choices {
    let state = ctx.state;
    let in_sets =
        |p: &str| (state.projects.get(p)).is_some_and(|p| p.config.set.as_ref().is_some_and(|s| sets.contains(s)));
    let views = ctx.gw.inbox.view(in_sets);
    let running = views
        .iter()
        .find(|v| matches!(v.server, crate::inbox::ServerState::Running));
    let (Some(project), Ok(road)) = (running.map(|v| v.name.as_str()), super::on_behalf(ctx, live)) else {
        return Choices::default();
    };
    let get = |path: &str| crate::inbox::Call::get(project, path.to_string());
    let asked = async {
        let agents = road.call(get("/agent")).await.ok()?;
        let providers = road.call(get("/config/providers")).await.ok()?;
        Some((agents.1, providers.1))
    };
    let Ok(Some((agents, providers))) = tokio::time::timeout(WITHIN, asked).await else {
        return Choices::default();
    };
    choices_from(&agents, &providers)
}

/// `GET /agent` (`[{name, mode}]`: the primary ones) and `GET /config/providers`
/// (`{providers: [{id, models: {<id>: …}}]}`), as OpenCode 1.18.33 answers them.
fn choices_from(agents: &[u8], providers: &[u8]) -> Choices {
    let agents: serde_json::Value = serde_json::from_slice(agents).unwrap_or_default();
    let providers: serde_json::Value = serde_json::from_slice(providers).unwrap_or_default();
    let agents = (agents.as_array().into_iter().flatten())
        .filter(|a| a["mode"] != "subagent" && a["hidden"] != true)
        .filter_map(|a| a["name"].as_str().map(str::to_string))
        .take(50)
        .collect();
    let mut models = Vec::new();
    for p in providers["providers"].as_array().into_iter().flatten() {
        let Some(id) = p["id"].as_str() else { continue };
        for m in p["models"].as_object().into_iter().flat_map(|m| m.keys()) {
            models.push(format!("{id}/{m}"));
        }
    }
    models.sort();
    models.truncate(200);
    Choices { agents, models }
}

#[cfg(test)]
mod tests {
    #[test]
    fn primary_agents_and_each_providers_models_are_offered() {
        let agents = br#"[{"name":"build","mode":"primary"},{"name":"general","mode":"subagent"},{"name":"plan","mode":"primary"},{"name":"x","mode":"primary","hidden":true}]"#;
        let providers = br#"{"providers":[{"id":"fake","models":{"fake-model":{}}},{"id":"b","models":{"m2":{},"m1":{}}}],"default":{}}"#;
        let c = super::choices_from(agents, providers);
        assert_eq!(c.agents, ["build", "plan"]);
        assert_eq!(c.models, ["b/m1", "b/m2", "fake/fake-model"]);
        let none = super::choices_from(b"<html>", b"");
        assert!(none.agents.is_empty() && none.models.is_empty());
    }
}
