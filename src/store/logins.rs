//! The tokens' and the browser logins' halves of the store, once for every [`Backend`].

use super::backend::{Backend, Record, all, one, record};
use super::statements as st;
use super::{
    BrowserStore, Changed, DeviceRecord, SessionPolicy, StoreError, TokenRecord, TokenStore, WebSessionLookup,
    WebSessionRecord, WriteHealth,
};

record!(TokenRecord {
    id,
    digest,
    user,
    label,
    role,
    projects,
    created_at,
    expires_at,
    last_used_at,
    revoked_at,
    policy,
});
record!(SessionPolicy {
    session,
    project,
    policy,
});
record!(DeviceRecord {
    id,
    user,
    label,
    created_at,
    last_seen_at,
    last_address,
    revoked_at,
});
record!(WebSessionRecord {
    id,
    digest,
    user,
    device_id,
    parent,
    host,
    created_at,
    last_seen_at,
    idle_secs,
    expires_at,
    revoked_at,
});

impl<B: Backend> TokenStore for B {
    fn insert_token(&self, t: &TokenRecord) -> Result<(), StoreError> {
        self.write("insert_token", |c| c.execute(&st::TOKEN_INSERT, &t.fields()).map(drop))
    }

    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenRecord>, StoreError> {
        self.on_connection(|c| one(c, &st::TOKEN_BY_DIGEST, &[digest]))
    }

    fn list_tokens(&self, user: Option<&str>) -> Result<Vec<TokenRecord>, StoreError> {
        self.on_connection(|c| all(c, &st::TOKENS_OF, &[&user]))
    }

    fn revoke_token(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        self.write_all("revoke_token", |c| {
            let n = c.execute(&st::TOKEN_REVOKE, &[&id, &at])?;
            c.notify(Changed::Tokens)?;
            Ok(n == 1)
        })
    }

    fn touch_token(&self, id: &str, at: i64) -> Result<(), StoreError> {
        self.write("touch_token", |c| c.execute(&st::TOKEN_TOUCH, &[&id, &at]).map(drop))
    }

    fn set_session_policy(&self, p: &SessionPolicy, at: i64) -> Result<(), StoreError> {
        self.write_all("set_session_policy", |c| {
            c.execute(&st::SESSION_POLICY_SET, &[&p.session, &p.project, &p.policy, &at])?;
            // The other gateways answer its requests too (and refuse widening answers to them).
            c.notify(Changed::Policies)
        })
    }

    fn session_policies(&self) -> Result<Vec<SessionPolicy>, StoreError> {
        self.on_connection(|c| all(c, &st::SESSION_POLICIES, &[]))
    }
}

impl<B: Backend> BrowserStore for B {
    fn health(&self) -> WriteHealth {
        self.writes().health()
    }

    fn insert_device(&self, d: &DeviceRecord) -> Result<(), StoreError> {
        self.write("insert_device", |c| {
            c.execute(&st::DEVICE_INSERT, &d.fields()).map(drop)
        })
    }

    fn list_devices(&self, user: Option<&str>) -> Result<Vec<DeviceRecord>, StoreError> {
        self.on_connection(|c| all(c, &st::DEVICES_OF, &[&user]))
    }

    fn revoke_device(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        self.write_all("revoke_device", |c| {
            let n = c.execute(&st::DEVICE_REVOKE, &[&id, &at])?;
            c.execute(&st::DEVICE_PUSH_DELETE, &[&id])?;
            c.execute(&st::DEVICE_SESSIONS_REVOKE, &[&id, &at])?;
            c.notify(Changed::Sessions)?;
            Ok(n == 1)
        })
    }

    fn touch_device(&self, id: &str, at: i64, address: &str) -> Result<(), StoreError> {
        self.write("touch_device", |c| {
            c.execute(&st::DEVICE_TOUCH, &[&id, &at, &address]).map(drop)
        })
    }

    fn password_is(&self, user: &str, fingerprint: &[u8; 32], at: i64) -> Result<usize, StoreError> {
        self.write_all("password_is", |c| {
            let known: Option<Vec<u8>> = one(c, &st::FINGERPRINT_OF, &[&user])?;
            if known.as_deref() == Some(&fingerprint[..]) {
                return Ok(0);
            }
            c.execute(&st::FINGERPRINT_SAVE, &[&user, fingerprint])?;
            // First sight of this user's password: nothing was made under another one.
            let ended = match known {
                None => 0,
                Some(_) => c.execute(&st::PASSWORD_SESSIONS_REVOKE, &[&user, &at])?,
            };
            if ended > 0 {
                c.notify(Changed::Sessions)?;
            }
            Ok(ended)
        })
    }

    fn insert_web_session(&self, w: &WebSessionRecord) -> Result<(), StoreError> {
        self.write("insert_web_session", |c| {
            c.execute(&st::SESSION_INSERT, &w.fields()).map(drop)
        })
    }

    fn web_session_by_digest(&self, digest: &[u8; 32]) -> Result<Option<WebSessionLookup>, StoreError> {
        self.on_connection(|c| {
            let Some(session) = one::<WebSessionRecord>(c, &st::SESSION_BY_DIGEST, &[digest])? else {
                return Ok(None);
            };
            let parent = match &session.parent {
                Some(p) => one(c, &st::SESSION_BY_ID, &[p])?,
                None => None,
            };
            let device_revoked = match session.device_of(parent.as_ref()) {
                // A device row that is gone counts as revoked.
                Some(d) => one(c, &st::DEVICE_REVOKED, &[d])?.unwrap_or(true),
                None => false,
            };
            Ok(Some(WebSessionLookup {
                session,
                parent,
                device_revoked,
            }))
        })
    }

    fn revoke_web_session(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        self.write_all("revoke_web_session", |c| {
            let n = c.execute(&st::SESSION_REVOKE, &[&id, &at])?;
            c.notify(Changed::Sessions)?;
            Ok(n >= 1)
        })
    }

    fn touch_web_session(&self, id: &str, at: i64) -> Result<(), StoreError> {
        self.write("touch_web_session", |c| {
            c.execute(&st::SESSION_TOUCH, &[&id, &at]).map(drop)
        })
    }

    fn prune_web_sessions(&self, before: i64) -> Result<usize, StoreError> {
        self.write_all("prune_web_sessions", |c| {
            let n = c.execute(&st::SESSIONS_PRUNE, &[&before])?;
            c.execute(&st::PUSH_PRUNE, &[])?;
            Ok(n)
        })
    }
}
