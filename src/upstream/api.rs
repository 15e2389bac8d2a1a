//! Which OpenCode an upstream is: its version (`GET /global/health`) and its API document
//! (`GET /doc`), read with the gateway's credential whenever the upstream becomes ready (a spawned
//! server after every start, an external one at start and on reload). What the document adds to
//! the table is decided in [`crate::policy::drift`]; here its answers are read (`Endpoint::read_api` asks), logged and reported.

use std::time::Duration;

use crate::policy::drift::{RouteRoles, UpstreamApi};
use crate::policy::routes::TABLE_VERSION;

/// The User-Agent of the gateway's own health checks, so upstream logs can tell them apart.
pub const HEALTH_AGENT: &str = "opencode-gateway-health";

/// OpenCode 1.18.33's document is about 400 KB.
pub(crate) const DOC_MAX: usize = 16 << 20;
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The upstream's version and API document from its answers to `GET /global/health` and
/// `GET /doc` (read by `Endpoint::read_api`). An answer that is not JSON (OpenCode answers
/// unknown paths with its web UI's `index.html`) is an error, never a route.
pub(crate) fn from_answers(health: &[u8], doc: &[u8]) -> Result<UpstreamApi, String> {
    let version = serde_json::from_slice::<serde_json::Value>(health)
        .ok()
        .and_then(|v| v.get("version")?.as_str().map(str::to_string));
    let doc: serde_json::Value =
        serde_json::from_slice(doc).map_err(|e| format!("GET /doc is not an OpenAPI document: {e}"))?;
    UpstreamApi::from_doc(version, &doc)
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
        table_version = TABLE_VERSION,
        defaulted = %if defaulted.is_empty() { "none".to_string() } else { defaulted },
        "upstream OpenCode {} is not the version the gateway's route table was read from ({TABLE_VERSION}); routes the table does not know get a safe default role (operator, admin under admin-only roots), never viewer or approver; grant one otherwise with [[route_role]]",
        api.version()
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
