//! Two projects as two folders of one real OpenCode 2.1.2 server (2.x serves every folder from
//! one process, as a person's background service does): each project sees, reads and writes only
//! its own folder's sessions, listings and events, however a request names the other.

use std::time::Duration;

use crate::common::client::{EventLog, Https, basic, json};
use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::opencode::FakeModel;
use crate::common::opencode2::OpenCode2;

const ALICE: &str = "alice-password-1";

fn project(name: &str, url: &str, dir: &std::path::Path) -> String {
    format!(
        "[[project]]\nname = \"{name}\"\nupstream = \"{url}\"\nupstream_password_file = \"upstream.pw\"\ndirectory = \"{}\"\n\n",
        dir.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn two_projects_on_one_2x_server_are_each_blind_to_the_other() {
    let model = FakeModel::start("echo unused").await;
    let oc = tokio::task::block_in_place(|| OpenCode2::start(&model));
    let (a_dir, b_dir) = (oc.folder("a"), oc.folder("b"));
    let config = base_config(&format!(
        "{}{}{}",
        project("a", &oc.url, &a_dir),
        project("b", &oc.url, &b_dir),
        users_toml(&[TestUser {
            name: "alice",
            password: ALICE,
            projects: "[\"*\"]",
            role: "operator"
        }])
    ));
    let gw = Gateway::start_with(&config, &[], |dir| {
        oc.password_file(dir);
    });
    let c = Https::new(gw.https, &gw.ca());
    let alice = basic("alice", ALICE);
    let (a, b) = (a_dir.display().to_string(), b_dir.display().to_string());

    // a's event stream, open before anything happens in either folder.
    let events = EventLog::open(&c, "/p/a/api/event", &alice).await;
    let made = |project: &'static str| {
        let (c, alice) = (&c, &alice);
        async move {
            let (status, s) = json(c, "POST", &format!("/p/{project}/api/session"), alice, "{}").await;
            assert_eq!(status, 200, "{s}");
            s["data"].clone()
        }
    };
    let in_a = made("a").await;
    let in_b = made("b").await;
    assert_eq!(in_a["location"]["directory"], a.as_str(), "{in_a}");
    assert_eq!(in_b["location"]["directory"], b.as_str(), "{in_b}");
    let (a_id, b_id) = (in_a["id"].as_str().unwrap(), in_b["id"].as_str().unwrap());

    // Lists: each project's own.
    let (status, page) = json(&c, "GET", "/p/a/api/session", &alice, "").await;
    assert_eq!(status, 200, "{page}");
    let ids: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, vec![a_id], "a's list: {page}");
    let (status, projects) = json(&c, "GET", "/p/a/api/project", &alice, "").await;
    assert_eq!(status, 200, "{projects}");
    assert!(
        !projects.to_string().contains(&b),
        "a's projects name b's folder: {projects}"
    );

    // Lookups of b's session through a: refused, whatever the route.
    for (method, path, body) in [
        ("GET", format!("/p/a/api/session/{b_id}"), ""),
        ("GET", format!("/p/a/api/session/{b_id}/message"), ""),
        ("POST", format!("/p/a/api/session/{b_id}/prompt"), "{\"text\":\"hi\"}"),
        ("GET", format!("/p/a/API/Session/{b_id}"), ""),
    ] {
        let (status, answer) = json(&c, method, &path, &alice, body).await;
        assert_eq!(status, 403, "{method} {path}: {answer}");
        assert!(answer.to_string().contains("does not belong to project a"), "{answer}");
    }
    // A body naming b's folder through a; a route that answers for every folder.
    let (status, answer) = json(
        &c,
        "POST",
        "/p/a/api/session",
        &alice,
        &format!("{{\"location\":{{\"directory\":\"{b}\"}}}}"),
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    let (status, answer) = json(&c, "GET", "/p/a/api/worktree", &alice, "").await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.to_string().contains("answers for every folder"), "{answer}");

    // A running session of b is not among a's running sessions.
    let (status, _) = json(
        &c,
        "POST",
        &format!("/p/b/api/session/{b_id}/prompt"),
        &alice,
        "{\"text\":\"HANGMODEL\"}",
    )
    .await;
    assert_eq!(status, 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, running) = json(&c, "GET", "/p/b/api/session/active", &alice, "").await;
        if running["data"].get(b_id).is_some() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "b's session never ran: {running}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, running) = json(&c, "GET", "/p/a/api/session/active", &alice, "").await;
    assert_eq!(status, 200, "{running}");
    assert!(
        running["data"].get(b_id).is_none(),
        "a sees b's running session: {running}"
    );
    let (_, interrupted) = json(&c, "POST", &format!("/p/b/api/session/{b_id}/interrupt"), &alice, "").await;
    assert!(interrupted.to_string().contains("interrupted"), "{interrupted}");

    // a's stream carried a's session and nothing of b's.
    let created = events.wait_for("session.created", Duration::from_secs(10)).await;
    assert_eq!(created["data"]["sessionID"], a_id, "{created}");
    let seen = events.events("session.created");
    assert!(
        seen.iter().all(|e| e["location"]["directory"] == a.as_str()),
        "{seen:?}"
    );
    assert!(
        events
            .events("session.execution.started")
            .iter()
            .all(|e| e["data"]["sessionID"] != b_id),
        "a's stream carried b's session"
    );
}
