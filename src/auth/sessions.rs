//! Browser sessions, server-side: the cookie holds 256 random bits; the store keeps their keyed
//! digest (the key is the token digest key, beside the database, with a separate domain), the
//! user, the device, idle and absolute expiry. Nothing lives only in the cookie, so logout and
//! device revocation work. A verified session is trusted for at most a second without asking the
//! store again (like tokens), and its use is written back at most once a minute.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::auth::tokens::{now_unix, same_digest};
use crate::store::{Store, Unavailable, WebSessionRecord};
use crate::support::ttl_map::TtlMap;

/// How long sessions live.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lifetime {
    pub idle: Duration,
    pub absolute: Duration,
}

/// A password login: a working day unused, a week at most.
pub(crate) const LOGIN: Lifetime = Lifetime {
    idle: Duration::from_secs(12 * 3600),
    absolute: Duration::from_secs(7 * 24 * 3600),
};
/// A paired device: a month unused, a year at most (revoke it with `devices revoke`).
pub(crate) const DEVICE: Lifetime = Lifetime {
    idle: Duration::from_secs(30 * 24 * 3600),
    absolute: Duration::from_secs(365 * 24 * 3600),
};

const CACHE_TTL: Duration = Duration::from_secs(1);
const CACHE_ENTRIES: usize = 10_000;
/// Use is written back at most this often per session.
const TOUCH_EVERY: i64 = 60;

/// A live session, as the request pipeline sees it.
#[derive(Debug)]
pub struct Live {
    pub id: Arc<str>,
    pub user: Arc<str>,
    /// `None`: a login-host session; else the project whose host it serves.
    pub host: Option<Arc<str>>,
    pub device: Option<Arc<str>>,
    /// For a login session, itself; for a project host's, its login session.
    pub login_id: Arc<str>,
    pub expires_at: i64,
    generation: u64,
}

pub struct WebSessions {
    store: Arc<dyn Store>,
    key: [u8; 32],
    cache: TtlMap<[u8; 32], Arc<Live>>,
    generation: AtomicU64,
}

/// What the new session hangs from.
pub enum Origin<'a> {
    /// A password login (no device).
    Password,
    /// A paired device.
    Device(&'a str),
    /// A project host's session, handed off from the login session `parent` (its id), which
    /// lives until `parent_expires_at`.
    Handoff {
        parent: &'a str,
        parent_expires_at: i64,
        project: &'a str,
    },
    /// The gateway's named host's login session (`<host>.local`, where passkeys work when the
    /// login host is an address: `web/handoff_named.rs`), handed off from the login session
    /// `parent`: the same user and device, a login session on that host, and it dies with it.
    Named { parent: &'a str, parent_expires_at: i64 },
}

/// What a new session is tied to: the device it was paired from, the login session it was
/// handed off or named from, the project host it serves, and when it ends.
struct Ties {
    device: Option<String>,
    parent: Option<String>,
    host: Option<String>,
    expires_at: i64,
}

/// A new session's ties, `ends` being when its own absolute life runs out.
fn ties(origin: Origin<'_>, ends: i64) -> Ties {
    let (device, parent, host, expires_at) = match origin {
        Origin::Password => (None, None, None, ends),
        Origin::Device(d) => (Some(d.to_string()), None, None, ends),
        // A child never outlives its login session.
        Origin::Handoff {
            parent,
            parent_expires_at,
            project,
        } => (
            None,
            Some(parent.to_string()),
            Some(project.to_string()),
            parent_expires_at.min(ends),
        ),
        Origin::Named {
            parent,
            parent_expires_at,
        } => (None, Some(parent.to_string()), None, parent_expires_at.min(ends)),
    };
    Ties {
        device,
        parent,
        host,
        expires_at,
    }
}

/// A duration in whole seconds, as the store keeps it (saturated, never wrapped).
fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

impl WebSessions {
    pub(crate) fn new(store: Arc<dyn Store>, key: [u8; 32]) -> WebSessions {
        WebSessions {
            store,
            key,
            cache: TtlMap::new(CACHE_ENTRIES, CACHE_TTL),
            generation: AtomicU64::new(0),
        }
    }

    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn digest(&self, value: &str) -> [u8; 32] {
        crate::auth::tokens::keyed(&self.key, &[b"web-session\0", value.as_bytes()])
    }

    /// Make a session; returns the cookie value (shown to the browser only) and the session.
    pub(crate) async fn create(
        &self,
        user: &str,
        origin: Origin<'_>,
        life: Lifetime,
    ) -> Result<(String, Arc<Live>), Unavailable> {
        let value = random(32);
        let id: Arc<str> = format!("ws_{}", random(9)).into();
        let now = now_unix();
        let Ties {
            device,
            parent,
            host,
            expires_at,
        } = ties(origin, now.saturating_add(secs(life.absolute)));
        let record = WebSessionRecord {
            id: id.to_string(),
            digest: self.digest(&value),
            user: user.to_string(),
            device_id: device.clone(),
            parent: parent.clone(),
            host: host.clone(),
            created_at: now,
            last_seen_at: now,
            idle_secs: secs(life.idle),
            expires_at,
            revoked_at: None,
        };
        let store = self.store.clone();
        crate::store::blocking("storing a browser session", move || store.insert_web_session(&record))
            .await
            .map_err(Unavailable::from)?;
        let live = Arc::new(Live {
            login_id: parent.map_or_else(|| id.clone(), Into::into),
            id,
            user: user.into(),
            host: host.map(Into::into),
            device: device.map(Into::into),
            expires_at,
            generation: self.generation.load(Ordering::SeqCst),
        });
        Ok((value, live))
    }

    /// The live session a cookie value names for `host` (`None`: the login host; else the project
    /// whose host it was handed off to), with its user, who must still be configured. The one
    /// reading of a browser's cookie, for the login host's pages and for project hosts alike.
    pub(crate) async fn for_host(
        &self,
        value: &str,
        peer: IpAddr,
        host: Option<&str>,
        users: &crate::auth::users::Users,
    ) -> Result<Option<(Arc<Live>, Arc<crate::auth::users::UserState>)>, Unavailable> {
        let Some(live) = self.check(value, peer).await? else {
            return Ok(None);
        };
        if live.host.as_deref() != host {
            return Ok(None);
        }
        let user = users.get(&*live.user).cloned();
        Ok(user.map(|u| (live, u)))
    }

    /// The id of the live login session (not a project host's) the login cookie value `login`
    /// names. A project port uses it to tie its own session and its handoff to the login of the
    /// browser in front of it (`web/front.rs`).
    pub(crate) async fn login_of(&self, login: Option<&str>, peer: IpAddr) -> Result<Option<Arc<str>>, Unavailable> {
        let Some(value) = login else { return Ok(None) };
        Ok(self
            .check(value, peer)
            .await?
            .filter(|l| l.host.is_none())
            .map(|l| l.id.clone()))
    }

    /// The live session a cookie value names, or `None` (unknown, expired, revoked, or its
    /// parent or device is). `peer` is recorded as the device's last address.
    pub(crate) async fn check(&self, value: &str, peer: IpAddr) -> Result<Option<Arc<Live>>, Unavailable> {
        let digest = self.digest(value);
        let generation = self.generation.load(Ordering::SeqCst);
        if let Some(live) = self.cache.get(&digest)
            && live.generation == generation
        {
            return Ok(Some(live));
        }
        let store = self.store.clone();
        let now = now_unix();
        let found = crate::store::blocking("reading browser sessions", move || {
            let Some(l) = store.web_session_by_digest(&digest)? else {
                return Ok(None);
            };
            if !same_digest(&l.session.digest, &digest) || !l.live_at(now) {
                return Ok(None);
            }
            let seen = l
                .parent
                .as_ref()
                .map_or(l.session.last_seen_at, |p| p.last_seen_at.min(l.session.last_seen_at));
            // Use is bookkeeping: a full disk must not log a browser out (the store says once
            // that it cannot write); the session's idle expiry is then counted from its last
            // recorded use.
            if now - seen >= TOUCH_EVERY {
                let _ = store.touch_web_session(&l.session.id, now);
                let device = l
                    .session
                    .device_id
                    .as_ref()
                    .or(l.parent.as_ref().and_then(|p| p.device_id.as_ref()));
                if let Some(d) = device {
                    let _ = store.touch_device(d, now, &peer.to_string());
                }
            }
            Ok(Some(l))
        })
        .await
        .map_err(Unavailable::from)?;
        let Some(l) = found else { return Ok(None) };
        let expires_at = l
            .parent
            .as_ref()
            .map_or(l.session.expires_at, |p| p.expires_at.min(l.session.expires_at));
        let live = Arc::new(Live {
            login_id: l.session.parent.clone().unwrap_or_else(|| l.session.id.clone()).into(),
            id: l.session.id.into(),
            user: l.session.user.into(),
            host: l.session.host.map(Into::into),
            device: l
                .session
                .device_id
                .or(l.parent.and_then(|p| p.device_id))
                .map(Into::into),
            expires_at,
            generation,
        });
        self.cache.insert(digest, live.clone());
        Ok(Some(live))
    }

    /// Log out: the session and every project-host session handed off from it end now.
    pub(crate) async fn revoke(&self, login_id: &str) -> Result<(), Unavailable> {
        let store = self.store.clone();
        let id = login_id.to_string();
        crate::store::blocking("ending a browser session", move || {
            store.revoke_web_session(&id, now_unix())
        })
        .await
        .map_err(Unavailable::from)?;
        self.invalidate();
        Ok(())
    }

    /// The config's password hashes as they are now. A user whose hash changed since the last
    /// look (`user passwd`, whether the gateway was running then or not) loses the login sessions
    /// made under the old one; returns each such user with the number of sessions that ended.
    /// Blocking (a few small SQLite writes): called at start and on reload, never per request.
    pub(crate) fn passwords_are(&self, users: &crate::auth::users::Users) -> Vec<(Arc<str>, usize)> {
        let now = now_unix();
        let mut ended = Vec::new();
        for u in users.values().filter(|u| u.hash.is_some()) {
            match self.store.password_is(&u.name, &u.fingerprint, now) {
                Ok(0) => {}
                Ok(n) => ended.push((u.name.clone(), n)),
                Err(e) => {
                    tracing::error!(user = %u.name, error = %e, "cannot record a user's password change; their browser sessions were not ended")
                }
            }
        }
        if !ended.is_empty() {
            self.invalidate();
        }
        ended
    }

    /// Sessions or devices changed elsewhere (the CLI): forget every verification.
    pub(crate) fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.cache.retain(|_, _| false);
    }
}

/// `n` random bytes, base64url.
pub(crate) fn random(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).expect("the OS random source is available");
    URL_SAFE_NO_PAD.encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> (tempfile::TempDir, WebSessions) {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::open(dir.path()).unwrap();
        (dir, WebSessions::new(store, [5; 32]))
    }

    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    /// A session of alice's, made as `origin` says: its cookie and itself.
    async fn alices(s: &WebSessions, origin: Origin<'_>) -> (String, Arc<Live>) {
        s.create("alice", origin, LOGIN).await.unwrap()
    }

    /// Whether the session behind `cookie` is gone (a check from [`PEER`] finds none).
    async fn gone(s: &WebSessions, cookie: &str) -> bool {
        s.check(cookie, PEER).await.unwrap().is_none()
    }

    #[tokio::test]
    async fn logout_ends_the_login_and_its_project_sessions_at_once() {
        let (_d, s) = sessions();
        let (cookie, login) = alices(&s, Origin::Password).await;
        let (child_cookie, child) = alices(
            &s,
            Origin::Handoff {
                parent: &login.id,
                parent_expires_at: login.expires_at,
                project: "web",
            },
        )
        .await;
        assert_eq!(child.host.as_deref(), Some("web"));
        assert_eq!(&*child.login_id, &*login.id);
        assert!(child.expires_at <= login.expires_at);
        let seen = s.check(&child_cookie, PEER).await.unwrap().unwrap();
        assert_eq!(&*seen.user, "alice");
        assert!(!gone(&s, &cookie).await);
        assert!(gone(&s, "made-up").await);
        s.revoke(&login.login_id).await.unwrap();
        assert!(gone(&s, &cookie).await, "the cache was voided");
        assert!(gone(&s, &child_cookie).await, "the child died with it");
    }

    #[tokio::test]
    async fn a_named_hosts_session_is_a_login_of_the_same_user_and_dies_with_its_parent() {
        let (_d, s) = sessions();
        let (_, phone) = alices(&s, Origin::Password).await;
        let (named_cookie, named) = alices(
            &s,
            Origin::Named {
                parent: &phone.id,
                parent_expires_at: phone.expires_at,
            },
        )
        .await;
        assert_eq!(named.host, None, "a login session on its host");
        assert_eq!(&*named.login_id, &*phone.id);
        let seen = s.check(&named_cookie, PEER).await.unwrap().unwrap();
        assert_eq!((&*seen.user, seen.host.as_deref()), ("alice", None));
        assert!(seen.expires_at <= phone.expires_at);
        assert_eq!(
            s.login_of(Some(&named_cookie), PEER).await.unwrap().as_deref(),
            Some(&*named.id)
        );
        s.revoke(&phone.login_id).await.unwrap();
        assert!(gone(&s, &named_cookie).await, "it died with its parent");
    }

    #[tokio::test]
    async fn only_a_digest_of_the_cookie_is_stored() {
        let (dir, s) = sessions();
        let (cookie, _) = alices(&s, Origin::Password).await;
        drop(s);
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(&cookie),
                "the cookie is stored in clear"
            );
        }
        assert_eq!(cookie.len(), 43, "256 bits, base64url");
    }
}
