//! PTY connect tickets. A browser cannot set headers on a WebSocket, so OpenCode's web UI first
//! asks `POST /pty/{id}/connect-token` (authenticated) for a single-use ticket, then opens
//! `/pty/{id}/connect?ticket=…`, which OpenCode lets through without Basic auth. The gateway
//! records each ticket it relays for the user and project that asked, and accepts a ticket-only
//! WebSocket as that user for that project, once, within the ticket's life.

use std::sync::Arc;
use std::time::Duration;

use crate::support::ttl_map::TtlMap;

/// OpenCode's tickets live 60 s.
const TICKET_LIFE: Duration = Duration::from_secs(60);
const MAX_TICKETS: usize = 10_000;

/// Ticket → (user, project) it was relayed to.
pub struct Tickets {
    map: TtlMap<String, (Arc<str>, Arc<str>)>,
}

impl Default for Tickets {
    fn default() -> Self {
        Tickets {
            map: TtlMap::new(MAX_TICKETS, TICKET_LIFE),
        }
    }
}

impl Tickets {
    pub(crate) fn insert(&self, ticket: &str, user: Arc<str>, project: Arc<str>) {
        self.map.insert(ticket.to_string(), (user, project));
    }

    /// The user a live ticket was issued to for `project`; the ticket is used up. A ticket
    /// presented for another project is refused and left as it is.
    pub(crate) fn take(&self, ticket: &str, project: &str) -> Option<Arc<str>> {
        self.map
            .remove_if(ticket, |(_, p)| &**p == project)
            .map(|(user, _)| user)
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

    #[test]
    fn a_ticket_is_used_once() {
        let t = Tickets::default();
        t.insert("abc", "alice".into(), "web".into());
        assert!(t.take("abc", "api").is_none(), "another project's ticket is refused");
        assert_eq!(
            t.take("abc", "web").as_deref(),
            Some("alice"),
            "and left for its own project"
        );
        assert!(t.take("abc", "web").is_none(), "used once");
        assert!(t.take("other", "web").is_none());
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
