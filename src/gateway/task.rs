//! A new task (issue 41, item 1): one action makes a branch and a worktree for it in a project
//! set's checkout, puts the set's `worktree_files` in, waits for the set to discover the folder
//! as a project, creates a session titled after the task and sends it the prompt, on the one road
//! as the person who asked. Each step that fails says which it was and why, and what the steps
//! before it made is undone (the worktree and its branch), so nothing is left half-made.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::Gateway;
use super::state::State;
use super::task_git::Checkout;
use crate::auth::users::UserState;
use crate::config::Role;
use crate::config::settings::ProjectSet;
use crate::inbox::{Call, Road};
use crate::support::task_name::{MAX_SLUG, base_refusal, slug};
use crate::upstream::job::Host;

/// How long the set may take to find the new folder, and the new server to answer.
const DISCOVER: Duration = Duration::from_secs(15);
const SERVER: Duration = Duration::from_secs(90);
/// A prompt's bound.
const MAX_PROMPT: usize = 64 * 1024;

/// What a person asks for.
#[derive(Debug, Clone, Default)]
pub(crate) struct NewTask {
    pub set: String,
    pub title: String,
    pub prompt: String,
    /// The branch to start from (default: the checkout's current branch).
    pub base: Option<String>,
    pub agent: Option<String>,
    /// `provider/model`.
    pub model: Option<String>,
}

/// What was made.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Made {
    pub project: String,
    pub branch: String,
    pub base: String,
    pub folder: PathBuf,
    pub session: String,
    /// `worktree_files` the checkout does not have.
    pub missing_files: Vec<String>,
}

/// The step that refused or failed, its status, and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refused {
    pub step: &'static str,
    pub status: u16,
    pub why: String,
}

pub(super) fn refused(step: &'static str, status: u16, why: impl Into<String>) -> Refused {
    Refused {
        step,
        status,
        why: why.into(),
    }
}

/// The task's names and where it goes, checked before anything is made.
struct Plan<'a> {
    set: &'a ProjectSet,
    repo: PathBuf,
    /// Where its git runs: here as the set's `run_as`, or on the set's box.
    host: Host,
    branch: String,
    base: String,
    folder: PathBuf,
    project: String,
}

impl Plan<'_> {
    fn checkout(&self) -> Checkout<'_> {
        Checkout {
            repo: &self.repo,
            host: &self.host,
        }
    }
}

/// Make the task as `user` on `road` (the caller makes it, the pipeline's `on_behalf` as
/// `user`, so the session and the prompt take the one road), from `client`; audited
/// `task_created`.
pub(crate) async fn new_task(
    gw: &Gateway,
    road: &dyn Road,
    user: &UserState,
    client: IpAddr,
    from: &'static str,
    t: &NewTask,
) -> Result<Made, Refused> {
    let state = gw.state();
    let plan = plan(&state, user, t).await?;
    under_waiting_reviews(gw, &user.name)?;
    let git = plan.checkout();
    git.add_worktree(&plan.branch, &plan.folder, &plan.base)
        .await
        .map_err(|e| refused("worktree", 500, e))?;
    gw.lifecycle.box_sets.want();
    let made = async {
        let missing = (git.copy_files(&plan.set.tasks.worktree_files, &plan.folder).await)
            .map_err(|e| refused("files", 500, e))?;
        discovered(gw, &plan.project).await?;
        let session = session(road, &plan.project, &t.title).await?;
        prompt(road, &plan.project, &session, t).await?;
        Ok::<_, Refused>((session, missing))
    }
    .await;
    match made {
        Ok((session, missing_files)) => {
            let made = Made {
                project: plan.project.clone(),
                branch: plan.branch.clone(),
                base: plan.base.clone(),
                folder: plan.folder.clone(),
                session,
                missing_files,
            };
            audit(gw, &user.name, client, from, &made);
            Ok(made)
        }
        Err(r) => {
            if let Err(e) = git.remove_worktree(&plan.branch, &plan.folder).await {
                tracing::error!(folder = %plan.folder.display(), error = %e, "a failed task's worktree could not be removed");
            }
            gw.lifecycle.box_sets.want();
            tracing::warn!(
                set = t.set,
                step = r.step,
                why = r.why,
                "a new task failed; its worktree was removed"
            );
            Err(r)
        }
    }
}

/// Check everything that can be checked before anything is made.
async fn plan<'a>(state: &'a State, user: &UserState, t: &NewTask) -> Result<Plan<'a>, Refused> {
    let set = (state.settings.project_sets.iter().find(|s| s.name == t.set))
        .ok_or_else(|| refused("check", 404, format!("no project set is named {:?}", t.set)))?;
    let repo = set.tasks.repository.clone().ok_or_else(|| {
        refused(
            "check",
            409,
            format!(
                "project set {} has no repository: add repository = \"<its main checkout>\"",
                set.name
            ),
        )
    })?;
    check_text(t)?;
    let room = MAX_SLUG.min(63usize.saturating_sub(set.name.len() + 1 + set.prefix.len()));
    let slug = slug(&t.title, room)
        .ok_or_else(|| refused("check", 400, "the title has no letter or digit to name a branch by"))?;
    let folder_name = format!("{}{slug}", set.prefix);
    let project = crate::config::discover::project_name(&set.name, &folder_name);
    let role = user.grants.role_in(&project);
    if role.is_none_or(|r| r < Role::Operator) {
        let has = role.map_or("no role", Role::as_str);
        return Err(refused(
            "check",
            403,
            format!(
                "a new task in set {} needs the operator role in {project}; {} has {has}",
                set.name, user.name
            ),
        ));
    }
    let host = state.host_of(&set.template).map_err(|e| refused("check", 503, e))?;
    let git = Checkout {
        repo: &repo,
        host: &host,
    };
    let base = match &t.base {
        Some(b) => {
            if let Some(why) = base_refusal(b) {
                return Err(refused("check", 400, format!("base {b:?}: {why}")));
            }
            b.clone()
        }
        None => git
            .current_branch()
            .await
            .map_err(|e| refused("check", 409, format!("the checkout's branch: {e}")))?,
    };
    if !git.has_branch(&base).await {
        return Err(refused(
            "check",
            400,
            format!("base {base:?} is not a branch of {}", repo.display()),
        ));
    }
    if git.has_branch(&slug).await {
        return Err(refused(
            "check",
            409,
            format!("a branch named {slug} exists: give the task another title"),
        ));
    }
    let folder = set.parent.join(&folder_name);
    if git.exists(&folder).await.map_err(|e| refused("check", 503, e))? {
        return Err(refused(
            "check",
            409,
            format!("{} exists: give the task another title", folder.display()),
        ));
    }
    Ok(Plan {
        set,
        repo,
        host,
        branch: slug,
        base,
        folder,
        project,
    })
}

/// The title, the prompt, the agent and the model, as words.
pub(super) fn check_text(t: &NewTask) -> Result<(), Refused> {
    let title = t.title.trim();
    if title.is_empty() || title.chars().count() > 200 || title.chars().any(char::is_control) {
        return Err(refused("check", 400, "title: write 1 to 200 characters, on one line"));
    }
    if t.prompt.trim().is_empty() || t.prompt.len() > MAX_PROMPT {
        return Err(refused("check", 400, format!("prompt: write 1 to {MAX_PROMPT} bytes")));
    }
    let word = |s: &str| {
        !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:@".contains(&b))
    };
    if t.agent.as_deref().is_some_and(|a| !word(a)) {
        return Err(refused("check", 400, "agent: a name of the server's agent list"));
    }
    if t.model
        .as_deref()
        .is_some_and(|m| !m.split_once('/').is_some_and(|(p, m)| word(p) && word(m)))
    {
        return Err(refused(
            "check",
            400,
            "model: write provider/model, as the server's list names it",
        ));
    }
    Ok(())
}

/// `[fleet] max_waiting_reviews`: a user with that many tasks ready for review (their last
/// acceptance test passed, the session theirs, the project still served) starts no new one.
fn under_waiting_reviews(gw: &Gateway, user: &str) -> Result<(), Refused> {
    let Some(max) = gw.state().settings.fleet.max_waiting_reviews else {
        return Ok(());
    };
    let state = gw.state();
    let waiting = (gw.lifecycle.acceptance.passed().into_iter())
        .filter(|(project, _)| state.projects.contains_key(project))
        .filter(|(project, session)| gw.inbox.fleet_owner(project, session).as_deref() == Some(user))
        .count();
    if waiting >= max {
        let tasks = if waiting == 1 {
            "task of yours is"
        } else {
            "tasks of yours are"
        };
        return Err(refused(
            "check",
            429,
            format!(
                "{waiting} {tasks} ready for review (fleet.max_waiting_reviews = {max}): review or remove one first"
            ),
        ));
    }
    Ok(())
}

/// Until the set's watcher serves the folder as `project` (bounded).
async fn discovered(gw: &Gateway, project: &str) -> Result<(), Refused> {
    let deadline = Instant::now() + DISCOVER;
    while !gw.state().projects.contains_key(project) {
        if Instant::now() > deadline {
            return Err(refused(
                "discover",
                504,
                format!(
                    "the set did not serve the new folder as {project} within {} s",
                    DISCOVER.as_secs()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// A session titled after the task; its server is started by the request, and asked again while
/// it starts (bounded).
async fn session(road: &dyn Road, project: &str, title: &str) -> Result<String, Refused> {
    let deadline = Instant::now() + SERVER;
    loop {
        let call = Call::post(
            project,
            "/session".into(),
            Some(serde_json::json!({"title": title.trim()})),
        );
        let (status, body) = match road.call(call).await {
            Ok(answer) => answer,
            Err(r) if r.status == 502 || r.status == 503 => {
                (http::StatusCode::SERVICE_UNAVAILABLE, bytes::Bytes::from(r.to_string()))
            }
            Err(r) => return Err(refused("session", r.status, r.to_string())),
        };
        if let Some(id) = crate::audit::created_session(&body).filter(|_| status.is_success()) {
            return Ok(id);
        }
        let said = String::from_utf8_lossy(&body).chars().take(200).collect::<String>();
        if !matches!(status.as_u16(), 502 | 503) || Instant::now() > deadline {
            return Err(refused(
                "session",
                status.as_u16(),
                format!("the project's server answered {status}: {said}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The task's prompt, with its agent and model when given.
pub(super) async fn prompt(road: &dyn Road, project: &str, session: &str, t: &NewTask) -> Result<(), Refused> {
    let mut body = serde_json::json!({"parts": [{"type": "text", "text": t.prompt}]});
    if let Some(agent) = &t.agent {
        body["agent"] = agent.clone().into();
    }
    if let Some((provider, model)) = t.model.as_deref().and_then(|m| m.split_once('/')) {
        body["model"] = serde_json::json!({"providerID": provider, "modelID": model});
    }
    let call = Call::post(project, format!("/session/{session}/prompt_async"), Some(body));
    match road.call(call).await {
        Ok((status, _)) if status.is_success() => Ok(()),
        Ok((status, body)) => Err(refused(
            "prompt",
            status.as_u16(),
            String::from_utf8_lossy(&body).chars().take(200).collect::<String>(),
        )),
        Err(r) => Err(refused("prompt", r.status, r.to_string())),
    }
}

fn audit(gw: &Gateway, user: &str, client: IpAddr, from: &str, made: &Made) {
    gw.audit.record(
        crate::audit::Record::new("task_created")
            .user(user.to_string())
            .address(client)
            .project(made.project.clone())
            .field("from", from.to_string())
            .field("branch", made.branch.clone())
            .field("base", made.base.clone())
            .field("session", made.session.clone()),
    );
    tracing::info!(target: "security", user, project = made.project, branch = made.branch, session = made.session, "a task was created");
}
