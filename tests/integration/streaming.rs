//! Long-lived traffic through the gateway against the fake upstream: server-sent events arrive as
//! they are written, WebSockets are spliced both ways, and the PTY ticket flow authenticates.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::client::{Https, basic, read, read_raw_until, read_until};
use crate::common::fake_upstream::serve;
use crate::common::gateway::{ALICE, Gateway, base_config, external_project, users_toml};
use crate::common::stack::{UPSTREAM_PW, two_projects};

fn alice() -> String {
    basic("alice", "alice-password-1")
}

#[tokio::test]
async fn an_sse_event_reaches_the_client_while_the_upstream_stream_stays_open() {
    let (gw, web, _api, c) = two_projects("").await;
    let resp = c
        .send(
            c.request("GET", "/p/web/global/event", Some(&alice()))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let first = read_until(&mut body, Duration::from_secs(10), |t| t.contains("server.connected")).await;
    assert!(first.contains("server.connected"), "{first}");
    web.wait_subscribers(1).await;
    for i in 0..3 {
        web.events.send(format!("{{\"type\":\"tick\",\"n\":{i}}}")).unwrap();
        let got = read_until(&mut body, Duration::from_secs(5), |t| t.contains(&format!("\"n\":{i}"))).await;
        assert!(
            got.contains(&format!("\"n\":{i}")),
            "event {i} did not arrive while the stream is open: {got:?}"
        );
    }
    assert_eq!(gw.metric("streams_open"), 1);
    drop(body);
    // The stream's access line is written when it ends, with the bytes it carried.
    assert!(gw.wait_log("path=/p/web/global/event", Duration::from_secs(5)).await);
}

async fn websocket(
    c: &Https,
    path: &str,
    auth: Option<&str>,
    origin: Option<&str>,
) -> Result<tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>, u16> {
    let mut req = format!("wss://{}{path}", c.authority()).into_client_request().unwrap();
    if let Some(a) = auth {
        req.headers_mut().insert("authorization", a.parse().unwrap());
    }
    if let Some(o) = origin {
        req.headers_mut().insert("origin", o.parse().unwrap());
    }
    match tokio_tungstenite::client_async(req, c.tls().await).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("websocket failed: {e}"),
    }
}

#[tokio::test]
async fn a_websocket_is_spliced_both_ways() {
    let (gw, _web, _api, c) = two_projects("").await;
    let own = format!("https://{}", c.authority());
    let mut ws = websocket(&c, "/p/web/pty/pty_1/connect?cursor=0", Some(&alice()), Some(&own))
        .await
        .unwrap();
    for i in 0..5 {
        ws.send(Message::text(format!("marker-{i}"))).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(got.into_text().unwrap().as_str(), format!("echo:marker-{i}"));
    }
    assert_eq!(gw.metric("streams_open"), 1, "a terminal holds a stream slot");
    ws.close(None).await.unwrap();
}

#[tokio::test]
async fn a_websocket_from_a_foreign_origin_is_refused() {
    let (_gw, web, _api, c) = two_projects("").await;
    let err = websocket(
        &c,
        "/p/web/pty/pty_1/connect",
        Some(&alice()),
        Some("https://evil.example"),
    )
    .await
    .err();
    assert_eq!(err, Some(403));
    assert!(web.seen().is_empty(), "the upgrade never reached the upstream");
}

#[tokio::test]
async fn a_pty_ticket_opens_one_websocket_for_its_user_and_project() {
    let (_gw, web, _api, c) = two_projects("").await;
    let own = format!("https://{}", c.authority());
    // Without credentials or a ticket: refused.
    assert_eq!(
        websocket(&c, "/p/web/pty/pty_1/connect", None, Some(&own)).await.err(),
        Some(401)
    );
    let req = c
        .request("POST", "/p/web/pty/pty_1/connect-token", Some(&alice()))
        .header("x-opencode-ticket", "1")
        .header("origin", &own)
        .body(Full::default())
        .unwrap();
    let r = read(c.send(req).await).await;
    assert_eq!(r.status, 200);
    let ticket = serde_json::from_str::<serde_json::Value>(&r.body).unwrap()["ticket"]
        .as_str()
        .unwrap()
        .to_string();
    // A ticket is for its project only, and only for the terminal it connects: presented
    // anywhere else it authenticates nothing (and is not used up).
    for elsewhere in [
        format!("/p/api/pty/pty_1/connect?ticket={ticket}"),
        format!("/p/web/session?ticket={ticket}"),
        format!("/p/web/pty/pty_1?ticket={ticket}"),
    ] {
        assert_eq!(
            websocket(&c, &elsewhere, None, Some(&own)).await.err(),
            Some(401),
            "{elsewhere}"
        );
    }
    // Refused for a foreign origin: not used up either.
    let path = format!("/p/web/pty/pty_1/connect?ticket={ticket}");
    assert_eq!(
        websocket(&c, &path, None, Some("https://evil.example")).await.err(),
        Some(403)
    );
    let mut ws = websocket(&c, &path, None, Some(&own))
        .await
        .expect("the ticket authenticates the WebSocket");
    ws.send(Message::text("hi")).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got.into_text().unwrap().as_str(), "echo:hi");
    assert_eq!(
        websocket(&c, &path, None, Some(&own)).await.err(),
        Some(401),
        "a ticket is used once"
    );
    let upgraded = web.seen().into_iter().filter(|s| s.target.contains("ticket=")).count();
    assert_eq!(upgraded, 1);
}

/// An HTTP/1.1 connection after an event stream on it (vendor/hyper's patch lets the connection
/// give back its read buffer and the request's future while an answer of unknown length streams,
/// and take them again): a request sent during the stream (pipelined) is read through the small
/// watching read, held, and answered once the stream ends, then the connection serves the next.
#[tokio::test]
async fn an_http1_connection_serves_requests_sent_during_and_after_an_event_stream() {
    let end = Arc::new(tokio::sync::Notify::new());
    let ending = end.clone();
    let (addr, _task) = serve(move |req: Request<Incoming>| {
        let ending = ending.clone();
        async move { Ok::<_, Infallible>(ends_when_told(req.uri().path(), ending)) }
    })
    .await;
    let config = base_config(&format!(
        "{}{}",
        external_project("web", &format!("http://{addr}")),
        users_toml(&[ALICE])
    ));
    let gw = Gateway::start_behind(&config, UPSTREAM_PW);
    let c = Https::new(gw.https, &gw.ca());
    let mut tls = c.tls().await;
    let get = |path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nhost: {}\r\nauthorization: {}\r\n\r\n",
            c.authority(),
            alice()
        )
    };
    let mut seen = String::new();
    tls.write_all(get("/p/web/global/event").as_bytes()).await.unwrap();
    read_raw_until(&mut tls, &mut seen, |s| s.contains("server.connected")).await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(seen.contains("transfer-encoding: chunked"), "{seen}");
    // Pipelined while the stream is open: not answered before the stream's end.
    tls.write_all(get("/p/web/global/health").as_bytes()).await.unwrap();
    end.notify_one();
    read_raw_until(&mut tls, &mut seen, |s| {
        s.matches("HTTP/1.1 200").count() == 2 && s.ends_with("healthy")
    })
    .await;
    let (stream, health) = seen
        .split_once("0\r\n\r\nHTTP/1.1 200")
        .expect("the stream's last chunk, then the answer");
    assert!(
        stream.contains("last-event"),
        "the stream ended with its last event: {stream}"
    );
    assert!(health.contains("content-length: 7"), "{health}");
    // And the next request on the same connection.
    seen.clear();
    tls.write_all(get("/p/web/global/health").as_bytes()).await.unwrap();
    read_raw_until(&mut tls, &mut seen, |s| s.ends_with("healthy")).await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
}

/// The upstream for the test above: `/global/event` sends one event, waits for `end`, sends a
/// last one and ends; anything else is a small answer.
fn ends_when_told(path: &str, end: Arc<tokio::sync::Notify>) -> Response<BoxBody<Bytes, Infallible>> {
    if path != "/global/event" {
        return Response::new(Full::new(Bytes::from_static(b"healthy")).boxed());
    }
    let events = futures_util::stream::unfold(0, move |step| {
        let end = end.clone();
        async move {
            let event = match step {
                0 => "data: {\"type\":\"server.connected\"}\n\n",
                1 => {
                    end.notified().await;
                    "data: {\"type\":\"last-event\"}\n\n"
                }
                _ => return None,
            };
            Some((Ok::<_, Infallible>(Frame::data(Bytes::from(event))), step + 1))
        }
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(events)));
    r.headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    r
}
