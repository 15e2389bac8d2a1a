//! PTY connect tickets. A browser cannot set headers on a WebSocket, so OpenCode's web UI first
//! asks `POST /pty/{id}/connect-token` (authenticated) for a single-use ticket, then opens
//! `/pty/{id}/connect?ticket=…`, which OpenCode lets through without Basic auth. The gateway
//! records each ticket it relays for the user and project that asked, and accepts a ticket-only
//! WebSocket as that user for that project, once, within the ticket's life.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// OpenCode's tickets live 60 s.
const TICKET_LIFE: Duration = Duration::from_secs(60);
const MAX_TICKETS: usize = 10_000;

struct Ticket {
    user: Arc<str>,
    project: Arc<str>,
    expires: Instant,
}

#[derive(Default)]
pub struct Tickets {
    map: Mutex<HashMap<String, Ticket>>,
}

impl Tickets {
    pub fn insert(&self, ticket: &str, user: Arc<str>, project: Arc<str>) {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_TICKETS {
            map.retain(|_, t| t.expires > now);
        }
        if map.len() < MAX_TICKETS {
            map.insert(
                ticket.to_string(),
                Ticket {
                    user,
                    project,
                    expires: now + TICKET_LIFE,
                },
            );
        }
    }

    /// The (user, project) a live ticket was issued to; the ticket is used up.
    pub fn take(&self, ticket: &str) -> Option<(Arc<str>, Arc<str>)> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let t = map.remove(ticket)?;
        (t.expires > Instant::now()).then_some((t.user, t.project))
    }
}

/// The ticket in a connect-token response body (`{"ticket":"…","expires_in":60}`).
pub fn ticket_from_body(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("ticket")?.as_str().map(str::to_string)
}

/// `POST /pty/{id}/connect-token` or `/api/pty/{id}/connect-token`.
pub fn is_connect_token_path(path: &str) -> bool {
    let rest = path.strip_prefix("/api").unwrap_or(path);
    let Some(rest) = rest.strip_prefix("/pty/") else {
        return false;
    };
    matches!(rest.split_once('/'), Some((id, "connect-token")) if !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_used_once() {
        let t = Tickets::default();
        t.insert("abc", "alice".into(), "web".into());
        assert_eq!(
            t.take("abc").map(|(u, p)| (u.to_string(), p.to_string())),
            Some(("alice".into(), "web".into()))
        );
        assert!(t.take("abc").is_none());
        assert!(t.take("other").is_none());
    }

    #[test]
    fn reads_the_ticket_and_knows_the_route() {
        assert_eq!(
            ticket_from_body(br#"{"ticket":"a-b","expires_in":60}"#).as_deref(),
            Some("a-b")
        );
        assert_eq!(ticket_from_body(b"nope"), None);
        assert!(is_connect_token_path("/pty/pty_1/connect-token"));
        assert!(is_connect_token_path("/api/pty/pty_1/connect-token"));
        assert!(!is_connect_token_path("/pty/pty_1/connect"));
        assert!(!is_connect_token_path("/pty//connect-token"));
    }
}
