//! The store's connections to PostgreSQL (issue 43): a pool of [`POOL_SIZE`] (`deadpool-postgres`),
//! each lent to one call at a time, their tasks on a small runtime of the pool's own. With one
//! connection the calls waited in turn, each commit for the previous one's flush to disk; with
//! several, PostgreSQL flushes the commits that come together at once. A call waits for a
//! connection only until its own deadline; and after a call went unanswered the next ones fail
//! at once for as long as a call may take, then one tries again ([`Breaker`]): a hung database
//! costs one caller the bound, not every caller once per store call (a login asks the store two
//! or three times).

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{Connect, ManagerConfig, PoolError, RecyclingMethod};

use super::breaker::Breaker;
use super::conn::{Clock, Conn};
use crate::store::StoreError;

/// How many connections one gateway (or CLI run) keeps at most. Enough for the commits of a burst
/// of logins to be flushed together; few beside PostgreSQL's default `max_connections` (100),
/// which several gateways and their listening and lock connections share.
pub(super) const POOL_SIZE: usize = 8;

/// Set on each new connection, below the client's bound, so that a server that is slow but
/// alive cancels the statement itself (its answer keeps the connection usable) before the client
/// gives up on it: a lock wait first, any statement next.
const SERVER_TIMEOUTS: &str = "SET lock_timeout = '1s'; SET statement_timeout = '2s'";

/// The pool's runtime, shut down without waiting (its connections' sockets are dropped).
struct Runtime(Option<tokio::runtime::Runtime>);

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

pub(super) struct Pool {
    pool: deadpool_postgres::Pool,
    breaker: Arc<Breaker>,
    /// Last: the pool's connections go before their runtime.
    rt: Runtime,
}

impl From<PoolError> for StoreError {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::Backend(e) => StoreError::from(e),
            other => StoreError::Backend(format!("the connection pool: {other}")),
        }
    }
}

/// Opens a connection as the URL says, TLS or not, and sets [`SERVER_TIMEOUTS`] on it.
struct Connector {
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

type Connected = (tokio_postgres::Client, tokio::task::JoinHandle<()>);

impl Connect for Connector {
    fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Connected, tokio_postgres::Error>> + Send + '_>> {
        let config = config.clone();
        Box::pin(async move {
            // Spawned on the pool's runtime (the caller entered it: `Clock::wait`); the task
            // ends when the pool drops the client.
            let (client, task) = match &self.tls {
                None => {
                    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                    (client, tokio::spawn(async move { drop(connection.await) }))
                }
                Some(tls) => {
                    let (client, connection) = config.connect(tls.clone()).await?;
                    (client, tokio::spawn(async move { drop(connection.await) }))
                }
            };
            client.batch_execute(SERVER_TIMEOUTS).await?;
            Ok((client, task))
        })
    }
}

impl Pool {
    /// A pool for `url`; no connection is opened until a call needs one.
    pub(super) fn new(url: &str) -> Result<Pool, StoreError> {
        let config = super::config(url)?;
        let tls = match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => None,
            _ => {
                let tls = crate::support::tls::client_config().map_err(StoreError::Backend)?;
                Some(tokio_postgres_rustls::MakeRustlsConnect::new((*tls).clone()))
            }
        };
        // One worker: it only moves the connections' bytes; the calls' threads do the rest.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("store-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Backend(format!("cannot start the state database's runtime: {e}")))?;
        // A returned connection is checked for being closed only: a round trip per call would
        // cost what the pool saves. A broken one fails its call and is not returned.
        let manager = deadpool_postgres::Manager::from_connect(
            config,
            Connector { tls },
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .map_err(|e| StoreError::Backend(format!("the connection pool: {e}")))?;
        Ok(Pool {
            pool,
            breaker: Arc::default(),
            rt: Runtime(Some(rt)),
        })
    }

    /// A connection, idle or opened now, by `deadline` (`bound` is how long the call had, for
    /// the error); an error at once while the database recently did not answer.
    pub(super) fn lend(&self, deadline: Instant, bound: Duration) -> Result<Conn, StoreError> {
        self.breaker.check(bound)?;
        let rt = self.rt.0.as_ref().expect("the pool has its runtime until dropped");
        let clock = Clock::new(rt.handle().clone(), deadline, bound);
        match clock.wait(self.pool.get()) {
            Ok(client) => Ok(Conn::new(client, clock, self.breaker.clone())),
            Err(e) => {
                if matches!(e, StoreError::Unanswered(_)) {
                    self.breaker.ended(true);
                }
                Err(e)
            }
        }
    }
}
