//! Single-use records of one kind (handoff tickets, terminal tickets, pairing codes), typed over
//! the store's [`OnceStore`](crate::store::OnceStore): in the state database rather than one
//! process's memory, so that with two gateways on one PostgreSQL database the browser that got a
//! ticket from one can use it on the other (issue 27). Values are JSON; keys are digests (never
//! the secret itself). A record the gateway cannot read (written by another version) is taken
//! and counts as absent.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::store::{PutOnce, Settle, Store, StoreError};

/// What a look at a record decides, typed.
pub(crate) enum Verdict<V> {
    Take,
    Keep,
    Replace(V),
}

/// What a settle saw.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Seen<V> {
    Nothing,
    Live(V),
    Expired(V),
}

pub(crate) struct OnceKind<V> {
    kind: &'static str,
    store: Arc<dyn Store>,
    ttl: Duration,
    max: usize,
    _value: PhantomData<fn() -> V>,
}

impl<V: Serialize + DeserializeOwned + Send + 'static> OnceKind<V> {
    /// Records of `kind` live `ttl`, at most `max` at once (this bounds the table, as the memory
    /// maps' capacities did).
    pub(crate) fn new(store: Arc<dyn Store>, kind: &'static str, ttl: Duration, max: usize) -> Self {
        OnceKind {
            kind,
            store,
            ttl,
            max,
            _value: PhantomData,
        }
    }

    /// Keep `value` under `key` for this kind's life (or `ttl`, when shorter), blocking: for
    /// callers off the async workers (the control socket's requests) and for `put`.
    pub(crate) fn put_blocking(&self, key: &[u8; 32], value: &V, ttl: Duration) -> Result<PutOnce, StoreError> {
        let bytes = serde_json::to_vec(value).map_err(|e| StoreError::Backend(e.to_string()))?;
        let life = i64::try_from(ttl.min(self.ttl).as_millis()).unwrap_or(i64::MAX);
        let expires_at = crate::store::now_millis().saturating_add(life);
        self.store.once_put(self.kind, key, &bytes, expires_at, self.max)
    }

    /// [`put_blocking`](Self::put_blocking) off the async workers.
    pub(crate) async fn put(self: &Arc<Self>, key: [u8; 32], value: V) -> Result<PutOnce, StoreError>
    where
        V: Sync,
    {
        let this = self.clone();
        crate::store::blocking("keeping a single-use record", move || {
            this.put_blocking(&key, &value, this.ttl)
        })
        .await
    }

    /// The record under `key` as `decide` deals with it (given the value and whether it
    /// expired), in one transaction of the store.
    pub(crate) fn settle_blocking(
        &self,
        key: &[u8; 32],
        mut decide: impl FnMut(&V, bool) -> Verdict<V> + Send,
    ) -> Result<Seen<V>, StoreError> {
        let mut seen = Seen::Nothing;
        let mut bad_value = None;
        let mut raw = |bytes: &[u8], expired: bool| -> Settle {
            let Ok(value) = serde_json::from_slice::<V>(bytes) else {
                bad_value = Some(());
                return Settle::Take;
            };
            let settle = match decide(&value, expired) {
                Verdict::Take => Settle::Take,
                Verdict::Keep => Settle::Keep,
                Verdict::Replace(new) => match serde_json::to_vec(&new) {
                    Ok(b) => Settle::Replace(b),
                    Err(_) => Settle::Take,
                },
            };
            seen = if expired {
                Seen::Expired(value)
            } else {
                Seen::Live(value)
            };
            settle
        };
        self.store
            .once_settle(self.kind, key, crate::store::now_millis(), &mut raw)?;
        if bad_value.is_some() {
            tracing::warn!(
                kind = self.kind,
                "a single-use record this gateway cannot read was dropped"
            );
        }
        Ok(seen)
    }

    /// [`settle_blocking`](Self::settle_blocking) off the async workers.
    pub(crate) async fn settle(
        self: &Arc<Self>,
        key: [u8; 32],
        decide: impl FnMut(&V, bool) -> Verdict<V> + Send + 'static,
    ) -> Result<Seen<V>, StoreError> {
        let this = self.clone();
        crate::store::blocking("using a single-use record", move || this.settle_blocking(&key, decide)).await
    }

    /// Take the record under `key` if it is `ours` (an expired one is cleared too); another's is
    /// left in place, for the host or browser it was made for. Returns what was seen.
    pub(crate) async fn take_if(
        self: &Arc<Self>,
        key: [u8; 32],
        ours: impl Fn(&V) -> bool + Send + 'static,
    ) -> Result<Seen<V>, StoreError> {
        self.settle(key, move |v, expired| match expired || ours(v) {
            true => Verdict::Take,
            false => Verdict::Keep,
        })
        .await
    }

    #[cfg(test)]
    pub(crate) fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// Live records of this kind (for status).
    pub(crate) fn live(&self) -> Result<usize, StoreError> {
        self.store.once_live(self.kind, crate::store::now_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(dir: &std::path::Path) -> OnceKind<(String, u32)> {
        let store: Arc<dyn Store> = Arc::new(crate::store::sqlite::SqliteStore::open(&dir.join("g.db")).unwrap());
        OnceKind::new(store, "test", Duration::from_secs(60), 10)
    }

    #[test]
    fn a_typed_record_is_replaced_then_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let k = kind(dir.path());
        let key = [7; 32];
        let v = ("alice".to_string(), 3);
        assert_eq!(
            k.put_blocking(&key, &v, Duration::from_secs(60)).unwrap(),
            PutOnce::Kept
        );
        let seen = k
            .settle_blocking(&key, |(_, n), _| Verdict::Replace(("alice".into(), n - 1)))
            .unwrap();
        assert_eq!(seen, Seen::Live(v));
        let seen = k.settle_blocking(&key, |_, _| Verdict::Take).unwrap();
        assert_eq!(seen, Seen::Live(("alice".to_string(), 2)));
        assert_eq!(k.settle_blocking(&key, |_, _| Verdict::Take).unwrap(), Seen::Nothing);
    }

    #[test]
    fn an_unreadable_record_is_dropped_as_absent() {
        let dir = tempfile::tempdir().unwrap();
        let k = kind(dir.path());
        let far = crate::store::now_millis() + 60_000;
        k.store.once_put("test", &[1; 32], b"not json", far, 10).unwrap();
        assert_eq!(
            k.settle_blocking(&[1; 32], |_, _| Verdict::Keep).unwrap(),
            Seen::Nothing
        );
        assert_eq!(k.live().unwrap(), 0, "and taken");
    }
}
