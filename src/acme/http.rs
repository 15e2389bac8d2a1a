//! `server.http_listen`: plain HTTP that answers ACME HTTP-01 challenges and redirects everything
//! else to HTTPS (308, same host and path, the public URL's port). It serves nothing else, so no
//! credential or cookie is ever asked for over plain HTTP.

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
pub async fn serve(gw: Arc<Gateway>, listener: TcpListener, https_port: u16) {
    let tasks = gw.tasks.clone();
    let gw2 = gw.clone();
    // Nothing here is ever authenticated: these connections stay in the unauthenticated share.
    let class = crate::listen::table::Class::Unauthenticated;
    crate::listen::accept_loop(gw, listener, "http", class, move |tcp, _peer, slot| {
        let gw = gw2.clone();
        tokio::spawn(tasks.track_future(async move {
            let shed = slot.place.lease().shed.clone();
            let _slot = slot;
            let svc_gw = gw.clone();
            let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let r = answer(&svc_gw, &req, https_port);
                async move { Ok::<_, std::convert::Infallible>(r) }
            });
            let conn = gw.http.serve_connection(TokioIo::new(tcp), service);
            let limit = gw.limits.request_head_timeout.saturating_mul(2);
            tokio::select! {
                _ = tokio::time::timeout(limit, conn) => {}
                _ = gw.shutdown.cancelled() => {}
                _ = shed.cancelled() => {}
            }
        }));
    })
    .await;
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
        return match gw.http01.get(token) {
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
