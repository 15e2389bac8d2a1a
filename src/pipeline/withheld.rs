//! What of an upstream's answer the gateway withholds, whoever asks: the secrets of OpenCode's
//! configuration (hostile round five, item 4) and any event stream it cannot scope to a pinned
//! project on a shared server (item 3). The response phase (`response.rs`) asks these first.

use std::path::Path;

use bytes::Bytes;
use http::{HeaderMap, header};

use super::request::Target;
use crate::http::body::read_whole;
use crate::http::error::HttpError;
use crate::http::source::Source;
use crate::policy::plan::Treatment;
use crate::upstream::pool::Lease;

/// An event stream on a route the gateway has no scope for (a route of a newer server, or one
/// it reads as something else), answered on a pinned project of a shared server: refused, never
/// passed whole. The streams it knows are scoped by the server itself (`/event`, to the pinned
/// folder), by session (`/api/session/{id}/event`, the plan's session scope) or here
/// (`/global/event`, `/api/event`: `policy/event_scope.rs`).
pub(super) fn unscoped_stream(
    target: &Target,
    treatment: Treatment,
    pinned: Option<&Path>,
    headers: &HeaderMap,
) -> Result<(), HttpError> {
    let scoped = matches!(
        treatment,
        Treatment::EventStream | Treatment::GlobalEvents | Treatment::FolderEvents
    );
    if pinned.is_none() || scoped || !is_event_stream(headers) {
        return Ok(());
    }
    tracing::warn!(target: "security", project = %target.project.name, reason = "unscoped_event_stream", "an event stream the gateway cannot scope to the project refused: {}", target.label());
    Err(HttpError::unavailable(
        &target.project.name,
        format!(
            "{} answered an event stream the gateway cannot scope to the project's directory",
            target.label()
        ),
    ))
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/event-stream"))
}

/// The largest configuration answer read whole (1.18.33's `/provider` is 6.4 MB).
const CONFIG_BODY: usize = 16 * 1024 * 1024;

/// An answer that carries OpenCode's configuration, read whole, with its secrets redacted
/// (`policy/config_secrets.rs`). One the gateway cannot read as JSON is refused, never passed
/// whole; so is one too large to read.
pub(super) async fn redacted(target: &Target, body: Source, lease: Option<Lease>) -> Result<Bytes, HttpError> {
    let project = &*target.project;
    let bytes = read_whole(body, CONFIG_BODY).await.ok_or_else(|| {
        HttpError::unavailable(&project.name, "the configuration answer was cut or too large to redact")
    })?;
    if let Some(lease) = lease {
        lease.release();
    }
    crate::policy::config_secrets::redacted(&bytes)
        .map(Bytes::from)
        .ok_or_else(|| {
            HttpError::unavailable(
                &project.name,
                "the configuration answer is not JSON the gateway can redact",
            )
        })
}
