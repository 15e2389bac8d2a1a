//! The inbox: what every project's OpenCode server is waiting for (permission requests and
//! questions), its sessions and its server's state, for the phone "control room" pages.
//!
//! - `model`: the data and the one reducer (events and re-seeds in, cards out); pure.
//! - `view`: what a page reads, filtered by the viewer's grants.
//! - `watch`: one `GET /global/event` subscription per running server (not per viewer), re-seeded
//!   from the server's lists after every (re)connect, reconnecting with backoff.
//! - `reconcile`: every second, which servers run and which projects they serve; starts and stops
//!   watchers as the state is reloaded or project sets change.
//! - `reply`: answering a card or aborting a session: a user's act on the proxy's own road
//!   ([`Road`], which the pipeline implements), the control socket's with the gateway's credential.
//! - `queue`: new cards waiting for the notifier (`notify`, above the inbox, takes them).
//!
//! The inbox knows nothing of the running gateway: it is built with its [`Parts`] (the projects
//! now, the upstream client, the shutdown), which the gateway hands in (`gateway/inbox.rs`).
//!
//! Roles are the caller's business: the pages check them before calling `reply_*`.

mod cards;
pub mod control;
mod fleet;
mod guard;
mod model;
mod parse;
mod paths;
mod policy;
mod queue;
mod reconcile;
mod reply;
mod streak;
mod turns;
mod view;
mod watch;
mod words;

use std::sync::{Arc, Mutex};

use tokio::sync::watch as tokio_watch;
use tokio_util::sync::CancellationToken;

pub(crate) use model::{
    Alert, AlertKind, CardKind, Flag, FlagWhy, NewCard, Notice, QuestionItem, Resolution, Resolved, ServerState,
    Session, SessionStatus,
};
pub(crate) use paths::Asked;
pub(crate) use queue::Queue;
pub(crate) use reply::{Call, InboxError, Outcome, Refusal, Reply, Road, Trip, check_id};
pub(crate) use turns::TurnEnd;
pub(crate) use view::{Card, ProjectView};

use crate::upstream::endpoint::Endpoint;
use crate::upstream::supervise::Status;
use model::{Effect, Model};

pub struct Inbox {
    model: Mutex<Model>,
    /// The gateway's spend meter (a part of its own, `Gateway::meter`): the inbox feeds it the
    /// costs and turn ends its model reads, and its guard reads it (issue 25).
    meter: Arc<crate::budget::Meter>,
    /// Sessions over a budget or running away, for the guard to stop or report (`guard.rs`).
    stops: tokio::sync::mpsc::UnboundedSender<guard::Stop>,
    stops_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<guard::Stop>>>,
    changes: tokio_watch::Sender<u64>,
    notify: Queue,
    /// Upstream event streams open now (one per running server).
    pub(crate) subscriptions: std::sync::atomic::AtomicUsize,
    /// Sessions under a permission policy, and their requests to judge (`policy.rs`).
    desk: policy::Desk,
    /// Turn ends, for the gateway's trigger runs (`turns.rs`).
    turns: turns::Turns,
    /// Who prompted which top session, for the fleet's caps (`fleet.rs`).
    fleet: fleet::Book,
    parts: Parts,
}

/// What the inbox needs of the running gateway, handed in when the gateway builds it.
pub(crate) struct Parts {
    /// The projects now (reloads and project-set changes swap them).
    pub projects: Arc<dyn Projects>,
    /// How long a connection to a project's server may take (`limits.upstream_connect_timeout`):
    /// event streams, lists and the control socket's answers go on the server's own pool, the
    /// road proxied requests take.
    pub connect_timeout: std::time::Duration,
    /// The gateway's shutdown: the inbox's tasks end with it.
    pub shutdown: CancellationToken,
    /// The audit trail, for what the inbox does on its own (a session stopped for its budget).
    pub audit: crate::audit::Audit,
    /// The spend meter the inbox feeds (the same one the pipeline and the pages ask).
    pub meter: Arc<crate::budget::Meter>,
}

/// The projects the gateway serves now, as the inbox needs them.
pub(crate) trait Projects: Send + Sync {
    /// Every project.
    fn all(&self) -> Vec<Served>;
    /// The project named `name`, if there is one.
    fn get(&self, name: &str) -> Option<Served>;
    /// The `[[policy]]` named `name` now (reloads apply).
    fn policy(&self, _name: &str) -> Option<Arc<crate::config::permissions::PermissionPolicy>> {
        None
    }
}

/// A project: its name, the directory its server knows it by, where that server is, and its
/// spending limits.
pub(crate) struct Served {
    pub name: Arc<str>,
    pub directory: Option<String>,
    pub server: Server,
    pub budget: crate::config::settings::Budget,
    /// `[budget] user_day_usd`: one user's daily limit, across projects.
    pub user_day_usd: Option<f64>,
}

/// A project's OpenCode server, now.
pub enum Server {
    /// An external server: always there to be asked (its watcher says whether it answers).
    External(Arc<Endpoint>),
    /// A server the gateway spawns, and what its supervisor says of it.
    Spawned(Status),
}

/// The User-Agent of the inbox's requests upstream (subscriptions, lists, replies), so upstream
/// logs (and test stand-ins) can tell them from clients' requests.
pub const INBOX_AGENT: &str = "opencode-gateway-inbox";

/// Milliseconds since the Unix epoch (the unit OpenCode uses for times).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Inbox {
    pub(crate) fn new(parts: Parts) -> Inbox {
        let (stops, stops_rx) = tokio::sync::mpsc::unbounded_channel();
        Inbox {
            stops,
            stops_rx: Mutex::new(Some(stops_rx)),
            model: Mutex::new(Model::default()),
            meter: parts.meter.clone(),
            changes: tokio_watch::Sender::new(0),
            notify: Queue::new(),
            subscriptions: Default::default(),
            desk: Default::default(),
            turns: Default::default(),
            fleet: Default::default(),
            parts,
        }
    }

    /// The projects `may_see` allows (the page passes the user's grants), sorted by name, each
    /// with its server state, sessions, pending cards and recently resolved requests.
    pub(crate) fn view(&self, may_see: impl Fn(&str) -> bool) -> Vec<ProjectView> {
        let model = self.lock();
        view::build(&model, may_see, now_ms())
    }

    /// A counter that goes up on every change (for a page's live stream: wait for `changed()`,
    /// then call [`Inbox::view`] again).
    pub(crate) fn changes(&self) -> tokio_watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Something the pages show besides the inbox's model changed (an acceptance test's outcome):
    /// the pages' live streams fetch their content again.
    pub(crate) fn changed_elsewhere(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    /// Upstream event streams open now: one per running OpenCode server, whatever the viewers.
    pub(crate) fn subscriptions(&self) -> usize {
        self.subscriptions.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Notifications that could not be queued (the queue was full).
    pub(crate) fn notifications_dropped(&self) -> u64 {
        self.notify.dropped()
    }

    /// New cards and alerts, for the notifier: once (the first caller gets the receiving end).
    pub(crate) fn notices(&self) -> Option<tokio::sync::mpsc::Receiver<Notice>> {
        self.notify.take_receiver()
    }

    /// Tell people of `alert` as the guard tells of its own (the notifier, Web Push).
    pub(crate) fn tell(&self, alert: Alert) {
        self.notify.push(Notice::Alert(alert));
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
        if !effect.costs.is_empty() {
            let day = crate::budget::meter::today();
            for cost in &effect.costs {
                self.meter.seen(cost, day);
                // Nothing was spent: nothing to alert about or stop.
                if !cost.inherited {
                    self.judge_spend(cost, day);
                }
            }
        }
        for repeat in &effect.repeats {
            self.judge_repeat(repeat);
        }
        for (project, session) in &effect.ended {
            self.meter.turn_ended(project, session);
            self.tell_turn_end(project, session);
        }
        for card in effect.new_cards {
            if card.kind == CardKind::Permission {
                self.judge_permission(&card.project, &card.id);
            }
            self.notify.push(Notice::Card(card));
        }
    }
}

/// Start the inbox's background tasks (the watcher reconciler, the budget guard, which stops
/// sessions through `guard_road`: the gateway's road under the guard's grants); they end with
/// the gateway's shutdown. The notifier, which takes [`Inbox::new_cards`], is started by the
/// gateway.
pub(crate) fn start(inbox: &Arc<Inbox>, guard_road: Box<dyn Road>) {
    tokio::spawn(reconcile::run(inbox.clone()));
    let taken = inbox.stops_rx.lock().unwrap_or_else(|e| e.into_inner()).take();
    let acts = inbox.desk.rx.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let (Some(rx), Some(acts)) = (taken, acts) {
        tokio::spawn(guard::run(inbox.clone(), rx, acts, guard_road));
    }
}

/// The inbox as JSON (for the control socket's `GET /inbox[?project=NAME]`): every project, or
/// only the one named, through the same filter a page uses.
pub(crate) fn to_json(inbox: &Inbox, only: Option<&str>) -> serde_json::Value {
    let projects = inbox.view(|p| only.is_none_or(|o| o == p));
    serde_json::json!({ "projects": projects, "notifications_dropped": inbox.notifications_dropped(), "subscriptions": inbox.subscriptions() })
}

/// An inbox whose gateway serves nothing, for the inbox's own tests.
#[cfg(test)]
pub(crate) fn detached() -> Inbox {
    struct NoProjects;
    impl Projects for NoProjects {
        fn all(&self) -> Vec<Served> {
            vec![]
        }
        fn get(&self, _: &str) -> Option<Served> {
            None
        }
    }
    Inbox::new(Parts {
        projects: Arc::new(NoProjects),
        connect_timeout: std::time::Duration::from_secs(1),
        shutdown: CancellationToken::new(),
        audit: crate::audit::Audit::off(),
        meter: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_bumps_the_counter_and_new_cards_are_queued_for_notification() {
        let inbox = detached();
        let mut changes = inbox.changes();
        let mut notes = inbox.notices().unwrap();
        let asked = serde_json::json!({"type": "permission.asked", "properties": {"id": "per_1", "sessionID": "ses_1",
            "permission": "bash", "patterns": ["ls"], "always": ["ls *"], "metadata": {"command": "ls"}}});
        inbox.update(|m, now| m.apply("web", &asked, now));
        assert!(changes.has_changed().unwrap());
        assert_eq!(*changes.borrow_and_update(), 1);
        let Notice::Card(note) = notes.try_recv().unwrap() else {
            panic!("a card")
        };
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
