//! Requests whose form is ambiguous or hostile get a clear refusal before anything reaches the
//! upstream; what does reach it is the canonical spelling the gateway judged.

use std::time::Duration;

use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::client::{Https, basic, upgrade};
use crate::common::stack::two_projects;

fn alice() -> String {
    basic("alice", "alice-password-1")
}

/// Send raw bytes over TLS and read the status line and what follows (bounded).
async fn raw(c: &Https, request: &str) -> String {
    let mut tls = c.tls().await;
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 2048];
    let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut answer))
        .await
        .expect("an answer within 10 s")
        .unwrap_or(0);
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

#[tokio::test]
async fn the_upstream_gets_the_canonical_spelling_of_what_was_judged() {
    let (_gw, web, _api, c) = two_projects("").await;
    for path in [
        "/p/web/SESSION/ses%5Fa;x=1/Message",
        "/p/web//session//ses_a/message/",
        "/p/w%65b/%73ession/ses_a/MESSAGE",
    ] {
        let r = c.get(path, Some(&alice())).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    let seen: Vec<String> = web.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(seen, vec!["/session/ses_a/message"; 3], "{seen:?}");
}

#[tokio::test]
async fn two_host_headers_are_a_400() {
    let (_gw, web, _api, c) = two_projects("").await;
    let answer = raw(
        &c,
        &format!(
            "GET /p/web/global/health HTTP/1.1\r\nHost: {}\r\nHost: web.gw.localhost\r\nAuthorization: {}\r\n\r\n",
            c.authority(),
            alice()
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("more than one Host header"), "{answer}");
    assert!(web.seen().is_empty());
}

#[tokio::test]
async fn an_upgrade_on_a_route_that_never_upgrades_is_a_400() {
    let (_gw, web, _api, c) = two_projects("").await;
    let (status, body) = upgrade(&c, "/p/web/session", &alice()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("only terminal connections do"), "{body}");
    assert!(web.seen().is_empty());
}

#[tokio::test]
async fn a_cross_site_write_without_origin_is_refused() {
    let (_gw, web, _api, c) = two_projects("").await;
    let req = c
        .request("POST", "/p/web/session", Some(&alice()))
        .header("sec-fetch-site", "cross-site")
        .body(Full::from("{}"))
        .unwrap();
    let r = c.call(req).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("Sec-Fetch-Site: cross-site"), "{}", r.body);
    // The same request from the gateway's own pages (same-origin) goes through.
    let req = c
        .request("POST", "/p/web/session", Some(&alice()))
        .header("sec-fetch-site", "same-origin")
        .body(Full::from("{}"))
        .unwrap();
    assert_eq!(c.call(req).await.status, 200);
    assert_eq!(web.seen().len(), 1);
}

#[tokio::test]
async fn a_malformed_chunked_body_is_the_clients_400_not_an_upstream_502() {
    let (gw, _web, _api, c) = two_projects("").await;
    let answer = raw(
        &c,
        &format!(
            "POST /p/web/session/ses_1/message HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot hex\r\n0\r\n\r\n",
            c.authority(),
            alice()
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("malformed_body"), "{answer}");
    assert!(!gw.logs().contains("upstream_unavailable"), "{}", gw.logs());
}
