//! The proxy's own behaviour against an in-process fake upstream: authentication answers, routing
//! answers, error answers, what is forwarded and what never is.

use std::time::Duration;

use http_body_util::Full;

use crate::common::client::{Https, basic};
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::{ALICE, Gateway, base_config, external_project, users_toml};

use crate::common::stack::{UPSTREAM_PW, two_projects};

fn alice() -> String {
    basic("alice", "alice-password-1")
}

#[tokio::test]
async fn requests_without_credentials_get_401_with_the_gateway_realm() {
    let (_gw, web, _api, c) = two_projects("").await;
    let r = c.get("/p/web/global/health", None).await;
    assert_eq!(r.status, 401);
    assert!(
        r.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("realm=\"opencode-gateway\"")
    );
    assert!(r.body.contains("authentication required"));
    assert!(web.seen().is_empty(), "nothing reached the upstream");
}

#[tokio::test]
async fn a_wrong_password_gets_401_and_the_right_one_gets_through() {
    let (_gw, web, _api, c) = two_projects("").await;
    let r = c
        .get("/p/web/global/health", Some(&basic("alice", "wrong-password")))
        .await;
    assert_eq!(r.status, 401);
    assert!(r.body.contains("wrong user name or password"));
    let r = c
        .get("/p/web/global/health", Some(&basic("nobody", "alice-password-1")))
        .await;
    assert_eq!(r.status, 401, "an unknown user is refused like a wrong password");
    let r = c.get("/p/web/global/health", Some(&alice())).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, r#"{"healthy":true,"version":"1.18.33"}"#);
    assert_eq!(web.seen().len(), 1);
}

#[tokio::test]
async fn an_unknown_project_is_404_and_an_ungranted_one_403() {
    let (_gw, _web, api, c) = two_projects("").await;
    let r = c.get("/p/nope/global/health", Some(&alice())).await;
    assert_eq!(r.status, 404);
    assert!(r.body.contains("no project named \\\"nope\\\""), "{}", r.body);
    let r = c
        .get("/p/api/global/health", Some(&basic("bob", "bob-password-22")))
        .await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("bob has no access to project api"), "{}", r.body);
    assert!(api.seen().is_empty());
    let r = c.get("/global/health", Some(&alice())).await;
    assert_eq!(r.status, 404, "with two projects a bare path names none");
    // The project's host routes too, and an unknown host label is a 404.
    let r = c.host("api.gw.localhost").get("/global/health", Some(&alice())).await;
    assert_eq!(r.status, 200);
    let r = c.host("nope.gw.localhost").get("/", Some(&alice())).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn a_dead_upstream_is_a_502_naming_the_project_and_why() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let config = base_config(&format!(
        "[[project]]\nname = \"gone\"\nupstream = \"http://127.0.0.1:{port}\"\nupstream_password_file = \"pw\"\n\n{}",
        users_toml(&[ALICE])
    ));
    let gw = Gateway::start_behind(&config, UPSTREAM_PW);
    let c = Https::new(gw.https, &gw.ca());
    let r = c.get("/p/gone/session", Some(&alice())).await;
    assert_eq!(r.status, 502);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["project"], "gone");
    assert!(v["message"].as_str().unwrap().contains("project gone"), "{}", r.body);
    assert!(
        v["message"].as_str().unwrap().contains("connection refused"),
        "{}",
        r.body
    );
    assert!(!r.body.contains(UPSTREAM_PW));
    assert!(gw.wait_log("upstream_unavailable", Duration::from_secs(5)).await);
}

#[tokio::test]
async fn an_upstream_that_does_not_answer_in_time_is_a_504() {
    let (_gw, _web, _api, c) = two_projects("[limits]\nupstream_response_timeout = \"1s\"\n").await;
    let started = std::time::Instant::now();
    let r = c.get("/p/web/slow", Some(&alice())).await;
    assert_timed_out(&r);
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// A 504 that names the project and says why.
fn assert_timed_out(r: &crate::common::client::Reply) {
    assert_eq!(r.status, 504, "{}", r.body);
    assert!(
        r.body.contains("project web") && r.body.contains("did not answer"),
        "{}",
        r.body
    );
}

/// The upstream's deadline when its timer is armed late (`pipeline/deadline.rs`): over HTTP/1.1
/// a request's timer waits for a second poll, which the connection's idle tick (every half
/// `request_head_timeout`, here 1 s) guarantees. Were it never armed, the request would hang
/// and the bound below fail. (That the timer is set for the request's start plus the limit, not
/// the tick's, is shown exactly by `pipeline::deadline::tests`.)
#[tokio::test]
async fn a_deadline_armed_by_the_connections_tick_still_cuts_at_the_limit() {
    let (_gw, _web, _api, c) =
        two_projects("[limits]\nrequest_head_timeout = \"2s\"\nupstream_response_timeout = \"3s\"\n").await;
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(30), c.get("/p/web/slow", Some(&alice())))
        .await
        .expect("no answer in 30 s: the deadline's timer was never armed");
    let took = started.elapsed();
    assert_timed_out(&r);
    assert!(
        took >= Duration::from_secs(3),
        "cut after {took:?}, before the 3 s limit"
    );
}

/// A client that leaves before its answer came (the upstream is still working on it) still
/// leaves an access line: status 0, outcome client_gone. Without it an answer that never came is
/// invisible in the log.
#[tokio::test]
async fn a_request_whose_client_leaves_before_the_answer_is_logged_as_gone() {
    let (gw, _web, _api, c) = two_projects("").await;
    let left = tokio::time::timeout(Duration::from_millis(1500), c.get("/p/web/slow", Some(&alice()))).await;
    assert!(left.is_err(), "the upstream never answers /slow");
    assert!(
        gw.wait_log("client_gone", Duration::from_secs(10)).await,
        "no line for the abandoned request:\n{}",
        gw.logs()
    );
    let logs = gw.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("/p/web/slow") && l.contains("client_gone"))
        .unwrap_or_else(|| panic!("no access line for /p/web/slow:\n{logs}"));
    for field in [
        "access:",
        "status=0 ",
        "user=\"alice\"",
        "project=\"web\"",
        "outcome=\"client_gone\"",
    ] {
        assert!(line.contains(field), "{field} not in {line}");
    }
}

#[tokio::test]
async fn client_credentials_never_reach_the_upstream_and_its_password_never_comes_back() {
    let (gw, web, _api, c) = two_projects("").await;
    let token = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "alice:alice-password-1");
    let req = c
        .request(
            "GET",
            &format!("/p/web/echo?x=1&auth_token={token}&auth%5Ftoken={token}"),
            Some(&alice()),
        )
        .header("x-forwarded-for", "6.6.6.6")
        .header("proxy-authorization", "Basic c2VjcmV0")
        .header("connection", "x-private")
        .header("x-private", "hop")
        .body(Full::default())
        .unwrap();
    let r = c.call(req).await;
    assert_eq!(r.status, 200);
    let seen = web.seen();
    let got = &seen.last().unwrap();
    assert_eq!(got.target, "/echo?x=1", "auth_token is removed however it is spelled");
    let upstream_auth = basic("opencode", UPSTREAM_PW);
    assert_eq!(
        got.headers["authorization"].to_str().unwrap(),
        upstream_auth,
        "the upstream gets its own credential"
    );
    assert_eq!(got.headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(got.headers["x-forwarded-proto"], "https");
    assert_eq!(got.headers["x-forwarded-host"].to_str().unwrap(), c.authority());
    assert!(got.headers.get("proxy-authorization").is_none() && got.headers.get("x-private").is_none());
    // The echoing upstream tried to hand its credential back: it must not arrive.
    let everything = format!("{:?}{}", r.headers, r.body);
    let encoded_pw = upstream_auth.trim_start_matches("Basic ");
    assert!(
        !everything.contains(UPSTREAM_PW) && !everything.contains(encoded_pw),
        "leaked: {everything}"
    );
    assert!(!everything.contains("x-echo-authorization: Basic"));
    // Nor does any log line carry a credential. (The request's access line is the last one; the
    // log reaches the test through a pipe a thread drains, so wait for it.)
    assert!(
        gw.wait_log("auth_token=<redacted>", Duration::from_secs(5)).await,
        "{}",
        gw.logs()
    );
    let logs = gw.logs();
    for secret in [UPSTREAM_PW, encoded_pw, "alice-password-1", token.as_str()] {
        assert!(!logs.contains(secret), "a secret reached the log:\n{logs}");
    }
    assert!(logs.contains("auth_token=<redacted>"), "{logs}");
}

#[tokio::test]
async fn one_verified_password_runs_argon2_once_for_100_requests() {
    let (gw, _web, _api, c) = two_projects("").await;
    let before = gw.metric("argon2_verifications_total");
    let mut conn = c.http1().await;
    for _ in 0..100 {
        let req = c
            .request("GET", "/p/web/global/health", Some(&alice()))
            .body(Full::default())
            .unwrap();
        let r = crate::common::client::read(conn.send_request(req).await.unwrap()).await;
        assert_eq!(r.status, 200);
    }
    // And over new connections too: the cache is per credential, not per connection.
    for _ in 0..5 {
        assert_eq!(c.get("/p/web/global/health", Some(&alice())).await.status, 200);
    }
    assert_eq!(gw.metric("argon2_verifications_total") - before, 1);
}

#[tokio::test]
async fn h2_clients_are_served() {
    let (gw, _web, _api, _c) = two_projects("").await;
    let c = Https::with_alpn(gw.https, &gw.ca(), vec![b"h2".to_vec()]);
    let tls = c.tls().await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(format!("https://{}/p/web/global/health", c.authority()))
        .header("authorization", alice())
        .body(Full::<bytes::Bytes>::default())
        .unwrap();
    let r = crate::common::client::read(send.send_request(req).await.unwrap()).await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("healthy"));
}

#[tokio::test]
async fn writes_from_a_foreign_origin_are_refused() {
    let (_gw, web, _api, c) = two_projects("").await;
    let post = |origin: &str| {
        c.request("POST", "/p/web/session", Some(&alice()))
            .header("origin", origin)
            .body(Full::from("{}"))
            .unwrap()
    };
    let r = c.call(post("https://evil.example")).await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("evil.example"));
    let own = format!("https://{}", c.authority());
    let r = c.call(post(&own)).await;
    assert_eq!(r.status, 200);
    let seen = web.seen();
    assert_eq!(seen.len(), 1, "only the same-origin write reached the upstream");
    assert_eq!(
        seen[0].headers["origin"].to_str().unwrap(),
        web.url(),
        "Origin names the upstream, like Host"
    );
    assert_eq!(seen[0].headers["host"].to_str().unwrap(), web.addr.to_string());
}

#[tokio::test]
async fn an_oversized_body_is_refused_with_413() {
    let (_gw, web, _api, c) = two_projects("[limits]\nmax_body_bytes = 1000\n").await;
    let req = c
        .request("POST", "/p/web/session/ses_1/message", Some(&alice()))
        .body(Full::from(vec![b'x'; 5000]))
        .unwrap();
    assert_eq!(c.call(req).await.status, 413);
    let req = c
        .request("POST", "/p/web/session/ses_1/message", Some(&alice()))
        .body(Full::from(vec![b'x'; 500]))
        .unwrap();
    let r = c.call(req).await;
    assert_eq!((r.status.as_u16(), r.body.as_str()), (200, "500"));
    assert_eq!(web.seen().len(), 1);
}

#[tokio::test]
async fn a_project_can_have_a_port_of_its_own() {
    let web = FakeUpstream::start(UPSTREAM_PW).await;
    let config = base_config(&format!(
        "[[project]]\nname = \"web\"\nupstream = \"{}\"\nupstream_password_file = \"pw\"\nlisten = \"127.0.0.1:0\"\n\n{}{}",
        web.url(),
        external_project("api", &web.url()),
        users_toml(&[ALICE])
    ));
    let gw = Gateway::start_behind(&config, UPSTREAM_PW);
    let line = gw
        .logs()
        .lines()
        .find(|l| l.contains("project listener ready"))
        .unwrap()
        .to_string();
    let addr: std::net::SocketAddr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("listen="))
        .unwrap()
        .parse()
        .unwrap();
    let c = Https::new(addr, &gw.ca());
    // Everything on that port is the project's, at the root, as the web UI needs.
    let r = c.get("/echo", Some(&alice())).await;
    assert_eq!(r.status, 200);
    assert!(r.body.starts_with("/echo\n"), "{}", r.body);
    assert_eq!(c.get("/global/health", None).await.status, 401);
}

#[tokio::test]
async fn an_upstream_without_a_password_is_reported() {
    let open = FakeUpstream::start("").await;
    let config = base_config(&format!(
        "[[project]]\nname = \"open\"\nupstream = \"{}\"\n\n{}",
        open.url(),
        users_toml(&[ALICE])
    ));
    let gw = Gateway::start(&config);
    assert!(
        gw.wait_log("answers without a password", Duration::from_secs(10)).await,
        "{}",
        gw.logs()
    );
    assert!(
        gw.wait_log("reason=\"upstream_without_password\"", Duration::from_secs(5))
            .await
    );
    // It still serves (the operator may accept the risk), with no credential injected.
    let c = Https::new(gw.https, &gw.ca());
    assert_eq!(c.get("/global/health", Some(&alice())).await.status, 200);
    assert!(open.seen()[0].headers.get("authorization").is_none());
}
