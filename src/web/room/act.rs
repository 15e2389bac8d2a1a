//! The control room's forms: answering, resuming, aborting, creating a session, restarting a
//! server (`POST /_gw/act`, `/_gw/new`, `/_gw/restart`).

use hyper::body::Incoming;

use super::rows::{project_origin, session_link};
use super::*;
use crate::audit::{Via, Who};
use crate::inbox::Road;
use crate::inbox::{Card, Inbox, ProjectView};
use crate::inbox::{InboxError, Outcome, Reply};
use crate::policy::authz::Class;

/// `POST /_gw/act`: answer a permission request or a question, or abort a session. Only what
/// the inbox shows for that project can be acted on, and only by an approver (or above) there.
pub(crate) async fn act(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    ctx.check_csrf()?;
    let Some(live) = ctx.login_session().await? else {
        return Err(HttpError::Unauthenticated);
    };
    let f = form::read(body, ctx.gw.limits.body_idle_timeout).await?;
    let project = f.get("project").map_or("", String::as_str);
    let id = f.get("id").map_or("", String::as_str);
    let action = f.get("do").map_or("", String::as_str);
    let back = if f.get("from").is_some_and(|v| v == "portal") {
        "/"
    } else {
        "/inbox"
    };
    // A project the user has no role in is as absent as one that does not exist. Whether their
    // role may answer is the proxy's to say (the answer goes through it as theirs).
    if role_of(ctx.state, &live.user, project).is_none() {
        return Err(HttpError::NotFound(format!(
            "no pending request {id} in a project of yours"
        )));
    }
    let on = on_behalf(ctx, &live)?;
    let by: &dyn Road = &*on;
    let view = ctx.gw.inbox.view(|p| p == project);
    let Some(v) = view.first() else {
        return Ok(page::redirect(&format!("{back}?done=elsewhere")));
    };
    let inbox = &ctx.gw.inbox;
    // The card must still be pending: one answered meanwhile (here or elsewhere) says so.
    let outcome = match action {
        "once" | "always" | "reject" | "answer" | "dismiss" => answer_card(inbox, &f, v, project, id, action, by).await,
        "resume" => return resume(ctx, &live, by, project, id, back).await,
        "abort" => return abort(ctx, &live, by, v, project, id, back).await,
        _ => return Err(HttpError::BadRequest("unknown action".into())),
    };
    let Some(outcome) = outcome else {
        return Ok(page::redirect(&format!("{back}?done=elsewhere")));
    };
    // The request audit recorded the answer (`from: control_room`) as the proxy sent it.
    tracing::info!(target: "security", peer = %ctx.client, user = %live.user, device = live.device.as_deref().unwrap_or("-"), project, request = id, answer = action, "answered from the control room");
    match outcome {
        // The notice says what was answered (allowed once, always, rejected, replied).
        Ok(Outcome::Done) => Ok(page::redirect(&format!("{back}?done={action}&id={}", form::encode(id)))),
        Ok(Outcome::AlreadyAnswered) => Ok(page::redirect(&format!("{back}?done=elsewhere"))),
        Err(e) => Err(inbox_error(project, e)),
    }
}

/// "Resume" on a session the guard stopped: the named act `policy/grants.rs::RESUME` on the
/// user's road, which judges it (approvers and up, only a stopped session, the budgets) and sends
/// the one fixed "continue" (`Inbox::resume`).
async fn resume(
    ctx: &Ctx<'_>,
    live: &Live,
    by: &dyn Road,
    project: &str,
    id: &str,
    back: &str,
) -> Result<Response<ProxyBody>, HttpError> {
    let r = ctx.gw.inbox.resume(by, project, id).await;
    tracing::info!(target: "security", peer = %ctx.client, user = %live.user, project, session = id, ok = r.is_ok(), "stopped session resumed from the control room");
    session_done(back, project, "resumed", r)
}

/// "Abort" on a session the project still has: the inbox stops it on the user's road.
async fn abort(
    ctx: &Ctx<'_>,
    live: &Live,
    by: &dyn Road,
    v: &ProjectView,
    project: &str,
    id: &str,
    back: &str,
) -> Result<Response<ProxyBody>, HttpError> {
    if !v.sessions.iter().any(|s| s.id == id) {
        return Ok(page::redirect(&format!("{back}?done=gone")));
    }
    // "Stop" on a card stops the session and everything under it (issue 41).
    let r = ctx.gw.inbox.abort_tree(by, project, id).await;
    tracing::info!(target: "security", peer = %ctx.client, user = %live.user, project, session = id, "session aborted from the control room, with the sessions under it");
    session_done(back, project, "aborted", r)
}

/// A session act's outcome as the page to go back to: its notice, "gone" when the session was
/// no longer there to act on, or the inbox's failure.
fn session_done(
    back: &str,
    project: &str,
    done: &str,
    r: Result<Outcome, InboxError>,
) -> Result<Response<ProxyBody>, HttpError> {
    match r {
        Ok(Outcome::Done) => Ok(page::redirect(&format!("{back}?done={done}"))),
        Ok(Outcome::AlreadyAnswered) => Ok(page::redirect(&format!("{back}?done=gone"))),
        Err(e) => Err(inbox_error(project, e)),
    }
}

/// Answer the card the form names, if it is still pending (`None`: it is not): allow once,
/// always or reject a permission request; answer or dismiss a question.
async fn answer_card(
    inbox: &Inbox,
    f: &form::Form,
    v: &ProjectView,
    project: &str,
    id: &str,
    action: &str,
    by: &dyn Road,
) -> Option<Result<Outcome, InboxError>> {
    let mut named = v.pending.iter().filter(|c| c.id() == id);
    if let Some(reply) = Reply::parse(action) {
        named.find(|c| matches!(c, Card::Permission(_)))?;
        let message = f.get("message").cloned().filter(|m| !m.trim().is_empty());
        return Some(inbox.reply_permission(project, id, reply, message, by).await);
    }
    let Some(Card::Question(q)) = named.find(|c| matches!(c, Card::Question(_))) else {
        return None;
    };
    Some(if action == "dismiss" {
        inbox.reject_question(project, id, by).await
    } else {
        let answers = chosen_answers(f, q.request.questions.len());
        inbox.reply_question(project, id, answers, by).await
    })
}

/// For each of a question card's `n` questions, the labels ticked (`q<i>`) and the user's own
/// text (`q<i>-own`), in order.
fn chosen_answers(f: &form::Form, n: usize) -> Vec<Vec<String>> {
    (0..n)
        .map(|i| {
            let mut chosen: Vec<String> = f.all(&format!("q{i}")).map(String::from).collect();
            if let Some(text) = f.get(&format!("q{i}-own")).filter(|t| !t.trim().is_empty()) {
                chosen.push(text.trim().to_string());
            }
            chosen
        })
        .collect()
}

/// The login behind a state-changing portal form, and its `project` field: cross-origin
/// requests refused first, then no login, then (as absent) a project the user has no role in.
async fn portal_form(ctx: &Ctx<'_>, body: Incoming) -> Result<(Arc<Live>, String, Role), HttpError> {
    let (live, _, project, role) = portal_form_fields(ctx, body).await?;
    Ok((live, project, role))
}

/// [`portal_form`], with the form's other fields.
pub(crate) async fn portal_form_fields(
    ctx: &Ctx<'_>,
    body: Incoming,
) -> Result<(Arc<Live>, form::Form, String, Role), HttpError> {
    ctx.check_csrf()?;
    let Some(live) = ctx.login_session().await? else {
        return Err(HttpError::Unauthenticated);
    };
    let f = form::read(body, ctx.gw.limits.body_idle_timeout).await?;
    let project = f.get("project").cloned().unwrap_or_default();
    let Some(role) = role_of(ctx.state, &live.user, &project) else {
        return Err(HttpError::NotFound(format!("no project {project:?} of yours")));
    };
    Ok((live, f, project, role))
}

/// The user behind a login session, as the proxy knows them, for a request made on their behalf:
/// the road through the proxy's own phases as them.
pub(crate) fn on_behalf<'a>(ctx: &'a Ctx<'_>, live: &Live) -> Result<Box<dyn Road + 'a>, HttpError> {
    let user = user_of(ctx, live)?;
    let who = Who {
        via: via_of(live),
        id: live.device.clone(),
    };
    Ok((ctx.on_behalf)(ctx.gw, user, who, ctx.client, "control_room"))
}

/// The user behind a login session, as the configuration now has them.
pub(crate) fn user_of(ctx: &Ctx<'_>, live: &Live) -> Result<Arc<crate::auth::users::UserState>, HttpError> {
    (ctx.state.users.get(&*live.user).cloned()).ok_or(HttpError::Unauthenticated)
}

fn via_of(live: &Live) -> Via {
    if live.device.is_some() {
        Via::Device
    } else {
        Via::Cookie
    }
}

/// `POST /_gw/new`: create a session in the project (upstream, the way the inbox answers: the
/// gateway's own credential, the project's directory), then open it in the project's web UI.
/// Needs the role a proxied `POST /session` needs.
pub(crate) async fn new_session(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    let (live, project, _) = portal_form(ctx, body).await?;
    // The role a `POST /session` needs is the proxy's to check: the create goes through it as
    // this user, and the request audit records it (`session_create`, `from: control_room`).
    let on = on_behalf(ctx, &live)?;
    let created = ctx.gw.inbox.create_session(&*on, &project).await;
    let id = created.map_err(|e| inbox_error(&project, e))?;
    tracing::info!(target: "security", peer = %ctx.client, user = %live.user, project, session = id, "session created from the control room");
    let origin = project_origin(ctx, &project);
    let directory = ctx
        .state
        .projects
        .get(&project)
        .and_then(|p| p.config.directory.as_ref().map(|d| d.display().to_string()));
    Ok(match session_link(&origin, directory.as_deref(), &id) {
        Some(link) => page::redirect(&link),
        None => page::redirect("/?done=created"),
    })
}

/// `POST /_gw/restart`: what `opencode-gateway restart <project>` does (the control socket's
/// `POST /restart`), for an operator (or admin) of the project; audited as `server_restarted`
/// with the user when the new server is up.
pub(crate) async fn restart(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    let (live, project, role) = portal_form(ctx, body).await?;
    if role < Class::Operate.least_role() {
        tracing::warn!(target: "security", peer = %ctx.client, user = %live.user, project, role = role.as_str(), "a restart from a role that may not restart refused");
        return Err(HttpError::Forbidden(format!(
            "restarting project {project}'s server needs the operator role; {} has {}",
            live.user,
            role.as_str()
        )));
    }
    let Some(crate::gateway::state::Upstream::Supervised(s)) = ctx.state.projects.get(&project).map(|p| &p.upstream)
    else {
        return Err(HttpError::BadRequest(format!(
            "project {project} is an OpenCode server the gateway does not run; restart it where it runs"
        )));
    };
    s.restart_by(Some(&live.user))
        .map_err(|reason| HttpError::UpstreamStarting {
            project: project.clone(),
            reason,
        })?;
    tracing::info!(target: "security", peer = %ctx.client, user = %live.user, project, "server restart asked from the control room");
    Ok(page::redirect("/?done=restarting"))
}

/// An inbox failure as the status a person can act on.
fn inbox_error(project: &str, e: InboxError) -> HttpError {
    match e {
        // The proxy's own refusal, as it answers a client.
        InboxError::Refused(r) => match r.error.downcast::<HttpError>() {
            Ok(e) => *e,
            // Not reached: the pipeline's road refuses with its own error.
            Err(e) => HttpError::Forbidden(e.to_string()),
        },
        InboxError::BadId(_) => HttpError::BadRequest(e.to_string()),
        InboxError::UnknownProject(p) => HttpError::UnknownProject(p),
        InboxError::NotRunning(reason) => HttpError::UpstreamStarting {
            project: project.to_string(),
            reason,
        },
        InboxError::Upstream { .. } | InboxError::Unreachable(_) => HttpError::UpstreamUnavailable {
            project: project.to_string(),
            reason: e.to_string(),
        },
    }
}
