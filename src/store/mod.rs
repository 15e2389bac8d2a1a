//! The gateway's state database: what it must remember across restarts and share with the CLI
//! (API tokens now; the sessions and devices of a browser login later). One small trait, so
//! another backend can replace SQLite ([`sqlite`]) without touching its callers.

pub mod sqlite;

use std::path::{Path, PathBuf};

/// The file under `state_dir`.
pub const DB_FILE: &str = "gateway.db";

pub fn db_path(state_dir: &Path) -> PathBuf {
    state_dir.join(DB_FILE)
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database: {0}")]
    Backend(String),
}

/// A stored token: everything but the token itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: String,
    pub digest: [u8; 32],
    pub user: String,
    pub label: String,
    /// `None`: the user's own role.
    pub role: Option<String>,
    /// `None`: all the user's projects.
    pub projects: Option<Vec<String>>,
    pub created_at: i64,
    pub expires_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

pub trait Store: Send + Sync {
    fn insert_token(&self, token: &TokenRecord) -> Result<(), StoreError>;
    /// The token whose digest this is, revoked or not.
    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenRecord>, StoreError>;
    /// Tokens, newest first; of one user when `user` is given.
    fn list_tokens(&self, user: Option<&str>) -> Result<Vec<TokenRecord>, StoreError>;
    /// Mark revoked; false when there is no such token (or it was revoked already).
    fn revoke_token(&self, id: &str, at: i64) -> Result<bool, StoreError>;
    fn touch_token(&self, id: &str, at: i64) -> Result<(), StoreError>;
}

/// Open (creating and migrating) the state database under `state_dir`.
pub fn open(state_dir: &Path) -> anyhow::Result<std::sync::Arc<dyn Store>> {
    Ok(std::sync::Arc::new(sqlite::SqliteStore::open(&db_path(state_dir))?))
}
