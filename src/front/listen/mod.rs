//! Accept loops. Each survives accept errors (EMFILE and friends) with a backoff, takes a place in
//! the connection table (`gateway/connections.rs`: unauthenticated HTTPS connections get a share of it and are
//! shed first) and a per-address connection slot before doing any work (closing the connection at
//! once when either is refused), and runs the TLS handshake under a timeout.

pub mod handshake_log;
pub(crate) mod proxied;
pub mod tls;

use crate::metrics::Refusal;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::gateway::Gateway;
use crate::http::transport::{ConnInfo, Front};
use crate::ratelimit::SlotGuard;

/// A refused connection is logged at most this often per listener (with the count since the last
/// line), so a flood cannot flood the log too.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What an accepted connection holds until it ends: its address's slot and its place in the
/// connection table.
pub(crate) struct ConnSlot {
    _address: SlotGuard<std::net::IpAddr>,
    pub place: crate::gateway::connections::LeaseGuard,
    /// The peer is in `server.trusted_proxies`: its PROXY protocol header is believed.
    pub trusted: bool,
}

/// Logs refusals at most once per [`REFUSAL_LOG_INTERVAL`], counting the ones in between.
#[derive(Default)]
struct RefusalLog {
    last: Option<Instant>,
    suppressed: u64,
}

impl RefusalLog {
    fn refused(&mut self, listener: &'static str, peer: SocketAddr, reason: &'static str) {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < REFUSAL_LOG_INTERVAL) {
            self.suppressed += 1;
            return;
        }
        tracing::warn!(target: "security", listener, peer = %peer.ip(), reason, refused_since_last_line = self.suppressed,
            "connection refused (logged at most once per 10 s)");
        self.last = Some(now);
        self.suppressed = 0;
    }
}

/// The next connection, or `None` at shutdown. Errors (EMFILE and friends) back off, doubling
/// to 1 s, instead of spinning or giving up.
pub(crate) async fn accept_next(
    gw: &Gateway,
    listener: &TcpListener,
    what: &'static str,
    backoff: &mut Duration,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = gw.lifecycle.shutdown.cancelled() => return None,
        };
        match accepted {
            Ok(a) => {
                *backoff = Duration::from_millis(5);
                return Some(a);
            }
            Err(e) => {
                tracing::warn!(listener = what, error = %e, backoff_ms = backoff.as_millis() as u64, "accept failed; backing off");
                tokio::time::sleep(*backoff).await;
                *backoff = (*backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Accept until shutdown, backing off on errors instead of spinning or giving up. A connection
/// over a cap is closed at once and the loop goes on accepting, so a full table never stops it.
/// `class` says whether the listener's connections start unauthenticated (HTTPS, plain HTTP) or
/// hold their place from the start (SSH, whose login comes before anything is served).
pub(crate) async fn accept_loop<F>(
    gw: Arc<Gateway>,
    listener: TcpListener,
    what: &'static str,
    class: crate::gateway::connections::Class,
    mut on_conn: F,
) where
    F: FnMut(TcpStream, SocketAddr, ConnSlot),
{
    let mut backoff = Duration::from_millis(5);
    let mut refusals = RefusalLog::default();
    while let Some((tcp, peer)) = accept_next(&gw, &listener, what, &mut backoff).await {
        let ip = crate::ratelimit::address_key(peer.ip());
        // A trusted proxy carries many clients on its connections: it gets no per-address cap.
        let trusted = gw
            .state()
            .settings
            .server
            .trusted_proxies
            .iter()
            .any(|c| c.contains(peer.ip()));
        let max = if trusted {
            u32::MAX
        } else {
            gw.limits.max_connections_per_ip
        };
        // The address's slot first: a connection its address may not have must not shed
        // another's on its way to being refused.
        let Some(address) = gw.doors.connections.try_acquire(ip, max) else {
            gw.metrics.refused(Refusal::ConnectionsPerAddress);
            refusals.refused(what, peer, "connection_limit");
            continue;
        };
        // A trusted proxy's connections are many people's: one of them being shed must not stop
        // the others from making room (the table's memory of shed addresses skips it).
        let place = match gw.doors.conn_table.admit((!trusted).then_some(ip), class) {
            Ok(p) => p,
            Err(crate::gateway::connections::Refused::Full) => {
                gw.metrics.refused(Refusal::Connections);
                refusals.refused(what, peer, "global_connection_limit");
                continue;
            }
            Err(crate::gateway::connections::Refused::Share) => {
                gw.metrics.refused(Refusal::UnauthenticatedConnections);
                refusals.refused(what, peer, "unauthenticated_connection_share");
                continue;
            }
        };
        gw.metrics.connections.inc();
        let _ = tcp.set_nodelay(true);
        on_conn(
            tcp,
            peer,
            ConnSlot {
                _address: address,
                place,
                trusted,
            },
        );
    }
}

/// HTTPS: the gateway's main listener (`bound = None`) or a project's own port.
pub(crate) async fn serve_tls(gw: Arc<Gateway>, listener: TcpListener, bound: Option<Arc<str>>) {
    let tasks = gw.lifecycle.tasks.clone();
    let gw2 = gw.clone();
    accept_loop(
        gw,
        listener,
        "https",
        crate::gateway::connections::Class::Unauthenticated,
        move |tcp, peer, slot| {
            let gw = gw2.clone();
            // Served on a worker runtime (see support/workers.rs): the socket moves to that runtime's reactor.
            let tcp = match tcp.into_std() {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!(peer = %peer, error = %e, "accepted socket could not be handed to a worker");
                    return;
                }
            };
            let connection = serve_tls_connection(gw.clone(), tcp, peer, slot, bound.clone());
            gw.doors.workers.spawn(tasks.track_future(connection));
        },
    )
    .await;
}

/// One HTTPS connection on its worker: who it is from, the handshake, then HTTP.
async fn serve_tls_connection(
    gw: Arc<Gateway>,
    tcp: std::net::TcpStream,
    peer: SocketAddr,
    slot: ConnSlot,
    bound: Option<Arc<str>>,
) {
    let lease = slot.place.lease().clone();
    let trusted = slot.trusted;
    let _slot = slot;
    let Ok(mut tcp) = TcpStream::from_std(tcp) else {
        return;
    };
    // One deadline for the first bytes (a load balancer's PROXY header) and the handshake.
    let deadline = tokio::time::Instant::now() + gw.limits.tls_handshake_timeout;
    let client = tokio::select! {
        c = proxied::client_of(&mut tcp, peer, trusted, deadline) => c,
        _ = lease.shed.cancelled() => return,
    };
    let Some((peer, _client_slot)) = admit_client(&gw, peer, trusted, client) else {
        return;
    };
    let acceptor = TlsAcceptor::from(gw.state().tls.clone());
    // Boxed, and freed once done: inline, rustls' connection mid-handshake would size this
    // task, which then lives as long as the connection (1.4 KiB more for each).
    let handshake = Box::pin(tokio::time::timeout_at(deadline, acceptor.accept(tcp)));
    // Shed (the table needed its place) before the handshake ended: close.
    let handshake = tokio::select! {
        r = handshake => r,
        _ = lease.shed.cancelled() => return,
    };
    let stream = match handshake {
        Ok(Ok(s)) => {
            gw.metrics.tls_handshake(true);
            s
        }
        Ok(Err(e)) => {
            gw.metrics.tls_handshake(false);
            handshake_log::failed(peer, &e.to_string());
            return;
        }
        Err(_) => {
            gw.metrics.tls_handshake(false);
            handshake_log::failed(peer, "no handshake within tls_handshake_timeout");
            return;
        }
    };
    // A TLS-ALPN-01 validation only needs the handshake (RFC 8737): nothing is served.
    if stream.get_ref().1.alpn_protocol() == Some(crate::gateway::certs::ACME_TLS_ALPN) {
        return;
    }
    // A project removed by a reload keeps its port until a restart (listeners are not
    // re-bound): new connections there get a plain 404 saying so.
    let alpn = crate::front::connection::Alpn::from_tls(stream.get_ref().1.alpn_protocol());
    if let Some(name) = bound.as_deref().filter(|n| !gw.state().projects.contains_key(*n)) {
        // Boxed: inline, this rare path's connection would size the task of every
        // connection served here.
        Box::pin(crate::front::connection::serve_gone(
            gw.clone(),
            name.into(),
            stream,
            alpn,
        ))
        .await;
        return;
    }
    let conn = ConnInfo::with_lease(peer, Front::Tls { bound }, lease);
    crate::front::connection::serve_connection(gw, conn, stream, Some(alpn)).await;
}

/// The client a connection is from (its peer, or the one a trusted balancer's header names),
/// with that client's own connection slot when a balancer carried it; `None`: closed, said in
/// the log. A balancer's client is counted by the address its header names: the balancer itself
/// has no cap (it carries everyone), its clients have the usual one.
fn admit_client(
    gw: &Gateway,
    proxy: SocketAddr,
    trusted: bool,
    client: Result<SocketAddr, proxied::Reason>,
) -> Option<(SocketAddr, Option<SlotGuard<std::net::IpAddr>>)> {
    let client = match client {
        Ok(client) => client,
        Err(reason) => {
            gw.metrics.tls_handshake(false);
            match reason {
                proxied::NOTHING_IN_TIME => handshake_log::failed(proxy, "no handshake within tls_handshake_timeout"),
                proxied::CLOSED => handshake_log::failed(proxy, "closed before the handshake"),
                _ => handshake_log::refused(proxy, reason),
            }
            return None;
        }
    };
    if !trusted || client.ip() == proxy.ip() {
        return Some((client, None));
    }
    let key = crate::ratelimit::address_key(client.ip());
    match gw.doors.connections.try_acquire(key, gw.limits.max_connections_per_ip) {
        Some(slot) => Some((client, Some(slot))),
        None => {
            gw.metrics.refused(Refusal::ConnectionsPerAddress);
            handshake_log::over_cap(client);
            None
        }
    }
}
