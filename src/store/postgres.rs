//! [`Store`](super::Store) on PostgreSQL (`[store] url = "postgres://…"`, issue 27), with the
//! `postgres` crate (the blocking face of `tokio-postgres`, on a runtime of its own: the store's
//! calls are blocking already, made from `store::blocking`'s threads and from the CLI) and rustls
//! for TLS (`sslmode=require` or `verify-full`: the system's CA bundle, or `SSL_CERT_FILE`).
//! One connection, lent to one call at a time, as SQLite's; a broken one is opened again at the
//! next call. Every call is bounded ([`CALL_TIMEOUT`], `conn.rs`, `slot.rs`): a database that
//! does not answer fails it with [`StoreError::Unanswered`], which the gateway answers with 503.
//! The schema is `migrations/postgres/`, applied under an advisory lock (two gateways starting at
//! once migrate once), counted in `ocgw_schema`.

mod conn;
mod once;
mod rest;
mod shared;
mod slot;

use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

use conn::{Conn, Sql};

use super::statements::{self as st, Dialect, Statement};

use super::{
    BrowserStore, Changed, DeviceRecord, SessionPolicy, StoreError, TokenRecord, TokenStore, WebSessionLookup,
    WebSessionRecord, WriteHealth,
};

/// Applied in order; a database at version n has the first n.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/postgres/0001_schema.sql"),
    include_str!("migrations/postgres/0002_keys.sql"),
    include_str!("migrations/postgres/0003_once.sql"),
    include_str!("migrations/postgres/0004_budgets.sql"),
    include_str!("migrations/postgres/0005_push_per_user.sql"),
    include_str!("migrations/postgres/0006_policies.sql"),
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
    conn: slot::Slot,
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
            conn: Default::default(),
            writes: Default::default(),
        };
        store
            .bounded(MIGRATE_TIMEOUT, |c| {
                migrate(c).map_err(|e| StoreError::Backend(format!("{e:#}")))
            })
            .map_err(|e| anyhow::anyhow!("the state database at {}: {e}", redacted(url)))?;
        Ok(store)
    }

    /// Run `f` on the connection within [`CALL_TIMEOUT`].
    fn with<T: Send>(&self, f: impl FnOnce(&mut Conn) -> Result<T, StoreError> + Send) -> Result<T, StoreError> {
        self.bounded(CALL_TIMEOUT, f)
    }

    /// Run `f` on the connection, opening it first if there is none or it broke, all within
    /// `bound`. The connection blocks on a runtime of its own, which tokio refuses on a thread
    /// inside another runtime (the gateway's start, `store::blocking`'s threads): there it runs
    /// on a scoped thread, which ends by the deadline as the call does.
    fn bounded<T: Send>(
        &self,
        bound: Duration,
        f: impl FnOnce(&mut Conn) -> Result<T, StoreError> + Send,
    ) -> Result<T, StoreError> {
        let deadline = Instant::now() + bound;
        if tokio::runtime::Handle::try_current().is_ok() {
            return std::thread::scope(|s| {
                s.spawn(|| self.on_connection(deadline, bound, f))
                    .join()
                    .unwrap_or_else(|_| Err(StoreError::Backend("the state database call panicked".into())))
            });
        }
        self.on_connection(deadline, bound, f)
    }

    fn on_connection<T>(
        &self,
        deadline: Instant,
        bound: Duration,
        f: impl FnOnce(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut lent = self.conn.lend(deadline, bound)?;
        if lent.conn.is_none() {
            match conn::open(&self.url, deadline, bound) {
                Ok(c) => lent.conn = Some(c),
                Err(e) => {
                    if matches!(e, StoreError::Unanswered(_)) {
                        lent.unanswered();
                    }
                    return Err(e);
                }
            }
        }
        let conn = lent.conn.as_mut().expect("just opened");
        conn.arm(deadline, bound);
        f(conn)
    }

    /// A write: its failure counted and said once per run of failures, as SQLite's.
    fn write<T: Send>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Conn) -> Result<T, StoreError> + Send,
    ) -> Result<T, StoreError> {
        self.writes.noted(what, self.with(f))
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
    if have > MIGRATIONS.len() {
        anyhow::bail!(
            "it is at schema version {have}, newer than this gateway knows ({}); fix: run the newer gateway",
            MIGRATIONS.len()
        );
    }
    for sql in &MIGRATIONS[have..] {
        tx.batch_execute(sql)?;
    }
    let now = i32::try_from(MIGRATIONS.len())?;
    tx.execute("UPDATE ocgw_schema SET version = $1", &[&now])?;
    tx.commit()?;
    Ok(())
}

/// A statement as PostgreSQL spells it.
fn sql(statement: &'static Statement) -> &'static str {
    statement.sql(Dialect::Postgres)
}

fn digest(row: &postgres::Row, i: usize) -> [u8; 32] {
    let d: Vec<u8> = row.get(i);
    d.try_into().unwrap_or([0; 32])
}

fn token(row: &postgres::Row) -> TokenRecord {
    TokenRecord {
        id: row.get(0),
        digest: digest(row, 1),
        user: row.get(2),
        label: row.get(3),
        role: row.get(4),
        projects: super::split_projects(row.get(5)),
        created_at: row.get(6),
        expires_at: row.get(7),
        last_used_at: row.get(8),
        revoked_at: row.get(9),
        policy: row.get(10),
    }
}

fn device(row: &postgres::Row) -> DeviceRecord {
    DeviceRecord {
        id: row.get(0),
        user: row.get(1),
        label: row.get(2),
        created_at: row.get(3),
        last_seen_at: row.get(4),
        last_address: row.get(5),
        revoked_at: row.get(6),
    }
}

fn web_session(row: &postgres::Row) -> WebSessionRecord {
    WebSessionRecord {
        id: row.get(0),
        digest: digest(row, 1),
        user: row.get(2),
        device_id: row.get(3),
        parent: row.get(4),
        host: row.get(5),
        created_at: row.get(6),
        last_seen_at: row.get(7),
        idle_secs: row.get(8),
        expires_at: row.get(9),
        revoked_at: row.get(10),
    }
}

/// A count of rows, as the traits give it.
fn count(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl TokenStore for PostgresStore {
    fn insert_token(&self, t: &TokenRecord) -> Result<(), StoreError> {
        self.write("insert_token", |c| {
            c.execute(
                sql(&st::TOKEN_INSERT),
                &[
                    &t.id,
                    &&t.digest[..],
                    &t.user,
                    &t.label,
                    &t.role,
                    &t.projects.as_ref().map(|p| p.join(",")),
                    &t.created_at,
                    &t.expires_at,
                    &t.last_used_at,
                    &t.revoked_at,
                    &t.policy,
                ],
            )?;
            Ok(())
        })
    }

    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenRecord>, StoreError> {
        self.with(|c| {
            Ok(c.query_opt(sql(&st::TOKEN_BY_DIGEST), &[&&digest[..]])?
                .as_ref()
                .map(token))
        })
    }

    fn list_tokens(&self, user: Option<&str>) -> Result<Vec<TokenRecord>, StoreError> {
        self.with(|c| Ok(c.query(sql(&st::TOKENS_OF), &[&user])?.iter().map(token).collect()))
    }

    fn revoke_token(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        self.write("revoke_token", |c| {
            let tx = c.transaction()?;
            let n = tx.execute(sql(&st::TOKEN_REVOKE), &[&id, &at])?;
            shared::notify(&tx, Changed::Tokens)?;
            tx.commit()?;
            Ok(n == 1)
        })
    }

    fn touch_token(&self, id: &str, at: i64) -> Result<(), StoreError> {
        self.write("touch_token", |c| {
            c.execute(sql(&st::TOKEN_TOUCH), &[&id, &at])?;
            Ok(())
        })
    }

    fn set_session_policy(&self, p: &SessionPolicy, at: i64) -> Result<(), StoreError> {
        self.write("set_session_policy", |c| {
            let tx = c.transaction()?;
            tx.execute(sql(&st::SESSION_POLICY_SET), &[&p.session, &p.project, &p.policy, &at])?;
            // The other gateways answer its requests too (and refuse widening answers to them).
            shared::notify(&tx, Changed::Policies)?;
            tx.commit()?;
            Ok(())
        })
    }

    fn session_policies(&self) -> Result<Vec<SessionPolicy>, StoreError> {
        self.with(|c| {
            Ok(c.query(sql(&st::SESSION_POLICIES), &[])?
                .iter()
                .map(|r| SessionPolicy {
                    session: r.get(0),
                    project: r.get(1),
                    policy: r.get(2),
                })
                .collect())
        })
    }
}

impl BrowserStore for PostgresStore {
    fn health(&self) -> WriteHealth {
        self.writes.health()
    }

    fn insert_device(&self, d: &DeviceRecord) -> Result<(), StoreError> {
        self.write("insert_device", |c| {
            c.execute(
                sql(&st::DEVICE_INSERT),
                &[
                    &d.id,
                    &d.user,
                    &d.label,
                    &d.created_at,
                    &d.last_seen_at,
                    &d.last_address,
                    &d.revoked_at,
                ],
            )?;
            Ok(())
        })
    }

    fn list_devices(&self, user: Option<&str>) -> Result<Vec<DeviceRecord>, StoreError> {
        self.with(|c| Ok(c.query(sql(&st::DEVICES_OF), &[&user])?.iter().map(device).collect()))
    }

    fn revoke_device(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        self.write("revoke_device", |c| {
            let tx = c.transaction()?;
            let n = tx.execute(sql(&st::DEVICE_REVOKE), &[&id, &at])?;
            tx.execute(sql(&st::DEVICE_PUSH_DELETE), &[&id])?;
            tx.execute(sql(&st::DEVICE_SESSIONS_REVOKE), &[&id, &at])?;
            shared::notify(&tx, Changed::Sessions)?;
            tx.commit()?;
            Ok(n == 1)
        })
    }

    fn touch_device(&self, id: &str, at: i64, address: &str) -> Result<(), StoreError> {
        self.write("touch_device", |c| {
            c.execute(sql(&st::DEVICE_TOUCH), &[&id, &at, &address])?;
            Ok(())
        })
    }

    fn password_is(&self, user: &str, fingerprint: &[u8; 32], at: i64) -> Result<usize, StoreError> {
        self.write("password_is", |c| {
            let tx = c.transaction()?;
            let known: Option<Vec<u8>> = tx.query_opt(sql(&st::FINGERPRINT_OF), &[&user])?.map(|r| r.get(0));
            if known.as_deref() == Some(&fingerprint[..]) {
                return Ok(0);
            }
            tx.execute(sql(&st::FINGERPRINT_SAVE), &[&user, &&fingerprint[..]])?;
            let ended = match known {
                None => 0,
                Some(_) => tx.execute(sql(&st::PASSWORD_SESSIONS_REVOKE), &[&user, &at])?,
            };
            if ended > 0 {
                shared::notify(&tx, Changed::Sessions)?;
            }
            tx.commit()?;
            Ok(count(ended))
        })
    }

    fn insert_web_session(&self, w: &WebSessionRecord) -> Result<(), StoreError> {
        self.write("insert_web_session", |c| {
            c.execute(
                sql(&st::SESSION_INSERT),
                &[
                    &w.id,
                    &&w.digest[..],
                    &w.user,
                    &w.device_id,
                    &w.parent,
                    &w.host,
                    &w.created_at,
                    &w.last_seen_at,
                    &w.idle_secs,
                    &w.expires_at,
                    &w.revoked_at,
                ],
            )?;
            Ok(())
        })
    }

    fn web_session_by_digest(&self, digest: &[u8; 32]) -> Result<Option<WebSessionLookup>, StoreError> {
        self.with(|c| {
            let Some(session) = c
                .query_opt(sql(&st::SESSION_BY_DIGEST), &[&&digest[..]])?
                .as_ref()
                .map(web_session)
            else {
                return Ok(None);
            };
            let parent = match &session.parent {
                Some(p) => c.query_opt(sql(&st::SESSION_BY_ID), &[p])?.as_ref().map(web_session),
                None => None,
            };
            let device_revoked = match session.device_of(parent.as_ref()) {
                Some(d) => c
                    .query_opt(sql(&st::DEVICE_REVOKED), &[d])?
                    // A device row that is gone counts as revoked.
                    .is_none_or(|r| r.get::<_, bool>(0)),
                None => false,
            };
            Ok(Some(WebSessionLookup {
                session,
                parent,
                device_revoked,
            }))
        })
    }

    fn revoke_web_session(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        self.write("revoke_web_session", |c| {
            let tx = c.transaction()?;
            let n = tx.execute(sql(&st::SESSION_REVOKE), &[&id, &at])?;
            shared::notify(&tx, Changed::Sessions)?;
            tx.commit()?;
            Ok(n >= 1)
        })
    }

    fn touch_web_session(&self, id: &str, at: i64) -> Result<(), StoreError> {
        self.write("touch_web_session", |c| {
            c.execute(sql(&st::SESSION_TOUCH), &[&id, &at])?;
            Ok(())
        })
    }

    fn prune_web_sessions(&self, before: i64) -> Result<usize, StoreError> {
        self.write("prune_web_sessions", |c| {
            let tx = c.transaction()?;
            let n = tx.execute(sql(&st::SESSIONS_PRUNE), &[&before])?;
            tx.execute(sql(&st::PUSH_PRUNE), &[])?;
            tx.commit()?;
            Ok(count(n))
        })
    }
}

#[cfg(test)]
mod tests;
