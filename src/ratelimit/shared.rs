//! Login budgets spent together by the gateways on one shared store (issue 27). Behind a load
//! balancer each replica's own limiter would give an attacker one budget per replica; with a
//! shared store each login attempt that the replica's own limiter lets through is also charged
//! in the store (one row per key, GCRA: the key's theoretical arrival time), and a budget found
//! spent is told to the other replicas (`NOTIFY`), which mark it spent in memory too, so that
//! their cheaper answers (a cached password or token) refuse as well.
//!
//! Only a login attempt (an argon2 run, a token lookup, a pairing or passkey answer) asks the
//! store; a request with a cached credential asks only memory. When the store cannot be asked,
//! the replica's own limiter still bounds it (said once per run of failures).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::store::Store;

/// A budget's shape: `burst` cells, one back every `interval`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub interval: Duration,
    pub burst: u32,
}

pub(crate) struct SharedBudgets {
    store: Arc<dyn Store>,
    failing: AtomicBool,
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

impl SharedBudgets {
    /// Budgets in `store`, when other gateways may share it; `None` for a store of one gateway.
    pub(crate) fn on(store: &Arc<dyn Store>) -> Option<SharedBudgets> {
        store.is_shared().then(|| SharedBudgets {
            store: store.clone(),
            failing: AtomicBool::new(false),
        })
    }

    /// Take one cell of `key`'s budget.
    pub(crate) fn take(&self, key: &str, shape: Shape) -> Taken {
        let now = crate::store::now_millis();
        match self.store.take_budget(key, millis(shape.interval), shape.burst, now) {
            Ok(taken) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("the shared login budgets are asked again");
                }
                match taken {
                    Ok(left) => Taken::Left(left),
                    Err(ms) => Taken::Spent(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
                }
            }
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::error!(error = %e, "cannot charge a login attempt to the shared budgets; this gateway's own limiter still bounds it");
                }
                Taken::Unknown
            }
        }
    }

    /// Tell the other gateways that `key`'s budget is spent for `for_` (zero: it is not, a login
    /// just proved the address holds the credential).
    pub(crate) fn tell(&self, key: &str, for_: Duration) {
        self.store.tell(crate::store::Changed::Spent {
            key: key.to_string(),
            ms: millis(for_),
        });
    }
}

/// The shared name of a budget: `address:<ip>` or `user:<name>`.
pub(crate) fn key(reason: &str, key: impl std::fmt::Display) -> String {
    format!("{reason}:{key}")
}
