//! Requests the gateway makes itself: the control room's answers, aborts, resumes and new
//! sessions on a user's behalf, and the gateway's own acts (its guard's stops, its control
//! socket's answers). Each is an ordinary OpenCode request (`POST /permission/{id}/reply`, …)
//! built for the project and sent through the proxy's own phases after identification
//! ([`super::proceed`]) as its principal: the route table and the user's role, or the gateway's
//! grant (`policy/grants.rs`), decide; the budgets judge; the project's directory is pinned,
//! credentials are the gateway's, answers are redacted, and the request audit records it once,
//! noting where it came from. There is no second road to the upstream with rules of its own. The
//! page that makes a request has already passed its cross-site rule.
//!
//! The inbox, which builds these requests, knows this road only as its [`Road`]; the pipeline
//! hands a page the maker of roads ([`on_behalf`], in `web::Ctx`), the guard and the control
//! socket theirs ([`gateway_road`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;

use super::request::Reading;
use super::{ConnInfo, Front};
use super::{Here, OriginRule, Principal, Proceeding, proceed};
use crate::audit::Who;
use crate::auth::users::UserState;
use crate::gateway::Gateway;
use crate::http::body::{AccessRecord, RequestBody};
use crate::http::error::HttpError;
use crate::inbox::{Call, Refusal, Road, Trip};
use crate::policy::grants::{Grant, Holder};

/// At most this much of an answer is read back.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Who a road's requests are made for (owned: a road outlives the request that made it).
enum Actor {
    /// A user, as the page that acts for them knows them.
    User(Arc<UserState>),
    /// The gateway itself: the grant it stands on (the control socket's), or only those a call
    /// names (the guard's stops), each held by `holder`.
    Gateway {
        holder: Holder,
        standing: Option<&'static Grant>,
    },
}

/// A road to the projects' servers for one principal.
pub(crate) struct OnBehalf {
    /// Weak: the guard's road lives in a task of the gateway's own.
    gw: Weak<Gateway>,
    actor: Actor,
    who: Who,
    /// The browser's address (for the audit trail and the user's request budget); loopback for
    /// the gateway's own acts.
    client: IpAddr,
    /// Where the act came from, for the audit trail (`control_room`, `guard`, `control_socket`).
    from: &'static str,
}

impl OnBehalf {
    fn name(&self) -> &str {
        match &self.actor {
            Actor::User(user) => &user.name,
            Actor::Gateway { holder, .. } => holder.name(),
        }
    }

    /// The principal of `call`: the user (with the named act's grant, if any), or the gateway
    /// under the call's grant or its standing one, when its holder holds it.
    fn principal<'u>(&'u self, grant: Option<&'static Grant>) -> Result<Principal<'u>, HttpError> {
        match &self.actor {
            Actor::User(user) => Ok(Principal::User { user, grant }),
            Actor::Gateway { holder, standing } => match grant.or(*standing) {
                Some(g) if g.holder == *holder => Ok(Principal::Gateway(g)),
                _ => Err(HttpError::Forbidden(format!(
                    "the gateway's {} acts only under its own grants",
                    holder.name()
                ))),
            },
        }
    }

    /// The access record of a request made on this road (its line is written when the answer has
    /// been read, like a client's).
    fn record(&self, method: Method, project: &str, path: &str) -> AccessRecord {
        let mut r = AccessRecord::new(self.client, "internal", method, || format!("/p/{project}{path}"));
        r.user = Some(self.name().into());
        r
    }

    /// The books once the status is known, as `pipeline::handle` keeps them for a client: the
    /// status and reason, the project's counters, the audit record (noting where it came from).
    async fn finish(
        &self,
        gw: &Gateway,
        record: &mut AccessRecord,
        result: &Result<http::Response<crate::http::body::ProxyBody>, HttpError>,
        call: &Call<'_>,
    ) -> StatusCode {
        let project = call.project;
        let status = match result {
            Ok(r) => r.status(),
            Err(e) => StatusCode::from(e),
        };
        if let Err(e) = result {
            record.reason = Some(e.code());
            tracing::warn!(target: "security", peer = %self.client, user = %self.name(), project, from = self.from, reason = e.code(), "an act made through the gateway refused: {e}");
        }
        record.answered(status.as_u16(), &gw.metrics);
        if let Some(pending) = record.audit.take()
            && let Some(mut r) = pending.finish(record.status)
        {
            r = r.field("from", self.from);
            for (k, v) in &call.note {
                r = r.field(k, v.as_str());
            }
            gw.audit.record_written(r, super::AUDIT_WAIT).await;
        }
        status
    }

    /// `call` as this road's principal: the status and the start of the answer, or the
    /// gateway's refusal.
    pub(crate) async fn call(&self, call: &Call<'_>) -> Result<(StatusCode, Bytes), HttpError> {
        let gw = self.gw.upgrade().ok_or(HttpError::ShuttingDown)?;
        let (project, path) = (call.project, call.path.as_str());
        // Only a project's name may shape the path: anything else (`alpha/..`, `a?b`) would
        // make another request than the one asked for.
        if !crate::config::validate::valid_project_name(project) {
            return Err(HttpError::UnknownProject(project.chars().take(64).collect()));
        }
        let principal = self.principal(call.grant)?;
        let state = gw.state();
        // A grant's fixed body, whatever the caller asked ("Resume" sends only "continue").
        let body = match principal.grant().and_then(|g| g.body) {
            Some(fixed) => Bytes::from_static(fixed.as_bytes()),
            None => call
                .json
                .as_ref()
                .map(|j| Bytes::from(j.to_string()))
                .unwrap_or_default(),
        };
        let req = Request::builder()
            .method(call.method.clone())
            .uri(format!("/p/{project}{path}"))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, body.len())
            .header(header::USER_AGENT, crate::inbox::INBOX_AGENT)
            .body(())
            .map_err(|e| HttpError::BadRequest(format!("cannot build the request: {e}")))?;
        let (parts, ()) = req.into_parts();
        let conn = ConnInfo::new(SocketAddr::new(self.client, 0), Front::Tls { bound: None });
        let mut record = self.record(call.method.clone(), project, path);
        let on = Proceeding {
            here: Here {
                gw: &gw,
                state: &state,
                conn: &conn,
                client: self.client,
            },
            principal,
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
        let status = self.finish(&gw, &mut record, &result, call).await;
        let response = result?;
        let answer = http_body_util::Limited::new(response.into_body().metered(record), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        Ok((status, answer))
    }
}

impl Road for OnBehalf {
    fn name(&self) -> &str {
        OnBehalf::name(self)
    }

    fn call<'a>(&'a self, call: Call<'a>) -> Trip<'a> {
        Box::pin(async move {
            OnBehalf::call(self, &call).await.map_err(|e| Refusal {
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
        gw: Arc::downgrade(gw),
        actor: Actor::User(user),
        who,
        client,
        from,
    })
}

/// The gateway's own road for `holder` (its guard, its control socket), standing on `standing`
/// when given (the control socket's answers) or only on the grant each call names (the guard's
/// stops). Its acts come from loopback and are audited `via: gateway`.
pub(crate) fn gateway_road(gw: &Arc<Gateway>, holder: Holder, standing: Option<&'static Grant>) -> Box<dyn Road> {
    let from = match holder {
        Holder::ControlSocket => "control_socket",
        Holder::Guard | Holder::Users => "guard",
    };
    Box::new(OnBehalf {
        gw: Arc::downgrade(gw),
        actor: Actor::Gateway { holder, standing },
        who: Who {
            via: crate::audit::Via::Gateway,
            id: None,
        },
        client: IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        from,
    })
}
