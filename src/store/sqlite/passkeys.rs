//! [`PasskeyStore`](crate::store::PasskeyStore) on SQLite.

use rusqlite::params;

use super::{FromRow, SqliteStore, all, one, sql};
use crate::store::statements as st;
use crate::store::{PasskeyRecord, StoreError};

impl FromRow for PasskeyRecord {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<PasskeyRecord> {
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
}

impl crate::store::PasskeyStore for SqliteStore {
    fn passkey_handle(&self, user: &str, fresh: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.write("passkey_handle", |c| {
            c.execute(sql(&st::PASSKEY_USER_INSERT), params![user, fresh])?;
            Ok(c.query_row(sql(&st::PASSKEY_HANDLE_OF), params![user], |r| r.get(0))?)
        })
    }

    fn save_passkey(&self, p: &PasskeyRecord) -> Result<(), StoreError> {
        self.write("save_passkey", |c| {
            c.execute(
                sql(&st::PASSKEY_INSERT),
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
        })
    }

    fn passkey_by_credential(&self, credential_id: &[u8]) -> Result<Option<PasskeyRecord>, StoreError> {
        one(&self.lock(), &st::PASSKEY_BY_CREDENTIAL, params![credential_id])
    }

    fn list_passkeys(&self, user: Option<&str>) -> Result<Vec<PasskeyRecord>, StoreError> {
        all(&self.lock(), &st::PASSKEYS_OF, params![user])
    }

    fn revoke_passkey(&self, id: &str, user: Option<&str>, at: i64) -> Result<bool, StoreError> {
        self.write("revoke_passkey", |c| {
            Ok(c.execute(sql(&st::PASSKEY_REVOKE), params![id, user, at])? == 1)
        })
    }

    fn passkey_used(&self, id: &str, dynamic_state: &[u8], at: i64) -> Result<(), StoreError> {
        self.write("passkey_used", |c| {
            c.execute(sql(&st::PASSKEY_USED), params![id, dynamic_state, at])?;
            Ok(())
        })
    }
}
