//! What gateways on one PostgreSQL database share beyond rows: the digest key (`ocgw_keys`), and
//! word of revocations. A revocation's write sends `NOTIFY ocgw_changed` in its transaction;
//! each gateway listens on a connection of its own, on a thread of its own, and forgets its
//! cached verifications when told (`Changed`). After the listening connection breaks it is made
//! again with backoff, and everything is forgotten once, since notices sent meanwhile are lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;

use super::PostgresStore;
use super::conn::Sql;
use crate::store::{Changed, StoreError};

/// How far behind the latest charge of an allowance another may be timed and still be counted
/// as if at the same moment (clocks of gateways, and charges queued on the same row).
const SKEW_MS: i64 = 1_000;

/// The channel revocations are told on.
pub(super) const CHANNEL: &str = "ocgw_changed";

/// Tell every gateway that `what` changed (delivered when the caller's transaction commits).
pub(super) fn notify(c: &impl Sql, what: Changed) -> Result<(), StoreError> {
    let payload = match what {
        Changed::Sessions => "sessions".to_string(),
        Changed::Tokens => "tokens".to_string(),
        Changed::Budgets => "budgets".to_string(),
        Changed::Policies => "policies".to_string(),
        // The key last: a user name is the config's, and this splits on the first tab only.
        Changed::Spent { key, ms } => format!("spent {ms} {}\t{key}", instance()),
        Changed::All => "all".to_string(),
    };
    c.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])?;
    Ok(())
}

/// This process among the gateways on the database: its own notices of spent allowances come back
/// to its listening connection, and are not news.
fn instance() -> u64 {
    static ID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *ID.get_or_init(|| {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).expect("the OS random source is available");
        u64::from_le_bytes(b)
    })
}

/// What a notice says; `None` for this process's own notice of a spent allowance.
fn read(payload: &str) -> Option<Changed> {
    Some(match payload {
        "sessions" => Changed::Sessions,
        "tokens" => Changed::Tokens,
        "budgets" => Changed::Budgets,
        "policies" => Changed::Policies,
        other => match spent(other) {
            Some((from, _)) if from == instance() => return None,
            Some((_, changed)) => changed,
            None => Changed::All,
        },
    })
}

/// `spent <ms> <instance>\t<key>`.
fn spent(payload: &str) -> Option<(u64, Changed)> {
    let (head, key) = payload.strip_prefix("spent ")?.split_once('\t')?;
    let (ms, from) = head.split_once(' ')?;
    Some((
        from.parse().ok()?,
        Changed::Spent {
            key: key.to_string(),
            ms: ms.parse().ok()?,
        },
    ))
}

impl crate::store::SharedStore for PostgresStore {
    fn shared_key(&self, name: &str, fresh: &[u8; 32]) -> Result<Option<[u8; 32]>, StoreError> {
        self.writes.noted(
            "shared_key",
            self.with(|c| {
                c.execute(
                    "INSERT INTO ocgw_keys (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                    &[&name, &&fresh[..]],
                )?;
                let value: Vec<u8> = c
                    .query_one("SELECT value FROM ocgw_keys WHERE name = $1", &[&name])?
                    .get(0);
                value
                    .try_into()
                    .map(Some)
                    .map_err(|_| StoreError::Backend(format!("ocgw_keys.{name} is not 32 bytes")))
            }),
        )
    }

    fn leader(&self, name: &'static str) -> Option<Arc<AtomicBool>> {
        let held = Arc::new(AtomicBool::new(false));
        let (url, flag) = (self.url.clone(), held.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("store-lock-{name}"))
            .spawn(move || {
                loop {
                    if let Err(e) = hold(&url, name, &flag) {
                        tracing::warn!(lock = name, error = %e, "lost the state database's connection for a lock; trying again");
                    }
                    if flag.swap(false, Ordering::SeqCst) {
                        tracing::warn!(lock = name, "this gateway no longer holds the lock: another may take over");
                    }
                    std::thread::sleep(LOCK_RETRY);
                }
            });
        // Without its thread, no lock: this gateway never leads, and says so.
        if spawned.is_err() {
            tracing::error!(
                lock = name,
                "cannot start the lock's thread: this gateway will not lead"
            );
        }
        Some(held)
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn take_allowance(&self, key: &str, interval: i64, burst: u32, now: i64) -> Result<Result<u32, i64>, StoreError> {
        let window = interval.saturating_mul(i64::from(burst));
        // Charges that wait on the same row are counted in the order the database takes them,
        // each with the time its gateway read before it asked: one read a moment later may be
        // counted first, and the next then finds the row's time ahead of its own "now" and a
        // cell short (two gateways racing for a burst of 3 got 2 now and then). A charge is
        // allowed that much behind, half an interval at most, so no whole cell more is ever given.
        let skew = SKEW_MS.min(interval / 2);
        self.with(|c| {
            // GCRA: the key's theoretical arrival time moves one interval on per cell taken; a
            // cell is there while it stays within `burst` intervals of now. The table keeps the
            // name it was made with (`ocgw_budgets`, issue 27): the login allowances are its rows.
            let taken = c.query_opt(
                "INSERT INTO ocgw_budgets (key, tat) VALUES ($1::TEXT, $2::BIGINT + $3::BIGINT) \
                 ON CONFLICT (key) DO UPDATE SET tat = GREATEST(ocgw_budgets.tat, $2) + $3 \
                 WHERE GREATEST(ocgw_budgets.tat, $2) + $3 - $2 <= $4::BIGINT + $5::BIGINT \
                 RETURNING tat",
                &[&key, &now, &interval, &window, &skew],
            )?;
            Ok(match taken {
                Some(row) => {
                    let tat: i64 = row.get(0);
                    let left = (window + skew - (tat - now)) / interval.max(1);
                    Ok(u32::try_from(left).unwrap_or(0))
                }
                None => {
                    let tat: i64 = c
                        .query_one("SELECT tat FROM ocgw_budgets WHERE key = $1", &[&key])?
                        .get(0);
                    Err((tat.max(now) + interval - now - window).max(1))
                }
            })
        })
    }

    fn tell(&self, what: Changed) {
        if let Err(e) = self.with(|c| notify(&*c, what)) {
            tracing::warn!(error = %e, "cannot tell the other gateways on the state database of a change");
        }
    }

    fn prune_allowances(&self, now: i64) -> Result<usize, StoreError> {
        self.with(|c| Ok(usize::try_from(c.execute("DELETE FROM ocgw_budgets WHERE tat < $1", &[&now])?).unwrap_or(0)))
    }

    fn watch_changes(&self, changed: Box<dyn Fn(Changed) + Send + 'static>) -> bool {
        let url = self.url.clone();
        let spawned = std::thread::Builder::new().name("store-changes".into()).spawn(move || {
            let mut backoff = Duration::from_millis(200);
            loop {
                match listen(&url, &*changed) {
                    Ok(()) => {}
                    Err(e) => tracing::warn!(error = %e, "lost the state database's change notices; listening again"),
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        });
        spawned.is_ok()
    }
}

/// How often a gateway without a lock tries to take it, and one with it checks its connection
/// (a dead gateway's connection, and so its lock, ends when PostgreSQL sees its socket close).
const LOCK_RETRY: Duration = Duration::from_millis(500);

/// The advisory lock's key for `name`: a stable 64-bit hash of it.
fn lock_key(name: &str) -> i64 {
    use blake2::Digest;
    let d = blake2::Blake2b512::digest(format!("ocgw-lock:{name}").as_bytes());
    i64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// Take `name`'s lock when free and hold it (on this connection) until the connection breaks.
fn hold(url: &str, name: &str, held: &AtomicBool) -> Result<(), StoreError> {
    let mut client: Client = super::connect(url)?;
    let key = lock_key(name);
    loop {
        if held.load(Ordering::SeqCst) {
            client.batch_execute("SELECT 1")?;
        } else if client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])?
            .get::<_, bool>(0)
        {
            held.store(true, Ordering::SeqCst);
            tracing::info!(
                lock = name,
                "this gateway holds the lock: of the gateways on this database, it alone does this"
            );
        }
        std::thread::sleep(LOCK_RETRY);
    }
}

/// Listen until the connection breaks.
fn listen(url: &str, changed: &dyn Fn(Changed)) -> Result<(), StoreError> {
    let mut client: Client = super::connect(url)?;
    client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
    // Whatever was said while no one listened is unknown: forget everything once.
    changed(Changed::All);
    let mut notices = client.notifications();
    let mut iter = notices.blocking_iter();
    while let Some(n) = iter.next()? {
        if let Some(what) = read(n.payload()) {
            changed(what);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spent_allowance_is_read_back_and_anything_else_forgets_all() {
        assert_eq!(
            read("spent 5000 17\tuser:al ice\tx"),
            Some(Changed::Spent {
                key: "user:al ice\tx".into(),
                ms: 5000
            })
        );
        assert_eq!(
            read(&format!("spent 5000 {}\taddress:10.0.0.1", instance())),
            None,
            "this process's own notice"
        );
        assert_eq!(read("sessions"), Some(Changed::Sessions));
        assert_eq!(read("tokens"), Some(Changed::Tokens));
        assert_eq!(read("budgets"), Some(Changed::Budgets));
        assert_eq!(read("policies"), Some(Changed::Policies));
        for other in [
            "",
            "spent",
            "spent x 1\taddress:1.2.3.4",
            "spent 5000\tuser:a",
            "spent 5000 17",
            "what",
        ] {
            assert_eq!(read(other), Some(Changed::All), "{other:?}");
        }
    }
}
