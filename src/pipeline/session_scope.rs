//! A shared upstream's session scope (a decision of the plan, and of the forward for a session a
//! body names): session IDs are global on one server, so a project pinned to a directory may use
//! only the sessions that live in it. Its own file so that both phases read it without one calling
//! the other.

use std::path::PathBuf;

use http::StatusCode;
use http_body_util::{BodyExt, Limited};

use crate::gateway::Gateway;
use crate::gateway::state::ProjectState;
use crate::http::body::SMALL_BODY;
use crate::http::error::HttpError;
use crate::upstream::endpoint::Endpoint;

/// On a shared upstream, a session is usable only if it lives in the project's directory.
/// Session IDs are global, so one project's client could otherwise name another's session.
pub(crate) async fn check(
    gw: &Gateway,
    project: &ProjectState,
    endpoint: &Endpoint,
    id: &str,
) -> Result<(), HttpError> {
    let Some(root) = project.config.directory.as_deref() else {
        return Ok(());
    };
    let dir = match project.sessions.get(id) {
        Some(d) => d,
        None => match session_directory(gw, endpoint, id)
            .await
            .map_err(|e| HttpError::unavailable(&project.name, e))?
        {
            Some(d) => {
                project.sessions.insert(id, d.clone());
                d
            }
            // Unknown to the upstream: it will answer 404 itself.
            None => return Ok(()),
        },
    };
    if dir.starts_with(root) {
        Ok(())
    } else {
        tracing::warn!(target: "security", project = %project.name, reason = "session_outside_project", session = id, "a request named a session of another directory");
        Err(HttpError::Forbidden(format!(
            "session {id} does not belong to project {}",
            project.name
        )))
    }
}

async fn session_directory(gw: &Gateway, endpoint: &Endpoint, id: &str) -> Result<Option<PathBuf>, String> {
    // The ID is decoded; the lookup spells it the way the forwarded request will.
    let mut path = String::from("/session");
    crate::policy::canonical::push_segment(&mut path, id);
    let req = endpoint.get(&path)?;
    let send = endpoint.send(req, gw.limits.upstream_connect_timeout);
    let resp = tokio::time::timeout(gw.limits.upstream_connect_timeout * 2, send)
        .await
        .map_err(|_| "no answer about the session in time".to_string())?
        .map_err(|e| crate::upstream::describe(&*e))?;
    if resp.status() == StatusCode::NOT_FOUND || resp.status() == StatusCode::BAD_REQUEST {
        return Ok(None);
    }
    if !resp.status().is_success() {
        return Err(format!("the session lookup answered {}", resp.status()));
    }
    let bytes = Limited::new(resp.into_body(), SMALL_BODY)
        .collect()
        .await
        .map_err(|_| "the session lookup was cut".to_string())?
        .to_bytes();
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|_| "the session lookup is not JSON".to_string())?;
    Ok(v.get("directory").and_then(|d| d.as_str()).map(PathBuf::from))
}
