//! Keyed limits: login attempts per address and per user name (checked before any argon2 work),
//! requests per user, and counted slots (connections per address, streams per user) held by RAII
//! guards that give the slot back when the connection or stream ends.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};

use crate::config::Limits;
use crate::ttl_map::TtlMap;

type Keyed<K, C> = RateLimiter<K, DashMapStateStore<K>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// How long a successful login keeps an (address, user) pair exempt from the per-user budget.
const KNOWN_GOOD_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
const KNOWN_GOOD_MAX: usize = 100_000;

/// A refusal and when to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denied {
    pub retry_after: Duration,
    /// Which budget ran out: `"address"`, `"user"` or `"rate"` (a stable log field).
    pub reason: &'static str,
}

pub struct Limiters<C: Clock = DefaultClock> {
    clock: C,
    login_by_address: Keyed<IpAddr, C>,
    login_by_user: Keyed<Arc<str>, C>,
    requests_by_user: Keyed<Arc<str>, C>,
    /// (address, user) pairs that logged in before: a user name under attack from elsewhere does
    /// not lock its owner out of the places they already use.
    known_good: TtlMap<(IpAddr, Arc<str>), ()>,
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

/// IPv6 clients are keyed by their /64: one host usually owns the whole prefix.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

impl Limiters<DefaultClock> {
    pub fn new(limits: &Limits) -> Self {
        Self::with_clock(limits, DefaultClock::default())
    }
}

impl<C: Clock + Clone> Limiters<C> {
    pub fn with_clock(limits: &Limits, clock: C) -> Self {
        let login_ip =
            Quota::per_minute(nz(limits.auth_failures_per_minute)).allow_burst(nz(limits.auth_failure_burst));
        let login_user =
            Quota::per_minute(nz(limits.user_failures_per_minute)).allow_burst(nz(limits.user_failure_burst));
        let requests = Quota::per_second(nz(limits.requests_per_second)).allow_burst(nz(limits.burst));
        Limiters {
            login_by_address: RateLimiter::dashmap_with_clock(login_ip, clock.clone()),
            login_by_user: RateLimiter::dashmap_with_clock(login_user, clock.clone()),
            requests_by_user: RateLimiter::dashmap_with_clock(requests, clock.clone()),
            clock,
            known_good: TtlMap::new(KNOWN_GOOD_MAX, KNOWN_GOOD_FOR),
        }
    }

    fn denied(&self, not_until: governor::NotUntil<C::Instant>, reason: &'static str) -> Denied {
        Denied {
            retry_after: not_until.wait_time_from(self.clock.now()),
            reason,
        }
    }

    /// Spend one login attempt (one argon2 run) for this address and user name, or refuse it.
    pub fn login_attempt(&self, ip: IpAddr, user: &str) -> Result<(), Denied> {
        let ip = address_key(ip);
        self.login_by_address
            .check_key(&ip)
            .map_err(|n| self.denied(n, "address"))?;
        if !self.is_known_good(ip, user) {
            let user: Arc<str> = user.into();
            self.login_by_user
                .check_key(&user)
                .map_err(|n| self.denied(n, "user"))?;
        }
        Ok(())
    }

    /// Spend one login attempt of this address only (a sign-in that names no user yet: single
    /// sign-on's start, whose flows a flood must not push out of memory).
    pub fn address_attempt(&self, ip: IpAddr) -> Result<(), Denied> {
        self.login_by_address
            .check_key(&address_key(ip))
            .map_err(|n| self.denied(n, "address"))
    }

    pub fn login_succeeded(&self, ip: IpAddr, user: &Arc<str>) {
        self.known_good.insert((address_key(ip), user.clone()), ());
    }

    fn is_known_good(&self, ip: IpAddr, user: &str) -> bool {
        self.known_good.get(&(ip, Arc::from(user))).is_some()
    }

    /// One request by an authenticated user.
    pub fn request(&self, user: &Arc<str>) -> Result<(), Denied> {
        self.requests_by_user
            .check_key(user)
            .map_err(|n| self.denied(n, "rate"))
    }

    /// Forget keys whose budget is full again, so the maps only hold recent activity.
    pub fn purge(&self) {
        self.login_by_address.retain_recent();
        self.login_by_user.retain_recent();
        self.requests_by_user.retain_recent();
        self.login_by_address.shrink_to_fit();
        self.login_by_user.shrink_to_fit();
        self.requests_by_user.shrink_to_fit();
        self.known_good.purge();
    }
}

/// Counted slots per key (connections per address, streams per user).
pub struct Slots<K: Hash + Eq + Clone> {
    counts: Mutex<HashMap<K, u32>>,
}

/// Holds one slot; dropping it gives the slot back.
pub struct SlotGuard<K: Hash + Eq + Clone> {
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
    pub fn try_acquire(self: &Arc<Self>, key: K, max: u32) -> Option<SlotGuard<K>> {
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

    pub fn count(&self, key: &K) -> u32 {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
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
        // The user budget (5) already paid for the login from home.
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
            .expect("the owner's address is exempt from the user budget");
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
}
