//! Pairing a phone: `opencode-gateway pair <user>` (on the host: running it is the proof of
//! presence) asks the running gateway for a code over the control socket; the phone opens
//! `https://<login host>/pair#<code>` (the code only in the fragment: never sent in a request
//! line, a log or a Referer) or has it typed in, and posts it; the gateway makes a device and a
//! persistent session for the code's user.
//!
//! A code is `IIII-SSSS-SSSS` in a base32 alphabet without the letters people confuse (no 0, 1,
//! I, O): the first group (20 bits) selects the pending code, the other two are its secret (40
//! bits). Codes live in memory only (a restart loses them: ask for another), at most 15 minutes,
//! single use (taken out under the lock that checks them), and die after [`MAX_TRIES`] wrong
//! secrets. Only a keyed digest of the secret is kept; it is compared in constant time. Every
//! attempt first passes the login limiter (see `submit`), so 40 bits are plenty. Unknown, used,
//! expired, dead and wrong codes get one answer (status, body, and the same budget charged), so
//! a guesser cannot find a live id to aim its wrong tries at.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use blake2::{Blake2b256, Digest};

use crate::auth::tokens::{now_unix, same_digest};

pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(10 * 60);
pub(crate) const MAX_TTL: Duration = Duration::from_secs(15 * 60);
/// Wrong secrets a code survives; the next one ends it.
pub(crate) const MAX_TRIES: u32 = 5;
/// Codes pending at once (each is a `pair` run on the host; this only bounds memory).
const MAX_PENDING: usize = 1000;

/// 32 symbols: digits 2–9 and the letters but I and O.
const ALPHABET: &[u8; 32] = b"23456789ABCDEFGHJKLMNPQRSTUVWXYZ";
const GROUP: usize = 4;
const ID_LEN: usize = GROUP;
const SECRET_LEN: usize = 2 * GROUP;

/// The user a refused pairing is logged under when its code selects nobody.
pub(crate) const UNKNOWN_USER: &str = "(pairing)";

/// A code just issued (shown once, on the host).
#[derive(Debug, Clone)]
pub(crate) struct Issued {
    /// `K7QM-4M2P-XW9H`.
    pub code: String,
    /// Unix seconds.
    pub expires_at: i64,
}

/// What a redeemed code was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redeemed {
    pub user: String,
    pub label: String,
}

/// Why a code was refused (a stable log field; the person sees one generic text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not a code at all.
    Malformed,
    /// No pending code has that id (never issued, used, expired, dead, or lost in a restart).
    Unknown,
    Expired,
    /// A wrong secret; the code survives (`tries_left` > 0) or died with it.
    Wrong {
        tries_left: u32,
    },
}

impl Refused {
    pub(crate) fn code(self) -> &'static str {
        match self {
            Refused::Malformed => "pairing_malformed",
            Refused::Unknown => "pairing_unknown",
            Refused::Expired => "pairing_expired",
            Refused::Wrong { tries_left: 0 } => "pairing_wrong_dead",
            Refused::Wrong { .. } => "pairing_wrong",
        }
    }
}

struct Pending {
    digest: [u8; 32],
    user: String,
    label: String,
    until: Instant,
    tries_left: u32,
}

/// Pending pairing codes, by id.
pub struct Pairing {
    key: [u8; 32],
    pending: Mutex<HashMap<String, Pending>>,
}

impl Default for Pairing {
    fn default() -> Self {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the OS random source is available");
        Pairing {
            key,
            pending: Mutex::new(HashMap::new()),
        }
    }
}

/// A code split into its id and secret, normalised (upper case, no separators).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub id: String,
    secret: String,
}

/// Read a typed or scanned code: case, spaces and dashes do not matter; `1` and `I` are read as
/// `L` (the alphabet has neither); `0` and `O` are in no code. `None` when it is not a code.
pub(crate) fn parse(text: &str) -> Option<Parsed> {
    let mut chars = String::with_capacity(ID_LEN + SECRET_LEN);
    for c in text.chars() {
        if c == '-' || c.is_whitespace() {
            continue;
        }
        let c = match c.to_ascii_uppercase() {
            '1' | 'I' => 'L',
            c => c,
        };
        if !c.is_ascii() || !ALPHABET.contains(&(c as u8)) || chars.len() == ID_LEN + SECRET_LEN {
            return None;
        }
        chars.push(c);
    }
    if chars.len() != ID_LEN + SECRET_LEN {
        return None;
    }
    let secret = chars.split_off(ID_LEN);
    Some(Parsed { id: chars, secret })
}

/// `n` random symbols of the alphabet (32 divides 256: no bias).
fn symbols(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).expect("the OS random source is available");
    b.iter().map(|x| ALPHABET[usize::from(x % 32)] as char).collect()
}

impl Pairing {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn digest(&self, id: &str, secret: &str) -> [u8; 32] {
        let mut h = Blake2b256::new();
        h.update(self.key);
        h.update(b"pairing\0");
        h.update(id.as_bytes());
        h.update(b"\0");
        h.update(secret.as_bytes());
        h.finalize().into()
    }

    /// Make a code for `user`'s device `label`, living `ttl` (at most [`MAX_TTL`]).
    pub(crate) fn issue(&self, user: &str, label: &str, ttl: Duration) -> Result<Issued, String> {
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(format!(
                "a pairing code lives at most {} minutes",
                MAX_TTL.as_secs() / 60
            ));
        }
        let now = Instant::now();
        let mut map = self.lock();
        map.retain(|_, p| p.until > now);
        if map.len() >= MAX_PENDING {
            return Err("too many pairing codes are pending; wait for some to expire".into());
        }
        let id = loop {
            let id = symbols(ID_LEN);
            if !map.contains_key(&id) {
                break id;
            }
        };
        let secret = symbols(SECRET_LEN);
        // Rounded up: a 1.5 s code is shown as expiring 2 s from now.
        let secs = i64::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).unwrap_or(i64::MAX);
        let expires_at = now_unix().saturating_add(secs);
        map.insert(
            id.clone(),
            Pending {
                digest: self.digest(&id, &secret),
                user: user.to_string(),
                label: label.to_string(),
                until: now + ttl,
                tries_left: MAX_TRIES,
            },
        );
        let code = format!("{id}-{}-{}", &secret[..GROUP], &secret[GROUP..]);
        Ok(Issued { code, expires_at })
    }

    /// The user a pending id is for (to charge the limiter before the secret is looked at).
    pub(crate) fn user_of(&self, id: &str) -> Option<String> {
        let now = Instant::now();
        self.lock().get(id).filter(|p| p.until > now).map(|p| p.user.clone())
    }

    /// Use a code: once, before it expires, while it has tries left. A wrong secret spends a try
    /// of the code its id selects and touches no other.
    pub(crate) fn redeem(&self, code: &Parsed) -> Result<Redeemed, Refused> {
        let digest = self.digest(&code.id, &code.secret);
        let mut map = self.lock();
        let Some(p) = map.get_mut(&code.id) else {
            return Err(Refused::Unknown);
        };
        if p.until <= Instant::now() {
            map.remove(&code.id);
            return Err(Refused::Expired);
        }
        if !same_digest(&p.digest, &digest) {
            p.tries_left = p.tries_left.saturating_sub(1);
            let tries_left = p.tries_left;
            if tries_left == 0 {
                map.remove(&code.id);
            }
            return Err(Refused::Wrong { tries_left });
        }
        let p = map.remove(&code.id).expect("looked up under the same lock");
        Ok(Redeemed {
            user: p.user,
            label: p.label,
        })
    }

    /// Pending codes (for tests and status).
    pub(crate) fn pending(&self) -> usize {
        let now = Instant::now();
        self.lock().values().filter(|p| p.until > now).count()
    }

    #[cfg(test)]
    fn tries_left(&self, id: &str) -> Option<u32> {
        self.lock().get(id).map(|p| p.tries_left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    #[test]
    fn codes_are_grouped_base32_and_parse_however_they_are_typed() {
        let p = Pairing::default();
        let issued = p.issue("alice", "phone", TTL).unwrap();
        let c = &issued.code;
        assert_eq!(c.len(), 14, "{c}");
        let groups: Vec<&str> = c.split('-').collect();
        assert_eq!(groups.len(), 3, "{c}");
        assert!(groups.iter().all(|g| g.len() == 4));
        assert!(c.bytes().all(|b| b == b'-' || ALPHABET.contains(&b)), "{c}");
        assert!(!c.contains(['0', '1', 'I', 'O']), "{c}");
        let plain = parse(c).unwrap();
        assert_eq!(plain.id, groups[0]);
        for typed in [
            c.to_lowercase(),
            c.replace('-', ""),
            c.replace('-', " "),
            format!("  {}  ", c.to_lowercase().replace('-', "")),
            c.chars().flat_map(|ch| [ch, ' ']).collect::<String>(),
        ] {
            assert_eq!(parse(&typed).as_ref(), Some(&plain), "{typed:?}");
        }
        assert_eq!(parse("K7QM-4M2P-XW91").unwrap(), parse("k7qm4m2pxw9l").unwrap());
        for bad in [
            "",
            "K7QM-4M2P",
            "K7QM-4M2P-XW9H-A",
            "K7QM-4M2P-XW90",
            "K7QM_4M2P_XW9H",
            "K7QM-4M2P-XW9Ü",
        ] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
        assert!(issued.expires_at > now_unix());
    }

    #[test]
    fn ttls_are_bounded() {
        let p = Pairing::default();
        assert!(p.issue("alice", "x", MAX_TTL).is_ok());
        assert!(p.issue("alice", "x", MAX_TTL + Duration::from_secs(1)).is_err());
        assert!(p.issue("alice", "x", Duration::ZERO).is_err());
        assert_eq!(p.pending(), 1);
    }

    #[test]
    fn a_code_works_once_for_its_user_and_label() {
        let p = Pairing::default();
        let c = parse(&p.issue("alice", "Alice's phone", TTL).unwrap().code).unwrap();
        assert_eq!(p.user_of(&c.id).as_deref(), Some("alice"));
        assert_eq!(
            p.redeem(&c),
            Ok(Redeemed {
                user: "alice".into(),
                label: "Alice's phone".into()
            })
        );
        assert_eq!(p.redeem(&c), Err(Refused::Unknown), "single use");
        assert_eq!(p.user_of(&c.id), None);
        assert_eq!(p.pending(), 0);
    }

    #[test]
    fn an_expired_code_is_refused() {
        let p = Pairing::default();
        let c = parse(&p.issue("alice", "phone", Duration::from_millis(30)).unwrap().code).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(p.user_of(&c.id), None);
        assert_eq!(p.redeem(&c), Err(Refused::Expired));
        assert_eq!(p.redeem(&c), Err(Refused::Unknown), "and gone");
    }

    fn wrong(c: &Parsed) -> Parsed {
        let mut secret = c.secret.clone().into_bytes();
        secret[0] = if secret[0] == b'A' { b'B' } else { b'A' };
        Parsed {
            id: c.id.clone(),
            secret: String::from_utf8(secret).unwrap(),
        }
    }

    #[test]
    fn five_wrong_tries_kill_a_code() {
        let p = Pairing::default();
        let c = parse(&p.issue("alice", "phone", TTL).unwrap().code).unwrap();
        for left in (1..MAX_TRIES).rev() {
            assert_eq!(p.redeem(&wrong(&c)), Err(Refused::Wrong { tries_left: left }));
        }
        // Four wrong, then the right one still works.
        let c2 = parse(&p.issue("alice", "phone", TTL).unwrap().code).unwrap();
        for _ in 1..MAX_TRIES {
            assert!(p.redeem(&wrong(&c2)).is_err());
        }
        assert!(p.redeem(&c2).is_ok(), "four wrong tries leave it alive");
        assert_eq!(p.redeem(&wrong(&c)), Err(Refused::Wrong { tries_left: 0 }));
        assert_eq!(p.redeem(&c), Err(Refused::Unknown), "dead after five wrong tries");
    }

    #[test]
    fn a_wrong_id_never_touches_another_code() {
        let p = Pairing::default();
        let c = parse(&p.issue("alice", "phone", TTL).unwrap().code).unwrap();
        let other_id = loop {
            let id = symbols(ID_LEN);
            if id != c.id {
                break id;
            }
        };
        for _ in 0..3 * MAX_TRIES {
            let guess = Parsed {
                id: other_id.clone(),
                secret: c.secret.clone(),
            };
            assert_eq!(
                p.redeem(&guess),
                Err(Refused::Unknown),
                "the right secret under another id"
            );
        }
        assert_eq!(p.tries_left(&c.id), Some(MAX_TRIES));
        assert!(p.redeem(&c).is_ok());
    }

    #[test]
    fn only_a_digest_is_kept() {
        let p = Pairing::default();
        let c = parse(&p.issue("alice", "phone", TTL).unwrap().code).unwrap();
        let map = p.lock();
        let pending = &map[&c.id];
        assert_eq!(pending.digest, p.digest(&c.id, &c.secret));
        assert_ne!(&pending.digest[..c.secret.len()], c.secret.as_bytes());
    }
}
