//! API tokens for scripts and CI: `ocgw_` + 256 random bits (base64url). Shown once; the state
//! database keeps only a keyed BLAKE2b digest (the key is a file beside it, so the database alone
//! is not enough to test guesses offline). A token is usable as the password of Basic (its user's
//! name as the user) or as `Authorization: Bearer`.
//!
//! Checking one costs a digest and, at most once a second per token, a database lookup: no
//! argon2 (256 random bits need no stretching). A token narrows its user's grants, never widens
//! them: at create time a wider scope is refused, and at use time the token's scope is intersected
//! with the user's grants of the moment. A wrong, expired or revoked token is charged to the login
//! limiter like a wrong password; once an address is over its budget, its uncached tokens get 429
//! before the database is asked (a valid token is not charged: a CI fleet cannot lock itself out).

use crate::metrics::LoginMethod;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use blake2::{Blake2b256, Digest};
use subtle::ConstantTimeEq;

use super::users::UserState;
use super::{AuthError, Check};
use crate::audit::{Record, Via};
use crate::config::{Grants, Role, Secret};
use crate::store::{TokenRecord, TokenStore};
use crate::support::ttl_map::TtlMap;

/// Every token starts with this, so a token is recognisable (secret scanners, the Basic password
/// path) and never mistaken for a password.
pub(crate) const PREFIX: &str = "ocgw_";
/// 256 bits of randomness.
const RANDOM_BYTES: usize = 32;
/// The digest key's file under `state_dir`.
pub(crate) const KEY_FILE: &str = "token-digest.key";
/// How long a verified token is trusted without asking the database again. Revocation through the
/// CLI also clears the cache at once (over the control socket); this bounds it when that fails.
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(1);
const CACHE_ENTRIES: usize = 10_000;

pub(crate) type TokenDigest = [u8; 32];

/// True when `secret` is meant as a token (and so must not go to argon2).
pub(crate) fn is_token(secret: &str) -> bool {
    secret.starts_with(PREFIX)
}

/// A new token and its public id.
pub(crate) fn generate() -> (Secret, String) {
    let mut bytes = [0u8; RANDOM_BYTES];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    let token = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    let mut id = [0u8; 6];
    getrandom::fill(&mut id).expect("the OS random source is available");
    let id = id.iter().map(|b| format!("{b:02x}")).collect::<String>();
    (Secret::new(token), format!("tok_{id}"))
}

/// The keyed digest a token is stored and looked up by.
pub(crate) fn digest(key: &[u8; 32], token: &str) -> TokenDigest {
    let mut h = Blake2b256::new();
    h.update(key);
    h.update(token.as_bytes());
    h.finalize().into()
}

/// Digests compared in constant time.
pub(crate) fn same_digest(a: &TokenDigest, b: &TokenDigest) -> bool {
    bool::from(a.ct_eq(b))
}

/// Make a token for `user` with `scope` (already checked) and store only its digest. The token is
/// returned to be shown once.
pub(crate) fn issue(
    store: &dyn TokenStore,
    key: &[u8; 32],
    user: &str,
    scope: &Scope,
    ttl: Duration,
    label: &str,
) -> Result<(Secret, TokenRecord), crate::store::StoreError> {
    let (secret, id) = generate();
    let now = now_unix();
    let record = TokenRecord {
        id,
        digest: digest(key, secret.expose()),
        user: user.to_string(),
        label: label.to_string(),
        role: scope.role.map(|r| r.as_str().to_string()),
        projects: scope.projects.clone(),
        created_at: now,
        expires_at: now.saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX)),
        last_used_at: None,
        revoked_at: None,
    };
    store.insert_token(&record)?;
    Ok((secret, record))
}

/// The key that digests tokens and cookie values: the one every gateway on a shared store uses
/// (kept in that store), else this gateway's file in `state_dir` ([`load_or_create_key`]).
pub(crate) fn digest_key(
    settings: &crate::config::Settings,
    store: &dyn crate::store::Store,
) -> anyhow::Result<[u8; 32]> {
    let mut fresh = [0u8; 32];
    getrandom::fill(&mut fresh).expect("the OS random source is available");
    match store.shared_key("digest", &fresh)? {
        Some(key) => Ok(key),
        None => load_or_create_key(&settings.server.state_dir),
    }
}

/// The digest key, made (owner-only) on first use by whichever of the CLI and the gateway comes first.
pub(crate) fn load_or_create_key(state_dir: &Path) -> anyhow::Result<[u8; 32]> {
    use anyhow::Context;
    use std::io::Write;
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("server.state_dir: cannot create {}", state_dir.display()))?;
    let path = state_dir.join(KEY_FILE);
    let mut key = [0u8; 32];
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => {
            getrandom::fill(&mut key).expect("the OS random source is available");
            f.write_all(&key)?;
            f.sync_all()?;
            return Ok(key);
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
    }
    // Another process may have just created it: give it a moment to write the key.
    for _ in 0..50 {
        let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        if let Ok(k) = <[u8; 32]>::try_from(bytes.as_slice()) {
            return Ok(k);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    anyhow::bail!(
        "{} is not a 32-byte key; fix: remove it (every token is then void)",
        path.display()
    )
}

pub(crate) fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `30d`, `12h`, `90m`, `45s`.
pub(crate) fn parse_ttl(text: &str) -> Option<Duration> {
    let text = text.trim();
    let unit = match text.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    let n: u64 = text[..text.len() - 1].parse().ok()?;
    let secs = n.checked_mul(unit).filter(|s| *s > 0 && *s <= 100 * 365 * 86_400)?;
    Some(Duration::from_secs(secs))
}

/// What a token may do, within its user's grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scope {
    /// At most this role; `None`: the user's own.
    pub role: Option<Role>,
    /// Only these projects; `None`: all the user's.
    pub projects: Option<Vec<String>>,
}

impl Scope {
    pub(crate) fn of(record: &TokenRecord) -> Scope {
        Scope {
            role: record.role.as_deref().and_then(Role::parse),
            projects: record.projects.clone(),
        }
    }

    /// Refuse a scope wider than `grants` (checked at create time). `known` says which projects exist.
    pub(crate) fn check_within(&self, grants: &Grants, known: impl Fn(&str) -> bool) -> Result<(), String> {
        let within = |project: &str, user_role: Role| match self.role {
            Some(r) if r > user_role => Err(format!(
                "the token's role {} is wider than the user's role {} in project {project}",
                r.as_str(),
                user_role.as_str()
            )),
            _ => Ok(()),
        };
        match (&self.projects, grants) {
            (Some(list), _) => {
                if list.is_empty() {
                    return Err("--projects names no project".into());
                }
                for p in list {
                    if !known(p) {
                        return Err(format!("there is no project {p:?}"));
                    }
                    let role = grants
                        .role_in(p)
                        .ok_or_else(|| format!("the user has no access to project {p}"))?;
                    within(p, role)?;
                }
                Ok(())
            }
            (None, Grants::All(role)) => within("*", *role),
            (None, Grants::Each(map)) => map.iter().try_for_each(|(p, role)| within(p, *role)),
        }
    }

    /// The grants a request with this token gets: the user's grants of the moment, narrowed.
    pub(crate) fn narrow(&self, grants: &Grants) -> Grants {
        let cap = |r: Role| self.role.map_or(r, |t| t.min(r));
        match (&self.projects, grants) {
            (None, Grants::All(r)) => Grants::All(cap(*r)),
            (None, Grants::Each(map)) => Grants::Each(map.iter().map(|(p, r)| (p.clone(), cap(*r))).collect()),
            (Some(list), _) => Grants::Each(
                list.iter()
                    .filter_map(|p| Some((p.clone(), cap(grants.role_in(p)?))))
                    .collect(),
            ),
        }
    }
}

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
    // A spent login budget answers first, cached token or not: an address over its budget
    // learns nothing, from the cache or the database, until the budget refills.
    if let Err(denied) = check.auth.limiters.spent(peer, basic_user) {
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
        return Err(AuthError::LoginLimited {
            retry_after: denied.retry_after,
            reason: denied.reason,
        });
    }
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
                    check.metrics.login(LoginMethod::Token, true);
                    check.audit.record(
                        Record::new("login")
                            .user(&*user.name)
                            .address(peer)
                            .via(Via::Token, Some(&v.id))
                            .field("method", login_method(basic_user)),
                    );
                }
                return Ok((
                    Arc::new(UserState {
                        name: user.name.clone(),
                        hash: None,
                        fingerprint: user.fingerprint,
                        grants: v.scope.narrow(&user.grants),
                        ssh_keys: Vec::new(),
                    }),
                    v.id.clone(),
                ));
            }
            None => Refusal::UserGone(v.id.clone()),
        },
        Err(r) => r,
    };
    Err(refuse(check, peer, basic_user, refusal).await)
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
    use std::collections::BTreeMap;

    #[test]
    fn tokens_are_prefixed_256_bit_base64url_and_unique() {
        let (t, id) = generate();
        let text = t.expose();
        assert!(is_token(text));
        let body = text.strip_prefix(PREFIX).unwrap();
        assert_eq!(URL_SAFE_NO_PAD.decode(body).unwrap().len(), 32);
        assert!(
            body.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert!(id.starts_with("tok_") && id.len() == 16);
        let many: std::collections::HashSet<String> = (0..1000).map(|_| generate().0.expose().to_string()).collect();
        assert_eq!(many.len(), 1000);
        // Each of the 256 bits varies across tokens (no stuck bits from a bad encoding).
        let (mut ones, mut zeros) = ([false; 32 * 8], [false; 32 * 8]);
        for t in &many {
            let bytes = URL_SAFE_NO_PAD.decode(&t[PREFIX.len()..]).unwrap();
            for (i, b) in bytes.iter().enumerate() {
                for bit in 0..8 {
                    if b >> bit & 1 == 1 {
                        ones[i * 8 + bit] = true
                    } else {
                        zeros[i * 8 + bit] = true
                    }
                }
            }
        }
        assert!(ones.iter().chain(&zeros).all(|&x| x));
    }

    #[test]
    fn the_digest_is_keyed() {
        let (t, _) = generate();
        assert_ne!(digest(&[1; 32], t.expose()), digest(&[2; 32], t.expose()));
        assert_eq!(digest(&[1; 32], t.expose()), digest(&[1; 32], t.expose()));
    }

    #[test]
    fn the_key_file_is_made_once_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let k1 = load_or_create_key(dir.path()).unwrap();
        let k2 = load_or_create_key(dir.path()).unwrap();
        assert_eq!(k1, k2);
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn ttl_spellings() {
        assert_eq!(parse_ttl("30d"), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_ttl("12h"), Some(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_ttl("5s"), Some(Duration::from_secs(5)));
        for bad in ["", "d", "0d", "-1d", "3w", "1.5h", "99999999999999999999d"] {
            assert_eq!(parse_ttl(bad), None, "{bad}");
        }
    }

    fn each(pairs: &[(&str, Role)]) -> Grants {
        Grants::Each(
            pairs
                .iter()
                .map(|(p, r)| (p.to_string(), *r))
                .collect::<BTreeMap<_, _>>(),
        )
    }

    #[test]
    fn a_scope_can_only_narrow() {
        let grants = each(&[("web", Role::Operator), ("api", Role::Viewer)]);
        let known = |p: &str| p == "web" || p == "api" || p == "ops";
        let scope = |role, projects: Option<&[&str]>| Scope {
            role,
            projects: projects.map(|l| l.iter().map(|s| s.to_string()).collect()),
        };
        assert!(
            scope(Some(Role::Viewer), Some(&["web"]))
                .check_within(&grants, known)
                .is_ok()
        );
        assert!(scope(None, None).check_within(&grants, known).is_ok());
        let wider = scope(Some(Role::Operator), None)
            .check_within(&grants, known)
            .unwrap_err();
        assert!(wider.contains("api"), "{wider}");
        assert!(
            scope(Some(Role::Admin), Some(&["web"]))
                .check_within(&grants, known)
                .is_err()
        );
        assert!(
            scope(None, Some(&["ops"])).check_within(&grants, known).is_err(),
            "not granted"
        );
        assert!(
            scope(None, Some(&["nope"]))
                .check_within(&Grants::All(Role::Admin), known)
                .is_err()
        );
        assert!(
            scope(Some(Role::Admin), None)
                .check_within(&Grants::All(Role::Operator), known)
                .is_err()
        );
    }

    #[test]
    fn at_use_the_scope_meets_the_users_grants_of_the_moment() {
        let scope = Scope {
            role: Some(Role::Operator),
            projects: Some(vec!["web".into(), "api".into()]),
        };
        // The user was demoted in api and lost web since the token was made.
        let now = each(&[("api", Role::Viewer), ("ops", Role::Admin)]);
        let g = scope.narrow(&now);
        assert_eq!(g.role_in("api"), Some(Role::Viewer));
        assert_eq!(g.role_in("web"), None);
        assert_eq!(g.role_in("ops"), None);
        let viewer = Scope {
            role: Some(Role::Viewer),
            projects: None,
        };
        assert_eq!(viewer.narrow(&Grants::All(Role::Admin)), Grants::All(Role::Viewer));
        let all = Scope {
            role: None,
            projects: None,
        };
        assert_eq!(all.narrow(&now), now);
    }

    /// A store that counts lookups, for the cache and expiry tests.
    #[derive(Default)]
    struct Memory(std::sync::Mutex<Vec<TokenRecord>>, AtomicU64);

    impl TokenStore for Memory {
        fn insert_token(&self, t: &TokenRecord) -> Result<(), crate::store::StoreError> {
            self.0.lock().unwrap().push(t.clone());
            Ok(())
        }
        fn token_by_digest(&self, d: &[u8; 32]) -> Result<Option<TokenRecord>, crate::store::StoreError> {
            self.1.fetch_add(1, Ordering::SeqCst);
            Ok(self.0.lock().unwrap().iter().find(|t| &t.digest == d).cloned())
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

    /// A store that answers with a row whatever it is asked (a backend bug, or a lookup by prefix).
    struct Sloppy(TokenRecord);

    impl TokenStore for Sloppy {
        fn insert_token(&self, _: &TokenRecord) -> Result<(), crate::store::StoreError> {
            Ok(())
        }
        fn token_by_digest(&self, _: &[u8; 32]) -> Result<Option<TokenRecord>, crate::store::StoreError> {
            Ok(Some(self.0.clone()))
        }
        fn list_tokens(&self, _: Option<&str>) -> Result<Vec<TokenRecord>, crate::store::StoreError> {
            Ok(vec![])
        }
        fn revoke_token(&self, _: &str, _: i64) -> Result<bool, crate::store::StoreError> {
            Ok(false)
        }
        fn touch_token(&self, _: &str, _: i64) -> Result<(), crate::store::StoreError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_digest_is_compared_in_constant_time_after_the_lookup() {
        let key = [3; 32];
        let t = Tokens::new(Arc::new(Sloppy(record(&key, "ocgw_real", now_unix() + 60))), key);
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
