//! PTY connect tickets. A browser cannot set headers on a WebSocket, so OpenCode's web UI first
//! asks `POST /pty/{id}/connect-token` (authenticated) for a single-use ticket, then opens
//! `/pty/{id}/connect?ticket=…`, which OpenCode lets through without Basic auth. The gateway
//! records each ticket it relays for the user and project that asked, and accepts a ticket-only
//! WebSocket as that user for that project, once, within the ticket's life.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::auth::once::{OnceKind, Seen};
use crate::store::{PutOnce, Store};

/// OpenCode's tickets live 60 s.
const TICKET_LIFE: Duration = Duration::from_secs(60);
const MAX_TICKETS: usize = 10_000;

/// Who a ticket was relayed to.
#[derive(Debug, Serialize, Deserialize)]
struct RelayedTo {
    user: String,
    project: String,
}

/// Tickets relayed, in the state database (a browser's WebSocket may reach another gateway on
/// the same database than its `connect-token` request did), by keyed digest.
pub struct Tickets {
    key: [u8; 32],
    once: Arc<OnceKind<RelayedTo>>,
}

impl Tickets {
    pub(crate) fn new(store: Arc<dyn Store>, key: [u8; 32]) -> Tickets {
        Tickets {
            key,
            once: Arc::new(OnceKind::new(store, "pty-ticket", TICKET_LIFE, MAX_TICKETS)),
        }
    }

    fn digest(&self, ticket: &str) -> [u8; 32] {
        crate::auth::tokens::keyed(&self.key, &[b"pty-ticket\0", ticket.as_bytes()])
    }

    /// Remember `ticket` for `user` and `project`. Not kept (a full table, a database down): the
    /// ticket's WebSocket is refused, and said here.
    pub(crate) async fn insert(&self, ticket: &str, user: &str, project: &str) {
        let value = RelayedTo {
            user: user.to_string(),
            project: project.to_string(),
        };
        match self.once.put(self.digest(ticket), value).await {
            Ok(PutOnce::Kept) => {}
            Ok(other) => {
                tracing::warn!(project, outcome = ?other, "a terminal ticket was not kept: its terminal will be refused")
            }
            Err(_) => {} // said by `store::blocking`
        }
    }

    /// The user a live ticket was issued to for `project`; the ticket is used up. A ticket
    /// presented for another project is refused and left as it is.
    pub(crate) async fn take(&self, ticket: &str, project: &str) -> Option<Arc<str>> {
        let wanted = project.to_string();
        let seen = self
            .once
            .take_if(self.digest(ticket), move |t| t.project == wanted)
            .await
            .ok()?;
        match seen {
            Seen::Live(t) if t.project == project => Some(t.user.into()),
            _ => None,
        }
    }
}

/// The ticket in a connect-token response body (`{"ticket":"…","expires_in":60}`).
pub(crate) fn ticket_from_body(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("ticket")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ticket_is_used_once() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(crate::store::sqlite::SqliteStore::open(&dir.path().join("g.db")).unwrap());
        let t = Tickets::new(store.clone(), [3; 32]);
        t.insert("abc", "alice", "web").await;
        assert!(
            t.take("abc", "api").await.is_none(),
            "another project's ticket is refused"
        );
        assert_eq!(
            t.take("abc", "web").await.as_deref(),
            Some("alice"),
            "and left for its own project"
        );
        assert!(t.take("abc", "web").await.is_none(), "used once");
        assert!(t.take("other", "web").await.is_none());
        // Another gateway on the same store (same key) takes a ticket this one relayed.
        t.insert("xyz", "bob", "web").await;
        let other = Tickets::new(store, [3; 32]);
        assert_eq!(other.take("xyz", "web").await.as_deref(), Some("bob"));
    }

    #[test]
    fn reads_the_ticket() {
        assert_eq!(
            ticket_from_body(br#"{"ticket":"a-b","expires_in":60}"#).as_deref(),
            Some("a-b")
        );
        assert_eq!(ticket_from_body(b"nope"), None);
    }
}
