//! [`Store`] on an embedded SQLite file (WAL, owner-only). Migrations are the SQL files in
//! `migrations/`, applied in order and counted in `PRAGMA user_version`.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension, params};

mod once;
mod passkeys;
mod push;

use super::statements::{self as st, Dialect, Statement};
use super::{
    BrowserStore, DeviceRecord, SessionPolicy, StoreError, TokenRecord, TokenStore, WebSessionLookup, WebSessionRecord,
    WriteHealth,
};

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
        if have > MIGRATIONS.len() {
            anyhow::bail!(
                "it is at schema version {have}, newer than this gateway knows ({}); fix: run the newer gateway",
                MIGRATIONS.len()
            );
        }
        for sql in &MIGRATIONS[have..] {
            tx.execute_batch(sql)?;
        }
        tx.pragma_update(None, "user_version", MIGRATIONS.len())?;
        tx.commit()?;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A write on the connection: its failure counted and said once per run of failures.
    fn write<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let result = f(&mut self.lock());
        self.writes.noted(what, result)
    }
}

/// A statement as SQLite spells it.
fn sql(statement: &'static Statement) -> &'static str {
    statement.sql(Dialect::Sqlite)
}

/// A record kept as one row, read in the order of its columns in `statements`.
trait FromRow: Sized {
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self>;
}

/// The one record `statement` finds, if any (a cached statement: these are the lookups every
/// request makes).
fn one<T: FromRow>(
    conn: &Connection,
    statement: &'static Statement,
    params: impl rusqlite::Params,
) -> Result<Option<T>, StoreError> {
    Ok(conn
        .prepare_cached(sql(statement))?
        .query_row(params, T::read)
        .optional()?)
}

/// Every record `statement` finds.
fn all<T: FromRow>(
    conn: &Connection,
    statement: &'static Statement,
    params: impl rusqlite::Params,
) -> Result<Vec<T>, StoreError> {
    Ok(conn
        .prepare(sql(statement))?
        .query_map(params, T::read)?
        .collect::<Result<_, _>>()?)
}

/// An immediate transaction: it holds the file from its first statement, so what it reads stays
/// true until it commits.
fn immediate(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>, StoreError> {
    Ok(conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?)
}

/// A digest column; a stored value of another length reads as zeros.
fn digest(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<[u8; 32]> {
    let digest: Vec<u8> = row.get(i)?;
    Ok(digest.try_into().unwrap_or([0; 32]))
}

impl FromRow for TokenRecord {
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        let projects: Option<String> = row.get(5)?;
        Ok(TokenRecord {
            id: row.get(0)?,
            digest: digest(row, 1)?,
            user: row.get(2)?,
            label: row.get(3)?,
            role: row.get(4)?,
            projects: super::split_projects(projects),
            created_at: row.get(6)?,
            expires_at: row.get(7)?,
            last_used_at: row.get(8)?,
            revoked_at: row.get(9)?,
            policy: row.get(10)?,
        })
    }
}

impl FromRow for DeviceRecord {
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(DeviceRecord {
            id: row.get(0)?,
            user: row.get(1)?,
            label: row.get(2)?,
            created_at: row.get(3)?,
            last_seen_at: row.get(4)?,
            last_address: row.get(5)?,
            revoked_at: row.get(6)?,
        })
    }
}

impl FromRow for WebSessionRecord {
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(WebSessionRecord {
            id: row.get(0)?,
            digest: digest(row, 1)?,
            user: row.get(2)?,
            device_id: row.get(3)?,
            parent: row.get(4)?,
            host: row.get(5)?,
            created_at: row.get(6)?,
            last_seen_at: row.get(7)?,
            idle_secs: row.get(8)?,
            expires_at: row.get(9)?,
            revoked_at: row.get(10)?,
        })
    }
}

impl TokenStore for SqliteStore {
    fn insert_token(&self, t: &TokenRecord) -> Result<(), StoreError> {
        self.write("insert_token", |c| {
            c.execute(
                sql(&st::TOKEN_INSERT),
                params![
                    t.id,
                    &t.digest[..],
                    t.user,
                    t.label,
                    t.role,
                    t.projects.as_ref().map(|p| p.join(",")),
                    t.created_at,
                    t.expires_at,
                    t.last_used_at,
                    t.revoked_at,
                    t.policy
                ],
            )?;
            Ok(())
        })
    }

    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenRecord>, StoreError> {
        one(&self.lock(), &st::TOKEN_BY_DIGEST, [&digest[..]])
    }

    fn list_tokens(&self, user: Option<&str>) -> Result<Vec<TokenRecord>, StoreError> {
        all(&self.lock(), &st::TOKENS_OF, [user])
    }

    fn revoke_token(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        self.write("revoke_token", |c| {
            Ok(c.execute(sql(&st::TOKEN_REVOKE), params![id, at])? == 1)
        })
    }

    fn touch_token(&self, id: &str, at: i64) -> Result<(), StoreError> {
        self.write("touch_token", |c| {
            c.prepare_cached(sql(&st::TOKEN_TOUCH))?.execute(params![id, at])?;
            Ok(())
        })
    }

    fn set_session_policy(&self, p: &SessionPolicy, at: i64) -> Result<(), StoreError> {
        self.write("set_session_policy", |c| {
            c.execute(
                sql(&st::SESSION_POLICY_SET),
                params![p.session, p.project, p.policy, at],
            )?;
            Ok(())
        })
    }

    fn session_policies(&self) -> Result<Vec<SessionPolicy>, StoreError> {
        let c = self.lock();
        let mut stmt = c.prepare(sql(&st::SESSION_POLICIES))?;
        let rows = stmt.query_map([], |r| {
            Ok(SessionPolicy {
                session: r.get(0)?,
                project: r.get(1)?,
                policy: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

impl BrowserStore for SqliteStore {
    fn health(&self) -> WriteHealth {
        self.writes.health()
    }

    fn insert_device(&self, d: &DeviceRecord) -> Result<(), StoreError> {
        self.write("insert_device", |c| {
            c.execute(
                sql(&st::DEVICE_INSERT),
                params![
                    d.id,
                    d.user,
                    d.label,
                    d.created_at,
                    d.last_seen_at,
                    d.last_address,
                    d.revoked_at
                ],
            )?;
            Ok(())
        })
    }

    fn list_devices(&self, user: Option<&str>) -> Result<Vec<DeviceRecord>, StoreError> {
        all(&self.lock(), &st::DEVICES_OF, [user])
    }

    fn revoke_device(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        self.write("revoke_device", |c| {
            let tx = immediate(c)?;
            let n = tx.execute(sql(&st::DEVICE_REVOKE), params![id, at])?;
            tx.execute(sql(&st::DEVICE_PUSH_DELETE), params![id])?;
            tx.execute(sql(&st::DEVICE_SESSIONS_REVOKE), params![id, at])?;
            tx.commit()?;
            Ok(n == 1)
        })
    }

    fn password_is(&self, user: &str, fingerprint: &[u8; 32], at: i64) -> Result<usize, StoreError> {
        self.write("password_is", |c| {
            let tx = immediate(c)?;
            let known: Option<Vec<u8>> = tx
                .query_row(sql(&st::FINGERPRINT_OF), [user], |r| r.get(0))
                .optional()?;
            if known.as_deref() == Some(&fingerprint[..]) {
                return Ok(0);
            }
            tx.execute(sql(&st::FINGERPRINT_SAVE), params![user, &fingerprint[..]])?;
            // First sight of this user's password: nothing was made under another one.
            let ended = match known {
                None => 0,
                Some(_) => tx.execute(sql(&st::PASSWORD_SESSIONS_REVOKE), params![user, at])?,
            };
            tx.commit()?;
            Ok(ended)
        })
    }

    fn touch_device(&self, id: &str, at: i64, address: &str) -> Result<(), StoreError> {
        self.write("touch_device", |c| {
            c.prepare_cached(sql(&st::DEVICE_TOUCH))?
                .execute(params![id, at, address])?;
            Ok(())
        })
    }

    fn insert_web_session(&self, w: &WebSessionRecord) -> Result<(), StoreError> {
        self.write("insert_web_session", |c| {
            c.execute(
                sql(&st::SESSION_INSERT),
                params![
                    w.id,
                    &w.digest[..],
                    w.user,
                    w.device_id,
                    w.parent,
                    w.host,
                    w.created_at,
                    w.last_seen_at,
                    w.idle_secs,
                    w.expires_at,
                    w.revoked_at
                ],
            )?;
            Ok(())
        })
    }

    fn web_session_by_digest(&self, digest: &[u8; 32]) -> Result<Option<WebSessionLookup>, StoreError> {
        let conn = self.lock();
        let Some(session) = one::<WebSessionRecord>(&conn, &st::SESSION_BY_DIGEST, [&digest[..]])? else {
            return Ok(None);
        };
        let parent: Option<WebSessionRecord> = match &session.parent {
            Some(p) => one(&conn, &st::SESSION_BY_ID, [p])?,
            None => None,
        };
        let device_revoked = match session.device_of(parent.as_ref()) {
            Some(d) => conn
                .prepare_cached(sql(&st::DEVICE_REVOKED))?
                .query_row([d], |r| r.get::<_, bool>(0))
                .optional()?
                // A device row that is gone counts as revoked.
                .unwrap_or(true),
            None => false,
        };
        Ok(Some(WebSessionLookup {
            session,
            parent,
            device_revoked,
        }))
    }

    fn revoke_web_session(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        self.write("revoke_web_session", |c| {
            Ok(c.execute(sql(&st::SESSION_REVOKE), params![id, at])? >= 1)
        })
    }

    fn touch_web_session(&self, id: &str, at: i64) -> Result<(), StoreError> {
        self.write("touch_web_session", |c| {
            c.prepare_cached(sql(&st::SESSION_TOUCH))?.execute(params![id, at])?;
            Ok(())
        })
    }

    fn prune_web_sessions(&self, before: i64) -> Result<usize, StoreError> {
        self.write("prune_web_sessions", |c| {
            let n = c.execute(sql(&st::SESSIONS_PRUNE), params![before])?;
            c.execute(sql(&st::PUSH_PRUNE), [])?;
            Ok(n)
        })
    }
}

impl super::SpendStore for SqliteStore {
    fn spend_of_day(&self, day: i64) -> Result<Vec<(String, String, f64)>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(sql(&st::SPEND_OF_DAY))?;
        let rows = stmt.query_map(params![day], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn spend_between(&self, from: i64, to: i64) -> Result<Vec<(String, String, f64)>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(sql(&st::SPEND_BETWEEN))?;
        let rows = stmt.query_map(params![from, to], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn session_costs(&self) -> Result<Vec<super::SessionCost>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(sql(&st::SESSION_COSTS))?;
        let rows = stmt.query_map([], |r| {
            Ok(super::SessionCost {
                project: r.get(0)?,
                session: r.get(1)?,
                parent: r.get(2)?,
                prompter: r.get(3)?,
                usd: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn save_spend(
        &self,
        day: i64,
        totals: &[(String, String, f64)],
        sessions: &[super::SessionCost],
    ) -> Result<(), StoreError> {
        self.write("saving spend", |c| {
            let tx = c.transaction()?;
            for (kind, name, usd) in totals {
                let day = super::spend_day(day, kind, name);
                tx.execute(sql(&st::SPEND_SAVE), params![day, kind, name, usd])?;
            }
            for s in sessions {
                tx.execute(
                    sql(&st::SESSION_COST_SAVE),
                    params![s.project, s.session, s.parent, s.prompter, s.usd],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }
}

/// One gateway per file: nothing shared (the digest key is `state_dir/token-digest.key`).
impl super::SharedStore for SqliteStore {}

#[cfg(test)]
mod tests {
    use super::*;
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
