//! Connection hogging: connections that never send a request, idle h2 connections, and the global
//! connection cap that keeps the gateway below its open-file limit. Loopback only, bounded waits.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncReadExt;

use crate::common::client::{Https, assert_closed_in_handshake, basic, read, read_until};
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::{ALICE, Gateway};
use crate::common::stack::one_project;

const PW: &str = "conn-upstream-pw";

async fn gateway(limits: &str) -> (Gateway, FakeUpstream, Https) {
    let (gw, web) = one_project(PW, limits, &[ALICE]).await;
    let c = Https::new(gw.https, &gw.ca());
    (gw, web, c)
}

fn alice() -> String {
    basic("alice", "alice-password-1")
}

/// Read until the peer closes (EOF or error); how long that took, or `None` after `within`.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(s: &mut S, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at((started + within).into(), s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_send_a_request_are_closed_at_the_head_timeout() {
    let (_gw, _web, c) = gateway("[limits]\nrequest_head_timeout = \"1s\"\n").await;
    let h2 = Https::with_alpn(c.addr, &_gw.ca(), vec![b"h2".to_vec()]);
    for (what, client) in [("http/1.1", &c), ("h2", &h2)] {
        let mut tls = client.tls().await;
        let took = closed_within(&mut tls, Duration::from_secs(8)).await;
        let took = took.unwrap_or_else(|| panic!("a silent {what} connection was still open after 8 s"));
        assert!(took >= Duration::from_millis(900), "{what} closed too early: {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_h2_connection_is_closed_but_one_with_an_open_stream_is_kept() {
    let (_gw, _web, c) = gateway("[limits]\nrequest_head_timeout = \"1s\"\n").await;
    let h2 = Https::with_alpn(c.addr, &_gw.ca(), vec![b"h2".to_vec()]);
    let request = |path: &str| {
        h2.request("GET", &format!("https://{}{path}", h2.authority()), Some(&alice()))
            .version(http::Version::HTTP_2)
            .body(Full::<Bytes>::default())
            .unwrap()
    };

    // A real h2 client answers pings: only the idle watcher can close it.
    let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(h2.tls().await))
        .await
        .unwrap();
    let idle_conn = tokio::spawn(conn);
    assert_eq!(
        read(send.send_request(request("/global/health")).await.unwrap())
            .await
            .status,
        200
    );
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(8), idle_conn)
        .await
        .expect("an idle h2 connection was still open after 8 s")
        .unwrap()
        .ok();
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );

    // An event stream keeps its connection busy well past the idle period, and the connection
    // still takes requests.
    let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(h2.tls().await))
        .await
        .unwrap();
    let busy_conn = tokio::spawn(conn);
    let mut events = send.send_request(request("/event")).await.unwrap().into_body();
    assert!(
        read_until(&mut events, Duration::from_secs(5), |t| t.contains("server.connected"))
            .await
            .contains("server.connected")
    );
    // That the connection is NOT closed cannot be awaited: let three idle periods (1 s) pass.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!busy_conn.is_finished(), "a connection with an open stream was closed");
    assert_eq!(
        read(send.send_request(request("/global/health")).await.unwrap())
            .await
            .status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_connection_cap_refuses_extra_connections_and_keeps_accepting() {
    let (gw, _web, c) = gateway("[limits]\nmax_connections = 3\n").await;
    assert_eq!(gw.metric("connections_cap"), 3);
    // Three addresses, each well under its own cap, fill the global table with authenticated
    // connections (unauthenticated ones could be shed to make room: see the flood test below).
    let mut held = Vec::new();
    for i in 1..=3 {
        let client = c.from(&format!("127.0.3.{i}"));
        let mut send = client.http1().await;
        let req = client
            .request("GET", "/global/health", Some(&alice()))
            .body(Full::<Bytes>::default())
            .unwrap();
        assert_eq!(read(send.send_request(req).await.unwrap()).await.status, 200);
        held.push(send);
    }
    assert_eq!(
        gw.metric("connections_unauthenticated"),
        0,
        "all three are authenticated"
    );
    // Past the cap, new connections are closed at once (not left waiting), again and again.
    for i in 0..20 {
        let started = Instant::now();
        let refused = c.from(&format!("127.0.4.{}", 1 + i % 10)).try_tls().await;
        assert_closed_in_handshake(refused, &format!("connection {i} over the global cap"));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "a refusal took {:?}",
            started.elapsed()
        );
    }
    assert!(
        gw.wait_log("reason=\"global_connection_limit\"", Duration::from_secs(5))
            .await,
        "no refusal logged:\n{}",
        gw.logs()
    );
    let lines = gw.logs().matches("global_connection_limit").count();
    assert_eq!(lines, 1, "refusals are logged once per interval, not once each");
    // A freed slot serves the next client: the accept loop kept going.
    held.pop();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(tls) = c.from("127.0.4.99").try_tls().await {
            drop(tls);
            break;
        }
        assert!(Instant::now() < deadline, "a freed slot never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(tls) = c.try_tls().await {
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
            tokio::spawn(conn);
            let req = c
                .request("GET", "/global/health", Some(&alice()))
                .body(Full::<Bytes>::default())
                .unwrap();
            assert_eq!(read(send.send_request(req).await.unwrap()).await.status, 200);
            break;
        }
        assert!(Instant::now() < deadline, "requests are not served after the flood");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The protocol TLS chose by ALPN is the one served; a client that offered no ALPN is served
/// HTTP/1.1 (h2 over TLS needs ALPN: RFC 9113 section 3.2), by the same builder as ALPN
/// http/1.1, so the bound on the parsed head holds for it too (hyper-util's auto builder, which
/// sniffs the preface, has none). An h2 preface on a connection that chose http/1.1 or nothing is
/// not served as h2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_decides_the_protocol_and_a_client_without_alpn_is_served_http1() {
    use tokio::io::AsyncWriteExt;
    let (gw, _web, c) = gateway("").await;
    let h2_request = |client: &Https| {
        client
            .request(
                "GET",
                &format!("https://{}/global/health", client.authority()),
                Some(&alice()),
            )
            .version(http::Version::HTTP_2)
            .body(Full::<Bytes>::default())
            .unwrap()
    };
    let h2_status = |client: Https| async move {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(client.tls().await))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let resp = tokio::time::timeout(Duration::from_secs(10), send.send_request(h2_request(&client)))
            .await
            .map_err(|_| "no h2 answer in 10 s".to_string())?
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(read(resp).await.status)
    };

    // ALPN h2: served as h2.
    let h2 = Https::with_alpn(c.addr, &gw.ca(), vec![b"h2".to_vec()]);
    assert_eq!(h2_status(h2).await, Ok(http::StatusCode::OK));

    // No ALPN, HTTP/1.1; and ALPN http/1.1: served as HTTP/1.1.
    let none = Https::with_alpn(c.addr, &gw.ca(), vec![]);
    for client in [&none, &c] {
        let mut tls = client.tls().await;
        let head = format!(
            "GET /global/health HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\nConnection: close\r\n\r\n",
            client.authority(),
            alice()
        );
        tls.write_all(head.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut out))
            .await
            .expect("no answer in 5 s")
            .ok();
        assert!(out.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&out));
    }

    // No ALPN or ALPN http/1.1, then h2's preface: not an h2 connection.
    assert!(
        h2_status(none.clone()).await.is_err(),
        "a connection without ALPN was served as h2"
    );
    assert!(
        h2_status(c.clone()).await.is_err(),
        "an http/1.1 connection was served as h2"
    );
}

/// A 70 KiB head arriving at once from a client that offered no ALPN is refused on the parsed
/// head (431), as it is with ALPN http/1.1 (abuse.rs), and never reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_70_kib_head_without_alpn_gets_431() {
    use tokio::io::AsyncWriteExt;
    let (gw, web, c) = gateway("").await;
    let none = Https::with_alpn(c.addr, &gw.ca(), vec![]);
    let mut tls = none.tls().await;
    let head = format!(
        "GET /global/health HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        none.authority(),
        alice(),
        "x".repeat(70 * 1024)
    );
    // One write: the whole head can arrive in one read, past the read buffer's own bound.
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut out))
        .await
        .expect("no answer in 10 s")
        .ok();
    assert!(
        out.starts_with(b"HTTP/1.1 431"),
        "a 70 KiB head without ALPN got: {:?}",
        String::from_utf8_lossy(&out[..out.len().min(200)])
    );
    assert!(
        web.seen().iter().all(|s| !s.headers.contains_key("x-big")),
        "the oversized request reached the upstream"
    );
}

/// Issue 21: connections that never present a credential (silent ones, and ones whose requests
/// carry none) from 128 addresses, each under its per-address cap, keep trying to fill a small
/// global cap. They get only a share of it and are shed (the oldest idle first) to make room, so
/// a real user's new connection gets an answer, round after round, well before the flood's own
/// connections would time out (3 s against the 10 s TLS handshake deadline: the bound tells
/// shedding from waiting; it is not a speed goal, and 1 s failed once on a loaded machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_authenticating_connections_from_many_addresses_leave_room_for_a_real_user() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use tokio::io::AsyncWriteExt;
    const CAP: u64 = 40;
    let (gw, _web, c) = gateway(&format!(
        "[limits]\nmax_connections = {CAP}\nmax_connections_per_ip = 4\n"
    ))
    .await;
    let user = c.from("127.0.0.3");
    // Alice's password is verified (and cached) before the flood: each round then measures the
    // connection, not argon2.
    assert_eq!(user.get("/global/health", Some(&alice())).await.status, 200);

    let stop = Arc::new(AtomicBool::new(false));
    let connected = Arc::new(AtomicU64::new(0));
    let mut flood = Vec::new();
    let addresses = (10..74)
        .map(|i| format!("127.0.0.{i}"))
        .chain((1..65).map(|i| format!("127.0.1.{i}")));
    for (n, address) in addresses.enumerate() {
        let client = c.from(&address);
        let (stop, connected) = (stop.clone(), connected.clone());
        flood.push(tokio::spawn(async move {
            // One connection at a time per address, again as soon as it is closed; bounded by
            // `stop` and a count, so a mistake cannot spin forever.
            for _ in 0..10_000 {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let mut buf = [0u8; 4096];
                if n % 2 == 0 {
                    // Silent: TCP only, no TLS ClientHello.
                    let Ok(mut tcp) = client.tcp().await else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    connected.fetch_add(1, Ordering::Relaxed);
                    while !stop.load(Ordering::Relaxed) {
                        match tokio::time::timeout(Duration::from_millis(200), tcp.read(&mut buf)).await {
                            Ok(Ok(0)) | Ok(Err(_)) => break,
                            _ => {}
                        }
                    }
                } else {
                    // Never authenticating: TLS, a request without credentials (401), then idle.
                    let Ok(mut tls) = client.try_tls().await else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    connected.fetch_add(1, Ordering::Relaxed);
                    let head = format!("GET /global/health HTTP/1.1\r\nHost: {}\r\n\r\n", client.authority());
                    let _ = tls.write_all(head.as_bytes()).await;
                    while !stop.load(Ordering::Relaxed) {
                        match tokio::time::timeout(Duration::from_millis(200), tls.read(&mut buf)).await {
                            Ok(Ok(0)) | Ok(Err(_)) => break,
                            _ => {}
                        }
                    }
                }
                // Closed (shed, or refused at once): a short pause keeps the test light.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    // The flood has reached the cap (or the share the gateway allows it) before the rounds start.
    let deadline = Instant::now() + Duration::from_secs(20);
    while connected.load(Ordering::Relaxed) < 2 * CAP {
        assert!(
            Instant::now() < deadline,
            "the flood never got going: {} connections made",
            connected.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Rounds: a new connection and one request each, answered within 3 s.
    let mut seen = Vec::new();
    for round in 0..8 {
        let started = Instant::now();
        let attempt = tokio::time::timeout(Duration::from_secs(3), async {
            let tls = user.try_tls().await.map_err(|e| format!("no connection: {e}"))?;
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|e| format!("no HTTP/1.1 handshake: {e}"))?;
            tokio::spawn(conn);
            let req = user
                .request("GET", "/global/health", Some(&alice()))
                .body(Full::<Bytes>::default())
                .unwrap();
            let resp = send.send_request(req).await.map_err(|e| format!("no answer: {e}"))?;
            Ok::<_, String>(resp.status())
        })
        .await;
        let outcome = match attempt {
            Ok(Ok(status)) if status == http::StatusCode::OK => Ok(started.elapsed()),
            Ok(Ok(status)) => Err(format!("answered {status}")),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("nothing within 3 s".to_string()),
        };
        seen.push((round, outcome));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let open = gw.metric("connections_open");
    stop.store(true, Ordering::Relaxed);
    for t in flood {
        t.await.unwrap();
    }
    eprintln!(
        "rounds: {seen:?}; flood connections made: {}; open at the end: {open}",
        connected.load(Ordering::Relaxed)
    );
    assert!(
        seen.iter().all(|(_, o)| o.is_ok()),
        "a real user was not served within 3 s in every round: {seen:?}"
    );
    assert!(
        gw.metric("connections_shed_total") >= 1,
        "room was made by shedding unauthenticated connections"
    );
    assert!(open <= CAP, "the cap held: {open} open");
}
