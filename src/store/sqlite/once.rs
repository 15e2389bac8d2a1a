//! [`OnceStore`](crate::store::OnceStore) on SQLite: one gateway, so this only keeps its
//! single-use records across a restart; the transaction is SQLite's immediate one.

use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use crate::store::{PutOnce, Settle, StoreError};

impl crate::store::OnceStore for SqliteStore {
    fn once_put(
        &self,
        kind: &str,
        key: &[u8; 32],
        value: &[u8],
        expires_at: i64,
        max: usize,
    ) -> Result<PutOnce, StoreError> {
        let result = (|| {
            let mut conn = self.lock();
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let now = crate::store::now_millis();
            tx.execute(
                "DELETE FROM once_records WHERE kind = ?1 AND expires_at <= ?2",
                params![kind, now],
            )?;
            let live: i64 = tx.query_row(
                "SELECT COUNT(*) FROM once_records WHERE kind = ?1",
                params![kind],
                |r| r.get(0),
            )?;
            if usize::try_from(live).unwrap_or(usize::MAX) >= max {
                return Ok(PutOnce::Full);
            }
            let added = tx.execute(
                "INSERT INTO once_records (kind, key, value, expires_at) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (kind, key) DO NOTHING",
                params![kind, &key[..], value, expires_at],
            )?;
            tx.commit()?;
            Ok(if added == 1 { PutOnce::Kept } else { PutOnce::KeyInUse })
        })();
        self.noted("once_put", result)
    }

    fn once_settle(
        &self,
        kind: &str,
        key: &[u8; 32],
        now: i64,
        decide: &mut (dyn FnMut(&[u8], bool) -> Settle + Send),
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let result = (|| {
            let mut conn = self.lock();
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let found: Option<(Vec<u8>, i64)> = tx
                .query_row(
                    "SELECT value, expires_at FROM once_records WHERE kind = ?1 AND key = ?2",
                    params![kind, &key[..]],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((value, expires_at)) = found else {
                return Ok(None);
            };
            match decide(&value, expires_at <= now) {
                Settle::Keep => {}
                Settle::Take => {
                    tx.execute(
                        "DELETE FROM once_records WHERE kind = ?1 AND key = ?2",
                        params![kind, &key[..]],
                    )?;
                }
                Settle::Replace(new) => {
                    tx.execute(
                        "UPDATE once_records SET value = ?3 WHERE kind = ?1 AND key = ?2",
                        params![kind, &key[..], new],
                    )?;
                }
            }
            tx.commit()?;
            Ok(Some(value))
        })();
        self.noted("once_settle", result)
    }

    fn once_live(&self, kind: &str, now: i64) -> Result<usize, StoreError> {
        let n: i64 = self.lock().query_row(
            "SELECT COUNT(*) FROM once_records WHERE kind = ?1 AND expires_at > ?2",
            params![kind, now],
            |r| r.get(0),
        )?;
        Ok(usize::try_from(n).unwrap_or(0))
    }
}
