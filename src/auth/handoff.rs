//! Handoff tickets in flight: the login host mints one for a logged-in browser and a project host
//! redeems it once (web/handoff.rs has both pages). They are single-use records in the state
//! database: behind a load balancer the project host's request may reach another gateway than
//! the login host's did. Only a digest of a ticket is a key.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::auth::once::OnceKind;
use crate::store::Store;

const MAX_TICKETS: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Ticket {
    pub(crate) user: String,
    /// The login session it was minted in (the project host's session is its child).
    pub(crate) login_id: String,
    pub(crate) login_expires_at: i64,
    /// The project host it is for; empty: the gateway's named host (`web/handoff_named.rs`).
    pub(crate) project: String,
    pub(crate) path: String,
    /// The project host's handoff state this ticket answers (its browser holds it as a cookie).
    pub(crate) state: [u8; 32],
}

/// Handoff tickets in flight, by digest.
pub struct Handoffs {
    pub(crate) tickets: Arc<OnceKind<Ticket>>,
}

impl Handoffs {
    /// Tickets live `ttl` (`limits.handoff_ttl`).
    pub(crate) fn new(store: Arc<dyn Store>, ttl: Duration) -> Handoffs {
        Handoffs {
            tickets: Arc::new(OnceKind::new(store, "handoff", ttl, MAX_TICKETS)),
        }
    }
}
