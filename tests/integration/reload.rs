//! Reload without dropping anyone: SIGHUP (or `opencode-gateway reload`, over the control
//! socket) applies new users, passwords and projects to the next request, keeps open streams,
//! and a file that does not validate changes nothing.

use std::time::Duration;

use http_body_util::Full;

use crate::common::client::{Https, basic, read, read_until, try_read_until};
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::{ALICE, Gateway, TestUser, base_config, external_project, users_toml};
use crate::common::login::{form_login, logged_in, token_create};

const PW: &str = "reload-upstream-pw";

fn config(web: &FakeUpstream, api: Option<&FakeUpstream>, users: &[TestUser<'_>]) -> String {
    let mut projects = external_project("web", &web.url());
    if let Some(api) = api {
        projects += &external_project("api", &api.url());
    }
    base_config(&format!("{projects}{}", users_toml(users)))
}

async fn reloaded(gw: &Gateway, how: &str) {
    let before = gw.logs().matches("configuration reloaded").count();
    match how {
        "sighup" => gw.signal(libc::SIGHUP),
        _ => {
            // The CLI, over the control socket.
            let out = crate::common::process::bounded(
                std::process::Command::new(crate::common::gateway::BIN)
                    .arg("reload")
                    .arg("-c")
                    .arg(&gw.config),
            );
            assert!(
                out.status.success(),
                "{}\n{}",
                String::from_utf8_lossy(&out.stderr),
                gw.logs()
            );
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gw.logs().matches("configuration reloaded").count() == before {
        assert!(std::time::Instant::now() < deadline, "no reload:\n{}", gw.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn new_users_and_projects_apply_to_the_next_request_and_open_streams_stay_open() {
    let web = FakeUpstream::start(PW).await;
    let api = FakeUpstream::start(PW).await;
    let gw = Gateway::start_behind(&config(&web, None, &[ALICE]), PW);
    let c = Https::new(gw.https, &gw.ca());
    let alice = basic("alice", "alice-password-1");
    let carol = basic("carol", "carol-password-1");
    let mut stream = c
        .send(
            c.request("GET", "/p/web/event", Some(&alice))
                .body(Full::default())
                .unwrap(),
        )
        .await
        .into_body();
    read_until(&mut stream, Duration::from_secs(5), |t| t.contains("server.connected")).await;
    web.wait_subscribers(1).await;
    assert_eq!(c.get("/p/web/global/health", Some(&carol)).await.status, 401);
    assert_eq!(c.get("/p/api/global/health", Some(&alice)).await.status, 404);

    let carol_user = TestUser {
        name: "carol",
        password: "carol-password-1",
        projects: "[\"api\"]",
        role: "viewer",
    };
    gw.write_config(&config(&web, Some(&api), &[ALICE, carol_user]));
    reloaded(&gw, "sighup").await;
    assert_eq!(
        c.get("/p/api/global/health", Some(&carol)).await.status,
        200,
        "a new user on a new project"
    );
    assert_eq!(c.get("/p/web/global/health", Some(&carol)).await.status, 403);
    // The stream opened before the reload still carries events.
    web.events.send("{\"type\":\"after-reload\"}".into()).unwrap();
    let got = read_until(&mut stream, Duration::from_secs(5), |t| t.contains("after-reload")).await;
    assert!(got.contains("after-reload"), "{got}");

    // Removing the project: its requests are 404 from the next one on.
    gw.write_config(&config(&web, None, &[ALICE]));
    reloaded(&gw, "cli").await;
    assert_eq!(c.get("/p/api/global/health", Some(&alice)).await.status, 404);
    assert_eq!(
        c.get("/p/api/global/health", Some(&carol)).await.status,
        401,
        "carol is gone"
    );
}

#[tokio::test]
async fn a_new_password_replaces_the_old_one_at_once() {
    let web = FakeUpstream::start(PW).await;
    let gw = Gateway::start_behind(&config(&web, None, &[ALICE]), PW);
    let c = Https::new(gw.https, &gw.ca());
    let old = basic("alice", "alice-password-1");
    assert_eq!(c.get("/p/web/global/health", Some(&old)).await.status, 200);
    // A kept-alive connection remembers the header it verified (auth/memo.rs): twice, so the
    // second request is answered from that memo.
    let mut kept = c.http1().await;
    let req = |auth: &str| {
        c.request("GET", "/p/web/global/health", Some(auth))
            .body(Full::default())
            .unwrap()
    };
    for _ in 0..2 {
        kept.ready().await.unwrap();
        assert_eq!(read(kept.send_request(req(&old)).await.unwrap()).await.status, 200);
    }
    let changed = TestUser {
        password: "alice-password-2",
        ..ALICE
    };
    gw.write_config(&config(&web, None, &[changed]));
    reloaded(&gw, "sighup").await;
    assert_eq!(
        c.get("/p/web/global/health", Some(&old)).await.status,
        401,
        "the cached old password is gone"
    );
    kept.ready().await.unwrap();
    assert_eq!(
        read(kept.send_request(req(&old)).await.unwrap()).await.status,
        401,
        "the connection's memo of the old password is gone"
    );
    assert_eq!(
        c.get("/p/web/global/health", Some(&basic("alice", "alice-password-2")))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn a_config_that_does_not_validate_changes_nothing() {
    let web = FakeUpstream::start(PW).await;
    let gw = Gateway::start_behind(&config(&web, None, &[ALICE]), PW);
    let c = Https::new(gw.https, &gw.ca());
    let alice = basic("alice", "alice-password-1");
    let good = std::fs::read_to_string(&gw.config).unwrap();
    gw.write_config(&good.replace("upstream = \"http://127.0.0.1", "upstream = \"http://192.0.2.1"));
    gw.signal(libc::SIGHUP);
    assert!(gw.wait_log("reload refused", Duration::from_secs(10)).await);
    assert!(
        gw.wait_log("192.0.2.1 is not a loopback address", Duration::from_secs(5))
            .await,
        "the log says why:\n{}",
        gw.logs()
    );
    assert_eq!(
        c.get("/p/web/global/health", Some(&alice)).await.status,
        200,
        "the old config keeps serving"
    );
    let (status, body) = gw.control("POST", "/reload");
    assert_eq!(status, 422);
    assert!(body.contains("not a loopback address"), "{body}");
    gw.write_config("this is [not toml");
    let (status, body) = gw.control("POST", "/reload");
    assert_eq!(status, 422, "{body}");
    assert_eq!(c.get("/p/web/global/health", Some(&alice)).await.status, 200);
    assert_eq!(gw.metric("reload_failures_total"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn reload_keeps_unchanged_servers_stops_removed_ones_and_starts_new_ones() {
    use crate::common::supervised::{project_port, server_config, server_pid, spawned};
    let model = crate::common::opencode::FakeModel::start("true").await;
    let dirs = tempfile::tempdir().unwrap();
    for d in ["a", "b", "c"] {
        std::fs::create_dir_all(dirs.path().join(d)).unwrap();
    }
    let proj = |n: &str| spawned(n, &dirs.path().join(n), &model, "");
    let gw = Gateway::start(&server_config(&format!("{}{}", proj("a"), proj("b"))));
    let c = Https::new(gw.https, &gw.ca());
    let alice = basic("alice", "alice-password-1");
    assert_eq!(c.get("/p/a/global/health", Some(&alice)).await.status, 200);
    assert_eq!(c.get("/p/b/global/health", Some(&alice)).await.status, 200);
    let pid_a = server_pid(project_port(&gw, "a").unwrap());
    let pid_b = server_pid(project_port(&gw, "b").unwrap());
    let dir_a = dirs.path().join("a").display().to_string();
    let mut stream = c
        .send(
            c.request("GET", &format!("/p/a/event?directory={dir_a}"), Some(&alice))
                .body(Full::default())
                .unwrap(),
        )
        .await
        .into_body();
    read_until(&mut stream, Duration::from_secs(10), |t| t.contains("server.connected")).await;
    // OpenCode joins the stream to its bus just after "connected": make probe sessions in a until
    // one is announced on the stream (bounded), so the check after the reload can fail only for it.
    let mut probes = Vec::new();
    while probes.len() < 5 {
        let (status, probe) = crate::common::client::json(&c, "POST", "/p/a/session", &alice, "{}").await;
        assert_eq!(status, 200, "{probe}");
        let id = probe["id"].as_str().unwrap().to_string();
        if try_read_until(&mut stream, Duration::from_secs(3), |t| t.contains(&id))
            .await
            .is_ok()
        {
            break;
        }
        probes.push(id);
    }
    assert!(
        probes.len() < 5,
        "no probe session {probes:?} was announced on a's stream"
    );

    gw.write_config(&server_config(&format!("{}{}", proj("a"), proj("c"))));
    reloaded(&gw, "sighup").await;
    assert_eq!(
        c.get("/p/c/global/health", Some(&alice)).await.status,
        200,
        "the new project's server started"
    );
    assert_eq!(c.get("/p/b/global/health", Some(&alice)).await.status, 404);
    assert_eq!(
        server_pid(project_port(&gw, "a").unwrap()),
        pid_a,
        "the unchanged project's server kept running"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::path::Path::new(&format!("/proc/{pid_b}/cmdline")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid_b}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the removed project's server still runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The stream opened on a before the reload still carries a's events.
    let (status, _) = crate::common::client::json(&c, "POST", "/p/a/session", &alice, "{}").await;
    assert_eq!(status, 200);
    let got = read_until(&mut stream, Duration::from_secs(10), |t| t.contains("session.created")).await;
    assert!(got.contains("session.created"), "{got}");
}

/// A config whose project `web` has a port of its own (and `api` does not), and that port.
fn own_port_config(web: &FakeUpstream, with_web: bool) -> String {
    let own = format!(
        "[[project]]\nname = \"web\"\nupstream = \"{}\"\nupstream_password_file = \"pw\"\nlisten = \"127.0.0.1:0\"\n\n",
        web.url()
    );
    base_config(&format!(
        "{}{}{}",
        if with_web { own.as_str() } else { "" },
        external_project("api", &web.url()),
        users_toml(&[ALICE])
    ))
}

fn own_port(gw: &Gateway) -> std::net::SocketAddr {
    let logs = gw.logs();
    let line = logs.lines().find(|l| l.contains("project listener ready")).unwrap();
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("listen="))
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_removed_projects_own_port_answers_404_with_the_reason_until_restart() {
    let web = FakeUpstream::start(PW).await;
    let gw = Gateway::start_behind(&own_port_config(&web, true), PW);
    let c = Https::new(own_port(&gw), &gw.ca());
    let alice = basic(ALICE.name, ALICE.password);
    assert_eq!(c.get("/global/health", Some(&alice)).await.status, 200);
    gw.write_config(&own_port_config(&web, false));
    reloaded(&gw, "sighup").await;
    assert!(
        gw.wait_log(
            "project removed: its own port stays open until a restart",
            Duration::from_secs(5)
        )
        .await,
        "{}",
        gw.logs()
    );
    // A new connection to the old port: a clean 404 naming the reason, not a dropped connection.
    let r = c.get("/global/health", Some(&alice)).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(
        r.body
            .contains("project web no longer exists; its port closes on restart"),
        "{}",
        r.body
    );
}

/// Needs the pipeline change (src/http/pipeline.rs answers 404 instead of indexing
/// `state.projects[name]`): until it lands, a connection opened before the reload panics its
/// request task and the client sees the connection dropped.
#[tokio::test]
async fn a_kept_alive_connection_to_a_removed_projects_port_gets_404_not_a_dropped_connection() {
    let web = FakeUpstream::start(PW).await;
    let gw = Gateway::start_behind(&own_port_config(&web, true), PW);
    let c = Https::new(own_port(&gw), &gw.ca());
    let alice = basic(ALICE.name, ALICE.password);
    let mut kept = c.http1().await;
    let req = || {
        c.request("GET", "/global/health", Some(&alice))
            .body(Full::default())
            .unwrap()
    };
    assert_eq!(kept.send_request(req()).await.unwrap().status(), 200);
    gw.write_config(&own_port_config(&web, false));
    reloaded(&gw, "sighup").await;
    let r = tokio::time::timeout(Duration::from_secs(10), kept.send_request(req()))
        .await
        .expect("an answer within 10 s")
        .expect("an HTTP answer, not a dropped connection");
    let r = crate::common::client::read(r).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(r.body.contains("no longer exists"), "{}", r.body);
}

/// Issue 21, defect 6: a changed password ended neither the user's browser logins nor anything
/// else. Now the logins made under the old password end, on reload and across a restart; other
/// users' logins and the user's API tokens (not made from the password) stay.
#[tokio::test]
async fn a_changed_password_ends_the_browser_logins_made_under_the_old_one() {
    let web = FakeUpstream::start(PW).await;
    let bob = || TestUser {
        name: "bob",
        password: "bob-password-22",
        projects: "[\"web\"]",
        role: "operator",
    };
    let mut gw = Gateway::start_behind(&config(&web, None, &[ALICE, bob()]), PW);
    let c = Https::new(gw.https, &gw.ca());
    let token = format!("Bearer {}", token_create(&gw, "alice"));
    let alice_cookie = form_login(&c, "alice", "alice-password-1").await;
    let bob_cookie = form_login(&c, "bob", "bob-password-22").await;
    assert!(logged_in(&c, &alice_cookie).await && logged_in(&c, &bob_cookie).await);

    let changed = |pw| TestUser { password: pw, ..ALICE };
    gw.write_config(&config(&web, None, &[changed("alice-password-2"), bob()]));
    reloaded(&gw, "sighup").await;
    assert!(
        !logged_in(&c, &alice_cookie).await,
        "alice's login under the old password ended"
    );
    assert!(logged_in(&c, &bob_cookie).await, "bob's password did not change");
    assert_eq!(
        c.get("/p/web/global/health", Some(&token)).await.status,
        200,
        "tokens stay"
    );
    assert!(gw.wait_log("reason=\"password_changed\"", Duration::from_secs(5)).await);

    // Changed while the gateway was stopped: the login ends all the same.
    let second = form_login(&c, "alice", "alice-password-2").await;
    gw.write_config(&config(&web, None, &[changed("alice-password-3"), bob()]));
    gw.restart();
    let c = Https::new(gw.https, &gw.ca());
    assert!(!logged_in(&c, &second).await, "changed while stopped: ended at start");
    assert!(logged_in(&c, &bob_cookie).await, "bob's login survived the restart");
}

/// A reload binds no listener: a project's new `listen` (issue 38: the answer said "reloaded"
/// and no port opened) is named, in `reload`'s answer and the log, as needing a restart, and the
/// rest of the file applies (a new user logs in at once).
#[tokio::test]
async fn a_reload_names_what_needs_a_restart_a_new_project_listen() {
    let web = FakeUpstream::start(PW).await;
    let gw = Gateway::start_behind(&config(&web, None, &[ALICE]), PW);
    let carol = TestUser {
        name: "carol",
        password: "carol-password-1",
        ..ALICE
    };
    let with_port = config(&web, None, &[ALICE, carol]).replacen(
        "upstream_password_file = \"pw\"\n",
        "upstream_password_file = \"pw\"\nlisten = \"127.0.0.1:0\"\n",
        1,
    );
    gw.write_config(&with_port);
    let (ok, answer) = gw.cli(&["reload"]);
    assert!(ok, "{answer}\n{}", gw.logs());
    let line = crate::common::line_starting(&answer, "reloaded");
    assert!(
        answer.contains("needs a restart: project web's listen (new: 127.0.0.1:0)"),
        "{line}\n{answer}"
    );
    assert!(
        gw.wait_log(
            "needs a restart: project web's listen (new: 127.0.0.1:0)",
            Duration::from_secs(5)
        )
        .await,
        "{}",
        gw.logs()
    );
    // Nothing was bound, as the answer says; the rest applied.
    assert!(!gw.logs().contains("project listener ready"), "{}", gw.logs());
    let c = Https::new(gw.https, &gw.ca());
    let r = c
        .get("/p/web/global/health", Some(&basic("carol", "carol-password-1")))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}
