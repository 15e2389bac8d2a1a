//! Triggers (issue 40, item 2) against the real OpenCode and the fake model: a GitHub delivery
//! signed in the test starts a session of `demo` as the trigger's user under its policy: the
//! allowed command runs without a person, the denied one is rejected by the policy and the
//! model's next words show it; the audit trail has the firing and both answers with their rules.
//! A wrong or missing signature, a replayed delivery, a body over the bound and an unlisted event
//! are each refused with their reason, audited, and start no session.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;

use crate::budgets::alice;
use crate::common::client::{Https, Reply, json};
use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::opencode::{FakeModel, OpenCode};
use crate::common::stack::ALICE_PW;

pub(crate) const SECRET: &str = "a-webhook-secret-of-the-test-0123";

const POLICY: &str = r#"[[policy]]
name = "ci"
allow = ["bash: echo allowed > *", "bash: echo allowed*", "read: **"]
deny = ["bash: echo denied*", "external_directory: **"]
otherwise = "reject"
"#;

/// Two triggers on one secret: one whose command the policy allows, one whose command it denies.
/// The payload's fields are on the first line; the fake model runs the `RUNCMD:` line.
const TRIGGERS: &str = r#"[[trigger]]
name = "gh"
project = "demo"
github_secret_env = "GH_HOOK_SECRET"
events = ["push", "issues.opened"]
prompt = "A push to {{ref}} by {{pusher.name}}.\nRUNCMD: echo allowed > hook-allowed"
policy = "ci"
run_as_user = "ci-bot"
max_body = 4096

[[trigger]]
name = "gh-push"
project = "demo"
github_secret_env = "GH_HOOK_SECRET"
events = ["push"]
prompt = "A push to {{ref}}.\nRUNCMD: echo denied > hook-denied"
session = "titled: nightly-fixes"
policy = "ci"
run_as_user = "ci-bot"

[[trigger]]
name = "deploys"
project = "demo"
hmac_secret_env = "GH_HOOK_SECRET"
replay_window = "1m"
prompt = "Deploy {{version}} finished.\nRUNCMD: echo allowed > deploy-marker"
policy = "ci"
run_as_user = "ci-bot"
"#;

pub(crate) fn demo(oc_url: &str, oc_password: &str, limits: &str) -> Gateway {
    let pw = oc_password.to_string();
    let users = users_toml(&[
        TestUser {
            name: "alice",
            password: ALICE_PW,
            projects: "[\"*\"]",
            role: "operator",
        },
        TestUser {
            name: "ci-bot",
            password: "a-password-nobody-uses-42",
            projects: "[\"demo\"]",
            role: "operator",
        },
        TestUser {
            name: "vic",
            password: crate::budgets::VIC_PW,
            projects: "[\"demo\"]",
            role: "viewer",
        },
    ]);
    let config = base_config(&format!(
        "{limits}[[project]]\nname = \"demo\"\nupstream = \"{oc_url}\"\nupstream_password_file = \"pw\"\n\n{users}{POLICY}\n{TRIGGERS}"
    ));
    Gateway::start_with(&config, &[("GH_HOOK_SECRET", SECRET)], move |d| {
        crate::common::write_secret(&d.join("pw"), &pw)
    })
}

pub(crate) fn signature(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// A delivery as GitHub sends it: `headers` besides the event, the delivery id and (when
/// `signed`) the signature.
pub(crate) async fn deliver(c: &Https, trigger: &str, event: &str, id: &str, body: &str, sig: Option<String>) -> Reply {
    let mut req = c
        .request("POST", &format!("/_gw/hook/{trigger}"), None)
        .header("content-type", "application/json")
        .header("user-agent", "GitHub-Hookshot/test")
        .header("x-github-event", event)
        .header("x-github-delivery", id);
    if let Some(sig) = sig {
        req = req.header("x-hub-signature-256", sig);
    }
    c.call(req.body(Full::new(Bytes::from(body.to_string()))).unwrap())
        .await
}

pub(crate) fn push_payload(pusher: &str) -> String {
    serde_json::json!({"ref": "refs/heads/main", "pusher": {"name": pusher}, "head_commit": {"id": "abc"}}).to_string()
}

/// The model's last words, read as the policies' tests read them.
pub(crate) use crate::policies::saw;

async fn sessions(c: &Https) -> usize {
    let (status, list) = json(c, "GET", "/p/demo/session", &alice(), "").await;
    assert_eq!(status, 200, "{list}");
    list.as_array().map_or(0, Vec::len)
}

pub(crate) fn session_of(r: &Reply) -> String {
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
    v["session"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {} {}", r.status, r.body))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_signed_push_starts_a_session_under_the_triggers_policy_and_forgeries_start_none() {
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let gw = demo(
        &oc.url(),
        &oc.password,
        "[limits]\nauth_failures_per_minute = 100\nauth_failure_burst = 100\n\n",
    );
    let c = Https::new(gw.https, &gw.ca());
    let audit = crate::common::audit::file(&gw);

    // Refused, each with its reason, and no session starts.
    let body = push_payload("mona");
    let good = signature(SECRET, body.as_bytes());
    let before = sessions(&c).await;
    let cases = [
        (
            "gh",
            "push",
            "d-1",
            body.clone(),
            Some(signature("another-secret-0000000", body.as_bytes())),
            401,
            "signature_wrong",
        ),
        ("gh", "push", "d-2", body.clone(), None, 401, "signature_missing"),
        (
            "gh",
            "push",
            "d-3",
            body.replace("mona", "eve"),
            Some(good.clone()),
            401,
            "signature_wrong",
        ),
        (
            "gh",
            "release",
            "d-4",
            body.clone(),
            Some(good.clone()),
            422,
            "event_not_listed",
        ),
        (
            "gh",
            "push",
            "d-5",
            format!("{{\"pad\":\"{}\"}}", "x".repeat(5000)),
            None,
            413,
            "body_too_large",
        ),
        (
            "nope",
            "push",
            "d-6",
            body.clone(),
            Some(good.clone()),
            404,
            "unknown_trigger",
        ),
    ];
    for (trigger, event, id, payload, sig, status, reason) in cases {
        let r = deliver(&c, trigger, event, id, &payload, sig).await;
        assert_eq!(r.status.as_u16(), status, "{reason}: {}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["error"], reason, "{}", r.body);
        let rec = crate::common::audit::find(&audit, "trigger_refused", |r| {
            r["reason"] == reason && r["trigger"] == trigger
        })
        .await;
        assert_eq!(rec["status"], status, "{rec}");
    }
    // A ping is answered and fires nothing.
    let ping = r#"{"zen":"Keep it logically awesome."}"#;
    let r = deliver(&c, "gh", "ping", "d-7", ping, Some(signature(SECRET, ping.as_bytes()))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(sessions(&c).await, before, "a refused delivery started a session");

    // Signed: a session starts as ci-bot under ci; the allowed command runs without a person.
    let r = deliver(&c, "gh", "push", "d-good", &body, Some(good.clone())).await;
    assert_eq!(r.status, 202, "{}\n{}", r.body, gw.logs());
    let allowed = session_of(&r);
    let said = saw(&c, &allowed).await;
    assert!(
        oc.project.join("hook-allowed").exists(),
        "the allowed command did not run: {said}"
    );
    // The payload reached the prompt only as quoted data.
    let (_, messages) = json(&c, "GET", &format!("/p/demo/session/{allowed}/message"), &alice(), "").await;
    assert!(
        messages
            .to_string()
            .contains(r#"A push to \"refs/heads/main\" by \"mona\"."#),
        "{messages:#}"
    );
    // The same delivery again: refused, no second session; and the same signed body under a
    // fresh delivery id (the id is not signed): refused too (it fired a second session before).
    let count = sessions(&c).await;
    for id in ["d-good", "d-fresh-id"] {
        let r = deliver(&c, "gh", "push", id, &body, Some(good.clone())).await;
        assert_eq!(r.status, 409, "{id}: {}", r.body);
        assert!(r.body.contains("delivery_replayed"), "{}", r.body);
    }
    assert_eq!(sessions(&c).await, count);

    // The denied command: rejected by the policy, and the model's next words show it.
    let r = deliver(&c, "gh-push", "push", "d-deny", &body, Some(good.clone())).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let denied = session_of(&r);
    let said = saw(&c, &denied).await;
    assert!(
        said.contains("denied by the gateway's policy ci: echo denied*"),
        "{said}"
    );
    assert!(!oc.project.join("hook-denied").exists());

    // The audit trail: the firing once each, and both answers with their rules.
    for (session, trigger, delivery) in [(&allowed, "gh", "d-good"), (&denied, "gh-push", "d-deny")] {
        let r = crate::common::audit::find(&audit, "trigger_fired", |r| r["session"] == session.as_str()).await;
        assert_eq!(
            (
                &r["trigger"],
                &r["delivery"],
                &r["user"],
                &r["via"],
                &r["policy"],
                &r["hook_event"]
            ),
            (
                &trigger.into(),
                &delivery.into(),
                &"ci-bot".into(),
                &"trigger".into(),
                &"ci".into(),
                &"push".into()
            ),
            "{r}"
        );
        let fired = crate::common::audit::records(&audit)
            .into_iter()
            .filter(|r| r["event"] == "trigger_fired" && r["session"] == session.as_str())
            .count();
        assert_eq!(fired, 1, "audited once");
    }
    for (session, rule, answer) in [
        (&allowed, "allow: bash: echo allowed > *", "once"),
        (&denied, "deny: bash: echo denied*", "reject"),
    ] {
        let r = crate::common::audit::find(&audit, "policy_answer", |r| r["session"] == session.as_str()).await;
        assert_eq!((&r["rule"], &r["answer"]), (&rule.into(), &answer.into()), "{r}");
    }
    // The session was made as ci-bot, by the trigger (the request audit's own record).
    let r = crate::common::audit::find(&audit, "session_create", |r| r["session"] == allowed.as_str()).await;
    assert_eq!((&r["user"], &r["from"]), (&"ci-bot".into(), &"trigger".into()), "{r}");

    // "titled: nightly-fixes": the next delivery (another push) wakes the same session.
    let next = push_payload("octo");
    let r = deliver(
        &c,
        "gh-push",
        "push",
        "d-again",
        &next,
        Some(signature(SECRET, next.as_bytes())),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(session_of(&r), denied);
}

/// Refused deliveries are charged to the address's login allowance: past it, even a correctly
/// signed delivery is refused (429) before its signature is checked. No OpenCode is needed: no
/// delivery gets that far.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_deliveries_spend_the_addresss_allowance() {
    let gw = demo("http://127.0.0.1:9", "unused-password-1", "");
    let c = Https::new(gw.https, &gw.ca());
    let body = push_payload("mona");
    // The address allowance's burst (`auth_failure_burst`, 10 by default).
    for i in 0..10 {
        let r = deliver(&c, "gh", "push", &format!("x-{i}"), &body, None).await;
        assert_eq!(r.status, 401, "{}", r.body);
    }
    let r = deliver(
        &c,
        "gh",
        "push",
        "x-last",
        &body,
        Some(signature(SECRET, body.as_bytes())),
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.body.contains("\"limited\""), "{}", r.body);
}

/// A delivery of the generic kind: `X-Signature-Timestamp` and `X-Signature-256` over
/// `<timestamp>.<body>` (or `sig` instead), `ts` seconds from now.
async fn generic(c: &Https, body: &str, ts: i64, sig: Option<&str>) -> Reply {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let stamp = (now + ts).to_string();
    let signed = signature(SECRET, format!("{stamp}.{body}").as_bytes());
    let req = c
        .request("POST", "/_gw/hook/deploys", None)
        .header("content-type", "application/json")
        .header("x-signature-timestamp", stamp)
        .header("x-signature-256", sig.unwrap_or(&signed));
    c.call(req.body(Full::new(Bytes::from(body.to_string()))).unwrap())
        .await
}

/// The generic signed kind: a wrong signature, a signature over the body alone, and a timestamp
/// outside the replay window are refused with their reasons; a good one fires once, and the same
/// signed request again is a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn the_generic_kind_signs_a_timestamp_and_the_body_within_a_replay_window() {
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let gw = demo(&oc.url(), &oc.password, "[limits]\nauth_failure_burst = 100\n\n");
    let c = Https::new(gw.https, &gw.ca());
    let body = r#"{"version":"1.4.2"}"#;
    let body_only = signature(SECRET, body.as_bytes());
    for (ts, sig, status, reason) in [
        (0, Some("sha256=00"), 401, "signature_wrong"),
        (0, Some(body_only.as_str()), 401, "signature_wrong"),
        (-120, None, 401, "timestamp_stale"),
        (120, None, 401, "timestamp_stale"),
    ] {
        let r = generic(&c, body, ts, sig).await;
        assert_eq!(r.status.as_u16(), status, "{reason}: {}", r.body);
        assert!(r.body.contains(reason), "{reason}: {}", r.body);
    }
    let stamp = "1";
    let req = c.request("POST", "/_gw/hook/deploys", None).header(
        "x-signature-256",
        signature(SECRET, format!("{stamp}.{body}").as_bytes()),
    );
    let r = c.call(req.body(Full::new(Bytes::from(body))).unwrap()).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.body.contains("timestamp_missing"), "{}", r.body);
    assert_eq!(sessions(&c).await, 0, "a refused delivery started a session");

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let sig = signature(SECRET, format!("{now}.{body}").as_bytes());
    let send = || async {
        let req = c
            .request("POST", "/_gw/hook/deploys", None)
            .header("x-signature-timestamp", now.to_string())
            .header("x-signature-256", sig.clone());
        c.call(req.body(Full::new(Bytes::from(body))).unwrap()).await
    };
    let r = send().await;
    assert_eq!(r.status, 202, "{}", r.body);
    let session = session_of(&r);
    let said = saw(&c, &session).await;
    assert!(oc.project.join("deploy-marker").exists(), "{said}");
    let r = send().await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("delivery_replayed"), "{}", r.body);
    // The same MAC spelt in upper-case hex is the same delivery, not a new one (it was named by
    // the header's text before, and this replay fired a second session).
    let upper = format!("sha256={}", sig["sha256=".len()..].to_ascii_uppercase());
    let req = c
        .request("POST", "/_gw/hook/deploys", None)
        .header("x-signature-timestamp", now.to_string())
        .header("x-signature-256", upper);
    let r = c.call(req.body(Full::new(Bytes::from(body))).unwrap()).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("delivery_replayed"), "{}", r.body);
    assert_eq!(sessions(&c).await, 1);
}

/// `trigger list|pause|resume|fire` on the running gateway: a paused trigger refuses deliveries
/// (503, its delivery id left unused, so the same delivery fires after `resume`); `fire` runs it
/// now with a payload file, as its user under its policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn the_cli_lists_pauses_resumes_and_fires_a_trigger() {
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let gw = demo(&oc.url(), &oc.password, "");
    let c = Https::new(gw.https, &gw.ca());
    let (ok, out) = gw.cli_with_env(&["trigger", "list"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("gh  github  project demo  as ci-bot  policy ci  POST /_gw/hook/gh"),
        "{out}"
    );
    assert!(out.contains("deploys  hmac"), "{out}");
    let (ok, out) = gw.cli_with_env(&["trigger", "pause", "gh"]);
    assert!(ok, "{out}");
    let (_, out) = gw.cli_with_env(&["trigger", "list"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("gh  ") && l.ends_with("PAUSED (paused from the control socket)")),
        "{out}"
    );
    let body = push_payload("mona");
    let sig = signature(SECRET, body.as_bytes());
    let r = deliver(&c, "gh", "push", "p-1", &body, Some(sig.clone())).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("trigger_paused"), "{}", r.body);
    assert_eq!(sessions(&c).await, 0);
    let (ok, out) = gw.cli_with_env(&["trigger", "resume", "gh"]);
    assert!(ok, "{out}");
    let r = deliver(&c, "gh", "push", "p-1", &body, Some(sig)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let audit = crate::common::audit::file(&gw);
    crate::common::audit::find(&audit, "trigger_paused", |r| r["trigger"] == "gh").await;
    crate::common::audit::find(&audit, "trigger_resumed", |r| r["trigger"] == "gh").await;

    let payload = gw.dir.path().join("payload.json");
    std::fs::write(&payload, r#"{"ref":"refs/heads/cli","pusher":{"name":"ops"}}"#).unwrap();
    let (ok, out) = gw.cli_with_env(&["trigger", "fire", "gh", "--payload", payload.to_str().unwrap()]);
    assert!(ok, "{out}");
    let session = out.split("session ").nth(1).unwrap().trim().to_string();
    saw(&c, &session).await;
    let (_, messages) = json(&c, "GET", &format!("/p/demo/session/{session}/message"), &alice(), "").await;
    assert!(
        messages
            .to_string()
            .contains(r#"A push to \"refs/heads/cli\" by \"ops\"."#),
        "{messages:#}"
    );
    let r = crate::common::audit::find(&audit, "trigger_fired", |r| r["session"] == session.as_str()).await;
    assert_eq!(
        (&r["hook_event"], &r["user"]),
        (&"manual".into(), &"ci-bot".into()),
        "{r}"
    );
    let (ok, out) = gw.cli_with_env(&["trigger", "fire", "nope"]);
    assert!(!ok && out.contains("no [[trigger]] is named \"nope\""), "{out}");
}

/// Budgets apply to a triggered run as to any prompt, counted to the trigger's user: the run that
/// spends ci-bot's day is stopped by the guard, and the next delivery's prompt is refused before
/// the model (502 `firing_failed` naming the budget).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_triggered_run_spends_its_users_budget_and_a_spent_one_refuses_the_next() {
    let model = FakeModel::start("true").await.priced(3.0, 15.0);
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let gw = demo(&oc.url(), &oc.password, "[budget]\nuser_day_usd = 0.01\n\n");
    let c = Https::new(gw.https, &gw.ca());
    let body = push_payload("mona");
    let sig = signature(SECRET, body.as_bytes());
    let r = deliver(&c, "gh", "push", "b-1", &body, Some(sig.clone())).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let first = session_of(&r);
    // Its first answer ($0.0105) crosses ci-bot's $0.01: the guard stops the run.
    crate::budgets::until_spent(&gw, crate::budgets::ANSWER_USD).await;
    let audit = crate::common::audit::file(&gw);
    let stop = crate::common::audit::find(&audit, "budget_abort", |r| r["session"] == first.as_str()).await;
    assert_eq!(stop["user"], "guard", "{stop}");
    let asked = model.requests.load(std::sync::atomic::Ordering::SeqCst);
    let next = push_payload("octo");
    let r = deliver(&c, "gh", "push", "b-2", &next, Some(signature(SECRET, next.as_bytes()))).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(
        r.body.contains("firing_failed") && r.body.contains("budget.user_day_usd"),
        "{}",
        r.body
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        model.requests.load(std::sync::atomic::Ordering::SeqCst),
        asked,
        "the model was asked again"
    );
}
