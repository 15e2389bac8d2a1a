//! A fast stand-in for an OpenCode server, so the benchmark measures the proxies, not OpenCode:
//! `GET /global/health` answers like OpenCode; `GET /event` is an SSE stream that starts with
//! `server.connected` and then sends `{"t":<unix ns>}` every `interval_ms` (query, default 10 000,
//! OpenCode's heartbeat). Usage: upstream <port>
use std::convert::Infallible;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

const HEALTH: &[u8] = br#"{"healthy":true,"version":"1.18.33"}"#;

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

async fn handle(req: Request<Incoming>) -> Result<Response<BoxBody<Bytes, Infallible>>, Infallible> {
    if req.uri().path().ends_with("/event") {
        let interval = req
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("interval_ms=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000u64);
        let first = futures_util::stream::once(async {
            Ok::<_, Infallible>(Frame::data(Bytes::from_static(
                b"data: {\"type\":\"server.connected\"}\n\n",
            )))
        });
        let ticks = futures_util::stream::unfold(
            tokio::time::interval(Duration::from_millis(interval)),
            |mut tick| async move {
                tick.tick().await;
                Some((
                    Ok(Frame::data(Bytes::from(format!("data: {{\"t\":{}}}\n\n", now_ns())))),
                    tick,
                ))
            },
        );
        let mut r = Response::new(BodyExt::boxed(StreamBody::new(futures_util::StreamExt::chain(
            first,
            futures_util::StreamExt::skip(ticks, 1),
        ))));
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        return Ok(r);
    }
    let mut r = Response::new(Full::new(Bytes::from_static(HEALTH)).boxed());
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    Ok(r)
}

#[tokio::main]
async fn main() {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(4096);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    println!(
        "upstream listening on 127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service_fn(handle))
                .await;
        });
    }
}
