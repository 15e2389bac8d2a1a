//! A session tree on the board (issue 41, item 2) against the real OpenCode: a session whose
//! agent starts a subagent (OpenCode's task tool) shows the child nested under it on the portal,
//! and "Stop" on the parent stops both (OpenCode reports both idle); the stops are the person's,
//! each judged and audited on the road.

use std::time::{Duration, Instant};

use crate::budgets::{alice, demo_with_budget};
use crate::common::client::{Https, json};
use crate::common::gateway::Gateway;
use crate::common::login::{LOGIN_HOST, act, browser_get, form_login};
use crate::common::opencode::FakeModel;
use crate::common::stack::ALICE_PW;

/// Project demo's sessions in the gateway's inbox once `pred` holds for them (bounded).
pub(crate) async fn sessions_until(
    gw: &Gateway,
    what: &str,
    pred: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = tokio::task::block_in_place(|| gw.control("GET", "/inbox?project=demo"));
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let sessions = v["projects"][0]["sessions"].as_array().cloned().unwrap_or_default();
        if pred(&sessions) {
            return sessions;
        }
        assert!(Instant::now() < deadline, "{what}: {sessions:#?}\n{}", gw.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_child_session_nests_under_its_parent_and_stop_on_the_parent_stops_both() {
    let model = FakeModel::start("true").await;
    let (_oc, gw) = demo_with_budget(&model, "");
    let c = Https::new(gw.https, &gw.ca());
    let (status, session) = json(&c, "POST", "/p/demo/session", &alice(), "{}").await;
    assert_eq!(status, 200, "{session}");
    let root = session["id"].as_str().unwrap().to_string();
    let body = r#"{"parts":[{"type":"text","text":"SPAWNTASK SPAWNHANG"}]}"#;
    let path = format!("/p/demo/session/{root}/prompt_async");
    let (status, said) = json(&c, "POST", &path, &alice(), body).await;
    assert!((200..300).contains(&status), "{status} {said}");
    let busy = |s: &serde_json::Value| s["status"]["type"] == "busy";
    let sessions = sessions_until(&gw, "a busy child under a busy parent", |all| {
        all.iter().any(|s| s["parent_id"] == root.as_str() && busy(s))
            && all.iter().any(|s| s["id"] == root.as_str() && busy(s))
    })
    .await;
    let child = sessions.iter().find(|s| s["parent_id"] == root.as_str()).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();

    // The portal: the child's line right after its parent's, one deeper.
    let lh = c.host(LOGIN_HOST);
    let cookie = form_login(&c, "alice", ALICE_PW).await;
    let page = browser_get(&lh, "/", Some(&cookie), true).await.body;
    let at = |id: &str| {
        page.find(&format!("data-session=\"{id}\""))
            .unwrap_or_else(|| panic!("no line for {id}: {page}"))
    };
    let (parent_at, child_at) = (at(&root), at(&child));
    assert!(parent_at < child_at, "the child comes after its parent");
    assert!(
        !page[parent_at..child_at].contains("class=\"session\" data-session"),
        "another root between them: {page}"
    );
    assert!(
        page[child_at..].starts_with(&format!("data-session=\"{child}\" data-depth=\"1\"")),
        "{}",
        &page[child_at..child_at + 80]
    );

    // Stop on the parent: both stop.
    let stopped = act(&lh, &cookie, &format!("project=demo&id={root}&do=abort")).await;
    assert_eq!(stopped.status, 303, "{}", stopped.body);
    sessions_until(&gw, "both idle after Stop on the parent", |all| {
        [&root, &child].iter().all(|id| {
            all.iter()
                .any(|s| s["id"] == id.as_str() && s["status"]["type"] == "idle")
        })
    })
    .await;
    let audit = crate::common::audit::file(&gw);
    for id in [&root, &child] {
        let r = crate::common::audit::find(&audit, "session_abort", |r| r["session"] == id.as_str()).await;
        assert_eq!(r["user"], "alice", "{r}");
    }
}
