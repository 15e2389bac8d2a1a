use super::*;
use crate::upstream::pool::Owner;
use http::{header, request};
use hyper::body::Body as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Notify;

use crate::upstream::test_server::{Act, serve};

fn parts_of(head: &[u8]) -> http::response::Parts {
    parse_head(head).unwrap().expect("a whole head").0
}

#[test]
fn a_request_head_is_written_as_hyper_writes_it() {
    let (parts, ()) = http::Request::get("/global/event?x=1")
        .header("host", "127.0.0.1:4096")
        .header("authorization", "Basic b3BlbmNvZGU6cHc=")
        .body(())
        .unwrap()
        .into_parts();
    let head = request_head(&parts);
    assert_eq!(
        head,
        b"GET /global/event?x=1 HTTP/1.1\r\nhost: 127.0.0.1:4096\r\nauthorization: Basic b3BlbmNvZGU6cHc=\r\n\r\n"
    );
    let _: &request::Parts = &parts;
    // No framing of the client's: the road carries no body, and announces none.
    let (parts, ()) = http::Request::get("/session")
        .header("content-length", "5")
        .header("transfer-encoding", "chunked")
        .header("host", "h")
        .body(())
        .unwrap()
        .into_parts();
    assert_eq!(request_head(&parts), b"GET /session HTTP/1.1\r\nhost: h\r\n\r\n");
}

#[test]
fn a_head_is_read_whole_or_not_at_all() {
    let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello";
    for cut in 0..head.len() - 10 {
        assert!(
            parse_head(&head[..cut]).unwrap().is_none(),
            "{cut} bytes are not a head"
        );
    }
    let (parts, len) = parse_head(head).unwrap().unwrap();
    assert_eq!(&head[len..], b"5\r\nhello");
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(parts.headers["content-type"], "text/event-stream");
}

#[test]
fn malformed_or_oversized_heads_are_refused() {
    for bad in [
        &b"HTTP/1.1 2000 OK\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nbad name: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx: a\x00b\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
    ] {
        assert!(
            matches!(parse_head(bad), Err(DirectError::BadHead(_))),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let mut big = b"HTTP/1.1 200 OK\r\n".to_vec();
    while big.len() < MAX_HEAD {
        big.extend_from_slice(format!("x-filler: {}\r\n", "0123456789".repeat(100)).as_bytes());
    }
    assert_eq!(parse_head(&big).err(), Some(DirectError::HeadTooLarge));
    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("x-{i}: 1\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert!(matches!(parse_head(&many), Err(DirectError::BadHead(_))));
}

#[test]
fn the_framing_follows_rfc_9112() {
    let f = |head: &str| framing(&mut parts_of(head.as_bytes()), false);
    assert!(matches!(
        f("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n"),
        Ok(Framing::Chunked(_))
    ));
    assert!(matches!(
        f("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
        Ok(Framing::Close)
    ));
    assert!(matches!(
        f("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"),
        Ok(Framing::Length(5))
    ));
    assert!(matches!(
        f("HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\ncontent-length: 5\r\n\r\n"),
        Ok(Framing::Length(5))
    ));
    assert!(matches!(
        f("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
        Ok(Framing::Empty)
    ));
    assert!(matches!(
        f("HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n"),
        Ok(Framing::Empty)
    ));
    assert!(matches!(f("HTTP/1.1 200 OK\r\n\r\n"), Ok(Framing::Close)));
    for bad in ["5, 6", "-5", "+5", "5x", "", "0x5", "99999999999999999999"] {
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {bad}\r\n\r\n");
        assert_eq!(f(&head).err(), Some(DirectError::BadLength), "{bad:?}");
    }
    // Lengths in separate fields must agree too, wherever the fields are.
    assert_eq!(
        f("HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-a: 1\r\nContent-Length: 6\r\n\r\n").err(),
        Some(DirectError::BadLength)
    );
    // A close said in a second Connection field is heard.
    let parts = parts_of(b"HTTP/1.1 200 OK\r\nconnection: keep-alive\r\nx-a: 1\r\nConnection: x, Close\r\n\r\n");
    assert!(!keeps_alive(&parts, &Framing::Length(1)));
    let parts = parts_of(b"HTTP/1.1 200 OK\r\nconnection: keep-alive\r\n\r\n");
    assert!(keeps_alive(&parts, &Framing::Length(1)));
    // A length beside a coding is not passed on.
    let mut parts = parts_of(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n");
    assert!(matches!(framing(&mut parts, false), Ok(Framing::Chunked(_))));
    assert!(!parts.headers.contains_key(header::CONTENT_LENGTH));
}

/// A server on loopback that reads one request head, answers `answer` in pieces of `step` bytes,
/// then closes; the head it read comes back on the channel.
async fn answering(answer: &'static [u8], step: usize) -> (String, tokio::sync::oneshot::Receiver<Vec<u8>>) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tcp.read(&mut buf).await.unwrap();
            assert!(n > 0, "the request head never ended");
            seen.extend_from_slice(&buf[..n]);
        }
        let _ = tx.send(seen);
        for piece in answer.chunks(step) {
            // The gateway closes a connection whose answer ended before what was sent did.
            if tcp.write_all(piece).await.is_err() {
                return;
            }
            tcp.flush().await.unwrap();
            tokio::task::yield_now().await;
        }
    });
    (addr, rx)
}

/// [`send`] with the head hyper's client would write for `parts`, as the gateway's own request.
async fn send_parts(
    pool: &Arc<Pool>,
    parts: &http::request::Parts,
    timeout: std::time::Duration,
) -> Result<Response<DirectBody>, BoxError> {
    send(pool, &request_head(parts), &parts.method, Owner::GATEWAY, timeout).await
}

fn get(addr: &str, path: &str) -> http::request::Parts {
    http::Request::get(path)
        .header("host", addr)
        .body(())
        .unwrap()
        .into_parts()
        .0
}

async fn fetch(addr: &str) -> Result<(Response<()>, Result<Vec<u8>, DirectError>), BoxError> {
    use http_body_util::BodyExt;
    let pool = Pool::new(addr.to_string());
    let resp = send_parts(&pool, &get(addr, "/event"), std::time::Duration::from_secs(5)).await?;
    let (parts, mut body) = resp.into_parts();
    let mut data = Vec::new();
    let read = loop {
        match body.frame().await {
            None => break Ok(data),
            Some(Err(e)) => break Err(e),
            Some(Ok(f)) => data.extend_from_slice(&f.into_data().unwrap()),
        }
    };
    assert!(body.is_end_stream());
    Ok((Response::from_parts(parts, ()), read))
}

/// `n` informational answers (103), then a 200 whose body is "ok".
fn hints_then_ok(n: usize) -> &'static [u8] {
    let hints = "HTTP/1.1 103 Early Hints\r\n\r\n".repeat(n);
    format!("{hints}HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        .leak()
        .as_bytes()
}

#[tokio::test]
async fn an_event_stream_is_read_from_its_own_connection_whatever_the_writes() {
    const ANSWER: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\nf\r\ndata: {\"a\":1}\n\n\r\nf\r\ndata: {\"b\":2}\n\n\r\n0\r\n\r\n";
    for step in [1, 3, 7, ANSWER.len()] {
        let (addr, head) = answering(ANSWER, step).await;
        let (resp, body) = fetch(&addr).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "writes of {step}");
        assert_eq!(
            body.unwrap(),
            b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\n",
            "writes of {step}"
        );
        let head = head.await.unwrap();
        assert!(head.starts_with(b"GET /event HTTP/1.1\r\nhost: 127.0.0.1:"), "{head:?}");
    }
}

#[tokio::test]
async fn a_cut_answer_is_an_error_and_a_close_delimited_one_ends() {
    let (addr, _) = answering(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel", 4).await;
    let (_, body) = fetch(&addr).await.unwrap();
    assert_eq!(body.err(), Some(DirectError::Cut));
    let (addr, _) = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello", 4).await;
    assert_eq!(fetch(&addr).await.unwrap().1.err(), Some(DirectError::Cut));
    let (addr, _) = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello, and more", 4).await;
    assert_eq!(fetch(&addr).await.unwrap().1.unwrap(), b"hello");
    let (addr, _) = answering(b"HTTP/1.1 200 OK\r\n\r\nuntil the close", 4).await;
    assert_eq!(fetch(&addr).await.unwrap().1.unwrap(), b"until the close");
    let (addr, _) = answering(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nZ\r\n", 4).await;
    // Refused as the body is read, or with the head when the bad chunk came in the same read.
    let refused = match fetch(&addr).await {
        Ok((_, body)) => body.err(),
        Err(e) => e.downcast::<DirectError>().ok().map(|e| *e),
    };
    assert_eq!(
        refused,
        Some(DirectError::Chunk(crate::upstream::chunked::ChunkError::BadSize))
    );
}

#[tokio::test]
async fn no_answer_a_switch_or_too_many_informational_answers_are_errors_that_say_so() {
    let (addr, _) = answering(b"", 1).await;
    let err = fetch(&addr).await.expect_err("no answer");
    assert_eq!(
        crate::upstream::describe(&*err),
        "the connection closed before a response"
    );
    let (addr, _) = answering(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n", 8).await;
    let err = fetch(&addr).await.expect_err("a switch");
    assert_eq!(
        crate::upstream::describe(&*err),
        "the upstream switched protocols unasked"
    );
    // Informational answers are skipped, up to a bound: eight and then the answer is read; a
    // ninth is refused.
    let (addr, _) = answering(hints_then_ok(8), 64).await;
    assert_eq!(fetch(&addr).await.unwrap().1.unwrap(), b"ok");
    let (addr, _) = answering(hints_then_ok(9), 64).await;
    let err = fetch(&addr).await.expect_err("nine informational answers");
    assert_eq!(
        crate::upstream::describe(&*err),
        "the upstream sent more than 8 informational answers"
    );
}

/// A server on loopback that answers every request on a connection with `answer` (closing the
/// connection after each when `close` is set, without saying so), counting the connections.
async fn serving(answer: &'static [u8], close: bool) -> (String, Arc<AtomicUsize>) {
    serve(move |_| match close {
        true => vec![Act::Write(answer), Act::Close],
        false => vec![Act::Write(answer)],
    })
    .await
}

/// `n` requests one after the other on `pool`, each answer read to its end; the bodies.
async fn in_turn(pool: &Arc<Pool>, addr: &str, method: Method, n: usize) -> Vec<Vec<u8>> {
    use http_body_util::BodyExt;
    let mut bodies = Vec::new();
    for _ in 0..n {
        let mut head = get(addr, "/session");
        head.method = method.clone();
        let resp = send_parts(pool, &head, std::time::Duration::from_secs(5))
            .await
            .unwrap();
        bodies.push(resp.into_body().collect().await.unwrap().to_bytes().to_vec());
    }
    bodies
}

#[tokio::test]
async fn a_connection_carries_the_next_request_once_its_answer_was_read() {
    let (addr, accepted) = serving(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", false).await;
    let pool = Pool::new(addr.clone());
    assert_eq!(in_turn(&pool, &addr, Method::GET, 5).await, vec![b"ok".to_vec(); 5]);
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection for five requests");
    // Chunked answers too, and an answer to a HEAD has no body whatever its length says.
    let (addr, accepted) = serving(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        false,
    )
    .await;
    let pool = Pool::new(addr.clone());
    assert_eq!(in_turn(&pool, &addr, Method::GET, 3).await, vec![b"ok".to_vec(); 3]);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    let (addr, accepted) = serving(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n", false).await;
    let pool = Pool::new(addr.clone());
    assert_eq!(in_turn(&pool, &addr, Method::HEAD, 3).await, vec![Vec::<u8>::new(); 3]);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_connection_the_server_closes_or_one_not_read_to_its_end_is_not_reused() {
    // Said: `Connection: close`, or an HTTP/1.0 answer, or a body that ends at the close.
    for answer in [
        &b"HTTP/1.1 200 OK\r\nconnection: keep-alive, Close\r\ncontent-length: 2\r\n\r\nok"[..],
        b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
    ] {
        let (addr, accepted) = serving(answer, false).await;
        let pool = Pool::new(addr.clone());
        assert_eq!(in_turn(&pool, &addr, Method::GET, 3).await, vec![b"ok".to_vec(); 3]);
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            3,
            "{}",
            String::from_utf8_lossy(answer)
        );
    }
    // Bytes past the body's end: the connection is out of step, not reused.
    let (addr, accepted) = serving(
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n",
        false,
    )
    .await;
    let pool = Pool::new(addr.clone());
    assert_eq!(in_turn(&pool, &addr, Method::GET, 2).await, vec![b"ok".to_vec(); 2]);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    // A body dropped before its end takes its connection with it.
    let (addr, accepted) = serving(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nok", false).await;
    let pool = Pool::new(addr.clone());
    for _ in 0..2 {
        let resp = send_parts(&pool, &get(&addr, "/session"), std::time::Duration::from_secs(5))
            .await
            .unwrap();
        assert!(!resp.body().is_end_stream());
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// Bytes that arrive on a kept connection after its answer ended are no answer to the next
/// request: the connection is closed when it is taken, and the request goes on a new one.
#[tokio::test]
async fn an_answer_no_request_asked_for_is_never_read_as_the_next_ones() {
    let (go, sent) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (later, told) = (go.clone(), sent.clone());
    // The first request answered; then, once told, an answer no request asked for.
    let (addr, accepted) = serve(move |n| match n {
        1 => vec![
            Act::Write(OK),
            Act::Later(
                later.clone(),
                b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale",
                told.clone(),
            ),
        ],
        _ => vec![],
    })
    .await;
    let pool = Pool::new(addr.clone());
    let waiting = sent.notified();
    assert_eq!(in_turn(&pool, &addr, Method::GET, 1).await, vec![b"ok".to_vec()]);
    go.notify_one();
    tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
        .await
        .expect("the server sends its unasked answer");
    // Written on loopback, the bytes are in the kept socket's queue once the write returned.
    assert_eq!(
        in_turn(&pool, &addr, Method::GET, 1).await,
        vec![b"ok".to_vec()],
        "not \"stale\""
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the out-of-step connection was closed"
    );
}

/// A kept connection the server closes just as a request is written on it (its idle time-out
/// racing the request): nothing comes back, and the request, without a body and idempotent, is
/// sent again on a new connection; the caller never sees the closed one.
#[tokio::test]
async fn a_request_the_server_closed_its_kept_connection_on_is_sent_again() {
    // The first request answered; on the second, the connection closed without an answer.
    let (addr, accepted) = serve(|n| if n == 1 { vec![Act::Write(OK)] } else { vec![Act::Close] }).await;
    let pool = Pool::new(addr.clone());
    assert_eq!(in_turn(&pool, &addr, Method::GET, 2).await, vec![b"ok".to_vec(); 2]);
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "the closed one, then a new one");
}

/// An upstream that answers a request, then 150 ms later sends a second answer nobody asked for
/// (hostile round five, item 9): a request of another principal made meanwhile is not sent on
/// that connection (its answer would be the late one), but on a new one; after the reuse grace
/// a quiet connection serves anyone.
#[tokio::test]
async fn a_connection_is_lent_to_another_principal_only_after_the_reuse_grace() {
    use http_body_util::BodyExt;
    let (addr, accepted) = serve(|n| match n {
        1 => vec![
            Act::Write(OK),
            Act::Sleep(std::time::Duration::from_millis(150)),
            Act::Write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nalice"),
        ],
        _ => vec![],
    })
    .await;
    let pool = Pool::new(addr.clone());
    let as_owner = |who: &'static str| {
        let (pool, addr) = (pool.clone(), addr.clone());
        async move {
            let head = request_head(&get(&addr, "/session"));
            let resp = send(
                &pool,
                &head,
                &Method::GET,
                Owner::of(who),
                std::time::Duration::from_secs(5),
            )
            .await
            .unwrap();
            resp.into_body().collect().await.unwrap().to_bytes().to_vec()
        }
    };
    assert_eq!(as_owner("alice").await, b"ok");
    assert_eq!(as_owner("bob").await, b"ok", "not alice's late answer");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "bob's request went on a connection of its own"
    );
    // Alice's next finds her connection out of step (the late answer arrived): closed, a new one.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(as_owner("alice").await, b"ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
}

/// The same principal's next request takes its connection at once; another's, once the reuse
/// grace has passed (a quiet connection then serves anyone).
#[tokio::test]
async fn a_quiet_connection_serves_its_principal_at_once_and_anyone_after_the_grace() {
    let (addr, accepted) = serving(OK, false).await;
    let pool = Pool::new(addr.clone());
    let head = request_head(&get(&addr, "/session"));
    let fetch = |who: &'static str| {
        let (pool, head) = (pool.clone(), head.clone());
        async move {
            use http_body_util::BodyExt;
            let resp = send(
                &pool,
                &head,
                &Method::GET,
                Owner::of(who),
                std::time::Duration::from_secs(5),
            )
            .await
            .unwrap();
            resp.into_body().collect().await.unwrap().to_bytes().to_vec()
        }
    };
    for _ in 0..3 {
        assert_eq!(fetch("alice").await, b"ok");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "alice's requests share one connection"
    );
    tokio::time::sleep(crate::upstream::pool::REUSE_GRACE + std::time::Duration::from_millis(100)).await;
    assert_eq!(fetch("bob").await, b"ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "past the grace bob takes it");
}
