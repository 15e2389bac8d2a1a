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
use crate::store::{Changed, StoreError};

/// The channel revocations are told on.
pub(super) const CHANNEL: &str = "ocgw_changed";

/// Tell every gateway that `what` changed (delivered when the caller's transaction commits).
pub(super) fn notify(c: &mut impl postgres::GenericClient, what: Changed) -> Result<(), StoreError> {
    let payload = match what {
        Changed::Sessions => "sessions",
        Changed::Tokens => "tokens",
        Changed::All => "all",
    };
    c.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])?;
    Ok(())
}

fn read(payload: &str) -> Changed {
    match payload {
        "sessions" => Changed::Sessions,
        "tokens" => Changed::Tokens,
        _ => Changed::All,
    }
}

impl crate::store::SharedStore for PostgresStore {
    fn shared_key(&self, name: &str, fresh: &[u8; 32]) -> Result<Option<[u8; 32]>, StoreError> {
        self.write("shared_key", |c| {
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
        })
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
        changed(read(n.payload()));
    }
    Ok(())
}
