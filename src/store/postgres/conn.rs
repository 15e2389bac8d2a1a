//! The store's connection to PostgreSQL, on which every round trip has a deadline. A database
//! host that hangs (its processes stopped, its disk stuck) keeps the socket open and answers
//! nothing, not even a `statement_timeout`: only the client can stop waiting. So the store talks
//! through `tokio-postgres` on a runtime of the connection's own and gives each await up at the
//! call's deadline; a connection given up on mid-query is in a state no one knows, and is never
//! used again (dropping it closes its socket without waiting for the server).

use std::cell::Cell;
use std::time::{Duration, Instant};

use postgres::types::ToSql;
use tokio_postgres::{GenericClient, Row};

use crate::store::StoreError;

/// Set on each new connection, below the client's bound, so that a server that is slow but
/// alive cancels the statement itself (its answer keeps the connection usable) before the client
/// gives up on it: a lock wait first, any statement next.
const SERVER_TIMEOUTS: &str = "SET lock_timeout = '1s'; SET statement_timeout = '2s'";

/// A call's deadline, and the runtime its awaits run on.
pub(crate) struct Clock {
    /// `None` only while dropping.
    rt: Option<tokio::runtime::Runtime>,
    deadline: Cell<Instant>,
    bound: Cell<Duration>,
    timed_out: Cell<bool>,
}

impl Clock {
    /// Await `fut` until the call's deadline. Past it, this connection is done with.
    fn wait<T>(&self, fut: impl Future<Output = Result<T, tokio_postgres::Error>>) -> Result<T, StoreError> {
        let unanswered = StoreError::Unanswered(self.bound.get());
        if self.timed_out.get() {
            return Err(unanswered);
        }
        let rt = self.rt.as_ref().expect("a clock has its runtime until dropped");
        let deadline = tokio::time::Instant::from_std(self.deadline.get());
        // The timer is made inside the runtime: it needs its time driver.
        match rt.block_on(async { tokio::time::timeout_at(deadline, fut).await }) {
            Ok(result) => result.map_err(StoreError::from),
            Err(_) => {
                self.timed_out.set(true);
                Err(unanswered)
            }
        }
    }
}

impl Drop for Clock {
    /// Without waiting for anything: the connection's task (and so its socket) is dropped, where
    /// a `postgres::Client` would wait for the server to close its end.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

pub(crate) struct Conn {
    client: tokio_postgres::Client,
    clock: Clock,
}

/// A transaction on a [`Conn`], under the same deadline; rolled back when dropped uncommitted.
pub(crate) struct Tx<'a> {
    /// `None` once committed or rolled back.
    tx: Option<tokio_postgres::Transaction<'a>>,
    clock: &'a Clock,
}

/// Open a connection to `url` by `deadline` (`bound` is how long the call had, for the error).
pub(super) fn open(url: &str, deadline: Instant, bound: Duration) -> Result<Conn, StoreError> {
    let config = super::config(url)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StoreError::Backend(format!("cannot start the state database's runtime: {e}")))?;
    let clock = Clock {
        rt: Some(rt),
        deadline: Cell::new(deadline),
        bound: Cell::new(bound),
        timed_out: Cell::new(false),
    };
    let rt = clock.rt.as_ref().expect("just made");
    // The connection's task runs whenever a call awaits on this runtime.
    let client = match config.get_ssl_mode() {
        tokio_postgres::config::SslMode::Disable => {
            let (client, connection) = clock.wait(config.connect(tokio_postgres::NoTls))?;
            rt.spawn(connection);
            client
        }
        _ => {
            let tls = crate::support::tls::client_config().map_err(StoreError::Backend)?;
            let tls = tokio_postgres_rustls::MakeRustlsConnect::new((*tls).clone());
            let (client, connection) = clock.wait(config.connect(tls))?;
            rt.spawn(connection);
            client
        }
    };
    let conn = Conn { client, clock };
    conn.batch_execute(SERVER_TIMEOUTS)?;
    Ok(conn)
}

impl Conn {
    /// Give the next call until `deadline`.
    pub(super) fn arm(&self, deadline: Instant, bound: Duration) {
        self.clock.deadline.set(deadline);
        self.clock.bound.set(bound);
    }

    /// A call was given up on (its connection is in an unknown state).
    pub(super) fn timed_out(&self) -> bool {
        self.clock.timed_out.get()
    }

    /// Not to be used again: given up on, or closed (by the server, or a broken socket).
    pub(super) fn unusable(&self) -> bool {
        self.timed_out() || self.client.is_closed()
    }

    pub(crate) fn transaction(&mut self) -> Result<Tx<'_>, StoreError> {
        let clock = &self.clock;
        let tx = clock.wait(self.client.transaction())?;
        Ok(Tx { tx: Some(tx), clock })
    }
}

impl Tx<'_> {
    pub(crate) fn commit(mut self) -> Result<(), StoreError> {
        let tx = self.tx.take().expect("a transaction is open until committed");
        self.clock.wait(tx.commit())
    }
}

impl Drop for Tx<'_> {
    /// Rolled back now, within the call's deadline: `tokio-postgres` would only queue the
    /// `ROLLBACK`, sent at the connection's next call, and the server would hold the
    /// transaction's row locks until then. Past the deadline the connection is dropped instead,
    /// which ends the transaction on the server.
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = self.clock.wait(tx.rollback());
        }
    }
}

/// [`GenericClient`]'s calls of a statement and its parameters, each awaited until the call's
/// deadline: `name -> what it gives`.
macro_rules! awaited {
    ($($name:ident -> $out:ty),* $(,)?) => {$(
        fn $name(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<$out, StoreError> {
            let (clock, c) = self.parts();
            clock.wait(c.$name(sql, params))
        }
    )*};
}

/// Statements on a connection or in a transaction, each awaited until the call's deadline.
pub(crate) trait Sql {
    type Client: GenericClient + Sync;

    fn parts(&self) -> (&Clock, &Self::Client);

    awaited! {
        execute -> u64,
        query -> Vec<Row>,
        query_one -> Row,
        query_opt -> Option<Row>,
    }

    fn batch_execute(&self, sql: &str) -> Result<(), StoreError> {
        let (clock, c) = self.parts();
        clock.wait(c.batch_execute(sql))
    }
}

impl Sql for Conn {
    type Client = tokio_postgres::Client;

    fn parts(&self) -> (&Clock, &tokio_postgres::Client) {
        (&self.clock, &self.client)
    }
}

impl<'a> Sql for Tx<'a> {
    type Client = tokio_postgres::Transaction<'a>;

    fn parts(&self) -> (&Clock, &tokio_postgres::Transaction<'a>) {
        (
            self.clock,
            self.tx.as_ref().expect("a transaction is open until committed"),
        )
    }
}
