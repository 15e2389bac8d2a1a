//! `server.http_listen`: plain HTTP that answers ACME HTTP-01 challenges and redirects everything
//! else to HTTPS (308, same host and path, the public URL's port). It serves nothing else, so no
//! credential or cookie is ever asked for over plain HTTP. A TLS hello sent here is held
//! unanswered (`hold`): the offline page's probe.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::gateway::Gateway;

const CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// `https_port`: the bound HTTPS port, for a `public_url` that says port 0.
pub(crate) async fn serve(gw: Arc<Gateway>, listener: TcpListener, https_port: u16) {
    let tasks = gw.lifecycle.tasks.clone();
    let gw2 = gw.clone();
    // Nothing here is ever authenticated: these connections stay in the unauthenticated share.
    let class = crate::gateway::connections::Class::Unauthenticated;
    crate::front::listen::accept_loop(gw, listener, "http", class, move |tcp, _peer, slot| {
        let gw = gw2.clone();
        tokio::spawn(tasks.track_future(async move {
            let shed = slot.place.lease().shed.clone();
            let _slot = slot;
            if tls_hello(&tcp, &gw).await {
                hold(tcp, &gw, &shed).await;
                return;
            }
            let svc_gw = gw.clone();
            let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let r = answer(&svc_gw, &req, https_port);
                async move { Ok::<_, std::convert::Infallible>(r) }
            });
            let conn = gw.doors.http.serve_connection(TokioIo::new(tcp), service);
            let limit = gw.limits.request_head_timeout.saturating_mul(2);
            tokio::select! {
                _ = tokio::time::timeout(limit, conn) => {}
                _ = gw.lifecycle.shutdown.cancelled() => {}
                _ = shed.cancelled() => {}
            }
        }));
    })
    .await;
}

/// Does the connection open with a TLS record (a browser speaking HTTPS to this plain port)?
async fn tls_hello(tcp: &tokio::net::TcpStream, gw: &Gateway) -> bool {
    let mut first = [0u8; 1];
    let peek = tokio::time::timeout(gw.limits.request_head_timeout, tcp.peek(&mut first)).await;
    matches!(peek, Ok(Ok(1))) && first[0] == 0x16
}

/// A TLS hello here is held unanswered until the client gives up (at most [`HOLD`]). That is the
/// one signal an HTTPS page can read from this port: the control room's offline page, whose
/// secure connection failed at once, asks here; a refusal at once means nothing of the gateway
/// runs on this host, a hang means it runs and the secure connection failed for another reason
/// (most likely this device no longer trusts its certificate). A plain-HTTP answer would fail the
/// handshake at once, like a refusal. Nothing is read or answered, and the connection holds an
/// unauthenticated slot like any other.
async fn hold(mut tcp: tokio::net::TcpStream, gw: &Gateway, shed: &tokio_util::sync::CancellationToken) {
    use tokio::io::AsyncReadExt;
    let mut sink = [0u8; 512];
    let drain = async { while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {} };
    tokio::select! {
        _ = tokio::time::timeout(HOLD, drain) => {}
        _ = gw.lifecycle.shutdown.cancelled() => {}
        _ = shed.cancelled() => {}
    }
}

/// How long a TLS hello on the plain-HTTP port is held.
const HOLD: std::time::Duration = std::time::Duration::from_secs(10);

/// `/ca`, `/ca.crt`, `/ca.mobileconfig` when the gateway made its own dev CA (`web/ca_page.rs`).
fn dev_ca(gw: &Gateway, path: &str, https_port: u16, headers: &http::HeaderMap) -> Option<Response<Full<Bytes>>> {
    if !matches!(path, "/ca" | "/ca/" | "/ca.crt" | "/ca.mobileconfig") {
        return None;
    }
    let state = gw.state();
    if !state.settings.tls.dev_ca {
        return Some(plain(
            StatusCode::NOT_FOUND,
            "this gateway has no development CA (tls.dev_ca is off)\n",
        ));
    }
    let ca = crate::config::protected::DevCertPaths::beside(&state.settings.tls.cert, &state.settings.tls.key).ca_cert;
    let Some(der) = std::fs::read_to_string(&ca)
        .ok()
        .and_then(|p| crate::web::ca_page::der_from_pem(&p))
    else {
        return Some(plain(
            StatusCode::NOT_FOUND,
            "the development CA is missing; start the gateway again to make it\n",
        ));
    };
    let fp = crate::web::ca_page::fingerprint(&der);
    let (body, kind): (Bytes, &'static str) = match path {
        "/ca.crt" => (Bytes::from(der), "application/x-x509-ca-cert"),
        "/ca.mobileconfig" => (
            Bytes::from(crate::web::ca_page::mobileconfig(&der, &fp)),
            "application/x-apple-aspen-config",
        ),
        _ => {
            // Next: the same host name on the HTTPS port (the name the phone already reached).
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(crate::policy::route::strip_port)
                .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b)));
            let reach = crate::reach::Reach::new(&state.settings, Some(https_port));
            let next = match host {
                Some(h) => format!(
                    "https://{h}{}/",
                    if reach.port() == 443 {
                        String::new()
                    } else {
                        format!(":{}", reach.port())
                    }
                ),
                None => format!("{}/", reach.base()),
            };
            (
                Bytes::from(crate::web::ca_page::page(
                    &crate::web::ca_page::name_of(&der),
                    &fp,
                    &next,
                )),
                "text/html; charset=utf-8",
            )
        }
    };
    let mut r = Response::new(Full::new(body));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if path == "/ca.crt" {
        h.insert(
            header::CONTENT_DISPOSITION,
            HeaderValue::from_static("attachment; filename=\"opencode-gateway-dev-ca.crt\""),
        );
    }
    Some(r)
}

fn plain(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

fn answer<B>(gw: &Gateway, req: &http::Request<B>, https_port: u16) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if let Some(token) = path.strip_prefix(CHALLENGE_PREFIX) {
        return match gw.doors.http01.get(token) {
            Some(key_auth) => {
                let mut r = Response::new(Full::new(Bytes::from(key_auth)));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                r
            }
            None => plain(StatusCode::NOT_FOUND, "no such ACME challenge\n"),
        };
    }
    if let Some(r) = dev_ca(gw, path, https_port, req.headers()) {
        return r;
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().host());
    // The host without its port; only host-name characters (anything else is not redirected).
    let host = host.map(|h| match h.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(h, |(addr, _)| &h[..addr.len() + 2]),
        None => h.split(':').next().unwrap_or(h),
    });
    let Some(host) =
        host.filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b)))
    else {
        return plain(
            StatusCode::BAD_REQUEST,
            "a Host header is needed to redirect to HTTPS\n",
        );
    };
    let port = crate::reach::Reach::new(&gw.state().settings, Some(https_port)).port();
    let port = if port == 443 { String::new() } else { format!(":{port}") };
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let location = format!("https://{host}{port}{target}");
    let mut r = plain(StatusCode::PERMANENT_REDIRECT, "use HTTPS\n");
    match HeaderValue::from_str(&location) {
        Ok(v) => {
            r.headers_mut().insert(header::LOCATION, v);
            r
        }
        Err(_) => plain(StatusCode::BAD_REQUEST, "cannot redirect this request\n"),
    }
}
