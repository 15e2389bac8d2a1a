//! Who is asking. Credentials are parsed ([`credentials`]), looked up in the cache of verified
//! credentials ([`cache`]), and only on a miss verified with argon2 ([`verifier`]): a request that
//! would start a run asks the login limiter first; one that joins a run for the same credential
//! already going is not charged again. PTY WebSockets may instead present a ticket the gateway relayed ([`tickets`]).

pub mod cache;
pub mod credentials;
pub mod handoff;
pub mod memo;
pub(crate) mod once;
pub mod pairing;
pub(crate) mod passkey_parts;
pub(crate) mod passkey_sign_in;
pub mod passkeys;
pub mod sessions;
pub mod tickets;
pub mod tokens;
pub mod users;
pub mod verifier;

use crate::metrics::{LoginMethod, Metrics, Refusal};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::audit::{Audit, Record, Via};
use crate::auth::cache::AuthCache;
use crate::auth::tokens::Tokens;
use crate::auth::users::{UserState, Users};
use crate::auth::verifier::Verifier;
use crate::config::Secret;
use crate::ratelimit::{Denied, Limiters};

/// The gateway's part that checks credentials, and outlives reloads: the cache of verified
/// credentials, the argon2 verifier, the limiters (the login allowances, and the per-user request
/// rate the pipeline asks of the same table) and the API tokens. The gateway holds one; a check
/// borrows it ([`Check`]) rather than the whole gateway, so auth needs nothing above it.
pub struct Auth {
    pub cache: AuthCache,
    pub verifier: Verifier,
    pub limiters: Limiters,
    /// API tokens: the state database, the digest key, a short cache of verified tokens.
    pub tokens: Tokens,
}

/// What one credential check borrows: [`Auth`], the counters and audit trail its outcome is
/// reported to (shared with every other stage, so passed beside it, not held in it), and the
/// users of the state the request is served with. References only: nothing is cloned per request.
#[derive(Clone, Copy)]
pub(crate) struct Check<'a> {
    pub auth: &'a Auth,
    pub metrics: &'a Metrics,
    pub audit: &'a Audit,
    pub users: &'a Users,
}

/// Why a credential was refused, or could not be checked. Only the reason is said here: the
/// status, body and headers each one gets are decided with every other error's, in the one
/// table of `http/error.rs` (`From<AuthError> for HttpError`), so auth knows no HTTP type.
#[derive(Debug)]
pub(crate) enum AuthError {
    /// A wrong password, an unknown user, or a token where a password belongs.
    BadCredentials,
    /// A wrong, expired or revoked API token (or one of another user).
    BadToken,
    /// A login allowance is spent: which one, and when it refills.
    LoginLimited {
        retry_after: Duration,
        reason: &'static str,
    },
    /// The state database (API tokens) could not be asked, and why as the client is told.
    StateUnavailable(crate::store::Unavailable),
}

/// Check a user name and password. An authenticated request costs one keyed hash and a lookup;
/// argon2 runs only for a credential not seen before, and only within the login allowance.
pub(crate) async fn password(
    check: &Check<'_>,
    peer: IpAddr,
    user: &str,
    password: &Secret,
    method: &'static str,
) -> Result<Arc<UserState>, AuthError> {
    password_until(check, peer, user, password, method)
        .await
        .map(|(user, _)| user)
}

/// [`password`], and until when its verification stands (the cache entry's expiry), for a
/// connection's [`memo::AuthMemo`].
pub(crate) async fn password_until(
    check: &Check<'_>,
    peer: IpAddr,
    user: &str,
    password: &Secret,
    method: &'static str,
) -> Result<(Arc<UserState>, Instant), AuthError> {
    let auth = check.auth;
    let known = check.users.get(user).filter(|u| u.hash.is_some());
    // An unknown name may be a password typed in the wrong field: it is never logged.
    let log_user = if check.users.contains_key(user) {
        user
    } else {
        "<unknown>"
    };
    let limited = |denied: Denied, why: &'static str| limited(check, peer, log_user, method, denied, why);
    // A spent login allowance answers first: no credential from there gets a yes or no, not even
    // a cached one, until the allowance refills (a cache hit before the limiter is an oracle).
    if let Err(denied) = auth.limiters.spent(peer, Some(user)) {
        return Err(limited(denied, "login refused: limit reached"));
    }
    // A token typed as a password (the form, SSH) is never a password: charged, refused, and
    // never sent to argon2.
    if tokens::is_token(password.expose()) {
        return Err(match Box::pin(auth.limiters.attempt(peer, Some(user))).await {
            Ok(()) => refuse_bad(check, peer, log_user, method),
            Err(denied) => limited(denied, "login refused: limit reached"),
        });
    }
    let fp = known.map_or([0; 32], |u| u.fingerprint);
    let key = auth.cache.key(&fp, user, password.expose().as_bytes());
    if let Some(u) = known
        && let Some(until) = auth.cache.hit(&key, user)
    {
        return Ok((u.clone(), until));
    }
    // The login limiter is asked only when this request would start an argon2 run; a request
    // that joins a run already going for the same credential was paid for by the one that started it.
    // Boxed: a cache miss is rare, and a request's future is kept for an HTTP/1.1 connection's
    // life, sized for its largest branch.
    let verdict = Box::pin(auth.verifier.verify(
        key,
        known.and_then(|u| u.hash.as_ref()),
        password,
        || auth.limiters.login_attempt(peer, user),
        || auth.limiters.shared_attempt(peer, Some(user)),
    ))
    .await;
    let ok = match verdict {
        Ok(ok) => ok,
        Err(denied) => return Err(limited(denied, "login refused before verification: limit reached")),
    };
    match known {
        Some(u) if ok => Ok(verified(check, peer, u, key, method)),
        _ => Err(refuse_bad(check, peer, log_user, method)),
    }
}

/// A password argon2 just verified: cached, the address's spent mark cleared, counted and (but
/// for SSH, which records its own once per connection) audited as a login. The requests a
/// cached credential serves after are the same login.
fn verified(
    check: &Check<'_>,
    peer: IpAddr,
    u: &Arc<UserState>,
    key: crate::auth::cache::CacheKey,
    method: &'static str,
) -> (Arc<UserState>, Instant) {
    let until = check.auth.cache.insert(key, u.name.clone());
    check.auth.limiters.login_succeeded(peer, &u.name);
    check.metrics.login(LoginMethod::Password, true);
    if method != "ssh" {
        check.audit.record(
            Record::new("login")
                .user(&*u.name)
                .address(peer)
                .via(via_of(method), None)
                .field("method", method),
        );
    }
    (u.clone(), until)
}

/// A login refused because an allowance is spent: counted, logged and audited with which one.
fn limited(
    check: &Check<'_>,
    peer: IpAddr,
    log_user: &str,
    method: &'static str,
    denied: Denied,
    message: &'static str,
) -> AuthError {
    check.metrics.refused(Refusal::Login);
    tracing::warn!(target: "security", peer = %peer, user = log_user, reason = denied.reason, "{message}");
    check
        .audit
        .record(refused("lockout", log_user, peer, method, denied.reason));
    AuthError::LoginLimited {
        retry_after: denied.retry_after,
        reason: denied.reason,
    }
}

/// A wrong password (or a token where a password belongs): counted, logged and audited.
fn refuse_bad(check: &Check<'_>, peer: IpAddr, log_user: &str, method: &'static str) -> AuthError {
    check.metrics.login(LoginMethod::Password, false);
    tracing::warn!(target: "security", peer = %peer, user = log_user, reason = "bad_credentials", "login failed");
    check
        .audit
        .record(refused("login_failed", log_user, peer, method, "bad_credentials"));
    AuthError::BadCredentials
}

fn via_of(method: &str) -> Via {
    if method == "ssh" { Via::Ssh } else { Via::Password }
}

/// A refused login: the name only when it is a configured user's (an unknown name may be a
/// password typed in the wrong field), never the password.
fn refused(event: &'static str, log_user: &str, peer: IpAddr, method: &'static str, reason: &'static str) -> Record {
    let mut r = Record::new(event)
        .address(peer)
        .via(via_of(method), None)
        .field("method", method)
        .field("reason", reason);
    if log_user != "<unknown>" {
        r = r.user(log_user);
    }
    r
}
