//! The loopback admin listener: read-only `GET /healthz` and `GET /metrics` (Prometheus; no user
//! names or directories in labels). It has its own small connection table and timeouts, so it
//! never takes the slots HTTPS and SSH clients need, and it answers only requests whose `Host` is a
//! loopback name or address with its own port (a web page that rebinds a DNS name to 127.0.0.1
//! gets 421). What changes or describes the gateway (reload, status) is on the control socket
//! (`front/control.rs`), which only the gateway's own OS user can open.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::gateway::Gateway;

/// Admin connections open at once; more are closed at accept.
pub(crate) const MAX_CONNECTIONS: usize = 16;
/// A request head must arrive within this.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// No admin connection lives longer than this, whatever it does.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

pub(crate) async fn serve(gw: Arc<Gateway>, listener: TcpListener) {
    let Ok(local) = listener.local_addr() else {
        return;
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = Duration::from_millis(5);
    while let Some((tcp, peer)) = crate::front::listen::accept_next(&gw, &listener, "admin", &mut backoff).await {
        if !peer.ip().is_loopback() {
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(peer = %peer, "admin connection refused: its table is full");
            continue;
        };
        let gw = gw.clone();
        gw.lifecycle.tasks.clone().spawn(async move {
            let _slot = slot;
            let svc = service_fn(move |req| {
                let gw = gw.clone();
                async move { Ok::<_, Infallible>(route(&gw, local, &req)) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(tcp), svc);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
        });
    }
}

pub(crate) fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, content_type.parse().expect("static header"));
    r
}

fn route<B>(gw: &Gateway, local: SocketAddr, req: &Request<B>) -> Response<Full<Bytes>> {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok());
    if !host.is_some_and(|h| loopback_host(h, local.port())) {
        return reply(
            StatusCode::MISDIRECTED_REQUEST,
            "text/plain",
            format!(
                "host not allowed: the admin listener answers only Host localhost:{0} or a loopback address with port {0}\n",
                local.port()
            ),
        );
    }
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        (&Method::GET, "/metrics") => {
            let accept = req.headers().get(header::ACCEPT).and_then(|h| h.to_str().ok());
            if crate::metrics::classic::wants_openmetrics(accept) {
                reply(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    gw.render_metrics(true),
                )
            } else {
                reply(StatusCode::OK, "text/plain; version=0.0.4", gw.render_metrics(false))
            }
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: this listener serves GET /healthz and GET /metrics; status and reload use the control socket (opencode-gateway status | reload)\n".into(),
        ),
    }
}

/// `localhost:<port>`, `127.0.0.1:<port>`, `[::1]:<port>` and the like, with exactly our port.
pub(crate) fn loopback_host(host: &str, port: u16) -> bool {
    let Some((name, p)) = host.rsplit_once(':') else {
        return false;
    };
    if p.parse::<u16>() != Ok(port) {
        return false;
    }
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::loopback_host;

    #[test]
    fn only_loopback_hosts_with_our_port_pass() {
        for ok in [
            "localhost:9090",
            "LOCALHOST:9090",
            "127.0.0.1:9090",
            "127.1.2.3:9090",
            "[::1]:9090",
        ] {
            assert!(loopback_host(ok, 9090), "{ok}");
        }
        for bad in [
            "localhost",
            "localhost:9091",
            "evil.example:9090",
            "localhost.evil.example:9090",
            "10.0.0.1:9090",
            "127.0.0.1.nip.io:9090",
            "[::2]:9090",
            "",
        ] {
            assert!(!loopback_host(bad, 9090), "{bad}");
        }
    }
}
