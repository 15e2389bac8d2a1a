//! Abuse: password guessing, floods of novel credentials, slow clients, oversized requests,
//! connection and stream hogging. Loopback only, with 127.0.0.x standing for distinct clients;
//! every loop is bounded.

use std::time::{Duration, Instant};

use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::client::{Https, assert_closed_in_handshake, basic, read, read_until};
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::{ALICE, Gateway, TestUser};
use crate::common::stack::one_project;

const PW: &str = "abuse-upstream-pw";

async fn gateway(limits: &str) -> (Gateway, FakeUpstream, Https) {
    let bob = TestUser {
        name: "bob",
        password: "bob-password-22",
        projects: "[\"*\"]",
        role: "operator",
    };
    let (gw, web) = one_project(PW, limits, &[ALICE, bob]).await;
    let c = Https::new(gw.https, &gw.ca());
    (gw, web, c)
}

fn alice() -> String {
    basic("alice", "alice-password-1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_wrong_passwords_from_one_address_stop_at_the_limit_before_argon2() {
    let (gw, _web, c) = gateway("").await;
    let before = gw.metric("argon2_verifications_total");
    let attacker = c.from("127.0.0.2");
    let owner = c.from("127.0.0.3");
    let flood_started = Instant::now();
    let flood = tokio::spawn(async move {
        let mut conn = attacker.http1().await;
        let (mut unauthorized, mut limited, mut retry_after_ok) = (0u64, 0u64, true);
        for i in 0..1000 {
            let req = attacker
                .request("GET", "/global/health", Some(&basic("alice", &format!("guess-{i}"))))
                .body(Full::default())
                .unwrap();
            let r = read(conn.send_request(req).await.unwrap()).await;
            match r.status.as_u16() {
                401 => unauthorized += 1,
                429 => {
                    limited += 1;
                    retry_after_ok &= r
                        .headers
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                        .is_some_and(|s| (1..=60).contains(&s));
                }
                other => panic!("unexpected {other}"),
            }
        }
        (unauthorized, limited, retry_after_ok)
    });
    // Meanwhile (once the flood is being limited) the owner, from elsewhere, logs in at once.
    let deadline = Instant::now() + Duration::from_secs(30);
    while gw.metric("limiter_refusals_total{reason=\"login\"}") == 0 {
        assert!(
            Instant::now() < deadline,
            "the flood was never limited: {} auth failures, finished: {}",
            gw.metric("logins_total{method=\"password\",outcome=\"failure\"}"),
            flood.is_finished()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    assert_eq!(owner.get("/global/health", Some(&alice())).await.status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the owner waited {:?}",
        started.elapsed()
    );
    let (unauthorized, limited, retry_after_ok) = flood.await.unwrap();
    // Burst 10, then 5 a minute (one per 12 s) for as long as the flood lasted.
    let refills = flood_started.elapsed().as_secs() / 12 + 1;
    assert!(
        unauthorized >= 10 && unauthorized <= 10 + refills,
        "{unauthorized} guesses were checked in {:?}",
        flood_started.elapsed()
    );
    assert_eq!(unauthorized + limited, 1000);
    assert!(retry_after_ok, "every 429 says when to retry");
    let runs = gw.metric("argon2_verifications_total") - before;
    eprintln!(
        "1000 wrong passwords: {unauthorized} checked, {limited} refused before argon2 in {:?}",
        flood_started.elapsed()
    );
    assert_eq!(
        runs,
        unauthorized + 1,
        "argon2 ran only for the guesses within the limit, and the owner"
    );
    assert!(
        gw.wait_log("reason=\"address\"", Duration::from_secs(5)).await,
        "the refusals are logged with why"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_novel_credentials_never_run_more_argon2_than_cores_and_users_keep_working() {
    let (gw, _web, c) = gateway("").await;
    // Alice is authenticated (her credential is cached) before the flood starts.
    let steady = c.from("127.0.0.4");
    assert_eq!(steady.get("/global/health", Some(&alice())).await.status, 200);
    let flood_started = Instant::now();
    let mut flood = Vec::new();
    for a in 1..=100u32 {
        let client = c.from(&format!("127.0.1.{a}"));
        flood.push(tokio::spawn(async move {
            let mut conn = client.http1().await;
            let mut statuses = [0u32; 2];
            for i in 0..100u32 {
                let cred = basic(&format!("user{a}x{i}"), &format!("pw-{a}-{i}"));
                let req = client
                    .request("GET", "/global/health", Some(&cred))
                    .body(Full::default())
                    .unwrap();
                let status = read(conn.send_request(req).await.unwrap()).await.status.as_u16();
                assert!(status == 401 || status == 429, "{status}");
                statuses[usize::from(status == 429)] += 1;
            }
            statuses
        }));
    }
    let mut worst = Duration::ZERO;
    let mut ok = 0;
    while !flood.iter().all(|t| t.is_finished()) {
        let started = Instant::now();
        let r = steady.get("/global/health", Some(&alice())).await;
        assert_eq!(r.status, 200, "an authenticated request failed during the flood");
        worst = worst.max(started.elapsed());
        ok += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut checked = 0;
    for (a, t) in flood.into_iter().enumerate() {
        let [unauthorized, limited] = t.await.unwrap();
        // The lower bound: each address's burst of 10 was checked (401), and the limiter, not
        // something else, refused the rest (429).
        assert!(
            unauthorized >= 10 && limited >= 1,
            "address {a}: {unauthorized} checked, {limited} refused"
        );
        checked += unauthorized;
    }
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    assert!(
        gw.metric("argon2_peak_running") <= cores,
        "more argon2 at once than cores"
    );
    // Each address: a burst of 10, then one more every 12 s while the flood lasted.
    let per_address = 10 + flood_started.elapsed().as_secs() / 12 + 1;
    assert!(
        u64::from(checked) <= 100 * per_address,
        "{checked} novel credentials reached argon2 in {:?}",
        flood_started.elapsed()
    );
    assert!(ok >= 5, "the authenticated client kept going ({ok} requests)");
    assert!(
        worst < Duration::from_secs(5),
        "an authenticated request took {worst:?}"
    );
    eprintln!("flood: {checked} of 10000 checked by argon2; {ok} authenticated requests, slowest {worst:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_request_heads_are_cut_at_the_head_timeout_while_others_are_served() {
    let (gw, _web, c) = gateway("[limits]\nrequest_head_timeout = \"2s\"\ntls_handshake_timeout = \"2s\"\n").await;
    let mut slow = Vec::new();
    // How many slow clients and silent ones are connected (TLS done, or TCP for the silent one).
    let connected = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for i in 0..500u32 {
        let client = c.from(&format!("127.0.2.{}", 1 + i % 5));
        let connected = connected.clone();
        slow.push(tokio::spawn(async move {
            let started = Instant::now();
            let mut tls = client.tls().await;
            connected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let head = b"GET /global/health HTTP/1.1\r\nHost: x\r\nX-Slow: ";
            for b in head.iter().cycle().take(60) {
                if tls.write_all(&[*b]).await.is_err() || tls.flush().await.is_err() {
                    return started.elapsed();
                }
                let mut buf = [0u8; 64];
                if let Ok(r) = tokio::time::timeout(Duration::from_secs(1), tls.read(&mut buf)).await {
                    // Closed (or an error answer and then closed).
                    if matches!(r, Ok(0) | Err(_)) {
                        return started.elapsed();
                    }
                }
            }
            Duration::from_secs(3600)
        }));
    }
    // A client that connects and never says hello is cut at the handshake timeout.
    let silent = {
        let client = c.from("127.0.0.7");
        let connected = connected.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let mut tcp = client.tcp().await.unwrap();
            connected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 8];
            let _ = tokio::time::timeout(Duration::from_secs(30), tcp.read(&mut buf)).await;
            started.elapsed()
        })
    };
    // The normal request goes once every slow client is connected (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n = connected.load(std::sync::atomic::Ordering::SeqCst);
        if n == 501 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {n} of 501 slow clients connected; the gateway has {} open",
            gw.metric("connections_open")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    assert_eq!(
        c.from("127.0.0.5").get("/global/health", Some(&alice())).await.status,
        200
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a normal request waited {:?}",
        started.elapsed()
    );
    let mut longest = Duration::ZERO;
    for t in slow {
        longest = longest.max(t.await.unwrap());
    }
    assert!(longest < Duration::from_secs(15), "a slow head was held {longest:?}");
    let silent = silent.await.unwrap();
    assert!(
        silent < Duration::from_secs(10) && silent >= Duration::from_millis(1500),
        "{silent:?}"
    );
    // Everything was cleaned up (the admin connection asking is the one left).
    let deadline = Instant::now() + Duration::from_secs(10);
    while gw.metric("connections_open") > 1 {
        assert!(Instant::now() < deadline, "connections left open");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn oversized_heads_many_headers_long_uris_and_bodies_get_their_status() {
    let (gw, web, c) = gateway("[limits]\nmax_body_bytes = 100000\nbody_idle_timeout = \"1s\"\n").await;
    let big = "x".repeat(70 * 1024);
    let req = c
        .request("GET", "/global/health", Some(&alice()))
        .header("x-big", big.as_str())
        .body(Full::default())
        .unwrap();
    assert_eq!(c.call(req).await.status, 431);
    let mut b = c.request("GET", "/global/health", Some(&alice()));
    for i in 0..150 {
        b = b.header(format!("x-h{i}"), "v");
    }
    assert_eq!(c.call(b.body(Full::default()).unwrap()).await.status, 431);
    let long = format!("/global/health?q={}", "y".repeat(9000));
    assert_eq!(c.get(&long, Some(&alice())).await.status, 414);
    let req = c
        .request("POST", "/session/ses_1/message", Some(&alice()))
        .body(Full::from(vec![b'z'; 200_000]))
        .unwrap();
    assert_eq!(c.call(req).await.status, 413);
    // A chunked body (no Content-Length) that grows past the limit is cut too.
    let mut tls = c.tls().await;
    let chunk = "a".repeat(50_000);
    let head = format!(
        "POST /session/ses_1/message HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        c.authority(),
        alice()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    for _ in 0..3 {
        let _ = tls
            .write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes())
            .await;
    }
    let _ = tls.write_all(b"0\r\n\r\n").await;
    let mut answer = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut answer))
        .await
        .unwrap()
        .unwrap_or(0);
    assert!(
        String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&answer[..n])
    );
    drop(tls);
    // A body that stops arriving is cut at body_idle_timeout.
    let mut tls = c.tls().await;
    let head = format!(
        "POST /session/ses_1/message HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\nContent-Length: 1000\r\n\r\nonly a little",
        c.authority(),
        alice()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let n = tokio::time::timeout(Duration::from_secs(15), tls.read(&mut answer))
        .await
        .unwrap()
        .unwrap_or(0);
    assert!(
        String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&answer[..n])
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(tls);
    // Every refused request's connection is gone (the admin connection asking is the one left).
    let deadline = Instant::now() + Duration::from_secs(10);
    while gw.metric("connections_open") > 1 {
        assert!(Instant::now() < deadline, "connections left open after refusals");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A GET of ordinary size does reach the upstream (its log is kept); no oversized one did.
    assert_eq!(c.get("/global/health?control=1", Some(&alice())).await.status, 200);
    let gets: Vec<String> = web
        .seen()
        .iter()
        .filter(|s| s.method != "POST")
        .map(|s| format!("{} {}", s.method, s.target))
        .collect();
    assert_eq!(
        gets,
        ["GET /global/health?control=1"],
        "no oversized GET reached the upstream"
    );
}

#[tokio::test]
async fn the_per_user_stream_cap_refuses_the_next_stream_while_the_others_flow() {
    let (_gw, web, c) = gateway("[limits]\nmax_streams_per_user = 2\n").await;
    let open = || async {
        c.send(
            c.request("GET", "/global/event", Some(&alice()))
                .body(Full::default())
                .unwrap(),
        )
        .await
    };
    let mut a = open().await.into_body();
    let mut b = open().await.into_body();
    read_until(&mut a, Duration::from_secs(5), |t| t.contains("server.connected")).await;
    read_until(&mut b, Duration::from_secs(5), |t| t.contains("server.connected")).await;
    let third = read(open().await).await;
    assert_eq!(third.status, 429);
    assert!(third.body.contains("too many open streams"), "{}", third.body);
    assert!(third.headers.contains_key("retry-after"));
    web.wait_subscribers(2).await;
    web.events.send("{\"type\":\"still-flowing\"}".into()).unwrap();
    for s in [&mut a, &mut b] {
        assert!(
            read_until(s, Duration::from_secs(5), |t| t.contains("still-flowing"))
                .await
                .contains("still-flowing")
        );
    }
    // Another user has slots of their own; and a closed stream frees its slot.
    let bob = c
        .send(
            c.request("GET", "/global/event", Some(&basic("bob", "bob-password-22")))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(bob.status(), 200);
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = open().await;
        if r.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the closed stream's slot never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_opened_at_once_with_one_new_credential_are_charged_one_login() {
    // A browser or wrk opens several connections at once with the same password. Only the
    // request that starts the argon2 run counts against the login limit (10 per address); the
    // others wait for its verdict instead of being refused.
    let (gw, _web, c) = gateway("").await;
    let client = c.from("127.0.0.12");
    let mut conns = Vec::new();
    for _ in 0..32 {
        conns.push(client.http1().await);
    }
    let before = gw.metric("argon2_verifications_total");
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let req = client
                .request("GET", "/global/health", Some(&alice()))
                .body(Full::default())
                .unwrap();
            tokio::spawn(async move { read(conn.send_request(req).await.unwrap()).await.status.as_u16() })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let runs = gw.metric("argon2_verifications_total") - before;
    assert!(runs <= 2, "32 requests with one credential ran argon2 {runs} times");
}

#[tokio::test]
async fn requests_per_user_are_rate_limited() {
    let (_gw, _web, c) = gateway("[limits]\nrequests_per_second = 2\nburst = 5\n").await;
    let mut conn = c.http1().await;
    let mut statuses = Vec::new();
    for _ in 0..20 {
        let req = c
            .request("GET", "/global/health", Some(&alice()))
            .body(Full::default())
            .unwrap();
        let r = read(conn.send_request(req).await.unwrap()).await;
        if r.status == 429 {
            assert!(r.headers.contains_key("retry-after"));
        }
        statuses.push(r.status.as_u16());
    }
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert!((5..=8).contains(&ok), "{statuses:?}");
    assert!(statuses.contains(&429));
    assert_eq!(
        c.get("/global/health", Some(&basic("bob", "bob-password-22")))
            .await
            .status,
        200,
        "bob has his own allowance"
    );
}

#[tokio::test]
async fn connections_per_address_are_capped() {
    let (gw, _web, c) = gateway("[limits]\nmax_connections_per_ip = 3\n").await;
    let hog = c.from("127.0.0.6");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(hog.try_tls().await.expect("within the cap"));
    }
    assert_closed_in_handshake(hog.try_tls().await, "the fourth connection from one address");
    assert!(
        gw.wait_log("reason=\"connection_limit\"", Duration::from_secs(5)).await,
        "the refusal is logged with why:\n{}",
        gw.logs()
    );
    assert!(
        c.from("127.0.0.9").try_tls().await.is_ok(),
        "another address is not affected"
    );
    held.pop();
    let deadline = Instant::now() + Duration::from_secs(5);
    while hog.try_tls().await.is_err() {
        assert!(Instant::now() < deadline, "a closed connection's slot never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gw.metric("limiter_refusals_total{reason=\"connections") >= 1);
}

/// Issue 21, defect 1: the verified-credential caches answered before the login limiter, so an
/// address far over its allowance still told a right guess (200) from a wrong one (429). Now a spent
/// allowance answers first on every road a credential takes (Basic, Bearer, the form), and only a
/// credential already proven on the same connection keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_over_its_login_allowance_learns_nothing_from_the_caches() {
    // A burst of 3, then one a minute: the allowance cannot refill while the test runs.
    let (gw, _web, c) = gateway("[limits]\nauth_failure_burst = 3\nauth_failures_per_minute = 1\n").await;
    let token = crate::common::login::token_create(&gw, "alice");
    let bearer = format!("Bearer {token}");
    // alice is active from her own address: her password and her token are in the caches.
    let owner = c.from("127.0.0.22");
    assert_eq!(owner.get("/global/health", Some(&alice())).await.status, 200);
    assert_eq!(owner.get("/global/health", Some(&bearer)).await.status, 200);
    // The attacker's address once presented the right password on a connection it keeps.
    let attacker = c.from("127.0.0.21");
    let mut proven = attacker.http1().await;
    let health = |auth: &str| {
        attacker
            .request("GET", "/global/health", Some(auth))
            .body(Full::default())
            .unwrap()
    };
    assert_eq!(
        read(proven.send_request(health(&alice())).await.unwrap()).await.status,
        200
    );
    // Then it guesses until the limiter refuses (a connection each: the address is what counts).
    let mut wrong = 0;
    let first_refusal = loop {
        let r = attacker
            .get("/global/health", Some(&basic("alice", &format!("guess-{wrong}"))))
            .await;
        match r.status.as_u16() {
            401 => wrong += 1,
            429 => break r,
            other => panic!("guess {wrong} answered {other}: {}", r.body),
        }
        assert!(wrong <= 3, "more wrong guesses were checked than the burst of 3");
    };
    assert!(first_refusal.body.contains("address limit"), "{}", first_refusal.body);
    let runs = gw.metric("argon2_verifications_total");
    let expect_limited = |what: &str, r: &crate::common::client::Reply| {
        assert_eq!(
            r.status, 429,
            "{what}: the right credential from a spent address: {}",
            r.body
        );
        let after: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=60).contains(&after), "{what}: Retry-After {after}");
    };
    // The right password, on a new connection: the cache must not answer.
    let r = attacker.get("/global/health", Some(&alice())).await;
    expect_limited("cached password", &r);
    assert!(
        r.body.contains("login_limited") && r.body.contains("address limit"),
        "{}",
        r.body
    );
    // The right token, cached: the same.
    expect_limited("cached token", &attacker.get("/global/health", Some(&bearer)).await);
    // The token as a Basic password: the same.
    expect_limited(
        "token as password",
        &attacker.get("/global/health", Some(&basic("alice", &token))).await,
    );
    // The login form with the right password: the same, and no cookie.
    let r = crate::common::login::post_login(&attacker, "alice", "alice-password-1").await;
    expect_limited("login form", &r);
    assert!(r.headers.get("set-cookie").is_none(), "a refused login sets no cookie");
    // What was proven on a connection keeps working there.
    proven.ready().await.unwrap();
    assert_eq!(
        read(proven.send_request(health(&alice())).await.unwrap()).await.status,
        200
    );
    // alice's own address is not affected.
    assert_eq!(owner.get("/global/health", Some(&alice())).await.status, 200);
    assert_eq!(owner.get("/global/health", Some(&bearer)).await.status, 200);
    assert_eq!(
        gw.metric("argon2_verifications_total"),
        runs,
        "no refusal cost an argon2 run"
    );
    assert!(
        gw.wait_log("login refused: limit reached", Duration::from_secs(5))
            .await,
        "the refusals are logged"
    );
}
