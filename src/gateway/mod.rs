//! The running gateway: the swappable [`State`] plus everything that outlives a reload (the auth
//! part: cache, argon2 verifier, limiters, tokens; supervisor, metrics, shutdown tokens).

pub(crate) mod accept;
pub(crate) mod box_sets;
pub mod certs;
pub mod connections;
pub mod inbox;
pub(crate) mod janitor;
pub mod reload;
mod restart_needed;
pub mod snapshot;
pub mod state;
pub(crate) mod task;
pub(crate) mod task_diff;
pub(crate) mod task_git;
pub(crate) mod task_review;
pub(crate) mod trigger;
pub(crate) mod trigger_pause;
pub(crate) mod trigger_runs;
pub(crate) mod turn_ends;

use std::net::IpAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::Auth;
use crate::auth::cache::AuthCache;
use crate::auth::tickets::Tickets;
use crate::auth::verifier::Verifier;
use crate::config::{Limits, Settings};
use crate::gateway::state::{State, Upstream};
use crate::metrics::Metrics;
use crate::ratelimit::{Limiters, Slots};
use crate::upstream::supervise::Supervisor;

/// What [`Gateway::rediscover`] found.
#[derive(Debug, Default)]
pub(crate) struct Rediscovered {
    /// The project names added and removed, when the matches changed (and the state was swapped).
    pub changed: Option<(Vec<String>, Vec<String>)>,
    /// Matching folders that are not projects, and why.
    pub refused: Vec<String>,
}

pub struct Gateway {
    /// Shared with the inbox, which reads the projects of the current state (`inbox.rs`).
    state: Arc<ArcSwap<State>>,
    /// Held while a new state is built and swapped (reload, or the project-set watcher), so one
    /// never swaps over the other's newer state.
    swapping: std::sync::Mutex<()>,
    /// Fixed at start: limits size the limiters and timers (a change needs a restart).
    pub limits: Limits,
    /// Credential checks: the auth cache, the argon2 verifier, the limiters and the API tokens
    /// (handed to auth as this one part, with the metrics and audit trail beside it).
    pub auth: Auth,
    /// What accepting and serving a connection needs.
    pub doors: Doors,
    /// What browsers' flows need: sessions, handoffs, pairing, single sign-on, terminal tickets.
    pub browser: Browser,
    /// Starting, supervising and stopping.
    pub lifecycle: Lifecycle,
    /// Pending permission requests and questions, sessions and server states of every project.
    pub inbox: Arc<crate::inbox::Inbox>,
    /// What sessions, projects and users spent (fed by the inbox's events, asked by admit, the
    /// guard and the pages): a part of its own, not the inbox's (issue 39).
    pub(crate) meter: Arc<crate::budget::Meter>,
    pub metrics: Metrics,
    /// The audit trail (fixed at start: `[audit]` changes need a restart).
    pub audit: crate::audit::Audit,
}

/// The doors' part: connection and stream slots, the connection table, the HTTP builders, the
/// worker runtimes, the bound ports and the certificates served.
pub struct Doors {
    pub connections: Arc<Slots<IpAddr>>,
    /// Every open HTTPS and SSH connection holds a place (cap: `connections::connection_cap`);
    /// unauthenticated HTTPS connections only a share, and they are shed first (`connections.rs`).
    pub conn_table: Arc<crate::gateway::connections::ConnTable>,
    pub connection_cap: u32,
    pub streams: Arc<Slots<Arc<str>>>,
    /// Connections whose protocol is not known: SSH channels only (and the ACME HTTP-01 port).
    pub http: auto::Builder<TokioExecutor>,
    /// The same settings, for TLS connections: h2 when the handshake chose it (ALPN), else HTTP/1.1.
    pub http1: hyper::server::conn::http1::Builder,
    pub http2: hyper::server::conn::http2::Builder<TokioExecutor>,
    /// The per-core runtimes HTTPS connections are served on.
    pub workers: crate::support::workers::Workers,
    /// The ports bound at start (set once by `lib::start`; listeners are not re-bound on reload).
    pub ports: std::sync::OnceLock<crate::reach::BoundPorts>,
    /// Every listener bound at start, by its config key (`server.listen`, `project <name>
    /// listen`, …), with the address it got (set once by `lib::start`).
    pub listening: std::sync::OnceLock<Vec<(String, std::net::SocketAddr)>>,
    /// The served certificate: swapped by reloads, the file watcher and ACME; outlives states.
    pub certs: Arc<crate::gateway::certs::CertStore>,
    /// Wakes the ACME task (a reload may have changed the names to order).
    pub acme_wake: tokio::sync::Notify,
    /// HTTP-01 answers while an ACME order is validated (served on `server.http_listen`).
    pub http01: crate::gateway::certs::Http01,
    /// What webhook bodies, unsigned while they arrive, may hold of memory (`web/hook.rs`).
    pub hook_bodies: crate::support::byte_budget::ByteBudget,
}

/// The browser's part.
pub struct Browser {
    /// Browser sessions (the login form, paired devices, project hosts' handed-off cookies).
    pub sessions: crate::auth::sessions::WebSessions,
    pub handoffs: crate::auth::handoff::Handoffs,
    /// Single sign-on flows in flight and the provider's metadata.
    pub sso: crate::oidc::flows::Sso,
    /// Pairing codes in flight (single-use records in the state database).
    pub pairing: crate::auth::pairing::Pairing,
    /// Terminal tickets OpenCode issued, relayed to the same project only.
    pub tickets: Tickets,
    /// The web UI's hashed assets, compressed once (issue 14).
    pub compressed: crate::support::compress::AssetCache,
    /// Web Push to subscribed devices (issue 26).
    pub(crate) push: Arc<crate::notify::push::Pusher>,
    /// Passkey ceremonies in flight (single-use records in the state database).
    pub passkeys: crate::auth::passkeys::Passkeys,
}

/// The lifecycle part.
pub struct Lifecycle {
    pub supervisor: Supervisor,
    /// The SSH links to the boxes, kept across reloads while their tables do not change.
    pub boxes: crate::upstream::box_links::BoxLinks,
    /// Stop accepting and let connections finish.
    pub shutdown: CancellationToken,
    /// The drain deadline passed: cut what is left (streams, WebSockets).
    pub abort: CancellationToken,
    pub tasks: TaskTracker,
    /// Projects' acceptance tests (issue 41): their last outcomes, and which run now.
    pub(crate) acceptance: accept::Board,
    /// The folders of project sets on boxes, as last listed there.
    pub(crate) box_sets: box_sets::BoxSets,
}

/// Forget cached verifications when a revocation is made through another gateway on the same
/// store, or the CLI (a store that cannot tell: nothing to do; the CLI uses the control socket).
pub(crate) fn watch_store(gw: &Arc<Gateway>) {
    use crate::store::Changed;
    let weak = Arc::downgrade(gw);
    let watching = gw.browser.sessions.store().watch_changes(Box::new(move |what| {
        let Some(gw) = weak.upgrade() else { return };
        if matches!(what, Changed::Sessions | Changed::All) {
            gw.browser.sessions.invalidate();
        }
        if matches!(what, Changed::Tokens | Changed::All) {
            gw.auth.tokens.invalidate();
        }
        if matches!(what, Changed::Budgets | Changed::All) {
            janitor::merge_raised(&gw);
        }
        if matches!(what, Changed::Policies | Changed::All) {
            inbox::read_session_policies(&gw);
            if matches!(what, Changed::Policies) {
                return;
            }
        }
        if let Changed::Spent { key, ms } = &what {
            gw.auth.limiters.spent_elsewhere(key, std::time::Duration::from_millis(u64::try_from(*ms).unwrap_or(0)));
            tracing::info!(target: "security", allowance = %key, for_ms = ms, "a login allowance spent (or refilled) through another gateway");
            return;
        }
        tracing::info!(changed = ?what, "cached verifications forgotten: a revocation through another gateway or the CLI");
    }));
    if watching {
        tracing::info!("listening for revocations made through other gateways on the state database");
    }
}

/// The audit trail, opened before anything runs: a path the gateway cannot write fails the start.
fn open_audit(settings: &Settings) -> anyhow::Result<crate::audit::Audit> {
    Ok(match &settings.audit {
        Some(cfg) => crate::audit::Audit::start(cfg.clone()).map_err(|e| {
            anyhow::anyhow!(
                "cannot open the audit log {}: {e} (set [audit] file, or enabled = false)",
                cfg.file.display()
            )
        })?,
        None => crate::audit::Audit::off(),
    })
}

impl Doors {
    fn new(limits: &Limits, certs: Arc<crate::gateway::certs::CertStore>) -> anyhow::Result<Doors> {
        let nofile = crate::gateway::connections::open_file_limit();
        let connection_cap = crate::gateway::connections::connection_cap(limits.max_connections, nofile);
        if limits.max_connections.is_some_and(|c| c > connection_cap) {
            tracing::warn!(
                configured = limits.max_connections,
                cap = connection_cap,
                open_file_limit = nofile,
                "limits.max_connections is above half the open-file limit: capped"
            );
        }
        Ok(Doors {
            connections: Arc::default(),
            conn_table: Arc::new(crate::gateway::connections::ConnTable::new(
                connection_cap,
                limits.unauthenticated_connection_share,
            )),
            connection_cap,
            streams: Arc::default(),
            http: http_builder(limits),
            http1: {
                let mut b = hyper::server::conn::http1::Builder::new();
                http1_settings!(b, limits);
                // The head's size, checked on the parsed head: `max_buf_size` alone is only
                // checked while a head is incomplete, and one read may bring more than it
                // (the read buffer grows past it), so a 70 KiB head that arrived at once got
                // through. hyper-util's auto builder has no such setting; it serves no TLS
                // connection (a client without ALPN gets this builder too).
                b.max_header_size(limits.max_head_bytes);
                b
            },
            http2: {
                let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                http2_settings!(b, limits);
                b
            },
            workers: crate::support::workers::Workers::start()?,
            ports: std::sync::OnceLock::new(),
            listening: std::sync::OnceLock::new(),
            certs,
            acme_wake: tokio::sync::Notify::new(),
            http01: Default::default(),
            hook_bodies: crate::support::byte_budget::ByteBudget::new(
                limits.hook_body_bytes,
                limits.hook_body_bytes_per_ip,
            ),
        })
    }
}

impl Browser {
    /// The browser flows' records live in the store, so any gateway on it can finish a flow.
    fn new(
        sessions: crate::auth::sessions::WebSessions,
        push: Arc<crate::notify::push::Pusher>,
        store: &Arc<dyn crate::store::Store>,
        limits: &Limits,
        digest_key: [u8; 32],
    ) -> Browser {
        Browser {
            sessions,
            handoffs: crate::auth::handoff::Handoffs::new(store.clone(), limits.handoff_ttl),
            sso: crate::oidc::flows::Sso::new(store.clone()),
            pairing: crate::auth::pairing::Pairing::new(store.clone(), digest_key),
            tickets: Tickets::new(store.clone(), digest_key),
            compressed: Default::default(),
            push,
            passkeys: crate::auth::passkeys::Passkeys::new(store.clone(), digest_key),
        }
    }
}

impl Gateway {
    pub(crate) fn new(
        settings: Settings,
        certs: Arc<crate::gateway::certs::CertStore>,
        tls: Arc<rustls::ServerConfig>,
    ) -> anyhow::Result<Arc<Gateway>> {
        let limits = settings.limits.clone();
        let shutdown = CancellationToken::new();
        let metrics = Metrics::new();
        let audit = open_audit(&settings)?;
        let supervisor = Supervisor::new(
            limits.upstream_connect_timeout,
            shutdown.child_token(),
            metrics.upstream_restarts.clone(),
            audit.clone(),
        );
        let store = crate::store::open_for(&settings)?;
        let digest_key = crate::auth::tokens::digest_key(&settings, &*store)?;
        let tokens = crate::auth::tokens::Tokens::new(store.clone(), digest_key);
        let web = crate::auth::sessions::WebSessions::new(store.clone(), digest_key);
        let boxes = crate::upstream::box_links::BoxLinks::default();
        let state_dir = settings.server.state_dir.clone();
        let state = State::build(settings, tls, &supervisor, &boxes, &metrics)?;
        end_sessions_of_new_passwords(&web, &audit, &state);
        let state = Arc::new(ArcSwap::from_pointee(state));
        let meter = Arc::new(crate::budget::Meter::default());
        janitor::restore_spend(&meter, &*store);
        let inbox = Arc::new(crate::inbox::Inbox::new(inbox::parts(
            &state,
            limits.upstream_connect_timeout,
            &shutdown,
            &audit,
            &meter,
        )));
        let push = Arc::new(crate::notify::push::Pusher::new(
            store.clone(),
            Arc::new(inbox::PushAudience(state.clone())),
            &state_dir,
        ));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(Arc::new(Gateway {
            state,
            swapping: std::sync::Mutex::new(()),
            auth: Auth {
                cache: AuthCache::new(limits.auth_cache_entries, limits.auth_cache_ttl),
                verifier: Verifier::new(cores),
                limiters: Limiters::new(&limits).sharing(&store),
                tokens,
            },
            doors: Doors::new(&limits, certs)?,
            browser: Browser::new(web, push, &store, &limits, digest_key),
            lifecycle: Lifecycle {
                supervisor,
                boxes,
                shutdown,
                abort: CancellationToken::new(),
                tasks: TaskTracker::new(),
                acceptance: Default::default(),
                box_sets: Default::default(),
            },
            inbox,
            meter,
            metrics,
            audit,
            limits,
        }))
    }

    /// The current state: one atomic load and reference count, no lock.
    pub(crate) fn state(&self) -> Arc<State> {
        self.state.load_full()
    }

    /// Build the new state completely, then swap it in. On any error the old state keeps serving.
    pub(crate) fn reload(&self, settings: Settings) -> anyhow::Result<()> {
        let _swapping = self.swapping.lock().unwrap_or_else(|e| e.into_inner());
        // The pair is read and checked first: a broken one refuses the whole reload. The TLS
        // configuration stays (its resolver serves whatever the store holds), and so do its
        // session tickets.
        // With ACME the ACME task owns the pair: it is woken to order the reloaded names.
        let pair = match settings.tls.acme {
            None => Some(crate::gateway::certs::load_pair(&settings.tls.cert, &settings.tls.key)?),
            Some(_) => None,
        };
        let tls_settings = settings.tls.clone();
        let old = self.state();
        let changes = crate::audit::diff::changes(&old.settings, &settings);
        drop(old);
        self.swap(settings, self.state().tls.clone())?;
        match pair {
            Some(pair) => self.doors.certs.replace_from_files(&tls_settings, pair),
            None => self.doors.acme_wake.notify_one(),
        }
        self.metrics.reloads.inc();
        self.audit.record(changes.into_record());
        Ok(())
    }

    /// Read the project sets' folders again; when the matches changed, swap in a state with the
    /// projects found (the TLS configuration and everything else stay). Returns the project names
    /// added and removed, if any, and the folders refused now (for the caller to log once).
    pub(crate) fn rediscover(&self) -> anyhow::Result<Rediscovered> {
        let _swapping = self.swapping.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.state();
        if old.settings.project_sets.is_empty() {
            return Ok(Rediscovered::default());
        }
        let listed = self.lifecycle.box_sets.snapshot();
        let (settings, warnings) = crate::config::discover::refresh(&old.settings, &listed);
        let Some(settings) = settings else {
            return Ok(Rediscovered {
                changed: None,
                refused: warnings,
            });
        };
        let names = |s: &Settings| -> Vec<String> {
            s.projects
                .iter()
                .filter(|p| p.set.is_some())
                .map(|p| p.name.clone())
                .collect()
        };
        let (before, after) = (names(&old.settings), names(&settings));
        let added = after.iter().filter(|n| !before.contains(n)).cloned().collect();
        let removed = before.iter().filter(|n| !after.contains(n)).cloned().collect();
        self.swap(settings, old.tls.clone())?;
        Ok(Rediscovered {
            changed: Some((added, removed)),
            refused: warnings,
        })
    }

    fn swap(&self, settings: Settings, tls: Arc<rustls::ServerConfig>) -> anyhow::Result<()> {
        // What this swap cannot apply (listeners, limits, …) the reload names: `restart_needed`.
        let old = self.state();
        let state = State::build(
            settings,
            tls,
            &self.lifecycle.supervisor,
            &self.lifecycle.boxes,
            &self.metrics,
        )?;
        // An external server at the same address keeps what it said until it is read again.
        for (name, p) in &state.projects {
            if let (Upstream::Fixed(new), Some(Upstream::Fixed(old))) =
                (&p.upstream, old.projects.get(name).map(|o| &o.upstream))
                && new.authority == old.authority
            {
                new.api.store(old.api.load_full());
            }
        }
        // Verified credentials of users who were removed or got a new hash can never match again;
        // drop them now rather than waiting for eviction.
        self.auth.cache.retain_users(|name| {
            matches!((old.users.get(name), state.users.get(name)), (Some(a), Some(b)) if a.fingerprint == b.fingerprint)
        });
        end_sessions_of_new_passwords(&self.browser.sessions, &self.audit, &state);
        self.state.store(Arc::new(state));
        Ok(())
    }

    /// Warn about external upstreams that answer without a password: on a shared machine any
    /// local user could then use them directly, around the gateway. And read each one's version
    /// and API document (with the gateway's credential) into its endpoint.
    pub(crate) fn probe_external_upstreams(self: &Arc<Self>) {
        let state = self.state();
        for p in state.projects.values() {
            let crate::gateway::state::Upstream::Fixed(endpoint) = &p.upstream else {
                continue;
            };
            let (connect, name, authority) = (
                self.limits.upstream_connect_timeout,
                p.name.clone(),
                endpoint.authority.clone(),
            );
            let endpoint = endpoint.clone();
            tokio::spawn(async move {
                endpoint
                    .ensure_api(connect, &name, crate::upstream::api::FETCH_TIMEOUT * 2)
                    .await;
                // Its own dialect's health endpoint, or each one's while its version is unknown.
                let dialects = match endpoint.api.load().as_ref() {
                    Some(api) => vec![api.dialect],
                    None => crate::policy::dialect::ALL.to_vec(),
                };
                let open_door = endpoint.without_credential();
                let mut open = false;
                for d in dialects {
                    open |= crate::upstream::supervise::health(&open_door, d, connect).await.is_ok();
                }
                if open {
                    tracing::warn!(target: "security", project = %name, upstream = %authority, reason = "upstream_without_password",
                        "the project's OpenCode server answers without a password: any local user can use it directly; start it with OPENCODE_SERVER_PASSWORD and set upstream_password_env");
                }
            });
        }
    }

    /// Prometheus metrics: OpenMetrics text when `openmetrics`, else the classic text format.
    pub(crate) fn render_metrics(&self, openmetrics: bool) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; an encoding error would be a bug in a metric's labels.
        let _ = self.metrics.encode(&mut out);
        let _ = snapshot::encode(self, &mut out);
        if openmetrics {
            let _ = prometheus_client::encoding::text::encode_eof(&mut out);
            out
        } else {
            crate::metrics::classic::from_openmetrics(&out)
        }
    }
}

// hyper's builders and the auto builder's halves have the same methods but different types.
macro_rules! http1_settings {
    ($b:expr, $limits:expr) => {{
        let limits: &Limits = $limits;
        // No hyper header-read timer: it arms, boxes and cancels a timer on every request of a
        // keep-alive connection. The connection's idle watcher (`http::serve_connection`) bounds
        // the same thing, a head (or the next request of an idle connection) that does not come
        // within `request_head_timeout`, with one periodic timer per connection. `None` turns
        // off hyper's 30 s default.
        $b.timer(TokioTimer::new())
            .header_read_timeout(None)
            .max_buf_size(limits.max_head_bytes.max(8192))
            .keep_alive(true);
        // hyper parses into an inline array of 100 headers unless told otherwise; any explicit
        // limit, even 100, makes it build that array element by element on every request.
        if limits.max_headers != 100 {
            $b.max_headers(limits.max_headers);
        }
    }};
}

macro_rules! http2_settings {
    ($b:expr, $limits:expr) => {{
        let limits: &Limits = $limits;
        $b.timer(TokioTimer::new())
            .max_header_list_size(limits.max_head_bytes as u32)
            // A peer that stops answering pings is dropped; an idle one that answers is closed by
            // the connection's idle watcher (front/connection.rs).
            .keep_alive_interval(Some(std::time::Duration::from_secs(30)))
            .keep_alive_timeout(std::time::Duration::from_secs(20))
            .max_concurrent_streams(256);
    }};
}
use {http1_settings, http2_settings};

/// One HTTP server configuration for every connection, whatever its transport.
fn http_builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    http1_settings!(b.http1(), limits);
    http2_settings!(b.http2(), limits);
    b
}

/// A changed password ends the browser logins made under the old one (not paired devices, not
/// API tokens: neither was made from the password). Logged and audited per user.
fn end_sessions_of_new_passwords(web: &crate::auth::sessions::WebSessions, audit: &crate::audit::Audit, state: &State) {
    for (user, n) in web.passwords_are(&state.users) {
        tracing::warn!(target: "security", user = %user, sessions = n, reason = "password_changed", "a user's password changed: their browser logins ended");
        audit.record(
            crate::audit::Record::new("sessions_ended")
                .user(&*user)
                .field("reason", "password_changed")
                .field("sessions", n as u64),
        );
    }
}
