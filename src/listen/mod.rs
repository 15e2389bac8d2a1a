//! Accept loops. Each survives accept errors (EMFILE and friends) with a backoff, takes a per-address
//! connection slot before doing any work, and runs the TLS handshake under a timeout.

pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::gateway::Gateway;
use crate::http::{ConnInfo, Front};
use crate::ratelimit::SlotGuard;

/// Accept until shutdown, backing off on errors instead of spinning or giving up.
pub async fn accept_loop<F>(gw: Arc<Gateway>, listener: TcpListener, what: &'static str, mut on_conn: F)
where
    F: FnMut(TcpStream, SocketAddr, SlotGuard<std::net::IpAddr>),
{
    let mut backoff = Duration::from_millis(5);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = gw.shutdown.cancelled() => break,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => {
                backoff = Duration::from_millis(5);
                a
            }
            Err(e) => {
                tracing::warn!(listener = what, error = %e, backoff_ms = backoff.as_millis() as u64, "accept failed; backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
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
        let Some(slot) = gw.connections.try_acquire(ip, max) else {
            gw.metrics.connections_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "security", listener = what, peer = %peer.ip(), reason = "connection_limit", "connection refused: too many from this address");
            continue;
        };
        gw.metrics.connections.fetch_add(1, Ordering::Relaxed);
        let _ = tcp.set_nodelay(true);
        on_conn(tcp, peer, slot);
    }
}

/// HTTPS: the gateway's main listener (`bound = None`) or a project's own port.
pub async fn serve_tls(gw: Arc<Gateway>, listener: TcpListener, bound: Option<Arc<str>>) {
    let tasks = gw.tasks.clone();
    let gw2 = gw.clone();
    accept_loop(gw, listener, "https", move |tcp, peer, slot| {
        let gw = gw2.clone();
        let bound = bound.clone();
        // Served on a worker runtime (see workers.rs): the socket moves to that runtime's reactor.
        let tcp = match tcp.into_std() {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!(peer = %peer, error = %e, "accepted socket could not be handed to a worker");
                return;
            }
        };
        let worker_gw = gw.clone();
        gw.workers.spawn(tasks.track_future(async move {
            let gw = worker_gw;
            let _slot = slot;
            let Ok(tcp) = TcpStream::from_std(tcp) else {
                return;
            };
            let acceptor = TlsAcceptor::from(gw.state().tls.clone());
            let stream = match tokio::time::timeout(gw.limits.tls_handshake_timeout, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    gw.metrics.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(peer = %peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    gw.metrics.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(peer = %peer, "TLS handshake timed out");
                    return;
                }
            };
            let conn = Arc::new(ConnInfo {
                peer,
                front: Front::Tls { bound },
            });
            crate::http::serve_connection(gw, conn, stream).await;
        }));
    })
    .await;
}
