//! Keyed limits: login attempts per address and per user name (checked before any argon2 work),
//! requests per user, and counted slots (connections per address, streams per user) held by RAII
//! guards that give the slot back when the connection or stream ends.
//!
//! A login allowance that is spent is remembered until it refills ([`Limiters::spent`]): every
//! answer to a credential that costs less than a login attempt (a cached password, a cached
//! token) asks it first, so an address over its allowance learns nothing, right or wrong, from a
//! cheaper answer.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock, Reference};
use governor::middleware::{NoOpMiddleware, StateInformationMiddleware, StateSnapshot};
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};

use crate::config::Limits;
use crate::support::ttl_map::TtlMap;

mod shared;
use shared::{Shape, SharedAllowances, Taken};

type Keyed<K, C> = RateLimiter<K, DashMapStateStore<K>, C, NoOpMiddleware<<C as Clock>::Instant>>;
/// A keyed limiter that says, when it lets a cell through, how much of the burst is left.
type Counted<K, C> = RateLimiter<K, DashMapStateStore<K>, C, StateInformationMiddleware>;

/// How long a successful login keeps an (address, user) pair exempt from the per-user allowance.
const KNOWN_GOOD_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
const KNOWN_GOOD_MAX: usize = 100_000;
/// Bounds of the spent-allowance tables. An entry's own deadline decides; the table's lifetime only
/// has to outlast the longest refill (one cell at the slowest quota the config allows, a minute).
const SPENT_MAX: usize = 100_000;
const SPENT_KEPT: Duration = Duration::from_secs(3600);

/// A refusal and when to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Denied {
    pub retry_after: Duration,
    /// Which allowance ran out: `"address"`, `"user"` or `"rate"` (a stable log field).
    pub reason: &'static str,
}

pub struct Limiters<C: Clock = DefaultClock> {
    clock: C,
    login_by_address: Counted<IpAddr, C>,
    login_by_user: Counted<Arc<str>, C>,
    requests_by_user: Keyed<Arc<str>, C>,
    /// (address, user) pairs that logged in before: a user name under attack from elsewhere does
    /// not lock its owner out of the places they already use.
    known_good: TtlMap<(IpAddr, Arc<str>), ()>,
    /// Addresses and user names whose login allowance is spent, and when it refills.
    spent: Spent<C::Instant>,
    /// The login allowances' shapes, for the shared ones.
    address_shape: Shape,
    user_shape: Shape,
    /// With a shared store: the allowances every gateway on it spends together.
    shared: Option<SharedAllowances>,
}

/// Allowances known to be spent. `live` counts entries since the last purge, so the common case
/// (nobody over allowance) costs one atomic load and takes no lock.
struct Spent<I> {
    addresses: TtlMap<IpAddr, I>,
    users: TtlMap<Arc<str>, I>,
    live: AtomicUsize,
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

/// IPv6 clients are keyed by their /64: one host usually owns the whole prefix.
pub(crate) fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

impl Limiters<DefaultClock> {
    pub(crate) fn new(limits: &Limits) -> Self {
        Self::with_clock(limits, DefaultClock::default())
    }
}

impl<C: Clock + Clone> Limiters<C> {
    pub(crate) fn with_clock(limits: &Limits, clock: C) -> Self {
        let login_ip =
            Quota::per_minute(nz(limits.auth_failures_per_minute)).allow_burst(nz(limits.auth_failure_burst));
        let login_user =
            Quota::per_minute(nz(limits.user_failures_per_minute)).allow_burst(nz(limits.user_failure_burst));
        let requests = Quota::per_second(nz(limits.requests_per_second)).allow_burst(nz(limits.burst));
        let shape = |q: &Quota| Shape {
            interval: q.replenish_interval(),
            burst: q.burst_size().get(),
        };
        Limiters {
            address_shape: shape(&login_ip),
            user_shape: shape(&login_user),
            shared: None,
            login_by_address: RateLimiter::dashmap_with_clock(login_ip, clock.clone()).with_middleware(),
            login_by_user: RateLimiter::dashmap_with_clock(login_user, clock.clone()).with_middleware(),
            requests_by_user: RateLimiter::dashmap_with_clock(requests, clock.clone()),
            clock,
            known_good: TtlMap::new(KNOWN_GOOD_MAX, KNOWN_GOOD_FOR),
            spent: Spent {
                addresses: TtlMap::new(SPENT_MAX, SPENT_KEPT),
                users: TtlMap::new(SPENT_MAX, SPENT_KEPT),
                live: AtomicUsize::new(0),
            },
        }
    }

    /// Spend the login allowances in `store` too, when other gateways may share it.
    pub(crate) fn sharing(mut self, store: &Arc<dyn crate::store::Store>) -> Self {
        self.shared = SharedAllowances::on(store);
        self
    }

    fn denied(&self, not_until: governor::NotUntil<C::Instant>, reason: &'static str) -> Denied {
        Denied {
            retry_after: not_until.wait_time_from(self.clock.now()),
            reason,
        }
    }

    /// Spend one login attempt (one argon2 run) for this address and user name, or refuse it.
    pub(crate) fn login_attempt(&self, ip: IpAddr, user: &str) -> Result<(), Denied> {
        let ip = address_key(ip);
        self.charge(&self.login_by_address, &self.spent.addresses, ip, "address")?;
        if !self.is_known_good(ip, user) {
            self.charge(&self.login_by_user, &self.spent.users, Arc::from(user), "user")?;
        }
        Ok(())
    }

    /// Spend one login attempt of this address only (a sign-in that names no user yet: single
    /// sign-on's start, whose flows a flood must not push out of memory).
    pub(crate) fn address_attempt(&self, ip: IpAddr) -> Result<(), Denied> {
        self.charge(
            &self.login_by_address,
            &self.spent.addresses,
            address_key(ip),
            "address",
        )
    }

    /// The shared half of a login attempt this gateway's own limiter let through
    /// ([`login_attempt`](Self::login_attempt) with `user`, else
    /// [`address_attempt`](Self::address_attempt)): with a shared store, the same cells are
    /// taken from the allowances every gateway on it spends, and an allowance found spent there is
    /// marked here and told to the others. Nothing (and no await point) without one.
    pub(crate) async fn shared_attempt(&self, ip: IpAddr, user: Option<&str>) -> Result<(), Denied> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let ip = address_key(ip);
        let mut keys = vec![(shared::key("address", ip), self.address_shape)];
        if let Some(user) = user.filter(|u| !self.is_known_good(ip, u)) {
            keys.push((shared::key("user", user), self.user_shape));
        }
        let taken = shared.take(keys).await;
        for (i, t) in taken.into_iter().enumerate() {
            let (shape, reason) = if i == 0 {
                (self.address_shape, "address")
            } else {
                (self.user_shape, "user")
            };
            let for_ = match t {
                Taken::Spent(retry_after) => retry_after,
                Taken::Left(0) => shape.interval,
                Taken::Left(_) | Taken::Unknown => continue,
            };
            match (i, user) {
                (0, _) => self.mark_spent_and_tell(&self.spent.addresses, ip, reason, for_),
                (_, Some(u)) => self.mark_spent_and_tell(&self.spent.users, Arc::from(u), reason, for_),
                _ => {}
            }
            if let Taken::Spent(retry_after) = t {
                return Err(Denied { retry_after, reason });
            }
        }
        Ok(())
    }

    /// A login attempt outside an argon2 run (a token lookup, a pairing or passkey answer, a
    /// sign-on's start): this gateway's limiter, then the shared allowances.
    pub(crate) async fn attempt(&self, ip: IpAddr, user: Option<&str>) -> Result<(), Denied> {
        match user {
            Some(u) => self.login_attempt(ip, u)?,
            None => self.address_attempt(ip)?,
        }
        self.shared_attempt(ip, user).await
    }

    /// Take one cell of `key`'s allowance. Taking the last one, or being refused one, marks the key
    /// spent until a cell is back: from then on no cheaper answer may tell it right from wrong. A
    /// newly spent key is told to the other gateways on a shared store.
    fn charge<K: Hash + Eq + Clone + std::fmt::Display>(
        &self,
        limiter: &Counted<K, C>,
        spent: &TtlMap<K, C::Instant>,
        key: K,
        reason: &'static str,
    ) -> Result<(), Denied> {
        match limiter.check_key(&key) {
            Ok(left) => {
                if left.remaining_burst_capacity() == 0 {
                    // A cell comes back within one replenish interval: a bound, not the exact time.
                    self.mark_spent_and_tell(spent, key, reason, refill_bound(&left));
                }
                Ok(())
            }
            Err(not_until) => {
                let denied = self.denied(not_until, reason);
                self.mark_spent_and_tell(spent, key, reason, denied.retry_after);
                Err(denied)
            }
        }
    }

    /// Mark `key` spent; with a shared store, tell the other gateways when it was not already.
    fn mark_spent_and_tell<K: Hash + Eq + std::fmt::Display>(
        &self,
        spent: &TtlMap<K, C::Instant>,
        key: K,
        reason: &'static str,
        for_: Duration,
    ) {
        let now = self.clock.now();
        let already = spent.get(&key).is_some_and(|until| until > now);
        if let Some(shared) = &self.shared
            && !already
        {
            shared.tell(&shared::key(reason, &key), for_);
        }
        self.mark_spent(spent, key, for_);
    }

    fn mark_spent<K: Hash + Eq>(&self, spent: &TtlMap<K, C::Instant>, key: K, for_: Duration) {
        spent.insert(key, self.clock.now() + for_.into());
        self.spent.live.fetch_add(1, Ordering::Release);
    }

    /// Another gateway on the shared store found allowance `key` (`address:<ip>`, `user:<name>`)
    /// spent for `for_`, or (zero) refilled by a login: mark it here too, so that this
    /// gateway's cheaper answers agree.
    pub(crate) fn spent_elsewhere(&self, key: &str, for_: Duration) {
        let (kind, name) = key.split_once(':').unwrap_or(("", ""));
        match kind {
            "address" => match name.parse::<IpAddr>() {
                Ok(ip) if for_.is_zero() => {
                    self.spent.addresses.remove(&address_key(ip));
                }
                Ok(ip) => self.mark_spent(&self.spent.addresses, address_key(ip), for_),
                Err(_) => {}
            },
            "user" if !for_.is_zero() => self.mark_spent(&self.spent.users, Arc::from(name), for_),
            _ => {}
        }
    }

    /// Is this address's login allowance spent, or (from an address `user` has not logged in from)
    /// the user name's? Asked before any answer to a credential that costs less than a login
    /// attempt: while it refuses, no credential from there gets a yes or no.
    pub(crate) fn spent(&self, ip: IpAddr, user: Option<&str>) -> Result<(), Denied> {
        if self.spent.live.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let ip = address_key(ip);
        let now = self.clock.now();
        let left = |until: C::Instant| Duration::from(until.duration_since(now));
        if let Some(until) = self.spent.addresses.get(&ip).filter(|u| *u > now) {
            return Err(Denied {
                retry_after: left(until),
                reason: "address",
            });
        }
        if let Some(user) = user
            && let Some(until) = self.spent.users.get(user).filter(|u| *u > now)
            && !self.is_known_good(ip, user)
        {
            return Err(Denied {
                retry_after: left(until),
                reason: "user",
            });
        }
        Ok(())
    }

    /// A login verified by a full check (within the allowance): the address has shown it holds
    /// the credential, so its own spent mark goes (a user who mistyped until the last attempt
    /// is not refused their next connection). The user name's mark stays: it bounds guesses from
    /// other addresses.
    pub(crate) fn login_succeeded(&self, ip: IpAddr, user: &Arc<str>) {
        let ip = address_key(ip);
        self.known_good.insert((ip, user.clone()), ());
        if self.spent.live.load(Ordering::Acquire) != 0
            && self.spent.addresses.remove(&ip).is_some()
            && let Some(shared) = &self.shared
        {
            shared.tell(&shared::key("address", ip), Duration::ZERO);
        }
    }

    fn is_known_good(&self, ip: IpAddr, user: &str) -> bool {
        self.known_good.get(&(address_key(ip), Arc::from(user))).is_some()
    }

    /// One request by an authenticated user.
    pub(crate) fn request(&self, user: &Arc<str>) -> Result<(), Denied> {
        self.requests_by_user
            .check_key(user)
            .map_err(|n| self.denied(n, "rate"))
    }

    /// Forget keys whose allowance is full again, so the maps only hold recent activity.
    pub(crate) fn purge(&self) {
        self.login_by_address.retain_recent();
        self.login_by_user.retain_recent();
        self.requests_by_user.retain_recent();
        self.login_by_address.shrink_to_fit();
        self.login_by_user.shrink_to_fit();
        self.requests_by_user.shrink_to_fit();
        self.known_good.purge();
        // Back to the lock-free answer only when nothing is spent and nothing was marked while
        // we looked (a mark inserts first, then counts, so the exchange then fails).
        let seen = self.spent.live.load(Ordering::Acquire);
        let now = self.clock.now();
        self.spent.addresses.retain(|_, until| *until > now);
        self.spent.users.retain(|_, until| *until > now);
        if self.spent.addresses.is_empty() && self.spent.users.is_empty() {
            let _ = self
                .spent
                .live
                .compare_exchange(seen, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

/// At most how long until one cell of the quota behind `snapshot` is back.
fn refill_bound(snapshot: &StateSnapshot) -> Duration {
    snapshot.quota().replenish_interval()
}

/// Counted slots per key (connections per address, streams per user).
pub struct Slots<K: Hash + Eq + Clone> {
    counts: Mutex<HashMap<K, u32>>,
}

/// Holds one slot; dropping it gives the slot back.
pub(crate) struct SlotGuard<K: Hash + Eq + Clone> {
    slots: Arc<Slots<K>>,
    key: K,
}

impl<K: Hash + Eq + Clone> Default for Slots<K> {
    fn default() -> Self {
        Slots {
            counts: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone> Slots<K> {
    pub(crate) fn try_acquire(self: &Arc<Self>, key: K, max: u32) -> Option<SlotGuard<K>> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(key.clone()).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(SlotGuard {
            slots: self.clone(),
            key,
        })
    }

    #[cfg(test)]
    pub(crate) fn count(&self, key: &K) -> u32 {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    pub(crate) fn total(&self) -> u64 {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|&n| u64::from(n))
            .sum()
    }
}

impl<K: Hash + Eq + Clone> Drop for SlotGuard<K> {
    fn drop(&mut self) {
        let mut counts = self.slots.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn limits() -> Limits {
        let raw = crate::config::file::RawLimits {
            auth_failures_per_minute: 6,
            auth_failure_burst: 3,
            user_failures_per_minute: 60,
            user_failure_burst: 5,
            ..Default::default()
        };
        crate::config::parse(
            &format!(
                "[server]\nlisten=\"127.0.0.1:0\"\n[tls]\ncert=\"c\"\nkey=\"k\"\ndev_ca=true\n[limits]\nauth_failures_per_minute={}\nauth_failure_burst={}\nuser_failures_per_minute={}\nuser_failure_burst={}\n",
                raw.auth_failures_per_minute, raw.auth_failure_burst, raw.user_failures_per_minute, raw.user_failure_burst
            ),
            std::path::Path::new("/tmp/x.toml"),
        )
        .unwrap()
        .limits
    }

    #[test]
    fn an_address_gets_its_burst_then_waits() {
        let clock = FakeRelativeClock::default();
        let l = Limiters::with_clock(&limits(), clock.clone());
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        for _ in 0..3 {
            l.login_attempt(a, "x").unwrap();
        }
        let denied = l.login_attempt(a, "x").unwrap_err();
        assert_eq!(denied.reason, "address");
        assert!(denied.retry_after > Duration::ZERO && denied.retry_after <= Duration::from_secs(10));
        // Another address is not affected.
        l.login_attempt("127.0.0.3".parse().unwrap(), "x").unwrap();
        clock.advance(Duration::from_secs(10));
        l.login_attempt(a, "x").unwrap();
    }

    #[test]
    fn a_user_under_attack_keeps_working_from_a_known_address() {
        let clock = FakeRelativeClock::default();
        let l = Limiters::with_clock(&limits(), clock.clone());
        let home: IpAddr = "127.0.0.9".parse().unwrap();
        l.login_attempt(home, "alice").unwrap();
        l.login_succeeded(home, &"alice".into());
        // The user allowance (5) already paid for the login from home.
        for i in 0..4u8 {
            l.login_attempt(IpAddr::from([10, 0, 0, i]), "alice").unwrap();
        }
        let denied = l.login_attempt("10.0.1.1".parse().unwrap(), "alice").unwrap_err();
        assert_eq!(denied.reason, "user");
        assert!(
            denied.retry_after <= Duration::from_secs(1),
            "a bounded wait, not a lock"
        );
        l.login_attempt(home, "alice")
            .expect("the owner's address is exempt from the user allowance");
    }

    #[test]
    fn a_spent_allowance_refuses_cheaper_answers_until_a_cell_is_back() {
        let clock = FakeRelativeClock::default();
        let l = Limiters::with_clock(&limits(), clock.clone());
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let elsewhere: IpAddr = "127.0.0.3".parse().unwrap();
        assert_eq!(l.spent(a, Some("alice")), Ok(()), "nothing spent yet");
        l.login_attempt(a, "alice").unwrap();
        l.login_attempt(a, "alice").unwrap();
        assert_eq!(l.spent(a, Some("alice")), Ok(()), "one attempt is left");
        // The last attempt of the burst (3) is spent: the next guess, whatever answers it, waits.
        l.login_attempt(a, "alice").unwrap();
        let d = l.spent(a, Some("alice")).unwrap_err();
        assert_eq!(d.reason, "address");
        assert!(
            d.retry_after > Duration::ZERO && d.retry_after <= Duration::from_secs(10),
            "{d:?}"
        );
        assert_eq!(l.spent(a, None).unwrap_err().reason, "address", "tokens name no user");
        assert_eq!(
            l.spent(elsewhere, Some("alice")),
            Ok(()),
            "another address is not affected"
        );
        // Refused attempts keep it spent until the refill the refusal named.
        let refused = l.login_attempt(a, "alice").unwrap_err();
        clock.advance(refused.retry_after - Duration::from_millis(1));
        assert_eq!(l.spent(a, Some("alice")).unwrap_err().reason, "address");
        clock.advance(Duration::from_millis(1));
        assert_eq!(l.spent(a, Some("alice")), Ok(()), "a cell is back");
        l.purge();
        assert_eq!(
            l.spent.live.load(Ordering::Acquire),
            0,
            "purged back to the lock-free answer"
        );
    }

    #[test]
    fn a_login_verified_in_full_clears_its_address_but_not_the_user_name() {
        let clock = FakeRelativeClock::default();
        let l = Limiters::with_clock(&limits(), clock.clone());
        let home: IpAddr = "127.0.0.9".parse().unwrap();
        for _ in 0..3 {
            l.login_attempt(home, "alice").unwrap();
        }
        assert!(l.spent(home, Some("alice")).is_err());
        l.login_succeeded(home, &"alice".into());
        assert_eq!(
            l.spent(home, Some("alice")),
            Ok(()),
            "the owner who mistyped is let back in"
        );
        // Guesses at alice from many addresses spend the user name's allowance (5).
        for i in 0..2u8 {
            l.login_attempt(IpAddr::from([10, 0, 0, i]), "alice").unwrap();
        }
        let stranger: IpAddr = "10.0.9.9".parse().unwrap();
        assert_eq!(l.spent(stranger, Some("alice")).unwrap_err().reason, "user");
        assert_eq!(l.spent(stranger, Some("bob")), Ok(()), "another name is not affected");
        assert_eq!(
            l.spent(home, Some("alice")),
            Ok(()),
            "the owner's own address is exempt"
        );
    }

    #[test]
    fn ipv6_is_keyed_by_prefix() {
        let a = address_key("2001:db8::1".parse().unwrap());
        let b = address_key("2001:db8::ffff:1".parse().unwrap());
        assert_eq!(a, b);
        assert_eq!(
            address_key("::ffff:10.0.0.1".parse().unwrap()),
            "10.0.0.1".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn slots_are_returned_on_drop() {
        let s: Arc<Slots<u8>> = Arc::default();
        let g1 = s.try_acquire(1, 2).unwrap();
        let _g2 = s.try_acquire(1, 2).unwrap();
        assert!(s.try_acquire(1, 2).is_none());
        assert!(s.try_acquire(2, 2).is_some());
        drop(g1);
        assert_eq!(s.count(&1), 1);
        assert!(s.try_acquire(1, 2).is_some());
    }

    /// An allowance another gateway found spent is spent here too (for the address's /64, for a
    /// user name from addresses it has not logged in from), until told it refilled.
    #[test]
    fn an_allowance_spent_elsewhere_is_spent_here() {
        let clock = FakeRelativeClock::default();
        let l = Limiters::with_clock(&limits(), clock.clone());
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        l.spent_elsewhere("address:2001:db8::2", Duration::from_secs(30));
        assert_eq!(l.spent(v6, None).unwrap_err().reason, "address", "the same /64");
        l.spent_elsewhere("user:alice", Duration::from_secs(30));
        let other: IpAddr = "10.0.0.7".parse().unwrap();
        assert_eq!(l.spent(other, Some("alice")).unwrap_err().reason, "user");
        assert_eq!(l.spent(other, Some("bob")), Ok(()));
        l.spent_elsewhere("address:2001:db8::3", Duration::ZERO);
        assert_eq!(l.spent(v6, None), Ok(()), "refilled by a login elsewhere");
        for junk in ["address:not-an-ip", "nothing", "route:x", ""] {
            l.spent_elsewhere(junk, Duration::from_secs(30));
        }
        clock.advance(Duration::from_secs(31));
        assert_eq!(l.spent(other, Some("alice")), Ok(()), "and it ends when it said");
    }
}
