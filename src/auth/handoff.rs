//! Handoff tickets in flight: the login host mints one for a logged-in browser and a project host
//! redeems it once (web/handoff.rs has both pages). Only a digest of a ticket is a key.

use std::sync::Arc;
use std::time::Duration;

use crate::auth::sessions::Live;
use crate::support::ttl_map::TtlMap;

const MAX_TICKETS: usize = 10_000;

pub(crate) struct Ticket {
    pub(crate) login: Arc<Live>,
    pub(crate) project: String,
    pub(crate) path: String,
    /// The project host's handoff state this ticket answers (its browser holds it as a cookie).
    pub(crate) state: [u8; 32],
}

/// Handoff tickets in flight, by digest.
pub struct Handoffs {
    pub(crate) tickets: TtlMap<[u8; 32], Arc<Ticket>>,
}

impl Handoffs {
    /// Tickets live `ttl` (`limits.handoff_ttl`).
    pub(crate) fn new(ttl: Duration) -> Handoffs {
        Handoffs {
            tickets: TtlMap::new(MAX_TICKETS, ttl),
        }
    }
}
