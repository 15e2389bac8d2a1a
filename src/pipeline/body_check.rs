//! The body phase, between the plan and the forward (issue 39: the forward only forwards). Most
//! bodies are not read: they stream to the upstream as they come. The few whose bytes decide
//! something are read whole (at most [`SMALL_BODY`]) and judged here, before a byte is sent:
//! - in a pinned project, a body that can name a directory, a file or a session (the route's
//!   `body` rule): a directory outside the project, one of the gateway's own files or another
//!   gateway session's id on a shared server is refused;
//! - a permission answer, whose once/always/reject the audit record keeps, and which a client
//!   may not give against a session's permission policy (`policy_check.rs`, issue 40);
//! - while a policy could apply, a body that sets a session's permission rules.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};

use super::request::Target;
use super::{Asker, Principal};
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

/// Judge `body` for the planned `target`, sent by `principal`. `upgrade`: a WebSocket, whose
/// upstream request has no body. `audit`: the record begun for this request (a permission
/// answer's reply is noted).
pub(crate) async fn check(
    here: super::Here<'_>,
    principal: &Principal<'_>,
    endpoint: &Endpoint,
    target: &Target,
    body: RequestBody,
    upgrade: bool,
    audit: Option<&mut Pending>,
) -> Result<Checked, HttpError> {
    if upgrade {
        return Ok(Checked::Empty);
    }
    let project = &*target.project;
    let pin = match (project.config.directory.as_deref(), target.route.and_then(|r| r.body)) {
        (Some(root), Some(rule)) => Some((root, rule)),
        _ => None,
    };
    let answer = target
        .route
        .is_some_and(|r| r.audit == Some(AuditKind::PermissionAnswer));
    let rules = sets_rules_under_a_policy(here, target, principal.asker());
    if pin.is_none() && !answer && !rules {
        return Ok(Checked::Untouched(body));
    }
    // Small JSON, bounded in size and (unless a pinned body, which may be a long prompt) in time
    // like any client body.
    let idle = pin.is_none().then_some(here.gw.limits.body_idle_timeout);
    // Boxed: most requests pass untouched above, and hyper keeps the request's future for an
    // HTTP/1.1 connection's life, sized for its largest branch.
    let bytes = Box::pin(whole(body, idle)).await?;
    // The one reading every decision below makes: a body it cannot read as OpenCode would is
    // refused here, never passed unjudged.
    let json = crate::policy::json_body::read(&bytes).map_err(|why| {
        tracing::warn!(target: "security", peer = %here.client, user = %principal.name(), project = %project.name, reason = "unreadable_body", "{why}");
        HttpError::UnreadableBody(why)
    })?;
    if answer && let Some(p) = audit {
        // Noted first: a refused answer is recorded with what it said.
        p.answer = crate::http::audit::permission_answer(json.value());
    }
    let mut bytes = bytes;
    if let Some((root, rule)) = pin {
        Box::pin(pinned(here, principal.name(), endpoint, target, &json, rule, root)).await?;
        // The folder a route reads only from its body, placed when the client left it out: the
        // upstream then reads the gateway's own serialization of what was judged.
        if let Some(v) = crate::policy::pin::placed(&json, rule, root).map_err(HttpError::Forbidden)? {
            bytes = Bytes::from(serde_json::to_vec(&v).map_err(|e| HttpError::BadRequest(e.to_string()))?);
        }
    }
    Box::pin(under_policy(here, target, principal.asker(), json.value())).await?;
    Ok(Checked::Whole(bytes))
}

/// A body that sets a session's permission rules, read only while a policy could apply: a
/// gateway without policy sessions streams it as before.
fn sets_rules_under_a_policy(here: super::Here<'_>, target: &Target, asker: Asker<'_>) -> bool {
    let Asker::Client(own) = asker else {
        return false;
    };
    target.route.is_some_and(crate::policy::permission::sets_session_rules)
        && (own.is_some() || here.gw.inbox.any_session_policy())
}

/// A client's permission answer or session rules, judged by the session's permission policy
/// (`policy_check.rs`). The gateway's own acts are its policy's: not judged here.
async fn under_policy(
    here: super::Here<'_>,
    target: &Target,
    asker: Asker<'_>,
    body: &serde_json::Value,
) -> Result<(), HttpError> {
    let (Some(route), Asker::Client(own)) = (target.route, asker) else {
        return Ok(());
    };
    let project = &target.project.name;
    if route.audit == Some(AuditKind::PermissionAnswer) {
        let id = crate::policy::plan::last_param(route.pattern, &target.upstream_path);
        return super::policy_check::answer(here.gw, project, id, own, body).await;
    }
    if crate::policy::permission::sets_session_rules(route) && (own.is_some() || here.gw.inbox.any_session_policy()) {
        super::policy_check::session_rules(here.gw, project, own, target.session.as_deref(), body)?;
    }
    Ok(())
}

/// A pinned project's checked body: every directory it names inside the project, no file of the
/// gateway's own, and (on a server other gateway users share) only sessions of this user's.
async fn pinned(
    here: super::Here<'_>,
    user: &str,
    endpoint: &Endpoint,
    target: &Target,
    body: &crate::policy::json_body::Body,
    rule: &crate::policy::plan::BodyRule,
    root: &std::path::Path,
) -> Result<(), HttpError> {
    let (gw, client, project) = (here.gw, here.client, &*target.project);
    let names = crate::policy::pin::check_body(body, rule, root).map_err(|why| {
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
