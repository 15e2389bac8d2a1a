//! Answering a card (or aborting a session) on the project's OpenCode server: built here, sent by
//! the one road (`Road`: the proxy's own phases, as a user or as the gateway under its grants). A request someone answered first (TUI, web UI,
//! another phone) is answered 404 upstream: that is [`Outcome::AlreadyAnswered`], not an error.
//!
//! Seen on OpenCode 1.18.33: `POST /permission/{id}/reply {"reply":"once"|"always"|"reject",
//! "message"?}` → 200 `true`; `POST /question/{id}/reply {"answers":[["label",…],…]}` (one array of
//! chosen labels per question, in order) → 200 `true`; `POST /question/{id}/reject` → 200 `true`;
//! an unknown or already answered id → 404 `{"_tag":"PermissionNotFoundError"|"QuestionNotFoundError",…}`.
//! `POST /session/{id}/abort` → 200 `true` (also for an unknown session).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

use super::{Inbox, Projects, Server};
use crate::policy::grants::Grant;
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
pub(crate) fn check_id(id: &str) -> Result<(), InboxError> {
    if !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Ok(())
    } else {
        Err(InboxError::BadId(id.chars().take(64).collect()))
    }
}

/// The project's server is running (a spawned server that is not is not started for an act: it
/// has no request to answer).
pub(super) fn running(projects: &dyn Projects, project: &str) -> Result<(), InboxError> {
    let p = projects
        .get(project)
        .ok_or_else(|| InboxError::UnknownProject(project.into()))?;
    match p.server {
        Server::External(_) => Ok(()),
        Server::Spawned(status) => match status {
            Status::Ready(_) => Ok(()),
            Status::Failed(why) | Status::NotRunning(why) => Err(InboxError::NotRunning(why.to_string())),
            Status::Starting => Err(InboxError::NotRunning("starting".into())),
            Status::Waiting | Status::Stopped => Err(InboxError::NotRunning("stopped".into())),
        },
    }
}

/// One request to a project's server, as the inbox builds it; the road decides and sends it.
pub(crate) struct Call<'a> {
    pub method: http::Method,
    pub project: &'a str,
    /// The path in the project (without a directory: the road pins the project's).
    pub path: String,
    pub json: Option<serde_json::Value>,
    /// The named act it is (`policy/grants.rs`): judged by its grant, not its route's class.
    pub grant: Option<&'static Grant>,
    /// What its audit record says besides (the guard's reason).
    pub note: Vec<(&'static str, String)>,
}

impl<'a> Call<'a> {
    /// `GET path` in `project`.
    pub(crate) fn get(project: &'a str, path: String) -> Call<'a> {
        Call {
            method: http::Method::GET,
            ..Call::post(project, path, None)
        }
    }

    /// `POST path` in `project` with an optional JSON body.
    pub(crate) fn post(project: &'a str, path: String, json: Option<serde_json::Value>) -> Call<'a> {
        Call {
            method: http::Method::POST,
            project,
            path,
            json,
            grant: None,
            note: Vec::new(),
        }
    }
}

/// The one road to a project's server (`pipeline/internal.rs` implements it): the proxy's own
/// phases, as a principal: a user of the control room, or the gateway itself under its grants
/// (its guard, its control socket). Their role or grant by the route table, the budgets,
/// pinning, redaction, the request audit. The inbox builds the request; the road decides.
pub(crate) trait Road: Send + Sync {
    /// Who acts: a user's name, or the gateway's `guard` or `control`.
    fn name(&self) -> &str;

    /// The call: the status and the start of the answer, or the proxy's refusal.
    fn call<'a>(&'a self, call: Call<'a>) -> Trip<'a>;
}

/// A [`Road::call`] under way.
pub(crate) type Trip<'a> = Pin<Box<dyn Future<Output = Result<(http::StatusCode, Bytes), Refusal>> + Send + 'a>>;

/// `call` by `by`: the status and at most `keep` characters of the answer.
pub(super) async fn send(by: &dyn Road, call: Call<'_>, keep: usize) -> Result<(u16, String), InboxError> {
    let exchange = by.call(call);
    match tokio::time::timeout(REPLY_TIMEOUT, exchange).await {
        Ok(Ok((status, answer))) => Ok((
            status.as_u16(),
            String::from_utf8_lossy(&answer).chars().take(keep).collect(),
        )),
        Ok(Err(refusal)) => Err(InboxError::Refused(refusal)),
        Err(_) => Err(InboxError::Unreachable("no answer in 30 s".into())),
    }
}

/// One answer to send: where, with what body, and its name for the record (`once`, `reply`, …).
struct Answer {
    path: String,
    body: Option<serde_json::Value>,
    name: &'static str,
    /// The gateway's own answer's grant and what its audit record says besides (the policy's).
    grant: Option<&'static Grant>,
    note: Vec<(&'static str, String)>,
}

impl Inbox {
    /// Send one answer for the request `id` of `project`; record who answered, and how.
    async fn answer(
        &self,
        project: &str,
        id: &str,
        Answer {
            path,
            body,
            name,
            grant,
            note,
        }: Answer,
        by: &dyn Road,
    ) -> Result<Outcome, InboxError> {
        let answer = name;
        check_id(id)?;
        running(&*self.parts.projects, project)?;
        self.update(|m, _| {
            m.replying(project, id, by.name(), answer);
            Default::default()
        });
        let call = Call {
            grant,
            note,
            ..Call::post(project, path, body)
        };
        let result = send(by, call, 300).await;
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
        by: &dyn Road,
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
                grant: None,
                note: Vec::new(),
            },
            by,
        )
        .await
    }

    /// The gateway's own answer under `grant` (a permission policy's, `inbox/policy.rs`): the
    /// same road and record as a person's, with the policy and rule in the audit record.
    pub(super) async fn reply_permission_as(
        &self,
        by: &dyn Road,
        (project, id): (&str, &str),
        body: serde_json::Value,
        grant: &'static Grant,
        note: Vec<(&'static str, String)>,
    ) -> Result<Outcome, InboxError> {
        let name = match body["reply"].as_str() {
            Some("once") => "once",
            _ => "reject",
        };
        let path = format!("/permission/{id}/reply");
        let answer = Answer {
            path,
            body: Some(body),
            name,
            grant: Some(grant),
            note,
        };
        self.answer(project, id, answer, by).await
    }

    /// `POST /question/{id}/reply` with `{"answers": [[label, …], …]}`: for each question in
    /// order, the labels chosen (or the user's own text where the question allows it).
    pub(crate) async fn reply_question(
        &self,
        project: &str,
        id: &str,
        answers: Vec<Vec<String>>,
        by: &dyn Road,
    ) -> Result<Outcome, InboxError> {
        let body = serde_json::json!({ "answers": answers });
        self.answer(
            project,
            id,
            Answer {
                path: format!("/question/{id}/reply"),
                body: Some(body),
                name: "reply",
                grant: None,
                note: Vec::new(),
            },
            by,
        )
        .await
    }

    /// `POST /question/{id}/reject`: the agent is told the user declined to answer.
    pub(crate) async fn reject_question(&self, project: &str, id: &str, by: &dyn Road) -> Result<Outcome, InboxError> {
        self.answer(
            project,
            id,
            Answer {
                path: format!("/question/{id}/reject"),
                body: None,
                name: "reject",
                grant: None,
                note: Vec::new(),
            },
            by,
        )
        .await
    }

    /// `POST /session/{id}/abort`: stop what the session is doing.
    pub(crate) async fn abort_session(
        &self,
        by: &dyn Road,
        project: &str,
        session_id: &str,
    ) -> Result<Outcome, InboxError> {
        self.abort_as(by, project, session_id, None, Vec::new()).await
    }

    /// Stop a session and every session under it (subagents, sessions it started: what the
    /// model knows of their parents), the deepest first, each on `by` (the person's road, so each
    /// is judged and audited); the session's own outcome.
    pub(crate) async fn abort_tree(
        &self,
        by: &dyn Road,
        project: &str,
        session_id: &str,
    ) -> Result<Outcome, InboxError> {
        check_id(session_id)?;
        for child in self.descendants(project, session_id).iter().rev() {
            if let Err(e) = self.abort_session(by, project, child).await {
                tracing::warn!(project, session = child, error = %e, "a session under a stopped one could not be stopped");
            }
        }
        self.abort_session(by, project, session_id).await
    }

    /// The sessions under `root`, parents before their children (bounded by the model's own).
    fn descendants(&self, project: &str, root: &str) -> Vec<String> {
        let model = self.lock();
        let Some(p) = model.projects.get(project) else {
            return Vec::new();
        };
        let mut found: Vec<String> = vec![root.to_string()];
        let mut i = 0;
        while i < found.len() {
            let parent = found[i].clone();
            found.extend(
                (p.sessions.values())
                    .filter(|s| s.parent_id.as_deref() == Some(parent.as_str()) && !found.contains(&s.id))
                    .map(|s| s.id.clone())
                    .collect::<Vec<_>>(),
            );
            i += 1;
        }
        found.remove(0);
        found
    }

    /// [`Self::abort_session`] as a named act (the guard's stop: its grant, its reason).
    pub(super) async fn abort_as(
        &self,
        by: &dyn Road,
        project: &str,
        session_id: &str,
        grant: Option<&'static Grant>,
        note: Vec<(&'static str, String)>,
    ) -> Result<Outcome, InboxError> {
        check_id(session_id)?;
        running(&*self.parts.projects, project)?;
        let call = Call {
            grant,
            note,
            ..Call::post(project, format!("/session/{session_id}/abort"), None)
        };
        match send(by, call, 300).await? {
            (200..=299, _) => Ok(Outcome::Done),
            (404, _) => Ok(Outcome::AlreadyAnswered),
            (status, body) => Err(InboxError::Upstream { status, body }),
        }
    }
}

impl Inbox {
    /// `POST /session {}` in the project's directory: a new, empty session; its id.
    pub(crate) async fn create_session(&self, by: &dyn Road, project: &str) -> Result<String, InboxError> {
        running(&*self.parts.projects, project)?;
        match send(
            by,
            Call::post(project, "/session".into(), Some(serde_json::json!({}))),
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
    fn ids_that_would_change_the_path_are_refused() {
        assert!(check_id("per_22ce688af001GlDHe7E7GYSE0q").is_ok());
        for bad in ["", "../x", "per_1/reply", "a?b", "a%2f", "a b"] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
    }
}
