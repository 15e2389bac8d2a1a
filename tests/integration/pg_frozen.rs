//! A frozen state database (hostile review, round four, item 3): with every PostgreSQL process
//! stopped (SIGSTOP: its connections stay open and nothing answers, as a hung database host), a
//! form login, a token, a login cookie past its 1 s cache and a pairing code are each refused
//! within a few seconds with 503 and the reason, not left waiting; a password verified before
//! keeps working (a cached credential asks only memory); once the database runs again, logins
//! work again.

use std::time::{Duration, Instant};

use http_body_util::Full;

use crate::common::client::{Https, Reply, basic};
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::{Gateway, external_project};
use crate::common::login::{LOGIN_HOST, form_login, logged_in, pair_code, post_login, token_create};
use crate::common::pg_config::{ALICE, on_postgres};

/// What the gateway says when the database did not answer (`[store]` in docs/configuration.md).
const REASON: &str = "state database did not answer within 3 s";
/// Each refusal comes within this: the store's 3 s bound and the request's own work.
const PROMPT: Duration = Duration::from_secs(6);

/// `call`'s answer, failing the test if none comes within 10 s (a hung login).
async fn answered(what: &str, call: impl Future<Output = Reply>) -> (Reply, Duration) {
    let began = Instant::now();
    match tokio::time::timeout(Duration::from_secs(10), call).await {
        Ok(r) => (r, began.elapsed()),
        Err(_) => panic!("{what}: no answer within 10 s (the gateway hangs on the frozen database)"),
    }
}

/// `call` is refused with 503 and the reason, within [`PROMPT`].
async fn refused_promptly(what: &str, call: impl Future<Output = Reply>) {
    let (r, took) = answered(what, call).await;
    assert_eq!(r.status, 503, "{what}: {}", r.body);
    assert!(r.body.contains(REASON), "{what}: {}", r.body);
    assert!(took < PROMPT, "{what}: refused after {took:?}");
    println!("{what}: 503 after {took:?}");
}

/// A project's GET with `authorization` (the stand-in server answers it).
async fn get_with(c: &Https, authorization: &str) -> Reply {
    c.get("/p/web/global/health", Some(authorization)).await
}

async fn get_cookie(login: &Https, cookie: &str) -> Reply {
    let req = login
        .request("GET", "/login", None)
        .header("cookie", cookie)
        .body(Full::default())
        .unwrap();
    login.call(req).await
}

async fn redeem(login: &Https, code: &str) -> Reply {
    let req = login
        .request("POST", "/pair", None)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", format!("https://{}", login.authority()))
        .header("sec-fetch-site", "same-origin")
        .header("sec-fetch-mode", "navigate")
        .body(Full::from(format!("code={code}")))
        .unwrap();
    login.call(req).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_database_is_refused_in_seconds_with_the_reason_and_cached_passwords_still_work() {
    let Some((cluster, _url, config)) = on_postgres().await else {
        return;
    };
    let web = FakeUpstream::start("pw-web-upstream").await;
    let config = config.replace("[store]", &format!("{}[store]", external_project("web", &web.url())));
    let gw = Gateway::start_behind(&config, "pw-web-upstream");
    let c = Https::new(gw.https, &gw.ca());
    let login = c.host(LOGIN_HOST);
    let cookie = form_login(&c, "alice", ALICE).await;
    assert!(logged_in(&c, &cookie).await);
    let token = token_create(&gw, "alice");
    let code = pair_code(&gw);
    let password = basic("alice", ALICE);
    assert_eq!(get_with(&c, &password).await.status, 200);

    let frozen = cluster.freeze();
    refused_promptly("a form login", post_login(&c, "alice", ALICE)).await;
    refused_promptly("an API token", get_with(&c, &format!("Bearer {token}"))).await;
    refused_promptly("the login cookie", get_cookie(&login, &cookie)).await;
    refused_promptly("a pairing code", redeem(&login, &code)).await;
    // A password verified before asks only memory (docs/configuration.md, `[store]`).
    let (r, took) = answered("a cached password", get_with(&c, &password)).await;
    assert_eq!(r.status, 200, "a cached password: {}", r.body);
    assert!(took < Duration::from_secs(1), "a cached password took {took:?}");

    drop(frozen);
    let thawed = Instant::now();
    loop {
        let (r, _) = answered("a form login after the thaw", post_login(&c, "alice", ALICE)).await;
        if r.status == 303 {
            break;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(
            thawed.elapsed() < Duration::from_secs(15),
            "logins still fail 15 s after the database runs again: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("logins work {:?} after the thaw", thawed.elapsed());
    assert!(logged_in(&c, &cookie).await, "the cookie from before the freeze");
    assert_eq!(get_with(&c, &format!("Bearer {token}")).await.status, 200);
    drop(gw);
    tokio::task::spawn_blocking(move || drop(cluster)).await.unwrap();
}
