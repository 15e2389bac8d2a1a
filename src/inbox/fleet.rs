//! The fleet's caps (issue 41, item 5): how many top sessions may be busy at once per user
//! (`max_busy_per_user`) and per project (`max_busy_per_project`), and how many of a user's
//! tasks may wait for review. The inbox knows which sessions are busy (OpenCode's own status);
//! this book knows who prompted each top session through the gateway (its "owner" for the
//! caps), and which were let through a moment ago and are not yet seen busy (so two prompts
//! released together cannot both take the last place). A prompt past a cap waits (its session
//! says `queued: …` on the board) or is refused: the pipeline decides (`pipeline/fleet_gate.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::model::{Effect, Model};
use super::{Inbox, SessionStatus, now_ms};
use crate::config::settings::Fleet;

/// How long a prompt let through counts as busy while OpenCode says nothing of its session.
const GRACE_MS: u64 = 15_000;
/// Owners kept, at most (the oldest go first).
const MAX_OWNERS: usize = 10_000;

/// Who prompted which top session, and which were let through when.
#[derive(Default)]
pub(crate) struct Book {
    owners: Mutex<HashMap<(String, String), (String, u64)>>,
}

/// `session`'s top session in `project` (itself when it has no known parent).
fn root_of(model: &Model, project: &str, session: &str) -> String {
    let mut at = session.to_string();
    let Some(p) = model.projects.get(project) else {
        return at;
    };
    for _ in 0..32 {
        match p.sessions.get(&at).and_then(|s| s.parent_id.clone()) {
            Some(parent) => at = parent,
            None => break,
        }
    }
    at
}

impl Inbox {
    /// Is there room for `user`'s prompt to `session` of `project` under `caps`? Else why not,
    /// in the words the board shows: "2 sessions of yours are busy (fleet.max_busy_per_user = 2)".
    pub(crate) fn fleet_room(&self, caps: &Fleet, user: &str, project: &str, session: &str) -> Result<(), String> {
        let now = now_ms();
        let model = self.lock();
        let this = (project.to_string(), root_of(&model, project, session));
        let mut busy: HashSet<(String, String)> = HashSet::new();
        for (name, p) in &model.projects {
            for s in p.sessions.values().filter(|s| !matches!(s.status, SessionStatus::Idle)) {
                busy.insert((name.clone(), root_of(&model, name, &s.id)));
            }
        }
        let owners = self.fleet.owners.lock().unwrap_or_else(|e| e.into_inner());
        // Let through a moment ago, and OpenCode has said nothing of it since: busy for the caps.
        let unheard = |(p, root): &(String, String), at: u64| {
            let heard = model
                .projects
                .get(p)
                .and_then(|m| m.sessions.get(root))
                .map_or(0, |s| s.last_activity_ms);
            now.saturating_sub(at) < GRACE_MS && heard < at
        };
        busy.extend((owners.iter().filter(|(k, (_, at))| unheard(k, *at))).map(|(k, _)| k.clone()));
        drop(model);
        busy.remove(&this);
        if let Some(max) = caps.max_busy_per_user {
            let mine = busy
                .iter()
                .filter(|k| owners.get(*k).is_some_and(|(u, _)| u == user))
                .count();
            if mine >= max {
                let sessions = if mine == 1 {
                    "session of yours is"
                } else {
                    "sessions of yours are"
                };
                return Err(format!("{mine} {sessions} busy (fleet.max_busy_per_user = {max})"));
            }
        }
        if let Some(max) = caps.max_busy_per_project {
            let here = busy.iter().filter(|(p, _)| p == project).count();
            if here >= max {
                let sessions = if here == 1 { "session of" } else { "sessions of" };
                return Err(format!(
                    "{here} {sessions} {project} busy (fleet.max_busy_per_project = {max})"
                ));
            }
        }
        Ok(())
    }

    /// `user`'s prompt to `session` was let through: its top session is theirs, and busy from
    /// now for the caps; it waits no more.
    pub(crate) fn fleet_admitted(&self, user: &str, project: &str, session: &str) {
        let root = root_of(&self.lock(), project, session);
        {
            let mut owners = self.fleet.owners.lock().unwrap_or_else(|e| e.into_inner());
            owners.insert((project.to_string(), root), (user.to_string(), now_ms()));
            if owners.len() > MAX_OWNERS {
                let oldest = owners.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone());
                oldest.map(|k| owners.remove(&k));
            }
        }
        self.fleet_queued(project, session, None);
    }

    /// Who prompted `session`'s top session through the gateway last.
    pub(crate) fn fleet_owner(&self, project: &str, session: &str) -> Option<String> {
        let root = root_of(&self.lock(), project, session);
        let owners = self.fleet.owners.lock().unwrap_or_else(|e| e.into_inner());
        owners.get(&(project.to_string(), root)).map(|(u, _)| u.clone())
    }

    /// `session` waits for room (`Some(why)`), or no longer does: shown on its card.
    pub(crate) fn fleet_queued(&self, project: &str, session: &str, why: Option<&str>) {
        self.update(|model, _| {
            let s = model
                .projects
                .get_mut(project)
                .and_then(|p| p.sessions.get_mut(session));
            let Some(s) = s else {
                return Effect::changed(false);
            };
            let queued = why.map(|w| format!("queued: {w}"));
            let changed = s.queued != queued;
            s.queued = queued;
            Effect::changed(changed)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(inbox: &Inbox, v: serde_json::Value) {
        inbox.update(|m, now| m.apply("web", &v, now));
    }

    fn session(inbox: &Inbox, id: &str, parent: Option<&str>) {
        let info = serde_json::json!({"id": id, "parentID": parent, "title": id, "time": {"created": 1, "updated": 1}});
        event(
            inbox,
            serde_json::json!({"type": "session.created", "properties": {"info": info}}),
        );
    }

    fn status(inbox: &Inbox, id: &str, kind: &str) {
        let props = serde_json::json!({"sessionID": id, "status": {"type": kind}});
        event(
            inbox,
            serde_json::json!({"type": "session.status", "properties": props}),
        );
    }

    #[test]
    fn a_users_busy_top_sessions_count_once_with_their_children_and_a_prompt_just_let_through() {
        let inbox = super::super::detached();
        let caps = Fleet {
            max_busy_per_user: Some(1),
            ..Fleet::default()
        };
        for (id, parent) in [("ses_a", None), ("ses_b", None), ("ses_a1", Some("ses_a"))] {
            session(&inbox, id, parent);
        }
        assert_eq!(inbox.fleet_room(&caps, "ann", "web", "ses_b"), Ok(()));
        // Let through, nothing heard yet: busy for the caps already (two prompts released at once
        // cannot both take the last place).
        inbox.fleet_admitted("ann", "web", "ses_a");
        let why = "1 session of yours is busy (fleet.max_busy_per_user = 1)";
        assert_eq!(inbox.fleet_room(&caps, "ann", "web", "ses_b"), Err(why.into()));
        // Another prompt to the same tree is not held back by itself; another user is not capped.
        assert_eq!(inbox.fleet_room(&caps, "ann", "web", "ses_a1"), Ok(()));
        assert_eq!(inbox.fleet_room(&caps, "bob", "web", "ses_b"), Ok(()));
        // OpenCode says it went idle: room again. Its child busy: the tree is busy, counted once.
        std::thread::sleep(std::time::Duration::from_millis(2));
        status(&inbox, "ses_a", "idle");
        assert_eq!(inbox.fleet_room(&caps, "ann", "web", "ses_b"), Ok(()));
        status(&inbox, "ses_a1", "busy");
        assert_eq!(inbox.fleet_room(&caps, "ann", "web", "ses_b"), Err(why.into()));
        assert_eq!(inbox.fleet_owner("web", "ses_a1").as_deref(), Some("ann"));
        // The project's cap counts everyone's.
        let project = Fleet {
            max_busy_per_project: Some(1),
            ..Fleet::default()
        };
        assert_eq!(
            inbox.fleet_room(&project, "bob", "web", "ses_b"),
            Err("1 session of web busy (fleet.max_busy_per_project = 1)".into())
        );
        assert_eq!(inbox.fleet_room(&project, "bob", "api", "ses_x"), Ok(()));
    }

    #[test]
    fn the_board_says_why_a_session_waits_until_it_no_longer_does() {
        let inbox = super::super::detached();
        session(&inbox, "ses_q", None);
        let mut changes = inbox.changes();
        inbox.fleet_queued("web", "ses_q", Some("1 session of yours is busy"));
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();
        let queued = |inbox: &Inbox| inbox.view(|_| true)[0].sessions[0].queued.clone();
        assert_eq!(queued(&inbox).as_deref(), Some("queued: 1 session of yours is busy"));
        // The same words again wake no page.
        inbox.fleet_queued("web", "ses_q", Some("1 session of yours is busy"));
        assert!(!changes.has_changed().unwrap());
        inbox.fleet_admitted("ann", "web", "ses_q");
        assert_eq!(queued(&inbox), None);
    }
}
