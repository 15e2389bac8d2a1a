//! The body phase, between the plan and the forward (issue 39: the forward only forwards). Most
//! bodies are not read: they stream to the upstream as they come. The few whose bytes decide
//! something are read whole (at most [`SMALL_BODY`]) and judged here, before a byte is sent:
//! - in a pinned project, a body that can name a directory, a file or a session (the route's
//!   `body` rule): a directory outside the project, one of the gateway's own files or another
//!   gateway session's id on a shared server is refused;
//! - a permission answer, whose once/always/reject the audit record keeps.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};

use super::request::Target;
use crate::http::audit::Pending;
use crate::http::body::{RequestBody, SMALL_BODY};
use crate::http::error::HttpError;
use crate::policy::plan::AuditKind;
use crate::upstream::endpoint::Endpoint;

/// A body after its phase: as the client sends it, none, or read whole and judged.
pub(crate) enum Checked {
    Untouched(RequestBody),
    Empty,
    Whole(Bytes),
}

/// Judge `body` for the planned `target`. `upgrade`: a WebSocket, whose upstream request has no
/// body. `audit`: the record begun for this request (a permission answer's reply is noted).
pub(crate) async fn check(
    here: super::Here<'_>,
    user: &str,
    endpoint: &Endpoint,
    target: &Target,
    body: RequestBody,
    upgrade: bool,
    audit: Option<&mut Pending>,
) -> Result<Checked, HttpError> {
    let project = &*target.project;
    if upgrade {
        return Ok(Checked::Empty);
    }
    if let (Some(root), Some(rule)) = (project.config.directory.as_deref(), target.route.and_then(|r| r.body)) {
        let bytes = whole(body, None).await?;
        pinned(here, user, endpoint, target, &bytes, rule, root).await?;
        return Ok(Checked::Whole(bytes));
    }
    match audit {
        // Small JSON, bounded in size and in time like any client body.
        Some(p) if p.kind == AuditKind::PermissionAnswer => {
            let bytes = whole(body, Some(here.gw.limits.body_idle_timeout)).await?;
            p.answer = crate::http::audit::permission_answer(&bytes);
            Ok(Checked::Whole(bytes))
        }
        _ => Ok(Checked::Untouched(body)),
    }
}

/// A pinned project's checked body: every directory it names inside the project, no file of the
/// gateway's own, and (on a server other gateway users share) only sessions of this user's.
async fn pinned(
    here: super::Here<'_>,
    user: &str,
    endpoint: &Endpoint,
    target: &Target,
    bytes: &Bytes,
    rule: &crate::policy::plan::BodyRule,
    root: &std::path::Path,
) -> Result<(), HttpError> {
    let (gw, client, project) = (here.gw, here.client, &*target.project);
    let names = crate::policy::pin::check_body(bytes, rule, root).map_err(|why| {
        tracing::warn!(target: "security", peer = %client, user = %user, project = %project.name, reason = "directory_outside_project", "{why}");
        HttpError::Forbidden(why)
    })?;
    for path in &names.paths {
        super::own_files::refuse(&here.state.settings.protected, client, user, project, path)?;
    }
    if project.shared_upstream {
        for id in &names.sessions {
            super::session_scope::check(gw, project, endpoint, id).await?;
        }
    }
    Ok(())
}

/// A small body read whole (at most [`SMALL_BODY`], within `idle` when given): a client's
/// stream is read, bytes the gateway holds are taken as they are.
async fn whole(body: RequestBody, idle: Option<std::time::Duration>) -> Result<Bytes, HttpError> {
    let body = match body {
        RequestBody::Whole(bytes) => return Ok(bytes),
        RequestBody::Stream(body) => body,
    };
    let read = Limited::new(body, SMALL_BODY).collect();
    let collected = match idle {
        Some(secs) => tokio::time::timeout(secs, read)
            .await
            .map_err(|_| HttpError::BodyTimeout { secs })?,
        None => read.await,
    };
    Ok(collected
        .map_err(|_| HttpError::BadRequest("the request body is cut or larger than 1 MiB".into()))?
        .to_bytes())
}
