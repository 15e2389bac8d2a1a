//! A reload and a certificate change under load (issue 21): nothing open is dropped. A request in
//! flight keeps the state it took (an event stream, a terminal); the next request, on any
//! connection, takes the new one; an open connection keeps the certificate it was made with,
//! and a new one gets the new certificate.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::SinkExt;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_tungstenite::tungstenite::Message;

use crate::common::client::{Https, basic, pty_socket, read, read_terminal_until, read_until, try_read_until};
use crate::common::gateway::Gateway;

const PW: &str = "faults-reload-upstream-pw";
const STREAMS: usize = 1000;
const TERMINALS: usize = 50;
/// Event streams on the one h2 connection (a browser's: its event stream and its requests
/// share one connection).
const H2_STREAMS: usize = 20;

fn alice() -> String {
    basic("alice", "alice-password-1")
}

fn carol() -> String {
    basic("carol", "carol-password-1")
}

/// The config, with carol (a viewer of `web`) or without.
fn config(web: &str, with_carol: bool) -> String {
    let mut users = vec![crate::common::gateway::ALICE];
    if with_carol {
        users.push(crate::common::gateway::TestUser {
            name: "carol",
            password: "carol-password-1",
            projects: "[\"web\"]",
            role: "viewer",
        });
    }
    crate::common::gateway::base_config(&format!(
        "[limits]\nmax_streams_per_user = 2000\nmax_connections_per_ip = 4000\nrequests_per_second = 10000\nburst = 10000\n\n{}{}",
        crate::common::gateway::external_project("web", web),
        crate::common::gateway::users_toml(&users)
    ))
}

/// A reload (a new user) and a certificate change under 1 000 open event streams (an HTTP/1.1
/// connection each), 50 open terminals and one h2 connection carrying 20 event streams: none is
/// dropped, each carries what comes after; the h2 connection keeps the certificate it was made
/// with and takes a new request, which the new state answers (the new user); a new connection
/// gets the new certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_and_a_new_certificate_under_a_thousand_streams_drop_none() {
    let web = crate::common::fake_upstream::FakeUpstream::start(PW).await;
    let gw = Gateway::start_behind(&config(&web.url(), false), PW);
    let c = Https::new(gw.https, &gw.ca());
    let opened = Instant::now();
    let mut h2 = H2Connection::open(&gw).await;
    let streams = event_streams(&c).await;
    web.wait_subscribers(STREAMS + H2_STREAMS).await;
    let mut terminals = open_terminals(&c).await;
    eprintln!(
        "{STREAMS} streams, {TERMINALS} terminals and {H2_STREAMS} streams on one h2 connection open in {:?}",
        opened.elapsed()
    );
    assert!(gw.metric("streams_open{kind=\"events\"}") >= (STREAMS + H2_STREAMS) as u64);
    let before = h2.request("/p/web/global/health", &carol()).await;
    assert_eq!(before.status, 401, "carol is not a user yet: {}", before.body);

    let first = crate::common::client::served_certificate(&c).await;
    assert_eq!(
        h2.certificate, first,
        "the h2 connection was made with the first certificate"
    );
    change_certificate_and_reload(&gw, &c, &first, &config(&web.url(), true)).await;

    // Every stream carries the next event; every terminal echoes; the h2 connection first.
    // Sent to whatever still listens (none, if the change dropped them all): what each stream
    // carried is the verdict.
    let _ = web.events.send("{\"type\":\"after-the-change\"}".into());
    let dropped = carried(std::mem::take(&mut h2.streams)).await;
    assert_eq!(
        dropped, 0,
        "streams on the h2 connection dropped by the reload or the certificate change"
    );
    let after = h2.request("/p/web/global/health", &carol()).await;
    assert_eq!(
        after.status, 200,
        "the h2 connection's next request takes the new state: {}",
        after.body
    );
    assert_eq!(h2.certificate, first, "an open connection keeps its certificate");
    let dropped = carried(streams).await;
    assert_eq!(
        dropped, 0,
        "event streams dropped by the reload or the certificate change"
    );
    for (i, ws) in terminals.iter_mut().enumerate() {
        ws.send(Message::text("after"))
            .await
            .unwrap_or_else(|e| panic!("terminal {i}: {e}"));
        assert!(
            read_terminal_until(ws, "echo:after").await.contains("echo:after"),
            "terminal {i} dropped"
        );
    }
}

/// A new certificate on disk, served to new connections (bounded wait), then a reload to `config`.
async fn change_certificate_and_reload(gw: &Gateway, c: &Https, first: &[u8], config: &str) {
    let paths = opencode_gateway::front::devcert::DevCertPaths::beside(
        &gw.dir.path().join("certs/server.crt"),
        &gw.dir.path().join("certs/server.key"),
    );
    std::fs::remove_file(&paths.cert).unwrap();
    let names = opencode_gateway::front::devcert::server_names(Some("gw.localhost"), &[]);
    assert!(
        opencode_gateway::front::devcert::ensure(&paths, &names)
            .unwrap()
            .wrote()
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while crate::common::client::served_certificate(c).await == first {
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served within 15 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gw.write_config(config);
    gw.signal(libc::SIGHUP);
    assert!(
        gw.wait_log("configuration reloaded", Duration::from_secs(10)).await,
        "{}",
        gw.logs()
    );
    assert_eq!(c.get("/p/web/global/health", Some(&carol())).await.status, 200);
}

/// How many of `streams` did not carry the event sent after the change (ended, or nothing within
/// 30 s; each read in its own task).
async fn carried(streams: Vec<Incoming>) -> usize {
    let reading: Vec<_> = streams
        .into_iter()
        .map(|mut body| {
            tokio::spawn(async move {
                try_read_until(&mut body, Duration::from_secs(30), |t| t.contains("after-the-change"))
                    .await
                    .is_ok()
            })
        })
        .collect();
    let mut dropped = 0;
    for r in reading {
        dropped += usize::from(!r.await.unwrap());
    }
    dropped
}

/// `STREAMS` event streams, an HTTP/1.1 connection each, opened 50 at a time, each past its
/// first event.
async fn event_streams(c: &Https) -> Vec<Incoming> {
    let mut streams = Vec::with_capacity(STREAMS);
    for batch in 0..STREAMS / 50 {
        let mut opening = Vec::new();
        for _ in 0..50 {
            let c = c.clone();
            opening.push(tokio::spawn(async move {
                let resp = c
                    .send(
                        c.request("GET", "/p/web/global/event", Some(&alice()))
                            .body(Full::default())
                            .unwrap(),
                    )
                    .await;
                assert_eq!(resp.status(), 200);
                let mut body = resp.into_body();
                read_until(&mut body, Duration::from_secs(20), |t| t.contains("server.connected")).await;
                body
            }));
        }
        for o in opening {
            streams.push(o.await.unwrap_or_else(|e| panic!("stream batch {batch}: {e}")));
        }
    }
    streams
}

type Terminal = tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

async fn open_terminals(c: &Https) -> Vec<Terminal> {
    let mut terminals = Vec::with_capacity(TERMINALS);
    for i in 0..TERMINALS {
        let mut ws = pty_socket(c, &format!("/p/web/pty/pty_{i}/connect?cursor=0"), Some(&alice())).await;
        ws.send(Message::text("before")).await.unwrap();
        assert!(
            read_terminal_until(&mut ws, "echo:before")
                .await
                .contains("echo:before"),
            "terminal {i}"
        );
        terminals.push(ws);
    }
    terminals
}

/// One h2 connection (ALPN h2), the certificate it was made with, and `H2_STREAMS` event
/// streams open on it.
struct H2Connection {
    client: Https,
    send: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    certificate: Vec<u8>,
    streams: Vec<Incoming>,
}

impl H2Connection {
    async fn open(gw: &Gateway) -> H2Connection {
        // A client of its own: a fresh session, so the certificate is the one presented.
        let client = Https::with_alpn(gw.https, &gw.ca(), vec![b"h2".to_vec()]);
        let tls = client.tls().await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let certificate = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut h2 = H2Connection {
            client,
            send,
            certificate,
            streams: Vec::new(),
        };
        for _ in 0..H2_STREAMS {
            let resp = h2.send(h2.get("/p/web/global/event", &alice())).await;
            assert_eq!(resp.status(), 200);
            let mut body = resp.into_body();
            read_until(&mut body, Duration::from_secs(20), |t| t.contains("server.connected")).await;
            h2.streams.push(body);
        }
        h2
    }

    fn get(&self, path: &str, auth: &str) -> http::Request<Full<Bytes>> {
        self.client
            .request("GET", &format!("https://{}{path}", self.client.authority()), Some(auth))
            .version(http::Version::HTTP_2)
            .body(Full::default())
            .unwrap()
    }

    async fn send(&mut self, req: http::Request<Full<Bytes>>) -> http::Response<Incoming> {
        tokio::time::timeout(Duration::from_secs(30), self.send.send_request(req))
            .await
            .expect("an answer on the h2 connection within 30 s")
            .expect("the h2 connection took the request")
    }

    /// A whole answer to a GET on this connection.
    async fn request(&mut self, path: &str, auth: &str) -> crate::common::client::Reply {
        let req = self.get(path, auth);
        read(self.send(req).await).await
    }
}
