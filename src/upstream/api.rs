//! Which OpenCode an upstream is: its dialect and version (each dialect's health endpoint,
//! `GET /global/health` for 1.x, `GET /api/info` for 2.x) and its API document (`GET /doc`,
//! `GET /openapi.json`), read with the gateway's credential whenever the upstream becomes ready (a spawned
//! server after every start, an external one at start and on reload). What the document adds to
//! the table is decided in [`crate::policy::drift`]; here its answers are read (`Endpoint::read_api` asks), logged and reported.

use std::time::Duration;

use crate::policy::dialect::Dialect;
use crate::policy::drift::{RouteRoles, UpstreamApi};
use crate::policy::routes::TABLE_VERSION;

/// The User-Agent of the gateway's own health checks, so upstream logs can tell them apart.
pub const HEALTH_AGENT: &str = "opencode-gateway-health";

/// OpenCode 1.18.33's document is about 400 KB.
pub(crate) const DOC_MAX: usize = 16 << 20;
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The upstream's API document, read against its dialect's table (read by `Endpoint::read_api`,
/// once the dialect's health endpoint named the version). An answer that is not JSON (OpenCode
/// answers unknown paths with its web UI's `index.html`) is an error, never a route.
pub(crate) fn from_answers(dialect: &'static dyn Dialect, version: String, doc: &[u8]) -> Result<UpstreamApi, String> {
    let doc: serde_json::Value = serde_json::from_slice(doc)
        .map_err(|e| format!("GET {} is not an OpenAPI document: {e}", dialect.doc_path()))?;
    UpstreamApi::from_doc(dialect, Some(version), &doc)
}

/// The warning for a server whose version and document could not be read.
pub(crate) fn unreadable(project: &str, upstream: &str, why: &str) {
    tracing::warn!(project, upstream, reason = %why,
        "could not read the upstream's version and API document; only the gateway's route table (OpenCode {TABLE_VERSION}) applies");
}

/// Once per upstream (re)start: a version other than the table's, and the routes that got a default.
pub(crate) fn log(project: &str, api: &UpstreamApi) {
    if !api.drifted() {
        tracing::info!(
            project,
            family = api.dialect.family(),
            version = api.version(),
            routes = api.listed,
            "upstream OpenCode matches the gateway's route table"
        );
        return;
    }
    let defaulted = api.defaulted_lines(&RouteRoles::EMPTY).join(", ");
    tracing::warn!(
        project,
        version = api.version(),
        table_version = api.table().version,
        defaulted = %if defaulted.is_empty() { "none".to_string() } else { defaulted },
        "upstream OpenCode {} is not the version the gateway's route table was read from ({}); routes the table does not know get a safe default role (operator, admin under admin-only roots), never viewer or approver; grant one otherwise with [[route_role]]",
        api.version(),
        api.table().version
    );
}

/// The status report's `api` entry for one project: version, table version, defaulted routes
/// (with what `[[route_role]]` makes of them); `null` while unknown.
pub(crate) fn report(api: Option<&UpstreamApi>, configured: &RouteRoles) -> serde_json::Value {
    match api {
        Some(api) => api.report(configured),
        None => {
            serde_json::json!({ "version": null, "table_version": TABLE_VERSION, "note": "not read yet: the route table alone applies" })
        }
    }
}
