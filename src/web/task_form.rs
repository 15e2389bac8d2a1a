//! `POST /_gw/task`: "New task" on the portal (issue 41, item 1): a title, a prompt and
//! optionally a base branch, for a project set the person may start tasks in (the operator role
//! in the project the task becomes, `gateway/task.rs` checks it), made on the person's own road.
//! Answered with the portal, the new project's row in view; or with the step that refused or
//! failed and why (nothing is left made).

use http::Response;
use hyper::body::Incoming;

use super::{Ctx, form, page};
use crate::gateway::task::{NewTask, new_task};
use crate::http::body::ProxyBody;
use crate::http::error::HttpError;

pub(crate) async fn create(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    ctx.check_csrf()?;
    let Some(live) = ctx.login_session().await? else {
        return Err(HttpError::Unauthenticated);
    };
    let f = form::read(body, ctx.gw.limits.body_idle_timeout).await?;
    let field = |name: &str| f.get(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let t = NewTask {
        set: field("set").unwrap_or_default(),
        title: field("title").unwrap_or_default(),
        prompt: f.get("prompt").cloned().unwrap_or_default(),
        base: field("base"),
        agent: field("agent"),
        model: field("model"),
    };
    let user = super::room::user_of(ctx, &live)?;
    let road = super::room::on_behalf(ctx, &live)?;
    match new_task(ctx.gw, &*road, &user, ctx.client, "control_room", &t).await {
        Ok(made) => Ok(page::redirect(&format!("/?done=task_created#project-{}", made.project))),
        Err(r) => {
            let said = format!("the task was not made (step {}): {}", r.step, r.why);
            Err(as_http(&t.set, r.status, said))
        }
    }
}

/// A task's refusal (`gateway/task.rs`'s status) as the page answers it, saying `said`.
pub(crate) fn as_http(project: &str, status: u16, said: String) -> HttpError {
    match status {
        403 => HttpError::Forbidden(said),
        404 => HttpError::NotFound(said),
        400 | 409 => HttpError::BadRequest(said),
        429 => HttpError::OverFleetCap(said),
        _ => HttpError::UpstreamUnavailable {
            project: project.to_string(),
            reason: said,
        },
    }
}
