//! Failed TLS handshakes, said in the log: a browser or phone that does not trust the certificate
//! (the commonest first-use mistake) otherwise left no line at all. At most one line per
//! [`EVERY`] for the whole process (a scan or a flood cannot flood the log), with the peer, the
//! reason rustls gave, and how many failed since the last line. Lock-free: handshakes run on
//! every worker at once.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_secs(10);

static BASE: OnceLock<Instant> = OnceLock::new();
/// When the last line was written, in ms since `BASE` (0: never).
static LAST_MS: AtomicU64 = AtomicU64::new(0);
static SINCE_LAST: AtomicU64 = AtomicU64::new(0);

/// Say that the handshake with `peer` failed, for `reason`, unless a line was written lately.
pub(crate) fn failed(peer: SocketAddr, reason: &str) {
    let base = *BASE.get_or_init(Instant::now);
    // Never 0, so the first failure always writes.
    let now = base.elapsed().as_millis() as u64 + 1;
    let last = LAST_MS.load(Ordering::Relaxed);
    let due = last == 0 || now.saturating_sub(last) >= EVERY.as_millis() as u64;
    if !due
        || LAST_MS
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        SINCE_LAST.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let before = SINCE_LAST.swap(0, Ordering::Relaxed);
    tracing::warn!(target: "security", peer = %peer.ip(), reason, failed_since_last_line = before,
        "TLS handshake failed (a client that does not trust the certificate, or not TLS; logged at most once per 10 s)");
}
