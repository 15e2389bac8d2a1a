//! One road to the upstream (issue 23): the control room's answers go through the proxy's own
//! phases as the user who taps them, so the route table's roles, the project's pinning and the
//! request audit decide and record them, not a copy of those rules. Against the real OpenCode
//! (fake model): a viewer's answer from the control room is refused with exactly the refusal a
//! proxied `POST /permission/{id}/reply` gets; another project's approver and hostile spellings of
//! the form reach nothing; an approver's answer runs the tool and is in the audit trail once.

use std::time::{Duration, Instant};

use http_body_util::Full;
use serde_json::Value;

use crate::common::client::{Https, basic, json};
use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::login::{LOGIN_HOST, act, form_login};
use crate::common::opencode::{FakeModel, OpenCode};
use crate::common::write_secret;

/// The refusal the route table gives a viewer for a permission answer, wherever it comes from.
const VIEWER_REFUSAL: &str = "POST /permission/*/reply needs the approver role; you are viewer";

/// The ids OpenCode itself lists at `what` (`permission`, `session`) for the project's directory.
fn listed(oc: &OpenCode, what: &str) -> Vec<String> {
    let dir = oc.project.display().to_string();
    let body = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(crate::common::client::direct_call(
            oc.port,
            &oc.password,
            "GET",
            &format!("/{what}?directory={dir}"),
            &[],
            "",
        ))
    });
    // Strict: an error answer (a JSON object) or an item without an id fails here, so that
    // "nothing listed" can only mean OpenCode listed nothing.
    let list: Vec<Value> =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET /{what} did not answer a JSON list ({e}): {body}"));
    list.iter()
        .map(|p| {
            p["id"]
                .as_str()
                .unwrap_or_else(|| panic!("a {what} without an id: {body}"))
                .to_string()
        })
        .collect()
}

fn pending(oc: &OpenCode) -> Vec<String> {
    listed(oc, "permission")
}

fn audit_records(gw: &Gateway, event: &str, id: &str) -> Vec<Value> {
    std::fs::read_to_string(crate::common::audit::file(gw))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["event"] == event && r["request"] == id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn the_control_rooms_answers_take_the_proxys_road_and_its_refusals() {
    let model = FakeModel::start("echo RAN >> ran.txt").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let beta = tempfile::tempdir().unwrap();
    let project_toml = |name: &str, dir: &std::path::Path| {
        format!(
            "[[project]]\nname = \"{name}\"\nupstream = \"{}\"\nupstream_password_file = \"upstream.pw\"\ndirectory = \"{}\"\n\n",
            oc.url(),
            dir.display()
        )
    };
    let user = |name, password, projects, role| TestUser {
        name,
        password,
        projects,
        role,
    };
    let config = base_config(&format!(
        "{}{}{}",
        project_toml("alpha", &oc.project),
        project_toml("beta", &beta.path().canonicalize().unwrap()),
        users_toml(&[
            user("alice", "alice-password-1", "[\"*\"]", "admin"),
            user("vera", "vera-password-1", "[\"alpha\"]", "viewer"),
            user("bob", "bob-password-22", "[\"beta\"]", "approver"),
            user("carl", "carl-password-1", "[\"alpha\"]", "approver"),
        ])
    ));
    let pw = oc.password.clone();
    let gw = Gateway::start_with(&config, &[], move |d| write_secret(&d.join("upstream.pw"), &pw));
    let client = Https::new(gw.https, &gw.ca());
    let lh = client.host(LOGIN_HOST);

    // A permission request waiting in alpha, shown in the control room.
    let (status, session) = json(
        &client,
        "POST",
        "/p/alpha/session",
        &basic("alice", "alice-password-1"),
        "{}",
    )
    .await;
    assert_eq!(status, 200, "{session}");
    let sid = session["id"].as_str().unwrap().to_string();
    let (status, body) = json(
        &client,
        "POST",
        &format!("/p/alpha/session/{sid}/prompt_async"),
        &basic("alice", "alice-password-1"),
        r#"{"parts":[{"type":"text","text":"please RUNBASH"}]}"#,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        let (_, view) = tokio::task::block_in_place(|| gw.control("GET", "/inbox"));
        let v: Value = serde_json::from_str(&view).unwrap();
        let card = v["projects"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["name"] == "alpha")
            .flat_map(|p| p["pending"].as_array().cloned().unwrap_or_default())
            .find(|c| c["kind"] == "permission");
        if let Some(c) = card {
            break c["id"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no permission card within 60 s: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(pending(&oc), vec![id.clone()]);

    // The viewer: the same refusal from the control room as from the proxy, by the same code.
    let vera = form_login(&lh, "vera", "vera-password-1").await;
    let room = act(&lh, &vera, &format!("project=alpha&id={id}&do=once")).await;
    assert_eq!(room.status, 403, "{}", room.body);
    assert!(room.body.contains(VIEWER_REFUSAL), "the control room: {}", room.body);
    let (status, proxied) = json(
        &client,
        "POST",
        &format!("/p/alpha/permission/{id}/reply"),
        &basic("vera", "vera-password-1"),
        r#"{"reply":"once"}"#,
    )
    .await;
    assert_eq!(status, 403, "{proxied}");
    assert!(proxied.to_string().contains(VIEWER_REFUSAL), "the proxy: {proxied}");

    // Another project's approver, and hostile spellings of the form: nothing reaches OpenCode.
    let bob = form_login(&lh, "bob", "bob-password-22").await;
    let carl = form_login(&lh, "carl", "carl-password-1").await;
    for (who, cookie, form, want) in [
        ("bob", &bob, format!("project=alpha&id={id}&do=once"), 404),
        ("bob", &bob, format!("project=beta&id={id}&do=once"), 303),
        ("carl", &carl, format!("project=ALPHA&id={id}&do=once"), 404),
        ("carl", &carl, format!("project=alpha%2F..%2Fbeta&id={id}&do=once"), 404),
        (
            "carl",
            &carl,
            format!("project=alpha&id={}&do=once", id.to_uppercase()),
            303,
        ),
        (
            "carl",
            &carl,
            format!("project=alpha&id={id}%2F..%2F..%2Fsession&do=once"),
            303,
        ),
        ("carl", &carl, format!("project=alpha&id={id}&do=ONCE"), 400),
        ("carl", &carl, format!("project=alpha&id={id}&do=once&do=always"), 303),
    ] {
        let before = pending(&oc);
        let r = act(&lh, cookie, &form).await;
        if form.contains("do=once&do=always") {
            // The first value counts: that one is a real answer (below it is checked as carl's).
            assert_eq!(r.status, want, "{who} {form}: {}", r.body);
            break;
        }
        assert_eq!(r.status, want, "{who} {form}: {}", r.body);
        if want == 303 {
            let to = r.headers["location"].to_str().unwrap();
            assert!(to.contains("done=elsewhere"), "{who} {form}: {to}");
        }
        assert_eq!(pending(&oc), before, "{who} {form} reached OpenCode");
    }
    // A new session from the portal, for a user whose grant is every project: only a project's
    // name shapes the request (a path or query spelled into the field would make another one).
    let alice = form_login(&lh, "alice", "alice-password-1").await;
    let sessions = |oc: &OpenCode| listed(oc, "session").len();
    let before = sessions(&oc);
    for project in ["alpha%2F..%2Fbeta", "alpha%3Fx%3D1", "alpha%2Fsession", "ALPHA"] {
        let own = format!("https://{}", lh.authority());
        let req = lh
            .request("POST", "/_gw/new", None)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("cookie", &alice)
            .header("origin", own)
            .header("sec-fetch-site", "same-origin")
            .body(Full::from(format!("project={project}")))
            .unwrap();
        let r = lh.call(req).await;
        assert_eq!(r.status, 404, "project={project}: {}", r.body);
        assert_eq!(sessions(&oc), before, "project={project} created a session");
    }

    // The approver's answer ran the tool, once, and is in the request audit exactly once: as
    // carl's, from the control room, with OpenCode's status.
    let deadline = Instant::now() + Duration::from_secs(30);
    while pending(&oc).contains(&id) {
        assert!(Instant::now() < deadline, "carl's answer did not reach OpenCode");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ran = oc.project.join("ran.txt");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&ran).unwrap_or_default().lines().count() != 1 {
        assert!(Instant::now() < deadline, "the tool did not run once");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let records = loop {
        let r = audit_records(&gw, "permission_answer", &id);
        if !r.is_empty() || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Exactly one answer recorded, carl's: none of the refused attempts above is in the trail.
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!(
        (
            r["user"].as_str(),
            r["from"].as_str(),
            r["answer"].as_str(),
            r["status"].as_u64(),
            r["project"].as_str()
        ),
        (
            Some("carl"),
            Some("control_room"),
            Some("once"),
            Some(200),
            Some("alpha")
        ),
        "{r}"
    );
    let logs = gw.logs();
    assert!(
        logs.contains(&format!("an act made through the gateway refused: {VIEWER_REFUSAL}")),
        "{logs}"
    );
}
