//! Two gateways on one PostgreSQL database watching one server, the stand-in (`InboxUpstream`):
//! of the two, one tells the team of a request and the other takes over when it dies; a budget
//! raised through one holds on the other's guard.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::Full;

use crate::common::client::{Https, Reply, basic};
use crate::common::fake_upstream::{InboxUpstream, ext_config, permission_json};
use crate::common::gateway::Gateway;
use crate::common::login::{LOGIN_HOST, browser_get, form_login, portal_post};
use crate::common::pg_config::{ALICE, on_postgres};
use crate::common::postgres::Cluster;

const STAND_IN_PW: &str = "scripted-upstream-pw";

/// A throwaway database and the stand-in, whose project ext (pinned to `dir`) the config names,
/// with `[store]` and `extra` before it and `in_project` inside it.
struct OneServer {
    cluster: Cluster,
    fake: InboxUpstream,
    dir: PathBuf,
    _dir: tempfile::TempDir,
    config: String,
}

async fn one_server(extra: &str, in_project: &str) -> Option<OneServer> {
    let (cluster, url, _) = on_postgres().await?;
    let fake = InboxUpstream::start(STAND_IN_PW).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let config = ext_config(&fake, &dir, ALICE)
        .replacen(
            "[[project]]",
            &format!("[store]\nurl = \"{url}\"\n\n{extra}[[project]]"),
            1,
        )
        .replacen("\ndirectory = ", &format!("\n{in_project}directory = "), 1);
    Some(OneServer {
        cluster,
        fake,
        dir,
        _dir: tmp,
        config,
    })
}

/// Until both gateways subscribed to the stand-in's events (bounded).
async fn both_subscribed(fake: &InboxUpstream) {
    let until = Instant::now() + Duration::from_secs(10);
    while fake.state.streams.lock().unwrap().len() < 2 {
        assert!(Instant::now() < until, "both gateways did not subscribe");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The server says `payload` about the project in `dir`, to every subscriber (a gateway killed
/// meanwhile has none any more: its stream is skipped; the callers wait for what they said).
async fn say(fake: &InboxUpstream, dir: &Path, payload: serde_json::Value) {
    let event = serde_json::json!({"directory": dir, "payload": payload});
    let streams = fake.state.streams.lock().unwrap().clone();
    for tx in streams {
        let _ = tx.send(format!("data: {event}\n\n")).await;
    }
}

/// Until permission request `id` is in the inbox of each of `gws` (bounded).
async fn until_in_inboxes(gws: &[&Gateway], id: &str) {
    let has = |gw: &Gateway| {
        let (status, body) = tokio::task::block_in_place(|| gw.control("GET", "/inbox"));
        status == 200 && body.contains(id)
    };
    let until = Instant::now() + Duration::from_secs(10);
    while !gws.iter().all(|gw| has(gw)) {
        assert!(Instant::now() < until, "{id} is not in every inbox");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Webhook calls, waited for (bounded) until there are `n`.
async fn told(seen: &Arc<Mutex<Vec<String>>>, n: usize) -> usize {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let got = seen.lock().unwrap().len();
        if got >= n {
            return got;
        }
        assert!(Instant::now() < until, "{got} webhook calls, not {n}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What each webhook call was about: its project and its request's id.
fn about(calls: &[String]) -> Vec<(String, String)> {
    calls
        .iter()
        .map(|c| {
            let v: serde_json::Value = serde_json::from_str(c).unwrap_or_else(|e| panic!("{e}: {c}"));
            let field = |k: &str| v[k].as_str().unwrap_or("").to_string();
            (field("project"), field("id"))
        })
        .collect()
}

/// Two gateways on one database, both watching one server (the stand-in), with a webhook: a
/// permission request is in both inboxes and the team is told once; when the telling gateway is
/// killed (`kill -9`), the other takes its lock and tells of the next request, once (each call
/// names its request's id: the second is per_2, not per_1 told again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_gateways_one_tells_the_team_and_the_other_takes_over_when_it_dies() {
    let (hook, seen) = crate::common::webhook::receiver(vec![]).await;
    let notify = format!("[notify]\nwebhook = \"{hook}\"\ndebounce = \"100ms\"\n\n");
    let Some(s) = one_server(&notify, "").await else {
        return;
    };
    let a = Gateway::start_behind(&s.config, STAND_IN_PW);
    assert!(
        a.wait_log("this gateway holds the lock", Duration::from_secs(10)).await,
        "{}",
        a.logs()
    );
    let b = Gateway::start_behind(&s.config, STAND_IN_PW);
    both_subscribed(&s.fake).await;
    let ask = |id: &str| {
        let asked = serde_json::json!({"type": "permission.asked", "properties": permission_json(id)});
        say(&s.fake, &s.dir, asked)
    };

    ask("per_1").await;
    until_in_inboxes(&[&a, &b], "per_1").await;
    assert_eq!(told(&seen, 1).await, 1);
    // B saw it too, and its notifier dropped the batch: still one call.
    assert!(
        b.wait_log(
            "another gateway on the state database sends the notifications",
            Duration::from_secs(5)
        )
        .await,
        "{}",
        b.logs()
    );
    assert_eq!(seen.lock().unwrap().len(), 1, "told twice");

    // A dies; B takes the lock and tells of the next request, once.
    a.signal(libc::SIGKILL);
    assert!(
        b.wait_log("this gateway holds the lock", Duration::from_secs(10)).await,
        "B did not take over: {}",
        b.logs()
    );
    ask("per_2").await;
    until_in_inboxes(&[&b], "per_2").await;
    assert_eq!(told(&seen, 2).await, 2);
    // Each call names its request: B told of the new one, not per_1 again.
    let calls = seen.lock().unwrap().clone();
    assert_eq!(
        about(&calls),
        [("ext".to_string(), "per_1".to_string()), ("ext".into(), "per_2".into())],
        "{calls:#?}"
    );
    drop((a, b));
    tokio::task::spawn_blocking(move || drop(s.cluster)).await.unwrap();
}

/// What `gw`'s meter saw project ext spend (`/metrics`), in US dollars.
fn ext_spent(gw: &Gateway) -> f64 {
    let metrics = gw.admin("GET", "/metrics").1;
    metrics
        .lines()
        .find_map(|l| {
            l.split_once("project_spend_usd_total{project=\"ext\"} ")
                .map(|(_, v)| v)
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The server reports session ses_1 at $0 (what a session spent before it was seen counts
/// toward no day), then at `usd`: today's spend, metered by both gateways (bounded wait).
async fn spent_today(s: &OneServer, a: &Gateway, b: &Gateway, usd: f64) {
    for cost in [0.0, usd] {
        let info = serde_json::json!({"id": "ses_1", "title": "t", "cost": cost, "time": {"created": 1, "updated": 2}});
        say(
            &s.fake,
            &s.dir,
            serde_json::json!({"type": "session.updated", "properties": {"info": info}}),
        )
        .await;
    }
    let until = Instant::now() + Duration::from_secs(10);
    while ext_spent(a) < usd || ext_spent(b) < usd {
        let (sa, sb) = (ext_spent(a), ext_spent(b));
        assert!(
            Instant::now() < until,
            "the meters saw ${sa} (A) and ${sb} (B), not ${usd}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A prompt to session ses_1 of project ext through `c`, as alice.
async fn prompt(c: &Https) -> Reply {
    let req = c
        .request(
            "POST",
            "/p/ext/session/ses_1/prompt_async",
            Some(&basic("alice", ALICE)),
        )
        .header("content-type", "application/json")
        .body(Full::from(r#"{"parts":[{"type":"text","text":"go on"}]}"#))
        .unwrap();
    c.call(req).await
}

/// Until B's portal shows the day's budget of project ext raised to $6 (bounded).
async fn until_b_shows_the_raise(cb: &Https, cookie: &str, b: &Gateway) {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let page = browser_get(&cb.host(LOGIN_HOST), "/", Some(cookie), true).await.body;
        if page.contains("of $6.00 (raised by $5.00; UTC day)") {
            return;
        }
        assert!(
            Instant::now() < until,
            "B does not show A's raise 2 s later:\n{page}\n{}",
            b.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A budget raised from the portal through A holds on B at once: both meter a day's spend past
/// project ext's $1 (the stand-in reports session ses_1 at $1.50), so B's guard refuses a
/// prompt; A's operator raises the day's budget by $5, B's meter takes the raise from the store
/// when told, and B lets the next prompt through to the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_raised_through_one_gateway_holds_on_the_other() {
    let Some(s) = one_server("", "budget = { project_day_usd = 1.0 }\n").await else {
        return;
    };
    // The session the prompts name, in the project's folder (the gateway looks it up).
    *s.fake.state.sessions.lock().unwrap() =
        Some(serde_json::json!([{"id": "ses_1", "title": "t", "directory": s.dir}]));
    let (a, b, ca, cb) = crate::pg_store::two_gateways(&s.config, STAND_IN_PW).await;
    both_subscribed(&s.fake).await;
    spent_today(&s, &a, &b, 1.5).await;
    let prompts = || {
        let targets = s.fake.state.targets.lock().unwrap();
        targets.iter().filter(|t| t.contains("prompt_async")).count()
    };
    let refused = prompt(&cb).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused
            .body
            .contains("the project's budget for today is spent (budget.project_day_usd: $1.5000 of $1.00)"),
        "{}",
        refused.body
    );
    assert_eq!(prompts(), 0, "a refused prompt reached the server");

    let cookie = form_login(&ca, "alice", ALICE).await;
    let r = portal_post(
        &ca.host(LOGIN_HOST),
        &cookie,
        "/_gw/budget",
        "project=ext&scope=day&do=raise&usd=5",
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    // B shows the raise on its portal once told, and its guard holds to it.
    until_b_shows_the_raise(&cb, &cookie, &b).await;
    let through = prompt(&cb).await;
    assert_eq!(
        through.status, 200,
        "B's guard refused what A's operator allowed: {}",
        through.body
    );
    assert_eq!(prompts(), 1, "the prompt B let through did not reach the server");
    drop((a, b));
    tokio::task::spawn_blocking(move || drop(s.cluster)).await.unwrap();
}
