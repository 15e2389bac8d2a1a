//! The inbox's own watch of a server's events passes the redactor the proxy's event stream uses
//! (issue 39): a permission card or a runaway flag carrying the upstream's password reaches no
//! page. With the stand-in (a card seeded and one live, a flag from two identical failures) and
//! with the real OpenCode, whose bash tool sees the server's own environment: an agent that
//! runs `cat "$OPENCODE_SERVER_PASSWORD"` fails with the password in its error line.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::fake_upstream::{InboxUpstream, ext_config};
use crate::common::gateway::Gateway;

const UPSTREAM_PW: &str = "upstream-pw-7Hq2xv";

fn inbox(gw: &Gateway) -> Value {
    let (status, body) = tokio::task::block_in_place(|| gw.control("GET", "/inbox"));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The inbox once `pred` holds (bounded).
async fn inbox_until(gw: &Gateway, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = inbox(gw);
        if pred(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} never came: {v:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A permission request whose command and patterns carry the upstream's password.
fn leaking_permission(id: &str) -> Value {
    let cmd = format!("curl -u opencode:{UPSTREAM_PW} http://127.0.0.1:4096/doc");
    serde_json::json!({"id": id, "sessionID": "ses_1", "permission": "bash", "patterns": [cmd],
        "metadata": {"command": cmd}, "always": [format!("curl -u opencode:{UPSTREAM_PW} *")]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_card_or_flag_of_the_inbox_shows_the_upstream_password() {
    let fake = InboxUpstream::start(UPSTREAM_PW).await;
    *fake.state.permissions.lock().unwrap() = serde_json::json!([leaking_permission("per_seeded")]);
    let keep = tempfile::tempdir().unwrap();
    let dir = keep.path().canonicalize().unwrap();
    let config = ext_config(&fake, &dir, "alice-password-1").replacen(
        "\ndirectory = ",
        "\nbudget = { same_failure = 2, on_runaway = \"notify\" }\ndirectory = ",
        1,
    );
    let gw = Gateway::start_behind(&config, UPSTREAM_PW);
    let card = |v: &Value, id: &str| v.to_string().contains(id);
    inbox_until(&gw, "the seeded card", |v| card(v, "per_seeded")).await;

    // Live: a card, then the same failure twice with the password in its output.
    let tx = fake.state.streams.lock().unwrap()[0].clone();
    let event = |payload: Value| {
        format!(
            "data: {}\n\n",
            serde_json::json!({"directory": dir, "payload": payload})
        )
    };
    let asked = serde_json::json!({"type": "permission.asked", "properties": leaking_permission("per_live")});
    tx.send(event(asked)).await.unwrap();
    let fail = serde_json::json!({"type": "message.part.updated", "properties": {"sessionID": "ses_1",
        "part": {"type": "tool", "tool": "bash", "state": {"status": "completed",
            "output": format!("cat: {UPSTREAM_PW}: No such file or directory\n"), "metadata": {"exit": 1}}}}});
    tx.send(event(fail.clone())).await.unwrap();
    tx.send(event(fail)).await.unwrap();
    let v = inbox_until(&gw, "the live card and the flag", |v| {
        card(v, "per_live") && v.to_string().contains("retried the same failure twice")
    })
    .await;
    let text = v.to_string();
    assert!(
        !text.contains(UPSTREAM_PW),
        "the upstream password in the inbox: {text}"
    );
    // What the pages show is there, the secret overwritten in place.
    let masked = "*".repeat(UPSTREAM_PW.len());
    assert!(text.contains(&format!("curl -u opencode:{masked}")), "{text}");
    assert!(text.contains(&format!("cat: {masked}: No such file")), "{text}");
}
