//! A shared upstream's session scope (a decision of the plan, and of the forward for a session a
//! body names): session IDs are global on one server, so a project pinned to a directory may use
//! only the sessions that live in it. Its own file so that both phases read it without one calling
//! the other.

use std::path::{Path, PathBuf};

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
        None => match session_directory(gw, project, endpoint, id)
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

/// The folder of one session, asked of the upstream in its own dialect (1.x's until its version is
/// read); `None` when it does not know the session.
pub(crate) async fn session_directory(
    gw: &Gateway,
    project: &ProjectState,
    endpoint: &Endpoint,
    id: &str,
) -> Result<Option<PathBuf>, String> {
    let dialect = project.api().as_ref().map_or(
        &crate::policy::dialect::V1 as &dyn crate::policy::dialect::Dialect,
        |a| a.dialect,
    );
    // The ID is decoded; the lookup spells it the way the forwarded request will.
    let req = endpoint.get(&dialect.session_path(id))?;
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
    Ok(dialect.session_directory(&v).map(PathBuf::from))
}

/// At most this many sessions of one active-sessions answer are looked up; the others whose folder
/// is not known yet are left out (fail closed).
const ACTIVE_LOOKUPS: usize = 32;

/// 2.x's `GET /api/session/active` on a shared server (`{"data":{"<session id>":{…}}}`, the
/// running sessions of every folder): only the project's own are kept, each session's folder
/// known from the cache or asked of the server. `None`: not the JSON the gateway can scope.
pub(crate) async fn scope_active(
    gw: &Gateway,
    project: &ProjectState,
    endpoint: &Endpoint,
    body: &[u8],
    root: &Path,
) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let data = v.get_mut("data")?.as_object_mut()?;
    let mut lookups = 0;
    let mut kept = Vec::new();
    for id in data.keys() {
        let dir = match project.sessions.get(id) {
            Some(d) => Some(d),
            None if lookups < ACTIVE_LOOKUPS => {
                lookups += 1;
                let found = session_directory(gw, project, endpoint, id).await.ok().flatten();
                if let Some(d) = &found {
                    project.sessions.insert(id, d.clone());
                }
                found
            }
            None => None,
        };
        if dir.is_some_and(|d| d.starts_with(root)) {
            kept.push(id.clone());
        }
    }
    data.retain(|id, _| kept.contains(id));
    serde_json::to_vec(&v).ok()
}
