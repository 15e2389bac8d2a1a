//! Login allowances spent together by the gateways on one shared store (issue 27). Behind a load
//! balancer each replica's own limiter would give an attacker one allowance per replica; with a
//! shared store each login attempt that the replica's own limiter lets through is also charged
//! in the store (one row per key, GCRA: the key's theoretical arrival time), and an allowance found
//! spent is told to the other replicas (`NOTIFY`), which mark it spent in memory too, so that
//! their cheaper answers (a cached password or token) refuse as well.
//!
//! Only a login attempt (an argon2 run, a token lookup, a pairing or passkey answer) asks the
//! store; a request with a cached credential asks only memory. The store is asked off the
//! connection's thread (a worker serves many connections on one thread: a database round trip,
//! or a connect timeout, there would stall them all), and told of spent allowances in the
//! background. When the store cannot be asked, the replica's own limiter still bounds the
//! attempt (said once per run of failures).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::store::Store;

/// An allowance's shape: `burst` cells, one back every `interval`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub interval: Duration,
    pub burst: u32,
}

pub(crate) struct SharedAllowances {
    store: Arc<dyn Store>,
    failing: Arc<AtomicBool>,
}

/// What the store said of one attempt.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Cells left after this one.
    Left(u32),
    /// None left: one is back after this long.
    Spent(Duration),
    /// The store could not be asked.
    Unknown,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl SharedAllowances {
    /// Allowances in `store`, when other gateways may share it; `None` for a store of one gateway.
    pub(crate) fn on(store: &Arc<dyn Store>) -> Option<SharedAllowances> {
        store.is_shared().then(|| SharedAllowances {
            store: store.clone(),
            failing: Arc::default(),
        })
    }

    /// Take one cell of each of `keys`' allowances, in order, stopping at the first that is spent;
    /// on a blocking thread.
    pub(crate) async fn take(&self, keys: Vec<(String, Shape)>) -> Vec<Taken> {
        let (store, failing) = (self.store.clone(), self.failing.clone());
        let taken = tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(keys.len());
            for (key, shape) in keys {
                let now = crate::store::now_millis();
                let t = match store.take_allowance(&key, millis(shape.interval), shape.burst, now) {
                    Ok(Ok(left)) => Taken::Left(left),
                    Ok(Err(ms)) => Taken::Spent(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
                    Err(e) => {
                        if !failing.swap(true, Ordering::Relaxed) {
                            tracing::error!(error = %e, "cannot charge a login attempt to the shared allowances; this gateway's own limiter still bounds it");
                        }
                        Taken::Unknown
                    }
                };
                // A store that could not be asked is not asked again for the next allowance: one
                // that does not answer would cost the attempt its bound once per allowance.
                let stop = matches!(t, Taken::Spent(_) | Taken::Unknown);
                if !matches!(t, Taken::Unknown) && failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("the shared login allowances are asked again");
                }
                out.push(t);
                if stop {
                    break;
                }
            }
            out
        })
        .await;
        taken.unwrap_or_default()
    }

    /// Tell the other gateways that `key`'s allowance is spent for `for_` (zero: it is not, a login
    /// just proved the address holds the credential).
    /// In the background: the caller may be a connection's thread.
    pub(crate) fn tell(&self, key: &str, for_: Duration) {
        let store = self.store.clone();
        let what = crate::store::Changed::Spent {
            key: key.to_string(),
            ms: millis(for_),
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || store.tell(what))),
            Err(_) => store.tell(what),
        }
    }
}

/// The shared name of an allowance: `address:<ip>` or `user:<name>`.
pub(crate) fn key(reason: &str, key: impl std::fmt::Display) -> String {
    format!("{reason}:{key}")
}
