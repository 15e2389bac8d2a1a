//! Admit: may this user do this here, now (role, origin, limits, size, the gateway's files).

use http::{Method, header, request::Parts};

use super::request::Target;
use super::{ConnInfo, Front, OriginRule, Proceeding, own_files};
use crate::config::Role;
use crate::gateway::state::State;
use crate::http::body::StreamHold;
use crate::http::error::HttpError;
use crate::metrics::{Refusal, StreamKind};
use crate::policy::plan::Treatment;

// Built at compile time: a `&str` name is parsed and validated on every lookup.
const SEC_FETCH_SITE: http::HeaderName = http::HeaderName::from_static("sec-fetch-site");

pub(super) struct Admitted {
    pub(super) role: Role,
    pub(super) stream_slot: Option<StreamHold>,
}

/// May this user do this here, now? The role the route needs, the origin rule, the request and
/// stream budgets, the declared size, the gateway's own files, the workspace guard.
pub(super) fn admit(on: &Proceeding<'_>, parts: &Parts, target: &Target, upgrade: bool) -> Result<Admitted, HttpError> {
    let (gw, user, project) = (on.gw, on.user, &target.project);
    let limits = &gw.limits;
    let role = user
        .grants
        .role_in(&project.name)
        .ok_or_else(|| HttpError::NotGranted {
            user: user.name.to_string(),
            project: project.name.to_string(),
        })?;
    crate::policy::authz::check_target(role, &parts.method, target.class, target.label(), target.note())?;
    match on.origin {
        OriginRule::Cookie => {
            // The browser's cookie authenticates this: the stricter rule, and a WebSocket must
            // say the project front's exact origin.
            let own =
                crate::policy::origin::normalize(&format!("https://{}", on.host.unwrap_or(""))).unwrap_or_default();
            crate::web::csrf::check(&parts.method, upgrade, &parts.headers, &own, &on.state.settings.server.allowed_origins)
                .map_err(|r| {
                    tracing::warn!(target: "security", peer = %on.client, user = %user.name, project = %project.name, reason = r.code(), "a cross-origin request with a project host's cookie refused");
                    HttpError::Forbidden(r.message().into())
                })?;
        }
        OriginRule::Credentials => {
            check_origin(on.state, on.conn, parts, on.host, upgrade, &user.name, &project.name)?;
        }
        OriginRule::CheckedByPage => {}
    }
    let treatment = target.treatment();
    if upgrade && treatment != Treatment::TerminalConnect {
        return Err(HttpError::BadRequest(format!(
            "{} {} does not switch protocols; only terminal connections do",
            parts.method,
            target.label()
        )));
    }
    gw.auth.limiters.request(&user.name).map_err(|d| {
        gw.metrics.refused(Refusal::Requests);
        HttpError::RateLimited {
            retry_after: d.retry_after,
        }
    })?;
    let stream_slot = treatment.long_lived().then(|| stream_hold(on, treatment)).transpose()?;
    if let Some(len) = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        && len > limits.max_body_bytes
    {
        return Err(HttpError::PayloadTooLarge {
            max: limits.max_body_bytes,
        });
    }
    own_files::check_request(gw, on.client, user, target, parts)?;
    if project.config.directory.is_some() && target.route.is_some_and(|r| r.workspace_switch) {
        return Err(HttpError::Forbidden(format!(
            "{} {} would leave project {}'s directory; workspaces are not available through the gateway",
            parts.method,
            target.label(),
            project.name
        )));
    }
    Ok(Admitted { role, stream_slot })
}

/// A long-lived request's hold: the user's stream slot (an SSH channel already holds one for
/// everything it carries) and its count in the open-streams gauge.
pub(super) fn stream_hold(on: &Proceeding<'_>, treatment: Treatment) -> Result<StreamHold, HttpError> {
    let gw = on.gw;
    let slot = if matches!(on.conn.front, Front::Ssh { .. }) {
        None
    } else {
        Some(
            gw.doors
                .streams
                .try_acquire(on.user.name.clone(), gw.limits.max_streams_per_user)
                .ok_or_else(|| {
                    gw.metrics.refused(Refusal::Streams);
                    HttpError::TooManyStreams {
                        max: gw.limits.max_streams_per_user,
                    }
                })?,
        )
    };
    let kind = if treatment == Treatment::TerminalConnect {
        StreamKind::Terminal
    } else {
        StreamKind::Events
    };
    Ok(StreamHold {
        _slot: slot,
        _gauge: gw.metrics.stream_open(kind),
    })
}

/// A browser page from elsewhere may not write or open terminals with the user's credentials
/// (browsers attach cached Basic credentials to any request to the gateway's origin). Without an
/// `Origin`, a browser's own word that the request is cross-site (`Sec-Fetch-Site`) is enough.
pub(super) fn check_origin(
    state: &State,
    conn: &ConnInfo,
    parts: &Parts,
    host: Option<&str>,
    upgrade: bool,
    user: &str,
    project: &str,
) -> Result<(), HttpError> {
    let unsafe_method = !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !unsafe_method && !upgrade {
        return Ok(());
    }
    let Some(origin) = parts.headers.get(header::ORIGIN) else {
        if parts
            .headers
            .get(SEC_FETCH_SITE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
        {
            tracing::warn!(target: "security", peer = %conn.peer.ip(), user, project, reason = "cross_site_fetch", "a cross-site request without Origin refused");
            return Err(HttpError::Forbidden(
                "a cross-site request (Sec-Fetch-Site: cross-site) may not write or open terminals".into(),
            ));
        }
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("null");
    if crate::policy::origin::allowed(origin, conn.scheme(), host, &state.settings.server.allowed_origins) {
        return Ok(());
    }
    tracing::warn!(target: "security", peer = %conn.peer.ip(), user, project, reason = "foreign_origin", origin, "request from a foreign origin refused");
    Err(HttpError::Forbidden(format!(
        "requests from the origin {origin} are not allowed (add it to server.allowed_origins to allow it)"
    )))
}
