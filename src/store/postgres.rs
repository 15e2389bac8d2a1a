//! [`Store`](super::Store) on PostgreSQL (`[store] url = "postgres://…"`, issue 27), with the
//! `postgres` crate (the blocking face of `tokio-postgres`, on a runtime of its own: the store's
//! calls are blocking already, made from `store::blocking`'s threads and from the CLI) and rustls
//! for TLS (`sslmode=require` or `verify-full`: the system's CA bundle, or `SSL_CERT_FILE`).
//! A pool of connections (`pool.rs`), each lent to one call at a time; a broken one is dropped and
//! another opened at the next call. Every call is bounded ([`CALL_TIMEOUT`], `conn.rs`,
//! `pool.rs`): a database that does not answer fails it with [`StoreError::Unanswered`], which the
//! gateway answers with 503. What must stay on one connection has one of its own: a call's
//! transaction (on its lent connection), the listening connection and each advisory lock's
//! (`shared.rs`).
//! The schema is `migrations/postgres/`, applied under an advisory lock (two gateways starting at
//! once migrate once), counted in `ocgw_schema`.

mod breaker;
mod conn;
mod exec;
mod pool;
mod shared;

use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

use conn::{Conn, Sql};

use super::StoreError;
use super::backend::{self, Backend};

/// Applied in order; a database at version n has the first n.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/postgres/0001_schema.sql"),
    include_str!("migrations/postgres/0002_keys.sql"),
    include_str!("migrations/postgres/0003_once.sql"),
    include_str!("migrations/postgres/0004_budgets.sql"),
    include_str!("migrations/postgres/0005_push_per_user.sql"),
    include_str!("migrations/postgres/0006_policies.sql"),
    include_str!("migrations/postgres/0007_trigger_runs.sql"),
];
/// How long a connection to the database may take when the URL does not say (the store's calls
/// are bounded by [`CALL_TIMEOUT`] all the same; this bounds the listening and lock threads').
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one store call may take, waiting for the connection, opening it and every round
/// trip included: a login waits on it. The server's own timeouts are set below it (`conn.rs`).
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// Migrating may wait for another gateway's migration (an advisory lock) and make tables.
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long sent data may stay unacknowledged, and an idle connection unprobed, before the OS
/// calls the connection dead (when the URL does not say): a database host that vanished from
/// the network ends the listening and lock connections in about half a minute, not hours.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
/// `pg_advisory_xact_lock`'s key for migrating ("ocgw" in ASCII).
const MIGRATION_LOCK: i64 = 0x6f63_6777;

pub(crate) struct PostgresStore {
    url: String,
    pool: pool::Pool,
    writes: super::WriteNotes,
}

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> Self {
        // The server's own words ("db error" alone says nothing).
        match e.as_db_error() {
            Some(db) => StoreError::Backend(format!("{} ({})", db.message(), db.code().code())),
            None => StoreError::Backend(e.to_string()),
        }
    }
}

/// The URL without its password, for messages.
pub(crate) fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let auth = &url[s + 3..at];
            let user = auth.split(':').next().unwrap_or("");
            format!("{}{user}:…{}", &url[..s + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

/// `url` parsed, with the defaults the URL does not override.
fn config(url: &str) -> Result<tokio_postgres::Config, StoreError> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e: postgres::Error| StoreError::Backend(format!("store.url: {e}")))?;
    // A database that does not answer fails a connect in seconds, not at the OS's TCP timeout
    // (minutes): the listening and lock threads retry. The URL's own settings win.
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    // The library's default is two hours (and cannot be told from a URL that says so).
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(KEEPALIVE_IDLE);
    }
    Ok(config)
}

/// A blocking connection of its own, for the listening and lock threads.
pub(super) fn connect(url: &str) -> Result<Client, StoreError> {
    let config = postgres::Config::from(config(url)?);
    let client = match config.get_ssl_mode() {
        postgres::config::SslMode::Disable => config.connect(NoTls)?,
        _ => {
            let tls = crate::support::tls::client_config().map_err(StoreError::Backend)?;
            config.connect(tokio_postgres_rustls::MakeRustlsConnect::new((*tls).clone()))?
        }
    };
    Ok(client)
}

impl PostgresStore {
    pub(crate) fn open(url: &str) -> anyhow::Result<PostgresStore> {
        let store = PostgresStore {
            url: url.to_string(),
            pool: pool::Pool::new(url).map_err(|e| anyhow::anyhow!("the state database at {}: {e}", redacted(url)))?,
            writes: Default::default(),
        };
        store
            .bounded(MIGRATE_TIMEOUT, |c| {
                migrate(c).map_err(|e| StoreError::Backend(format!("{e:#}")))
            })
            .map_err(|e| anyhow::anyhow!("the state database at {}: {e}", redacted(url)))?;
        Ok(store)
    }

    /// Run `f` on a connection of the pool within [`CALL_TIMEOUT`].
    fn with<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.bounded(CALL_TIMEOUT, f)
    }

    /// Run `f` on a connection of the pool, waiting for one or opening it, all within `bound`.
    fn bounded<T>(&self, bound: Duration, f: impl FnOnce(&mut Conn) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut conn = self.pool.lend(Instant::now() + bound, bound)?;
        f(&mut conn)
    }
}

fn migrate(client: &mut Conn) -> anyhow::Result<()> {
    let tx = client.transaction()?;
    // Longer than a call's own: another gateway may be migrating (the lock below).
    tx.batch_execute("SET LOCAL lock_timeout = '25s'; SET LOCAL statement_timeout = '25s'")?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS ocgw_schema (version INTEGER NOT NULL)")?;
    let have: i32 = match tx.query_opt("SELECT version FROM ocgw_schema", &[])? {
        Some(row) => row.get(0),
        None => {
            tx.execute("INSERT INTO ocgw_schema (version) VALUES (0)", &[])?;
            0
        }
    };
    let have = usize::try_from(have).unwrap_or(usize::MAX);
    for sql in super::backend::pending(MIGRATIONS, have)? {
        tx.batch_execute(sql)?;
    }
    let now = i32::try_from(MIGRATIONS.len())?;
    tx.execute("UPDATE ocgw_schema SET version = $1", &[&now])?;
    tx.commit()?;
    Ok(())
}

impl Backend for PostgresStore {
    fn on_connection<T: Send>(&self, f: impl backend::Work<T>) -> Result<T, StoreError> {
        self.with(|c| f(&*c))
    }

    fn in_transaction<T: Send>(&self, f: impl backend::Work<T>) -> Result<T, StoreError> {
        self.with(|c| {
            let tx = c.transaction()?;
            let result = f(&tx)?;
            tx.commit()?;
            Ok(result)
        })
    }

    fn writes(&self) -> &super::WriteNotes {
        &self.writes
    }
}

#[cfg(test)]
mod tests;
