//! What a page reads: one [`ProjectView`] per project the viewer may see, built from the model
//! under its lock and handed out as plain owned data (serialisable as JSON).

use serde::Serialize;

use super::model::{Model, Permission, Question, Resolved, ServerState, Session};

#[derive(Clone, Debug, Serialize)]
pub(crate) struct ProjectView {
    pub name: String,
    /// The directory the project's requests are pinned to (for links into the web UI:
    /// `https://<project-host>/<base64url(directory)>/session/<id>`).
    pub directory: Option<String>,
    pub server: ServerState,
    /// Most recently active first; subagent sessions have `parent_id`.
    pub sessions: Vec<Session>,
    /// Oldest first.
    pub pending: Vec<Card>,
    /// Answered in the last two minutes, newest first.
    pub resolved: Vec<Resolved>,
    /// Requests not kept because the project had too many pending already.
    pub hidden_cards: u64,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Card {
    Permission(PermissionCard),
    Question(QuestionCard),
}

impl Card {
    pub(crate) fn id(&self) -> &str {
        match self {
            Card::Permission(p) => &p.request.id,
            Card::Question(q) => &q.request.id,
        }
    }

    fn asked_at(&self) -> u64 {
        match self {
            Card::Permission(p) => p.request.asked_at_ms,
            Card::Question(q) => q.request.asked_at_ms,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct PermissionCard {
    #[serde(flatten)]
    pub request: Permission,
    pub session_title: Option<String>,
    /// Raised by a subagent's session (one with a parent).
    pub subagent: bool,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct QuestionCard {
    #[serde(flatten)]
    pub request: Question,
    pub session_title: Option<String>,
    pub subagent: bool,
}

pub(crate) fn build(model: &Model, may_see: impl Fn(&str) -> bool, now: u64) -> Vec<ProjectView> {
    // BTreeMap: already sorted by name.
    model
        .projects
        .iter()
        .filter(|(name, _)| may_see(name))
        .map(|(name, p)| {
            let title = |sid: &str| p.sessions.get(sid).map(|s| s.title.clone());
            let subagent = |sid: &str| p.sessions.get(sid).is_some_and(|s| s.parent_id.is_some());
            let mut pending: Vec<Card> = p
                .permissions
                .values()
                .map(|r| {
                    Card::Permission(PermissionCard {
                        session_title: title(&r.session_id),
                        subagent: subagent(&r.session_id),
                        request: r.clone(),
                    })
                })
                .chain(p.questions.values().map(|r| {
                    Card::Question(QuestionCard {
                        session_title: title(&r.session_id),
                        subagent: subagent(&r.session_id),
                        request: r.clone(),
                    })
                }))
                .collect();
            pending.sort_by_key(|c| c.asked_at());
            let mut sessions: Vec<Session> = p.sessions.values().cloned().collect();
            sessions.sort_by(|a, b| b.last_activity_ms.cmp(&a.last_activity_ms).then(a.id.cmp(&b.id)));
            let resolved = model
                .resolved
                .iter()
                .rev()
                .filter(|r| &r.project == name && r.resolved_at_ms + super::model::RESOLVED_FOR_MS >= now)
                .cloned()
                .collect();
            ProjectView {
                name: name.clone(),
                directory: p.directory.clone(),
                server: p.server.clone(),
                sessions,
                pending,
                resolved,
                hidden_cards: p.hidden_cards,
            }
        })
        .collect()
}
