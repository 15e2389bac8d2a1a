//! The global connection table (issue 21): every HTTPS and SSH connection holds a place in it,
//! and HTTPS connections that have not yet presented a valid credential hold only a bounded
//! share of it. When that share or the whole table is full, the oldest idle unauthenticated
//! connection is shed to make room: its task is told to close through its own cancellation
//! token, and the newcomer takes its place. Without this, silent connections from many addresses
//! (each under its per-address cap) filled the table and refused everyone until they timed out.
//!
//! The request path never takes the table's lock: a connection is promoted to authenticated by
//! one atomic exchange on its own [`Lease`] (after one relaxed load that finds it already done),
//! and a connection that ends gives its place back with atomics only. The lock is taken when a
//! connection is admitted, so only the accept loops contend for it. Leases of connections that
//! were promoted or ended leave the queue lazily, when they reach its front or when the queue
//! holds twice the live ones.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use std::sync::atomic::{AtomicBool, AtomicUsize};

/// Not yet authenticated: counted in the share, may be shed.
const UNAUTHENTICATED: u8 = 0;
/// Authenticated (or SSH): holds its place until it ends.
const AUTHENTICATED: u8 = 1;
/// Shed: its place went to the connection that shed it; its task is closing.
const SHED: u8 = 2;
/// Ended: its place was given back.
const ENDED: u8 = 3;

/// Connections told to close but not closed yet. Their descriptors are still open, so the table
/// may be over its cap by at most this many for as long as their tasks take to notice.
const SHED_IN_FLIGHT_MAX: u32 = 64;
/// An address whose connection was shed may not shed another for this long (it may still take a
/// free place). Without it, each shed attacker reconnects and sheds the next oldest at once, and
/// a chain of reconnects sweeps the queue faster than a real client completes its handshake.
const SHED_MEMORY: Duration = Duration::from_secs(10);
/// Bound of the table of recently shed addresses (what a flood from more addresses than this
/// within [`SHED_MEMORY`] gains is chains again, not memory).
const SHED_MEMORY_MAX: usize = 4096;
/// How many queued leases one admission looks at for an idle victim, so a queue of busy ones
/// costs a bounded scan.
const SCAN_MAX: usize = 1024;

/// Who a new connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// HTTPS: unauthenticated until its first authenticated request.
    Unauthenticated,
    /// SSH (its login is checked before any channel) and other listeners: never in the share,
    /// never shed.
    Held,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The table is full and nothing could be shed.
    Full,
    /// The unauthenticated share is full and nothing could be shed.
    Share,
}

/// One connection's place in the table, shared by its task (which awaits `shed`), its requests
/// (which promote it and mark it busy) and the table's queue.
pub struct Lease {
    state: AtomicU8,
    /// `None` for a trusted proxy's connections (see [`ConnTable::admit`]).
    address: Option<IpAddr>,
    /// Cancelled when the connection is shed: its task closes it.
    pub shed: CancellationToken,
    /// Requests in flight on this connection (`http::serve_connection`): one with a request in
    /// flight is not idle and is not shed.
    pub activity: Arc<Activity>,
}

/// Holds a connection's place; dropping it gives the place back (unless it was shed: the place
/// then already belongs to the connection that shed it).
pub(crate) struct LeaseGuard {
    table: Arc<ConnTable>,
    lease: Arc<Lease>,
}

impl LeaseGuard {
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }
}

pub struct ConnTable {
    cap: u32,
    share: u32,
    open: AtomicU32,
    unauthenticated: AtomicU32,
    shedding: AtomicU32,
    shed_total: AtomicU64,
    /// The most connections open at once since [`ConnTable::take_peak`] last looked.
    peak: AtomicU32,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// Unauthenticated leases in the order they were admitted (and some that are no longer).
    leases: VecDeque<Arc<Lease>>,
    recently_shed: HashMap<IpAddr, Instant>,
}

impl ConnTable {
    /// `share_percent` of `cap` (at least one place) may be held by unauthenticated connections.
    pub(crate) fn new(cap: u32, share_percent: u32) -> ConnTable {
        let share = (u64::from(cap) * u64::from(share_percent.min(100)))
            .div_ceil(100)
            .max(1) as u32;
        ConnTable {
            cap,
            share,
            open: AtomicU32::new(0),
            unauthenticated: AtomicU32::new(0),
            shedding: AtomicU32::new(0),
            shed_total: AtomicU64::new(0),
            peak: AtomicU32::new(0),
            queue: Mutex::default(),
        }
    }

    pub(crate) fn share(&self) -> u32 {
        self.share
    }

    pub(crate) fn open(&self) -> u32 {
        self.open.load(Ordering::Relaxed)
    }

    pub(crate) fn unauthenticated(&self) -> u32 {
        self.unauthenticated.load(Ordering::Relaxed)
    }

    pub(crate) fn shed_total(&self) -> u64 {
        self.shed_total.load(Ordering::Relaxed)
    }

    /// A place for a new connection from `address`, shedding the oldest idle unauthenticated
    /// connection when the table or (for an unauthenticated newcomer) the share is full.
    /// `address` is `None` for a trusted proxy: many people's connections come from it, so its
    /// connections being shed does not stop it from shedding.
    pub(crate) fn admit(self: &Arc<Self>, address: Option<IpAddr>, class: Class) -> Result<LeaseGuard, Refused> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        // Only admissions raise the counts, and they hold the lock: what is read here can only
        // fall (connections ending, promotions) before the counts are raised below.
        let open = self.open.load(Ordering::Acquire);
        let unauthenticated = self.unauthenticated.load(Ordering::Acquire);
        let room = open < self.cap && (class == Class::Held || unauthenticated < self.share);
        if room {
            let now_open = self.open.fetch_add(1, Ordering::AcqRel) + 1;
            self.peak.fetch_max(now_open, Ordering::Relaxed);
            if class == Class::Unauthenticated {
                self.unauthenticated.fetch_add(1, Ordering::AcqRel);
            }
        } else {
            let refused = if open >= self.cap {
                Refused::Full
            } else {
                Refused::Share
            };
            if self.shedding.load(Ordering::Acquire) >= SHED_IN_FLIGHT_MAX {
                return Err(refused);
            }
            let now = Instant::now();
            if class == Class::Unauthenticated
                && address.is_some_and(|a| {
                    queue
                        .recently_shed
                        .get(&a)
                        .is_some_and(|t| now.duration_since(*t) < SHED_MEMORY)
                })
            {
                return Err(refused);
            }
            let victim = queue.shed_one().ok_or(refused)?;
            self.shedding.fetch_add(1, Ordering::AcqRel);
            self.shed_total.fetch_add(1, Ordering::Relaxed);
            if let Some(a) = victim.address {
                queue.remember_shed(a, now);
            }
            // The newcomer takes the victim's place: an unauthenticated one its place in the
            // share too; a held one (SSH) gives the share's place back.
            if class == Class::Held {
                self.unauthenticated.fetch_sub(1, Ordering::AcqRel);
            }
            victim.shed.cancel();
        }
        let lease = Arc::new(Lease {
            state: AtomicU8::new(match class {
                Class::Unauthenticated => UNAUTHENTICATED,
                Class::Held => AUTHENTICATED,
            }),
            address,
            shed: CancellationToken::new(),
            activity: Arc::default(),
        });
        if class == Class::Unauthenticated {
            queue.push(lease.clone());
        }
        Ok(LeaseGuard {
            table: self.clone(),
            lease,
        })
    }

    /// The connection presented a valid credential: it leaves the unauthenticated share and is
    /// never shed. One relaxed load when it already was (every request after its first).
    pub(crate) fn promote(&self, lease: &Lease) {
        if lease.state.load(Ordering::Relaxed) != UNAUTHENTICATED {
            return;
        }
        if lease
            .state
            .compare_exchange(UNAUTHENTICATED, AUTHENTICATED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.unauthenticated.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The most connections open at once since the last call, and the number open now (the
    /// janitor's tick: a flood that ended is when the allocator has memory to give back).
    pub(crate) fn take_peak(&self) -> (u32, u32) {
        let open = self.open();
        (self.peak.swap(open, Ordering::Relaxed).max(open), open)
    }

    /// Forget shed addresses whose memory has passed (the janitor's tick).
    pub(crate) fn purge(&self) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        queue.recently_shed.retain(|_, t| now.duration_since(*t) < SHED_MEMORY);
        queue.prune();
    }
}

impl Queue {
    fn push(&mut self, lease: Arc<Lease>) {
        // Leases that left the share wait in the middle of the queue until they reach its front;
        // past twice the live ones (and a floor, so small queues are not swept every time) they
        // are swept in one pass: amortised, a constant per admission.
        if self.leases.len() >= 1024 && self.leases.len() >= 2 * self.live() {
            self.prune();
        }
        self.leases.push_back(lease);
    }

    fn live(&self) -> usize {
        self.leases
            .iter()
            .filter(|l| l.state.load(Ordering::Relaxed) == UNAUTHENTICATED)
            .count()
    }

    fn prune(&mut self) {
        self.leases
            .retain(|l| l.state.load(Ordering::Relaxed) == UNAUTHENTICATED);
        if self.leases.capacity() > 2 * self.leases.len() + 1024 {
            self.leases.shrink_to_fit();
        }
    }

    /// Mark the oldest idle unauthenticated lease shed and return it.
    fn shed_one(&mut self) -> Option<Arc<Lease>> {
        while self
            .leases
            .front()
            .is_some_and(|l| l.state.load(Ordering::Relaxed) != UNAUTHENTICATED)
        {
            self.leases.pop_front();
        }
        let at = self.leases.iter().take(SCAN_MAX).position(|l| {
            l.activity.is_idle()
                && l.state
                    .compare_exchange(UNAUTHENTICATED, SHED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
        })?;
        self.leases.remove(at)
    }

    fn remember_shed(&mut self, address: IpAddr, now: Instant) {
        if self.recently_shed.len() >= SHED_MEMORY_MAX {
            self.recently_shed.retain(|_, t| now.duration_since(*t) < SHED_MEMORY);
        }
        if self.recently_shed.len() < SHED_MEMORY_MAX {
            self.recently_shed.insert(address, now);
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let t = &self.table;
        match self.lease.state.swap(ENDED, Ordering::AcqRel) {
            UNAUTHENTICATED => {
                t.unauthenticated.fetch_sub(1, Ordering::AcqRel);
                t.open.fetch_sub(1, Ordering::AcqRel);
            }
            AUTHENTICATED => {
                t.open.fetch_sub(1, Ordering::AcqRel);
            }
            // Its place went to the connection that shed it; its descriptor is closed now.
            SHED => {
                t.shedding.fetch_sub(1, Ordering::AcqRel);
            }
            _ => {}
        }
    }
}

/// Requests in flight on one connection (a request counts until its response body ends or is
/// dropped), and whether one started or ended since the idle watcher last looked. The connection
/// table reads it too: a connection with a request in flight is not shed.
#[derive(Default)]
pub struct Activity {
    pub(crate) active: AtomicUsize,
    pub(crate) touched: AtomicBool,
}

impl Activity {
    pub(crate) fn start(&self) {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.touched.store(true, Ordering::Relaxed);
    }

    pub(crate) fn end(&self) {
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.touched.store(true, Ordering::Relaxed);
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.active.load(Ordering::Relaxed) == 0
    }
}

/// Descriptors kept back from connections: listeners, the log, spawned servers' pipes, files.
const RESERVED_FDS: u64 = 64;
/// The global connection cap: the configured `max_connections`, but never more than half of the
/// descriptors left after [`RESERVED_FDS`], because a proxied request can hold a second descriptor
/// (its upstream connection). Past the open-file limit `accept` fails with EMFILE and the gateway
/// would stop serving everyone; at this cap only new connections are refused.
pub(crate) fn connection_cap(configured: Option<u32>, open_file_limit: u64) -> u32 {
    let budget = (open_file_limit.saturating_sub(RESERVED_FDS) / 2).clamp(1, u64::from(u32::MAX)) as u32;
    configured.map_or(budget, |c| c.min(budget))
}

/// Raise the soft open-file limit to the hard one (as servers commonly do) and return it.
pub(crate) fn open_file_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        let wanted = lim.rlim_max.min(1 << 20);
        if wanted > lim.rlim_cur {
            let raised = libc::rlimit {
                rlim_cur: wanted,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = wanted;
            }
        }
    }
    lim.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_cap_stays_below_half_the_descriptors() {
        assert_eq!(connection_cap(None, 1024), 480);
        assert_eq!(connection_cap(Some(10_000), 1024), 480, "a configured cap is clamped");
        assert_eq!(connection_cap(Some(100), 1024), 100);
        assert_eq!(connection_cap(None, 10), 1, "a tiny limit still serves one");
    }

    fn ip(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([127, 0, 0, n]))
    }

    #[test]
    fn unauthenticated_connections_get_their_share_and_the_oldest_idle_is_shed() {
        let t = Arc::new(ConnTable::new(4, 50));
        assert_eq!(t.share(), 2);
        let a = t.admit(ip(1), Class::Unauthenticated).unwrap();
        let b = t.admit(ip(2), Class::Unauthenticated).unwrap();
        // b is busy: a request in flight.
        b.lease().activity.start();
        // The share is full: the newcomer sheds the oldest idle one (a), and takes its place.
        let c = t.admit(ip(3), Class::Unauthenticated).unwrap();
        assert!(a.lease().shed.is_cancelled());
        assert!(!b.lease().shed.is_cancelled());
        assert_eq!((t.open(), t.unauthenticated(), t.shed_total()), (2, 2, 1));
        // a's address may not shed again for a while; another address may, but b is busy and c
        // is the only idle one.
        assert_eq!(t.admit(ip(1), Class::Unauthenticated).err(), Some(Refused::Share));
        drop(a);
        assert_eq!(
            (t.open(), t.unauthenticated()),
            (2, 2),
            "a shed place is not given back twice"
        );
        // Promoted connections leave the share and are never shed.
        t.promote(c.lease());
        t.promote(c.lease());
        assert_eq!((t.open(), t.unauthenticated()), (2, 1));
        let d = t.admit(ip(4), Class::Unauthenticated).unwrap();
        assert_eq!((t.open(), t.unauthenticated()), (3, 2));
        // SSH keeps its room: with the table full, it sheds an idle unauthenticated one (d).
        let s = t.admit(ip(5), Class::Held).unwrap();
        assert_eq!((t.open(), t.unauthenticated()), (4, 2));
        let s2 = t.admit(ip(6), Class::Held).unwrap();
        assert!(d.lease().shed.is_cancelled() && !c.lease().shed.is_cancelled());
        assert_eq!((t.open(), t.unauthenticated()), (4, 1));
        // Nothing idle and unauthenticated left: refused.
        assert_eq!(t.admit(ip(7), Class::Held).err(), Some(Refused::Full));
        b.lease().activity.end();
        drop((b, c, d, s, s2));
        assert_eq!((t.open(), t.unauthenticated()), (0, 0));
        assert_eq!(t.shedding.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_peak_since_the_last_look_is_reported_once() {
        let t = Arc::new(ConnTable::new(8, 100));
        let held: Vec<_> = (1..=5)
            .map(|n| t.admit(ip(n), Class::Unauthenticated).unwrap())
            .collect();
        drop(held);
        assert_eq!(t.take_peak(), (5, 0), "five were open at once, none now");
        assert_eq!(t.take_peak(), (0, 0), "a second look starts from what was open then");
        let _one = t.admit(ip(1), Class::Held).unwrap();
        assert_eq!(t.take_peak(), (1, 1));
    }

    #[test]
    fn a_trusted_proxys_connections_keep_making_room_after_one_was_shed() {
        let t = Arc::new(ConnTable::new(2, 50));
        let a = t.admit(None, Class::Unauthenticated).unwrap();
        let b = t.admit(None, Class::Unauthenticated).unwrap();
        let c = t.admit(None, Class::Unauthenticated).unwrap();
        assert!(a.lease().shed.is_cancelled() && b.lease().shed.is_cancelled());
        assert!(!c.lease().shed.is_cancelled());
        assert_eq!((t.open(), t.unauthenticated(), t.shed_total()), (1, 1, 2));
    }
}
