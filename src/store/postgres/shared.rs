//! What gateways on one PostgreSQL database share beyond rows: the digest key (`ocgw_keys`), and
//! word of revocations. A revocation's write sends `NOTIFY ocgw_changed` in its transaction;
//! each gateway listens on a connection of its own, on a thread of its own, and forgets its
//! cached verifications when told (`Changed`). After the listening connection breaks it is made
//! again with backoff, and everything is forgotten once, since notices sent meanwhile are lost.

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
