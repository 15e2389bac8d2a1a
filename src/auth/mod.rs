//! Who is asking. Credentials are parsed ([`credentials`]), looked up in the cache of verified
//! credentials ([`cache`]), and only on a miss verified with argon2 ([`verifier`]): a request that
//! would start a run asks the login limiter first; one that joins a run for the same credential
//! already going is not charged again. PTY WebSockets may instead present a ticket the gateway relayed ([`tickets`]).

pub mod cache;
pub mod credentials;
pub mod handoff;
pub mod memo;
pub mod pairing;
pub mod sessions;
pub mod tickets;
pub mod tokens;
pub mod users;
pub mod verifier;

use crate::metrics::{LoginMethod, Refusal};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::audit::{Record, Via};
use crate::auth::users::UserState;
use crate::config::Secret;
use crate::gateway::Gateway;
use crate::gateway::state::State;
use crate::http::error::HttpError;
use crate::ratelimit::Denied;

/// Check a user name and password. An authenticated request costs one keyed hash and a lookup;
/// argon2 runs only for a credential not seen before, and only within the login budget.
pub async fn password(
    gw: &Gateway,
    state: &State,
    peer: IpAddr,
    user: &str,
    password: &Secret,
    method: &'static str,
) -> Result<Arc<UserState>, HttpError> {
    password_until(gw, state, peer, user, password, method)
        .await
        .map(|(user, _)| user)
}

/// [`password`], and until when its verification stands (the cache entry's expiry), for a
/// connection's [`memo::AuthMemo`].
pub async fn password_until(
    gw: &Gateway,
    state: &State,
    peer: IpAddr,
    user: &str,
    password: &Secret,
    method: &'static str,
) -> Result<(Arc<UserState>, Instant), HttpError> {
    let known = state.users.get(user).filter(|u| u.hash.is_some());
    // An unknown name may be a password typed in the wrong field: it is never logged.
    let log_user = if state.users.contains_key(user) {
        user
    } else {
        "<unknown>"
    };
    // A spent login budget answers first: no credential from there gets a yes or no, not even
    // a cached one, until the budget refills (a cache hit before the limiter is an oracle).
    if let Err(denied) = gw.limiters.spent(peer, Some(user)) {
        return Err(limited(
            gw,
            peer,
            log_user,
            method,
            denied,
            "login refused: limit reached",
        ));
    }
    // A token typed as a password (the form, SSH) is never a password: charged, refused, and
    // never sent to argon2.
    if tokens::is_token(password.expose()) {
        return Err(match gw.limiters.login_attempt(peer, user) {
            Ok(()) => refuse_bad(gw, peer, log_user, method),
            Err(denied) => limited(gw, peer, log_user, method, denied, "login refused: limit reached"),
        });
    }
    let fp = known.map_or([0; 32], |u| u.fingerprint);
    let key = gw.cache.key(&fp, user, password.expose().as_bytes());
    if let Some(u) = known
        && let Some(until) = gw.cache.hit(&key, user)
    {
        return Ok((u.clone(), until));
    }
    // The login limiter is asked only when this request would start an argon2 run; a request
    // that joins a run already going for the same credential was paid for by the one that started it.
    let verdict = gw
        .verifier
        .verify(key, known.and_then(|u| u.hash.as_ref()), password, || {
            gw.limiters.login_attempt(peer, user)
        })
        .await;
    let ok = match verdict {
        Ok(ok) => ok,
        Err(denied) => {
            return Err(limited(
                gw,
                peer,
                log_user,
                method,
                denied,
                "login refused before verification: limit reached",
            ));
        }
    };
    match known {
        Some(u) if ok => Ok(verified(gw, peer, u, key, method)),
        _ => Err(refuse_bad(gw, peer, log_user, method)),
    }
}

/// A password argon2 just verified: cached, the address's spent mark cleared, counted and (but
/// for SSH, which records its own once per connection) audited as a login. The requests a
/// cached credential serves after are the same login.
fn verified(
    gw: &Gateway,
    peer: IpAddr,
    u: &Arc<UserState>,
    key: crate::auth::cache::CacheKey,
    method: &'static str,
) -> (Arc<UserState>, Instant) {
    let until = gw.cache.insert(key, u.name.clone());
    gw.limiters.login_succeeded(peer, &u.name);
    gw.metrics.login(LoginMethod::Password, true);
    if method != "ssh" {
        gw.audit.record(
            Record::new("login")
                .user(&*u.name)
                .address(peer)
                .via(via_of(method), None)
                .field("method", method),
        );
    }
    (u.clone(), until)
}

/// A login refused because a budget is spent: counted, logged and audited with which one.
fn limited(
    gw: &Gateway,
    peer: IpAddr,
    log_user: &str,
    method: &'static str,
    denied: Denied,
    message: &'static str,
) -> HttpError {
    gw.metrics.refused(Refusal::Login);
    tracing::warn!(target: "security", peer = %peer, user = log_user, reason = denied.reason, "{message}");
    gw.audit
        .record(refused("lockout", log_user, peer, method, denied.reason));
    HttpError::LoginLimited {
        retry_after: denied.retry_after,
        reason: denied.reason,
    }
}

/// A wrong password (or a token where a password belongs): counted, logged and audited.
fn refuse_bad(gw: &Gateway, peer: IpAddr, log_user: &str, method: &'static str) -> HttpError {
    gw.metrics.login(LoginMethod::Password, false);
    tracing::warn!(target: "security", peer = %peer, user = log_user, reason = "bad_credentials", "login failed");
    gw.audit
        .record(refused("login_failed", log_user, peer, method, "bad_credentials"));
    HttpError::BadCredentials
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
