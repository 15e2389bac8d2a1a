//! Answering a card (or aborting a session) on the project's OpenCode server, with the gateway's
//! own credential, in the project's directory. A request someone answered first (TUI, web UI,
//! another phone) is answered 404 upstream: that is [`Outcome::AlreadyAnswered`], not an error.
//!
//! Seen on OpenCode 1.18.33: `POST /permission/{id}/reply {"reply":"once"|"always"|"reject",
//! "message"?}` → 200 `true`; `POST /question/{id}/reply {"answers":[["label",…],…]}` (one array of
//! chosen labels per question, in order) → 200 `true`; `POST /question/{id}/reject` → 200 `true`;
//! an unknown or already answered id → 404 `{"_tag":"PermissionNotFoundError"|"QuestionNotFoundError",…}`.
//! `POST /session/{id}/abort` → 200 `true` (also for an unknown session).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;

use super::{Inbox, Projects, Server};
use crate::upstream::UpstreamBody;
use crate::upstream::endpoint::Endpoint;
use crate::upstream::supervise::Status;

const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_ANSWER_BYTES: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Once,
    Always,
    Reject,
}

impl Reply {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reply::Once => "once",
            Reply::Always => "always",
            Reply::Reject => "reject",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Reply> {
        match s {
            "once" => Some(Reply::Once),
            "always" => Some(Reply::Always),
            "reject" => Some(Reply::Reject),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Done,
    /// Someone answered first (or the request is gone): the card disappears as "answered elsewhere".
    AlreadyAnswered,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum InboxError {
    #[error("no project {0}")]
    UnknownProject(String),
    #[error("{0:?} is not a request or session id")]
    BadId(String),
    #[error("the project's server is not running: {0}")]
    NotRunning(String),
    #[error("the project's server answered {status}: {body}")]
    Upstream { status: u16, body: String },
    #[error("the project's server could not be reached: {0}")]
    Unreachable(String),
    /// The proxy refused the act (the user's role, the route, the project): its own error.
    #[error("{0}")]
    Refused(Refusal),
}

/// The proxy's refusal of an act on a user's behalf: the status it answers with, and its own
/// error, which the page that asked answers with as it is (the inbox only carries it).
#[derive(Debug)]
pub(crate) struct Refusal {
    pub status: u16,
    pub error: Box<dyn std::error::Error + Send + Sync>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl InboxError {
    /// The HTTP status a page (or the control socket) answers this error with.
    pub(crate) fn status(&self) -> u16 {
        match self {
            InboxError::UnknownProject(_) => 404,
            InboxError::BadId(_) => 400,
            InboxError::NotRunning(_) => 503,
            InboxError::Upstream { .. } | InboxError::Unreachable(_) => 502,
            InboxError::Refused(r) => r.status,
        }
    }
}

/// OpenCode's ids are `per_…`, `que_…`, `ses_…`: letters, digits and `_`. Anything else would
/// change the upstream path.
pub(super) fn check_id(id: &str) -> Result<(), InboxError> {
    if !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Ok(())
    } else {
        Err(InboxError::BadId(id.chars().take(64).collect()))
    }
}

/// Where a project's requests go now, and the directory its server knows it by. A spawned server
/// that is not running is not started for this.
pub(super) fn target(projects: &dyn Projects, project: &str) -> Result<(Arc<Endpoint>, Option<String>), InboxError> {
    let p = projects
        .get(project)
        .ok_or_else(|| InboxError::UnknownProject(project.into()))?;
    let dir = p.directory;
    match p.server {
        Server::External(e) => Ok((e, dir)),
        Server::Spawned(status) => match status {
            Status::Ready(e) => Ok((e, dir)),
            Status::Failed(why) | Status::NotRunning(why) => Err(InboxError::NotRunning(why.to_string())),
            Status::Starting => Err(InboxError::NotRunning("starting".into())),
            Status::Waiting | Status::Stopped => Err(InboxError::NotRunning("stopped".into())),
        },
    }
}

/// `path` with `?directory=<dir>` (percent-encoded) when the project has one.
pub(super) fn with_directory(path: &str, dir: Option<&str>) -> String {
    let Some(dir) = dir else {
        return path.to_string();
    };
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut out = format!("{path}{sep}directory=");
    for b in dir.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// POST `path` with a JSON body to `endpoint` with the gateway's credential; the status and at
/// most `keep` characters of the answer (the control socket's road, see [`By`]).
async fn post_keeping(
    connect_timeout: std::time::Duration,
    endpoint: &Endpoint,
    path: &str,
    body: Option<serde_json::Value>,
    keep: usize,
) -> Result<(u16, String), InboxError> {
    let body = UpstreamBody::Full(body.map(|b| Bytes::from(b.to_string())));
    let mut req = endpoint
        .request(http::Method::POST, path, body)
        .map_err(InboxError::Unreachable)?;
    let headers = req.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::USER_AGENT,
        http::HeaderValue::from_static(super::INBOX_AGENT),
    );
    let exchange = async {
        let resp = endpoint
            .send(req, connect_timeout)
            .await
            .map_err(|e| InboxError::Unreachable(crate::upstream::describe(&*e)))?;
        let status = resp.status().as_u16();
        let body = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let mut text = String::from_utf8_lossy(&body).into_owned();
        if let Some(r) = &endpoint.redactor {
            text = String::from_utf8_lossy(&r.frame(Bytes::from(text))).into_owned();
        }
        Ok((status, text.chars().take(keep).collect()))
    };
    tokio::time::timeout(REPLY_TIMEOUT, exchange)
        .await
        .map_err(|_| InboxError::Unreachable("no answer in 30 s".into()))?
}

/// The one road to a project's server for an act on a user's behalf: the proxy's own phases as
/// that user (`pipeline/internal.rs` implements it): their role, the route table, pinning,
/// redaction, the request audit. The inbox builds the request; the road decides and sends it.
pub(crate) trait Road: Send + Sync {
    /// The user the acts are made for.
    fn user(&self) -> &str;

    /// `method path` in `project` with an optional JSON body, as this user: the status and the
    /// start of the answer, or the proxy's refusal.
    fn call<'a>(
        &'a self,
        method: http::Method,
        project: &'a str,
        path: &'a str,
        json: Option<serde_json::Value>,
    ) -> Trip<'a>;
}

/// A [`Road::call`] under way.
pub(crate) type Trip<'a> = Pin<Box<dyn Future<Output = Result<(http::StatusCode, Bytes), Refusal>> + Send + 'a>>;

/// Who acts, and so which road the request takes.
pub(crate) enum By<'a> {
    /// A user of the control room: the request goes through the proxy's own phases as theirs
    /// (the [`Road`] the page was handed).
    User(&'a dyn Road),
    /// The gateway's own OS user on the control socket (`front/control.rs`, 0600): outside the user and
    /// role model, like the CLI; it posts with the gateway's credential and audits itself.
    ControlSocket,
    /// The gateway itself, stopping a session over its budget or running away (`guard.rs`), or
    /// resuming one it stopped (an approver's word): with the gateway's credential, audited.
    Guard,
}

impl By<'_> {
    fn name(&self) -> &str {
        match self {
            By::User(road) => road.user(),
            By::ControlSocket => "control",
            By::Guard => "guard",
        }
    }
}

/// POST `path` (without a directory: the road adds the project's) in `project` as `by`; the
/// status and at most `keep` characters of the answer.
pub(super) async fn send(
    inbox: &Inbox,
    by: &By<'_>,
    project: &str,
    path: &str,
    body: Option<serde_json::Value>,
    keep: usize,
) -> Result<(u16, String), InboxError> {
    match by {
        By::ControlSocket | By::Guard => {
            let (endpoint, dir) = target(&*inbox.parts.projects, project)?;
            let path = with_directory(path, dir.as_deref());
            post_keeping(inbox.parts.connect_timeout, &endpoint, &path, body, keep).await
        }
        By::User(road) => match road.call(http::Method::POST, project, path, body).await {
            Ok((status, answer)) => Ok((
                status.as_u16(),
                String::from_utf8_lossy(&answer).chars().take(keep).collect(),
            )),
            Err(refusal) => Err(InboxError::Refused(refusal)),
        },
    }
}

/// One answer to send: where, with what body, and its name for the record (`once`, `reply`, …).
struct Answer {
    path: String,
    body: Option<serde_json::Value>,
    name: &'static str,
}

impl Inbox {
    /// Send one answer for the request `id` of `project`; record who answered, and how.
    async fn answer(
        &self,
        project: &str,
        id: &str,
        Answer { path, body, name }: Answer,
        by: &By<'_>,
    ) -> Result<Outcome, InboxError> {
        let answer = name;
        check_id(id)?;
        // Not started for an answer: a server that is not running has no request to answer.
        target(&*self.parts.projects, project)?;
        self.update(|m, _| {
            m.replying(project, id, by.name(), answer);
            Default::default()
        });
        let result = send(self, by, project, &path, body, 300).await;
        let outcome = match result {
            Ok((200..=299, _)) => Ok(Outcome::Done),
            Ok((404, _)) => Ok(Outcome::AlreadyAnswered),
            Ok((status, body)) => Err(InboxError::Upstream { status, body }),
            Err(e) => Err(e),
        };
        self.update(|m, now| {
            match outcome {
                Ok(Outcome::Done) => {}
                Ok(Outcome::AlreadyAnswered) => m.found_answered(project, id),
                Err(_) => m.reply_failed(project, id),
            }
            // Answered (by us or, on a 404, by someone else): the card goes now; the event that
            // follows finds nothing to do. On an error the card stays.
            let gone = outcome.is_ok() && m.resolve(project, id, now, Some(answer));
            super::model::Effect::changed(gone)
        });
        outcome
    }

    /// `POST /permission/{id}/reply` with `{"reply": once|always|reject, "message"?}`.
    pub(crate) async fn reply_permission(
        &self,
        project: &str,
        id: &str,
        reply: Reply,
        message: Option<String>,
        by: &By<'_>,
    ) -> Result<Outcome, InboxError> {
        let mut body = serde_json::json!({ "reply": reply.as_str() });
        if let Some(m) = message.filter(|m| !m.is_empty()) {
            body["message"] = m.chars().take(2000).collect::<String>().into();
        }
        self.answer(
            project,
            id,
            Answer {
                path: format!("/permission/{id}/reply"),
                body: Some(body),
                name: reply.as_str(),
            },
            by,
        )
        .await
    }

    /// `POST /question/{id}/reply` with `{"answers": [[label, …], …]}`: for each question in
    /// order, the labels chosen (or the user's own text where the question allows it).
    pub(crate) async fn reply_question(
        &self,
        project: &str,
        id: &str,
        answers: Vec<Vec<String>>,
        by: &By<'_>,
    ) -> Result<Outcome, InboxError> {
        let body = serde_json::json!({ "answers": answers });
        self.answer(
            project,
            id,
            Answer {
                path: format!("/question/{id}/reply"),
                body: Some(body),
                name: "reply",
            },
            by,
        )
        .await
    }

    /// `POST /question/{id}/reject`: the agent is told the user declined to answer.
    pub(crate) async fn reject_question(&self, project: &str, id: &str, by: &By<'_>) -> Result<Outcome, InboxError> {
        self.answer(
            project,
            id,
            Answer {
                path: format!("/question/{id}/reject"),
                body: None,
                name: "reject",
            },
            by,
        )
        .await
    }

    /// `POST /session/{id}/abort`: stop what the session is doing.
    pub(crate) async fn abort_session(
        &self,
        by: &By<'_>,
        project: &str,
        session_id: &str,
    ) -> Result<Outcome, InboxError> {
        check_id(session_id)?;
        target(&*self.parts.projects, project)?;
        match send(self, by, project, &format!("/session/{session_id}/abort"), None, 300).await? {
            (200..=299, _) => Ok(Outcome::Done),
            (404, _) => Ok(Outcome::AlreadyAnswered),
            (status, body) => Err(InboxError::Upstream { status, body }),
        }
    }
}

impl Inbox {
    /// `POST /session {}` in the project's directory: a new, empty session; its id.
    pub(crate) async fn create_session(&self, by: &By<'_>, project: &str) -> Result<String, InboxError> {
        target(&*self.parts.projects, project)?;
        match send(
            self,
            by,
            project,
            "/session",
            Some(serde_json::json!({})),
            MAX_ANSWER_BYTES,
        )
        .await?
        {
            (200..=299, body) => crate::audit::created_session(body.as_bytes())
                .filter(|id| check_id(id).is_ok())
                .ok_or(InboxError::Upstream {
                    status: 200,
                    body: "the answer named no session".into(),
                }),
            (status, body) => Err(InboxError::Upstream {
                status,
                body: body.chars().take(300).collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_would_change_the_path_are_refused_and_directories_are_encoded() {
        assert!(check_id("per_22ce688af001GlDHe7E7GYSE0q").is_ok());
        for bad in ["", "../x", "per_1/reply", "a?b", "a%2f", "a b"] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
        assert_eq!(
            with_directory("/permission", Some("/tmp/a b/ü&x")),
            "/permission?directory=/tmp/a%20b/%C3%BC%26x"
        );
        assert_eq!(
            with_directory("/session?limit=5", Some("/a")),
            "/session?limit=5&directory=/a"
        );
        assert_eq!(with_directory("/question", None), "/question");
    }
}
