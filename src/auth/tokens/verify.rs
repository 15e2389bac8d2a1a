//! The gateway's side of tokens: a short cache of verified ones, a database lookup at most once
//! a second per token, and a refused token charged to the login limiter and logged by id only.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{CACHE_ENTRIES, CACHE_TTL, Scope, TokenDigest, digest, now_unix, same_digest};
use crate::audit::{Record, Via};
use crate::auth::users::UserState;
use crate::auth::{AuthError, Check};
use crate::config::Secret;
use crate::metrics::LoginMethod;
use crate::store::TokenStore;
use crate::support::ttl_map::TtlMap;

/// A token the database vouched for, within the last [`CACHE_TTL`].
struct Verified {
    id: Arc<str>,
    user: Arc<str>,
    scope: Scope,
    expires_at: i64,
    generation: u64,
}

/// The gateway's side: the store, the digest key, and the short cache of verified tokens.
pub struct Tokens {
    store: Arc<dyn TokenStore>,
    key: [u8; 32],
    cache: TtlMap<TokenDigest, Arc<Verified>>,
    /// Bumped when the CLI says tokens changed: every cached verification is void at once.
    generation: AtomicU64,
}

/// Why a token was refused (a stable log field).
enum Refusal {
    Unknown,
    Expired(Arc<str>, Arc<str>),
    Revoked(Arc<str>, Arc<str>),
    WrongUser(Arc<str>),
    UserGone(Arc<str>),
}

impl Tokens {
    pub(crate) fn new(store: Arc<dyn TokenStore>, key: [u8; 32]) -> Tokens {
        Tokens {
            store,
            key,
            cache: TtlMap::new(CACHE_ENTRIES, CACHE_TTL),
            generation: AtomicU64::new(0),
        }
    }

    /// Tokens were revoked (or changed): forget every verification.
    pub(crate) fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.cache.retain(|_, _| false);
    }

    fn cached(&self, digest: &TokenDigest) -> Option<Arc<Verified>> {
        let v = self.cache.get(digest)?;
        (v.generation == self.generation.load(Ordering::SeqCst)).then_some(v)
    }

    /// Ask the database (off the async workers: a write may wait on the CLI's lock).
    async fn lookup(&self, digest: TokenDigest) -> Result<Result<Arc<Verified>, Refusal>, AuthError> {
        let generation = self.generation.load(Ordering::SeqCst);
        let store = self.store.clone();
        let now = now_unix();
        let found = crate::store::blocking("token lookup", move || {
            let record = store.token_by_digest(&digest)?;
            // Compared again in constant time: the index lookup is an ordinary comparison, and
            // this keeps a future backend that looks up by prefix honest.
            let record = record.filter(|r| same_digest(&r.digest, &digest));
            if let Some(r) = &record
                && r.revoked_at.is_none()
                && r.expires_at > now
            {
                // Last use is bookkeeping: a full disk must not refuse a valid token (the
                // store says once that it cannot write).
                let _ = store.touch_token(&r.id, now);
            }
            Ok(record)
        })
        .await
        .map_err(|e| AuthError::StateUnavailable(e.into()))?;
        let Some(r) = found else {
            return Ok(Err(Refusal::Unknown));
        };
        let (id, user): (Arc<str>, Arc<str>) = (r.id.as_str().into(), r.user.as_str().into());
        if r.revoked_at.is_some() {
            return Ok(Err(Refusal::Revoked(id, user)));
        }
        if r.expires_at <= now {
            return Ok(Err(Refusal::Expired(id, user)));
        }
        let v = Arc::new(Verified {
            scope: Scope::of(&r),
            id,
            user,
            expires_at: r.expires_at,
            generation,
        });
        // A revocation while we asked voids this answer too.
        if self.generation.load(Ordering::SeqCst) == generation {
            self.cache.insert(digest, v.clone());
        }
        Ok(Ok(v))
    }
}

/// The user behind a token, with grants narrowed to the token's scope. `basic_user` is the user
/// name of Basic credentials (the token must be that user's), `None` for Bearer.
pub(crate) async fn authenticate(
    check: &Check<'_>,
    peer: IpAddr,
    basic_user: Option<&str>,
    token: &Secret,
) -> Result<(Arc<UserState>, Arc<str>), AuthError> {
    let tokens = &check.auth.tokens;
    // A spent login allowance answers first, cached token or not: an address over its budget
    // learns nothing, from the cache or the database, until the allowance refills.
    allowance_left(check, peer, basic_user)?;
    let digest = digest(&tokens.key, token.expose());
    let cached = tokens.cached(&digest);
    let fresh = cached.is_none();
    let verdict = match cached {
        Some(v) => Ok(v),
        None => tokens.lookup(digest).await?,
    };
    let refusal = match verdict {
        Ok(v) if v.expires_at <= now_unix() => Refusal::Expired(v.id.clone(), v.user.clone()),
        Ok(v) if basic_user.is_some_and(|u| u != &*v.user) => Refusal::WrongUser(v.id.clone()),
        Ok(v) => match check.users.get(&*v.user) {
            Some(user) => {
                // A login is a verification against the database, not every cached request.
                if fresh {
                    logged_in(check, peer, basic_user, &user.name, &v.id);
                }
                return Ok((scoped(user, &v), v.id.clone()));
            }
            None => Refusal::UserGone(v.id.clone()),
        },
        Err(r) => r,
    };
    Err(refuse(check, peer, basic_user, refusal).await)
}

/// Refused before any lookup while the address (or the Basic user) has spent its login
/// allowance; the user is named in the log only when it exists.
fn allowance_left(check: &Check<'_>, peer: IpAddr, basic_user: Option<&str>) -> Result<(), AuthError> {
    let Err(denied) = check.auth.limiters.spent(peer, basic_user) else {
        return Ok(());
    };
    check.metrics.refused(crate::metrics::Refusal::Login);
    let log_user = basic_user
        .filter(|u| check.users.contains_key(*u))
        .unwrap_or("<unknown>");
    tracing::warn!(target: "security", peer = %peer, user = log_user, reason = denied.reason, "token refused before lookup: login limit reached");
    check.audit.record(refusal_record(
        "lockout",
        log_user,
        peer,
        basic_user,
        "-",
        denied.reason,
    ));
    Err(AuthError::LoginLimited {
        retry_after: denied.retry_after,
        reason: denied.reason,
    })
}

/// A token login counted and audited (its id, never its text).
fn logged_in(check: &Check<'_>, peer: IpAddr, basic_user: Option<&str>, name: &str, id: &str) {
    check.metrics.login(LoginMethod::Token, true);
    check.audit.record(
        Record::new("login")
            .user(name)
            .address(peer)
            .via(Via::Token, Some(id))
            .field("method", login_method(basic_user)),
    );
}

/// The token's user with grants narrowed to the token's scope (no password, no SSH keys: a
/// token is not a way to either).
fn scoped(user: &UserState, v: &Verified) -> Arc<UserState> {
    Arc::new(UserState {
        name: user.name.clone(),
        hash: None,
        fingerprint: user.fingerprint,
        grants: v.scope.narrow(&user.grants),
        ssh_keys: Vec::new(),
        policy: v.scope.policy.as_deref().map(Arc::from),
    })
}

/// Charge the login limiter and log, without the token: its id when known, never its text.
async fn refuse(check: &Check<'_>, peer: IpAddr, basic_user: Option<&str>, refusal: Refusal) -> AuthError {
    let (reason, id, owner) = match &refusal {
        Refusal::Unknown => ("bad_token", None, None),
        Refusal::Expired(id, u) => ("token_expired", Some(id), Some(u)),
        Refusal::Revoked(id, u) => ("token_revoked", Some(id), Some(u)),
        Refusal::WrongUser(id) => ("token_of_another_user", Some(id), None),
        Refusal::UserGone(id) => ("token_user_removed", Some(id), None),
    };
    // Charged to the name the client gave, else to the token's owner, else to one shared key for
    // unknown bearer tokens (user names cannot contain '<').
    let user = basic_user.or(owner.map(|u| &**u)).unwrap_or("<token>");
    let log_user = if check.users.contains_key(user) {
        user
    } else {
        "<unknown>"
    };
    let id = id.map_or("-", |i| &**i);
    if let Err(denied) = check.auth.limiters.attempt(peer, Some(user)).await {
        check.metrics.refused(crate::metrics::Refusal::Login);
        tracing::warn!(target: "security", peer = %peer, user = log_user, token_id = id, reason = denied.reason, "token refused: login limit reached");
        check
            .audit
            .record(refusal_record("lockout", log_user, peer, basic_user, id, denied.reason));
        return AuthError::LoginLimited {
            retry_after: denied.retry_after,
            reason: denied.reason,
        };
    }
    check.metrics.login(LoginMethod::Token, false);
    tracing::warn!(target: "security", peer = %peer, user = log_user, token_id = id, reason, "token refused");
    check
        .audit
        .record(refusal_record("login_failed", log_user, peer, basic_user, id, reason));
    AuthError::BadToken
}

fn login_method(basic_user: Option<&str>) -> &'static str {
    if basic_user.is_some() { "basic" } else { "bearer" }
}

/// A refused token: its id when known (never its text), the user only when one of the config's.
fn refusal_record(
    event: &'static str,
    log_user: &str,
    peer: IpAddr,
    basic_user: Option<&str>,
    id: &str,
    reason: &'static str,
) -> Record {
    let mut r = Record::new(event)
        .address(peer)
        .via(Via::Token, (id != "-").then_some(id))
        .field("method", login_method(basic_user))
        .field("reason", reason);
    if log_user != "<unknown>" {
        r = r.user(log_user);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::tokens::{PREFIX, issue, load_or_create_key};
    use crate::config::Role;
    use crate::store::TokenRecord;
    use std::time::Duration;

    /// A store that counts lookups, for the cache and expiry tests; a sloppy one (`.2`) answers
    /// with its first row whatever it is asked (a backend bug, or a lookup by prefix).
    #[derive(Default)]
    struct Memory(std::sync::Mutex<Vec<TokenRecord>>, AtomicU64, bool);

    impl TokenStore for Memory {
        fn insert_token(&self, t: &TokenRecord) -> Result<(), crate::store::StoreError> {
            self.0.lock().unwrap().push(t.clone());
            Ok(())
        }
        fn token_by_digest(&self, d: &[u8; 32]) -> Result<Option<TokenRecord>, crate::store::StoreError> {
            self.1.fetch_add(1, Ordering::SeqCst);
            Ok(self
                .0
                .lock()
                .unwrap()
                .iter()
                .find(|t| self.2 || &t.digest == d)
                .cloned())
        }
        fn list_tokens(&self, _: Option<&str>) -> Result<Vec<TokenRecord>, crate::store::StoreError> {
            Ok(self.0.lock().unwrap().clone())
        }
        fn revoke_token(&self, id: &str, at: i64) -> Result<bool, crate::store::StoreError> {
            let mut v = self.0.lock().unwrap();
            let t = v.iter_mut().find(|t| t.id == id);
            Ok(t.map(|t| t.revoked_at = Some(at)).is_some())
        }
        fn touch_token(&self, _: &str, _: i64) -> Result<(), crate::store::StoreError> {
            Ok(())
        }
        fn set_session_policy(&self, _: &crate::store::SessionPolicy, _: i64) -> Result<(), crate::store::StoreError> {
            Ok(())
        }
        fn session_policies(&self) -> Result<Vec<crate::store::SessionPolicy>, crate::store::StoreError> {
            Ok(vec![])
        }
    }

    fn record(key: &[u8; 32], token: &str, expires_at: i64) -> TokenRecord {
        TokenRecord {
            id: "tok_1".into(),
            digest: digest(key, token),
            user: "alice".into(),
            label: String::new(),
            role: None,
            projects: None,
            created_at: 0,
            expires_at,
            last_used_at: None,
            revoked_at: None,
            policy: None,
        }
    }

    #[tokio::test]
    async fn expired_and_revoked_tokens_are_refused_and_revocation_voids_the_cache() {
        let store = Arc::new(Memory::default());
        let t = Tokens::new(store.clone(), [7; 32]);
        store
            .insert_token(&record(&t.key, "ocgw_live", now_unix() + 60))
            .unwrap();
        let mut old = record(&t.key, "ocgw_old", now_unix() - 1);
        old.id = "tok_2".into();
        store.insert_token(&old).unwrap();
        let live = digest(&t.key, "ocgw_live");
        assert!(t.lookup(digest(&t.key, "ocgw_old")).await.unwrap().is_err(), "expired");
        assert!(t.lookup(digest(&t.key, "ocgw_nope")).await.unwrap().is_err());
        assert!(t.lookup(live).await.unwrap().is_ok());
        assert!(t.cached(&live).is_some(), "a verified token is cached");
        store.revoke_token("tok_1", now_unix()).unwrap();
        t.invalidate();
        assert!(t.cached(&live).is_none(), "revocation voids the cache at once");
        assert!(matches!(t.lookup(live).await.unwrap(), Err(Refusal::Revoked(..))));
    }

    #[test]
    fn only_the_digest_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::open(dir.path()).unwrap();
        let key = load_or_create_key(dir.path()).unwrap();
        let scope = Scope {
            role: Some(Role::Viewer),
            projects: None,
            policy: None,
        };
        let (secret, record) = issue(&*store, &key, "alice", &scope, Duration::from_secs(60), "ci").unwrap();
        assert_eq!(record.digest, digest(&key, secret.expose()));
        assert_eq!(store.token_by_digest(&record.digest).unwrap().unwrap().id, record.id);
        drop(store);
        let body = &secret.expose()[PREFIX.len()..];
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(body), "the token is stored in clear");
        }
    }

    #[tokio::test]
    async fn the_digest_is_compared_in_constant_time_after_the_lookup() {
        let key = [3; 32];
        let sloppy = Memory(
            std::sync::Mutex::new(vec![record(&key, "ocgw_real", now_unix() + 60)]),
            AtomicU64::new(0),
            true,
        );
        let t = Tokens::new(Arc::new(sloppy), key);
        assert!(t.lookup(digest(&key, "ocgw_real")).await.unwrap().is_ok());
        assert!(matches!(
            t.lookup(digest(&key, "ocgw_guess")).await.unwrap(),
            Err(Refusal::Unknown)
        ));
        assert!(same_digest(&[1; 32], &[1; 32]) && !same_digest(&[1; 32], &[2; 32]));
    }

    #[test]
    fn the_cache_is_short() {
        // Expiry and a revocation the gateway was not told about still win within a second.
        assert!(CACHE_TTL <= Duration::from_secs(1));
    }
}
