//! Projects whose `opencode serve` the gateway runs itself: private, ready when healthy, started
//! on demand, restarted when they die, stopped with the gateway, and honest about failures.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::client::json;
use crate::common::client::{Https, basic};
use crate::common::gateway::{Gateway, base_config};
use crate::common::opencode::FakeModel;
use crate::common::supervised::{
    admin_user, pids_in, pids_with, project_port, project_status, server_config, server_pid, spawned,
};

const SECRET_ENV: &str = "GATEWAY_ONLY_SECRET";
const SECRET_VALUE: &str = "never-in-a-project-env-93";

fn alice() -> String {
    basic("alice", "alice-password-1")
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn spawned_servers_are_private_and_see_only_their_own_sessions() {
    let model = FakeModel::start("true").await;
    let dirs = tempfile::tempdir().unwrap();
    let (a, b) = (dirs.path().join("a"), dirs.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let config = server_config(&format!(
        "{}{}",
        spawned("a", &a, &model, ""),
        spawned("b", &b, &model, "")
    ));
    let gw = Gateway::start_with(&config, &[(SECRET_ENV, SECRET_VALUE)], |_| {});
    let c = Https::new(gw.https, &gw.ca());
    // Requests wait for the servers to be ready.
    assert_eq!(
        c.get("/p/a/global/health", Some(&alice())).await.status,
        200,
        "{}",
        gw.logs()
    );
    assert_eq!(c.get("/p/b/global/health", Some(&alice())).await.status, 200);
    let port_a = project_port(&gw, "a").expect("a is ready");
    assert_ne!(port_a, 4096, "an explicit port, never OpenCode's default");
    let pid = server_pid(port_a);
    let environ = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap()).replace('\0', "\n");
    let state = gw.dir.path().join("state/projects/a");
    // A session database of its own (which keeps each server's sessions apart), and its own
    // temporary folder; the rest is its user's OpenCode setup (tests/integration/own_opencode.rs).
    let db = state.join("data/opencode/opencode.db");
    assert!(
        environ.contains(&format!("OPENCODE_DB={}\n", db.display())),
        "{environ}"
    );
    assert!(
        environ.contains(&format!("TMPDIR={}\n", state.join("tmp").display())),
        "{environ}"
    );
    assert!(
        !environ.contains(SECRET_ENV),
        "the gateway's own environment does not leak into a project"
    );
    let password = environ
        .lines()
        .find_map(|l| l.strip_prefix("OPENCODE_SERVER_PASSWORD="))
        .unwrap()
        .to_string();
    assert!(password.len() >= 32);
    let cmdline = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap()).replace('\0', " ");
    assert!(cmdline.contains("--cors https://a.gw.localhost:"), "{cmdline}");
    // The server wants its password: nobody reaches it around the gateway without it.
    let raw = crate::common::client::direct_call(port_a, "wrong", "GET", "/global/health", &[], "").await;
    assert!(!raw.contains("healthy"), "{raw}");
    // Sessions of a are invisible to b: separate processes, separate data.
    let (status, session) = json(&c, "POST", "/p/a/session", &alice(), "{}").await;
    assert_eq!(status, 200);
    let id = session["id"].as_str().unwrap();
    let (_, listing) = json(&c, "GET", "/p/b/experimental/session", &alice(), "").await;
    assert!(!listing.to_string().contains(id), "{listing}");
    let (status, _) = json(&c, "GET", &format!("/p/b/session/{id}"), &alice(), "").await;
    assert_eq!(status, 404);
    assert!(
        !gw.logs().contains(&password),
        "the spawned server's password is never logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn an_on_demand_project_starts_on_its_first_request() {
    let model = FakeModel::start("true").await;
    let dir = tempfile::tempdir().unwrap();
    let config = server_config(&spawned("lazy", dir.path(), &model, "start = \"on-demand\""));
    let gw = Gateway::start(&config);
    assert_eq!(project_status(&gw, "lazy"), "waiting for the first request");
    // That it did NOT start is shown after the one background reader of servers (the inbox,
    // which must never start one to watch it) has looked at it: the portal then says why it
    // does not run. A portal render and a status read are no request to the project either.
    let c = Https::new(gw.https, &gw.ca());
    let lh = c.host(crate::common::login::LOGIN_HOST);
    let cookie = crate::common::login::form_login(&c, "alice", crate::common::stack::ALICE_PW).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let page = crate::common::login::browser_get(&lh, "/?fragment=1", Some(&cookie), false).await;
        assert_eq!(page.status, 200, "{}", page.body);
        if page.body.contains("starts on the first request") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the inbox never looked at lazy:\n{}",
            page.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(project_status(&gw, "lazy"), "waiting for the first request");
    assert_eq!(
        pids_in(dir.path()),
        Vec::<u32>::new(),
        "no server runs in the project yet"
    );
    assert_eq!(c.get("/p/lazy/global/health", Some(&alice())).await.status, 200);
    assert!(
        !pids_in(dir.path()).is_empty(),
        "its server runs in the project's folder now"
    );
    assert!(project_status(&gw, "lazy").starts_with("ready at"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_dead_server_is_restarted_and_none_outlives_the_gateway() {
    let model = FakeModel::start("true").await;
    let dir = tempfile::tempdir().unwrap();
    let config = server_config(&spawned("demo", dir.path(), &model, ""));
    let mut gw = Gateway::start(&config);
    let c = Https::new(gw.https, &gw.ca());
    assert_eq!(c.get("/p/demo/global/health", Some(&alice())).await.status, 200);
    let first = server_pid(project_port(&gw, "demo").unwrap());
    assert_eq!(gw.metric("upstream_up{project=\"demo\"}"), 1);
    assert_eq!(gw.metric("upstream_restarts_total{project=\"demo\"}"), 0);
    // SAFETY: killing the test's own grandchild.
    unsafe { libc::kill(first as i32, libc::SIGKILL) };
    assert!(
        gw.wait_log("project server failed; restarting", Duration::from_secs(20))
            .await,
        "{}",
        gw.logs()
    );
    // The next request waits for the restarted server.
    let deadline = Instant::now() + Duration::from_secs(60);
    let second = loop {
        if let Some(port) = project_port(&gw, "demo") {
            let pids = pids_with(&format!("--port {port}"));
            if pids.len() == 1 && pids[0] != first {
                break pids[0];
            }
        }
        assert!(Instant::now() < deadline, "no restart:\n{}", gw.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(c.get("/p/demo/global/health", Some(&alice())).await.status, 200);
    // The restart is counted, and the server is up again.
    assert_eq!(gw.metric("upstream_restarts_total{project=\"demo\"}"), 1);
    assert_eq!(gw.metric("upstream_up{project=\"demo\"}"), 1);
    gw.signal(libc::SIGTERM);
    assert_eq!(
        tokio::task::block_in_place(|| gw.wait_exit(Duration::from_secs(30))),
        Some(0)
    );
    assert!(!alive(second), "the spawned server was stopped with the gateway");
    // Started, crashed, started again, stopped: each in the audit trail (flushed at shutdown).
    let audit = std::fs::read_to_string(gw.dir.path().join("state/audit.jsonl")).unwrap();
    let events: Vec<String> = audit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["project"] == "demo" && r["event"].as_str().is_some_and(|e| e.starts_with("server_")))
        .map(|r| r["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        events,
        ["server_started", "server_crashed", "server_started", "server_stopped"],
        "{audit}"
    );
    assert_eq!(pids_in(dir.path()), Vec::<u32>::new(), "nothing of the server is left");
}

#[tokio::test]
async fn a_server_that_cannot_start_gives_503_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("broken-opencode");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'boom: this opencode cannot start' >&2\nexit 3\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = base_config(&format!(
        "[limits]\nspawn_ready_timeout = \"3s\"\n\n[[project]]\nname = \"demo\"\ndirectory = \"{}\"\nspawn = true\n\n{}",
        dir.path().display(),
        admin_user()
    ))
    .replace("state_dir = \"state\"\n", &format!("state_dir = \"state\"\nopencode_bin = \"{}\"\n", fake.display()));
    let gw = Gateway::start(&config);
    let c = Https::new(gw.https, &gw.ca());
    let r = c.get("/p/demo/global/health", Some(&alice())).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.body.contains("project demo") && r.body.contains("boom: this opencode cannot start"),
        "{}",
        r.body
    );
    assert!(
        gw.wait_log("boom: this opencode cannot start", Duration::from_secs(5))
            .await,
        "the stderr tail is logged"
    );
}

/// Issue 22: without OpenCode the banner said "serving" and printed attach commands, requests hung
/// 30 s before a 503, and each retry was audited as a crash. Now it is NOT RUNNING everywhere with
/// the fix, and a request gets its 503 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_opencode_is_not_running_everywhere_and_answers_503_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = base_config(&format!(
        "[limits]\nspawn_ready_timeout = \"30s\"\n\n[[project]]\nname = \"demo\"\ndirectory = \"{}\"\nspawn = true\n\n{}",
        dir.path().display(),
        admin_user()
    ))
    .replace(
        "state_dir = \"state\"\n",
        "state_dir = \"state\"\nopencode_bin = \"/nonexistent/opencode\"\n",
    );
    let gw = Gateway::start(&config);
    let c = Https::new(gw.https, &gw.ca());
    let fix = "server.opencode_bin /nonexistent/opencode does not exist";
    // The banner: NOT RUNNING with the reason, no attach commands for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gw.stdout.lock().unwrap().contains("project demo") {
        assert!(Instant::now() < deadline, "no banner: {}", gw.stdout.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let banner = gw.stdout.lock().unwrap().clone();
    assert!(
        banner.contains("project demo: NOT RUNNING") && banner.contains(fix),
        "{banner}"
    );
    assert!(!banner.contains("/p/demo -u"), "no attach commands for it: {banner}");
    // A request: 503 with the reason, at once (not after spawn_ready_timeout's 30 s).
    let asked = Instant::now();
    let r = c.get("/p/demo/global/health", Some(&alice())).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("project demo") && r.body.contains(fix), "{}", r.body);
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "the 503 took {:?}",
        asked.elapsed()
    );
    // status and check say it too.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !project_status(&gw, "demo").starts_with("NOT RUNNING") {
        assert!(Instant::now() < deadline, "status: {}", project_status(&gw, "demo"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(project_status(&gw, "demo").contains(fix));
    let check = crate::common::process::bounded(
        std::process::Command::new(crate::common::gateway::BIN)
            .args(["check", "-c"])
            .arg(&gw.config),
    );
    let check = String::from_utf8_lossy(&check.stdout).into_owned();
    assert!(check.contains(&format!("NOT RUNNING: {fix}")), "{check}");
    // The portal shows it with the reason as a sentence.
    let cookie = crate::common::login::form_login(&c, "alice", crate::common::stack::ALICE_PW).await;
    let login = c.host(crate::common::login::LOGIN_HOST);
    let req = login
        .request("GET", "/", None)
        .header("cookie", cookie)
        .header("accept", "text/html")
        .header("sec-fetch-mode", "navigate")
        .body(http_body_util::Full::default())
        .unwrap();
    let portal = login.call(req).await;
    assert_eq!(portal.status, 200, "{}", portal.body);
    assert!(portal.body.contains(">NOT RUNNING<"), "{}", portal.body);
    assert!(
        portal
            .body
            .contains("<p class=\"error-text\">server.opencode_bin /nonexistent/opencode does not exist"),
        "{}",
        portal.body
    );
    // The audit trail calls it a failed start, not a crash.
    let f = crate::common::audit::file(&gw);
    let failed = crate::common::audit::find(&f, "server_failed_to_start", |r| r["project"] == "demo").await;
    assert!(failed["restart_in_s"].is_number(), "{failed}");
    assert!(
        !crate::common::audit::records(&f)
            .iter()
            .any(|r| r["event"] == "server_crashed"),
        "it never ran, so it never crashed"
    );
}

/// Issue 22: an edited `opencode.json` needed a restart of the whole gateway. `restart <project>`
/// starts that project's server again, now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn restart_starts_one_projects_server_again_now() {
    let model = FakeModel::start("true").await;
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(&server_config(&spawned("demo", dir.path(), &model, "")));
    let c = Https::new(gw.https, &gw.ca());
    assert_eq!(c.get("/p/demo/global/health", Some(&alice())).await.status, 200);
    let first = server_pid(project_port(&gw, "demo").unwrap());
    let cli = |args: &[&str]| {
        crate::common::process::bounded(
            std::process::Command::new(crate::common::gateway::BIN)
                .args(args)
                .arg("-c")
                .arg(&gw.config),
        )
    };
    let out = cli(&["restart", "demo"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(60);
    let second = loop {
        if let Some(port) = project_port(&gw, "demo") {
            let pids = pids_with(&format!("--port {port}"));
            if pids.len() == 1 && pids[0] != first {
                break pids[0];
            }
        }
        assert!(Instant::now() < deadline, "no new server:\n{}", gw.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(!alive(first), "the old server is gone");
    assert_ne!(first, second);
    assert_eq!(c.get("/p/demo/global/health", Some(&alice())).await.status, 200);
    assert_eq!(
        gw.metric("upstream_restarts_total{project=\"demo\"}"),
        0,
        "asked for, not a failure"
    );
    let f = crate::common::audit::file(&gw);
    crate::common::audit::find(&f, "server_restarted", |r| r["project"] == "demo").await;
    let out = cli(&["restart", "nope"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("there is no project \"nope\""),
        "{out:?}"
    );
}
