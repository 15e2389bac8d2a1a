//! A box: another machine whose OpenCode servers the gateway reaches over SSH, with nothing to
//! install there and no port opened on it (issue 24). SSH connections to the box (russh's
//! client), its host key pinned, the gateway's own key to log in; every upstream connection to
//! the box is a `direct-tcpip` channel on one, which the pool (`pool.rs`) drives exactly like a
//! TCP connection, and a project the gateway spawns there runs in an `exec` channel
//! (`supervise/remote.rs`). A connection that died is made again on the next channel asked for,
//! after failures no sooner than the backoff allows (`backoff.rs`). While connected, a ping
//! every `KEEPALIVE` measures the round trip, for `status` and `/metrics`.
//!
//! One connection per worker thread (up to [`MOST_CONNECTIONS`]; the main runtime's rare channels,
//! `exec` and the API document, use the first worker's), each made when its worker first needs
//! one. russh runs a connection's session as a task on the runtime that made it: with one per
//! worker, a worker's channels are served on its own thread, and the box's sshd (one process per
//! connection) works on more than one core. With the read-ahead below, requests per second
//! through the box went from 0.52× to 0.58× of the direct path's on the bench's box section
//! (docs/performance.md, issue 43). The bound keeps a many-core gateway from holding dozens of
//! logins (and sshd processes) on one box.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use russh::client::{self, Handle, Msg};
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg, PublicKey};
use russh::{Channel, ChannelStream};
use tokio::sync::Mutex;

use super::backoff::Backoff;
use super::box_handler::{Offered, Pinned};
use crate::upstream::BoxError;

/// How often an idle connection is checked, and after how many unanswered checks it is dead.
const KEEPALIVE: Duration = Duration::from_secs(15);
const KEEPALIVE_MAX: usize = 3;
/// The most SSH connections to one box (one per worker thread up to this many).
const MOST_CONNECTIONS: usize = 4;
/// What one read from the box's socket may take at once: two of sshd's largest packets.
const READ_AHEAD: usize = 64 * 1024;

/// Where a box is and how the gateway proves itself to it.
#[derive(Clone)]
pub(crate) struct BoxSpec {
    /// The box's name in the config (`[[box]] name`), in every error.
    pub name: String,
    /// `host:port` of its SSH server.
    pub address: String,
    pub user: String,
    /// The gateway's client key (a file outside every project, 0600).
    pub key: Arc<PrivateKey>,
    /// The box's host keys: any other is refused, never trusted on first use.
    pub host_keys: Vec<PublicKey>,
    /// Keys a `@revoked` line names (never among `host_keys`): refused, saying so.
    pub revoked: Vec<PublicKey>,
}

/// One box's SSH connection, made when first needed and again after it dies.
pub(crate) struct BoxLink {
    spec: BoxSpec,
    connect_timeout: Duration,
    /// The workers' connections (`support::workers::current`, folded onto at most
    /// [`MOST_CONNECTIONS`]).
    sessions: Vec<Mutex<Option<Arc<Handle<Pinned>>>>>,
    /// SSH connections made, and attempts that failed.
    connects: AtomicU64,
    failures: AtomicU64,
    /// Channels opened in all, and open now.
    channels_opened: AtomicU64,
    channels_open: Arc<AtomicI64>,
    /// Why the last attempt to connect or open a channel failed (cleared by a connection made),
    /// or why the box's handler dropped the connection.
    last_error: Arc<std::sync::Mutex<Option<String>>>,
    /// When the next attempt to connect may be made, after failures.
    backoff: Arc<std::sync::Mutex<Backoff>>,
    /// The last ping's round trip in microseconds (0: none measured on this connection yet).
    rtt_micros: Arc<AtomicU64>,
}

/// A box's state, for `status` and `/metrics`.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct BoxReport {
    pub name: String,
    pub address: String,
    /// `connected`, `connecting` or `not connected` (made again on the next request).
    pub state: &'static str,
    pub last_error: Option<String>,
    pub connects: u64,
    pub failures: u64,
    pub channels_opened: u64,
    pub channels_open: i64,
    /// The last measured round trip, in milliseconds (while connected).
    pub rtt_ms: Option<f64>,
}

/// A channel counted open until it is dropped.
pub(crate) struct OpenChannel(Arc<AtomicI64>);

impl Drop for OpenChannel {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl BoxLink {
    pub(crate) fn new(spec: BoxSpec, connect_timeout: Duration) -> Self {
        BoxLink {
            spec,
            connect_timeout,
            sessions: (0..crate::support::workers::count().clamp(1, MOST_CONNECTIONS))
                .map(|_| Mutex::new(None))
                .collect(),
            connects: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            channels_opened: AtomicU64::new(0),
            channels_open: Arc::new(AtomicI64::new(0)),
            last_error: Default::default(),
            backoff: Default::default(),
            rtt_micros: Arc::new(AtomicU64::new(0)),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    /// A `direct-tcpip` channel to `host:port` as the box sees it, on the box's connection
    /// (made first if there is none, or it died).
    pub(crate) async fn open(&self, host: &str, port: u16) -> Result<(ChannelStream<Msg>, OpenChannel), BoxError> {
        let session = self.session().await?;
        // A box that never confirms the channel would hold the request forever.
        let opened = tokio::time::timeout(
            self.connect_timeout,
            session.channel_open_direct_tcpip(host, u32::from(port), "127.0.0.1", 0),
        )
        .await;
        match opened {
            Ok(Ok(channel)) => {
                self.channels_opened.fetch_add(1, Ordering::Relaxed);
                self.channels_open.fetch_add(1, Ordering::Relaxed);
                Ok((channel.into_stream(), OpenChannel(self.channels_open.clone())))
            }
            Err(_) => Err(self.failed(format!(
                "box {}: no answer to opening a channel to {host}:{port} within {}",
                self.spec.name,
                seconds(self.connect_timeout)
            ))),
            Ok(Err(e)) => {
                // The connection may have died since it was last used: forget it, so the next
                // channel makes a new one; this one fails with the reason.
                let mut slot = self.slot().lock().await;
                if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, &session)) {
                    *slot = None;
                }
                Err(self.failed(format!(
                    "box {}: cannot open a channel to {host}:{port}: {e}",
                    self.spec.name
                )))
            }
        }
    }

    /// An `exec` channel running `command` in the box user's shell, on the box's connection.
    pub(crate) async fn exec(&self, command: &str) -> Result<(Channel<Msg>, OpenChannel), BoxError> {
        let session = self.session().await?;
        let opened = async {
            let channel = session.channel_open_session().await?;
            channel.exec(true, command).await?;
            Ok::<_, russh::Error>(channel)
        };
        match tokio::time::timeout(self.connect_timeout, opened).await {
            Ok(Ok(channel)) => {
                self.channels_opened.fetch_add(1, Ordering::Relaxed);
                self.channels_open.fetch_add(1, Ordering::Relaxed);
                Ok((channel, OpenChannel(self.channels_open.clone())))
            }
            Ok(Err(e)) => Err(self.failed(format!("box {}: cannot run a command: {e}", self.spec.name))),
            Err(_) => Err(self.failed(format!(
                "box {}: no answer to opening a channel to run a command within {}",
                self.spec.name,
                seconds(self.connect_timeout)
            ))),
        }
    }

    /// The connection slot of the worker this runs on (the first worker's off the workers).
    fn slot(&self) -> &Mutex<Option<Arc<Handle<Pinned>>>> {
        let worker = crate::support::workers::current().max(1) - 1;
        &self.sessions[worker % self.sessions.len()]
    }

    async fn session(&self) -> Result<Arc<Handle<Pinned>>, BoxError> {
        let mut slot = self.slot().lock().await;
        if let Some(s) = slot.as_ref()
            && !s.is_closed()
        {
            return Ok(s.clone());
        }
        // After a failure, the next try waits its turn: a request before it fails at once with
        // the last error (the box is not asked again and again while it is down).
        let wait = self
            .backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .wait(Instant::now());
        if !wait.is_zero() {
            let last = self.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone();
            return Err(format!(
                "box {}: unreachable, tried again in {} s (last error: {})",
                self.spec.name,
                wait.as_secs().max(1),
                last.as_deref().unwrap_or("none")
            )
            .into());
        }
        let made = match self.connect().await {
            Ok(h) => Arc::new(h),
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                let jitter = super::backoff::jitter();
                self.backoff
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .failed(Instant::now(), jitter);
                return Err(self.failed(e));
            }
        };
        self.backoff.lock().unwrap_or_else(|e| e.into_inner()).reset();
        self.connects.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(measure_round_trips(Arc::downgrade(&made), self.rtt_micros.clone()));
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *slot = Some(made.clone());
        Ok(made)
    }

    /// Remember why it failed (for `status`), and say it.
    fn failed(&self, why: String) -> BoxError {
        tracing::warn!(r#box = %self.spec.name, reason = %why, "box unreachable");
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
        why.into()
    }

    pub(crate) fn report(&self) -> BoxReport {
        // Connected if any runtime's connection is; connecting if one is being made.
        let mut state = "not connected";
        for slot in &self.sessions {
            match slot.try_lock() {
                Ok(s) if s.as_ref().is_some_and(|s| !s.is_closed()) => {
                    state = "connected";
                    break;
                }
                Ok(_) => {}
                Err(_) => state = "connecting",
            }
        }
        let rtt = self.rtt_micros.load(Ordering::Relaxed);
        BoxReport {
            name: self.spec.name.clone(),
            address: self.spec.address.clone(),
            state,
            last_error: self.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            connects: self.connects.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            channels_opened: self.channels_opened.load(Ordering::Relaxed),
            channels_open: self.channels_open.load(Ordering::Relaxed),
            rtt_ms: (state == "connected" && rtt > 0).then(|| rtt as f64 / 1000.0),
        }
    }

    /// Connect and log in, each step bounded by one deadline `connect_timeout` away; an error
    /// names the step the box did not answer.
    async fn connect(&self) -> Result<Handle<Pinned>, String> {
        let spec = &self.spec;
        let deadline = tokio::time::Instant::now() + self.connect_timeout;
        let within = seconds(self.connect_timeout);
        let tcp = match tokio::time::timeout_at(deadline, tokio::net::TcpStream::connect(spec.address.as_str())).await {
            Err(_) => {
                return Err(format!(
                    "box {}: no TCP connection to {} within {within}",
                    spec.name, spec.address
                ));
            }
            Ok(Err(e)) => return Err(format!("box {}: cannot connect to {}: {e}", spec.name, spec.address)),
            Ok(Ok(tcp)) => tcp,
        };
        let mut handle = self.handshake(tcp, deadline).await?;
        let hash = tokio::time::timeout_at(deadline, handle.best_supported_rsa_hash())
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .flatten();
        let key = PrivateKeyWithHashAlg::new(spec.key.clone(), hash);
        let auth = match tokio::time::timeout_at(deadline, handle.authenticate_publickey(spec.user.clone(), key)).await
        {
            Err(_) => {
                return Err(format!(
                    "box {}: no answer to the SSH login as {} within {within}",
                    spec.name, spec.user
                ));
            }
            Ok(r) => r.map_err(|e| format!("box {}: logging in as {}: {e}", spec.name, spec.user))?,
        };
        if !auth.success() {
            return Err(format!(
                "box {}: the box refused the gateway's key for user {} (add its public key to ~{}/.ssh/authorized_keys)",
                spec.name, spec.user, spec.user
            ));
        }
        Ok(handle)
    }

    /// The SSH banner, the key exchange and the host key's check, by `deadline`.
    async fn handshake(
        &self,
        tcp: tokio::net::TcpStream,
        deadline: tokio::time::Instant,
    ) -> Result<Handle<Pinned>, String> {
        let spec = &self.spec;
        let config = Arc::new(client::Config {
            keepalive_interval: Some(KEEPALIVE),
            keepalive_max: KEEPALIVE_MAX,
            ..Default::default()
        });
        let offered = Arc::new(std::sync::Mutex::new(None));
        let handler = Pinned {
            box_name: spec.name.clone(),
            expected: spec.host_keys.clone(),
            revoked: spec.revoked.clone(),
            offered: offered.clone(),
            last_error: self.last_error.clone(),
            backoff: self.backoff.clone(),
            refused: 0,
        };
        tcp.set_nodelay(true)
            .map_err(|e| format!("box {}: cannot connect to {}: {e}", spec.name, spec.address))?;
        let (stream, heard) = super::quick_ack::QuickAck::new(tcp);
        // russh reads each packet with two exact reads (its length, then the rest): unbuffered,
        // that was two `recvfrom` and two `TCP_QUICKACK`s per packet. Reading ahead takes every
        // packet that has arrived in one call (docs/performance.md, issue 43).
        let stream = tokio::io::BufReader::with_capacity(READ_AHEAD, stream);
        match tokio::time::timeout_at(deadline, client::connect_stream(config, stream, handler)).await {
            Err(_) if !heard.load(Ordering::Relaxed) => Err(format!(
                "box {}: {} took the connection but sent no SSH banner within {}",
                spec.name,
                spec.address,
                seconds(self.connect_timeout)
            )),
            Err(_) => Err(format!(
                "box {}: no answer to the SSH key exchange from {} within {}",
                spec.name,
                spec.address,
                seconds(self.connect_timeout)
            )),
            Ok(Err(e)) => {
                if let Some(offered) = offered.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    return Err(refused_key(spec, &offered));
                }
                Err(format!("box {}: cannot connect to {}: {e}", spec.name, spec.address))
            }
            Ok(Ok(h)) => Ok(h),
        }
    }
}

/// A host key refused in the key exchange (before any login): logged, and the request's error.
fn refused_key(spec: &BoxSpec, offered: &Offered) -> String {
    let fingerprint = &offered.fingerprint;
    if offered.revoked {
        tracing::error!(target: "security", r#box = %spec.name, address = %spec.address, offered = %fingerprint, reason = "box_host_key_revoked",
            "the box presented a host key its known_hosts file revokes: refused (a retired or stolen key); give the box a new key and pin it");
        return format!(
            "box {}: its host key ({fingerprint}) is revoked (a @revoked line of its known_hosts); refused",
            spec.name
        );
    }
    tracing::error!(target: "security", r#box = %spec.name, address = %spec.address, offered = %fingerprint, reason = "box_host_key_mismatch",
        "the box's host key is not the pinned one: refused (a changed key, or someone in between); check it and set host_key (or known_hosts)");
    format!(
        "box {}: its host key ({fingerprint}) is not the pinned one; refused",
        spec.name
    )
}

/// `5 s`, `0.5 s`: a bound as the errors say it.
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// Ping the box at once and then every `KEEPALIVE` while its connection lives (held weakly: the
/// link, not this task, decides when a connection is dropped), keeping the last round trip.
async fn measure_round_trips(session: std::sync::Weak<Handle<Pinned>>, rtt_micros: Arc<AtomicU64>) {
    rtt_micros.store(0, Ordering::Relaxed);
    loop {
        let Some(handle) = session.upgrade().filter(|h| !h.is_closed()) else {
            return;
        };
        let sent = Instant::now();
        match tokio::time::timeout(KEEPALIVE, handle.send_ping()).await {
            Ok(Ok(())) => {
                let micros = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX).max(1);
                rtt_micros.store(micros, Ordering::Relaxed);
            }
            _ => rtt_micros.store(0, Ordering::Relaxed),
        }
        drop(handle);
        tokio::time::sleep(KEEPALIVE).await;
    }
}
