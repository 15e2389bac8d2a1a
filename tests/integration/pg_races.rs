//! Single-use records raced through two gateways on one PostgreSQL database (issue 27's "of two
//! replicas given one ticket at once, one takes it"): a handoff ticket, a terminal ticket and a
//! pairing code are each tried [`TRIES`] times at once, half through each gateway, every try on
//! a connection made beforehand and sent when a barrier releases them all. Exactly one try takes
//! the record; every other gets the refusal for a record that is gone. Guesses at a password,
//! spread over both gateways at once, spend one login allowance the same way.
//!
//! So that the two gateways' settles surely overlap (else a race is won by timing alone), the
//! test holds the record locked in a transaction of its own, as a third replica's settle would,
//! from before the barrier until both gateways wait on it, then lets them go together. With the
//! store's settle atomic (`FOR UPDATE` in `store/postgres/once.rs`) the first to get the row
//! takes it and the other finds nothing; with a plain read, both read it before either deletes
//! it, and both take it. Each kind is raced [`ROUNDS`] times, each on a fresh record.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;

use crate::common::client::{Https, Reply, basic, read};
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::{Gateway, external_project};
use crate::common::login::{LOGIN_HOST, browser_get, form_login, location, pair_code};
use crate::common::pg_config::{ALICE, on_postgres};
use crate::pg_store::two_gateways;

/// Tries per record, split evenly between the two gateways.
const TRIES: usize = 20;
/// Records raced per kind.
const ROUNDS: usize = 3;
const UPSTREAM_PW: &str = "pw-web-upstream";

/// Rows of the store locked by a transaction of the test's own until [`Held::release`].
struct Held {
    go: std::sync::mpsc::Sender<()>,
    done: tokio::task::JoinHandle<()>,
}

/// Lock what the race is about in `table` (`lock` does it in the holder's transaction, or says
/// why it could not) and keep it locked until released and both gateways wait on it.
async fn hold(
    url: &str,
    table: &'static str,
    lock: impl FnOnce(&mut postgres::Transaction<'_>) -> Result<(), String> + Send + 'static,
) -> Held {
    let url = url.to_string();
    let (locked, is_locked) = tokio::sync::oneshot::channel();
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let done = tokio::task::spawn_blocking(move || {
        let connect = |url: &str| {
            postgres::Client::connect(&format!("{url} connect_timeout=10"), postgres::NoTls)
                .unwrap_or_else(|e| panic!("the test's own connection: {e}"))
        };
        let (mut holder, mut watcher) = (connect(&url), connect(&url));
        let mut tx = holder.transaction().unwrap();
        locked.send(lock(&mut tx)).unwrap();
        wait_go
            .recv_timeout(Duration::from_secs(60))
            .expect("released within 60 s");
        // Until both gateways' store connections wait on a lock in `table`: each has one, so
        // two waiting are one call of each.
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                     AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'",
                    &[&table],
                )
                .unwrap()
                .get(0);
            if waiting >= 2 {
                break;
            }
            assert!(
                Instant::now() < until,
                "{table}: {waiting} gateway(s) wait on the test's lock 10 s after the tries were sent, not both"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        tx.commit().unwrap();
    });
    if let Err(why) = is_locked.await.expect("the holder's answer") {
        panic!("{table}: {why}");
    }
    Held { go, done }
}

/// Hold the one live single-use record of `kind` (`once_records`).
async fn hold_record(url: &str, kind: &'static str) -> Held {
    hold(url, "once_records", move |tx| {
        let rows = tx
            .query("SELECT key FROM once_records WHERE kind = $1 FOR UPDATE", &[&kind])
            .map_err(|e| e.to_string())?
            .len();
        if rows == 1 {
            Ok(())
        } else {
            Err(format!("{rows} live records of {kind}, not the one raced"))
        }
    })
    .await
}

impl Held {
    /// Once both gateways wait on the record, let them go (the holder's transaction ends).
    async fn release(self) {
        self.go.send(()).unwrap();
        self.done
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    }
}

/// One try: which gateway it went through, and the answer.
struct Try {
    through: &'static str,
    reply: Reply,
}

/// Send `TRIES` requests (`make(i)` builds the i-th), the even ones through `a` and the odd ones
/// through `b` (`client(i)` picks the source address), each on a connection made before a
/// barrier releases them all at once, while `held` keeps the record locked until both gateways
/// wait on it.
async fn race(
    held: Held,
    a: &Https,
    b: &Https,
    client: impl Fn(&Https, usize) -> Https,
    make: impl Fn(&Https, usize) -> http::Request<Full<Bytes>>,
) -> Vec<Try> {
    let barrier = Arc::new(tokio::sync::Barrier::new(TRIES + 1));
    let mut tasks = Vec::new();
    for i in 0..TRIES {
        let (through, gw) = if i % 2 == 0 { ("A", a) } else { ("B", b) };
        let c = client(gw, i);
        let req = make(&c, i);
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let mut send = c.http1().await;
            barrier.wait().await;
            let resp = tokio::time::timeout(Duration::from_secs(60), send.send_request(req))
                .await
                .expect("an answer within 60 s")
                .expect("an answer, not a broken connection");
            Try {
                through,
                reply: read(resp).await,
            }
        }));
    }
    barrier.wait().await;
    held.release().await;
    let mut tries = Vec::new();
    for t in tasks {
        tries.push(t.await.unwrap());
    }
    tries
}

/// Exactly one try took the record (`took`), and every other one got `refused` (its status, and
/// a body containing its words); the winner is returned. Fails with every answer otherwise.
fn one_took(tries: Vec<Try>, what: &str, took: impl Fn(&Reply) -> bool, refused: (u16, &str)) -> Try {
    took_n(tries, what, 1, took, refused).remove(0)
}

/// Exactly `n` tries are `took`, every other one `refused`; the `n` are returned.
fn took_n(tries: Vec<Try>, what: &str, n: usize, took: impl Fn(&Reply) -> bool, refused: (u16, &str)) -> Vec<Try> {
    // One line per try: the refusal's words, a redirect's target, or the start of the body.
    let said = tries
        .iter()
        .map(|t| {
            let r = &t.reply;
            let what = if r.body.contains(refused.1) {
                format!("{:?}", refused.1)
            } else if let Some(to) = r.headers.get("location") {
                format!("-> {to:?}")
            } else {
                r.body.chars().take(200).collect::<String>().replace('\n', " ")
            };
            format!("through {}: {} {what}", t.through, r.status)
        })
        .collect::<Vec<_>>()
        .join("\n");
    let (won, lost): (Vec<Try>, Vec<Try>) = tries.into_iter().partition(|t| took(&t.reply));
    assert_eq!(
        won.len(),
        n,
        "{what}: {} of {TRIES} tries took it, not {n}:\n{said}",
        won.len()
    );
    for t in &lost {
        assert!(
            t.reply.status.as_u16() == refused.0 && t.reply.body.contains(refused.1),
            "{what}: a try through {} was not refused as expected ({} {:?}):\n{said}",
            t.through,
            refused.0,
            refused.1
        );
    }
    let through: Vec<&str> = lost.iter().map(|t| t.through).collect();
    assert!(
        through.contains(&"A") && through.contains(&"B"),
        "{what}: not refused through both: {through:?}"
    );
    won
}

/// Two gateways on one database (its URL returned too), with alice, project web on `fake`, and
/// `extra` at the end of the config.
async fn two_on_one_database(fake: &FakeUpstream, extra: &str) -> Option<Two> {
    let (cluster, url, config) = on_postgres().await?;
    let config = config.replace("[store]", &format!("{}[store]", external_project("web", &fake.url())));
    let config = format!("{config}\n{extra}");
    let (a, b, ca, cb) = two_gateways(&config, UPSTREAM_PW).await;
    Some(Two {
        cluster,
        url,
        a,
        b,
        ca,
        cb,
    })
}

struct Two {
    cluster: crate::common::postgres::Cluster,
    url: String,
    a: Gateway,
    b: Gateway,
    ca: Https,
    cb: Https,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_two_gateways_given_one_handoff_ticket_at_once_one_takes_it() {
    let fake = FakeUpstream::start(UPSTREAM_PW).await;
    let Some(Two {
        cluster,
        url,
        a,
        b,
        ca,
        cb,
    }) = two_on_one_database(&fake, "").await
    else {
        return;
    };
    let cookie = form_login(&ca, "alice", ALICE).await;
    let (web_a, web_b) = (ca.host("web.gw.localhost"), cb.host("web.gw.localhost"));
    for round in 0..ROUNDS {
        // The browser on A's project host is sent to the login host's handoff, which mints a
        // ticket for it (tied to this browser's state cookie).
        let r = browser_get(&web_a, "/echo", None, true).await;
        assert_eq!(r.status, 303, "{}", r.body);
        let state = handoff_state(&r);
        let handoff = location(&r);
        let path = &handoff[handoff.find("/_gw/handoff").expect("a handoff link")..];
        let r = browser_get(&ca.host(LOGIN_HOST), path, Some(&cookie), true).await;
        assert_eq!(r.status, 303, "{}", r.body);
        let callback = location(&r);
        let callback = callback[callback.find("/_gw/callback?ticket=").expect("a callback")..].to_string();
        let held = hold_record(&url, "handoff").await;
        let tries = race(
            held,
            &web_a,
            &web_b,
            |c, _| c.clone(),
            |c, _| {
                c.request("GET", &callback, None)
                    .header("cookie", &state)
                    .header("accept", "text/html")
                    .header("sec-fetch-mode", "navigate")
                    .body(Full::default())
                    .unwrap()
            },
        )
        .await;
        let won = one_took(
            tries,
            &format!("handoff ticket {round}"),
            |r| r.status == 303,
            (403, "this login link has expired or was used already"),
        );
        assert_eq!(won.reply.headers["location"], "/echo", "{:?}", won.reply.headers);
        let set: Vec<&str> = won
            .reply
            .headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert!(set.iter().any(|c| c.starts_with("__Host-ocgw=")), "{set:?}");
    }
    // Every loser was refused as a ticket that is gone (not one of another browser or host).
    let refused = count_both(&a, &b, "reason=\"handoff_unknown\"", ROUNDS * (TRIES - 1)).await;
    assert_eq!(refused, ROUNDS * (TRIES - 1), "A:\n{}\nB:\n{}", a.logs(), b.logs());
    drop((a, b));
    tokio::task::spawn_blocking(move || drop(cluster)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_two_gateways_given_one_terminal_ticket_at_once_one_takes_it() {
    let fake = FakeUpstream::start(UPSTREAM_PW).await;
    let Some(Two {
        cluster,
        url,
        a,
        b,
        ca,
        cb,
    }) = two_on_one_database(&fake, "").await
    else {
        return;
    };
    for round in 0..ROUNDS {
        // OpenCode's web UI asks A for a ticket (alice's Basic); the gateway records it.
        let own = format!("https://{}", ca.authority());
        let req = ca
            .request("POST", "/p/web/pty/pty_1/connect-token", Some(&basic("alice", ALICE)))
            .header("x-opencode-ticket", "1")
            .header("origin", &own)
            .body(Full::default())
            .unwrap();
        let r = ca.call(req).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let ticket = serde_json::from_str::<serde_json::Value>(&r.body).unwrap()["ticket"]
            .as_str()
            .unwrap()
            .to_string();
        let path = format!("/p/web/pty/pty_1/connect?ticket={ticket}");
        let held = hold_record(&url, "pty-ticket").await;
        let tries = race(
            held,
            &ca,
            &cb,
            |c, _| c.clone(),
            |c, _| {
                c.request("GET", &path, None)
                    .header("origin", format!("https://{}", c.authority()))
                    .header("connection", "Upgrade")
                    .header("upgrade", "websocket")
                    .header("sec-websocket-version", "13")
                    .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
                    .body(Full::default())
                    .unwrap()
            },
        )
        .await;
        one_took(
            tries,
            &format!("terminal ticket {round}"),
            |r| r.status == 101,
            (401, "authentication required"),
        );
        let upgrades = fake.seen().iter().filter(|s| s.target.contains(&ticket)).count();
        assert_eq!(upgrades, 1, "terminal ticket {round} reached OpenCode {upgrades} times");
    }
    drop((a, b));
    tokio::task::spawn_blocking(move || drop(cluster)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_two_gateways_given_one_pairing_code_at_once_one_takes_it() {
    let fake = FakeUpstream::start(UPSTREAM_PW).await;
    let Some(Two {
        cluster,
        url,
        a,
        b,
        ca,
        cb,
    }) = two_on_one_database(&fake, "").await
    else {
        return;
    };
    for round in 0..ROUNDS {
        let code = tokio::task::block_in_place(|| pair_code(if round % 2 == 0 { &a } else { &b }));
        // Each try from its own phone (address): the pairing page charges each address's login
        // allowance, and one phone's allowance is not what is raced here.
        let held = hold_record(&url, "pairing").await;
        let tries = race(
            held,
            &ca.host(LOGIN_HOST),
            &cb.host(LOGIN_HOST),
            |c, i| c.from(&format!("127.0.{}.{}", round + 1, i + 1)),
            |c, _| {
                c.request("POST", "/pair", None)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .header("origin", format!("https://{}", c.authority()))
                    .header("sec-fetch-site", "same-origin")
                    .header("sec-fetch-mode", "navigate")
                    .body(Full::from(format!("code={code}")))
                    .unwrap()
            },
        )
        .await;
        let won = one_took(
            tries,
            &format!("pairing code {round}"),
            |r| r.status == 303,
            (401, "This pairing code is wrong, used or expired."),
        );
        assert_eq!(won.reply.headers["location"], "/?done=paired");
    }
    // Every loser was refused as a code that is gone (not a wrong secret, not a spent allowance).
    let unknown = count_both(&a, &b, "reason=\"pairing_unknown\"", ROUNDS * (TRIES - 1)).await;
    assert_eq!(unknown, ROUNDS * (TRIES - 1), "A:\n{}\nB:\n{}", a.logs(), b.logs());
    let (ok, listing) = tokio::task::block_in_place(|| a.cli(&["devices", "alice"]));
    assert!(ok, "{listing}");
    let paired = listing.lines().filter(|l| l.ends_with("phone")).count();
    assert_eq!(paired, ROUNDS, "one device per code:\n{listing}");
    drop((a, b));
    tokio::task::spawn_blocking(move || drop(cluster)).await.unwrap();
}

/// Guesses spread over both gateways at once (wrong passwords from one address): the address's
/// login allowance of 3 in the database admits 3 of them in all, not 3 on each gateway; every other
/// is refused as over the limit. The test holds the allowances' table (`LOCK TABLE ocgw_budgets`) until both
/// gateways wait to charge it: the charge is one statement (`store/postgres/shared.rs`
/// `take_allowance`), so the two charges are counted one after the other whatever their timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_two_gateways_given_guesses_at_once_one_login_allowance_admits_its_burst() {
    let fake = FakeUpstream::start(UPSTREAM_PW).await;
    let limits = "[limits]\nauth_failure_burst = 3\nauth_failures_per_minute = 1\n";
    let Some(Two {
        cluster,
        url,
        a,
        b,
        ca,
        cb,
    }) = two_on_one_database(&fake, limits).await
    else {
        return;
    };
    let held = hold(&url, "ocgw_budgets", |tx| {
        tx.batch_execute("LOCK TABLE ocgw_budgets IN SHARE ROW EXCLUSIVE MODE")
            .map_err(|e| e.to_string())
    })
    .await;
    let tries = race(
        held,
        &ca.host(LOGIN_HOST),
        &cb.host(LOGIN_HOST),
        |c, _| c.from("127.0.0.9"),
        |c, i| {
            c.request("POST", "/login", None)
                .header("content-type", "application/x-www-form-urlencoded")
                .header("origin", format!("https://{}", c.authority()))
                .header("sec-fetch-site", "same-origin")
                .body(Full::from(format!("user=alice&password=wrong-{i}&next=/")))
                .unwrap()
        },
    )
    .await;
    // A guess the allowance admitted is answered as a wrong password (its argon2 ran).
    took_n(
        tries,
        "guesses from 127.0.0.9",
        3,
        |r| r.status == 401,
        (429, "too many login attempts"),
    );
    drop((a, b));
    tokio::task::spawn_blocking(move || drop(cluster)).await.unwrap();
}

/// Occurrences of `needle` in both gateways' logs.
/// How often `needle` is in both gateways' logs, once it is there `want` times (bounded: the
/// logs are pumped from the processes as they write, and a refusal's line may follow its
/// answer by a moment on a loaded machine; a full run once counted 54 of 57). A count past
/// `want` is returned at once.
async fn count_both(a: &Gateway, b: &Gateway, needle: &str, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = a.logs().matches(needle).count() + b.logs().matches(needle).count();
        if n >= want || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The project host's handoff state cookie a redirect sets, as `name=value`.
fn handoff_state(r: &Reply) -> String {
    r.headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .find(|v| v.starts_with("__Host-ocgw-handoff="))
        .unwrap_or_else(|| panic!("no handoff state cookie: {:?}", r.headers))
        .split(';')
        .next()
        .unwrap()
        .to_string()
}
