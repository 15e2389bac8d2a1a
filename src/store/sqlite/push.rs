//! [`PushStore`](crate::store::PushStore) on SQLite: subscriptions by user and endpoint.

use rusqlite::params;

use super::SqliteStore;
use crate::store::{PushSubscription, StoreError};

impl crate::store::PushStore for SqliteStore {
    fn save_push(&self, s: &PushSubscription) -> Result<(), StoreError> {
        let result = (|| {
            self.lock().execute(
                "INSERT INTO push_subscriptions (endpoint, user, session_id, device_id, p256dh, auth, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (user, endpoint) DO UPDATE SET session_id = excluded.session_id,
                   device_id = excluded.device_id, p256dh = excluded.p256dh, auth = excluded.auth,
                   created_at = excluded.created_at",
                params![
                    s.endpoint,
                    s.user,
                    s.session_id,
                    s.device_id,
                    s.p256dh,
                    s.auth,
                    s.created_at
                ],
            )?;
            Ok(())
        })();
        self.noted("save_push", result)
    }

    fn push_subscriptions(&self, now: i64) -> Result<Vec<PushSubscription>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT p.endpoint, p.user, p.session_id, p.device_id, p.p256dh, p.auth, p.created_at
               FROM push_subscriptions p JOIN web_sessions w ON w.id = p.session_id
              WHERE w.revoked_at IS NULL AND w.expires_at > ?1",
        )?;
        let rows = stmt.query_map(params![now], |r| {
            Ok(PushSubscription {
                endpoint: r.get(0)?,
                user: r.get(1)?,
                session_id: r.get(2)?,
                device_id: r.get(3)?,
                p256dh: r.get(4)?,
                auth: r.get(5)?,
                created_at: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn push_endpoints_of(&self, user: &str) -> Result<Vec<String>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare("SELECT endpoint FROM push_subscriptions WHERE user = ?1")?;
        let rows = stmt.query_map(params![user], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn delete_push(&self, endpoint: &str, user: Option<&str>) -> Result<bool, StoreError> {
        let result = (|| {
            let n = self.lock().execute(
                "DELETE FROM push_subscriptions WHERE endpoint = ?1 AND (?2 IS NULL OR user = ?2)",
                params![endpoint, user],
            )?;
            Ok(n >= 1)
        })();
        self.noted("delete_push", result)
    }
}
