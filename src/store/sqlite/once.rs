//! [`OnceStore`](crate::store::OnceStore) on SQLite: one gateway, so this only keeps its
//! single-use records across a restart; the transaction is SQLite's immediate one.

use rusqlite::{OptionalExtension, params};

use super::{SqliteStore, immediate, sql};
use crate::store::statements as st;
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
        self.write("once_put", |c| {
            let tx = immediate(c)?;
            let now = crate::store::now_millis();
            tx.execute(sql(&st::ONCE_EXPIRED_DELETE), params![kind, now])?;
            let live: i64 = tx.query_row(sql(&st::ONCE_COUNT), params![kind], |r| r.get(0))?;
            if usize::try_from(live).unwrap_or(usize::MAX) >= max {
                return Ok(PutOnce::Full);
            }
            let added = tx.execute(sql(&st::ONCE_INSERT), params![kind, &key[..], value, expires_at])?;
            tx.commit()?;
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
        self.write("once_settle", |c| {
            let tx = immediate(c)?;
            let found: Option<(Vec<u8>, i64)> = tx
                .query_row(sql(&st::ONCE_OF), params![kind, &key[..]], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?;
            let Some((value, expires_at)) = found else {
                return Ok(None);
            };
            match decide(&value, expires_at <= now) {
                Settle::Keep => {}
                Settle::Take => {
                    tx.execute(sql(&st::ONCE_DELETE), params![kind, &key[..]])?;
                }
                Settle::Replace(new) => {
                    tx.execute(sql(&st::ONCE_REPLACE), params![kind, &key[..], new])?;
                }
            }
            tx.commit()?;
            Ok(Some(value))
        })
    }

    fn once_live(&self, kind: &str, now: i64) -> Result<usize, StoreError> {
        let n: i64 = self
            .lock()
            .query_row(sql(&st::ONCE_LIVE), params![kind, now], |r| r.get(0))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }
}
