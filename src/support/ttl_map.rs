//! One bounded map with expiring entries, for every table the gateway keeps from requests: the
//! verified-credential cache, PTY tickets, session directories, addresses a user logged in from.
//! One eviction rule for all: an entry lives `ttl` from its insertion; a full map first drops the
//! expired entries, then the one closest to expiry (so the newest entry is always kept). Expired
//! entries are never returned. A mutex guards the map: every use is a short lookup or insert.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) struct TtlMap<K, V, S = std::collections::hash_map::RandomState> {
    map: Mutex<HashMap<K, (V, Instant), S>>,
    capacity: usize,
    ttl: Duration,
}

impl<K: Hash + Eq, V: Clone> TtlMap<K, V> {
    pub(crate) fn new(capacity: usize, ttl: Duration) -> Self {
        Self::with_hasher(capacity, ttl, Default::default())
    }
}

impl<K: Hash + Eq, V: Clone, S: BuildHasher> TtlMap<K, V, S> {
    pub(crate) fn with_hasher(capacity: usize, ttl: Duration, hasher: S) -> Self {
        TtlMap {
            map: Mutex::new(HashMap::with_hasher(hasher)),
            capacity: capacity.max(1),
            ttl,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (V, Instant), S>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live value for `key`.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_until(key).map(|(v, _)| v)
    }

    /// The live value for `key` and when it expires.
    pub(crate) fn get_until<Q>(&self, key: &Q) -> Option<(V, Instant)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = Instant::now();
        self.lock()
            .get(key)
            .filter(|(_, t)| *t > now)
            .map(|(v, t)| (v.clone(), *t))
    }

    /// Insert (or refresh) `key`, living `ttl` from now.
    /// Returns when the entry expires.
    pub(crate) fn insert(&self, key: K, value: V) -> Instant {
        let now = Instant::now();
        let mut map = self.lock();
        if map.len() >= self.capacity && !map.contains_key(&key) {
            map.retain(|_, (_, t)| *t > now);
            if map.len() >= self.capacity
                && let Some(soonest) = map.iter().min_by_key(|(_, (_, t))| *t).map(|(_, (_, t))| *t)
            {
                // Dropping by expiry time keeps the map's key type free of a Clone bound.
                let mut dropped = false;
                map.retain(|_, (_, t)| {
                    let drop = !dropped && *t == soonest;
                    dropped |= drop;
                    !drop
                });
            }
        }
        let until = now + self.ttl;
        map.insert(key, (value, until));
        until
    }

    /// Take the live value for `key` out of the map (an expired one is removed and not returned).
    pub(crate) fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = Instant::now();
        self.lock().remove(key).filter(|(_, t)| *t > now).map(|(v, _)| v)
    }

    /// Keep only live entries `keep` says yes to.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&K, &V) -> bool) {
        let now = Instant::now();
        self.lock().retain(|k, (v, t)| *t > now && keep(k, v));
    }

    /// Drop expired entries (memory follows activity).
    pub(crate) fn purge(&self) {
        self.retain(|_, _| true);
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_are_never_returned_expired() {
        let m: TtlMap<String, u32> = TtlMap::new(10, Duration::from_millis(0));
        m.insert("a".into(), 1);
        assert_eq!(m.get("a"), None);
        assert_eq!(m.remove("a"), None);
        let m: TtlMap<String, u32> = TtlMap::new(10, Duration::from_secs(60));
        m.insert("a".into(), 1);
        assert_eq!(m.get("a"), Some(1));
        assert_eq!(m.remove("a"), Some(1));
        assert!(m.is_empty());
    }

    #[test]
    fn a_full_map_stays_within_capacity_and_keeps_the_newest() {
        let m: TtlMap<u32, u32> = TtlMap::new(32, Duration::from_secs(60));
        for i in 0..1000 {
            m.insert(i, i);
            assert!(m.len() <= 32);
        }
        assert_eq!(m.get(&999), Some(999));
        assert_eq!(m.get(&0), None, "the oldest went first");
        m.retain(|k, _| *k != 999);
        assert_eq!(m.get(&999), None);
    }
}
