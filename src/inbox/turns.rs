//! Turn ends, told to whoever listens (the gateway's trigger runs, `gateway/trigger_runs.rs`): a
//! session went from busy to idle, and whether its turn failed, by what the inbox saw of it
//! during the turn: the guard's flag (a runaway, a spent budget) or OpenCode's own
//! `session.error` (a provider's error, an abort).

use std::sync::Mutex;

use tokio::sync::mpsc::{Receiver, Sender, channel};

use super::{Inbox, Session};

/// Turn ends waiting for the listener; past this many, new ones are dropped (and logged).
const QUEUED: usize = 256;

/// A session's turn ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TurnEnd {
    pub project: String,
    pub session: String,
    /// Why it failed, in words fit for a project's users (never a tool's output); `None`: it did
    /// not.
    pub failure: Option<String>,
}

pub(super) struct Turns {
    tx: Sender<TurnEnd>,
    rx: Mutex<Option<Receiver<TurnEnd>>>,
}

impl Default for Turns {
    fn default() -> Turns {
        let (tx, rx) = channel(QUEUED);
        Turns {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

/// How a session's turn went, by what it carries at its end.
pub(super) fn failure_of(s: &Session) -> Option<String> {
    if let Some(flag) = &s.flag {
        let how = if flag.stopped || flag.stopping {
            "stopped"
        } else {
            "flagged"
        };
        return Some(format!("{how} by the gateway's guard: {}", flag.says));
    }
    s.error.clone()
}

impl Inbox {
    /// The turn ends, for their one listener: the first caller gets the receiving end.
    pub(crate) fn turn_ends(&self) -> Option<Receiver<TurnEnd>> {
        self.turns.rx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Tell the listener that `session`'s turn ended (dropped, and said, when it lags far behind).
    pub(super) fn tell_turn_end(&self, project: &str, session: &str) {
        let failure = (self.lock().projects.get(project))
            .and_then(|p| p.sessions.get(session))
            .and_then(failure_of);
        let end = TurnEnd {
            project: project.to_string(),
            session: session.to_string(),
            failure,
        };
        if self.turns.tx.try_send(end).is_err() && !self.turns.tx.is_closed() {
            tracing::warn!(project, session, "a turn's end was not told: its listener lags behind");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::TurnEnd;

    fn status(session: &str, kind: &str) -> serde_json::Value {
        json!({"type": "session.status", "properties": {"sessionID": session, "status": {"type": kind}}})
    }

    #[test]
    fn a_turn_end_says_the_error_that_ended_it_and_the_next_turn_starts_clean() {
        let inbox = crate::inbox::detached();
        let mut ends = inbox.turn_ends().expect("the first caller gets them");
        assert!(inbox.turn_ends().is_none(), "one listener");
        let apply = |event: serde_json::Value| inbox.update(|m, now| m.apply("web", &event, now));
        apply(status("ses_1", "busy"));
        apply(json!({"type": "session.error", "properties": {"sessionID": "ses_1",
            "error": {"name": "APIError", "data": {"message": "rate limited\nretry later"}}}}));
        apply(status("ses_1", "idle"));
        assert_eq!(
            ends.try_recv().unwrap(),
            TurnEnd {
                project: "web".into(),
                session: "ses_1".into(),
                failure: Some("APIError: rate limited".into()),
            }
        );
        apply(status("ses_1", "busy"));
        apply(json!({"type": "session.idle", "properties": {"sessionID": "ses_1"}}));
        assert_eq!(ends.try_recv().unwrap().failure, None, "the next turn did not fail");
        // An idle session going idle again is no turn's end.
        apply(status("ses_1", "idle"));
        assert!(ends.try_recv().is_err());
    }

    /// The session goes idle on the guard's abort before the abort's own answer arrives: the
    /// turn still ended by the guard's stop (seen in CI as "flagged" when only `stopped` counted).
    #[test]
    fn a_turn_the_guard_stopped_failed_with_the_guards_words() {
        let inbox = crate::inbox::detached();
        let mut ends = inbox.turn_ends().unwrap();
        inbox.update(|m, now| m.apply("web", &status("ses_2", "busy"), now));
        inbox.update(|m, now| {
            let flag = crate::inbox::Flag {
                why: crate::inbox::FlagWhy::SameFailure,
                stopped: false,
                stopping: true,
                says: "retried the same failure twice".into(),
                detail: "npm ERR! secret output".into(),
                at_ms: now,
            };
            crate::inbox::model::Effect::changed(m.flag("web", "ses_2", flag))
        });
        inbox.update(|m, now| m.apply("web", &status("ses_2", "idle"), now));
        let failure = ends.try_recv().unwrap().failure.unwrap();
        assert_eq!(
            failure,
            "stopped by the gateway's guard: retried the same failure twice"
        );
        assert!(!failure.contains("npm ERR"), "the tool's output stays out");
    }
}
