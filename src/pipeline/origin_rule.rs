//! The older origin rule for requests that carry credentials (Basic, Bearer, a ticket): read by
//! identify (a request refused before any password work) and by admit. Its own file so that
//! neither phase calls the other.

use super::ConnInfo;
use super::request::Canonical;
use crate::gateway::state::State;
use crate::http::error::HttpError;
use crate::policy::csrf;

/// A browser page from elsewhere may not write or open terminals with the user's credentials
/// (browsers attach cached Basic credentials to any request to the gateway's origin): the older
/// origin rule ([`csrf::credentials_rule`]), refused with what to do about it.
pub(super) fn check_origin(
    state: &State,
    conn: &ConnInfo,
    request: &Canonical,
    user: &str,
    project: &str,
) -> Result<(), HttpError> {
    let browser = request.browser();
    let rule = csrf::credentials_rule(
        request.method(),
        request.upgrade.is_some(),
        browser,
        conn.scheme(),
        request.host.as_deref(),
        &state.settings.server.allowed_origins,
    );
    match rule {
        Ok(()) => Ok(()),
        Err(csrf::Refusal::ForeignOrigin) => {
            let origin = browser.origin().unwrap_or("null");
            tracing::warn!(target: "security", peer = %conn.peer.ip(), user, project, reason = "foreign_origin", origin, "request from a foreign origin refused");
            Err(HttpError::Forbidden(format!(
                "requests from the origin {origin} are not allowed (add it to server.allowed_origins to allow it)"
            )))
        }
        Err(_) => {
            tracing::warn!(target: "security", peer = %conn.peer.ip(), user, project, reason = "cross_site_fetch", "a cross-site request without Origin refused");
            Err(HttpError::Forbidden(
                "a cross-site request (Sec-Fetch-Site: cross-site) may not write or open terminals".into(),
            ))
        }
    }
}
