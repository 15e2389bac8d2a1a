//! Every way a request can fail, its status (one map, tested), and the JSON a person can act on.
//! Messages never contain a secret: they are built from names, not from credentials.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use super::body::ProxyBody;

pub(crate) const REALM: &str = "Basic realm=\"opencode-gateway\", charset=\"UTF-8\"";

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("authentication required: log in with your gateway user name and password")]
    Unauthenticated,
    #[error("wrong user name or password")]
    BadCredentials,
    #[error("{0}")]
    MalformedCredentials(String),
    #[error("the API token is wrong, expired or revoked")]
    BadToken,
    /// The state database could not be asked: not available, or did not answer in time.
    #[error("{0}; try again")]
    StateUnavailable(crate::store::Unavailable),
    #[error("too many login attempts ({reason} limit); try again in {} s", retry_secs(*retry_after))]
    LoginLimited {
        retry_after: Duration,
        reason: &'static str,
    },
    #[error("too many requests; try again in {} s", retry_secs(*retry_after))]
    RateLimited { retry_after: Duration },
    #[error("too many open streams for this user (at most {max}); close one and retry")]
    TooManyStreams { max: u32 },
    /// A budget near its end is held by another running turn (`budget/meter/turns.rs`).
    #[error("{0}")]
    BudgetTurnRunning(String),
    /// A prompt past the fleet's caps, refused (`over_cap = "refuse"`) or waited out.
    #[error("{0}")]
    OverFleetCap(String),
    #[error("no project named {0:?} on this gateway")]
    UnknownProject(String),
    #[error("this gateway serves several projects: use /p/<project>/ or <project>.<base domain>")]
    NoProject,
    #[error("user {user} has no access to project {project}")]
    NotGranted { user: String, project: String },
    #[error("{0}")]
    Forbidden(String),
    #[error("project {project}: its OpenCode server is not reachable ({reason})")]
    UpstreamUnavailable { project: String, reason: String },
    #[error("project {project}: its OpenCode server did not answer within {} s", secs.as_secs())]
    UpstreamTimeout { project: String, secs: Duration },
    #[error("project {project}: its OpenCode server is not ready ({reason})")]
    UpstreamStarting { project: String, reason: String },
    #[error(
        "project {project}: its OpenCode server refused the gateway's credential; check the project's upstream_password_env or upstream_password_file"
    )]
    UpstreamRejectedCredential { project: String },
    #[error("the request body is larger than {max} bytes")]
    PayloadTooLarge { max: u64 },
    #[error("the request body stopped arriving for {} s", secs.as_secs())]
    BodyTimeout { secs: Duration },
    #[error("the request URI is longer than {max} bytes")]
    UriTooLong { max: usize },
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}: the gateway cannot tell how OpenCode would read it")]
    BadPath(crate::policy::canonical::PathRefusal),
    #[error("project {0} no longer exists (removed on reload); this port closes when the gateway restarts")]
    ProjectGone(String),
    #[error("the request body is malformed ({0})")]
    MalformedBody(String),
    /// A body a decision reads that the one reading (`policy/json_body.rs`) refuses: the gateway
    /// cannot read it the way OpenCode would.
    #[error("{0}")]
    UnreadableBody(String),
    #[error("the gateway is shutting down")]
    ShuttingDown,
    #[error("{0}")]
    NotFound(String),
    #[error("this method is not allowed here")]
    MethodNotAllowed,
    /// A browser without a login for a project host: sent to the login host's handoff, with a
    /// state cookie on this host that the handoff's ticket is bound to.
    #[error("log in first")]
    LoginRedirect {
        location: String,
        state: String,
        /// The handoff state cookie's name on this front (`web/front.rs`).
        cookie: String,
    },
}

fn retry_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// A refused credential: the same errors, and so the same status, body and headers (`WWW-Authenticate`,
/// `Retry-After`), as every other way a request fails.
impl HttpError {
    /// A project's upstream could not answer, and why (a 502 that names the project).
    pub(crate) fn unavailable(project: &str, reason: impl Into<String>) -> HttpError {
        HttpError::UpstreamUnavailable {
            project: project.to_string(),
            reason: reason.into(),
        }
    }
}

impl From<crate::auth::AuthError> for HttpError {
    fn from(e: crate::auth::AuthError) -> HttpError {
        use crate::auth::AuthError;
        match e {
            AuthError::BadCredentials => HttpError::BadCredentials,
            AuthError::BadToken => HttpError::BadToken,
            AuthError::LoginLimited { retry_after, reason } => HttpError::LoginLimited { retry_after, reason },
            AuthError::StateUnavailable(why) => HttpError::StateUnavailable(why),
        }
    }
}

/// A route the role may not use (403), or a path the gateway cannot read as OpenCode would (400).
impl From<crate::policy::authz::Refused> for HttpError {
    fn from(e: crate::policy::authz::Refused) -> HttpError {
        use crate::policy::authz::Refused;
        match e {
            Refused::Forbidden(why) => HttpError::Forbidden(why),
            Refused::BadPath(refusal) => HttpError::BadPath(refusal),
        }
    }
}

impl From<&HttpError> for StatusCode {
    fn from(e: &HttpError) -> StatusCode {
        use HttpError::*;
        match e {
            Unauthenticated | BadCredentials | BadToken | MalformedCredentials(_) => StatusCode::UNAUTHORIZED,
            LoginLimited { .. }
            | RateLimited { .. }
            | TooManyStreams { .. }
            | BudgetTurnRunning(_)
            | OverFleetCap(_) => StatusCode::TOO_MANY_REQUESTS,
            UnknownProject(_) | NoProject => StatusCode::NOT_FOUND,
            NotGranted { .. } | Forbidden(_) => StatusCode::FORBIDDEN,
            UpstreamUnavailable { .. } | UpstreamRejectedCredential { .. } => StatusCode::BAD_GATEWAY,
            UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            UpstreamStarting { .. } | StateUnavailable(_) | ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            BadRequest(_) | BadPath(_) | MalformedBody(_) | UnreadableBody(_) => StatusCode::BAD_REQUEST,
            ProjectGone(_) | NotFound(_) => StatusCode::NOT_FOUND,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            LoginRedirect { .. } => StatusCode::SEE_OTHER,
        }
    }
}

impl HttpError {
    /// A stable, short name for logs and the JSON `error` field.
    pub(crate) fn code(&self) -> &'static str {
        use HttpError::*;
        match self {
            Unauthenticated => "unauthenticated",
            BadCredentials => "bad_credentials",
            MalformedCredentials(_) => "malformed_credentials",
            BadToken => "bad_token",
            StateUnavailable(_) => "state_unavailable",
            LoginLimited { .. } => "login_limited",
            RateLimited { .. } => "rate_limited",
            TooManyStreams { .. } => "too_many_streams",
            BudgetTurnRunning(_) => "budget_turn_running",
            OverFleetCap(_) => "over_fleet_cap",
            UnknownProject(_) => "unknown_project",
            NoProject => "no_project",
            NotGranted { .. } => "not_granted",
            Forbidden(_) => "forbidden",
            UpstreamUnavailable { .. } => "upstream_unavailable",
            UpstreamTimeout { .. } => "upstream_timeout",
            UpstreamStarting { .. } => "upstream_starting",
            UpstreamRejectedCredential { .. } => "upstream_rejected_credential",
            PayloadTooLarge { .. } => "payload_too_large",
            BodyTimeout { .. } => "body_timeout",
            UriTooLong { .. } => "uri_too_long",
            BadRequest(_) => "bad_request",
            BadPath(refusal) => refusal.code(),
            ProjectGone(_) => "project_gone",
            MalformedBody(_) => "malformed_body",
            UnreadableBody(_) => "unreadable_body",
            ShuttingDown => "shutting_down",
            NotFound(_) => "not_found",
            MethodNotAllowed => "method_not_allowed",
            LoginRedirect { .. } => "login_redirect",
        }
    }

    fn project(&self) -> Option<&str> {
        use HttpError::*;
        match self {
            UpstreamUnavailable { project, .. }
            | UpstreamTimeout { project, .. }
            | UpstreamStarting { project, .. }
            | UpstreamRejectedCredential { project }
            | NotGranted { project, .. } => Some(project),
            UnknownProject(p) | ProjectGone(p) => Some(p),
            _ => None,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            HttpError::LoginLimited { retry_after, .. } | HttpError::RateLimited { retry_after } => Some(*retry_after),
            HttpError::TooManyStreams { .. } => Some(Duration::from_secs(1)),
            HttpError::BudgetTurnRunning(_) => Some(Duration::from_secs(5)),
            HttpError::OverFleetCap(_) => Some(Duration::from_secs(30)),
            _ => None,
        }
    }

    pub(crate) fn into_response(self) -> Response<ProxyBody> {
        let status = StatusCode::from(&self);
        let mut body = serde_json::json!({ "error": self.code(), "message": self.to_string() });
        if let Some(p) = self.project() {
            body["project"] = p.into();
        }
        let mut resp = Response::new(ProxyBody::full(Bytes::from(body.to_string())));
        *resp.status_mut() = status;
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let HttpError::LoginRedirect {
            location,
            state,
            cookie,
        } = &self
            && let Ok(v) = HeaderValue::from_str(location)
        {
            h.insert(header::LOCATION, v);
            h.insert(
                header::SET_COOKIE,
                crate::http::cookie::set_handoff_state(cookie, state),
            );
            h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
        }
        if status == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(REALM));
        }
        if let Some(after) = self.retry_after() {
            h.insert(header::RETRY_AFTER, HeaderValue::from(retry_secs(after).max(1)));
        }
        resp
    }
}

impl From<crate::gateway::state::NotStarted> for HttpError {
    fn from(e: crate::gateway::state::NotStarted) -> HttpError {
        HttpError::UpstreamStarting {
            project: e.project,
            reason: e.reason,
        }
    }
}

impl From<crate::store::Unavailable> for HttpError {
    fn from(why: crate::store::Unavailable) -> HttpError {
        HttpError::StateUnavailable(why)
    }
}

/// A store call that failed (`store::blocking` logged its own words).
impl From<crate::store::StoreError> for HttpError {
    fn from(e: crate::store::StoreError) -> HttpError {
        HttpError::StateUnavailable(e.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statuses_are(cases: Vec<(HttpError, u16)>) {
        for (e, status) in cases {
            assert_eq!(StatusCode::from(&e).as_u16(), status, "{e:?}");
        }
    }

    /// What the gateway refuses: the client's request, credential, grant or rate.
    #[test]
    fn each_refusal_has_its_status() {
        statuses_are(vec![
            (HttpError::NotFound("x".into()), 404),
            (HttpError::MethodNotAllowed, 405),
            (
                HttpError::LoginRedirect {
                    location: "/login".into(),
                    state: "s".into(),
                    cookie: crate::http::cookie::HANDOFF_STATE.into(),
                },
                303,
            ),
            (HttpError::Unauthenticated, 401),
            (HttpError::BadCredentials, 401),
            (HttpError::BadToken, 401),
            (
                HttpError::LoginLimited {
                    retry_after: Duration::from_millis(1500),
                    reason: "address",
                },
                429,
            ),
            (
                HttpError::RateLimited {
                    retry_after: Duration::from_secs(1),
                },
                429,
            ),
            (HttpError::TooManyStreams { max: 1 }, 429),
            (HttpError::BudgetTurnRunning(String::new()), 429),
            (HttpError::UnknownProject("x".into()), 404),
            (HttpError::NoProject, 404),
            (
                HttpError::NotGranted {
                    user: "a".into(),
                    project: "b".into(),
                },
                403,
            ),
            (HttpError::Forbidden("no".into()), 403),
            (HttpError::PayloadTooLarge { max: 1 }, 413),
            (HttpError::UriTooLong { max: 1 }, 414),
            (
                HttpError::BodyTimeout {
                    secs: Duration::from_secs(1),
                },
                408,
            ),
            (HttpError::BadRequest("x".into()), 400),
            (
                HttpError::BadPath(crate::policy::canonical::PathRefusal::DotSegment),
                400,
            ),
            (HttpError::MalformedBody("bad chunk".into()), 400),
            (HttpError::UnreadableBody("a lone surrogate".into()), 400),
            (HttpError::ProjectGone("web".into()), 404),
        ]);
    }

    /// What fails behind the gateway: the state database and the project's server.
    #[test]
    fn each_failure_has_its_status() {
        statuses_are(vec![
            (HttpError::StateUnavailable(crate::store::Unavailable::Failed), 503),
            (
                HttpError::StateUnavailable(crate::store::Unavailable::Unanswered(Duration::from_secs(3))),
                503,
            ),
            (
                HttpError::UpstreamUnavailable {
                    project: "web".into(),
                    reason: "connection refused".into(),
                },
                502,
            ),
            (HttpError::UpstreamRejectedCredential { project: "web".into() }, 502),
            (
                HttpError::UpstreamTimeout {
                    project: "web".into(),
                    secs: Duration::from_secs(5),
                },
                504,
            ),
            (
                HttpError::UpstreamStarting {
                    project: "web".into(),
                    reason: "starting".into(),
                },
                503,
            ),
        ]);
    }

    /// Auth and the route policy say why; this table says how that is answered, as it did when
    /// they returned these errors themselves.
    #[test]
    fn stage_refusals_become_the_same_errors() {
        use crate::auth::AuthError;
        use crate::policy::authz::Refused;
        let limited = HttpError::from(AuthError::LoginLimited {
            retry_after: Duration::from_millis(1500),
            reason: "address",
        });
        assert!(matches!(
            limited,
            HttpError::LoginLimited { retry_after, reason: "address" } if retry_after == Duration::from_millis(1500)
        ));
        assert!(matches!(
            HttpError::from(AuthError::BadCredentials),
            HttpError::BadCredentials
        ));
        assert!(matches!(HttpError::from(AuthError::BadToken), HttpError::BadToken));
        let unanswered = crate::store::Unavailable::Unanswered(Duration::from_secs(3));
        let e = HttpError::from(AuthError::StateUnavailable(unanswered));
        assert!(matches!(e, HttpError::StateUnavailable(why) if why == unanswered));
        // The reason is said; the database's own words never are.
        assert_eq!(
            e.to_string(),
            "the gateway's state database did not answer within 3 s; try again"
        );
        let failed = HttpError::from(crate::store::StoreError::Backend("db.internal: no route".into()));
        assert_eq!(
            failed.to_string(),
            "the gateway's state database is not available; try again"
        );
        assert!(matches!(
            HttpError::from(Refused::Forbidden("no".into())),
            HttpError::Forbidden(why) if why == "no"
        ));
        assert!(matches!(
            HttpError::from(Refused::BadPath(crate::policy::canonical::PathRefusal::DotSegment)),
            HttpError::BadPath(crate::policy::canonical::PathRefusal::DotSegment)
        ));
    }

    #[test]
    fn responses_carry_the_headers_clients_need() {
        let r = HttpError::Unauthenticated.into_response();
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], REALM);
        let r = HttpError::LoginLimited {
            retry_after: Duration::from_millis(1500),
            reason: "address",
        }
        .into_response();
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        let e = HttpError::UpstreamUnavailable {
            project: "web".into(),
            reason: "connection refused".into(),
        };
        assert!(e.to_string().contains("web") && e.to_string().contains("connection refused"));
    }
}
