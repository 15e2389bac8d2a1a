//! [`OnceStore`](crate::store::OnceStore) on PostgreSQL: a record is read `FOR UPDATE` in the
//! transaction that settles it, so of two replicas given the same ticket at once, one takes it
//! and the other finds nothing.

use super::conn::Sql;
use super::{PostgresStore, sql};
use crate::store::statements as st;
use crate::store::{PutOnce, Settle, StoreError};

impl crate::store::OnceStore for PostgresStore {
    fn once_put(
        &self,
        kind: &str,
        key: &[u8; 32],
        value: &[u8],
        expires_at: i64,
        max: usize,
    ) -> Result<PutOnce, StoreError> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        self.write("once_put", |c| {
            let tx = c.transaction()?;
            let now = crate::store::now_millis();
            // One writer per kind at a time, so that the count below stays true until the insert.
            tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&kind])?;
            tx.execute(sql(&st::ONCE_EXPIRED_DELETE), &[&kind, &now])?;
            let live: i64 = tx.query_one(sql(&st::ONCE_COUNT), &[&kind])?.get(0);
            if live >= max {
                return Ok(PutOnce::Full);
            }
            let added = tx.execute(sql(&st::ONCE_INSERT), &[&kind, &&key[..], &value, &expires_at])?;
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
            let tx = c.transaction()?;
            let Some(row) = tx.query_opt(sql(&st::ONCE_OF), &[&kind, &&key[..]])? else {
                return Ok(None);
            };
            let (value, expires_at): (Vec<u8>, i64) = (row.get(0), row.get(1));
            match decide(&value, expires_at <= now) {
                Settle::Keep => {}
                Settle::Take => {
                    tx.execute(sql(&st::ONCE_DELETE), &[&kind, &&key[..]])?;
                }
                Settle::Replace(new) => {
                    tx.execute(sql(&st::ONCE_REPLACE), &[&kind, &&key[..], &new])?;
                }
            }
            tx.commit()?;
            Ok(Some(value))
        })
    }

    fn once_live(&self, kind: &str, now: i64) -> Result<usize, StoreError> {
        self.with(|c| {
            let n: i64 = c.query_one(sql(&st::ONCE_LIVE), &[&kind, &now])?.get(0);
            Ok(usize::try_from(n).unwrap_or(0))
        })
    }
}
