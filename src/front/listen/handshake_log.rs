//! Failed TLS handshakes, said in the log: a browser or phone that does not trust the certificate
//! (the commonest first-use mistake) otherwise left no line at all. At most one line per
//! [`EVERY`] for the whole process (a scan or a flood cannot flood the log), with the peer, the
//! reason rustls gave, and how many failed since the last line. Lock-free: handshakes run on
//! every worker at once. Connections refused before the handshake for their PROXY protocol
//! header (`proxied.rs`) have a line of their own, on the same terms.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_secs(10);

static BASE: OnceLock<Instant> = OnceLock::new();

/// One kind of line, written at most once per [`EVERY`].
struct Throttle {
    /// When the last line was written, in ms since `BASE` (0: never).
    last_ms: AtomicU64,
    since_last: AtomicU64,
}

impl Throttle {
    const fn new() -> Throttle {
        Throttle {
            last_ms: AtomicU64::new(0),
            since_last: AtomicU64::new(0),
        }
    }

    /// `Some(how many were not written since the last line)` when a line is due now.
    fn due(&self) -> Option<u64> {
        let base = *BASE.get_or_init(Instant::now);
        // Never 0, so the first one always writes.
        let now = base.elapsed().as_millis() as u64 + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= EVERY.as_millis() as u64;
        if !due
            || self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            self.since_last.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.since_last.swap(0, Ordering::Relaxed))
    }
}

static HANDSHAKES: Throttle = Throttle::new();
static PROXY_HEADERS: Throttle = Throttle::new();
static PROXIED_OVER_CAP: Throttle = Throttle::new();

/// Say that the handshake with `peer` failed, for `reason`, unless a line was written lately.
pub(crate) fn failed(peer: SocketAddr, reason: &str) {
    let Some(before) = HANDSHAKES.due() else { return };
    tracing::warn!(target: "security", peer = %peer.ip(), reason, failed_since_last_line = before,
        "TLS handshake failed (a client that does not trust the certificate, or not TLS; logged at most once per 10 s)");
}

/// Say that a connection from `peer` was refused for its PROXY protocol header (`reason`: one
/// from an address not in `server.trusted_proxies`, or a malformed one), unless a line was
/// written lately.
pub(crate) fn refused(peer: SocketAddr, reason: &str) {
    let Some(before) = PROXY_HEADERS.due() else { return };
    tracing::warn!(target: "security", peer = %peer.ip(), reason, refused_since_last_line = before,
        "connection refused before the TLS handshake for its PROXY protocol header (logged at most once per 10 s)");
}

/// Say that a connection a trusted proxy carried for `client` was refused: that client already
/// holds `max_connections_per_ip` connections (counted by the address the header names, not the
/// balancer's), unless a line was written lately.
pub(crate) fn over_cap(client: SocketAddr) {
    let Some(before) = PROXIED_OVER_CAP.due() else { return };
    tracing::warn!(target: "security", peer = %client.ip(), reason = "connection_limit", refused_since_last_line = before,
        "connection refused: the client its PROXY protocol header names holds max_connections_per_ip connections (logged at most once per 10 s)");
}
