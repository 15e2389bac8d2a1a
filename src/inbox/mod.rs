//! The inbox: what every project's OpenCode server is waiting for (permission requests and
//! questions), its sessions and its server's state, for the phone "control room" pages.
//!
//! - `model`: the data and the one reducer (events and re-seeds in, cards out); pure.
//! - `view`: what a page reads, filtered by the viewer's grants.
//! - `watch`: one `GET /global/event` subscription per running server (not per viewer), re-seeded
//!   from the server's lists after every (re)connect, reconnecting with backoff.
//! - `reconcile`: every second, which servers run and which projects they serve; starts and stops
//!   watchers as the state is reloaded or project sets change.
//! - `reply`: answering a card or aborting a session, upstream, with the gateway's credential.
//!
//! Roles are the caller's business: the pages check them before calling `reply_*`.

mod cards;
pub mod control;
mod model;
mod parse;
mod reconcile;
mod reply;
mod view;
mod watch;

use std::sync::{Arc, Mutex};

use tokio::sync::watch as tokio_watch;

pub use model::{
    CardKind, NewCard, Permission, Question, QuestionItem, QuestionOption, Resolution, Resolved, ServerState, Session,
    SessionStatus, Tokens,
};
pub use reply::{By, InboxError, Outcome, Reply};
pub use view::{Card, PermissionCard, ProjectView, QuestionCard};

use crate::gateway::Gateway;
use model::{Effect, Model};

pub struct Inbox {
    model: Mutex<Model>,
    changes: tokio_watch::Sender<u64>,
    notify: crate::notify::Queue,
    /// Upstream event streams open now (one per running server).
    pub(crate) subscriptions: std::sync::atomic::AtomicUsize,
}

/// The User-Agent of the inbox's requests upstream (subscriptions, lists, replies), so upstream
/// logs (and test stand-ins) can tell them from clients' requests.
pub const INBOX_AGENT: &str = "opencode-gateway-inbox";

/// Milliseconds since the Unix epoch (the unit OpenCode uses for times).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Inbox {
    pub fn new() -> Inbox {
        Inbox {
            model: Mutex::new(Model::default()),
            changes: tokio_watch::Sender::new(0),
            notify: crate::notify::Queue::new(),
            subscriptions: Default::default(),
        }
    }

    /// The projects `may_see` allows (the page passes the user's grants), sorted by name, each
    /// with its server state, sessions, pending cards and recently resolved requests.
    pub fn view(&self, may_see: impl Fn(&str) -> bool) -> Vec<ProjectView> {
        let model = self.lock();
        view::build(&model, may_see, now_ms())
    }

    /// A counter that goes up on every change (for a page's live stream: wait for `changed()`,
    /// then call [`Inbox::view`] again).
    pub fn changes(&self) -> tokio_watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Upstream event streams open now: one per running OpenCode server, whatever the viewers.
    pub fn subscriptions(&self) -> usize {
        self.subscriptions.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Notifications that could not be queued (the queue was full).
    pub fn notifications_dropped(&self) -> u64 {
        self.notify.dropped()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Change the model; bump the counter and queue notifications for new cards.
    fn update(&self, f: impl FnOnce(&mut Model, u64) -> Effect) {
        let effect = {
            let mut model = self.lock();
            f(&mut model, now_ms())
        };
        if effect.changed {
            self.changes.send_modify(|n| *n += 1);
        }
        for card in effect.new_cards {
            self.notify.push(card);
        }
    }
}

impl Default for Inbox {
    fn default() -> Self {
        Inbox::new()
    }
}

/// Start the inbox's background tasks (the watcher reconciler and the notifier); they end with
/// the gateway's shutdown.
pub fn start(gw: &Arc<Gateway>) {
    tokio::spawn(reconcile::run(gw.clone()));
    if let Some(rx) = gw.inbox.notify.take_receiver() {
        tokio::spawn(crate::notify::run(gw.clone(), rx));
    }
}

/// The inbox as JSON (for the control socket's `GET /inbox[?project=NAME]`): every project, or
/// only the one named, through the same filter a page uses.
pub fn to_json(inbox: &Inbox, only: Option<&str>) -> serde_json::Value {
    let projects = inbox.view(|p| only.is_none_or(|o| o == p));
    serde_json::json!({ "projects": projects, "notifications_dropped": inbox.notifications_dropped(), "subscriptions": inbox.subscriptions() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_bumps_the_counter_and_new_cards_are_queued_for_notification() {
        let inbox = Inbox::new();
        let mut changes = inbox.changes();
        let mut notes = inbox.notify.take_receiver().unwrap();
        let asked = serde_json::json!({"type": "permission.asked", "properties": {"id": "per_1", "sessionID": "ses_1",
            "permission": "bash", "patterns": ["ls"], "always": ["ls *"], "metadata": {"command": "ls"}}});
        inbox.update(|m, now| m.apply("web", &asked, now));
        assert!(changes.has_changed().unwrap());
        assert_eq!(*changes.borrow_and_update(), 1);
        let note = notes.try_recv().unwrap();
        assert_eq!((note.project.as_str(), note.tool.as_str()), ("web", "bash"));
        // An event that changes nothing does not wake the pages.
        let noise = serde_json::json!({"type": "message.part.delta", "properties": {}});
        inbox.update(|m, now| m.apply("web", &noise, now));
        assert!(!changes.has_changed().unwrap());
        assert!(notes.try_recv().is_err());
        let view = inbox.view(|p| p == "web");
        assert_eq!(view[0].pending[0].id(), "per_1");
        assert!(inbox.view(|p| p == "api").is_empty());
        let json = to_json(&inbox, Some("nope"));
        assert_eq!(json["projects"], serde_json::json!([]));
    }
}
