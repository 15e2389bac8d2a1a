//! The spend, push and passkey halves of [`PostgresStore`].

use super::conn::Sql;
use super::{PostgresStore, sql};
use crate::store::statements as st;
use crate::store::{PasskeyRecord, PushSubscription, SessionCost, StoreError};

type Totals = Vec<(String, String, f64)>;

fn totals(rows: &[postgres::Row]) -> Totals {
    rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
}

impl crate::store::SpendStore for PostgresStore {
    fn spend_of_day(&self, day: i64) -> Result<Totals, StoreError> {
        self.with(|c| Ok(totals(&c.query(sql(&st::SPEND_OF_DAY), &[&day])?)))
    }

    fn spend_between(&self, from: i64, to: i64) -> Result<Totals, StoreError> {
        self.with(|c| Ok(totals(&c.query(sql(&st::SPEND_BETWEEN), &[&from, &to])?)))
    }

    fn session_costs(&self) -> Result<Vec<SessionCost>, StoreError> {
        self.with(|c| {
            let rows = c.query(sql(&st::SESSION_COSTS), &[])?;
            Ok(rows
                .iter()
                .map(|r| SessionCost {
                    project: r.get(0),
                    session: r.get(1),
                    parent: r.get(2),
                    prompter: r.get(3),
                    usd: r.get(4),
                })
                .collect())
        })
    }

    fn save_spend(
        &self,
        day: i64,
        totals: &[(String, String, f64)],
        sessions: &[SessionCost],
    ) -> Result<(), StoreError> {
        self.write("saving spend", |c| {
            let tx = c.transaction()?;
            for (kind, name, usd) in totals {
                let day = crate::store::spend_day(day, kind, name);
                tx.execute(sql(&st::SPEND_SAVE), &[&day, kind, name, usd])?;
            }
            for s in sessions {
                tx.execute(
                    sql(&st::SESSION_COST_SAVE),
                    &[&s.project, &s.session, &s.parent, &s.prompter, &s.usd],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }
}

impl crate::store::PushStore for PostgresStore {
    fn save_push(&self, s: &PushSubscription) -> Result<(), StoreError> {
        self.write("save_push", |c| {
            c.execute(
                sql(&st::PUSH_SAVE),
                &[
                    &s.endpoint,
                    &s.user,
                    &s.session_id,
                    &s.device_id,
                    &s.p256dh,
                    &s.auth,
                    &s.created_at,
                ],
            )?;
            Ok(())
        })
    }

    fn push_subscriptions(&self, now: i64) -> Result<Vec<PushSubscription>, StoreError> {
        self.with(|c| {
            let rows = c.query(sql(&st::PUSH_LIVE), &[&now])?;
            Ok(rows
                .iter()
                .map(|r| PushSubscription {
                    endpoint: r.get(0),
                    user: r.get(1),
                    session_id: r.get(2),
                    device_id: r.get(3),
                    p256dh: r.get(4),
                    auth: r.get(5),
                    created_at: r.get(6),
                })
                .collect())
        })
    }

    fn push_endpoints_of(&self, user: &str) -> Result<Vec<String>, StoreError> {
        self.with(|c| {
            let rows = c.query(sql(&st::PUSH_ENDPOINTS_OF), &[&user])?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn delete_push(&self, endpoint: &str, user: Option<&str>) -> Result<bool, StoreError> {
        self.write("delete_push", |c| {
            let n = c.execute(sql(&st::PUSH_DELETE), &[&endpoint, &user])?;
            Ok(n >= 1)
        })
    }
}

fn passkey(r: &postgres::Row) -> PasskeyRecord {
    PasskeyRecord {
        id: r.get(0),
        credential_id: r.get(1),
        user: r.get(2),
        handle: r.get(3),
        static_state: r.get(4),
        dynamic_state: r.get(5),
        label: r.get(6),
        created_at: r.get(7),
        last_used_at: r.get(8),
        revoked_at: r.get(9),
    }
}

impl crate::store::PasskeyStore for PostgresStore {
    fn passkey_handle(&self, user: &str, fresh: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.write("passkey_handle", |c| {
            c.execute(sql(&st::PASSKEY_USER_INSERT), &[&user, &fresh])?;
            Ok(c.query_one(sql(&st::PASSKEY_HANDLE_OF), &[&user])?.get(0))
        })
    }

    fn save_passkey(&self, p: &PasskeyRecord) -> Result<(), StoreError> {
        self.write("save_passkey", |c| {
            c.execute(
                sql(&st::PASSKEY_INSERT),
                &[
                    &p.id,
                    &p.credential_id,
                    &p.user,
                    &p.handle,
                    &p.static_state,
                    &p.dynamic_state,
                    &p.label,
                    &p.created_at,
                    &p.last_used_at,
                    &p.revoked_at,
                ],
            )?;
            Ok(())
        })
    }

    fn passkey_by_credential(&self, credential_id: &[u8]) -> Result<Option<PasskeyRecord>, StoreError> {
        self.with(|c| {
            let row = c.query_opt(sql(&st::PASSKEY_BY_CREDENTIAL), &[&credential_id])?;
            Ok(row.as_ref().map(passkey))
        })
    }

    fn list_passkeys(&self, user: Option<&str>) -> Result<Vec<PasskeyRecord>, StoreError> {
        self.with(|c| {
            let rows = c.query(sql(&st::PASSKEYS_OF), &[&user])?;
            Ok(rows.iter().map(passkey).collect())
        })
    }

    fn revoke_passkey(&self, id: &str, user: Option<&str>, at: i64) -> Result<bool, StoreError> {
        self.write("revoke_passkey", |c| {
            let n = c.execute(sql(&st::PASSKEY_REVOKE), &[&id, &user, &at])?;
            Ok(n == 1)
        })
    }

    fn passkey_used(&self, id: &str, dynamic_state: &[u8], at: i64) -> Result<(), StoreError> {
        self.write("passkey_used", |c| {
            c.execute(sql(&st::PASSKEY_USED), &[&id, &dynamic_state, &at])?;
            Ok(())
        })
    }
}
