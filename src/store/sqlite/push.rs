//! [`PushStore`](crate::store::PushStore) on SQLite: subscriptions by user and endpoint.

use rusqlite::params;

use super::{SqliteStore, sql};
use crate::store::statements as st;
use crate::store::{PushSubscription, StoreError};

impl crate::store::PushStore for SqliteStore {
    fn save_push(&self, s: &PushSubscription) -> Result<(), StoreError> {
        self.write("save_push", |c| {
            c.execute(
                sql(&st::PUSH_SAVE),
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
        })
    }

    fn push_subscriptions(&self, now: i64) -> Result<Vec<PushSubscription>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(sql(&st::PUSH_LIVE))?;
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
        let mut stmt = conn.prepare(sql(&st::PUSH_ENDPOINTS_OF))?;
        let rows = stmt.query_map(params![user], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn delete_push(&self, endpoint: &str, user: Option<&str>) -> Result<bool, StoreError> {
        self.write("delete_push", |c| {
            Ok(c.execute(sql(&st::PUSH_DELETE), params![endpoint, user])? >= 1)
        })
    }
}
