//! The spend, push and passkey halves of [`PostgresStore`].

use super::PostgresStore;
use super::conn::Sql;
use crate::store::{PasskeyRecord, PushSubscription, SessionCost, StoreError};

type Totals = Vec<(String, String, f64)>;

fn totals(rows: &[postgres::Row]) -> Totals {
    rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
}

impl crate::store::SpendStore for PostgresStore {
    fn spend_of_day(&self, day: i64) -> Result<Totals, StoreError> {
        self.with(|c| {
            Ok(totals(&c.query(
                "SELECT kind, name, usd FROM spend_days WHERE day = $1",
                &[&day],
            )?))
        })
    }

    fn spend_between(&self, from: i64, to: i64) -> Result<Totals, StoreError> {
        self.with(|c| {
            Ok(totals(&c.query(
                "SELECT kind, name, SUM(usd) FROM spend_days WHERE day >= $1 AND day < $2 GROUP BY kind, name",
                &[&from, &to],
            )?))
        })
    }

    fn session_costs(&self) -> Result<Vec<SessionCost>, StoreError> {
        self.with(|c| {
            let rows = c.query("SELECT project, session, parent, prompter, usd FROM session_costs", &[])?;
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
                // A session's raise outlives the day: kept under day 0 (`SESSION_RAISES_DAY`).
                let day = if kind == "raised" && name.starts_with("session ") {
                    crate::store::SESSION_RAISES_DAY
                } else {
                    day
                };
                tx.execute(
                    "INSERT INTO spend_days (day, kind, name, usd) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (day, kind, name) DO UPDATE SET usd = excluded.usd",
                    &[&day, kind, name, usd],
                )?;
            }
            for s in sessions {
                tx.execute(
                    "INSERT INTO session_costs (project, session, parent, prompter, usd) VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (project, session) DO UPDATE SET parent = excluded.parent, prompter = excluded.prompter, usd = excluded.usd",
                    &[&s.project, &s.session, &s.parent, &s.prompter, &s.usd],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }
}

const PUSH_COLUMNS: &str = "p.endpoint, p.user_name, p.session_id, p.device_id, p.p256dh, p.auth, p.created_at";

impl crate::store::PushStore for PostgresStore {
    fn save_push(&self, s: &PushSubscription) -> Result<(), StoreError> {
        self.write("save_push", |c| {
            c.execute(
                "INSERT INTO push_subscriptions (endpoint, user_name, session_id, device_id, p256dh, auth, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (user_name, endpoint) DO UPDATE SET session_id = excluded.session_id,
                   device_id = excluded.device_id, p256dh = excluded.p256dh, auth = excluded.auth,
                   created_at = excluded.created_at",
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
            let rows = c.query(
                &format!(
                    "SELECT {PUSH_COLUMNS} FROM push_subscriptions p JOIN web_sessions w ON w.id = p.session_id
                      WHERE w.revoked_at IS NULL AND w.expires_at > $1"
                ),
                &[&now],
            )?;
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
            let rows = c.query("SELECT endpoint FROM push_subscriptions WHERE user_name = $1", &[&user])?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn delete_push(&self, endpoint: &str, user: Option<&str>) -> Result<bool, StoreError> {
        self.write("delete_push", |c| {
            let n = c.execute(
                "DELETE FROM push_subscriptions WHERE endpoint = $1 AND ($2::text IS NULL OR user_name = $2)",
                &[&endpoint, &user],
            )?;
            Ok(n >= 1)
        })
    }
}

const PASSKEY_COLUMNS: &str =
    "id, credential_id, user_name, handle, static_state, dynamic_state, label, created_at, last_used_at, revoked_at";

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
            c.execute(
                "INSERT INTO passkey_users (user_name, handle) VALUES ($1, $2) ON CONFLICT (user_name) DO NOTHING",
                &[&user, &fresh],
            )?;
            Ok(
                c.query_one("SELECT handle FROM passkey_users WHERE user_name = $1", &[&user])?
                    .get(0),
            )
        })
    }

    fn save_passkey(&self, p: &PasskeyRecord) -> Result<(), StoreError> {
        self.write("save_passkey", |c| {
            c.execute(
                &format!("INSERT INTO passkeys ({PASSKEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"),
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
            let row = c.query_opt(
                &format!("SELECT {PASSKEY_COLUMNS} FROM passkeys WHERE credential_id = $1"),
                &[&credential_id],
            )?;
            Ok(row.as_ref().map(passkey))
        })
    }

    fn list_passkeys(&self, user: Option<&str>) -> Result<Vec<PasskeyRecord>, StoreError> {
        self.with(|c| {
            let rows = c.query(
                &format!(
                    "SELECT {PASSKEY_COLUMNS} FROM passkeys WHERE $1::text IS NULL OR user_name = $1 ORDER BY created_at DESC, id"
                ),
                &[&user],
            )?;
            Ok(rows.iter().map(passkey).collect())
        })
    }

    fn revoke_passkey(&self, id: &str, user: Option<&str>, at: i64) -> Result<bool, StoreError> {
        self.write("revoke_passkey", |c| {
            let n = c.execute(
                "UPDATE passkeys SET revoked_at = $3 WHERE id = $1 AND ($2::text IS NULL OR user_name = $2) AND revoked_at IS NULL",
                &[&id, &user, &at],
            )?;
            Ok(n == 1)
        })
    }

    fn passkey_used(&self, id: &str, dynamic_state: &[u8], at: i64) -> Result<(), StoreError> {
        self.write("passkey_used", |c| {
            c.execute(
                "UPDATE passkeys SET dynamic_state = $2, last_used_at = $3 WHERE id = $1",
                &[&id, &dynamic_state, &at],
            )?;
            Ok(())
        })
    }
}
