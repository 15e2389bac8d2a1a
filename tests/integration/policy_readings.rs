//! Permission policies read the way OpenCode reads, hostile round five (items 1, 7, 8 and 10),
//! against the real OpenCode and the fake model: a body only OpenCode can parse is refused before
//! any decision (OpenCode itself accepts it); a redirect under an allowed command, a path through
//! a link out of the project and a person's instant approval of a denied command all leave the
//! command unrun.

use std::time::{Duration, Instant};

use crate::budgets::alice;
use crate::common::client::{Https, direct_call, json};
use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::opencode::{FakeModel, OpenCode};
use crate::common::stack::ALICE_PW;
use crate::policies::{pending, prompted, saw};

const POLICIES: &str = r#"[[policy]]
name = "ci"
allow = ["bash: echo allowed*", "read: **"]
deny = ["bash: echo denied*", "external_directory: **"]
otherwise = "ask"
ask_timeout = "3s"

[[policy]]
name = "patient"
allow = ["bash: echo allowed*"]
otherwise = "ask"
ask_timeout = "10m"

[[policy]]
name = "files"
allow = ["bash: echo allowed*", "edit: src/**"]
otherwise = "reject"
"#;

fn demo(oc: &OpenCode) -> Gateway {
    let pw = oc.password.clone();
    let users = users_toml(&[TestUser {
        name: "alice",
        password: ALICE_PW,
        projects: "[\"*\"]",
        role: "operator",
    }]);
    let config = base_config(&format!(
        "[[project]]\nname = \"demo\"\nupstream = \"{}\"\nupstream_password_file = \"pw\"\n\n{users}{POLICIES}",
        oc.url()
    ));
    Gateway::start_with(&config, &[], move |d| crate::common::write_secret(&d.join("pw"), &pw))
}

fn token(gw: &Gateway, policy: &str) -> String {
    let (ok, out) = gw.cli(&["token", "create", "alice", "--projects", "demo", "--policy", policy]);
    assert!(ok, "{out}");
    format!("Bearer {}", out.lines().find(|l| l.starts_with("ocgw_")).unwrap())
}

/// A request with raw body bytes (not always UTF-8) through the gateway: status and body.
async fn raw(c: &Https, method: &str, path: &str, auth: &str, body: &[u8]) -> (u16, String) {
    let own = format!("https://{}", c.authority());
    let req = c
        .request(method, path, Some(auth))
        .header("content-type", "application/json")
        .header("origin", own)
        .body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(body)))
        .unwrap();
    let r = c.call(req).await;
    (r.status.as_u16(), r.body)
}

/// Bodies serde_json refuses and OpenCode's parser takes (or one read two ways): the gateway
/// refuses each (400 `unreadable_body`, the reason said) before any policy decision, so a
/// policy token cannot approve its own request with one and nobody can give a policy session
/// allow rules with one; OpenCode itself takes the same spelling (seen with a direct PATCH).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_body_only_opencode_can_read_is_refused_before_any_decision() {
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let gw = demo(&oc);
    let c = Https::new(gw.https, &gw.ca());
    let patient = token(&gw, "patient");
    let session = prompted(&c, &patient, "RUNCMD: echo person > person-marker").await;
    let id = pending(&gw, &session).await;
    let reply = format!("/p/demo/permission/{id}/reply");
    for (body, reason) in [
        (
            &br#"{"reply":"once","message":"\ud800"}"#[..],
            "unpaired UTF-16 surrogate",
        ),
        (br#"{"reply":"once","message":"\udc00"}"#, "unpaired UTF-16 surrogate"),
        (b"{\"reply\":\"once\",\"message\":\"\xff\"}", "not valid UTF-8"),
        (br#"{"reply":"reject","reply":"once"}"#, "appears twice"),
        (br#"{"reply":"once","n":1e400}"#, "out of range"),
        (b"\xEF\xBB\xBF{\"reply\":\"once\"}", "byte-order mark"),
    ] {
        for auth in [&patient, &alice()] {
            let (status, said) = raw(&c, "POST", &reply, auth, body).await;
            assert_eq!(status, 400, "{}: {said}", String::from_utf8_lossy(body));
            assert!(said.contains("unreadable_body") && said.contains(reason), "{said}");
        }
    }
    assert!(!oc.project.join("person-marker").exists(), "nothing approved it");
    // OpenCode takes what the gateway refused: a lone surrogate in a title, sent to it directly.
    let plain = json(&c, "POST", "/p/demo/session", &alice(), "{}").await.1;
    let other = plain["id"].as_str().unwrap();
    let said = direct_call(
        oc.port,
        &oc.password,
        "PATCH",
        &format!("/session/{other}"),
        &[],
        r#"{"title":"x\ud800"}"#,
    )
    .await;
    assert!(said.contains(other), "OpenCode refused the spelling itself: {said}");
    // Allow rules for the policy's session under a body only OpenCode reads: refused.
    let wide = br#"{"title":"\ud800","permission":[{"permission":"bash","action":"allow","pattern":"*"}]}"#;
    let (status, said) = raw(&c, "PATCH", &format!("/p/demo/session/{session}"), &alice(), wide).await;
    assert_eq!(status, 400, "{said}");
    let stored = direct_call(oc.port, &oc.password, "GET", &format!("/session/{session}"), &[], "").await;
    assert!(
        !stored.contains("\"allow\""),
        "the session got rules of its own: {stored}"
    );
    // The same approval read alike by both: a person may give it.
    let (status, said) = json(&c, "POST", &reply, &alice(), r#"{"reply":"once"}"#).await;
    assert_eq!(status, 200, "{said}");
    saw(&c, &session).await;
    assert!(oc.project.join("person-marker").exists());
}

/// `echo allowed > ../outside/marker` under `allow bash: echo allowed*`: OpenCode asks only
/// `bash`, with a pattern the rule matches; the gateway's policy rejects it (no rule names the
/// redirect), as it does a redirect OpenCode leaves out of every pattern (`{ …; } > f`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_redirect_under_an_allowed_command_is_not_allowed() {
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let gw = demo(&oc);
    let c = Https::new(gw.https, &gw.ca());
    let files = token(&gw, "files");
    let outside = oc.project.parent().unwrap().join("outside");
    for (command, marker) in [
        ("echo allowed > ../outside/redirected", "redirected"),
        ("{ echo allowed; } > ../outside/grouped", "grouped"),
    ] {
        let session = prompted(&c, &files, &format!("RUNCMD: {command}")).await;
        let said = saw(&c, &session).await;
        assert!(
            said.contains("rejected by the gateway's policy files"),
            "{command}: {said}"
        );
        assert!(!outside.join(marker).exists(), "{command} wrote outside the project");
    }
    // The same command without a redirect is still allowed.
    let session = prompted(&c, &files, "RUNCMD: echo allowed").await;
    let said = saw(&c, &session).await;
    assert!(said.contains("allowed"), "{said}");
    assert!(!said.contains("rejected"), "{said}");
}

/// `src/out` links to a folder outside the project; the policy allows `edit: src/**`. OpenCode
/// asks `edit` for `src/out/f` (lexically inside); the gateway judges where it really goes, and
/// rejects it: nothing is written outside. A write that stays inside is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_path_through_a_link_out_of_the_project_is_judged_where_it_goes() {
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| {
        OpenCode::start_with(&model, |project| {
            let git = std::process::Command::new("git")
                .args(["init", "-q"])
                .current_dir(project)
                .status();
            assert!(git.unwrap().success());
            std::fs::create_dir_all(project.join("src")).unwrap();
            std::os::unix::fs::symlink("../../outside", project.join("src/out")).unwrap();
        })
    });
    let gw = demo(&oc);
    let c = Https::new(gw.https, &gw.ca());
    let files = token(&gw, "files");
    let outside = oc.project.parent().unwrap().join("outside");
    let out = oc.project.join("src/out/linked");
    let session = prompted(&c, &files, &format!("RUNWRITE: {}", out.display())).await;
    let said = saw(&c, &session).await;
    assert!(said.contains("rejected by the gateway's policy files"), "{said}");
    assert!(!outside.join("linked").exists(), "written outside through the link");
    let inside = oc.project.join("src/inside");
    let session = prompted(&c, &files, &format!("RUNWRITE: {}", inside.display())).await;
    saw(&c, &session).await;
    assert!(inside.exists(), "a write inside src/ is allowed");
}

/// A person watching the project's event stream approves a denied command the instant it is
/// asked, racing the gateway's own watch (round five: 1 of 8 races approved a denied `rm` and it
/// ran). Every approval is refused, for the policy's reason or because the policy answered
/// first; the command never runs. (The wait that closes the race is proved deterministically by
/// `src/inbox/policy.rs::an_approval_the_gateway_has_not_judged_waits_for_the_request_or_is_refused`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_persons_instant_approval_never_beats_the_policys_rejection() {
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let gw = demo(&oc);
    let c = Https::new(gw.https, &gw.ca());
    let ci = token(&gw, "ci");
    let events = crate::common::client::EventLog::open(&c, "/p/demo/event", &alice()).await;
    events.until_subscribed(&c, "/p/demo/session", &alice()).await;
    for round in 0..6 {
        let marker = format!("race-marker-{round}");
        let session = prompted(&c, &ci, &format!("RUNCMD: echo denied > {marker}")).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        let id = loop {
            let asked = events.events("permission.asked");
            if let Some(a) = asked.iter().find(|a| a["properties"]["sessionID"] == session.as_str()) {
                break a["properties"]["id"].as_str().unwrap().to_string();
            }
            assert!(Instant::now() < deadline, "round {round}: never asked");
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let (status, said) = json(
            &c,
            "POST",
            &format!("/p/demo/permission/{id}/reply"),
            &alice(),
            r#"{"reply":"once"}"#,
        )
        .await;
        assert_eq!(status, 403, "round {round}: {said}");
        let said = said.to_string();
        assert!(
            said.contains("denied by the gateway's policy ci") || said.contains("was answered already"),
            "round {round}: {said}"
        );
        let told = saw(&c, &session).await;
        assert!(told.contains("denied by the gateway's policy ci"), "{told}");
        assert!(
            !oc.project.join(&marker).exists(),
            "round {round}: the denied command ran"
        );
    }
}
