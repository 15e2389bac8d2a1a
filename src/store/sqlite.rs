//! [`Store`] on an embedded SQLite file (WAL, owner-only). Migrations are the SQL files in
//! `migrations/`, applied in order and counted in `PRAGMA user_version`.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Store, StoreError, TokenRecord};

/// Applied in order; a database at `user_version = n` has the first n.
const MIGRATIONS: &[&str] = &[include_str!("migrations/0001_tokens.sql")];

pub struct SqliteStore {
    conn: Mutex<Connection>,
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

impl SqliteStore {
    pub fn open(path: &Path) -> anyhow::Result<SqliteStore> {
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
        let store = SqliteStore { conn: Mutex::new(conn) };
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

const COLUMNS: &str = "id, digest, user, label, role, projects, created_at, expires_at, last_used_at, revoked_at";

fn record(row: &rusqlite::Row<'_>) -> rusqlite::Result<TokenRecord> {
    let digest: Vec<u8> = row.get(1)?;
    let projects: Option<String> = row.get(5)?;
    Ok(TokenRecord {
        id: row.get(0)?,
        digest: digest.try_into().unwrap_or([0; 32]),
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

impl Store for SqliteStore {
    fn insert_token(&self, t: &TokenRecord) -> Result<(), StoreError> {
        self.lock().execute(
            &format!("INSERT INTO tokens ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
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
    }

    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM tokens WHERE digest = ?1"))?;
        Ok(stmt.query_row([&digest[..]], record).optional()?)
    }

    fn list_tokens(&self, user: Option<&str>) -> Result<Vec<TokenRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM tokens WHERE ?1 IS NULL OR user = ?1 ORDER BY created_at DESC, id"
        ))?;
        let rows = stmt.query_map([user], record)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn revoke_token(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        let n = self.lock().execute(
            "UPDATE tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
            params![id, at],
        )?;
        Ok(n == 1)
    }

    fn touch_token(&self, id: &str, at: i64) -> Result<(), StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached("UPDATE tokens SET last_used_at = ?2 WHERE id = ?1")?;
        stmt.execute(params![id, at])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: &str, digest: u8, user: &str) -> TokenRecord {
        TokenRecord {
            id: id.into(),
            digest: [digest; 32],
            user: user.into(),
            label: "ci".into(),
            role: Some("viewer".into()),
            projects: Some(vec!["web".into(), "api".into()]),
            created_at: 100,
            expires_at: 200,
            last_used_at: None,
            revoked_at: None,
        }
    }

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

    #[test]
    fn tokens_round_trip_revoke_and_touch() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("gateway.db")).unwrap();
        s.insert_token(&sample("a", 1, "alice")).unwrap();
        s.insert_token(&sample("b", 2, "bob")).unwrap();
        assert!(s.insert_token(&sample("c", 1, "x")).is_err(), "digests are unique");
        assert_eq!(s.token_by_digest(&[1; 32]).unwrap().unwrap(), sample("a", 1, "alice"));
        assert_eq!(s.token_by_digest(&[9; 32]).unwrap(), None);
        assert_eq!(s.list_tokens(Some("bob")).unwrap().len(), 1);
        s.touch_token("a", 150).unwrap();
        assert_eq!(s.token_by_digest(&[1; 32]).unwrap().unwrap().last_used_at, Some(150));
        assert!(s.revoke_token("a", 160).unwrap());
        assert!(!s.revoke_token("a", 170).unwrap(), "once");
        assert!(!s.revoke_token("nope", 170).unwrap());
        assert_eq!(s.token_by_digest(&[1; 32]).unwrap().unwrap().revoked_at, Some(160));
    }
}
