//! The last password credential verified on one connection, so that the next request carrying
//! the same `Authorization` header skips parsing, base64 and the keyed digest of the cache lookup
//! (about 4 k of a keep-alive request's 58 k instructions; a client sends the same header on
//! every request of a connection).
//!
//! A recall gives exactly the verdict the full path would give, or nothing (and the full path
//! runs):
//! - the header bytes must equal those verified (compared in constant time);
//! - the user must still be the same configured user: the memo holds the user's `Arc`, and a
//!   reload that removes the user or changes anything about them (their password hash included)
//!   builds a new one, so `ptr_eq` fails;
//! - it expires with the cache entry the verification made or found (`auth_cache_ttl` from the
//!   argon2 run), so it never outlives it.
//!
//! Only the password path is remembered: tokens can be revoked at any time and are looked up on
//! every request. The header is held only while its connection is open (the connection has it
//! anyway) and zeroized when replaced or dropped; it is never shared between connections.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use zeroize::Zeroizing;

use crate::auth::users::UserState;
use crate::support::name_map::NameMap;

#[derive(Default)]
pub struct AuthMemo(Mutex<Option<Entry>>);

struct Entry {
    header: Zeroizing<Vec<u8>>,
    user: Arc<UserState>,
    until: Instant,
}

impl AuthMemo {
    /// The user this exact header was verified for, if that verification still stands. Never
    /// waits: a memo another stream of the connection is using counts as a miss.
    pub fn recall(&self, header: &[u8], users: &NameMap<Arc<UserState>>) -> Option<Arc<UserState>> {
        let guard = self.0.try_lock().ok()?;
        let entry = guard.as_ref()?;
        if !same(&entry.header, header) || Instant::now() >= entry.until {
            return None;
        }
        let current = users.get(&*entry.user.name)?;
        Arc::ptr_eq(current, &entry.user).then(|| entry.user.clone())
    }

    /// Remember that `header` was verified for `user` until `until`.
    pub fn remember(&self, header: &[u8], user: Arc<UserState>, until: Instant) {
        if let Ok(mut guard) = self.0.lock() {
            *guard = Some(Entry {
                header: Zeroizing::new(header.to_vec()),
                user,
                until,
            });
        }
    }
}

/// Equal bytes, compared in time that depends only on the lengths: differences are OR-ed
/// together eight bytes at a time (`subtle`'s byte-wise compare cost more than the rest of a
/// recall), and only the total is looked at.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().unwrap_or_default());
    let (x, y) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail = x
        .remainder()
        .iter()
        .zip(y.remainder())
        .fold(0u8, |d, (p, q)| d | (p ^ q));
    let diff = x.zip(y).fold(u64::from(tail), |d, (p, q)| d | (word(p) ^ word(q)));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn user(name: &str) -> Arc<UserState> {
        Arc::new(UserState {
            name: name.into(),
            hash: None,
            fingerprint: [0; 32],
            grants: crate::config::settings::Grants::Each(Default::default()),
            ssh_keys: Vec::new(),
            policy: None,
        })
    }

    #[test]
    fn same_is_byte_equality() {
        let cases: [(&[u8], &[u8]); 6] = [
            (b"", b""),
            (b"a", b"a"),
            (b"abcdefgh", b"abcdefgh"),
            (b"abcdefghi", b"abcdefghj"),
            (b"abcdefghijklmnopq", b"abcdefghijklmnopq"),
            (b"abc", b"abd"),
        ];
        for (a, b) in cases {
            assert_eq!(same(a, b), a == b, "{a:?} {b:?}");
        }
        assert!(!same(b"abc", b"abcd") && !same(b"abcdefgh\0", b"abcdefgh"));
    }

    #[test]
    fn recalls_only_the_same_header_for_the_same_user_until_expiry() {
        let alice = user("alice");
        let mut users = NameMap::default();
        users.insert("alice".into(), alice.clone());
        let memo = AuthMemo::default();
        assert!(memo.recall(b"Basic abc", &users).is_none(), "nothing remembered yet");
        memo.remember(b"Basic abc", alice.clone(), Instant::now() + Duration::from_secs(60));
        assert!(Arc::ptr_eq(&memo.recall(b"Basic abc", &users).unwrap(), &alice));
        for other in [&b"Basic abd"[..], b"Basic ab", b"Basic abcd", b"basic abc", b""] {
            assert!(
                memo.recall(other, &users).is_none(),
                "{:?} matched",
                String::from_utf8_lossy(other)
            );
        }

        // A reload that rebuilt the user (new hash, changed grants) or removed it: no recall.
        let mut reloaded = NameMap::default();
        reloaded.insert("alice".into(), user("alice"));
        assert!(memo.recall(b"Basic abc", &reloaded).is_none());
        assert!(memo.recall(b"Basic abc", &NameMap::default()).is_none());

        // Expired with its cache entry.
        memo.remember(b"Basic abc", alice, Instant::now() - Duration::from_millis(1));
        assert!(memo.recall(b"Basic abc", &users).is_none());
    }
}
