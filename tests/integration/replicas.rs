//! Two replicas behind a real load balancer (issue 27): Debian's HAProxy (`send-proxy-v2`,
//! `balance first`, so everything goes to A while it lives) in front of two gateways with the
//! same config on one throwaway PostgreSQL database, watching one real OpenCode server driven by
//! the fake model. A phone (a client on 127.0.0.2) pairs with a code B's CLI issued, watches the
//! inbox's event stream, and sees a permission request; the team's webhook is told once. An
//! answer given through B clears the card from A's inbox. Then A is killed (`kill -9`): the phone's stream ends, it connects again and lands on B with the
//! same cookie (no new login), the inbox is still complete, the next request is told once more
//! (B took the lock), an answer through B clears the card and runs the tool, and the audit
//! trails name 127.0.0.2. Finally the device revoked with the CLI is refused within a second.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};

use crate::common::client::{Https, basic, json};
use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::login::{act, pair_code, redeem_code};
use crate::common::opencode::{FakeModel, OpenCode};
use crate::common::process::Guarded;
use crate::common::write_secret;

const ALICE: &str = "alice-password-1";
const PHONE: &str = "127.0.0.2";

/// HAProxy on `port` in front of `a` then `b`: `balance first` (A while it is up), health
/// checks every 200 ms, and a refused connection tried again on another server at each retry.
fn haproxy(dir: &std::path::Path, port: u16, a: u16, b: u16) -> Guarded {
    crate::common::haproxy::start(
        dir,
        port,
        "  retries 3\n  option redispatch 1\n",
        &format!(
            "  balance first\n  server a 127.0.0.1:{a} send-proxy-v2 check inter 200ms fall 1 rise 2\n  \
             server b 127.0.0.1:{b} send-proxy-v2 check inter 200ms fall 1 rise 2\n"
        ),
    )
}

/// The inbox page as the phone sees it.
async fn inbox_page(c: &Https, cookie: &str) -> String {
    let req = c
        .request("GET", "/inbox", None)
        .header("cookie", cookie)
        .header("accept", "text/html")
        .body(Full::default())
        .unwrap();
    let r = c.call(req).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

/// The permission ids on an inbox page (`data-card="per_…"`).
fn cards(page: &str) -> Vec<String> {
    page.split("data-card=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(String::from)
        .collect()
}

/// Poll the phone's inbox (bounded) until `pred` holds for its cards.
async fn cards_until(c: &Https, cookie: &str, what: &str, pred: impl Fn(&[String]) -> bool) -> Vec<String> {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let now = cards(&inbox_page(c, cookie).await);
        if pred(&now) {
            return now;
        }
        assert!(Instant::now() < until, "{what} within 60 s; the cards: {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A new session in alpha, prompted so that the model asks for bash (through the balancer).
async fn ask_for_bash(c: &Https) {
    let (status, s) = json(c, "POST", "/p/alpha/session", &basic("alice", ALICE), "{}").await;
    assert_eq!(status, 200, "{s}");
    let id = s["id"].as_str().unwrap();
    let (status, body) = json(
        c,
        "POST",
        &format!("/p/alpha/session/{id}/prompt_async"),
        &basic("alice", ALICE),
        r#"{"parts":[{"type":"text","text":"please RUNBASH"}]}"#,
    )
    .await;
    assert_eq!(status, 204, "{body}");
}

/// The inbox's event stream, opened by the phone: the response body once `: connected` came.
async fn open_events(c: &Https, cookie: &str) -> hyper::body::Incoming {
    let req = c
        .request("GET", "/_gw/events", None)
        .header("cookie", cookie)
        .header("accept", "text/event-stream")
        .body(Full::default())
        .unwrap();
    let resp = c.send(req).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let first =
        crate::common::client::read_until(&mut body, Duration::from_secs(10), |s| s.contains(": connected")).await;
    assert!(first.contains(": connected"), "{first}");
    body
}

/// Webhook calls, waited for (bounded) until there are `n`.
async fn told(seen: &std::sync::Arc<std::sync::Mutex<Vec<String>>>, n: usize) -> usize {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let got = seen.lock().unwrap().len();
        if got >= n {
            return got;
        }
        assert!(Instant::now() < until, "{got} webhook calls, not {n}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode, PostgreSQL and HAProxy: run scripts/test.sh"]
async fn behind_haproxy_a_phone_keeps_its_login_and_inbox_when_a_replica_is_killed() {
    let Some((cluster, url)) = crate::common::pg_config::cluster().await else {
        return;
    };
    let model = FakeModel::start("echo RAN >> ran.txt").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let (hook, seen) = crate::common::webhook::receiver(vec![]).await;
    let front = crate::common::free_port();
    let config = base_config(&format!(
        "[store]\nurl = \"{url}\"\n\n[notify]\nwebhook = \"{hook}\"\ndebounce = \"100ms\"\n\n\
         [[project]]\nname = \"alpha\"\nupstream = \"{}\"\nupstream_password_file = \"upstream.pw\"\ndirectory = \"{}\"\n\n{}",
        oc.url(),
        oc.project.display(),
        users_toml(&[TestUser {
            name: "alice",
            password: ALICE,
            projects: "[\"*\"]",
            role: "admin",
        }])
    ))
    .replace(
        "state_dir = \"state\"\n",
        &format!("state_dir = \"state\"\ntrusted_proxies = [\"127.0.0.1\"]\npublic_url = \"https://gw.localhost:{front}\"\n"),
    );
    let pw = oc.password.clone();
    let a = Gateway::start_with(&config, &[], |d| write_secret(&d.join("upstream.pw"), &pw));
    assert!(
        a.wait_log("this gateway holds the lock", Duration::from_secs(10)).await,
        "{}",
        a.logs()
    );
    // B serves A's certificate: to the phone, the two are one site.
    let certs = a.dir.path().join("certs");
    let b = Gateway::start_with(&config, &[], |d| {
        write_secret(&d.join("upstream.pw"), &pw);
        std::fs::create_dir_all(d.join("certs")).unwrap();
        for f in std::fs::read_dir(&certs).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), d.join("certs").join(f.file_name())).unwrap();
        }
    });
    let _haproxy = haproxy(a.dir.path(), front, a.https.port(), b.https.port());
    let phone = Https::new(format!("127.0.0.1:{front}").parse().unwrap(), &a.ca())
        .host("gw.localhost")
        .from(PHONE);

    // A code B's CLI issued, redeemed through the balancer (on A): one store of codes.
    let cookie = redeem_code(&phone, &pair_code(&b)).await;
    // (The log is read as it is written: waited for, bounded.)
    assert!(
        a.wait_log("device paired", Duration::from_secs(5)).await,
        "the pairing did not reach A:\n{}\nB:\n{}",
        a.logs(),
        b.logs()
    );
    let mut events = open_events(&phone, &cookie).await;

    ask_for_bash(&phone).await;
    let answered_elsewhere = cards_until(&phone, &cookie, "the first permission card", |c| c.len() == 1).await;
    let changed =
        crate::common::client::read_until(&mut events, Duration::from_secs(10), |s| s.contains("event: change")).await;
    assert!(
        changed.contains("event: change"),
        "the stream did not say the inbox changed: {changed}"
    );
    assert_eq!(told(&seen, 1).await, 1);
    assert!(
        b.wait_log(
            "another gateway on the state database sends the notifications",
            Duration::from_secs(10)
        )
        .await,
        "B saw nothing to leave to A:\n{}",
        b.logs()
    );

    // An answer given through B (its control socket, as the CLI on B's host does) reaches
    // OpenCode, which tells every watcher: the card leaves the phone's inbox on A.
    let (status, body) = tokio::task::block_in_place(|| {
        b.control(
            "POST",
            &format!("/inbox/reply?project=alpha&id={}&reply=once", answered_elsewhere[0]),
        )
    });
    assert_eq!(status, 200, "{body}");
    cards_until(
        &phone,
        &cookie,
        "the card answered through B gone from A's inbox",
        |c| c.is_empty(),
    )
    .await;
    ask_for_bash(&phone).await;
    let first = cards_until(&phone, &cookie, "the second permission card", |c| c.len() == 1).await;
    assert_ne!(first, answered_elsewhere);
    assert_eq!(told(&seen, 2).await, 2);

    // A dies mid-use: its stream ends, and the phone comes back through the balancer on B.
    a.signal(libc::SIGKILL);
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(frame) = events.frame().await {
            if frame.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the event stream outlived A");
    // As a browser's EventSource does, the phone connects again until it gets through (bounded):
    // until HAProxy's check marks A down, a connection may still be sent to A first.
    let until = Instant::now() + Duration::from_secs(5);
    let mut attempts = 1;
    while let Err(e) = phone.try_tls().await {
        assert!(Instant::now() < until, "no way through HAProxy 5 s after A died: {e}");
        attempts += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("through to B after {attempts} connection attempt(s)");
    let mut events = open_events(&phone, &cookie).await;
    let on_b = cards(&inbox_page(&phone, &cookie).await);
    assert_eq!(on_b, first, "B's inbox is not A's");
    assert!(
        b.wait_log("this gateway holds the lock", Duration::from_secs(10)).await,
        "B did not take over:\n{}",
        b.logs()
    );

    ask_for_bash(&phone).await;
    let both = cards_until(&phone, &cookie, "the third permission card", |c| c.len() == 2).await;
    let changed =
        crate::common::client::read_until(&mut events, Duration::from_secs(10), |s| s.contains("event: change")).await;
    assert!(
        changed.contains("event: change"),
        "B's stream did not say the inbox changed: {changed}"
    );
    assert_eq!(told(&seen, 3).await, 3);

    // An answer through B: the card goes and the tool runs (its second run: the first was the
    // answer given through B's control socket).
    let r = act(&phone, &cookie, &format!("project=alpha&id={}&do=once", first[0])).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let left = cards_until(&phone, &cookie, "the answered card gone", |c| c.len() == 1).await;
    assert_eq!(left, both.into_iter().filter(|c| *c != first[0]).collect::<Vec<_>>());
    let ran = oc.project.join("ran.txt");
    let until = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&ran).is_ok_and(|t| t.lines().filter(|l| *l == "RAN").count() == 2) {
        assert!(Instant::now() < until, "the two answered tools did not both run");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen.lock().unwrap().len(), 3, "told more than once per request");

    // The real client, in both replicas' audit trails.
    use crate::common::audit::{file, find};
    let paired = find(&file(&a), "device_paired", |_| true).await;
    assert_eq!(paired["address"], PHONE);
    let answered = find(&file(&b), "permission_answer", |r| r["via"] == "device").await;
    assert_eq!(answered["address"], PHONE);
    assert_eq!(answered["via"], "device");

    // The device revoked with the CLI: within a second the phone is sent to the login form.
    let device = paired["via_id"].as_str().unwrap().to_string();
    let (ok, said) = tokio::task::block_in_place(|| b.cli(&["devices", "revoke", &device]));
    assert!(ok, "{said}");
    sent_to_login_within_a_second(&phone, &cookie).await;
    drop((a, b));
    tokio::task::spawn_blocking(move || drop(cluster)).await.unwrap();
}

/// Within a second the phone's `/inbox` is a redirect to the login form, as for anyone without a
/// session (not any other answer than 200: a 503 from a state database that does not answer,
/// a 502 from a balancer).
async fn sent_to_login_within_a_second(phone: &Https, cookie: &str) {
    let until = Instant::now() + Duration::from_secs(1);
    let refused = loop {
        let req = phone
            .request("GET", "/inbox", None)
            .header("cookie", cookie)
            .header("accept", "text/html")
            .body(Full::default())
            .unwrap();
        let r = phone.call(req).await;
        if r.status != 200 {
            break r;
        }
        assert!(
            Instant::now() < until,
            "the revoked phone still reads the inbox 1 s later"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        refused.status, 303,
        "the revoked phone was not sent to the login form but answered: {}",
        refused.body
    );
    assert_eq!(
        refused.headers.get("location").map(|l| l.to_str().unwrap()),
        Some("/login?next=%2Finbox"),
        "{:?}",
        refused.headers
    );
}
