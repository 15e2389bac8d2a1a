//! The audit trail against the real OpenCode with the fake model: a failed login, a session, a
//! prompt whose text is a marker, the permission loop, a terminal opened and closed, a shell
//! command, a session deleted and a reload each leave their record in the file, with the right
//! user, project and fields; the prompt's text and the passwords appear nowhere in it; and
//! `opencode-gateway audit` reads it back filtered.

use std::time::Duration;

use futures_util::SinkExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use crate::common::audit::find;
use crate::common::client::{EventLog, basic, json, pty_socket, read_terminal_until};
use crate::common::gateway::BIN;
use crate::common::stack::{ALICE_PW, alice, setup};

const WRONG_PW: &str = "not-alices-password-9Q";
const AARON_PW: &str = "aaron-password-1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn every_audited_act_is_recorded_without_its_text_or_secrets() {
    let s = setup("echo AUDITTOOL > audit-marker.txt").await;
    let file = s.gw.dir.path().join("state/audit.jsonl");
    let marker = format!("PROMPT-MARKER-{}-Zx7", std::process::id());
    let shell_marker = format!("SHELL-MARKER-{}", std::process::id());

    // A failed login, then alice's first (argon2-verified) one.
    let (status, _) = json(&s.client, "GET", "/p/demo/session", &basic("alice", WRONG_PW), "").await;
    assert_eq!(status, 401);

    let dir = s.oc.project.display().to_string();
    let events = EventLog::open(
        &s.client,
        &format!("/p/demo/event?directory={}", crate::common::client::encode(&dir)),
        &alice(),
    )
    .await;
    events.wait_for("server.connected", Duration::from_secs(20)).await;
    let session = events.until_subscribed(&s.client, "/p/demo/session", &alice()).await;
    let id = session["id"].as_str().unwrap().to_string();

    // A prompt whose text is the marker; the model asks for bash, aaron answers once.
    let prompt = serde_json::json!({"parts":[{"type":"text","text":format!("please RUNBASH {marker}")}]}).to_string();
    let (status, _) = json(
        &s.client,
        "POST",
        &format!("/p/demo/session/{id}/prompt_async"),
        &alice(),
        &prompt,
    )
    .await;
    assert_eq!(status, 204);
    let asked = events.wait_for("permission.asked", Duration::from_secs(60)).await;
    let perm = asked["properties"]["id"].as_str().unwrap().to_string();
    let (status, _) = json(
        &s.client,
        "POST",
        &format!("/p/demo/permission/{perm}/reply"),
        &basic("aaron", AARON_PW),
        r#"{"reply":"once"}"#,
    )
    .await;
    assert_eq!(status, 200);
    events.wait_for("session.idle", Duration::from_secs(60)).await;

    // A terminal opened and closed.
    let (status, pty) = json(&s.client, "POST", "/p/demo/pty", &alice(), "{}").await;
    assert_eq!(status, 200, "{pty}");
    let pty_id = pty["id"].as_str().unwrap().to_string();
    let mut ws = pty_socket(
        &s.client,
        &format!("/p/demo/pty/{pty_id}/connect?cursor=0"),
        Some(&alice()),
    )
    .await;
    ws.send(Message::text("echo AUD$((6*7))T\r")).await.unwrap();
    let out = read_terminal_until(&mut ws, "AUD42T").await;
    assert!(out.contains("AUD42T"), "{out}");
    ws.close(None).await.unwrap();
    drop(ws);

    // A shell command (its text must not be recorded), sent chunked: no Content-Length, so the
    // recorded size is the gateway's count of the bytes it forwarded.
    let shell = serde_json::json!({"agent": "build", "command": format!("echo {shell_marker}")}).to_string();
    let answer = chunked(&s.client, &format!("/p/demo/session/{id}/shell"), &alice(), &shell).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let (status, _) = json(&s.client, "DELETE", &format!("/p/demo/session/{id}"), &alice(), "").await;
    assert_eq!(status, 200);

    // A reload that adds a user.
    let config = std::fs::read_to_string(&s.gw.config).unwrap();
    s.gw.write_config(&format!(
        "{config}\n[[user]]\nname = \"zoe\"\npassword_hash = \"{}\"\nprojects = [\"demo\"]\nrole = \"viewer\"\n",
        crate::common::gateway::hash("zoe-password-1")
    ));
    let out = crate::common::process::bounded(
        std::process::Command::new(BIN)
            .arg("reload")
            .arg("-c")
            .arg(&s.gw.config),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Each act's record, with who, where and what.
    let failed = find(&file, "login_failed", |r| r["user"] == "alice").await;
    assert_eq!(failed["method"], "basic");
    assert_eq!(failed["reason"], "bad_credentials");
    assert_eq!(failed["address"], "127.0.0.1");
    let login = find(&file, "login", |r| r["user"] == "alice").await;
    assert_eq!(
        (login["via"].as_str(), login["method"].as_str()),
        (Some("password"), Some("basic"))
    );
    // The new session's id, read from OpenCode's answer.
    let created = find(&file, "session_create", |r| r["session"] == id.as_str()).await;
    assert_eq!(created["user"], "alice");
    assert_eq!(
        (created["project"].as_str(), created["status"].as_u64()),
        (Some("demo"), Some(200))
    );
    let p = find(&file, "prompt", |r| r["session"] == id.as_str()).await;
    assert_eq!(p["user"], "alice");
    assert_eq!(p["project"], "demo");
    assert_eq!(p["bytes"], prompt.len() as u64);
    assert_eq!(p["status"], 204);
    let answer = find(&file, "permission_answer", |r| r["request"] == perm.as_str()).await;
    assert_eq!(answer["user"], "aaron");
    assert_eq!(answer["answer"], "once");
    assert_eq!(answer["via"], "password");
    assert_eq!(answer["status"], 200);
    let opened = find(&file, "terminal_open", |r| r["terminal"] == pty_id.as_str()).await;
    assert_eq!(
        (opened["user"].as_str(), opened["status"].as_u64()),
        (Some("alice"), Some(101))
    );
    let closed = find(&file, "terminal_close", |r| r["terminal"] == pty_id.as_str()).await;
    assert!(closed["duration_ms"].as_u64().is_some(), "{closed}");
    let sh = find(&file, "shell", |r| r["session"] == id.as_str()).await;
    assert_eq!(sh["bytes"], shell.len() as u64);
    find(&file, "session_delete", |r| {
        r["session"] == id.as_str() && r["status"] == 200
    })
    .await;
    let reload = find(&file, "config_reload", |_| true).await;
    assert_eq!(reload["users_added"], serde_json::json!(["zoe"]));
    assert_eq!(reload["projects_changed"], serde_json::json!([]));

    // Never the prompt's or the command's text, a password, or the upstream's credential.
    let text = std::fs::read_to_string(&file).unwrap();
    for secret in [
        marker.as_str(),
        shell_marker.as_str(),
        ALICE_PW,
        AARON_PW,
        WRONG_PW,
        "zoe-password-1",
        s.oc.password.as_str(),
    ] {
        assert!(!text.contains(secret), "{secret:?} is in the audit log:\n{text}");
    }
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);

    // Nothing was dropped on the way (the queue never filled).
    assert_eq!(s.gw.metric("audit_dropped_total"), 0);

    // The CLI reads it back, filtered.
    let out = crate::common::process::bounded(
        std::process::Command::new(BIN)
            .args(["audit", "--user", "alice", "--since", "1h", "-c"])
            .arg(&s.gw.config),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed = String::from_utf8_lossy(&out.stdout);
    for event in [
        "login_failed",
        "session_create",
        "prompt",
        "terminal_open",
        "terminal_close",
        "shell",
        "session_delete",
    ] {
        assert!(
            listed
                .lines()
                .any(|l| l.contains(&format!(" {event} ")) && l.contains("user=alice")),
            "no {event} line for alice:\n{listed}"
        );
    }
    assert!(listed.lines().all(|l| l.contains("user=alice")), "{listed}");
    assert!(
        !listed.contains("permission_answer"),
        "aaron's answer is not alice's:\n{listed}"
    );
    let out = crate::common::process::bounded(
        std::process::Command::new(BIN)
            .args(["audit", "--event", "permission_answer", "--json", "-c"])
            .arg(&s.gw.config),
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["user"], "aaron");
}

/// A POST whose body is sent in two chunks (`Transfer-Encoding: chunked`); the response's text.
async fn chunked(c: &crate::common::client::Https, path: &str, auth: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (a, b) = body.split_at(body.len() / 2);
    let mut tls = c.tls().await;
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: {auth}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        c.authority(),
        a.len(),
        b.len()
    );
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // The gateway closes after the answer (Connection: close); a TLS close without notify is fine.
    let _ = tokio::time::timeout(Duration::from_secs(60), tls.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}
