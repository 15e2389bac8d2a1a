//! What the inbox knows, and the one function that changes it: OpenCode's events (and the lists
//! read after every (re)connect) go in, cards and sessions come out. Pure: no I/O, no clock (the
//! caller passes `now` in milliseconds since the epoch), so the tests drive it with plain JSON.
//!
//! Event names and shapes are the ones OpenCode 1.18.33 sends on `GET /global/event` (seen on the
//! real server): `permission.asked` (properties = the `GET /permission` object),
//! `permission.replied {sessionID, requestID, reply}`, `question.asked` (the `GET /question`
//! object), `question.replied {sessionID, requestID, answers}`, `question.rejected {sessionID,
//! requestID}`, `session.created|updated|deleted {sessionID, info}`, `session.status {sessionID,
//! status}`, `session.idle {sessionID}`, `message.updated {sessionID, info}`.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::Value;

pub use super::cards::*;
pub(crate) use super::parse::Failure;
#[cfg(test)]
use super::parse::first_lines;
use super::parse::{permission, question, session_error, session_from_info, status, tool_outcome};
pub(crate) use super::streak::Repeat;
use super::streak::streak;

/// Sessions kept per project (the most recently active).
pub(crate) const MAX_SESSIONS: usize = 200;
/// Pending cards kept per project and kind; more are counted in `hidden_cards`.
pub(crate) const MAX_CARDS: usize = 100;
/// Recently resolved entries kept (all projects), and for how long.
pub(crate) const MAX_RESOLVED: usize = 200;
pub(crate) const RESOLVED_FOR_MS: u64 = 120_000;

/// What one change did.
#[derive(Debug, Default)]
pub(crate) struct Effect {
    pub changed: bool,
    pub new_cards: Vec<NewCard>,
    /// Sessions whose cumulative cost was reported (new, or changed), for the meter.
    pub costs: Vec<crate::budget::CostSeen>,
    /// A session failed the same way as the last time, for the runaway guard.
    pub repeats: Vec<Repeat>,
    /// Sessions whose turn ended (busy, then idle): (project, session), for the budgets.
    pub ended: Vec<(String, String)>,
}

impl Effect {
    pub(crate) fn changed(changed: bool) -> Effect {
        Effect {
            changed,
            ..Default::default()
        }
    }

    fn merge(&mut self, other: Effect) {
        self.changed |= other.changed;
        self.new_cards.extend(other.new_cards);
        self.costs.extend(other.costs);
        self.repeats.extend(other.repeats);
        self.ended.extend(other.ended);
    }
}

/// The meter's reading of a session update: its cost when it is new to the model or changed.
fn cost_seen(project: &str, old: Option<&Session>, new: &Session) -> Option<crate::budget::CostSeen> {
    let now = new.cost?;
    let before = old.and_then(|o| o.cost);
    (before != Some(now)).then(|| crate::budget::CostSeen {
        project: project.to_string(),
        session: new.id.clone(),
        parent: new.parent_id.clone(),
        before,
        now,
        inherited: false,
    })
}

#[derive(Debug)]
pub(crate) struct ProjectModel {
    pub server: ServerState,
    pub directory: Option<String>,
    pub sessions: HashMap<String, Session>,
    pub permissions: BTreeMap<String, Permission>,
    pub questions: BTreeMap<String, Question>,
    /// Requests not kept because the project already had [`MAX_CARDS`] of that kind.
    pub hidden_cards: u64,
}

impl ProjectModel {
    fn new() -> Self {
        ProjectModel {
            server: ServerState::Starting,
            directory: None,
            sessions: HashMap::new(),
            permissions: BTreeMap::new(),
            questions: BTreeMap::new(),
            hidden_cards: 0,
        }
    }
}

/// The lists read from the upstream after a (re)connect.
#[derive(Debug, Default)]
pub(crate) struct Seed {
    pub sessions: Vec<Value>,
    /// `GET /session/status`: session id → status.
    pub statuses: Value,
    pub permissions: Vec<Value>,
    pub questions: Vec<Value>,
}

#[derive(Debug, Default)]
pub(crate) struct Model {
    pub projects: BTreeMap<String, ProjectModel>,
    pub resolved: VecDeque<Resolved>,
    /// Requests the gateway is replying to, for whom and with what answer: their `*.replied`
    /// event then says "answered here".
    ours: HashMap<(String, String), (String, String)>,
}

/// Keep at most [`MAX_SESSIONS`]: drop the least recently active that is not busy.
fn bound_sessions(sessions: &mut HashMap<String, Session>) {
    while sessions.len() > MAX_SESSIONS {
        let oldest = |idle_only: bool| {
            sessions
                .values()
                .filter(|s| !idle_only || s.status == SessionStatus::Idle)
                .min_by_key(|s| s.last_activity_ms)
                .map(|s| s.id.clone())
        };
        let victim = oldest(true).or_else(|| oldest(false));
        match victim {
            Some(id) => sessions.remove(&id),
            None => break,
        };
    }
}

impl Model {
    pub(crate) fn project_mut(&mut self, name: &str) -> &mut ProjectModel {
        self.projects.entry(name.to_string()).or_insert_with(ProjectModel::new)
    }

    /// Forget projects that are no longer configured (their cards go without a resolution).
    pub(crate) fn retain_projects(&mut self, keep: impl Fn(&str) -> bool) -> bool {
        let before = self.projects.len();
        self.projects.retain(|name, _| keep(name));
        self.ours.retain(|(p, _), _| keep(p));
        before != self.projects.len()
    }

    /// Set a project's server state and directory; true when it changed.
    pub(crate) fn set_server(&mut self, project: &str, state: ServerState, directory: Option<String>) -> bool {
        let p = self.project_mut(project);
        let changed = p.server != state || p.directory != directory;
        p.server = state;
        p.directory = directory;
        changed
    }

    /// The project's server is not running: its requests died with it and its sessions are idle.
    pub(crate) fn forget_pending(&mut self, project: &str) -> bool {
        let Some(p) = self.projects.get_mut(project) else {
            return false;
        };
        let mut changed = !p.permissions.is_empty() || !p.questions.is_empty();
        p.permissions.clear();
        p.questions.clear();
        for s in p.sessions.values_mut() {
            changed |= s.status != SessionStatus::Idle;
            s.status = SessionStatus::Idle;
        }
        changed
    }

    /// The gateway is about to reply to `id` for `user` with `answer`.
    pub(crate) fn replying(&mut self, project: &str, id: &str, user: &str, answer: &str) {
        if self.ours.len() < 10_000 {
            self.ours
                .insert((project.into(), id.into()), (user.into(), answer.into()));
        }
    }

    /// Request `id` of `project` was resolved lately (its card is among the resolved ones), or
    /// the gateway's own reply to it is on its way.
    pub(crate) fn answered_or_answering(&self, project: &str, id: &str) -> bool {
        self.ours.contains_key(&(project.to_string(), id.to_string()))
            || self.resolved.iter().any(|r| r.project == project && r.id == id)
    }

    /// The gateway's reply did not go through: a later `*.replied` is someone else's.
    pub(crate) fn reply_failed(&mut self, project: &str, id: &str) {
        self.ours.remove(&(project.into(), id.into()));
    }

    /// The gateway's reply found the request answered (404): so was the `*.replied` that may
    /// have come while the reply was on its way, by someone else.
    pub(crate) fn found_answered(&mut self, project: &str, id: &str) {
        self.ours.remove(&(project.into(), id.into()));
        for r in self.resolved.iter_mut().filter(|r| r.project == project && r.id == id) {
            r.how = Resolution::Elsewhere;
        }
    }

    /// Remove a pending card, recording how it went (`answer`: what the event said, if it said).
    /// True if there was one.
    pub(crate) fn resolve(&mut self, project: &str, id: &str, now: u64, answer: Option<&str>) -> bool {
        let (how, answer) = match self.ours.remove(&(project.into(), id.into())) {
            Some((by, ours)) => (Resolution::AnsweredHere { by }, Some(ours)),
            None => (Resolution::Elsewhere, answer.map(String::from)),
        };
        let Some(p) = self.projects.get_mut(project) else {
            return false;
        };
        let (kind, tool, detail) = if let Some(r) = p.permissions.remove(id) {
            let detail = r.lines.first().or(r.patterns.first()).cloned().unwrap_or_default();
            (CardKind::Permission, r.tool, detail)
        } else if let Some(q) = p.questions.remove(id) {
            let detail = q.questions.first().map(|i| i.question.clone()).unwrap_or_default();
            (CardKind::Question, "question".to_string(), detail)
        } else {
            return false;
        };
        self.resolved.push_back(Resolved {
            project: project.into(),
            id: id.into(),
            kind,
            resolved_at_ms: now,
            how,
            answer,
            tool,
            detail,
        });
        self.prune(now);
        true
    }

    /// Drop resolved entries older than [`RESOLVED_FOR_MS`] or beyond [`MAX_RESOLVED`].
    pub(crate) fn prune(&mut self, now: u64) {
        while self.resolved.len() > MAX_RESOLVED
            || self
                .resolved
                .front()
                .is_some_and(|r| r.resolved_at_ms + RESOLVED_FOR_MS < now)
        {
            self.resolved.pop_front();
        }
    }

    fn add_permission(&mut self, project: &str, p: Permission) -> Effect {
        let card = NewCard {
            project: project.into(),
            id: p.id.clone(),
            kind: CardKind::Permission,
            tool: p.tool.clone(),
        };
        self.add_card(card, p.id.clone(), p, |pm| &mut pm.permissions)
    }

    fn add_question(&mut self, project: &str, q: Question) -> Effect {
        let card = NewCard {
            project: project.into(),
            id: q.id.clone(),
            kind: CardKind::Question,
            tool: "question".into(),
        };
        self.add_card(card, q.id.clone(), q, |pm| &mut pm.questions)
    }

    /// Keep a pending request `id` among its kind's (`kept`) in `card.project`, announcing `card`.
    /// One already kept changes nothing; past [`MAX_CARDS`] of its kind it is only counted.
    fn add_card<T>(
        &mut self,
        card: NewCard,
        id: String,
        request: T,
        kept: fn(&mut ProjectModel) -> &mut BTreeMap<String, T>,
    ) -> Effect {
        let pm = self.project_mut(&card.project);
        if kept(pm).contains_key(&id) {
            return Effect::default();
        }
        if kept(pm).len() >= MAX_CARDS {
            pm.hidden_cards += 1;
            return Effect::changed(true);
        }
        kept(pm).insert(id, request);
        Effect {
            changed: true,
            new_cards: vec![card],
            ..Default::default()
        }
    }

    /// The session `id` (made if unknown), its last activity now.
    fn touch_session(&mut self, project: &str, id: &str, now: u64) -> &mut Session {
        let sessions = &mut self.project_mut(project).sessions;
        if !sessions.contains_key(id) {
            sessions.insert(id.to_string(), Session::new(id, now));
            bound_sessions(sessions);
        }
        // The bound may have dropped the one just made (every other session busy): it comes back.
        let session = sessions.entry(id.to_string()).or_insert_with(|| Session::new(id, now));
        session.last_activity_ms = session.last_activity_ms.max(now);
        session
    }

    /// A session's status changed. A turn that starts clears the guard's flag; one that ends
    /// ends its failure streak; a retry of the same provider error continues it.
    fn set_status(&mut self, project: &str, id: &str, now: u64, status: SessionStatus) -> Effect {
        let session = self.touch_session(project, id, now);
        if status != SessionStatus::Idle && session.status == SessionStatus::Idle {
            session.flag = None;
            session.error = None;
            session.streak = None;
            session.last_said_ms = now;
            session.busy_since_ms = now;
        }
        let ended = status == SessionStatus::Idle && session.status != SessionStatus::Idle;
        let failure = match &status {
            SessionStatus::Retry { message, .. } => Some(Failure::new("retry", message)),
            SessionStatus::Idle => {
                session.streak = None;
                None
            }
            SessionStatus::Busy => None,
        };
        session.status = status;
        let mut effect = Effect::changed(true);
        if let Some(f) = failure {
            effect.repeats.extend(streak(project, session, Err(f)));
        }
        if ended {
            effect.ended.push((project.to_string(), id.to_string()));
        }
        effect
    }

    /// The model said something in a session (a message or a part of one); a finished tool
    /// call's outcome continues or ends its failure streak.
    fn said(&mut self, project: &str, id: &str, now: u64, outcome: Option<Result<(), Failure>>) -> Effect {
        let session = self.touch_session(project, id, now);
        session.last_said_ms = now;
        let mut effect = Effect::changed(outcome.is_some());
        if let Some(outcome) = outcome {
            effect.repeats.extend(streak(project, session, outcome));
        }
        effect
    }

    /// The guard's word on a session (true if it is known).
    pub(crate) fn flag(&mut self, project: &str, id: &str, flag: Flag) -> bool {
        match self.projects.get_mut(project).and_then(|p| p.sessions.get_mut(id)) {
            Some(s) => {
                s.flag = Some(flag);
                true
            }
            None => false,
        }
    }

    /// Busy sessions unflagged whose model said nothing since `before` (ms), by project, for
    /// the projects `watched` says.
    pub(crate) fn silent_since(&self, watched: impl Fn(&str) -> Option<u64>, now: u64) -> Vec<(String, String, u64)> {
        let mut out = Vec::new();
        for (name, p) in &self.projects {
            let Some(max_busy) = watched(name) else { continue };
            for s in p.sessions.values() {
                let quiet = now.saturating_sub(s.last_said_ms);
                if s.status != SessionStatus::Idle && s.flag.is_none() && quiet >= max_busy {
                    out.push((name.clone(), s.id.clone(), quiet));
                }
            }
        }
        out
    }

    /// One event's `payload` (`{"type", "properties"}`) for `project`.
    pub(crate) fn apply(&mut self, project: &str, payload: &Value, now: u64) -> Effect {
        let props = &payload["properties"];
        let of_session = props["sessionID"].as_str();
        match payload["type"].as_str().unwrap_or_default() {
            "permission.asked" => match permission(props, now) {
                Some(p) => self.add_permission(project, p),
                None => Effect::default(),
            },
            "question.asked" => match question(props, now) {
                Some(q) => self.add_question(project, q),
                None => Effect::default(),
            },
            kind @ ("permission.replied" | "question.replied" | "question.rejected") => {
                let answer = match kind {
                    "permission.replied" => props["reply"].as_str(),
                    "question.replied" => Some("reply"),
                    _ => Some("reject"),
                };
                let id = props["requestID"].as_str();
                Effect::changed(id.is_some_and(|id| self.resolve(project, id, now, answer)))
            }
            "session.created" | "session.updated" => self.session_seen(project, &props["info"]),
            "session.deleted" => match of_session.or(props["info"]["id"].as_str()) {
                Some(id) => self.session_deleted(project, id, now),
                None => Effect::default(),
            },
            "session.status" => match of_session {
                Some(id) => self.set_status(project, id, now, status(&props["status"])),
                None => Effect::default(),
            },
            "session.idle" => match of_session {
                Some(id) => self.set_status(project, id, now, SessionStatus::Idle),
                None => Effect::default(),
            },
            "session.error" => match of_session {
                Some(id) => {
                    self.touch_session(project, id, now).error = Some(session_error(&props["error"]));
                    Effect::changed(true)
                }
                None => Effect::default(),
            },
            "message.updated" => match props["info"]["sessionID"].as_str().or(of_session) {
                Some(id) => self.message_seen(project, id, &props["info"], now),
                None => Effect::default(),
            },
            // The busiest event (a tool's progress, a text part): read for finished tool calls.
            "message.part.updated" => {
                let part = &props["part"];
                match of_session.or(part["sessionID"].as_str()) {
                    Some(id) => {
                        let worded = self.words(project, id, part);
                        let said = self.said(project, id, now, tool_outcome(part));
                        Effect {
                            changed: said.changed || worded,
                            ..said
                        }
                    }
                    None => Effect::default(),
                }
            }
            _ => Effect::default(),
        }
    }

    /// A session as OpenCode now describes it (`info`), with the cost it newly shows.
    fn session_seen(&mut self, project: &str, info: &Value) -> Effect {
        let sessions = &mut self.project_mut(project).sessions;
        let old = info["id"].as_str().and_then(|id| sessions.get(id));
        let Some(s) = session_from_info(info, old) else {
            return Effect::default();
        };
        let cost = cost_seen(project, old, &s);
        sessions.insert(s.id.clone(), s);
        bound_sessions(sessions);
        let mut effect = Effect::changed(true);
        effect.costs.extend(cost);
        effect
    }

    /// A session deleted: its pending requests die with it.
    fn session_deleted(&mut self, project: &str, id: &str, now: u64) -> Effect {
        let pm = self.project_mut(project);
        let mut c = pm.sessions.remove(id).is_some();
        let cards: Vec<String> = pm
            .permissions
            .values()
            .filter(|p| p.session_id == id)
            .map(|p| p.id.clone())
            .chain(
                pm.questions
                    .values()
                    .filter(|q| q.session_id == id)
                    .map(|q| q.id.clone()),
            )
            .collect();
        for card in cards {
            c |= self.resolve(project, &card, now, None);
        }
        Effect::changed(c)
    }

    /// A message of session `id` (`info`): the model said something, maybe at a copied cost.
    fn message_seen(&mut self, project: &str, id: &str, info: &Value, now: u64) -> Effect {
        self.said(project, id, now, None);
        self.answering(project, id, info);
        let mut effect = Effect::changed(true);
        effect.costs.extend(self.copied_cost(project, id, info));
        effect
    }

    /// A message older than its session with a cost: a fork's copy of another session's answer
    /// (seen on OpenCode 1.18.33: the fork's `session.created` says cost 0, then its copied
    /// messages come as `message.updated` with their old `time.created` and cost, and no
    /// `session.updated` follows; the next one, or a list after a reconnect, says the sum). Its
    /// cost is taken into the session's known cost at once, as inherited, so that it is never
    /// counted as spend today (round four: forking counted the past cost again).
    fn copied_cost(&mut self, project: &str, id: &str, info: &Value) -> Option<crate::budget::CostSeen> {
        let cost = info["cost"].as_f64().filter(|c| *c > 0.0)?;
        let made = info["time"]["created"].as_u64()?;
        let message = info["id"].as_str()?;
        let s = self.project_mut(project).sessions.get_mut(id)?;
        if info["role"] != "assistant" || s.created_ms == 0 || made >= s.created_ms {
            return None;
        }
        if s.copied.iter().any(|m| m == message) {
            return None;
        }
        s.copied.push(message.to_string());
        let before = s.cost;
        let now = before.unwrap_or(0.0) + cost;
        s.cost = Some(now);
        Some(crate::budget::CostSeen {
            project: project.to_string(),
            session: id.to_string(),
            parent: s.parent_id.clone(),
            before,
            now,
            inherited: true,
        })
    }

    /// Replace what is known of `project` with the lists read after a (re)connect: cards that
    /// are no longer pending were answered during the gap.
    pub(crate) fn seed(&mut self, project: &str, seed: &Seed, now: u64) -> Effect {
        let mut effect = Effect {
            changed: true,
            ..Default::default()
        };
        let pm = self.project_mut(project);
        let old = std::mem::take(&mut pm.sessions);
        let mut sessions = HashMap::new();
        for info in &seed.sessions {
            let prev = info["id"].as_str().and_then(|id| old.get(id));
            if let Some(mut s) = session_from_info(info, prev) {
                // After a reconnect the list says what was spent meanwhile: the meter counts it.
                effect.costs.extend(cost_seen(project, prev, &s));
                s.status = status(&seed.statuses[&s.id]);
                sessions.insert(s.id.clone(), s);
            }
        }
        // Busy sessions the listing did not include (it may be limited) still show.
        if let Some(map) = seed.statuses.as_object() {
            for (id, st) in map {
                if !sessions.contains_key(id) {
                    let mut s = old.get(id).cloned().unwrap_or_else(|| Session::new(id, now));
                    s.status = status(st);
                    sessions.insert(id.clone(), s);
                }
            }
        }
        bound_sessions(&mut sessions);
        pm.sessions = sessions;
        let perms: Vec<Permission> = seed.permissions.iter().filter_map(|p| permission(p, now)).collect();
        let quests: Vec<Question> = seed.questions.iter().filter_map(|q| question(q, now)).collect();
        let gone: Vec<String> = pm
            .permissions
            .keys()
            .filter(|id| !perms.iter().any(|p| &p.id == *id))
            .chain(pm.questions.keys().filter(|id| !quests.iter().any(|q| &q.id == *id)))
            .cloned()
            .collect();
        for id in gone {
            self.resolve(project, &id, now, None);
        }
        for p in perms {
            effect.merge(self.add_permission(project, p));
        }
        for q in quests {
            effect.merge(self.add_question(project, q));
        }
        effect
    }
}

#[cfg(test)]
mod tests;
