//! A map keyed by names that come only from the gateway's own config or tables (users, projects,
//! route roots): a request can look a name up but never add one, so a plain FNV-1a hash is safe
//! here and several times cheaper than SipHash on short names. Here, below every room, because
//! the users map (`auth`), the projects map (`gateway`) and the route index (`policy`) all use it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Users and projects by name. Every request looks both up, and their keys come only from the
/// config file, so FNV-1a (no defence against chosen keys) is safe.
pub type NameMap<V> = HashMap<String, V, BuildHasherDefault<Fnv1a>>;

#[derive(Default)]
pub struct Fnv1a(u64);

impl Hasher for Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
