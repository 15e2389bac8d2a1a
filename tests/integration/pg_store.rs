//! The state database on PostgreSQL (issue 27, the store): a gateway with `[store] url` on a
//! throwaway cluster keeps its browser logins and API tokens there: a login survives a restart,
//! a token the CLI makes (on the same database) works at once and stops when revoked, and
//! `check` names the store without its password. Two gateways on one database share logins and
//! tokens, a pairing code one issued is redeemed on the other, and a device revoked or a logout
//! through one is heard by the other at once (`LISTEN/NOTIFY`). A shared
//! store with a project this gateway spawns on its own loopback is refused, naming the project.

use std::time::{Duration, Instant};

use http_body_util::Full;

use crate::common::client::Https;
use crate::common::gateway::{BIN, Gateway, base_config};
use crate::common::login::{
    LOGIN_HOST, form_login, logged_in, pair_code, portal_post, post_login, redeem_code, token_create,
};
use crate::common::pg_config::{ALICE, on_postgres};

/// Two gateways on `config` (an upstream password in `pw` beside each, when given), B listening
/// for the database's notices, and a client of each.
pub(crate) async fn two_gateways(config: &str, upstream_password: &str) -> (Gateway, Gateway, Https, Https) {
    let a = Gateway::start_behind(config, upstream_password);
    let b = Gateway::start_behind(config, upstream_password);
    assert!(
        b.wait_log(
            "listening for revocations made through other gateways",
            Duration::from_secs(5)
        )
        .await,
        "{}",
        b.logs()
    );
    let (ca, cb) = (Https::new(a.https, &a.ca()), Https::new(b.https, &b.ca()));
    (a, b, ca, cb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_and_tokens_live_in_postgres_and_survive_a_restart() {
    let Some((cluster, url, config)) = on_postgres().await else {
        return;
    };
    let mut gw = Gateway::start(&config);
    let c = Https::new(gw.https, &gw.ca());
    let cookie = form_login(&c, "alice", ALICE).await;
    assert!(logged_in(&c, &cookie).await);

    // The CLI writes the same database: a token made there works on the running gateway.
    let token = token_create(&gw, "alice");
    let login = c.host(LOGIN_HOST);
    let status = |token: String| {
        let login = &login;
        async move {
            let req = login
                .request("GET", "/_gw/static/app.css", None)
                .header("authorization", format!("Bearer {token}"))
                .body(Full::default())
                .unwrap();
            login.call(req).await.status
        }
    };
    assert_eq!(status(token.clone()).await, 200);

    // A restart: the login is still there (it is a row in PostgreSQL, not in state_dir).
    gw.restart();
    let c = Https::new(gw.https, &gw.ca());
    assert!(logged_in(&c, &cookie).await, "the login did not survive the restart");
    let sessions: i64 = tokio::task::spawn_blocking(move || {
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        admin
            .query_one("SELECT COUNT(*) FROM web_sessions", &[])
            .unwrap()
            .get(0)
    })
    .await
    .unwrap();
    assert!(sessions >= 1, "no session row in PostgreSQL");
    assert!(
        !gw.dir.path().join("state/gateway.db").exists(),
        "a SQLite file was made too"
    );

    // `check` says which store, without the password.
    let (ok, said) = gw.cli(&["check"]);
    assert!(ok && said.contains("state  PostgreSQL at"), "{said}");
    tokio::task::spawn_blocking(move || drop(cluster)).await.unwrap();
}

#[test]
fn a_shared_store_refuses_a_project_spawned_on_this_gateways_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::create_dir_all(dir.path().join("web")).unwrap();
    std::fs::write(
        &config,
        base_config(&format!(
            "[store]\nurl = \"postgres://gw:s3cret-pw@db.internal/gateway\"\n\n[[project]]\nname = \"web\"\ndirectory = \"{}\"\nspawn = true\n",
            dir.path().join("web").display()
        )),
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["check", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("project web") && said.contains("works on one gateway only"),
        "{said}"
    );
    assert!(!said.contains("s3cret-pw"), "the password was printed: {said}");
}

/// How long a gateway trusts a browser session it verified without asking the store again
/// (`auth/sessions.rs`). A cookie B refuses sooner than this after it first verified (and so
/// cached) it was ended in B's cache by something else than the cache's expiry.
const SESSION_CACHE: Duration = Duration::from_secs(1);

/// Occurrences of `needle` in `gw`'s log.
fn count(gw: &Gateway, needle: &str) -> usize {
    gw.logs().matches(needle).count()
}

/// Wait (bounded) until `gw`'s log holds `needle` `n` times; fails with the log otherwise.
async fn until_count(gw: &Gateway, needle: &str, n: usize, what: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    while count(gw, needle) < n {
        assert!(
            Instant::now() < until,
            "{what}: {needle:?} {} times in B's log, not {n}:\n{}",
            count(gw, needle),
            gw.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// B verifies `cookie` for the first time (it caches it until [`SESSION_CACHE`] after `cached` at
/// the earliest), `revoke` ends it through A, and B refuses it before that cache entry could have
/// expired by itself: only the database's notice, heard by B, can have ended it there.
async fn refused_while_cached(cb: &Https, cookie: &str, what: &str, revoke: impl std::future::Future<Output = ()>) {
    let cached = Instant::now();
    assert!(
        logged_in(cb, cookie).await,
        "B does not take {what} before it is revoked"
    );
    revoke.await;
    let revoked = cached.elapsed();
    while logged_in(cb, cookie).await {
        let now = cached.elapsed();
        assert!(
            now < SESSION_CACHE,
            "B still takes {what} {now:?} after it cached it (revoked through A after {revoked:?}): \
             no notice ended it before its cache could expire by itself"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = cached.elapsed();
    assert!(
        refused < SESSION_CACHE,
        "B refused {what} {refused:?} after caching it (revoked after {revoked:?}): its cache may \
         have expired by itself, so this does not show that the notice ended it"
    );
    eprintln!("B refused {what} {refused:?} after caching it; revoked after {revoked:?}");
}

/// Two gateways on one database (replicas without a balancer: each is asked directly): a login
/// made through A is logged in on B; a token made with B's CLI works on A. A device revoked
/// with A's CLI, and a logout through A, are each heard by B (one more `changed=Sessions` in
/// its log each) and B refuses the cookie while it still holds it in its cache: the notice, not
/// the cache's expiry, ends it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_database_share_logins_tokens_and_logouts() {
    let Some((cluster, _url, config)) = on_postgres().await else {
        return;
    };
    let (a, b, ca, cb) = two_gateways(&config, "").await;
    let cookie = form_login(&ca, "alice", ALICE).await;
    assert!(logged_in(&cb, &cookie).await, "B does not know A's login");

    let token = tokio::task::block_in_place(|| token_create(&b, "alice"));
    let on_a = ca.host(LOGIN_HOST);
    let req = on_a
        .request("GET", "/_gw/static/app.css", None)
        .header("authorization", format!("Bearer {token}"))
        .body(Full::default())
        .unwrap();
    assert_eq!(on_a.call(req).await.status, 200, "A refused B's token");

    // B told of nothing yet: only the "forget all" of its first listen.
    let (sessions, all) = ("changed=Sessions", "changed=All");
    assert_eq!((count(&b, sessions), count(&b, all)), (0, 1), "{}", b.logs());

    // A phone pairs on B with a code A's CLI issued (B has not verified its cookie yet); A's CLI
    // revokes it while B holds it in its cache.
    let phone = cb.host(LOGIN_HOST);
    let code = tokio::task::block_in_place(|| pair_code(&a));
    let device_cookie = redeem_code(&phone, &code).await;
    let (ok, listing) = tokio::task::block_in_place(|| a.cli(&["devices", "alice"]));
    assert!(ok, "{listing}");
    let device = listing
        .lines()
        .find(|l| l.ends_with("phone"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no phone in:\n{listing}"))
        .to_string();
    refused_while_cached(&cb, &device_cookie, "the revoked phone", async {
        let (ok, said) = tokio::task::block_in_place(|| a.cli(&["devices", "revoke", &device]));
        assert!(ok, "{said}");
    })
    .await;
    until_count(&b, sessions, 1, "the device's revocation").await;

    // A login B has not verified yet, cached there, then ended by a logout through A.
    let fresh = form_login(&ca, "alice", ALICE).await;
    refused_while_cached(&cb, &fresh, "the logged-out cookie", async {
        let out = portal_post(&ca.host(LOGIN_HOST), &fresh, "/logout", "").await;
        assert_eq!(out.status, 303, "{}", out.body);
    })
    .await;
    until_count(&b, sessions, 2, "the logout's notice").await;
    // That notice alone: no "forget all" (a reconnect) voided the cache meanwhile.
    assert_eq!(count(&b, all), 1, "{}", b.logs());
    assert!(logged_in(&cb, &cookie).await, "the other login ended with the logout");
    drop((a, b));
    tokio::task::spawn_blocking(move || drop(cluster)).await.unwrap();
}

/// Two gateways on one database spend one login allowance (3 failures, one back a minute): two
/// wrong passwords through A and one through B spend an address's allowance, and B then refuses
/// even though its own limiter saw only one. An allowance spent through A is told to B, which then
/// refuses the right password it had cached for that address (no cheaper answer elsewhere).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_database_spend_one_login_allowance() {
    let Some((cluster, _url, config)) = on_postgres().await else {
        return;
    };
    let config = format!("{config}\n[limits]\nauth_failure_burst = 3\nauth_failures_per_minute = 1\n");
    let (a, b, ca, cb) = two_gateways(&config, "").await;

    // One allowance for 127.0.0.4, wherever it tries.
    let (a4, b4) = (ca.from("127.0.0.4"), cb.from("127.0.0.4"));
    assert_eq!(post_login(&a4, "alice", "wrong-1").await.status, 401);
    assert_eq!(post_login(&a4, "alice", "wrong-2").await.status, 401);
    assert_eq!(post_login(&b4, "alice", "wrong-3").await.status, 401);
    let refused = post_login(&b4, "alice", "wrong-4").await;
    assert_eq!(refused.status, 429, "B gave a fourth try: {}", refused.body);
    assert!(refused.headers.contains_key("retry-after"));
    let refused = post_login(&a4, "alice", ALICE).await;
    assert_eq!(
        refused.status, 429,
        "A answered the right password after the allowance was spent"
    );

    // 127.0.0.5 logged in through B (its password is cached there; the login's argon2 run took
    // one cell of the shared allowance), then spends the rest through A only: B is told, and
    // refuses the cached password too.
    let (a5, b5) = (ca.from("127.0.0.5"), cb.from("127.0.0.5"));
    assert_eq!(post_login(&b5, "alice", ALICE).await.status, 303);
    for n in 0..2 {
        assert_eq!(post_login(&a5, "alice", &format!("wrong-{n}")).await.status, 401);
    }
    assert!(
        b.wait_log("allowance=address:127.0.0.5", Duration::from_secs(5)).await,
        "B was not told: {}",
        b.logs()
    );
    let refused = post_login(&b5, "alice", ALICE).await;
    assert_eq!(refused.status, 429, "B answered a cached password for a spent address");
    drop((a, b));
    tokio::task::spawn_blocking(move || drop(cluster)).await.unwrap();
}
