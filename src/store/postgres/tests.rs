//! The PostgreSQL store's own behaviour beyond the shared cases (`store::conformance`): calls
//! bounded when the database hangs, transactions that end with their call.

use std::sync::Arc;

use super::*;
use crate::store::{BrowserStore, TokenStore};

/// A database whose processes are stopped (SIGSTOP: the socket open, nothing answered):
/// three calls at once each fail with the reason within the bound (none waits behind another
/// beyond its own), and calls work again once it runs.
#[test]
fn a_frozen_database_fails_each_call_within_the_bound() {
    let Some(cluster) = crate::store::postgres_cluster::Cluster::start() else {
        return;
    };
    let store = Arc::new(PostgresStore::open(&cluster.database("frozen")).unwrap());
    assert!(store.list_tokens(None).unwrap().is_empty());
    let frozen = cluster.freeze();
    let began = Instant::now();
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || (store.list_tokens(None), began.elapsed()))
        })
        .collect();
    for call in calls {
        let (result, took) = call.join().unwrap();
        assert!(
            matches!(result, Err(StoreError::Unanswered(b)) if b == CALL_TIMEOUT),
            "{result:?}"
        );
        assert!(took < CALL_TIMEOUT + Duration::from_secs(1), "{took:?}");
    }
    drop(frozen);
    let until = Instant::now() + CALL_TIMEOUT * 4;
    while let Err(e) = store.list_tokens(None) {
        assert!(Instant::now() < until, "still failing after the thaw: {e}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A transaction a call leaves uncommitted ends with the call (the early return of
/// `password_is`, a `?`): its row lock does not wait for the connection's next call, which
/// another gateway's `password_is` for the same user would wait on until its `lock_timeout`.
#[test]
fn an_uncommitted_transaction_ends_with_its_call() {
    let Some(cluster) = crate::store::postgres_cluster::Cluster::start() else {
        return;
    };
    let url = cluster.database("locks");
    let (a, b) = (PostgresStore::open(&url).unwrap(), PostgresStore::open(&url).unwrap());
    assert_eq!(a.password_is("alice", &[1; 32], 1).unwrap(), 0);
    // Unchanged: returns from inside its `FOR UPDATE` transaction.
    assert_eq!(a.password_is("alice", &[1; 32], 2).unwrap(), 0);
    assert_eq!(b.password_is("alice", &[2; 32], 3).unwrap(), 0, "B waited on A's lock");
}

/// A call that keeps its connection (here until the others are done) does not keep the other
/// calls waiting: each gets a connection of the pool (issue 43). With one connection they would
/// wait behind it until their bound and fail.
#[test]
fn calls_go_on_while_a_connection_is_held() {
    let Some(cluster) = crate::store::postgres_cluster::Cluster::start() else {
        return;
    };
    let store = Arc::new(PostgresStore::open(&cluster.database("pool")).unwrap());
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holder = {
        let store = store.clone();
        std::thread::spawn(move || {
            store.with(move |c| {
                c.batch_execute("SELECT 1")?;
                held_tx.send(()).unwrap();
                // Held until the other calls are done (or gave up).
                let _ = done_rx.recv();
                Ok(())
            })
        })
    };
    held_rx.recv().unwrap();
    let calls: Vec<_> = (0..(pool::POOL_SIZE - 1).max(1))
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || store.list_tokens(None))
        })
        .collect();
    for call in calls {
        let result = call.join().unwrap();
        assert!(matches!(&result, Ok(t) if t.is_empty()), "{result:?}");
    }
    drop(done_tx);
    holder.join().unwrap().unwrap();
}
