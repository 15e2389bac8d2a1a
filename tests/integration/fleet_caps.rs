//! The fleet's caps (issue 41, item 5) against the real OpenCode: with `max_busy_per_user = 1`,
//! alice's prompt to a second session waits while her first is busy, its card saying why, and
//! goes on when the first goes idle; with `over_cap = "refuse"` (a reload) it is refused at once,
//! 429 with the reason, and nothing reaches OpenCode.

use std::time::{Duration, Instant};

use crate::budgets::alice;
use crate::common::client::{Https, json};
use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::login::{LOGIN_HOST, act, browser_get, form_login};
use crate::common::opencode::{ANSWER, FakeModel, OpenCode};
use crate::common::stack::ALICE_PW;

fn config(oc: &OpenCode, fleet: &str) -> String {
    let users = users_toml(&[TestUser {
        name: "alice",
        password: ALICE_PW,
        projects: "[\"*\"]",
        role: "operator",
    }]);
    base_config(&format!(
        "[fleet]\n{fleet}\n\n[[project]]\nname = \"demo\"\nupstream = \"{}\"\nupstream_password_file = \"pw\"\n\n{users}",
        oc.url()
    ))
}

/// Project demo's session `id` as the gateway's inbox has it, once `pred` holds (bounded).
async fn session_until(gw: &Gateway, id: &str, what: &str, pred: impl Fn(&serde_json::Value) -> bool) {
    let has = |all: &[serde_json::Value]| all.iter().any(|s| s["id"] == id && pred(s));
    crate::fleet_tree::sessions_until(gw, what, has).await;
}

async fn new_session(c: &Https) -> String {
    let (status, s) = json(c, "POST", "/p/demo/session", &alice(), "{}").await;
    assert_eq!(status, 200, "{s}");
    s["id"].as_str().unwrap().to_string()
}

/// Did the model get a request holding `text`?
fn saw(model: &FakeModel, text: &str) -> bool {
    model.bodies.lock().unwrap().iter().any(|b| b.contains(text))
}

fn prompt(text: &str) -> String {
    serde_json::json!({"parts": [{"type": "text", "text": text}]}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_prompt_past_the_users_busy_cap_waits_for_the_first_to_go_idle_or_is_refused() {
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let pw = oc.password.clone();
    let gw = Gateway::start_with(&config(&oc, "max_busy_per_user = 1"), &[], move |d| {
        crate::common::write_secret(&d.join("pw"), &pw)
    });
    let c = Https::new(gw.https, &gw.ca());
    let (first, second) = (new_session(&c).await, new_session(&c).await);
    let busy = |s: &serde_json::Value| s["status"]["type"] == "busy";
    let (status, said) = json(
        &c,
        "POST",
        &format!("/p/demo/session/{first}/prompt_async"),
        &alice(),
        &prompt("HANGMODEL"),
    )
    .await;
    assert!((200..300).contains(&status), "{status} {said}");
    session_until(&gw, &first, "the first session busy", busy).await;

    // The second prompt waits: its card says why, and nothing of it has reached OpenCode.
    let waiting = {
        let c = c.clone();
        let path = format!("/p/demo/session/{second}/prompt_async");
        tokio::spawn(async move { json(&c, "POST", &path, &alice(), &prompt("hello after the queue")).await })
    };
    let why = "queued: 1 session of yours is busy (fleet.max_busy_per_user = 1)";
    session_until(&gw, &second, "the second prompt queued", |s| s["queued"] == why).await;
    let lh = c.host(LOGIN_HOST);
    let cookie = form_login(&c, "alice", ALICE_PW).await;
    session_until(&gw, &second, "still queued after the login", |s| s["queued"] == why).await;
    let page = browser_get(&lh, "/", Some(&cookie), true).await.body;
    assert!(
        page.contains(&format!("data-queued=\"{second}\"")) && page.contains(why),
        "{page}"
    );
    assert!(
        !waiting.is_finished(),
        "the queued prompt was answered while the first was busy"
    );
    assert!(
        !saw(&model, "hello after the queue"),
        "a queued prompt reached the model"
    );

    // The first stops: the second goes on, and the model answers it.
    let stopped = act(&lh, &cookie, &format!("project=demo&id={first}&do=abort")).await;
    assert_eq!(stopped.status, 303, "{}", stopped.body);
    let (status, said) = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!((200..300).contains(&status), "{status} {said}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !saw(&model, "hello after the queue") {
        assert!(Instant::now() < deadline, "the released prompt never reached the model");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // OpenCode's own word that the turn is over (its status map), then the gateway's.
    loop {
        let (_, statuses) = json(&c, "GET", "/p/demo/session/status", &alice(), "").await;
        if statuses.get(&second).is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "the released turn never ended: {statuses}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    session_until(&gw, &second, "the second no longer queued, answered", |s| {
        s["queued"].is_null() && s["status"]["type"] == "idle"
    })
    .await;
    // The card says the agent's last words (the model's answer), never the prompt.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = browser_get(&lh, "/", Some(&cookie), true).await.body;
        let at = page.find(&format!("data-words=\"{second}\""));
        if let Some(at) = at {
            let words = page[at..].split("</p>").next().unwrap();
            assert!(
                words.contains(ANSWER) && !words.contains("hello after the queue"),
                "{words}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no last words on the card: {page}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    refused_when_configured(&gw, &c, &model, &first, &second).await;
}

/// `over_cap = "refuse"` (reloaded): past the cap, 429 at once with the reason and Retry-After.
async fn refused_when_configured(gw: &Gateway, c: &Https, model: &FakeModel, first: &str, second: &str) {
    let now = std::fs::read_to_string(&gw.config).unwrap();
    let reloaded = now.replace("max_busy_per_user = 1", "max_busy_per_user = 1\nover_cap = \"refuse\"");
    assert_ne!(now, reloaded);
    gw.write_config(&reloaded);
    let (status, body) = tokio::task::block_in_place(|| gw.control("POST", "/reload"));
    assert_eq!(status, 200, "{body}");
    let (status, said) = json(
        c,
        "POST",
        &format!("/p/demo/session/{first}/prompt_async"),
        &alice(),
        &prompt("HANGMODEL again"),
    )
    .await;
    assert!(
        (200..300).contains(&status),
        "{status} {said} {}",
        gw.control("GET", "/inbox?project=demo").1
    );
    session_until(gw, first, "the first busy again", |s| s["status"]["type"] == "busy").await;
    let started = Instant::now();
    let (status, said) = json(
        c,
        "POST",
        &format!("/p/demo/session/{second}/prompt_async"),
        &alice(),
        &prompt("refused at once"),
    )
    .await;
    assert_eq!(status, 429, "{said}");
    assert!(started.elapsed() < Duration::from_secs(10), "refused, not queued");
    assert_eq!(said["error"], "over_fleet_cap", "{said}");
    assert_eq!(
        said["message"], "project demo: 1 session of yours is busy (fleet.max_busy_per_user = 1)",
        "{said}"
    );
    // Other routes and spellings that ask the model: the same refusal, before OpenCode.
    for path in [
        format!("/p/demo/session/{second}/message"),
        format!("/p/demo//session/{second}/prompt_async"),
        format!("/p/demo/session/{second}/prompt_async/"),
        format!("/p/demo/%73ession/{second}/prompt_async"),
        format!("/p/demo/session/{second}/prompt_async?directory=/tmp"),
    ] {
        let (status, said) = json(c, "POST", &path, &alice(), &prompt("refused at once")).await;
        assert_eq!(
            (status, &said["error"]),
            (429, &"over_fleet_cap".into()),
            "{path}: {said}"
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!saw(model, "refused at once"), "a refused prompt reached the model");
}
