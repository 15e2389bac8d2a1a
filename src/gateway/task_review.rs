//! Reviewing a task (issue 41, item 4): its changes against its base, "Ask for changes" (a new
//! prompt in its session, on the person's road) and "Remove" (its worktree goes, refused while it
//! holds uncommitted or untracked files unless confirmed; its branch is kept; the set's watcher
//! then stops its server and its routes answer 404). Merging stays a person's job at their desk.
//!
//! A task is a project of a set with a `repository` (the checkout its worktrees come from): the
//! same projects New task makes, and worktrees made by hand in that set.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::Gateway;
use super::task::{NewTask, Refused, refused};
use super::task_diff::Changes;
use super::task_git::Checkout;
use crate::auth::users::UserState;
use crate::config::Role;
use crate::inbox::Road;
use crate::upstream::job::Host;

/// How long the set's watcher may take to see a removed worktree gone.
const GONE: Duration = Duration::from_secs(15);

/// Where a task's project lives: its folder, the set's checkout, and where git runs (here as
/// its `run_as`, or on its box).
pub(crate) struct TaskPlace {
    pub folder: PathBuf,
    pub repo: PathBuf,
    pub host: Host,
}

impl TaskPlace {
    fn in_folder(&self) -> Checkout<'_> {
        Checkout {
            repo: &self.folder,
            host: &self.host,
        }
    }
}

/// Project `name` as a task (`None`: not a worktree of a set with a checkout).
pub(crate) fn place(gw: &Gateway, name: &str) -> Option<TaskPlace> {
    let state = gw.state();
    let project = state.projects.get(name)?;
    let set = state
        .settings
        .project_sets
        .iter()
        .find(|s| Some(&s.name) == project.config.set.as_ref())?;
    Some(TaskPlace {
        folder: project.config.directory.clone()?,
        repo: set.tasks.repository.clone()?,
        host: state.host_of(&project.config).ok()?,
    })
}

/// The task's changes against its base (with each file's text for the review page).
pub(crate) async fn changes(place: &TaskPlace, with_text: bool) -> Result<Changes, String> {
    place.in_folder().changes(with_text).await
}

/// "Ask for changes": `text` as the next prompt of `session`, as the person on `road` (judged
/// there like any prompt: the role, the budgets, the project pinned; audited as a prompt).
pub(crate) async fn ask(road: &dyn Road, project: &str, session: &str, text: &str) -> Result<(), Refused> {
    crate::inbox::check_id(session).map_err(|e| refused("ask", 400, e.to_string()))?;
    let t = NewTask {
        title: "changes".into(),
        prompt: text.to_string(),
        ..NewTask::default()
    };
    super::task::check_text(&t).map_err(|r| Refused { step: "ask", ..r })?;
    super::task::prompt(road, project, session, &t).await
}

/// "Remove": the task's worktree goes (its branch stays), by `user`, who needs the operator role
/// in it; with uncommitted or untracked files only when `confirmed`. Answers once the set no
/// longer serves it (bounded); audited `task_removed`.
pub(crate) async fn remove(
    gw: &Gateway,
    user: &UserState,
    client: IpAddr,
    project: &str,
    confirmed: bool,
) -> Result<(), Refused> {
    let role = user.grants.role_in(project);
    if role.is_none_or(|r| r < Role::Operator) {
        let has = role.map_or("no role", Role::as_str);
        return Err(refused(
            "remove",
            403,
            format!("removing {project} needs the operator role; {} has {has}", user.name),
        ));
    }
    let place = place(gw, project).ok_or_else(|| refused("remove", 404, format!("{project} is not a task")))?;
    let dirty = (place.in_folder().state().await).is_some_and(|(_, status)| !status.is_empty());
    if dirty && !confirmed {
        return Err(refused(
            "remove",
            409,
            format!("{project} holds uncommitted changes: commit them, or confirm to remove them with the worktree"),
        ));
    }
    let from_checkout = Checkout {
        repo: &place.repo,
        host: &place.host,
    };
    (from_checkout.remove_only_worktree(&place.folder, dirty).await).map_err(|e| refused("remove", 409, e))?;
    gw.lifecycle.box_sets.want();
    let deadline = Instant::now() + GONE;
    while gw.state().projects.contains_key(project) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gw.audit.record(
        crate::audit::Record::new("task_removed")
            .user(user.name.to_string())
            .address(client)
            .project(project.to_string())
            .field("uncommitted_removed", dirty.to_string()),
    );
    tracing::info!(target: "security", user = %user.name, project, dirty, "a task's worktree was removed (its branch kept)");
    Ok(())
}
