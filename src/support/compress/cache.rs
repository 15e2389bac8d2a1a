//! The bounded cache of compressed bodies: hashed assets once per validator, catalog answers once
//! per keyed digest of their bytes, and a bound on the bytes held while answers are read whole.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, header};

use super::{BUFFERED_BYTES, CACHE_BYTES, Coding, Effort, compress};

/// What identifies one compressed asset.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub project: Arc<str>,
    pub path: String,
    /// The upstream's ETag, else Last-Modified, else the body's length and digest (then also
    /// the asset's ETag: OpenCode sends no validator for its assets).
    pub validator: String,
    pub coding: Coding,
    pub effort: Effort,
}

impl Key {
    pub(crate) fn validator(headers: &HeaderMap, body: &[u8]) -> String {
        if let Some(v) = headers.get(header::ETAG).or(headers.get(header::LAST_MODIFIED))
            && let Ok(s) = v.to_str()
        {
            return s.to_owned();
        }
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        body.hash(&mut h);
        format!("{}-{:x}", body.len(), h.finish())
    }
}

/// `None` inside: the encoder failed for this asset; it is served as it came from then on.
type Slot = Arc<tokio::sync::OnceCell<Option<Bytes>>>;

/// Compressed hashed assets, bounded in bytes (oldest out first). Each entry is a once-cell, so
/// two first requests for one asset compress it once (single flight).
pub struct AssetCache {
    cap: usize,
    inner: Mutex<Inner>,
    /// Keys the digest of catalog answers: a client cannot aim a body at another's cache entry.
    secret: [u8; 32],
    /// Bytes of answers being read whole to be compressed, all requests together.
    buffered: tokio::sync::Semaphore,
}

#[derive(Default)]
struct Inner {
    slots: HashMap<Key, Slot>,
    order: VecDeque<(Key, usize)>,
    bytes: usize,
}

impl Default for AssetCache {
    fn default() -> Self {
        AssetCache::with_cap(CACHE_BYTES)
    }
}

impl AssetCache {
    pub(crate) fn with_cap(cap: usize) -> AssetCache {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).expect("the OS random source is available");
        AssetCache {
            cap,
            inner: Mutex::default(),
            secret,
            buffered: tokio::sync::Semaphore::new(BUFFERED_BYTES),
        }
    }

    /// A keyed digest of a catalog answer's exact bytes (after redaction): its cache validator
    /// and, quoted, its ETag. One pass of BLAKE2b (milliseconds for 6.45 MB) instead of a
    /// compression on every load; keyed, so it says nothing of the bytes but their equality.
    pub(crate) fn digest(&self, body: &[u8]) -> String {
        use blake2::{Blake2b256, Digest};
        use std::fmt::Write as _;
        let mut h = Blake2b256::new();
        h.update(self.secret);
        h.update(body);
        let d = h.finalize();
        let mut out = String::with_capacity(32);
        for b in &d[..16] {
            let _ = write!(out, "{b:02x}");
        }
        out
    }

    /// The compressed bytes for `key` (`None`: the encoder failed): from the cache, or compressed
    /// off the async workers. `true` with a hit.
    pub(crate) async fn get_or_compress(&self, key: Key, body: Bytes) -> (Option<Bytes>, bool) {
        let slot = {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.slots.entry(key.clone()).or_default().clone()
        };
        let mut made = false;
        let (coding, effort) = (key.coding, key.effort);
        let out = slot
            .get_or_init(|| async {
                made = true;
                let b = body.clone();
                tokio::task::spawn_blocking(move || compress(&b, coding, effort))
                    .await
                    .unwrap_or(None)
            })
            .await
            .clone();
        if made {
            self.account(key, out.as_ref().map_or(0, Bytes::len));
        }
        (out, !made)
    }

    fn account(&self, key: Key, len: usize) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.bytes += len;
        inner.order.push_back((key, len));
        while inner.bytes > self.cap {
            let Some((old, n)) = inner.order.pop_front() else { break };
            inner.slots.remove(&old);
            inner.bytes -= n;
        }
    }

    /// Room to read an answer of `len` bytes whole, held until the permit drops; `None` when the
    /// answers being compressed already hold [`BUFFERED_BYTES`] (the answer then streams).
    pub(crate) fn room_for(&self, len: usize) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.buffered.try_acquire_many(u32::try_from(len).ok()?).ok()
    }

    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).bytes
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, key: &Key) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.slots.get(key).is_some_and(|s| s.initialized())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::compress::MAX_BODY;

    fn key(path: &str, validator: &str) -> Key {
        Key {
            project: "demo".into(),
            path: path.into(),
            validator: validator.into(),
            coding: Coding::Gzip,
            effort: Effort::Asset,
        }
    }

    #[tokio::test]
    async fn the_cache_compresses_once_per_validator_and_stays_bounded() {
        let cache = AssetCache::with_cap(1000);
        let body = Bytes::from("a".repeat(100_000));
        let (first, hit) = cache
            .get_or_compress(key("/assets/a-123456.js", "v1"), body.clone())
            .await;
        assert!(!hit);
        let (again, hit) = cache
            .get_or_compress(key("/assets/a-123456.js", "v1"), body.clone())
            .await;
        assert!(hit);
        assert_eq!(first, again);
        // A new validator is a new entry.
        let (_, hit) = cache
            .get_or_compress(key("/assets/a-123456.js", "v2"), body.clone())
            .await;
        assert!(!hit);
        assert!(cache.held_bytes() <= 1000);
        // Fill past the cap: the oldest goes.
        for i in 0..20 {
            let b = Bytes::from(format!("{i}").repeat(50_000));
            cache
                .get_or_compress(key(&format!("/assets/f{i}-123456.js"), "v"), b)
                .await;
        }
        assert!(cache.held_bytes() <= 1000, "{}", cache.held_bytes());
        assert!(!cache.contains(&key("/assets/a-123456.js", "v1")));
        assert!(cache.contains(&key("/assets/f19-123456.js", "v")));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_first_requests_compress_once() {
        let cache = Arc::new(AssetCache::default());
        let body = Bytes::from("let x = 1;\n".repeat(300_000));
        let k = key("/assets/big-abcdef.js", "v");
        let (a, b) = tokio::join!(
            cache.get_or_compress(k.clone(), body.clone()),
            cache.get_or_compress(k.clone(), body.clone())
        );
        // Exactly one of them compressed; the other waited for its result.
        assert_eq!([a.1, b.1].iter().filter(|h| **h).count(), 1);
        assert_eq!(a.0, b.0);
        assert_eq!(cache.held_bytes(), a.0.as_ref().unwrap().len());
    }

    /// Issue 21, defect 6: each eligible answer could hold up to 16 MiB with no bound on all of
    /// them together.
    #[test]
    fn answers_read_whole_share_one_bound_and_give_it_back() {
        let cache = AssetCache::default();
        let big: Vec<_> = (0..BUFFERED_BYTES / MAX_BODY)
            .map(|_| cache.room_for(MAX_BODY).expect("room within the bound"))
            .collect();
        assert!(
            cache.room_for(1).is_none(),
            "the bound is reached: the next answer streams"
        );
        drop(big);
        assert!(
            cache.room_for(MAX_BODY).is_some(),
            "room comes back when the answers are sent"
        );
        assert!(cache.room_for(BUFFERED_BYTES + 1).is_none());
    }

    #[test]
    fn the_catalog_digest_is_keyed_and_tells_only_equality() {
        let (a, b) = (AssetCache::with_cap(10), AssetCache::with_cap(10));
        let body = b"{\"all\":[]}";
        assert_eq!(a.digest(body), a.digest(body));
        assert_ne!(a.digest(body), a.digest(b"{\"all\":[1]}"));
        // Another process (another key) digests the same bytes differently.
        assert_ne!(a.digest(body), b.digest(body));
        assert_eq!(a.digest(body).len(), 32);
    }
}
