//! A task's review on the phone (issue 41, item 4): `GET /_gw/review?project=<p>` shows its diff
//! against its base, file by file (escaped by the template; large, cut and binary files folded),
//! its sessions, and the acts: "Ask for changes" (a prompt in its session), "Stop" (the session
//! and everything under it, `/_gw/act`), "Remove" (its worktree; refused while it holds
//! uncommitted changes unless confirmed; its branch is kept). `POST /_gw/review` does the first
//! and the last. Viewers of the project see; the road judges the prompt (operators); removing
//! needs the operator role (`gateway/task_review.rs`). Merging stays a person's job at their desk.

use askama::Template;
use http::{Response, StatusCode};
use hyper::body::Incoming;

use super::room::{on_behalf, portal_form_fields, user_of};
use super::{Ctx, page};
use crate::config::Role;
use crate::gateway::task_diff::FileDiff;
use crate::gateway::task_review;
use crate::http::body::ProxyBody;
use crate::http::error::HttpError;

/// A file whose diff has more lines than this is shown folded.
const FOLD_LINES: usize = 200;

struct FileRow {
    path: String,
    /// "+3 −1", or "binary".
    counts: String,
    /// Each line with its class (`add`, `del`, `hunk`, `meta`, or none).
    lines: Vec<(&'static str, String)>,
    open: bool,
    cut: bool,
}

#[derive(Template)]
#[template(path = "review.html")]
struct ReviewPage {
    project: String,
    summary: String,
    files: Vec<FileRow>,
    cut: bool,
    /// The session "Ask for changes" and "Stop" act on: the most recently active top session.
    session: Option<(String, String)>,
    can_ask: bool,
    can_remove: bool,
    flash: Option<&'static str>,
}

/// `GET /_gw/review?project=<p>`.
pub(crate) async fn show(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let Some(live) = ctx.login_session().await? else {
        let here = ctx.parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        return Ok(page::redirect(&format!(
            "/login?next={}",
            crate::support::form::encode(here)
        )));
    };
    let query = ctx.parts.uri.query().unwrap_or("");
    let project = crate::policy::query::get(query, "project")
        .unwrap_or_default()
        .to_string();
    let role = (ctx.state.users.get(&*live.user)).and_then(|u| u.grants.role_in(&project));
    let (Some(role), Some(place)) = (role, task_review::place(ctx.gw, &project)) else {
        return Err(HttpError::NotFound(format!("no task {project:?} of yours")));
    };
    let changes = task_review::changes(&place, true)
        .await
        .map_err(|e| HttpError::UpstreamUnavailable {
            project: project.clone(),
            reason: format!("its changes could not be read: {e}"),
        })?;
    let view = ctx.gw.inbox.view(|p| p == project);
    let session = (view.first()).and_then(|v| v.sessions.iter().find(|s| s.parent_id.is_none()));
    let flash = match crate::policy::query::get(query, "done").as_deref() {
        Some("asked") => Some("Your changes were asked for: the agent has the prompt."),
        _ => None,
    };
    let review = ReviewPage {
        summary: super::room::changes_said(&changes),
        project,
        files: changes.files.iter().map(file_row).collect(),
        cut: changes.cut,
        session: session.map(|s| (s.id.clone(), s.title.clone())),
        can_ask: role >= Role::Operator,
        can_remove: role >= Role::Operator,
        flash,
    };
    page::html(StatusCode::OK, &review)
}

/// `POST /_gw/review`: `do=ask` (with `session` and `text`) or `do=remove` (with `confirm`).
pub(crate) async fn act(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    let (live, f, project, _role) = portal_form_fields(ctx, body).await?;
    let field = |name: &str| f.get(name).map_or("", String::as_str);
    match field("do") {
        "ask" => {
            let view = ctx.gw.inbox.view(|p| p == project);
            let listed = view
                .first()
                .is_some_and(|v| v.sessions.iter().any(|s| s.id == field("session")));
            if !listed {
                return Err(HttpError::NotFound(format!(
                    "no session {:?} in {project}",
                    field("session")
                )));
            }
            let road = on_behalf(ctx, &live)?;
            (task_review::ask(&*road, &project, field("session"), field("text")).await)
                .map_err(|r| refusal(&project, r))?;
            let back = format!(
                "/_gw/review?project={}&done=asked",
                crate::support::form::encode(&project)
            );
            Ok(page::redirect(&back))
        }
        "remove" => {
            let user = user_of(ctx, &live)?;
            let confirmed = field("confirm") == "yes";
            (task_review::remove(ctx.gw, &user, ctx.client, &project, confirmed).await)
                .map_err(|r| refusal(&project, r))?;
            Ok(page::redirect("/?done=removed"))
        }
        _ => Err(HttpError::BadRequest("unknown action".into())),
    }
}

fn refusal(project: &str, r: crate::gateway::task::Refused) -> HttpError {
    super::task_form::as_http(project, r.status, format!("{}: {}", r.step, r.why))
}

fn file_row(f: &FileDiff) -> FileRow {
    let counts = match f.lines {
        Some((a, r)) => format!("+{a} \u{2212}{r}"),
        None => "binary".into(),
    };
    let lines: Vec<(&'static str, String)> = (f.text.lines())
        .map(|l| {
            let class = match l.as_bytes().first() {
                _ if l.starts_with("+++") || l.starts_with("---") => "meta",
                Some(b'+') => "add",
                Some(b'-') => "del",
                Some(b'@') => "hunk",
                Some(b' ') | None => "",
                _ => "meta",
            };
            (class, l.to_string())
        })
        .collect();
    FileRow {
        path: f.path.clone(),
        open: f.lines.is_some() && !f.cut && lines.len() <= FOLD_LINES,
        counts,
        lines,
        cut: f.cut,
    }
}
