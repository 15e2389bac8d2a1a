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

use super::{
    BrowserStore, DeviceRecord, StoreError, TokenRecord, TokenStore, WebSessionLookup, WebSessionRecord, WriteHealth,
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
    fn noted<T>(&self, what: &'static str, result: Result<T, StoreError>) -> Result<T, StoreError> {
        self.writes.noted(what, result)
    }

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
}

/// A record kept as one row: its columns, named once, in the order [`FromRow::read`] reads them and
/// the inserts write them.
trait FromRow: Sized {
    const COLUMNS: &'static str;
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self>;
}

/// The one record `SELECT <its columns> <rest>` finds, if any (a cached statement: these are
/// the lookups every request makes).
fn one<T: FromRow>(conn: &Connection, rest: &str, params: impl rusqlite::Params) -> Result<Option<T>, StoreError> {
    let sql = format!("SELECT {} {rest}", T::COLUMNS);
    Ok(conn.prepare_cached(&sql)?.query_row(params, T::read).optional()?)
}

/// Every record `SELECT <its columns> <rest>` finds.
fn all<T: FromRow>(conn: &Connection, rest: &str, params: impl rusqlite::Params) -> Result<Vec<T>, StoreError> {
    let sql = format!("SELECT {} {rest}", T::COLUMNS);
    Ok(conn
        .prepare(&sql)?
        .query_map(params, T::read)?
        .collect::<Result<_, _>>()?)
}

/// A digest column; a stored value of another length reads as zeros.
fn digest(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<[u8; 32]> {
    let digest: Vec<u8> = row.get(i)?;
    Ok(digest.try_into().unwrap_or([0; 32]))
}

impl FromRow for TokenRecord {
    const COLUMNS: &'static str =
        "id, digest, user, label, role, projects, created_at, expires_at, last_used_at, revoked_at";
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        let projects: Option<String> = row.get(5)?;
        Ok(TokenRecord {
            id: row.get(0)?,
            digest: digest(row, 1)?,
            user: row.get(2)?,
            label: row.get(3)?,
            role: row.get(4)?,
            projects: projects.map(|p| p.split(',').filter(|s| !s.is_empty()).map(String::from).collect()),
            created_at: row.get(6)?,
            expires_at: row.get(7)?,
            last_used_at: row.get(8)?,
            revoked_at: row.get(9)?,
        })
    }
}

impl FromRow for DeviceRecord {
    const COLUMNS: &'static str = "id, user, label, created_at, last_seen_at, last_address, revoked_at";
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
    const COLUMNS: &'static str =
        "id, digest, user, device_id, parent, host, created_at, last_seen_at, idle_secs, expires_at, revoked_at";
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
        let result = (|| -> Result<(), StoreError> {
            self.lock().execute(
                &format!(
                    "INSERT INTO tokens ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    TokenRecord::COLUMNS
                ),
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
                    t.revoked_at
                ],
            )?;
            Ok(())
        })();
        self.noted("insert_token", result)
    }

    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenRecord>, StoreError> {
        one(&self.lock(), "FROM tokens WHERE digest = ?1", [&digest[..]])
    }

    fn list_tokens(&self, user: Option<&str>) -> Result<Vec<TokenRecord>, StoreError> {
        all(
            &self.lock(),
            "FROM tokens WHERE ?1 IS NULL OR user = ?1 ORDER BY created_at DESC, id",
            [user],
        )
    }

    fn revoke_token(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        let result = (|| -> Result<bool, StoreError> {
            let n = self.lock().execute(
                "UPDATE tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                params![id, at],
            )?;
            Ok(n == 1)
        })();
        self.noted("revoke_token", result)
    }

    fn touch_token(&self, id: &str, at: i64) -> Result<(), StoreError> {
        let result = (|| -> Result<(), StoreError> {
            let conn = self.lock();
            let mut stmt = conn.prepare_cached("UPDATE tokens SET last_used_at = ?2 WHERE id = ?1")?;
            stmt.execute(params![id, at])?;
            Ok(())
        })();
        self.noted("touch_token", result)
    }
}

impl BrowserStore for SqliteStore {
    fn health(&self) -> WriteHealth {
        self.writes.health()
    }

    fn insert_device(&self, d: &DeviceRecord) -> Result<(), StoreError> {
        let result = (|| -> Result<(), StoreError> {
            self.lock().execute(
                &format!(
                    "INSERT INTO devices ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    DeviceRecord::COLUMNS
                ),
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
        })();
        self.noted("insert_device", result)
    }

    fn list_devices(&self, user: Option<&str>) -> Result<Vec<DeviceRecord>, StoreError> {
        all(
            &self.lock(),
            "FROM devices WHERE ?1 IS NULL OR user = ?1 ORDER BY created_at DESC, id",
            [user],
        )
    }

    fn revoke_device(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        let result = (|| -> Result<bool, StoreError> {
            let mut conn = self.lock();
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let n = tx.execute(
                "UPDATE devices SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                params![id, at],
            )?;
            // Its push subscriptions: a revoked phone is told nothing more.
            tx.execute("DELETE FROM push_subscriptions WHERE device_id = ?1", params![id])?;
            // Its sessions, and the project-host sessions handed off from them.
            tx.execute(
                "UPDATE web_sessions SET revoked_at = ?2 WHERE revoked_at IS NULL AND (device_id = ?1
                   OR parent IN (SELECT id FROM web_sessions WHERE device_id = ?1))",
                params![id, at],
            )?;
            tx.commit()?;
            Ok(n == 1)
        })();
        self.noted("revoke_device", result)
    }

    fn password_is(&self, user: &str, fingerprint: &[u8; 32], at: i64) -> Result<usize, StoreError> {
        let result = (|| -> Result<usize, StoreError> {
            let mut conn = self.lock();
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let known: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT fingerprint FROM password_fingerprints WHERE user = ?1",
                    [user],
                    |r| r.get(0),
                )
                .optional()?;
            if known.as_deref() == Some(&fingerprint[..]) {
                return Ok(0);
            }
            tx.execute(
                "INSERT INTO password_fingerprints (user, fingerprint) VALUES (?1, ?2)
                   ON CONFLICT(user) DO UPDATE SET fingerprint = excluded.fingerprint",
                params![user, &fingerprint[..]],
            )?;
            // First sight of this user's password: nothing was made under another one.
            let ended = if known.is_none() {
                0
            } else {
                // Login-host sessions that no device owns (password and single sign-on logins), and
                // the project-host sessions handed off from them.
                tx.execute(
                    "UPDATE web_sessions SET revoked_at = ?2 WHERE revoked_at IS NULL AND user = ?1 AND (
                       (device_id IS NULL AND parent IS NULL)
                       OR parent IN (SELECT id FROM web_sessions WHERE user = ?1 AND device_id IS NULL AND parent IS NULL))",
                    params![user, at],
                )?
            };
            tx.commit()?;
            Ok(ended)
        })();
        self.noted("password_is", result)
    }

    fn touch_device(&self, id: &str, at: i64, address: &str) -> Result<(), StoreError> {
        let result = (|| -> Result<(), StoreError> {
            let conn = self.lock();
            let mut stmt =
                conn.prepare_cached("UPDATE devices SET last_seen_at = ?2, last_address = ?3 WHERE id = ?1")?;
            stmt.execute(params![id, at, address])?;
            Ok(())
        })();
        self.noted("touch_device", result)
    }

    fn insert_web_session(&self, w: &WebSessionRecord) -> Result<(), StoreError> {
        let result = (|| -> Result<(), StoreError> {
            self.lock().execute(
                &format!(
                    "INSERT INTO web_sessions ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                    WebSessionRecord::COLUMNS
                ),
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
        })();
        self.noted("insert_web_session", result)
    }

    fn web_session_by_digest(&self, digest: &[u8; 32]) -> Result<Option<WebSessionLookup>, StoreError> {
        let conn = self.lock();
        let Some(session) = one::<WebSessionRecord>(&conn, "FROM web_sessions WHERE digest = ?1", [&digest[..]])?
        else {
            return Ok(None);
        };
        let parent: Option<WebSessionRecord> = match &session.parent {
            Some(p) => one(&conn, "FROM web_sessions WHERE id = ?1", [p])?,
            None => None,
        };
        let device = session
            .device_id
            .as_ref()
            .or(parent.as_ref().and_then(|p| p.device_id.as_ref()));
        let device_revoked = match device {
            Some(d) => conn
                .prepare_cached("SELECT revoked_at IS NOT NULL FROM devices WHERE id = ?1")?
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
        let result = (|| -> Result<bool, StoreError> {
            let n = self.lock().execute(
                "UPDATE web_sessions SET revoked_at = ?2 WHERE (id = ?1 OR parent = ?1) AND revoked_at IS NULL",
                params![id, at],
            )?;
            Ok(n >= 1)
        })();
        self.noted("revoke_web_session", result)
    }

    fn touch_web_session(&self, id: &str, at: i64) -> Result<(), StoreError> {
        let result = (|| -> Result<(), StoreError> {
            let conn = self.lock();
            let mut stmt = conn.prepare_cached(
                "UPDATE web_sessions SET last_seen_at = ?2 WHERE id = ?1
                   OR id = (SELECT parent FROM web_sessions WHERE id = ?1)",
            )?;
            stmt.execute(params![id, at])?;
            Ok(())
        })();
        self.noted("touch_web_session", result)
    }

    fn prune_web_sessions(&self, before: i64) -> Result<usize, StoreError> {
        let result = (|| -> Result<usize, StoreError> {
            let conn = self.lock();
            let n = conn.execute(
                "DELETE FROM web_sessions WHERE revoked_at < ?1 OR expires_at < ?1",
                params![before],
            )?;
            // Push subscriptions made in logins that are gone now.
            conn.execute(
                "DELETE FROM push_subscriptions WHERE session_id NOT IN (SELECT id FROM web_sessions)",
                [],
            )?;
            Ok(n)
        })();
        self.noted("prune_web_sessions", result)
    }
}

impl super::SpendStore for SqliteStore {
    fn spend_of_day(&self, day: i64) -> Result<Vec<(String, String, f64)>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut stmt = conn.prepare("SELECT kind, name, usd FROM spend_days WHERE day = ?1")?;
        let rows = stmt.query_map(params![day], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn spend_between(&self, from: i64, to: i64) -> Result<Vec<(String, String, f64)>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut stmt = conn
            .prepare("SELECT kind, name, SUM(usd) FROM spend_days WHERE day >= ?1 AND day < ?2 GROUP BY kind, name")?;
        let rows = stmt.query_map(params![from, to], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn session_costs(&self) -> Result<Vec<super::SessionCost>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut stmt = conn.prepare("SELECT project, session, parent, prompter, usd FROM session_costs")?;
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
        let result = (|| {
            let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            let tx = conn.transaction()?;
            for (kind, name, usd) in totals {
                // A session's raise outlives the day: kept under day 0 (`SESSION_RAISES_DAY`).
                let day = if kind == "raised" && name.starts_with("session ") {
                    super::SESSION_RAISES_DAY
                } else {
                    day
                };
                tx.execute(
                    "INSERT INTO spend_days (day, kind, name, usd) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (day, kind, name) DO UPDATE SET usd = excluded.usd",
                    params![day, kind, name, usd],
                )?;
            }
            for s in sessions {
                tx.execute(
                    "INSERT INTO session_costs (project, session, parent, prompter, usd) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (project, session) DO UPDATE SET parent = excluded.parent, prompter = excluded.prompter, usd = excluded.usd",
                    params![s.project, s.session, s.parent, s.prompter, s.usd],
                )?;
            }
            tx.commit()?;
            Ok(())
        })();
        self.noted("saving spend", result)
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
