//! The inbox against the real OpenCode server (fake model): two projects pinned to two
//! directories of one server share one event subscription; a permission request raised in one
//! appears in the gateway's inbox from the server's event (not a later resync), never in the
//! other's view; answered through the inbox it runs the tool and resolves "answered here"; answered
//! on the server directly it resolves "elsewhere"; a notification names project and tool only,
//! and is sent again after the receiver failed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use serde_json::Value;

use crate::common::client::{Https, basic, direct_call, json, plain_send};
use crate::common::fake_upstream::{InboxUpstream, ext_config, permission_json};
use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::opencode::{FakeModel, OpenCode};
use crate::common::webhook::receiver;
use crate::common::write_secret;

const ALICE: &str = "alice-password-1";

/// The upstream's own `GET /global/event`, read straight from the server: each event's payload
/// and the moment it arrived.
struct Upstream {
    events: Arc<Mutex<Vec<(Instant, Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    async fn open(oc: &OpenCode) -> Upstream {
        let addr = format!("127.0.0.1:{}", oc.port).parse().unwrap();
        let auth = basic("opencode", &oc.password);
        let resp = plain_send(addr, "GET", "/global/event", &[("authorization", &auth)], "").await;
        assert_eq!(resp.status(), 200);
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let task = tokio::spawn(async move {
            let mut body = resp.into_body();
            let mut buf = String::new();
            while let Some(Ok(frame)) = body.frame().await {
                let Some(d) = frame.data_ref() else { continue };
                buf.push_str(&String::from_utf8_lossy(d));
                while let Some(end) = buf.find("\n\n") {
                    let event: String = buf.drain(..end + 2).collect();
                    if let Some(v) = event
                        .strip_prefix("data: ")
                        .and_then(|j| serde_json::from_str::<Value>(j.trim()).ok())
                    {
                        sink.lock().unwrap().push((Instant::now(), v["payload"].clone()));
                    }
                }
            }
        });
        Upstream { events, task }
    }

    /// The first event of `kind` whose properties mention `needle`, and when it came.
    async fn wait_for(&self, kind: &str, needle: &str, within: Duration) -> (Instant, Value) {
        let deadline = Instant::now() + within;
        loop {
            let found = self
                .events
                .lock()
                .unwrap()
                .iter()
                .find(|(_, v)| v["type"] == kind && v["properties"].to_string().contains(needle))
                .cloned();
            if let Some(f) = found {
                return f;
            }
            assert!(Instant::now() < deadline, "no {kind} with {needle} within {within:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn inbox(gw: &Gateway, query: &str) -> Value {
    let (status, body) = tokio::task::block_in_place(|| gw.control("GET", &format!("/inbox{query}")));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The project's entry in an inbox view, or `null` while the inbox does not list it yet (a
/// watcher not started): predicates polled by [`inbox_until`] then read "not yet", not a panic.
fn project<'a>(view: &'a Value, name: &str) -> &'a Value {
    static ABSENT: Value = Value::Null;
    view["projects"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .unwrap_or(&ABSENT)
}

/// Poll the inbox (every 5 ms, at most `within`) until `pred` holds for it.
async fn inbox_until(gw: &Gateway, within: Duration, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let v = inbox(gw, "");
        if pred(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {within:?}; the inbox: {v:#}\n{}",
            gw.logs()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Until `/metrics` says `project` spent `usd` since the gateway started (bounded).
async fn spend_until(gw: &Gateway, project: &str, usd: f64) {
    let line = format!("project_spend_usd_total{{project=\"{project}\"}} ");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = gw.admin("GET", "/metrics").1;
        let spent = (metrics.lines())
            .find_map(|l| l.split_once(line.as_str()).map(|(_, v)| v))
            .and_then(|v| v.trim().parse::<f64>().ok());
        if spent.is_some_and(|s| (s - usd).abs() < 1e-9) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "spent {spent:?}, not {usd}: {}\n{}",
            metrics
                .lines()
                .filter(|l| l.contains("spend"))
                .collect::<Vec<_>>()
                .join("\n"),
            gw.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn has_card(v: &Value, project_name: &str, id: &str) -> bool {
    project(v, project_name)["pending"]
        .as_array()
        .is_some_and(|cards| cards.iter().any(|c| c["id"] == id))
}

fn resolution(v: &Value, project_name: &str, id: &str) -> Option<Value> {
    project(v, project_name)["resolved"]
        .as_array()?
        .iter()
        .find(|r| r["id"] == id)
        .cloned()
}

fn control_reply(gw: &Gateway, query: &str) -> Value {
    let (status, body) = tokio::task::block_in_place(|| gw.control("POST", &format!("/inbox/reply?{query}")));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Prompt `session` of `project` through the gateway (as alice) so the model asks for bash.
async fn prompt_bash(client: &Https, project: &str, session: &str) {
    let (status, body) = json(
        client,
        "POST",
        &format!("/p/{project}/session/{session}/prompt_async"),
        &basic("alice", ALICE),
        r#"{"parts":[{"type":"text","text":"please RUNBASH"}]}"#,
    )
    .await;
    assert_eq!(status, 204, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_permission_request_reaches_the_inbox_is_answered_here_or_elsewhere_and_is_announced() {
    let model = FakeModel::start("echo TOOLRAN > marker.txt").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let other = tempfile::tempdir().unwrap();
    let other_dir = other.path().canonicalize().unwrap();
    let (hook, hook_seen) = receiver(vec![500]).await;
    let project_toml = |name: &str, dir: &std::path::Path| {
        format!(
            "[[project]]\nname = \"{name}\"\nupstream = \"{}\"\nupstream_password_file = \"upstream.pw\"\ndirectory = \"{}\"\n\n",
            oc.url(),
            dir.display()
        )
    };
    let config = base_config(&format!(
        "[notify]\nwebhook = \"{hook}\"\ndebounce = \"100ms\"\n\n{}{}{}",
        project_toml("alpha", &oc.project),
        project_toml("beta", &other_dir),
        users_toml(&[TestUser {
            name: "alice",
            password: ALICE,
            projects: "[\"*\"]",
            role: "admin",
        }])
    ));
    let pw = oc.password.clone();
    let gw = Gateway::start_with(&config, &[], move |d| write_secret(&d.join("upstream.pw"), &pw));
    let client = Https::new(gw.https, &gw.ca());

    // Both projects are served by one server: one subscription, both running.
    inbox_until(&gw, Duration::from_secs(30), "both projects running", |v| {
        ["alpha", "beta"]
            .iter()
            .all(|p| project(v, p)["server"]["state"] == "running")
    })
    .await;
    assert_eq!(inbox(&gw, "")["subscriptions"], 1, "one subscription per server");

    let upstream = Upstream::open(&oc).await;
    // The server joins a new stream to its bus just after it connects: wait until it carries a
    // session made now (bounded), so the permission request below is seen on it.
    let dir = oc.project.display().to_string();
    let mut probe_seen = false;
    for _ in 0..5 {
        let s: Value = serde_json::from_str(
            &direct_call(
                oc.port,
                &oc.password,
                "POST",
                &format!("/session?directory={dir}"),
                &[],
                "{}",
            )
            .await,
        )
        .unwrap();
        let id = s["id"].as_str().unwrap().to_string();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && !probe_seen {
            probe_seen = upstream
                .events
                .lock()
                .unwrap()
                .iter()
                .any(|(_, v)| v["type"] == "session.created" && v.to_string().contains(&id));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if probe_seen {
            break;
        }
    }
    assert!(probe_seen, "the upstream's stream carries new sessions");

    let (status, session) = json(&client, "POST", "/p/alpha/session", &basic("alice", ALICE), "{}").await;
    assert_eq!(status, 200, "{session}");
    let sid = session["id"].as_str().unwrap().to_string();
    prompt_bash(&client, "alpha", &sid).await;

    // The card is in the inbox soon after the server's permission.asked: from the watch's event,
    // not a later resync. 3 s is that distinction, not a speed goal (those live in bench/).
    let (asked_at, asked) = upstream
        .wait_for("permission.asked", &sid, Duration::from_secs(60))
        .await;
    let per = asked["properties"]["id"].as_str().unwrap().to_string();
    let v = inbox_until(&gw, Duration::from_secs(5), "the card", |v| has_card(v, "alpha", &per)).await;
    let lag = asked_at.elapsed();
    assert!(lag < Duration::from_secs(3), "the card came {lag:?} after the event");
    let card = project(&v, "alpha")["pending"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == per.as_str())
        .unwrap()
        .clone();
    assert_eq!(card["kind"], "permission");
    assert_eq!(card["tool"], "bash");
    assert_eq!(card["session_id"], sid.as_str());
    assert_eq!(card["lines"], serde_json::json!(["echo TOOLRAN > marker.txt"]));
    assert_eq!(card["always"], serde_json::json!(["echo *"]));
    assert!(card["session_title"].is_string(), "{card}");
    assert_eq!(card["subagent"], false);
    assert!(
        project(&v, "alpha")["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == sid.as_str() && s["status"]["type"] == "busy"),
        "the session is listed, busy: {v:#}"
    );

    // Another project's view, on the same server, shows nothing of alpha's.
    let beta = inbox(&gw, "?project=beta");
    assert_eq!(beta["projects"].as_array().unwrap().len(), 1);
    let text = beta.to_string();
    assert!(!text.contains(&per) && !text.contains(&sid), "{beta:#}");
    assert_eq!(project(&beta, "beta")["pending"], serde_json::json!([]));

    // The notification names project and tool, never the command; the receiver's first 500
    // was retried.
    let deadline = Instant::now() + Duration::from_secs(15);
    while hook_seen.lock().unwrap().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the webhook was retried: {:?}",
            hook_seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for body in hook_seen.lock().unwrap().iter() {
        let m: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            (m["project"].as_str(), m["tool"].as_str()),
            (Some("alpha"), Some("bash")),
            "{m}"
        );
        assert!(m["url"].as_str().unwrap().ends_with("/inbox"), "{m}");
        assert!(
            !body.contains("TOOLRAN") && !body.contains("echo"),
            "no command text: {body}"
        );
    }

    // Answered through the inbox: the tool runs, the card goes, "answered here".
    assert!(!oc.project.join("marker.txt").exists(), "the tool waits");
    let r = control_reply(&gw, &format!("project=alpha&id={per}&reply=once"));
    assert_eq!(r["outcome"], "Done", "{r}");
    let v = inbox(&gw, "");
    assert!(!has_card(&v, "alpha", &per), "the card went at once: {v:#}");
    let how = resolution(&v, "alpha", &per).expect("listed as resolved");
    assert_eq!(
        (how["how"].as_str(), how["by"].as_str()),
        (Some("answered_here"), Some("control"))
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !oc.project.join("marker.txt").exists() {
        assert!(Instant::now() < deadline, "the tool ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    inbox_until(&gw, Duration::from_secs(60), "the session idle", |v| {
        project(v, "alpha")["sessions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["id"] == sid.as_str() && s["status"]["type"] == "idle")
    })
    .await;

    // A second request, answered on the server itself: "answered elsewhere".
    prompt_bash(&client, "alpha", &sid).await;
    let v = inbox_until(&gw, Duration::from_secs(60), "a second card", |v| {
        project(v, "alpha")["pending"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["kind"] == "permission")
    })
    .await;
    let second = project(&v, "alpha")["pending"][0]["id"].as_str().unwrap().to_string();
    assert_ne!(second, per);
    let answer = direct_call(
        oc.port,
        &oc.password,
        "POST",
        &format!("/permission/{second}/reply?directory={dir}"),
        &[],
        r#"{"reply":"reject"}"#,
    )
    .await;
    assert_eq!(answer.trim(), "true");
    let v = inbox_until(&gw, Duration::from_secs(5), "the second card resolved", |v| {
        !has_card(v, "alpha", &second) && resolution(v, "alpha", &second).is_some()
    })
    .await;
    assert_eq!(resolution(&v, "alpha", &second).unwrap()["how"], "elsewhere");
    // Answering it again through the inbox: already answered, not an error.
    let r = control_reply(&gw, &format!("project=alpha&id={second}&reply=once"));
    assert_eq!(r["outcome"], "AlreadyAnswered", "{r}");
    assert!(
        !gw.logs().contains(&oc.password),
        "the upstream password is never logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn the_inbox_follows_spawned_servers_without_starting_them_and_follows_reloads() {
    use crate::common::supervised::{project_status, server_config, spawned};
    let model = FakeModel::start("echo TOOLRAN > marker.txt").await;
    let (lazy_dir, other_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let lazy = lazy_dir.path().canonicalize().unwrap();
    let gw = Gateway::start(&server_config(&spawned("lazy", &lazy, &model, "start = \"on-demand\"")));
    let v = inbox_until(&gw, Duration::from_secs(10), "lazy listed as stopped", |v| {
        v["projects"].as_array().unwrap().iter().any(|p| p["name"] == "lazy")
            && project(v, "lazy")["server"]["state"] == "stopped"
    })
    .await;
    assert_eq!(v["subscriptions"], 0);
    // Watching never starts an on-demand server (two reconcile rounds later it still waits).
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(project_status(&gw, "lazy"), "waiting for the first request");
    assert_eq!(project(&inbox(&gw, ""), "lazy")["server"]["state"], "stopped");

    // The first request starts it; the inbox then watches it and sees its request.
    let client = Https::new(gw.https, &gw.ca());
    let (status, session) = json(&client, "POST", "/p/lazy/session", &basic("alice", ALICE), "{}").await;
    assert_eq!(status, 200, "{session}");
    let sid = session["id"].as_str().unwrap().to_string();
    inbox_until(&gw, Duration::from_secs(10), "lazy running and watched", |v| {
        project(v, "lazy")["server"]["state"] == "running" && v["subscriptions"] == 1
    })
    .await;
    prompt_bash(&client, "lazy", &sid).await;
    let v = inbox_until(&gw, Duration::from_secs(60), "lazy's card", |v| {
        project(v, "lazy")["pending"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["session_id"] == sid.as_str() && c["tool"] == "bash")
    })
    .await;
    let per = project(&v, "lazy")["pending"][0]["id"].as_str().unwrap().to_string();
    let r = control_reply(&gw, &format!("project=lazy&id={per}&reply=once"));
    assert_eq!(r["outcome"], "Done", "{r}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !lazy.join("marker.txt").exists() {
        assert!(
            Instant::now() < deadline,
            "the tool ran in the spawned server's directory"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A reload that removes the project stops its watcher and drops it from the inbox.
    gw.write_config(&server_config(&spawned(
        "other",
        other_dir.path(),
        &model,
        "start = \"on-demand\"",
    )));
    let (status, body) = tokio::task::block_in_place(|| gw.control("POST", "/reload"));
    assert_eq!(status, 200, "{body}");
    inbox_until(
        &gw,
        Duration::from_secs(10),
        "lazy gone, other stopped, nothing watched",
        |v| {
            let names: Vec<&str> = v["projects"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p["name"].as_str())
                .collect();
            names == ["other"] && v["subscriptions"] == 0
        },
    )
    .await;
}

#[test]
fn an_unreachable_external_server_is_shown_failed_with_the_reason() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = base_config(&format!(
        "[[project]]\nname = \"gone\"\nupstream = \"http://127.0.0.1:{port}\"\n\n{}",
        users_toml(&[TestUser {
            name: "alice",
            password: ALICE,
            projects: "[\"*\"]",
            role: "admin",
        }])
    ));
    let gw = Gateway::start(&config);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = gw.control("GET", "/inbox");
        let v: Value = serde_json::from_str(&body).unwrap();
        let server = &v["projects"][0]["server"];
        if server["state"] == "failed" {
            assert_eq!(v["projects"][0]["name"], "gone");
            let reason = server["reason"].as_str().unwrap();
            assert!(reason.contains("unreachable") && reason.contains("refused"), "{reason}");
            assert_eq!(v["subscriptions"], 0);
            break;
        }
        assert!(Instant::now() < deadline, "shown failed within 10 s: {v:#}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A reply to it says why it cannot be sent (an error, not "already answered"): the proxy's
    // own 502, which names the project and why.
    let (status, body) = gw.control("POST", "/inbox/reply?project=gone&id=per_1&reply=once");
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("project gone: its OpenCode server is not reachable (connection refused)"),
        "{body}"
    );
    let (status, body) = gw.control("POST", "/inbox/reply?project=gone&id=../x&reply=once");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not a request or session id"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn questions_are_answered_or_rejected_through_the_inbox() {
    use crate::common::supervised::{server_config, spawned};
    let model = FakeModel::start("true").await;
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(&server_config(&spawned("quiz", dir.path(), &model, "")));
    let client = Https::new(gw.https, &gw.ca());
    inbox_until(&gw, Duration::from_secs(30), "quiz running", |v| {
        v["projects"].as_array().unwrap().iter().any(|p| p["name"] == "quiz")
            && project(v, "quiz")["server"]["state"] == "running"
            && v["subscriptions"] == 1
    })
    .await;
    let ask = async |session: &str| {
        let (status, body) = json(
            &client,
            "POST",
            &format!("/p/quiz/session/{session}/prompt_async"),
            &basic("alice", ALICE),
            r#"{"parts":[{"type":"text","text":"please ASKQUESTION"}]}"#,
        )
        .await;
        assert_eq!(status, 204, "{body}");
        let v = inbox_until(&gw, Duration::from_secs(60), "a question card", |v| {
            project(v, "quiz")["pending"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["kind"] == "question" && c["session_id"] == session)
        })
        .await;
        project(&v, "quiz")["pending"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["session_id"] == session)
            .unwrap()
            .clone()
    };
    let (_, s1) = json(&client, "POST", "/p/quiz/session", &basic("alice", ALICE), "{}").await;
    let s1 = s1["id"].as_str().unwrap().to_string();
    let card = ask(&s1).await;
    assert_eq!(card["questions"][0]["question"], "Which colour?");
    assert_eq!(card["questions"][0]["options"][1]["label"], "blue");
    let id = card["id"].as_str().unwrap().to_string();
    let r = control_reply(&gw, &format!("project=quiz&id={id}&reply=answer&answer=blue"));
    assert_eq!(r["outcome"], "Done", "{r}");
    // The audit trail says a question was answered there, never what the answer said.
    let answered = crate::common::audit::find(&crate::common::audit::file(&gw), "question_answer", |r| {
        r["request"] == id.as_str()
    })
    .await;
    assert_eq!(
        (answered["answer"].as_str(), answered["from"].as_str()),
        (Some("reply"), Some("control_socket"))
    );
    // Sent on the one road as the gateway, under the control socket's grant; audited there, once.
    assert_eq!(
        (&answered["user"], &answered["via"], &answered["status"]),
        (&"control".into(), &"gateway".into(), &200.into()),
        "{answered}"
    );
    let records = crate::common::audit::records(&crate::common::audit::file(&gw));
    let once = records.iter().filter(|r| r["request"] == id.as_str()).count();
    assert_eq!(once, 1, "the control socket's answer is audited once: {records:?}");
    assert!(
        !std::fs::read_to_string(crate::common::audit::file(&gw))
            .unwrap()
            .contains("blue")
    );
    let v = inbox(&gw, "");
    assert_eq!(resolution(&v, "quiz", &id).unwrap()["how"], "answered_here");
    // The model is called again with the answer as the tool's result.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answered = model.bodies.lock().unwrap().iter().any(|b| {
            let v: Value = serde_json::from_str(b).unwrap_or_default();
            v["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "tool" && m.to_string().contains("blue")))
        });
        if answered {
            break;
        }
        assert!(Instant::now() < deadline, "the model got the answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Rejected through the inbox: resolved here; the session goes on.
    let (_, s2) = json(&client, "POST", "/p/quiz/session", &basic("alice", ALICE), "{}").await;
    let s2 = s2["id"].as_str().unwrap().to_string();
    let id = ask(&s2).await["id"].as_str().unwrap().to_string();
    let r = control_reply(&gw, &format!("project=quiz&id={id}&reply=reject"));
    assert_eq!(r["outcome"], "Done", "{r}");
    let v = inbox(&gw, "");
    assert!(!has_card(&v, "quiz", &id));
    assert_eq!(resolution(&v, "quiz", &id).unwrap()["how"], "answered_here");
    // And again: already answered.
    let r = control_reply(&gw, &format!("project=quiz&id={id}&reply=reject"));
    assert_eq!(r["outcome"], "AlreadyAnswered", "{r}");
    // Aborting a session through the inbox.
    let r = control_reply(&gw, &format!("project=quiz&id={s2}&reply=abort"));
    assert_eq!(r["outcome"], "Done", "{r}");
    let file = crate::common::audit::file(&gw);
    let aborted = crate::common::audit::find(&file, "session_abort", |r| r["session"] == s2.as_str()).await;
    assert_eq!(
        (&aborted["user"], &aborted["via"], &aborted["from"], &aborted["status"]),
        (
            &"control".into(),
            &"gateway".into(),
            &"control_socket".into(),
            &200.into()
        ),
        "{aborted}"
    );
}

/// A project folder for the stand-in's project (canonical), and the guard that removes it.
fn folder() -> (std::path::PathBuf, tempfile::TempDir) {
    let keep = tempfile::tempdir().unwrap();
    (keep.path().canonicalize().unwrap(), keep)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reconnect_the_inbox_is_reseeded_and_what_was_answered_in_the_gap_resolves_elsewhere() {
    let fake = InboxUpstream::start("scripted-upstream-pw").await;
    *fake.state.permissions.lock().unwrap() = serde_json::json!([permission_json("per_1")]);
    // A session that had spent $0.01 before the gateway saw it (not today's spend to the meter).
    let session =
        |usd: f64| serde_json::json!({"id": "ses_1", "title": "t", "cost": usd, "time": {"created": 1, "updated": 2}});
    *fake.state.sessions.lock().unwrap() = Some(serde_json::json!([session(0.01)]));
    let (dir, _keep) = folder();
    let gw = Gateway::start_behind(&ext_config(&fake, &dir, ALICE), "scripted-upstream-pw");
    inbox_until(&gw, Duration::from_secs(10), "the seeded card", |v| {
        has_card(v, "ext", "per_1")
    })
    .await;
    assert_eq!(project(&inbox(&gw, ""), "ext")["server"]["state"], "running");
    // One event of another directory on the same server is not this project's; a live event of
    // the project's, after it on the same stream, adds a card: once that card shows, the one
    // before it has been read too.
    let tx = fake.state.streams.lock().unwrap()[0].clone();
    let other = serde_json::json!({"directory": "/elsewhere", "payload": {"type": "permission.asked", "properties": permission_json("per_other")}});
    tx.send(format!("data: {other}\n\n")).await.unwrap();
    let event = serde_json::json!({"directory": dir, "payload": {"type": "permission.asked", "properties": permission_json("per_live")}});
    tx.send(format!("data: {event}\n\n")).await.unwrap();
    inbox_until(&gw, Duration::from_secs(5), "the live card", |v| {
        has_card(v, "ext", "per_live")
    })
    .await;
    assert!(!has_card(&inbox(&gw, ""), "ext", "per_other"));
    // The session spends $0.01 more, live.
    let spent = serde_json::json!({"directory": dir, "payload": {"type": "session.updated", "properties": {"sessionID": "ses_1", "info": session(0.02)}}});
    tx.send(format!("data: {spent}\n\n")).await.unwrap();
    spend_until(&gw, "ext", 0.01).await;
    drop(tx);
    // The stream breaks; meanwhile per_1 and per_live are answered, per_2 is asked and the
    // session spends $0.03 more: the re-seed re-reads its total.
    *fake.state.sessions.lock().unwrap() = Some(serde_json::json!([session(0.05)]));
    *fake.state.permissions.lock().unwrap() = serde_json::json!([permission_json("per_2")]);
    fake.state.streams.lock().unwrap().clear();
    let v = inbox_until(&gw, Duration::from_secs(10), "the re-seed", |v| {
        has_card(v, "ext", "per_2") && !has_card(v, "ext", "per_1") && !has_card(v, "ext", "per_live")
    })
    .await;
    for id in ["per_1", "per_live"] {
        assert_eq!(resolution(&v, "ext", id).unwrap()["how"], "elsewhere", "{id}");
    }
    assert_eq!(project(&v, "ext")["server"]["state"], "running");
    assert_eq!(v["subscriptions"], 1);
    spend_until(&gw, "ext", 0.04).await;
    let targets = fake.state.targets.lock().unwrap().clone();
    assert_eq!(
        targets.iter().filter(|t| t.starts_with("/global/event")).count(),
        2,
        "one subscription, then one reconnect: {targets:?}"
    );
    let encoded_dir = dir.display().to_string();
    assert!(
        targets
            .iter()
            .any(|t| *t == format!("/permission?directory={encoded_dir}")),
        "the lists are read for the project's directory: {targets:?}"
    );
    assert!(
        *fake.state.password_seen.lock().unwrap(),
        "the gateway's credential is sent"
    );
}

/// A server that answers `GET /global/event`'s headers before it subscribes the stream to its
/// bus and writes `server.connected` once subscribed: a permission asked in between is in no
/// event this stream will carry. The watcher seeds only after the stream's first event, so the
/// seed sees it. (Seeding on the headers lost it for good: the phone test once waited 30 s for a
/// session made 0.26 s after the watcher started.) OpenCode 1.18.33's own order is the next
/// test's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_made_before_the_stream_is_subscribed_is_in_the_seed() {
    let fake = InboxUpstream::start("scripted-upstream-pw").await;
    *fake.state.subscribe_late.lock().unwrap() = Some((Duration::from_secs(2), permission_json("per_gap")));
    let (dir, _keep) = folder();
    let gw = Gateway::start_behind(&ext_config(&fake, &dir, ALICE), "scripted-upstream-pw");
    inbox_until(&gw, Duration::from_secs(10), "the card asked in the gap", |v| {
        has_card(v, "ext", "per_gap")
    })
    .await;
    let targets = fake.state.targets.lock().unwrap().clone();
    assert_eq!(
        targets.iter().filter(|t| t.starts_with("/global/event")).count(),
        1,
        "found by the first seed, not a reconnect: {targets:?}"
    );
}

/// OpenCode 1.18.33 writes `server.connected` first and joins the stream to its bus only when it
/// is read past it (its bundled source), so a permission asked (or a session made) just then is
/// in neither the first seed nor any event: with one seed the phone test waited 30 s for a
/// session made as the watcher started. The watcher reads the lists again on the stream's second
/// event (any: a joined stream's first, the heartbeat at the latest), and the card shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_made_while_the_stream_joins_the_bus_is_in_the_second_seed() {
    let fake = InboxUpstream::start("scripted-upstream-pw").await;
    *fake.state.join_late.lock().unwrap() = Some((Duration::from_secs(2), permission_json("per_joining")));
    let (dir, _keep) = folder();
    let gw = Gateway::start_behind(&ext_config(&fake, &dir, ALICE), "scripted-upstream-pw");
    inbox_until(
        &gw,
        Duration::from_secs(10),
        "the card asked while the stream joined",
        |v| has_card(v, "ext", "per_joining"),
    )
    .await;
    let targets = fake.state.targets.lock().unwrap().clone();
    assert_eq!(
        targets.iter().filter(|t| t.starts_with("/global/event")).count(),
        1,
        "found by the second seed, not a reconnect: {targets:?}"
    );
    assert!(
        targets.iter().filter(|t| t.starts_with("/permission")).count() >= 2,
        "the lists were read twice: {targets:?}"
    );
}
