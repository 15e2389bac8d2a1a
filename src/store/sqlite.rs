//! [`Store`] on an embedded SQLite file (WAL, owner-only). Migrations are the SQL files in
//! `migrations/`, applied in order and counted in `PRAGMA user_version`.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use rusqlite::Connection;

use super::StoreError;
use super::backend::{Backend, Bind, EachRow, Exec, Param, Row, Value, Work};
use super::statements::{Dialect, Statement};

/// Applied in order; a database at `user_version = n` has the first n.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_tokens.sql"),
    include_str!("migrations/0002_browser.sql"),
    include_str!("migrations/0003_passwords.sql"),
    include_str!("migrations/0004_spend.sql"),
    include_str!("migrations/0005_push.sql"),
    include_str!("migrations/0006_passkeys.sql"),
    include_str!("migrations/0007_once.sql"),
    include_str!("migrations/0008_push_per_user.sql"),
    include_str!("migrations/0009_policies.sql"),
    include_str!("migrations/0010_trigger_runs.sql"),
];

pub(crate) struct SqliteStore {
    conn: Mutex<Connection>,
    /// The last write failed (a full disk); cleared by the next that works.
    writes: super::WriteNotes,
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

impl SqliteStore {
    pub(crate) fn open(path: &Path) -> anyhow::Result<SqliteStore> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("server.state_dir: cannot create {}", dir.display()))?;
        }
        // Made owner-only before SQLite opens it; its -wal and -shm files take the same mode.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("cannot open the state database {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        let conn = Connection::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.set_prepared_statement_cache_capacity(super::statements::ALL.len());
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let store = SqliteStore {
            conn: Mutex::new(conn),
            writes: Default::default(),
        };
        store
            .migrate()
            .with_context(|| format!("cannot migrate the state database {}", path.display()))?;
        Ok(store)
    }

    fn migrate(&self) -> anyhow::Result<()> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let have: usize = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        for sql in super::backend::pending(MIGRATIONS, have)? {
            tx.execute_batch(sql)?;
        }
        tx.pragma_update(None, "user_version", MIGRATIONS.len())?;
        tx.commit()?;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Backend for SqliteStore {
    fn on_connection<T: Send>(&self, f: impl Work<T>) -> Result<T, StoreError> {
        f(&*self.lock())
    }

    /// An immediate transaction: it holds the file from its first statement, so what it reads
    /// stays true until it commits.
    fn in_transaction<T: Send>(&self, f: impl Work<T>) -> Result<T, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let result = f(&*tx)?;
        tx.commit()?;
        Ok(result)
    }

    fn writes(&self) -> &super::WriteNotes {
        &self.writes
    }
}

/// A statement's parameters as SQLite takes them.
fn bound<'a>(params: &'a [&'a dyn Bind]) -> impl rusqlite::Params + 'a {
    rusqlite::params_from_iter(params.iter().map(|p| p.param()))
}

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Param::Int(v) => v.to_sql(),
            Param::Real(v) => v.to_sql(),
            Param::Text(v) => v.to_sql(),
            Param::Bytes(v) => v.to_sql(),
        }
    }
}

/// Every statement is cached: the store has few, and the lookups run on every request.
impl Exec for Connection {
    fn execute(&self, statement: &'static Statement, params: &[&dyn Bind]) -> Result<usize, StoreError> {
        Ok(self
            .prepare_cached(statement.sql(Dialect::Sqlite))?
            .execute(bound(params))?)
    }

    fn each_row(
        &self,
        statement: &'static Statement,
        params: &[&dyn Bind],
        each: EachRow<'_>,
    ) -> Result<(), StoreError> {
        let mut prepared = self.prepare_cached(statement.sql(Dialect::Sqlite))?;
        let mut rows = prepared.query(bound(params))?;
        while let Some(row) = rows.next()? {
            each(row)?;
        }
        Ok(())
    }
}

impl Row for rusqlite::Row<'_> {
    fn value(&self, i: usize) -> Result<Value, StoreError> {
        use rusqlite::types::ValueRef;
        Ok(match self.get_ref(i)? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(n) => Value::Int(n),
            ValueRef::Real(x) => Value::Real(x),
            ValueRef::Text(t) => {
                Value::Text(String::from_utf8(t.to_vec()).map_err(|e| StoreError::Backend(format!("column {i}: {e}")))?)
            }
            ValueRef::Blob(b) => Value::Bytes(b.to_vec()),
        })
    }
}

/// One gateway per file: nothing shared (the digest key is `state_dir/token-digest.key`).
impl super::SharedStore for SqliteStore {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TokenStore;
    use crate::store::conformance::sample;

    #[test]
    fn migrations_apply_once_and_the_file_is_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join("gateway.db");
        let s = SqliteStore::open(&path).unwrap();
        s.insert_token(&sample("a", 1, "alice")).unwrap();
        drop(s);
        // Reopening applies nothing again and keeps the rows.
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.list_tokens(None).unwrap().len(), 1);
        let version: usize = s.lock().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, MIGRATIONS.len());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn refuses_a_database_from_a_newer_gateway() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.db");
        drop(SqliteStore::open(&path).unwrap());
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        let err = SqliteStore::open(&path).err().unwrap();
        assert!(format!("{err:#}").contains("schema version 99"), "{err:#}");
    }
}
