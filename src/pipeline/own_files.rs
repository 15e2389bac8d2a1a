//! The gateway's own files (config, keys, dev CA, state) are never served through it, even when a
//! configuration puts one where a project's server could read it: `check` and `serve` refuse such
//! a configuration, and this is the defence behind that. A file a request names (a file route's
//! path, a `path` query parameter, a directory in a checked body) that is one of them is refused
//! and logged as a security event.

use std::net::IpAddr;
use std::path::Path;

use super::request::Target;
use crate::config::protected::ProtectedPaths;
use crate::gateway::state::ProjectState;
use crate::http::error::HttpError;

/// Refuse `candidate` (relative to the project's directory, or absolute) if it is a gateway file
/// (`protected`: of the running state the request was read with).
pub(crate) fn refuse(
    protected: &ProtectedPaths,
    client: IpAddr,
    user: &str,
    project: &ProjectState,
    candidate: &str,
) -> Result<(), HttpError> {
    let path = Path::new(candidate);
    let hit = match project.config.directory.as_deref() {
        Some(root) => protected.covers_in(root, path),
        // Without a pinned directory the server's own folder is unknown: absolute paths only.
        None => path.is_absolute() && protected.covers(path),
    };
    if !hit {
        return Ok(());
    }
    tracing::warn!(target: "security", peer = %client, user = %user, project = %project.name, reason = "gateway_file", "a request named one of the gateway's own files");
    Err(HttpError::Forbidden(format!(
        "{candidate} is one of the gateway's own files and is never served"
    )))
}

/// Check every file a request names: a file route's path and its `path` query parameters.
pub(crate) fn check_request(
    protected: &ProtectedPaths,
    client: IpAddr,
    user: &str,
    target: &Target,
    query_paths: &[String],
) -> Result<(), HttpError> {
    if !target.is_api() {
        return Ok(());
    }
    if let Some(file) = &target.file {
        refuse(protected, client, user, &target.project, file)?;
    }
    for path in query_paths {
        refuse(protected, client, user, &target.project, path)?;
    }
    Ok(())
}
