//! `POST /_gw/trigger`: an operator of a project pauses or resumes one of its `[[trigger]]`s from
//! the portal (`do=pause|resume`, `trigger=<name>`), as `trigger pause|resume` does on the control
//! socket: kept in the state database (every gateway on it stops or starts firing it), audited
//! with the operator's name (`trigger_paused` / `trigger_resumed`, `from: portal`).

use http::Response;
use hyper::body::Incoming;

use super::room::portal_form_fields;
use super::{Ctx, page};
use crate::config::Role;
use crate::http::body::ProxyBody;
use crate::http::error::HttpError;

pub(crate) async fn steer(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    let (live, f, project, role) = portal_form_fields(ctx, body).await?;
    let name = f.get("trigger").map_or("", String::as_str);
    // A trigger of another project is as unknown as one that does not exist.
    if !ctx
        .state
        .settings
        .triggers
        .iter()
        .any(|t| t.name == name && t.project == project)
    {
        return Err(HttpError::NotFound(format!(
            "project {project} has no trigger {name:?}"
        )));
    }
    if role < Role::Operator {
        return Err(HttpError::Forbidden(format!(
            "pausing or resuming project {project}'s triggers needs the operator role; {} has {}",
            live.user,
            role.as_str()
        )));
    }
    let pause = match f.get("do").map(String::as_str) {
        Some("pause") => true,
        Some("resume") => false,
        _ => return Err(HttpError::BadRequest("do: write pause or resume".into())),
    };
    crate::gateway::trigger_pause::steer(ctx.gw, name, pause, "portal", Some(&live.user))
        .await
        .map_err(|e| HttpError::StateUnavailable((&e).into()))?;
    let done = if pause { "trigger_paused" } else { "trigger_resumed" };
    Ok(page::redirect(&format!("/?done={done}#project-{project}")))
}
