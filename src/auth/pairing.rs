//! Pairing a phone: `opencode-gateway pair <user>` (on the host: running it is the proof of
//! presence) asks the running gateway for a code over the control socket; the phone opens
//! `https://<login host>/pair#<code>` (the code only in the fragment: never sent in a request
//! line, a log or a Referer) or has it typed in, and posts it; the gateway makes a device and a
//! persistent session for the code's user.
//!
//! A code is `IIII-SSSS-SSSS` in a base32 alphabet without the letters people confuse (no 0, 1,
//! I, O): the first group (20 bits) selects the pending code, the other two are its secret (40
//! bits). Codes are single-use records in the state database (`auth/once.rs`: behind a load
//! balancer the phone may reach another gateway than the one `pair` asked), keyed by a keyed
//! digest of the id, at most 15 minutes, single use (taken in the transaction that checks them),
//! and die after [`MAX_TRIES`] wrong secrets. Every attempt first passes the login limiter (see
//! `submit`), so 40 bits are plenty online. Offline they are not: only an argon2id hash of the
//! secret is kept, since on a shared store the digest key sits in the same database, and a keyed
//! digest of 40 bits would fall to a search by whoever reads a copy of it within the code's
//! minutes. Unknown, used, expired, dead and wrong codes get one answer (status, body, the same
//! allowance charged, and an argon2 run: a redeem whose id selects nothing verifies against a dummy
//! hash), so a guesser cannot find a live id to aim its wrong tries at.

use std::sync::Arc;
use std::time::Duration;

use blake2::{Blake2b256, Digest};
use serde::{Deserialize, Serialize};

use crate::auth::once::{OnceKind, Seen, Verdict};
use crate::auth::tokens::now_unix;
use crate::store::{PutOnce, Store, StoreError};

pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(10 * 60);
pub(crate) const MAX_TTL: Duration = Duration::from_secs(15 * 60);
/// Wrong secrets a code survives; the next one ends it.
pub(crate) const MAX_TRIES: u32 = 5;
/// Codes pending at once (each is a `pair` run on the host; this only bounds the table).
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

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pending {
    /// The secret's argon2id hash (PHC string).
    hash: String,
    user: String,
    label: String,
    tries_left: u32,
}

/// Pending pairing codes, by id, in the state database. Cheap to clone.
#[derive(Clone)]
pub struct Pairing {
    key: [u8; 32],
    pending: Arc<OnceKind<Pending>>,
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

/// What a redeem whose id selects no code verifies against.
static DUMMY: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::auth::verifier::hash_password("no pairing code has this secret"));

/// Whether `secret` is the one `hash` was made from (argon2's own comparison, constant time).
fn secret_is(secret: &str, hash: &str) -> bool {
    use argon2::PasswordVerifier as _;
    argon2::PasswordHash::new(hash)
        .is_ok_and(|h| argon2::Argon2::default().verify_password(secret.as_bytes(), &h).is_ok())
}

/// `n` random symbols of the alphabet (32 divides 256: no bias).
fn symbols(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).expect("the OS random source is available");
    b.iter().map(|x| ALPHABET[usize::from(x % 32)] as char).collect()
}

impl Pairing {
    /// Codes in `store`, digested with `key` (the store's digest key: the same on every gateway
    /// sharing it).
    pub(crate) fn new(store: Arc<dyn Store>, key: [u8; 32]) -> Pairing {
        Pairing {
            key,
            pending: Arc::new(OnceKind::new(store, "pairing", MAX_TTL, MAX_PENDING)),
        }
    }

    fn keyed(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut h = Blake2b256::new();
        h.update(self.key);
        for p in parts {
            h.update(p);
            h.update(b"\0");
        }
        h.finalize().into()
    }

    /// The record's key: the id, digested (the table never shows which ids are live).
    fn slot(&self, id: &str) -> [u8; 32] {
        self.keyed(&[b"pairing-id", id.as_bytes()])
    }

    /// Make a code for `user`'s device `label`, living `ttl` (at most [`MAX_TTL`]). Blocking.
    pub(crate) fn issue(&self, user: &str, label: &str, ttl: Duration) -> Result<Issued, String> {
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(format!(
                "a pairing code lives at most {} minutes",
                MAX_TTL.as_secs() / 60
            ));
        }
        let secret = symbols(SECRET_LEN);
        let hash = crate::auth::verifier::hash_password(&secret);
        let pending = Pending {
            hash,
            user: user.to_string(),
            label: label.to_string(),
            tries_left: MAX_TRIES,
        };
        let id = loop {
            let id = symbols(ID_LEN);
            match self.pending.put_blocking(&self.slot(&id), &pending, ttl) {
                Ok(PutOnce::Kept) => break id,
                Ok(PutOnce::KeyInUse) => continue,
                Ok(PutOnce::Full) => {
                    return Err("too many pairing codes are pending; wait for some to expire".into());
                }
                Err(e) => return Err(format!("cannot keep the pairing code: {e}")),
            }
        };
        // Rounded up: a 1.5 s code is shown as expiring 2 s from now.
        let secs = i64::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).unwrap_or(i64::MAX);
        let expires_at = now_unix().saturating_add(secs);
        let code = format!("{id}-{}-{}", &secret[..GROUP], &secret[GROUP..]);
        Ok(Issued { code, expires_at })
    }

    /// The user a pending id is for.
    #[cfg(test)]
    fn user_of(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(
            match self.pending.settle_blocking(&self.slot(id), |_, _| Verdict::Keep)? {
                Seen::Live(p) => Some(p.user),
                _ => None,
            },
        )
    }

    /// Use a code: once, before it expires, while it has tries left. A wrong secret spends a try
    /// of the code its id selects and touches no other. Blocking (an argon2 run, off the store's
    /// lock: the record is read, the secret verified, then the record settled as it is then).
    /// Also returns the user the id selected, if any, for the log of a refusal.
    pub(crate) fn redeem(&self, code: &Parsed) -> Result<(Option<String>, Result<Redeemed, Refused>), StoreError> {
        let slot = self.slot(&code.id);
        let first = self
            .pending
            .settle_blocking(&slot, |_, expired| if expired { Verdict::Take } else { Verdict::Keep })?;
        let pending = match first {
            Seen::Live(p) => p,
            other => {
                // The same argon2 run as for a live code: the time does not tell ids apart.
                let _ = secret_is(&code.secret, &DUMMY);
                return Ok((
                    None,
                    Err(match other {
                        Seen::Expired(_) => Refused::Expired,
                        _ => Refused::Unknown,
                    }),
                ));
            }
        };
        let right = secret_is(&code.secret, &pending.hash);
        // Settled on what is there now: another redeem may have taken it or spent a try, and a
        // code issued since under the same id is not this one.
        let seen = self.pending.settle_blocking(&slot, |p, expired| {
            if p.hash != pending.hash {
                Verdict::Keep
            } else if expired || right || p.tries_left <= 1 {
                Verdict::Take
            } else {
                Verdict::Replace(Pending {
                    tries_left: p.tries_left - 1,
                    ..p.clone()
                })
            }
        })?;
        let verdict = match seen {
            Seen::Live(p) if p.hash != pending.hash => Err(Refused::Unknown),
            Seen::Live(p) if right => Ok(Redeemed {
                user: p.user,
                label: p.label,
            }),
            Seen::Live(p) => Err(Refused::Wrong {
                tries_left: p.tries_left.saturating_sub(1),
            }),
            Seen::Expired(_) => Err(Refused::Expired),
            Seen::Nothing => Err(Refused::Unknown),
        };
        Ok((Some(pending.user), verdict))
    }

    /// Pending codes (for tests and status).
    pub(crate) fn pending(&self) -> Result<usize, StoreError> {
        self.pending.live()
    }

    #[cfg(test)]
    fn tries_left(&self, id: &str) -> Option<u32> {
        match self
            .pending
            .settle_blocking(&self.slot(id), |_, _| Verdict::Keep)
            .unwrap()
        {
            Seen::Live(p) => Some(p.tries_left),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    /// Codes on a throwaway SQLite store (the directory lives as long as the test's process
    /// needs it: it is leaked).
    fn pairing() -> Pairing {
        let dir = tempfile::tempdir().unwrap().keep();
        let store: Arc<dyn Store> = Arc::new(crate::store::sqlite::SqliteStore::open(&dir.join("g.db")).unwrap());
        Pairing::new(store, [9; 32])
    }

    impl Pairing {
        fn pending_store(&self) -> Arc<dyn Store> {
            self.pending.store()
        }

        fn redeem_now(&self, code: &Parsed) -> Result<Redeemed, Refused> {
            self.redeem(code).unwrap().1
        }
    }

    #[test]
    fn codes_are_grouped_base32_and_parse_however_they_are_typed() {
        let p = pairing();
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
        let p = pairing();
        assert!(p.issue("alice", "x", MAX_TTL).is_ok());
        assert!(p.issue("alice", "x", MAX_TTL + Duration::from_secs(1)).is_err());
        assert!(p.issue("alice", "x", Duration::ZERO).is_err());
        assert_eq!(p.pending().unwrap(), 1);
    }

    #[test]
    fn a_code_works_once_for_its_user_and_label() {
        let p = pairing();
        let c = parse(&p.issue("alice", "Alice's phone", TTL).unwrap().code).unwrap();
        assert_eq!(p.user_of(&c.id).unwrap().as_deref(), Some("alice"));
        assert_eq!(
            p.redeem_now(&c),
            Ok(Redeemed {
                user: "alice".into(),
                label: "Alice's phone".into()
            })
        );
        assert_eq!(p.redeem_now(&c), Err(Refused::Unknown), "single use");
        assert_eq!(p.user_of(&c.id).unwrap(), None);
        assert_eq!(p.pending().unwrap(), 0);
    }

    #[test]
    fn an_expired_code_is_refused() {
        let p = pairing();
        let c = parse(&p.issue("alice", "phone", Duration::from_millis(30)).unwrap().code).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(p.user_of(&c.id).unwrap(), None);
        assert_eq!(p.redeem_now(&c), Err(Refused::Expired));
        assert_eq!(p.redeem_now(&c), Err(Refused::Unknown), "and gone");
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
        let p = pairing();
        let c = parse(&p.issue("alice", "phone", TTL).unwrap().code).unwrap();
        for left in (1..MAX_TRIES).rev() {
            assert_eq!(p.redeem_now(&wrong(&c)), Err(Refused::Wrong { tries_left: left }));
        }
        // Four wrong, then the right one still works.
        let c2 = parse(&p.issue("alice", "phone", TTL).unwrap().code).unwrap();
        for _ in 1..MAX_TRIES {
            assert!(p.redeem_now(&wrong(&c2)).is_err());
        }
        assert!(p.redeem_now(&c2).is_ok(), "four wrong tries leave it alive");
        assert_eq!(p.redeem_now(&wrong(&c)), Err(Refused::Wrong { tries_left: 0 }));
        assert_eq!(p.redeem_now(&c), Err(Refused::Unknown), "dead after five wrong tries");
    }

    #[test]
    fn a_wrong_id_never_touches_another_code() {
        let p = pairing();
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
                p.redeem_now(&guess),
                Err(Refused::Unknown),
                "the right secret under another id"
            );
        }
        assert_eq!(p.tries_left(&c.id), Some(MAX_TRIES));
        assert!(p.redeem_now(&c).is_ok());
    }

    /// Two redeems of the right code at once (as from two gateways): one pairs, the other finds
    /// nothing. The secret is verified between two transactions; the second settles it once.
    #[test]
    fn of_two_redeems_at_once_one_pairs() {
        let p = pairing();
        let c = parse(&p.issue("alice", "phone", TTL).unwrap().code).unwrap();
        let c = Arc::new(c);
        let outcomes: Vec<_> = (0..2)
            .map(|_| {
                let (p, c) = (p.clone(), c.clone());
                std::thread::spawn(move || p.redeem_now(&c))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1, "{outcomes:?}");
        assert!(outcomes.contains(&Err(Refused::Unknown)), "{outcomes:?}");
    }

    #[test]
    fn only_an_argon2_hash_of_the_secret_is_kept() {
        let p = pairing();
        let c = parse(&p.issue("alice", "phone", TTL).unwrap().code).unwrap();
        let Seen::Live(pending) = p.pending.settle_blocking(&p.slot(&c.id), |_, _| Verdict::Keep).unwrap() else {
            panic!("the code is pending");
        };
        assert!(pending.hash.starts_with("$argon2id$"), "{}", pending.hash);
        assert!(!pending.hash.contains(&c.secret));
        assert!(secret_is(&c.secret, &pending.hash));
        assert!(!secret_is(&wrong(&c).secret, &pending.hash));
    }

    #[test]
    fn a_code_issued_by_one_gateway_is_redeemed_by_another_on_the_same_store() {
        let a = pairing();
        let b = Pairing::new(a.pending_store(), a.key);
        let c = parse(&a.issue("alice", "phone", TTL).unwrap().code).unwrap();
        assert_eq!(
            b.redeem_now(&wrong(&c)),
            Err(Refused::Wrong {
                tries_left: MAX_TRIES - 1
            })
        );
        assert_eq!(a.tries_left(&c.id), Some(MAX_TRIES - 1), "the try is spent for both");
        assert_eq!(b.redeem_now(&c).map(|r| r.user), Ok("alice".to_string()));
        assert_eq!(a.redeem_now(&c), Err(Refused::Unknown), "used once, whichever gateway");
    }
}
