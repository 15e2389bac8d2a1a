//! Verified credentials, so an authenticated request costs a keyed hash and a map lookup, not argon2.
//!
//! The key is a keyed BLAKE2b digest of (the user's current PHC hash, user name, password) under a
//! random per-process key: the cache never holds a password, a leaked key set is useless without the
//! process key, and a changed password hash changes every key of that user, so old entries can no
//! longer match. The map is sharded so concurrent lookups rarely meet on one lock, and bounded.

use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use blake2::{Blake2b256, Digest};

use crate::support::ttl_map::TtlMap;

pub(crate) type CacheKey = [u8; 32];

const SHARDS: usize = 16;

/// Keys are already keyed BLAKE2b digests, uniform and unknowable without the process key, so
/// eight of their bytes are as good a table hash as SipHash over all 32, at no cost. The last
/// eight, because the first byte picks the shard.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut word = [0u8; 8];
        let tail = &bytes[bytes.len().saturating_sub(8)..];
        word[..tail.len()].copy_from_slice(tail);
        self.0 ^= u64::from_le_bytes(word);
    }

    /// The length prefix a slice hashes first carries nothing.
    fn write_usize(&mut self, _: usize) {}

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A shard: verified key → the user it was verified for.
type Shard = TtlMap<CacheKey, Arc<str>, BuildHasherDefault<DigestHasher>>;

pub struct AuthCache {
    secret: [u8; 32],
    shards: Vec<Shard>,
}

/// A digest of a user's PHC hash text; part of every cache key for that user.
pub(crate) fn fingerprint(phc: &str) -> [u8; 32] {
    Blake2b256::digest(phc.as_bytes()).into()
}

impl AuthCache {
    pub(crate) fn new(capacity: usize, ttl: Duration) -> Self {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).expect("the OS random source is available");
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        AuthCache {
            secret,
            shards: (0..SHARDS)
                .map(|_| TtlMap::with_hasher(per_shard, ttl, Default::default()))
                .collect(),
        }
    }

    pub(crate) fn key(&self, fingerprint: &[u8; 32], user: &str, password: &[u8]) -> CacheKey {
        let mut h = Blake2b256::new();
        h.update(self.secret);
        h.update(fingerprint);
        // Length prefixes keep ("ab","c") and ("a","bc") apart.
        h.update((user.len() as u64).to_le_bytes());
        h.update(user.as_bytes());
        h.update((password.len() as u64).to_le_bytes());
        h.update(password);
        h.finalize().into()
    }

    fn shard(&self, key: &CacheKey) -> &Shard {
        &self.shards[key[0] as usize % SHARDS]
    }

    /// When this exact credential was verified for `user`: until when the entry lives (`None`
    /// when it was not, or has expired).
    pub(crate) fn hit(&self, key: &CacheKey, user: &str) -> Option<Instant> {
        self.shard(key)
            .get_until(key)
            .and_then(|(u, until)| (&*u == user).then_some(until))
    }

    /// Returns when the entry expires.
    pub(crate) fn insert(&self, key: CacheKey, user: Arc<str>) -> Instant {
        self.shard(&key).insert(key, user)
    }

    /// Keep only entries of users for whom `keep` says yes (on reload: users removed or re-hashed).
    pub(crate) fn retain_users(&self, keep: impl Fn(&str) -> bool) {
        for shard in &self.shards {
            shard.retain(|_, user| keep(user));
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(Shard::len).sum()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_hash_changes_the_key() {
        let c = AuthCache::new(100, Duration::from_secs(60));
        let k1 = c.key(&fingerprint("h1"), "alice", b"pw");
        let k2 = c.key(&fingerprint("h2"), "alice", b"pw");
        assert_ne!(k1, k2);
        c.insert(k1, "alice".into());
        assert!(c.hit(&k1, "alice").is_some());
        assert!(c.hit(&k2, "alice").is_none());
        assert!(c.hit(&k1, "bob").is_none(), "an entry belongs to one user");
    }

    #[test]
    fn fields_cannot_slide_into_each_other() {
        let c = AuthCache::new(10, Duration::from_secs(60));
        let f = fingerprint("h");
        assert_ne!(c.key(&f, "ab", b"c"), c.key(&f, "a", b"bc"));
    }

    #[test]
    fn stays_within_capacity_and_expires() {
        let c = AuthCache::new(32, Duration::from_secs(60));
        for i in 0..1000u32 {
            c.insert(c.key(&[0; 32], "u", &i.to_le_bytes()), "u".into());
        }
        assert!(c.len() <= 32, "{}", c.len());
        // Full of keys: the newest is still found (evictions take the oldest).
        assert!(c.hit(&c.key(&[0; 32], "u", &999u32.to_le_bytes()), "u").is_some());
        let short = AuthCache::new(8, Duration::from_millis(0));
        let k = short.key(&[0; 32], "u", b"p");
        short.insert(k, "u".into());
        assert!(short.hit(&k, "u").is_none());
        c.retain_users(|u| u != "u");
        assert!(c.is_empty());
    }
}
