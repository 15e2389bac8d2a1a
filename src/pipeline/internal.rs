//! Requests the gateway makes on a user's behalf: the control room's answers, aborts and new
//! sessions. Each is an ordinary OpenCode request (`POST /permission/{id}/reply`, …) built for
//! the project and sent through the proxy's own phases after identification
//! ([`super::proceed`]): the route table and the user's role decide, the project's
//! directory is pinned, credentials are the gateway's, answers are redacted, and the request
//! audit records it once, noting where it came from. There is no second road to the upstream
//! with rules of its own. The page that makes the request has already passed its cross-site rule.
//!
//! The inbox, which builds these requests, knows this road only as its [`Road`]; the pipeline
//! hands a page the maker of roads ([`on_behalf`], in `web::Ctx`).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;

use super::request::Reading;
use super::{ConnInfo, Front};
use super::{Here, OriginRule, Proceeding, proceed};
use crate::audit::Who;
use crate::auth::users::UserState;
use crate::gateway::Gateway;
use crate::http::body::{AccessRecord, RequestBody};
use crate::http::error::HttpError;
use crate::inbox::{Refusal, Road, Trip};

/// At most this much of an answer is read back.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// A user, as the page that acts for them knows them.
pub(crate) struct OnBehalf<'a> {
    pub gw: &'a Arc<Gateway>,
    pub user: Arc<UserState>,
    pub who: Who,
    /// The browser's address (for the audit trail and the user's request budget).
    pub client: IpAddr,
    /// Where the act came from, for the audit trail (`control_room`).
    pub from: &'static str,
}

impl OnBehalf<'_> {
    /// The access record of a request made for this user (its line is written when the answer
    /// has been read, like a client's).
    fn record(&self, method: Method, project: &str, path: &str) -> AccessRecord {
        let mut r = AccessRecord::new(self.client, "internal", method, || format!("/p/{project}{path}"));
        r.user = Some(self.user.name.clone());
        r
    }

    /// The books once the status is known, as `pipeline::handle` keeps them for a client: the
    /// status and reason, the project's counters, the audit record (noting where it came from).
    async fn finish(
        &self,
        record: &mut AccessRecord,
        result: &Result<http::Response<crate::http::body::ProxyBody>, HttpError>,
        project: &str,
    ) -> StatusCode {
        let status = match result {
            Ok(r) => r.status(),
            Err(e) => StatusCode::from(e),
        };
        record.status = status.as_u16();
        if let Err(e) = result {
            record.reason = Some(e.code());
            tracing::warn!(target: "security", peer = %self.client, user = %self.user.name, project, from = self.from, reason = e.code(), "an act on a user's behalf refused: {e}");
        }
        record
            .project
            .as_ref()
            .map_or(&self.gw.metrics.unrouted, |p| &p.metrics)
            .count(record.class, record.status);
        if let Some(pending) = record.audit.take()
            && let Some(r) = pending.finish(record.status)
        {
            self.gw
                .audit
                .record_written(r.field("from", self.from), super::AUDIT_WAIT)
                .await;
        }
        status
    }

    /// `method path` in `project` with an optional JSON body, as this user: the status and the
    /// start of the answer, or the gateway's refusal.
    pub(crate) async fn call(
        &self,
        method: Method,
        project: &str,
        path: &str,
        json: Option<serde_json::Value>,
    ) -> Result<(StatusCode, Bytes), HttpError> {
        let gw = self.gw;
        // Only a project's name may shape the path: anything else (`alpha/..`, `a?b`) would
        // make another request than the one asked for.
        if !crate::config::validate::valid_project_name(project) {
            return Err(HttpError::UnknownProject(project.chars().take(64).collect()));
        }
        let state = gw.state();
        let body = json.map(|j| Bytes::from(j.to_string())).unwrap_or_default();
        let req = Request::builder()
            .method(method.clone())
            .uri(format!("/p/{project}{path}"))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, body.len())
            .header(header::USER_AGENT, crate::inbox::INBOX_AGENT)
            .body(())
            .map_err(|e| HttpError::BadRequest(format!("cannot build the request: {e}")))?;
        let (parts, ()) = req.into_parts();
        let conn = ConnInfo::new(SocketAddr::new(self.client, 0), Front::Tls { bound: None });
        let mut record = self.record(method, project, path);
        let on = Proceeding {
            here: Here {
                gw,
                state: &state,
                conn: &conn,
                client: self.client,
            },
            user: &self.user,
            who: self.who.clone(),
            origin: OriginRule::CheckedByPage,
        };
        let result = match super::request::read(&state, &conn, parts, gw.limits.max_uri_bytes)? {
            Reading::Project {
                mut request,
                target: Ok(target),
            } => proceed(&on, &mut request, target, || RequestBody::Whole(body), &mut record).await,
            Reading::Project { target: Err(e), .. } => Err(e),
            // The path is `/p/<project>/…` (a valid name): only OpenCode's routes answer there.
            Reading::Page { .. } => Err(HttpError::NotFound(format!("{path} is not an OpenCode request"))),
        };
        let status = self.finish(&mut record, &result, project).await;
        let response = result?;
        let answer = http_body_util::Limited::new(response.into_body().metered(record), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        Ok((status, answer))
    }
}

impl Road for OnBehalf<'_> {
    fn user(&self) -> &str {
        &self.user.name
    }

    fn call<'a>(
        &'a self,
        method: Method,
        project: &'a str,
        path: &'a str,
        json: Option<serde_json::Value>,
    ) -> Trip<'a> {
        Box::pin(async move {
            OnBehalf::call(self, method, project, path, json)
                .await
                .map_err(|e| Refusal {
                    status: StatusCode::from(&e).as_u16(),
                    error: Box::new(e),
                })
        })
    }
}

/// The road for requests on `user`'s behalf (`web::Ctx::on_behalf`): through the proxy's own
/// phases, as [`OnBehalf`].
pub(crate) fn on_behalf<'g>(
    gw: &'g Arc<Gateway>,
    user: Arc<UserState>,
    who: Who,
    client: IpAddr,
    from: &'static str,
) -> Box<dyn Road + 'g> {
    Box::new(OnBehalf {
        gw,
        user,
        who,
        client,
        from,
    })
}
