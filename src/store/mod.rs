//! The gateway's state database: what it must remember across restarts and share with the CLI
//! (API tokens, browser sessions, paired devices, spend, push subscriptions, passkeys, single-use
//! records, triggers' runs). [`Store`] is eight small traits, one per job; SQLite ([`sqlite`]) and PostgreSQL
//! ([`postgres`]) implement them with the same statements (`statements.rs`), so another backend
//! adds a dialect without touching the callers.

mod backend;
#[cfg(test)]
mod conformance;
mod kept;
mod logins;
pub mod postgres;
#[cfg(test)]
#[path = "../../tests/support/postgres_cluster.rs"]
pub(crate) mod postgres_cluster;
mod runs;
pub mod sqlite;
mod statements;

pub(crate) use runs::{RunStore, TriggerRun};

#[cfg(test)]
mod backends {
    use std::sync::Arc;

    /// The store's cases on SQLite, each on a file of its own.
    #[test]
    fn the_store_behaves_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        super::conformance::every_case(&mut |name| {
            Arc::new(super::sqlite::SqliteStore::open(&dir.path().join(format!("{name}.db"))).unwrap())
        });
    }

    /// The same cases on PostgreSQL, each in a database of its own on one throwaway cluster.
    #[test]
    fn the_store_behaves_on_postgres() {
        let Some(cluster) = super::postgres_cluster::Cluster::start() else {
            return;
        };
        super::conformance::every_case(&mut |name| {
            Arc::new(super::postgres::PostgresStore::open(&cluster.database(name)).unwrap())
        });
        // Opening again applies nothing twice and keeps the rows.
        let url = cluster.url("tokens");
        let again = super::postgres::PostgresStore::open(&url).unwrap();
        assert!(!super::TokenStore::list_tokens(&again, None).unwrap().is_empty());
        login_allowances_are_spent_together(&cluster.database("budgets"));
    }

    /// Two gateways' stores on one database spend one allowance: 3 cells, one back a minute.
    fn login_allowances_are_spent_together(url: &str) {
        use super::SharedStore;
        let (a, b) = (
            super::postgres::PostgresStore::open(url).unwrap(),
            super::postgres::PostgresStore::open(url).unwrap(),
        );
        let (t, minute) = (1_000_000_i64, 60_000_i64);
        let take =
            |s: &super::postgres::PostgresStore, key: &str, now: i64| s.take_allowance(key, minute, 3, now).unwrap();
        assert_eq!(take(&a, "address:10.0.0.1", t), Ok(2));
        assert_eq!(take(&b, "address:10.0.0.1", t), Ok(1), "B spends A's allowance");
        assert_eq!(take(&a, "address:10.0.0.1", t + 1), Ok(0));
        assert_eq!(
            take(&b, "address:10.0.0.1", t + 2),
            Err(minute - 2),
            "spent: one back a minute after the first"
        );
        assert_eq!(take(&a, "address:10.0.0.2", t), Ok(2), "another key has its own");
        assert_eq!(take(&b, "address:10.0.0.1", t + minute), Ok(0), "one cell back");
        // 10.0.0.2 is full again a minute after its one cell; 10.0.0.1 four minutes after t.
        assert_eq!(a.prune_allowances(t + 3 * minute).unwrap(), 1, "only the full one");
        assert_eq!(a.prune_allowances(t + 10 * minute).unwrap(), 1);
        assert_eq!(take(&b, "address:10.0.0.1", t + 10 * minute), Ok(2), "full again");
        // Charges counted out of the order of their times (two gateways' charges queued on the
        // row): the burst is still given whole, and not one cell more.
        let late = t + 20 * minute;
        assert_eq!(take(&a, "address:10.0.0.3", late + 5), Ok(2));
        assert_eq!(take(&b, "address:10.0.0.3", late), Ok(1), "timed before the first");
        assert_eq!(take(&a, "address:10.0.0.3", late + 3), Ok(0), "the third of the burst");
        assert!(take(&b, "address:10.0.0.3", late + 4).is_err(), "no fourth");
    }
}

use std::path::{Path, PathBuf};

/// The file under `state_dir`.
pub(crate) const DB_FILE: &str = "gateway.db";

pub(crate) fn db_path(state_dir: &Path) -> PathBuf {
    state_dir.join(DB_FILE)
}

/// Now in Unix milliseconds (single-use records' expiry).
pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("state database: {0}")]
    Backend(String),
    /// Nothing came back within the call's bound (a hung database host): PostgreSQL only.
    #[error("the state database did not answer within {} s", .0.as_secs())]
    Unanswered(std::time::Duration),
}

/// A store call that failed, as the client is told: a deadline is said; the database's own words
/// (which may name its host or a table) stay in the log (`blocking`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    #[error("the gateway's state database is not available")]
    Failed,
    #[error("the gateway's state database did not answer within {} s", .0.as_secs())]
    Unanswered(std::time::Duration),
}

impl From<&StoreError> for Unavailable {
    fn from(e: &StoreError) -> Unavailable {
        match e {
            StoreError::Backend(_) => Unavailable::Failed,
            StoreError::Unanswered(bound) => Unavailable::Unanswered(*bound),
        }
    }
}

impl From<StoreError> for Unavailable {
    fn from(e: StoreError) -> Unavailable {
        Unavailable::from(&e)
    }
}

/// Run a store call off the async workers (SQLite blocks, and a write may wait on the CLI's
/// lock); a failure, of the call or of the blocking pool, is logged once here as `what` failed.
pub(crate) async fn blocking<T: Send + 'static>(
    what: &'static str,
    call: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let result = match tokio::task::spawn_blocking(call).await {
        Ok(r) => r,
        Err(e) => Err(StoreError::Backend(format!("the blocking call did not finish: {e}"))),
    };
    if let Err(e) = &result {
        tracing::error!(error = %e, "{what} failed");
    }
    result
}

/// A stored token: everything but the token itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenRecord {
    pub id: String,
    pub digest: [u8; 32],
    pub user: String,
    pub label: String,
    /// `None`: the user's own role.
    pub role: Option<String>,
    /// `None`: all the user's projects.
    pub projects: Option<Vec<String>>,
    pub created_at: i64,
    pub expires_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
    /// `[[policy]]` name: the gateway answers the permission requests of sessions made with it.
    pub policy: Option<String>,
}

/// A session made under a token that carries a permission policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionPolicy {
    pub session: String,
    pub project: String,
    pub policy: String,
}

/// A paired device (a phone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceRecord {
    pub id: String,
    pub user: String,
    pub label: String,
    pub created_at: i64,
    pub last_seen_at: Option<i64>,
    pub last_address: Option<String>,
    pub revoked_at: Option<i64>,
}

/// A browser session: everything but the cookie value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WebSessionRecord {
    pub id: String,
    pub digest: [u8; 32],
    pub user: String,
    pub device_id: Option<String>,
    /// The login session a project host's session was handed off from.
    pub parent: Option<String>,
    /// `None`: the login host; else the project whose host this session serves.
    pub host: Option<String>,
    pub created_at: i64,
    pub last_seen_at: i64,
    pub idle_secs: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
}

impl WebSessionRecord {
    /// The device whose revocation ends this session: its own, else its parent's.
    pub(crate) fn device_of<'a>(&'a self, parent: Option<&'a WebSessionRecord>) -> Option<&'a String> {
        self.device_id.as_ref().or(parent.and_then(|p| p.device_id.as_ref()))
    }

    /// Live at `now`: not revoked, not past its absolute expiry, used within its idle time.
    pub(crate) fn live_at(&self, now: i64) -> bool {
        self.revoked_at.is_none() && now < self.expires_at && now - self.last_seen_at < self.idle_secs
    }
}

/// A session as looked up: itself, the login session it hangs from (if a child), and whether its
/// device (its own or its parent's) is revoked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WebSessionLookup {
    pub session: WebSessionRecord,
    pub parent: Option<WebSessionRecord>,
    pub device_revoked: bool,
}

impl WebSessionLookup {
    /// The session may be used at `now`: it and its parent are live and no device of theirs is revoked.
    pub(crate) fn live_at(&self, now: i64) -> bool {
        !self.device_revoked
            && self.session.live_at(now)
            && match (&self.session.parent, &self.parent) {
                (None, _) => true,
                (Some(_), Some(p)) => p.live_at(now),
                // A child whose parent row is gone is dead.
                (Some(_), None) => false,
            }
    }
}

/// The tokens' half of the store.
pub(crate) trait TokenStore: Send + Sync {
    fn insert_token(&self, token: &TokenRecord) -> Result<(), StoreError>;
    /// The token whose digest this is, revoked or not.
    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenRecord>, StoreError>;
    /// Tokens, newest first; of one user when `user` is given.
    fn list_tokens(&self, user: Option<&str>) -> Result<Vec<TokenRecord>, StoreError>;
    /// Mark revoked; false when there is no such token (or it was revoked already).
    fn revoke_token(&self, id: &str, at: i64) -> Result<bool, StoreError>;
    fn touch_token(&self, id: &str, at: i64) -> Result<(), StoreError>;
    /// Keep which policy a session made under a token answers by (the first word stands).
    fn set_session_policy(&self, p: &SessionPolicy, at: i64) -> Result<(), StoreError>;
    /// Every session's policy, oldest first (read at start).
    fn session_policies(&self) -> Result<Vec<SessionPolicy>, StoreError>;
}

/// Whether writes work (a full disk makes them fail while reads go on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct WriteHealth {
    /// The last write worked.
    pub writing: bool,
    /// Writes that failed since the start.
    pub failures: u64,
}

/// Writes that failed, for [`BrowserStore::health`] and the log: a failure is counted and said
/// once per run of failures (a full disk must not flood the log), and writes working again are
/// said too. Reads are not counted: they fail for other reasons, and a full disk does not stop them.
#[derive(Default)]
pub(crate) struct WriteNotes {
    failing: std::sync::atomic::AtomicBool,
    failures: std::sync::atomic::AtomicU64,
}

impl WriteNotes {
    pub(crate) fn noted<T>(&self, what: &'static str, result: Result<T, StoreError>) -> Result<T, StoreError> {
        use std::sync::atomic::Ordering;
        match &result {
            Ok(_) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::warn!("the state database is written again");
                }
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::error!(write = what, error = %e, "cannot write the state database; logins and revocations may fail until it works again (state_db_write_failures_total, status)");
                }
            }
        }
        result
    }

    pub(crate) fn health(&self) -> WriteHealth {
        use std::sync::atomic::Ordering;
        WriteHealth {
            writing: !self.failing.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

/// The browser logins' half: paired devices and sessions.
pub(crate) trait BrowserStore: Send + Sync {
    /// Whether writes work now; stores that cannot tell say they do.
    fn health(&self) -> WriteHealth {
        WriteHealth {
            writing: true,
            failures: 0,
        }
    }
    fn insert_device(&self, device: &DeviceRecord) -> Result<(), StoreError>;
    /// Devices, newest first; of one user when `user` is given.
    fn list_devices(&self, user: Option<&str>) -> Result<Vec<DeviceRecord>, StoreError>;
    /// Revoke a device and every session it owns (and their children), in one transaction. False
    /// when there is no such live device.
    fn revoke_device(&self, id: &str, at: i64) -> Result<bool, StoreError>;
    fn touch_device(&self, id: &str, at: i64, address: &str) -> Result<(), StoreError>;
    /// `user`'s password hash is now the one `fingerprint` digests. When it was another before,
    /// the user's login sessions made without a device (and their project-host children) end;
    /// returns how many sessions ended. Paired devices keep theirs: pairing proved presence on
    /// the host, not knowledge of the password.
    fn password_is(&self, user: &str, fingerprint: &[u8; 32], at: i64) -> Result<usize, StoreError>;

    fn insert_web_session(&self, session: &WebSessionRecord) -> Result<(), StoreError>;
    fn web_session_by_digest(&self, digest: &[u8; 32]) -> Result<Option<WebSessionLookup>, StoreError>;
    /// Revoke a session and its children. False when it was not live.
    fn revoke_web_session(&self, id: &str, at: i64) -> Result<bool, StoreError>;
    /// Record use (and so push back the idle expiry) of a session and of its parent.
    fn touch_web_session(&self, id: &str, at: i64) -> Result<(), StoreError>;
    /// Delete sessions that ended before `before` (revoked or expired); returns how many.
    fn prune_web_sessions(&self, before: i64) -> Result<usize, StoreError>;
}

/// A session's cost as the meter last saw it (issue 25).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SessionCost {
    pub project: String,
    pub session: String,
    pub parent: Option<String>,
    pub prompter: Option<String>,
    pub usd: f64,
}

/// The day under which sessions' raised budgets are kept (they outlive days).
pub(crate) const SESSION_RAISES_DAY: i64 = 0;

/// The day a spend total is kept under: a session's raise outlives the day
/// ([`SESSION_RAISES_DAY`]).
pub(crate) fn spend_day(day: i64, kind: &str, name: &str) -> i64 {
    if kind == "raised" && name.starts_with("session ") {
        SESSION_RAISES_DAY
    } else {
        day
    }
}

/// The cost meter's half: spend per day (with operators' raises, kind `raised`), and sessions'
/// last-seen costs.
pub(crate) trait SpendStore: Send + Sync {
    /// `(kind, name, usd)` of `day` (days since the epoch, UTC); kind is `project` or `user`.
    fn spend_of_day(&self, day: i64) -> Result<Vec<(String, String, f64)>, StoreError>;
    fn session_costs(&self) -> Result<Vec<SessionCost>, StoreError>;
    /// `(kind, name, usd)` summed over the days from `from` up to, not including, `to`.
    fn spend_between(&self, from: i64, to: i64) -> Result<Vec<(String, String, f64)>, StoreError>;
    /// Write `day`'s totals and the sessions' costs (each replacing what was there) and delete
    /// the sessions the meter forgot (`(project, session)`), at once.
    fn save_spend(
        &self,
        day: i64,
        totals: &[(String, String, f64)],
        sessions: &[SessionCost],
        forgotten: &[(String, String)],
    ) -> Result<(), StoreError>;
}

/// A browser's Web Push subscription (issue 26).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PushSubscription {
    /// The push service's URL for this browser (checked: `notify::push_endpoint`).
    pub endpoint: String,
    pub user: String,
    /// The login session it was made in: pushed only while that login is live.
    pub session_id: String,
    /// The paired device it was made on: revoking the device deletes it.
    pub device_id: Option<String>,
    /// The browser's P-256 public key (65 bytes) and auth secret (16 bytes).
    pub p256dh: Vec<u8>,
    pub auth: Vec<u8>,
    pub created_at: i64,
}

/// The push half: subscriptions by user and endpoint (one user naming another's endpoint URL
/// makes a subscription of their own, never takes hers over).
pub(crate) trait PushStore: Send + Sync {
    /// Keep a subscription (one per user and endpoint: a browser subscribing again for the same
    /// user replaces it).
    fn save_push(&self, s: &PushSubscription) -> Result<(), StoreError>;
    /// The subscriptions whose login session is live at `now` (Unix seconds).
    fn push_subscriptions(&self, now: i64) -> Result<Vec<PushSubscription>, StoreError>;
    /// Every endpoint `user` has subscribed, live login or not.
    fn push_endpoints_of(&self, user: &str) -> Result<Vec<String>, StoreError>;
    /// Delete the subscriptions at `endpoint` (only `user`'s, when given); true if there was one.
    fn delete_push(&self, endpoint: &str, user: Option<&str>) -> Result<bool, StoreError>;
}

/// A user's passkey (issue 26): a WebAuthn credential, and the library's encoding of its public
/// key (`static_state`) and of what changes at each sign-in (`dynamic_state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PasskeyRecord {
    /// Shown and typed (`pk_…`), unlike the credential id.
    pub id: String,
    pub credential_id: Vec<u8>,
    pub user: String,
    /// The WebAuthn user handle it was made for (the user's, `passkey_handle`).
    pub handle: Vec<u8>,
    pub static_state: Vec<u8>,
    pub dynamic_state: Vec<u8>,
    pub label: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// The passkeys' half.
pub(crate) trait PasskeyStore: Send + Sync {
    /// `user`'s WebAuthn handle: the one stored, else `fresh`, stored now.
    fn passkey_handle(&self, user: &str, fresh: &[u8]) -> Result<Vec<u8>, StoreError>;
    /// Keep a new passkey (a credential id already known is refused).
    fn save_passkey(&self, p: &PasskeyRecord) -> Result<(), StoreError>;
    /// The passkey with this credential id, revoked or not.
    fn passkey_by_credential(&self, credential_id: &[u8]) -> Result<Option<PasskeyRecord>, StoreError>;
    /// Every passkey (of `user`, when given), newest first.
    fn list_passkeys(&self, user: Option<&str>) -> Result<Vec<PasskeyRecord>, StoreError>;
    /// Revoke passkey `id` (only `user`'s, when given); true if it was live.
    fn revoke_passkey(&self, id: &str, user: Option<&str>, at: i64) -> Result<bool, StoreError>;
    /// A sign-in with passkey `id`: its new dynamic state, and when.
    fn passkey_used(&self, id: &str, dynamic_state: &[u8], at: i64) -> Result<(), StoreError>;
}

/// What a look at a single-use record decides ([`OnceStore::once_settle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Used up (or dead): delete it.
    Take,
    /// Not for this caller: leave it as it is.
    Keep,
    /// Still live, changed (a pairing code with a try fewer).
    Replace(Vec<u8>),
}

/// How a [`OnceStore::once_put`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PutOnce {
    Kept,
    /// A live record already has that key (the caller makes another).
    KeyInUse,
    /// The kind has its most live records already.
    Full,
}

/// Short-lived records each used once: handoff tickets, terminal tickets, pairing codes. Kept
/// in the store, not in a process's memory, so that whichever gateway on the store a browser
/// reaches next finds them (issue 27). Keys are digests, values the caller's own bytes, expiry
/// Unix milliseconds. Not on the hot path: a login's handoff, a terminal's start, a pairing.
pub(crate) trait OnceStore {
    /// Keep `value` under (`kind`, `key`) until `expires_at`, unless the key is live already or
    /// `kind` has `max` live records. Expired records of `kind` are deleted first.
    fn once_put(
        &self,
        kind: &str,
        key: &[u8; 32],
        value: &[u8],
        expires_at: i64,
        max: usize,
    ) -> Result<PutOnce, StoreError>;
    /// The record under (`kind`, `key`), if any, and whether it expired by `now`, dealt with as
    /// `decide` says in one transaction (two gateways never both take it). Returns what was seen.
    fn once_settle(
        &self,
        kind: &str,
        key: &[u8; 32],
        now: i64,
        decide: &mut (dyn FnMut(&[u8], bool) -> Settle + Send),
    ) -> Result<Option<Vec<u8>>, StoreError>;
    /// Live records of `kind` at `now`.
    fn once_live(&self, kind: &str, now: i64) -> Result<usize, StoreError>;
}

/// What changed elsewhere (another gateway on the same database, or the CLI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Changed {
    /// Sessions or devices were revoked.
    Sessions,
    /// Tokens were revoked.
    Tokens,
    /// Login allowance `key` (`address:<ip>`, `user:<name>`) is spent for `ms` (0: a login refilled
    /// it), found by another gateway.
    Spent { key: String, ms: i64 },
    /// An operator raised a spend budget (its row is saved): read the raises again.
    Budgets,
    /// A session under a permission policy was made through another gateway: read them again.
    Policies,
    /// Unknown (the watch reconnected, and may have missed some): everything.
    All,
}

/// What several gateways on one database share beyond rows: for a store only one gateway uses
/// (SQLite in `state_dir`), nothing.
pub(crate) trait SharedStore: Send + Sync {
    /// The secret `name` every gateway on this database uses, made from `fresh` by whichever
    /// comes first; `None`: this store keeps none (the key is a file in `state_dir`).
    fn shared_key(&self, _name: &str, _fresh: &[u8; 32]) -> Result<Option<[u8; 32]>, StoreError> {
        Ok(None)
    }
    /// Call `changed` whenever sessions or tokens are revoked through any gateway or the CLI;
    /// false when this store cannot tell (its one gateway hears of the CLI's changes on its
    /// control socket).
    fn watch_changes(&self, _changed: Box<dyn Fn(Changed) + Send + 'static>) -> bool {
        false
    }
    /// Whether this gateway is, of those on this store, the one that does `name` (sends the
    /// team's notifications): a lock in the store, held by one live gateway at a time and taken
    /// over when it dies. `None`: this store has one gateway, which always is.
    fn leader(&self, _name: &'static str) -> Option<std::sync::Arc<std::sync::atomic::AtomicBool>> {
        None
    }
    /// Whether other gateways may use this store too (then login allowances are spent in it).
    fn is_shared(&self) -> bool {
        false
    }
    /// Take one cell of login allowance `key` (`burst` cells, one back every `interval` ms) at
    /// `now` (Unix ms), for every gateway on this store: the cells left, or the ms until one is
    /// back. Asked only of a shared store.
    fn take_allowance(
        &self,
        _key: &str,
        _interval: i64,
        _burst: u32,
        _now: i64,
    ) -> Result<Result<u32, i64>, StoreError> {
        Ok(Ok(u32::MAX))
    }
    /// Tell the other gateways on this store that `what` changed (nothing to tell on a store of
    /// one gateway).
    fn tell(&self, _what: Changed) {}
    /// Delete allowances that are full again at `now` (Unix ms).
    fn prune_allowances(&self, _now: i64) -> Result<usize, StoreError> {
        Ok(0)
    }
}

/// The whole state database.
pub(crate) trait Store:
    TokenStore + BrowserStore + SpendStore + PushStore + PasskeyStore + OnceStore + RunStore + SharedStore
{
}
impl<T: TokenStore + BrowserStore + SpendStore + PushStore + PasskeyStore + OnceStore + RunStore + SharedStore> Store
    for T
{
}

/// Open (creating and migrating) the state database the settings name: PostgreSQL at
/// `[store] url`, else SQLite under `state_dir`.
pub(crate) fn open_for(settings: &crate::config::Settings) -> anyhow::Result<std::sync::Arc<dyn Store>> {
    match &settings.store_url {
        Some(url) => Ok(std::sync::Arc::new(postgres::PostgresStore::open(url.expose())?)),
        None => open(&settings.server.state_dir),
    }
}

/// Which store the settings name, for `check` and the first log line (never the password).
pub(crate) fn describe(settings: &crate::config::Settings) -> String {
    match &settings.store_url {
        Some(url) => format!("PostgreSQL at {}", postgres::redacted(url.expose())),
        None => format!("SQLite at {}", db_path(&settings.server.state_dir).display()),
    }
}

/// Open (creating and migrating) the SQLite state database under `state_dir`.
pub(crate) fn open(state_dir: &Path) -> anyhow::Result<std::sync::Arc<dyn Store>> {
    Ok(std::sync::Arc::new(sqlite::SqliteStore::open(&db_path(state_dir))?))
}
