//! [`PasskeyStore`](crate::store::PasskeyStore) on SQLite.

use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use crate::store::{PasskeyRecord, StoreError};

const COLUMNS: &str =
    "id, credential_id, user, handle, static_state, dynamic_state, label, created_at, last_used_at, revoked_at";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<PasskeyRecord> {
    Ok(PasskeyRecord {
        id: r.get(0)?,
        credential_id: r.get(1)?,
        user: r.get(2)?,
        handle: r.get(3)?,
        static_state: r.get(4)?,
        dynamic_state: r.get(5)?,
        label: r.get(6)?,
        created_at: r.get(7)?,
        last_used_at: r.get(8)?,
        revoked_at: r.get(9)?,
    })
}

impl crate::store::PasskeyStore for SqliteStore {
    fn passkey_handle(&self, user: &str, fresh: &[u8]) -> Result<Vec<u8>, StoreError> {
        let result = (|| -> Result<Vec<u8>, StoreError> {
            let conn = self.lock();
            conn.execute(
                "INSERT INTO passkey_users (user, handle) VALUES (?1, ?2) ON CONFLICT (user) DO NOTHING",
                params![user, fresh],
            )?;
            Ok(
                conn.query_row("SELECT handle FROM passkey_users WHERE user = ?1", params![user], |r| {
                    r.get(0)
                })?,
            )
        })();
        self.noted("passkey_handle", result)
    }

    fn save_passkey(&self, p: &PasskeyRecord) -> Result<(), StoreError> {
        let result = (|| {
            self.lock().execute(
                &format!("INSERT INTO passkeys ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
                params![
                    p.id,
                    p.credential_id,
                    p.user,
                    p.handle,
                    p.static_state,
                    p.dynamic_state,
                    p.label,
                    p.created_at,
                    p.last_used_at,
                    p.revoked_at
                ],
            )?;
            Ok(())
        })();
        self.noted("save_passkey", result)
    }

    fn passkey_by_credential(&self, credential_id: &[u8]) -> Result<Option<PasskeyRecord>, StoreError> {
        Ok(self
            .lock()
            .query_row(
                &format!("SELECT {COLUMNS} FROM passkeys WHERE credential_id = ?1"),
                params![credential_id],
                row,
            )
            .optional()?)
    }

    fn list_passkeys(&self, user: Option<&str>) -> Result<Vec<PasskeyRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM passkeys WHERE ?1 IS NULL OR user = ?1 ORDER BY created_at DESC, id"
        ))?;
        let rows = stmt.query_map(params![user], row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn revoke_passkey(&self, id: &str, user: Option<&str>, at: i64) -> Result<bool, StoreError> {
        let result = (|| {
            let n = self.lock().execute(
                "UPDATE passkeys SET revoked_at = ?3 WHERE id = ?1 AND (?2 IS NULL OR user = ?2) AND revoked_at IS NULL",
                params![id, user, at],
            )?;
            Ok(n == 1)
        })();
        self.noted("revoke_passkey", result)
    }

    fn passkey_used(&self, id: &str, dynamic_state: &[u8], at: i64) -> Result<(), StoreError> {
        let result = (|| {
            self.lock().execute(
                "UPDATE passkeys SET dynamic_state = ?2, last_used_at = ?3 WHERE id = ?1",
                params![id, dynamic_state, at],
            )?;
            Ok(())
        })();
        self.noted("passkey_used", result)
    }
}
