//! A connection the store lent from its pool (`pool.rs`) to one call, on which every round trip
//! has the call's deadline. A database host that hangs (its processes stopped, its disk stuck)
//! keeps the socket open and answers nothing, not even a `statement_timeout`: only the client can
//! stop waiting. So the store talks through `tokio-postgres`, its connections' tasks on a runtime
//! of the pool's own, and gives each await up at the call's deadline; a connection given up on
//! mid-query is in a state no one knows, and is never used again (taken out of the pool and
//! dropped, which ends its task and so closes its socket without waiting for the server).

use std::cell::Cell;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use deadpool_postgres::GenericClient;
use postgres::types::ToSql;
use tokio_postgres::Row;

use super::breaker::Breaker;
use crate::store::StoreError;

/// A call's deadline, and the runtime its connection's task runs on.
pub(crate) struct Clock {
    rt: tokio::runtime::Handle,
    deadline: Cell<Instant>,
    bound: Cell<Duration>,
    timed_out: Cell<bool>,
}

impl Clock {
    pub(super) fn new(rt: tokio::runtime::Handle, deadline: Instant, bound: Duration) -> Clock {
        Clock {
            rt,
            deadline: Cell::new(deadline),
            bound: Cell::new(bound),
            timed_out: Cell::new(false),
        }
    }

    /// Await `fut` until the call's deadline. Past it, this connection is done with.
    pub(super) fn wait<T, E>(&self, fut: impl Future<Output = Result<T, E>>) -> Result<T, StoreError>
    where
        StoreError: From<E>,
    {
        let unanswered = StoreError::Unanswered(self.bound.get());
        if self.timed_out.get() {
            return Err(unanswered);
        }
        // The pool's runtime: its timer, and where a new connection's task is spawned. The future
        // is polled on this thread (see `park_on`), which may be inside the gateway's runtime.
        let _in = self.rt.enter();
        let deadline = tokio::time::Instant::from_std(self.deadline.get());
        match park_on(tokio::time::timeout_at(deadline, fut)) {
            Ok(result) => result.map_err(StoreError::from),
            Err(_) => {
                self.timed_out.set(true);
                Err(unanswered)
            }
        }
    }
}

/// Poll `fut` on this thread until it is ready, parked in between. The connections' tasks run
/// on the pool's runtime, which wakes this thread; so a call blocks only its own thread, from a
/// blocking thread of the gateway's runtime, from the gateway's start (where tokio refuses a
/// `block_on`) or from the CLI alike, and needs no thread of its own.
fn park_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// A pooled connection while one call has it; handed back to the pool when dropped, unless it
/// is not to be used again.
pub(crate) struct Conn {
    /// `None` only while dropping.
    client: Option<deadpool_postgres::Object>,
    clock: Clock,
    breaker: Arc<Breaker>,
}

/// A transaction on a [`Conn`], under the same deadline; rolled back when dropped uncommitted.
pub(crate) struct Tx<'a> {
    /// `None` once committed or rolled back.
    tx: Option<deadpool_postgres::Transaction<'a>>,
    clock: &'a Clock,
}

impl Conn {
    pub(super) fn new(client: deadpool_postgres::Object, clock: Clock, breaker: Arc<Breaker>) -> Conn {
        Conn {
            client: Some(client),
            clock,
            breaker,
        }
    }

    fn client(&self) -> &deadpool_postgres::Object {
        self.client
            .as_ref()
            .expect("a lent connection has its client until dropped")
    }

    pub(crate) fn transaction(&mut self) -> Result<Tx<'_>, StoreError> {
        let clock = &self.clock;
        let client = self
            .client
            .as_mut()
            .expect("a lent connection has its client until dropped");
        let tx = clock.wait(client.transaction())?;
        Ok(Tx { tx: Some(tx), clock })
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else { return };
        let timed_out = self.clock.timed_out.get();
        // A call that panicked may have left its connection anywhere.
        if timed_out || client.is_closed() || std::thread::panicking() {
            drop(deadpool_postgres::Object::take(client));
        }
        self.breaker.ended(timed_out);
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
/// deadline: `name -> what it gives`. The statement is prepared once per connection (its cache):
/// unprepared, each call would be two round trips, a parse and an execute.
macro_rules! awaited {
    ($($name:ident -> $out:ty),* $(,)?) => {$(
        fn $name(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<$out, StoreError> {
            let (clock, c) = self.parts();
            clock.wait(async {
                let statement = c.prepare_cached(sql).await?;
                c.$name(&statement, params).await
            })
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
    type Client = deadpool_postgres::Object;

    fn parts(&self) -> (&Clock, &deadpool_postgres::Object) {
        (&self.clock, self.client())
    }
}

impl<'a> Sql for Tx<'a> {
    type Client = deadpool_postgres::Transaction<'a>;

    fn parts(&self) -> (&Clock, &deadpool_postgres::Transaction<'a>) {
        (
            self.clock,
            self.tx.as_ref().expect("a transaction is open until committed"),
        )
    }
}
