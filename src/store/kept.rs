//! The spend, push, passkey and single-use halves of the store, once for every [`Backend`].

use super::backend::{Backend, Record, all, count, one, record, the};
use super::statements as st;
use super::{
    OnceStore, PasskeyRecord, PasskeyStore, PushStore, PushSubscription, PutOnce, SessionCost, Settle, SpendStore,
    StoreError,
};

record!(SessionCost {
    project,
    session,
    parent,
    prompter,
    usd,
});
record!(PushSubscription {
    endpoint,
    user,
    session_id,
    device_id,
    p256dh,
    auth,
    created_at,
});
record!(PasskeyRecord {
    id,
    credential_id,
    user,
    handle,
    static_state,
    dynamic_state,
    label,
    created_at,
    last_used_at,
    revoked_at,
});

type Totals = Vec<(String, String, f64)>;

impl<B: Backend> SpendStore for B {
    fn spend_of_day(&self, day: i64) -> Result<Totals, StoreError> {
        self.on_connection(|c| all(c, &st::SPEND_OF_DAY, &[&day]))
    }

    fn session_costs(&self) -> Result<Vec<SessionCost>, StoreError> {
        self.on_connection(|c| all(c, &st::SESSION_COSTS, &[]))
    }

    fn spend_between(&self, from: i64, to: i64) -> Result<Totals, StoreError> {
        self.on_connection(|c| all(c, &st::SPEND_BETWEEN, &[&from, &to]))
    }

    fn save_spend(
        &self,
        day: i64,
        totals: &[(String, String, f64)],
        sessions: &[SessionCost],
        forgotten: &[(String, String)],
    ) -> Result<(), StoreError> {
        self.write_all("saving spend", |c| {
            for (kind, name, usd) in totals {
                let day = super::spend_day(day, kind, name);
                c.execute(&st::SPEND_SAVE, &[&day, kind, name, usd])?;
            }
            for s in sessions {
                c.execute(&st::SESSION_COST_SAVE, &s.fields())?;
            }
            for (project, session) in forgotten {
                c.execute(&st::SESSION_COST_FORGET, &[project, session])?;
            }
            Ok(())
        })
    }
}

impl<B: Backend> PushStore for B {
    fn save_push(&self, s: &PushSubscription) -> Result<(), StoreError> {
        self.write("save_push", |c| c.execute(&st::PUSH_SAVE, &s.fields()).map(drop))
    }

    fn push_subscriptions(&self, now: i64) -> Result<Vec<PushSubscription>, StoreError> {
        self.on_connection(|c| all(c, &st::PUSH_LIVE, &[&now]))
    }

    fn push_endpoints_of(&self, user: &str) -> Result<Vec<String>, StoreError> {
        self.on_connection(|c| all(c, &st::PUSH_ENDPOINTS_OF, &[&user]))
    }

    fn delete_push(&self, endpoint: &str, user: Option<&str>) -> Result<bool, StoreError> {
        self.write("delete_push", |c| {
            Ok(c.execute(&st::PUSH_DELETE, &[&endpoint, &user])? >= 1)
        })
    }
}

impl<B: Backend> PasskeyStore for B {
    fn passkey_handle(&self, user: &str, fresh: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.write("passkey_handle", |c| {
            c.execute(&st::PASSKEY_USER_INSERT, &[&user, &fresh])?;
            the(c, &st::PASSKEY_HANDLE_OF, &[&user])
        })
    }

    fn save_passkey(&self, p: &PasskeyRecord) -> Result<(), StoreError> {
        self.write("save_passkey", |c| {
            c.execute(&st::PASSKEY_INSERT, &p.fields()).map(drop)
        })
    }

    fn passkey_by_credential(&self, credential_id: &[u8]) -> Result<Option<PasskeyRecord>, StoreError> {
        self.on_connection(|c| one(c, &st::PASSKEY_BY_CREDENTIAL, &[&credential_id]))
    }

    fn list_passkeys(&self, user: Option<&str>) -> Result<Vec<PasskeyRecord>, StoreError> {
        self.on_connection(|c| all(c, &st::PASSKEYS_OF, &[&user]))
    }

    fn revoke_passkey(&self, id: &str, user: Option<&str>, at: i64) -> Result<bool, StoreError> {
        self.write("revoke_passkey", |c| {
            Ok(c.execute(&st::PASSKEY_REVOKE, &[&id, &user, &at])? == 1)
        })
    }

    fn passkey_used(&self, id: &str, dynamic_state: &[u8], at: i64) -> Result<(), StoreError> {
        self.write("passkey_used", |c| {
            c.execute(&st::PASSKEY_USED, &[&id, &dynamic_state, &at]).map(drop)
        })
    }
}

/// Single-use records: of two gateways given the same ticket at once, one takes it (the record
/// is read in the transaction that settles it, locked: `{for_update}`, or SQLite's whole file).
impl<B: Backend> OnceStore for B {
    fn once_put(
        &self,
        kind: &str,
        key: &[u8; 32],
        value: &[u8],
        expires_at: i64,
        max: usize,
    ) -> Result<PutOnce, StoreError> {
        self.write_all("once_put", |c| {
            let now = super::now_millis();
            // One writer per kind at a time, so that the count below stays true until the insert.
            c.hold(kind)?;
            c.execute(&st::ONCE_EXPIRED_DELETE, &[&kind, &now])?;
            if count(the(c, &st::ONCE_COUNT, &[&kind])?) >= max {
                return Ok(PutOnce::Full);
            }
            let added = c.execute(&st::ONCE_INSERT, &[&kind, key, &value, &expires_at])?;
            Ok(if added == 1 { PutOnce::Kept } else { PutOnce::KeyInUse })
        })
    }

    fn once_settle(
        &self,
        kind: &str,
        key: &[u8; 32],
        now: i64,
        decide: &mut (dyn FnMut(&[u8], bool) -> Settle + Send),
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.write_all("once_settle", |c| {
            let Some((value, expires_at)) = one::<(Vec<u8>, i64)>(c, &st::ONCE_OF, &[&kind, key])? else {
                return Ok(None);
            };
            match decide(&value, expires_at <= now) {
                Settle::Keep => {}
                Settle::Take => {
                    c.execute(&st::ONCE_DELETE, &[&kind, key])?;
                }
                Settle::Replace(new) => {
                    c.execute(&st::ONCE_REPLACE, &[&kind, key, &new])?;
                }
            }
            Ok(Some(value))
        })
    }

    fn once_live(&self, kind: &str, now: i64) -> Result<usize, StoreError> {
        self.on_connection(|c| Ok(count(the(c, &st::ONCE_LIVE, &[&kind, &now])?)))
    }
}
