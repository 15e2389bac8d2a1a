//! A trigger with `session = "titled: …"` wakes only a session of its own (hostile round five,
//! item 5), against the real OpenCode: an operator's session with that title and allow-all rules
//! of its own is never adopted (it ran a webhook comment's `rm` before); the delivery makes a
//! session under the trigger's policy, which rejects the denied command; the next delivery wakes
//! that session.

use crate::budgets::alice;
use crate::common::client::{Https, direct_call, json};
use crate::common::opencode::{FakeModel, OpenCode};
use crate::triggers::{SECRET, deliver, demo, push_payload, saw, session_of, signature};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_titled_trigger_never_wakes_a_persons_session_of_that_title() {
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let gw = demo(&oc.url(), &oc.password, "");
    let c = Https::new(gw.https, &gw.ca());
    // alice's own session, titled as the trigger's, allowing every command without a question.
    let (status, mine) = json(&c, "POST", "/p/demo/session", &alice(), r#"{"title":"nightly-fixes"}"#).await;
    assert_eq!(status, 200, "{mine}");
    let mine = mine["id"].as_str().unwrap().to_string();
    let wide = r#"{"permission":[{"permission":"bash","action":"allow","pattern":"*"}]}"#;
    let (status, body) = json(&c, "PATCH", &format!("/p/demo/session/{mine}"), &alice(), wide).await;
    assert_eq!(status, 200, "{body}");
    let stored = direct_call(oc.port, &oc.password, "GET", &format!("/session/{mine}"), &[], "").await;
    assert!(stored.contains("\"allow\""), "the session's own rules: {stored}");
    // A push to gh-push ("titled: nightly-fixes", its prompt runs a command the policy denies).
    let payload = push_payload("mona");
    let r = deliver(
        &c,
        "gh-push",
        "push",
        "d-adopt-1",
        &payload,
        Some(signature(SECRET, payload.as_bytes())),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let woken = session_of(&r);
    assert_ne!(woken, mine, "the trigger adopted alice's session");
    let said = saw(&c, &woken).await;
    assert!(
        said.contains("denied by the gateway's policy ci: echo denied*"),
        "{said}"
    );
    assert!(!oc.project.join("hook-denied").exists(), "the denied command ran");
    // The trigger's own titled session is the one woken next time.
    let again = push_payload("octo");
    let r = deliver(
        &c,
        "gh-push",
        "push",
        "d-adopt-2",
        &again,
        Some(signature(SECRET, again.as_bytes())),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(session_of(&r), woken);
}
